//! Loom models of the ring protocol: the crate's own ring code, run over loom's atomics and
//! `UnsafeCell` slots (see `src/loom_mem.rs`). A data race on a slot, a stale index or flag
//! that breaks an assertion, or a lost wake-up (the sleeper spins forever: loom's branch limit)
//! fails the model.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p davinci-ring --release --test loom
//! ```
//! `scripts/ring-mutation-check.sh` runs these once per ordering site with `DAVINCI_RING_MUTANT=<site>`
//! (that site weakened to Relaxed / fence removed) and tabulates which models fail.
#![cfg(loom)]

use davinci_ring::{doorbell_pair, Consumer, DeviceConsumer, DeviceProducer, Producer, RingRegion};
use davinci_uapi::{DevAddr, EventRecord, TaskDesc};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

/// A descriptor whose every operand depends on `i`, so a torn or stale slot is noticed.
fn desc(i: u64) -> TaskDesc {
    TaskDesc::fill(i, DevAddr(0x1000 + i), 64 * (i + 1), i as u32 ^ 0xdead_beef)
}

fn rec(i: u64) -> EventRecord {
    EventRecord {
        user_data: i,
        status: -(i as i32),
        opcode: 1,
        result: !i,
        ..EventRecord::default()
    }
}

fn region(entries: u32, slot: usize, start: u32) -> RingRegion {
    let r = RingRegion::new_loom(entries, slot).expect("model region");
    r.init_at(start);
    r
}

/// Host pushes `n` descriptors into a 2-slot command ring (publishing when full or done); the
/// device consumes them, checking each copy. Slots are reused, so both directions of
/// synchronisation (tail: slot writes -> reads; head: reads -> overwrites) are exercised.
fn command_ring(start: u32, n: u64) {
    loom::model(move || {
        let r = region(2, 64, start);
        let mut dev = DeviceConsumer::<TaskDesc>::new(r.clone());
        let mut host = Producer::<TaskDesc>::new(r);
        let h = thread::spawn(move || {
            let mut i = 0;
            while i < n {
                if host.push(&desc(i)).is_ok() {
                    i += 1;
                } else {
                    host.publish();
                    thread::yield_now();
                }
            }
            host.publish();
        });
        let mut next = 0;
        while next < n {
            let avail = dev.available().expect("healthy ring");
            if avail == 0 {
                thread::yield_now();
                continue;
            }
            for i in 0..avail {
                assert_eq!(dev.peek(i), Some(desc(next)));
                next += 1;
            }
            dev.advance(avail);
        }
        h.join().unwrap();
        assert_eq!(dev.available(), Ok(0));
        assert_eq!(dev.head(), start.wrapping_add(n as u32));
    });
}

#[test]
fn command_ring_publish_consume() {
    command_ring(0, 4);
}

#[test]
fn command_ring_wraps_near_u32_max() {
    // Indices u32::MAX - 1, u32::MAX, 0: the tail and head both cross the wrap.
    command_ring(u32::MAX - 1, 4);
}

/// Device produces `n` records into a 2-slot event ring; the host consumes them with
/// `consume`, checking each copy.
fn event_ring(start: u32, n: u64) {
    loom::model(move || {
        let r = region(2, 32, start);
        let mut dev = DeviceProducer::<EventRecord>::new(r.clone());
        let mut host = Consumer::<EventRecord>::new(r);
        let h = thread::spawn(move || {
            let mut i = 0;
            while i < n {
                let free = dev.free().expect("honest host");
                if free == 0 {
                    thread::yield_now();
                    continue;
                }
                for _ in 0..free.min((n - i) as u32) {
                    dev.push(&rec(i)).unwrap();
                    i += 1;
                }
                dev.publish();
            }
        });
        let mut next = 0;
        while next < n {
            let got = host.consume(8, |r| {
                assert_eq!(r, rec(next));
                next += 1;
            });
            if got == 0 {
                thread::yield_now();
            }
        }
        h.join().unwrap();
        assert_eq!(host.available(), 0);
        assert_eq!(host.head(), start.wrapping_add(n as u32));
    });
}

#[test]
fn event_ring_publish_consume() {
    event_ring(0, 4);
}

#[test]
fn event_ring_wraps_near_u32_max() {
    event_ring(u32::MAX - 1, 4);
}

/// A completion count is information by itself: once `available()` shows the record, what the
/// device wrote before completing it (a result in device memory) is visible, without
/// consuming the record.
#[test]
fn event_completion_makes_results_visible() {
    loom::model(|| {
        let r = region(2, 32, 0);
        let mut dev = DeviceProducer::<EventRecord>::new(r.clone());
        let mut host = Consumer::<EventRecord>::new(r);
        let result = Arc::new(UnsafeCell::new(0u64));
        let result2 = result.clone();
        let h = thread::spawn(move || {
            // The task's output, written by the device before it completes the task.
            // SAFETY: loom checks this write against the host's read below.
            result2.with_mut(|p| unsafe { *p = 42 });
            assert_eq!(dev.free(), Ok(2));
            dev.push(&rec(0)).unwrap();
            dev.publish();
        });
        while host.available() == 0 {
            thread::yield_now();
        }
        // SAFETY: loom reports this read if it is not ordered after the device's write.
        assert_eq!(result.with(|p| unsafe { *p }), 42);
        h.join().unwrap();
    });
}

/// Full: with both slots pushed the next push fails and hands the item back; it succeeds only
/// after the device advances. Empty: nothing is available (and peek gives nothing) once all
/// is consumed, and the device may then sleep.
#[test]
fn full_and_empty() {
    loom::model(|| {
        let r = region(2, 64, u32::MAX);
        let mut dev = DeviceConsumer::<TaskDesc>::new(r.clone());
        let mut host = Producer::<TaskDesc>::new(r);
        let h = thread::spawn(move || {
            host.push(&desc(0)).unwrap();
            host.push(&desc(1)).unwrap();
            assert_eq!(host.push(&desc(2)), Err(desc(2)), "full before publishing");
            assert_eq!(host.free(), 0);
            host.publish();
            while host.push(&desc(2)).is_err() {
                thread::yield_now();
            }
            host.publish();
        });
        // Consume one at a time, so the host sees exactly one slot freed at a time.
        let mut next = 0;
        while next < 3 {
            let avail = dev.available().expect("healthy ring");
            assert!(avail <= 2);
            assert_eq!(dev.peek(avail), None, "nothing past the tail");
            if avail == 0 {
                thread::yield_now();
                continue;
            }
            assert_eq!(dev.peek(0), Some(desc(next)));
            dev.advance(1);
            next += 1;
        }
        h.join().unwrap();
        assert_eq!(dev.available(), Ok(0));
        assert_eq!(dev.peek(0), None);
        assert!(dev.prepare_sleep(), "empty ring: the device may sleep");
    });
}

/// The NEED_WAKEUP handshake with a consumer that really sleeps: it waits until the doorbell
/// differs from the value read before `prepare_sleep`, and nothing else wakes it. A lost
/// wake-up leaves it spinning after the host has finished: loom fails the model (branch limit).
#[test]
fn need_wakeup_handshake() {
    loom::model(|| {
        let r = region(4, 64, 0);
        let (bell, watch) = doorbell_pair();
        let mut dev = DeviceConsumer::<TaskDesc>::new(r.clone());
        let mut host = Producer::<TaskDesc>::new(r);
        let h = thread::spawn(move || {
            for i in 0..3 {
                host.push(&desc(i)).unwrap();
                if host.publish() {
                    bell.ring(host.tail());
                }
            }
        });
        let mut next = 0;
        while next < 3 {
            let avail = dev.available().expect("healthy ring");
            if avail > 0 {
                for i in 0..avail {
                    assert_eq!(dev.peek(i), Some(desc(next)));
                    next += 1;
                }
                dev.advance(avail);
                continue;
            }
            let d0 = watch.value();
            if dev.prepare_sleep() {
                // Sleep: only a doorbell write ends it (FUTEX_WAIT(doorbell, d0) in the mock).
                while watch.value() == d0 {
                    thread::yield_now();
                }
                dev.clear_need_wakeup();
            }
        }
        h.join().unwrap();
    });
}

/// The stall sleep: a device whose event ring is full sleeps until the host reaps, under the
/// same Dekker protocol as the idle sleep (NEED_WAKEUP on the command ring, a fence, a re-read
/// of the event-ring head; the host: head store, a fence, a flags load, a doorbell). Nothing
/// but the doorbell wakes the sleeper; a lost wake-up leaves it spinning (branch limit).
#[test]
fn event_ring_stall_sleep_handshake() {
    loom::model(|| {
        let cmd = region(2, 64, 0);
        let evt = region(2, 32, 0);
        let (bell, watch) = doorbell_pair();
        // The command ring only carries the flags here; the device has "work" all along.
        let mut cons = DeviceConsumer::<TaskDesc>::new(cmd.clone());
        let host_cmd = Producer::<TaskDesc>::new(cmd);
        let mut prod = DeviceProducer::<EventRecord>::new(evt.clone());
        let mut host = Consumer::<EventRecord>::new(evt);
        let h = thread::spawn(move || {
            let mut next = 0;
            while next < 3 {
                let got = host.consume(8, |r| {
                    assert_eq!(r, rec(next));
                    next += 1;
                });
                if got > 0 && host_cmd.wake_needed_after_reap() {
                    bell.ring_counter();
                }
                if got == 0 {
                    thread::yield_now();
                }
            }
        });
        let mut i = 0;
        while i < 3 {
            let free = prod.free().expect("honest host");
            if free > 0 {
                prod.push(&rec(i)).unwrap();
                prod.publish();
                i += 1;
                continue;
            }
            let d0 = watch.value();
            if cons.prepare_stall_sleep(&mut prod) {
                while watch.value() == d0 {
                    thread::yield_now();
                }
                cons.clear_need_wakeup();
            }
        }
        h.join().unwrap();
    });
}

/// The lost wake-up of ABI 1.0, end to end: the host publishes until the command ring is full
/// without reaping, the device runs until the event ring is full and sleeps stalled (or idle
/// when the command ring is empty), the host reaps and rings. Under 1.0 both rings wrote the
/// same value (the command-ring tail) to the doorbell, so a device that read `d0` after the
/// publish's ring slept through the reap's ring; the doorbell is now a counter and every ring
/// changes it. Both sleeps are real (only the doorbell ends them).
#[test]
fn publish_until_full_then_reap_wakes_a_stalled_device() {
    loom::model(|| {
        const N: u64 = 4;
        let cmd = region(2, 64, 0);
        let evt = region(2, 32, 0);
        let (bell, watch) = doorbell_pair();
        let mut cons = DeviceConsumer::<TaskDesc>::new(cmd.clone());
        let mut host_cmd = Producer::<TaskDesc>::new(cmd);
        let mut prod = DeviceProducer::<EventRecord>::new(evt.clone());
        let mut host_evt = Consumer::<EventRecord>::new(evt);
        let h = thread::spawn(move || {
            let (mut sent, mut seen) = (0, 0);
            // Publish everything first (ringing when asked), reaping only when the command
            // ring is full and nothing else can progress.
            while seen < N {
                if sent < N && host_cmd.push(&desc(sent)).is_ok() {
                    sent += 1;
                    if host_cmd.publish() {
                        bell.ring_counter();
                    }
                    continue;
                }
                let got = host_evt.consume(8, |r| {
                    assert_eq!(r.user_data, seen);
                    seen += 1;
                });
                if got > 0 && host_cmd.wake_needed_after_reap() {
                    bell.ring_counter();
                }
                if got == 0 {
                    thread::yield_now();
                }
            }
        });
        let mut done = 0;
        while done < N {
            let avail = cons.available().expect("healthy ring");
            let free = prod.free().expect("honest host");
            let n = avail.min(free);
            if n > 0 {
                for i in 0..n {
                    let d = cons.peek(i).expect("published slot");
                    prod.push(&EventRecord {
                        user_data: d.user_data,
                        ..EventRecord::default()
                    })
                    .unwrap();
                }
                cons.advance(n);
                prod.publish();
                done += u64::from(n);
                continue;
            }
            let d0 = watch.value();
            let sleep = if avail == 0 {
                cons.prepare_sleep()
            } else {
                cons.prepare_stall_sleep(&mut prod)
            };
            if sleep {
                while watch.value() == d0 {
                    thread::yield_now();
                }
                cons.clear_need_wakeup();
            }
        }
        h.join().unwrap();
    });
}

/// The error state: once the host sees ERROR it sees the errno and index that caused it.
#[test]
fn error_state_published() {
    loom::model(|| {
        let r = region(2, 64, 0);
        let host_view = r.clone();
        let dev = DeviceConsumer::<TaskDesc>::new(r);
        let h = thread::spawn(move || dev.set_error(71, 5));
        loop {
            if let Some(e) = host_view.error() {
                assert_eq!(e, (71, 5));
                break;
            }
            thread::yield_now();
        }
        h.join().unwrap();
    });
}

/// SUBMIT_TASK: the client publishes one descriptor on the ring, then (same thread, as a
/// syscall is) asks the driver to place one on its behalf, resynchronises its tail and
/// publishes a third; the device worker, which shares the `DeviceConsumer` with the ioctl path
/// under a lock, sees all three in order. Passes with both tail accesses of
/// `submit_on_behalf` Relaxed.
#[test]
fn submit_on_behalf_slow_path() {
    use loom::sync::Mutex;
    loom::model(|| {
        let r = region(4, 64, u32::MAX);
        let dev = Arc::new(Mutex::new(DeviceConsumer::<TaskDesc>::new(r.clone())));
        let mut host = Producer::<TaskDesc>::new(r);
        let ioctl = dev.clone();
        let h = thread::spawn(move || {
            host.push(&desc(0)).unwrap();
            host.publish();
            let index = ioctl.lock().unwrap().submit_on_behalf(&desc(1));
            assert_eq!(index, Ok(0));
            host.resync_tail();
            host.push(&desc(2)).unwrap();
            host.publish();
        });
        let mut next = 0;
        while next < 3 {
            let mut dev = dev.lock().unwrap();
            let avail = dev.available().expect("healthy ring");
            for i in 0..avail {
                assert_eq!(dev.peek(i), Some(desc(next)));
                next += 1;
            }
            dev.advance(avail);
            drop(dev);
            if avail == 0 {
                thread::yield_now();
            }
        }
        h.join().unwrap();
    });
}
