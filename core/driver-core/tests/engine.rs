//! driver-core against its checking fake platform: The engine: descriptors executed in order against the client's memory, blocked waits,
//! the clock, flow control, invalid descriptors and corrupt rings stopping only their stream,
//! and streams run on several threads through a shared device.

mod support;

use davinci_driver_core::{DeviceCore, Role, Run, StreamState};
use davinci_uapi::*;
use support::*;

#[test]
fn engine_executes_fill_copy_add_and_events_in_order() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let a = alloc(&mut dev, c, 4096);
    let b = alloc(&mut dev, c, 4096);
    let out = alloc(&mut dev, c, 4096);
    let mut s1 = stream(&mut dev, c, k, 16, 16);
    let mut s2 = stream(&mut dev, c, k, 16, 16);
    let mut ev = CreateEventArgs {
        ctx: k,
        ..Default::default()
    };
    call(&mut dev, c, DRIVER_CMD_CREATE_EVENT, &mut ev).unwrap();

    // Stream 2 waits for the event before adding; stream 1 fills, then records.
    s2.prod
        .push(&TaskDesc::event_wait(20, ev.handle, 1))
        .unwrap();
    s2.prod
        .push(&TaskDesc::add(
            21,
            Dtype::U32,
            DevAddr(out.dev_addr),
            DevAddr(a.dev_addr),
            DevAddr(b.dev_addr),
            1024,
        ))
        .unwrap();
    s2.prod.publish();
    assert_eq!(
        dev.run_stream(s2.handle, 64),
        Run::Blocked {
            event: ev.handle,
            value: 1
        }
    );
    assert!(drain(&mut s2).is_empty());

    s1.prod
        .push(&TaskDesc::fill(10, DevAddr(a.dev_addr), 4096, 7))
        .unwrap();
    s1.prod
        .push(&TaskDesc::fill(11, DevAddr(b.dev_addr), 4096, 0xFFFF_FFFF))
        .unwrap();
    s1.prod
        .push(&TaskDesc::copy(
            12,
            DevAddr(b.dev_addr),
            DevAddr(a.dev_addr),
            8,
        ))
        .unwrap();
    s1.prod
        .push(&TaskDesc::event_record(13, ev.handle, 1))
        .unwrap();
    s1.prod.publish();
    assert_eq!(dev.run_stream(s1.handle, 64), Run::Progress(4));
    let r1 = drain(&mut s1);
    assert_eq!(
        r1.iter().map(|r| r.user_data).collect::<Vec<_>>(),
        [10, 11, 12, 13]
    );
    assert!(r1.iter().all(|r| r.status == 0));
    assert_eq!(r1[0].result, 4096);

    assert_eq!(dev.run_stream(s2.handle, 64), Run::Progress(2));
    let r2 = drain(&mut s2);
    assert_eq!(
        r2.iter()
            .map(|r| (r.user_data, r.status))
            .collect::<Vec<_>>(),
        [(20, 0), (21, 0)]
    );
    let o = mem(&mut dev, c, &out, 4096);
    let words: Vec<u32> = o
        .chunks_exact(4)
        .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    // First two words of b were overwritten by the copy of a (7), the rest are 0xFFFFFFFF.
    assert_eq!(words[0], 14);
    assert_eq!(words[1], 14);
    assert!(
        words[2..].iter().all(|&w| w == 6),
        "7 + u32::MAX wraps to 6"
    );
    assert_eq!(dev.run_stream(s2.handle, 64), Run::Idle);
}

#[test]
fn descriptors_behind_a_blocked_wait_run_once_in_order_when_it_ends() {
    // A wait that blocks in the middle of a published run stops the run there; the next run
    // after the event is recorded completes the wait and every descriptor behind it, each
    // once, in order.
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut s1 = stream(&mut dev, c, k, 64, 64);
    let mut s2 = stream(&mut dev, c, k, 64, 64);
    let mut ev = CreateEventArgs {
        ctx: k,
        ..Default::default()
    };
    call(&mut dev, c, DRIVER_CMD_CREATE_EVENT, &mut ev).unwrap();
    for i in 0..3 {
        s2.prod.push(&TaskDesc::nop(i)).unwrap();
    }
    s2.prod
        .push(&TaskDesc::event_wait(3, ev.handle, 1))
        .unwrap();
    for i in 4..40 {
        s2.prod.push(&TaskDesc::nop(i)).unwrap();
    }
    s2.prod.publish();
    assert_eq!(
        dev.run_stream(s2.handle, 64),
        Run::Progress(3),
        "three NOPs, then the wait blocks"
    );
    assert_eq!(
        drain(&mut s2)
            .iter()
            .map(|r| r.user_data)
            .collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(
        dev.run_stream(s2.handle, 64),
        Run::Blocked {
            event: ev.handle,
            value: 1
        }
    );
    s1.prod
        .push(&TaskDesc::event_record(100, ev.handle, 1))
        .unwrap();
    s1.prod.publish();
    assert_eq!(dev.run_stream(s1.handle, 64), Run::Progress(1));
    assert_eq!(dev.run_stream(s2.handle, 64), Run::Progress(37));
    let rest = drain(&mut s2);
    assert_eq!(
        rest.iter().map(|r| r.user_data).collect::<Vec<_>>(),
        (3..40).collect::<Vec<_>>(),
        "the wait, then every NOP behind it once, in order"
    );
    assert!(rest.iter().all(|r| r.status == 0));
    assert_eq!(dev.run_stream(s2.handle, 64), Run::Idle);
}

#[test]
fn instant_tasks_share_one_clock_reading_per_run() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let a = alloc(&mut dev, c, 4096);
    let mut s = stream(&mut dev, c, k, 16, 16);
    let descs = [
        TaskDesc::nop(0),
        TaskDesc::nop(1),
        TaskDesc::fill(2, DevAddr(a.dev_addr), 64, 1),
        TaskDesc::nop(3),
        TaskDesc::fill(4, DevAddr(a.dev_addr), 64, 2),
        TaskDesc::fill(5, DevAddr(a.dev_addr), 64, 3),
    ];
    for d in &descs {
        s.prod.push(d).unwrap();
    }
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(6));
    let stamps: Vec<(u64, u64)> = drain(&mut s)
        .iter()
        .map(|r| (r.user_data, r.timestamp_ns))
        .collect();
    // The clock ticks on every read: the NOPs reuse the reading before them, each FILL reads
    // it when it finished, and time never goes backwards.
    let t: Vec<u64> = stamps.iter().map(|&(_, t)| t).collect();
    assert_eq!(
        stamps.iter().map(|&(u, _)| u).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    assert_eq!(t[0], t[1], "two NOPs in one run share a reading");
    assert!(t[2] > t[1], "a FILL reads the clock when it finished");
    assert_eq!(t[3], t[2], "a NOP after a FILL carries the FILL's time");
    assert!(
        t[4] > t[3] && t[5] > t[4],
        "every data task reads the clock"
    );
    // A later run reads it afresh.
    s.prod.push(&TaskDesc::nop(6)).unwrap();
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(1));
    assert!(drain(&mut s)[0].timestamp_ns > t[5]);
}

/// What a client finds when it first looks at a new stream (docs/abi.md, CREATE_STREAM): every
/// index 0 and no error, but `NEED_WAKEUP` may already be set: the device's worker arms it as
/// soon as it finds the new command ring empty, perhaps before the client looks, and then the
/// client's first publish must ring. (The 1.0 text promised `flags` 0.)
#[test]
fn a_new_stream_may_already_ask_for_a_doorbell() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut s = stream(&mut dev, c, k, 4, 4);
    let r = s.prod.region();
    assert_eq!(
        (r.flags(), r.error(), r.dropped()),
        (RingFlags::empty(), None, 0)
    );
    // The worker's first look: nothing to run, so it arms NEED_WAKEUP and would sleep.
    assert_eq!(dev.run_stream(s.handle, 64), Run::Idle);
    assert!(dev.stream_prepare_sleep(s.handle));
    let r = s.prod.region();
    assert_eq!(
        r.flags(),
        RingFlags::NEED_WAKEUP,
        "before the client did anything"
    );
    assert_eq!((r.error(), r.dropped()), (None, 0));
    assert_eq!((s.prod.tail(), s.cons.head()), (0, 0));
    // The client's first publish sees it and must ring.
    s.prod.push(&TaskDesc::nop(1)).unwrap();
    assert!(s.prod.publish(), "the first publish must ring the doorbell");
    dev.stream_woke(s.handle, true);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(1));
}

#[test]
fn flow_control_never_overflows_the_event_ring() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut s = stream(&mut dev, c, k, 8, 8);
    let mut next = 0u64;
    for _ in 0..8 {
        s.prod.push(&TaskDesc::nop(next)).unwrap();
        next += 1;
    }
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(8));
    // Event ring is full now; 8 more commands wait.
    for _ in 0..8 {
        s.prod.push(&TaskDesc::nop(next)).unwrap();
        next += 1;
    }
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Stalled);
    let first = drain(&mut s);
    assert_eq!(first.len(), 8);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(8));
    let second = drain(&mut s);
    let ids: Vec<u64> = first.iter().chain(&second).map(|r| r.user_data).collect();
    assert_eq!(ids, (0..16).collect::<Vec<_>>());
}

#[test]
fn invalid_descriptors_fail_only_their_stream() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let a = alloc(&mut dev, c, 4096);
    let mut good = stream(&mut dev, c, k, 8, 8);

    let a2 = alloc(&mut dev, c, 4096);
    use FaultKind as K;
    use FaultOperand as O;
    let at = |operand, kind| Fault::new(operand, kind);
    let cases: [(TaskDesc, Errno, Fault); 10] = [
        (
            TaskDesc {
                opcode: 99,
                ..TaskDesc::nop(1)
            },
            Errno::EBADMSG,
            at(O::Opcode, K::Unknown),
        ),
        (
            TaskDesc {
                reserved1: 5,
                ..TaskDesc::nop(1)
            },
            Errno::EBADMSG,
            at(O::Reserved, K::NotZero),
        ),
        (
            TaskDesc {
                imm: 5,
                ..TaskDesc::nop(1)
            },
            Errno::EBADMSG,
            at(O::Imm, K::NotZero),
        ),
        // Owned, but the range runs 104 bytes past the allocation's end: not "not owned".
        (
            TaskDesc::fill(1, DevAddr(a.dev_addr) + 4000, 200, 0),
            Errno::ERANGE,
            Fault::with_value(O::Dst, K::PastEnd, 104),
        ),
        (
            TaskDesc::copy(1, DevAddr(a.dev_addr), DevAddr(0x1234), 8),
            Errno::EACCES,
            at(O::Src0, K::NotOwned),
        ),
        (
            TaskDesc::fill(1, DevAddr(u64::MAX - 3), 8, 0),
            Errno::ERANGE,
            at(O::Dst, K::Overflow),
        ),
        (
            TaskDesc::event_record(1, 0x0001_0001, 1),
            Errno::ENOENT,
            at(O::Handle, K::NoSuchEvent),
        ),
        // Alignment errors name the operand and the alignment needed.
        (
            TaskDesc::fill(1, DevAddr(a.dev_addr) + 2, 8, 0),
            Errno::EINVAL,
            Fault::with_value(O::Dst, K::Misaligned, 4),
        ),
        (
            TaskDesc::add(
                1,
                Dtype::U32,
                DevAddr(a.dev_addr),
                DevAddr(a2.dev_addr),
                DevAddr(a2.dev_addr) + 6,
                4,
            ),
            Errno::EINVAL,
            Fault::with_value(O::Src1, K::Misaligned, 4),
        ),
        // An ADD whose count runs 4 bytes past its second source (1024 elements of 4 bytes
        // from 4 bytes in).
        (
            TaskDesc::add(
                1,
                Dtype::F32,
                DevAddr(a.dev_addr),
                DevAddr(a.dev_addr),
                DevAddr(a2.dev_addr) + 4,
                1024,
            ),
            Errno::ERANGE,
            Fault::with_value(O::Src1, K::PastEnd, 4),
        ),
    ];
    for (desc, errno, fault) in cases {
        let mut bad = stream(&mut dev, c, k, 8, 8);
        bad.prod.push(&TaskDesc::nop(0)).unwrap();
        bad.prod.push(&desc).unwrap();
        bad.prod.push(&TaskDesc::nop(2)).unwrap();
        bad.prod.publish();
        assert_eq!(
            dev.run_stream(bad.handle, 64),
            Run::Failed(errno),
            "{desc:?}"
        );
        let recs = drain(&mut bad);
        assert_eq!(
            recs.len(),
            2,
            "the bad one completes with an error, nothing after it"
        );
        assert_eq!(recs[1].status, -errno.code());
        assert_eq!(Fault::decode(recs[1].result), Some(fault), "{desc:?}");
        assert_eq!(bad.prod.region().error(), Some((errno.code() as u32, 1)));
        assert_eq!(
            dev.stream_state(c, bad.handle),
            Ok(StreamState::Error(errno))
        );
        let mut w = WaitEventArgs {
            kind: 1,
            handle: bad.handle,
            value: 3,
            timeout_ns: 0,
            ..Default::default()
        };
        assert_eq!(
            call(&mut dev, c, DRIVER_CMD_WAIT_EVENT, &mut w),
            Err(Errno::EIO)
        );
        assert_eq!(w.status, errno.code() as u32);
        // The healthy stream still works.
        good.prod
            .push(&TaskDesc::fill(7, DevAddr(a.dev_addr), 64, 9))
            .unwrap();
        good.prod.publish();
        assert_eq!(dev.run_stream(good.handle, 64), Run::Progress(1));
        assert_eq!(drain(&mut good)[0].status, 0);
    }
}

/// A descriptor with several things wrong reports the first check that fails, in the order
/// docs/abi.md section 6 states: reserved fields, the opcode, dtype, the unused operands (in
/// `dst, src0, src1, len, imm, handle` order for every opcode, FILL's high half of `imm`
/// included), then the opcode's own checks (ADD's dtype and length, alignment, each range in
/// operand order; within a range: overflow, then ownership of its first byte, then its end).
#[test]
fn checks_run_in_the_documented_order() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let a = alloc(&mut dev, c, 4096);
    let at = DevAddr(a.dev_addr);
    let foreign = DevAddr(0x1234);
    use FaultKind as K;
    use FaultOperand as O;
    let f = |operand, kind| Fault::new(operand, kind);
    let cases: Vec<(&str, TaskDesc, Errno, Fault)> = vec![
        (
            "reserved before the opcode",
            TaskDesc {
                opcode: 99,
                flags: 1,
                ..TaskDesc::nop(1)
            },
            Errno::EBADMSG,
            f(O::Reserved, K::NotZero),
        ),
        (
            "the opcode before dtype",
            TaskDesc {
                opcode: 99,
                dtype: 7,
                ..TaskDesc::nop(1)
            },
            Errno::EBADMSG,
            f(O::Opcode, K::Unknown),
        ),
        (
            "dtype before the unused operands",
            TaskDesc {
                dtype: 1,
                dst: 8,
                ..TaskDesc::nop(1)
            },
            Errno::EBADMSG,
            f(O::Dtype, K::NotZero),
        ),
        (
            "KERNEL_LAUNCH: its unused fields before the handle",
            TaskDesc {
                dst: 8,
                ..TaskDesc::kernel_launch(1, 99, 1, foreign, 8)
            },
            Errno::EBADMSG,
            f(O::Dst, K::NotZero),
        ),
        (
            "KERNEL_LAUNCH: the handle before the block count and len",
            TaskDesc::kernel_launch(1, 99, 5, foreign, 3),
            Errno::EBADMSG,
            f(O::Handle, K::Unknown),
        ),
        (
            "KERNEL_LAUNCH: the block count before len",
            TaskDesc::kernel_launch(1, KernelId::Gemm as u32, 2, foreign, 3),
            Errno::EINVAL,
            f(O::Imm, K::Invalid),
        ),
        (
            "KERNEL_LAUNCH: len before the block's address",
            TaskDesc::kernel_launch(1, KernelId::Gemm as u32, 1, foreign, 8),
            Errno::EINVAL,
            f(O::Len, K::Invalid),
        ),
        (
            "KERNEL_LAUNCH: the block's alignment before its range",
            TaskDesc::kernel_launch(1, KernelId::Gemm as u32, 1, foreign + 2, 128),
            Errno::EINVAL,
            Fault::with_value(O::Src0, K::Misaligned, 8),
        ),
        (
            "KERNEL_LAUNCH: the block inside the caller's memory",
            TaskDesc::kernel_launch(1, KernelId::Gemm as u32, 0, DevAddr(0x1238), 128),
            Errno::EACCES,
            f(O::Src0, K::NotOwned),
        ),
        (
            "FILL: a dtype other than 0, U8 and U16",
            TaskDesc::fill_as(1, Dtype::F16, at, 64, 0),
            Errno::EBADMSG,
            f(O::Dtype, K::Unknown),
        ),
        (
            "FILL U16: the pattern's unused bits before the alignment",
            TaskDesc::fill_as(1, Dtype::U16, at + 1, 64, 0x1_0000),
            Errno::EBADMSG,
            f(O::Imm, K::NotZero),
        ),
        (
            "FILL U16: dst 2-byte aligned",
            TaskDesc::fill_as(1, Dtype::U16, at + 1, 64, 0xffff),
            Errno::EINVAL,
            Fault::with_value(O::Dst, K::Misaligned, 2),
        ),
        (
            "FILL: imm's high half before handle",
            TaskDesc {
                handle: 3,
                imm: 1 << 32,
                ..TaskDesc::fill(1, at, 64, 0)
            },
            Errno::EBADMSG,
            f(O::Imm, K::NotZero),
        ),
        (
            "FILL: src0 before imm",
            TaskDesc {
                src0: 4,
                imm: 1 << 32,
                ..TaskDesc::fill(1, at, 64, 0)
            },
            Errno::EBADMSG,
            f(O::Src0, K::NotZero),
        ),
        (
            "EVENT_WAIT: an unused operand before the handle",
            TaskDesc {
                len: 4,
                ..TaskDesc::event_wait(1, 0x0001_0001, 1)
            },
            Errno::EBADMSG,
            f(O::Len, K::NotZero),
        ),
        (
            "FILL: alignment before the range",
            TaskDesc::fill(1, foreign + 2, 8, 0),
            Errno::EINVAL,
            Fault::with_value(O::Dst, K::Misaligned, 4),
        ),
        (
            "FILL: dst's alignment before len's",
            TaskDesc::fill(1, at + 2, 6, 0),
            Errno::EINVAL,
            Fault::with_value(O::Dst, K::Misaligned, 4),
        ),
        (
            "COPY: dst's range before src0's",
            TaskDesc::copy(1, foreign, foreign, 8),
            Errno::EACCES,
            f(O::Dst, K::NotOwned),
        ),
        (
            "a range of length 0 still needs its address in an allocation",
            TaskDesc::copy(1, at, foreign, 0),
            Errno::EACCES,
            f(O::Src0, K::NotOwned),
        ),
        (
            "ADD: the dtype before the length and the alignment",
            TaskDesc {
                dtype: 9,
                ..TaskDesc::add(1, Dtype::U32, at + 2, at, at, u64::MAX)
            },
            Errno::EBADMSG,
            f(O::Dtype, K::Unknown),
        ),
        (
            "ADD: len * 4 overflowing before the alignment",
            TaskDesc::add(1, Dtype::U32, at + 2, at, at, u64::MAX / 2),
            Errno::ERANGE,
            f(O::Len, K::Overflow),
        ),
        (
            "ADD: the alignment of every operand before any range",
            TaskDesc::add(1, Dtype::U32, foreign, at, at + 2, 4),
            Errno::EINVAL,
            Fault::with_value(O::Src1, K::Misaligned, 4),
        ),
        (
            "a range: overflow before ownership",
            TaskDesc::copy(1, at, DevAddr(u64::MAX - 3), 8),
            Errno::ERANGE,
            f(O::Src0, K::Overflow),
        ),
        (
            "a range: ownership of its first byte, then its end",
            TaskDesc::copy(1, at + 4000, at, 200),
            Errno::ERANGE,
            Fault::with_value(O::Dst, K::PastEnd, 104),
        ),
    ];
    for (what, desc, errno, fault) in cases {
        let mut s = stream(&mut dev, c, k, 2, 2);
        s.prod.push(&desc).unwrap();
        s.prod.publish();
        assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(errno), "{what}");
        let recs = drain(&mut s);
        assert_eq!(recs.len(), 1, "{what}");
        assert_eq!(
            (recs[0].status, Fault::decode(recs[0].result)),
            (-errno.code(), Some(fault)),
            "{what}: {desc:?}"
        );
    }
}

#[test]
fn corrupt_indices_stop_the_stream_with_eproto() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let s = stream(&mut dev, c, k, 8, 8);
    // A hostile producer writes a tail 1000 slots ahead.
    // SAFETY: `cmd_ptr` points at the live command ring; offset 0 is the u32 tail.
    unsafe { s.cmd_ptr.cast::<u32>().write_volatile(1000) };
    assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(Errno::EPROTO));
    assert_eq!(
        s.prod.region().error().map(|e| e.0),
        Some(Errno::EPROTO.code() as u32)
    );
    // A hostile consumer head on the event ring.
    let mut t = stream(&mut dev, c, k, 8, 8);
    t.prod.push(&TaskDesc::nop(1)).unwrap();
    t.prod.publish();
    let m = dev.stream_mem(c, t.handle).unwrap();
    // SAFETY: `event_ptr` points at the live event ring; offset 64 is the u32 head.
    unsafe {
        m.event_ptr
            .add(64)
            .cast::<u32>()
            .write_volatile(0x8000_0000)
    };
    assert_eq!(dev.run_stream(t.handle, 64), Run::Failed(Errno::EPROTO));
    // SUBMIT_TASK that finds corrupt indices fails the stream itself, before the engine
    // looks: EIO now, the EPROTO error state for everything after.
    let u = stream(&mut dev, c, k, 8, 8);
    // SAFETY: `cmd_ptr` points at the live command ring; offset 0 is the u32 tail.
    unsafe { u.cmd_ptr.cast::<u32>().write_volatile(0xdead_0000) };
    let mut sub = SubmitTaskArgs {
        stream: u.handle,
        desc: TaskDesc::nop(7),
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_SUBMIT_TASK, &mut sub),
        Err(Errno::EIO)
    );
    assert_eq!(
        dev.stream_state(c, u.handle).unwrap(),
        StreamState::Error(Errno::EPROTO)
    );
    assert_eq!(
        u.prod.region().error().map(|e| e.0),
        Some(Errno::EPROTO.code() as u32)
    );
    assert_eq!(dev.run_stream(u.handle, 64), Run::Failed(Errno::EPROTO));
    // Each of the three stopped streams counts once (GET_COUNTERS), whoever found it.
    assert_eq!(dev.counters().stream_errors, 3);
}

/// The data path takes `&DeviceCore`: streams run on several threads at once, excluded only by
/// the control path (`&mut DeviceCore`). Two streams of one context hand an event along
/// (EVENT_RECORD on one thread, EVENT_WAIT on another) while a third stream fills device
/// memory on a third thread. Every completion arrives once, in order, and the per-stream
/// task counters add up in the client's usage, also after the streams are destroyed.
#[test]
fn streams_run_concurrently_through_a_shared_device() {
    const ROUNDS: u64 = 60; // 2 descriptors per round on the waiting stream: fits its ring.
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let buf = alloc(&mut dev, c, 4096);
    let mut rec = stream(&mut dev, c, k, 256, 256);
    let mut wait = stream(&mut dev, c, k, 256, 256);
    let mut fill = stream(&mut dev, c, k, 256, 256);
    let ev = event(&mut dev, c, k);
    for i in 1..=ROUNDS {
        rec.prod.push(&TaskDesc::event_record(i, ev, i)).unwrap();
        wait.prod
            .push(&TaskDesc::event_wait(1000 + i, ev, i))
            .unwrap();
        wait.prod.push(&TaskDesc::nop(2000 + i)).unwrap();
        fill.prod
            .push(&TaskDesc::fill(
                3000 + i,
                DevAddr(buf.dev_addr),
                4096,
                i as u32,
            ))
            .unwrap();
    }
    rec.prod.publish();
    wait.prod.publish();
    fill.prod.publish();

    {
        let shared: &DeviceCore<HeapPlatform> = &dev;
        let run = |h: u32, want: u32| {
            let mut done = 0;
            let mut looks = 0u64;
            while done < want {
                match shared.run_stream(h, 7) {
                    Run::Progress(n) => done += n,
                    Run::Blocked { .. } | Run::Idle => {
                        looks += 1;
                        assert!(looks < 10_000_000, "stream {h:#x} stuck at {done}/{want}");
                        std::thread::yield_now();
                    }
                    other => panic!("stream {h:#x}: {other:?}"),
                }
            }
        };
        std::thread::scope(|t| {
            t.spawn(|| run(wait.handle, 2 * ROUNDS as u32));
            t.spawn(|| run(rec.handle, ROUNDS as u32));
            t.spawn(|| run(fill.handle, ROUNDS as u32));
        });
    }

    let r = drain(&mut rec);
    assert_eq!(
        r.iter().map(|r| r.user_data).collect::<Vec<_>>(),
        (1..=ROUNDS).collect::<Vec<_>>()
    );
    assert!(r.iter().all(|r| r.status == 0));
    let w = drain(&mut wait);
    let want: Vec<u64> = (1..=ROUNDS).flat_map(|i| [1000 + i, 2000 + i]).collect();
    assert_eq!(w.iter().map(|r| r.user_data).collect::<Vec<_>>(), want);
    assert!(w.iter().all(|r| r.status == 0), "{w:?}");
    // Each wait completed with a value at least the one it waited for.
    assert!(w.iter().step_by(2).zip(1..).all(|(r, i)| r.result >= i));
    let f = drain(&mut fill);
    assert_eq!(f.len(), ROUNDS as usize);
    assert!(f.iter().all(|r| r.status == 0));
    let words = mem(&mut dev, c, &buf, 4096);
    assert!(
        words
            .chunks_exact(4)
            .all(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) == ROUNDS as u32),
        "the last fill wins"
    );

    let usage = |dev: &DeviceCore<HeapPlatform>| {
        let u = dev.client_usage(c).unwrap();
        (u.tasks_submitted, u.tasks_completed)
    };
    assert_eq!(usage(&dev), (4 * ROUNDS, 4 * ROUNDS));
    let handles = [rec.handle, wait.handle, fill.handle];
    for h in handles {
        dev.destroy_stream(c, h).unwrap();
        assert_eq!(
            usage(&dev),
            (4 * ROUNDS, 4 * ROUNDS),
            "a destroyed stream's tasks still count"
        );
    }
}
