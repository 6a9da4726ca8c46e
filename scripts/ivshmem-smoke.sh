#!/usr/bin/env bash
# scripts/ivshmem-smoke.sh: QEMU's ivshmem-doorbell PCI device served by a host process of
# ours (davinci-ivshmem), checked from a guest with no driver.
#
#   1. takes the test kernel of scripts/kmod-test.sh (scripts/kmod/toolchain.sh: installed
#      and built once, cached; it needs CONFIG_PCI and CONFIG_PCI_MSI);
#   2. builds the host device, the example ivshmem-echo (release), and the guest program,
#      the example ivshmem-guest, linked statically (x86_64-unknown-linux-musl when that
#      target is installed, else glibc with crt-static);
#   3. packs busybox and ivshmem-guest into an initramfs whose /init runs it;
#   4. starts ivshmem-echo on a Unix socket (1 MiB of shared memory, 4 vectors) and boots
#      QEMU (TCG) with
#        -chardev socket,path=SOCKET,id=ivsh -device ivshmem-doorbell,chardev=ivsh,vectors=4
#      In the guest, ivshmem-guest finds the device (1af4:1110) in /sys/bus/pci/devices,
#      enables it, maps BAR0 (registers) and BAR2 (shared memory) through sysfs, rings peer
#      0's doorbells (BAR0 offset 12) and checks that the host's counters in BAR2 move by
#      exactly the doorbells rung (one on vector 1 with a token the host copies back, 100
#      on vector 3, one on vector 0 after two to a missing peer and vector);
#   5. passes only if the guest printed "ivshmem-guest: ALL PASSED" and no FAIL line, the
#      kernel logged no warning, BUG or oops, and ivshmem-echo saw QEMU go and exited 0 with
#      exactly those doorbells counted ([1, 1, 0, 100] per vector).
#
# MSI-X delivery is not checked: it needs a kernel driver (the guest has none here);
# ivshmem-echo raises the vectors anyway and QEMU drops them while MSI-X is disabled.
#
# Environment: DAVINCI_IVSHMEM_WORK (build directory, default target/ivshmem-smoke under
# CARGO_TARGET_DIR or the repository), DAVINCI_KMOD_CACHE (as for scripts/kmod-test.sh),
# DAVINCI_QEMU_TIMEOUT (seconds, default 300).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TARGET" in /*) ;; *) TARGET=$ROOT/$TARGET ;; esac
WORK=${DAVINCI_IVSHMEM_WORK:-$TARGET/ivshmem-smoke}
QEMU_TIMEOUT=${DAVINCI_QEMU_TIMEOUT:-300}
VECTORS=4
SHM_SIZE=$((1 << 20))

case "${1:-}" in
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    "") ;;
    *)
        echo "scripts/ivshmem-smoke.sh: takes no arguments (got '$1'); --help says what it does" >&2
        exit 2
        ;;
esac

t0=$SECONDS
# shellcheck source=kmod/toolchain.sh
source "$ROOT/scripts/kmod/toolchain.sh"
say() { printf '==> ivshmem: %s\n' "$*"; }
grep -q '^CONFIG_PCI_MSI=y' "$KBUILD/.config" ||
    { echo "ivshmem: the test kernel has no CONFIG_PCI_MSI (kmod-rust/kernel/config.fragment)" >&2; exit 1; }
say "test kernel ready ($((SECONDS - t0)) s)"
rm -rf "$WORK"
mkdir -p "$WORK"

# ---- the programs ------------------------------------------------------------------------
t=$SECONDS
(cd "$ROOT" && cargo build --release --locked -q -p davinci-ivshmem --example ivshmem-echo) \
    >"$WORK/build-echo.log" 2>&1 ||
    { cat "$WORK/build-echo.log"; echo "ivshmem: ivshmem-echo does not build" >&2; exit 1; }
ECHO=$TARGET/release/examples/ivshmem-echo
if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
    guest_target=x86_64-unknown-linux-musl
    guest_flags=
else
    guest_target=x86_64-unknown-linux-gnu
    guest_flags="-C target-feature=+crt-static"
fi
(cd "$ROOT" && RUSTFLAGS="$guest_flags" cargo build --release --locked -q \
    --target "$guest_target" -p davinci-ivshmem --example ivshmem-guest) \
    >"$WORK/build-guest.log" 2>&1 ||
    { cat "$WORK/build-guest.log"; echo "ivshmem: ivshmem-guest does not build" >&2; exit 1; }
GUEST=$TARGET/$guest_target/release/examples/ivshmem-guest
file -L "$GUEST" | grep -qE 'statically linked|static-pie linked' ||
    { echo "ivshmem: $GUEST is not static: $(file -L "$GUEST")" >&2; exit 1; }
objcopy --strip-debug "$GUEST" "$WORK/ivshmem-guest"
say "programs built ($((SECONDS - t)) s; the guest's for $guest_target, static)"

# ---- the initramfs -----------------------------------------------------------------------
BB=/bin/busybox
file -L "$BB" | grep -q 'statically linked' || { echo "ivshmem: $BB is not static (apt-get install busybox-static)" >&2; exit 1; }
cat >"$WORK/init" <<'EOF'
#!/bin/sh
# /init of scripts/ivshmem-smoke.sh's guest: the PCI view of the device, then ivshmem-guest.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "ismoke: kernel $(uname -r)"
for d in /sys/bus/pci/devices/*; do
    echo "ismoke: pci $(basename "$d") $(cat "$d/vendor"):$(cat "$d/device") class $(cat "$d/class")"
done
/bin/ivshmem-guest
echo "ismoke: ivshmem-guest exited $?"
dmesg | while read -r line; do echo "kmsg: $line"; done
echo "ismoke: done"
reboot -f
EOF
list=$WORK/initramfs.list
{
    for d in /dev /proc /sys /bin; do echo "dir $d 755 0 0"; done
    echo "nod /dev/console 600 0 0 c 5 1"
    echo "nod /dev/null 666 0 0 c 1 3"
    echo "file /bin/busybox $BB 755 0 0"
    for a in sh mount echo cat ls basename dmesg reboot uname; do
        echo "slink /bin/$a /bin/busybox 777 0 0"
    done
    echo "file /init $WORK/init 755 0 0"
    echo "file /bin/ivshmem-guest $WORK/ivshmem-guest 755 0 0"
} >"$list"
"$KBUILD/usr/gen_init_cpio" "$list" | gzip -1 >"$WORK/initramfs.cpio.gz"

# ---- the device and the boot -------------------------------------------------------------
SOCK=$WORK/ivshmem.sock
"$ECHO" --socket "$SOCK" --size "$SHM_SIZE" --vectors "$VECTORS" --accept-timeout 60 \
    >"$WORK/echo.log" 2>&1 &
echo_pid=$!
trap 'kill "$echo_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || { cat "$WORK/echo.log"; echo "ivshmem: ivshmem-echo did not listen on $SOCK" >&2; exit 1; }
LOG=$WORK/serial.log
QEMU=(qemu-system-x86_64 -accel tcg -cpu max -m 512M -smp 1
      -nodefaults -display none -serial stdio -no-reboot
      -kernel "$KBUILD/arch/x86/boot/bzImage" -initrd "$WORK/initramfs.cpio.gz"
      -append "console=ttyS0 panic=-1 oops=panic loglevel=5 tsc=reliable"
      -chardev "socket,path=$SOCK,id=ivsh"
      -device "ivshmem-doorbell,chardev=ivsh,vectors=$VECTORS")
say "$(qemu-system-x86_64 --version | head -n1)"
say "booting: ${QEMU[*]}"
t=$SECONDS
set +e
timeout "$QEMU_TIMEOUT" "${QEMU[@]}" </dev/null | tr -d '\r' | tee "$LOG"
qemu_rc=${PIPESTATUS[0]}
set -e
say "QEMU exited with $qemu_rc after $((SECONDS - t)) s"
# QEMU's exit closes its connection: ivshmem-echo sees its last peer go and exits.
echo_rc=
for _ in $(seq 100); do
    if ! kill -0 "$echo_pid" 2>/dev/null; then
        set +e; wait "$echo_pid"; echo_rc=$?; set -e
        break
    fi
    sleep 0.1
done
trap - EXIT
if [ -z "$echo_rc" ]; then
    kill "$echo_pid" 2>/dev/null || true
    echo_rc=timeout
fi
sed 's/^/host: /' "$WORK/echo.log"

# ---- the verdict -------------------------------------------------------------------------
fail=0
bad() { echo "ivshmem: FAIL: $*" >&2; fail=1; }
[ "$qemu_rc" -eq 0 ] || bad "QEMU exited with $qemu_rc (124: the guest did not finish in ${QEMU_TIMEOUT}s)"
grep -qx 'ivshmem-guest: ALL PASSED' "$LOG" || bad "the guest did not report ALL PASSED"
if grep -n '^FAIL: ' "$LOG"; then bad "the guest failed the checks above"; fi
if grep -nE 'WARNING:|BUG:|Oops|Call Trace|Kernel panic|general protection' "$LOG"; then
    bad "the kernel logged the warnings above"
fi
[ "$echo_rc" = 0 ] || bad "ivshmem-echo exited with $echo_rc"
grep -qx 'ivshmem-echo: peer 1 connected' "$WORK/echo.log" || bad "QEMU did not connect to ivshmem-echo as peer 1"
grep -qx 'ivshmem-echo: no peers left; doorbells per vector \[1, 1, 0, 100\]' "$WORK/echo.log" ||
    bad "ivshmem-echo did not count exactly the guest's doorbells"
if [ "$fail" -ne 0 ]; then
    echo "ivshmem: the guest log is $LOG, the host's $WORK/echo.log"
    exit 1
fi
say "PASS: the guest rang the doorbells of ivshmem-doorbell from user space and saw the host's answers in BAR2 ($((SECONDS - t0)) s in all)"
