//! [`Control`]: an operator's open of a device (what `davinci-smi` uses). It never counts as
//! a client, so it works whatever the sharing mode and whoever holds the device: it reads
//! GET_INFO, QUERY_DEVICE_SHARE and LIST_CLIENTS and, for admins, SET_DEVICE_SHARE.
//!
//! Device paths are the same as for [`Device::open`](crate::Device::open):
//! `/dev/davinciN` (the kernel driver; opened read-only) or `mock:SOCKET` (`davinci-mockd`).
//! [`DEVICE_ENV`] names the variable both read when no path is given.
#![forbid(unsafe_code)]

use std::fmt;

use davinci_uapi::{
    ClientUsage, DeviceCounters, DeviceIdentity, DeviceInfo, DeviceShareArgs, Errno, ShareMode,
    TenantShareArgs, Wire, DRIVER_CMD_GET_COUNTERS, DRIVER_CMD_GET_IDENTITY, DRIVER_CMD_GET_INFO,
    DRIVER_CMD_QUERY_DEVICE_SHARE, DRIVER_CMD_SET_DEVICE_SHARE, DRIVER_CMD_TENANT_SHARE,
};

use crate::backend::{self, Backend, Role};
use crate::error::{Error, Result};
use crate::path::DevicePath;

/// What QUERY_DEVICE_SHARE says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareState {
    /// The mode in force.
    pub mode: ShareMode,
    /// Clients attached now.
    pub clients: u32,
}

/// An operator's (control) open of a device.
///
/// ```
/// # fn main() -> davinci_shim::Result<()> {
/// # #[cfg(feature = "embedded")] {
/// use davinci_shim::{Control, Device, ShareMode};
/// let dev = Device::embedded()?;
/// let ctl = Control::attach(dev.mock_device().unwrap())?;
/// assert_eq!(ctl.share()?.clients, 1);
/// ctl.set_share_mode(ShareMode::Shared)?; // the in-process owner is an admin
/// assert_eq!(ctl.clients()?[0].pid, std::process::id());
/// # }
/// # Ok(()) }
/// ```
///
/// `Send + Sync`.
pub struct Control {
    pub(crate) backend: Box<dyn Backend>,
    path: DevicePath,
}

impl fmt::Debug for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Control")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Which device the control open reaches, for messages: `kernel device /dev/davinci0
/// (control open)`.
impl fmt::Display for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.backend.fmt(f)?;
        f.write_str(" (control open)")
    }
}

impl Control {
    /// Opens `path` (`/dev/davinciN` or `mock:SOCKET`) for control.
    ///
    /// # Errors
    /// `ENODEV` (no such node or socket, no daemon), `EPERM` (permissions), `EINVAL` (not a
    /// device path; `embedded` has no address: use `Control::attach`), `EPROTO` (another
    /// ABI major).
    pub fn open(path: &str) -> Result<Control> {
        Self::open_path(&DevicePath::parse(path)?)
    }

    /// [`open`](Self::open) of a parsed path.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_path(path: &DevicePath) -> Result<Control> {
        let (backend, _) = backend::open(path, Role::Control)?;
        Ok(Control {
            backend,
            path: path.clone(),
        })
    }

    /// Opens [`DEVICE_ENV`](crate::DEVICE_ENV), or `/dev/davinci0` when it is not set.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn from_env() -> Result<Control> {
        Self::open_path(&DevicePath::from_env()?)
    }

    /// A control open on an in-process mock device. The process owns the device, so it is
    /// an admin.
    ///
    /// # Errors
    /// `ENOSPC` when the device's open table is full; `ENODEV` after it shut down.
    #[cfg(feature = "embedded")]
    pub fn attach(mock: &crate::MockDevice) -> Result<Control> {
        let b = backend::embedded::Embedded::open(mock.clone(), Role::Control)?;
        backend::check_abi(&b)?;
        Ok(Control {
            backend: Box::new(b),
            path: DevicePath::Embedded,
        })
    }

    /// The path this was opened with.
    pub fn path(&self) -> &DevicePath {
        &self.path
    }

    fn ioctl(&self, op: &'static str, request: u32, arg: &mut [u8]) -> Result<()> {
        self.backend.ioctl(op, request, arg)
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

    /// GET_COUNTERS (ABI 1.3): device-wide counters since the device started (tasks,
    /// stream errors, doorbell wake-ups, client opens) and the objects that exist now.
    ///
    /// # Errors
    /// `ENOTTY` from a driver before ABI 1.3 (check `Features::COUNTERS` in
    /// [`info`](Self::info) first); `ENODEV` if the device went away.
    pub fn counters(&self) -> Result<DeviceCounters> {
        self.call(
            "GET_COUNTERS",
            DRIVER_CMD_GET_COUNTERS,
            DeviceCounters::default(),
        )
    }

    /// GET_IDENTITY (ABI 1.4): the device's UUID (the same across share-mode changes,
    /// daemon restarts, module reloads and reboots), model, driver and NUMA node.
    ///
    /// # Errors
    /// `ENOTTY` from a driver before ABI 1.4 (check `Features::IDENTITY` in
    /// [`info`](Self::info) first); `ENODEV` if the device went away.
    pub fn identity(&self) -> Result<DeviceIdentity> {
        self.call(
            "GET_IDENTITY",
            DRIVER_CMD_GET_IDENTITY,
            DeviceIdentity::default(),
        )
    }

    /// GET_SENSORS (ABI 1.5): the device's temperature, power, voltage and throttle reasons
    /// now (a software device's are a model driven by its busy time: docs/abi.md,
    /// "Sensors").
    ///
    /// # Errors
    /// `ENOTTY` from a driver without `Features::SENSORS` (check [`info`](Self::info)
    /// first); `ENODEV` if the device went away.
    pub fn sensors(&self) -> Result<davinci_uapi::DeviceSensors> {
        self.call(
            "GET_SENSORS",
            davinci_uapi::DRIVER_CMD_GET_SENSORS,
            davinci_uapi::DeviceSensors::default(),
        )
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

    /// TENANT_SHARE (ABI 1.5, an admin's): how many of the device's tenant slots `tenant`
    /// (`user:UID` or `container:ID`, as LIST_CLIENTS and davinci-smi show tenants) counts
    /// for, and with `set` makes it count for that many (docs/abi.md, TENANT_SHARE). The
    /// reply has the tenant's setting, the device's slots, the free ones, and the tenant's
    /// `DAVINCI_TENANT_*` flags.
    ///
    /// # Errors
    /// `EINVAL` for a tenant spelled otherwise (with what was wrong) or more shares than
    /// the device has slots; `EPERM` unless the caller is an admin; `EBUSY` when the tenant
    /// holds its slots and too few others are free to grow; `ENOSPC` past 64 settings;
    /// `ENOTTY` from a driver before 1.5.
    pub fn tenant_share(&self, tenant: &str, set: Option<u32>) -> Result<TenantShareArgs> {
        let a = TenantShareArgs::named(tenant)
            .map_err(|why| Error::new(Errno::EINVAL, "TENANT_SHARE", format!("{tenant}: {why}")))?;
        let a = match set {
            Some(n) => a.set(n),
            None => a,
        };
        self.call("TENANT_SHARE", DRIVER_CMD_TENANT_SHARE, a)
    }

    /// LIST_CLIENTS: every attached client's usage (pid, uid, container, contexts, streams,
    /// events, allocations, memory, tasks submitted/completed).
    ///
    /// # Errors
    /// `ENODEV` if the device went away.
    pub fn clients(&self) -> Result<Vec<ClientUsage>> {
        self.backend.list_clients()
    }
}

#[cfg(all(test, feature = "embedded"))]
mod tests {
    use super::*;
    use crate::MockDevice;
    use davinci_mock_device::{local_open_params, Role as MockRole};

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
        let a = mock
            .open(local_open_params(MockRole::Client, false))
            .unwrap();
        assert_eq!(ctl.clients().unwrap().len(), 1);
        ctl.set_share_mode(ShareMode::Shared).unwrap();
        ctl.set_share_mode(ShareMode::Shared).unwrap();
        let b = mock
            .open(local_open_params(MockRole::Client, false))
            .unwrap();
        assert_eq!(ctl.share().unwrap().clients, 2);
        let e = ctl.set_share_mode(ShareMode::Exclusive).unwrap_err();
        assert!(e.is(Errno::EBUSY), "{e}");
        mock.close(b);
        ctl.set_share_mode(ShareMode::Exclusive).unwrap();
        mock.close(a);
        assert_eq!(ctl.info().unwrap().clients, 0);
        assert!(ctl.to_string().contains("control open"), "{ctl}");
        assert!(Control::open("embedded").unwrap_err().is(Errno::EINVAL));
        assert!(Control::open("mock:/nonexistent/davinci0.sock")
            .unwrap_err()
            .is(Errno::ENODEV));
    }
}
