//! The device's ends: [`DeviceConsumer`] of the command ring, [`DeviceProducer`] of the event
//! ring. Neither trusts anything the host can write: indices are read once, checked against
//! the device's own bookkeeping, and reported as [`RingError::Corrupt`] instead of followed.
#![forbid(unsafe_code)]

use davinci_uapi::RingFlags;

use crate::region::Field;
use crate::slot::{Slot, Typed};
use crate::sync::{fence_at, ord, Ordering, Site};
use crate::{RingError, RingRegion};

/// Why [`DeviceConsumer::submit_on_behalf`] placed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    /// The command ring is full (`EAGAIN`: reap completions and retry).
    Full,
    /// The shared tail is more than `entries` ahead of the device's head (or behind it): the
    /// ring is corrupt (`EPROTO`), nothing was written.
    Corrupt,
}

impl SubmitError {
    /// The errno that reports this error.
    pub const fn errno(self) -> davinci_uapi::Errno {
        match self {
            SubmitError::Full => davinci_uapi::Errno::EAGAIN,
            SubmitError::Corrupt => davinci_uapi::Errno::EPROTO,
        }
    }
}

impl core::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            SubmitError::Full => "command ring is full",
            SubmitError::Corrupt => "command ring indices are corrupt",
        })
    }
}

impl core::error::Error for SubmitError {}

/// Device side of the command ring: never trusts shared memory.
///
/// Keeps its own head and never reads the shared head back (after construction). Usage per
/// batch: [`available`](Self::available), [`peek`](Self::peek) each entry (one copy,
/// validated by the caller), [`advance`](Self::advance).
pub struct DeviceConsumer<T: Slot> {
    ring: Typed<T>,
    head: u32,
    /// Entries known published at `head..head + avail` (from the last `available`).
    avail: u32,
}

impl<T: Slot> DeviceConsumer<T> {
    /// The device's consumer end of `region`, which the device created and `init()`ed.
    ///
    /// Reads the head once, here: build it before the mapping is handed to the host (or from
    /// the device's own record of the head), and keep it for the ring's lifetime.
    ///
    /// # Panics
    /// If `size_of::<T>()` differs from the region's slot size; see [`try_new`](Self::try_new).
    pub fn new(region: RingRegion) -> Self {
        match Self::try_new(region) {
            Ok(c) => c,
            Err(e) => panic!("DeviceConsumer::new: {e}"),
        }
    }

    /// Like [`new`](Self::new), but reports a slot type that does not fit the region.
    pub fn try_new(region: RingRegion) -> Result<Self, RingError> {
        let ring = Typed::new(region)?;
        // Relaxed: the device's own index, stored by its own `init` before the region was
        // shared.
        let head = ring.region().field(Field::Head).load(Ordering::Relaxed);
        Ok(Self {
            ring,
            head,
            avail: 0,
        })
    }

    /// Entries the host has published past the device's head: one Acquire load of the tail
    /// (pairs with the host's Release store; orders the slot reads of `peek`).
    /// `tail - head > entries` (wrapping) is [`RingError::Corrupt`]: reported, not followed
    /// (nothing becomes available).
    pub fn available(&mut self) -> Result<u32, RingError> {
        let region = self.ring.region();
        let tail = region
            .field(Field::Tail)
            .load(ord(Site::DeviceConsumerTailAcquire, Ordering::Acquire));
        let n = tail.wrapping_sub(self.head);
        if n > region.entries() {
            self.avail = 0;
            return Err(RingError::Corrupt {
                head: self.head,
                tail,
            });
        }
        self.avail = n;
        Ok(n)
    }

    /// A copy of the slot at `head + i`, read once; `None` unless `i` is below the last
    /// [`available`](Self::available) count (less what was advanced since). Validate the copy,
    /// never the slot.
    pub fn peek(&self, i: u32) -> Option<T> {
        (i < self.avail).then(|| self.ring.read(self.head.wrapping_add(i)))
    }

    /// Takes a run of entries into `evt`: for `head + i`, `i` from `from` while below `stop`,
    /// the last [`available`](Self::available) count (less what was advanced since) and the
    /// free slots `evt` knows of, copies the entry out once and hands the copy to `f`:
    /// `Some(record)` pushes `record` to `evt` (unpublished, as [`DeviceProducer::push`]) and
    /// goes on; `None` ends the run there and returns that copy, which is not taken (validate
    /// and take it as after [`peek`](Self::peek); never read the slot again). Returns how many
    /// entries were taken and the refused copy. Advances and publishes nothing. One loop over
    /// local copies of both rings' indices, for the device's fast path (runs of NOPs).
    #[inline]
    pub fn take_run<E: Slot>(
        &self,
        from: u32,
        stop: u32,
        evt: &mut DeviceProducer<E>,
        mut f: impl FnMut(&T) -> Option<E>,
    ) -> (u32, Option<T>) {
        let end = stop.min(self.avail);
        let room = evt.free;
        let (head, tail) = (self.head, evt.tail);
        let mut i = from;
        let mut n = 0u32;
        let mut refused = None;
        while i < end && n < room {
            let c = self.ring.read(head.wrapping_add(i));
            match f(&c) {
                Some(r) => {
                    evt.ring.write(tail.wrapping_add(n), &r);
                    n += 1;
                    i += 1;
                }
                None => {
                    refused = Some(c);
                    break;
                }
            }
        }
        evt.tail = tail.wrapping_add(n);
        evt.free = room - n;
        (n, refused)
    }

    /// A copy of the slot at `head + i` for any `i` below the ring's depth, published or not
    /// (`None` beyond the depth): for a device that has given up on this ring (its stream
    /// stopped, possibly because its tail is corrupt) and looks at what the host had queued,
    /// to clean up after it (abi.md 8: events whose records will never run). A slot not
    /// published may hold a stale or half-written descriptor: use the copy only for that.
    pub fn peek_queued(&self, i: u32) -> Option<T> {
        (i < self.ring.region().entries()).then(|| self.ring.read(self.head.wrapping_add(i)))
    }

    /// Consumes `n` entries (at most the available count): own head += n, then a Release store
    /// of the head (pairs with the host's Acquire load before it reuses those slots).
    pub fn advance(&mut self, n: u32) {
        let n = n.min(self.avail);
        if n == 0 {
            return;
        }
        self.avail -= n;
        self.head = self.head.wrapping_add(n);
        self.ring.region().field(Field::Head).store(
            self.head,
            ord(Site::DeviceConsumerHeadRelease, Ordering::Release),
        );
    }

    /// Entries the host has published and the device not yet taken: a snapshot for usage
    /// reports, not for consuming (a Relaxed load of the tail orders nothing; use
    /// [`available`](Self::available) to take entries). A corrupt tail reads as a full ring.
    pub fn queued(&self) -> u32 {
        let region = self.ring.region();
        let tail = region.field(Field::Tail).load(Ordering::Relaxed);
        tail.wrapping_sub(self.head).min(region.entries())
    }

    /// The device's own head.
    pub fn head(&self) -> u32 {
        self.head
    }

    /// `SUBMIT_TASK`, the slow path: the driver places `item` on the client's behalf, as the
    /// client's producer would. Reads the shared tail once, checks space against the device's
    /// own head (`tail - head == entries`: [`SubmitError::Full`]; more:
    /// [`SubmitError::Corrupt`], not followed), writes the slot and stores `tail + 1`.
    /// Returns the ring index used. The caller then wakes the device.
    ///
    /// This makes the driver a second producer: the client must have published its own slots
    /// first and must not push concurrently (ABI: a client MUST NOT mix SUBMIT_TASK with its own
    /// unpublished slots). In a single address space that is part of `RingRegion::new`'s
    /// contract.
    ///
    /// Both tail accesses are Relaxed (see docs/ordering.md; the loom model
    /// `submit_on_behalf_slow_path` passes with them):
    /// * the load: the ioctl comes after the client's publish in the client's own order (the
    ///   syscall, or the daemon's socket message), which already orders the client's slot
    ///   writes before this call; an Acquire would add nothing;
    /// * the store: the only reader that reads slots on the strength of this tail is this same
    ///   `DeviceConsumer` (`available`/`peek`), and `&mut self` already orders this call before
    ///   its next use, on whatever thread. The client re-reads the tail with
    ///   `Producer::resync_tail` and reads no slot.
    pub fn submit_on_behalf(&mut self, item: &T) -> Result<u32, SubmitError> {
        let region = self.ring.region();
        let tail = region.field(Field::Tail).load(Ordering::Relaxed);
        let used = tail.wrapping_sub(self.head);
        if used > region.entries() {
            return Err(SubmitError::Corrupt);
        }
        if used == region.entries() {
            return Err(SubmitError::Full);
        }
        self.ring.write(tail, item);
        region
            .field(Field::Tail)
            .store(tail.wrapping_add(1), Ordering::Relaxed);
        Ok(tail)
    }

    /// The device half of the Dekker pair, before sleeping: set NEED_WAKEUP, `fence(SeqCst)`,
    /// re-load the tail. If work arrived, clears NEED_WAKEUP and returns `false` (keep
    /// running). Otherwise returns `true`: the caller may sleep until the doorbell differs
    /// from the value it read *before* this call, then must call
    /// [`clear_need_wakeup`](Self::clear_need_wakeup).
    ///
    /// Why no wake-up is lost: the host does `store(tail); fence(SeqCst); load(flags)`, this
    /// does `fetch_or(flags); fence(SeqCst); load(tail)`. The two fences are totally ordered:
    /// if the host's comes first, this load sees its tail (no sleep); otherwise the host's
    /// load sees NEED_WAKEUP and it rings the doorbell, which changes the doorbell value.
    pub fn prepare_sleep(&mut self) -> bool {
        let region = self.ring.region();
        // Relaxed: the fence orders it before the tail load; no data is published by it.
        region
            .field(Field::Flags)
            .fetch_or(RingFlags::NEED_WAKEUP.bits(), Ordering::Relaxed);
        fence_at(Site::DeviceConsumerDekkerFence, Ordering::SeqCst);
        // Relaxed: only "did the tail move?"; slots are read after `available`'s Acquire.
        let tail = region.field(Field::Tail).load(Ordering::Relaxed);
        if tail != self.head {
            self.clear_need_wakeup();
            return false;
        }
        true
    }

    /// The device half of the Dekker pair when the stream is **stalled**: descriptors wait in
    /// the command ring but the event ring `evt` has no free slot, and only the host reaping it
    /// can change that. Sets NEED_WAKEUP on the command ring, `fence(SeqCst)`, re-reads the
    /// host's event-ring head ([`DeviceProducer::free`]). If a slot was freed meanwhile (or the
    /// head is corrupt, which the next run reports), clears NEED_WAKEUP and returns `false`:
    /// keep running. Otherwise returns `true`: sleep until the doorbell differs from the value
    /// read *before* this call, then [`clear_need_wakeup`](Self::clear_need_wakeup) and look
    /// again (a wake-up is a hint: the condition may still hold).
    ///
    /// Why no wake-up is lost: the host, after reaping, does `store(evt.head); fence(SeqCst);
    /// load(cmd.flags)` ([`Producer::wake_needed_after_reap`](crate::Producer::wake_needed_after_reap)),
    /// this does `fetch_or(cmd.flags); fence(SeqCst); load(evt.head)`; one of the two loads
    /// sees the other side's store, so either the device sees the freed slot or the host sees
    /// NEED_WAKEUP and rings, which changes the doorbell (it is a counter).
    pub fn prepare_stall_sleep<E: Slot>(&mut self, evt: &mut DeviceProducer<E>) -> bool {
        let region = self.ring.region();
        // Relaxed: the fence orders it before the head load; no data is published by it.
        region
            .field(Field::Flags)
            .fetch_or(RingFlags::NEED_WAKEUP.bits(), Ordering::Relaxed);
        fence_at(Site::DeviceStallDekkerFence, Ordering::SeqCst);
        match evt.free() {
            Ok(0) => true,
            _ => {
                self.clear_need_wakeup();
                false
            }
        }
    }

    /// Clears NEED_WAKEUP (after waking). Relaxed: a host that still sees the flag rings a
    /// spurious doorbell, which is harmless; before sleeping again `prepare_sleep` re-sets it
    /// behind its fence.
    pub fn clear_need_wakeup(&self) {
        self.ring
            .region()
            .field(Field::Flags)
            .fetch_and(!RingFlags::NEED_WAKEUP.bits(), Ordering::Relaxed);
    }

    /// Puts the stream in the error state: `error = errno`, `error_index = index` (Relaxed),
    /// then the ERROR flag with Release (pairs with the Acquire in `RingRegion::error`).
    pub fn set_error(&self, errno: u32, index: u32) {
        let region = self.ring.region();
        region.field(Field::Error).store(errno, Ordering::Relaxed);
        region
            .field(Field::ErrorIndex)
            .store(index, Ordering::Relaxed);
        region.field(Field::Flags).fetch_or(
            RingFlags::ERROR.bits(),
            ord(Site::DeviceErrorRelease, Ordering::Release),
        );
    }

    /// Adds `n` to the `dropped` counter (wrapping). Relaxed: a statistic, publishes nothing.
    pub fn add_dropped(&self, n: u32) {
        self.ring
            .region()
            .field(Field::Dropped)
            .fetch_add(n, Ordering::Relaxed);
    }

    /// The region.
    pub fn region(&self) -> &RingRegion {
        self.ring.region()
    }
}

/// Device side of the event ring: a producer that distrusts the host's head.
pub struct DeviceProducer<T: Slot> {
    ring: Typed<T>,
    /// Next index to write (includes unpublished records).
    tail: u32,
    /// Last tail stored to shared memory.
    published: u32,
    /// Last head accepted from the host (starts at the initial tail: ring empty).
    head_seen: u32,
    /// Slots known free at `tail..` (from the last `free`, less pushes since).
    free: u32,
}

impl<T: Slot> DeviceProducer<T> {
    /// The device's producer end of `region`, which the device created and `init()`ed; reads
    /// the tail once, here (same rule as [`DeviceConsumer::new`]).
    ///
    /// # Panics
    /// If `size_of::<T>()` differs from the region's slot size; see [`try_new`](Self::try_new).
    pub fn new(region: RingRegion) -> Self {
        match Self::try_new(region) {
            Ok(p) => p,
            Err(e) => panic!("DeviceProducer::new: {e}"),
        }
    }

    /// Like [`new`](Self::new), but reports a slot type that does not fit the region.
    pub fn try_new(region: RingRegion) -> Result<Self, RingError> {
        let ring = Typed::new(region)?;
        // Relaxed: the device's own index, stored by its own `init` before sharing.
        let tail = ring.region().field(Field::Tail).load(Ordering::Relaxed);
        Ok(Self {
            ring,
            tail,
            published: tail,
            head_seen: tail,
            free: 0,
        })
    }

    /// Free slots: one Acquire load of the host's head (pairs with the host's Release store
    /// after it copied the records out). The head is untrusted: it must lie between the last
    /// head accepted and the published tail (so `tail - head <= entries`, and it never moves
    /// backwards or past what was published); anything else is [`RingError::Corrupt`] and
    /// leaves no free space.
    pub fn free(&mut self) -> Result<u32, RingError> {
        let region = self.ring.region();
        let head = region
            .field(Field::Head)
            .load(ord(Site::DeviceProducerHeadAcquire, Ordering::Acquire));
        let moved = head.wrapping_sub(self.head_seen);
        if moved > self.published.wrapping_sub(self.head_seen) {
            self.free = 0;
            return Err(RingError::Corrupt {
                head,
                tail: self.published,
            });
        }
        self.head_seen = head;
        // `tail - head_seen <= entries` holds: it did for the old head (pushes never exceed the
        // free count) and the head only moved forward.
        self.free = region
            .entries()
            .saturating_sub(self.tail.wrapping_sub(head));
        Ok(self.free)
    }

    /// Copies `item` into the next slot, if the last [`free`](Self::free) left room (this
    /// never reads the head itself). Not visible to the host until
    /// [`publish`](Self::publish). `Err(*item)` when there is no known free slot.
    pub fn push(&mut self, item: &T) -> Result<(), T> {
        if self.free == 0 {
            return Err(*item);
        }
        self.ring.write(self.tail, item);
        self.tail = self.tail.wrapping_add(1);
        self.free -= 1;
        Ok(())
    }

    /// Publishes every pushed record: one Release store of the tail (pairs with the host's
    /// Acquire load; orders the record writes, and everything the device did before them).
    pub fn publish(&mut self) {
        if self.tail == self.published {
            return;
        }
        self.ring.region().field(Field::Tail).store(
            self.tail,
            ord(Site::DeviceProducerTailRelease, Ordering::Release),
        );
        self.published = self.tail;
    }

    /// The device's own tail (every pushed record, published or not).
    pub fn tail(&self) -> u32 {
        self.tail
    }

    /// The region.
    pub fn region(&self) -> &RingRegion {
        self.ring.region()
    }
}
