//! The kernel driver backend (`/dev/davinciN`): `open(2)` of the device node (read/write
//! for a client, read-only for a control open, as docs/abi.md specifies), `ioctl(2)` with
//! the argument bytes in place, and mappings of the node itself at the cookie the driver
//! returned.
//!
//! The driver is kmod-rust/ (docs/kernel.md). An ioctl carries only an errno; the driver's
//! message comes from GET_LAST_ERROR (ABI 1.2). When the node is missing the error says so
//! and names the alternatives.
#![allow(unsafe_code)]

use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use davinci_uapi::ioctl::ioc_size;
use davinci_uapi::{
    ClientUsage, Errno, KernelInfo, LastError, ListClientsArgs, ListKernelsArgs, Wire,
    DRIVER_CMD_GET_LAST_ERROR, DRIVER_CMD_LIST_CLIENTS, DRIVER_CMD_LIST_KERNELS,
    DRIVER_CMD_READ_EVENTS, DRIVER_CMD_TRACE,
};

use super::{list_clients_arg, Backend, MapFd, MapFile, Role};
use crate::error::{Error, Result};

/// An open of a kernel device node.
pub(crate) struct KernelBackend {
    file: File,
    path: PathBuf,
}

fn errno_error(op: &'static str, path: &Path, e: &std::io::Error) -> Error {
    match e.raw_os_error().and_then(Errno::from_code) {
        Some(errno) => Error::new(
            errno,
            op,
            format!("{}: {}", path.display(), errno.describe()),
        ),
        None => Error::other(op, format!("{}: {e}", path.display())),
    }
}

impl KernelBackend {
    /// Opens the node: read/write for a client, read-only for a control (operator) open.
    ///
    /// # Errors
    /// `ENODEV` when the node does not exist (no driver loaded), `EPERM` when its permissions
    /// refuse this user, `EBUSY` when a client open meets a device in exclusive use (the
    /// message names the holder when a control open can find out who it is).
    pub(crate) fn open(path: &Path, role: Role) -> Result<KernelBackend> {
        let control = role == Role::Control;
        let opened = OpenOptions::new().read(true).write(!control).open(path);
        match opened {
            Ok(file) => Ok(KernelBackend {
                file,
                path: path.to_path_buf(),
            }),
            Err(e) => Err(match e.kind() {
                std::io::ErrorKind::NotFound => Error::new(
                    Errno::ENODEV,
                    "open",
                    format!(
                        "{}: no such device node (is the davinci kernel driver loaded? For the \
                         mock device use mock:SOCKET, e.g. DAVINCI_DEVICE=mock:/run/davinci/davinci0.sock)",
                        path.display()
                    ),
                ),
                std::io::ErrorKind::PermissionDenied => Error::new(
                    Errno::EPERM,
                    "open",
                    format!(
                        "{}: permission denied (the node's owner/group must grant {} access)",
                        path.display(),
                        if control { "read" } else { "read/write" }
                    ),
                ),
                _ if e.raw_os_error() == Some(libc::EBUSY) => {
                    Error::new(Errno::EBUSY, "open", busy_message(path))
                }
                _ => errno_error("open", path, &e),
            }),
        }
    }

    /// The raw ioctl: `arg` must be exactly `_IOC_SIZE(request)` bytes and contain no user
    /// pointer the kernel would write through (LIST_CLIENTS goes through `list_clients`).
    fn raw_ioctl(&self, op: &'static str, request: u32, arg: &mut [u8]) -> Result<()> {
        if arg.len() != ioc_size(request) {
            return Err(Error::new(
                Errno::EINVAL,
                op,
                "argument size does not match the request number",
            ));
        }
        // SAFETY: `arg` is a live, exclusively borrowed buffer of exactly `_IOC_SIZE(request)`
        // bytes, which is all the driver copies in or out for `request`; no argument handed
        // to this function carries a user pointer the driver would follow (checked by the
        // callers: `ioctl` refuses LIST_CLIENTS with a buffer, `list_clients` passes its own
        // live buffer). The descriptor is owned by `self.file` and open.
        let rc = unsafe {
            libc::ioctl(
                self.file.as_raw_fd(),
                request as _,
                arg.as_mut_ptr().cast::<libc::c_void>(),
            )
        };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match self.why(request, &e) {
                Some((errno, why)) => {
                    Error::new(errno, op, format!("{}: {why}", self.path.display()))
                }
                None => errno_error(op, &self.path, &e),
            });
        }
        Ok(())
    }

    /// The driver's own words for the failure `e` of `request` (GET_LAST_ERROR, ABI 1.2): an
    /// ioctl returns only an errno. `None` for errnos that say it all (a timeout, a full
    /// ring, a signal: also the ones that come often), or from a driver without the command.
    fn why(&self, request: u32, e: &std::io::Error) -> Option<(Errno, String)> {
        let errno = e.raw_os_error().and_then(Errno::from_code)?;
        if matches!(errno, Errno::ETIMEDOUT | Errno::EAGAIN | Errno::EINTR)
            || request == DRIVER_CMD_GET_LAST_ERROR
        {
            return None;
        }
        let mut arg = [0u8; LastError::SIZE];
        // SAFETY: `arg` is a live buffer of exactly `_IOC_SIZE(DRIVER_CMD_GET_LAST_ERROR)`
        // bytes, which the driver only writes; the descriptor is open (owned by `self.file`).
        let rc = unsafe {
            libc::ioctl(
                self.file.as_raw_fd(),
                DRIVER_CMD_GET_LAST_ERROR as _,
                arg.as_mut_ptr().cast::<libc::c_void>(),
            )
        };
        if rc < 0 {
            return None;
        }
        let last = LastError::decode(&arg);
        // Another thread's failure may have come in between: use only a matching one.
        (last.request == request
            && last.error == errno.code() as u32
            && !last.message_str().is_empty())
        .then(|| (errno, last.message_str().to_string()))
    }

    /// LIST_CLIENTS into a buffer owned here.
    fn list_clients_into_own_buffer(&self) -> Result<Vec<ClientUsage>> {
        let mut capacity = 64u32;
        loop {
            let mut buf = vec![0u8; capacity as usize * ClientUsage::SIZE];
            let mut arg = list_clients_arg(buf.as_mut_ptr() as u64, capacity);
            self.raw_ioctl("LIST_CLIENTS", DRIVER_CMD_LIST_CLIENTS, &mut arg)?;
            let out = ListClientsArgs::decode(&arg);
            if out.count <= capacity {
                return Ok(buf
                    .chunks_exact(ClientUsage::SIZE)
                    .take(out.count as usize)
                    .map(ClientUsage::decode)
                    .collect());
            }
            if capacity >= 1 << 16 {
                return Err(Error::new(
                    Errno::E2BIG,
                    "LIST_CLIENTS",
                    "the driver reports more clients than any table holds",
                ));
            }
            capacity = out.count.next_power_of_two();
        }
    }
}

/// The EBUSY message for a client open: names the holder if a control open can see it.
fn busy_message(path: &Path) -> String {
    let holder = KernelBackend::open(path, Role::Control)
        .ok()
        .and_then(|c| c.list_clients_into_own_buffer().ok())
        .and_then(|l| l.into_iter().next());
    match holder {
        Some(h) => format!(
            "{}: the device is in exclusive mode and held by {h}",
            path.display(),
        ),
        None => format!(
            "{}: the device is in exclusive mode and held by another client",
            path.display()
        ),
    }
}

impl fmt::Display for KernelBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel device {}", self.path.display())
    }
}

/// A new descriptor (close-on-exec) for what the caller's descriptor number `fd` refers to:
/// `fcntl(F_DUPFD_CLOEXEC)`, which only reads the number (`EBADF` for one not open), so any
/// number is safe to pass.
pub(crate) fn dup_fd_number(fd: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor or fails; it touches no memory.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` was just made by this call and nothing else knows it: ours to own.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(new) })
}

impl Backend for KernelBackend {
    fn adopt_export_fd(&self, fd: u64) -> Result<OwnedFd> {
        let fd = i32::try_from(fd)
            .ok()
            .filter(|&fd| fd >= 0)
            .ok_or_else(|| {
                Error::new(
                    Errno::EPROTO,
                    "EXPORT_MEMORY",
                    format!("the driver returned {fd} for an fd"),
                )
            })?;
        // SAFETY: the kernel driver's EXPORT_MEMORY with DAVINCI_EXPORT_FLAG_FD, which the
        // caller just made through this backend, installed this descriptor in this process
        // and returned its number; nothing else in the process knows it yet, so it is ours
        // to own and close.
        Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    }

    fn ioctl_into(
        &self,
        op: &'static str,
        request: u32,
        arg: &mut [u8],
        out: &mut [u8],
    ) -> Result<()> {
        super::entries_fit(op, arg, out)?;
        arg[..8].copy_from_slice(&(out.as_mut_ptr() as u64).to_ne_bytes());
        // `raw_ioctl`'s pointer rule holds: `buf` is `out`, live and exclusively borrowed
        // for the call, and `capacity * entry_size` fits in it (checked above).
        self.raw_ioctl(op, request, arg)
    }

    fn ioctl(&self, op: &'static str, request: u32, arg: &mut [u8]) -> Result<()> {
        if (request == DRIVER_CMD_TRACE || request == DRIVER_CMD_READ_EVENTS)
            && arg.get(..8).is_some_and(|b| b.iter().any(|&x| x != 0))
        {
            return Err(Error::new(
                Errno::EINVAL,
                op,
                "a buffer for TRACE or READ_EVENTS goes through the trace and events API",
            ));
        }
        if request == DRIVER_CMD_LIST_CLIENTS {
            // The driver would write through the buffer pointer in `arg`; only
            // `list_clients` (which owns that buffer) may issue it with one.
            let a = ListClientsArgs::decode(arg);
            if a.capacity != 0 || a.buf != 0 {
                return Err(Error::new(
                    Errno::EINVAL,
                    op,
                    "LIST_CLIENTS with a buffer goes through the control API's clients()",
                ));
            }
        }
        self.raw_ioctl(op, request, arg)
    }

    fn map(&self, cookie: u64, _len: u64) -> Result<MapFd> {
        let fd: OwnedFd = self
            .file
            .try_clone()
            .map_err(|e| errno_error("mmap", &self.path, &e))?
            .into();
        Ok(MapFd {
            fd: MapFile::Owned(fd),
            offset: cookie,
        })
    }

    fn list_clients(&self) -> Result<Vec<ClientUsage>> {
        self.list_clients_into_own_buffer()
    }

    fn list_kernels(&self) -> Result<Vec<KernelInfo>> {
        let capacity = 64u32;
        let mut buf = vec![0u8; capacity as usize * KernelInfo::SIZE];
        let mut arg = super::list_kernels_arg(buf.as_mut_ptr() as u64, capacity);
        self.raw_ioctl("LIST_KERNELS", DRIVER_CMD_LIST_KERNELS, &mut arg)?;
        let n = ListKernelsArgs::decode(&arg).count.min(capacity) as usize;
        Ok(buf
            .chunks_exact(KernelInfo::SIZE)
            .take(n)
            .map(KernelInfo::decode)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use davinci_uapi::{DeviceInfo, DRIVER_CMD_GET_INFO};

    #[test]
    fn missing_node_is_enodev_with_a_hint() {
        let e = KernelBackend::open(Path::new("/dev/davinci-does-not-exist"), Role::Client)
            .err()
            .unwrap();
        assert!(e.is(Errno::ENODEV));
        assert!(e.message().contains("kernel driver loaded"), "{e}");
        assert!(e.message().contains("mock:"), "{e}");
    }

    #[test]
    fn ioctls_reach_the_kernel() {
        // /dev/null is a real character device without our ioctls: the syscall path runs and
        // the kernel answers ENOTTY, exactly what an old or foreign driver would.
        let b = KernelBackend::open(Path::new("/dev/null"), Role::Control).unwrap();
        // The backend names the device; the open's role is added by Device / Control.
        assert_eq!(b.to_string(), "kernel device /dev/null");
        let mut arg = vec![0u8; DeviceInfo::SIZE];
        let e = b
            .ioctl("GET_INFO", DRIVER_CMD_GET_INFO, &mut arg)
            .unwrap_err();
        assert!(e.is(Errno::ENOTTY), "{e}");
        let e = b
            .ioctl("GET_INFO", DRIVER_CMD_GET_INFO, &mut arg[..3])
            .unwrap_err();
        assert!(e.is(Errno::EINVAL), "{e}");
        let e = b.list_clients().unwrap_err();
        assert!(e.is(Errno::ENOTTY), "{e}");
        // A LIST_CLIENTS with a caller-chosen buffer pointer is refused before the syscall.
        let mut la = vec![0u8; ListClientsArgs::SIZE];
        ListClientsArgs {
            buf: 0xdead_0000,
            capacity: 4,
            count: 0,
            entry_size: ClientUsage::SIZE as u32,
            pad: 0,
        }
        .encode(&mut la);
        let e = b
            .ioctl("LIST_CLIENTS", DRIVER_CMD_LIST_CLIENTS, &mut la)
            .unwrap_err();
        assert!(e.is(Errno::EINVAL), "{e}");
        assert!(b.map(1 << 48, 4096).is_ok());
    }
}
