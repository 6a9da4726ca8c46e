// SPDX-License-Identifier: GPL-2.0

//! Exports as capabilities (issue 42, build 8), on either kind of node: EXPORT_MEMORY with
//! `DAVINCI_EXPORT_FLAG_FD` returns a file descriptor that names the export (`export.c`: an
//! anonymous-inode file holding which device and the token), and IMPORT_MEMORY with
//! `DAVINCI_IMPORT_FLAG_FD` takes one: the module resolves the fd to its token before the
//! device sees the call, so the device (driver-core, or the PCI device's) only ever sees
//! tokens, with the flag telling it the import came through an fd (an fd export is reached no
//! other way). A token is a name anyone who learns it may try; the fd is a right the process
//! holds, passed over `SCM_RIGHTS` as dma-buf's are, and unguessable across containers that
//! share a host uid (the GEM flink mistake the review named).

use core::ffi::c_void;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::bindings;
use kernel::ffi::{c_int, c_uint};

use crate::davinci_driver_core::Error as CoreError;
use crate::davinci_uapi::{
    Errno, ExportMemoryArgs, ExportRangeArgs, ImportMemoryArgs, Wire, DRIVER_CMD_EXPORT_MEMORY,
    DRIVER_CMD_EXPORT_RANGE, DRIVER_CMD_IMPORT_MEMORY, EXPORT_FLAG_FD, IMPORT_FLAG_FD,
};

extern "C" {
    fn davinci_export_fd_prepare(instance: u64, token: u64, out: *mut *mut c_void) -> c_int;
    fn davinci_export_fd_commit(fd: c_int, file: *mut c_void);
    fn davinci_export_fd_abort(fd: c_int, file: *mut c_void);
    fn davinci_export_fd_name(fd: c_uint, instance: *mut u64, token: *mut u64) -> c_int;
}

/// The next PCI device's instance (never reused while the module is loaded: a re-probed
/// device is another instance, so an fd of the old one names nothing on the new one).
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// A new PCI device's instance.
pub(crate) fn next_instance() -> u64 {
    NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed)
}

/// The instance of software device `index` (it lives as long as the module, and an export
/// fd keeps the module loaded); disjoint from the PCI devices' ones.
pub(crate) fn software_instance(index: usize) -> u64 {
    (1 << 63) | index as u64
}

/// A negative errno from C as an error of the ABI's, saying `what` failed.
fn c_error(rc: c_int, what: &'static str) -> CoreError {
    let e = Errno::from_code(-rc).unwrap_or(Errno::EMFILE);
    CoreError::new(e, what)
}

/// Before the device sees `cmd`: an IMPORT_MEMORY through an fd gets its token in place of
/// the fd (the flag kept). `Ok(Some(fd))` then, to put back with [`restore_import`];
/// `Ok(None)` for any other call. `EBADF` (no such descriptor), `EINVAL` (a descriptor, not
/// an export's), `ENOENT` (an export of another device: what a token that names nothing here
/// gets).
pub(crate) fn resolve_import(
    cmd: u32,
    arg: &mut [u8],
    instance: u64,
) -> Result<Option<u64>, CoreError> {
    if cmd != DRIVER_CMD_IMPORT_MEMORY {
        return Ok(None);
    }
    let Some(mut a) = ImportMemoryArgs::from_bytes(arg) else {
        return Ok(None);
    };
    if a.flags & IMPORT_FLAG_FD == 0 {
        return Ok(None);
    }
    let fd = a.token;
    let bad = || {
        CoreError::new(
            Errno::EBADF,
            "the import's fd (token, with DAVINCI_IMPORT_FLAG_FD) is not an open descriptor",
        )
    };
    let raw = c_uint::try_from(fd).map_err(|_| bad())?;
    let (mut inst, mut token) = (0u64, 0u64);
    // SAFETY: both out-pointers are to locals alive for the call; the helper takes and
    // drops its own reference to the file.
    match unsafe { davinci_export_fd_name(raw, &mut inst, &mut token) } {
        0 => {}
        rc if rc == -(bindings::EBADF as c_int) => return Err(bad()),
        _ => {
            return Err(CoreError::new(
                Errno::EINVAL,
                "the import's fd is not an export fd (EXPORT_MEMORY with DAVINCI_EXPORT_FLAG_FD \
                 makes them)",
            ))
        }
    }
    if inst != instance {
        return Err(CoreError::new(
            Errno::ENOENT,
            "the fd names an export of another device (or of one removed since)",
        ));
    }
    a.token = token;
    a.encode(arg);
    Ok(Some(fd))
}

/// After the device answered an import through an fd: the caller's fd back in `token` (the
/// token never leaves the kernel).
pub(crate) fn restore_import(arg: &mut [u8], fd: u64) {
    if let Some(mut a) = ImportMemoryArgs::from_bytes(arg) {
        a.token = fd;
        a.encode(arg);
    }
}

/// An export fd made but not yet given to the process: [`commit`](Self::commit) once the
/// reply that carries it reached the caller; dropped, the descriptor never appears (the
/// export stays, as after any lost EXPORT_MEMORY reply, and the same call again makes a new
/// fd for it).
pub(crate) struct PendingFd {
    fd: c_int,
    file: *mut c_void,
}

impl PendingFd {
    /// The descriptor goes into the caller's table.
    pub(crate) fn commit(self) {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `fd` was reserved and `file` made by `davinci_export_fd_prepare` for this
        // task, neither committed nor aborted before (`self` is consumed, its drop skipped).
        unsafe { davinci_export_fd_commit(this.fd, this.file) };
    }
}

impl Drop for PendingFd {
    fn drop(&mut self) {
        // SAFETY: as in `commit`: reserved and made for this task, used once (drop runs
        // only when `commit` did not).
        unsafe { davinci_export_fd_abort(self.fd, self.file) };
    }
}

/// Whether `cmd` with argument `arg` (the caller's request, before the device answered it:
/// what a PCI device writes back is not trusted for this) asks for an export fd.
pub(crate) fn wants_fd(cmd: u32, arg: &[u8]) -> bool {
    match cmd {
        DRIVER_CMD_EXPORT_MEMORY => {
            ExportMemoryArgs::from_bytes(arg).is_some_and(|a| a.flags & EXPORT_FLAG_FD != 0)
        }
        DRIVER_CMD_EXPORT_RANGE => {
            ExportRangeArgs::from_bytes(arg).is_some_and(|a| a.flags & EXPORT_FLAG_FD != 0)
        }
        _ => false,
    }
}

/// An export's reply (EXPORT_MEMORY's or EXPORT_RANGE's, told by size): its token, and a
/// way to write another in its place.
fn reply_token(reply: &mut [u8]) -> Option<(u64, fn(&mut [u8], u64))> {
    fn set_memory(r: &mut [u8], t: u64) {
        if let Some(mut a) = ExportMemoryArgs::from_bytes(r) {
            a.token = t;
            a.encode(r);
        }
    }
    fn set_range(r: &mut [u8], t: u64) {
        if let Some(mut a) = ExportRangeArgs::from_bytes(r) {
            a.token = t;
            a.encode(r);
        }
    }
    if let Some(a) = ExportMemoryArgs::from_bytes(reply) {
        return Some((a.token, set_memory));
    }
    ExportRangeArgs::from_bytes(reply).map(|a| (a.token, set_range as fn(&mut [u8], u64)))
}

/// After the device made an export asked as an fd ([`wants_fd`]; its reply in `reply`): the
/// fd made, the reply's `token` replaced by it. `EMFILE` (no descriptor free) or `ENOMEM`:
/// the export stays, as after a lost reply.
pub(crate) fn export_fd(reply: &mut [u8], instance: u64) -> Result<PendingFd, CoreError> {
    let Some((token, set_token)) = reply_token(reply) else {
        return Err(CoreError::new(
            Errno::EIO,
            "the export's reply has another size",
        ));
    };
    let mut file: *mut c_void = core::ptr::null_mut();
    // SAFETY: `file` is a local the helper writes on success only.
    let fd = unsafe { davinci_export_fd_prepare(instance, token, &mut file) };
    if fd < 0 {
        return Err(c_error(
            fd,
            "no file descriptor for the export (the export is made: the same call again \
             makes its fd)",
        ));
    }
    set_token(reply, fd as u64);
    Ok(PendingFd { fd, file })
}
