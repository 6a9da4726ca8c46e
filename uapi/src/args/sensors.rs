//! GET_SENSORS (ABI 1.5, `DAVINCI_FEAT_SENSORS`): what the device's sensors read now.

use crate::layout::{abi_struct, ConstGroup};

abi_struct! {
    /// GET_SENSORS (ABI 1.5, `DAVINCI_FEAT_SENSORS`): the device's sensors, for monitoring
    /// (npu-smi's Temp and Power, nvidia-smi's `temperature.gpu` and `power.draw`, the
    /// exporter). A software device reports a model of them driven by its busy time
    /// (docs/abi.md, "Sensors"), the same on every host; a value is never invented for a
    /// device without the feature bit (the command fails with `ENOTTY` there). Any open may
    /// call it.
    #[c_name = "davinci_device_sensors"]
    pub struct DeviceSensors {
        /// Die temperature, in thousandths of a degree Celsius (from driver).
        pub temperature_mc: i32,
        /// Device-memory (HBM) temperature, in thousandths of a degree Celsius (from driver).
        pub memory_temperature_mc: i32,
        /// Power drawn, in milliwatts: the average since the previous GET_SENSORS of any
        /// open (or over the last second, whichever is longer ago) (from driver).
        pub power_mw: u32,
        /// The power cap the device enforces, in milliwatts (from driver).
        pub power_limit_mw: u32,
        /// Core voltage, in millivolts (from driver).
        pub voltage_mv: u32,
        /// `DAVINCI_THROTTLE_*` bits: why the device slows down now; 0 when it does not
        /// (from driver).
        pub throttle: u32,
        /// The die temperature at which the device slows down (`DAVINCI_THROTTLE_THERMAL`),
        /// in thousandths of a degree Celsius (from driver).
        pub slowdown_temperature_mc: i32,
        /// The die temperature at which the device shuts down, in thousandths of a degree
        /// Celsius (from driver).
        pub shutdown_temperature_mc: i32,
        /// Energy the device used since it started, in millijoules; only grows
        /// (from driver).
        pub energy_mj: u64,
        /// The device clock when the sensors were read: the clock of GET_COUNTERS' `now_ns`
        /// (from driver).
        pub now_ns: u64,
        /// The PCIe link's generation now (1 to 6; nvidia-smi's `pcie.link.gen.current`); 0:
        /// no link to report (from driver).
        pub pcie_link_gen: u16,
        /// The PCIe link's width now, in lanes (`pcie.link.width.current`); 0: no link
        /// (from driver).
        pub pcie_link_width: u16,
        /// The highest PCIe generation the device's link supports (`pcie.link.gen.max`); 0:
        /// no link (from driver).
        pub pcie_link_gen_max: u16,
        /// The widest the device's link can train, in lanes (`pcie.link.width.max`); 0: no
        /// link (from driver).
        pub pcie_link_width_max: u16,
        /// Reserved: ignore it, a later minor may use it (from driver).
        pub reserved: [u32; 2],
    }
}

/// `davinci_device_sensors.throttle`: the die is at or above `slowdown_temperature_mc`.
pub const THROTTLE_THERMAL: u32 = 1;
/// `davinci_device_sensors.throttle`: the power drawn reached `power_limit_mw`.
pub const THROTTLE_POWER: u32 = 2;

impl DeviceSensors {
    /// `temperature_mc` in whole degrees Celsius, rounded to nearest (as npu-smi and
    /// nvidia-smi print it).
    pub const fn temperature_c(&self) -> i32 {
        round_thousandths(self.temperature_mc)
    }

    /// `memory_temperature_mc` in whole degrees Celsius, rounded to nearest.
    pub const fn memory_temperature_c(&self) -> i32 {
        round_thousandths(self.memory_temperature_mc)
    }
}

/// `v / 1000`, rounded half away from zero.
const fn round_thousandths(v: i32) -> i32 {
    if v >= 0 {
        (v + 500) / 1000
    } else {
        (v - 500) / 1000
    }
}

/// The throttle bits, for the C header.
pub(crate) const THROTTLES: ConstGroup = ConstGroup {
    title: "Throttle reasons (davinci_device_sensors.throttle)",
    c_prefix: "DAVINCI_THROTTLE_",
    items: &[
        (
            "THERMAL",
            THROTTLE_THERMAL as u64,
            "the die is at or above slowdown_temperature_mc",
        ),
        (
            "POWER",
            THROTTLE_POWER as u64,
            "the power drawn reached power_limit_mw",
        ),
    ],
};
