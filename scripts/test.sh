#!/usr/bin/env bash
# The project's test command, run by developers and by CI (.ci/run):
#   formatting, clippy (warnings are errors), the whole workspace test suite (which includes the
#   C header checks: they need a C compiler), the data-path suites again against a real
#   davinci-mockd, the runtime library without its embedded mock (and the layering rule that it
#   then links no device code), the fuzz targets type-checked on stable and run briefly on
#   nightly (DAVINCI_SKIP_FUZZ=1 skips the runs), the kernel module in
#   QEMU (DAVINCI_SKIP_KMOD=1 skips it), the loom model of the ring protocol and the mutation
#   check of its orderings.
# Every step runs even if an earlier one failed; a summary at the end says which failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The ABI tests compile C against uapi/include/davinci/uapi.h with `cc` (or `gcc`).
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "==> no C compiler: installing gcc"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc </dev/null
    else
        echo "scripts/test.sh: no C compiler (cc or gcc) found; the ABI tests compile C." >&2
        echo "Install one (Debian/Ubuntu: sudo apt-get install gcc) and re-run." >&2
        exit 1
    fi
fi

# The exporter's test scrapes it with a real Prometheus (Debian's package): installed here when
# missing and possible, so the test finds it (the test itself would install it too, or fail
# saying how; DAVINCI_SKIP_PROMETHEUS=1 skips that one test).
if ! command -v prometheus >/dev/null 2>&1 && [ "${DAVINCI_SKIP_PROMETHEUS:-0}" != 1 ] \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> no prometheus: installing Debian's package (the exporter test scrapes with it)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus </dev/null
fi

log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT

summary=()
failed_steps=0
tests_passed=0
tests_failed=0

# step NAME CMD...: runs CMD with its output shown and kept, and records the outcome.
step() {
    local name=$1
    shift
    local log="$log_dir/step-${#summary[@]}.log"
    local start=$SECONDS
    echo
    echo "==> $name: $*"
    local status=0
    "$@" 2>&1 | tee "$log" || status=$?
    local secs=$((SECONDS - start))
    # Count what cargo's test harness reported ("test result: ok. N passed; M failed; ...").
    local p f
    p=$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\2/p' "$log" | awk '{s+=$1} END {print s+0}')
    tests_passed=$((tests_passed + p))
    tests_failed=$((tests_failed + f))
    if [ "$status" -eq 0 ]; then
        summary+=("ok     $name (${secs}s)")
    else
        summary+=("FAILED $name (${secs}s, exit $status)")
        failed_steps=$((failed_steps + 1))
    fi
}

step "rustfmt" cargo fmt --all -- --check
step "clippy" cargo clippy --workspace --all-targets -- -D warnings
step "tests" cargo test --workspace
# The data-path tests again, against a davinci-mockd process instead of the embedded device.
step "tests (davinci-mockd backend)" env DAVINCI_TEST_BACKEND=mockd \
    cargo test -p davinci-tests --test conformance --test million

# The quick start README.md shows, run as a user would.
step "quick start example" cargo run -q -p davinci-shim --example quickstart

# The runtime library without the embedded mock device: it builds, its tests pass, and it
# links no device code (a production runtime that opens /dev/davinciN gets only the ABI, the
# rings, shared memory and the daemon's wire protocol). davinci-smi never links the device.
step "shim without the embedded mock" cargo test -p davinci-shim --no-default-features
layering() {
    local bad=0 tree
    tree=$(cargo tree -p davinci-shim --no-default-features -e normal --prefix none)
    for forbidden in davinci-mock-device davinci-driver-core tracing-subscriber; do
        if grep -q "^$forbidden " <<<"$tree"; then
            echo "davinci-shim --no-default-features depends on $forbidden"
            bad=1
        fi
    done
    # The operators' tools speak the ABI like any client: none links the device.
    for tool in davinci-smi davinci-exporter davinci-device-plugin; do
        tree=$(cargo tree -p "$tool" -e normal --prefix none)
        for forbidden in davinci-mock-device davinci-driver-core; do
            if grep -q "^$forbidden " <<<"$tree"; then
                echo "$tool depends on $forbidden"
                bad=1
            fi
        done
    done
    [ "$bad" -eq 0 ] && echo "layering: shim (no default features), smi, exporter and device plugin link no device code"
    return "$bad"
}
step "layering" layering

# The fuzz targets (fuzz/, a crate outside the workspace) type-check on stable, so no change
# elsewhere leaves them stale; running them needs nightly (scripts/fuzz.sh).
step "fuzz targets build" cargo check --manifest-path fuzz/Cargo.toml --bins --locked
# Every fuzz target built on nightly (libFuzzer + ASan) and run for DAVINCI_FUZZ_SECONDS (20)
# each from its seeds (fuzz/seeds); any finding fails the step (scripts/fuzz.sh).
# DAVINCI_SKIP_FUZZ=1 skips it on a machine without nightly, and the summary says so. (The
# seeds and every past finding, fuzz/regressions, are also replayed on stable by the tests.)
if [ "${DAVINCI_SKIP_FUZZ:-0}" = 1 ]; then
    summary+=("SKIPPED fuzz targets run (DAVINCI_SKIP_FUZZ=1)")
else
    step "fuzz targets run (nightly, ${DAVINCI_FUZZ_SECONDS:-20}s each)" scripts/fuzz.sh
fi

# The kernel module in a real Linux 6.12 kernel under QEMU: the conformance suite, the
# kernel-only tests, the million-task run, davinci-smi and davinci-workload against
# /dev/davinci0 (kmod-rust/qemu-test.sh). The first run installs Debian packages (root or
# passwordless sudo) and builds the kernel (about 8 minutes, cached outside the repository);
# later runs take seconds. DAVINCI_SKIP_KMOD=1 skips it on a machine that cannot run it, and
# the summary says so.
step "kernel module sources formatted" rustfmt --edition 2021 --check kmod-rust/src/davinci_main.rs
if [ "${DAVINCI_SKIP_KMOD:-0}" = 1 ]; then
    summary+=("SKIPPED kernel module in QEMU (DAVINCI_SKIP_KMOD=1)")
else
    step "kernel module in QEMU (Linux 6.12)" kmod-rust/qemu-test.sh
fi

# The loom model of the ring protocol, then the mutation check: every ordering site weakened
# in turn must make a model fail. Their own target directory, so `--cfg loom` does not
# invalidate the main build.
step "loom (davinci-ring)" env RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
    cargo test -p davinci-ring --release --test loom
step "ordering mutation check" env CARGO_TARGET_DIR=target/loom ring/scripts/mutation-check.sh

echo
echo "==> summary"
for line in "${summary[@]}"; do
    echo "    $line"
done
if [ "$failed_steps" -ne 0 ]; then
    echo "scripts/test.sh: $failed_steps step(s) FAILED"
else
    echo "scripts/test.sh: all steps passed"
fi
echo "tests: $tests_passed passed, $tests_failed failed"
[ "$failed_steps" -eq 0 ]
