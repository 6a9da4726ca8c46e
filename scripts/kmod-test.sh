#!/usr/bin/env bash
# scripts/kmod-test.sh: the kernel module under test in a real Linux 6.12 kernel.
#
# On a Debian machine (root, or passwordless sudo, for the packages):
#   1. installs the toolchain and builds the test kernel once, cached outside the repository
#      (scripts/kmod/toolchain.sh; the key covers the kernel version, the config fragment,
#      the bindings patch, rustc and bindgen, so later runs reuse it in seconds);
#   2. builds davinci.ko from kmod-rust/src plus uapi, ring and driver-core as source;
#   3. takes the guest programs from the workspace's test build (`cargo test --workspace`,
#      which the test command has just run, so nothing is built twice): the conformance
#      suite, the kernel-only tests, the million-task run, davinci-smi, davinci-workload,
#      davinci-exporter, davinci-device-plugin and its kubelet stand-in, davinci-testclient,
#      davinci-attacker, davinci-bench (its kernel rows, as a smoke run); and the C quick start
#      over libdavinci, linked statically;
#      stripped of debug information, with the C libraries they load;
#   4. packs them with busybox into an initramfs whose /init is kmod-rust/guest/init.sh;
#   5. boots QEMU (TCG), streams the guest's serial console, and exits 0 only if the guest
#      reported every step passed, every conformance test ran under its own name and passed,
#      and the kernel logged no warning, BUG, oops or leak;
#   6. boots it again with the PCI device (issue 27): davinci-pcidev (the test build's) serves
#      QEMU's ivshmem-doorbell from this side, the module is loaded with no software device
#      (devices=0) and binds it as /dev/davinci0, and the conformance suite, the kernel-only
#      tests, davinci-smi and davinci-workload run on it; then, at the guest's cues, the
#      device process is killed (device loss), the guest unbinds the lost device, and a
#      restarted davinci-pcidev is plugged in as a new PCI device (QMP chardev-add and
#      device_add; the guest's ACPI hotplug), which the module binds as /dev/davinci0 again
#      and the guest runs clients on; last, the
#      restarted process is killed while nothing is in flight, which the module's watchdog
#      must find (a polling client sees its stream stopped with ENODEV); same verdict.
#   7. the chaos device (issue 42), one boot per seed (two at a time): davinci-pcidev
#      --chaos SEED,RATE
#      answers a fraction of admin requests wrongly on purpose (lengths, kinds, offsets,
#      counts, tags, floods, notification words, heartbeat, BAR2 header garbage, bit flips),
#      and davinci-chaos-hammer in the guest drives every ioctl, mmap and fault path until the
#      device has answered the requests asked (re-probing it each time it is lost); the
#      verdict: no WARNING, BUG, KASAN, lockdep, hung-task or RCU line, the hammer ended
#      (every client with an errno or success, none hung), the module unloaded, and the
#      device's own count of requests answered reached. Each seed's time and requests are
#      in the summary.
#
# Environment: DAVINCI_KMOD_WORK (build directory, default target/kmod), DAVINCI_KMOD_CACHE
# (kernel cache, default /var/cache/davinci-kmod for root), DAVINCI_QEMU_TIMEOUT (seconds,
# default 1200), DAVINCI_QEMU_MEM (default 1G), DAVINCI_JOBS (make -j), DAVINCI_KMOD_BOOTS
# (which boots, default "software pci chaos"), DAVINCI_CHAOS_SEEDS (the chaos boot's seeds,
# default "1 2 3 4 5"; seeds that found a bug stay in it), DAVINCI_CHAOS_REQUESTS (admin
# requests the device must answer per seed, default 10000), DAVINCI_CHAOS_RATE (fraction of
# replies mutated, default 0.05), DAVINCI_CHAOS_CLASSES (only these mutation classes,
# '+'-separated log names, e.g. map-len-short+map-len-long; default all), DAVINCI_CHAOS_LIVES
# (re-probes of a lost device per seed, default 1000: at 5% most lost devices are protocol
# violations the module must refuse, about one per 40 requests), DAVINCI_CHAOS_JOBS (chaos
# boots at a time, default 2), DAVINCI_CHAOS_BAR2 (the chaos device's BAR2, default 64M).

set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KMOD_DIR=$ROOT/kmod-rust
WORK=${DAVINCI_KMOD_WORK:-$ROOT/target/kmod}
QEMU_TIMEOUT=${DAVINCI_QEMU_TIMEOUT:-1200}
QEMU_MEM=${DAVINCI_QEMU_MEM:-1G}

case "${1:-}" in
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    "") ;;
    *)
        echo "scripts/kmod-test.sh: takes no arguments (got '$1'); --help says what it does" >&2
        exit 2
        ;;
esac

t0=$SECONDS
# shellcheck source=kmod/toolchain.sh
source "$ROOT/scripts/kmod/toolchain.sh"
QG_NAME=kmod
# shellcheck source=lib/qemu-guest.sh
source "$ROOT/scripts/lib/qemu-guest.sh"
say "toolchain and kernel ready ($((SECONDS - t0)) s): $($KMOD_RUSTC --version)"
mkdir -p "$WORK"

# ---- the module --------------------------------------------------------------------------
t=$SECONDS
bash "$ROOT/scripts/kmod/build-module.sh" "$WORK/module"
if grep -qiE 'warning|error' "$WORK/module/build.log"; then
    echo "kmod: the module build printed warnings (see $WORK/module/build.log); they are errors here" >&2
    exit 1
fi
say "davinci.ko built ($((SECONDS - t)) s, no warnings)"

# ---- the guest programs ------------------------------------------------------------------
t=$SECONDS
# Every executable of the workspace's test build (nothing is rebuilt after `cargo test
# --workspace`).
artifacts=$(bash "$ROOT/scripts/test-artifacts.sh")
exe() { awk -v k="$1" -v n="$2" '$1 == k && $2 == n { print $3 }' <<<"$artifacts" | tail -n1; }
declare -A guest_bins=(
    [conformance]=$(exe test conformance)
    [kernel]=$(exe test kernel)
    [million]=$(exe test million)
    [davinci-smi]=$(exe bin davinci-smi)
    [davinci-workload]=$(exe bin davinci-workload)
    [davinci-exporter]=$(exe bin davinci-exporter)
    [davinci-device-plugin]=$(exe bin davinci-device-plugin)
    [kubelet_standin]=$(exe example kubelet_standin)
    [davinci-testclient]=$(exe bin davinci-testclient)
    [davinci-attacker]=$(exe bin davinci-attacker)
    [davinci-chaos-hammer]=$(exe bin davinci-chaos-hammer)
)
# The C quick start over libdavinci (bindings/capi/examples/quickstart.c), linked fully static: the
# library in a release build (scripts/capi-install.sh; cargo reuses the test command's build
# of it), the program with pkg-config's --static flags.
bash "$ROOT/scripts/capi-install.sh" "$WORK/capi" >"$WORK/capi-install.log" 2>&1 ||
    { cat "$WORK/capi-install.log"; echo "kmod: scripts/capi-install.sh failed" >&2; exit 1; }
# shellcheck disable=SC2046 # pkg-config's flags are words
gcc -std=c11 -Wall -Wextra -Werror -static "$ROOT/bindings/capi/examples/quickstart.c" \
    $(PKG_CONFIG_PATH="$WORK/capi/lib/pkgconfig" pkg-config --static --cflags --libs davinci) \
    -o "$WORK/capi-quickstart" 2>"$WORK/capi-link.log" ||
    { cat "$WORK/capi-link.log"; echo "kmod: the static C quick start does not build" >&2; exit 1; }
guest_bins[capi-quickstart]=$WORK/capi-quickstart
# davinci-bench from the test build too: its --device rows in the guest are a smoke run of the
# kernel path (every row measures and reports). Figures worth quoting need a release build
# (apps/benches/results/kernel.txt came from one, before issue 40); building one here would
# be a second build of the bench and its dependencies on every run.
guest_bins[davinci-bench]=$(exe bin davinci-bench)
# The PCI boot's device process (davinci-pcidev, on this side), from the test build as well.
pcidev_bin=$(exe bin davinci-pcidev)
[ -n "$pcidev_bin" ] && [ -x "$pcidev_bin" ] || { echo "kmod: the test build has no davinci-pcidev" >&2; exit 1; }
mkdir -p "$WORK/bin"
for name in "${!guest_bins[@]}"; do
    f=${guest_bins[$name]}
    [ -n "$f" ] && [ -x "$f" ] || { echo "kmod: guest program $name was not built" >&2; exit 1; }
    objcopy --strip-debug "$f" "$WORK/bin/$name"
    guest_bins[$name]=$WORK/bin/$name
done
say "guest programs ready ($((SECONDS - t)) s, from the test build)"

# ---- the initramfs -----------------------------------------------------------------------
BB=/bin/busybox
file -L "$BB" | grep -q 'statically linked' || { echo "kmod: $BB is not static (apt-get install busybox-static)" >&2; exit 1; }
# initramfs OUT NAME...: busybox, /init, davinci.ko and the guest programs NAME... (all of
# them if none named), with the C libraries they load, packed into OUT.
initramfs() {
    local out=$1 list=${1%.cpio.gz}.list names name lib
    shift
    names=("$@")
    [ "${#names[@]}" -gt 0 ] || names=("${!guest_bins[@]}")
    local -a libs=()
    for name in "${names[@]}"; do
        # The C libraries it loads (and the loader), installed at the paths ldd names.
        while read -r lib; do libs+=("$lib"); done < <(ldd "${guest_bins[$name]}" | grep -oE '/[^ ]+' | sort -u)
    done
    mapfile -t libs < <(printf '%s\n' "${libs[@]}" | sort -u)
    {
        for d in /dev /proc /sys /tmp /bin; do echo "dir $d 755 0 0"; done
        # The shared libraries the guest programs load, at the paths their loader looks in.
        for lib in "${libs[@]}"; do dirname "$lib"; done | sort -u | while read -r d; do
            p=
            for c in ${d//\// }; do p=$p/$c; echo "dir $p 755 0 0"; done
        done | awk '!seen[$0]++'
        for lib in "${libs[@]}"; do echo "file $lib $(readlink -f "$lib") 755 0 0"; done
        echo "nod /dev/console 600 0 0 c 5 1"
        echo "nod /dev/null 666 0 0 c 1 3"
        echo "file /bin/busybox $BB 755 0 0"
        for a in sh mount echo cat ls grep cut insmod rmmod lsmod reboot dmesg sleep uname \
                 mkfifo mkdir kill test true false seq chgrp mknod sed tail; do
            echo "slink /bin/$a /bin/busybox 777 0 0"
        done
        echo "file /init $KMOD_DIR/guest/init.sh 755 0 0"
        echo "file /davinci.ko $WORK/module/davinci.ko 644 0 0"
        for name in "${names[@]}"; do echo "file /bin/$name ${guest_bins[$name]} 755 0 0"; done
    } >"$list"
    "$KBUILD/usr/gen_init_cpio" "$list" | gzip -1 >"$out"
}
initramfs "$WORK/initramfs.cpio.gz"
# The chaos boots' own, with only what they run: the kernel unpacks the whole one in about
# 8 s of each boot over TCG.
initramfs "$WORK/initramfs-chaos.cpio.gz" davinci-chaos-hammer
say "initramfs $(du -h "$WORK/initramfs.cpio.gz" | cut -f1), the chaos boots' $(du -h "$WORK/initramfs-chaos.cpio.gz" | cut -f1)"

# ---- the boots ---------------------------------------------------------------------------
# boot MODE LOG [QEMU ARGS...]: boots the guest (its init reads dvtest=MODE), streams its
# console, and calls $ON_CUE LOG (if set) for the guest's cues while it runs (qg_boot).
boot() {
    local mode=$1 log=$2
    shift 2
    say "booting Linux in QEMU (TCG, $mode; the guest's console follows, lines from the tests start with 'ktest:')"
    QG_MEM=$QEMU_MEM QG_SMP=2 QG_APPEND="dvtest=$mode" QG_ON_CUE=${ON_CUE:-} \
        QG_INITRD=${INITRD:-$WORK/initramfs.cpio.gz} qg_boot "$log" "$@"
}

# ---- the PCI boot's device process and the guest's cues ------------------------------------
# start_device LOG: davinci-pcidev on $sock (listening before QEMU connects); $! is its pid.
start_device() {
    rm -f "$sock"
    "$pcidev_bin" --socket "$sock" --size 256M --device-id 0 >"$1" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
    [ -S "$sock" ] || { cat "$1"; echo "kmod: davinci-pcidev did not listen" >&2; exit 1; }
    return 0
}

# qmp COMMAND [JSON]: one QMP command to the running QEMU (scripts/lib/qmp.py).
qmp() {
    python3 "$ROOT/scripts/lib/qmp.py" "$qmp" "$@"
}

# pci_cue LOG: the PCI guest's cues, in order: kill the device process (device loss), plug a
# restarted device process in as a new device (chardev-add, device_add into the next slot;
# the guest unbound the lost one), kill the restarted one (the watchdog's loss).
#
# The lost device is not unplugged from QEMU (device_del): QEMU 7.2's ivshmem leaves its
# vectors' eventfds watched after an unplug, and a later device's doorbell on a reused
# descriptor then reaches the freed device (QEMU segfaulted in one run of two).
pci_cue() {
    local log=$1
    case $cue_state in
        "")
            grep -q '^ktest: kill the device now' "$log" || return 0
            kill -KILL "$dev_pid" 2>/dev/null
            say "killed the device process (pid $dev_pid, SIGKILL) at the guest's cue"
            cue_state=killed
            ;;
        killed)
            grep -q '^ktest: plug a restarted device now' "$log" || return 0
            # The same socket, so the restarted device has the same identity.
            start_device "$WORK/pcidev-restarted.log"
            restarted_pid=$!
            qmp chardev-add "{\"id\": \"dv2\", \"backend\": {\"type\": \"socket\", \"data\":
                {\"addr\": {\"type\": \"unix\", \"data\": {\"path\": \"$sock\"}}, \"server\": false}}}" \
                >/dev/null || bad "QMP chardev-add failed"
            qmp device_add '{"driver": "ivshmem-doorbell", "chardev": "dv2", "vectors": 2,
                    "id": "ivs2", "addr": "03.0"}' >/dev/null || bad "QMP device_add failed"
            say "started davinci-pcidev again (pid $restarted_pid) and plugged it in (device_add)"
            cue_state=plugged
            ;;
        plugged)
            grep -q '^ktest: kill the restarted device now' "$log" || return 0
            kill -KILL "$restarted_pid" 2>/dev/null
            say "killed the restarted device process (pid $restarted_pid, SIGKILL) at the guest's cue"
            cue_state=killed-again
            ;;
    esac
}

fail=0
bad() { echo "kmod: FAIL: $*" >&2; fail=1; }
# common_verdict LOG: what every boot must show.
common_verdict() {
    local log=$1 name n=0
    [ "$qemu_rc" -eq 0 ] || bad "QEMU exited with $qemu_rc (124: the guest did not finish in ${QEMU_TIMEOUT}s)"
    grep -qx 'ktest: ALL PASSED' "$log" || bad "the guest did not report ALL PASSED ($log)"
    # BUG: covers KASAN reports and soft lockups; "blocked for more than" is the hung-task
    # detector, "detected stall" RCU's.
    if grep -nE 'WARNING:|BUG:|Oops|Call Trace|Kernel panic|general protection|davinci: leak|blocked for more than|detected stall' "$log"; then
        bad "the kernel logged the warnings above ($log)"
    fi
    grep -q 'davinci: ABI ' "$log" || bad "no module load message ($log)"
    # The test kernel the results stand on: two CPUs really online (SMP), KASAN armed.
    grep -q '^ktest: kernel .*, 2 cpu(s)$' "$log" || bad "the guest did not run on 2 CPUs"
    grep -q 'KernelAddressSanitizer initialized' "$log" || bad "KASAN was not armed in the guest"
    # The kernel crate's bindings give task_struct, file and vm_area_struct the compiler's
    # layout (bindings_helper.patch's bindgen parameters; the module checks at load).
    grep -q 'davinci: bindings agree with C' "$log" || bad "the kernel crate's bindings disagree with C (see the 'bindings:' lines)"
    grep -q 'davinci: unloaded' "$log" || bad "no module unload message ($log)"
    # Same names as against the mock: every conformance test the host build lists ran and passed.
    names=$("${guest_bins[conformance]}" --list --format terse 2>/dev/null | sed -n 's/: test$//p')
    [ -n "$names" ] || bad "could not list the conformance tests"
    for name in $names; do
        n=$((n + 1))
        grep -qx "test $name ... ok" "$log" || bad "conformance test $name did not pass in the guest ($log)"
    done
    conformance_count=$n
}

# chaos_verdict LOG DEVLOG SEED DEVRC: the chaos boot's verdict for one seed.
chaos_verdict() {
    local log=$1 devlog=$2 seed=$3 devrc=$4
    [ "$qemu_rc" -eq 0 ] || bad "chaos seed $seed: QEMU exited with $qemu_rc (124: the guest did not finish in ${QEMU_TIMEOUT}s; an oops panics the guest: oops=panic)"
    grep -qx 'ktest: ALL PASSED' "$log" || bad "chaos seed $seed: the guest did not report ALL PASSED ($log)"
    if grep -nE 'WARNING:|BUG:|Oops|Call Trace|Kernel panic|general protection|davinci: leak|blocked for more than|detected stall|possible circular|inconsistent lock' "$log"; then
        bad "chaos seed $seed: the kernel logged the lines above ($log; the device's mutations: $devlog)"
    fi
    grep -q 'KernelAddressSanitizer initialized' "$log" || bad "chaos seed $seed: KASAN was not armed in the guest"
    grep -q '^ktest: kernel .*, 2 cpu(s)$' "$log" || bad "chaos seed $seed: the guest did not run on 2 CPUs"
    grep -q 'davinci: unloaded' "$log" || bad "chaos seed $seed: no module unload message ($log)"
    if grep -q '^ktest: chaos: requests left undone' "$log"; then
        bad "chaos seed $seed: the hammer did not reach its requests (re-probes used up, or its deadline; $log)"
    fi
    # The device's own count (its summary at exit, the last one), not the guest's.
    chaos_requests=$(sed -n 's/.*chaos seed .* rate .*: \([0-9]*\) requests answered.*/\1/p' "$devlog" | tail -n1)
    [ -n "$chaos_requests" ] || bad "chaos seed $seed: no chaos summary from the device ($devlog)"
    [ "${chaos_requests:-0}" -ge "$chaos_asked" ] ||
        bad "chaos seed $seed: the device answered ${chaos_requests:-0} requests, fewer than $chaos_asked ($devlog)"
    [ "$devrc" = 0 ] || bad "chaos seed $seed: davinci-pcidev exited $devrc (it must survive a hostile guest; $devlog)"
}

# chaos_seed SEED: one chaos boot (in the background; its console to the caller's stdout):
# davinci-pcidev --chaos SEED on a socket of its own, the guest, and "QEMU-RC DEVICE-RC
# SECONDS" in $WORK/chaos-SEED.status for the verdict.
chaos_seed() {
    local seed=$1 ts=$SECONDS sock=$WORK/pcidev-chaos-$1.sock dev_pid dev_rc
    rm -f "$sock" "$WORK/chaos-$seed.status"
    "$pcidev_bin" --socket "$sock" --size "$chaos_bar2" --device-id 0 \
        --chaos "$seed,$chaos_spec" >"$WORK/pcidev-chaos-$seed.log" 2>&1 &
    dev_pid=$!
    for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
    [ -S "$sock" ] || { cat "$WORK/pcidev-chaos-$seed.log"; echo "kmod: davinci-pcidev --chaos did not listen" >&2; exit 1; }
    trap 'kill "$dev_pid" 2>/dev/null || true' EXIT
    # (A kernel log buffer of its own size: a seed's log outgrows the default, and the early
    # lines the verdict reads, KASAN's among them, would be gone by the final dump.)
    INITRD=$WORK/initramfs-chaos.cpio.gz \
        boot "chaos dvseed=$seed dvrequests=$chaos_asked dvlives=$chaos_lives log_buf_len=8M" \
        "$WORK/serial-chaos-$seed.log" -chardev "socket,path=$sock,id=dv" \
        -device "ivshmem-doorbell,chardev=dv,vectors=2,id=ivs,addr=02.0"
    kill -TERM "$dev_pid" 2>/dev/null || true
    set +e; wait "$dev_pid"; dev_rc=$?; set -e
    trap - EXIT
    echo "$qemu_rc $dev_rc $((SECONDS - ts))" >"$WORK/chaos-$seed.status"
}

BOOTS=${DAVINCI_KMOD_BOOTS:-software pci chaos}
chaos_summary= boots_summary=
t=$SECONDS
for mode in $BOOTS; do
    tm=$SECONDS
    case $mode in
        software)
            # 6 GiB: the boot ends with one 4 GiB device (issue 42, item 10's figure).
            QEMU_MEM=${DAVINCI_QEMU_MEM:-6G} boot software "$WORK/serial.log"
            common_verdict "$WORK/serial.log"
            ;;
        pci)
            # The PCI device: davinci-pcidev on this side (the engine, listening before QEMU
            # starts), QEMU's ivshmem-doorbell in the guest, the module bound to it.
            sock=$WORK/pcidev.sock qmp=$WORK/qmp.sock
            rm -f "$sock" "$qmp"
            start_device "$WORK/pcidev.log"
            dev_pid=$! restarted_pid= cue_state=
            trap 'kill "$dev_pid" $restarted_pid 2>/dev/null || true' EXIT
            ON_CUE=pci_cue boot pci "$WORK/serial-pci.log" -chardev "socket,path=$sock,id=dv" \
                -device "ivshmem-doorbell,chardev=dv,vectors=2,id=ivs,addr=02.0" \
                -qmp "unix:$qmp,server=on,wait=off"
            # (Still running if the guest never gave the cue.)
            kill -TERM "$dev_pid" 2>/dev/null || true
            set +e; wait "$dev_pid"; dev_rc=$?; set -e
            restarted_rc=none
            if [ -n "$restarted_pid" ]; then
                kill -TERM "$restarted_pid" 2>/dev/null || true
                set +e; wait "$restarted_pid"; restarted_rc=$?; set -e
            fi
            trap - EXIT
            sed 's/^/host: /' "$WORK/pcidev.log"
            [ ! -f "$WORK/pcidev-restarted.log" ] || sed 's/^/host (restarted): /' "$WORK/pcidev-restarted.log"
            common_verdict "$WORK/serial-pci.log"
            # Killed at the guest's cue (the device-loss step), after serving the suites.
            [ "$dev_rc" = 137 ] || bad "davinci-pcidev was not killed at the guest's cue (status $dev_rc)"
            grep -q 'davinci: davinci0: PCI device .* (slot 0' "$WORK/serial-pci.log" || bad "the module did not bind the PCI device"
            grep -q 'davinci: davinci0: PCI device .* lost: ' "$WORK/serial-pci.log" ||
                bad "the module did not report the device lost"
            # The restart: the lost device unbound, a restarted davinci-pcidev plugged in as
            # a new device and bound (a second bind line), then killed with nothing in flight
            # (the watchdog's loss).
            [ "$cue_state" = killed-again ] || bad "the restart did not happen (host side reached '${cue_state:-nothing}')"
            [ "$(grep -c 'davinci: davinci0: PCI device .* (slot 0' "$WORK/serial-pci.log")" -ge 2 ] ||
                bad "the module did not bind the restarted device"
            [ "$restarted_rc" = 137 ] || bad "the restarted davinci-pcidev was not killed at the guest's cue (status $restarted_rc)"
            grep -q 'lost: its heartbeat stopped (watchdog)' "$WORK/serial-pci.log" ||
                bad "the watchdog did not find the restarted device lost"
            ;;
        chaos)
            # The chaos device (issue 42, item 2), one boot per seed, two at a time: a seed's
            # guest spends much of its time asleep (a re-probe's wait for the heartbeat the
            # device stalls on purpose, the host device's answers), which the other's uses.
            chaos_seeds=${DAVINCI_CHAOS_SEEDS:-1 2 3 4 5}
            chaos_asked=${DAVINCI_CHAOS_REQUESTS:-10000}
            chaos_rate=${DAVINCI_CHAOS_RATE:-0.05}
            chaos_lives=${DAVINCI_CHAOS_LIVES:-1000}
            chaos_bar2=${DAVINCI_CHAOS_BAR2:-64M}
            chaos_jobs=${DAVINCI_CHAOS_JOBS:-2}
            chaos_spec=$chaos_rate${DAVINCI_CHAOS_CLASSES:+,$DAVINCI_CHAOS_CLASSES}
            for seed in $chaos_seeds; do
                while [ "$(jobs -rp | wc -l)" -ge "$chaos_jobs" ]; do wait -n || true; done
                say "chaos seed $seed: booting (its console: $WORK/boot-chaos-$seed.out)"
                chaos_seed "$seed" >"$WORK/boot-chaos-$seed.out" 2>&1 &
            done
            wait || true
            for seed in $chaos_seeds; do
                log=$WORK/serial-chaos-$seed.log devlog=$WORK/pcidev-chaos-$seed.log
                read -r qemu_rc dev_rc secs <"$WORK/chaos-$seed.status" || { qemu_rc=1 dev_rc=? secs=?; }
                grep -E 'CHAOS|chaos seed .* rate|INJECT reset|stopped|panicked' "$devlog" | sed "s/^/host (chaos $seed): /" || true
                chaos_verdict "$log" "$devlog" "$seed" "$dev_rc"
                reprobes=$(sed -n 's/^ktest: chaos: .* requests answered .*, \([0-9]*\) re-probes, .*/\1/p' "$log" | tail -n1)
                line="chaos seed $seed: $secs s, ${chaos_requests:-0} requests answered, ${reprobes:-?} re-probes"
                chaos_summary+="$line"$'\n'
                say "$line ($(grep -c 'chaos seed .* mutation' "$devlog") mutations logged; guest log $log, device log $devlog)"
            done
            ;;
        *)
            echo "kmod: DAVINCI_KMOD_BOOTS: unknown boot '$mode' (software, pci, chaos)" >&2
            exit 2
            ;;
    esac
    boots_summary+="the $mode boot$([ "$mode" != chaos ] || echo "s (${chaos_seeds// /, })"): $((SECONDS - tm)) s"$'\n'
done
# Where the step's time went, and each chaos seed's time and requests.
printf '%s%s' "$boots_summary" "$chaos_summary" | sed 's/^/==> kmod: /'
if [ "$fail" -ne 0 ]; then
    echo "kmod: the guest logs are $WORK/serial.log (software), $WORK/serial-pci.log (PCI) and $WORK/serial-chaos-SEED.log (chaos)"
    exit 1
fi
if [ "$BOOTS" = chaos ]; then
    say "PASS: the chaos device (seeds ${DAVINCI_CHAOS_SEEDS:-1 2 3 4 5}, ${DAVINCI_CHAOS_REQUESTS:-10000} requests answered each): no kernel warning, every client ended, the module unloaded ($((SECONDS - t0)) s in all)"
    exit 0
fi
say "PASS: $conformance_count conformance tests, the kernel-only tests, the million-task run, davinci-smi (cdi generate too), davinci-exporter, davinci-device-plugin (with a kubelet stand-in), davinci-workload, davinci-bench's kernel rows and the C quick start (libdavinci) on /dev/davinci0; the conformance suite, the kernel-only tests, the million-task run, the C quick start, davinci-smi, davinci-exporter, the device plugin, davinci-workload and davinci-bench on the PCI device (ivshmem-doorbell, davinci-pcidev, MMIO doorbells, MSI-X), the device lost mid-stream, restarted (unbound, a new device plugged in) and lost again with nothing in flight (the watchdog); module unloaded cleanly${chaos_summary:+; the chaos device (seeds ${chaos_seeds}, $chaos_asked requests answered each) with no kernel warning, every client ended}${chaos_summary:+, the module unloaded} ($((SECONDS - t0)) s in all)"
