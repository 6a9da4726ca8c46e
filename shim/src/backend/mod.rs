//! How the shim reaches a driver. Everything above this module speaks only ioctls (request
//! number + argument bytes) and mmap cookies, so a backend is three operations:
//!
//! * `ioctl(request, arg)`: the argument bytes go in, the reply fields come back in the same
//!   buffer (also on failure: WAIT_EVENT's `current`/`status`);
//! * `map(cookie, len)`: a descriptor and offset to `mmap` for an object the driver handed out;
//! * `list_clients()`: LIST_CLIENTS, whose user pointer each backend serves its own way.
//!
//! Backends: [`kernel`] (`/dev/davinciN`: the node itself is mapped, at the cookie),
//! [`socket`] (`mock:SOCKET`, a `davinci-mockd` device: memfds over the socket) and, with the
//! `embedded` feature, `embedded` (the mock device on threads of this process). Clients
//! ([`Device`](crate::Device)) and operators ([`Control`](crate::Control)) open them the same
//! way, [`open`], and pass the same ABI check, [`check_abi`].
#![deny(unsafe_code)]

use std::fmt;
use std::os::fd::OwnedFd;

use davinci_uapi::{
    abi_compatible, ClientUsage, DeviceInfo, Errno, KernelInfo, ListClientsArgs, ListKernelsArgs,
    Wire, ABI_VERSION_MAJOR, ABI_VERSION_MINOR, DRIVER_CMD_GET_INFO,
};

use crate::error::{Error, Result};
use crate::path::DevicePath;

#[cfg(feature = "embedded")]
pub(crate) mod embedded;
pub(crate) mod kernel;
pub(crate) mod socket;

/// Who opens: a client (may own resources) or an operator's control open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Client,
    Control,
}

/// A file descriptor and an offset in it where a device object can be mapped: a memfd from
/// the mock device, or the device node itself with the cookie as offset.
#[derive(Debug)]
pub(crate) struct MapFd {
    pub(crate) fd: MapFile,
    pub(crate) offset: u64,
}

/// The file behind a [`MapFd`]: a descriptor of its own (closed when dropped), or the
/// in-process device's own descriptor of a memfd, lent for the `mmap` (no `dup`, no `close`).
#[derive(Debug)]
pub(crate) enum MapFile {
    /// A descriptor of the caller's own.
    Owned(OwnedFd),
    /// The embedded device's descriptor, open while this is held.
    #[cfg(feature = "embedded")]
    Lent(davinci_mock_device::MemFd),
}

impl std::os::fd::AsFd for MapFile {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            MapFile::Owned(fd) => fd.as_fd(),
            #[cfg(feature = "embedded")]
            MapFile::Lent(fd) => fd.as_fd(),
        }
    }
}

/// A channel to a driver, as one open file. `Display` says which device it reaches, for
/// messages (the open's role and client id are added by `Device` and `Control`).
pub(crate) trait Backend: Send + Sync + fmt::Display {
    /// One ioctl. `arg` is exactly `_IOC_SIZE(request)` bytes.
    fn ioctl(&self, op: &'static str, request: u32, arg: &mut [u8]) -> Result<()>;

    /// Where to map `len` bytes of the object behind `cookie`.
    fn map(&self, cookie: u64, len: u64) -> Result<MapFd>;

    /// Whether [`map`](Self::map) answers with files at their objects' own offsets, so that
    /// objects lying back to back in one file may be mapped at once (the mock device's
    /// memfds); `false` (the default) when the answer is a device node whose offsets are
    /// cookies, each mapping its own object (the kernel driver).
    fn maps_files(&self) -> bool {
        false
    }

    /// LIST_CLIENTS: every attached client's usage.
    fn list_clients(&self) -> Result<Vec<ClientUsage>>;

    /// LIST_KERNELS (ABI 1.5): the kernels the device runs, whose user pointer each backend
    /// serves as LIST_CLIENTS'.
    fn list_kernels(&self) -> Result<Vec<KernelInfo>>;

    /// An ioctl whose argument begins as LIST_CLIENTS' does (`buf` u64 at byte 0, `capacity`
    /// u32 at 8, `entry_size` u32 at 16: TRACE's READ and READ_EVENTS): the backend points
    /// `buf` at `out`, which must hold `capacity * entry_size` bytes, and the driver's entries
    /// land there. The one path that hands the driver a user pointer besides the LIST
    /// commands'.
    fn ioctl_into(
        &self,
        op: &'static str,
        request: u32,
        arg: &mut [u8],
        out: &mut [u8],
    ) -> Result<()> {
        let _ = (request, arg, out);
        Err(Error::new(
            davinci_uapi::Errno::ENOTTY,
            op,
            "this backend reads no entries",
        ))
    }

    /// Takes ownership of the descriptor `fd` that this backend's EXPORT_MEMORY with
    /// `DAVINCI_EXPORT_FLAG_FD` just installed in this process (the kernel driver's; no
    /// other backend makes one: `EINVAL`).
    fn adopt_export_fd(&self, fd: u64) -> Result<OwnedFd> {
        let _ = fd;
        Err(Error::new(
            davinci_uapi::Errno::EINVAL,
            "EXPORT_MEMORY",
            "this backend makes no export fds",
        ))
    }

    /// The in-process mock device behind an embedded open.
    #[cfg(feature = "embedded")]
    fn mock_device(&self) -> Option<&davinci_mock_device::MockDevice> {
        None
    }
}

/// Opens `path` as `role` and checks the driver's ABI ([`check_abi`]): the one way any open
/// reaches a driver. `embedded` makes a new in-process device for a client; a control open
/// of it has nothing to reach (it lives in another `Device`: use `Control::attach`).
pub(crate) fn open(path: &DevicePath, role: Role) -> Result<(Box<dyn Backend>, DeviceInfo)> {
    let backend: Box<dyn Backend> = match path {
        DevicePath::Kernel(node) => Box::new(kernel::KernelBackend::open(node, role)?),
        DevicePath::Mock(sock) => Box::new(socket::SocketBackend::open(sock, role)?),
        DevicePath::Embedded => open_embedded(role)?,
    };
    let info = check_abi(backend.as_ref())?;
    Ok((backend, info))
}

#[cfg(feature = "embedded")]
fn open_embedded(role: Role) -> Result<Box<dyn Backend>> {
    match role {
        Role::Client => {
            let mock = davinci_mock_device::MockDevice::new(Default::default());
            // As `Device::embedded_with`: without the thread, every call does its own tidying.
            let _ = mock.tidy_in_background();
            Ok(Box::new(embedded::Embedded::open(mock, role)?))
        }
        Role::Control => Err(Error::new(
            Errno::EINVAL,
            "open",
            "an embedded device lives inside one process: use Control::attach(&MockDevice)",
        )),
    }
}

#[cfg(not(feature = "embedded"))]
fn open_embedded(_role: Role) -> Result<Box<dyn Backend>> {
    Err(Error::new(
        Errno::ENODEV,
        "open",
        "this build of davinci-shim has no embedded mock device (cargo feature \"embedded\"); \
         use /dev/davinciN or mock:SOCKET",
    ))
}

/// GET_INFO, and the ABI-major check every open passes: a driver of another major (or one
/// that does not even know this GET_INFO) is refused with `EPROTO`, saying both versions.
pub(crate) fn check_abi(backend: &dyn Backend) -> Result<DeviceInfo> {
    let mut arg = vec![0u8; DeviceInfo::SIZE];
    DeviceInfo::default().encode(&mut arg);
    if let Err(e) = backend.ioctl("GET_INFO", DRIVER_CMD_GET_INFO, &mut arg) {
        return Err(if e.is(Errno::ENOTTY) {
            Error::new(
                Errno::EPROTO,
                "open",
                format!(
                    "{backend} does not understand GET_INFO of ABI {ABI_VERSION_MAJOR}.\
                     {ABI_VERSION_MINOR}: another ABI major? ({})",
                    e.message()
                ),
            )
        } else {
            e
        });
    }
    let info = DeviceInfo::decode(&arg);
    if !abi_compatible(info.abi_major) {
        return Err(Error::new(
            Errno::EPROTO,
            "open",
            format!(
                "{backend} speaks ABI {}.{}, this library speaks ABI {ABI_VERSION_MAJOR}.\
                 {ABI_VERSION_MINOR}: majors differ, refusing",
                info.abi_major, info.abi_minor,
            ),
        ));
    }
    Ok(info)
}

/// LIST_KERNELS' argument bytes: room for `capacity` entries at `buf`.
/// Checks `arg` against `out` for [`Backend::ioctl_into`]: the capacity and stride it names
/// fit in `out`. Returns them.
pub(crate) fn entries_fit(op: &'static str, arg: &[u8], out: &[u8]) -> Result<(u32, u32)> {
    let word = |at: usize| {
        arg.get(at..at + 4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    let (Some(capacity), Some(stride)) = (word(8), word(16)) else {
        return Err(Error::new(
            davinci_uapi::Errno::EINVAL,
            op,
            "argument too short for a buffer",
        ));
    };
    if (capacity as u64) * (stride as u64) > out.len() as u64 {
        return Err(Error::new(
            davinci_uapi::Errno::EINVAL,
            op,
            "capacity * entry_size exceeds the buffer",
        ));
    }
    Ok((capacity, stride))
}

pub(crate) fn list_kernels_arg(buf: u64, capacity: u32) -> Vec<u8> {
    let a = ListKernelsArgs {
        buf,
        capacity,
        count: 0,
        entry_size: KernelInfo::SIZE as u32,
        pad: 0,
    };
    let mut arg = vec![0u8; ListKernelsArgs::SIZE];
    a.encode(&mut arg);
    arg
}

/// LIST_CLIENTS' argument bytes: room for `capacity` [`ClientUsage`] entries at `buf` (the
/// user pointer, which each backend serves its own way), none reported yet.
pub(crate) fn list_clients_arg(buf: u64, capacity: u32) -> Vec<u8> {
    let a = ListClientsArgs {
        buf,
        capacity,
        count: 0,
        entry_size: ClientUsage::SIZE as u32,
        pad: 0,
    };
    let mut arg = vec![0u8; ListClientsArgs::SIZE];
    a.encode(&mut arg);
    arg
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver that answers GET_INFO with a given ABI major (or not at all).
    struct FakeDriver {
        major: Option<u16>,
    }

    impl fmt::Display for FakeDriver {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("fake driver")
        }
    }

    impl Backend for FakeDriver {
        fn ioctl(&self, op: &'static str, request: u32, arg: &mut [u8]) -> Result<()> {
            match (request, self.major) {
                (DRIVER_CMD_GET_INFO, Some(major)) => {
                    DeviceInfo {
                        abi_major: major,
                        abi_minor: 7,
                        ..Default::default()
                    }
                    .encode(arg);
                    Ok(())
                }
                _ => Err(Error::new(Errno::ENOTTY, op, "unknown ioctl command")),
            }
        }

        fn map(&self, _cookie: u64, _len: u64) -> Result<MapFd> {
            Err(Error::new(Errno::EINVAL, "mmap", "nothing to map"))
        }

        fn list_clients(&self) -> Result<Vec<ClientUsage>> {
            Ok(Vec::new())
        }

        fn list_kernels(&self) -> Result<Vec<KernelInfo>> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn another_abi_major_is_refused_with_eproto() {
        let e = check_abi(&FakeDriver {
            major: Some(ABI_VERSION_MAJOR + 1),
        })
        .unwrap_err();
        assert_eq!((e.errno(), e.op()), (Some(Errno::EPROTO), "open"));
        assert!(
            e.message()
                .contains(&format!("speaks ABI {}.7", ABI_VERSION_MAJOR + 1)),
            "{e}"
        );
        // A driver that does not even understand GET_INFO's size: also EPROTO, explained.
        let e = check_abi(&FakeDriver { major: None }).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EPROTO), "{e}");
        assert!(e.message().contains("another ABI major"), "{e}");
        // The same major (another minor) is accepted.
        let info = check_abi(&FakeDriver {
            major: Some(ABI_VERSION_MAJOR),
        })
        .unwrap();
        assert_eq!(info.abi_minor, 7);
    }

    #[test]
    fn embedded_path_needs_the_feature_or_an_attach() {
        let e = open(&DevicePath::Embedded, Role::Control).err().unwrap();
        if cfg!(feature = "embedded") {
            assert!(e.is(Errno::EINVAL) && e.message().contains("attach"), "{e}");
            assert!(open(&DevicePath::Embedded, Role::Client).is_ok());
        } else {
            assert!(
                e.is(Errno::ENODEV) && e.message().contains("embedded"),
                "{e}"
            );
        }
    }
}
