//! The loom backend (`cfg(loom)`): the same `RingRegion`/`Doorbell` interface over a test
//! buffer whose header fields are loom atomics and whose slots are loom `UnsafeCell`s, so the
//! ring code above runs unchanged and loom reports any slot access that the protocol's
//! orderings do not separate from the other side's (a data race on a descriptor), as well as
//! stale index and flag reads.
#![allow(unsafe_code)]

extern crate std;

use std::boxed::Box;
use std::vec::Vec;

use loom::cell::UnsafeCell;
use loom::sync::Arc;

use crate::region::{Field, Geometry};
use crate::slot::Slot;
use crate::sync::{AtomicU32, Ordering};
use crate::RingError;

/// Largest slot the loom backend stores (a task descriptor).
pub const LOOM_MAX_SLOT: usize = 64;

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct SlotBuf([u8; LOOM_MAX_SLOT]);

struct Shared {
    /// Header fields, indexed by `Field::index`.
    header: [AtomicU32; 8],
    slots: Box<[UnsafeCell<SlotBuf>]>,
}

// SAFETY: the header is atomics; the slots are loom `UnsafeCell`s whose every access goes
// through `with`/`with_mut`, which loom checks for causality: an unsynchronised access from
// two threads is reported as a failure, which is the point of the model.
unsafe impl Sync for Shared {}
// SAFETY: as above; the contents are plain bytes and atomics.
unsafe impl Send for Shared {}

/// Raw view of one ring (loom model): cloned to give each side its own handle.
#[derive(Clone)]
pub struct RingRegion {
    shared: Arc<Shared>,
    geom: Geometry,
}

impl core::fmt::Debug for RingRegion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RingRegion")
            .field("geom", &self.geom)
            .finish()
    }
}

impl RingRegion {
    /// A fresh model ring of `entries` slots of `slot_size` bytes (`slot_size <= 64`),
    /// header all zero. Call [`init`](Self::init) or `init_at` before use.
    pub fn new_loom(entries: u32, slot_size: usize) -> Result<Self, RingError> {
        if slot_size > LOOM_MAX_SLOT {
            return Err(RingError::BadLength);
        }
        let len = davinci_uapi::rings::ring_bytes(entries, slot_size as u32).unwrap_or(0);
        let geom = Geometry::new(len, entries, slot_size)?;
        let header = [(); 8].map(|_| AtomicU32::new(0));
        let slots: Vec<_> = (0..entries)
            .map(|_| UnsafeCell::new(SlotBuf([0; LOOM_MAX_SLOT])))
            .collect();
        Ok(Self {
            shared: Arc::new(Shared {
                header,
                slots: slots.into_boxed_slice(),
            }),
            geom,
        })
    }

    pub(crate) fn geometry(&self) -> Geometry {
        self.geom
    }

    pub(crate) fn field(&self, f: Field) -> &AtomicU32 {
        &self.shared.header[f.index()]
    }

    fn cell(&self, index: u32) -> &UnsafeCell<SlotBuf> {
        &self.shared.slots[(index & self.geom.mask) as usize]
    }

    /// # Safety
    /// `size_of::<T>() == slot_size <= 64` and `align_of::<T>() <= 64`.
    pub(crate) unsafe fn read_slot<T: Slot>(&self, index: u32) -> T {
        // SAFETY: the buffer is 64 bytes, 64-aligned, and `T` fits (caller); any bytes are a
        // valid `T` (`Slot`). loom checks that this read is ordered after the last write.
        self.cell(index).with(|p| unsafe { p.cast::<T>().read() })
    }

    /// # Safety
    /// As for `read_slot`.
    pub(crate) unsafe fn write_slot<T: Slot>(&self, index: u32, item: &T) {
        // SAFETY: as in `read_slot`; loom checks that this write is ordered after the last
        // access from the other side.
        self.cell(index)
            .with_mut(|p| unsafe { p.cast::<T>().write(*item) })
    }
}

impl RingRegion {
    /// # Safety
    /// As for `read_slot`.
    pub(crate) unsafe fn write_run_streaming<S, T: Slot>(
        &self,
        index: u32,
        items: &[S],
        slot: impl Fn(&S) -> &T,
    ) -> bool {
        for (k, item) in items.iter().enumerate() {
            // SAFETY: as for `write_slot`.
            unsafe { self.write_slot(index.wrapping_add(k as u32), slot(item)) };
        }
        false
    }

    pub(crate) fn store_fence(&self) {}
}

/// The doorbell (loom model): an atomic word; `ring` is a *Relaxed* store.
///
/// The real `ring` is `fence(Release)` + a volatile write, which orders nothing in Rust's
/// memory model; modelling it as Relaxed claims no more than that, and the handshake model
/// passes with it: the protocol takes no ordering from the doorbell.
pub struct Doorbell {
    word: Arc<AtomicU32>,
}

/// The device's view of the doorbell (loom model).
pub struct DoorbellWatch {
    word: Arc<AtomicU32>,
}

/// A doorbell word starting at 0, and the device's watch on it.
pub fn doorbell_pair() -> (Doorbell, DoorbellWatch) {
    let word = Arc::new(AtomicU32::new(0));
    (Doorbell { word: word.clone() }, DoorbellWatch { word })
}

impl Doorbell {
    /// Writes `value` to the doorbell (a hardware doorbell's write).
    pub fn ring(&self, value: u32) {
        self.word.store(value, Ordering::Relaxed);
    }

    /// Increments the doorbell word (a software device's doorbell: ABI 1.1), Relaxed as in the
    /// real `Doorbell::ring_counter`.
    pub fn ring_counter(&self) {
        self.word.fetch_add(1, Ordering::Relaxed);
    }
}

impl DoorbellWatch {
    /// The doorbell's current value.
    pub fn value(&self) -> u32 {
        // Relaxed, as in the real `DoorbellWatch::value`.
        self.word.load(Ordering::Relaxed)
    }
}
