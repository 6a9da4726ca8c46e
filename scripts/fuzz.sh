#!/usr/bin/env bash
# scripts/fuzz.sh: builds the libFuzzer targets of fuzz/ on nightly with AddressSanitizer and
# runs each from a scratch copy of its checked-in seeds (fuzz/seeds/<target>/). Any finding (a
# crash, a panic, a leak, one input running 10 s, memory over 4 GiB, a non-zero exit) fails;
# the input is left in fuzz/artifacts/<target>/ (keep it as fuzz/regressions/<target>/<name>:
# fuzz/README.md). The test command (scripts/test.sh) runs it with its defaults.
#
#   scripts/fuzz.sh                          every target, DAVINCI_FUZZ_SECONDS (20) each
#   scripts/fuzz.sh --seconds 600 mock_device   one target, ten minutes
#   scripts/fuzz.sh --jobs 1                 one target at a time (default: one per CPU)
#   scripts/fuzz.sh --list                   the targets
#
# Environment: DAVINCI_FUZZ_SECONDS (seconds per target, default 20), DAVINCI_FUZZ_JOBS
# (targets at once), DAVINCI_FUZZ_TOOLCHAIN (default nightly), DAVINCI_SKIP_FUZZ=1 (skip: a
# machine without nightly).
#
# The build passes rustc the instrumentation cargo-fuzz 0.13 passes (sancov-module, 8-bit
# counters, PC table, compare tracing, stack depth, --cfg fuzzing, ASan), so no cargo-fuzz
# needs installing; `cargo +nightly fuzz run <target>` works on the same targets as well.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FUZZ=$ROOT/fuzz

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

seconds=${DAVINCI_FUZZ_SECONDS:-20}
jobs=${DAVINCI_FUZZ_JOBS:-$(nproc)}
toolchain=${DAVINCI_FUZZ_TOOLCHAIN:-nightly}
list=0
targets=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --seconds) seconds=${2:?--seconds takes a number}; shift 2 ;;
        --jobs) jobs=${2:?--jobs takes a number}; shift 2 ;;
        --list) list=1; shift ;;
        -*) echo "scripts/fuzz.sh: unknown option $1 (--help says what it takes)" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
case "$seconds$jobs" in
    *[!0-9]*) echo "scripts/fuzz.sh: --seconds and --jobs take whole numbers" >&2; exit 2 ;;
esac
[ "$jobs" -ge 1 ] || jobs=1

all=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$FUZZ/Cargo.toml" | grep -v '^davinci-fuzz$')
if [ "$list" = 1 ]; then
    echo "$all"
    exit 0
fi
if [ "${DAVINCI_SKIP_FUZZ:-0}" = 1 ]; then
    echo "fuzz: skipped (DAVINCI_SKIP_FUZZ=1)"
    exit 0
fi
if [ "${#targets[@]}" -eq 0 ]; then
    mapfile -t targets <<<"$all"
fi
for t in "${targets[@]}"; do
    grep -qx "$t" <<<"$all" || { echo "scripts/fuzz.sh: no target '$t' (--list names them)" >&2; exit 2; }
done

if ! rustup toolchain list | grep -q "^${toolchain}"; then
    echo "==> installing the ${toolchain} toolchain"
    rustup toolchain install "${toolchain}" --profile minimal --no-self-update
fi

triple=$(rustc "+${toolchain}" -vV | sed -n 's/^host: //p')
start=$SECONDS
# --target keeps the instrumentation out of build scripts and proc macros.
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-simplifycfg-branch-fold-threshold=0 \
-Cllvm-args=-sanitizer-coverage-stack-depth --cfg fuzzing -Clink-dead-code -Zsanitizer=address" \
    cargo "+${toolchain}" build --quiet --release --locked --manifest-path "$FUZZ/Cargo.toml" \
    --target "$triple" $(printf -- '--bin %s ' "${targets[@]}")
echo "==> built ${#targets[@]} target(s) in $((SECONDS - start))s"
# Where cargo put them: CARGO_TARGET_DIR when the caller set one (cargo builds there).
bin_dir=${CARGO_TARGET_DIR:-$FUZZ/target}/$triple/release

# run TARGET: one target for $seconds from a scratch copy of its seeds; its output goes to a log.
run() {
    local t=$1 corpus=$FUZZ/target/ci-corpus/$1
    rm -rf "$corpus"
    mkdir -p "$corpus" "$FUZZ/artifacts/$t"
    if [ -d "$FUZZ/seeds/$t" ]; then cp "$FUZZ/seeds/$t"/* "$corpus/" 2>/dev/null || true; fi
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_odr_violation=0 \
        "$bin_dir/$t" "$corpus" -artifact_prefix="$FUZZ/artifacts/$t/" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
        >"$FUZZ/target/ci-corpus/$t.log" 2>&1
}

logs=$FUZZ/target/ci-corpus
mkdir -p "$logs"
failed=()
declare -A pids=()
report() {
    local t=$1 status=$2
    if [ "$status" -eq 0 ]; then
        echo "==> $t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$logs/$t.log" | grep -o '[0-9]*$' || echo '?') runs in ${seconds}s, no finding"
    else
        failed+=("$t")
        echo "==> $t: FINDING (exit $status); the end of its log:"
        tail -n 60 "$logs/$t.log"
    fi
}
echo "==> running ${#targets[@]} target(s) for ${seconds}s each, ${jobs} at a time"
for t in "${targets[@]}"; do
    while [ "${#pids[@]}" -ge "$jobs" ]; do
        done_pid=
        wait -n -p done_pid && s=0 || s=$?
        for k in "${!pids[@]}"; do
            if [ "${pids[$k]}" = "$done_pid" ]; then
                report "$k" "$s"
                unset "pids[$k]"
            fi
        done
    done
    run "$t" &
    pids[$t]=$!
done
for k in "${!pids[@]}"; do
    wait "${pids[$k]}" && s=0 || s=$?
    report "$k" "$s"
done

echo "==> fuzzing took $((SECONDS - start))s"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "==> FINDINGS in: ${failed[*]} (inputs in fuzz/artifacts/<target>/; see fuzz/README.md)"
    exit 1
fi
echo "==> all ${#targets[@]} target(s) ran ${seconds}s each without a finding"
