//! The pollers' tests: serving streams while the device is held shared, giving the core
//! away to a starved host, and retiring the pollers started for a crowd of streams.

use super::*;
use crate::{local_open_params, MockConfig, MockDevice};
use davinci_driver_core::NoUserMem;
use davinci_driver_core::Role;
use davinci_ring::{Consumer, Producer};
use davinci_uapi::{
    CreateContextArgs, CreateStreamArgs, EventRecord, HandleArgs, TaskDesc, Wire,
    DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_STREAM, DRIVER_CMD_DESTROY_STREAM,
};

fn call<T: Wire>(dev: &MockDevice, c: u32, request: u32, args: &mut T) {
    let mut arg = vec![0u8; T::SIZE];
    args.encode(&mut arg);
    dev.ioctl(c, request, &mut arg, &mut NoUserMem).unwrap();
    *args = T::decode(&arg);
}

/// A new stream of context `ctx` and the host's ends of its rings, over the device's own
/// mapping of its memory (kept alive by the returned `Arc`).
fn host_ends(
    dev: &MockDevice,
    c: u32,
    ctx: u32,
    cmd_entries: u32,
    event_entries: u32,
) -> (
    Producer<TaskDesc>,
    Consumer<EventRecord>,
    Arc<crate::stream_mem::StreamMem>,
) {
    let mut s = CreateStreamArgs {
        ctx,
        cmd_entries,
        event_entries,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_CREATE_STREAM, &mut s);
    let mem = dev
        .core()
        .shared()
        .stream_mem(c, s.handle)
        .cloned()
        .expect("the stream's memory");
    let (cmd, evt) = mem.ring_regions().expect("ring regions");
    (Producer::new(cmd), Consumer::new(evt), mem)
}

/// The data path never needs the device exclusively: with the device held shared (as a
/// usage report holds it, or as another poller does while it runs its streams), the
/// pollers still take, run and complete descriptors. With one device-wide mutex they
/// would wait for the holder.
#[test]
fn pollers_serve_streams_while_the_device_is_held_shared() {
    let dev = MockDevice::new(MockConfig {
        pollers: 2,
        ..MockConfig::default()
    });
    let c = dev
        .open(local_open_params(Role::Client, true))
        .expect("open");
    let mut ctx = CreateContextArgs::default();
    call(&dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut ctx);
    let mut ends = Vec::new();
    for _ in 0..2 {
        ends.push(host_ends(&dev, c, ctx.handle, 64, 64));
    }
    assert_eq!(dev.pollers(), 2);

    let held = dev.core().shared();
    for (i, (prod, _, mem)) in ends.iter_mut().enumerate() {
        for k in 0..50u64 {
            prod.push(&TaskDesc::nop(i as u64 * 1000 + k)).unwrap();
        }
        prod.publish();
        mem.kick();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    for (i, (_, cons, _)) in ends.iter_mut().enumerate() {
        let mut seen = Vec::new();
        while seen.len() < 50 {
            cons.consume(usize::MAX, |r| seen.push((r.user_data, r.status)));
            assert!(
                Instant::now() < deadline,
                "stream {i}: {} of 50 completions while the device was held shared",
                seen.len()
            );
            std::thread::yield_now();
        }
        let want: Vec<(u64, i32)> = (0..50).map(|k| (i as u64 * 1000 + k, 0)).collect();
        assert_eq!(seen, want);
    }
    drop(held);
    drop(ends);
    dev.close(c);
}

#[test]
fn starved_needs_a_backlog_then_an_empty_ring() {
    let mut s = Starved::default();
    s.reset(2);
    // Stream 0: a backlog of STARVED_PASSES full passes, then dry: starved, once.
    for _ in 0..STARVED_PASSES {
        assert!(!s.see(0, &Run::Progress(64), 64));
    }
    assert!(s.see(0, &Run::Idle, 64));
    assert!(!s.see(0, &Run::Idle, 64));
    // One full pass short of that: not starved.
    for _ in 1..STARVED_PASSES {
        assert!(!s.see(0, &Run::Progress(64), 64));
    }
    assert!(!s.see(0, &Run::Idle, 64));
    // A round trip's passes (fewer than the budget) never are, however many.
    for _ in 0..100 {
        assert!(!s.see(1, &Run::Progress(1), 64));
        assert!(!s.see(1, &Run::Idle, 64));
    }
    // A short pass, a stall or a block in between breaks the run of full passes.
    for r in [Run::Progress(63), Run::Stalled, Run::Continuing] {
        for _ in 0..STARVED_PASSES {
            s.see(1, &Run::Progress(64), 64);
        }
        s.see(1, &r, 64);
        assert!(!s.see(1, &Run::Idle, 64));
    }
    // A stream the poller does not know (its set changed): nothing.
    assert!(!s.see(7, &Run::Idle, 64));
}

/// The poller gives its core away when a backlogged stream ran dry (its host may be
/// waiting for this core), and never for round trips (one task at a time): a yield per
/// round trip cost it 0.5 -> 1.3 us.
#[test]
fn poller_gives_way_after_a_backlog_not_per_round_trip() {
    let dev = MockDevice::new(MockConfig {
        pollers: 1,
        ..MockConfig::default()
    });
    let budget = dev.core().config.run_budget.max(1);
    let c = dev
        .open(local_open_params(Role::Client, true))
        .expect("open");
    let mut ctx = CreateContextArgs::default();
    call(&dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut ctx);
    let (mut prod, mut cons, mem) = host_ends(&dev, c, ctx.handle, 1024, 2048);
    let deadline = Instant::now() + Duration::from_secs(20);
    let yields = || dev.core().starved_yields.load(Ordering::Relaxed);
    let mut next = 0u64;
    let mut expect = |cons: &mut Consumer<EventRecord>, until: u64| {
        while next < until {
            cons.consume(usize::MAX, |r| {
                assert_eq!((r.user_data, r.status), (next, 0));
                next += 1;
            });
            assert!(Instant::now() < deadline, "{next} of {until} completions");
            std::thread::yield_now();
        }
    };

    // Round trips: one task in flight, so no pass runs the whole budget.
    for k in 0..200u64 {
        prod.push(&TaskDesc::nop(k)).unwrap();
        prod.publish();
        mem.kick();
        expect(&mut cons, k + 1);
    }
    assert_eq!(yields(), 0, "a yield for a stream that never had a backlog");

    // A backlog of more than STARVED_PASSES full passes, published at once, then nothing.
    let n = u64::from(budget) * u64::from(STARVED_PASSES + 2);
    assert!(n <= 1024, "the backlog fits the ring");
    for k in 0..n {
        prod.push(&TaskDesc::nop(200 + k)).unwrap();
    }
    prod.publish();
    mem.kick();
    expect(&mut cons, 200 + n);
    // The pass after the last full one finds the ring empty.
    while yields() == 0 {
        assert!(
            Instant::now() < deadline,
            "no yield after the backlog ran dry"
        );
        std::thread::yield_now();
    }
    drop((prod, cons, mem));
    dev.close(c);
}

/// A poller retired by a DESTROY_STREAM of a host that wakes the pollers after its replies
/// (`tidy_after_replies`, as the daemon does) ends at once: the call joins it before the
/// reply, so its kick cannot wait for the reply. The retired poller here sleeps on the kick
/// word alone: an earlier reap emptied its set while a later poller still served a stream,
/// so it stayed, took its empty set and slept (for an hour, with nothing to serve).
#[test]
fn a_poller_retired_while_it_sleeps_on_an_empty_set_ends_before_the_reply() {
    let dev = MockDevice::new(MockConfig {
        pollers: 1,
        ..MockConfig::default()
    });
    dev.tidy_after_replies();
    let c = dev
        .open(local_open_params(Role::Client, true))
        .expect("open");
    let mut ctx = CreateContextArgs::default();
    call(&dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut ctx);
    // A crowd: the first poller full, a second one full, a third one with one stream.
    let per = FUTEX_WAITV_MAX - 1;
    for _ in 0..2 * per + 1 {
        let mut s = CreateStreamArgs {
            ctx: ctx.handle,
            cmd_entries: 8,
            event_entries: 8,
            ..Default::default()
        };
        call(&dev, c, DRIVER_CMD_CREATE_STREAM, &mut s);
        dev.tidy();
    }
    assert_eq!(dev.pollers(), 3);
    let on = |p: usize| -> Vec<u32> {
        let served = dev.core().served();
        served
            .iter()
            .filter(|(_, s)| s.poller == p)
            .map(|(h, _)| *h)
            .collect()
    };
    let (second, third) = (on(1), on(2));
    assert_eq!((second.len(), third.len()), (per, 1));
    let destroy = |handle: u32| {
        let mut h = HandleArgs { handle, pad: 0 };
        call(&dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h);
    };
    // The second poller's streams go: it is not the last one, so it stays, and sleeps on the
    // kick word alone.
    for h in second {
        destroy(h);
        dev.tidy();
    }
    assert_eq!(dev.pollers(), 3);
    let set = dev.core().pollers()[1].set.clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    while set.sleeping_on.load(Ordering::Relaxed) != 1 {
        assert!(
            Instant::now() < deadline,
            "the emptied poller does not sleep on the kick word alone"
        );
        std::thread::yield_now();
    }
    // The third poller's stream goes: the third and then the second poller retire, and the
    // call that retired them returns.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            destroy(third[0]);
            let _ = tx.send(());
        });
        let returned = rx.recv_timeout(Duration::from_secs(20));
        // If it did not, the reply's kick lets it go, so that the scope ends.
        dev.tidy();
        assert!(
            returned.is_ok(),
            "DESTROY_STREAM did not return in 20 s: it joined a retired poller that sleeps \
             on a kick left for after the reply"
        );
    });
    assert_eq!(dev.pollers(), 1);
    assert!(set.retired.load(Ordering::Acquire));
    dev.close(c);
}
