//! What a device tells `davinci-smi` beyond GET_INFO, LIST_CLIENTS and QUERY_DEVICE_SHARE,
//! gathered in one place: [`device_extras`]. npu-smi's `Aicore Usage Rate(%)`, nvidia-smi's
//! `utilization.gpu`, `name` and `uuid` read it. A value the device does not report (a
//! driver before ABI 1.4; memory bandwidth, which none reports) is `None`, printed `NA` in
//! npu-smi mode and `[N/A]` in `--query` CSV, never an invented number.
#![forbid(unsafe_code)]

use davinci_uapi::{DeviceCounters, DeviceInfo, DeviceSensors, Features};

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
    /// The driver's name and version as GET_IDENTITY says it (`davinci-mockd 0.1.0`).
    pub driver_version: Option<String>,
    /// The version alone ([`release_of`]: `0.1.0`), what npu-smi's `Software Version` and
    /// `Version:` and nvidia-smi's `driver_version` print, which parsers read as a version.
    pub driver_release: Option<String>,
    /// Where the device sits on its bus, its PCI address `DDDD:BB:DD.F` (npu-smi's `Bus-Id`
    /// and `PCIe Bus Info`, nvidia-smi's `pci.bus_id`); `None` for a device on no bus (the
    /// mock device, the kernel module's software devices).
    pub bus_id: Option<String>,
    /// PCI vendor and device ids (npu-smi's `PCI Vendor ID`, `PCI Device ID`); `None` when
    /// the device is not PCI.
    pub pci_ids: Option<(u16, u16)>,
    /// How busy the device's memory was, in percent of wall time (nvidia-smi's
    /// `utilization.memory`: time memory was read or written, not how much is held). No ABI
    /// version reports it.
    pub memory_busy_percent: Option<u32>,
    /// The device's health as npu-smi names it (`OK`, `Warning`, `Alarm`, `Critical`), from
    /// GET_COUNTERS (ABI 1.4).
    pub health: Option<String>,
    /// Streams an engine stopped on a task that does not finish (why the health is
    /// `Warning`).
    pub hung_streams: Option<u32>,
    /// The chip's name (npu-smi's `Chip Name`, e.g. `910B3`), from GET_IDENTITY with
    /// `DAVINCI_FEAT_SENSORS` (ABI 1.5).
    pub chip_name: Option<String>,
    /// Temperature, power, voltage and throttle reasons (npu-smi's Temp and Power,
    /// nvidia-smi's `temperature.gpu`, `power.draw`), from GET_SENSORS (ABI 1.5); `None`:
    /// the device reports none, printed `NA`/`[N/A]`.
    pub sensors: Option<DeviceSensors>,
    /// The GET_COUNTERS read [`device_extras`] made, the first of [`fill_busy`]'s two.
    first: Option<DeviceCounters>,
}

/// How long [`fill_busy`] watches the devices' busy time for `busy_percent` (nvidia-smi's
/// driver averages over 1/6 s to 1 s).
pub const BUSY_SAMPLE: std::time::Duration = std::time::Duration::from_millis(200);

/// The [`Extras`] of a device, asked of `dev` whose GET_INFO is `info`: with
/// `DAVINCI_FEAT_IDENTITY` (ABI 1.4), the UUID, model and driver from GET_IDENTITY and the
/// health from GET_COUNTERS (kept as the first sample for [`fill_busy`]); with
/// `DAVINCI_FEAT_SENSORS` (ABI 1.5), the chip name and GET_SENSORS. A device without
/// the feature, or a call that fails, leaves the values `None`.
pub(crate) fn device_extras(dev: &dyn DeviceAccess, info: &DeviceInfo) -> Extras {
    let mut out = Extras::default();
    if !info.features.contains(Features::IDENTITY) {
        return out;
    }
    if let Ok(Some(id)) = dev.identity() {
        out.uuid = Some(id.uuid_string().as_str().to_string());
        out.name = Some(id.model().to_string()).filter(|s| !s.is_empty());
        out.driver_version = Some(id.driver_version().to_string()).filter(|s| !s.is_empty());
        out.driver_release = out
            .driver_version
            .as_deref()
            .map(|d| release_of(d).to_string());
        out.bus_id = Some(id.bus_id().to_string()).filter(|s| !s.is_empty());
        out.pci_ids = Some((id.pci_vendor, id.pci_device)).filter(|&(v, _)| v != 0);
        if info.features.contains(Features::SENSORS) {
            out.chip_name = Some(id.chip_name().to_string()).filter(|s| !s.is_empty());
        }
    }
    if info.features.contains(Features::SENSORS) {
        out.sensors = dev.sensors().ok().flatten();
    }
    if let Ok(Some(k)) = dev.counters() {
        out.health = davinci_uapi::health_name(k.health).map(str::to_string);
        out.hung_streams = Some(k.hung_streams);
        out.first = Some(k);
    }
    out
}

/// The version in a driver's name and version: its first word that starts with a digit
/// (`davinci-pcidev 0.1.0 (ABI 1.5)` → `0.1.0`), else the whole text.
pub fn release_of(driver: &str) -> &str {
    driver
        .split_whitespace()
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))
        .unwrap_or(driver)
}

/// `busy_percent` of every device of `asked` that has a first sample ([`device_extras`]):
/// one wait of [`BUSY_SAMPLE`] for all of them, then a second GET_COUNTERS each. Only for
/// output that shows utilization: the wait is the command's.
pub(crate) fn fill_busy(asked: Vec<(&dyn DeviceAccess, &mut Extras)>) {
    if !asked.iter().any(|(_, e)| e.first.is_some()) {
        return;
    }
    std::thread::sleep(BUSY_SAMPLE);
    for (dev, e) in asked {
        if let (Some(first), Ok(Some(second))) = (e.first, dev.counters()) {
            e.busy_percent = busy_percent(&first, &second);
        }
    }
}

/// The percentage of the engines' time spent executing tasks between two GET_COUNTERS reads
/// (`Δbusy_ns / (Δnow_ns × engines)`, rounded, at most 100); `None` if no time passed or a
/// counter went back (another device, or a restart).
pub fn busy_percent(a: &DeviceCounters, b: &DeviceCounters) -> Option<u32> {
    let dt = b.now_ns.checked_sub(a.now_ns).filter(|&t| t > 0)?;
    let busy = b.busy_ns.checked_sub(a.busy_ns)?;
    let capacity = u128::from(dt) * u128::from(b.engines.max(1));
    let pct = (u128::from(busy) * 100 + capacity / 2) / capacity;
    Some(pct.min(100) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::SmiError;
    use davinci_uapi::{ClientUsage, DeviceIdentity, DeviceSensors, ShareMode};
    use std::cell::Cell;

    /// A 1.4 device whose busy time grows by 50 ms of every 100 ms between reads, counting
    /// its GET_COUNTERS calls.
    struct Counting(Cell<u64>);

    impl DeviceAccess for Counting {
        fn info(&self) -> Result<DeviceInfo, SmiError> {
            Ok(DeviceInfo::default())
        }
        fn share(&self) -> Result<(ShareMode, u32), SmiError> {
            Ok((ShareMode::Exclusive, 0))
        }
        fn set_share(&self, _: ShareMode) -> Result<(), SmiError> {
            Ok(())
        }
        fn clients(&self) -> Result<Vec<ClientUsage>, SmiError> {
            Ok(Vec::new())
        }
        fn identity(&self) -> Result<Option<DeviceIdentity>, SmiError> {
            Ok(Some(DeviceIdentity::default()))
        }
        fn counters(&self) -> Result<Option<DeviceCounters>, SmiError> {
            let n = self.0.get() + 1;
            self.0.set(n);
            Ok(Some(DeviceCounters {
                now_ns: n * 100,
                busy_ns: n * 50,
                engines: 1,
                ..DeviceCounters::default()
            }))
        }
    }

    /// Identity and health take one GET_COUNTERS and no wait; utilization, only where asked
    /// for, a second one after one wait for every device.
    #[test]
    fn only_utilization_reads_the_counters_twice() {
        let info = DeviceInfo {
            features: Features::IDENTITY,
            ..DeviceInfo::default()
        };
        let (a, b) = (Counting(Cell::new(0)), Counting(Cell::new(0)));
        let mut ea = device_extras(&a, &info);
        let mut eb = device_extras(&b, &info);
        assert_eq!((a.0.get(), b.0.get()), (1, 1));
        assert_eq!((ea.health.as_deref(), ea.busy_percent), (Some("OK"), None));
        fill_busy(vec![(&a, &mut ea), (&b, &mut eb)]);
        assert_eq!((a.0.get(), b.0.get()), (2, 2));
        assert_eq!((ea.busy_percent, eb.busy_percent), (Some(50), Some(50)));
        // A device before ABI 1.4 is not asked at all.
        let old = Counting(Cell::new(0));
        let mut e = device_extras(&old, &DeviceInfo::default());
        fill_busy(vec![(&old, &mut e)]);
        assert_eq!((old.0.get(), e.busy_percent), (0, None));
    }

    /// A 1.5 device with sensors and a chip name.
    struct Sensing;

    impl DeviceAccess for Sensing {
        fn info(&self) -> Result<DeviceInfo, SmiError> {
            Ok(DeviceInfo::default())
        }
        fn share(&self) -> Result<(ShareMode, u32), SmiError> {
            Ok((ShareMode::Exclusive, 0))
        }
        fn set_share(&self, _: ShareMode) -> Result<(), SmiError> {
            Ok(())
        }
        fn clients(&self) -> Result<Vec<ClientUsage>, SmiError> {
            Ok(Vec::new())
        }
        fn identity(&self) -> Result<Option<DeviceIdentity>, SmiError> {
            Ok(Some(DeviceIdentity {
                chip_name: DeviceIdentity::text_field("910B3"),
                ..DeviceIdentity::default()
            }))
        }
        fn sensors(&self) -> Result<Option<DeviceSensors>, SmiError> {
            Ok(Some(DeviceSensors {
                temperature_mc: 41_400,
                ..DeviceSensors::default()
            }))
        }
    }

    /// Sensors and the chip name are read only from a device with `DAVINCI_FEAT_SENSORS`.
    #[test]
    fn sensors_and_chip_name_only_with_the_feature() {
        let with = DeviceInfo {
            features: Features::IDENTITY | Features::SENSORS,
            ..DeviceInfo::default()
        };
        let e = device_extras(&Sensing, &with);
        assert_eq!(e.chip_name.as_deref(), Some("910B3"));
        assert_eq!(e.sensors.map(|s| s.temperature_c()), Some(41));
        let without = DeviceInfo {
            features: Features::IDENTITY,
            ..DeviceInfo::default()
        };
        let e = device_extras(&Sensing, &without);
        assert_eq!((e.chip_name, e.sensors), (None, None));
    }

    #[test]
    fn the_release_is_the_first_word_that_is_a_number() {
        assert_eq!(release_of("davinci-pcidev 0.1.0 (ABI 1.5)"), "0.1.0");
        assert_eq!(release_of("davinci-mock-device 0.1.0"), "0.1.0");
        assert_eq!(release_of("23.0.rc3.3"), "23.0.rc3.3");
        assert_eq!(release_of("nodigits here"), "nodigits here");
    }

    #[test]
    fn busy_percent_is_busy_time_over_engine_time() {
        let at = |now_ns, busy_ns, engines| DeviceCounters {
            now_ns,
            busy_ns,
            engines,
            ..DeviceCounters::default()
        };
        assert_eq!(busy_percent(&at(1_000, 0, 1), &at(2_000, 250, 1)), Some(25));
        // Two engines: the same busy time is half as much of what they could do.
        assert_eq!(busy_percent(&at(1_000, 0, 2), &at(2_000, 250, 2)), Some(13));
        // Never above 100 (a pass counted when it ends), never from nothing.
        assert_eq!(busy_percent(&at(0, 0, 1), &at(100, 900, 1)), Some(100));
        assert_eq!(busy_percent(&at(5, 0, 1), &at(5, 10, 1)), None);
        assert_eq!(busy_percent(&at(5, 10, 1), &at(9, 0, 1)), None);
        assert_eq!(busy_percent(&at(0, 0, 0), &at(1_000, 500, 0)), Some(50));
    }
}
