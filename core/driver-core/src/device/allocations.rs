//! Allocations: ALLOC_MEMORY and FREE_MEMORY, a client's device memory within its limit. The
//! allocator itself (where an allocation lies) is `crate::memory`; the platform backs each
//! range for its client.

use davinci_uapi::{mmap_offset, AllocMemoryArgs, MmapKind};

use super::clients::Holding;
use super::entries::Allocation;
use super::DeviceCore;
use crate::error::{ensure, fail, Result};
use crate::memory::dva;
use crate::platform::Platform;

impl<P: Platform> DeviceCore<P> {
    /// What an ALLOC_MEMORY of `size` by `client` would back now: the rounded size, if the
    /// call would pass the checks that do not move anything (the client, the size, its
    /// allocation quota and its memory). A host whose backings are costly to make (the kernel
    /// module zeroes them) makes one this size before it takes the device for the call, and
    /// hands it to the platform; the call itself checks everything again.
    pub fn alloc_backing_size(&self, client: u32, size: u64) -> Result<u64> {
        self.require_client(client)?;
        ensure!(size > 0, EINVAL, "allocation size is 0");
        let Some(rounded) = self.memory.round(size) else {
            fail!(EOVERFLOW, "allocation size overflows");
        };
        self.within_quota(client, Holding::Allocations)?;
        self.within_memory(client, rounded)?;
        Ok(rounded)
    }

    /// ALLOC_MEMORY: `args.size` and `args.flags` in; the rest out.
    pub fn alloc_memory(&mut self, client: u32, args: &mut AllocMemoryArgs) -> Result<()> {
        self.require_client(client)?;
        ensure!(args.flags == 0, EINVAL, "alloc flags must be 0");
        ensure!(args.size > 0, EINVAL, "allocation size is 0");
        let Some(rounded) = self.memory.round(args.size) else {
            fail!(EOVERFLOW, "allocation size overflows");
        };
        self.within_quota(client, Holding::Allocations)?;
        self.within_memory(client, rounded)?;
        // Reserve a handle first (so a full table fails before memory moves).
        let handle = self.allocations.insert(
            Allocation {
                owner: client,
                offset: 0,
                size: 0,
                generation: 0,
                origin: 0,
                export: 0,
                released: false,
            },
            "allocation table is full",
        )?;
        let (offset, size) = match self.memory.allocate(rounded, handle) {
            Ok(v) => v,
            Err(e) => {
                self.allocations.remove(handle);
                return Err(e);
            }
        };
        if let Err(e) = self.platform.alloc_backing(client, offset, size) {
            let _ = self.memory.free(offset, handle);
            self.allocations.remove(handle);
            return Err(e);
        }
        let generation = self.memory.take_generation();
        if let Some(a) = self.allocations.get_mut(handle) {
            a.offset = offset;
            a.size = size;
            a.generation = generation;
        }
        let c = self.client_mut(client)?;
        c.allocations += 1;
        c.memory += size;
        args.handle = handle;
        args.dev_addr = dva(generation, offset);
        args.alloc_size = size;
        args.mmap_offset = mmap_offset(MmapKind::Memory, handle);
        Ok(())
    }

    /// FREE_MEMORY: of an allocation (the imports of its exports are revoked first, but for
    /// leases: `free_exported`), or of an import (the memory stays its exporter's).
    pub fn free_memory(&mut self, client: u32, handle: u32) -> Result<()> {
        let origin = match self.allocations.get(handle) {
            Some(a) if a.owner == client && !a.released => a.origin,
            _ => fail!(ENOENT, "no such allocation for this client"),
        };
        if origin != 0 {
            self.drop_import(handle);
            return Ok(());
        }
        if self.exports.find(|e| e.alloc == handle).is_some() {
            return self.free_exported(handle);
        }
        self.free_allocation(handle)
    }

    /// Allocation `handle` (its own, nothing exporting it any more) goes: its owner's
    /// mappings, its memory, its backing, its charge.
    pub(crate) fn free_allocation(&mut self, handle: u32) -> Result<()> {
        let Some(&Allocation {
            owner,
            offset,
            size,
            released,
            ..
        }) = self.allocations.get(handle)
        else {
            fail!(ENOENT, "no such allocation");
        };
        self.memory.free(offset, handle)?;
        self.allocations.remove(handle);
        if !released {
            self.platform
                .revoke_mappings(owner, mmap_offset(MmapKind::Memory, handle), size);
        }
        self.platform.free_backing(owner, offset, size);
        let c = self.client_mut(owner)?;
        c.allocations -= 1;
        c.memory -= size;
        Ok(())
    }
}
