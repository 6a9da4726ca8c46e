//! The host's ends: [`Producer`] of the command ring, [`Consumer`] of the event ring.
//!
//! The host trusts the device, but still never follows an index that no correct device
//! writes: such a ring simply shows no space / no entries (the device reports its own error).
#![forbid(unsafe_code)]

use davinci_uapi::RingFlags;

use crate::region::Field;
use crate::slot::{Slot, Typed};
use crate::sync::{fence_at, ord, Ordering, Site};
use crate::{RingError, RingRegion};

/// [`Producer::push_slice`] of at least this many items writes them with non-temporal stores
/// (where the CPU has them and a slot is one cache line): measured on the two-ring baseline,
/// they pay for batches and cost a lone descriptor (read by the device at once, from cache).
pub const STREAM_MIN: usize = 16;

/// Host side of the command ring (and generally: the trusted producer end).
///
/// Keeps its own tail and a cached head; slots are written by [`push`](Self::push) and made
/// visible to the device in batches by [`publish`](Self::publish).
///
/// The host's producer and the device's consumer of one command ring, here over heap memory
/// (`test_util::AlignedBuf`, feature `test-util`) standing in for a shared mapping:
///
/// ```
/// use davinci_ring::test_util::AlignedBuf;
/// use davinci_ring::{DeviceConsumer, Producer, RingRegion};
/// use davinci_uapi::rings::RING_HEADER_SIZE;
/// use davinci_uapi::TaskDesc;
///
/// let mut mem = AlignedBuf::new(RING_HEADER_SIZE + 8 * 64);
/// let (p, len) = (mem.as_mut_ptr(), mem.len());
/// // SAFETY: `mem` is 64-byte aligned, `len` bytes long, outlives both ends (dropped at the
/// // end of this example, after them) and is reached only through them.
/// let (dev, host) = unsafe { (RingRegion::new(p, len, 8, 64), RingRegion::new(p, len, 8, 64)) };
/// let dev = dev.unwrap();
/// dev.init(); // the device writes the header before handing the ring out
/// let mut device = DeviceConsumer::<TaskDesc>::new(dev);
/// let mut producer = Producer::<TaskDesc>::new(host.unwrap());
///
/// assert_eq!(producer.push_slice(&[TaskDesc::nop(1), TaskDesc::nop(2)]), 2);
/// let need_doorbell = producer.publish(); // one Release store for the batch
/// assert!(!need_doorbell, "the device has not asked for a wake-up");
/// assert_eq!(device.available(), Ok(2));
/// assert_eq!(device.peek(0).map(|d| d.user_data), Some(1));
/// assert_eq!(device.peek(1).map(|d| d.user_data), Some(2));
/// device.advance(2);
/// // The producer re-reads the device's head only when its cached view says full.
/// assert_eq!(producer.free(), 6);
/// assert_eq!(producer.push_slice(&[TaskDesc::nop(3); 8]), 8);
/// assert_eq!(producer.free(), 0);
/// ```
pub struct Producer<T: Slot> {
    ring: Typed<T>,
    /// Next index to write (includes pushed but unpublished entries).
    tail: u32,
    /// Last tail stored to shared memory.
    published: u32,
    /// Last head read from shared memory (or `tail - entries`, "full", when unknown).
    cached_head: u32,
    /// Slots were written with non-temporal stores since the last publish: a store fence is
    /// due before the tail store.
    fence_due: bool,
}

impl<T: Slot> Producer<T> {
    /// The producer end of `region`, starting from the tail currently in the header.
    ///
    /// # Panics
    /// If `size_of::<T>()` differs from the region's slot size (a programming error: slot
    /// sizes are ABI constants). [`try_new`](Self::try_new) reports it instead.
    pub fn new(region: RingRegion) -> Self {
        match Self::try_new(region) {
            Ok(p) => p,
            Err(e) => panic!("Producer::new: {e}"),
        }
    }

    /// Like [`new`](Self::new), but `Err(BadLength)` / `Err(Misaligned)` if `T` does not fit
    /// the region's slots.
    pub fn try_new(region: RingRegion) -> Result<Self, RingError> {
        let ring = Typed::new(region)?;
        // Relaxed: the tail is this side's own index. Whoever stored it before (the driver's
        // init, a previous producer, SUBMIT_TASK) is ordered before us by whatever handed us
        // the mapping (mmap, the ioctl's return), not by this load.
        let tail = ring.region().field(Field::Tail).load(Ordering::Relaxed);
        let entries = ring.region().entries();
        Ok(Self {
            ring,
            tail,
            published: tail,
            cached_head: tail.wrapping_sub(entries),
            fence_due: false,
        })
    }

    /// Number of slots.
    pub fn capacity(&self) -> u32 {
        self.ring.region().entries()
    }

    fn cached_free(&self) -> u32 {
        let used = self.tail.wrapping_sub(self.cached_head);
        self.capacity().saturating_sub(used)
    }

    fn refresh_free(&mut self) -> u32 {
        // Acquire: pairs with the device's Release store of head after it copied the slots
        // out, so the slot writes that follow cannot overwrite a descriptor being read.
        self.cached_head = self
            .ring
            .region()
            .field(Field::Head)
            .load(ord(Site::ProducerHeadAcquire, Ordering::Acquire));
        // A head ahead of our tail or more than `entries` behind it is not something a correct
        // device writes: `saturating_sub` shows it as "no space" (and the next call re-reads).
        self.cached_free()
    }

    /// Free slots. Reads the shared head (Acquire) only when the cached head says full.
    pub fn free(&mut self) -> u32 {
        match self.cached_free() {
            0 => self.refresh_free(),
            n => n,
        }
    }

    /// Free slots as the device left them: always re-reads the shared head (Acquire), where
    /// [`free`](Self::free) answers from the cached head until that says full. For callers
    /// that wait for room for a whole batch (a cached answer below the batch would never
    /// grow on its own).
    pub fn free_now(&mut self) -> u32 {
        self.refresh_free()
    }

    /// Copies `item` into the next slot and bumps the local tail. Not visible to the device
    /// until [`publish`](Self::publish). `Err(*item)` when the ring is full.
    pub fn push(&mut self, item: &T) -> Result<(), T> {
        if self.free() == 0 {
            return Err(*item);
        }
        self.ring.write(self.tail, item);
        self.tail = self.tail.wrapping_add(1);
        Ok(())
    }

    /// Pushes as many of `items` as fit (re-reading the head if the cached space is too small),
    /// in order; returns how many. Not published.
    pub fn push_slice(&mut self, items: &[T]) -> usize {
        self.push_with(items, |t| t)
    }

    /// [`push_slice`](Self::push_slice) of the `T` that `slot` finds in each of `items` (a
    /// descriptor inside a larger value): copied from there into its slot, with no copy in
    /// between.
    #[inline]
    pub fn push_with<S>(&mut self, items: &[S], slot: impl Fn(&S) -> &T) -> usize {
        let mut free = self.cached_free();
        if (free as usize) < items.len() {
            free = self.refresh_free();
        }
        let items = &items[..items.len().min(free as usize)];
        let mut tail = self.tail;
        if items.len() >= STREAM_MIN {
            // A batch: whole-line non-temporal stores where the CPU has them (the device reads
            // these lines later, from memory, instead of each store first taking its line back
            // from the device's cache); fenced in `publish`.
            self.fence_due |= self.ring.write_run_streaming(tail, items, slot);
            tail = tail.wrapping_add(items.len() as u32);
        } else {
            for item in items {
                self.ring.write(tail, slot(item));
                tail = tail.wrapping_add(1);
            }
        }
        self.tail = tail;
        items.len()
    }

    /// Entries pushed but not yet published.
    pub fn pending(&self) -> u32 {
        self.tail.wrapping_sub(self.published)
    }

    /// Publishes every pushed entry with one Release store of the tail, then `fence(SeqCst)`
    /// and a Relaxed load of the flags. Returns `true` iff NEED_WAKEUP is set: the caller must
    /// then ring the doorbell (with [`tail`](Self::tail)). `false` if nothing was pending.
    ///
    /// The fence is the host half of the Dekker pair with `DeviceConsumer::prepare_sleep`:
    /// either this load sees NEED_WAKEUP, or the device's re-load of the tail sees this store.
    pub fn publish(&mut self) -> bool {
        if self.pending() == 0 {
            return false;
        }
        let region = self.ring.region();
        if self.fence_due {
            // Non-temporal slot stores are not ordered by the Release store below: `sfence`.
            region.store_fence();
            self.fence_due = false;
        }
        // Release: pairs with the device's Acquire load of the tail; orders the slot writes.
        region
            .field(Field::Tail)
            .store(self.tail, ord(Site::ProducerTailRelease, Ordering::Release));
        self.published = self.tail;
        // SeqCst fence: store(tail) -> load(flags) must not be reordered (store-load).
        fence_at(Site::ProducerDekkerFence, Ordering::SeqCst);
        // Relaxed: the fence above orders it; no data is read on the strength of this flag.
        let flags = region.field(Field::Flags).load(Ordering::Relaxed);
        flags & RingFlags::NEED_WAKEUP.bits() != 0
    }

    /// The host half of the Dekker pair after **reaping** the stream's event ring (the
    /// consumer's Release store of its head came just before, on this thread): `fence(SeqCst)`,
    /// then a Relaxed load of this command ring's flags. Returns `true` iff NEED_WAKEUP is set:
    /// a device stalled on the full event ring may be asleep, so ring the doorbell. Pairs with
    /// `DeviceConsumer::prepare_stall_sleep`.
    pub fn wake_needed_after_reap(&self) -> bool {
        fence_at(Site::HostReapDekkerFence, Ordering::SeqCst);
        // Relaxed: the fence orders it after the head store; no data is read on its strength.
        let flags = self
            .ring
            .region()
            .field(Field::Flags)
            .load(Ordering::Relaxed);
        flags & RingFlags::NEED_WAKEUP.bits() != 0
    }

    /// The local tail: every pushed entry, published or not. After `publish`, the value to
    /// write to a hardware doorbell.
    pub fn tail(&self) -> u32 {
        self.tail
    }

    /// Re-reads the shared tail, after a `SUBMIT_TASK` ioctl placed a descriptor on the
    /// client's behalf. Unpublished entries are discarded (publish first). The cached head is
    /// forgotten, so the next `free` re-reads it.
    pub fn resync_tail(&mut self) {
        // Relaxed: our own index; the ioctl's return orders the driver's store before us, and
        // we read no slot on the strength of it.
        self.tail = self
            .ring
            .region()
            .field(Field::Tail)
            .load(Ordering::Relaxed);
        self.published = self.tail;
        self.cached_head = self.tail.wrapping_sub(self.capacity());
    }

    /// The region.
    pub fn region(&self) -> &RingRegion {
        self.ring.region()
    }
}

/// Host side of the event ring (the consumer end on the trusted side).
///
/// The device's producer and the host's consumer of one event ring, over heap memory:
///
/// ```
/// use davinci_ring::test_util::AlignedBuf;
/// use davinci_ring::{Consumer, DeviceProducer, RingRegion};
/// use davinci_uapi::rings::RING_HEADER_SIZE;
/// use davinci_uapi::EventRecord;
///
/// let mut mem = AlignedBuf::new(RING_HEADER_SIZE + 4 * 32);
/// let (p, len) = (mem.as_mut_ptr(), mem.len());
/// // SAFETY: as for `Producer`: aligned, long enough, outlives both ends, reached only
/// // through them.
/// let (dev, host) = unsafe { (RingRegion::new(p, len, 4, 32), RingRegion::new(p, len, 4, 32)) };
/// let dev = dev.unwrap();
/// dev.init();
/// let mut device = DeviceProducer::<EventRecord>::new(dev);
/// let mut host = Consumer::<EventRecord>::new(host.unwrap());
///
/// let done = EventRecord { user_data: 7, ..EventRecord::default() };
/// assert_eq!(device.free(), Ok(4)); // reads (and checks) the host's head
/// device.push(&done).unwrap();
/// device.publish();
/// let mut seen = Vec::new();
/// assert_eq!(host.consume(usize::MAX, |r| seen.push(r.user_data)), 1);
/// assert_eq!(seen, [7]);
/// ```
pub struct Consumer<T: Slot> {
    ring: Typed<T>,
    head: u32,
}

impl<T: Slot> Consumer<T> {
    /// The consumer end of `region`, starting from the head currently in the header.
    ///
    /// # Panics
    /// If `size_of::<T>()` differs from the region's slot size; see [`try_new`](Self::try_new).
    pub fn new(region: RingRegion) -> Self {
        match Self::try_new(region) {
            Ok(c) => c,
            Err(e) => panic!("Consumer::new: {e}"),
        }
    }

    /// Like [`new`](Self::new), but reports a slot type that does not fit the region.
    pub fn try_new(region: RingRegion) -> Result<Self, RingError> {
        let ring = Typed::new(region)?;
        // Relaxed: our own index (see `Producer::try_new`).
        let head = ring.region().field(Field::Head).load(Ordering::Relaxed);
        Ok(Self { ring, head })
    }

    fn filled(&self, tail: u32) -> u32 {
        let n = tail.wrapping_sub(self.head);
        // More than `entries` ahead (or behind the head): no correct device writes that; show
        // nothing rather than follow it.
        if n > self.ring.region().entries() {
            0
        } else {
            n
        }
    }

    /// Entries the device has published and this side has not consumed (Acquire load of the
    /// tail). Acquire because a completion count is itself information: once it shows a
    /// completion, the device's writes before that completion (results in device memory) are
    /// visible, even if the record is never consumed.
    pub fn available(&mut self) -> u32 {
        let tail = self
            .ring
            .region()
            .field(Field::Tail)
            .load(ord(Site::ConsumerAvailableAcquire, Ordering::Acquire));
        self.filled(tail)
    }

    /// Copies out up to `max` entries, each read once and passed to `f` in order; then one
    /// Release store of the head. One Acquire load of the tail. Returns the number consumed.
    pub fn consume(&mut self, max: usize, mut f: impl FnMut(T)) -> usize {
        let region = self.ring.region();
        // Acquire: pairs with the device's Release store of the tail; orders the slot reads.
        let tail = region
            .field(Field::Tail)
            .load(ord(Site::ConsumerTailAcquire, Ordering::Acquire));
        let n = (self.filled(tail) as usize).min(max);
        for i in 0..n {
            f(self.ring.read(self.head.wrapping_add(i as u32)));
        }
        if n > 0 {
            self.head = self.head.wrapping_add(n as u32);
            // Release: pairs with the device's Acquire load of head; the slot reads above are
            // done before the device may overwrite those slots.
            region
                .field(Field::Head)
                .store(self.head, ord(Site::ConsumerHeadRelease, Ordering::Release));
        }
        n
    }

    /// The local head (every consumed entry).
    pub fn head(&self) -> u32 {
        self.head
    }

    /// The region.
    pub fn region(&self) -> &RingRegion {
        self.ring.region()
    }
}
