//! Device memory for C: `davinci_buffer` (one allocation, or a block of a pool) with copies in
//! and out of its host view (direct access: `hostview.rs`), `davinci_pool` (the shim's
//! `MemPool`), export and import.
#![allow(unsafe_code)]

use std::ffi::c_int;

use davinci_shim::{DeviceBuffer, DeviceMem, ExportTo, ExportToken, MemPool, PoolBuffer};
use davinci_shim::{PoolOptions, Region};

use crate::device::davinci_device;
use crate::ffi::{self, get, guard, put, Fail, Out, Res};

/// Device memory with a host view: an allocation (`davinci_buffer_alloc`), a block of a pool
/// (`davinci_pool_alloc`) or an import (`davinci_device_import`). Freed by
/// `davinci_buffer_free`, in stream order: tasks queued on it keep it until they have run.
/// Its bytes are reached from the host by copying (`davinci_buffer_write`,
/// `davinci_buffer_read`) or in place through a host view (`davinci_buffer_map`).
pub struct davinci_buffer {
    pub(crate) mem: Mem,
}

pub(crate) enum Mem {
    Alloc(DeviceBuffer),
    Pool(PoolBuffer),
}

impl davinci_buffer {
    pub(crate) fn len(&self) -> usize {
        match &self.mem {
            Mem::Alloc(b) => b.len(),
            Mem::Pool(b) => b.len(),
        }
    }

    fn dev_addr(&self) -> u64 {
        match &self.mem {
            Mem::Alloc(b) => b.dev_addr().get(),
            Mem::Pool(b) => b.dev_addr().get(),
        }
    }

    /// Bytes `[offset, offset + len)` (`len` `DAVINCI_WHOLE`: to the end) as a region.
    pub(crate) fn region(&self, offset: usize, len: usize) -> Res<Region<'_>> {
        let size = self.len();
        let end = if len == usize::MAX {
            Some(size)
        } else {
            offset.checked_add(len)
        };
        let Some(end) = end.filter(|&e| e <= size && offset <= e) else {
            return Err(Fail::new(
                libc::ERANGE,
                format!("bytes [{offset}, {offset} + {len}) do not lie in the {size}-byte buffer"),
            ));
        };
        let r = match &self.mem {
            Mem::Alloc(b) => Region::range(b, offset..end),
            Mem::Pool(b) => Region::range(b, offset..end),
        };
        Ok(r?)
    }
}

/// Allocates `size` bytes of device memory (`aclrtMalloc`, `cudaMalloc`), zeroed, into
/// `*out`. One driver round trip each: for many small buffers use a pool.
///
/// Returns 0; -EINVAL (`size` 0), -ENOMEM (the device or this client's limit).
///
/// # Safety
/// Threads: any. `dev` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_alloc(
    dev: *const davinci_device,
    size: usize,
    out: *mut *mut davinci_buffer,
) -> c_int {
    guard("davinci_buffer_alloc", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let b = d.dev.alloc(size)?;
        // SAFETY: checked by Out::new; writable by the caller's contract.
        unsafe { out.set(davinci_buffer { mem: Mem::Alloc(b) }) };
        Ok(())
    })
}

/// Frees the buffer: at once if no queued task names it, else once the last such task has
/// run and been reaped by its stream (`davinci_stream_poll`, `davinci_stream_synchronize`)
/// or its stream is destroyed (stream-ordered, like `cudaFreeAsync`); a pool block goes back
/// to its pool then. A host view (`davinci_buffer_map`) holds it likewise until released.
/// Freeing the exporter's buffer revokes its imports. NULL does nothing.
///
/// # Safety
/// Threads: not while another thread uses `buf`. `buf` is NULL or a handle not yet freed.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_free(buf: *mut davinci_buffer) {
    // SAFETY: the caller's contract: NULL or a live handle, no longer used.
    ffi::guard_void("davinci_buffer_free", || unsafe { ffi::free(buf) });
}

/// The buffer's length in bytes into `*out`.
///
/// # Safety
/// Threads: any. `buf` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_size(buf: *const davinci_buffer, out: *mut usize) -> c_int {
    guard("davinci_buffer_size", || {
        // SAFETY: the caller's contract.
        let b = unsafe { get(buf, "buf") }?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", b.len()) }
    })
}

/// The device address of the buffer's first byte into `*out` (what a raw
/// `struct davinci_task_desc` names).
///
/// # Safety
/// Threads: any. `buf` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_dev_addr(
    buf: *const davinci_buffer,
    out: *mut u64,
) -> c_int {
    guard("davinci_buffer_dev_addr", || {
        // SAFETY: the caller's contract.
        let b = unsafe { get(buf, "buf") }?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", b.dev_addr()) }
    })
}

/// Copies `len` bytes from `src` into the buffer at byte `offset`. -ERANGE if they do not
/// fit; `src` may be NULL when `len` is 0.
///
/// # Safety
/// Threads: any (the device may be writing the same bytes: the result is then whichever
/// came last, byte by byte). `buf` a live handle; `src` readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_write(
    buf: *const davinci_buffer,
    offset: usize,
    src: *const std::ffi::c_void,
    len: usize,
) -> c_int {
    guard("davinci_buffer_write", || {
        // SAFETY: the caller's contract.
        let b = unsafe { get(buf, "buf") }?;
        // SAFETY: the caller's contract: readable for len bytes.
        let data = unsafe { ffi::bytes(src.cast::<u8>(), len, "src") }?;
        match &b.mem {
            Mem::Alloc(m) => m.write(offset, data)?,
            Mem::Pool(m) => m.write(offset, data)?,
        }
        Ok(())
    })
}

/// Copies `len` bytes of the buffer from byte `offset` into `dst`. -ERANGE if out of
/// bounds; `dst` may be NULL when `len` is 0.
///
/// # Safety
/// Threads: any. `buf` a live handle; `dst` writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_read(
    buf: *const davinci_buffer,
    offset: usize,
    dst: *mut std::ffi::c_void,
    len: usize,
) -> c_int {
    guard("davinci_buffer_read", || {
        // SAFETY: the caller's contract.
        let b = unsafe { get(buf, "buf") }?;
        // SAFETY: the caller's contract: writable for len bytes.
        let out = unsafe { ffi::bytes_mut(dst.cast::<u8>(), len, "dst") }?;
        match &b.mem {
            Mem::Alloc(m) => m.read(offset, out)?,
            Mem::Pool(m) => m.read(offset, out)?,
        }
        Ok(())
    })
}

/// How many queued tasks name the buffer and have not been reaped yet (its free waits for
/// them; built tasks not yet destroyed and host views not yet released count too), into
/// `*out`.
///
/// # Safety
/// Threads: any. `buf` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_pending_uses(
    buf: *const davinci_buffer,
    out: *mut usize,
) -> c_int {
    guard("davinci_buffer_pending_uses", || {
        // SAFETY: the caller's contract.
        let b = unsafe { get(buf, "buf") }?;
        let n = match &b.mem {
            Mem::Alloc(m) => m.pending_uses(),
            Mem::Pool(m) => m.pending_uses(),
        };
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", n) }
    })
}

/// Whether the exporter freed this imported buffer (or closed), revoking the import: its
/// tasks then fail (`-EIO` naming `EACCES`) and its host view no longer reaches the memory (on
/// the kernel driver and on the mock device alike an access raises `SIGBUS`).
/// `*out` is 1 if so, else 0 (always 0 for this client's own memory and pool blocks). One
/// driver round trip.
///
/// # Safety
/// Threads: any. `buf` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_is_revoked(
    buf: *const davinci_buffer,
    out: *mut c_int,
) -> c_int {
    guard("davinci_buffer_is_revoked", || {
        // SAFETY: the caller's contract.
        let b = unsafe { get(buf, "buf") }?;
        let revoked = match &b.mem {
            Mem::Alloc(m) => m.is_revoked()?,
            Mem::Pool(_) => false,
        };
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", c_int::from(revoked)) }
    })
}

/// Shares an allocation with other clients of the same device (`cudaIpcGetMemHandle`): the
/// token written to `*token` lets them `davinci_device_import` it. `uid`
/// `DAVINCI_EXPORT_OWN_UID` means the exporter's own user; `client_id` 0 any client of that
/// user, else only that client (its `davinci_device_client_id`). The exporter keeps the
/// buffer until the importers are done: its free revokes the imports (or export it under a
/// lease, `davinci_buffer_export_lease`). A pool block is exported alone, not its chunk (it
/// must be whole pages: a pool whose `align` is the page size or more); its return to the
/// pool revokes the imports. Exporting again to the same grantee gives the same token,
/// another grant another export (ABI 1.5; a 1.4 driver: -EBUSY).
///
/// Returns 0; -EINVAL (an imported buffer, a pool block that is not whole pages), -ENOSPC
/// (the tenant's export quota, or the device's 256 exports).
///
/// # Safety
/// Threads: any. `buf` a live handle; `token` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_export(
    buf: *const davinci_buffer,
    uid: u32,
    client_id: u32,
    token: *mut u64,
) -> c_int {
    guard("davinci_buffer_export", || {
        // SAFETY: the caller's contract.
        let b = unsafe { get(buf, "buf") }?;
        let to = export_to(uid, client_id);
        let t = match &b.mem {
            Mem::Alloc(m) => m.export(to)?,
            Mem::Pool(p) => p.export(to, davinci_shim::Lifetime::Revoke)?,
        };
        // SAFETY: the caller's contract.
        unsafe { put(token, "token", t.0) }
    })
}

/// Whom `uid` and `client_id` name, as `davinci_buffer_export` reads them.
pub(crate) fn export_to(uid: u32, client_id: u32) -> ExportTo {
    match (uid, client_id) {
        (u32::MAX, 0) => ExportTo::SameUser,
        (uid, 0) => ExportTo::User(uid),
        (uid, client_id) => ExportTo::Client {
            uid: (uid != u32::MAX).then_some(uid),
            client_id,
        },
    }
}

/// Shares an allocation as a file descriptor (ABI 1.5, the kernel module's devices:
/// `DAVINCI_FEAT_EXPORT_FD`), written to `*fd`: the right to import it, for the clients `uid`
/// and `client_id` name (as `davinci_buffer_export`), with `davinci_device_import_fd`. Send it
/// over a Unix socket (`SCM_RIGHTS`) or let a child inherit it (it is close-on-exec); no other
/// process can guess it, as it could a token. The caller owns the descriptor (`close` it when
/// sent); closing it ends nothing: the buffer's free revokes the imports, as for a token.
///
/// Returns 0; -EINVAL (a device without export fds: davinci-mockd and the embedded mock
/// export by token; a pool block or an imported buffer), -EMFILE (no descriptor free: the same call later makes it), -ENOSPC.
///
/// # Safety
/// Threads: any. `buf` a live handle; `fd` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_export_fd(
    buf: *const davinci_buffer,
    uid: u32,
    client_id: u32,
    fd: *mut c_int,
) -> c_int {
    guard("davinci_buffer_export_fd", || {
        // SAFETY: the caller's contract.
        let b = unsafe { get(buf, "buf") }?;
        let Mem::Alloc(m) = &b.mem else {
            return Err(Fail::inval(
                "a pool block cannot be exported (it shares its chunk with other blocks): \
                 allocate the buffer with davinci_buffer_alloc",
            ));
        };
        if fd.is_null() {
            // Checked first: a descriptor made for nobody would be lost.
            return Err(Fail::inval("fd (out-parameter) is NULL"));
        }
        let owned = m.export_fd(export_to(uid, client_id))?;
        // SAFETY: not NULL (above); writable by the caller's contract. The descriptor is the
        // caller's from here.
        unsafe { put(fd, "fd", std::os::fd::IntoRawFd::into_raw_fd(owned)) }
    })
}

/// Imports the memory an export fd names (`davinci_buffer_export_fd`, received from the
/// exporter) into `*out`, as `davinci_device_import` does for a token. `fd` stays the
/// caller's (the buffer keeps a duplicate of its own).
///
/// Returns 0; -EBADF (`fd` is not an open descriptor), -EINVAL (a descriptor that is not an
/// export fd, or a device without export fds), -ENOENT (an export of another device, freed,
/// or not granted to this client), -EBUSY (imported already), -ENOSPC.
///
/// # Safety
/// Threads: any. `dev` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_import_fd(
    dev: *const davinci_device,
    fd: c_int,
    out: *mut *mut davinci_buffer,
) -> c_int {
    guard("davinci_device_import_fd", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let b = d.dev.import_fd_number(fd)?;
        // SAFETY: checked by Out::new; writable by the caller's contract.
        unsafe { out.set(davinci_buffer { mem: Mem::Alloc(b) }) };
        Ok(())
    })
}

/// Imports memory another client exported (`cudaIpcOpenMemHandle`) into `*out`: a buffer of
/// this client at the same device address, whose host view sees the same bytes. Freeing it
/// drops the import only.
///
/// Returns 0; -ENOENT (a token unknown, freed, or not granted to this client), -EBUSY
/// (imported already), -ENOSPC, -EINVAL (a token of this client's own memory).
///
/// # Safety
/// Threads: any. `dev` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_import(
    dev: *const davinci_device,
    token: u64,
    out: *mut *mut davinci_buffer,
) -> c_int {
    guard("davinci_device_import", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let b = d.dev.import(ExportToken(token))?;
        // SAFETY: checked by Out::new; writable by the caller's contract.
        unsafe { out.set(davinci_buffer { mem: Mem::Alloc(b) }) };
        Ok(())
    })
}

/// A caching allocator of device memory (the shim's `MemPool`): blocks carved from big
/// driver allocations, reused once freed. Made by `davinci_pool_create`, freed by
/// `davinci_pool_destroy` (its blocks keep what they need).
pub struct davinci_pool {
    pub(crate) pool: MemPool,
}

/// A pool's sizes and bounds (`davinci_pool_options_default` fills the defaults).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct davinci_pool_options {
    /// Bytes reserved per driver allocation (larger requests get a chunk of their own).
    pub chunk_size: usize,
    /// Most device memory the pool holds at once; beyond it allocations fail with -ENOMEM.
    pub max_bytes: u64,
    /// Block alignment and granularity: a power of two, at least 64 (raised if not).
    pub align: usize,
}

/// What a pool holds and has done (`davinci_pool_get_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct davinci_pool_stats {
    /// Chunks reserved from the driver now.
    pub chunks: usize,
    /// Bytes reserved from the driver now.
    pub reserved_bytes: u64,
    /// Bytes handed out in live blocks (rounded to the alignment).
    pub in_use_bytes: u64,
    /// Live blocks (a freed block with work queued on it is live until that work is reaped).
    pub blocks: usize,
    /// Blocks handed out so far.
    pub allocs: u64,
    /// Driver allocations made so far (one per chunk).
    pub driver_allocs: u64,
    /// Chunks given back to the driver so far (`davinci_pool_trim`).
    pub driver_frees: u64,
}

/// The default pool options (4 MiB chunks, at most 256 MiB, 64-byte blocks) into `*out`.
///
/// # Safety
/// Threads: any. `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_pool_options_default(out: *mut davinci_pool_options) -> c_int {
    guard("davinci_pool_options_default", || {
        let d = PoolOptions::default();
        let o = davinci_pool_options {
            chunk_size: d.chunk_size,
            max_bytes: d.max_bytes,
            align: d.align,
        };
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", o) }
    })
}

/// Creates a pool on `dev` with `opts` (NULL: the defaults) into `*out`. Reserves nothing
/// until the first allocation. A `chunk_size` above `max_bytes` is lowered to it.
///
/// Returns 0; -EINVAL for options that could never allocate (`chunk_size` or `max_bytes` 0,
/// `max_bytes` below the smallest chunk the device can give: the message says the least
/// that would do).
///
/// # Safety
/// Threads: any. `dev` a live handle; `opts` NULL or readable; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_pool_create(
    dev: *const davinci_device,
    opts: *const davinci_pool_options,
    out: *mut *mut davinci_pool,
) -> c_int {
    guard("davinci_pool_create", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        // SAFETY: the caller's contract: NULL or readable.
        let options = match unsafe { opts.as_ref() } {
            None => PoolOptions::default(),
            Some(o) => {
                if o.chunk_size == 0 || o.max_bytes == 0 {
                    return Err(Fail::inval(format!(
                        "opts: chunk_size {} and max_bytes {} must not be 0",
                        o.chunk_size, o.max_bytes
                    )));
                }
                PoolOptions::default()
                    .chunk_size(o.chunk_size)
                    .max_bytes(o.max_bytes)
                    .align(o.align)
            }
        };
        // Options that can never allocate are refused here, not at every allocation.
        let pool = MemPool::try_with_options(&d.dev, options)?;
        // SAFETY: checked by Out::new; writable by the caller's contract.
        unsafe { out.set(davinci_pool { pool }) };
        Ok(())
    })
}

/// Frees this handle of the pool. Its live blocks keep their chunks (and the pool's state)
/// until they are freed too. NULL does nothing.
///
/// # Safety
/// Threads: not while another thread uses `pool`. `pool` is NULL or a handle not yet
/// destroyed.
#[no_mangle]
pub unsafe extern "C" fn davinci_pool_destroy(pool: *mut davinci_pool) {
    // SAFETY: the caller's contract: NULL or a live handle, no longer used.
    ffi::guard_void("davinci_pool_destroy", || unsafe { ffi::free(pool) });
}

/// A block of at least `size` bytes (64-byte aligned device address; zeroed only if never
/// used before) into `*out`, a `davinci_buffer` like any other (freed by
/// `davinci_buffer_free`). -EINVAL for `size` 0, -ENOMEM beyond `max_bytes`.
///
/// # Safety
/// Threads: any (the pool locks). `pool` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_pool_alloc(
    pool: *const davinci_pool,
    size: usize,
    out: *mut *mut davinci_buffer,
) -> c_int {
    guard("davinci_pool_alloc", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let p = unsafe { get(pool, "pool") }?;
        let b = p.pool.alloc(size)?;
        // SAFETY: checked by Out::new; writable by the caller's contract.
        unsafe { out.set(davinci_buffer { mem: Mem::Pool(b) }) };
        Ok(())
    })
}

/// The pool's counters into `*out`.
///
/// # Safety
/// Threads: any. `pool` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_pool_get_stats(
    pool: *const davinci_pool,
    out: *mut davinci_pool_stats,
) -> c_int {
    guard("davinci_pool_get_stats", || {
        // SAFETY: the caller's contract.
        let p = unsafe { get(pool, "pool") }?;
        let s = p.pool.stats();
        let v = davinci_pool_stats {
            chunks: s.chunks,
            reserved_bytes: s.reserved_bytes,
            in_use_bytes: s.in_use_bytes,
            blocks: s.blocks,
            allocs: s.allocs,
            driver_allocs: s.driver_allocs,
            driver_frees: s.driver_frees,
        };
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", v) }
    })
}

/// Gives the chunks with no live block back to the driver; how many into `*released`
/// (NULL: not wanted).
///
/// # Safety
/// Threads: any. `pool` a live handle; `released` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_pool_trim(
    pool: *const davinci_pool,
    released: *mut usize,
) -> c_int {
    guard("davinci_pool_trim", || {
        // SAFETY: the caller's contract.
        let p = unsafe { get(pool, "pool") }?;
        let n = p.pool.trim();
        // SAFETY: the caller's contract: NULL or writable.
        unsafe { ffi::put_opt(released, n) };
        Ok(())
    })
}
