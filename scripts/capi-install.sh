#!/usr/bin/env bash
# scripts/capi-install.sh PREFIX: builds libdavinci (the davinci-capi crate, release) and
# installs it for C programs:
#   PREFIX/lib/libdavinci.so, PREFIX/lib/libdavinci.a
#   PREFIX/include/davinci/runtime.h, PREFIX/include/davinci/uapi.h
#   PREFIX/lib/pkgconfig/davinci.pc, PREFIX/lib/pkgconfig/davinci-static.pc
# so that, with PKG_CONFIG_PATH=PREFIX/lib/pkgconfig,
#   cc prog.c $(pkg-config --cflags --libs davinci)                   # libdavinci.so
#   cc prog.c $(pkg-config --cflags --libs davinci-static)            # libdavinci.a
#   cc -static prog.c $(pkg-config --static --cflags --libs davinci)  # all static
#
# Environment: CARGO_TARGET_DIR (where cargo builds, default target/), DAVINCI_CAPI_PROFILE
# (cargo profile, default release).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

case "${1:-}" in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    "") echo "usage: scripts/capi-install.sh PREFIX (--help says more)" >&2; exit 2 ;;
esac
[ $# -eq 1 ] || { echo "scripts/capi-install.sh: takes one argument, PREFIX (got $#)" >&2; exit 2; }
mkdir -p "$1"
PREFIX=$(cd "$1" && pwd)
PROFILE=${DAVINCI_CAPI_PROFILE:-release}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TARGET" in /*) ;; *) TARGET=$ROOT/$TARGET ;; esac
out_dir=$TARGET/$PROFILE
[ "$PROFILE" = dev ] && out_dir=$TARGET/debug

echo "==> building libdavinci (cargo build -p davinci-capi --profile $PROFILE)"
(cd "$ROOT" && cargo build -p davinci-capi --profile "$PROFILE")
for f in libdavinci.so libdavinci.a; do
    [ -f "$out_dir/$f" ] || { echo "scripts/capi-install.sh: the build made no $out_dir/$f" >&2; exit 1; }
done

# What the static library needs besides itself: the Rust standard library's system
# libraries, as rustc reports them for this target (-lgcc_s -lutil -lrt -lpthread -lm -ldl
# -lc on glibc), so `pkg-config --static` links a program without guessing.
native=$(cd "$ROOT" && cargo rustc -q -p davinci-capi --profile "$PROFILE" --lib \
    --crate-type staticlib -- --print native-static-libs 2>&1 |
    sed -n 's/.*native-static-libs: //p' | tail -n1)
[ -n "$native" ] || native="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
# -lc comes last by itself (listed, it would come before what follows on a command line);
# the compiler driver adds libgcc's unwinder itself, as libgcc_s (dynamic) or libgcc_eh
# (-static), so -lgcc_s is left to it: a fully static link has no libgcc_s.
native=$(tr ' ' '\n' <<<"$native" | grep -v -e '^-lc$' -e '^-lgcc_s$' | awk 'NF && !seen[$0]++' | tr '\n' ' ' | sed 's/ $//')

version=$(awk -F'"' '/^version = / { print $2; exit }' "$ROOT/Cargo.toml")
install -d "$PREFIX/lib/pkgconfig" "$PREFIX/include/davinci"
install -m 0755 "$out_dir/libdavinci.so" "$PREFIX/lib/libdavinci.so"
install -m 0644 "$out_dir/libdavinci.a" "$PREFIX/lib/libdavinci.a"
install -m 0644 "$ROOT/bindings/capi/include/davinci/runtime.h" "$PREFIX/include/davinci/runtime.h"
install -m 0644 "$ROOT/uapi/include/davinci/uapi.h" "$PREFIX/include/davinci/uapi.h"
cat >"$PREFIX/lib/pkgconfig/davinci.pc" <<PC
prefix=$PREFIX
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: davinci
Description: libdavinci, the davinci runtime for C (devices, streams, events, memory)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -ldavinci
Libs.private: $native
PC
# libdavinci.a by name (a plain -ldavinci would take the .so), the C library dynamically.
cat >"$PREFIX/lib/pkgconfig/davinci-static.pc" <<PC
prefix=$PREFIX
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: davinci-static
Description: libdavinci linked statically (libdavinci.a; the C library stays dynamic)
Version: $version
Cflags: -I\${includedir}
Libs: \${libdir}/libdavinci.a $native
PC
echo "==> installed libdavinci $version in $PREFIX (pkg-config: PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig)"
