#!/usr/bin/env bash
# The fuzz step of the test command (scripts/test.sh): builds every target of fuzz/ on the
# nightly toolchain (cargo-fuzz: libFuzzer + AddressSanitizer) and runs each for a short fixed
# budget, starting from its checked-in seed corpus fuzz/seeds/<target>/. Any finding (a crash,
# a panic, a leak, a timeout of one input, a non-zero exit) fails the step; the input is left
# in fuzz/artifacts/<target>/ (keep it as fuzz/regressions/<target>/<name>: fuzz/README.md).
#
#   DAVINCI_FUZZ_SECONDS=N   seconds per target (default 20)
#   DAVINCI_SKIP_FUZZ=1      skip the step (a machine without nightly or network)
#   DAVINCI_FUZZ_TOOLCHAIN   toolchain (default nightly)
#   scripts/fuzz-ci.sh ioctl_dispatch mock_device   only these targets
#
# Runs start from a scratch copy of the seeds (fuzz/target/ci-corpus/<target>), so the
# checked-in corpus never changes behind anyone's back.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

if [ "${DAVINCI_SKIP_FUZZ:-0}" = 1 ]; then
    echo "fuzz: skipped (DAVINCI_SKIP_FUZZ=1)"
    exit 0
fi
SECONDS_EACH="${DAVINCI_FUZZ_SECONDS:-20}"
TOOLCHAIN="${DAVINCI_FUZZ_TOOLCHAIN:-nightly}"
# The cargo-fuzz release this was last checked with.
CARGO_FUZZ_VERSION=0.13.2

if ! rustup toolchain list | grep -q "^${TOOLCHAIN}"; then
    echo "==> installing the ${TOOLCHAIN} toolchain"
    rustup toolchain install "${TOOLCHAIN}" --profile minimal
fi
if ! cargo "+${TOOLCHAIN}" fuzz --version >/dev/null 2>&1; then
    echo "==> installing cargo-fuzz ${CARGO_FUZZ_VERSION}"
    cargo install cargo-fuzz --version "${CARGO_FUZZ_VERSION}" --locked
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo "+${TOOLCHAIN}" fuzz list)
fi

start=$SECONDS
cargo "+${TOOLCHAIN}" fuzz build
echo "==> built ${#targets[@]} targets in $((SECONDS - start))s"

failed=()
for t in "${targets[@]}"; do
    corpus="target/ci-corpus/${t}"
    rm -rf "${corpus}"
    mkdir -p "${corpus}" "artifacts/${t}"
    if [ -d "seeds/${t}" ]; then
        cp seeds/"${t}"/* "${corpus}/" 2>/dev/null || true
    fi
    echo "==> fuzz ${t} for ${SECONDS_EACH}s from $(ls "${corpus}" | wc -l) seeds"
    # -timeout: one input running 10 s is a finding (a hang); -rss_limit_mb: leaks that grow.
    if ! cargo "+${TOOLCHAIN}" fuzz run "${t}" "${corpus}" -- \
        -max_total_time="${SECONDS_EACH}" -timeout=10 -rss_limit_mb=4096 \
        -print_final_stats=1 2>&1 | tail -n 80; then  # pipefail: cargo's status counts
        failed+=("${t}")
    fi
done

echo "==> fuzzing took $((SECONDS - start))s"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "==> FINDINGS in: ${failed[*]} (inputs in fuzz/artifacts/<target>/; see fuzz/README.md)"
    exit 1
fi
echo "==> all ${#targets[@]} targets ran ${SECONDS_EACH}s each without a finding"
