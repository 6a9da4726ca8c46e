//! Export leases, ranges and unexport for C (ABI 1.5, `DAVINCI_FEAT_EXPORT_LEASE`): memory
//! that outlives its exporter's free while imported, whole pages of an allocation or one
//! pool block exported alone, and exports ended without freeing.
#![allow(unsafe_code)]

use std::ffi::c_int;

use davinci_shim::Lifetime;

use crate::ffi::{get, guard, put, Fail};
use crate::memory::{davinci_buffer, davinci_pool, export_to, Mem};

fn lifetime(lease: c_int) -> Lifetime {
    if lease != 0 {
        Lifetime::Lease
    } else {
        Lifetime::Revoke
    }
}

/// Shares an allocation, or one pool block alone (not its chunk), under a lease: as
/// `davinci_buffer_export`, but `davinci_buffer_free` leaves the memory to the importers
/// until the last of them frees its import (still charged to the exporter meanwhile). The
/// exporter's close (its process's end) still revokes every import. A pool block must be
/// whole pages (a pool whose `align` is the device's page size or more); freed, it is held
/// out of reuse until its imports go.
///
/// Returns 0; -EINVAL (an imported buffer, a block that is not whole pages, a device without
/// leases), -ENOSPC (the tenant's export quota, or the device's 256 exports).
///
/// # Safety
/// Threads: any. `buf` a live handle; `token` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_export_lease(
    buf: *const davinci_buffer,
    uid: u32,
    client_id: u32,
    token: *mut u64,
) -> c_int {
    guard("davinci_buffer_export_lease", || {
        // SAFETY: the caller's contract.
        let b = unsafe { get(buf, "buf") }?;
        let to = export_to(uid, client_id);
        let t = match &b.mem {
            Mem::Alloc(m) => m.export_lease(to)?,
            Mem::Pool(p) => p.export(to, Lifetime::Lease)?,
        };
        // SAFETY: the caller's contract.
        unsafe { put(token, "token", t.0) }
    })
}

/// Shares whole pages of an allocation, `[offset, offset + len)` (multiples of the device's
/// `page_size`): an importer reaches those pages alone. `lease` non-zero: under a lease (as
/// `davinci_buffer_export_lease`). For a pool block, `offset` and `len` must be 0 (the block
/// whole; its return to the pool ends the export).
///
/// Returns 0; -EINVAL (not whole pages, empty, an imported buffer, a device without ranges),
/// -ERANGE (past the allocation's end), -ENOSPC.
///
/// # Safety
/// Threads: any. `buf` a live handle; `token` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_export_range(
    buf: *const davinci_buffer,
    offset: u64,
    len: u64,
    uid: u32,
    client_id: u32,
    lease: c_int,
    token: *mut u64,
) -> c_int {
    guard("davinci_buffer_export_range", || {
        // SAFETY: the caller's contract.
        let b = unsafe { get(buf, "buf") }?;
        let to = export_to(uid, client_id);
        let t = match &b.mem {
            Mem::Alloc(m) => {
                let (Ok(o), Ok(n)) = (usize::try_from(offset), usize::try_from(len)) else {
                    return Err(Fail::inval("offset or len larger than the address space"));
                };
                m.export_range(o, n, to, lifetime(lease))?
            }
            Mem::Pool(p) if offset == 0 && len == 0 => p.export(to, lifetime(lease))?,
            Mem::Pool(_) => {
                return Err(Fail::inval(
                    "a pool block is exported whole: pass offset and len 0",
                ))
            }
        };
        // SAFETY: the caller's contract.
        unsafe { put(token, "token", t.0) }
    })
}

/// Ends the exports of an allocation's range (`offset` and `len` as exported; both 0: the
/// whole allocation's exports), keeping the allocation: imports without a lease are revoked
/// now; a lease takes no new import and ends with its last import. `*imports` (if not
/// NULL): imports of leases still standing (0: the memory is the caller's alone again; call
/// again to learn when).
///
/// Returns 0; -EINVAL (a pool block: its exports end when it is freed; not whole pages),
/// -ENOENT (not an allocation of this client).
///
/// # Safety
/// Threads: any. `buf` a live handle; `imports` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_unexport(
    buf: *const davinci_buffer,
    offset: u64,
    len: u64,
    imports: *mut u32,
) -> c_int {
    guard("davinci_buffer_unexport", || {
        // SAFETY: the caller's contract.
        let b = unsafe { get(buf, "buf") }?;
        let Mem::Alloc(m) = &b.mem else {
            return Err(Fail::inval(
                "a pool block's exports end when the block is freed (davinci_buffer_free)",
            ));
        };
        let (Ok(o), Ok(n)) = (usize::try_from(offset), usize::try_from(len)) else {
            return Err(Fail::inval("offset or len larger than the address space"));
        };
        let left = if o == 0 && n == 0 {
            m.unexport()?
        } else {
            m.unexport_range(o, n)?
        };
        if imports.is_null() {
            return Ok(());
        }
        // SAFETY: not NULL; writable by the caller's contract.
        unsafe { put(imports, "imports", left) }
    })
}

/// Blocks of `pool` freed while imported under a lease, held out of reuse until their
/// imports go, into `*out` (looked at again when the pool needs room, and by
/// `davinci_pool_trim`).
///
/// # Safety
/// Threads: any. `pool` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_pool_leased_blocks(
    pool: *const davinci_pool,
    out: *mut usize,
) -> c_int {
    guard("davinci_pool_leased_blocks", || {
        // SAFETY: the caller's contract.
        let p = unsafe { get(pool, "pool") }?;
        let n = p.pool.stats().leased_blocks;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", n) }
    })
}
