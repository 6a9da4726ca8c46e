//! The device memory allocator: first-fit over a sorted, fixed-capacity block list covering
//! `[0, size)`, splitting on allocation and merging neighbours on free (free-block reuse).
//! Offsets are relative to the device memory; device virtual addresses are
//! [`DVA_BASE`]` + (generation << `[`GEN_SHIFT`]`) + offset`, so small integers (and 0) are
//! never valid device addresses.
//!
//! The generation is the allocation's number modulo [`GENERATIONS`]: memory is reused as
//! soon as it is freed, its address is not. A descriptor that still names a freed
//! allocation's address (a runtime that kept it past the free) faults with `EACCES` on every
//! host instead of writing into whatever was allocated there next, until [`GENERATIONS`]
//! more allocations have been made on the device (docs/abi.md 3.3).

use crate::error::{ensure, fail, Result};

/// Device virtual address of device-memory offset 0, generation 0.
pub const DVA_BASE: u64 = 0x0000_0010_0000_0000;

/// Where the generation starts in a device address (minus [`DVA_BASE`]): device memory is at
/// most `1 << GEN_SHIFT` bytes (1 TiB).
pub const GEN_SHIFT: u32 = 40;

/// Generations before an address comes round again (`1 << 20`): addresses stay below
/// `DVA_BASE + (1 << 60)`.
pub const GENERATIONS: u32 = 1 << 20;

/// Most device memory an allocator manages: offsets must stay below the generation bits.
pub const MAX_MEMORY: u64 = 1 << GEN_SHIFT;

/// The device address of `offset` in generation `generation`.
pub const fn dva(generation: u32, offset: u64) -> u64 {
    DVA_BASE + ((generation as u64 % GENERATIONS as u64) << GEN_SHIFT) + offset
}

/// `(generation, offset)` of a device address, or `None` for one no allocation can have.
pub const fn split_dva(addr: u64) -> Option<(u32, u64)> {
    let Some(rel) = addr.checked_sub(DVA_BASE) else {
        return None;
    };
    let generation = rel >> GEN_SHIFT;
    if generation >= GENERATIONS as u64 {
        return None;
    }
    Some((generation as u32, rel & (MAX_MEMORY - 1)))
}

/// The device-memory offset of a device address (its generation dropped), for hosts and
/// tests that reach device memory by offset. `None` for an address no allocation can have.
pub const fn dva_offset(addr: u64) -> Option<u64> {
    match split_dva(addr) {
        Some((_, offset)) => Some(offset),
        None => None,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    offset: u64,
    size: u64,
    /// Allocation handle, or 0 for a free block.
    alloc: u32,
}

/// Allocator over `[0, size)` with at most `N` blocks (free and used).
pub struct Allocator<const N: usize> {
    blocks: [Block; N],
    count: usize,
    size: u64,
    align: u64,
    used: u64,
    /// The next allocation's generation.
    next_generation: u32,
}

impl<const N: usize> Allocator<N> {
    /// An allocator of `size` bytes handing out `align`-aligned, `align`-rounded blocks.
    /// `align` must be a power of two; `size` is rounded down to it.
    pub const fn new(size: u64, align: u64) -> Self {
        let align = if align.is_power_of_two() { align } else { 4096 };
        let size = if size > MAX_MEMORY { MAX_MEMORY } else { size };
        let size = size & !(align - 1);
        let mut blocks = [Block {
            offset: 0,
            size: 0,
            alloc: 0,
        }; N];
        let count = if size > 0 && N > 0 {
            blocks[0].size = size;
            1
        } else {
            0
        };
        Self {
            blocks,
            count,
            size,
            align,
            used: 0,
            next_generation: 0,
        }
    }

    /// A new allocation's generation (they go round in [`GENERATIONS`]).
    pub fn take_generation(&mut self) -> u32 {
        let g = self.next_generation;
        self.next_generation = (g + 1) % GENERATIONS;
        g
    }

    /// Makes this an empty allocator of `size` bytes (rounded down to the alignment), in
    /// place (it is too big for a kernel stack); `EBUSY` while anything is allocated.
    pub fn reset(&mut self, size: u64) -> Result<()> {
        ensure!(self.used == 0, EBUSY, "device memory is in use");
        let size = size.min(MAX_MEMORY) & !(self.align - 1);
        self.size = size;
        self.count = 0;
        if size > 0 && N > 0 {
            self.blocks[0] = Block {
                offset: 0,
                size,
                alloc: 0,
            };
            self.count = 1;
        }
        Ok(())
    }

    /// Total bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes allocated.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Allocation alignment.
    pub fn align(&self) -> u64 {
        self.align
    }

    /// Rounds `len` up to the alignment; `None` on overflow.
    pub fn round(&self, len: u64) -> Option<u64> {
        Some(len.checked_add(self.align - 1)? & !(self.align - 1))
    }

    /// Reserves `len` bytes (rounded up) for allocation `alloc` (non-zero); returns
    /// `(offset, rounded_len)`.
    pub fn allocate(&mut self, len: u64, alloc: u32) -> Result<(u64, u64)> {
        ensure!(len > 0, EINVAL, "allocation size is zero");
        ensure!(alloc != 0, EINVAL, "allocation handle is zero");
        let Some(len) = self.round(len) else {
            fail!(
                EOVERFLOW,
                "allocation size overflows when rounded to the alignment"
            );
        };
        ensure!(
            len <= self.size,
            ENOMEM,
            "allocation larger than device memory"
        );
        let Some(i) = self.blocks[..self.count]
            .iter()
            .position(|b| b.alloc == 0 && b.size >= len)
        else {
            fail!(ENOMEM, "no free block of device memory large enough");
        };
        let block = self.blocks[i];
        if block.size > len {
            // Split: the tail stays free.
            ensure!(
                self.count < N,
                ENOSPC,
                "device memory block table is full (too many fragments)"
            );
            self.blocks.copy_within(i + 1..self.count, i + 2);
            self.count += 1;
            self.blocks[i + 1] = Block {
                offset: block.offset + len,
                size: block.size - len,
                alloc: 0,
            };
        }
        self.blocks[i] = Block {
            offset: block.offset,
            size: len,
            alloc,
        };
        self.used += len;
        Ok((block.offset, len))
    }

    /// Frees the block of allocation `alloc` at `offset`; merges with free neighbours.
    /// Returns the freed length.
    pub fn free(&mut self, offset: u64, alloc: u32) -> Result<u64> {
        let Some(mut i) = self
            .find(offset)
            .filter(|&i| self.blocks[i].alloc == alloc && alloc != 0)
        else {
            fail!(ENOENT, "no such allocation");
        };
        let len = self.blocks[i].size;
        self.blocks[i].alloc = 0;
        self.used -= len;
        if i + 1 < self.count && self.blocks[i + 1].alloc == 0 {
            self.blocks[i].size += self.blocks[i + 1].size;
            self.blocks.copy_within(i + 2..self.count, i + 1);
            self.count -= 1;
        }
        if i > 0 && self.blocks[i - 1].alloc == 0 {
            self.blocks[i - 1].size += self.blocks[i].size;
            self.blocks.copy_within(i + 1..self.count, i);
            self.count -= 1;
            i -= 1;
        }
        let _ = i;
        Ok(len)
    }

    /// Index of the block containing `offset` (binary search).
    fn find(&self, offset: u64) -> Option<usize> {
        let blocks = &self.blocks[..self.count];
        let i = blocks.partition_point(|b| b.offset <= offset);
        let i = i.checked_sub(1)?;
        let b = blocks[i];
        (offset - b.offset < b.size).then_some(i)
    }

    /// The allocation handle owning the whole range `[offset, offset + len)`, if one does
    /// (a range spanning two allocations has no single owner). `len` 0 is checked as 1 byte.
    pub fn owner_of(&self, offset: u64, len: u64) -> Option<u32> {
        let i = self.find(offset)?;
        let b = self.blocks[i];
        if b.alloc == 0 {
            return None;
        }
        let end = offset.checked_add(len.max(1))?;
        (end <= b.offset + b.size).then_some(b.alloc)
    }

    /// Number of blocks (free and used), for tests and statistics.
    pub fn blocks(&self) -> usize {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use davinci_uapi::Errno;

    #[test]
    fn allocate_free_reuse_and_merge() {
        let mut a: Allocator<16> = Allocator::new(1 << 20, 4096);
        let (o1, l1) = a.allocate(100, 1).unwrap();
        assert_eq!((o1, l1), (0, 4096));
        let (o2, _) = a.allocate(8192, 2).unwrap();
        assert_eq!(o2, 4096);
        let (o3, _) = a.allocate(4096, 3).unwrap();
        assert_eq!(a.used(), 4096 * 4);
        assert_eq!(a.owner_of(o2 + 100, 64), Some(2));
        assert_eq!(a.owner_of(o2 + 8000, 300), None, "spans two allocations");
        assert_eq!(a.owner_of(o3 + 4096, 1), None, "free space");
        a.free(o2, 2).unwrap();
        assert_eq!(a.free(o2, 2).unwrap_err().errno, Errno::ENOENT);
        // Reuse the hole.
        let (o4, _) = a.allocate(4096, 4).unwrap();
        assert_eq!(o4, o2);
        a.free(o1, 1).unwrap();
        a.free(o3, 3).unwrap();
        a.free(o4, 4).unwrap();
        assert_eq!(a.used(), 0);
        assert_eq!(a.blocks(), 1, "everything merged back");
    }

    #[test]
    fn reset_resizes_an_unused_allocator_and_refuses_a_used_one() {
        let mut a = Allocator::<8>::new(1 << 20, 4096);
        a.reset((4 << 20) + 100).unwrap();
        assert_eq!(a.size(), 4 << 20);
        let (off, len) = a.allocate(3 << 20, 1).unwrap();
        assert_eq!((off, len), (0, 3 << 20));
        assert_eq!(
            a.reset(1 << 20).unwrap_err().errno,
            davinci_uapi::Errno::EBUSY
        );
        a.free(0, 1).unwrap();
        a.reset(8192).unwrap();
        assert_eq!(a.allocate(8192, 2).unwrap(), (0, 8192));
        assert!(a.allocate(4096, 3).is_err());
    }

    #[test]
    fn limits() {
        let mut a: Allocator<3> = Allocator::new(16384, 4096);
        assert_eq!(a.allocate(0, 1).unwrap_err().errno, Errno::EINVAL);
        assert_eq!(a.allocate(u64::MAX, 1).unwrap_err().errno, Errno::EOVERFLOW);
        assert_eq!(a.allocate(20000, 1).unwrap_err().errno, Errno::ENOMEM);
        a.allocate(4096, 1).unwrap();
        a.allocate(4096, 2).unwrap();
        // Third split needs a 4th block.
        assert_eq!(a.allocate(4096, 3).unwrap_err().errno, Errno::ENOSPC);
        assert_eq!(a.allocate(8192, 3).unwrap(), (8192, 8192));
        assert_eq!(a.allocate(1, 4).unwrap_err().errno, Errno::ENOMEM);
        assert_eq!(a.owner_of(u64::MAX, 2), None);
    }
}
