//! Ring geometry, header fields, errors, and the header operations common to every backend.
#![forbid(unsafe_code)]

use core::fmt;
use core::mem::offset_of;

use davinci_uapi::rings::{RING_HEADER_SIZE, RING_MAX_ENTRIES, RING_MIN_ENTRIES};
use davinci_uapi::{Errno, RingFlags, RingHeader};

use crate::sync::{ord, Ordering, Site};
use crate::RingRegion;

/// Why a region could not be used, or why a ring's shared indices cannot be followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// The mapping is shorter than the header plus `entries` slots, the size computation
    /// overflows, the slot size is zero, or the slot type's size differs from the slot size.
    BadLength,
    /// `entries` is not a power of two within `RING_MIN_ENTRIES..=RING_MAX_ENTRIES`.
    BadEntries,
    /// The base is null or not 64-byte aligned (or the slot type needs more than 64).
    Misaligned,
    /// The other side wrote an index that no correct peer can produce (`tail - head` beyond
    /// `entries`, or a head that moved backwards or past the published tail). Reported, never
    /// followed: the stream goes to the error state with `EPROTO`.
    Corrupt {
        /// The head index involved (the device's own head, or the head the peer wrote).
        head: u32,
        /// The tail index involved (the tail the peer wrote, or the device's own published tail).
        tail: u32,
    },
}

impl RingError {
    /// The errno that reports this error: `EPROTO` for corruption, `EINVAL` otherwise.
    pub const fn errno(self) -> Errno {
        match self {
            RingError::Corrupt { .. } => Errno::EPROTO,
            _ => Errno::EINVAL,
        }
    }
}

impl core::error::Error for RingError {}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingError::BadLength => f.write_str(
                "ring mapping too short for its header and slots (or slot size does not match the slot type)",
            ),
            RingError::BadEntries => write!(
                f,
                "ring depth must be a power of two in {RING_MIN_ENTRIES}..={RING_MAX_ENTRIES}"
            ),
            RingError::Misaligned => f.write_str("ring mapping is null or not 64-byte aligned"),
            RingError::Corrupt { head, tail } => write!(
                f,
                "corrupt ring indices (head {head}, tail {tail}): not followed"
            ),
        }
    }
}

/// The locally known shape of a ring. The device side never re-reads `entries`/`mask` from
/// shared memory: these values, checked once at construction, are the only ones used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) entries: u32,
    pub(crate) mask: u32,
    pub(crate) slot_size: usize,
}

impl Geometry {
    /// Checks `entries` and that `len` bytes hold the header and `entries` slots.
    pub(crate) fn new(len: usize, entries: u32, slot_size: usize) -> Result<Self, RingError> {
        if !(RING_MIN_ENTRIES..=RING_MAX_ENTRIES).contains(&entries) || !entries.is_power_of_two() {
            return Err(RingError::BadEntries);
        }
        if slot_size == 0 {
            return Err(RingError::BadLength);
        }
        let need = (entries as usize)
            .checked_mul(slot_size)
            .and_then(|s| s.checked_add(RING_HEADER_SIZE))
            .ok_or(RingError::BadLength)?;
        if len < need {
            return Err(RingError::BadLength);
        }
        Ok(Self {
            entries,
            mask: entries - 1,
            slot_size,
        })
    }

    /// Byte offset of the slot holding free-running index `index`, for the caller's slot size
    /// (a constant, equal to the checked one). Always within the checked length:
    /// `(index & mask) < entries`.
    #[cfg_attr(loom, allow(dead_code))]
    #[inline(always)]
    pub(crate) fn slot_offset(&self, index: u32, slot_size: usize) -> usize {
        debug_assert_eq!(slot_size, self.slot_size);
        RING_HEADER_SIZE + (index & self.mask) as usize * slot_size
    }
}

/// A `u32` field of the ring header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Tail,
    Head,
    Entries,
    Mask,
    Flags,
    Dropped,
    Error,
    ErrorIndex,
}

impl Field {
    /// Byte offset in the header (all 4-byte aligned, all below `RING_HEADER_SIZE`).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) const fn offset(self) -> usize {
        match self {
            Field::Tail => offset_of!(RingHeader, tail),
            Field::Head => offset_of!(RingHeader, head),
            Field::Entries => offset_of!(RingHeader, entries),
            Field::Mask => offset_of!(RingHeader, mask),
            Field::Flags => offset_of!(RingHeader, flags),
            Field::Dropped => offset_of!(RingHeader, dropped),
            Field::Error => offset_of!(RingHeader, error),
            Field::ErrorIndex => offset_of!(RingHeader, error_index),
        }
    }

    /// Index into the loom backend's header array.
    #[cfg_attr(not(loom), allow(dead_code))]
    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

const _: () = {
    let fields = [
        Field::Tail,
        Field::Head,
        Field::Entries,
        Field::Mask,
        Field::Flags,
        Field::Dropped,
        Field::Error,
        Field::ErrorIndex,
    ];
    let mut i = 0;
    while i < fields.len() {
        assert!(fields[i].offset().is_multiple_of(4) && fields[i].offset() + 4 <= RING_HEADER_SIZE);
        i += 1;
    }
};

impl RingRegion {
    /// Device side, at creation, before the mapping is handed to the host: `tail = head = 0`,
    /// `entries`, `mask`, `flags = dropped = error = error_index = 0`.
    pub fn init(&self) {
        self.init_indices(0);
    }

    /// Like [`init`](Self::init) but with `tail = head = start`. Indices are free-running, so
    /// any start is valid for the ring protocol; tests use it to cross the `u32` wrap quickly.
    #[cfg(any(test, loom, feature = "test-util"))]
    pub fn init_at(&self, start: u32) {
        self.init_indices(start);
    }

    fn init_indices(&self, start: u32) {
        let g = self.geometry();
        // Relaxed throughout: the region is not shared yet. Whatever hands it to the other
        // side (mmap of the cookie, a thread spawn, a socket message) orders these stores
        // before the other side's first access.
        self.field(Field::Tail).store(start, Ordering::Relaxed);
        self.field(Field::Head).store(start, Ordering::Relaxed);
        self.field(Field::Entries)
            .store(g.entries, Ordering::Relaxed);
        self.field(Field::Mask).store(g.mask, Ordering::Relaxed);
        self.field(Field::Flags).store(0, Ordering::Relaxed);
        self.field(Field::Dropped).store(0, Ordering::Relaxed);
        self.field(Field::Error).store(0, Ordering::Relaxed);
        self.field(Field::ErrorIndex).store(0, Ordering::Relaxed);
    }

    /// Number of slots (the locally checked value, never re-read from shared memory).
    pub fn entries(&self) -> u32 {
        self.geometry().entries
    }

    /// Size of one slot in bytes, as given to the constructor.
    pub fn slot_size(&self) -> usize {
        self.geometry().slot_size
    }

    /// The ring flags, every bit kept (undefined bits included).
    ///
    /// Relaxed: a snapshot for polling and display. Nothing is published through `flags`
    /// except the error fields, and [`error`](Self::error) re-loads the flags with Acquire
    /// before reading them (read-read coherence: once this load saw ERROR, that one does too).
    /// The NEED_WAKEUP check of `Producer::publish` has its own fence.
    pub fn flags(&self) -> RingFlags {
        RingFlags::from_bits_retain(self.field(Field::Flags).load(Ordering::Relaxed))
    }

    /// `Some((errno, index))` once the device has put the stream in the error state: the
    /// ERROR flag is loaded with Acquire (pairs with the Release in `DeviceConsumer::set_error`),
    /// then `error` and `error_index` are read.
    pub fn error(&self) -> Option<(u32, u32)> {
        let flags = self
            .field(Field::Flags)
            .load(ord(Site::RegionErrorAcquire, Ordering::Acquire));
        if flags & RingFlags::ERROR.bits() == 0 {
            return None;
        }
        // Relaxed: ordered after the flag by the Acquire above; written before the flag's
        // Release by the device, and never again.
        let errno = self.field(Field::Error).load(Ordering::Relaxed);
        let index = self.field(Field::ErrorIndex).load(Ordering::Relaxed);
        Some((errno, index))
    }

    /// Descriptors the device discarded. Relaxed: a statistic; nothing is published with it.
    pub fn dropped(&self) -> u32 {
        self.field(Field::Dropped).load(Ordering::Relaxed)
    }
}
