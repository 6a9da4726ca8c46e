//! What a device cannot tell `davinci-smi` through the ABI yet, gathered in one place:
//! [`device_extras`]. npu-smi's `Aicore Usage Rate(%)`, nvidia-smi's `utilization.gpu`,
//! `name` and `uuid` read it; today every value is `None` (printed `NA` in npu-smi mode,
//! `[N/A]` in `--query` CSV), never an invented number.
#![forbid(unsafe_code)]

use davinci_uapi::DeviceInfo;

use crate::access::DeviceAccess;

/// A device's values beyond GET_INFO, LIST_CLIENTS and QUERY_DEVICE_SHARE. `None`: the
/// driver does not report it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extras {
    /// How busy the device was, in percent of wall time (npu-smi's `Aicore Usage Rate(%)`
    /// and `NPU Utilization(%)`, nvidia-smi's `utilization.gpu`).
    pub busy_percent: Option<u32>,
    /// The device's unique id (nvidia-smi's `uuid`).
    pub uuid: Option<String>,
    /// The device's model name (npu-smi's `Name` and `Chip Name`, nvidia-smi's `name`).
    pub name: Option<String>,
    /// The driver's version (npu-smi's `Software Version` and the `Version:` of `info`).
    pub driver_version: Option<String>,
    /// How busy the device's memory was, in percent of wall time (nvidia-smi's
    /// `utilization.memory`: time memory was read or written, not how much is held). No ABI
    /// version reports it.
    pub memory_busy_percent: Option<u32>,
}

/// The [`Extras`] of a device, asked of `dev` whose GET_INFO is `info`.
///
/// TODO(abi 1.4 identity/busy): ABI 1.4 adds the device identity (UUID, model name, driver
/// version) and its busy time; fill `uuid`, `name`, `driver_version` from the identity and
/// `busy_percent` from the busy time here (a percentage needs two samples of busy time over
/// an interval, or the driver's own average), when `info.abi_minor` says the driver has them.
/// Every caller (npu-smi mode, `--query` fields) reads these values only through this
/// function.
pub(crate) fn device_extras(dev: &dyn DeviceAccess, info: &DeviceInfo) -> Extras {
    // TODO(abi 1.4 identity/busy): wire the identity and the busy time here.
    let _ = (dev, info);
    Extras::default()
}
