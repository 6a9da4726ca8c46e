//! What the mock devices present themselves as: `--model`, `--chip-name` and `--bus-id` (so
//! an operator's CI exercises tooling that keys on a model, a chip or a PCI address), and
//! `--sensors` (the parameters of the sensor model GET_SENSORS reports, docs/abi.md
//! "Sensors").

use davinci_driver_core::SensorConfig;
use davinci_mock_device::Presented;

/// `--model`, `--chip-name`, `--bus-id`: what GET_IDENTITY presents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Presentation {
    /// `--model`; `None`: `davinci_mock`.
    pub model: Option<String>,
    /// `--chip-name`; `None`: `mock0`.
    pub chip_name: Option<String>,
    /// `--bus-id`: one PCI address per device, in order; devices beyond the list take the
    /// last one's bus number plus one each. Empty: on no bus.
    pub bus_ids: Vec<BusId>,
}

/// A PCI address `DDDD:BB:DD.F`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusId {
    domain: u16,
    bus: u8,
    device: u8,
    function: u8,
}

impl std::fmt::Display for BusId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// A name for `--model` (at most 31 bytes) or `--chip-name` (at most 11): printable ASCII
/// without spaces, so every parser's field splitting keeps it one word.
pub fn parse_name(option: &str, v: &str, max: usize) -> Result<String, String> {
    if v.is_empty() || v.len() > max {
        return Err(format!(
            "{option} '{v}': expected 1 to {max} characters (GET_IDENTITY's field)"
        ));
    }
    if let Some(c) = v.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!(
            "{option} '{v}': {c:?} is not printable ASCII without spaces (parsers split on \
             spaces; names like Ascend910B3 or 910B3)"
        ));
    }
    Ok(v.to_string())
}

/// `--bus-id`: comma-separated PCI addresses `DDDD:BB:DD.F` (hexadecimal; the domain may be
/// left out, `BB:DD.F`), one per device in order.
pub fn parse_bus_ids(v: &str) -> Result<Vec<BusId>, String> {
    v.split(',').map(parse_bus_id).collect()
}

fn parse_bus_id(v: &str) -> Result<BusId, String> {
    let bad = || {
        format!(
            "--bus-id '{v}': expected a PCI address DDDD:BB:DD.F in hexadecimal (e.g. \
             0000:c1:00.0; device 0 to 1f, function 0 to 7)"
        )
    };
    let parts: Vec<&str> = v.split(':').collect();
    let (domain, bus, rest) = match parts.as_slice() {
        [d, b, r] => (*d, *b, *r),
        [b, r] => ("0000", *b, *r),
        _ => return Err(bad()),
    };
    let (dev, func) = rest.split_once('.').ok_or_else(bad)?;
    let hex = |s: &str, len: usize| {
        (s.len() <= len && !s.is_empty())
            .then(|| u32::from_str_radix(s, 16).ok())
            .flatten()
    };
    let id = BusId {
        domain: hex(domain, 4).ok_or_else(bad)? as u16,
        bus: hex(bus, 2).ok_or_else(bad)? as u8,
        device: hex(dev, 2).filter(|&d| d < 32).ok_or_else(bad)? as u8,
        function: hex(func, 1).filter(|&f| f < 8).ok_or_else(bad)? as u8,
    };
    Ok(id)
}

impl Presentation {
    /// What device `index` (0 for the first the daemon hosts) presents.
    pub fn for_device(&self, index: u32) -> Presented {
        let d = Presented::DEFAULT;
        let mut p = Presented {
            model: self
                .model
                .as_deref()
                .map_or(d.model, |m| Presented::new(m, "", "").model),
            chip_name: self
                .chip_name
                .as_deref()
                .map_or(d.chip_name, |c| Presented::new("", c, "").chip_name),
            bus_id: d.bus_id,
        };
        if let Some(last) = self.bus_ids.last() {
            let i = index as usize;
            let bus = match self.bus_ids.get(i) {
                Some(b) => *b,
                None => {
                    let beyond = (i + 1 - self.bus_ids.len()) as u32;
                    BusId {
                        bus: (u32::from(last.bus) + beyond).min(255) as u8,
                        ..*last
                    }
                }
            };
            p.bus_id = Presented::new("", "", &bus.to_string()).bus_id;
        }
        p
    }
}

/// `--sensors KEY=VALUE,...` over `base`: ambient (°C), thermal-resistance (°C/W), tau (a
/// duration: 20s, 500ms), idle-power, full-power, power-limit (W), idle-voltage,
/// full-voltage (V), slowdown, shutdown (°C), pcie-gen, pcie-width (the modelled link; 0: none).
/// Decimals allowed (`ambient=27.5`).
pub fn parse_sensors(v: &str, base: SensorConfig) -> Result<SensorConfig, String> {
    let mut c = base;
    for item in v.split(',') {
        let (k, val) = item.split_once('=').ok_or_else(|| {
            format!("--sensors '{item}': expected KEY=VALUE (e.g. ambient=35,idle-power=70)")
        })?;
        let milli = |max: i64| -> Result<i64, String> {
            parse_milli(val)
                .filter(|m| (0..=max * 1000).contains(m))
                .ok_or_else(|| format!("--sensors {k}='{val}': expected a number from 0 to {max}"))
        };
        match k {
            "ambient" => c.ambient_mc = milli(200)? as i32,
            "thermal-resistance" => c.thermal_mc_per_w = milli(100)? as u32,
            "tau" => {
                let d = davinci_units::parse_duration(val)
                    .map_err(|e| format!("--sensors tau: {e}"))?;
                let ms = d.as_millis();
                if !(1..=3_600_000).contains(&ms) {
                    return Err(format!("--sensors tau='{val}': expected 1ms to 1h"));
                }
                c.tau_ms = ms as u32;
            }
            "idle-power" => c.idle_mw = milli(4000)? as u32,
            "full-power" => c.full_mw = milli(4000)? as u32,
            "power-limit" => c.power_limit_mw = milli(4000)? as u32,
            "idle-voltage" => c.idle_mv = milli(10)? as u32,
            "full-voltage" => c.full_mv = milli(10)? as u32,
            "slowdown" => c.slowdown_mc = milli(300)? as i32,
            "pcie-gen" | "pcie-width" => {
                let n: u16 = val
                    .parse()
                    .ok()
                    .filter(|&n| (0..=64).contains(&n))
                    .ok_or_else(|| format!("--sensors {k}='{val}': expected 0 (no link) to 64"))?;
                if k == "pcie-gen" {
                    c.pcie_gen = n;
                } else {
                    c.pcie_width = n;
                }
            }
            "shutdown" => c.shutdown_mc = milli(300)? as i32,
            _ => {
                return Err(format!(
                    "--sensors: unknown key '{k}' (ambient, thermal-resistance, tau, \
                     idle-power, full-power, power-limit, idle-voltage, full-voltage, \
                     slowdown, shutdown, pcie-gen, pcie-width)"
                ))
            }
        }
    }
    if c.full_mw < c.idle_mw || c.full_mv < c.idle_mv || c.shutdown_mc < c.slowdown_mc {
        return Err(format!(
            "--sensors '{v}': full-power must be at least idle-power, full-voltage at least \
             idle-voltage, shutdown at least slowdown"
        ));
    }
    Ok(c)
}

/// A non-negative decimal with at most three decimals, times 1000.
fn parse_milli(v: &str) -> Option<i64> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if int.is_empty()
        || frac.len() > 3
        || !(int.bytes().chain(frac.bytes())).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let int: i64 = int.parse().ok().filter(|&i| i <= 1_000_000)?;
    let frac: i64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<i64>().ok()? * 10i64.pow(3 - frac.len() as u32)
    };
    Some(int * 1000 + frac)
}

#[cfg(test)]
mod tests {
    use super::*;
    use davinci_uapi::DeviceIdentity;

    fn text(field: &[u8]) -> String {
        let id = DeviceIdentity {
            bus_id: field.try_into().unwrap(),
            ..DeviceIdentity::default()
        };
        id.bus_id().to_string()
    }

    #[test]
    fn bus_ids_per_device_and_beyond_the_list() {
        let p = Presentation {
            bus_ids: parse_bus_ids("0000:C1:00.0,01:00.0").unwrap(),
            ..Presentation::default()
        };
        assert_eq!(text(&p.for_device(0).bus_id), "0000:c1:00.0");
        assert_eq!(text(&p.for_device(1).bus_id), "0000:01:00.0");
        assert_eq!(text(&p.for_device(3).bus_id), "0000:03:00.0");
        assert_eq!(Presentation::default().for_device(2), Presented::DEFAULT);
        for bad in [
            "",
            "0000:c1:00",
            "0000:c1:20.0",
            "0000:c1:00.8",
            "x:1:0.0",
            "10000:0:0.0",
        ] {
            let e = parse_bus_ids(bad).unwrap_err();
            assert!(e.contains("DDDD:BB:DD.F"), "{bad}: {e}");
        }
    }

    #[test]
    fn names_are_one_printable_word() {
        assert_eq!(
            parse_name("--model", "Ascend910B3", 31).unwrap(),
            "Ascend910B3"
        );
        assert!(parse_name("--model", "Ascend 910", 31)
            .unwrap_err()
            .contains("spaces"));
        assert!(parse_name("--chip-name", "", 11).is_err());
        assert!(parse_name("--chip-name", "123456789012", 11)
            .unwrap_err()
            .contains("1 to 11"));
        let p = Presentation {
            model: Some("Ascend910B3".into()),
            chip_name: Some("910B3".into()),
            bus_ids: Vec::new(),
        };
        assert_eq!(p.for_device(0), Presented::new("Ascend910B3", "910B3", ""));
    }

    #[test]
    fn sensor_options() {
        let c = parse_sensors(
            "ambient=27.5,tau=5s,idle-power=70,full-voltage=0.95",
            SensorConfig::DEFAULT,
        )
        .unwrap();
        assert_eq!(
            (c.ambient_mc, c.tau_ms, c.idle_mw, c.full_mv),
            (27_500, 5_000, 70_000, 950)
        );
        assert_eq!(c.full_mw, SensorConfig::DEFAULT.full_mw);
        for (bad, says) in [
            ("ambient", "KEY=VALUE"),
            ("heat=3", "unknown key"),
            ("ambient=-3", "0 to 200"),
            ("ambient=1.2345", "0 to 200"),
            ("tau=0s", "1ms to 1h"),
            ("idle-power=400", "at least idle-power"),
        ] {
            let e = parse_sensors(bad, SensorConfig::DEFAULT).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
