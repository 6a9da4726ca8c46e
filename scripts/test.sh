#!/usr/bin/env bash
# scripts/test.sh: the project's test command, run by developers and by CI (.ci/run).
#
# Steps, each run even if an earlier one failed; a summary at the end says which failed, how
# long each took and how many CPU seconds it used:
#   formatting; the tree's shape (cargo xtask check: layering and folders, file sizes, paths,
#   MSRV); the workspace's tests (unit, crate integration, the conformance suite on the
#   embedded device, system tests, fuzz replays, the C header checks: they need a C compiler);
#   then, in the background, the kernel module in QEMU (scripts/kmod-test.sh, the same test
#   binaries, on its software device, on the PCI device that davinci-pcidev serves and on the
#   chaos device, davinci-pcidev lying on purpose, 5 seeds), as a PCI driver
#   (scripts/pci-smoke.sh) and the PCI device process behind QEMU
#   (scripts/pcidev-smoke.sh); beside it, at lower priority: clippy (warnings are errors);
#   the conformance suite and the million-task run again against a real davinci-mockd; the
#   quick start; the Python package (scripts/python-test.sh: installed with pip, its tests
#   and examples); the runtime library without its embedded device; libdavinci, the library
#   for C (scripts/capi-test.sh: the C quick start and tests on the embedded device and
#   davinci-mockd, with ASan/UBSan); the two backend ports of issue 43 (scripts/ports-test.sh:
#   C over libdavinci called from Python, checked against numpy); every fuzz target on
#   nightly (scripts/fuzz.sh); the loom
#   models of the ring protocol and the mutation check of its orderings
#   (scripts/ring-mutation-check.sh); the workspace checked with the toolchain of its
#   declared rust-version (cargo xtask msrv --build).
#
# The kernel's toolchain and test kernel (scripts/kmod/toolchain.sh: Debian packages,
# bindgen, a Linux 6.12 build cached outside the repository) are prepared in the background,
# at low priority, while the first steps run.
#
# Environment (every variable of the project's scripts starts with DAVINCI_):
#   DAVINCI_SKIP_KMOD=1         no kernel step (a machine that cannot run QEMU)
#   DAVINCI_SKIP_FUZZ=1         no nightly fuzz runs (a machine without nightly); the fuzz
#                               targets are then type-checked on stable instead
#   DAVINCI_SKIP_MSRV=1         no build with the declared rust-version's toolchain
#   DAVINCI_SKIP_PROMETHEUS=1   the exporter's test against a real Prometheus is skipped
#   DAVINCI_FUZZ_SECONDS=N      seconds per fuzz target (default 20)
#   DAVINCI_TIDY=1              remove each step's own build directory (fuzz/target,
#                               target/loom, target/msrv) once the step is done, for a disk
#                               that cannot hold them all; the default when CI=true
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

case "${1:-}" in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    "") ;;
    *) echo "scripts/test.sh: takes no arguments (got '$1'); --help says what it does" >&2; exit 2 ;;
esac

as_root=()
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then as_root=(sudo -n); fi
can_install() { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }
apt_install() {
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" </dev/null
}

# The ABI tests compile C against uapi/include/davinci/uapi.h with `cc` (or `gcc`).
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
    if can_install && command -v apt-get >/dev/null 2>&1; then
        echo "==> no C compiler: installing gcc"
        apt_install gcc libc6-dev
    else
        echo "scripts/test.sh: no C compiler (cc or gcc) found; the ABI tests compile C." >&2
        echo "Install one (Debian/Ubuntu: sudo apt-get install gcc) and re-run." >&2
        exit 1
    fi
fi
# The exporter's test scrapes it with a real Prometheus (Debian's package).
if ! command -v prometheus >/dev/null 2>&1 && [ "${DAVINCI_SKIP_PROMETHEUS:-0}" != 1 ] \
    && can_install && command -v apt-get >/dev/null 2>&1; then
    echo "==> no prometheus: installing Debian's package (the exporter test scrapes with it)"
    apt_install prometheus
fi

log_dir=$(mktemp -d)
prep_pid=
bg_names=()
bg_logs=()
bg_starts=()
bg_pids=()
# Runs at exit, with set -e still on: a command failing here would become the script's exit
# status, so each is allowed to fail (the processes have usually ended already).
cleanup() {
    local p
    for p in $prep_pid ${bg_pids[@]+"${bg_pids[@]}"}; do
        pkill -P "$p" 2>/dev/null || true
        kill "$p" 2>/dev/null || true
    done
    rm -rf "$log_dir" || true
}
trap cleanup EXIT

# The kernel toolchain and test kernel, in the background (apt-get, cargo install, make -j).
if [ "${DAVINCI_SKIP_KMOD:-0}" != 1 ]; then
    echo "==> preparing the kernel toolchain in the background (log: $log_dir/kmod-prepare.log)"
    (
        status=0
        nice -n 5 bash scripts/kmod/toolchain.sh >"$log_dir/kmod-prepare.log" 2>&1 || status=$?
        echo "$SECONDS" >"$log_dir/kmod-prepare.log.end"
        times >"$log_dir/kmod-prepare.log.cpu"
        echo "$status" >"$log_dir/kmod-prepare.status"
    ) &
    prep_pid=$!
fi

TIDY=${DAVINCI_TIDY:-$([ "${CI:-}" = true ] && echo 1 || echo 0)}
# tidy DIR...: with DAVINCI_TIDY=1, removes a finished step's own build directories.
tidy() {
    [ "$TIDY" = 1 ] || return 0
    rm -rf "$@"
}
# The free space where the build writes, for the summary (a full disk fails steps oddly).
disk_free() { df -Pk "$ROOT" 2>/dev/null | awk 'NR == 2 { printf "%.1f GiB free", $4 / 1048576 }'; }

summary=()
failed_steps=0
tests_passed=0
tests_failed=0

# cpu_of FILE: the CPU seconds (user + system) that `times` wrote to FILE for the children of
# a subshell (every process it waited for, their own children included), or "?".
cpu_of() {
    [ -s "$1" ] || { echo "?"; return; }
    sed -n 2p "$1" | awk '{
        s = 0
        for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); s += p[1] * 60 + p[2] }
        printf "%d", s + 0.5 }'
}

# step NAME CMD...: runs CMD with its output shown and kept, and records the outcome.
step() {
    local name=$1
    shift
    local log="$log_dir/step-${#summary[@]}.log"
    local start=$SECONDS
    echo
    echo "==> $name: $*"
    local status=0
    (
        rc=0
        "$@" 2>&1 | tee "$log" || rc=$?
        times >"$log.cpu"
        exit "$rc"
    ) || status=$?
    record "$name" "$status" $((SECONDS - start)) "$log"
}

# step_start NAME CMD...: starts a step in the background, its output kept and shown when
# it ends (steps_finish): for a step that leaves a core idle (QEMU runs the guest on one).
step_start() {
    local name=$1
    shift
    local log="$log_dir/bg-${#bg_names[@]}.log"
    echo
    echo "==> $name: $* (in the background; its output follows when it ends)"
    # Its own end time too: it is recorded when the foreground steps are done.
    (
        status=0
        "$@" >"$log" 2>&1 || status=$?
        echo "$SECONDS" >"$log.end"
        times >"$log.cpu"
        echo "$status" >"$log.status"
    ) &
    bg_pids+=($!)
    bg_names+=("$name")
    bg_logs+=("$log")
    bg_starts+=("$SECONDS")
}

# steps_finish: waits for the background steps, shows their output, records them.
steps_finish() {
    local i status end
    for i in "${!bg_names[@]}"; do
        wait "${bg_pids[$i]}" || true
        echo
        echo "==> ${bg_names[$i]}: its output"
        cat "${bg_logs[$i]}"
        status=$(cat "${bg_logs[$i]}.status" 2>/dev/null || echo 1)
        end=$(cat "${bg_logs[$i]}.end" 2>/dev/null || echo "$SECONDS")
        record "${bg_names[$i]}" "$status" $((end - bg_starts[i])) "${bg_logs[$i]}"
    done
}

# record NAME STATUS SECONDS LOG: a step's line in the summary and its test counts.
record() {
    local name=$1 status=$2 secs=$3 log=$4
    # What the test harness reported ("test result: ok. N passed; M failed; ...").
    local p f
    p=$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\2/p' "$log" | awk '{s+=$1} END {print s+0}')
    tests_passed=$((tests_passed + p))
    tests_failed=$((tests_failed + f))
    local free cpu
    free=$(disk_free)
    cpu=$(cpu_of "$log.cpu")
    if [ "$status" -eq 0 ]; then
        summary+=("ok      $name (${secs}s, CPU ${cpu}s; $free)")
    else
        summary+=("FAILED  $name (${secs}s, CPU ${cpu}s, exit $status; $free)")
        failed_steps=$((failed_steps + 1))
    fi
}
skip() { summary+=("SKIPPED $1 ($2)"); }

step "rustfmt" sh -c 'cargo fmt --all -- --check && rustfmt --edition 2021 --check kmod-rust/src/davinci_main.rs'
step "the tree's shape (layering and folders, file sizes, paths, names, MSRV)" cargo xtask check
step "tests" cargo test --workspace
# The test build's executables, listed once for every step after this one (the kernel step's
# guests and device processes, the daemon suites, the Python and C steps).
if scripts/test-artifacts.sh >"$log_dir/test-artifacts" 2>"$log_dir/test-artifacts.err"; then
    export DAVINCI_TEST_ARTIFACTS=$log_dir/test-artifacts
fi
# The kernel module in QEMU, in the background from here on (it needs the test build and the
# toolchain; it waits for the latter): every step after it runs at lower priority (nice 10,
# the loom models and the MSRV check at 19), so the test kernel's build and then the guest's
# two vCPUs come first (some of the guest's tests bound how long an open may wait), and the
# rest fills the cores around them.
kmod_step() {
    while [ ! -f "$log_dir/kmod-prepare.status" ]; do sleep 1; done
    local status
    status=$(cat "$log_dir/kmod-prepare.status")
    if [ "$status" != 0 ]; then
        cat "$log_dir/kmod-prepare.log"
        echo "scripts/test.sh: preparing the kernel toolchain failed (exit $status; its log is above)"
        return 1
    fi
    grep '^==> kmod' "$log_dir/kmod-prepare.log" || true
    # Each runs whatever the one before said; the step fails if any did.
    local rc=0
    scripts/kmod-test.sh || rc=1
    # The module as the PCI driver of QEMU's ivshmem-doorbell device served by ivshmem-echo
    # (issue 27): bind, MSI-X per doorbell, remove and rescan, the device process killed.
    DAVINCI_KMOD_BUILT=${DAVINCI_KMOD_WORK:-$ROOT/target/kmod}/module scripts/pci-smoke.sh || rc=1
    # The PCI device outside the guest (davinci-pcidev) behind real QEMU, driven from a guest
    # program through sysfs (no driver): two guests in turn, the admin queue, a stream.
    scripts/pcidev-smoke.sh || rc=1
    return "$rc"
}
if [ "${DAVINCI_SKIP_KMOD:-0}" = 1 ]; then
    skip "kernel module in QEMU" "DAVINCI_SKIP_KMOD=1"
else
    step_start "kernel module in QEMU (Linux 6.12)" kmod_step
fi

# What follows yields to the kernel step (a process started from here on inherits nice 10).
renice -n 10 -p $$ >/dev/null 2>&1 || true
# The daemon the Python and C steps run their tests against: the test build's (a build of
# its own in another profile would build every dependency again).
DAVINCI_MOCKD=$(scripts/test-artifacts.sh 2>/dev/null | awk '$1 == "bin" && $2 == "davinci-mockd" { print $3 }' | tail -n1) || true
[ -x "${DAVINCI_MOCKD:-}" ] && export DAVINCI_MOCKD || unset DAVINCI_MOCKD
step "clippy" cargo clippy --workspace --all-targets -- -D warnings
# The conformance suite and the million-task run again, against a real davinci-mockd: the
# harnesses `cargo test --workspace` built (a `cargo test --test ...` selection would resolve
# other features and build again), run as cargo runs them, from their crate's directory.
mockd_suites() {
    local artifacts t exe
    artifacts=$(scripts/test-artifacts.sh) || return 1
    for t in conformance million; do
        exe=$(awk -v n="$t" '$1 == "test" && $2 == n { print $3 }' <<<"$artifacts" | tail -n1)
        [ -x "$exe" ] || { echo "scripts/test.sh: the test build has no '$t' harness" >&2; return 1; }
        (cd tests && DAVINCI_TEST_BACKEND=mockd "$exe") || return 1
    done
}
step "conformance and million tasks (davinci-mockd backend)" mockd_suites
# The quick start README.md shows (`cargo run -p davinci-shim --example quickstart`), as
# `cargo test` built it.
step "quick start example" target/debug/examples/quickstart
# Two actors sharing a buffer by token (docs in shim/examples/ray_actors.rs); across two
# processes in the daemon suites above (mockd_acceptance) and on the kernel.
step "ray actors example" target/debug/examples/ray_actors
# The Python package (bindings/python/): `pip install ./bindings/python` into a venv under target/, its
# pytest suite against the embedded device and a real davinci-mockd, and its examples.
step "Python package (install, pytest, examples)" scripts/python-test.sh
# The runtime library without the embedded device builds and passes its tests (that it links
# no device code is the layering check's).
step "shim without the embedded device" cargo test -p davinci-shim --no-default-features
# libdavinci, the shim for C (scripts/capi-test.sh): installed with its pkg-config file, the
# C quick start and C tests built with gcc and clang (-Wall -Wextra -Werror), run on the
# embedded device and a real davinci-mockd, then under ASan/UBSan. (The kernel step runs the
# quick start in the guest.)
step "libdavinci (C): quick start and C tests, embedded and davinci-mockd, ASan/UBSan" scripts/capi-test.sh
# The backend ports of issue 43 (bindings/capi/examples/ports/): a C library over libdavinci
# (torch_catlass's GEMM + epilogue, an mLLM-style transformer block with f16 weights) called
# from Python with numpy arrays, checked against numpy, embedded and davinci-mockd.
step "backend ports (C over libdavinci, from Python, against numpy)" scripts/ports-test.sh

if [ "${DAVINCI_SKIP_FUZZ:-0}" = 1 ]; then
    # No nightly: the targets (a crate outside the workspace) at least type-check on stable.
    step "fuzz targets build (stable)" cargo check --manifest-path fuzz/Cargo.toml --bins --locked
    skip "fuzz targets run" "DAVINCI_SKIP_FUZZ=1"
else
    step "fuzz targets (nightly, ${DAVINCI_FUZZ_SECONDS:-20}s each)" scripts/fuzz.sh
    tidy fuzz/target
fi

step "loom models and ordering mutation check (davinci-ring)" nice -n 15 scripts/ring-mutation-check.sh
tidy target/loom

if [ "${DAVINCI_SKIP_MSRV:-0}" = 1 ]; then
    skip "build with the declared rust-version" "DAVINCI_SKIP_MSRV=1"
else
    step "build with the declared rust-version" nice -n 15 cargo xtask msrv --build
    tidy target/msrv
fi

steps_finish
prep_pid=
# The kernel's toolchain and test kernel, prepared in the background from the start (seconds
# in a fresh run; most of the kernel step's wait on a machine without the cache).
if [ -f "$log_dir/kmod-prepare.status" ]; then
    record "kernel toolchain and test kernel (in the background from the start)" \
        "$(cat "$log_dir/kmod-prepare.status")" "$(cat "$log_dir/kmod-prepare.log.end" 2>/dev/null || echo 0)" \
        "$log_dir/kmod-prepare.log"
fi

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
echo "tests: $tests_passed passed, $tests_failed failed; $SECONDS s in all"
[ "$failed_steps" -eq 0 ]
