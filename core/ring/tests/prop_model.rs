//! Property tests of both rings against a `VecDeque` model: any interleaving of the operations
//! of both ends of a command ring (host `Producer` -> `DeviceConsumer`) and of an event ring
//! (`DeviceProducer` -> host `Consumer`), started near `u32::MAX` so the free-running indices
//! wrap during a case, with corrupt indices written into the shared header now and then.
//!
//! What must hold: every item comes out exactly once and in order (each consumed slot is read
//! and compared whole), at most `entries` are ever in flight, full and empty are reported
//! exactly when the model says so, the shared indices are what the protocol says, and a
//! corrupt index is reported by the device end as `RingError::Corrupt` (and shown as
//! "nothing"/"no space" by the host end) instead of being followed.
#![cfg(not(loom))]

use std::collections::VecDeque;
use std::mem::offset_of;
use std::sync::atomic::{AtomicU32, Ordering};

use davinci_ring::test_util::AlignedBuf;
use davinci_ring::{
    Consumer, DeviceConsumer, DeviceProducer, Producer, RingError, RingRegion, SubmitError,
};
use davinci_uapi::rings::RING_HEADER_SIZE;
use davinci_uapi::{DevAddr, EventRecord, RingFlags, RingHeader, TaskDesc};
use proptest::prelude::*;
use proptest::test_runner::Config;

const TAIL: usize = offset_of!(RingHeader, tail);
const HEAD: usize = offset_of!(RingHeader, head);
const FLAGS: usize = offset_of!(RingHeader, flags);

/// A descriptor whose every field depends on `i`, so a stale or torn slot is noticed.
fn desc(i: u64) -> TaskDesc {
    TaskDesc::fill(
        i,
        DevAddr(0x1000u64.wrapping_add(i.wrapping_mul(64))),
        i.wrapping_add(1).wrapping_mul(64),
        i as u32 ^ 0xdead_beef,
    )
}

fn rec(i: u64) -> EventRecord {
    EventRecord {
        user_data: i,
        status: -(i as i32),
        opcode: 1,
        result: !i,
        timestamp_ns: i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        ..EventRecord::default()
    }
}

/// A ring's memory and both views of it. The buffer is only reached through the ring ends
/// and through the atomic header accessors below.
struct Mem {
    _buf: AlignedBuf,
    base: *mut u8,
}

impl Mem {
    fn new(entries: u32, slot: usize) -> (Self, RingRegion, RingRegion) {
        let mut buf = AlignedBuf::new(RING_HEADER_SIZE + entries as usize * slot);
        let (base, len) = (buf.as_mut_ptr(), buf.len());
        // SAFETY: `buf` is 64-byte aligned and `len` bytes long; it is moved into the returned
        // `Mem` (its heap memory does not move), which each test keeps alive until after both
        // ends are dropped (declared before them). The memory is reached only through the two
        // ends (one producer, one consumer) and the atomic header accessors of `Mem`.
        let (a, b) = unsafe {
            (
                RingRegion::new(base, len, entries, slot).unwrap(),
                RingRegion::new(base, len, entries, slot).unwrap(),
            )
        };
        (Self { _buf: buf, base }, a, b)
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= RING_HEADER_SIZE);
        // SAFETY: `base` points to a live, 64-byte aligned buffer of at least
        // `RING_HEADER_SIZE` bytes owned by `self`; `off` is a 4-aligned header offset; every
        // access to header words (ring ends and this test) is atomic.
        unsafe { AtomicU32::from_ptr(self.base.add(off).cast::<u32>()) }
    }

    fn get(&self, off: usize) -> u32 {
        self.word(off).load(Ordering::SeqCst)
    }

    /// Writes a header word as the other side (or a hostile peer) would.
    fn set(&self, off: usize, v: u32) {
        self.word(off).store(v, Ordering::SeqCst)
    }
}

#[derive(Debug, Clone)]
enum Op {
    // Command ring, host side.
    Push,
    PushSlice(usize),
    Publish,
    Free,
    FreeNow,
    // Command ring, device side.
    Available,
    Peek(u32),
    /// Read (and check) then advance up to `n`.
    Advance(u32),
    Queued,
    PrepareSleep,
    ClearNeedWakeup,
    /// SUBMIT_TASK's slow path (only when the host has nothing unpublished, as the ABI
    /// requires), then `resync_tail`.
    SubmitOnBehalf,
    /// A tail more than `entries` ahead of the device's head (`ahead`) or behind it.
    CorruptCmdTail {
        ahead: bool,
        by: u32,
    },
    /// A head the host producer must not follow: ahead of its tail or too far behind.
    CorruptCmdHead {
        ahead: bool,
        by: u32,
    },
    // Event ring, device side.
    DevFree,
    DevPush,
    DevPublish,
    /// A head outside `[last accepted head, published tail]`.
    CorruptEvtHead {
        ahead: bool,
        by: u32,
    },
    // Event ring, host side.
    HostAvailable,
    Consume(usize),
    /// A tail more than `entries` ahead of the host's head.
    CorruptEvtTail {
        by: u32,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let by = prop_oneof![0u32..4, 0u32..(1 << 31)];
    prop_oneof![
        6 => Just(Op::Push),
        2 => (0usize..12).prop_map(Op::PushSlice),
        4 => Just(Op::Publish),
        1 => Just(Op::Free),
        1 => Just(Op::FreeNow),
        6 => Just(Op::Available),
        2 => (0u32..20).prop_map(Op::Peek),
        6 => (0u32..20).prop_map(Op::Advance),
        1 => Just(Op::Queued),
        1 => Just(Op::PrepareSleep),
        1 => Just(Op::ClearNeedWakeup),
        1 => Just(Op::SubmitOnBehalf),
        1 => (any::<bool>(), by.clone()).prop_map(|(ahead, by)| Op::CorruptCmdTail { ahead, by }),
        1 => (any::<bool>(), by.clone()).prop_map(|(ahead, by)| Op::CorruptCmdHead { ahead, by }),
        5 => Just(Op::DevFree),
        6 => Just(Op::DevPush),
        3 => Just(Op::DevPublish),
        1 => (any::<bool>(), by.clone()).prop_map(|(ahead, by)| Op::CorruptEvtHead { ahead, by }),
        2 => Just(Op::HostAvailable),
        6 => (0usize..20).prop_map(Op::Consume),
        1 => by.prop_map(|by| Op::CorruptEvtTail { by }),
    ]
}

/// The command ring as the model sees it.
struct CmdModel {
    entries: u32,
    /// Device head, producer's published tail, producer's local tail.
    head: u32,
    published: u32,
    tail: u32,
    /// Items at `head..tail`, oldest first.
    items: VecDeque<u64>,
    /// What the device may peek/advance: its last `available` less what it advanced since.
    dev_avail: u32,
    need_wakeup: bool,
    next: u64,
    /// Every item the device has read and consumed, in order.
    out: Vec<u64>,
}

impl CmdModel {
    fn free(&self) -> u32 {
        self.entries - self.items.len() as u32
    }
    fn unconsumed_published(&self) -> u32 {
        self.published.wrapping_sub(self.head)
    }
}

/// The event ring as the model sees it.
struct EvtModel {
    entries: u32,
    /// Host head; device's local tail, published tail, last head it accepted, known free.
    head: u32,
    tail: u32,
    published: u32,
    head_seen: u32,
    dev_free: u32,
    items: VecDeque<u64>,
    next: u64,
    out: Vec<u64>,
}

/// Reads and checks the first `n` of the device's `dev_avail` entries, then advances by `n`.
fn advance_checked(cons: &mut DeviceConsumer<TaskDesc>, m: &mut CmdModel, n: u32) {
    let k = n.min(m.dev_avail);
    for i in 0..k {
        assert_eq!(cons.peek(i), Some(desc(m.items[i as usize])), "peek({i})");
    }
    cons.advance(n);
    for _ in 0..k {
        m.out.push(m.items.pop_front().unwrap());
    }
    m.head = m.head.wrapping_add(k);
    m.dev_avail -= k;
}

fn consume_checked(host: &mut Consumer<EventRecord>, m: &mut EvtModel, max: usize) {
    let want = (m.published.wrapping_sub(m.head) as usize).min(max);
    let mut got = Vec::new();
    assert_eq!(host.consume(max, |r| got.push(r)), want, "consume({max})");
    for r in got {
        let i = m.items.pop_front().unwrap();
        assert_eq!(r, rec(i), "record out of order or torn");
        m.out.push(i);
    }
    m.head = m.head.wrapping_add(want as u32);
}

#[allow(clippy::too_many_arguments)]
fn check(
    cm: &Mem,
    c: &CmdModel,
    prod: &Producer<TaskDesc>,
    cons: &DeviceConsumer<TaskDesc>,
    em: &Mem,
    e: &EvtModel,
    dp: &DeviceProducer<EventRecord>,
    host: &Consumer<EventRecord>,
) {
    assert!(
        c.items.len() as u32 <= c.entries,
        "more than entries in flight"
    );
    assert!(
        e.items.len() as u32 <= e.entries,
        "more than entries in flight"
    );
    assert_eq!(c.tail.wrapping_sub(c.head), c.items.len() as u32);
    assert_eq!(e.tail.wrapping_sub(e.head), e.items.len() as u32);
    assert_eq!(prod.tail(), c.tail, "producer tail");
    assert_eq!(prod.pending(), c.tail.wrapping_sub(c.published), "pending");
    assert_eq!(cons.head(), c.head, "device head");
    assert_eq!(cm.get(TAIL), c.published, "shared command tail");
    assert_eq!(cm.get(HEAD), c.head, "shared command head");
    assert_eq!(
        cm.get(FLAGS) & RingFlags::NEED_WAKEUP.bits() != 0,
        c.need_wakeup,
        "NEED_WAKEUP"
    );
    assert_eq!(dp.tail(), e.tail, "device producer tail");
    assert_eq!(host.head(), e.head, "host consumer head");
    assert_eq!(em.get(TAIL), e.published, "shared event tail");
    assert_eq!(em.get(HEAD), e.head, "shared event head");
}

fn run(cmd_entries: u32, cmd_start: u32, evt_entries: u32, evt_start: u32, ops: &[Op]) {
    // Command ring: the device initialises the header, then both ends are built.
    let (cm, cdev, chost) = Mem::new(cmd_entries, 64);
    cdev.init_at(cmd_start);
    let mut cons = DeviceConsumer::<TaskDesc>::new(cdev);
    let mut prod = Producer::<TaskDesc>::new(chost);
    // Event ring.
    let (em, edev, ehost) = Mem::new(evt_entries, 32);
    edev.init_at(evt_start);
    let mut dp = DeviceProducer::<EventRecord>::new(edev);
    let mut host = Consumer::<EventRecord>::new(ehost);

    let mut c = CmdModel {
        entries: cmd_entries,
        head: cmd_start,
        published: cmd_start,
        tail: cmd_start,
        items: VecDeque::new(),
        dev_avail: 0,
        need_wakeup: false,
        next: 0,
        out: Vec::new(),
    };
    let mut e = EvtModel {
        entries: evt_entries,
        head: evt_start,
        tail: evt_start,
        published: evt_start,
        head_seen: evt_start,
        dev_free: 0,
        items: VecDeque::new(),
        next: 0,
        out: Vec::new(),
    };
    check(&cm, &c, &prod, &cons, &em, &e, &dp, &host);

    for op in ops {
        match *op {
            Op::Push => {
                let item = desc(c.next);
                let r = prod.push(&item);
                if c.free() == 0 {
                    assert_eq!(r, Err(item), "push on a full ring");
                } else {
                    assert_eq!(r, Ok(()), "push with {} free", c.free());
                    c.items.push_back(c.next);
                    c.tail = c.tail.wrapping_add(1);
                    c.next += 1;
                }
            }
            Op::PushSlice(k) => {
                let items: Vec<TaskDesc> = (0..k as u64).map(|i| desc(c.next + i)).collect();
                let want = k.min(c.free() as usize);
                assert_eq!(prod.push_slice(&items), want, "push_slice({k})");
                for _ in 0..want {
                    c.items.push_back(c.next);
                    c.next += 1;
                }
                c.tail = c.tail.wrapping_add(want as u32);
            }
            Op::Publish => {
                let pending = c.tail != c.published;
                assert_eq!(
                    prod.publish(),
                    pending && c.need_wakeup,
                    "publish's doorbell"
                );
                c.published = c.tail;
            }
            Op::Free => {
                // Answered from the cached head while that shows room: never more than the
                // truth, and 0 exactly when the ring is full.
                let f = prod.free();
                assert!(f <= c.free(), "free {f} > {}", c.free());
                assert_eq!(f == 0, c.free() == 0, "free() == 0 iff full");
            }
            Op::FreeNow => assert_eq!(prod.free_now(), c.free(), "free_now"),
            Op::Available => {
                let n = c.unconsumed_published();
                assert_eq!(cons.available(), Ok(n), "available");
                c.dev_avail = n;
            }
            Op::Peek(i) => {
                let want = (i < c.dev_avail).then(|| desc(c.items[i as usize]));
                assert_eq!(cons.peek(i), want, "peek({i}) of {}", c.dev_avail);
            }
            Op::Advance(n) => advance_checked(&mut cons, &mut c, n),
            Op::Queued => assert_eq!(cons.queued(), c.unconsumed_published(), "queued"),
            Op::PrepareSleep => {
                let idle = c.published == c.head;
                assert_eq!(cons.prepare_sleep(), idle, "prepare_sleep");
                c.need_wakeup = idle;
            }
            Op::ClearNeedWakeup => {
                cons.clear_need_wakeup();
                c.need_wakeup = false;
            }
            Op::SubmitOnBehalf => {
                if prod.pending() != 0 {
                    continue;
                }
                let item = desc(c.next);
                let r = cons.submit_on_behalf(&item);
                if c.free() == 0 {
                    assert_eq!(r, Err(SubmitError::Full));
                } else {
                    assert_eq!(r, Ok(c.published), "SUBMIT_TASK's index");
                    c.items.push_back(c.next);
                    c.next += 1;
                    c.published = c.published.wrapping_add(1);
                    c.tail = c.published;
                }
                prod.resync_tail();
            }
            Op::CorruptCmdTail { ahead, by } => {
                let bad = if ahead {
                    c.head.wrapping_add(c.entries + 1 + by)
                } else {
                    c.head.wrapping_sub(1 + by)
                };
                cm.set(TAIL, bad);
                assert_eq!(
                    cons.available(),
                    Err(RingError::Corrupt {
                        head: c.head,
                        tail: bad
                    }),
                    "a corrupt tail is reported"
                );
                c.dev_avail = 0;
                assert_eq!(cons.peek(0), None, "nothing to peek after a corrupt tail");
                cons.advance(1);
                assert_eq!(cons.head(), c.head, "advance follows no corrupt tail");
                assert_eq!(cons.queued(), c.entries, "a corrupt tail reads as full");
                assert!(!cons.prepare_sleep(), "the tail moved: no sleep");
                c.need_wakeup = false;
                assert_eq!(
                    cons.submit_on_behalf(&desc(u64::MAX)),
                    Err(SubmitError::Corrupt)
                );
                assert_eq!(cm.get(TAIL), bad, "SUBMIT_TASK wrote nothing");
                // The host's own (correct) tail again.
                cm.set(TAIL, c.published);
            }
            Op::CorruptCmdHead { ahead, by } => {
                let bad = if ahead {
                    c.tail.wrapping_add(1 + by)
                } else {
                    c.tail.wrapping_sub(c.entries + 1 + by)
                };
                cm.set(HEAD, bad);
                assert_eq!(prod.free_now(), 0, "an impossible head shows no space");
                assert_eq!(prod.push(&desc(u64::MAX)), Err(desc(u64::MAX)));
                assert_eq!(prod.push_slice(&[desc(u64::MAX)]), 0);
                // The device's own (correct) head again: the producer re-reads it.
                cm.set(HEAD, c.head);
                assert_eq!(prod.free_now(), c.free(), "free after the head is restored");
            }
            Op::DevFree => {
                let f = e.entries - e.tail.wrapping_sub(e.head);
                assert_eq!(dp.free(), Ok(f), "device producer free");
                e.head_seen = e.head;
                e.dev_free = f;
            }
            Op::DevPush => {
                let item = rec(e.next);
                let r = dp.push(&item);
                if e.dev_free == 0 {
                    assert_eq!(r, Err(item), "push without a known free slot");
                } else {
                    assert_eq!(r, Ok(()));
                    e.dev_free -= 1;
                    e.items.push_back(e.next);
                    e.tail = e.tail.wrapping_add(1);
                    e.next += 1;
                }
            }
            Op::DevPublish => {
                dp.publish();
                e.published = e.tail;
            }
            Op::CorruptEvtHead { ahead, by } => {
                let bad = if ahead {
                    e.published.wrapping_add(1 + by)
                } else {
                    e.head_seen.wrapping_sub(1 + by)
                };
                em.set(HEAD, bad);
                assert_eq!(
                    dp.free(),
                    Err(RingError::Corrupt {
                        head: bad,
                        tail: e.published
                    }),
                    "a corrupt head is reported"
                );
                e.dev_free = 0;
                assert_eq!(dp.push(&rec(u64::MAX)), Err(rec(u64::MAX)), "no space");
                // The host's own (correct) head again.
                em.set(HEAD, e.head);
            }
            Op::HostAvailable => {
                assert_eq!(
                    host.available(),
                    e.published.wrapping_sub(e.head),
                    "available"
                )
            }
            Op::Consume(max) => consume_checked(&mut host, &mut e, max),
            Op::CorruptEvtTail { by } => {
                let bad = e.head.wrapping_add(e.entries + 1 + by);
                em.set(TAIL, bad);
                assert_eq!(host.available(), 0, "an impossible tail shows nothing");
                assert_eq!(host.consume(usize::MAX, |_| panic!("followed")), 0);
                em.set(TAIL, e.published);
            }
        }
        check(&cm, &c, &prod, &cons, &em, &e, &dp, &host);
    }

    // Everything pushed comes out, once, in order.
    prod.publish();
    c.published = c.tail;
    let n = c.unconsumed_published();
    assert_eq!(cons.available(), Ok(n));
    c.dev_avail = n;
    advance_checked(&mut cons, &mut c, n);
    assert_eq!(cons.available(), Ok(0), "drained");
    assert_eq!(prod.free_now(), c.entries, "all slots free again");
    assert_eq!(c.out, (0..c.next).collect::<Vec<_>>(), "command items");

    dp.publish();
    e.published = e.tail;
    consume_checked(&mut host, &mut e, usize::MAX);
    assert_eq!(host.available(), 0, "drained");
    assert_eq!(dp.free(), Ok(e.entries), "all slots free again");
    assert_eq!(e.out, (0..e.next).collect::<Vec<_>>(), "event items");
    check(&cm, &c, &prod, &cons, &em, &e, &dp, &host);
}

/// Depths 2..=16; starts within a few ring lengths of `u32::MAX` (so the indices wrap within
/// a case), and sometimes anywhere.
fn ring_strategy() -> impl Strategy<Value = (u32, u32)> {
    (
        (1u32..=4).prop_map(|k| 1 << k),
        prop_oneof![
            4 => (0u32..16).prop_map(|d| u32::MAX - d),
            1 => any::<u32>(),
        ],
    )
}

proptest! {
    #![proptest_config(Config {
        cases: 512,
        // Nothing written to disk: a failure prints its minimal input.
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn rings_match_the_model(
        (cmd_entries, cmd_start) in ring_strategy(),
        (evt_entries, evt_start) in ring_strategy(),
        ops in proptest::collection::vec(op_strategy(), 20..250),
    ) {
        run(cmd_entries, cmd_start, evt_entries, evt_start, &ops);
    }
}

/// The wrap itself, deterministically: 3 * 16 items through each 4-slot ring from
/// `u32::MAX - 5`, the indices crossing 0 in the middle.
#[test]
fn wraps_once_through_u32_max() {
    let mut ops = Vec::new();
    for _ in 0..16 {
        ops.extend([Op::PushSlice(3), Op::Publish, Op::Available, Op::Advance(3)]);
        ops.extend([Op::DevFree, Op::DevPush, Op::DevPush, Op::DevPush]);
        ops.extend([Op::DevPublish, Op::Consume(3)]);
    }
    run(4, u32::MAX - 5, 4, u32::MAX - 5, &ops);
}
