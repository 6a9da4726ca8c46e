//! npu-smi mode with what ABI 1.5 devices report: GET_IDENTITY's chip name, bus address and
//! NUMA node, and GET_SENSORS. The fakes of the sampled machine now say what the real
//! machine said (chip `910B1` on `0000:C1:00.0` at 41 °C drawing 271.1 W), so more of each
//! sample is matched byte for byte; the chip view of `board -c` against mind-cluster's
//! sample, the topology matrix against ms-swift's.

use std::collections::HashMap;
use std::io::BufRead;

use davinci_uapi::{
    ClientUsage, DeviceCounters, DeviceIdentity, DeviceInfo, DeviceSensors, Features, ShareMode,
    TenantShareArgs,
};

use super::tests::{assert_kv_shape, sample_with_na, sampled, spaces, with_value};
use super::topo::{matrix, Place, LEGEND};
use crate::tests::*;
use crate::{run_with_input, DeviceAccess, Opener, SmiError};

macro_rules! sample {
    ($f:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/npu-smi-reference/",
            $f
        ))
    };
}

/// A device of the world with GET_SENSORS answering `sensors` (`None`: a driver without).
struct WithSensors {
    dev: Box<dyn DeviceAccess>,
    sensors: Option<DeviceSensors>,
}

impl DeviceAccess for WithSensors {
    fn info(&self) -> Result<DeviceInfo, SmiError> {
        self.dev.info()
    }
    fn share(&self) -> Result<(ShareMode, u32), SmiError> {
        self.dev.share()
    }
    fn set_share(&self, mode: ShareMode) -> Result<(), SmiError> {
        self.dev.set_share(mode)
    }
    fn clients(&self) -> Result<Vec<ClientUsage>, SmiError> {
        self.dev.clients()
    }
    fn identity(&self) -> Result<Option<DeviceIdentity>, SmiError> {
        self.dev.identity()
    }
    fn counters(&self) -> Result<Option<DeviceCounters>, SmiError> {
        self.dev.counters()
    }
    fn tenant_share(&self, tenant: &str, set: Option<u32>) -> Result<TenantShareArgs, SmiError> {
        self.dev.tenant_share(tenant, set)
    }
    fn sensors(&self) -> Result<Option<DeviceSensors>, SmiError> {
        Ok(self.sensors)
    }
}

/// The world's devices, those in `sensors` with sensors.
struct Sensing<'a> {
    w: &'a World,
    sensors: HashMap<&'static str, DeviceSensors>,
}

impl Opener for Sensing<'_> {
    fn open(&self, path: &str) -> Result<Box<dyn DeviceAccess>, SmiError> {
        Ok(Box::new(WithSensors {
            dev: self.w.opener.open(path)?,
            sensors: self.sensors.get(path).copied(),
        }))
    }
}

fn sensors(temp_mc: i32, power_mw: u32) -> DeviceSensors {
    DeviceSensors {
        temperature_mc: temp_mc,
        memory_temperature_mc: temp_mc + 3_000,
        power_mw,
        power_limit_mw: 400_000,
        voltage_mv: 850,
        slowdown_temperature_mc: 95_000,
        shutdown_temperature_mc: 105_000,
        ..DeviceSensors::default()
    }
}

/// Gives device `path` of `w` an ABI 1.5 identity: `model`, `chip`, `bus` (`""`: on no bus),
/// NUMA node `numa`.
fn identify(w: &World, path: &str, model: &str, chip: &str, bus: &str, numa: i32) {
    let mut s = w.opener.devs[path].state.borrow_mut();
    s.info.features |= Features::IDENTITY | Features::SENSORS;
    let mut id = DeviceIdentity {
        numa_node: numa,
        uuid: [0x5a; 16],
        ..DeviceIdentity::default()
    };
    id.model = DeviceIdentity::text_field(model);
    id.chip_name = DeviceIdentity::text_field(chip);
    id.bus_id = DeviceIdentity::text_field(bus);
    if !bus.is_empty() {
        (id.pci_vendor, id.pci_device) = (0x19e5, 0xd802);
    }
    id.driver_version = DeviceIdentity::text_field("davinci-mockd 0.1.0");
    s.identity = Some(id);
}

/// Runs `args` as npu-smi on both sampled devices through `o`; must succeed quietly.
fn run(w: &World, o: &dyn Opener, args: &[&str]) -> String {
    let mut argv = vec!["npu-smi".to_string()];
    argv.extend(BOTH.iter().chain(args).map(|s| s.to_string()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_with_input(
        &argv,
        &w.disc,
        o,
        &mut out,
        &mut err,
        &mut |d| panic!("slept {d:?}"),
        None::<&mut dyn BufRead>,
    );
    let (out, err) = (
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    );
    assert_eq!((code, err.as_str()), (0, ""), "{args:?}: {out}");
    out
}

/// The sampled machine as it was: 910B1 chips on 0000:C1:00.0 and 0000:01:00.0, at 41 and
/// 42 °C drawing 271.1 and 275.0 W.
fn as_sampled(w: &World) -> Sensing<'_> {
    identify(w, A, "Ascend910B1", "910B1", "0000:c1:00.0", 0);
    identify(w, B, "Ascend910B1", "910B1", "0000:01:00.0", 1);
    Sensing {
        w,
        sensors: [(A, sensors(41_000, 271_149)), (B, sensors(41_500, 275_000))]
            .into_iter()
            .collect(),
    }
}

#[test]
fn info_table_with_sensors_and_identity_is_the_sample_but_for_utilization() {
    let w = sampled();
    let o = as_sampled(&w);
    let out = run(&w, &o, &["info"]);
    let want: String = sample!("info.txt")
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let l = if i == 1 {
                super::render::title(super::COMPAT_VERSION, "0.1.0")
                    .trim_end()
                    .to_string()
            } else {
                // No GET_COUNTERS here: utilization unknown.
                l.replace("| 55  ", "| NA  ").replace("| 66  ", "| NA  ")
            };
            l + "\n"
        })
        .collect();
    assert_eq!(out, want);
}

#[test]
fn temp_power_volt_common_memory_read_the_sensors() {
    let w = sampled();
    let o = as_sampled(&w);
    let out = run(&w, &o, &["info", "-t", "temp", "-i", "0"]);
    let temp: String = sample!("temp.txt")
        .lines()
        .take(6)
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        spaces(&out),
        with_na_value(&temp, "NPU Temperature (C)", "41")
    );
    assert_eq!(
        run(&w, &o, &["info", "-t", "temp", "-i", "1", "-c", "0"]),
        with_na_value(sample!("temp_c.txt"), "NPU Temperature (C)", "42")
    );
    let out = run(&w, &o, &["info", "-t", "power", "-i", "0"]);
    assert_eq!(
        spaces(&out),
        with_na_value(sample!("power.txt"), "NPU Real-time Power(W)", "271.1") + "\n"
    );
    let chip = run(&w, &o, &["info", "-t", "power", "-i", "1", "-c", "0"]);
    assert_eq!(
        chip,
        format!("\t{:<30} : 275.0\n", "NPU Real-time Power(W)")
    );
    let volt = run(&w, &o, &["info", "-t", "volt", "-i", "0", "-c", "0"]);
    assert_eq!(volt, format!("\t{:<30} : 0.85\n", "Voltage(V)"));
    let common = run(&w, &o, &["info", "-t", "common", "-i", "0"]);
    assert_kv_shape(&common);
    assert!(
        common.contains(&format!("\t{:<30} : 41\n", "Temperature(C)")),
        "{common}"
    );
    assert!(
        common.contains(&format!("\t{:<30} : 271.1\n", "NPU Real-time Power(W)")),
        "{common}"
    );
    let memory = run(&w, &o, &["info", "-t", "memory", "-i", "0", "-c", "0"]);
    assert!(
        memory.contains(&format!("\t{:<30} : 44\n", "HBM Temperature(C)")),
        "{memory}"
    );
    // Without sensors (a driver before 1.5): NA, the lines unchanged.
    let bare = Sensing {
        w: &w,
        sensors: HashMap::new(),
    };
    let out = run(&w, &bare, &["info", "-t", "volt", "-i", "0"]);
    assert_kv_shape(&out);
    assert!(
        out.contains(&format!("\t{:<30} : NA\n", "Voltage(V)")),
        "{out}"
    );
    let table = run(&w, &bare, &["info"]);
    assert!(
        table.contains("| 0     910B1               | OK            | NA          NA  "),
        "{table}"
    );
}

/// `sample` with the value of `key` (one line) replaced by `v`, every other line as is.
fn with_na_value(sample: &str, key: &str, v: &str) -> String {
    let mut hits = 0;
    let out = sample
        .split_inclusive('\n')
        .map(|l| {
            if l.split(" : ").next().map(str::trim) == Some(key) {
                hits += 1;
                with_value(l.trim_end_matches('\n'), v) + "\n"
            } else {
                l.to_string()
            }
        })
        .collect();
    assert_eq!(hits, 1, "{key} in {sample}");
    out
}

#[test]
fn board_chip_view_is_mind_clusters_sample() {
    let w = sampled();
    identify(&w, A, "Ascend910A", "910A", "0000:61:00.0", 0);
    let o = Sensing {
        w: &w,
        sensors: HashMap::new(),
    };
    let out = run(&w, &o, &["info", "-t", "board", "-i", "0", "-c", "0"]);
    // What no davinci device has is NA; its die id is its UUID.
    let na = ["Board ID", "BOM ID", "NDie ID", "Firmware Version"];
    let want = sample_with_na(sample!("board_c.txt"), &na).replace(
        "42C711D4 20B03704 4A10C8D4 14CC040A D2102003",
        "5A5A5A5A 5A5A5A5A 5A5A5A5A 5A5A5A5A 00000000",
    );
    assert_eq!(out, want);
    // The mock's default identity: one word each, the zero bus address.
    identify(&w, B, "davinci_mock", "mock0", "", -1);
    let out = run(&w, &o, &["info", "-t", "board", "-i", "1", "-c", "0"]);
    for (k, v) in [
        ("Chip Type", "davinci"),
        ("Chip Name", "mock0"),
        ("Chip Version", "V1"),
        ("PCIe Bus Info", "0000:00:00.0"),
    ] {
        assert!(out.contains(&format!("\t{k:<30} : {v}\n")), "{k}: {out}");
    }
    // The chip map names chips as npu-smi does: type, blank, name.
    let map = run(&w, &o, &["info", "-m"]);
    assert!(map.contains(&format!("{:<30}\n", "Ascend 910A")), "{map}");
    assert!(map.contains(&format!("{:<30}\n", "davinci mock0")), "{map}");
}

#[test]
fn product_in_the_card_and_chip_shapes() {
    let w = sampled();
    let o = as_sampled(&w);
    assert_eq!(
        run(&w, &o, &["info", "-t", "product", "-i", "0", "-c", "0"]),
        format!("\t{:<30} : NA\n", "Product Type")
    );
    let card = run(&w, &o, &["info", "-t", "product", "-i", "1"]);
    assert_eq!(
        card,
        format!(
            "\t{:<30} : 1\n\t{:<30} : 1\n\n\t{:<30} : NA\n\t{:<30} : 0\n\n",
            "NPU ID", "Chip Count", "Product Type", "Chip ID"
        )
    );
}

/// ms-swift's sample with cell `(row, col)` of the matrix `cell(row, col)` and each row's CPU
/// list `cpus[row]`: the sample's layout, columns cut where the sample has them.
fn sample_topo(cell: impl Fn(usize, usize) -> &'static str, cpus: &[&str]) -> String {
    let mut out = String::new();
    for (i, l) in sample!("topo.txt").split_inclusive('\n').enumerate() {
        if (1..=8).contains(&i) {
            let row = i - 1;
            out += &l[..11];
            for col in 0..8 {
                assert!(["X", "HCCS"].contains(&l[11 + col * 11..22 + col * 11].trim_end()));
                out += &format!("{:<11}", cell(row, col));
            }
            assert_eq!(
                l[99..].trim_end(),
                ["144-167", "96-119", "0-23", "48-71"][row / 2]
            );
            out += cpus[row];
            out.push('\n');
        } else {
            out += l;
        }
    }
    out
}

#[test]
fn topo_is_ms_swifts_matrix_with_davinci_relations() {
    let nodes = [6, 6, 4, 4, 0, 0, 2, 2];
    let cpus = |n: i32| Some(format!("{}-{}", n * 24, n * 24 + 23));
    // PCI devices: PHB on one node, SYS across nodes, X itself (no HCCS links).
    let places: Vec<Place> = (0..8)
        .map(|i| Place {
            id: i,
            numa: Some(nodes[i as usize]),
            on_bus: true,
        })
        .collect();
    let rel = |r: usize, c: usize| match (r == c, nodes[r] == nodes[c]) {
        (true, _) => "X",
        (false, true) => "PHB",
        (false, false) => "SYS",
    };
    let want = sample_topo(
        rel,
        &[
            "144-167", "144-167", "96-119", "96-119", "0-23", "0-23", "48-71", "48-71",
        ],
    );
    assert_eq!(matrix(&places, &cpus), want);
    // Devices on no bus: unknown to each other; no NUMA node: node 0's CPUs.
    let places: Vec<Place> = places
        .iter()
        .map(|p| Place {
            numa: None,
            on_bus: false,
            ..*p
        })
        .collect();
    let want = sample_topo(|r, c| if r == c { "X" } else { "NA" }, &["0-23"; 8]);
    assert_eq!(matrix(&places, &cpus), want);
    // PCI devices without a node are on node 0, as npu-smi reads a node of -1.
    let on_bus: Vec<Place> = places
        .iter()
        .map(|p| Place {
            on_bus: true,
            numa: (p.id == 7).then_some(1),
            ..*p
        })
        .collect();
    let want = sample_topo(
        |r, c| match (r == c, r == 7 || c == 7) {
            (true, _) => "X",
            (false, true) => "SYS",
            (false, false) => "PHB",
        },
        &[
            "0-23", "0-23", "0-23", "0-23", "0-23", "0-23", "0-23", "24-47",
        ],
    );
    assert_eq!(matrix(&on_bus, &cpus), want);
}

#[test]
fn topo_of_one_mock_device_and_of_the_world() {
    let w = sampled();
    identify(&w, A, "davinci_mock", "mock0", "", 1);
    let o = Sensing {
        w: &w,
        sensors: HashMap::new(),
    };
    let out = run(&w, &o, &["info", "-t", "topo"]);
    // NPU 1 has no identity: no node, node 0's CPUs.
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "\t   NPU0       NPU1       CPU Affinity");
    assert!(
        lines[1].starts_with("NPU0       X          NA         "),
        "{out}"
    );
    assert!(
        lines[2].starts_with("NPU1       NA         X          "),
        "{out}"
    );
    assert!(out.ends_with(&format!("\n\n{LEGEND}")), "{out}");
    // One device: the 1x1 matrix.
    let one = matrix(
        &[Place {
            id: 0,
            numa: None,
            on_bus: false,
        }],
        &|_| Some("0-1".into()),
    );
    assert_eq!(
        one,
        format!("\t   NPU0       CPU Affinity\nNPU0       X          0-1\n\n{LEGEND}")
    );
    // The legend is the sample's, byte for byte.
    assert!(sample!("topo.txt").ends_with(&format!("\n\n{LEGEND}")));
}
