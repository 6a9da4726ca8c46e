#!/usr/bin/env bash
# The two backend ports of issue 43 (bindings/capi/examples/ports/): a C shared library over
# libdavinci (ports.c: torch_catlass's GEMM with an epilogue, and an mLLM-style transformer
# block with f16 weights and a caching pool) called from Python with numpy arrays (ports.py),
# each result checked element by element against numpy within its stated bound, on the
# embedded device and on a davinci-mockd.
#
# Needs gcc, pkg-config and python3 with numpy: it uses scripts/python-test.sh's virtual
# environment (target/python-venv) when there is one, else makes its own. Builds libdavinci
# with scripts/capi-install.sh into target/ports/prefix.
#
# Environment: DAVINCI_MOCKD (the daemon binary; default: a debug build), CARGO_TARGET_DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
case "${1:-}" in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    "") ;;
    *) echo "scripts/ports-test.sh: takes no arguments (got '$1'); --help says what it does" >&2; exit 2 ;;
esac
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$TARGET/ports
mkdir -p "$WORK"
VENV=$TARGET/python-venv
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -c 'import numpy' 2>/dev/null ||
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check numpy

bash scripts/capi-install.sh "$WORK/prefix" >"$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log"; echo "scripts/ports-test.sh: scripts/capi-install.sh failed" >&2; exit 1; }
export PKG_CONFIG_PATH=$WORK/prefix/lib/pkgconfig
# shellcheck disable=SC2046 # pkg-config's flags are words
gcc -std=c11 -Wall -Wextra -Werror -O2 -shared -fPIC bindings/capi/examples/ports/ports.c \
    $(pkg-config --cflags --libs davinci) -Wl,-rpath,"$WORK/prefix/lib" -lm -o "$WORK/libports.so"

if [ -z "${DAVINCI_MOCKD:-}" ]; then
    cargo build -q -p davinci-mockd
    DAVINCI_MOCKD=$TARGET/debug/davinci-mockd
fi
dir=$(mktemp -d)
mockd_pid=
cleanup() {
    if [ -n "$mockd_pid" ]; then kill "$mockd_pid" 2>/dev/null || true; wait "$mockd_pid" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT
RUST_LOG=warn "$DAVINCI_MOCKD" --socket-dir "$dir" --exit-with-parent >"$dir/ready" &
mockd_pid=$!
for _ in $(seq 100); do
    grep -q ready "$dir/ready" 2>/dev/null && break
    kill -0 "$mockd_pid" 2>/dev/null || { echo "scripts/ports-test.sh: davinci-mockd exited" >&2; exit 1; }
    sleep 0.1
done
grep -q ready "$dir/ready" || { echo "scripts/ports-test.sh: davinci-mockd did not get ready in 10 s" >&2; exit 1; }
for dev in embedded "mock:$dir/davinci0.sock"; do
    "$VENV/bin/python" bindings/capi/examples/ports/ports.py --lib "$WORK/libports.so" --device "$dev"
done
echo "scripts/ports-test.sh: both ports agree with numpy on the embedded device and davinci-mockd"
