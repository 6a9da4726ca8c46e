//! Slot types and the typed view of a region that the ring ends use.
#![allow(unsafe_code)]

use core::marker::PhantomData;
use core::mem::{align_of, size_of};

use davinci_uapi::{EventRecord, TaskDesc};

use crate::{RingError, RingRegion};

/// Marker for slot types: `Copy`, no padding, every bit pattern valid.
///
/// A slot is copied in and out of shared memory as a whole; the other side may have written
/// any bytes there, so a copy must be a valid `T` whatever they are.
///
/// # Safety
/// `T` has no padding bytes and no invalid bit patterns (integers and arrays of integers, in
/// a `#[repr(C)]` struct without implicit padding), and its alignment is at most 64.
pub unsafe trait Slot: Copy + 'static {}

// SAFETY: `TaskDesc` is `#[repr(C)]`, made of `u8`/`u16`/`u32`/`u64` fields only, and uapi's
// `abi_struct!` asserts at compile time that it has no implicit padding; alignment 8.
unsafe impl Slot for TaskDesc {}
// SAFETY: `EventRecord` is `#[repr(C)]` with `u64`, `i32`, `u8`, `[u8; 3]` fields; uapi's
// `abi_struct!` asserts no implicit padding; every bit pattern of these is valid; alignment 8.
unsafe impl Slot for EventRecord {}
// SAFETY: a primitive integer: no padding, every bit pattern valid, alignment 4.
unsafe impl Slot for u32 {}
// SAFETY: a primitive integer: no padding, every bit pattern valid, alignment <= 8.
unsafe impl Slot for u64 {}
// SAFETY: an array of `u64`: no padding, every bit pattern valid, alignment 8. For slots of
// any whole number of words (the PCI device's 1 KiB admin entries, `davinci-hwif`); a
// zero-length array is refused by the ring's geometry (slot size 0).
unsafe impl<const N: usize> Slot for [u64; N] {}

/// A region whose slot size was checked against `T` (size equal, alignment dividing 64), so
/// every slot access through it is in bounds and aligned.
pub(crate) struct Typed<T: Slot> {
    region: RingRegion,
    _slot: PhantomData<fn() -> T>,
}

impl<T: Slot> Typed<T> {
    pub(crate) fn new(region: RingRegion) -> Result<Self, RingError> {
        if size_of::<T>() != region.slot_size() {
            return Err(RingError::BadLength);
        }
        // The region base is 64-byte aligned and the header is 192 bytes, so slots are
        // `align_of::<T>()`-aligned when that alignment divides 64 (and the slot size, which
        // equals `size_of::<T>()`, a multiple of the alignment).
        if align_of::<T>() > 64 {
            return Err(RingError::Misaligned);
        }
        Ok(Self {
            region,
            _slot: PhantomData,
        })
    }

    pub(crate) fn region(&self) -> &RingRegion {
        &self.region
    }

    /// Copies the slot of free-running index `index` out, once.
    pub(crate) fn read(&self, index: u32) -> T {
        // SAFETY: `new` checked `size_of::<T>() == slot_size` and `align_of::<T>() <= 64`,
        // which is what `read_slot` requires.
        unsafe { self.region.read_slot::<T>(index) }
    }

    /// Copies `item` into the slot of free-running index `index`, once.
    pub(crate) fn write(&self, index: u32, item: &T) {
        // SAFETY: as in `read`.
        unsafe { self.region.write_slot::<T>(index, item) }
    }

    /// [`write`](Self::write) with non-temporal stores where there are
    /// (`RingRegion::write_run_streaming`), of the `T` that `slot` finds in each of `items`,
    /// into the slots from free-running index `index` on (wrapping at the ring's end); `true` = a store fence is due before publishing. `items` must not be longer than
    /// the ring (only the last `entries` of a longer run would survive; callers push at most
    /// the free slots).
    #[inline(always)]
    pub(crate) fn write_run_streaming<S>(
        &self,
        index: u32,
        items: &[S],
        slot: impl Fn(&S) -> &T,
    ) -> bool {
        let g = self.region.geometry();
        let items = &items[..items.len().min(g.entries as usize)];
        // Up to the ring's end, then from its start.
        let first = (g.entries - (index & g.mask)) as usize;
        let (a, b) = items.split_at(first.min(items.len()));
        // SAFETY: as in `read`, and neither run wraps: `a` starts at `index & mask` and holds
        // at most `entries - (index & mask)` items; `b` starts at slot 0 (its index is
        // `index + a.len()`, a multiple of `entries` when `b` is non-empty) and holds at most
        // `entries - a.len() <= entries` items.
        unsafe {
            let streamed = self.region.write_run_streaming(index, a, &slot);
            self.region
                .write_run_streaming(index.wrapping_add(a.len() as u32), b, &slot)
                | streamed
        }
    }
}
