//! CUDA/ACL usage patterns a runtime port writes without thinking twice (issue 39), on every
//! backend, each on 16-entry and on default rings: side streams nobody synchronizes feeding a
//! synchronized one, fire-and-forget FILLs then a device-wide synchronize, a 100,000-task
//! burst and return, event ping-pong across four streams for 100,000 rounds, a thread per
//! stream with one shared event, and a stream dropped with waiters pending on its record.
//!
//! Each must finish with the right results: the library never lets completions nobody reaped
//! fill a stream's event ring (docs/runtimes.md, "Porting from CUDA/ACL"), so no stream stops
//! for want of a `poll`. How long each takes is the bench's business (`davinci-bench --filter
//! ours/pattern`: rows with a time bound each), not the test's: the waits here are bounded
//! only so that a hang fails.
#![deny(unsafe_code)]

use std::sync::mpsc;

use davinci_shim::{
    task, Context, DeviceBuffer, DeviceMem, Errno, Event, Region, Stream, StreamOptions, Task,
    TaskDesc,
};

use super::{dev, T};

/// The two ring sizes every pattern runs on: the smallest a runtime may ask for, and the
/// default.
fn rings() -> [(&'static str, StreamOptions); 2] {
    [
        ("16-entry rings", StreamOptions::depths(16, 16)),
        ("default rings", StreamOptions::default()),
    ]
}

/// Word `i` of `buf` as a region.
fn word(buf: &DeviceBuffer, i: usize) -> Region<'_> {
    Region::range(buf, i * 4..i * 4 + 4).unwrap()
}

/// At most an event ring of tasks is ever submitted and unreaped on a stream.
fn assert_bounded(s: &Stream, what: &str) {
    assert!(
        s.pending_tasks() <= s.event_entries() as usize,
        "{what}: {} tasks unreaped on a stream whose event ring holds {}",
        s.pending_tasks(),
        s.event_entries()
    );
}

#[test]
fn side_streams_nobody_synchronizes_feed_a_synchronized_one() {
    for (rings, o) in rings() {
        let dev = dev();
        let ctx = dev.create_context().unwrap();
        let (mut side, mut main) = (
            ctx.create_stream_with(o).unwrap(),
            ctx.create_stream_with(o).unwrap(),
        );
        let ev = ctx.create_event().unwrap();
        // Four event rings' worth of records on the side stream, never polled.
        let rounds = 4 * side.event_entries() as usize + 3;
        let src = dev.alloc(4).unwrap();
        let out = dev.alloc(4 * rounds).unwrap();
        for i in 0..rounds {
            side.submit(&task::fill(&src, i as u32).unwrap()).unwrap();
            let r = ev.record(&mut side).unwrap();
            main.wait_recorded(&r).unwrap();
            main.submit(&task::copy(word(&out, i), &src).unwrap())
                .unwrap();
            main.synchronize(T)
                .unwrap_or_else(|e| panic!("{rings}, round {i}: {e}"));
            assert_bounded(&side, rings);
        }
        let got = out.read_vec::<u32>(0, rounds).unwrap();
        assert!(
            got.iter().enumerate().all(|(i, &v)| v == i as u32),
            "{rings}: every round copies its own fill"
        );
    }
}

#[test]
fn fire_and_forget_fills_then_a_device_wide_synchronize() {
    for (rings, o) in rings() {
        let dev = dev();
        let ctx = dev.create_context().unwrap();
        let mut streams: Vec<Stream> = (0..4).map(|_| ctx.create_stream_with(o).unwrap()).collect();
        let bufs: Vec<DeviceBuffer> = (0..4).map(|_| dev.alloc(64 * 1024).unwrap()).collect();
        let per = 3 * o.event_entries as usize + 7;
        for j in 0..per {
            for (k, s) in streams.iter_mut().enumerate() {
                let value = (k as u32) << 24 | j as u32;
                s.submit(&task::fill(&bufs[k], value).unwrap()).unwrap();
            }
        }
        dev.synchronize(T)
            .unwrap_or_else(|e| panic!("{rings}: {e}"));
        for (k, (s, b)) in streams.iter().zip(&bufs).enumerate() {
            let want = (k as u32) << 24 | (per - 1) as u32;
            let got = b.read_vec::<u32>(0, 16 * 1024).unwrap();
            assert!(
                got.iter().all(|&v| v == want),
                "{rings}: stream {k}'s last fill"
            );
            assert_bounded(s, rings);
        }
        // Each stream's own synchronize still works after the device-wide one.
        for s in &mut streams {
            s.synchronize(T).unwrap();
        }
    }
}

/// Submits 100,000 tasks (NOPs, a FILL of its index into `word` every 1,000) and a record
/// of `ev`, and returns without waiting for any of it.
fn burst(ctx: &Context, o: StreamOptions, at: &DeviceBuffer, ev: &Event) -> (Stream, u64) {
    let mut s = ctx.create_stream_with(o).unwrap();
    let tasks: Vec<Task> = (0..100_000u32)
        .map(|i| {
            if i % 1000 == 999 {
                task::fill(at, i).unwrap()
            } else {
                task::nop()
            }
        })
        .collect();
    s.submit_batch(&tasks).unwrap();
    let r = ev.record(&mut s).unwrap();
    (s, r.value())
}

#[test]
fn a_burst_of_100k_tasks_and_return() {
    for (rings, o) in rings() {
        let dev = dev();
        let ctx = dev.create_context().unwrap();
        let (at, out) = (dev.alloc(4).unwrap(), dev.alloc(4).unwrap());
        let ev = ctx.create_event().unwrap();
        let (burst_stream, value) = burst(&ctx, o, &at, &ev);
        assert_bounded(&burst_stream, rings);
        // Another stream orders itself after the whole burst, on the device.
        let mut after = ctx.create_stream_with(o).unwrap();
        after
            .submit(&Task::from_desc(TaskDesc::event_wait(0, ev.handle(), value)).unwrap())
            .unwrap();
        after.submit(&task::copy(&out, &at).unwrap()).unwrap();
        after
            .synchronize(T)
            .unwrap_or_else(|e| panic!("{rings}: {e}"));
        assert_eq!(out.read_vec::<u32>(0, 1).unwrap(), [99_999], "{rings}");
        drop(burst_stream);
    }
}

#[test]
fn event_ping_pong_across_four_streams_for_100k_rounds() {
    const ROUNDS: usize = 100_000;
    for (rings, o) in rings() {
        let dev = dev();
        let ctx = dev.create_context().unwrap();
        let mut streams: Vec<Stream> = (0..4).map(|_| ctx.create_stream_with(o).unwrap()).collect();
        let events: Vec<Event> = (0..4).map(|_| ctx.create_event().unwrap()).collect();
        let (counter, one) = (dev.alloc(4).unwrap(), dev.alloc(4).unwrap());
        counter.write_slice(0, &[0u32]).unwrap();
        one.write_slice(0, &[1u32]).unwrap();
        let mut last = None;
        for r in 0..ROUNDS {
            let k = r % 4;
            let s = &mut streams[k];
            if let Some(prev) = &last {
                s.wait_recorded(prev).unwrap();
            }
            // Read-modify-write of one word: right only if the rounds run in order.
            s.submit(&task::add::<u32>(&counter, &counter, &one).unwrap())
                .unwrap();
            last = Some(events[k].record(s).unwrap());
        }
        last.unwrap()
            .synchronize(T)
            .unwrap_or_else(|e| panic!("{rings}: {e}"));
        assert_eq!(
            counter.read_vec::<u32>(0, 1).unwrap(),
            [ROUNDS as u32],
            "{rings}: every round ran once, in order"
        );
        for s in &streams {
            assert_bounded(s, rings);
        }
    }
}

#[test]
fn a_thread_per_stream_with_one_shared_event() {
    for (rings, o) in rings() {
        let dev = dev();
        let ctx = dev.create_context().unwrap();
        let ev = ctx.create_event().unwrap();
        let rounds = 4 * o.event_entries as usize + 5;
        let src = dev.alloc(4 * rounds).unwrap();
        let outs: Vec<DeviceBuffer> = (0..3).map(|_| dev.alloc(4 * rounds).unwrap()).collect();
        std::thread::scope(|scope| {
            let mut senders = Vec::new();
            for out in &outs {
                let (tx, rx) = mpsc::channel::<davinci_shim::Recorded>();
                senders.push(tx);
                let (ctx, src) = (&ctx, &src);
                scope.spawn(move || {
                    let mut s = ctx.create_stream_with(o).unwrap();
                    for (i, r) in rx.iter().enumerate() {
                        s.wait_recorded(&r).unwrap();
                        s.submit(&task::copy(word(out, i), word(src, i)).unwrap())
                            .unwrap();
                        assert_bounded(&s, rings);
                    }
                    s.synchronize(T)
                        .unwrap_or_else(|e| panic!("{rings}: consumer: {e}"));
                });
            }
            // The producer: its own stream, never synchronized until the end.
            let mut p = ctx.create_stream_with(o).unwrap();
            for i in 0..rounds {
                p.submit(&task::fill(word(&src, i), 0x5eed_0000 | i as u32).unwrap())
                    .unwrap();
                let r = ev.record(&mut p).unwrap();
                for tx in &senders {
                    tx.send(r.clone()).unwrap();
                }
            }
            drop(senders);
            p.synchronize(T).unwrap();
        });
        for (k, out) in outs.iter().enumerate() {
            let got = out.read_vec::<u32>(0, rounds).unwrap();
            assert!(
                got.iter()
                    .enumerate()
                    .all(|(i, &v)| v == 0x5eed_0000 | i as u32),
                "{rings}: consumer {k} copied each round after its fill"
            );
        }
    }
}

#[test]
fn a_stream_dropped_with_waiters_pending_stops_them_with_a_reason() {
    for (rings, o) in rings() {
        let dev = dev();
        let ctx = dev.create_context().unwrap();
        // The producer waits for a gate nobody records, so its record provably has not run.
        let gate = ctx.create_event().unwrap();
        let mut producer = ctx.create_stream_with(o).unwrap();
        producer
            .submit(&Task::from_desc(TaskDesc::event_wait(0, gate.handle(), 1)).unwrap())
            .unwrap();
        let ready = ctx.create_event().unwrap().record(&mut producer).unwrap();
        let out = dev.alloc(4).unwrap();
        out.write_slice(0, &[7u32]).unwrap();
        let mut consumer = ctx.create_stream_with(o).unwrap();
        consumer.wait_recorded(&ready).unwrap();
        consumer.submit(&task::fill(&out, 0xdead).unwrap()).unwrap();
        drop(producer);
        // The record will never run: the waiter's stream stops (EIO) rather than hang, and
        // the host-side wait for the record fails at once too (docs/abi.md section 8).
        let e = consumer.synchronize(T).unwrap_err();
        assert!(e.is(Errno::EIO), "{rings}: {e}");
        let e = ready.synchronize(T).unwrap_err();
        assert!(e.is(Errno::EIO), "{rings}: {e}");
        assert_eq!(
            out.read_vec::<u32>(0, 1).unwrap(),
            [7],
            "{rings}: nothing ran after the wait"
        );
        // The context goes on: a new stream works.
        let mut fresh = ctx.create_stream_with(o).unwrap();
        fresh.submit(&task::fill(&out, 1).unwrap()).unwrap();
        fresh.synchronize(T).unwrap();
        assert_eq!(out.read_vec::<u32>(0, 1).unwrap(), [1], "{rings}");
    }
}

/// A stream nobody polls keeps at most `backlog_limit` completions for `poll`, and counts
/// those it let go of, instead of stopping.
#[test]
fn an_unpolled_stream_keeps_a_bounded_backlog_and_counts_what_it_let_go() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let mut s = ctx
        .create_stream_with(StreamOptions::depths(16, 16).backlog_limit(40))
        .unwrap();
    let buf = dev.alloc(4).unwrap();
    for i in 0..200u32 {
        s.submit(&task::fill(&buf, i).unwrap().with_user_data(u64::from(i)))
            .unwrap();
    }
    s.synchronize(T).unwrap();
    let mut done = Vec::new();
    s.poll(&mut done);
    assert_eq!(
        done.len(),
        40,
        "the backlog holds backlog_limit completions"
    );
    assert_eq!(s.discarded(), 160);
    let tags: Vec<u64> = done.iter().map(|c| c.user_data).collect();
    assert_eq!(
        tags,
        (160..200).collect::<Vec<u64>>(),
        "the newest are kept, in order"
    );
    assert_eq!(buf.read_vec::<u32>(0, 1).unwrap(), [199]);
}
