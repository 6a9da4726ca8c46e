//! The device's event log and traces through the module's node (issue 46, ABI 1.5): the
//! `inject` parameter's faults and its reset are logged as davinci-mockd's are
//! (INJECTED_FAULT, HUNG_TASK, STREAM_STOPPED, DEVICE_RESET), the log of a device the module
//! brought up begins with DEVICE_STARTED, and TRACE's READ and READ_EVENTS reach the caller's
//! own buffer through the module: every record at the caller's stride (zero-padded), nothing
//! past its capacity, a whole trace buffer in one call (a PCI device's list area holds less:
//! the module reads it in rounds), a bad buffer EFAULT.

use std::time::Duration;

use davinci_shim::{Control, Device, DeviceEvent, Errno, Stream, TaskDesc};
use davinci_tests::descs::SubmitDescs;
use davinci_uapi::{
    DeviceEvent as RawEvent, ReadEventsArgs, TraceArgs, TraceRecord, Wire,
    DEVICE_EVENT_DEVICE_RESET, DEVICE_EVENT_DEVICE_STARTED, DEVICE_EVENT_HUNG_TASK,
    DEVICE_EVENT_INJECTED_FAULT, DEVICE_EVENT_STREAM_STOPPED, DRIVER_CMD_READ_EVENTS,
    DRIVER_CMD_TRACE, TRACE_KIND_TASK, TRACE_OP_READ, TRACE_OP_START, TRACE_OP_STOP,
    TRACE_RECORDS_MAX, TRACE_SCOPE_DEVICE,
};
use nix::libc;
use std::os::fd::AsRawFd;

use super::{anon, node_path, other_node_path, page, Node};

const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(300);

/// Writes the module's `inject` parameter (root only).
fn inject(text: &str) {
    let p = "/sys/module/davinci/parameters/inject";
    std::fs::write(p, text).unwrap_or_else(|e| panic!("write {text:?} to {p}: {e}"));
}

/// Disarms the module's fault injection when dropped (a failing test leaves none armed).
struct Disarm;

impl Drop for Disarm {
    fn drop(&mut self) {
        inject("none");
    }
}

/// The one event of `code` on `stream` among `evs`, of `dev`'s client.
fn one(evs: &[DeviceEvent], code: u32, stream: &Stream, dev: &Device) -> DeviceEvent {
    let hits: Vec<_> = evs
        .iter()
        .filter(|e| e.code == code && e.stream == stream.handle())
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "one event {code} on {:#x}: {evs:?}",
        stream.handle()
    );
    let e = *hits[0];
    assert_eq!(
        (e.client_id, e.pid, e.uid),
        (
            dev.client_id().unwrap(),
            std::process::id(),
            nix::unistd::getuid().as_raw()
        ),
        "{e:?}"
    );
    e
}

/// A new stream of `ctx` armed with `fault` by the parameter, given three NOPs: the stream,
/// their command-ring indices, how its synchronize ended. The parameter is disarmed after.
fn armed(ctx: &davinci_shim::Context, fault: &str, timeout: Duration) -> (Stream, Vec<u32>, Errno) {
    inject(fault);
    let mut s = ctx.create_stream().unwrap();
    // One batch: the module runs the stream's turn in the submitting call, so a task
    // submitted after the fault fired would find the stream stopped.
    let first = s
        .submit_descs(&[TaskDesc::nop(1), TaskDesc::nop(2), TaskDesc::nop(3)])
        .unwrap();
    let ids = (0..3).map(|k| first.offset(k).ring_index()).collect();
    let e = s.synchronize(timeout).expect_err("the fault fires");
    inject("none");
    (s, ids, e.errno().expect("an errno"))
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn the_inject_parameters_faults_and_reset_are_logged() {
    let path = node_path();
    let _disarm = Disarm;
    let dev = Device::open(&path).expect("client");
    let ctl = Control::open(&path).expect("control open");
    let from = ctl.read_events(0).expect("READ_EVENTS").cursor;
    let ctx = dev.create_context().unwrap();
    let (hang, hang_ids, e) = armed(&ctx, "hang-at=2", SHORT);
    assert_eq!(e, Errno::ETIMEDOUT);
    let (error, error_ids, e) = armed(&ctx, "error-at=2:EIO", LONG);
    assert_eq!(e, Errno::EIO);
    let (stop, _, e) = armed(&ctx, "stop-at=2", SHORT);
    assert_eq!(e, Errno::ETIMEDOUT);
    let mut running = ctx.create_stream().unwrap();
    running.submit_desc(&TaskDesc::nop(1)).unwrap();
    running.synchronize(LONG).unwrap();
    inject("reset");
    let e = running
        .error_state()
        .expect("the reset stopped the running stream");
    assert_eq!(e.errno(), Some(Errno::ECANCELED), "{e}");

    for b in [
        dev.read_events(from).unwrap(),
        ctl.read_events(from).unwrap(),
    ] {
        assert_eq!(b.lost, 0, "{b:?}");
        let evs = b.events;
        let f = one(&evs, DEVICE_EVENT_INJECTED_FAULT, &hang, &dev);
        assert_eq!((f.detail, f.value), (2, 0), "{f:?}");
        let h = one(&evs, DEVICE_EVENT_HUNG_TASK, &hang, &dev);
        assert_eq!((h.detail, h.value), (0, u64::from(hang_ids[1])), "{h:?}");
        let f = one(&evs, DEVICE_EVENT_INJECTED_FAULT, &error, &dev);
        assert_eq!((f.detail, f.value), (1, Errno::EIO.code() as u64), "{f:?}");
        let s = one(&evs, DEVICE_EVENT_STREAM_STOPPED, &error, &dev);
        assert_eq!(
            (s.detail, s.value),
            (Errno::EIO.code() as u32, u64::from(error_ids[1])),
            "{s:?}"
        );
        let f = one(&evs, DEVICE_EVENT_INJECTED_FAULT, &stop, &dev);
        assert_eq!((f.detail, f.value), (3, 0), "{f:?}");
        let resets: Vec<_> = evs
            .iter()
            .filter(|e| e.code == DEVICE_EVENT_DEVICE_RESET)
            .collect();
        assert_eq!(resets.len(), 1, "{evs:?}");
        let r = resets[0];
        assert_eq!(
            (r.client_id, r.pid, r.uid, r.stream, r.value),
            (0, 0, 0, 0, 0),
            "{r:?}"
        );
        // The running stream, and the halted ones (a reset stops every stream not stopped).
        assert!(r.detail >= 1, "{r:?}");
        assert_eq!(evs.last().map(|e| e.code), Some(DEVICE_EVENT_DEVICE_RESET));
    }
}

/// A device the module brought up logged DEVICE_STARTED first: the second software device
/// (`/dev/davinci1`, which the conformance suite leaves alone) still holds it. The PCI boot
/// has one device, which the conformance suite checks while its log holds the start.
#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn a_device_the_module_brought_up_logged_its_start_first() {
    let other = other_node_path();
    if !std::path::Path::new(&other).exists() {
        eprintln!("{other}: no second device here (the PCI boot); conformance checks davinci0's");
        return;
    }
    let ctl = Control::open(&other).expect("control open");
    let b = ctl.read_events(0).expect("READ_EVENTS");
    assert_eq!(b.lost, 0, "{other}'s log moved past its start: {b:?}");
    let first = b.events.first().expect("a first event");
    assert_eq!(
        (
            first.seq,
            first.code,
            first.client_id,
            first.stream,
            first.detail,
            first.value
        ),
        (0, DEVICE_EVENT_DEVICE_STARTED, 0, 0, 0, 0),
        "{b:?}"
    );
    assert!(first.time_ns <= b.now_ns);
}

/// TRACE or READ_EVENTS with `arg` (its `buf` set to `out`) on `node`; `Err(errno)`.
fn read_into(node: &Node, request: u32, arg: &mut [u8], out: &mut [u8]) -> Result<(), i32> {
    let word = |at: usize| u32::from_ne_bytes(arg[at..at + 4].try_into().unwrap());
    // buf @0, capacity @8, entry_size @16 in both arguments.
    assert!(
        word(8) as usize * word(16) as usize <= out.len(),
        "the capacity fits in `out`"
    );
    arg[..8].copy_from_slice(&(out.as_mut_ptr() as u64).to_ne_bytes());
    // SAFETY: `arg` is the request's whole argument (its `_IOC_SIZE`), and the one pointer in
    // it is `out`, live and exclusively borrowed for the call, `capacity * entry_size` bytes
    // of which the driver may write (checked above).
    let rc = unsafe { libc::ioctl(node.file.as_raw_fd(), request as _, arg.as_mut_ptr()) };
    if rc < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(())
    }
}

fn trace_read_arg(cursor: u64, capacity: u32, entry_size: u32) -> Vec<u8> {
    let mut v = vec![0u8; TraceArgs::SIZE];
    TraceArgs {
        op: TRACE_OP_READ,
        scope: TRACE_SCOPE_DEVICE,
        capacity,
        entry_size,
        cursor,
        ..TraceArgs::default()
    }
    .encode(&mut v);
    v
}

/// `n` FILLs of 64 bytes on a new stream of `dev`, `user_data` from `from`.
fn fills(dev: &Device, from: u64, n: u64) {
    let mem = dev.alloc(64).unwrap();
    let buf = davinci_shim::DeviceMem::dev_addr(&mem);
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    let mut u = from;
    while u < from + n {
        let k = (from + n - u).min(32);
        let d: Vec<TaskDesc> = (u..u + k).map(|i| TaskDesc::fill(i, buf, 64, 1)).collect();
        s.submit_descs(&d).unwrap();
        s.synchronize(LONG).unwrap();
        u += k;
    }
}

/// TRACE's READ (an admin's device trace, from a raw control open) and READ_EVENTS write the
/// caller's buffer through the module: a whole overflowed trace buffer in one call, each
/// record at the caller's 64-byte stride with its padding zeroed and nothing written past the
/// capacity; a short capacity reads part and the cursor goes on; a buffer the caller cannot
/// write is EFAULT, and the records are still there to read.
#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn trace_and_event_reads_reach_the_callers_buffer_through_the_module() {
    let path = node_path();
    let node = Node::open(&path, false);
    let start = node
        .call(
            DRIVER_CMD_TRACE,
            &TraceArgs {
                op: TRACE_OP_START,
                scope: TRACE_SCOPE_DEVICE,
                ..TraceArgs::default()
            },
        )
        .expect("TRACE START (root: an admin)")
        .cursor;
    let dev = Device::open(&path).expect("client");
    let id = dev.client_id().unwrap();
    let over = u64::from(TRACE_RECORDS_MAX) + 76;
    fills(&dev, 1000, over);

    const STRIDE: usize = 64;
    let cap = TRACE_RECORDS_MAX as usize;
    let mut out = vec![0xaau8; (cap + 1) * STRIDE];
    let mut arg = trace_read_arg(start, cap as u32, STRIDE as u32);
    read_into(&node, DRIVER_CMD_TRACE, &mut arg, &mut out[..cap * STRIDE]).expect("TRACE READ");
    let a = TraceArgs::decode(&arg);
    assert_eq!(
        (a.count as usize, a.lost, a.cursor),
        (cap, 76, start + over),
        "{a:?}"
    );
    for (i, e) in out[..cap * STRIDE].chunks_exact(STRIDE).enumerate() {
        let r = TraceRecord::decode(&e[..TraceRecord::SIZE]);
        assert_eq!(
            (r.seq, r.user_data, r.client_id, r.kind),
            (start + 76 + i as u64, 1076 + i as u64, id, TRACE_KIND_TASK),
            "record {i}: {r:?}"
        );
        assert!(
            e[TraceRecord::SIZE..].iter().all(|&b| b == 0),
            "record {i}'s padding"
        );
    }
    assert!(
        out[cap * STRIDE..].iter().all(|&b| b == 0xaa),
        "nothing past the capacity"
    );

    // Three of them: the cursor goes on by three; nothing past the third entry is written.
    let mut out = vec![0xaau8; 8 * STRIDE];
    let mut arg = trace_read_arg(start + 100, 3, STRIDE as u32);
    read_into(&node, DRIVER_CMD_TRACE, &mut arg, &mut out[..3 * STRIDE]).unwrap();
    let a = TraceArgs::decode(&arg);
    assert_eq!((a.count, a.lost, a.cursor), (3, 0, start + 103), "{a:?}");
    assert_eq!(
        TraceRecord::decode(&out[2 * STRIDE..2 * STRIDE + 56]).seq,
        start + 102
    );
    assert!(out[3 * STRIDE..].iter().all(|&b| b == 0xaa));

    // A buffer the caller cannot write: EFAULT, and nothing consumed.
    let ro = anon(page(), libc::PROT_READ);
    for buf in [16u64, ro.ptr as u64] {
        let mut raw = vec![0u8; TraceArgs::SIZE];
        TraceArgs {
            buf,
            ..TraceArgs::decode(&trace_read_arg(start + 100, 4, TraceRecord::SIZE as u32))
        }
        .encode(&mut raw);
        assert_eq!(
            node.ioctl_ptr(DRIVER_CMD_TRACE, raw.as_mut_ptr().cast()),
            Err(libc::EFAULT)
        );
        let mut ev = vec![0u8; ReadEventsArgs::SIZE];
        ReadEventsArgs {
            buf,
            capacity: 4,
            entry_size: RawEvent::SIZE as u32,
            ..ReadEventsArgs::default()
        }
        .encode(&mut ev);
        assert_eq!(
            node.ioctl_ptr(DRIVER_CMD_READ_EVENTS, ev.as_mut_ptr().cast()),
            Err(libc::EFAULT),
            "READ_EVENTS into {buf:#x}"
        );
    }
    let mut out = vec![0u8; 4 * STRIDE];
    let mut arg = trace_read_arg(start + 100, 4, STRIDE as u32);
    read_into(&node, DRIVER_CMD_TRACE, &mut arg, &mut out).unwrap();
    assert_eq!(TraceArgs::decode(&arg).count, 4);

    // READ_EVENTS at a 64-byte stride: the same events the shim reads, padded.
    let want = Control::open(&path).unwrap().read_events(0).unwrap();
    let n = want.events.len().max(1);
    let mut out = vec![0xaau8; (n + 1) * STRIDE];
    let mut ev = vec![0u8; ReadEventsArgs::SIZE];
    ReadEventsArgs {
        capacity: n as u32,
        entry_size: STRIDE as u32,
        cursor: want.events.first().map_or(0, |e| e.seq),
        ..ReadEventsArgs::default()
    }
    .encode(&mut ev);
    read_into(
        &node,
        DRIVER_CMD_READ_EVENTS,
        &mut ev,
        &mut out[..n * STRIDE],
    )
    .unwrap();
    let got = ReadEventsArgs::decode(&ev);
    assert_eq!(got.count as usize, want.events.len(), "{got:?}");
    for (e, w) in out.chunks_exact(STRIDE).zip(&want.events) {
        assert_eq!(&RawEvent::decode(&e[..RawEvent::SIZE]), w);
        assert!(e[RawEvent::SIZE..].iter().all(|&b| b == 0));
    }
    assert!(out[n * STRIDE..].iter().all(|&b| b == 0xaa));

    node.call(
        DRIVER_CMD_TRACE,
        &TraceArgs {
            op: TRACE_OP_STOP,
            scope: TRACE_SCOPE_DEVICE,
            ..TraceArgs::default()
        },
    )
    .expect("TRACE STOP");
}
