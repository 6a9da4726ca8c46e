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

# shellcheck source=lib/qemu-guest.sh
source "$ROOT/scripts/lib/qemu-guest.sh"
QG_NAME=ivshmem
qg_usage "$0" "${1:-}"

t0=$SECONDS
qg_kernel
say() { printf '==> ivshmem: %s\n' "$*"; }
say "test kernel ready ($((SECONDS - t0)) s)"
rm -rf "$WORK"
mkdir -p "$WORK"

# ---- the programs ------------------------------------------------------------------------
t=$SECONDS
(cd "$ROOT" && cargo build --release --locked -q -p davinci-ivshmem --example ivshmem-echo) \
    >"$WORK/build-echo.log" 2>&1 ||
    { cat "$WORK/build-echo.log"; echo "ivshmem: ivshmem-echo does not build" >&2; exit 1; }
ECHO=$TARGET/release/examples/ivshmem-echo
qg_static_example davinci-ivshmem ivshmem-guest
say "programs built ($((SECONDS - t)) s; the guest's for $QG_GUEST_TARGET, static)"

# ---- the initramfs -----------------------------------------------------------------------
qg_initramfs ismoke "$WORK/ivshmem-guest"

# ---- the device and the boot -------------------------------------------------------------
SOCK=$WORK/ivshmem.sock
"$ECHO" --socket "$SOCK" --size "$SHM_SIZE" --vectors "$VECTORS" --accept-timeout 60 \
    >"$WORK/echo.log" 2>&1 &
echo_pid=$!
trap 'kill "$echo_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || { cat "$WORK/echo.log"; echo "ivshmem: ivshmem-echo did not listen on $SOCK" >&2; exit 1; }
LOG=$WORK/serial.log
qg_boot "$LOG" -chardev "socket,path=$SOCK,id=ivsh" \
    -device "ivshmem-doorbell,chardev=ivsh,vectors=$VECTORS"
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
qg_verdict "$LOG" 'ivshmem-guest: ALL PASSED'
[ "$echo_rc" = 0 ] || bad "ivshmem-echo exited with $echo_rc"
grep -qx 'ivshmem-echo: peer 1 connected' "$WORK/echo.log" || bad "QEMU did not connect to ivshmem-echo as peer 1"
grep -qx 'ivshmem-echo: no peers left; doorbells per vector \[1, 1, 0, 100\]' "$WORK/echo.log" ||
    bad "ivshmem-echo did not count exactly the guest's doorbells"
if [ "$fail" -ne 0 ]; then
    echo "ivshmem: the guest log is $LOG, the host's $WORK/echo.log"
    exit 1
fi
say "PASS: the guest rang the doorbells of ivshmem-doorbell from user space and saw the host's answers in BAR2 ($((SECONDS - t0)) s in all)"
