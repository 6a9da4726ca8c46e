#!/usr/bin/env bash
# scripts/pcidev-smoke.sh: davinci-pcidev, the davinci PCI device outside the guest, behind
# QEMU's real ivshmem-doorbell device, driven from a guest with no kernel driver.
#
#   1. takes the test kernel of scripts/kmod-test.sh (scripts/kmod/toolchain.sh: installed
#      and built once, cached; it needs CONFIG_PCI and CONFIG_PCI_MSI);
#   2. takes davinci-pcidev and the guest program from the test build (the example pcidev-guest of
#      davinci-pcidev, linked statically (x86_64-unknown-linux-musl when that target is
#      installed, else glibc with crt-static);
#   3. packs busybox and pcidev-guest into an initramfs whose /init runs it;
#   4. starts `davinci-pcidev --socket SOCKET --size 1M` (it must listen before QEMU starts)
#      and boots QEMU (TCG) with
#        -chardev socket,path=SOCKET,id=dv -device ivshmem-doorbell,chardev=dv,vectors=2
#      In the guest, pcidev-guest finds the device (1af4:1110) in /sys/bus/pci/devices,
#      enables it, maps BAR0 (registers) and BAR2 (the device's memory) through sysfs,
#      validates BAR2's header (and sees the heartbeat move), and through the admin queue
#      (the admin doorbell, BAR0 offset 12 `0 << 16 | 0`, after each request) OPENs a
#      client, GET_INFO, CREATE_CONTEXT, ALLOC_MEMORY, CREATE_STREAM, MMAP_TARGET of the
#      rings and the memory; it submits NOP, FILL, NOP on the command ring, rings the data
#      doorbell (`0 << 16 | 1`), polls the event ring (no driver, no interrupts), checks the
#      FILL's bytes in BAR2, runs 300 NOPs in small batches (doorbell only when the ring's
#      NEED_WAKEUP asks), and tears down (DESTROY_STREAM, FREE_MEMORY, CLOSE);
#      Then QEMU boots a second time against the same device process (a restarted guest:
#      it must find a fresh device and pass the same checks);
#   5. passes only if each guest printed "pcidev-guest: ALL PASSED" and no FAIL line, the
#      kernel logged no warning, BUG or oops, and davinci-pcidev, sent SIGTERM after the
#      second QEMU exited, stopped with status 0, removed its socket and counted both
#      guests gone, no malformed admin entry and the data doorbells.
#
# MSI-X delivery is not checked: it needs a kernel driver (the guest has none here);
# davinci-pcidev raises its vectors anyway and QEMU drops them while MSI-X is disabled.
#
# Environment: DAVINCI_PCIDEV_WORK (build directory, default target/pcidev-smoke under
# CARGO_TARGET_DIR or the repository), DAVINCI_KMOD_CACHE (as for scripts/kmod-test.sh),
# DAVINCI_QEMU_TIMEOUT (seconds, default 300).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TARGET" in /*) ;; *) TARGET=$ROOT/$TARGET ;; esac
WORK=${DAVINCI_PCIDEV_WORK:-$TARGET/pcidev-smoke}
QEMU_TIMEOUT=${DAVINCI_QEMU_TIMEOUT:-300}

# shellcheck source=lib/qemu-guest.sh
source "$ROOT/scripts/lib/qemu-guest.sh"
QG_NAME=pcidev
qg_usage "$0" "${1:-}"

t0=$SECONDS
qg_kernel
say() { printf '==> pcidev: %s\n' "$*"; }
say "test kernel ready ($((SECONDS - t0)) s)"
rm -rf "$WORK"
mkdir -p "$WORK"

# ---- the programs ------------------------------------------------------------------------
t=$SECONDS
# Both from the test command's build (`cargo test --workspace`): nothing is built again.
PCIDEV=$(bash "$ROOT/scripts/test-artifacts.sh" | awk '$1 == "bin" && $2 == "davinci-pcidev" { print $3 }' | tail -n1)
[ -n "$PCIDEV" ] && [ -x "$PCIDEV" ] ||
    { echo "pcidev: the test build has no davinci-pcidev (run cargo test --workspace first)" >&2; exit 1; }
qg_test_example pcidev-guest
say "programs ready ($((SECONDS - t)) s, from the test build)"

# ---- the initramfs -----------------------------------------------------------------------
qg_initramfs psmoke "$WORK/pcidev-guest"

# ---- the device and the boot -------------------------------------------------------------
SOCK=$WORK/pcidev.sock
"$PCIDEV" --socket "$SOCK" --size 1M >"$WORK/pcidev.log" 2>&1 &
dev_pid=$!
trap 'kill "$dev_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || { cat "$WORK/pcidev.log"; echo "pcidev: davinci-pcidev did not listen on $SOCK" >&2; exit 1; }
# Two guests, one after the other: the device outlives its guest, and the second finds a
# fresh device (its admin queue empty, the first guest's clients closed, the heap free).
qemu_rcs=()
for boot in 1 2; do
    qg_boot "$WORK/serial-$boot.log" -chardev "socket,path=$SOCK,id=dv" \
        -device "ivshmem-doorbell,chardev=dv,vectors=2"
    qemu_rcs+=("$qemu_rc")
done
# SIGTERM stops the device.
dev_rc=
if kill -TERM "$dev_pid" 2>/dev/null; then
    for _ in $(seq 100); do
        if ! kill -0 "$dev_pid" 2>/dev/null; then
            set +e; wait "$dev_pid"; dev_rc=$?; set -e
            break
        fi
        sleep 0.1
    done
else
    set +e; wait "$dev_pid"; dev_rc="$? (it had exited before SIGTERM)"; set -e
fi
trap - EXIT
if [ -z "$dev_rc" ]; then
    kill -KILL "$dev_pid" 2>/dev/null || true
    dev_rc="timeout (still running 10 s after SIGTERM)"
fi
sed 's/^/host: /' "$WORK/pcidev.log"

# ---- the verdict -------------------------------------------------------------------------
for boot in 1 2; do
    qemu_rc=${qemu_rcs[boot - 1]}
    qg_verdict "$WORK/serial-$boot.log" 'pcidev-guest: ALL PASSED'
done
[ "$dev_rc" = 0 ] || bad "davinci-pcidev exited with $dev_rc"
[ ! -e "$SOCK" ] || bad "davinci-pcidev left its socket $SOCK behind"
grep -qx 'davinci-pcidev: stopped' "$WORK/pcidev.log" || bad "davinci-pcidev did not say it stopped"
# Its counters: both guests seen going, nothing malformed, doorbells arriving as eventfd
# wake-ups (BAR0 writes in the guest).
grep -qE '^davinci-pcidev: guests gone 2; admin requests [1-9][0-9]* \(0 malformed\); data doorbells [1-9]' \
    "$WORK/pcidev.log" || bad "davinci-pcidev's counters are not those of two guests' work (above)"
if [ "$fail" -ne 0 ]; then
    echo "pcidev: the guests' logs are $WORK/serial-{1,2}.log, the device's $WORK/pcidev.log"
    exit 1
fi
say "PASS: a driver-less guest ran tasks on davinci-pcidev through QEMU's ivshmem-doorbell: admin queue and stream rings in BAR2, doorbells as BAR0 writes ($((SECONDS - t0)) s in all)"
