#!/usr/bin/env bash
# scripts/pci-smoke.sh: davinci.ko as the PCI driver of QEMU's ivshmem-doorbell device, served
# by a host process of ours (ivshmem-echo), with MSI-X interrupts counted in the guest's kernel.
#
#   1. takes the test kernel of scripts/kmod-test.sh (scripts/kmod/toolchain.sh: installed
#      and built once, cached; it needs CONFIG_PCI and CONFIG_PCI_MSI) and builds davinci.ko
#      as that script does (scripts/kmod/build-module.sh, no warnings allowed; or takes the one
#      it built, DAVINCI_KMOD_BUILT=DIR);
#   2. takes the host device, the example ivshmem-echo, from the test build: it answers every doorbell
#      on vector v with one interrupt on vector v in the guest;
#   3. packs busybox and davinci.ko into an initramfs whose /init (below) runs the checks;
#   4. starts ivshmem-echo on a Unix socket (1 MiB of shared memory, 4 vectors) and boots
#      QEMU (TCG, 2 CPUs) with
#        -chardev socket,path=SOCKET,id=ivsh -device ivshmem-doorbell,chardev=ivsh,vectors=4
#      and an ivshmem-plain device (same ids, no MSI-X: probe must decline it, logged).
#      In the guest: insmod davinci.ko pci_hooks=1 (ivshmem-echo is not a davinci device,
#      which the driver otherwise refuses); the driver must bind the device
#      (/sys/bus/pci/drivers/davinci/0000:00:NN.0) with 4 MSI-X vectors, and its debugfs
#      file shows ivshmem-echo's magic at BAR2 offset 0; the test hook rings the host's
#      doorbell 10 times on vector 1 and 25 times on vector 3, each time waiting (up to 30 s)
#      for that vector's interrupt, and the counts must be exactly 0 10 0 25; the device is then
#      removed through sysfs (the driver's remove, as on a surprise removal) and found again
#      by a rescan (probe again, counts from 0), rung 5 times on vector 0 (5 0 0 0);
#      /dev/davinci0 and /dev/davinci1 are there throughout;
#   5. when the guest says so, the script kills ivshmem-echo (SIGKILL: a crashed device
#      process) while the driver is bound; the guest rings vector 2 once a second until a
#      doorbell gets no interrupt (ETIMEDOUT after 2 s: QEMU keeps the device, its doorbell
#      writes reach an eventfd nobody reads), checks the device's debugfs file still reads,
#      then rmmods the module (the driver unbinds, the vectors and mappings go); insmod with
#      pci_devices=9 must fail, with pci_devices=0 the device must be refused (logged, the
#      unwinding of a probe that failed after its vectors were allocated) while /dev/davinci0
#      is there, and rmmod again;
#   6. passes only if the guest printed "psmoke: ALL PASSED" and no FAIL line, the kernel
#      (KASAN, lockdep) logged no warning, BUG, oops or leak, the module's bind, detach and
#      unload lines are there, and ivshmem-echo raised exactly the interrupts counted (5, 10
#      and 25 on vectors 0, 1 and 3, one per doorbell).
#
# Environment: DAVINCI_PCI_WORK (build directory, default target/pci-smoke under
# CARGO_TARGET_DIR or the repository), DAVINCI_KMOD_CACHE (as for scripts/kmod-test.sh),
# DAVINCI_QEMU_TIMEOUT (seconds, default 400).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TARGET" in /*) ;; *) TARGET=$ROOT/$TARGET ;; esac
WORK=${DAVINCI_PCI_WORK:-$TARGET/pci-smoke}
QEMU_TIMEOUT=${DAVINCI_QEMU_TIMEOUT:-400}
VECTORS=4
SHM_SIZE=$((1 << 20))

QG_NAME=pci
# shellcheck source=lib/qemu-guest.sh
source "$ROOT/scripts/lib/qemu-guest.sh"
qg_usage "$0" "${1:-}"

t0=$SECONDS
qg_kernel
# (After the toolchain, which has a say() of its own.)
say() { printf '==> pci: %s\n' "$*"; }
grep -q '^CONFIG_DEBUG_FS=y' "$KBUILD/.config" ||
    { echo "pci: the test kernel has no CONFIG_DEBUG_FS (the driver's test hooks are there)" >&2; exit 1; }
say "test kernel ready ($((SECONDS - t0)) s)"
rm -rf "$WORK"
mkdir -p "$WORK"

# ---- the module and the host device ------------------------------------------------------
t=$SECONDS
if [ -n "${DAVINCI_KMOD_BUILT:-}" ] && [ -f "$DAVINCI_KMOD_BUILT/davinci.ko" ]; then
    # The module scripts/kmod-test.sh has just built (scripts/test.sh passes it on).
    rm -rf "$WORK/module" && cp -r "$DAVINCI_KMOD_BUILT" "$WORK/module"
else
    bash "$ROOT/scripts/kmod/build-module.sh" "$WORK/module" >/dev/null
fi
if grep -qiE 'warning|error' "$WORK/module/build.log"; then
    echo "pci: the module build printed warnings (see $WORK/module/build.log); they are errors here" >&2
    exit 1
fi
# ivshmem-echo as the test command's build made it (`cargo test --workspace` builds examples).
ECHO=$(bash "$ROOT/scripts/test-artifacts.sh" | awk '$1 == "example" && $2 == "ivshmem-echo" { print $3 }' | tail -n1)
[ -n "$ECHO" ] && [ -x "$ECHO" ] ||
    { echo "pci: the test build has no ivshmem-echo (run cargo test --workspace first)" >&2; exit 1; }
say "davinci.ko and ivshmem-echo built ($((SECONDS - t)) s)"

# ---- the initramfs -----------------------------------------------------------------------
cat >"$WORK/init" <<'EOF'
#!/bin/sh
# /init of scripts/pci-smoke.sh's guest: davinci.ko bound to ivshmem-doorbell.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t debugfs debugfs /sys/kernel/debug
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
echo "psmoke: kernel $(uname -r)"
for d in /sys/bus/pci/devices/*; do
    echo "psmoke: pci $(basename "$d") $(cat "$d/vendor"):$(cat "$d/device")"
done
# pci_hooks=1: ivshmem-echo is no davinci device, which the driver binds only for the hooks.
insmod /davinci.ko pci_hooks=1 || fail "insmod exited $?"
[ -c /dev/davinci0 ] && [ -c /dev/davinci1 ] || fail "no /dev/davinci0 and davinci1"
# The bound device: its name under the driver.
bound() { ls -d /sys/bus/pci/drivers/davinci/0000:* 2>/dev/null; }
dev=$(bound)
case "$dev" in
    /sys/bus/pci/drivers/davinci/0000:00:*) echo "psmoke: bound $dev" ;;
    *) fail "the driver bound '$dev', not one device" ;;
esac
name=$(basename "$dev")
dbg=/sys/kernel/debug/davinci/$name
show() { while read -r l; do echo "psmoke: $1 info: $l"; done <"$dbg/info"; }
field() { grep "^$1 " "$dbg/info" | cut -d' ' -f2-; }
# Each doorbell waits up to 30 s for its interrupt: a slow host is not a failure.
ring() {
    if echo "$1 $2 30000" >"$dbg/ring"; then echo "psmoke: rang vector $1 $2 times, each answered"
    else fail "ringing vector $1 $2 times"; fi
}
show bound
[ "$(field vectors)" = 4 ] || fail "vectors: '$(field vectors)', not 4"
[ "$(field bar0)" = 256 ] || fail "BAR0 '$(field bar0)' bytes, not 256"
[ "$(field bar2)" = 1048576 ] || fail "BAR2 '$(field bar2)' bytes, not 1048576"
[ "$(field shm0)" = 0x4f484345 ] || fail "BAR2 offset 0 is '$(field shm0)', not ivshmem-echo's magic"
[ "$(field peer)" = 1 ] || fail "peer id '$(field peer)', not 1"
ring 1 10
ring 3 25
show rung
[ "$(field irqs)" = "0 10 0 25" ] || fail "interrupts per vector '$(field irqs)', not '0 10 0 25'"
# The device goes (the driver's remove, as on hot unplug) and comes back (probe again).
echo 1 >"/sys/bus/pci/devices/$name/remove"
[ -z "$(bound)" ] || fail "still bound after the device's removal: $(bound)"
[ -d "$dbg" ] && fail "$dbg still there after the removal"
echo 1 >/sys/bus/pci/rescan
[ "$(bound)" = "$dev" ] || fail "not bound again after the rescan: '$(bound)'"
ring 0 5
show rebound
[ "$(field irqs)" = "5 0 0 0" ] || fail "interrupts per vector after rebinding '$(field irqs)', not '5 0 0 0'"
# The host device process dies (the script kills it on this line).
echo "psmoke: kill the host now"
gone=
for i in $(seq 60); do
    sleep 1
    if ! echo "2 1 2000" >"$dbg/ring" 2>/dev/null; then gone=$i; break; fi
done
if [ -n "$gone" ]; then echo "psmoke: a doorbell got no interrupt (try $gone): the host is gone"
else fail "every doorbell was still answered 60 s after the host was killed"; fi
show "host gone"
[ -c /dev/davinci0 ] || fail "/dev/davinci0 went with the host"
rmmod davinci || fail "rmmod exited $?"
[ -z "$(bound)" ] || fail "still bound after rmmod"
echo "psmoke: pci devices after rmmod: $(ls /sys/bus/pci/devices | tr '\n' ' ')"
# The bound on PCI devices: out of range refused at load, 0 refuses the device at probe.
insmod /davinci.ko pci_devices=9 2>/dev/null && fail "insmod accepted pci_devices=9"
insmod /davinci.ko pci_devices=0 pci_hooks=1 || fail "insmod pci_devices=0 exited $?"
[ -z "$(bound)" ] || fail "bound with pci_devices=0: $(bound)"
[ -c /dev/davinci0 ] || fail "no /dev/davinci0 with pci_devices=0"
rmmod davinci || fail "rmmod (pci_devices=0) exited $?"
dmesg | while read -r line; do echo "kmsg: $line"; done
if [ "$fails" -eq 0 ]; then echo "psmoke: ALL PASSED"; else echo "psmoke: $fails FAILED"; fi
reboot -f
EOF
qg_initramfs_with "$WORK/init" \
    "sh mount echo cat ls basename dmesg reboot uname insmod rmmod sleep grep cut seq tr" \
    "/davinci.ko=$WORK/module/davinci.ko"

# ---- the device and the boot -------------------------------------------------------------
SOCK=$WORK/ivshmem.sock
"$ECHO" --socket "$SOCK" --size "$SHM_SIZE" --vectors "$VECTORS" --accept-timeout 60 \
    >"$WORK/echo.log" 2>&1 &
echo_pid=$!
trap 'kill "$echo_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || { cat "$WORK/echo.log"; echo "pci: ivshmem-echo did not listen on $SOCK" >&2; exit 1; }
LOG=$WORK/serial.log
killed=
# The guest's cue: kill the host device process while the driver is bound.
host_cue() {
    if [ -z "$killed" ] && grep -q '^psmoke: kill the host now' "$1"; then
        kill -KILL "$echo_pid" 2>/dev/null
        wait "$echo_pid" 2>/dev/null
        killed=$SECONDS
        say "killed ivshmem-echo (pid $echo_pid) while the driver is bound"
    fi
}
QG_SMP=2 QG_ON_CUE=host_cue qg_boot "$LOG" \
    -chardev "socket,path=$SOCK,id=ivsh" \
    -device "ivshmem-doorbell,chardev=ivsh,vectors=$VECTORS" \
    -object memory-backend-ram,id=plainmem,size=1M -device ivshmem-plain,memdev=plainmem
trap - EXIT
kill "$echo_pid" 2>/dev/null || true
sed 's/^/host: /' "$WORK/echo.log"

# ---- the verdict -------------------------------------------------------------------------
qg_verdict "$LOG" 'psmoke: ALL PASSED'
[ -n "$killed" ] || bad "the guest never asked for the host to be killed"
grep -q 'davinci: ABI ' "$LOG" || bad "no module load message"
[ "$(grep -c 'davinci 0000:00:.*: bound: peer 1, BAR0 256 B, BAR2 1048576 B (memremap wb), 4 MSI-X vectors' "$LOG")" -ge 2 ] ||
    bad "the driver did not log binding the device twice (load, rescan)"
grep -q 'davinci: pci slot 0: detached (peer 1, interrupts per vector \[0, 10, 0, 25\])' "$LOG" ||
    bad "no detach line with the first binding's counts"
grep -q 'davinci: unloaded' "$LOG" || bad "no module unload message"
grep -q 'davinci 0000:00:.*: no MSI-X capability (ivshmem-plain?): not an ivshmem-doorbell device, not bound' "$LOG" ||
    bad "probe did not decline the ivshmem-plain device"
grep -q 'davinci: pci_devices=9: must be 0 to 8' "$LOG" || bad "pci_devices=9 was not refused at load"
grep -q 'davinci: pci 00:..\..: refused: 0 ivshmem devices are bound already (the most the module drives: pci_devices=0)' "$LOG" ||
    bad "with pci_devices=0 probe did not refuse the device"
[ "$(grep -c 'davinci: unloaded' "$LOG")" -eq 2 ] || bad "the module was not unloaded twice"
# One interrupt raised per doorbell, on the vectors the guest counted (vector 2: the probes
# after the kill, whatever got through before it).
last_raised() { sed -n "s/^ivshmem-echo: raised vector $1 in 1 peer(s) (raised on $1: \([0-9]*\))$/\1/p" "$WORK/echo.log" | tail -n1; }
for want in 0:5 1:10 3:25; do
    v=${want%%:*} n=${want#*:}
    [ "$(last_raised "$v")" = "$n" ] || bad "ivshmem-echo raised '$(last_raised "$v")' interrupts on vector $v, the guest counted $n"
done
if grep -qE 'ivshmem-echo: ([2-9]|[0-9]{2,}) doorbell\(s\)' "$WORK/echo.log"; then
    bad "ivshmem-echo saw doorbells coalesced: the guest rang before its interrupt came"
fi
if [ "$fail" -ne 0 ]; then
    echo "pci: the guest log is $LOG, the host's $WORK/echo.log"
    exit 1
fi
say "PASS: davinci.ko bound ivshmem-doorbell (4 MSI-X vectors, BAR2 mapped), counted one interrupt per doorbell (5, 10, 25), unbound on removal, bound again on rescan, survived the host's death, declined ivshmem-plain, refused a device over pci_devices and unloaded cleanly ($((SECONDS - t0)) s in all)"
