#!/usr/bin/env bash
# Builds the operators' container images offline: davinci-rs/davinci-mockd,
# davinci-rs/davinci-exporter, davinci-rs/davinci-device-plugin and davinci-rs/davinci-workload
# (the example pod's smoke test), tagged with the workspace's version (the names the DaemonSets use; docs/operators.md, "Container images").
#
# Each image is FROM scratch: the release binary (the mockd image also has davinci-smi, for
# `cdi generate`), the shared libraries it links (from ldd), /etc/passwd and /etc/group with
# nobody, and /tmp. Nothing is pulled from a registry.
#
#   scripts/images.sh [--stage-only] [--engine podman|docker] [TOOL...]
#
#   --stage-only   assemble target/images/TOOL/rootfs and stop (no container engine needed)
#   --engine E     the engine to build with [default: podman, else docker]
#   TOOL           davinci-mockd, davinci-exporter, davinci-device-plugin, davinci-workload
#                  [default: all four]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

stage_only=0
engine=""
tools=()
while [ $# -gt 0 ]; do
    case "$1" in
        --stage-only) stage_only=1 ;;
        --engine) engine="${2:?--engine needs podman or docker}"; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        davinci-mockd|davinci-exporter|davinci-device-plugin|davinci-workload) tools+=("$1") ;;
        *) echo "scripts/images.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ ${#tools[@]} -gt 0 ] || tools=(davinci-mockd davinci-exporter davinci-device-plugin davinci-workload)
if [ "$stage_only" = 0 ] && [ -z "$engine" ]; then
    if command -v podman >/dev/null 2>&1; then engine=podman
    elif command -v docker >/dev/null 2>&1; then engine=docker
    else
        echo "scripts/images.sh: neither podman nor docker is installed (--stage-only assembles the root file systems without one)" >&2
        exit 1
    fi
fi

version=$(awk -F'"' '/^\[workspace.package\]/ { p = 1 } p && /^version/ { print $2; exit }' Cargo.toml)
[ -n "$version" ] || { echo "scripts/images.sh: no workspace version in Cargo.toml" >&2; exit 1; }

packages=()
for t in "${tools[@]}"; do packages+=(-p "$t"); done
# The mockd image carries davinci-smi too.
packages+=(-p davinci-smi)
echo "==> building ${tools[*]} (release)"
cargo build --release --locked "${packages[@]}"

# Copies FILE and every library ldd says it needs into ROOT, at the same paths.
copy_with_libs() {
    local file=$1 root=$2 lib
    install -D -m 0755 "$file" "$root/usr/local/bin/$(basename "$file")"
    # `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` and the loader's own line,
    # `/lib64/ld-linux-x86-64.so.2 (0x...)` (POSIX awk: no \s).
    for lib in $(ldd "$file" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
        install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
    done
}

for t in "${tools[@]}"; do
    out=target/images/$t
    root=$out/rootfs
    rm -rf "$out"
    mkdir -p "$root/etc" "$root/tmp"
    chmod 1777 "$root/tmp"
    copy_with_libs "target/release/$t" "$root"
    if [ "$t" = davinci-mockd ]; then
        copy_with_libs target/release/davinci-smi "$root"
    fi
    ln -s "$t" "$root/usr/local/bin/entrypoint"
    printf 'root:x:0:0:root:/:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnobody:x:65534:\n' >"$root/etc/group"
    cp deploy/images/Containerfile "$out/Containerfile"
    echo "==> $t: staged $root ($(du -sh "$root" | cut -f1))"
    if [ "$stage_only" = 0 ]; then
        "$engine" build -f "$out/Containerfile" --build-arg "TOOL=$t" -t "davinci-rs/$t:$version" "$out"
        echo "==> $t: built davinci-rs/$t:$version"
    fi
done
