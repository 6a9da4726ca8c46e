//! Exports as file descriptors (ABI 1.5, `DAVINCI_FEAT_EXPORT_FD`; the kernel module's): an
//! export that is a capability, passed to another process over a Unix socket
//! (`SCM_RIGHTS`) or inherited, as dma-buf fds are, instead of a token anyone who learns it
//! may try (docs/abi.md, EXPORT_MEMORY).
#![forbid(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use davinci_uapi::{Errno, Features, EXPORT_FLAG_FD};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{DeviceBuffer, ExportTo, Imported};

/// `EINVAL`, saying why, for a device that makes no export fds.
fn no_fds(dev: &Device, op: &'static str) -> Result<()> {
    if dev.features().contains(Features::EXPORT_FD) {
        return Ok(());
    }
    Err(Error::new(
        Errno::EINVAL,
        op,
        "this device makes no export fds (GET_INFO has no DAVINCI_FEAT_EXPORT_FD: the kernel \
         module's devices do; davinci-mockd and the embedded mock export by token, \
         DeviceBuffer::export)",
    ))
}

impl DeviceBuffer {
    /// Shares this allocation as a file descriptor (`DAVINCI_EXPORT_FLAG_FD`): the fd is the
    /// right to import it, for the clients `to` names, with [`Device::import_fd`]. Send it
    /// over a Unix socket (`SCM_RIGHTS`) or let a child inherit it (it is close-on-exec:
    /// clear that to pass it across `exec`); unlike a token it cannot be guessed or read by
    /// another process of the same user. Closing it stops nobody: imports made stand, and the
    /// export lasts as long as this buffer, whose free revokes every import as
    /// [`export`](Self::export) says. Each call makes a new fd for the one export (the same
    /// grant); exported by token too, or to another grant, that is another export (ABI 1.5; a
    /// 1.4 driver answers `EBUSY`).
    ///
    /// # Errors
    /// `EINVAL` on a device without export fds (davinci-mockd and the embedded mock: export
    /// by token there) and for an imported buffer; `ENOSPC` as for [`export`](Self::export);
    /// `EMFILE` no descriptor free.
    pub fn export_fd(&self, to: ExportTo) -> Result<OwnedFd> {
        no_fds(self.device(), "EXPORT_MEMORY")?;
        let fd = self.export_with(to, EXPORT_FLAG_FD)?;
        self.device().adopt_export_fd(fd)
    }
}

impl Device {
    /// Imports the memory an export fd names ([`DeviceBuffer::export_fd`], received from the
    /// exporter): as [`import`](Self::import), the grant checked the same way. The buffer
    /// keeps a duplicate of `fd` (for [`DeviceBuffer::is_revoked`]); the caller may close
    /// its own.
    ///
    /// # Errors
    /// `EBADF` not an open descriptor; `EINVAL` a descriptor that is not an export fd, or a
    /// device without export fds; `ENOENT` an export of another device, freed, or not
    /// granted to this client; `EBUSY`, `ENOSPC` as for [`import`](Self::import).
    pub fn import_fd(&self, fd: BorrowedFd<'_>) -> Result<DeviceBuffer> {
        no_fds(self, "IMPORT_MEMORY")?;
        let own = fd.as_fd().try_clone_to_owned().map_err(dup_failed)?;
        self.import_by(Imported::Fd(own))
    }

    /// [`import_fd`](Self::import_fd) by descriptor number, for bindings whose callers hold
    /// plain integers (Python's `socket.recv_fds`, C): `EBADF` for a number that is not an
    /// open descriptor of this process.
    pub fn import_fd_number(&self, fd: i32) -> Result<DeviceBuffer> {
        let own = crate::backend::kernel::dup_fd_number(fd).map_err(|e| {
            if e.raw_os_error() == Some(Errno::EBADF.code()) {
                Error::new(
                    Errno::EBADF,
                    "IMPORT_MEMORY",
                    format!("fd {fd} is not an open descriptor of this process"),
                )
            } else {
                dup_failed(e)
            }
        })?;
        no_fds(self, "IMPORT_MEMORY")?;
        self.import_by(Imported::Fd(own))
    }
}

/// A failed duplicate of the caller's descriptor, with its errno (`EBADF`: not open).
fn dup_failed(e: std::io::Error) -> Error {
    Error::new(
        Errno::from_code(e.raw_os_error().unwrap_or(0)).unwrap_or(Errno::EINVAL),
        "IMPORT_MEMORY",
        format!("the export fd cannot be duplicated: {e}"),
    )
}
