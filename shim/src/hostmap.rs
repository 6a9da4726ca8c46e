//! [`HostMapping`]: where the host view of a buffer is mapped in this process, with a hold
//! that keeps the buffer (and so the mapping) alive: what a language binding needs to lend
//! the view out without copying (the Python package's `Buffer.view()` builds its
//! buffer-protocol object on it).
#![forbid(unsafe_code)]

use std::fmt;

use davinci_shm::SharedMapping;

use crate::error::{Error, Result};
use crate::memory::{range_error, Lease};
use crate::Errno;

/// The address and length of a buffer's host view in this process, and a hold on the buffer:
/// while a `HostMapping` lives, the allocation is neither freed nor unmapped (it holds a lease,
/// like a queued task; [`DeviceBuffer::pending_uses`](crate::DeviceBuffer::pending_uses)
/// counts it). Made by [`DeviceMem::host_mapping`](crate::DeviceMem::host_mapping).
///
/// The shim itself never touches memory through the address (its copies below go through
/// the view's audited mapping): the address is for code that accesses the view directly (through FFI, or a buffer protocol). The rules there are those of any
/// memory shared with a device (CUDA's pinned host memory): the device reads and writes it
/// while tasks that name it run, so host accesses race with device accesses until the
/// stream's `synchronize` (or an event wait) has returned; bytes read meanwhile may be old or
/// new, but the mapping itself stays valid. An imported buffer whose exporter frees it is
/// revoked: on the kernel driver, host accesses then fault (`SIGBUS`).
#[derive(Clone)]
pub struct HostMapping {
    lease: Lease,
    addr: usize,
    len: usize,
}

impl fmt::Debug for HostMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostMapping")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish()
    }
}

impl HostMapping {
    pub(crate) fn new(lease: Lease, addr: usize, len: usize) -> HostMapping {
        HostMapping { lease, addr, len }
    }

    /// The address of the buffer's first byte in this process.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// The buffer's length in bytes (the view covers exactly `addr..addr + len`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is 0 (never, for memory the shim hands out).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The view's mapping and where `[offset, offset + n)` of the buffer starts in it.
    fn span(&self, op: &'static str, offset: usize, n: usize) -> Result<(&SharedMapping, u64)> {
        if offset.checked_add(n).is_none_or(|e| e > self.len) {
            return Err(range_error(op, offset, n, self.len));
        }
        let (map, start) = self.lease.view().ok_or_else(|| {
            Error::new(
                Errno::EINVAL,
                op,
                "this memory has no host view to copy through",
            )
        })?;
        Ok((map, (start + offset) as u64))
    }

    /// Copies `out.len()` bytes of the buffer at `offset` into `out` (at memory speed for
    /// large copies; the rules of the view above apply).
    ///
    /// # Errors
    /// `ERANGE` outside the buffer.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        const OP: &str = "HostMapping::read";
        let (map, at) = self.span(OP, offset, out.len())?;
        map.read(at, out)
            .map_err(|_| range_error(OP, offset, out.len(), self.len))
    }

    /// Copies `data` into the buffer at `offset`.
    ///
    /// # Errors
    /// `ERANGE` outside the buffer.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        const OP: &str = "HostMapping::write";
        let (map, at) = self.span(OP, offset, data.len())?;
        map.write(at, data)
            .map_err(|_| range_error(OP, offset, data.len(), self.len))
    }

    /// As [`write`](Self::write), with non-temporal stores (x86-64): for results this
    /// process will not read back soon, about twice as fast for large writes.
    ///
    /// # Errors
    /// `ERANGE` outside the buffer.
    pub fn write_streaming(&self, offset: usize, data: &[u8]) -> Result<()> {
        const OP: &str = "HostMapping::write_streaming";
        let (map, at) = self.span(OP, offset, data.len())?;
        map.write_streaming(at, data)
            .map_err(|_| range_error(OP, offset, data.len(), self.len))
    }

    /// Copies `len` bytes of this buffer at `offset` into `dst` at `dst_offset`, memory to
    /// memory (no bounce buffer): how a collective moves data between two buffers of this
    /// process, of one device or two.
    ///
    /// # Errors
    /// `ERANGE` either range outside its buffer.
    pub fn copy_to(
        &self,
        offset: usize,
        dst: &HostMapping,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        const OP: &str = "HostMapping::copy_to";
        let (from, at) = self.span(OP, offset, len)?;
        let (to, to_at) = dst.span(OP, dst_offset, len)?;
        from.copy_to(at, to, to_at, len)
            .map_err(|_| range_error(OP, offset, len, self.len))
    }

    /// Copies `len` bytes of this buffer at `offset` into the shared mapping `dst` at
    /// `dst_offset` (a staging segment of several processes).
    ///
    /// # Errors
    /// `ERANGE` either range outside its memory.
    pub fn copy_to_shared(
        &self,
        offset: usize,
        dst: &SharedMapping,
        dst_offset: u64,
        len: usize,
    ) -> Result<()> {
        const OP: &str = "HostMapping::copy_to_shared";
        let (from, at) = self.span(OP, offset, len)?;
        from.copy_to(at, dst, dst_offset, len)
            .map_err(|_| range_error(OP, dst_offset as usize, len, dst.len()))
    }

    /// Copies `len` bytes of the shared mapping `src` at `src_offset` into this buffer at
    /// `offset`.
    ///
    /// # Errors
    /// `ERANGE` either range outside its memory.
    pub fn copy_from_shared(
        &self,
        offset: usize,
        src: &SharedMapping,
        src_offset: u64,
        len: usize,
    ) -> Result<()> {
        const OP: &str = "HostMapping::copy_from_shared";
        let (to, at) = self.span(OP, offset, len)?;
        src.copy_to(src_offset, to, at, len)
            .map_err(|_| range_error(OP, src_offset as usize, len, src.len()))
    }
}

#[cfg(all(test, feature = "embedded"))]
mod tests {
    use crate::{Device, DeviceMem, MemPool};

    #[test]
    fn the_mapping_is_the_view_and_holds_the_buffer() {
        let dev = Device::embedded().unwrap();
        let buf = dev.alloc(4096).unwrap();
        buf.write_slice(0, &[7u32, 8]).unwrap();
        let m = buf.host_mapping();
        assert_eq!(m.len(), 4096);
        assert_eq!(buf.pending_uses(), 1, "the mapping holds a lease");
        let again = buf.host_mapping();
        assert_eq!(again.addr(), m.addr(), "one mapping per buffer");
        drop(again);
        let used = dev.memory_used().unwrap();
        drop(buf);
        assert_eq!(dev.memory_used().unwrap(), used, "not freed while mapped");
        drop(m);
        assert!(
            dev.memory_used().unwrap() < used,
            "freed with the last hold"
        );

        // Pool blocks: inside their chunk's mapping, at their offset.
        let pool = MemPool::new(&dev);
        let (a, b) = (pool.alloc(100).unwrap(), pool.alloc(100).unwrap());
        let (ma, mb) = (a.host_mapping(), b.host_mapping());
        assert_eq!(ma.len(), 100);
        assert_eq!(
            mb.addr() - ma.addr(),
            (b.dev_addr().0 - a.dev_addr().0) as usize
        );
        drop(a);
        assert_eq!(pool.stats().blocks, 2, "the block waits for its mapping");
        drop(ma);
        assert_eq!(pool.stats().blocks, 1);
    }

    #[test]
    fn copies_through_the_view_land_in_the_buffer_and_stay_inside_it() {
        let dev = Device::embedded().unwrap();
        let (a, b) = (dev.alloc(3 * 4096).unwrap(), dev.alloc(8192).unwrap());
        let data: Vec<u8> = (0..3 * 4096).map(|i| (i % 251) as u8).collect();
        let (ma, mb) = (a.host_mapping(), b.host_mapping());
        ma.write(0, &data).unwrap(); // a bulk write
        ma.write_streaming(5, &data[5..9000]).unwrap();
        let mut back = vec![0u8; data.len()];
        a.read(0, &mut back).unwrap();
        assert_eq!(back, data);
        // Buffer to buffer, and a pool block (its chunk's mapping, at its offset).
        ma.copy_to(100, &mb, 7, 5000).unwrap();
        assert_eq!(b.read_vec::<u8>(7, 5000).unwrap(), &data[100..5100]);
        let pool = MemPool::new(&dev);
        let (_first, blk) = (pool.alloc(64).unwrap(), pool.alloc(6000).unwrap());
        let mk = blk.host_mapping();
        mb.copy_to(7, &mk, 0, 5000).unwrap();
        let mut got = vec![0u8; 5000];
        mk.read(0, &mut got).unwrap();
        assert_eq!(got, &data[100..5100]);
        // Outside: ERANGE, nothing written.
        for e in [
            ma.write(3 * 4096 - 1, &[1, 2]).unwrap_err(),
            ma.copy_to(0, &mk, 1, 6000).unwrap_err(),
            mk.read(1, &mut [0u8; 6000]).unwrap_err(),
        ] {
            assert!(e.is(crate::Errno::ERANGE), "{e}");
        }
        assert_eq!(mk.len(), 6000);
        a.read(0, &mut back).unwrap();
        assert_eq!(back, data);
    }
}
