//! [`Control`]: an operator's open of a device (what `davinci-smi` uses). It never counts as
//! a client, so it works whatever the sharing mode and whoever holds the device: it reads
//! GET_INFO, QUERY_DEVICE_SHARE and LIST_CLIENTS and, for admins, SET_DEVICE_SHARE.
//!
//! Device paths are the same as for [`Device::open`](crate::Device::open):
//! `/dev/davinciN` (the kernel driver; opened read-only) or `mock:SOCKET` (`davinci-mockd`).
//! [`DEVICE_ENV`] names the variable both read when no path is given.
#![forbid(unsafe_code)]

use std::path::Path;

use davinci_driver_core::NoUserMem;
use davinci_mock_device::{local_open_params, MockDevice, Role};
use davinci_mockd_proto::WireRole;
use davinci_uapi::{
    ClientUsage, DeviceInfo, DeviceShareArgs, Errno, ShareMode, Wire, DRIVER_CMD_GET_INFO,
    DRIVER_CMD_QUERY_DEVICE_SHARE, DRIVER_CMD_SET_DEVICE_SHARE,
};

use crate::backend::Backend;
use crate::backend_kernel::KernelBackend;
use crate::backend_socket::SocketBackend;
use crate::error::{Error, Result};

/// The environment variable naming the device when the program is not told otherwise
/// (`/dev/davinci0`, `mock:/run/davinci/davinci0.sock`, `embedded`).
pub const DEVICE_ENV: &str = "DAVINCI_DEVICE";

/// The device path in [`DEVICE_ENV`], if set and not empty.
pub fn device_path_from_env() -> Option<String> {
    std::env::var(DEVICE_ENV).ok().filter(|s| !s.is_empty())
}

/// A device path, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DevicePath<'a> {
    /// `embedded`: a new in-process mock device.
    Embedded,
    /// A kernel device node (any absolute path, normally `/dev/davinciN`).
    Kernel(&'a Path),
    /// `mock:SOCKET`: a `davinci-mockd` device socket.
    Mock(&'a Path),
}

impl<'a> DevicePath<'a> {
    /// Parses `embedded`, `/dev/davinciN` (any absolute path) or `mock:SOCKET`.
    ///
    /// # Errors
    /// `EINVAL` for anything else, with the accepted forms in the message.
    pub fn parse(path: &'a str) -> Result<DevicePath<'a>> {
        if path == "embedded" {
            Ok(DevicePath::Embedded)
        } else if let Some(sock) = path.strip_prefix("mock:") {
            if sock.is_empty() {
                Err(Error::new(
                    Errno::EINVAL,
                    "open",
                    "mock: needs a socket path (mock:/run/davinci/davinci0.sock)",
                ))
            } else {
                Ok(DevicePath::Mock(Path::new(sock)))
            }
        } else if path.starts_with('/') {
            Ok(DevicePath::Kernel(Path::new(path)))
        } else {
            Err(Error::new(
                Errno::EINVAL,
                "open",
                format!(
                    "{path:?} is not a device path: use \"/dev/davinciN\", \"mock:SOCKET\" or \
                     \"embedded\""
                ),
            ))
        }
    }
}

/// What QUERY_DEVICE_SHARE says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareState {
    /// The mode in force.
    pub mode: ShareMode,
    /// Clients attached now.
    pub clients: u32,
}

enum Inner {
    Socket(SocketBackend),
    Kernel(KernelBackend),
    Embedded { dev: MockDevice, open: u32 },
}

/// An operator's (control) open of a device.
///
/// ```
/// # fn main() -> davinci_shim::Result<()> {
/// use davinci_shim::{Control, Device, ShareMode};
/// let dev = Device::embedded()?;
/// let ctl = Control::attach(dev.mock_device().unwrap())?;
/// assert_eq!(ctl.share()?.clients, 1);
/// ctl.set_share_mode(ShareMode::Shared)?; // the in-process owner is an admin
/// assert_eq!(ctl.clients()?[0].pid, std::process::id());
/// # Ok(()) }
/// ```
pub struct Control {
    inner: Inner,
    path: String,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Control {
    /// Opens `path` (`/dev/davinciN` or `mock:SOCKET`) for control.
    ///
    /// # Errors
    /// `ENODEV` (no such node or socket, no daemon), `EPERM` (permissions), `EINVAL` (not a
    /// device path; `embedded` has no address: use [`attach`](Self::attach)), `EPROTO`
    /// (another ABI major).
    pub fn open(path: &str) -> Result<Control> {
        let inner = match DevicePath::parse(path)? {
            DevicePath::Mock(sock) => Inner::Socket(SocketBackend::open(sock, WireRole::Control)?),
            DevicePath::Kernel(node) => Inner::Kernel(KernelBackend::open(node, true)?),
            DevicePath::Embedded => {
                return Err(Error::new(
                    Errno::EINVAL,
                    "open",
                    "an embedded device lives inside one process: use Control::attach(&MockDevice)",
                ))
            }
        };
        let c = Control {
            inner,
            path: path.to_string(),
        };
        // Refuse another ABI major up front, as Device::open does.
        let info = c.info()?;
        if !davinci_uapi::abi_compatible(info.abi_major) {
            return Err(Error::new(
                Errno::EPROTO,
                "open",
                format!(
                    "{path} speaks ABI {}.{}, this tool speaks {}.{}",
                    info.abi_major,
                    info.abi_minor,
                    davinci_uapi::ABI_VERSION_MAJOR,
                    davinci_uapi::ABI_VERSION_MINOR
                ),
            ));
        }
        Ok(c)
    }

    /// Opens [`DEVICE_ENV`], or `/dev/davinci0` when it is not set.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn from_env() -> Result<Control> {
        Self::open(&device_path_from_env().unwrap_or_else(|| "/dev/davinci0".to_string()))
    }

    /// A control open on an in-process mock device. The process owns the device, so it is
    /// an admin.
    ///
    /// # Errors
    /// `ENOSPC` when the device's open table is full; `ENODEV` after it shut down.
    pub fn attach(mock: &MockDevice) -> Result<Control> {
        let open = mock
            .open(local_open_params(Role::Control, true))
            .map_err(|e| Error::new(e.error.errno, "open", e.error.msg))?;
        Ok(Control {
            inner: Inner::Embedded {
                dev: mock.clone(),
                open,
            },
            path: "embedded".to_string(),
        })
    }

    /// The path this was opened with.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What this open goes through, for messages.
    pub fn describe(&self) -> String {
        match &self.inner {
            Inner::Socket(s) => s.describe(),
            Inner::Kernel(k) => k.describe(),
            Inner::Embedded { dev, .. } => {
                format!(
                    "embedded mock device {} (control open)",
                    dev.config().device_id
                )
            }
        }
    }

    fn ioctl(&self, op: &'static str, request: u32, arg: &mut [u8]) -> Result<()> {
        match &self.inner {
            Inner::Socket(s) => s.ioctl(op, request, arg),
            Inner::Kernel(k) => k.ioctl(op, request, arg),
            Inner::Embedded { dev, open } => dev
                .ioctl(*open, request, arg, &mut NoUserMem)
                .map_err(|e| Error::new(e.errno, op, e.msg)),
        }
    }

    fn call<T: Wire + Default>(&self, op: &'static str, request: u32, v: T) -> Result<T> {
        let mut arg = vec![0u8; T::SIZE];
        v.encode(&mut arg);
        self.ioctl(op, request, &mut arg)?;
        Ok(T::decode(&arg))
    }

    /// GET_INFO: limits, memory in use, clients attached, share mode.
    ///
    /// # Errors
    /// `ENODEV` if the device went away.
    pub fn info(&self) -> Result<DeviceInfo> {
        self.call("GET_INFO", DRIVER_CMD_GET_INFO, DeviceInfo::default())
    }

    /// QUERY_DEVICE_SHARE.
    ///
    /// # Errors
    /// `ENODEV` if the device went away; `EPROTO` for a mode this ABI does not know.
    pub fn share(&self) -> Result<ShareState> {
        let a = self.call(
            "QUERY_DEVICE_SHARE",
            DRIVER_CMD_QUERY_DEVICE_SHARE,
            DeviceShareArgs::default(),
        )?;
        let mode = ShareMode::from_u32(a.mode).ok_or_else(|| {
            Error::new(
                Errno::EPROTO,
                "QUERY_DEVICE_SHARE",
                format!("unknown share mode {}", a.mode),
            )
        })?;
        Ok(ShareState {
            mode,
            clients: a.clients,
        })
    }

    /// The sharing mode in force.
    ///
    /// # Errors
    /// As [`share`](Self::share).
    pub fn share_mode(&self) -> Result<ShareMode> {
        Ok(self.share()?.mode)
    }

    /// SET_DEVICE_SHARE. Setting the mode in force is a successful no-op.
    ///
    /// # Errors
    /// `EPERM` unless the caller is an admin (uid 0 or the driver's admin group); `EBUSY`
    /// when switching to exclusive while more than one client is attached.
    pub fn set_share_mode(&self, mode: ShareMode) -> Result<()> {
        self.call(
            "SET_DEVICE_SHARE",
            DRIVER_CMD_SET_DEVICE_SHARE,
            DeviceShareArgs {
                mode: mode as u32,
                clients: 0,
                reserved: 0,
            },
        )
        .map(|_| ())
    }

    /// LIST_CLIENTS: every attached client's usage (pid, uid, container, contexts, streams,
    /// events, allocations, memory, tasks submitted/completed).
    ///
    /// # Errors
    /// `ENODEV` if the device went away.
    pub fn clients(&self) -> Result<Vec<ClientUsage>> {
        match &self.inner {
            Inner::Socket(s) => s.list_clients(),
            Inner::Kernel(k) => k.list_clients(),
            Inner::Embedded { dev, .. } => Ok(dev.clients()),
        }
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        if let Inner::Embedded { dev, open } = &self.inner {
            dev.close(*open);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_paths() {
        assert_eq!(DevicePath::parse("embedded"), Ok(DevicePath::Embedded));
        assert_eq!(
            DevicePath::parse("/dev/davinci3"),
            Ok(DevicePath::Kernel(Path::new("/dev/davinci3")))
        );
        assert_eq!(
            DevicePath::parse("mock:/run/davinci/davinci0.sock"),
            Ok(DevicePath::Mock(Path::new("/run/davinci/davinci0.sock")))
        );
        assert!(DevicePath::parse("mock:").unwrap_err().is(Errno::EINVAL));
        assert!(DevicePath::parse("davinci0").unwrap_err().is(Errno::EINVAL));
    }

    #[test]
    fn embedded_control_sees_clients_and_changes_sharing() {
        let mock = MockDevice::new(Default::default());
        let ctl = Control::attach(&mock).unwrap();
        assert_eq!(
            ctl.share().unwrap(),
            ShareState {
                mode: ShareMode::Exclusive,
                clients: 0
            }
        );
        let a = mock.open(local_open_params(Role::Client, false)).unwrap();
        assert_eq!(ctl.clients().unwrap().len(), 1);
        ctl.set_share_mode(ShareMode::Shared).unwrap();
        ctl.set_share_mode(ShareMode::Shared).unwrap();
        let b = mock.open(local_open_params(Role::Client, false)).unwrap();
        assert_eq!(ctl.share().unwrap().clients, 2);
        let e = ctl.set_share_mode(ShareMode::Exclusive).unwrap_err();
        assert!(e.is(Errno::EBUSY), "{e}");
        mock.close(b);
        ctl.set_share_mode(ShareMode::Exclusive).unwrap();
        mock.close(a);
        assert_eq!(ctl.info().unwrap().clients, 0);
        assert!(Control::open("embedded").unwrap_err().is(Errno::EINVAL));
        assert!(Control::open("mock:/nonexistent/davinci0.sock")
            .unwrap_err()
            .is(Errno::ENODEV));
    }
}
