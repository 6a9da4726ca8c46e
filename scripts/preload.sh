#!/bin/sh
# Builds libdavinci-preload.so, the LD_PRELOAD library that runs unmodified C clients of
# /dev/davinciN on a davinci-mockd device (bindings/preload/README.md), and installs it under its
# name (cargo names the cdylib libdavinci_preload.so).
#
#   scripts/preload.sh                   build (release): $TARGET/release/libdavinci-preload.so
#   scripts/preload.sh --prefix /usr/local   and install PREFIX/lib/libdavinci-preload.so
#   scripts/preload.sh --debug ...       the dev profile instead of release
set -eu
cd "$(dirname "$0")/.."
usage() {
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
}
prefix=
profile=release
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || { echo "preload.sh: --prefix needs a directory" >&2; exit 2; }
                  prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        --debug) profile=debug; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "preload.sh: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
    esac
done
command -v cargo >/dev/null || { echo "preload.sh: cargo is not installed (https://rustup.rs)" >&2; exit 2; }
if [ "$profile" = release ]; then
    cargo build --release -p davinci-preload
else
    cargo build -p davinci-preload
fi
out=${CARGO_TARGET_DIR:-target}/$profile
cp "$out/libdavinci_preload.so" "$out/libdavinci-preload.so"
echo "preload.sh: built $out/libdavinci-preload.so"
if [ -n "$prefix" ]; then
    install -D -m 0755 "$out/libdavinci-preload.so" "$prefix/lib/libdavinci-preload.so"
    echo "preload.sh: installed $prefix/lib/libdavinci-preload.so"
fi
