//! Test support (feature `test-util`, and this crate's own tests): memory that stands in for
//! a shared mapping, so both ring ends can run in one process over the heap.

extern crate std;

use std::vec;
use std::vec::Vec;

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

/// A zeroed heap buffer, 64-byte aligned like a mapping, whose address never changes: what
/// ring regions are built over in tests and fuzz targets.
///
/// ```
/// use davinci_ring::test_util::AlignedBuf;
/// let mut b = AlignedBuf::new(100);
/// assert_eq!(b.len(), 128); // whole 64-byte lines
/// assert_eq!(b.as_mut_ptr() as usize % 64, 0);
/// ```
pub struct AlignedBuf {
    lines: Vec<Line>,
}

impl AlignedBuf {
    /// At least `len` zero bytes (rounded up to whole 64-byte lines).
    pub fn new(len: usize) -> Self {
        Self {
            lines: vec![Line([0; 64]); len.div_ceil(64)],
        }
    }

    /// The first byte. Building a `RingRegion` over it is the caller's `unsafe`: the buffer
    /// must outlive the region and be reached only through ring ends and atomics.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr().cast()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.lines.len() * 64
    }

    /// The native-endian `u32` at byte `offset` (a header word, say), or `None` past the end.
    /// A momentary read: no ring end may be in use on another thread meanwhile.
    pub fn read_u32(&self, offset: usize) -> Option<u32> {
        let line = self.lines.get(offset / 64)?;
        let b = line.0.get(offset % 64..offset % 64 + 4)?;
        Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Sets byte `offset` (to plant stale or hostile values); `false` past the end.
    pub fn set_byte(&mut self, offset: usize, value: u8) -> bool {
        match self
            .lines
            .get_mut(offset / 64)
            .and_then(|l| l.0.get_mut(offset % 64))
        {
            Some(b) => {
                *b = value;
                true
            }
            None => false,
        }
    }

    /// Whether the buffer is empty (`new(0)`).
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}
