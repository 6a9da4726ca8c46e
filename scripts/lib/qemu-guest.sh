#!/usr/bin/env bash
# scripts/lib/qemu-guest.sh: what the QEMU smokes (scripts/ivshmem-smoke.sh,
# scripts/pcidev-smoke.sh, scripts/pci-smoke.sh) share, sourced by them after they set ROOT,
# TARGET and WORK:
#
#   qg_usage SCRIPT ARG        --help (the script's header comment) or "no arguments"
#   qg_kernel                  the test kernel (scripts/kmod/toolchain.sh; sets KBUILD),
#                              checked for CONFIG_PCI_MSI
#   qg_static_example PKG EX   builds example EX of PKG statically for the guest (musl when
#                              installed, else glibc crt-static), copied to $WORK/EX stripped
#   qg_test_example EX         example EX as the test command's build made it (`cargo test
#                              --workspace` builds every example; nothing is built again),
#                              copied to $WORK/EX stripped; qg_initramfs* then pack the C
#                              libraries it loads (ldd) at their paths
#   qg_initramfs TAG PROGRAM   $WORK/initramfs.cpio.gz: busybox, PROGRAM as /bin/NAME and
#                              an /init that mounts proc, sysfs and devtmpfs, lists the PCI
#                              devices, runs NAME, then prints the kernel log ("kmsg: "
#                              lines) and "TAG: done" and powers off; its lines start "TAG: "
#   qg_initramfs_with INIT APPLETS [GUEST=HOST...]
#                              the same from the caller's /init (a file), busybox with the
#                              APPLETS (a space-separated list) and each HOST file at GUEST
#   qg_boot LOG QEMU-ARGS...   boots the kernel and the initramfs under QEMU (TCG, $QG_SMP
#                              CPUs, default 1; $QG_MEM of memory, default 512M; $QG_APPEND
#                              added to the kernel's command line; serial console on stdout,
#                              teed to LOG) within $QEMU_TIMEOUT seconds; while it runs, calls
#                              $QG_ON_CUE LOG (if set) five times a second, for the guest's
#                              cues; sets qemu_rc ($QG_INITRD: another initramfs than
#                              $WORK/initramfs.cpio.gz)
#   qg_verdict LOG PASSLINE    the guest's verdict in LOG: PASSLINE printed, no "FAIL: "
#                              line, no kernel warning, BUG, oops, leak, hung task or RCU
#                              stall, QEMU exited 0; calls
#                              `bad` (defined here: counts into $fail) for each miss
#
# The caller defines say() (its log prefix) and QG_NAME (its name in messages).

qg_usage() {
    case "${2:-}" in
        -h | --help)
            sed -n '2,/^set -euo/p' "$1" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        "") ;;
        *)
            echo "scripts/$(basename "$1"): takes no arguments (got '$2'); --help says what it does" >&2
            exit 2
            ;;
    esac
}

qg_kernel() {
    # shellcheck source=../kmod/toolchain.sh
    source "$ROOT/scripts/kmod/toolchain.sh"
    grep -q '^CONFIG_PCI_MSI=y' "$KBUILD/.config" || {
        echo "$QG_NAME: the test kernel has no CONFIG_PCI_MSI (kmod-rust/kernel/config.fragment)" >&2
        exit 1
    }
}

qg_static_example() {
    local pkg=$1 ex=$2 target flags bin
    if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
        target=x86_64-unknown-linux-musl
        flags=
    else
        target=x86_64-unknown-linux-gnu
        flags="-C target-feature=+crt-static"
    fi
    (cd "$ROOT" && RUSTFLAGS="$flags" cargo build --release --locked -q \
        --target "$target" -p "$pkg" --example "$ex") >"$WORK/build-$ex.log" 2>&1 ||
        { cat "$WORK/build-$ex.log"; echo "$QG_NAME: $ex does not build" >&2; exit 1; }
    bin=$TARGET/$target/release/examples/$ex
    file -L "$bin" | grep -qE 'statically linked|static-pie linked' ||
        { echo "$QG_NAME: $bin is not static: $(file -L "$bin")" >&2; exit 1; }
    objcopy --strip-debug "$bin" "$WORK/$ex"
    QG_GUEST_TARGET=$target
}

qg_test_example() {
    local ex=$1 bin
    bin=$(bash "$ROOT/scripts/test-artifacts.sh" | awk -v n="$ex" '$1 == "example" && $2 == n { print $3 }' | tail -n1)
    [ -n "$bin" ] && [ -x "$bin" ] ||
        { echo "$QG_NAME: the test build has no example $ex (run cargo test --workspace first)" >&2; exit 1; }
    objcopy --strip-debug "$bin" "$WORK/$ex"
}

qg_initramfs() {
    local tag=$1 prog=$2 name
    name=$(basename "$prog")
    cat >"$WORK/init" <<INIT
#!/bin/sh
# /init of scripts/lib/qemu-guest.sh's guest: the PCI view of the device, then $name.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "$tag: kernel \$(uname -r)"
for d in /sys/bus/pci/devices/*; do
    echo "$tag: pci \$(basename "\$d") \$(cat "\$d/vendor"):\$(cat "\$d/device") class \$(cat "\$d/class")"
done
/bin/$name
echo "$tag: $name exited \$?"
dmesg | while read -r line; do echo "kmsg: \$line"; done
echo "$tag: done"
reboot -f
INIT
    qg_initramfs_with "$WORK/init" "sh mount echo cat ls basename dmesg reboot uname" "/bin/$name=$prog"
}

qg_initramfs_with() {
    local init=$1 applets=$2 bb=/bin/busybox list=$WORK/initramfs.list a d f mode
    shift 2
    file -L "$bb" | grep -q 'statically linked' ||
        { echo "$QG_NAME: $bb is not static (apt-get install busybox-static)" >&2; exit 1; }
    # The C libraries (and the loader) a dynamically linked program loads, at the paths ldd
    # names, with their directories.
    local libs=() lib p c
    for f in "$@"; do
        file -L "${f#*=}" | grep -q 'dynamically linked' || continue
        while read -r lib; do libs+=("$lib"); done < <(ldd "${f#*=}" | grep -oE '/[^ ]+' | sort -u)
    done
    {
        for d in /dev /proc /sys /bin; do echo "dir $d 755 0 0"; done
        for lib in ${libs[@]+"${libs[@]}"}; do dirname "$lib"; done | sort -u | while read -r d; do
            p=
            for c in ${d//\// }; do p=$p/$c; echo "dir $p 755 0 0"; done
        done | { grep -vxE 'dir /(dev|proc|sys|bin) 755 0 0' || true; } | sort -u
        for lib in ${libs[@]+"${libs[@]}"}; do echo "file $lib $(readlink -f "$lib") 755 0 0"; done | sort -u
        echo "nod /dev/console 600 0 0 c 5 1"
        echo "nod /dev/null 666 0 0 c 1 3"
        echo "file /bin/busybox $bb 755 0 0"
        for a in $applets; do
            echo "slink /bin/$a /bin/busybox 777 0 0"
        done
        echo "file /init $init 755 0 0"
        for f in "$@"; do
            mode=644
            case ${f%%=*} in /bin/*) mode=755 ;; esac
            echo "file ${f%%=*} ${f#*=} $mode 0 0"
        done
    } >"$list"
    "$KBUILD/usr/gen_init_cpio" "$list" | gzip -1 >"$WORK/initramfs.cpio.gz"
}

qg_boot() {
    local log=$1 t=$SECONDS
    shift
    # tsc=reliable: under TCG the guest's clocksource watchdog finds the TSC "unstable" when
    # the host is busy and logs it on the console in the middle of a test's output line (and
    # the fallback clocksource slows the guest down).
    local qemu=(qemu-system-x86_64 -accel tcg -cpu max -m "${QG_MEM:-512M}" -smp "${QG_SMP:-1}"
                -nodefaults -display none -serial stdio -no-reboot
                -kernel "$KBUILD/arch/x86/boot/bzImage" -initrd "${QG_INITRD:-$WORK/initramfs.cpio.gz}"
                -append "console=ttyS0 panic=-1 oops=panic loglevel=5 tsc=reliable${QG_APPEND:+ $QG_APPEND}"
                "$@")
    say "$(qemu-system-x86_64 --version | head -n1)"
    say "booting: ${qemu[*]}"
    : >"$log"
    set +e
    # tr line-buffered (stdbuf -oL): the loop below watches the log for the guest's cues; a
    # pipe would otherwise hold a line back in a 4 KiB block.
    (timeout "$QEMU_TIMEOUT" "${qemu[@]}" </dev/null | stdbuf -oL tr -d '\r' | tee "$log"
     exit "${PIPESTATUS[0]}") &
    local qemu_pid=$!
    while kill -0 "$qemu_pid" 2>/dev/null; do
        [ -z "${QG_ON_CUE:-}" ] || "$QG_ON_CUE" "$log"
        sleep 0.2
    done
    wait "$qemu_pid"
    qemu_rc=$?
    set -e
    say "QEMU exited with $qemu_rc after $((SECONDS - t)) s"
}

fail=0
bad() { echo "$QG_NAME: FAIL: $*" >&2; fail=1; }

qg_verdict() {
    local log=$1 pass=$2
    [ "$qemu_rc" -eq 0 ] || bad "QEMU exited with $qemu_rc (124: the guest did not finish in ${QEMU_TIMEOUT}s)"
    grep -qx "$pass" "$log" || bad "the guest did not report '$pass'"
    if grep -n '^FAIL: ' "$log"; then bad "the guest failed the checks above"; fi
    if grep -nE 'WARNING:|BUG:|Oops|Call Trace|Kernel panic|general protection|davinci: leak|blocked for more than|detected stall' "$log"; then
        bad "the kernel logged the warnings above"
    fi
}
