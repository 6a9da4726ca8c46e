#!/usr/bin/env bash
# Runs every libFuzzer target of fuzz/ (cargo-fuzz, nightly) for ${DAVINCI_FUZZ_SECONDS:-60} seconds
# each, one after the other, for longer runs by hand (the test command runs scripts/fuzz-ci.sh:
# every target for DAVINCI_FUZZ_SECONDS, default 20, failing on any finding).
#   DAVINCI_FUZZ_SECONDS=300 scripts/fuzz.sh      # longer runs (FUZZ_SECONDS, the old name, works too)
#   scripts/fuzz.sh ioctl_dispatch mockd_frames   # only these targets
#   FUZZ_JOBS=2 scripts/fuzz.sh                   # libFuzzer -fork=N per target
# Crashes land in fuzz/artifacts/<target>/; see fuzz/README.md to reproduce one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

SECONDS_EACH="${DAVINCI_FUZZ_SECONDS:-${FUZZ_SECONDS:-60}}"
TOOLCHAIN="${FUZZ_TOOLCHAIN:-nightly}"

if ! rustup toolchain list | grep -q "^${TOOLCHAIN}"; then
    echo "==> installing the ${TOOLCHAIN} toolchain"
    rustup toolchain install "${TOOLCHAIN}" --profile minimal
fi
if ! cargo fuzz --help >/dev/null 2>&1; then
    echo "==> installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo "+${TOOLCHAIN}" fuzz list)
fi

extra=()
if [ -n "${FUZZ_JOBS:-}" ]; then
    extra+=("-fork=${FUZZ_JOBS}")
fi

cargo "+${TOOLCHAIN}" fuzz build
failed=()
for t in "${targets[@]}"; do
    echo "==> fuzz ${t} for ${SECONDS_EACH}s"
    if ! cargo "+${TOOLCHAIN}" fuzz run "${t}" -- -max_total_time="${SECONDS_EACH}" "${extra[@]}"; then
        failed+=("${t}")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "==> FAILED: ${failed[*]} (inputs in fuzz/artifacts/)"
    exit 1
fi
echo "==> all ${#targets[@]} targets ran ${SECONDS_EACH}s without a crash"
