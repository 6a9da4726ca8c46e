//! One davinci device as nvidia-smi shows a GPU: what it reports, read once per round
//! ([`Gpu`]), and the value of each `--query-gpu` property ([`Gpu::value`]), formatted as
//! nvidia-smi prints it. `None` is a property no davinci device has a source for, printed
//! `[N/A]` (`N/A` in `-q`), never an invented number. docs/operators.md ("nvidia-smi mode")
//! lists which properties are filled from what.
#![forbid(unsafe_code)]

use davinci_uapi::{ClientUsage, DeviceInfo, ShareMode};

use crate::extras::Extras;
use crate::query::whole_mib;

/// nvidia-smi's clock event reason bits (nvml.h `nvmlClocksEventReason*`) that a davinci
/// device can report: idle (from its busy time), the power cap (`DAVINCI_THROTTLE_POWER`),
/// and the hardware thermal slowdown (`DAVINCI_THROTTLE_THERMAL`, which is a hardware
/// slowdown too).
pub(crate) mod reason {
    /// `nvmlClocksEventReasonGpuIdle`.
    pub(crate) const GPU_IDLE: u64 = 0x1;
    /// `nvmlClocksEventReasonSwPowerCap`.
    pub(crate) const SW_POWER_CAP: u64 = 0x4;
    /// `nvmlClocksEventReasonHwSlowdown`.
    pub(crate) const HW_SLOWDOWN: u64 = 0x8;
    /// `nvmlClocksEventReasonHwThermalSlowdown`.
    pub(crate) const HW_THERMAL_SLOWDOWN: u64 = 0x40;
}

/// What one device said this round.
pub(crate) struct Gpu {
    /// N of davinciN: nvidia-smi's `index`.
    pub(crate) index: u32,
    /// GET_INFO.
    pub(crate) info: DeviceInfo,
    /// LIST_CLIENTS (empty when it failed).
    pub(crate) clients: Vec<ClientUsage>,
    /// The sharing mode.
    pub(crate) mode: Option<ShareMode>,
    /// GET_IDENTITY, GET_COUNTERS and GET_SENSORS (`extras.sensors`: `None` for a device
    /// without sensors).
    pub(crate) extras: Extras,
}

/// Domain, bus, device and function of a PCI address `DDDD:BB:DD.F` (hex digits, any case;
/// nvidia-smi's 8-digit domain too).
pub(crate) fn parse_bus(s: &str) -> Option<(u32, u32, u32, u32)> {
    let (dom, rest) = s.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let h = |x: &str| {
        (!x.is_empty() && x.len() <= 8)
            .then(|| u32::from_str_radix(x, 16).ok())
            .flatten()
    };
    Some((h(dom)?, h(bus)?, h(dev)?, h(func)?))
}

/// What every row of a round shares.
pub(crate) struct Ctx {
    /// `YYYY/MM/DD HH:MM:SS.mmm`.
    pub(crate) timestamp: String,
    /// Devices found (nvidia-smi's `count`: all of them, not only those `-i` selects).
    pub(crate) count: usize,
}

/// `on` as nvidia-smi's `Active` / `Not Active`.
fn active(on: bool) -> String {
    if on { "Active" } else { "Not Active" }.to_string()
}

/// Milli-units as nvidia-smi's watts: two decimals.
fn watts(mw: u32) -> String {
    let centiwatts = (u64::from(mw) + 5) / 10;
    format!("{}.{:02}", centiwatts / 100, centiwatts % 100)
}

impl Gpu {
    /// `GPU-` and the device's UUID, as nvidia-smi spells a GPU's UUID (parsers and
    /// `CUDA_VISIBLE_DEVICES`-style selectors expect the prefix).
    pub(crate) fn uuid(&self) -> Option<String> {
        self.extras.uuid.as_ref().map(|u| format!("GPU-{u}"))
    }

    /// The PCI address as nvidia-smi prints it, `00000000:BB:DD.F` (8 hex digits of domain,
    /// upper case); `None` for a device on no bus.
    pub(crate) fn bus_id(&self) -> Option<String> {
        let (d, b, dev, f) = self.bus_parts()?;
        Some(format!("{d:08X}:{b:02X}:{dev:02X}.{f:X}"))
    }

    /// Domain, bus, device and function of the device's PCI address.
    fn bus_parts(&self) -> Option<(u32, u32, u32, u32)> {
        parse_bus(self.extras.bus_id.as_deref()?)
    }

    /// nvidia-smi's compute mode: one client at a time is `Exclusive_Process`, a shared
    /// device `Default`.
    pub(crate) fn compute_mode(&self) -> Option<&'static str> {
        self.mode.map(|m| match m {
            ShareMode::Exclusive => "Exclusive_Process",
            ShareMode::Shared => "Default",
        })
    }

    /// The clock event reasons this device can report (nvml's bit mask); `None` when it
    /// reports none (no busy time, no sensors).
    pub(crate) fn reasons_supported(&self) -> Option<u64> {
        let mut bits = 0;
        if self.extras.busy_percent.is_some() {
            bits |= reason::GPU_IDLE;
        }
        if self.extras.sensors.is_some() {
            bits |= reason::SW_POWER_CAP | reason::HW_SLOWDOWN | reason::HW_THERMAL_SLOWDOWN;
        }
        Some(bits).filter(|&b| b != 0)
    }

    /// The clock event reasons active now (a subset of [`Gpu::reasons_supported`]).
    pub(crate) fn reasons_active(&self) -> Option<u64> {
        let supported = self.reasons_supported()?;
        let mut bits = 0;
        if self.extras.busy_percent == Some(0) {
            bits |= reason::GPU_IDLE;
        }
        if let Some(s) = &self.extras.sensors {
            if s.throttle & davinci_uapi::THROTTLE_POWER != 0 {
                bits |= reason::SW_POWER_CAP;
            }
            if s.throttle & davinci_uapi::THROTTLE_THERMAL != 0 {
                bits |= reason::HW_SLOWDOWN | reason::HW_THERMAL_SLOWDOWN;
            }
        }
        Some(bits & supported)
    }

    /// One reason, `Active` or `Not Active`; `None` when the device cannot report it.
    pub(crate) fn reason(&self, bit: u64) -> Option<String> {
        let supported = self.reasons_supported()?;
        (supported & bit != 0).then(|| active(self.reasons_active().unwrap_or(0) & bit != 0))
    }

    /// Memory held by all clients, in bytes, at most the total.
    fn used(&self) -> u64 {
        self.info.memory_used.min(self.info.memory_size)
    }

    /// The value of `--query-gpu` property `name` (the table's first name), without its
    /// unit; `None`: no source, `[N/A]`.
    pub(crate) fn value(&self, name: &str, ctx: &Ctx) -> Option<String> {
        use reason::*;
        let e = &self.extras;
        let s = e.sensors.as_ref();
        let bus = self.bus_parts();
        Some(match name {
            "timestamp" => ctx.timestamp.clone(),
            "driver_version" | "kmd_version" => e.driver_release.clone()?,
            "count" => ctx.count.to_string(),
            "name" => e.name.clone()?,
            "uuid" => self.uuid()?,
            "pci.bus_id" => self.bus_id()?,
            "pci.domain" => format!("0x{:04X}", bus?.0),
            "pci.bus" => format!("0x{:02X}", bus?.1),
            "pci.device" => format!("0x{:02X}", bus?.2),
            "pci.device_id" => {
                let (v, d) = e.pci_ids?;
                format!("0x{d:04X}{v:04X}")
            }
            "index" => self.index.to_string(),
            // No display engine: nothing to drive or attach a display to.
            "display_mode" | "display_active" => "Disabled".into(),
            "display_attached" => "No".into(),
            // The driver (kernel module or daemon) keeps a device set up with no client open.
            "persistence_mode" => "Enabled".into(),
            "accounting.mode" => "Disabled".into(),
            // One performance state: the device always runs at full speed.
            "pstate" => "P0".into(),
            "clocks_event_reasons.supported" => format!("0x{:016X}", self.reasons_supported()?),
            "clocks_event_reasons.active" => format!("0x{:016X}", self.reasons_active()?),
            "clocks_event_reasons.gpu_idle" => self.reason(GPU_IDLE)?,
            "clocks_event_reasons.sw_power_cap" => self.reason(SW_POWER_CAP)?,
            "clocks_event_reasons.hw_slowdown" => self.reason(HW_SLOWDOWN)?,
            "clocks_event_reasons.hw_thermal_slowdown" => self.reason(HW_THERMAL_SLOWDOWN)?,
            "memory.total" => whole_mib(self.info.memory_size),
            "memory.reserved" => "0".into(),
            "memory.used" => whole_mib(self.used()),
            "memory.free" => whole_mib(self.info.memory_size - self.used()),
            "compute_mode" => self.compute_mode()?.into(),
            "utilization.gpu" => e.busy_percent?.to_string(),
            "utilization.memory" => e.memory_busy_percent?.to_string(),
            "temperature.gpu" => s?.temperature_c().to_string(),
            "temperature.memory" => s?.memory_temperature_c().to_string(),
            "power.management" => {
                s?;
                "Enabled".into()
            }
            "power.draw" | "power.draw.average" => watts(s?.power_mw),
            "power.limit" | "enforced.power.limit" => watts(s?.power_limit_mw),
            "pcie.link.gen.current" | "pcie.link.gen.gpucurrent" => link(s?.pcie_link_gen)?,
            "pcie.link.gen.max" | "pcie.link.gen.gpumax" | "pcie.link.gen.hostmax" => {
                link(s?.pcie_link_gen_max)?
            }
            "pcie.link.width.current" => link(s?.pcie_link_width)?,
            "pcie.link.width.max" => link(s?.pcie_link_width_max)?,
            _ => return None,
        })
    }
}

/// A PCIe link value (GET_SENSORS); 0: no link, `None`.
fn link(v: u16) -> Option<String> {
    (v != 0).then(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::watts;

    #[test]
    fn watts_have_two_decimals() {
        assert_eq!(watts(69_850), "69.85");
        assert_eq!(watts(70_000), "70.00");
        assert_eq!(watts(5), "0.01");
        assert_eq!(watts(4), "0.00");
        assert_eq!(watts(1_999), "2.00");
        assert_eq!(watts(310_994), "310.99");
    }
}
