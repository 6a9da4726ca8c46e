//! How the shim reaches a driver. Everything above this module speaks only ioctls (request
//! number + argument bytes) and mmap cookies, so a backend is three operations:
//!
//! * `ioctl(request, arg)`: the argument bytes go in, the reply fields come back in the same
//!   buffer (also on failure: WAIT_EVENT's `current`/`status`);
//! * `map(cookie, len)`: a descriptor and offset to `mmap` for an object the driver handed out;
//! * which doorbell the device has is read from GET_INFO's features (`DOORBELL_MMIO`,
//!   `DOORBELL_FUTEX`, else the NOTIFY ioctl), not from the backend.
//!
//! Backends: [`Embedded`] (the mock device on threads of this process). Next: the
//! `davinci-mockd` socket (`mock:PATH`) and the kernel node (`/dev/davinciN`), whose `map`
//! returns the device node itself with the cookie as offset.
#![forbid(unsafe_code)]

use davinci_driver_core::NoUserMem;
use davinci_mock_device::{local_open_params, MockDevice, Role};

use crate::error::{Error, Result};
use crate::mapping::MapFd;

/// A channel to a driver, as one open file.
pub(crate) trait Backend: Send + Sync {
    /// What this is, for messages (`"embedded mock device"`).
    fn describe(&self) -> String;

    /// One ioctl. `arg` is exactly `_IOC_SIZE(request)` bytes.
    fn ioctl(&self, op: &'static str, request: u32, arg: &mut [u8]) -> Result<()>;

    /// Where to map `len` bytes of the object behind `cookie`.
    fn map(&self, cookie: u64, len: u64) -> Result<MapFd>;
}

/// The mock device running in this process: one client open on a [`MockDevice`].
pub(crate) struct Embedded {
    dev: MockDevice,
    client: u32,
}

impl Embedded {
    /// Opens a client on `dev`. The caller owns the in-process device, so it is an admin (it
    /// may change device sharing).
    pub(crate) fn open(dev: MockDevice) -> Result<Self> {
        match dev.open(local_open_params(Role::Client, true)) {
            Ok(client) => Ok(Self { dev, client }),
            Err(e) => {
                let mut msg = e.error.msg.to_string();
                if let Some(h) = e.holder {
                    msg.push_str(&format!(
                        " (held by client {} of pid {}, uid {})",
                        h.client_id, h.pid, h.uid
                    ));
                }
                Err(Error::new(e.error.errno, "open", msg))
            }
        }
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        self.dev.close(self.client);
    }
}

impl Backend for Embedded {
    fn describe(&self) -> String {
        format!(
            "embedded mock device {} (client {})",
            self.dev.config().device_id,
            self.client
        )
    }

    fn ioctl(&self, op: &'static str, request: u32, arg: &mut [u8]) -> Result<()> {
        // No user pointers on this path (LIST_CLIENTS buffers are for the operator tool).
        self.dev
            .ioctl(self.client, request, arg, &mut NoUserMem)
            .map_err(|e| Error::driver(op, e))
    }

    fn map(&self, cookie: u64, len: u64) -> Result<MapFd> {
        let src = self
            .dev
            .map(self.client, cookie, len)
            .map_err(|e| Error::driver("mmap", e))?;
        Ok(MapFd {
            fd: src.fd,
            offset: src.offset,
        })
    }
}

/// What a device path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `"embedded"`: a new in-process mock device.
    Embedded,
    /// A kernel device node (`/dev/davinciN`).
    Kernel(std::path::PathBuf),
    /// `mock:SOCKET`: a `davinci-mockd` device.
    Mock(std::path::PathBuf),
}

/// Parses a device path: `"embedded"`, `/dev/davinciN` (any absolute path) or `mock:SOCKET`.
pub(crate) fn parse_path(path: &str) -> Result<Target> {
    use crate::control::DevicePath;
    Ok(match DevicePath::parse(path)? {
        DevicePath::Embedded => Target::Embedded,
        DevicePath::Kernel(p) => Target::Kernel(p.to_path_buf()),
        DevicePath::Mock(p) => Target::Mock(p.to_path_buf()),
    })
}
