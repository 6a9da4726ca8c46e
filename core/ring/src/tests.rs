//! Unit tests of both ends over a heap buffer (the host and the device in one thread).
#![allow(unsafe_code)]

use std::vec::Vec;

use davinci_uapi::rings::{RING_HEADER_SIZE, RING_MAX_ENTRIES};
use davinci_uapi::{DevAddr, EventRecord, RingFlags, TaskDesc};

use crate::region::Field;
use crate::sync::Ordering;
use crate::test_util::AlignedBuf;
use crate::{
    Consumer, DeviceConsumer, DeviceProducer, Doorbell, DoorbellWatch, Producer, RingError,
    RingRegion,
};

/// A heap buffer standing in for a mapping.
struct Buf(AlignedBuf);

impl Buf {
    fn new(len: usize) -> Self {
        Buf(AlignedBuf::new(len))
    }
    fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    /// A region over the whole buffer.
    fn region(&mut self, entries: u32, slot: usize) -> RingRegion {
        let (p, len) = (self.ptr(), self.len());
        // SAFETY: the buffer is 64-aligned, `len` bytes long, outlives every region of the test
        // (each test drops its ends before the buffer), and is accessed only through regions.
        unsafe { RingRegion::new(p, len, entries, slot) }.expect("valid region")
    }
}

fn cmd_buf(entries: u32) -> Buf {
    Buf::new(RING_HEADER_SIZE + entries as usize * 64)
}

fn evt_buf(entries: u32) -> Buf {
    Buf::new(RING_HEADER_SIZE + entries as usize * 32)
}

/// A command ring's two ends, the header initialised at `start`.
fn cmd_ring(
    buf: &mut Buf,
    entries: u32,
    start: u32,
) -> (Producer<TaskDesc>, DeviceConsumer<TaskDesc>) {
    let dev = buf.region(entries, 64);
    dev.init_at(start);
    let cons = DeviceConsumer::new(dev);
    (Producer::new(buf.region(entries, 64)), cons)
}

/// An event ring's two ends, the header initialised at `start`.
fn evt_ring(
    buf: &mut Buf,
    entries: u32,
    start: u32,
) -> (DeviceProducer<EventRecord>, Consumer<EventRecord>) {
    let dev = buf.region(entries, 32);
    dev.init_at(start);
    let prod = DeviceProducer::new(dev);
    (prod, Consumer::new(buf.region(entries, 32)))
}

fn rec(user_data: u64) -> EventRecord {
    EventRecord {
        user_data,
        result: user_data * 3,
        ..EventRecord::default()
    }
}

/// Drains everything available on the device side, checking each descriptor is `next`.
fn drain_cmd(cons: &mut DeviceConsumer<TaskDesc>, next: &mut u64) -> u32 {
    let n = cons.available().expect("healthy ring");
    for i in 0..n {
        let d = cons.peek(i).expect("published entry");
        assert_eq!(
            d,
            TaskDesc::fill(*next, DevAddr(0x1000 + *next), 64, *next as u32)
        );
        *next += 1;
    }
    cons.advance(n);
    n
}

#[test]
fn region_checks() {
    let mut buf = cmd_buf(8);
    let (p, len) = (buf.ptr(), buf.len());
    let new = |p: *mut u8, len, entries, slot| {
        // SAFETY: `new` reads no memory; it only checks its arguments. The one call that
        // succeeds describes the real buffer (valid, 64-aligned, `len` bytes); the others
        // (misaligned, null, overlong) are rejected, which is what is tested, and no region
        // is built on them.
        unsafe { RingRegion::new(p, len, entries, slot) }
    };
    assert!(new(p, len, 8, 64).is_ok());
    assert_eq!(new(p, len, 6, 64).unwrap_err(), RingError::BadEntries);
    assert_eq!(new(p, len, 0, 64).unwrap_err(), RingError::BadEntries);
    assert_eq!(new(p, len, 1, 64).unwrap_err(), RingError::BadEntries);
    assert_eq!(
        new(p, len, RING_MAX_ENTRIES * 2, 64).unwrap_err(),
        RingError::BadEntries
    );
    assert_eq!(new(p, len - 1, 8, 64).unwrap_err(), RingError::BadLength);
    assert_eq!(
        new(p, RING_HEADER_SIZE, 2, 64).unwrap_err(),
        RingError::BadLength
    );
    assert_eq!(new(p, len, 8, 0).unwrap_err(), RingError::BadLength);
    assert_eq!(
        new(p, usize::MAX, RING_MAX_ENTRIES, usize::MAX / 2).unwrap_err(),
        RingError::BadLength
    );
    assert_eq!(
        new(p.wrapping_add(8), len - 8, 2, 64).unwrap_err(),
        RingError::Misaligned
    );
    assert_eq!(
        new(core::ptr::null_mut(), len, 8, 64).unwrap_err(),
        RingError::Misaligned
    );
    // A slot type whose size is not the region's slot size is refused, not overrun.
    assert_eq!(
        Producer::<TaskDesc>::try_new(buf.region(8, 32)).err(),
        Some(RingError::BadLength)
    );
    assert_eq!(
        Consumer::<EventRecord>::try_new(buf.region(8, 64)).err(),
        Some(RingError::BadLength)
    );
    assert!(DeviceConsumer::<u64>::try_new(buf.region(8, 64)).is_err());
    assert!(DeviceProducer::<u32>::try_new(buf.region(8, 4)).is_ok());
}

#[test]
fn init_writes_the_header() {
    let mut buf = cmd_buf(16);
    assert!(buf.0.set_byte(128 + 8, 0xff)); // stale flags
    let r = buf.region(16, 64);
    r.init();
    let words: Vec<u32> = (0..6)
        .map(|i| buf.0.read_u32(128 + i * 4).unwrap())
        .collect();
    assert_eq!(words, [16, 15, 0, 0, 0, 0]);
    let r = buf.region(16, 64);
    assert_eq!(
        (r.entries(), r.flags(), r.error(), r.dropped()),
        (16, RingFlags::empty(), None, 0)
    );
}

#[test]
fn command_round_trip() {
    let mut buf = cmd_buf(8);
    let (mut prod, mut cons) = cmd_ring(&mut buf, 8, 0);
    assert_eq!(
        (prod.capacity(), prod.free(), prod.tail(), prod.pending()),
        (8, 8, 0, 0)
    );
    assert_eq!(cons.available(), Ok(0));
    for i in 0..5u64 {
        prod.push(&TaskDesc::fill(i, DevAddr(0x1000 + i), 64, i as u32))
            .unwrap();
    }
    // Pushed but not published: invisible to the device.
    assert_eq!(prod.pending(), 5);
    assert_eq!(cons.available(), Ok(0));
    assert_eq!(cons.peek(0), None);
    assert!(!prod.publish());
    assert_eq!(prod.pending(), 0);
    let mut next = 0;
    assert_eq!(drain_cmd(&mut cons, &mut next), 5);
    assert_eq!((cons.head(), next), (5, 5));
    assert_eq!(cons.available(), Ok(0));
    assert!(!prod.publish(), "nothing pending");
}

#[test]
fn event_round_trip() {
    let mut buf = evt_buf(4);
    let (mut prod, mut cons) = evt_ring(&mut buf, 4, 0);
    assert_eq!(
        prod.push(&rec(0)),
        Err(rec(0)),
        "no free() yet: no known space"
    );
    assert_eq!(prod.free(), Ok(4));
    for i in 0..3 {
        prod.push(&rec(i)).unwrap();
    }
    assert_eq!(cons.available(), 0);
    prod.publish();
    assert_eq!(cons.available(), 3);
    let mut got = Vec::new();
    assert_eq!(cons.consume(2, |r| got.push(r)), 2);
    assert_eq!(cons.consume(10, |r| got.push(r)), 1);
    assert_eq!(cons.consume(10, |r| got.push(r)), 0);
    assert_eq!(got, [rec(0), rec(1), rec(2)]);
    assert_eq!((cons.head(), prod.tail()), (3, 3));
    assert_eq!(prod.free(), Ok(4));
}

#[test]
fn wraps_near_u32_max() {
    for start in [u32::MAX - 5, u32::MAX - 1, u32::MAX] {
        let mut buf = cmd_buf(4);
        let (mut prod, mut cons) = cmd_ring(&mut buf, 4, start);
        let mut sent = 0u64;
        let mut next = 0u64;
        for round in 0..6 {
            let batch: Vec<TaskDesc> = (0..3)
                .map(|k| sent + k)
                .map(|i| TaskDesc::fill(i, DevAddr(0x1000 + i), 64, i as u32))
                .collect();
            assert_eq!(prod.push_slice(&batch), 3, "round {round}");
            sent += 3;
            prod.publish();
            assert_eq!(drain_cmd(&mut cons, &mut next), 3);
        }
        assert_eq!(next, 18);
        assert_eq!(cons.head(), start.wrapping_add(18));
        assert_eq!(prod.tail(), start.wrapping_add(18));

        let mut buf = evt_buf(2);
        let (mut prod, mut cons) = evt_ring(&mut buf, 2, start);
        let mut got = Vec::new();
        for i in 0..7 {
            assert_eq!(prod.free(), Ok(2));
            prod.push(&rec(i)).unwrap();
            prod.publish();
            assert_eq!(cons.consume(8, |r| got.push(r.user_data)), 1);
        }
        assert_eq!(got, [0, 1, 2, 3, 4, 5, 6]);
    }
}

#[test]
fn full_and_empty() {
    let mut buf = cmd_buf(4);
    let (mut prod, mut cons) = cmd_ring(&mut buf, 4, u32::MAX - 1);
    let d = |i: u64| TaskDesc::fill(i, DevAddr(0x1000 + i), 64, i as u32);
    for i in 0..4 {
        prod.push(&d(i)).unwrap();
    }
    assert_eq!(prod.free(), 0);
    assert_eq!(prod.push(&d(4)), Err(d(4)), "full: the item comes back");
    prod.publish();
    assert_eq!(
        prod.push(&d(4)),
        Err(d(4)),
        "still full until the device advances"
    );
    assert_eq!(cons.available(), Ok(4));
    assert_eq!(cons.peek(4), None);
    // Partial consumption frees exactly that much.
    let mut next = 0;
    assert_eq!(cons.peek(0), Some(d(0)));
    cons.advance(1);
    next += 1;
    assert_eq!(prod.free(), 1);
    prod.push(&d(4)).unwrap();
    assert_eq!(prod.free(), 0);
    prod.publish();
    // Advancing more than available is clamped: the head never passes the tail.
    assert_eq!(cons.available(), Ok(4));
    for i in 0..4 {
        assert_eq!(cons.peek(i), Some(d(next + i as u64)));
    }
    cons.advance(100);
    assert_eq!(cons.head(), u32::MAX.wrapping_add(4));
    assert_eq!(cons.available(), Ok(0));
    assert_eq!(cons.peek(0), None);
    assert_eq!(prod.free(), 4);
}

#[test]
fn push_slice_is_partial_when_space_runs_out() {
    let mut buf = cmd_buf(4);
    let (mut prod, mut cons) = cmd_ring(&mut buf, 4, 0);
    let items: Vec<TaskDesc> = (0..6)
        .map(|i| TaskDesc::fill(i, DevAddr(0x1000 + i), 64, i as u32))
        .collect();
    assert_eq!(prod.push_slice(&items), 4);
    assert_eq!(prod.push_slice(&items[4..]), 0);
    prod.publish();
    let mut next = 0;
    assert_eq!(drain_cmd(&mut cons, &mut next), 4);
    // The cached head says full, so push_slice re-reads it and sees the space.
    assert_eq!(prod.push_slice(&items[4..]), 2);
    prod.publish();
    assert_eq!(drain_cmd(&mut cons, &mut next), 2);
    assert_eq!(next, 6);
}

#[test]
fn free_answers_from_the_cache_and_free_now_from_the_device() {
    let mut buf = cmd_buf(8);
    let (mut prod, mut cons) = cmd_ring(&mut buf, 8, u32::MAX - 2);
    for i in 0..6 {
        prod.push(&TaskDesc::nop(i)).unwrap();
    }
    prod.publish();
    assert_eq!(cons.available(), Ok(6));
    cons.advance(5);
    // The cached head still says 2 free (not full, so it is not re-read)...
    assert_eq!(prod.free(), 2);
    // ...while the device has freed 5 more.
    assert_eq!(prod.free_now(), 7);
    assert_eq!(prod.free(), 7, "free_now refreshed the cache");
}

#[test]
fn publish_reports_need_wakeup() {
    let mut buf = cmd_buf(4);
    let (mut prod, mut cons) = cmd_ring(&mut buf, 4, 0);
    prod.push(&TaskDesc::nop(1)).unwrap();
    assert!(!prod.publish(), "device awake: no doorbell");
    // Work is there: the device does not go to sleep and leaves the flag clear.
    assert!(!cons.prepare_sleep());
    assert!(!cons.region().flags().contains(RingFlags::NEED_WAKEUP));
    assert_eq!(cons.available(), Ok(1));
    cons.advance(1);
    // Nothing left: the device may sleep, with NEED_WAKEUP set.
    assert!(cons.prepare_sleep());
    assert!(prod.region().flags().contains(RingFlags::NEED_WAKEUP));
    assert!(!prod.publish(), "nothing pending: no doorbell");
    prod.push(&TaskDesc::nop(2)).unwrap();
    assert!(prod.publish(), "device asleep: ring the doorbell");
    cons.clear_need_wakeup();
    prod.push(&TaskDesc::nop(3)).unwrap();
    assert!(!prod.publish());
    assert_eq!(cons.available(), Ok(2));
}

#[test]
fn corrupt_tail_is_reported_not_followed() {
    let mut buf = cmd_buf(4);
    let (mut prod, mut cons) = cmd_ring(&mut buf, 4, 10);
    prod.push(&TaskDesc::nop(1)).unwrap();
    prod.publish();
    assert_eq!(cons.available(), Ok(1));
    cons.advance(1);
    let evil = buf.region(4, 64); // the hostile host's own view
    let tail = evil.field(Field::Tail);
    // A hostile host: tail far ahead, just past `entries`, and behind the head.
    for bad in [11 + 5, 11 + 1000, 10, 0, u32::MAX] {
        tail.store(bad, Ordering::Relaxed);
        assert_eq!(
            cons.available(),
            Err(RingError::Corrupt {
                head: 11,
                tail: bad
            })
        );
        assert_eq!(cons.peek(0), None, "nothing becomes available");
        cons.advance(1);
        assert_eq!(cons.head(), 11, "the head does not move");
    }
    // Exactly `entries` ahead is legal (a full ring).
    tail.store(15, Ordering::Relaxed);
    assert_eq!(cons.available(), Ok(4));
    // The shared head is never read back: a hostile head changes nothing for the device.
    evil.field(Field::Head).store(9999, Ordering::Relaxed);
    assert_eq!(cons.available(), Ok(4));
    assert_eq!(cons.head(), 11);
    assert_eq!(
        RingError::Corrupt { head: 1, tail: 9 }.errno(),
        davinci_uapi::Errno::EPROTO
    );
}

#[test]
fn hostile_event_head() {
    let mut buf = evt_buf(4);
    let (mut prod, cons) = evt_ring(&mut buf, 4, 100);
    assert_eq!(prod.free(), Ok(4));
    for i in 0..3 {
        prod.push(&rec(i)).unwrap();
    }
    prod.publish();
    prod.push(&rec(3)).unwrap(); // pushed, unpublished: tail 104, published 103
    let head = cons.region().field(Field::Head);
    // Beyond the published tail (even within the local tail), far ahead, backwards.
    for bad in [104, 105, 100 + 1000, 99, 0] {
        head.store(bad, Ordering::Relaxed);
        assert_eq!(
            prod.free(),
            Err(RingError::Corrupt {
                head: bad,
                tail: 103
            })
        );
        assert_eq!(prod.push(&rec(9)), Err(rec(9)), "no space after corruption");
    }
    // A legal head (the host consumed two).
    head.store(102, Ordering::Relaxed);
    assert_eq!(prod.free(), Ok(2));
    // Moving backwards from an accepted head is corruption too.
    head.store(101, Ordering::Relaxed);
    assert_eq!(
        prod.free(),
        Err(RingError::Corrupt {
            head: 101,
            tail: 103
        })
    );
    head.store(102, Ordering::Relaxed);
    assert_eq!(prod.free(), Ok(2));
    // A garbage `mask`/`entries` in the header changes nothing: the device uses its own.
    cons.region()
        .field(Field::Mask)
        .store(u32::MAX, Ordering::Relaxed);
    cons.region()
        .field(Field::Entries)
        .store(1 << 30, Ordering::Relaxed);
    prod.push(&rec(4)).unwrap();
    prod.push(&rec(5)).unwrap();
    assert_eq!(prod.push(&rec(6)), Err(rec(6)));
    prod.publish();
    // An honest consumer resuming from the accepted head sees every record, in order, once.
    let _ = cons;
    let mut cons = Consumer::<EventRecord>::new(buf.region(4, 32));
    let mut got = Vec::new();
    assert_eq!(cons.consume(8, |r| got.push(r.user_data)), 4);
    assert_eq!(got, [2, 3, 4, 5]);
    assert_eq!(prod.free(), Ok(4));
}

#[test]
fn host_consumer_ignores_an_impossible_tail() {
    let mut buf = evt_buf(4);
    let (mut prod, mut cons) = evt_ring(&mut buf, 4, 0);
    prod.free().unwrap();
    prod.push(&rec(1)).unwrap();
    prod.publish();
    cons.region().field(Field::Tail).store(9, Ordering::Relaxed);
    assert_eq!(cons.available(), 0);
    assert_eq!(cons.consume(8, |_| panic!("must not read")), 0);
    assert_eq!(cons.head(), 0);
    cons.region().field(Field::Tail).store(1, Ordering::Relaxed);
    assert_eq!(cons.consume(8, |r| assert_eq!(r, rec(1))), 1);
}

#[test]
fn host_producer_ignores_an_impossible_head() {
    let mut buf = cmd_buf(4);
    let (mut prod, _cons) = cmd_ring(&mut buf, 4, 0);
    prod.region().field(Field::Head).store(3, Ordering::Relaxed); // ahead of the tail
    assert_eq!(prod.free(), 0);
    assert_eq!(prod.push(&TaskDesc::nop(0)), Err(TaskDesc::nop(0)));
    prod.region().field(Field::Head).store(0, Ordering::Relaxed);
    assert_eq!(prod.free(), 4);
}

#[test]
fn error_state_and_dropped() {
    let mut buf = cmd_buf(4);
    let (prod, cons) = cmd_ring(&mut buf, 4, 0);
    assert_eq!(prod.region().error(), None);
    cons.add_dropped(2);
    cons.add_dropped(3);
    assert_eq!(prod.region().dropped(), 5);
    cons.set_error(71, 7);
    assert_eq!(prod.region().error(), Some((71, 7)));
    assert!(prod.region().flags().contains(RingFlags::ERROR));
    // Setting and clearing NEED_WAKEUP keeps ERROR.
    let mut cons = cons;
    assert!(cons.prepare_sleep());
    cons.clear_need_wakeup();
    assert_eq!(prod.region().flags(), RingFlags::ERROR);
}

#[test]
fn resync_tail_after_submit_task() {
    let mut buf = cmd_buf(4);
    let (mut prod, mut cons) = cmd_ring(&mut buf, 4, 0);
    prod.push(&TaskDesc::nop(0)).unwrap();
    prod.publish();
    // The driver places a descriptor on the client's behalf (SUBMIT_TASK): another producer.
    let mut driver = Producer::<TaskDesc>::new(buf.region(4, 64));
    assert_eq!(driver.tail(), 1);
    driver.push(&TaskDesc::nop(1)).unwrap();
    driver.publish();
    prod.resync_tail();
    assert_eq!((prod.tail(), prod.pending()), (2, 0));
    prod.push(&TaskDesc::nop(2)).unwrap();
    prod.publish();
    assert_eq!(cons.available(), Ok(3));
    let got: Vec<u64> = (0..3).map(|i| cons.peek(i).unwrap().user_data).collect();
    assert_eq!(got, [0, 1, 2]);
}

#[test]
fn doorbell_write_and_watch() {
    let mut word = AlignedBuf::new(64);
    let p = word.as_mut_ptr().cast::<u32>();
    // SAFETY: `p` is 64-aligned, valid for reads and writes while `word` lives (to the end of
    // this test), and only accessed through the doorbell and the watch.
    let (bell, watch) = unsafe { (Doorbell::new(p), DoorbellWatch::new(p)) };
    assert_eq!(watch.value(), 0);
    bell.ring(42);
    assert_eq!(watch.value(), 42);
    bell.ring(u32::MAX);
    assert_eq!(watch.value(), u32::MAX);
    assert_eq!(bell.as_ptr(), p);
    assert_eq!(watch.as_ptr(), p.cast_const());
}

#[test]
fn errors_display_what_was_wrong() {
    use std::string::ToString;
    assert!(RingError::BadEntries.to_string().contains("power of two"));
    assert!(RingError::Corrupt { head: 3, tail: 99 }
        .to_string()
        .contains("tail 99"));
    assert_eq!(RingError::BadLength.errno(), davinci_uapi::Errno::EINVAL);
}

/// Both rings and the doorbell handshake over real threads and the raw backend: the host
/// submits descriptors and reaps one record per descriptor, in order; the device sleeps (spins
/// on the doorbell word) whenever the command ring is empty. A lost wake-up would leave the
/// device asleep with work pending; the generous deadline turns that into a failure instead
/// of a hang.
#[test]
fn pipeline_over_threads_with_sleeping_device() {
    use std::time::{Duration, Instant};
    const N: u64 = 20_000;
    let deadline = Instant::now() + Duration::from_secs(120);

    let mut cmd = cmd_buf(8);
    let mut evt = evt_buf(16);
    let mut bell_word = AlignedBuf::new(64);
    let bell_ptr = bell_word.as_mut_ptr().cast::<u32>();
    let (mut host_cmd, mut dev_cmd) = cmd_ring(&mut cmd, 8, u32::MAX - 100);
    let (mut dev_evt, mut host_evt) = evt_ring(&mut evt, 16, u32::MAX - 7);
    // SAFETY: `bell_word` outlives both threads (they are joined by the scope below), is
    // 64-aligned, and is only accessed through the doorbell (volatile writes) and the watch.
    let (bell, watch) = unsafe { (Doorbell::new(bell_ptr), DoorbellWatch::new(bell_ptr)) };

    std::thread::scope(|s| {
        s.spawn(move || {
            let mut done = 0u64;
            while done < N {
                let free = dev_evt.free().expect("honest host");
                let avail = dev_cmd.available().expect("honest host");
                let n = free.min(avail);
                if n > 0 {
                    for i in 0..n {
                        let d = dev_cmd.peek(i).expect("available");
                        let r = EventRecord {
                            user_data: d.user_data,
                            result: d.imm,
                            ..EventRecord::default()
                        };
                        dev_evt.push(&r).expect("free slot");
                    }
                    dev_cmd.advance(n);
                    dev_evt.publish();
                    done += u64::from(n);
                    continue;
                }
                if avail > 0 {
                    std::thread::yield_now(); // event ring full: the host will drain it
                    continue;
                }
                let d0 = watch.value();
                if dev_cmd.prepare_sleep() {
                    while watch.value() == d0 {
                        assert!(
                            Instant::now() < deadline,
                            "lost wake-up: device asleep with work pending"
                        );
                        std::thread::yield_now();
                    }
                    dev_cmd.clear_need_wakeup();
                }
            }
        });

        let mut sent = 0u64;
        let mut next = 0u64;
        while next < N {
            // Submit in bursts of up to 5, as a runtime would.
            let mut burst = 0;
            while sent < N
                && burst < 5
                && host_cmd
                    .push(&TaskDesc::fill(sent, DevAddr(0x1000), 4, sent as u32))
                    .is_ok()
            {
                sent += 1;
                burst += 1;
            }
            if host_cmd.publish() {
                bell.ring(host_cmd.tail());
            }
            host_evt.consume(usize::MAX, |r| {
                assert_eq!((r.user_data, r.result), (next, next as u32 as u64));
                next += 1;
            });
            assert!(Instant::now() < deadline, "no progress");
            std::thread::yield_now();
        }
    });
    assert_eq!(host_cmd.pending(), 0);
    assert_eq!(host_evt.available(), 0);
}

#[test]
fn submit_on_behalf_slow_path() {
    use crate::SubmitError;
    let mut buf = cmd_buf(4);
    let (mut prod, mut cons) = cmd_ring(&mut buf, 4, u32::MAX - 1);
    prod.push(&TaskDesc::nop(0)).unwrap();
    prod.publish();
    // The driver places three on the client's behalf: indices continue from the shared tail.
    assert_eq!(cons.submit_on_behalf(&TaskDesc::nop(1)), Ok(u32::MAX));
    assert_eq!(cons.submit_on_behalf(&TaskDesc::nop(2)), Ok(0));
    assert_eq!(cons.submit_on_behalf(&TaskDesc::nop(3)), Ok(1));
    assert_eq!(
        cons.submit_on_behalf(&TaskDesc::nop(4)),
        Err(SubmitError::Full)
    );
    assert_eq!(SubmitError::Full.errno(), davinci_uapi::Errno::EAGAIN);
    assert_eq!(cons.available(), Ok(4));
    let got: Vec<u64> = (0..4).map(|i| cons.peek(i).unwrap().user_data).collect();
    assert_eq!(got, [0, 1, 2, 3]);
    cons.advance(2);
    // The client resynchronises and continues on the ring.
    prod.resync_tail();
    assert_eq!((prod.tail(), prod.free()), (2, 2));
    prod.push(&TaskDesc::nop(5)).unwrap();
    prod.publish();
    assert_eq!(cons.available(), Ok(3));
    assert_eq!(cons.peek(2).map(|d| d.user_data), Some(5));
    // A hostile tail: reported, nothing written, the tail left as it was.
    let evil = buf.region(4, 64);
    evil.field(Field::Tail).store(1000, Ordering::Relaxed);
    assert_eq!(
        cons.submit_on_behalf(&TaskDesc::nop(6)),
        Err(SubmitError::Corrupt)
    );
    assert_eq!(SubmitError::Corrupt.errno(), davinci_uapi::Errno::EPROTO);
    assert_eq!(evil.field(Field::Tail).load(Ordering::Relaxed), 1000);
}

#[test]
fn batches_written_with_streaming_stores_arrive_whole_across_the_wrap() {
    // `push_slice` of STREAM_MIN or more items takes the non-temporal path (x86_64); fewer
    // the plain one. Both must deliver every byte of every descriptor, in order, across the
    // ring's wrap and the u32 wrap of the indices.
    for start in [0, u32::MAX - 20] {
        let mut buf = cmd_buf(64);
        let (mut prod, mut cons) = cmd_ring(&mut buf, 64, start);
        let mut sent = 0u64;
        let mut next = 0u64;
        for (round, len) in [crate::STREAM_MIN, 40, 1, crate::STREAM_MIN + 7, 64, 3]
            .into_iter()
            .enumerate()
        {
            let batch: Vec<TaskDesc> = (0..len as u64)
                .map(|k| sent + k)
                .map(|i| TaskDesc::fill(i, DevAddr(0x1000 + i), 64, i as u32))
                .collect();
            assert_eq!(prod.push_slice(&batch), len, "round {round}");
            sent += len as u64;
            prod.publish();
            assert_eq!(drain_cmd(&mut cons, &mut next), len as u32, "round {round}");
        }
        assert_eq!(next, sent);
    }
}

#[test]
fn push_with_copies_each_items_descriptor_across_the_wrap_and_stops_when_full() {
    // `push_with` takes the descriptor out of a larger value (a runtime's task): each one
    // lands whole in its slot, in order, through the ring's wrap, the batch path and the
    // plain one; a batch larger than the free space is pushed in part.
    struct Wrapped {
        _before: [u64; 3],
        desc: TaskDesc,
        _after: u8,
    }
    let wrap = |i: u64| Wrapped {
        _before: [!i; 3],
        desc: TaskDesc::fill(i, DevAddr(0x1000 + i), 64, i as u32),
        _after: 0xa5,
    };
    let mut buf = cmd_buf(32);
    let (mut prod, mut cons) = cmd_ring(&mut buf, 32, u32::MAX - 9);
    let (mut sent, mut next) = (0u64, 0u64);
    for len in [20usize, 25, 3, 32] {
        let batch: Vec<Wrapped> = (sent..sent + len as u64).map(wrap).collect();
        assert_eq!(prod.push_with(&batch, |w| &w.desc), len);
        sent += len as u64;
        prod.publish();
        assert_eq!(drain_cmd(&mut cons, &mut next), len as u32);
    }
    assert_eq!(next, sent);
    // 40 offered, 32 free: the first 32 go, in order; the rest are left to the caller.
    let batch: Vec<Wrapped> = (sent..sent + 40).map(wrap).collect();
    assert_eq!(prod.push_with(&batch, |w| &w.desc), 32);
    assert_eq!(prod.push_with(&batch[32..], |w| &w.desc), 0);
    prod.publish();
    assert_eq!(drain_cmd(&mut cons, &mut next), 32);
    assert_eq!(next, sent + 32);
}
