//! driver-core against its checking fake platform: what the engine records while a client
//! traces (issue 46, ABI 1.5 TRACE) and the events the device logs (READ_EVENTS), pass by
//! pass. The fake clock moves one nanosecond per reading, so every time is distinct where
//! the engine reads the clock and equal where it shares a reading.

mod support;

use davinci_driver_core::test_util::{hdr, RingMem};
use davinci_driver_core::{DeviceCore, Identity, Inject, Platform, Role, Run, UserMem, PASS_WORK};
use davinci_uapi::*;
use support::*;

type Dev = DeviceCore<HeapPlatform>;

/// The caller's buffer at user address `BASE`.
struct Out(Vec<u8>);

const BASE: u64 = 1 << 20;

impl UserMem for Out {
    fn write(&mut self, addr: u64, data: &[u8]) -> davinci_driver_core::Result<()> {
        let fault = || davinci_driver_core::Error::new(Errno::EFAULT, "outside the buffer");
        let at = addr.checked_sub(BASE).ok_or_else(fault)? as usize;
        self.0
            .get_mut(at..at + data.len())
            .ok_or_else(fault)?
            .copy_from_slice(data);
        Ok(())
    }
}

fn ioctl<T: Wire>(
    dev: &mut Dev,
    c: u32,
    request: u32,
    a: &mut T,
    out: &mut Out,
) -> Result<(), Errno> {
    let mut b = vec![0u8; T::SIZE];
    a.encode(&mut b);
    let r = dev.ioctl(c, request, &mut b, out);
    *a = T::decode(&b);
    r.map(|_| ()).map_err(|e| e.errno)
}

fn trace(dev: &mut Dev, c: u32, op: u32) -> u64 {
    let mut a = TraceArgs {
        op,
        scope: TRACE_SCOPE_CLIENT,
        ..TraceArgs::default()
    };
    ioctl(dev, c, DRIVER_CMD_TRACE, &mut a, &mut Out(Vec::new())).expect("TRACE");
    a.cursor
}

fn read_trace(dev: &mut Dev, c: u32, cursor: u64) -> Vec<TraceRecord> {
    let cap = TRACE_RECORDS_MAX;
    let mut out = Out(vec![0; cap as usize * TraceRecord::SIZE]);
    let mut a = TraceArgs {
        op: TRACE_OP_READ,
        scope: TRACE_SCOPE_CLIENT,
        buf: BASE,
        capacity: cap,
        entry_size: TraceRecord::SIZE as u32,
        cursor,
        ..TraceArgs::default()
    };
    ioctl(dev, c, DRIVER_CMD_TRACE, &mut a, &mut out).expect("TRACE READ");
    assert_eq!(a.lost, 0);
    out.0
        .chunks_exact(TraceRecord::SIZE)
        .take(a.count as usize)
        .map(TraceRecord::decode)
        .collect()
}

fn read_events(dev: &mut Dev, c: u32, cursor: u64) -> Vec<DeviceEvent> {
    let mut out = Out(vec![0; 256 * DeviceEvent::SIZE]);
    let mut a = ReadEventsArgs {
        buf: BASE,
        capacity: 256,
        entry_size: DeviceEvent::SIZE as u32,
        cursor,
        ..ReadEventsArgs::default()
    };
    ioctl(dev, c, DRIVER_CMD_READ_EVENTS, &mut a, &mut out).expect("READ_EVENTS");
    out.0
        .chunks_exact(DeviceEvent::SIZE)
        .take(a.count as usize)
        .map(DeviceEvent::decode)
        .collect()
}

/// Runs `stream` until it has nothing more to do: the passes that did something and the
/// last of their results (or the first that was not progress).
fn run(dev: &Dev, stream: u32) -> (u32, Run) {
    let mut passes = 0;
    let mut last = Run::Idle;
    loop {
        match dev.run_stream(stream, 64) {
            r @ (Run::Continuing | Run::Progress(_)) => {
                passes += 1;
                last = r;
            }
            Run::Idle => return (passes, last),
            r => return (passes + 1, r),
        }
        assert!(passes < 10_000);
    }
}

fn client_id(dev: &mut Dev, c: u32) -> u32 {
    let mut info = DeviceInfo::default();
    call(dev, c, DRIVER_CMD_GET_INFO, &mut info).unwrap();
    info.caller_id
}

/// A traced client's two streams: a run of NOPs is one record of five; a FILL of three passes'
/// work (two streams: half a pass's work each) is a chunk per pass, then its task, all
/// within it; an EVENT_WAIT spans from its pass to the one that saw the record; after STOP
/// nothing more is recorded; a device nobody traces writes no record at all.
#[test]
fn the_engine_records_runs_chunks_and_waits_while_traced_only() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let id = client_id(&mut dev, c);
    let k = ctx(&mut dev, c);
    let ev = event(&mut dev, c, k);
    let len = 3 * PASS_WORK;
    let a = alloc(&mut dev, c, len);
    let mut s = stream(&mut dev, c, k, 64, 64);
    let mut w = stream(&mut dev, c, k, 16, 16);
    // Nothing traces yet: work leaves every buffer empty.
    nops(&mut s, 100, 3);
    run(&dev, s.handle);
    drain(&mut s);
    // (A buffer's Debug shows the number of its next record.)
    assert!(dev
        .platform()
        .trace_logs()
        .iter()
        .all(|l| format!("{l:?}").contains("next: 0,")));

    let cursor = trace(&mut dev, c, TRACE_OP_START);
    w.prod.push(&TaskDesc::event_wait(20, ev, 1)).unwrap();
    w.prod.push(&TaskDesc::nop(21)).unwrap();
    w.prod.publish();
    assert!(matches!(dev.run_stream(w.handle, 64), Run::Blocked { .. }));
    nops(&mut s, 1, 5);
    for d in [
        TaskDesc::fill(6, DevAddr(a.dev_addr), len, 1),
        TaskDesc::event_record(7, ev, 1),
        TaskDesc::nop(8),
    ] {
        s.prod.push(&d).unwrap();
    }
    s.prod.publish();
    // Half a pass's work a stream: six passes of the FILL (and the NOPs, the record after).
    let (passes, end) = run(&dev, s.handle);
    assert!(
        passes >= 6 && matches!(end, Run::Progress(_)),
        "{passes} {end:?}"
    );
    assert_eq!(dev.run_stream(w.handle, 64), Run::Progress(2));
    let recs = read_trace(&mut dev, c, cursor);
    assert!(recs.iter().all(|r| r.client_id == id));
    let of = |h: u32| {
        recs.iter()
            .filter(move |r| r.stream == h)
            .copied()
            .collect::<Vec<_>>()
    };
    let (rs, rw) = (of(s.handle), of(w.handle));
    let nop_run = rs[0];
    assert_eq!(
        (
            nop_run.user_data,
            nop_run.index,
            nop_run.tasks,
            nop_run.kind
        ),
        (1, 3, 5, TRACE_KIND_TASK),
        "{nop_run:?}"
    );
    assert_eq!(nop_run.start_ns, nop_run.end_ns);
    let chunks: Vec<_> = rs.iter().filter(|r| r.kind == TRACE_KIND_CHUNK).collect();
    assert_eq!(chunks.len(), 6, "a chunk per pass: {rs:?}");
    let fill = rs
        .iter()
        .find(|r| r.user_data == 6 && r.kind == TRACE_KIND_TASK)
        .unwrap();
    assert_eq!(
        (fill.index, fill.opcode, fill.status),
        (8, Opcode::Fill as u8, 0)
    );
    for (i, ch) in chunks.iter().enumerate() {
        assert_eq!(
            (ch.chunk as usize, ch.index, ch.user_data, ch.tasks),
            (i, 8, 6, 1)
        );
        assert!(ch.seq < fill.seq);
        assert!(
            fill.start_ns <= ch.start_ns && ch.start_ns < ch.end_ns && ch.end_ns <= fill.end_ns
        );
    }
    assert!(
        chunks.windows(2).all(|p| p[0].end_ns <= p[1].start_ns),
        "one pass after another"
    );
    assert_eq!(chunks[0].start_ns, fill.start_ns);
    assert_eq!(chunks[5].end_ns, fill.end_ns);
    let record = rs.iter().find(|r| r.user_data == 7).unwrap();
    assert_eq!(record.index, 9);
    assert!(
        record.start_ns == record.end_ns && record.start_ns >= fill.end_ns,
        "{record:?}"
    );
    assert_eq!(rs.last().map(|r| (r.user_data, r.index)), Some((8, 10)));
    let wait = rw[0];
    assert_eq!(
        (wait.user_data, wait.index, wait.opcode),
        (20, 0, Opcode::EventWait as u8)
    );
    assert!(
        wait.start_ns < nop_run.start_ns,
        "taken before the record's stream ran"
    );
    assert!(wait.end_ns > record.end_ns, "completed after the record");
    assert_eq!((rw[1].user_data, rw[1].index), (21, 1));

    // STOP: the next tasks are not recorded.
    let stopped = trace(&mut dev, c, TRACE_OP_STOP);
    assert_eq!(stopped, cursor + recs.len() as u64);
    nops(&mut s, 30, 2);
    s.prod
        .push(&TaskDesc::fill(32, DevAddr(a.dev_addr), 64, 2))
        .unwrap();
    s.prod.publish();
    run(&dev, s.handle);
    assert!(read_trace(&mut dev, c, stopped).is_empty());
}

/// STREAM_STOPPED names the stream, the errno and where: a bad descriptor's index and fault
/// kind; a corrupt ring's position, with no fault kind.
#[test]
fn a_stopped_stream_logs_where_and_why() {
    let mut dev = device();
    let c = dev.open(params(7, 1000, Role::Client)).unwrap();
    let id = client_id(&mut dev, c);
    let k = ctx(&mut dev, c);
    let mut s = stream(&mut dev, c, k, 16, 16);
    nops(&mut s, 1, 2);
    s.prod
        .push(&TaskDesc::fill(3, DevAddr(0x10), 64, 0))
        .unwrap();
    s.prod.publish();
    assert_eq!(run(&dev, s.handle).1, Run::Failed(Errno::EACCES));
    let evs = read_events(&mut dev, c, 0);
    let e = evs
        .iter()
        .find(|e| e.stream == s.handle)
        .expect("the stopped stream's event");
    assert_eq!(
        (e.code, e.client_id, e.pid, e.uid, e.detail),
        (
            DEVICE_EVENT_STREAM_STOPPED,
            id,
            7,
            1000,
            Errno::EACCES.code() as u32
        )
    );
    assert_eq!(
        e.value,
        (u64::from(FaultKind::NotOwned as u8) << 32) | 2,
        "{e:?}"
    );

    // A tail the host moved past the ring: EPROTO at the head, no descriptor, no kind.
    let mut t = stream(&mut dev, c, k, 16, 16);
    nops(&mut t, 1, 3);
    assert_eq!(run(&dev, t.handle).1, Run::Progress(3));
    let mem = RingMem::of(&dev, c, t.handle).unwrap();
    mem.set_cmd_hdr(hdr::TAIL, 3 + 17);
    assert_eq!(dev.run_stream(t.handle, 64), Run::Failed(Errno::EPROTO));
    let evs = read_events(&mut dev, c, 0);
    let e = evs.iter().find(|e| e.stream == t.handle).unwrap();
    assert_eq!(
        (e.code, e.detail, e.value),
        (1, Errno::EPROTO.code() as u32, 3),
        "{e:?}"
    );
    // LIST_CLIENTS counts both stops (ABI 1.5 stream_errors), a destroyed stream's too.
    assert_eq!(dev.client_usage(c).unwrap().stream_errors, 2);
    dev.destroy_stream(c, s.handle).unwrap();
    assert_eq!(dev.client_usage(c).unwrap().stream_errors, 2);
}

/// The engine's injected faults and a reset: a hang logs INJECTED_FAULT (2) and HUNG_TASK at
/// the hung task's index, an error INJECTED_FAULT (1, its errno) then STREAM_STOPPED (no fault
/// kind), a stop INJECTED_FAULT (3); a reset DEVICE_RESET with the streams it stopped; the
/// device's start is logged once, first.
#[test]
fn faults_resets_and_the_start_are_logged_once_each() {
    let mut dev = device();
    dev.set_device_identity(Identity::new([1; 16], "m", "d", -1, 1));
    dev.set_device_identity(Identity::new([1; 16], "m", "d", -1, 1));
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut hang = stream(&mut dev, c, k, 16, 16);
    let mut error = stream(&mut dev, c, k, 16, 16);
    let mut stop = stream(&mut dev, c, k, 16, 16);
    dev.inject(Some(hang.handle), Some(Inject::HangAt { nth: 2 }))
        .unwrap();
    dev.inject(
        Some(error.handle),
        Some(Inject::ErrorAt {
            nth: 3,
            errno: Errno::EIO,
        }),
    )
    .unwrap();
    dev.inject(Some(stop.handle), Some(Inject::StopAt { nth: 2 }))
        .unwrap();
    for s in [&mut hang, &mut error, &mut stop] {
        nops(s, 1, 4);
    }
    // One task runs, then the stream halts (or fails).
    assert_eq!(run(&dev, hang.handle), (2, Run::Halted));
    assert_eq!(run(&dev, error.handle), (1, Run::Failed(Errno::EIO)));
    assert_eq!(run(&dev, stop.handle), (2, Run::Halted));
    let stopped = dev.reset();
    assert_eq!(
        stopped, 2,
        "the hung and the stopped stream; the failed one was stopped"
    );
    let evs = read_events(&mut dev, c, 0);
    let seen: Vec<_> = evs
        .iter()
        .map(|e| (e.code, e.stream, e.detail, e.value))
        .collect();
    assert_eq!(
        seen,
        [
            (DEVICE_EVENT_DEVICE_STARTED, 0, 0, 0),
            (DEVICE_EVENT_INJECTED_FAULT, hang.handle, 2, 0),
            (DEVICE_EVENT_HUNG_TASK, hang.handle, 0, 1),
            (
                DEVICE_EVENT_INJECTED_FAULT,
                error.handle,
                1,
                Errno::EIO.code() as u64
            ),
            (
                DEVICE_EVENT_STREAM_STOPPED,
                error.handle,
                Errno::EIO.code() as u32,
                2
            ),
            (DEVICE_EVENT_INJECTED_FAULT, stop.handle, 3, 0),
            (DEVICE_EVENT_DEVICE_RESET, 0, 2, 0),
        ]
    );
    assert!(evs.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
}

/// A task an injected `error-at` fails is in the trace, with its status: the NOPs before it
/// as one run, then the failed one.
#[test]
fn an_injected_error_is_traced_with_its_status() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut s = stream(&mut dev, c, k, 16, 16);
    dev.inject(
        Some(s.handle),
        Some(Inject::ErrorAt {
            nth: 3,
            errno: Errno::EIO,
        }),
    )
    .unwrap();
    let cursor = trace(&mut dev, c, TRACE_OP_START);
    nops(&mut s, 1, 4);
    assert_eq!(run(&dev, s.handle).1, Run::Failed(Errno::EIO));
    let recs = read_trace(&mut dev, c, cursor);
    let seen: Vec<_> = recs.iter().map(|r| (r.index, r.tasks, r.status)).collect();
    assert_eq!(seen, [(0, 2, 0), (2, 1, -Errno::EIO.code())]);
}
