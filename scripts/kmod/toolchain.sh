#!/usr/bin/env bash
# scripts/kmod/toolchain.sh: installs what building a Rust kernel module on Linux 6.12 needs
# on a fresh Debian machine, and builds (once, cached outside the repository in
# DAVINCI_KMOD_CACHE, default /var/cache/davinci-kmod for root) the test kernel.
# Sourced by scripts/kmod-test.sh, it then sets KSRC, KBUILD, MAKE_VARS (the toolchain
# variables every make of the kernel and the module must get), KMOD_BINDGEN, KMOD_RUSTC and
# KMOD_RUST_LIB_SRC (not RUSTC: cargo would build the workspace again with the kernel's rustc); run on its own, it only prepares (scripts/test.sh runs it in the background
# while the other steps run). DAVINCI_BINDGEN_VERSION, DAVINCI_JOBS (make -j, default: CPUs).
#
# Facts this relies on (measured on this machine kind, see docs/kernel.md):
# * Debian's linux-source-6.12 + rustc-web (its rustc builds the kernel; rustup's toolchains
#   lack rust-src) + bindgen-cli 0.73 from crates.io (Debian's 0.60 is too old) pass
#   `make rustavailable`. The module must be built by the exact rustc that built the kernel.
# * tinyconfig + config.fragment (KASAN, lockdep, ACPI, PCI) builds in about 10 minutes with
#   -j2 (524 s beside the test command's first steps): the longest piece of a run without the
#   cache.
set -euo pipefail

KMOD_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../kmod-rust" && pwd)
BINDGEN_VERSION=${DAVINCI_BINDGEN_VERSION:-0.73.2}
JOBS=${DAVINCI_JOBS:-$(nproc)}
if [ -z "${DAVINCI_KMOD_CACHE:-}" ]; then
    if [ "$(id -u)" = 0 ]; then DAVINCI_KMOD_CACHE=/var/cache/davinci-kmod
    else DAVINCI_KMOD_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/davinci-kmod; fi
fi
mkdir -p "$DAVINCI_KMOD_CACHE"

say() { printf '==> kmod: %s\n' "$*"; }

# ---- Debian packages -------------------------------------------------------------------
PKGS="linux-source-6.12 rustc-web rust-web-src rustfmt-web clang lld llvm libclang-dev
      qemu-system-x86 busybox-static flex bison bc libelf-dev libssl-dev cpio xz-utils kmod
      make file gcc libc6-dev pkg-config"
missing=$(for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
    sudo_cmd=()
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null 2>&1 || { echo "kmod: need root (or sudo) to install: $missing" >&2; exit 1; }
        sudo_cmd=(sudo -n)
    fi
    say "installing $(echo $missing)"
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing </dev/null
fi

# ---- bindgen ---------------------------------------------------------------------------
KMOD_BINDGEN=$DAVINCI_KMOD_CACHE/bindgen-$BINDGEN_VERSION/bin/bindgen
if [ ! -x "$KMOD_BINDGEN" ]; then
    say "installing bindgen-cli $BINDGEN_VERSION (crates.io)"
    cargo install --quiet --locked bindgen-cli --version "$BINDGEN_VERSION" \
        --root "$DAVINCI_KMOD_CACHE/bindgen-$BINDGEN_VERSION"
fi

# ---- the toolchain the kernel is built with --------------------------------------------
KMOD_RUSTC=/usr/bin/rustc
KMOD_RUST_LIB_SRC=$(dirname "$(dpkg -L rust-web-src | grep -m1 '/library/core$')")
MAKE_VARS=(LLVM=1 ARCH=x86_64 RUSTC=$KMOD_RUSTC HOSTRUSTC=$KMOD_RUSTC RUSTDOC=/usr/bin/rustdoc
           RUSTFMT=/usr/bin/rustfmt BINDGEN=$KMOD_BINDGEN RUST_LIB_SRC=$KMOD_RUST_LIB_SRC)

# ---- the kernel, cached by everything that changes it ----------------------------------
src_version=$(dpkg-query -W -f '${Version}' linux-source-6.12)
key=$( { echo "$src_version"; $KMOD_RUSTC --version; $KMOD_BINDGEN --version;
         cat "$KMOD_DIR/kernel/config.fragment" "$KMOD_DIR/kernel/bindings_helper.patch"; } \
       | sha256sum | cut -c1-16)
KDIR=$DAVINCI_KMOD_CACHE/linux-$key
KSRC=$KDIR/linux-source-6.12
KBUILD=$KDIR/build
if [ ! -f "$KBUILD/arch/x86/boot/bzImage" ] || [ ! -f "$KDIR/.complete" ]; then
    say "building Linux $src_version with Rust in $KDIR (once; about 10 minutes on 2 cores)"
    rm -rf "$KDIR"
    mkdir -p "$KDIR" "$KBUILD"
    tar -C "$KDIR" -xf /usr/src/linux-source-6.12.tar.xz
    # 6.12's kernel crate has no miscdevice abstraction and its bindings lack these headers
    # (6.13 added miscdevice.h upstream).
    patch -s -d "$KSRC" -p1 < "$KMOD_DIR/kernel/bindings_helper.patch"
    make -s -C "$KSRC" O="$KBUILD" "${MAKE_VARS[@]}" rustavailable
    make -s -C "$KSRC" O="$KBUILD" "${MAKE_VARS[@]}" tinyconfig
    "$KSRC/scripts/kconfig/merge_config.sh" -m -O "$KBUILD" "$KBUILD/.config" \
        "$KMOD_DIR/kernel/config.fragment" >/dev/null
    make -s -C "$KSRC" O="$KBUILD" "${MAKE_VARS[@]}" olddefconfig
    grep -q '^CONFIG_RUST=y' "$KBUILD/.config" || { echo "kmod: CONFIG_RUST did not stick" >&2; exit 1; }
    start=$SECONDS
    make -s -C "$KSRC" O="$KBUILD" "${MAKE_VARS[@]}" -j"$JOBS" bzImage modules 2>&1 \
        | tee "$KDIR/build.log" | grep -iE 'warning|error' || true
    [ -f "$KBUILD/arch/x86/boot/bzImage" ] || { echo "kmod: the kernel did not build (see $KDIR/build.log)" >&2; exit 1; }
    touch "$KDIR/.complete"
    say "kernel built in $((SECONDS - start)) s"
    # Kernels built for an older key (another config, rustc or bindgen) are about 2 GB each.
    for old in "$DAVINCI_KMOD_CACHE"/linux-*; do
        [ "$old" = "$KDIR" ] || { say "removing the stale kernel build $old"; rm -rf "$old"; }
    done
fi
export KSRC KBUILD KMOD_BINDGEN KMOD_RUST_LIB_SRC KMOD_RUSTC
