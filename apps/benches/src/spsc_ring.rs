//! The two-ring baseline's own ring (`spsc.rs` runs the pipeline on it): free-running `u32`
//! indices on their own cache lines, cached remote indices, one index store per batch, slots
//! in 64-byte-aligned lines written with wide stores (`wide.rs`), a prefetch ahead on the
//! consumer's side.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::wide::{self, Line, LINE_WORDS};

/// Words of a descriptor (64 bytes).
pub const DESC_WORDS: usize = 8;
/// Words of a completion (16 bytes).
pub const COMPLETION_WORDS: usize = 2;

/// Most descriptors the device thread takes per pass (and per index store on each ring).
pub const DEVICE_BUDGET: usize = 64;

/// The smallest batch of descriptors the own ring writes with non-temporal stores.
pub const NT_BATCH: usize = 16;

/// How many descriptors ahead the own ring's consumer prefetches (+10 % at batch 64 here).
pub const PREFETCH_AHEAD: u32 = 8;

/// A descriptor: a NOP with `user_data` in word 1 (the davinci layout: opcode in byte 0,
/// `user_data` at offset 8). One cache line, aligned to one in every ring that stores it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Desc(pub [u64; DESC_WORDS]);

/// A completion: `user_data` and the status (0) with the opcode echoed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct Cpl(pub [u64; COMPLETION_WORDS]);

impl Desc {
    /// The NOP numbered `user_data`.
    pub fn nop(user_data: u64) -> Desc {
        let mut d = [0u64; DESC_WORDS];
        d[1] = user_data;
        Desc(d)
    }
}

/// The producing end of one of the pipeline's rings.
pub trait Tx<T: Copy> {
    /// Free slots: at least `want` if there are (the consumer's index is read only when the
    /// cached copy shows fewer).
    fn free(&mut self, want: usize) -> usize;
    /// Writes `n` items, `item(i)` for each `i < n`, and publishes them all at once. The
    /// caller saw `free(n) >= n`.
    fn send(&mut self, n: usize, item: impl FnMut(usize) -> T);
}

/// The consuming end of one of the pipeline's rings.
pub trait Rx<T: Copy> {
    /// Items ready (the producer's index is read only when the cached copy shows none).
    fn available(&mut self) -> usize;
    /// The next `n` items (the caller saw `available() >= n`), in order; their slots are
    /// released at once when the iterator is dropped (those it gave out).
    fn take(&mut self, n: usize) -> impl Iterator<Item = T> + '_;
    /// Gives up to `max` available items to `f` and releases them; returns how many.
    fn recv(&mut self, max: usize, mut f: impl FnMut(T)) -> usize {
        let n = self.available().min(max);
        if n > 0 {
            self.take(n).for_each(&mut f);
        }
        n
    }
}

/// One ring of `entries` slots of `W` 64-bit words (`W` divides 8: a slot never straddles
/// two cache lines).
#[derive(Debug)]
pub struct Ring<const W: usize> {
    tail: CachePadded<AtomicU32>,
    head: CachePadded<AtomicU32>,
    mask: u32,
    lines: Box<[Line]>,
}

impl<const W: usize> Ring<W> {
    const FITS_A_LINE: () = assert!(W > 0 && LINE_WORDS.is_multiple_of(W));

    /// A ring of `entries` slots (rounded up to a power of two, at least 2 and a line).
    pub fn new(entries: u32) -> Arc<Self> {
        let () = Self::FITS_A_LINE;
        let per_line = (LINE_WORDS / W) as u32;
        let entries = entries.max(2).max(per_line).next_power_of_two();
        Arc::new(Ring {
            tail: CachePadded::new(AtomicU32::new(0)),
            head: CachePadded::new(AtomicU32::new(0)),
            mask: entries - 1,
            lines: (0..entries / per_line).map(|_| Line::default()).collect(),
        })
    }

    fn entries(&self) -> u32 {
        self.mask + 1
    }

    /// The slots, as values a loop keeps in registers (the ring's own fields sit beside
    /// atomics, so the compiler reloads them after every atomic access).
    fn slots(&self) -> Slots<'_, W> {
        Slots {
            lines: &self.lines,
            mask: self.mask,
        }
    }

    pub(crate) fn slot(&self, index: u32) -> &[AtomicU64] {
        self.slots().slot(index)
    }
}

/// A ring's slot lines and index mask.
#[derive(Clone, Copy)]
struct Slots<'a, const W: usize> {
    lines: &'a [Line],
    mask: u32,
}

impl<'a, const W: usize> Slots<'a, W> {
    fn slot(self, index: u32) -> &'a [AtomicU64] {
        let word = (index & self.mask) as usize * W;
        let at = word % LINE_WORDS;
        &self.lines[word / LINE_WORDS].0[at..at + W]
    }

    /// The whole line of slot `index` (one slot when `W` is a line).
    fn line(self, index: u32) -> &'a Line {
        &self.lines[(index & self.mask) as usize * W / LINE_WORDS]
    }
}

/// The producing end of a [`Ring`] (one thread).
#[derive(Debug)]
pub struct Producer<const W: usize> {
    ring: Arc<Ring<W>>,
    tail: u32,
    cached_head: u32,
    /// How slots are written.
    stores: Stores,
}

/// How a [`Producer`] writes slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stores {
    /// Relaxed atomic stores of each word.
    Words,
    /// A line-sized slot in four 16-byte stores, a two-word slot in one (`wide.rs`).
    Wide,
    /// As `Wide`, and a batch of [`NT_BATCH`] or more line-sized slots with non-temporal
    /// stores.
    WideNt,
}

/// The consuming end of a [`Ring`] (one thread).
#[derive(Debug)]
pub struct Consumer<const W: usize> {
    ring: Arc<Ring<W>>,
    head: u32,
    cached_tail: u32,
}

/// Both ends of a new ring of `entries` slots.
pub fn ring<const W: usize>(entries: u32) -> (Producer<W>, Consumer<W>) {
    let r = Ring::<W>::new(entries);
    (
        Producer {
            ring: r.clone(),
            tail: 0,
            cached_head: 0,
            stores: Stores::Wide,
        },
        Consumer {
            ring: r,
            head: 0,
            cached_tail: 0,
        },
    )
}

impl<const W: usize> Producer<W> {
    /// Writes slots this way (wide stores by default).
    pub fn with_stores(mut self, stores: Stores) -> Self {
        self.stores = stores;
        self
    }

    /// Free slots (re-reading the consumer's head only when the cached one says fewer than
    /// `want` are free).
    pub fn free(&mut self, want: u32) -> u32 {
        let entries = self.ring.entries();
        let mut free = entries - self.tail.wrapping_sub(self.cached_head);
        if free < want {
            self.cached_head = self.ring.head.load(Ordering::Acquire);
            free = entries - self.tail.wrapping_sub(self.cached_head);
        }
        free
    }

    /// Writes `item` into the next slot without publishing it; `false` if the ring is full.
    pub fn push(&mut self, item: &[u64; W]) -> bool {
        if self.free(1) == 0 {
            return false;
        }
        self.write(item);
        true
    }

    /// Writes the next slot (the caller saw room).
    fn write(&mut self, item: &[u64; W]) {
        for (w, v) in self.ring.slot(self.tail).iter().zip(item) {
            w.store(*v, Ordering::Relaxed);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes every pushed slot (one Release store).
    pub fn publish(&self) {
        self.ring.tail.store(self.tail, Ordering::Release);
    }
}

impl<const W: usize> Consumer<W> {
    /// Slots ready to be consumed (re-reading the producer's tail only when the cached one
    /// shows none).
    pub fn available(&mut self) -> u32 {
        if self.cached_tail == self.head {
            self.cached_tail = self.ring.tail.load(Ordering::Acquire);
        }
        self.cached_tail.wrapping_sub(self.head)
    }

    /// Copies out the next slot (not yet released to the producer).
    pub fn pop(&mut self) -> Option<[u64; W]> {
        if self.available() == 0 {
            return None;
        }
        Some(self.read())
    }

    /// Reads the next slot as a `T` (the caller saw one available).
    fn read<T: Words<W>>(&mut self) -> T {
        let v = T::load(self.ring.slot(self.head));
        self.head = self.head.wrapping_add(1);
        v
    }

    /// Releases every popped slot to the producer (one Release store).
    pub fn release(&self) {
        self.ring.head.store(self.head, Ordering::Release);
    }
}

/// An item the own ring stores as `W` words.
pub trait Words<const W: usize>: Copy + 'static {
    /// The words.
    fn to_words(self) -> [u64; W];
    /// From its words.
    fn from_words(w: [u64; W]) -> Self;
    /// Reads it from a slot (every word, unless it needs fewer).
    fn load(slot: &[AtomicU64]) -> Self {
        let mut w = [0u64; W];
        for (o, a) in w.iter_mut().zip(slot) {
            *o = a.load(Ordering::Relaxed);
        }
        Self::from_words(w)
    }
}

impl<const W: usize> Words<W> for [u64; W] {
    fn to_words(self) -> [u64; W] {
        self
    }
    fn from_words(w: [u64; W]) -> Self {
        w
    }
}

/// What the device needs of a descriptor to complete a NOP, and all it reads: word 0 (the
/// opcode in byte 0) and `user_data`. (Loading the other six words of the line too cost a
/// quarter of the throughput here.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DescHead {
    /// Word 0: the opcode in its low byte.
    pub word0: u64,
    /// The descriptor's `user_data`.
    pub user_data: u64,
}

impl From<Desc> for DescHead {
    fn from(d: Desc) -> Self {
        DescHead {
            word0: d.0[0],
            user_data: d.0[1],
        }
    }
}

impl Words<DESC_WORDS> for DescHead {
    fn to_words(self) -> [u64; DESC_WORDS] {
        Desc([self.word0, self.user_data, 0, 0, 0, 0, 0, 0]).0
    }
    fn from_words(w: [u64; DESC_WORDS]) -> Self {
        Desc(w).into()
    }
    fn load(slot: &[AtomicU64]) -> Self {
        DescHead {
            word0: slot[0].load(Ordering::Relaxed),
            user_data: slot[1].load(Ordering::Relaxed),
        }
    }
}

impl Words<DESC_WORDS> for Desc {
    fn to_words(self) -> [u64; DESC_WORDS] {
        self.0
    }
    fn from_words(w: [u64; DESC_WORDS]) -> Self {
        Desc(w)
    }
}

impl Words<COMPLETION_WORDS> for Cpl {
    fn to_words(self) -> [u64; COMPLETION_WORDS] {
        self.0
    }
    fn from_words(w: [u64; COMPLETION_WORDS]) -> Self {
        Cpl(w)
    }
}

impl<const W: usize, T: Words<W>> Tx<T> for Producer<W> {
    fn free(&mut self, want: usize) -> usize {
        Producer::free(self, u32::try_from(want).unwrap_or(u32::MAX)) as usize
    }

    fn send(&mut self, n: usize, mut item: impl FnMut(usize) -> T) {
        // Indices and slots in locals: one store of each per batch, not per item.
        let slots = self.ring.slots();
        let mut tail = self.tail;
        if self.stores == Stores::Words {
            for i in 0..n {
                for (w, v) in slots.slot(tail).iter().zip(&item(i).to_words()) {
                    w.store(*v, Ordering::Relaxed);
                }
                tail = tail.wrapping_add(1);
            }
        } else if W == LINE_WORDS {
            // A descriptor: a whole line in four 16-byte stores, non-temporal for a batch.
            let nt = self.stores == Stores::WideNt && n >= NT_BATCH;
            for i in 0..n {
                let words = item(i).to_words();
                if let Ok(line) = <&[u64; LINE_WORDS]>::try_from(&words[..]) {
                    wide::store_line(slots.line(tail), line, nt);
                }
                tail = tail.wrapping_add(1);
            }
            if nt {
                wide::fence();
            }
        } else {
            for i in 0..n {
                let words = item(i).to_words();
                let slot = slots.slot(tail);
                // A two-word slot (a completion) in one 16-byte store.
                match (
                    <&[AtomicU64; 2]>::try_from(slot),
                    <[u64; 2]>::try_from(&words[..]),
                ) {
                    (Ok(pair), Ok(two)) => wide::store_pair(pair, two),
                    _ => {
                        for (w, v) in slot.iter().zip(&words) {
                            w.store(*v, Ordering::Relaxed);
                        }
                    }
                }
                tail = tail.wrapping_add(1);
            }
        }
        self.tail = tail;
        self.publish();
    }
}

impl<const W: usize, T: Words<W>> Rx<T> for Consumer<W> {
    fn available(&mut self) -> usize {
        Consumer::available(self) as usize
    }

    fn take(&mut self, n: usize) -> impl Iterator<Item = T> + '_ {
        let Consumer {
            ring,
            head,
            cached_tail,
        } = self;
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        Taken {
            ring,
            slots: ring.slots(),
            start: *head,
            at: *head,
            end: head.wrapping_add(n),
            published: *cached_tail,
            head,
            item: std::marker::PhantomData,
        }
    }
}

/// Items read off a [`Consumer`] (indices in locals), released (one index store) when
/// dropped. With line-sized slots, each read prefetches the slot [`PREFETCH_AHEAD`] further
/// if it is published already.
struct Taken<'a, const W: usize, T> {
    ring: &'a Ring<W>,
    slots: Slots<'a, W>,
    start: u32,
    at: u32,
    end: u32,
    /// The producer's tail as last read.
    published: u32,
    /// The consumer's head, set on drop.
    head: &'a mut u32,
    item: std::marker::PhantomData<T>,
}

impl<const W: usize, T: Words<W>> Iterator for Taken<'_, W, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.at == self.end {
            return None;
        }
        if W == LINE_WORDS && PREFETCH_AHEAD < self.published.wrapping_sub(self.at) {
            wide::prefetch(self.slots.line(self.at.wrapping_add(PREFETCH_AHEAD)));
        }
        let v = T::load(self.slots.slot(self.at));
        self.at = self.at.wrapping_add(1);
        Some(v)
    }
}

impl<const W: usize, T> Drop for Taken<'_, W, T> {
    fn drop(&mut self) {
        if self.at != self.start {
            *self.head = self.at;
            self.ring.head.store(self.at, Ordering::Release);
        }
    }
}
