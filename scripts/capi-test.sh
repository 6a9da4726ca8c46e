#!/usr/bin/env bash
# scripts/capi-test.sh: libdavinci (the shim's API for C) as a C programmer gets it.
#
#   1. installs it with scripts/capi-install.sh into target/capi/prefix;
#   2. builds the quick start (bindings/capi/examples/quickstart.c) and the C tests
#      (bindings/capi/tests/c/*.c: among them patterns.c, the CUDA/ACL usage patterns, and
#      devinfo.c, which prints every 64-bit field with PRIu64) with pkg-config and
#      -std=c11 -Wall -Wextra -Werror -Wformat=2, with gcc and
#      (if present) clang, against libdavinci.so, and once statically (davinci-static);
#      each header also compiles on its own;
#   3. runs them on the embedded mock device and on a real davinci-mockd (started here in a
#      scratch socket directory, stopped at the end);
#   4. builds them again with -fsanitize=address,undefined against libdavinci.a and runs them
#      on both devices with LeakSanitizer on (ASAN_OPTIONS=detect_leaks=1:abort_on_error=1,
#      UBSAN_OPTIONS=halt_on_error=1);
#   5. leaves target/capi/capi-quickstart, the quick start linked fully statically, for the
#      kernel module's guest (scripts/kmod-test.sh copies it in).
#
# Installs gcc, pkg-config and the sanitizers' runtime with apt-get when they are missing
# and it may (root). Environment: CARGO_TARGET_DIR (where cargo builds), DAVINCI_CAPI_WORK
# (default target/capi), DAVINCI_MOCKD (the davinci-mockd binary to test against; default: a
# release build of it).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

case "${1:-}" in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    "") ;;
    *) echo "scripts/capi-test.sh: takes no arguments (got '$1'); --help says what it does" >&2; exit 2 ;;
esac

say() { echo "capi: $*"; }
die() { echo "capi: FAIL: $*" >&2; exit 1; }

as_root=()
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then as_root=(sudo -n); fi
can_install() { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }
need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
if [ ${#need[@]} -gt 0 ]; then
    can_install && command -v apt-get >/dev/null 2>&1 ||
        die "missing ${need[*]} (Debian: apt-get install ${need[*]})"
    say "installing ${need[*]}"
    # The lock timeout: the test command prepares the kernel toolchain with apt-get meanwhile.
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq </dev/null
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" </dev/null
fi

WORK=${DAVINCI_CAPI_WORK:-$ROOT/target/capi}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TARGET" in /*) ;; *) TARGET=$ROOT/$TARGET ;; esac
mkdir -p "$WORK"
PREFIX=$WORK/prefix
rm -rf "$PREFIX" "$WORK/bin"
mkdir -p "$WORK/bin"

bash "$ROOT/scripts/capi-install.sh" "$PREFIX"
export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig
pkg-config --exists davinci davinci-static || die "pkg-config does not find davinci in $PKG_CONFIG_PATH"
say "pkg-config: davinci $(pkg-config --modversion davinci): $(pkg-config --cflags --libs davinci)"

WARN=(-std=c11 -Wall -Wextra -Werror -Wformat=2)
compilers=(gcc)
command -v clang >/dev/null 2>&1 && compilers+=(clang)
programs=(bindings/capi/examples/quickstart.c bindings/capi/tests/c/*.c)

# Each header compiles on its own and with the other.
for cc in "${compilers[@]}"; do
    for inc in "davinci/runtime.h" "davinci/uapi.h" "davinci/uapi.h davinci/runtime.h"; do
        src=$WORK/header.c
        : >"$src"
        for h in $inc; do echo "#include <$h>" >>"$src"; done
        echo 'int main(void) { return 0; }' >>"$src"
        $cc "${WARN[@]}" -pedantic $(pkg-config --cflags davinci) -c "$src" -o "$WORK/header.o" ||
            die "$cc: <$inc> does not compile on its own"
    done
done
say "headers compile on their own (${compilers[*]})"

# build CC SUFFIX PKG [FLAGS...]: every program, into $WORK/bin/NAME-SUFFIX.
build() {
    local cc=$1 suffix=$2 pkg=$3 p name
    shift 3
    for p in "${programs[@]}"; do
        name=$(basename "$p" .c)
        $cc "${WARN[@]}" "$@" $(pkg-config --cflags "$pkg") "$p" $(pkg-config --libs "$pkg") \
            -lpthread -o "$WORK/bin/$name-$suffix" || die "$cc could not build $p ($pkg)"
    done
}
for cc in "${compilers[@]}"; do build "$cc" "$cc" davinci; done
build gcc static davinci-static
say "built ${#programs[@]} programs with ${compilers[*]} (libdavinci.so) and gcc (libdavinci.a)"

# The fully static quick start for the kernel module's guest (no shared library there).
gcc "${WARN[@]}" -static bindings/capi/examples/quickstart.c $(pkg-config --static --cflags --libs davinci) \
    -o "$WORK/capi-quickstart" 2>"$WORK/static-link.log" ||
    { cat "$WORK/static-link.log"; die "the fully static quick start does not link"; }
if readelf -l "$WORK/capi-quickstart" | grep 'program interpreter' >/dev/null; then
    die "$WORK/capi-quickstart is not static (it names a dynamic loader)"
fi

# A real davinci-mockd in a scratch socket directory: DAVINCI_MOCKD when the caller names one
# (scripts/test.sh passes the test build's), else a release build (like the library's: the
# two share most of their dependencies' build).
MOCKD=${DAVINCI_MOCKD:-}
if [ -z "$MOCKD" ]; then
    cargo build -q --release -p davinci-mockd
    MOCKD=$TARGET/release/davinci-mockd
fi
SOCK_DIR=$(mktemp -d /tmp/davinci-capi.XXXXXX)
mockd_pid=
cleanup() {
    [ -n "$mockd_pid" ] && kill "$mockd_pid" 2>/dev/null && wait "$mockd_pid" 2>/dev/null
    rm -rf "$SOCK_DIR"
    return 0
}
trap cleanup EXIT
"$MOCKD" --socket-dir "$SOCK_DIR" --devices 1 --exit-with-parent >"$WORK/mockd.log" 2>&1 &
mockd_pid=$!
for _ in $(seq 100); do [ -S "$SOCK_DIR/davinci0.sock" ] && break; sleep 0.1; done
[ -S "$SOCK_DIR/davinci0.sock" ] || { cat "$WORK/mockd.log"; die "davinci-mockd made no socket in $SOCK_DIR"; }
devices=(embedded "mock:$SOCK_DIR/davinci0.sock")

ran=0
failed=0
# run SUFFIX: every program of that build on every device.
run() {
    local suffix=$1 p name dev log
    for p in "${programs[@]}"; do
        name=$(basename "$p" .c)
        for dev in "${devices[@]}"; do
            log=$WORK/$name-$suffix.log
            if "$WORK/bin/$name-$suffix" "$dev" >"$log" 2>&1; then
                ran=$((ran + 1))
                echo "ok $name ($suffix) on $dev: $(tail -n1 "$log")"
            else
                failed=$((failed + 1))
                echo "FAILED $name ($suffix) on $dev (exit $?):"
                sed 's/^/    /' "$log"
            fi
        done
    done
}
for cc in "${compilers[@]}"; do run "$cc"; done
run static

# ASan and UBSan: the C side instrumented, linked with libdavinci.a.
san=(-fsanitize=address,undefined -fno-omit-frame-pointer -g)
if echo 'int main(void){return 0;}' | gcc "${san[@]}" -x c - -o "$WORK/san-probe" 2>/dev/null; then
    build gcc asan davinci-static "${san[@]}"
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    run asan
    unset ASAN_OPTIONS UBSAN_OPTIONS
else
    failed=$((failed + 1))
    echo "FAILED: gcc cannot build with -fsanitize=address,undefined (Debian: apt-get install libasan8 libubsan1)"
fi

echo "capi: $ran passed, $failed failed"
[ "$failed" -eq 0 ]
