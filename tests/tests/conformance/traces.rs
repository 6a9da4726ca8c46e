//! Per-task traces (issue 46, ABI 1.5 TRACE), on every backend: a client's trace holds every
//! task of its streams once, in each stream's order (command-ring indices, `user_data`,
//! opcode, status), on the device clock (each task within its pass, after the one before it
//! on its stream; an EVENT_WAIT ending no earlier than the EVENT_RECORD that released it), a
//! long task's chunks before it and within it; one open of a tenant traces at a time (EBUSY),
//! another tenant's trace holds only its own tasks, an admin's device trace everyone's; STOP
//! stops the recording, an overflowed buffer keeps its newest records and counts the rest
//! lost; bad arguments are EINVAL.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use davinci_shim::{
    Completion, Device, DeviceMem, Errno, Opcode, Stream, TaskDesc, TaskId, TraceRecord,
};
use davinci_tests::descs::SubmitDescs;
use davinci_tests::other_tenant;
use davinci_uapi::{
    ReadEventsArgs, TraceArgs, Wire, DRIVER_CMD_READ_EVENTS, DRIVER_CMD_TRACE, TRACE_KIND_CHUNK,
    TRACE_KIND_TASK, TRACE_OP_READ, TRACE_OP_START, TRACE_RECORDS_MAX, TRACE_SCOPE_CLIENT,
    TRACE_SCOPE_DEVICE,
};

use super::isolation::shared_pair;
use super::{dev, poll_all, T};

/// What a stream was given: each task's `user_data` and opcode, in order from command-ring
/// index `first`.
struct Submitted {
    first: TaskId,
    tasks: Vec<(u64, Opcode)>,
}

fn opcode(d: &TaskDesc) -> Opcode {
    Opcode::from_u8(d.opcode).expect("a defined opcode")
}

fn submit(s: &mut Stream, descs: &[TaskDesc]) -> Submitted {
    Submitted {
        first: s.submit_descs(descs).expect("submit"),
        tasks: descs.iter().map(|d| (d.user_data, opcode(d))).collect(),
    }
}

/// Checks the records of one stream against what it was given: every task once, as a
/// `KIND_TASK` record at its command-ring index (a run of NOPs taken together may be one
/// record of `tasks` NOPs, with the first's `user_data`), with status 0 but `failed`'s (the
/// task's completion) and nothing after it; start ≤ end, each after the one before; every
/// chunk before its task and within it, numbered from 0. Returns the task records by
/// `user_data` and the chunks each long task had.
fn check_stream(
    recs: &[TraceRecord],
    given: &Submitted,
    failed: Option<&Completion>,
) -> (BTreeMap<u64, TraceRecord>, BTreeMap<u64, u16>) {
    let tasks: Vec<&TraceRecord> = recs.iter().filter(|r| r.kind == TRACE_KIND_TASK).collect();
    let mut by_user = BTreeMap::new();
    let mut k = 0usize;
    let mut prev_end = 0u64;
    for r in &tasks {
        let (user_data, op) = *given
            .tasks
            .get(k)
            .unwrap_or_else(|| panic!("a record past the tasks given: {r:?}"));
        assert_eq!(r.index, given.first.offset(k as u64).ring_index(), "{r:?}");
        assert_eq!(
            (r.user_data, r.opcode),
            (user_data, op as u8),
            "task {k}: {r:?}"
        );
        assert!(r.tasks >= 1, "{r:?}");
        if r.tasks > 1 {
            let run = given.tasks.get(k..k + r.tasks as usize).unwrap_or_else(|| {
                panic!(
                    "a run of {} from task {k} of {}: {r:?}",
                    r.tasks,
                    given.tasks.len()
                )
            });
            assert!(
                run.iter().all(|&(_, o)| o == Opcode::Nop),
                "only NOPs run together: {r:?}"
            );
            assert_eq!(r.start_ns, r.end_ns, "a run of NOPs takes no time: {r:?}");
        }
        let want = match failed {
            Some(c) if c.user_data == user_data => c.status,
            _ => 0,
        };
        assert_eq!(r.status, want, "{r:?}");
        assert!(r.start_ns <= r.end_ns, "{r:?}");
        assert!(r.start_ns >= prev_end, "after the task before it: {r:?}");
        prev_end = r.end_ns;
        by_user.insert(user_data, **r);
        k += r.tasks as usize;
    }
    let ran = match failed {
        // Nothing after the failed task runs.
        Some(c) => 1 + given.tasks.iter().position(|t| t.0 == c.user_data).unwrap(),
        None => given.tasks.len(),
    };
    assert_eq!(k, ran, "every task that ran is recorded once: {tasks:?}");
    let mut chunks = BTreeMap::new();
    for c in recs.iter().filter(|r| r.kind == TRACE_KIND_CHUNK) {
        let task = tasks
            .iter()
            .find(|t| t.index == c.index)
            .unwrap_or_else(|| panic!("a chunk of no recorded task: {c:?}"));
        assert_eq!(
            (c.user_data, c.opcode, c.tasks, c.status),
            (task.user_data, task.opcode, 1, 0)
        );
        assert!(
            c.seq < task.seq,
            "chunks precede their task: {c:?} {task:?}"
        );
        assert!(
            task.start_ns <= c.start_ns && c.start_ns <= c.end_ns && c.end_ns <= task.end_ns,
            "within the task: {c:?} {task:?}"
        );
        let n = chunks.entry(c.user_data).or_insert(0u16);
        assert_eq!(c.chunk, *n, "chunks in order from 0: {c:?}");
        *n += 1;
    }
    assert_eq!(
        recs.iter()
            .filter(|r| r.kind != TRACE_KIND_TASK && r.kind != TRACE_KIND_CHUNK)
            .count(),
        0
    );
    (by_user, chunks)
}

/// A client's trace of three streams: NOPs, a FILL and a COPY long enough to run over several
/// passes (2 MiB: a pass does 1 MiB of work, a COPY costs 2 a byte, split among the client's
/// streams), a short FILL, an EVENT_WAIT on one stream released by an EVENT_RECORD on another,
/// and a COPY past its buffer's end on a third, which stops that stream.
#[test]
fn a_clients_trace_holds_each_task_of_its_streams_once_in_order() {
    let dev = dev();
    let id = dev.client_id().expect("ABI 1.1 client ids");
    let cursor = dev.trace_start().expect("TRACE START");
    let ctx = dev.create_context().unwrap();
    let (mut a, mut b, mut c) = (
        ctx.create_stream().unwrap(),
        ctx.create_stream().unwrap(),
        ctx.create_stream().unwrap(),
    );
    let ev = ctx.create_event().unwrap();
    const LEN: u64 = 2 << 20;
    let (src, dst) = (
        dev.alloc(LEN as usize).unwrap(),
        dev.alloc(LEN as usize).unwrap(),
    );
    let small = dev.alloc(4096).unwrap();
    let given_a = submit(
        &mut a,
        &[
            TaskDesc::event_wait(0xa0, ev.handle(), 1),
            TaskDesc::nop(0xa1),
            TaskDesc::nop(0xa2),
        ],
    );
    let given_b = submit(
        &mut b,
        &[
            TaskDesc::nop(0xb0),
            TaskDesc::nop(0xb1),
            TaskDesc::nop(0xb2),
            TaskDesc::fill(0xb3, src.dev_addr(), LEN, 7),
            TaskDesc::copy(0xb4, dst.dev_addr(), src.dev_addr(), LEN),
            TaskDesc::fill(0xb5, small.dev_addr(), 4096, 1),
            TaskDesc::event_record(0xb6, ev.handle(), 1),
            TaskDesc::nop(0xb7),
        ],
    );
    let given_c = submit(
        &mut c,
        &[
            TaskDesc::nop(0xc0),
            TaskDesc::copy(0xc1, small.dev_addr(), src.dev_addr(), 8192),
            TaskDesc::nop(0xc2),
        ],
    );
    b.synchronize(T).unwrap();
    a.synchronize(T).unwrap();
    assert!(
        c.synchronize(T).is_err(),
        "the COPY past the end stops its stream"
    );
    let failed = poll_all(&mut c).into_iter().find(|r| !r.is_ok()).unwrap();
    assert_eq!(failed.user_data, 0xc1);
    assert_eq!(dst.read_vec::<u32>(LEN as usize - 4, 1).unwrap(), [7]);

    let batch = dev.trace_read(cursor).expect("TRACE READ");
    assert_eq!(batch.lost, 0, "{batch:?}");
    assert!(batch.records.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    assert_eq!(batch.records.first().map(|r| r.seq), Some(cursor));
    assert_eq!(batch.cursor, cursor + batch.records.len() as u64);
    let mut per_stream: BTreeMap<u32, Vec<TraceRecord>> = BTreeMap::new();
    for r in &batch.records {
        assert_eq!(r.client_id, id, "this client's streams only: {r:?}");
        per_stream.entry(r.stream).or_default().push(*r);
    }
    assert_eq!(
        per_stream.keys().copied().collect::<Vec<_>>(),
        {
            let mut h = vec![a.handle(), b.handle(), c.handle()];
            h.sort_unstable();
            h
        },
        "the three streams"
    );
    let (ra, _) = check_stream(&per_stream[&a.handle()], &given_a, None);
    let (rb, chunks) = check_stream(&per_stream[&b.handle()], &given_b, None);
    let (rc, _) = check_stream(&per_stream[&c.handle()], &given_c, Some(&failed));
    assert!(failed.status < 0 && rc[&0xc1].status == failed.status);
    // The long tasks ran over several passes, each a chunk.
    assert!(chunks.get(&0xb3).is_some_and(|&n| n >= 2), "{chunks:?}");
    assert!(chunks.get(&0xb4).is_some_and(|&n| n >= 2), "{chunks:?}");
    assert_eq!(
        chunks.len(),
        2,
        "only the long tasks have chunks: {chunks:?}"
    );
    // The wait ended once the record was done, and no earlier.
    let (wait, record) = (ra[&0xa0], rb[&0xb6]);
    assert_eq!(wait.opcode, Opcode::EventWait as u8);
    assert!(wait.end_ns >= record.end_ns, "{wait:?} {record:?}");
    // The clock is the device's: no record later than the read.
    assert!(batch.records.iter().all(|r| r.end_ns <= batch.now_ns));
}

/// One open of a tenant traces at a time: the tenant's second client is refused (EBUSY);
/// another tenant (embedded: another user) traces its own streams only; an admin's device
/// trace holds every client's tasks, and a non-admin may not start one (EPERM).
#[test]
fn a_tenant_traces_from_one_open_and_an_admin_traces_the_device() {
    let (shared, a, b) = shared_pair();
    let ctl = &shared.ctl;
    let cur_a = a.trace_start().expect("TRACE START");
    let e = b.trace_start().expect_err("the tenant's second open");
    assert_eq!(e.errno(), Some(Errno::EBUSY), "{e}");
    let cur_dev = ctl
        .trace_start()
        .expect("the tests run as an admin of the device");
    let other = other_tenant(&a, 4242);
    let cur_other = other
        .as_ref()
        .map(|o| o.trace_start().expect("another tenant's trace"));
    let fills = |dev: &Device, base: u64| -> Vec<u64> {
        let buf = dev.alloc(4096).unwrap();
        let mut s = dev.create_context().unwrap().create_stream().unwrap();
        let ud: Vec<u64> = (base..base + 3).collect();
        for &u in &ud {
            s.submit_desc(&TaskDesc::fill(u, buf.dev_addr(), 4096, 1))
                .unwrap();
        }
        s.synchronize(T).unwrap();
        ud
    };
    let (ud_a, ud_b) = (fills(&a, 0x100), fills(&b, 0x200));
    let ud_other = other.as_ref().map(|o| fills(o, 0x300)).unwrap_or_default();
    let user_data = |recs: &[TraceRecord], id: u32| -> Vec<u64> {
        recs.iter()
            .filter(|r| r.client_id == id && r.kind == TRACE_KIND_TASK)
            .map(|r| r.user_data)
            .collect()
    };
    let (id_a, id_b) = (a.client_id().unwrap(), b.client_id().unwrap());
    let trace_a = a.trace_read(cur_a).unwrap().records;
    assert!(trace_a.iter().all(|r| r.client_id == id_a), "{trace_a:?}");
    assert_eq!(user_data(&trace_a, id_a), ud_a);
    let device = ctl.trace_read(cur_dev).unwrap().records;
    assert_eq!(user_data(&device, id_a), ud_a, "{device:?}");
    assert_eq!(user_data(&device, id_b), ud_b, "{device:?}");
    if let (Some(o), Some(cur)) = (&other, cur_other) {
        let id_o = o.client_id().unwrap();
        let theirs = o.trace_read(cur).unwrap().records;
        assert!(theirs.iter().all(|r| r.client_id == id_o), "{theirs:?}");
        assert_eq!(user_data(&theirs, id_o), ud_other);
        assert_eq!(user_data(&device, id_o), ud_other, "{device:?}");
        assert!(a
            .trace_read(cur_a)
            .unwrap()
            .records
            .iter()
            .all(|r| r.client_id == id_a));
        // Not an admin: the device's trace is not its to read.
        let mut arg = trace_arg(TRACE_OP_START, TRACE_SCOPE_DEVICE, 0);
        assert_eq!(
            o.raw_ioctl(DRIVER_CMD_TRACE, &mut arg).unwrap_err().errno(),
            Some(Errno::EPERM)
        );
    }
    ctl.trace_stop().unwrap();
    a.trace_stop().unwrap();
}

fn trace_arg(op: u32, scope: u32, pad: u32) -> Vec<u8> {
    let mut v = vec![0u8; TraceArgs::SIZE];
    TraceArgs {
        op,
        scope,
        pad,
        ..TraceArgs::default()
    }
    .encode(&mut v);
    v
}

/// `n` FILLs of 64 bytes on `s`, `user_data` from `from`, synchronized in batches the ring
/// holds.
fn run_fills(dev: &Device, s: &mut Stream, from: u64, n: u64) {
    let buf = dev.alloc(64).unwrap();
    let mut u = from;
    while u < from + n {
        let k = (from + n - u).min(32);
        let descs: Vec<TaskDesc> = (u..u + k)
            .map(|i| TaskDesc::fill(i, buf.dev_addr(), 64, 3))
            .collect();
        s.submit_descs(&descs).unwrap();
        s.synchronize(T).unwrap();
        u += k;
    }
}

/// STOP stops the recording (the records stay readable, START goes on from them); a buffer
/// that overflows keeps its newest records and counts the others in `lost`.
#[test]
fn stop_stops_the_recording_and_an_overflow_keeps_the_newest() {
    let dev = dev();
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    let cursor = dev.trace_start().unwrap();
    run_fills(&dev, &mut s, 0, 10);
    let stopped = dev.trace_stop().unwrap();
    assert_eq!(stopped, cursor + 10);
    run_fills(&dev, &mut s, 100, 10);
    let b = dev.trace_read(cursor).unwrap();
    assert_eq!(
        b.records.iter().map(|r| r.user_data).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    assert_eq!(b.cursor, stopped);
    // START again goes on in the same buffer.
    assert_eq!(dev.trace_start().unwrap(), stopped);
    let over = u64::from(TRACE_RECORDS_MAX) + 76;
    run_fills(&dev, &mut s, 1000, over);
    let b = dev.trace_read(stopped).unwrap();
    assert_eq!(
        (b.lost, b.records.len()),
        (76, TRACE_RECORDS_MAX as usize),
        "lost: {}",
        b.lost
    );
    assert_eq!(b.records[0].user_data, 1076, "the oldest kept");
    assert_eq!(
        b.records.last().unwrap().user_data,
        1000 + over - 1,
        "the newest"
    );
    assert!(b
        .records
        .windows(2)
        .all(|w| w[1].seq == w[0].seq + 1 && w[1].user_data == w[0].user_data + 1));
    assert_eq!(b.cursor, stopped + over);
}

/// Bad arguments: an unknown op or scope, a non-zero pad (TRACE and READ_EVENTS) are EINVAL;
/// READ before START is ENOENT.
#[test]
fn bad_trace_arguments_are_refused() {
    let dev = dev();
    let mut read = trace_arg(TRACE_OP_READ, TRACE_SCOPE_CLIENT, 0);
    assert_eq!(
        dev.raw_ioctl(DRIVER_CMD_TRACE, &mut read)
            .unwrap_err()
            .errno(),
        Some(Errno::ENOENT)
    );
    for (what, mut arg) in [
        ("op 9", trace_arg(9, TRACE_SCOPE_CLIENT, 0)),
        ("scope 7", trace_arg(TRACE_OP_START, 7, 0)),
        ("pad", trace_arg(TRACE_OP_START, TRACE_SCOPE_CLIENT, 1)),
    ] {
        let e = dev.raw_ioctl(DRIVER_CMD_TRACE, &mut arg).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EINVAL), "{what}: {e}");
    }
    let mut arg = vec![0u8; ReadEventsArgs::SIZE];
    ReadEventsArgs {
        pad: 1,
        ..ReadEventsArgs::default()
    }
    .encode(&mut arg);
    let e = dev.raw_ioctl(DRIVER_CMD_READ_EVENTS, &mut arg).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
    // Nothing was started by the refused calls.
    let e = dev.trace_read(0).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::ENOENT), "{e}");
}
