//! GET_SENSORS (ABI 1.5): a software device's temperature, power and voltage, a deterministic
//! model driven by its busy time, the same on every host (docs/abi.md, "Sensors").
//!
//! The model, stepped at each reading at least [`STEP_NS`] after the previous step:
//!
//! * load `u` over the step: `Δbusy_ns / (Δnow_ns × engines)`, at most 1;
//! * power `P = idle + (full − idle) × u`, the step's average;
//! * die temperature, a first-order thermal model: it approaches the steady state
//!   `T∞ = ambient + R × P` with time constant `τ`: `T ← T∞ + (T − T∞) × e^(−Δt/τ)`;
//! * memory temperature `ambient + (T − ambient) × 4/5`;
//! * voltage `v_idle + (v_full − v_idle) × u`;
//! * energy `+= P × Δt`;
//! * a PCIe link trained at its best: the configured generation and width, current and max;
//! * throttle bits when `T ≥ slowdown` (`THROTTLE_THERMAL`) or `P ≥ limit`
//!   (`THROTTLE_POWER`). The bits report; the software engines do not slow down.
//!
//! The first reading (or [`SensorModel::configure`]) starts the model at the idle steady
//! state. Integer arithmetic only (the kernel has no floating point): `e^(−x)` is a
//! fixed-point series squared back up ([`decay_q30`]), in 64 bits.

use davinci_uapi::{DeviceSensors, THROTTLE_POWER, THROTTLE_THERMAL};

/// The shortest step: readings closer together than this return the previous step's values,
/// so a power reading is an average over at least this long.
pub const STEP_NS: u64 = 100_000_000;

/// The model's parameters (docs/abi.md, "Sensors"; `davinci-mockd --sensors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SensorConfig {
    /// Ambient temperature, thousandths of a degree Celsius.
    pub ambient_mc: i32,
    /// Thermal resistance die to ambient: thousandths of a degree per watt.
    pub thermal_mc_per_w: u32,
    /// Thermal time constant, milliseconds (at least 1).
    pub tau_ms: u32,
    /// Power drawn idle, milliwatts.
    pub idle_mw: u32,
    /// Power drawn with every engine busy, milliwatts (at least `idle_mw`).
    pub full_mw: u32,
    /// The power cap, milliwatts.
    pub power_limit_mw: u32,
    /// Core voltage idle, millivolts.
    pub idle_mv: u32,
    /// Core voltage with every engine busy, millivolts (at least `idle_mv`).
    pub full_mv: u32,
    /// Slowdown temperature, thousandths of a degree.
    pub slowdown_mc: i32,
    /// Shutdown temperature, thousandths of a degree.
    pub shutdown_mc: i32,
    /// The modelled PCIe link: generation and lanes, trained at its best (0: no link).
    pub pcie_gen: u16,
    /// The link's lanes.
    pub pcie_width: u16,
}

impl SensorConfig {
    /// The defaults: 30 °C ambient, 0.15 °C/W, τ 20 s, 60 W idle, 300 W busy, 310 W cap,
    /// 0.80 V idle, 0.90 V busy, slowdown at 95 °C, shutdown at 105 °C (idle at 39 °C,
    /// busy toward 75 °C), a PCIe Gen4 x16 link.
    pub const DEFAULT: SensorConfig = SensorConfig {
        ambient_mc: 30_000,
        thermal_mc_per_w: 150,
        tau_ms: 20_000,
        idle_mw: 60_000,
        full_mw: 300_000,
        power_limit_mw: 310_000,
        idle_mv: 800,
        full_mv: 900,
        slowdown_mc: 95_000,
        shutdown_mc: 105_000,
        pcie_gen: 4,
        pcie_width: 16,
    };

    /// `self` made consistent: `tau_ms` at least 1, `full_mw` at least `idle_mw`, `full_mv`
    /// at least `idle_mv`, `shutdown_mc` at least `slowdown_mc`.
    pub const fn sane(self) -> SensorConfig {
        SensorConfig {
            tau_ms: if self.tau_ms == 0 { 1 } else { self.tau_ms },
            full_mw: if self.full_mw < self.idle_mw {
                self.idle_mw
            } else {
                self.full_mw
            },
            full_mv: if self.full_mv < self.idle_mv {
                self.idle_mv
            } else {
                self.full_mv
            },
            shutdown_mc: if self.shutdown_mc < self.slowdown_mc {
                self.slowdown_mc
            } else {
                self.shutdown_mc
            },
            ..self
        }
    }

    /// The steady-state die temperature at `power_mw`, in millionths of a degree.
    fn steady_uc(&self, power_mw: u32) -> i64 {
        // mW × m°C/W = µ°C.
        // Saturating: a configuration of absurd powers and resistances reads as hot, not as
        // an overflow (a panic in a debug build).
        (i64::from(self.ambient_mc) * 1000)
            .saturating_add(i64::from(power_mw).saturating_mul(i64::from(self.thermal_mc_per_w)))
    }

    /// `idle + (full − idle) × load_ppm / 10⁶`.
    fn between(idle: u32, full: u32, load_ppm: u32) -> u32 {
        let span = u64::from(full.saturating_sub(idle));
        idle + (span * u64::from(load_ppm) / 1_000_000) as u32
    }
}

/// Where the model is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    /// The device clock and busy time at the last step.
    now_ns: u64,
    busy_ns: u64,
    /// Die temperature, millionths of a degree.
    temp_uc: i64,
    /// The last step's average power and load.
    power_mw: u32,
    load_ppm: u32,
    /// Energy so far, microjoules.
    energy_uj: u64,
}

/// A device's sensor model: its parameters and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SensorModel {
    config: SensorConfig,
    state: Option<State>,
}

impl SensorModel {
    /// The default model, not started.
    pub const DEFAULT: SensorModel = SensorModel {
        config: SensorConfig::DEFAULT,
        state: None,
    };

    /// The parameters.
    pub const fn config(&self) -> &SensorConfig {
        &self.config
    }

    /// New parameters ([`SensorConfig::sane`]); the model restarts at the idle steady state
    /// at `now_ns`, with busy time `busy_ns` so far and no energy.
    pub fn configure(&mut self, config: SensorConfig, now_ns: u64, busy_ns: u64) {
        self.config = config.sane();
        self.state = Some(self.start(now_ns, busy_ns));
    }

    fn start(&self, now_ns: u64, busy_ns: u64) -> State {
        State {
            now_ns,
            busy_ns,
            temp_uc: self.config.steady_uc(self.config.idle_mw),
            power_mw: self.config.idle_mw,
            load_ppm: 0,
            energy_uj: 0,
        }
    }

    /// Steps the model to `now_ns` with busy time `busy_ns` over `engines` engines (the
    /// device's GET_COUNTERS values) and reads it. A clock or busy time that went backwards
    /// (a host's bug) counts as no time or no work.
    pub fn read(&mut self, now_ns: u64, busy_ns: u64, engines: u32) -> DeviceSensors {
        let c = self.config;
        let mut s = match self.state {
            Some(s) => s,
            None => self.start(now_ns, busy_ns),
        };
        let dt = now_ns.saturating_sub(s.now_ns);
        if dt >= STEP_NS {
            let work = busy_ns.saturating_sub(s.busy_ns);
            let capacity = dt.saturating_mul(u64::from(engines.max(1)));
            let load_ppm = if work >= capacity {
                1_000_000
            } else if work <= u64::MAX / 1_000_000 {
                (work * 1_000_000 / capacity) as u32
            } else {
                (work / (capacity / 1_000_000)).min(1_000_000) as u32
            };
            let power_mw = SensorConfig::between(c.idle_mw, c.full_mw, load_ppm);
            let steady = c.steady_uc(power_mw);
            let decay = decay_q30(dt, u64::from(c.tau_ms) * 1_000_000);
            // 64 bits only: exact while |gap| < 2^32 µ°C (any sane configuration), else from
            // the gap's top bits, saturating (an absurd configuration must not overflow).
            let gap = s.temp_uc.saturating_sub(steady);
            let decay = decay as i64;
            let moved = if gap.unsigned_abs() < 1 << 32 {
                (gap * decay) >> 30
            } else {
                (gap >> 30).saturating_mul(decay)
            };
            s.temp_uc = steady.saturating_add(moved);
            // mW × ns = 10⁻¹² J = 10⁻⁶ µJ; whole milliseconds first, so nothing overflows.
            let p = u64::from(power_mw);
            let energy = p
                .saturating_mul(dt / 1_000_000)
                .saturating_add(p * (dt % 1_000_000) / 1_000_000);
            s.energy_uj = s.energy_uj.saturating_add(energy);
            s.power_mw = power_mw;
            s.load_ppm = load_ppm;
            s.now_ns = now_ns;
            s.busy_ns = busy_ns.max(s.busy_ns);
        }
        self.state = Some(s);
        let temperature_mc = clamp_i32(s.temp_uc / 1000);
        let rise = i64::from(temperature_mc) - i64::from(c.ambient_mc);
        let mut throttle = 0;
        if temperature_mc >= c.slowdown_mc {
            throttle |= THROTTLE_THERMAL;
        }
        if s.power_mw >= c.power_limit_mw {
            throttle |= THROTTLE_POWER;
        }
        DeviceSensors {
            temperature_mc,
            memory_temperature_mc: clamp_i32(i64::from(c.ambient_mc) + rise * 4 / 5),
            power_mw: s.power_mw,
            power_limit_mw: c.power_limit_mw,
            voltage_mv: SensorConfig::between(c.idle_mv, c.full_mv, s.load_ppm),
            throttle,
            slowdown_temperature_mc: c.slowdown_mc,
            shutdown_temperature_mc: c.shutdown_mc,
            energy_mj: s.energy_uj / 1000,
            now_ns,
            pcie_link_gen: c.pcie_gen,
            pcie_link_width: c.pcie_width,
            pcie_link_gen_max: c.pcie_gen,
            pcie_link_width_max: c.pcie_width,
            reserved: [0; 2],
        }
    }
}

fn clamp_i32(v: i64) -> i32 {
    v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// One in Q30 fixed point.
const ONE_Q30: u64 = 1 << 30;

/// `e^(−dt/tau)` in Q30 fixed point (`1 << 30` is 1): the series `1 − s + s²/2 − s³/6 +
/// s⁴/24` at `s = x / 2¹²`, squared twelve times. Exact to about 10⁻⁵; 0 from `x > 40` on
/// (below 2⁻⁵⁷). 64-bit arithmetic only: a kernel has no 128-bit division.
pub fn decay_q30(dt: u64, tau: u64) -> u64 {
    // At most an hour (2^42 ns), so the remainder's shift below cannot overflow.
    let tau = tau.clamp(1, 1 << 42);
    if dt / tau > 40 {
        return 0;
    }
    // x = dt / tau in Q30: the whole part, and the remainder to 20 bits, then 10 more.
    let (whole, rest) = (dt / tau, dt % tau);
    let x = (whole << 30) + (((rest << 20) / tau) << 10);
    if x > 40 << 30 {
        return 0;
    }
    let s = x >> 12; // < 0.01 in Q30: s < 2^24
    let s2 = (s * s) >> 30;
    let s3 = (s2 * s) >> 30;
    let s4 = (s3 * s) >> 30;
    // 1 − s + s²/2 − s³/6 + s⁴/24, with s < 0.01: every partial sum stays in (0, 1].
    let mut e = ONE_Q30 - s + s2 / 2 - s3 / 6 + s4 / 24;
    for _ in 0..12 {
        e = (e * e) >> 30;
    }
    e.min(ONE_Q30)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn q30(v: u64) -> f64 {
        v as f64 / (1u64 << 30) as f64
    }

    #[test]
    fn decay_matches_exp() {
        for (dt, tau) in [
            (0, 1),
            (1, 1),
            (SEC, 20 * SEC),
            (3 * SEC, SEC),
            (39 * SEC, SEC),
        ] {
            let want = (-(dt as f64) / tau as f64).exp();
            let got = q30(decay_q30(dt, tau));
            assert!(
                (got - want).abs() < 1e-5,
                "e^-({dt}/{tau}): {got} vs {want}"
            );
        }
        assert_eq!(decay_q30(41, 1), 0);
        assert_eq!(decay_q30(5, 0), decay_q30(5, 1), "tau 0 counts as 1 ns");
        assert_eq!(decay_q30(u64::MAX, u64::MAX), 0, "tau clamped to 2^42 ns");
        let hour = 3_600_000_000_000u64;
        assert!((q30(decay_q30(hour, hour)) - (-1f64).exp()).abs() < 1e-5);
    }

    #[test]
    fn idle_device_reads_the_idle_steady_state() {
        let mut m = SensorModel::DEFAULT;
        let first = m.read(SEC, 0, 1);
        assert_eq!(first.temperature_mc, 39_000, "30 °C + 0.15 °C/W × 60 W");
        assert_eq!(first.memory_temperature_mc, 37_200);
        assert_eq!(
            (first.power_mw, first.voltage_mv, first.throttle),
            (60_000, 800, 0)
        );
        let later = m.read(11 * SEC, 0, 1);
        assert_eq!(later.temperature_mc, 39_000);
        assert_eq!(later.energy_mj, 600_000, "60 W for 10 s");
        assert_eq!(
            (later.power_limit_mw, later.slowdown_temperature_mc),
            (310_000, 95_000)
        );
    }

    #[test]
    fn full_load_heats_with_the_time_constant() {
        let mut m = SensorModel::DEFAULT;
        m.read(0, 0, 2);
        // Both engines busy for one τ (20 s): 63.2 % of the way from 39 °C to 75 °C.
        let s = m.read(20 * SEC, 40 * SEC, 2);
        assert_eq!((s.power_mw, s.voltage_mv), (300_000, 900));
        let want = 75.0 - 36.0 * (-1f64).exp();
        assert!(
            (f64::from(s.temperature_mc) / 1000.0 - want).abs() < 0.002,
            "{s:?}"
        );
        assert_eq!(s.energy_mj, 6_000_000, "300 W for 20 s");
        // Half load from there: 180 W, toward 57 °C, so it cools.
        let t = m.read(40 * SEC, 60 * SEC, 2);
        assert_eq!(t.power_mw, 180_000);
        assert!(
            t.temperature_mc < s.temperature_mc && t.temperature_mc > 57_000,
            "{t:?}"
        );
        assert_eq!(t.voltage_mv, 850);
    }

    #[test]
    fn close_readings_repeat_the_last_step_and_bad_clocks_do_no_harm() {
        let mut m = SensorModel::DEFAULT;
        m.read(0, 0, 1);
        let a = m.read(SEC, SEC, 1);
        let b = m.read(SEC + STEP_NS - 1, SEC + STEP_NS - 1, 1);
        assert_eq!(
            (a.temperature_mc, a.power_mw),
            (b.temperature_mc, b.power_mw)
        );
        // Time and busy time going backwards: no step, no panic.
        let c = m.read(0, 0, 1);
        assert_eq!(c.power_mw, a.power_mw);
        // Busy time beyond wall time (a host's bug) is full load, not more.
        let d = m.read(3 * SEC, 100 * SEC, 1);
        assert_eq!(d.power_mw, 300_000);
        let e = m.read(u64::MAX, u64::MAX, 0);
        assert!(e.energy_mj > d.energy_mj);
    }

    /// The largest values a host may configure step without overflowing (a panic in a debug
    /// build) and read as hot and throttled.
    #[test]
    fn extreme_configurations_saturate() {
        let mut m = SensorModel::DEFAULT;
        let absurd = SensorConfig {
            ambient_mc: i32::MAX,
            thermal_mc_per_w: u32::MAX,
            idle_mw: u32::MAX,
            full_mw: u32::MAX,
            ..SensorConfig::DEFAULT
        };
        m.configure(absurd, 0, 0);
        let s = m.read(SEC, SEC, 1);
        let t = m.read(100 * SEC, 100 * SEC, 1);
        assert_eq!((s.temperature_mc, t.temperature_mc), (i32::MAX, i32::MAX));
        assert_eq!(t.throttle, THROTTLE_THERMAL | THROTTLE_POWER);
        let cold = SensorConfig {
            ambient_mc: i32::MIN,
            ..SensorConfig::DEFAULT
        };
        m.configure(cold, 0, 0);
        assert!(m.read(50 * SEC, 50 * SEC, 1).temperature_mc < 0);
    }

    #[test]
    fn throttle_bits_follow_the_configured_limits() {
        let mut m = SensorModel::DEFAULT;
        let hot = SensorConfig {
            ambient_mc: 90_000,
            power_limit_mw: 60_000,
            ..SensorConfig::DEFAULT
        };
        m.configure(hot, 0, 0);
        let s = m.read(SEC, 0, 1);
        assert_eq!(s.temperature_mc, 99_000);
        assert_eq!(s.throttle, THROTTLE_THERMAL | THROTTLE_POWER);
        let odd = SensorConfig {
            tau_ms: 0,
            full_mw: 1,
            full_mv: 0,
            shutdown_mc: 0,
            ..SensorConfig::DEFAULT
        }
        .sane();
        assert_eq!((odd.tau_ms, odd.full_mw, odd.full_mv), (1, 60_000, 800));
        assert_eq!(odd.shutdown_mc, 95_000);
    }
}
