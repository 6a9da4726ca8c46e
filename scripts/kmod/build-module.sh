#!/usr/bin/env bash
# Builds kmod-rust into $1 (a scratch directory): the module sources, the generated
# davinci_core.rs (uapi + ring + driver-core), and davinci.ko. Needs toolchain.sh sourced.
set -euo pipefail
OUT=${1:?build directory}
KMOD_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../kmod-rust" && pwd)
ROOT=$(dirname "$KMOD_DIR")
rm -rf "$OUT" && mkdir -p "$OUT"
cp -r "$KMOD_DIR"/src/. "$OUT/"
cp "$KMOD_DIR/Kbuild" "$KMOD_DIR/Makefile" "$OUT/"
(cd "$ROOT" && cargo run --quiet -p xtask -- kmod-src "$OUT/davinci_core.rs")
make -s -C "$OUT" KDIR="$KBUILD" RUSTC="$KMOD_RUSTC" BINDGEN="$KMOD_BINDGEN" RUSTFMT=/usr/bin/rustfmt \
    RUSTDOC=/usr/bin/rustdoc RUST_LIB_SRC="$KMOD_RUST_LIB_SRC" 2>&1 | tee "$OUT/build.log"
[ -f "$OUT/davinci.ko" ] || { echo "kmod: davinci.ko did not build (see $OUT/build.log)" >&2; exit 1; }
