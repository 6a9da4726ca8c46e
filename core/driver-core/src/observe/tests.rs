//! The observation state alone: the seqlock logs (numbers, the newest kept, a restart hiding
//! a previous owner's records, no torn record under concurrent writers), TRACE's and
//! READ_EVENTS' cursors and `lost`, who sees which event, the quota-storm window, and the
//! rules of the trace buffers (EINVAL, EPERM, ENOENT, EBUSY, ENOSPC, a buffer handed on).

extern crate std;

use std::vec::Vec;

use davinci_uapi::*;

use super::{Event, SeqLog, TraceLog, TRACE_BUFFERS, TRACE_RECORDS};
use crate::error::QuotaKind;
use crate::test_util::{device, HeapPlatform};
use crate::{DeviceCore, OpenParams, Platform, Role, Tenant, UserMem, CONTAINER_LEN};

type Dev = DeviceCore<HeapPlatform>;

/// A caller's buffer at user address `BASE`: what the device wrote there.
struct Out(Vec<u8>);

const BASE: u64 = 0x10_0000;

impl UserMem for Out {
    fn write(&mut self, addr: u64, data: &[u8]) -> crate::Result<()> {
        let fault = || crate::Error::new(Errno::EFAULT, "outside the test's buffer");
        let at = addr.checked_sub(BASE).ok_or_else(fault)? as usize;
        self.0
            .get_mut(at..at + data.len())
            .ok_or_else(fault)?
            .copy_from_slice(data);
        Ok(())
    }
}

/// An open of user `uid` (pid `uid`), its own tenant; admin if `uid` is 0.
fn opener(uid: u32, role: Role) -> OpenParams {
    OpenParams {
        role,
        pid: uid,
        uid,
        admin: uid == 0,
        container: [0; CONTAINER_LEN],
        comm: ClientUsage::comm_field("observe"),
        tenant: Tenant::User(uid),
    }
}

/// A shared device with an admin's control open: `(device, control)`.
fn shared() -> (Dev, u32) {
    let mut dev = device();
    let root = dev.open(opener(0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    (dev, root)
}

fn call<T: Wire>(
    dev: &mut Dev,
    client: u32,
    request: u32,
    a: &mut T,
    out: &mut Out,
) -> Result<(), Errno> {
    let mut b = std::vec![0u8; T::SIZE];
    a.encode(&mut b);
    let r = dev.ioctl(client, request, &mut b, out);
    *a = T::decode(&b);
    r.map(|_| ()).map_err(|e| e.errno)
}

fn trace_op(dev: &mut Dev, client: u32, op: u32, scope: u32) -> Result<TraceArgs, Errno> {
    let mut a = TraceArgs {
        op,
        scope,
        ..TraceArgs::default()
    };
    call(dev, client, DRIVER_CMD_TRACE, &mut a, &mut Out(Vec::new()))?;
    Ok(a)
}

/// TRACE READ of up to `capacity` records from `cursor`.
fn trace_read(
    dev: &mut Dev,
    client: u32,
    scope: u32,
    cursor: u64,
    capacity: u32,
) -> Result<(TraceArgs, Vec<TraceRecord>), Errno> {
    let mut out = Out(std::vec![0u8; capacity as usize * TraceRecord::SIZE]);
    let mut a = TraceArgs {
        op: TRACE_OP_READ,
        scope,
        buf: if capacity > 0 { BASE } else { 0 },
        capacity,
        entry_size: TraceRecord::SIZE as u32,
        cursor,
        ..TraceArgs::default()
    };
    call(dev, client, DRIVER_CMD_TRACE, &mut a, &mut out)?;
    let recs = out
        .0
        .chunks_exact(TraceRecord::SIZE)
        .take(a.count as usize)
        .map(TraceRecord::decode)
        .collect();
    Ok((a, recs))
}

/// READ_EVENTS of up to `capacity` events from `cursor`.
fn events(
    dev: &mut Dev,
    client: u32,
    cursor: u64,
    capacity: u32,
) -> (ReadEventsArgs, Vec<DeviceEvent>) {
    let mut out = Out(std::vec![0u8; capacity as usize * DeviceEvent::SIZE]);
    let mut a = ReadEventsArgs {
        buf: if capacity > 0 { BASE } else { 0 },
        capacity,
        entry_size: DeviceEvent::SIZE as u32,
        cursor,
        ..ReadEventsArgs::default()
    };
    call(dev, client, DRIVER_CMD_READ_EVENTS, &mut a, &mut out).expect("READ_EVENTS");
    let evs = out
        .0
        .chunks_exact(DeviceEvent::SIZE)
        .take(a.count as usize)
        .map(DeviceEvent::decode)
        .collect();
    (a, evs)
}

/// The trace buffer `client` holds (its index among the host's).
fn buffer_of(dev: &Dev, client: u32) -> Option<usize> {
    (dev.clients.get(client)?.observe.buffer as usize).checked_sub(1)
}

/// A record in storage whose every word says `k`.
fn words(k: u64) -> [u64; 6] {
    [k; 6]
}

#[test]
fn a_log_numbers_its_records_and_keeps_the_newest() {
    let log = SeqLog::<2, 8>::new();
    for k in 0..5u64 {
        assert_eq!(log.push([k, k * 10]), k);
    }
    assert_eq!((log.next(), log.oldest()), (5, 0));
    assert_eq!(log.get(3), Some([3, 30]));
    assert_eq!(log.get(5), None, "not written yet");
    for k in 5..20u64 {
        log.push([k, k * 10]);
    }
    // Eight slots: records 12..20 are held, the older ones were overwritten.
    assert_eq!((log.next(), log.oldest()), (20, 12));
    assert_eq!(log.get(11), None);
    assert_eq!(log.get(12), Some([12, 120]));
    assert_eq!(log.get(19), Some([19, 190]));
}

#[test]
fn a_restarted_log_hides_what_was_written_before() {
    let log = SeqLog::<2, 8>::new();
    for k in 0..3u64 {
        log.push([k, k]);
    }
    log.restart();
    assert_eq!((log.next(), log.oldest()), (3, 3));
    assert!((0..3).all(|s| log.get(s).is_none()));
    assert_eq!(log.push([7, 7]), 3, "numbers go on");
    assert_eq!(log.get(3), Some([7, 7]));
}

/// Two writers overwrite a small log as fast as they can while a reader copies it: every
/// record the reader gets is whole (all its words from one push), and is the one it asked for.
#[test]
fn a_reader_never_sees_a_torn_record() {
    let log = SeqLog::<4, 4>::new();
    let done = core::sync::atomic::AtomicBool::new(false);
    let mut seen = 0u64;
    std::thread::scope(|s| {
        for w in 0..2u64 {
            let (log, done) = (&log, &done);
            s.spawn(move || {
                let mut k = 0u64;
                while !done.load(core::sync::atomic::Ordering::Relaxed) {
                    let v = (w << 32) | k;
                    let seq = log.push([v, v, v, v]);
                    assert!(seq < u64::MAX);
                    k += 1;
                }
            });
        }
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_millis(300) {
            let next = log.next();
            for seq in next.saturating_sub(4)..next {
                if let Some(w) = log.get(seq) {
                    assert!(w.iter().all(|&x| x == w[0]), "record {seq} torn: {w:?}");
                    seen += 1;
                }
            }
        }
        done.store(true, core::sync::atomic::Ordering::Relaxed);
    });
    assert!(seen > 0, "the reader got no record at all");
}

#[test]
fn trace_refuses_bad_arguments_with_why() {
    let (mut dev, root) = shared();
    let c = dev.open(opener(1000, Role::Client)).unwrap();
    let args = |op, scope, pad, buf| TraceArgs {
        op,
        scope,
        pad,
        buf,
        ..TraceArgs::default()
    };
    let none = &mut Out(Vec::new());
    for (what, mut a, errno) in [
        ("op 9", args(9, TRACE_SCOPE_CLIENT, 0, 0), Errno::EINVAL),
        ("scope 7", args(TRACE_OP_START, 7, 0, 0), Errno::EINVAL),
        (
            "pad",
            args(TRACE_OP_START, TRACE_SCOPE_CLIENT, 1, 0),
            Errno::EINVAL,
        ),
        (
            "a buffer with START",
            args(TRACE_OP_START, TRACE_SCOPE_CLIENT, 0, BASE),
            Errno::EINVAL,
        ),
        (
            "READ before START",
            args(TRACE_OP_READ, TRACE_SCOPE_CLIENT, 0, 0),
            Errno::ENOENT,
        ),
        (
            "the device from a non-admin",
            args(TRACE_OP_START, TRACE_SCOPE_DEVICE, 0, 0),
            Errno::EPERM,
        ),
    ] {
        assert_eq!(
            call(&mut dev, c, DRIVER_CMD_TRACE, &mut a, none),
            Err(errno),
            "{what}"
        );
    }
    // A control open has no streams of its own to trace.
    assert_eq!(
        trace_op(&mut dev, root, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap_err(),
        Errno::EPERM
    );
    trace_op(&mut dev, c, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap();
    // READ: an entry size the LIST rule refuses, no buffer for a capacity.
    let mut a = TraceArgs {
        op: TRACE_OP_READ,
        scope: TRACE_SCOPE_CLIENT,
        buf: BASE,
        capacity: 1,
        entry_size: 12,
        ..TraceArgs::default()
    };
    let mut out = Out(std::vec![0; 64]);
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_TRACE, &mut a, &mut out),
        Err(Errno::EINVAL)
    );
    a.entry_size = TraceRecord::SIZE as u32;
    a.buf = 0;
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_TRACE, &mut a, &mut out),
        Err(Errno::EFAULT)
    );
    // READ_EVENTS: pad, entry size.
    let mut e = ReadEventsArgs {
        pad: 1,
        ..ReadEventsArgs::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_READ_EVENTS, &mut e, &mut out),
        Err(Errno::EINVAL)
    );
    e = ReadEventsArgs {
        buf: BASE,
        capacity: 1,
        entry_size: 4,
        ..ReadEventsArgs::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_READ_EVENTS, &mut e, &mut out),
        Err(Errno::EINVAL)
    );
    // The message says what was wrong.
    let mut b = std::vec![0u8; TraceArgs::SIZE];
    TraceArgs {
        op: 9,
        scope: TRACE_SCOPE_CLIENT,
        ..TraceArgs::default()
    }
    .encode(&mut b);
    let err = dev
        .ioctl(c, DRIVER_CMD_TRACE, &mut b, &mut Out(Vec::new()))
        .unwrap_err();
    assert!(err.msg.contains("op must be"), "{}", err.msg);
}

/// One buffer per tracing tenant, three tenants at most (the fourth buffer is the device's):
/// a second open of a tenant is EBUSY while the first records and takes the buffer over once
/// it stopped, a fourth tenant ENOSPC while the admin's device trace still starts; a buffer
/// freed by its owner's close goes to the next tenant showing none of the previous owner's
/// records.
#[test]
fn trace_buffers_are_one_per_tenant_and_handed_on_clean() {
    assert_eq!(TRACE_BUFFERS, 4);
    let (mut dev, root) = shared();
    let a1 = dev.open(opener(1000, Role::Client)).unwrap();
    let a2 = dev.open(opener(1000, Role::Client)).unwrap();
    let b = dev.open(opener(1001, Role::Client)).unwrap();
    let c = dev.open(opener(1002, Role::Client)).unwrap();
    let d = dev.open(opener(1003, Role::Client)).unwrap();
    let first = trace_op(&mut dev, a1, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap();
    assert_eq!(
        trace_op(&mut dev, a1, TRACE_OP_START, TRACE_SCOPE_CLIENT)
            .unwrap()
            .cursor,
        first.cursor,
        "START again is idempotent"
    );
    assert_eq!(
        trace_op(&mut dev, a2, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap_err(),
        Errno::EBUSY
    );
    trace_op(&mut dev, b, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap();
    trace_op(&mut dev, c, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap();
    assert_eq!(
        trace_op(&mut dev, d, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap_err(),
        Errno::ENOSPC
    );
    trace_op(&mut dev, root, TRACE_OP_START, TRACE_SCOPE_DEVICE).unwrap();
    // STOP keeps the buffer readable, until the tenant's other open starts a trace: it takes
    // the buffer over, and the first open's trace is gone (ENOENT).
    trace_op(&mut dev, a1, TRACE_OP_STOP, TRACE_SCOPE_CLIENT).unwrap();
    let a_buf = buffer_of(&dev, a1);
    trace_read(&mut dev, a1, TRACE_SCOPE_CLIENT, 0, 16).unwrap();
    trace_op(&mut dev, a2, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap();
    assert_eq!(buffer_of(&dev, a2), a_buf);
    assert_eq!(buffer_of(&dev, a1), None);
    assert_eq!(
        trace_read(&mut dev, a1, TRACE_SCOPE_CLIENT, 0, 16).unwrap_err(),
        Errno::ENOENT
    );
    // Now A2 records: A1 is refused.
    assert_eq!(
        trace_op(&mut dev, a1, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap_err(),
        Errno::EBUSY
    );

    // B's buffer holds B's records; B closes and D gets that buffer.
    let held = buffer_of(&dev, b).expect("b holds a buffer");
    for k in 0..5 {
        dev.platform().trace_logs()[held].push(words(k));
    }
    let (got, recs) = trace_read(&mut dev, b, TRACE_SCOPE_CLIENT, 0, 16).unwrap();
    assert_eq!((got.count, recs.len(), got.cursor), (5, 5, 5));
    dev.close(b);
    let start = trace_op(&mut dev, d, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap();
    assert_eq!(buffer_of(&dev, d), Some(held));
    let (got, recs) = trace_read(&mut dev, d, TRACE_SCOPE_CLIENT, start.cursor, 16).unwrap();
    assert_eq!((got.count, got.lost), (0, 0), "{recs:?}");
    // Not from an older cursor either: nothing of B's is held for D.
    let (got, recs) = trace_read(&mut dev, d, TRACE_SCOPE_CLIENT, 0, 16).unwrap();
    assert_eq!(got.count, 0, "{recs:?}");
    assert_eq!(got.cursor, start.cursor);
    // A1 may trace once A2, the tenant's tracer, is gone.
    dev.close(a2);
    trace_op(&mut dev, a1, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap();
}

/// What the data path records a stream into follows START and STOP: the owner's buffer for a
/// client trace, the device buffer for an admin's (while any admin traces), both at once.
#[test]
fn the_tracer_of_a_stream_follows_start_and_stop() {
    let (mut dev, root) = shared();
    let root2 = dev.open(opener(0, Role::Control)).unwrap();
    let a = dev.open(opener(1000, Role::Client)).unwrap();
    let b = dev.open(opener(1001, Role::Client)).unwrap();
    let on = |dev: &Dev, c: u32| {
        let t = dev.tracer(c, 1);
        (t.own.is_some(), t.device.is_some())
    };
    assert_eq!((on(&dev, a), on(&dev, b)), ((false, false), (false, false)));
    assert!(
        !dev.tracer(a, 1).on(),
        "nothing traces: the one branch says so"
    );
    trace_op(&mut dev, a, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap();
    assert_eq!((on(&dev, a), on(&dev, b)), ((true, false), (false, false)));
    trace_op(&mut dev, root, TRACE_OP_START, TRACE_SCOPE_DEVICE).unwrap();
    trace_op(&mut dev, root2, TRACE_OP_START, TRACE_SCOPE_DEVICE).unwrap();
    assert_eq!((on(&dev, a), on(&dev, b)), ((true, true), (false, true)));
    trace_op(&mut dev, a, TRACE_OP_STOP, TRACE_SCOPE_CLIENT).unwrap();
    // One admin stops; the other still traces the device.
    trace_op(&mut dev, root, TRACE_OP_STOP, TRACE_SCOPE_DEVICE).unwrap();
    assert_eq!((on(&dev, a), on(&dev, b)), ((false, true), (false, true)));
    // The records go to both buffers a stream is traced into.
    trace_op(&mut dev, a, TRACE_OP_START, TRACE_SCOPE_CLIENT).unwrap();
    let own = buffer_of(&dev, a).unwrap();
    let (own_before, dev_before) = (
        dev.platform().trace_logs()[own].next(),
        dev.platform().trace_logs()[0].next(),
    );
    dev.tracer(a, 1).task(super::TaskTrace {
        user_data: 42,
        start_ns: 1,
        end_ns: 2,
        index: 3,
        status: -5,
        opcode: Opcode::Copy as u8,
        kind: TRACE_KIND_TASK,
        chunk: 0,
        tasks: 3,
    });
    let logs: &[TraceLog] = dev.platform().trace_logs();
    assert_eq!(logs[own].next(), own_before + 1);
    assert_eq!(logs[0].next(), dev_before + 1);
    let r = super::decode_trace(own_before, logs[own].get(own_before).unwrap());
    let id = dev.clients.get(a).unwrap().client_id;
    assert_eq!(
        (
            r.user_data,
            r.start_ns,
            r.end_ns,
            r.client_id,
            r.stream,
            r.index,
            r.status
        ),
        (42, 1, 2, id, 1, 3, -5)
    );
    assert_eq!(
        (r.opcode, r.kind, r.chunk),
        (Opcode::Copy as u8, TRACE_KIND_TASK, 0)
    );
    // The last admin's close ends the device trace.
    dev.close(root2);
    assert_eq!(on(&dev, b), (false, false));
}

/// READ's cursor and `lost`: an overflowed buffer keeps the newest records and says how many
/// went; a small capacity reads part and the cursor goes on from there; a cursor past the end
/// reads nothing and comes back at the end.
#[test]
fn trace_reads_go_by_cursor_and_count_what_was_lost() {
    let (mut dev, _root) = shared();
    let a = dev.open(opener(1000, Role::Client)).unwrap();
    let start = trace_op(&mut dev, a, TRACE_OP_START, TRACE_SCOPE_CLIENT)
        .unwrap()
        .cursor;
    let buf = buffer_of(&dev, a).unwrap();
    let n = TRACE_RECORDS as u64 + 6;
    for k in 0..n {
        dev.platform().trace_logs()[buf].push(words(k));
    }
    let (got, recs) = trace_read(&mut dev, a, TRACE_SCOPE_CLIENT, start, 2048).unwrap();
    assert_eq!((got.count as usize, got.lost), (TRACE_RECORDS, 6));
    assert_eq!(recs[0].seq, start + 6);
    assert_eq!(
        recs[0].user_data, 6,
        "the oldest held is the seventh written"
    );
    assert!(recs.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    assert_eq!(got.cursor, start + n);
    let (got, _) = trace_read(&mut dev, a, TRACE_SCOPE_CLIENT, got.cursor, 16).unwrap();
    assert_eq!((got.count, got.lost, got.cursor), (0, 0, start + n));
    // Five of the last ten, then the rest.
    let (got, recs) = trace_read(&mut dev, a, TRACE_SCOPE_CLIENT, start + n - 10, 5).unwrap();
    assert_eq!((got.count, got.lost, got.cursor), (5, 0, start + n - 5));
    assert_eq!(recs[4].user_data, n - 6);
    let (got, _) = trace_read(&mut dev, a, TRACE_SCOPE_CLIENT, got.cursor, 5).unwrap();
    assert_eq!((got.count, got.cursor), (5, start + n));
    let (got, _) = trace_read(&mut dev, a, TRACE_SCOPE_CLIENT, start + n + 100, 5).unwrap();
    assert_eq!((got.count, got.lost, got.cursor), (0, 0, start + n));
    // Capacity 0 reads nothing (and needs no buffer).
    let (got, _) = trace_read(&mut dev, a, TRACE_SCOPE_CLIENT, start, 0).unwrap();
    assert_eq!(got.count, 0);
}

/// READ_EVENTS: a non-admin sees the device's own events and its user's clients', with gaps
/// in `seq` for the others; an admin sees all; the log keeps its newest 256 and counts the
/// rest lost; capacity 0 learns the cursor.
#[test]
fn events_are_seen_by_their_user_and_admins_and_go_by_cursor() {
    let (mut dev, root) = shared();
    let a = dev.open(opener(1000, Role::Client)).unwrap();
    let a2 = dev.open(opener(1000, Role::Control)).unwrap();
    let b = dev.open(opener(1001, Role::Client)).unwrap();
    let ev = |code| Event {
        code,
        detail: 9,
        value: 77,
        ..Event::default()
    };
    dev.log_event(0, ev(DEVICE_EVENT_DEVICE_RESET));
    dev.log_event(a, ev(DEVICE_EVENT_STREAM_STOPPED));
    dev.log_event(b, ev(DEVICE_EVENT_HUNG_TASK));
    let codes = |v: &[DeviceEvent]| v.iter().map(|e| (e.seq, e.code)).collect::<Vec<_>>();
    let (_, all) = events(&mut dev, root, 0, 16);
    assert_eq!(codes(&all), [(0, 3), (1, 1), (2, 2)]);
    let id_a = dev.clients.get(a).unwrap().client_id;
    assert_eq!(
        (
            all[1].client_id,
            all[1].pid,
            all[1].uid,
            all[1].detail,
            all[1].value
        ),
        (id_a, 1000, 1000, 9, 77)
    );
    assert_eq!((all[0].client_id, all[0].pid, all[0].uid), (0, 0, 0));
    // A's user, by its client and by its control open; B sees its own.
    for c in [a, a2] {
        let (got, v) = events(&mut dev, c, 0, 16);
        assert_eq!(codes(&v), [(0, 3), (1, 1)]);
        assert_eq!(got.cursor, 3, "past B's event it skipped");
    }
    assert_eq!(codes(&events(&mut dev, b, 0, 16).1), [(0, 3), (2, 2)]);
    // Capacity 0: the cursor to read from next, nothing else.
    let (got, v) = events(&mut dev, b, 0, 0);
    assert_eq!((got.count, got.cursor, v.len()), (0, 3, 0));

    // 300 more: the newest 256 stay, 47 of the 303 are lost to a reader from 0.
    for k in 0..300u64 {
        dev.log_event(
            0,
            Event {
                value: k,
                ..ev(DEVICE_EVENT_QUOTA_STORM)
            },
        );
    }
    let (got, v) = events(&mut dev, root, 0, 512);
    assert_eq!((got.lost, got.count, got.cursor), (47, 256, 303));
    assert_eq!((v[0].seq, v[0].value), (47, 44));
    // In pieces: a cursor goes on where the last read stopped.
    let (got, v) = events(&mut dev, root, 100, 10);
    assert_eq!(
        (got.lost, got.count, got.cursor, v[0].seq),
        (0, 10, 110, 100)
    );
    let (got, _) = events(&mut dev, root, 999, 10);
    assert_eq!((got.count, got.cursor), (0, 303));
}

/// QUOTA_STORM: the 16th refusal within a second logs one event for the client (the kind of
/// the last refusal, the refusals counted), and no more until a new window; another client
/// has its own window. The refusals come from the quota itself (CREATE_CONTEXT past it).
#[test]
fn a_storm_of_quota_refusals_logs_one_event_a_second() {
    let (mut dev, root) = shared();
    let a = dev.open(opener(1000, Role::Client)).unwrap();
    let b = dev.open(opener(1001, Role::Client)).unwrap();
    let storms = |dev: &mut Dev| {
        events(dev, root, 0, 256)
            .1
            .into_iter()
            .filter(|e| e.code == DEVICE_EVENT_QUOTA_STORM)
            .collect::<Vec<_>>()
    };
    let none = &mut Out(Vec::new());
    let mut refused = 0;
    let mut ctx = CreateContextArgs::default();
    while refused < QUOTA_STORM_REFUSALS - 1 {
        if call(&mut dev, a, DRIVER_CMD_CREATE_CONTEXT, &mut ctx, none) == Err(Errno::ENOSPC) {
            refused += 1;
        }
    }
    assert_eq!(dev.clients.get(a).unwrap().observe.refusals, refused);
    assert!(storms(&mut dev).is_empty(), "15 refusals are no storm");
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_CREATE_CONTEXT, &mut ctx, none),
        Err(Errno::ENOSPC)
    );
    let s = storms(&mut dev);
    assert_eq!(s.len(), 1, "{s:?}");
    let id_a = dev.clients.get(a).unwrap().client_id;
    assert_eq!(
        (s[0].client_id, s[0].uid, s[0].detail, s[0].value),
        (
            id_a,
            1000,
            QUOTA_KIND_CONTEXTS,
            u64::from(QUOTA_STORM_REFUSALS)
        )
    );
    for _ in 0..40 {
        dev.note_refusal(a, QuotaKind::Streams);
    }
    assert_eq!(storms(&mut dev).len(), 1, "one a second");
    // B's refusals are B's.
    for _ in 0..QUOTA_STORM_REFUSALS {
        dev.note_refusal(b, QuotaKind::Memory);
    }
    let s = storms(&mut dev);
    assert_eq!(s.len(), 2);
    assert_eq!((s[1].uid, s[1].detail), (1001, QUOTA_KIND_MEMORY));
    // A second later, a new window: 15 are nothing, the 16th is the next storm.
    let now = dev
        .platform()
        .now
        .load(core::sync::atomic::Ordering::Relaxed);
    dev.platform()
        .now
        .store(now + 1_000_000_000, core::sync::atomic::Ordering::Relaxed);
    for _ in 0..QUOTA_STORM_REFUSALS - 1 {
        dev.note_refusal(a, QuotaKind::Streams);
    }
    assert_eq!(storms(&mut dev).len(), 2);
    dev.note_refusal(a, QuotaKind::Streams);
    let s = storms(&mut dev);
    assert_eq!(s.len(), 3);
    assert_eq!((s[2].client_id, s[2].detail), (id_a, QUOTA_KIND_STREAMS));
}
