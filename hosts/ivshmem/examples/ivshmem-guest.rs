//! `ivshmem-guest`: the guest half of `scripts/ivshmem-smoke.sh`, run inside QEMU against
//! `ivshmem-echo` on the host. With no kernel driver: it finds the `ivshmem-doorbell`
//! device in `/sys/bus/pci/devices` (vendor 0x1af4, device 0x1110), enables it, maps BAR0
//! (registers) and BAR2 (the shared memory) through sysfs (`resource0`, `resource2`), rings
//! peer 0's doorbells with register writes and checks that the host's counters (see
//! `ivshmem-echo`'s layout) move by exactly the doorbells rung.
//!
//! Prints one `PASS: ...` or `FAIL: ...` line per check and `ivshmem-guest: ALL PASSED`
//! last when every check passed; exits 1 otherwise.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use davinci_ivshmem::sysfs;
use davinci_shm::SharedMapping;

/// BAR0 registers.
const IV_POSITION: u64 = 8;
const DOORBELL: u64 = 12;
/// `ivshmem-echo`'s layout in BAR2.
const ECHO_MAGIC: u32 = 0x4f48_4345;
const TOKEN_ECHO: u64 = 4;
const TOKEN: u64 = 8;
const COUNTS: u64 = 16;
/// How long the host may take to answer (TCG on a busy machine; never reached when it works).
const ANSWER: Duration = Duration::from_secs(30);

/// Waits until `word` reads `want`; the value last read otherwise.
fn wait_for(word: &AtomicU32, want: u32) -> Result<(), u32> {
    let deadline = Instant::now() + ANSWER;
    loop {
        let v = word.load(Ordering::Acquire);
        if v == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(v);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn word(m: &SharedMapping, at: u64) -> Result<&AtomicU32, String> {
    m.word(at).map_err(|e| format!("word {at}: {e}"))
}

struct Checks {
    failed: u32,
}

impl Checks {
    fn check(&mut self, ok: bool, what: &str) {
        if ok {
            println!("PASS: {what}");
        } else {
            println!("FAIL: {what}");
            self.failed += 1;
        }
    }
}

fn run() -> Result<u32, String> {
    let mut c = Checks { failed: 0 };
    let dev = sysfs::find_device(Path::new("/sys/bus/pci/devices"))?;
    println!("ivshmem-guest: device {}", dev.display());
    sysfs::enable(&dev)?;
    let bar0 = sysfs::bar_size(&dev, 0)?;
    let bar1 = sysfs::bar_size(&dev, 1).unwrap_or(0);
    let bar2 = sysfs::bar_size(&dev, 2)?;
    println!("ivshmem-guest: BAR0 {bar0} bytes, BAR1 {bar1} bytes, BAR2 {bar2} bytes");
    c.check(bar0 == 256, "BAR0 (registers) is 256 bytes");
    let regs = sysfs::map_bar(&dev, 0, 4096)?;
    let shm = sysfs::map_bar(&dev, 2, usize::try_from(bar2).map_err(|_| "BAR2 size")?)?;
    let position = word(&regs, IV_POSITION)?.load(Ordering::Relaxed);
    println!("ivshmem-guest: IVPosition {position}");
    c.check(
        position == 1,
        "IVPosition is 1 (the host is peer 0, this guest its first peer)",
    );
    let magic = word(&shm, 0)?.load(Ordering::Relaxed);
    c.check(
        magic == ECHO_MAGIC,
        &format!("the host's magic is in BAR2 ({magic:#x})"),
    );

    let doorbell = word(&regs, DOORBELL)?;
    let count = |v: u64| word(&shm, COUNTS + 4 * v);
    // One doorbell on vector 1, with a token the host copies back.
    let before = count(1)?.load(Ordering::Acquire);
    word(&shm, TOKEN)?.store(0x5eed_0001, Ordering::Release);
    doorbell.store(1, Ordering::Release); // peer 0 << 16 | vector 1
    let r = wait_for(count(1)?, before.wrapping_add(1));
    c.check(
        r.is_ok(),
        &format!("a doorbell on vector 1 is counted by the host ({r:?})"),
    );
    let echoed = word(&shm, TOKEN_ECHO)?.load(Ordering::Acquire);
    c.check(
        echoed == 0x5eed_0001,
        &format!("the host read the guest's token from BAR2 ({echoed:#x})"),
    );

    // A burst: the host counts every doorbell, however the eventfd coalesces them.
    let before = count(3)?.load(Ordering::Acquire);
    for _ in 0..100 {
        doorbell.store(3, Ordering::Release);
    }
    let r = wait_for(count(3)?, before.wrapping_add(100));
    c.check(
        r.is_ok(),
        &format!("100 doorbells on vector 3 are counted ({r:?})"),
    );

    // Doorbells to a peer that does not exist and to a vector past the device's are ignored
    // by QEMU; then one on vector 0 is counted alone.
    let (before0, before1) = (
        count(0)?.load(Ordering::Acquire),
        count(1)?.load(Ordering::Acquire),
    );
    doorbell.store(5 << 16, Ordering::Release);
    doorbell.store(7, Ordering::Release);
    doorbell.store(0, Ordering::Release);
    let r = wait_for(count(0)?, before0.wrapping_add(1));
    let after1 = count(1)?.load(Ordering::Acquire);
    c.check(
        r.is_ok() && after1 == before1,
        &format!("doorbells to a missing peer or vector are dropped ({r:?}, vector 1 {before1} -> {after1})"),
    );
    Ok(c.failed)
}

fn main() -> ExitCode {
    match run() {
        Ok(0) => {
            println!("ivshmem-guest: ALL PASSED");
            ExitCode::SUCCESS
        }
        Ok(n) => {
            println!("ivshmem-guest: {n} check(s) failed");
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}
