//! `pcidev-guest`: the guest half of `scripts/pcidev-smoke.sh`, run inside QEMU against
//! `davinci-pcidev` on the host. With no kernel driver: it finds the `ivshmem-doorbell`
//! device in `/sys/bus/pci/devices` (vendor 0x1af4, device 0x1110), enables it, maps BAR0
//! (registers) and BAR2 (the device's memory) through sysfs (`resource0`, `resource2`),
//! validates BAR2's header, and speaks the admin queue (`davinci_pcidev::guest`, the code the
//! in-process tests use) as the guest kernel's transport would: OPEN, GET_INFO,
//! CREATE_CONTEXT, ALLOC_MEMORY, CREATE_STREAM, MMAP_TARGET for the rings and the memory.
//! Then, as a client would, it submits NOPs and a FILL on the command ring, rings the data
//! doorbell (BAR0 offset 12, `0 << 16 | 1`), polls the event ring (no driver: no
//! interrupts), checks the FILL's bytes in BAR2, and tears everything down. Every admin
//! request rings the admin doorbell (`0 << 16 | 0`).
//!
//! Prints one `PASS: ...` or `FAIL: ...` line per check and `pcidev-guest: ALL PASSED` last
//! when every check passed; exits 1 otherwise.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use davinci_hwif::layout::{DeviceState, HEARTBEAT_OFFSET};
use davinci_hwif::regs::{BAR0_SIZE, DEVICE_PEER, DOORBELL, IV_POSITION};
use davinci_hwif::{doorbell_value, MapKind, VECTOR_DATA};
use davinci_ivshmem::sysfs;
use davinci_pcidev::guest::{self, AdminQueue, Bus, GuestError};
use davinci_shm::SharedMapping;
use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateStreamArgs, DevAddr, DeviceInfo, Errno, EventRecord,
    HandleArgs, TaskDesc, DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_CONTEXT,
    DRIVER_CMD_CREATE_STREAM, DRIVER_CMD_DESTROY_STREAM, DRIVER_CMD_FREE_MEMORY,
    DRIVER_CMD_GET_INFO,
};

/// How long the device may take to answer anything (TCG on a busy machine; never reached
/// when it works).
const ANSWER: Duration = Duration::from_secs(30);
/// The pause between two looks at a ring (this guest has no interrupts).
const POLL: Duration = Duration::from_millis(1);
/// The FILL's pattern.
const PATTERN: u32 = 0xabcd_ef01;

/// BAR0 and BAR2 mapped through sysfs: doorbells are register writes, and waiting for an
/// interrupt is a short pause (no driver enabled MSI-X).
struct SysfsBus {
    regs: SharedMapping,
    bar2: SharedMapping,
}

impl Bus for SysfsBus {
    fn bar2(&self) -> &SharedMapping {
        &self.bar2
    }

    fn ring(&self, vector: u16) -> Result<(), GuestError> {
        let reg = self
            .regs
            .word(DOORBELL)
            .map_err(|e| GuestError::Other(format!("BAR0 doorbell register: {e}")))?;
        reg.store(doorbell_value(DEVICE_PEER, vector), Ordering::Release);
        Ok(())
    }

    fn wait(&self, _vector: u16, timeout: Duration) -> Result<(), GuestError> {
        std::thread::sleep(timeout.min(POLL));
        Ok(())
    }
}

struct Checks {
    failed: u32,
}

impl Checks {
    fn check(&mut self, ok: bool, what: &str) -> bool {
        if ok {
            println!("PASS: {what}");
        } else {
            println!("FAIL: {what}");
            self.failed += 1;
        }
        ok
    }

    /// A step that must work for the next ones to mean anything.
    fn must<T>(&mut self, r: Result<T, GuestError>, what: &str) -> Result<T, String> {
        match r {
            Ok(v) => {
                println!("PASS: {what}");
                Ok(v)
            }
            Err(e) => {
                self.failed += 1;
                Err(format!("{what}: {e}"))
            }
        }
    }
}

/// Polls `evt` until `n` records arrived (or the deadline).
fn reap(
    evt: &mut davinci_ring::Consumer<EventRecord>,
    n: usize,
) -> Result<Vec<EventRecord>, String> {
    let deadline = Instant::now() + ANSWER;
    let mut records = Vec::new();
    while records.len() < n {
        evt.consume(n - records.len(), |r| records.push(r));
        if records.len() < n {
            if Instant::now() > deadline {
                return Err(format!(
                    "{} of {n} completions after {ANSWER:?}",
                    records.len()
                ));
            }
            std::thread::sleep(POLL);
        }
    }
    Ok(records)
}

fn run() -> Result<u32, String> {
    let mut c = Checks { failed: 0 };
    let dev = sysfs::find_device(Path::new("/sys/bus/pci/devices"))?;
    println!("pcidev-guest: device {}", dev.display());
    sysfs::enable(&dev)?;
    let bar0 = sysfs::bar_size(&dev, 0)?;
    let bar2 = sysfs::bar_size(&dev, 2)?;
    println!("pcidev-guest: BAR0 {bar0} bytes, BAR2 {bar2} bytes");
    c.check(bar0 == BAR0_SIZE, "BAR0 (registers) is 256 bytes");
    let regs = sysfs::map_bar(&dev, 0, 4096)?;
    let shm = sysfs::map_bar(&dev, 2, usize::try_from(bar2).map_err(|_| "BAR2 size")?)?;
    let position = regs
        .word(IV_POSITION)
        .map_err(|e| format!("IVPosition: {e}"))?
        .load(Ordering::Relaxed);
    // (1 for the device's first guest; a restarted QEMU gets the next id.)
    c.check(
        position != 0,
        &format!("IVPosition is not 0 (the device is peer 0): {position}"),
    );
    let bus = Arc::new(SysfsBus { regs, bar2: shm });

    // BAR2's header, validated against the BAR's size; the device is alive.
    let header = c.must(guest::read_header(&*bus), "BAR2's header is valid")?;
    let l = header.layout;
    println!(
        "pcidev-guest: BAR2 layout: admin rings at {:#x} and {:#x} ({} bytes each), heap at {:#x} ({} pages)",
        l.sq_offset, l.cq_offset, l.ring_bytes, l.heap_offset, l.heap_pages
    );
    c.check(
        header.state == DeviceState::Ready,
        &format!("the device is ready ({:?})", header.state),
    );
    let beat = bus
        .bar2
        .word(HEARTBEAT_OFFSET)
        .map_err(|e| format!("heartbeat: {e}"))?;
    let first = beat.load(Ordering::Acquire);
    let deadline = Instant::now() + ANSWER;
    while beat.load(Ordering::Acquire) == first && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let second = beat.load(Ordering::Acquire);
    c.check(
        second != first,
        &format!("the device's heartbeat moves ({first} -> {second})"),
    );

    // The admin queue, as the guest kernel's transport.
    let mut q = c.must(
        AdminQueue::connect(bus.clone(), ANSWER),
        "the admin queue is where the header says",
    )?;
    let client = c.must(q.open(1, 0, "pcidev-guest"), "OPEN")?;
    let mut info = DeviceInfo::default();
    c.must(q.ioctl(client, DRIVER_CMD_GET_INFO, &mut info), "GET_INFO")?;
    println!(
        "pcidev-guest: GET_INFO: ABI {}.{}, device {}, page {}, memory {} bytes, features {:#x}",
        info.abi_major,
        info.abi_minor,
        info.device_id,
        info.page_size,
        info.memory_size,
        info.features.bits()
    );
    c.check(
        info.page_size == 4096 && info.memory_size > 0 && info.memory_size < bar2,
        "GET_INFO reports 4 KiB pages and device memory inside BAR2",
    );
    let mut ctx = CreateContextArgs::default();
    c.must(
        q.ioctl(client, DRIVER_CMD_CREATE_CONTEXT, &mut ctx),
        "CREATE_CONTEXT",
    )?;
    let mut mem = AllocMemoryArgs {
        size: 8192,
        ..Default::default()
    };
    c.must(
        q.ioctl(client, DRIVER_CMD_ALLOC_MEMORY, &mut mem),
        "ALLOC_MEMORY (8 KiB)",
    )?;
    let mut s = CreateStreamArgs {
        ctx: ctx.handle,
        cmd_entries: 64,
        event_entries: 64,
        ..Default::default()
    };
    c.must(
        q.ioctl(client, DRIVER_CMD_CREATE_STREAM, &mut s),
        "CREATE_STREAM (64 + 64 entries)",
    )?;
    let cmd_at = c.must(
        q.map(client, s.cmd_ring.mmap_offset, s.cmd_ring.mmap_size),
        "MMAP_TARGET of the command ring",
    )?;
    let evt_at = c.must(
        q.map(client, s.event_ring.mmap_offset, s.event_ring.mmap_size),
        "MMAP_TARGET of the event ring",
    )?;
    let mem_at = c.must(
        q.map(client, mem.mmap_offset, mem.alloc_size),
        "MMAP_TARGET of the allocation",
    )?;
    println!(
        "pcidev-guest: command ring at BAR2 {:#x}, event ring at {:#x}, memory at {:#x}",
        cmd_at.offset, evt_at.offset, mem_at.offset
    );
    c.check(
        (cmd_at.kind, evt_at.kind, mem_at.kind)
            == (MapKind::CmdRing, MapKind::EventRing, MapKind::Memory),
        "MMAP_TARGET names a command ring, an event ring and memory",
    );
    c.check(
        [&cmd_at, &evt_at, &mem_at]
            .iter()
            .all(|m| m.offset >= l.heap_offset && m.offset + m.len <= bar2),
        "every mapping lies in BAR2's heap",
    );
    let mut bytes = vec![1u8; 8192];
    let read = bus.bar2.read(mem_at.offset, &mut bytes);
    c.check(
        read.is_ok() && bytes.iter().all(|&b| b == 0),
        "the new allocation reads zero in BAR2",
    );

    // A client's work: NOP, FILL, NOP on the command ring, the data doorbell, the event ring.
    let mut cmd = c.must(
        guest::producer::<TaskDesc, _>(&bus, &cmd_at, s.cmd_entries),
        "the command ring's view",
    )?;
    let mut evt = c.must(
        guest::consumer::<EventRecord, _>(&bus, &evt_at, s.event_entries),
        "the event ring's view",
    )?;
    let fill = TaskDesc::fill(2, DevAddr(mem.dev_addr + 4096), 4096, PATTERN);
    let pushed = [TaskDesc::nop(1), fill, TaskDesc::nop(3)]
        .iter()
        .all(|d| cmd.push(d).is_ok());
    c.check(pushed, "three descriptors fit the command ring");
    cmd.publish();
    c.must(bus.ring(VECTOR_DATA), "the data doorbell (BAR0 write of 1)")?;
    let records = reap(&mut evt, 3)?;
    let done: Vec<(u64, i32)> = records.iter().map(|r| (r.user_data, r.status)).collect();
    c.check(
        done == [(1, 0), (2, 0), (3, 0)],
        &format!("NOP, FILL, NOP complete in order with status 0: {done:?}"),
    );
    let read = bus.bar2.read(mem_at.offset, &mut bytes);
    c.check(
        read.is_ok()
            && bytes[..4096].iter().all(|&b| b == 0)
            && bytes[4096..].chunks(4).all(|w| w == PATTERN.to_ne_bytes()),
        "the FILL's pattern is in BAR2's second page of the allocation, and only there",
    );

    // A stream of NOPs in small batches: the device sleeps between them with NEED_WAKEUP
    // armed, and the doorbell is rung only when the ring says the device asked for it.
    let total = 300u64;
    let (mut sent, mut reaped, mut rung) = (0u64, 0u64, 0u32);
    let mut in_order = true;
    while reaped < total {
        while sent < total && sent - reaped < 48 {
            if cmd.push(&TaskDesc::nop(1000 + sent)).is_err() {
                break;
            }
            sent += 1;
            if sent % 7 == 0 {
                break;
            }
        }
        if cmd.publish() {
            bus.ring(VECTOR_DATA)
                .map_err(|e| format!("a data doorbell after {reaped} completions: {e}"))?;
            rung += 1;
        }
        let want = usize::try_from(sent - reaped).unwrap_or(0).min(1);
        let got = reap(&mut evt, want).map_err(|e| format!("{e}, at {reaped} of {total}"))?;
        for r in got {
            in_order &= r.user_data == 1000 + reaped && r.status == 0;
            reaped += 1;
        }
        // Whatever else is there already.
        evt.consume(64, |r| {
            in_order &= r.user_data == 1000 + reaped && r.status == 0;
            reaped += 1;
        });
    }
    c.check(
        in_order,
        &format!("{total} NOPs in batches complete in order ({rung} doorbells rung)"),
    );

    // Teardown through the admin queue.
    drop((cmd, evt));
    let mut h = HandleArgs {
        handle: s.handle,
        pad: 0,
    };
    c.must(
        q.ioctl(client, DRIVER_CMD_DESTROY_STREAM, &mut h),
        "DESTROY_STREAM",
    )?;
    h.handle = mem.handle;
    c.must(
        q.ioctl(client, DRIVER_CMD_FREE_MEMORY, &mut h),
        "FREE_MEMORY",
    )?;
    c.must(q.close(client), "CLOSE")?;
    let gone = q.ioctl(client, DRIVER_CMD_GET_INFO, &mut info);
    c.check(
        gone.as_ref().err().and_then(GuestError::errno) == Some(Errno::ENODEV.code() as u32),
        &format!("a closed client's GET_INFO fails with ENODEV ({gone:?})"),
    );
    Ok(c.failed)
}

fn main() -> ExitCode {
    match run() {
        Ok(0) => {
            println!("pcidev-guest: ALL PASSED");
            ExitCode::SUCCESS
        }
        Ok(n) => {
            println!("pcidev-guest: {n} check(s) failed");
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}
