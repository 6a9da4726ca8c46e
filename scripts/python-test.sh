#!/usr/bin/env bash
# scripts/python-test.sh: the Python package `davinci` (bindings/python/), as a user gets it: built and
# installed with `pip install ./bindings/python` into a virtual environment under the target directory
# (maturin, a release build of the native module), then its tests (bindings/python/tests, pytest)
# against the embedded device and a real davinci-mockd, and its examples
# (bindings/python/examples/framework_op.py on both, 3,000 calls in a loop; two_process.py on a
# daemon). The pattern suite (bindings/python/tests/test_patterns.py) fails a hang by pytest-timeout
# and a faulthandler watchdog.
#
# Needs python3 (3.9 or later) with venv and the Rust toolchain; on Debian, as root, installs
# python3-venv when it is missing. pip fetches maturin, pytest, pytest-timeout and numpy from
# PyPI (and, best effort, perfetto for the timeline test). The native module is built for the
# venv's interpreter (not abi3: Buffer's buffer protocol).
#
# Environment:
#   CARGO_TARGET_DIR      where cargo builds (and the venv goes: $CARGO_TARGET_DIR/python-venv;
#                         default target/)
#   DAVINCI_PYTHON        the interpreter to make the venv with (default python3)
#   DAVINCI_MOCKD         the davinci-mockd binary to test against (default: cargo builds one)
set -eu
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

case "${1:-}" in
    -h | --help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    "") ;;
    *) echo "scripts/python-test.sh: takes no arguments (got '$1'); --help says what it does" >&2; exit 2 ;;
esac

PY=${DAVINCI_PYTHON:-python3}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
VENV=$TARGET/python-venv

if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "==> python: installing python3 and python3-venv (Debian)"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            python3 python3-venv </dev/null
        PY=python3
    else
        echo "scripts/python-test.sh: no $PY with the venv module; install it" \
            "(Debian/Ubuntu: sudo apt-get install python3-venv) and re-run." >&2
        exit 1
    fi
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
    echo "scripts/python-test.sh: $PY is $("$PY" -V 2>&1); the package needs Python 3.9 or later" >&2
    exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "==> python: a virtual environment in $VENV"
    "$PY" -m venv "$VENV"
fi
echo "==> python: pip install ./bindings/python (maturin, release build of the native module)"
start=$SECONDS
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps ./bindings/python
echo "==> python: built and installed in $((SECONDS - start)) s"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check pytest pytest-timeout numpy
# Perfetto's trace processor (the `perfetto` package), for the timeline test
# (tests/tests/trace_workload.rs opens a `davinci-workload --trace` file in it, with this
# venv's Python): best effort, and when scripts/test.sh passed its test build's list, that
# test runs again here with it. The package fetches its trace_processor_shell binary on
# first use; where that cannot be had, the check says why and is skipped.
if "$VENV/bin/python" -m pip install -q --disable-pip-version-check perfetto 2>"$VENV/perfetto-install.log"; then
    trace_test=
    if [ -n "${DAVINCI_TEST_ARTIFACTS:-}" ] && [ -s "$DAVINCI_TEST_ARTIFACTS" ]; then
        trace_test=$(awk '$1 == "test" && $2 == "trace_workload" { print $3 }' "$DAVINCI_TEST_ARTIFACTS" | tail -n1)
    fi
    if [ -n "$trace_test" ] && [ -x "$trace_test" ]; then
        echo "==> python: the timeline test again, with perfetto's trace processor"
        (cd tests && "$trace_test" --nocapture)
    fi
else
    echo "==> python: perfetto could not be installed: the timeline test's Perfetto check is skipped"
    sed 's/^/    /' "$VENV/perfetto-install.log" | tail -n 5
fi
# Ray, for davinci.ray's test (a real Ray pipeline): from the registry when it is reachable;
# else that test is skipped, saying why.
if "$VENV/bin/python" -m pip install -q --disable-pip-version-check 'ray>=2.60' 2>"$VENV/ray-install.log"; then
    export DAVINCI_PYTEST_REQUIRE_RAY=1
    echo "==> python: ray $("$VENV/bin/python" -c 'import ray; print(ray.__version__)') for davinci.ray's test"
else
    echo "==> python: ray could not be installed (the registry is not reachable?): davinci.ray's test is skipped"
    sed 's/^/    /' "$VENV/ray-install.log" | tail -n 5
fi

# davinci-mockd for the tests: DAVINCI_MOCKD when the caller names one (scripts/test.sh
# passes the test build's), else a build of it.
if [ -z "${DAVINCI_MOCKD:-}" ]; then
    echo "==> python: davinci-mockd for the tests (cargo build -p davinci-mockd)"
    cargo build -q -p davinci-mockd
    DAVINCI_MOCKD=$TARGET/debug/davinci-mockd
fi
export DAVINCI_MOCKD
export DAVINCI_PYTEST_REQUIRE_MOCKD=1
# The tests import the installed package (not bindings/python/davinci, which has no native module):
# pytest runs from the repository's root.
"$VENV/bin/python" -m pytest -q bindings/python/tests

echo "==> python: examples"
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
    kill -0 "$mockd_pid" 2>/dev/null || { echo "scripts/python-test.sh: davinci-mockd exited" >&2; exit 1; }
    sleep 0.1
done
grep -q ready "$dir/ready" || { echo "scripts/python-test.sh: davinci-mockd did not get ready in 10 s" >&2; exit 1; }
"$VENV/bin/python" bindings/python/examples/framework_op.py --device embedded --iterations 3000
"$VENV/bin/python" bindings/python/examples/framework_op.py --device "mock:$dir/davinci0.sock" --iterations 3000
"$VENV/bin/python" bindings/python/examples/two_process.py --device "mock:$dir/davinci0.sock"
echo "scripts/python-test.sh: the Python package's tests and examples passed"
