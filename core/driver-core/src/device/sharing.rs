//! Memory shared between clients (ABI 1.4): EXPORT_MEMORY names one of a client's
//! allocations by a token and says who may import it; IMPORT_MEMORY gives the importer a
//! handle of its own for the same memory (same device address, same backing, accounted to
//! the exporter). The exporter's FREE_MEMORY or close revokes every import: the importers'
//! mappings stop reaching the memory and their descriptors fault (`EACCES`), so the memory
//! never outlives its owner's accounting and nothing reaches the next allocation there.

use davinci_uapi::{
    mmap_offset, ExportMemoryArgs, Features, ImportMemoryArgs, MmapKind, EXPORT_FLAG_FD,
    EXPORT_OWN_UID, IMPORT_FLAG_FD,
};

use super::clients::Holding;
use super::entries::{Allocation, ExportEntry};
use super::DeviceCore;
use crate::error::{ensure, fail, Result};
use crate::limits::MAX_IMPORTERS;
use crate::memory::dva;
use crate::platform::Platform;

impl<P: Platform> DeviceCore<P> {
    /// EXPORT_MEMORY: `args.handle`, `uid`, `client` (the importer's `client_id`) and `flags`
    /// in, `token` out.
    pub fn export_memory(&mut self, client: u32, args: &mut ExportMemoryArgs) -> Result<()> {
        self.require_client(client)?;
        let fd_only = self.share_flag(args.flags, EXPORT_FLAG_FD)?;
        let (origin, export) = match self.allocations.get(args.handle) {
            Some(a) if a.owner == client => (a.origin, a.export),
            _ => fail!(ENOENT, "no such allocation for this client"),
        };
        ensure!(
            origin == 0,
            EINVAL,
            "an imported allocation cannot be exported again (its owner exports it)"
        );
        let own_uid = self.client_mut(client)?.params.uid;
        let uid = if args.uid == EXPORT_OWN_UID {
            own_uid
        } else {
            args.uid
        };
        if export != 0 {
            // Exported already: the same token, the grant unchanged.
            let Some(e) = self.exports.get(export) else {
                fail!(EIO, "the allocation's export vanished");
            };
            ensure!(
                e.uid == uid && e.client_id == args.client,
                EBUSY,
                "the allocation is exported already, to another user or client (one export \
                 per allocation: free it, or export a new allocation)"
            );
            ensure!(
                e.fd_only == fd_only,
                EBUSY,
                "the allocation is exported already, the other way (as an fd or as a token: \
                 one export per allocation)"
            );
            args.token = token(export, e.serial);
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
                fd_only,
                imports: [0; MAX_IMPORTERS],
            },
            "export table is full (at most 64 exports on a device: free or stop exporting \
             some)",
        )?;
        if let Some(a) = self.allocations.get_mut(args.handle) {
            a.export = handle;
        }
        args.token = token(handle, serial);
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
        // was not granted. An fd's export is reached through the fd alone.
        let (alloc, owner) = match self.exports.get(export) {
            Some(e)
                if e.serial == (args.token >> 32) as u32
                    && (by_fd || !e.fd_only)
                    && e.uid == uid
                    && (e.client_id == 0 || e.client_id == client_id) =>
            {
                (e.alloc, e.owner)
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
        let Some(&Allocation {
            offset,
            size,
            generation,
            ..
        }) = self.allocations.get(alloc)
        else {
            fail!(EIO, "the exported allocation vanished");
        };
        if let Some(e) = self.exports.get(export) {
            ensure!(
                e.imports.iter().all(|&h| {
                    h == 0 || self.allocations.get(h).is_none_or(|a| a.owner != client)
                }),
                EBUSY,
                "this client imported the allocation already: use that handle"
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
                offset,
                size,
                generation,
                origin: alloc,
                export: 0,
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
        args.dev_addr = dva(generation, offset);
        args.size = size;
        args.mmap_offset = mmap_offset(MmapKind::Memory, handle);
        Ok(())
    }

    /// Whether `flags` (an export's or import's) asks for an fd (`fd`, the one flag there
    /// is). `EINVAL` for any other bit, and for the flag on a host that makes no export fds
    /// (as a 1.4 driver answers it; the kernel module's host does, `Features::EXPORT_FD`,
    /// and resolves an import's fd to its token before this runs).
    fn share_flag(&self, flags: u32, fd: u32) -> Result<bool> {
        ensure!(
            flags & !fd == 0,
            EINVAL,
            "unknown flags: export and import know only the fd flag (1)"
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

    /// An import goes (its FREE_MEMORY, its client's close, or its exporter's free): its
    /// mappings are revoked, its handle with them. The memory stays the exporter's.
    pub(crate) fn drop_import(&mut self, handle: u32) {
        let Some(a) = self.allocations.remove(handle) else {
            return;
        };
        if let Some(e) = self
            .allocations
            .get(a.origin)
            .map(|o| o.export)
            .and_then(|x| self.exports.get_mut(x))
        {
            for h in e.imports.iter_mut().filter(|h| **h == handle) {
                *h = 0;
            }
        }
        self.platform
            .revoke_mappings(a.owner, mmap_offset(MmapKind::Memory, handle), a.size);
        if let Ok(c) = self.client_mut(a.owner) {
            c.allocations -= 1;
        }
    }

    /// An exported allocation is being freed: every import of it goes first, then the
    /// export.
    pub(crate) fn drop_export(&mut self, export: u32) {
        let Some(e) = self.exports.remove(export) else {
            return;
        };
        for h in e.imports.into_iter().filter(|&h| h != 0) {
            self.drop_import(h);
            // Their waiters (a WAIT_EVENT on a stream that now faults) learn it as any
            // stream's do; nothing else to tell.
        }
    }
}

/// An export's token: its serial above its handle (the handle alone would come round again
/// when the slot is reused).
fn token(export: u32, serial: u32) -> u64 {
    (u64::from(serial) << 32) | u64::from(export)
}
