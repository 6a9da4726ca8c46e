//! [`Bar2`]: this process's mapping of the shared region (QEMU's BAR2) and the ring views
//! over it. The one module of this crate with `unsafe`: `RingRegion::new` over the mapping,
//! whose soundness rests on every view being owned next to an `Arc<Bar2>` that keeps the
//! mapping alive (the stream's `StreamPages`, the device's `AdminRings`).
#![allow(unsafe_code)]

use std::os::fd::BorrowedFd;

use davinci_ring::{RingError, RingRegion};
use davinci_shm::{OutOfBounds, SharedMapping};

/// The mapping of BAR2, through `davinci-shm`'s audited type (bounds-checked atomic copies).
#[derive(Debug)]
pub struct Bar2 {
    map: SharedMapping,
}

impl Bar2 {
    /// Maps `len` bytes of the region's descriptor (the server's memfd) again, for the
    /// device's own use: the device owns this mapping whatever the server does.
    ///
    /// # Errors
    /// The `mmap` error.
    pub fn map(fd: BorrowedFd<'_>, len: usize) -> std::io::Result<Bar2> {
        Ok(Bar2 {
            map: SharedMapping::map_populated(fd, 0, len)?,
        })
    }

    /// The mapping (reads, writes, copies and fills, all bounds-checked).
    pub fn mapping(&self) -> &SharedMapping {
        &self.map
    }

    /// A ring view of `len` bytes at BAR2 offset `offset`: `entries` slots of `slot_size`.
    ///
    /// The view points into this mapping: the caller keeps it next to an `Arc<Bar2>` (or
    /// this `Bar2` itself) and drops it first.
    ///
    /// # Errors
    /// [`RingError::BadLength`] when the range is not inside the mapping; the ring's own
    /// geometry checks otherwise.
    pub fn ring(
        &self,
        offset: u64,
        len: u64,
        entries: u32,
        slot_size: usize,
    ) -> Result<RingRegion, RingError> {
        let end = offset.checked_add(len).ok_or(RingError::BadLength)?;
        if end > self.map.len() as u64 {
            return Err(RingError::BadLength);
        }
        let (at, len) = (
            usize::try_from(offset).map_err(|_| RingError::BadLength)?,
            usize::try_from(len).map_err(|_| RingError::BadLength)?,
        );
        // SAFETY: `[at, at + len)` lies inside the live read/write mapping (checked just
        // above), so `as_ptr() + at` stays in bounds; `RingRegion::new` checks the 64-byte
        // alignment and that `len` holds the header and slots. The mapping outlives the view:
        // every caller keeps the view beside an `Arc<Bar2>` (or in a struct that owns this
        // `Bar2`) declared after it, so the view is dropped first. Within this process only
        // the device's one ring end per view touches these bytes; the guest writes them
        // concurrently, which the ring protocol treats as hostile (atomics and whole-slot
        // volatile copies, every index checked).
        unsafe { RingRegion::new(self.map.as_ptr().add(at), len, entries, slot_size) }
    }

    /// Zeroes `len` bytes at `offset`.
    ///
    /// # Errors
    /// [`OutOfBounds`].
    pub fn zero(&self, offset: u64, len: u64) -> Result<(), OutOfBounds> {
        self.map.fill(offset, len, 0)
    }
}
