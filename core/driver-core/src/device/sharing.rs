//! Memory shared between clients (ABI 1.4, 1.5): EXPORT_MEMORY names one of a client's
//! allocations by a token and says who may import it; EXPORT_RANGE (1.5) names whole pages
//! of one (a pool's block, not its chunk); IMPORT_MEMORY gives the importer a handle of its
//! own for that memory (same device addresses, same backing, accounted to the exporter).
//!
//! The exporter's FREE_MEMORY revokes the imports of its exports, unless an export is a
//! lease (`DAVINCI_EXPORT_FLAG_LEASE`, 1.5): then the allocation stays, still charged to the
//! exporter but no longer reachable through its handle, until the last import of a lease
//! goes (dma-buf's rule: the memory lives while anyone holds it). The exporter's close
//! revokes every import, leases too: a closed client's memory is reclaimed whole, and the
//! importers' mappings stop reaching it and their descriptors fault (`EACCES`), so nothing
//! reaches the next allocation there.

use davinci_uapi::{
    mmap_offset, ExportMemoryArgs, ExportRangeArgs, Features, ImportMemoryArgs, MmapKind,
    UnexportMemoryArgs, EXPORT_FLAG_FD, EXPORT_FLAG_LEASE, EXPORT_OWN_UID, IMPORT_FLAG_FD,
};

use super::clients::Holding;
use super::entries::{Allocation, ExportEntry};
use super::DeviceCore;
use crate::error::{ensure, fail, Result};
use crate::limits::{MAX_EXPORTS, MAX_IMPORTERS};
use crate::memory::dva;
use crate::platform::Platform;

impl<P: Platform> DeviceCore<P> {
    /// EXPORT_MEMORY: `args.handle`, `uid`, `client` (the importer's `client_id`) and `flags`
    /// in, `token` out. The whole allocation.
    pub fn export_memory(&mut self, client: u32, args: &mut ExportMemoryArgs) -> Result<()> {
        let mut r = ExportRangeArgs {
            handle: args.handle,
            flags: args.flags,
            uid: args.uid,
            client: args.client,
            offset: 0,
            len: 0,
            token: 0,
        };
        self.export(client, &mut r, true)?;
        args.token = r.token;
        Ok(())
    }

    /// EXPORT_RANGE (ABI 1.5): as EXPORT_MEMORY, of `[offset, offset + len)` of the
    /// allocation, whole pages.
    pub fn export_range(&mut self, client: u32, args: &mut ExportRangeArgs) -> Result<()> {
        self.export(client, args, false)
    }

    fn export(&mut self, client: u32, args: &mut ExportRangeArgs, whole: bool) -> Result<()> {
        self.require_client(client)?;
        let (fd_only, lease) = self.export_flags(args.flags)?;
        let (start, len) =
            self.export_range_of(client, args.handle, (args.offset, args.len), whole)?;
        let own_uid = self.client_mut(client)?.params.uid;
        let uid = if args.uid == EXPORT_OWN_UID {
            own_uid
        } else {
            args.uid
        };
        // Exported already, the same range the same way to the same grantee: the same token.
        // (Another grant, range or kind is another export.)
        if let Some((x, e)) = self.exports.iter().find(|(_, e)| {
            e.alloc == args.handle
                && (e.start, e.len) == (start, len)
                && (e.uid, e.client_id) == (uid, args.client)
                && (e.fd_only, e.lease) == (fd_only, lease)
                && !e.ending
        }) {
            args.token = token(x, e.serial);
            return Ok(());
        }
        // While the device is shared, as every table's quota (an exclusive client may take
        // them all).
        self.within_quota(client, Holding::Exports)?;
        self.export_serial = self.export_serial.wrapping_add(1).max(1);
        // Through the device's keyed scramble: unique while the count does not wrap, never
        // 0, and no sequence that would show how many exports other tenants made.
        let serial = self.export_serials.apply(self.export_serial);
        let handle = self.exports.insert(
            ExportEntry {
                alloc: args.handle,
                owner: client,
                uid,
                client_id: args.client,
                serial,
                start,
                len,
                lease,
                ending: false,
                fd_only,
                imports: [0; MAX_IMPORTERS],
            },
            "export table is full (at most 256 exports on a device, memory and events \
             together: free or stop exporting some)",
        )?;
        args.token = token(handle, serial);
        Ok(())
    }

    /// The device-memory range `(start, len)` an export of `client`'s allocation `handle`
    /// names: the whole allocation, or `(offset, len)` of it, whole pages.
    fn export_range_of(
        &self,
        client: u32,
        handle: u32,
        (offset, len): (u64, u64),
        whole: bool,
    ) -> Result<(u64, u64)> {
        let (start, size) = match self.allocations.get(handle) {
            Some(a) if a.owner == client && !a.released => {
                ensure!(
                    a.origin == 0,
                    EINVAL,
                    "an imported allocation cannot be exported again (its owner exports it)"
                );
                (a.offset, a.size)
            }
            _ => fail!(ENOENT, "no such allocation for this client"),
        };
        if whole {
            return Ok((start, size));
        }
        // A power of two (`DeviceCore::new` makes it one).
        let in_page = u64::from(self.config.page_size).wrapping_sub(1);
        ensure!(len > 0, EINVAL, "the range to export is empty (len 0)");
        ensure!(
            (offset | len) & in_page == 0,
            EINVAL,
            "a range's offset and len must be whole pages (multiples of GET_INFO's \
             page_size): an importer maps what it imports, and a page holds nothing else"
        );
        ensure!(
            offset.checked_add(len).is_some_and(|end| end <= size),
            ERANGE,
            "the range runs past the end of the allocation (its alloc_size)"
        );
        Ok((start.saturating_add(offset), len))
    }

    /// UNEXPORT_MEMORY (ABI 1.5): `handle`, `offset`, `len` in; `imports` out.
    pub fn unexport_memory(&mut self, client: u32, args: &mut UnexportMemoryArgs) -> Result<()> {
        self.require_client(client)?;
        ensure!(
            args.flags == 0 && args.pad == 0,
            EINVAL,
            "unexport flags and pad must be 0"
        );
        let whole = args.offset == 0 && args.len == 0;
        let (start, len) =
            self.export_range_of(client, args.handle, (args.offset, args.len), whole)?;
        let h = args.handle;
        let ours = |e: &ExportEntry| e.alloc == h && (e.start, e.len) == (start, len);
        while let Some(x) = self
            .exports
            .find(|e| ours(e) && (!e.lease || !e.imported()))
        {
            self.drop_export(x);
        }
        let mut left = 0;
        for (_, e) in self.exports.iter_mut().filter(|(_, e)| ours(e)) {
            e.ending = true;
            left += e.imports.iter().filter(|&&i| i != 0).count() as u32;
        }
        args.imports = left;
        Ok(())
    }

    /// IMPORT_MEMORY: `args.token` and `flags` in; the rest out.
    pub fn import_memory(&mut self, client: u32, args: &mut ImportMemoryArgs) -> Result<()> {
        self.require_client(client)?;
        let by_fd = self.share_flag(args.flags, IMPORT_FLAG_FD)?;
        let (uid, client_id) = {
            let c = self.client_mut(client)?;
            (c.params.uid, c.client_id)
        };
        let export = args.token as u32;
        // One answer for "no such token" and "not yours": a token says nothing to whom it
        // was not granted. An fd's export is reached through the fd alone; a lease whose
        // owner freed its allocation takes no new import.
        let (alloc, owner, start, len) = match self.exports.get(export) {
            Some(e)
                if e.serial == (args.token >> 32) as u32
                    && (by_fd || !e.fd_only)
                    && e.uid == uid
                    && (e.client_id == 0 || e.client_id == client_id) =>
            {
                (e.alloc, e.owner, e.start, e.len)
            }
            _ => fail!(
                ENOENT,
                "no export with this token for this client (unknown, freed, or granted to \
                 another user or client)"
            ),
        };
        ensure!(
            owner != client,
            EINVAL,
            "the token names an allocation of this client: use its own handle"
        );
        let Some(generation) = self.allocations.get(alloc).map(|a| a.generation) else {
            fail!(EIO, "the exported allocation vanished");
        };
        if let Some(e) = self.exports.get(export) {
            ensure!(
                e.imports.iter().all(|&h| {
                    h == 0 || self.allocations.get(h).is_none_or(|a| a.owner != client)
                }),
                EBUSY,
                "this client imported this export already: use that handle"
            );
            // (An importer asks again to learn whether its import stands: EBUSY first.)
            let released = self.allocations.get(alloc).is_none_or(|a| a.released);
            ensure!(
                !e.ending && !released,
                ENOENT,
                "no export with this token for this client (unknown, freed, or granted to \
                 another user or client)"
            );
            ensure!(
                e.imports.contains(&0),
                ENOSPC,
                "the export has as many imports as it may (8): one must be freed first"
            );
        }
        self.within_quota(client, Holding::Allocations)?;
        let handle = self.allocations.insert(
            Allocation {
                owner: client,
                offset: start,
                size: len,
                generation,
                origin: alloc,
                export,
                released: false,
            },
            "allocation table is full",
        )?;
        if let Some(slot) = self
            .exports
            .get_mut(export)
            .and_then(|e| e.imports.iter_mut().find(|h| **h == 0))
        {
            *slot = handle;
        }
        self.client_mut(client)?.allocations += 1;
        args.handle = handle;
        args.dev_addr = dva(generation, start);
        args.size = len;
        args.mmap_offset = mmap_offset(MmapKind::Memory, handle);
        Ok(())
    }

    /// An export's flags: whether it is an fd, and whether a lease. `EINVAL` for any other
    /// bit, and for the lease on a device without `Features::EXPORT_LEASE` (none lacks it
    /// today: the flag is the device's, not the host's).
    fn export_flags(&self, flags: u32) -> Result<(bool, bool)> {
        let fd_only = self.share_flag(flags & !EXPORT_FLAG_LEASE, EXPORT_FLAG_FD)?;
        Ok((fd_only, flags & EXPORT_FLAG_LEASE != 0))
    }

    /// Whether `flags` (an import's, or an export's without the lease) asks for an fd (`fd`,
    /// the one flag left). `EINVAL` for any other bit, and for the flag on a host that makes
    /// no export fds (as a 1.4 driver answers it; the kernel module's host does,
    /// `Features::EXPORT_FD`, and resolves an import's fd to its token before this runs).
    fn share_flag(&self, flags: u32, fd: u32) -> Result<bool> {
        ensure!(
            flags & !fd == 0,
            EINVAL,
            "unknown flags: export knows the fd (1) and lease (2) flags, import the fd flag"
        );
        if flags == 0 {
            return Ok(false);
        }
        ensure!(
            self.config.platform_features.contains(Features::EXPORT_FD),
            EINVAL,
            "this device's host makes no export fds (GET_INFO has no DAVINCI_FEAT_EXPORT_FD; \
             the kernel module's does): export and import by token"
        );
        Ok(true)
    }

    /// An import goes (its FREE_MEMORY, its client's close, or its export's revocation): its
    /// mappings are revoked, its handle with them. If it was the last import holding a
    /// lease on memory its owner freed, that memory goes too.
    pub(crate) fn drop_import(&mut self, handle: u32) {
        let Some(a) = self.allocations.remove(handle) else {
            return;
        };
        if let Some(e) = self.exports.get_mut(a.export) {
            for h in e.imports.iter_mut().filter(|h| **h == handle) {
                *h = 0;
            }
            // An ended lease goes with its last import.
            if e.ending && !e.imported() {
                self.exports.remove(a.export);
            }
        }
        self.platform
            .revoke_mappings(a.owner, mmap_offset(MmapKind::Memory, handle), a.size);
        if let Ok(c) = self.client_mut(a.owner) {
            c.allocations -= 1;
        }
        let released = self.allocations.get(a.origin).is_some_and(|o| o.released);
        if released
            && self
                .exports
                .find(|e| e.alloc == a.origin && e.imported())
                .is_none()
        {
            self.drop_allocation(a.origin);
        }
    }

    /// An export goes: every import of it first (their waiters, on a stream that now
    /// faults, learn it as any stream's do).
    pub(crate) fn drop_export(&mut self, export: u32) {
        let Some(e) = self.exports.remove(export) else {
            return;
        };
        for h in e.imports.into_iter().filter(|&h| h != 0) {
            if let Some(owner) = self.allocations.get(h).map(|a| a.owner) {
                self.log_event(
                    owner,
                    crate::observe::Event {
                        code: davinci_uapi::DEVICE_EVENT_IMPORT_REVOKED,
                        detail: 1,
                        value: u64::from(h),
                        ..Default::default()
                    },
                );
            }
            self.drop_import(h);
        }
    }

    /// The owner's FREE_MEMORY of allocation `handle` (one of its own, not released): exports
    /// without a lease go with their imports, leases nobody imported go; if a lease still
    /// has imports, the allocation is released (the owner's mappings revoked, the memory
    /// kept for the imports); else it is freed.
    pub(crate) fn free_exported(&mut self, handle: u32) -> Result<()> {
        while let Some(x) = self
            .exports
            .find(|e| e.alloc == handle && (!e.lease || !e.imported()))
        {
            self.drop_export(x);
        }
        if self.exports.find(|e| e.alloc == handle).is_none() {
            return self.free_allocation(handle);
        }
        let Some(a) = self.allocations.get_mut(handle) else {
            fail!(EIO, "the allocation vanished");
        };
        a.released = true;
        let (owner, size) = (a.owner, a.size);
        self.platform
            .revoke_mappings(owner, mmap_offset(MmapKind::Memory, handle), size);
        Ok(())
    }

    /// Allocation `handle` goes whatever holds it (its owner's close, the last import of a
    /// released lease): every export of it with its imports, then its memory.
    pub(crate) fn drop_allocation(&mut self, handle: u32) {
        // Not released while its exports go: an import dropped below must not free it
        // again. (Released, the owner's mappings were revoked already.)
        let released = self
            .allocations
            .get_mut(handle)
            .is_some_and(|a| core::mem::take(&mut a.released));
        while let Some(x) = self.exports.find(|e| e.alloc == handle) {
            self.drop_export(x);
        }
        if let Some(a) = self.allocations.get_mut(handle) {
            a.released = released;
        }
        let _ = self.free_allocation(handle);
    }
}

// The export table's full message says how many.
const _: () = assert!(MAX_EXPORTS == 256);

/// An export's token: its serial above its handle (the handle alone would come round again
/// when the slot is reused).
fn token(export: u32, serial: u32) -> u64 {
    (u64::from(serial) << 32) | u64::from(export)
}
