//! Conformance of a device backend through the shim: corrupted rings and garbage descriptors
//! are contained, the slow path, event ordering, isolation between clients, the memory pool,
//! bounded waits, and that dropping everything gives all memory back.
#![deny(unsafe_code)]

use davinci_tests::descs::SubmitDescs;
use std::time::{Duration, Instant};

use davinci_shim::{
    task, ClientUsage, Completion, DevAddr, Device, DeviceMem, Dtype, Errno, MemPool, Opcode,
    PoolOptions, ShareMode, Stream, StreamOptions, TaskDesc,
};
use davinci_tests::model::{self, Rng};
use davinci_tests::workload::{self, WorkloadConfig};
use davinci_tests::{backend_name, control_of, open_default, second_client};
use davinci_uapi::{
    HandleArgs, LastError, WaitEventArgs, WaitKind, Wire, DRIVER_CMD_DESTROY_CONTEXT,
    DRIVER_CMD_FREE_MEMORY, DRIVER_CMD_GET_LAST_ERROR, DRIVER_CMD_WAIT_EVENT,
};

const T: Duration = Duration::from_secs(20);

/// Isolation between the clients of one device (issue 13), on the same backends.
#[path = "conformance/isolation.rs"]
mod isolation;

/// Per-client quotas (issue 21, ABI 1.4), on the same backends.
#[path = "conformance/quotas.rs"]
mod quotas;

/// Buffer lifetimes, stream drops, signals, event values and host callbacks (issue 23).
#[path = "conformance/lifetimes.rs"]
mod lifetimes;

/// Memory shared between clients (issue 23, ABI 1.4 EXPORT/IMPORT_MEMORY).
#[path = "conformance/sharing.rs"]
mod sharing;

/// Device identity and busy time (issue 24, ABI 1.4 GET_IDENTITY).
#[path = "conformance/identity.rs"]
mod identity;

/// CUDA/ACL usage patterns: no stream stops on completions nobody reaped (issue 39).
#[path = "conformance/patterns.rs"]
mod patterns;

/// Noisy and hostile neighbours (issue 21): the daemon and the kernel.
#[path = "conformance/neighbours.rs"]
mod neighbours;

fn dev() -> Device {
    open_default().expect("open the test device")
}

fn poll_all(s: &mut Stream) -> Vec<Completion> {
    let mut v = Vec::new();
    s.poll(&mut v);
    v
}

/// Proves `s` still executes tasks correctly: a FILL, an ADD of each dtype and a COPY on
/// fresh buffers, checked against the CPU.
fn assert_works(dev: &Device, s: &mut Stream, seed: u64) {
    let n = 512usize;
    let a = dev.alloc(n * 4).unwrap();
    let b = dev.alloc(n * 4).unwrap();
    let c = dev.alloc(n * 4).unwrap();
    let d = dev.alloc(n * 4).unwrap();
    let mut rng = Rng::new(seed);
    let ha: Vec<u32> = (0..n).map(|_| rng.float_bits()).collect();
    let hb: Vec<u32> = (0..n).map(|_| rng.float_bits()).collect();
    a.write_slice(0, &ha).unwrap();
    b.write_slice(0, &hb).unwrap();
    for (i, dt) in [Dtype::U32, Dtype::I32, Dtype::F32].into_iter().enumerate() {
        s.submit_descs(&[
            TaskDesc::fill(1, d.dev_addr(), (n * 4) as u64, 0x0bad_f00d ^ i as u32),
            TaskDesc::add(2, dt, c.dev_addr(), a.dev_addr(), b.dev_addr(), n as u64),
            TaskDesc::copy(3, d.dev_addr() + 64, c.dev_addr(), 256),
        ])
        .unwrap();
        s.synchronize(T).unwrap();
        let want = model::add(dt, &ha, &hb);
        assert_eq!(c.read_vec::<u32>(0, n).unwrap(), want, "{dt:?} add");
        let dv = d.read_vec::<u32>(0, n).unwrap();
        assert_eq!(&dv[..16], &[0x0bad_f00d ^ i as u32; 16][..]);
        assert_eq!(&dv[16..80], &want[..64], "copy");
        assert_eq!(&dv[80..], &vec![0x0bad_f00d ^ i as u32; n - 80][..]);
    }
    let done = poll_all(s);
    assert_eq!(done.len(), 9);
    assert!(done.iter().all(Completion::is_ok), "{done:?}");
}

fn wait_for_error(s: &Stream) -> davinci_shim::StreamError {
    let until = Instant::now() + T;
    loop {
        if let Some(e) = s.error_state() {
            return e;
        }
        assert!(
            Instant::now() < until,
            "stream never entered the error state"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn corrupted_command_ring_stops_only_its_stream() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let other_ctx = dev.create_context().unwrap();
    let mut bad = ctx.create_stream().unwrap();
    let mut same_ctx = ctx.create_stream().unwrap();
    let mut other = other_ctx.create_stream().unwrap();
    let buf = dev.alloc(4096).unwrap();

    bad.submit_descs(&[TaskDesc::nop(1), TaskDesc::fill(2, buf.dev_addr(), 64, 5)])
        .unwrap();
    bad.synchronize(T).unwrap();
    // A tail no correct producer writes: far more than `entries` past the device's head.
    bad.debug_store_cmd_tail(0x4000_0000).unwrap();
    let e = wait_for_error(&bad);
    assert_eq!(e.errno(), Some(Errno::EPROTO), "{e}");
    assert_eq!(
        e.index(),
        2,
        "the device's head when it found the corruption"
    );
    let err = bad.synchronize(T).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EIO), "{err}");
    assert!(
        err.message().contains("EPROTO"),
        "message names the cause: {err}"
    );
    // ... says what to do, once.
    assert!(
        err.message().contains("create a new one"),
        "message says how to recover: {err}"
    );
    assert_eq!(
        err.message().matches("stopped by the device").count(),
        1,
        "no repeated wording: {err}"
    );
    let err = bad.submit(&task::nop().with_user_data(3)).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EIO), "{err}");
    assert!(err.message().contains("create a new one"), "{err}");
    // Nothing of the corrupt range was executed or completed.
    assert_eq!(poll_all(&mut bad).len(), 2);

    assert_works(&dev, &mut same_ctx, 1);
    assert_works(&dev, &mut other, 2);
    // A new stream of the same context works too.
    let mut fresh = ctx.create_stream().unwrap();
    assert_works(&dev, &mut fresh, 3);
}

#[test]
fn garbage_descriptors_fail_clearly_and_stop_their_stream() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let other_ctx = dev.create_context().unwrap();
    let mut healthy = ctx.create_stream().unwrap();
    let mut other = other_ctx.create_stream().unwrap();
    let mine = dev.alloc(8192).unwrap();
    let neighbour = dev.alloc(4096).unwrap();
    let foreign_event = other_ctx.create_event().unwrap();
    let base = mine.dev_addr();

    let mut unknown_opcode = TaskDesc::nop(0);
    unknown_opcode.opcode = 200;
    let mut reserved_flags = TaskDesc::nop(0);
    reserved_flags.flags = 1;
    let mut reserved_word = TaskDesc::fill(0, base, 64, 1);
    reserved_word.reserved1 = 7;
    let mut bad_dtype = TaskDesc::add(0, Dtype::U32, base, base, base, 4);
    bad_dtype.dtype = 9;
    let mut nop_operand = TaskDesc::nop(0);
    nop_operand.dst = base.get();
    let cases: Vec<(&str, TaskDesc, Errno)> = vec![
        ("unknown opcode", unknown_opcode, Errno::EBADMSG),
        ("reserved flags", reserved_flags, Errno::EBADMSG),
        ("reserved word", reserved_word, Errno::EBADMSG),
        ("unknown ADD dtype", bad_dtype, Errno::EBADMSG),
        ("operand a NOP does not use", nop_operand, Errno::EBADMSG),
        (
            "kernel launch without hardware",
            TaskDesc::kernel_launch(0, 1, 1, base, 64),
            Errno::EBADMSG,
        ),
        // Owned at the start, but running past the allocation's end: ERANGE (ABI 1.2; the
        // fault says by how much), not EACCES, which means "not this client's memory".
        (
            "fill beyond the allocation",
            TaskDesc::fill(0, base + (8192 - 64), 128, 1),
            Errno::ERANGE,
        ),
        (
            "copy from one allocation on into the next",
            TaskDesc::copy(0, neighbour.dev_addr(), base + (8192 - 64), 128),
            Errno::ERANGE,
        ),
        (
            "address below device memory",
            TaskDesc::fill(0, DevAddr(0x1000), 64, 1),
            Errno::EACCES,
        ),
        (
            "address far beyond device memory",
            TaskDesc::fill(0, base + (1 << 40), 64, 1),
            Errno::EACCES,
        ),
        (
            "unaligned fill length",
            TaskDesc::fill(0, base, 6, 1),
            Errno::EINVAL,
        ),
        (
            "event of another context",
            TaskDesc::event_wait(0, foreign_event.handle(), 1),
            Errno::ENOENT,
        ),
        (
            "no such event",
            TaskDesc::event_record(0, 0xdead, 1),
            Errno::ENOENT,
        ),
    ];
    for (i, (what, mut garbage, errno)) in cases.into_iter().enumerate() {
        garbage.user_data = 0xbad;
        let mut s = ctx.create_stream().unwrap();
        let marker = (i as u32 + 1) * 0x0101_0101;
        s.submit_descs(&[
            TaskDesc::fill(1, base, 64, marker),
            garbage,
            TaskDesc::fill(3, base + 64, 64, marker),
        ])
        .unwrap();
        let err = s.synchronize(T).unwrap_err();
        assert_eq!(err.errno(), Some(Errno::EIO), "{what}: {err}");
        assert!(err.message().contains(errno.name()), "{what}: {err}");
        let done = poll_all(&mut s);
        assert_eq!(
            done.len(),
            2,
            "{what}: nothing after the bad descriptor runs"
        );
        assert!(
            done[0].is_ok() && done[0].user_data == 1,
            "{what}: {:?}",
            done[0]
        );
        assert_eq!(done[1].user_data, 0xbad, "{what}");
        assert_eq!(done[1].status, -errno.code(), "{what}: {:?}", done[1]);
        assert_eq!(done[1].errno(), Some(errno), "{what}");
        let state = s.error_state().expect("error state");
        assert_eq!((state.errno(), state.index()), (Some(errno), 1), "{what}");
        assert_eq!(
            mine.read_vec::<u32>(0, 16).unwrap(),
            vec![marker; 16],
            "{what}"
        );
        assert_eq!(
            mine.read_vec::<u32>(64, 16).unwrap(),
            vec![if i == 0 { 0 } else { i as u32 * 0x0101_0101 }; 16],
            "{what}: the FILL after the bad descriptor must not run"
        );
        // Later submissions are refused with the stream's error.
        assert_eq!(
            s.submit(&task::nop().with_user_data(4))
                .unwrap_err()
                .errno(),
            Some(Errno::EIO)
        );
        // Keep the previous marker at +64 for the next case's check.
        mine.write_slice(64, &[marker; 16]).unwrap();
        // Another stream of the same context and a stream of another context still work.
        if i % 4 == 0 {
            assert_works(&dev, &mut healthy, 10 + i as u64);
            assert_works(&dev, &mut other, 20 + i as u64);
        }
    }
    assert_eq!(
        neighbour.read_vec::<u32>(0, 1024).unwrap(),
        vec![0; 1024],
        "no bad descriptor touched the neighbouring allocation"
    );
}

#[test]
fn slow_path_submit_task_interleaves_with_the_ring() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    let a = dev.alloc(4096).unwrap();
    let b = dev.alloc(4096).unwrap();
    let before = dev.stats();
    s.submit(&task::nop()).unwrap();
    assert_eq!(
        s.submit_desc_slow(&TaskDesc::fill(1, a.dev_addr(), 4096, 0x1234_5678))
            .unwrap()
            .get(),
        1
    );
    s.submit_desc(&TaskDesc::copy(2, b.dev_addr(), a.dev_addr(), 2048))
        .unwrap();
    assert_eq!(
        s.submit_slow(&task::nop().with_user_data(3)).unwrap().get(),
        3
    );
    s.synchronize(T).unwrap();
    let done = poll_all(&mut s);
    assert_eq!(
        done.iter().map(|c| c.user_data).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert!(done.iter().all(Completion::is_ok));
    let bv = b.read_vec::<u32>(0, 1024).unwrap();
    assert_eq!(&bv[..512], &[0x1234_5678; 512][..]);
    assert_eq!(&bv[512..], &[0; 512][..]);
    let st = dev.stats().since(&before);
    assert_eq!((st.slow_submits, st.tasks_submitted), (2, 4));
    // The slow path validates too: a bad descriptor fails the stream like on the ring.
    s.submit_desc_slow(&TaskDesc::fill(4, DevAddr(0x10), 4, 0))
        .unwrap();
    let err = s.synchronize(T).unwrap_err();
    assert!(err.message().contains("EACCES"), "{err}");
    let err = s.submit_slow(&task::nop().with_user_data(5)).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EIO), "{err}");
}

#[test]
fn stats_are_kept_per_stream_and_summed_over_live_and_dropped_streams() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let before = dev.stats();
    let mut a = ctx.create_stream().unwrap();
    let mut b = ctx.create_stream().unwrap();
    a.submit_descs(&(0..5).map(TaskDesc::nop).collect::<Vec<_>>())
        .unwrap();
    b.submit_descs(&(0..3).map(TaskDesc::nop).collect::<Vec<_>>())
        .unwrap();
    b.submit_slow(&task::nop().with_user_data(3)).unwrap();
    a.synchronize(T).unwrap();
    b.synchronize(T).unwrap();
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.tasks_submitted, sa.slow_submits), (5, 0));
    assert_eq!((sb.tasks_submitted, sb.slow_submits), (4, 1));
    let total = dev.stats().since(&before);
    assert_eq!(total.tasks_submitted, 9);
    assert_eq!(total.doorbells, sa.doorbells + sb.doorbells);
    // A dropped stream's counts stay in the device's totals.
    drop(a);
    let total = dev.stats().since(&before);
    assert_eq!((total.tasks_submitted, total.slow_submits), (9, 1));
    let c = ctx.create_stream().unwrap();
    assert_eq!(c.stats(), Default::default(), "a new stream starts at zero");
}

#[test]
fn a_stream_created_on_an_idle_device_is_served_at_once() {
    // The device goes idle with no stream (its engine may park for long), then a stream
    // appears and must be served. Regression: the mock's poller read its stream set before
    // its wake word, so a stream added in between was neither seen nor announced, and the
    // poller slept an hour (a client saw "ring stayed full for 10s"). Racy by nature: many
    // rounds, some with a pause that lets the engine park first.
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    for round in 0..150u64 {
        if round % 3 == 0 {
            std::thread::sleep(Duration::from_millis(3));
        }
        let mut s = ctx.create_stream().unwrap();
        s.submit(&task::nop().with_user_data(round)).unwrap();
        s.synchronize(Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(poll_all(&mut s)[0].user_data, round);
    }
}

#[test]
fn event_orders_work_across_streams() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let mut producer = ctx.create_stream().unwrap();
    let mut consumer = ctx.create_stream().unwrap();
    let mut opener = ctx.create_stream().unwrap();
    let gate = ctx.create_event().unwrap();
    let ready = ctx.create_event().unwrap();
    let n = 1 << 20;
    let src = dev.alloc(n).unwrap();
    let dst = dev.alloc(n).unwrap();

    // The producer is held at a gate only the host opens, so the consumer's copy is
    // submitted (and would run) long before the data exists, unless it waits for the event.
    producer
        .submit_desc(&TaskDesc::event_wait(1, gate.handle(), 1))
        .unwrap();
    producer
        .submit_desc(&TaskDesc::fill(2, src.dev_addr(), n as u64, 0xfeed_beef))
        .unwrap();
    assert_eq!(ready.record_tagged(&mut producer, 3).unwrap().value(), 1);
    consumer.wait_event_tagged(&ready, 10).unwrap();
    consumer
        .submit_desc(&TaskDesc::copy(
            11,
            dst.dev_addr(),
            src.dev_addr(),
            n as u64,
        ))
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!ready.query().unwrap(), "recorded before the producer ran");
    assert_eq!(poll_all(&mut consumer), vec![], "the consumer did not wait");
    assert_eq!(
        consumer
            .synchronize(Duration::from_millis(20))
            .unwrap_err()
            .errno(),
        Some(Errno::ETIMEDOUT)
    );
    // Open the gate (from a third stream of the same context).
    opener
        .submit_desc(&TaskDesc::event_record(20, gate.handle(), 1))
        .unwrap();
    consumer.synchronize(T).unwrap();
    assert!(ready.query().unwrap());
    ready.synchronize(T).unwrap();
    assert_eq!(ready.value().unwrap(), 1);
    let got = dst.read_vec::<u32>(0, n / 4).unwrap();
    assert!(
        got.iter().all(|&v| v == 0xfeed_beef),
        "the copy ran before the fill it waited for"
    );
    let c = poll_all(&mut consumer);
    assert_eq!(
        c.iter()
            .map(|c| (c.user_data, c.status))
            .collect::<Vec<_>>(),
        vec![(10, 0), (11, 0)]
    );
    assert_eq!(c[0].result, 1, "EVENT_WAIT reports the event's value");
    producer.synchronize(T).unwrap();

    // Events work within one context only: the shim refuses, without submitting.
    let other_ctx = dev.create_context().unwrap();
    let mut foreign = other_ctx.create_stream().unwrap();
    assert_eq!(
        foreign.wait_event(&ready).unwrap_err().errno(),
        Some(Errno::EINVAL)
    );
    assert_eq!(
        ready.record(&mut foreign).unwrap_err().errno(),
        Some(Errno::EINVAL)
    );
    // Waiting for an event never recorded waits for nothing (CUDA semantics).
    let never = ctx.create_event().unwrap();
    consumer.wait_event(&never).unwrap();
    consumer.synchronize(T).unwrap();
    never.synchronize(T).unwrap();
}

fn raw_handle(dev: &Device, request: u32, handle: u32) -> davinci_shim::Result<()> {
    let mut arg = vec![0u8; HandleArgs::SIZE];
    HandleArgs { handle, pad: 0 }.encode(&mut arg);
    dev.raw_ioctl(request, &mut arg)
}

#[test]
fn clients_are_isolated_in_shared_mode() {
    let one = dev();
    // Exclusive by default: a second client is refused, naming the holder.
    let err = second_client(&one).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EBUSY), "{err}");
    assert!(err.message().contains("held by"), "{err}");
    one.set_share_mode(ShareMode::Shared).unwrap();
    let two = second_client(&one).unwrap();
    assert_eq!(two.share_mode().unwrap(), (ShareMode::Shared, 2));

    let secret = one.alloc(4096).unwrap();
    secret.write_slice(0, &[0x5ec2_e700u32; 1024]).unwrap();
    let ctx1 = one.create_context().unwrap();
    let ev1 = ctx1.create_event().unwrap();
    let mut s1 = ctx1.create_stream().unwrap();
    let mine = two.alloc(4096).unwrap();
    let ctx2 = two.create_context().unwrap();

    // Device addresses of another client: EACCES completions, nothing read or written.
    let attempts = [
        (
            "read",
            TaskDesc::copy(1, mine.dev_addr(), secret.dev_addr(), 4096),
        ),
        ("write", TaskDesc::fill(1, secret.dev_addr(), 4096, 0)),
        (
            "add",
            TaskDesc::add(
                1,
                Dtype::U32,
                mine.dev_addr(),
                secret.dev_addr(),
                mine.dev_addr(),
                8,
            ),
        ),
    ];
    for (what, d) in attempts {
        let mut s = ctx2.create_stream().unwrap();
        s.submit_desc(&d).unwrap();
        let err = s.synchronize(T).unwrap_err();
        assert!(err.message().contains("EACCES"), "{what}: {err}");
        let c = poll_all(&mut s);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].errno(), Some(Errno::EACCES), "{what}");
    }
    assert_eq!(mine.read_vec::<u32>(0, 1024).unwrap(), vec![0; 1024]);
    assert_eq!(
        secret.read_vec::<u32>(0, 1024).unwrap(),
        vec![0x5ec2_e700; 1024]
    );

    // Another client's handles look exactly like stale ones: ENOENT.
    let err = raw_handle(&two, DRIVER_CMD_FREE_MEMORY, secret.handle()).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT), "{err}");
    let err = raw_handle(&two, DRIVER_CMD_DESTROY_CONTEXT, ctx1.handle()).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT), "{err}");
    let mut w = WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: s1.handle(),
        value: 0,
        timeout_ns: 0,
        ..Default::default()
    };
    let mut arg = vec![0u8; WaitEventArgs::SIZE];
    w.encode(&mut arg);
    let err = two.raw_ioctl(DRIVER_CMD_WAIT_EVENT, &mut arg).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT), "{err}");
    w.kind = WaitKind::Event as u32;
    w.handle = ev1.handle();
    w.encode(&mut arg);
    let err = two.raw_ioctl(DRIVER_CMD_WAIT_EVENT, &mut arg).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT), "{err}");
    let mut s = ctx2.create_stream().unwrap();
    s.submit_desc(&TaskDesc::event_record(1, ev1.handle(), 5))
        .unwrap();
    assert!(s.synchronize(T).unwrap_err().message().contains("ENOENT"));
    assert_eq!(ev1.value().unwrap(), 0);

    // The first client is unaffected.
    assert_works(&one, &mut s1, 7);
    assert_eq!(secret.read_vec::<u32>(0, 4).unwrap(), vec![0x5ec2_e700; 4]);
    // Going back to exclusive would strand the second client.
    assert_eq!(
        one.set_share_mode(ShareMode::Exclusive)
            .unwrap_err()
            .errno(),
        Some(Errno::EBUSY)
    );
}

#[test]
fn pool_reuses_blocks_without_driver_round_trips() {
    let dev = dev();
    let pool = MemPool::new(&dev);
    let a = pool.alloc(100).unwrap();
    let b = pool.alloc(1000).unwrap();
    assert_eq!(pool.stats().driver_allocs, 1);
    assert_eq!(a.dev_addr().get() % 64, 0);
    assert_eq!(b.dev_addr().get() % 64, 0);
    assert_eq!(
        b.dev_addr().get() - a.dev_addr().get(),
        128,
        "blocks rounded to 64 bytes, packed"
    );
    let freed = a.dev_addr();
    drop(a);
    let c = pool.alloc(64).unwrap();
    assert_eq!(c.dev_addr(), freed, "a freed block is reused");
    // A thousand small buffers: no driver round trip each.
    let used_before = dev.memory_used().unwrap();
    let many: Vec<_> = (0..1000)
        .map(|i| pool.alloc(64 + i % 200).unwrap())
        .collect();
    assert_eq!(pool.stats().driver_allocs, 1);
    assert_eq!(dev.memory_used().unwrap(), used_before);
    let mut addrs: Vec<(DevAddr, DevAddr)> = many
        .iter()
        .map(|m| (m.dev_addr(), m.dev_addr() + m.capacity() as u64))
        .collect();
    addrs.sort_unstable();
    assert!(addrs.windows(2).all(|w| w[0].1 <= w[1].0), "blocks overlap");

    // Blocks are device memory like any other: tasks on them, neighbours untouched.
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    let target = &many[500];
    s.submit_desc(&TaskDesc::fill(1, target.dev_addr(), 64, 0xabcd_0123))
        .unwrap();
    s.synchronize(T).unwrap();
    assert_eq!(
        target.read_vec::<u32>(0, 16).unwrap(),
        vec![0xabcd_0123; 16]
    );
    assert!(many[499]
        .read_vec::<u32>(0, 16)
        .unwrap()
        .iter()
        .all(|&v| v == 0));
    assert!(many[501]
        .read_vec::<u32>(0, 16)
        .unwrap()
        .iter()
        .all(|&v| v == 0));
    // Host-view bounds are the block's, not the chunk's.
    assert_eq!(
        target
            .write(target.len() - 4, &[0u8; 8])
            .unwrap_err()
            .errno(),
        Some(Errno::ERANGE)
    );

    drop(many);
    drop((b, c));
    let st = pool.stats();
    assert_eq!((st.blocks, st.in_use_bytes), (0, 0));
    assert_eq!(pool.trim(), 1);
    assert_eq!(dev.memory_used().unwrap(), used_before - (4 << 20));
}

#[test]
fn pool_is_thread_safe_and_bounded() {
    let dev = dev();
    let pool = MemPool::with_options(
        &dev,
        PoolOptions::default()
            .chunk_size(64 << 10)
            .max_bytes(256 << 10)
            .align(64),
    );
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            let pool = pool.clone();
            sc.spawn(move || {
                let mut rng = Rng::new(t);
                let mut live = Vec::new();
                for i in 0..2000 {
                    if live.len() > 20 || (rng.next_u32().is_multiple_of(3) && !live.is_empty()) {
                        let k = rng.next_u32() as usize % live.len();
                        let (b, tag): (davinci_shim::PoolBuffer, u32) = live.swap_remove(k);
                        assert_eq!(b.read_vec::<u32>(0, 1).unwrap(), vec![tag], "clobbered");
                    } else {
                        let b = pool.alloc(4 + rng.next_u32() as usize % 700).unwrap();
                        let tag = (t as u32) << 24 | i;
                        b.write_slice(0, &[tag]).unwrap();
                        live.push((b, tag));
                    }
                }
            });
        }
    });
    let st = pool.stats();
    assert_eq!(st.blocks, 0);
    assert!(st.reserved_bytes <= 256 << 10);
    // The bound is an error, not growth.
    let mut hold = Vec::new();
    let err = loop {
        match pool.alloc(60 << 10) {
            Ok(b) => hold.push(b),
            Err(e) => break e,
        }
    };
    assert_eq!(err.errno(), Some(Errno::ENOMEM), "{err}");
    assert_eq!(hold.len(), 4);
    assert_eq!(pool.alloc(0).unwrap_err().errno(), Some(Errno::EINVAL));
}

#[test]
fn a_sleeping_device_gets_exactly_one_doorbell() {
    let dev = dev();
    let ctl = control_of(&dev).expect("control open");
    let counted0 = ctl.counters().expect("GET_COUNTERS").doorbells;
    // A hardware doorbell (DOORBELL_MMIO: the PCI device) is a store to a device register,
    // which wakes the device by itself: no system call at all.
    let mmio = dev
        .info()
        .features
        .contains(davinci_uapi::Features::DOORBELL_MMIO);
    let calls = u64::from(!mmio);
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    for round in 0..3u64 {
        let counted = ctl.counters().unwrap().doorbells;
        let rung = dev.stats();
        // A worker may wake on its own (a timer, another stream) between the check that it
        // sleeps and the publish; it then finds the tasks itself and no doorbell is due, so
        // such an attempt, (0, 0, 2), is reaped and tried again. Any other outcome counts.
        let mut attempts = 0;
        loop {
            attempts += 1;
            // Wait until the worker has armed NEED_WAKEUP (it sleeps after a short spin).
            let until = Instant::now() + T;
            while !s.device_asleep() {
                assert!(Instant::now() < until, "the device never went to sleep");
                std::thread::sleep(Duration::from_millis(1));
            }
            let before = dev.stats();
            s.submit_descs(&[TaskDesc::nop(round), TaskDesc::nop(round)])
                .unwrap();
            let st = dev.stats().since(&before);
            let got = (
                st.doorbells,
                st.futex_wakes + st.notify_ioctls,
                st.tasks_submitted,
            );
            if got == (0, 0, 2) && attempts < 5 {
                s.synchronize(T).unwrap();
                assert_eq!(poll_all(&mut s).len(), 2);
                continue;
            }
            // One system call wakes it: the FUTEX_WAKE after the doorbell write of a software
            // device, or the NOTIFY of a device without a doorbell (the kernel module's
            // software engine); none after the register write of a hardware doorbell.
            assert_eq!(
                got,
                (1, calls, 2),
                "one publish to a sleeping device: one doorbell and {calls} wake-up system \
                 call(s) (attempt {attempts})"
            );
            break;
        }
        // ... and it wakes up and runs them.
        s.synchronize(T).unwrap();
        assert_eq!(poll_all(&mut s).len(), 2);
        // The device counts no more doorbells than the host rang in the round (this one,
        // and one after reaping if the device had gone back to sleep; fewer if the worker
        // woke on its own just before a ring and found the tasks awake).
        let now = ctl.counters().unwrap().doorbells;
        let rung = dev.stats().since(&rung).doorbells;
        assert!(
            now - counted <= rung,
            "round {round}: the device counted {} doorbells, the host rang {rung}",
            now - counted
        );
    }
    let total = ctl.counters().unwrap().doorbells - counted0;
    assert!(
        total >= 1,
        "three doorbells to a sleeping device, {total} counted"
    );
}

#[test]
fn a_full_ring_waits_instead_of_failing() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream_with(StreamOptions::depths(4, 8)).unwrap();
    let buf = dev.alloc(4096).unwrap();
    let descs: Vec<TaskDesc> = (0..2000u64)
        .map(|i| {
            if i % 10 == 0 {
                TaskDesc::fill(i, buf.dev_addr() + (i % 64) * 64, 64, i as u32)
            } else {
                TaskDesc::nop(i)
            }
        })
        .collect();
    let before = dev.stats();
    s.submit_descs(&descs).unwrap();
    s.synchronize(T).unwrap();
    let st = dev.stats().since(&before);
    assert!(st.ring_full_waits > 0);
    assert_eq!(st.tasks_submitted, 2000);
    let done = poll_all(&mut s);
    assert_eq!(
        done.iter().map(|c| c.user_data).collect::<Vec<_>>(),
        (0..2000).collect::<Vec<_>>(),
        "every completion once, in order (kept while the host was not polling)"
    );
    assert!(done.iter().all(Completion::is_ok));
    // Each 64-byte slot holds the last FILL aimed at it.
    let mut model = vec![0u32; 64];
    for i in (0..2000u64).filter(|i| i % 10 == 0) {
        model[(i % 64) as usize] = i as u32;
    }
    let got: Vec<u32> = (0..64)
        .map(|k| buf.read_vec::<u32>(k * 64, 16).unwrap())
        .map(|v| {
            assert!(v.iter().all(|&x| x == v[0]), "a slot was filled partially");
            v[0]
        })
        .collect();
    assert_eq!(got, model);
}

#[test]
fn completions_can_be_discarded_cuda_style() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let mut s = ctx
        .create_stream_with(StreamOptions::depths(16, 32).keep_completions(false))
        .unwrap();
    let buf = dev.alloc(4096).unwrap();
    let descs: Vec<TaskDesc> = (0..3000u64)
        .map(|i| TaskDesc::fill(i, buf.dev_addr() + (i % 16) * 256, 256, i as u32))
        .collect();
    // Never polled: submit and synchronize drain the event ring themselves, keep nothing.
    s.submit_descs(&descs).unwrap();
    s.synchronize(T).unwrap();
    assert_eq!(s.backlog(), 0);
    assert_eq!(poll_all(&mut s), vec![]);
    let got: Vec<u32> = (0..16)
        .map(|k| buf.read_vec::<u32>(k * 256, 1).unwrap()[0])
        .collect();
    let want: Vec<u32> = (0..16u32)
        .map(|k| (0..3000u32).rev().find(|i| i % 16 == k).unwrap())
        .collect();
    assert_eq!(got, want);
    // A failure is still reported, once.
    s.submit_descs(&[TaskDesc::nop(1), TaskDesc::fill(2, DevAddr(0x40), 4, 0)])
        .unwrap();
    let err = s.synchronize(T).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EIO), "{err}");
    assert!(err.message().contains("EACCES"), "{err}");
}

#[test]
fn a_stuck_stream_fails_submit_after_the_timeout() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let never = ctx.create_event().unwrap();
    let mut s = ctx
        .create_stream_with(StreamOptions::depths(2, 2).submit_timeout(Duration::from_millis(200)))
        .unwrap();
    let mut descs = vec![TaskDesc::event_wait(0, never.handle(), 1)];
    descs.extend((1..10).map(TaskDesc::nop));
    let t = Instant::now();
    let err = s.submit_descs(&descs).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ETIMEDOUT), "{err}");
    assert!(err.message().contains("no progress"), "{err}");
    assert!(t.elapsed() >= Duration::from_millis(200));
    assert_eq!(
        s.synchronize(Duration::from_millis(50))
            .unwrap_err()
            .errno(),
        Some(Errno::ETIMEDOUT)
    );
    // Destroying the event releases the waiter with ECANCELED.
    drop(never);
    let err = s.synchronize(T).unwrap_err();
    assert!(err.message().contains("ECANCELED"), "{err}");
}

#[test]
fn dropping_everything_releases_all_device_memory() {
    let dev = dev();
    let mock = dev.mock_device().cloned();
    assert_eq!(dev.memory_used().unwrap(), 0);
    {
        let ctx = dev.create_context().unwrap();
        let mut s = ctx.create_stream().unwrap();
        let ev = ctx.create_event().unwrap();
        let bufs: Vec<_> = (1..=5).map(|i| dev.alloc(i * 5000).unwrap()).collect();
        let pool = MemPool::new(&dev);
        let blocks: Vec<_> = (0..10).map(|_| pool.alloc(300).unwrap()).collect();
        for b in &bufs {
            s.submit_desc(&TaskDesc::fill(0, b.dev_addr(), 4096, 9))
                .unwrap();
        }
        s.submit_desc(&TaskDesc::fill(0, blocks[3].dev_addr(), 64, 9))
            .unwrap();
        ev.record(&mut s).unwrap();
        s.synchronize(T).unwrap();
        let used = dev.memory_used().unwrap();
        assert_eq!(used, (8192 + 12288 + 16384 + 20480 + 28672) + (4 << 20));
        // Buffers dropped while the stream and pool still live give their memory back.
        drop(bufs);
        assert_eq!(dev.memory_used().unwrap(), 4 << 20);
        drop(blocks);
    }
    assert_eq!(
        dev.memory_used().unwrap(),
        0,
        "pool chunks are freed with the pool"
    );
    // Freed memory reads as zero for the next owner.
    let b = dev.alloc(8192).unwrap();
    assert_eq!(b.read_vec::<u32>(0, 2048).unwrap(), vec![0; 2048]);
    drop(b);
    if let Some(mock) = mock {
        assert_eq!(mock.clients().len(), 1);
        drop(dev);
        let info = mock.info();
        assert_eq!((info.memory_used, info.clients), (0, 0));
        assert!(mock.clients().is_empty());
        assert_eq!(mock.workers(), 0, "every stream worker stopped and joined");
    }
}

#[test]
fn device_paths_and_errors_are_clear() {
    let dev = dev();
    let info = dev.info();
    assert_eq!(info.abi_major, davinci_uapi::ABI_VERSION_MAJOR);
    // Paths that name nothing fail with an errno and a message naming the path (whether or
    // not this build has the backend for them).
    for path in [
        "/dev/davinci-test-no-such-node",
        "mock:/nonexistent-dir/davinci-test.sock",
    ] {
        let e = Device::open(path).unwrap_err();
        assert!(e.errno().is_some(), "{e}");
        assert!(
            e.message().contains(path.trim_start_matches("mock:")),
            "{e}"
        );
    }
    let e = Device::open("davinci0").unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
    // Memory errors carry the errno, the operation and the driver's message.
    let e = dev.alloc(0).unwrap_err();
    assert_eq!((e.errno(), e.op()), (Some(Errno::EINVAL), "ALLOC_MEMORY"));
    let e = dev.alloc(1 << 40).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::ENOMEM), "{e}");
    assert!(
        e.to_string().starts_with("ALLOC_MEMORY failed: ENOMEM: "),
        "{e}"
    );
    let b = dev.alloc(100).unwrap();
    assert_eq!(b.len(), 100);
    assert_eq!(
        b.write(90, &[0; 11]).unwrap_err().errno(),
        Some(Errno::ERANGE)
    );
    assert_eq!(
        b.read(usize::MAX, &mut [0; 2]).unwrap_err().errno(),
        Some(Errno::ERANGE)
    );
    assert_eq!(b.addr(100).unwrap(), b.dev_addr() + 100);
    assert!(b.addr(101).is_err());
    // Ring depths are validated by the driver.
    let ctx = dev.create_context().unwrap();
    let e = ctx
        .create_stream_with(StreamOptions::depths(3, 8))
        .unwrap_err();
    assert_eq!((e.errno(), e.op()), (Some(Errno::EINVAL), "CREATE_STREAM"));
    let e = ctx
        .create_stream_with(StreamOptions::depths(16, 8))
        .unwrap_err();
    assert!(e.message().contains("event_entries"), "{e}");
}

#[test]
fn workload_runs_clean() {
    let dev = dev();
    let cfg = WorkloadConfig {
        tasks: 20_000,
        latency_samples: 200,
        ..WorkloadConfig::default()
    };
    let mut last = 0;
    let r = workload::run(&dev, &cfg, |n| {
        assert!(n >= last);
        last = n;
    })
    .unwrap();
    assert_eq!(r.mismatches, 0, "{:?}", r.first_mismatches);
    assert!(r.tasks >= 20_000);
    assert!(r.values_checked > 0);
    assert_eq!(r.latency.samples, 200);
    assert!(r.latency.p50_ns <= r.latency.p99_ns);
    assert_eq!(last, r.tasks + 200);
    let _ = backend_name();
}

/// A stream that stalls on its full event ring sleeps on the doorbell protocol, and the host's
/// reap wakes it (ABI 1.1, docs/abi.md 5.4). On the embedded backend the device's safety-net
/// timeouts are an hour, so only the protocol can wake it: were the reap's doorbell lost (the
/// 1.0 doorbell wrote the same tail twice), the submits below would time out.
#[test]
fn a_stall_on_a_full_event_ring_is_woken_by_the_reap() {
    let hour = Duration::from_secs(3600);
    let config = davinci_shim::MockConfig {
        doorbell_timeout: hour,
        event_timeout: hour,
        ..davinci_shim::MockConfig::default()
    };
    let dev = davinci_tests::open_backend(&davinci_tests::backend_name(), config)
        .expect("open the test device");
    let ctx = dev.create_context().unwrap();
    let mut s = ctx
        .create_stream_with(StreamOptions::depths(4, 8).submit_timeout(Duration::from_secs(20)))
        .unwrap();
    // As a raw ABI client that does not keep within the event ring's credit (the runtime
    // libraries never let the ring fill: patterns.rs).
    s.debug_ignore_event_credit();
    for round in 0..4u64 {
        // 12 tasks fill both rings (8 completions wait in the event ring, 4 descriptors in the
        // command ring): the device stalls and, finding no room, goes to sleep.
        let batch: Vec<TaskDesc> = (0..12).map(|i| TaskDesc::nop(round * 12 + i)).collect();
        let t0 = std::time::Instant::now();
        let mut pushed = 0;
        while pushed < batch.len() {
            pushed += s.try_submit_descs(&batch[pushed..]).unwrap();
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the device took nothing"
            );
            std::thread::yield_now();
        }
        while !s.device_asleep() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the device never slept"
            );
            std::thread::yield_now();
        }
        let before = dev.stats();
        // Reaping frees event slots; the device asked to be woken then, and must be.
        let mut got = Vec::new();
        assert_eq!(s.poll(&mut got), 8);
        assert_eq!(
            dev.stats().since(&before).doorbells,
            1,
            "the reap rang once"
        );
        s.synchronize(Duration::from_secs(20)).unwrap();
        got.extend(poll_all(&mut s));
        assert_eq!(
            got.iter().map(|c| c.user_data).collect::<Vec<_>>(),
            (round * 12..round * 12 + 12).collect::<Vec<_>>()
        );
        assert!(got.iter().all(Completion::is_ok));
    }
}

/// A runtime sees itself as an operator does: `Device`'s text names the client id that
/// `Control::clients` (and `davinci-smi info -t usage`) lists, with its pid and container id;
/// the ABI's raw fields come back typed (share mode, opcode).
#[test]
fn a_client_sees_itself_as_operators_do() {
    let dev = dev();
    let client_id = dev
        .client_id()
        .expect("ABI 1.1 drivers report the caller's client id");
    assert!(
        dev.to_string().ends_with(&format!(" (client {client_id})")),
        "{dev}"
    );
    let ctl = control_of(&dev).expect("control open");
    assert!(ctl.to_string().ends_with(" (control open)"), "{ctl}");
    let clients: Vec<ClientUsage> = ctl.clients().expect("LIST_CLIENTS");
    let me = clients
        .iter()
        .find(|c| c.client_id == client_id)
        .unwrap_or_else(|| panic!("client {client_id} not in {clients:?}"));
    assert_eq!(me.pid, std::process::id());
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let container = davinci_mockd::peer::container_id_from_cgroup(&cgroup);
    assert_eq!(
        me.container_id(),
        (!container.is_empty()).then_some(container)
    );
    // ABI 1.2: the process name as the kernel keeps it, and nothing queued.
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    assert_eq!(me.comm(), comm.trim_end());
    assert_eq!(me.tasks_queued, 0);
    assert_eq!(
        dev.query_info().unwrap().share_mode(),
        Some(ShareMode::Exclusive)
    );

    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    let b = dev.alloc(64).unwrap();
    s.submit_desc(&TaskDesc::fill(5, b.dev_addr(), 64, 1))
        .unwrap();
    s.synchronize(T).unwrap();
    let c = poll_all(&mut s);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].opcode(), Some(Opcode::Fill));
}

/// A descriptor this client may not run: it stops its stream with `EACCES`.
fn poison_pill(user_data: u64) -> TaskDesc {
    TaskDesc::fill(user_data, DevAddr(0x10), 64, 0)
}

/// An event whose record sits behind a failing descriptor will never be reached: waiting for
/// it fails at once with the stream's error, on the host (`synchronize`, `query`, a waiter
/// already asleep) and on the device (another stream's EVENT_WAIT fails that stream instead
/// of hanging it); a destroyed stream's queued record does the same with `ECANCELED`.
#[test]
fn an_event_behind_a_failed_stream_fails_its_waiters() {
    let long = Duration::from_secs(60);
    let dev = dev();
    let ctx = dev.create_context().unwrap();

    // Recorded after a descriptor that fails: synchronize and query fail, naming the cause;
    // a long timeout shows the error comes at once (a timeout would be ETIMEDOUT). The stream
    // first waits for a gate, so the record is queued before the bad descriptor runs (a fast
    // device would otherwise stop the stream before the record is submitted, and the record
    // itself would be refused, as checked below).
    let gate0 = ctx.create_event().unwrap();
    let mut opener0 = ctx.create_stream().unwrap();
    let mut a = ctx.create_stream().unwrap();
    let ev = ctx.create_event().unwrap();
    a.submit_desc(&TaskDesc::event_wait(0, gate0.handle(), 1))
        .unwrap();
    a.submit_desc(&poison_pill(1)).unwrap();
    ev.record(&mut a).unwrap();
    gate0.record(&mut opener0).unwrap();
    let e = ev.synchronize(long).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EIO), "{e}");
    assert!(
        e.message().contains("EACCES"),
        "names the stream's errno: {e}"
    );
    let e = ev.query().unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EIO), "{e}");
    // Recording on the stopped stream is refused with its error.
    let e = ev.record(&mut a).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EIO), "{e}");

    // A waiter already asleep when the stream stops wakes with the error; a stream waiting
    // on the event on the device fails (EIO) instead of hanging, and says so.
    let gate = ctx.create_event().unwrap();
    let ev2 = ctx.create_event().unwrap();
    let mut b = ctx.create_stream().unwrap();
    let mut c = ctx.create_stream().unwrap();
    let mut opener = ctx.create_stream().unwrap();
    // b waits for the gate's first record, which the test submits later.
    b.submit_desc(&TaskDesc::event_wait(0, gate.handle(), 1))
        .unwrap();
    b.submit_desc(&poison_pill(2)).unwrap();
    ev2.record(&mut b).unwrap();
    c.wait_event(&ev2).unwrap();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| ev2.synchronize(long));
        // Let the waiter go to sleep (no assertion depends on it having done so).
        std::thread::sleep(Duration::from_millis(50));
        gate.record(&mut opener).unwrap();
        let e = waiter.join().unwrap().unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EIO), "{e}");
        assert!(e.message().contains("EACCES"), "{e}");
    });
    let e = c.synchronize(long).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EIO), "{e}");
    assert_eq!(
        c.error_state().map(|s| s.errno()),
        Some(Some(Errno::EIO)),
        "the waiting stream is stopped"
    );
    let waits = poll_all(&mut c);
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0].opcode(), Some(Opcode::EventWait));
    assert_eq!(waits[0].errno(), Some(Errno::EIO));

    // A stream destroyed with a record queued: its waiters fail with ECANCELED as the cause.
    let gate2 = ctx.create_event().unwrap();
    let ev3 = ctx.create_event().unwrap();
    let mut d = ctx.create_stream().unwrap();
    d.submit_desc(&TaskDesc::event_wait(0, gate2.handle(), 1))
        .unwrap();
    ev3.record(&mut d).unwrap();
    drop(d);
    let e = ev3.synchronize(long).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EIO), "{e}");
    assert!(e.message().contains("ECANCELED"), "{e}");

    // The context is fine: a new stream records and waits normally.
    let mut fresh = ctx.create_stream().unwrap();
    let ok = ctx.create_event().unwrap();
    ok.record(&mut fresh).unwrap();
    ok.synchronize(long).unwrap();
}

/// Device errors say which operand was wrong and how: a range that runs past its allocation
/// is ERANGE with the bytes past the end (not "not owned"), a foreign address is EACCES, a
/// misaligned one EINVAL with the alignment needed; the messages carry it.
#[test]
fn device_errors_name_the_operand_and_what_was_wrong() {
    use davinci_shim::{Fault, FaultKind, FaultOperand};
    let dev = dev();
    assert!(dev
        .features()
        .contains(davinci_shim::Features::FAULT_DETAIL));
    let ctx = dev.create_context().unwrap();
    let (a, b) = (dev.alloc(4096).unwrap(), dev.alloc(4096).unwrap());
    let cases = [
        (
            // 1024 elements from 4 bytes into b: 4 bytes too many.
            TaskDesc::add(
                1,
                Dtype::U32,
                a.dev_addr(),
                a.dev_addr(),
                b.dev_addr() + 4,
                1024,
            ),
            Errno::ERANGE,
            Fault::with_value(FaultOperand::Src1, FaultKind::PastEnd, 4),
            "src1: the range runs 4 bytes past the end of its allocation",
        ),
        (
            TaskDesc::copy(2, a.dev_addr(), DevAddr(0x10), 64),
            Errno::EACCES,
            Fault::new(FaultOperand::Src0, FaultKind::NotOwned),
            "src0: the address is not in any of this client's allocations",
        ),
        (
            TaskDesc::fill(3, a.dev_addr() + 2, 64, 0),
            Errno::EINVAL,
            Fault::with_value(FaultOperand::Dst, FaultKind::Misaligned, 4),
            "dst: must be a multiple of 4 bytes",
        ),
    ];
    for (desc, errno, fault, text) in cases {
        let mut s = ctx.create_stream().unwrap();
        s.submit_desc(&desc).unwrap();
        let e = s.synchronize(T).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EIO), "{e}");
        assert!(e.message().contains(errno.name()), "{e}");
        assert!(e.message().contains(text), "{e}");
        let c = poll_all(&mut s);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].errno(), c[0].fault()), (Some(errno), Some(fault)));
        assert_eq!(s.error_state().and_then(|st| st.errno()), Some(errno));
    }
}

/// GET_COUNTERS (ABI 1.3) on every backend: the device-wide totals grow by what this client
/// did (tasks taken and completed, a stream error), count its stream while it exists, and
/// keep its tasks after the stream and the client are gone. Exact on a device of its own
/// (embedded, mockd); at least as much where other tests may share the device (kernel).
#[test]
fn device_counters_count_this_clients_work_and_keep_it() {
    let dev = dev();
    let ctl = control_of(&dev).expect("control open");
    assert!(ctl
        .info()
        .unwrap()
        .features
        .contains(davinci_uapi::Features::COUNTERS));
    let exact = !backend_name().starts_with("/dev/");
    let before = ctl.counters().expect("GET_COUNTERS");
    {
        let ctx = dev.create_context().unwrap();
        let mut s = ctx.create_stream().unwrap();
        let n = 100u64;
        let nops: Vec<TaskDesc> = (0..n).map(TaskDesc::nop).collect();
        s.submit_descs(&nops).unwrap();
        s.synchronize(T).unwrap();
        assert_eq!(poll_all(&mut s).len(), n as usize);
        let mid = ctl.counters().unwrap();
        assert!(mid.streams >= 1 && mid.contexts >= 1, "{mid:?}");
        s.submit_desc(&poison_pill(7)).unwrap();
        wait_for_error(&s);
        let after = ctl.counters().unwrap();
        let (sub, done, errs) = (
            after.tasks_submitted - before.tasks_submitted,
            after.tasks_completed - before.tasks_completed,
            after.stream_errors - before.stream_errors,
        );
        if exact {
            assert_eq!(
                (sub, done, errs),
                (n + 1, n + 1, 1),
                "{before:?} -> {after:?}"
            );
        } else {
            assert!(sub > n && done > n && errs >= 1, "{before:?} -> {after:?}");
        }
    }
    drop(dev);
    let gone = ctl.counters().unwrap();
    assert!(
        gone.tasks_completed > before.tasks_completed + 100,
        "{gone:?}"
    );
    // This client was attached before the first read: counted there already, and still after.
    assert!(before.clients_opened >= 1 && gone.clients_opened >= before.clients_opened);
    if exact {
        assert_eq!((gone.streams, gone.contexts, gone.allocations), (0, 0, 0));
    }
}

/// GET_LAST_ERROR (ABI 1.2) through a real open of every backend: what polling answers
/// (EAGAIN from WAIT_EVENT with timeout 0, ETIMEDOUT from a wait whose timeout passed) does
/// not replace the record of the last real failure, nor count as one (issue 22: a client that
/// polled lost the message of the failure it was about to report).
#[test]
fn polling_does_not_replace_the_last_error() {
    let dev = dev();
    assert!(dev.features().contains(davinci_shim::Features::LAST_ERROR));
    let last = || {
        let mut arg = vec![0u8; LastError::SIZE];
        dev.raw_ioctl(DRIVER_CMD_GET_LAST_ERROR, &mut arg)
            .expect("GET_LAST_ERROR");
        LastError::decode(&arg)
    };
    let err = raw_handle(&dev, DRIVER_CMD_DESTROY_CONTEXT, 0x7fff_0001).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT), "{err}");
    let real = last();
    assert_eq!(
        (real.request, real.error),
        (DRIVER_CMD_DESTROY_CONTEXT, Errno::ENOENT.code() as u32),
        "{:?}",
        real.message_str()
    );

    let ctx = dev.create_context().unwrap();
    let s = ctx.create_stream().unwrap();
    let ev = ctx.create_event().unwrap();
    let wait = |kind: WaitKind, handle: u32, timeout_ns: u64| {
        let mut arg = vec![0u8; WaitEventArgs::SIZE];
        WaitEventArgs {
            kind: kind as u32,
            handle,
            value: 1,
            timeout_ns,
            ..Default::default()
        }
        .encode(&mut arg);
        dev.raw_ioctl(DRIVER_CMD_WAIT_EVENT, &mut arg)
            .unwrap_err()
            .errno()
    };
    assert_eq!(wait(WaitKind::Stream, s.handle(), 0), Some(Errno::EAGAIN));
    assert_eq!(wait(WaitKind::Event, ev.handle(), 0), Some(Errno::EAGAIN));
    assert_eq!(
        wait(WaitKind::Event, ev.handle(), 1_000_000),
        Some(Errno::ETIMEDOUT)
    );
    let after = last();
    assert_eq!(
        (after.request, after.error, after.count),
        (real.request, real.error, real.count),
        "polling replaced the last error: {:?}",
        after.message_str()
    );
    assert_eq!(after.message_str(), real.message_str());
}
