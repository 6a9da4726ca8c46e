//! [`HostMapping`]: where the host view of a buffer is mapped in this process, with a hold
//! that keeps the buffer (and so the mapping) alive: what a language binding needs to lend
//! the view out without copying (the Python package's `Buffer.view()` builds its
//! buffer-protocol object on it).
#![forbid(unsafe_code)]

use std::fmt;

use crate::memory::Lease;

/// The address and length of a buffer's host view in this process, and a hold on the buffer:
/// while a `HostMapping` lives, the allocation is neither freed nor unmapped (it holds a lease,
/// like a queued task; [`DeviceBuffer::pending_uses`](crate::DeviceBuffer::pending_uses)
/// counts it). Made by [`DeviceMem::host_mapping`](crate::DeviceMem::host_mapping).
///
/// The shim itself never touches memory through the address: it is for code that accesses
/// the view directly (through FFI, or a buffer protocol). The rules there are those of any
/// memory shared with a device (CUDA's pinned host memory): the device reads and writes it
/// while tasks that name it run, so host accesses race with device accesses until the
/// stream's `synchronize` (or an event wait) has returned; bytes read meanwhile may be old or
/// new, but the mapping itself stays valid. An imported buffer whose exporter frees it is
/// revoked: on the kernel driver, host accesses then fault (`SIGBUS`).
#[derive(Clone)]
pub struct HostMapping {
    _lease: Lease,
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
        HostMapping {
            _lease: lease,
            addr,
            len,
        }
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
}
