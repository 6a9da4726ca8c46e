//! The data path of streams: the slow path (SUBMIT_TASK) interleaves with the ring, per-stream
//! statistics, a new stream on an idle device, event ordering across streams, one doorbell
//! for a sleeping device, full rings that wait, discarded completions, bounded submits, and a
//! stall on a full event ring woken by the reap.
#![deny(unsafe_code)]

use davinci_tests::descs::SubmitDescs;
use std::time::{Duration, Instant};

use davinci_shim::{task, Completion, DevAddr, DeviceMem, Errno, StreamOptions, TaskDesc};
use davinci_tests::control_of;

use super::{dev, poll_all, T};

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
        // Stalled: all 8 completions published, then NEED_WAKEUP armed. Seen in this order,
        // the flag is the stall's (the device disarms it on waking, before it completes
        // anything), never a stale one from an earlier sleep on the empty command ring.
        while s.completions_ready() < 8 || !s.device_asleep() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the device never slept"
            );
            std::thread::yield_now();
        }
        // Armed is not yet asleep: the device re-reads the head after arming, and a reap in
        // between would rightly ring nothing. Let it get to sleep.
        std::thread::sleep(Duration::from_millis(20));
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
