#!/usr/bin/env bash
# scripts/ring-mutation-check.sh: the loom models of the ring protocol, then the mutation
# check of its memory orderings against them (the test command's step).
#
#   scripts/ring-mutation-check.sh            # from anywhere in the workspace
#
# 1. Guard: every Acquire/Release/AcqRel/SeqCst in core/ring/src is written as
#    `ord(Site::X, Ordering::Y)` or `fence_at(Site::X, Ordering::Y)` (the one exception is the
#    doorbell's hardware fence, see sync.rs), and every site is used exactly once, so the
#    mutations below cover every ordering in the crate.
# 2. Builds the loom models once (RUSTFLAGS="--cfg loom", release), runs them unmutated (all
#    must pass), then once per site with DAVINCI_RING_MUTANT=<site>: that one ordering weakened to
#    Relaxed (or that one fence removed) at run time, everything else unchanged.
# 3. Prints a Markdown table: site, ordering, the models that fail and how. Exits non-zero
#    if the baseline fails or any mutant survives every model.
#
# Environment: LOOM_MAX_PREEMPTIONS (loom's own; default 2), CARGO_TARGET_DIR (default
# target/loom: `--cfg loom` would otherwise invalidate the main build), DAVINCI_MUTANT_TIMEOUT
# seconds per run (default 600).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/core/ring/src"
cd "$root"

export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/loom}"
timeout_s="${DAVINCI_MUTANT_TIMEOUT:-600}"

# ---- 1. guard ---------------------------------------------------------------------------
# Sites: the names listed in `sites! { ... }` in sync.rs.
mapfile -t sites < <(sed -n '/^sites! {/,/^}/p' "$src/sync.rs" | grep -oE '^\s+[A-Z][A-Za-z0-9]+,' | tr -d ' ,')
if [[ ${#sites[@]} -eq 0 ]]; then
    echo "guard: no sites found in $src/sync.rs" >&2
    exit 2
fi

# Every strong ordering in the code (comments stripped; the unit tests excluded) must be the
# second argument of ord(Site::..)/fence_at(Site::..), or the doorbell hardware fence.
stray="$(
    for f in "$src"/*.rs; do
        [[ "$(basename "$f")" == tests.rs ]] && continue
        perl -0777 -ne '
            s{//[^\n]*}{}g;
            while (/Ordering::(Acquire|Release|AcqRel|SeqCst)/g) {
                my ($o, $pre) = ($1, substr($_, 0, $-[0]));
                next if $pre =~ /(?:ord|fence_at)\(\s*Site::\w+\s*,\s*\z/;
                next if $pre =~ /fn doorbell_hardware_fence\(\)\s*\{\s*fence\(\s*\z/;
                my $line = () = $pre =~ /\n/g;
                printf "%s:%d: Ordering::%s outside ord()/fence_at()\n", $ARGV, $line + 1, $o;
            }
            # fence(): only inside sync.rs (fence_at and the doorbell hardware fence).
            if ($ARGV !~ m{/sync\.rs\z}) {
                while (/\bfence\(/g) {
                    my $line = () = substr($_, 0, $-[0]) =~ /\n/g;
                    printf "%s:%d: fence() outside fence_at()\n", $ARGV, $line + 1;
                }
            } else {
                my $n = () = /\bfence\(/g;
                printf "%s: %d fence() calls (want 2: fence_at, doorbell_hardware_fence)\n", $ARGV, $n if $n != 2;
            }
        ' "$f"
    done
)"
if [[ -n "$stray" ]]; then
    echo "guard failed: orderings the mutation check cannot reach:" >&2
    echo "$stray" >&2
    exit 2
fi

# Each site used exactly once, and note its ordering.
declare -A ordering
for s in "${sites[@]}"; do
    uses="$(cat "$src"/*.rs | perl -0777 -ne "s{//[^\n]*}{}g; while (/(ord|fence_at)\(\s*Site::$s\s*,\s*Ordering::(\w+)/g) { print \"\$1 \$2\n\" }")"
    n="$(printf '%s' "$uses" | grep -c . || true)"
    if [[ "$n" -ne 1 ]]; then
        echo "guard failed: Site::$s is used $n times (want exactly 1)" >&2
        exit 2
    fi
    read -r kind ord <<<"$uses"
    if [[ "$kind" == fence_at ]]; then ordering[$s]="fence($ord)"; else ordering[$s]="$ord"; fi
done

# ---- 2. build and run --------------------------------------------------------------------
echo "building loom models (LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS) ..." >&2
build_log="$(RUSTFLAGS="--cfg loom" cargo test -p davinci-ring --release --test loom --no-run 2>&1)" || {
    echo "$build_log" >&2
    exit 2
}
bin="$(printf '%s\n' "$build_log" | sed -n 's/.*Executable tests\/loom.rs (\(.*\))$/\1/p' | tail -n1)"
if [[ -z "$bin" || ! -x "$bin" ]]; then
    echo "could not find the loom test binary in:" >&2
    echo "$build_log" >&2
    exit 2
fi

mapfile -t models < <("$bin" --list 2>/dev/null | sed -n 's/: test$//p')

# run <mutant or empty> -> prints "model<TAB>verdict" for each model
run() {
    local out
    out="$(env -u DAVINCI_RING_MUTANT ${1:+DAVINCI_RING_MUTANT="$1"} RUST_BACKTRACE=0 timeout "$timeout_s" "$bin" --test-threads=2 2>&1 || true)"
    for m in "${models[@]}"; do
        if grep -qE "^test $m \.\.\. ok$" <<<"$out"; then
            printf '%s\tok\n' "$m"
            continue
        fi
        # Why it failed: the first panic message of that model.
        local why
        why="$(awk -v m="$m" '
            $0 ~ "^thread .?"m".? .*panicked" { grab = 1; next }
            grab && NF { print; exit }' <<<"$out")"
        case "$why" in
            *"Causality violation"*) why="data race on a slot/cell" ;;
            *"maximum number of branches"*) why="lost wake-up (spins forever: branch limit)" ;;
            *"assertion"*) why="stale value (assertion)" ;;
            "") why="failed/timeout" ;;
            *) why="${why:0:60}" ;;
        esac
        printf '%s\tFAIL: %s\n' "$m" "$why"
    done
}

echo "baseline (no mutation) ..." >&2
baseline="$(run "")"
if grep -q FAIL <<<"$baseline"; then
    echo "baseline fails; fix the models first:" >&2
    echo "$baseline" >&2
    exit 1
fi
echo "loom models, unmutated (LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS):"
sed 's/^/  /; s/\t/: /' <<<"$baseline"

echo >&2
echo "| site | ordering | weakened to | models that fail |"
echo "|------|----------|-------------|------------------|"
survivors=0
for s in "${sites[@]}"; do
    echo "mutant $s ..." >&2
    res="$(run "$s")"
    failed="$(awk -F'\t' '$2 ~ /^FAIL/ { sub(/^FAIL: /, "", $2); printf "%s`%s` (%s)", sep, $1, $2; sep = "; " }' <<<"$res")"
    case "${ordering[$s]}" in
        fence*) weak="no fence" ;;
        *) weak="Relaxed" ;;
    esac
    if [[ -z "$failed" ]]; then
        failed="**NONE: mutant survives**"
        survivors=$((survivors + 1))
    fi
    echo "| \`$s\` | ${ordering[$s]} | $weak | $failed |"
done

echo
if [[ $survivors -ne 0 ]]; then
    echo "$survivors mutant(s) survived every model" >&2
    exit 1
fi
echo "all ${#sites[@]} mutants caught by at least one of ${#models[@]} models" >&2
