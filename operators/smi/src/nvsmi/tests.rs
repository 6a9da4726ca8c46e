//! nvidia-smi mode against fake devices and the samples of the real nvidia-smi in
//! `tests/nvidia-smi-reference/`: the accepted names and units are the recorded ones, the CSV
//! header of every property is the recorded header byte for byte, and every `-q` line, `-q -x`
//! element, `-L` line and table line has the recorded shape.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use davinci_uapi::{
    ClientUsage, DeviceCounters, DeviceIdentity, DeviceInfo, DeviceSensors, Features, ShareMode,
};

use super::fields::{APP_FIELDS, GPU_FIELDS};
use crate::tests::{fake, usage_of, world, FakeDev};
use crate::{run_with, DeviceAccess, Opener, SmiError};

macro_rules! sample {
    ($f:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/nvidia-smi-reference/",
            $f
        ))
    };
}

/// A fake device with everything ABI 1.5 reports: identity, counters (busy `busy` ns of
/// every 1000 between reads), sensors.
#[derive(Clone)]
struct Rich {
    dev: FakeDev,
    busy: u64,
    reads: Rc<Cell<u64>>,
    sensors: Rc<RefCell<Option<DeviceSensors>>>,
}

impl DeviceAccess for Rich {
    fn info(&self) -> Result<DeviceInfo, SmiError> {
        self.dev.info()
    }
    fn share(&self) -> Result<(ShareMode, u32), SmiError> {
        self.dev.share()
    }
    fn set_share(&self, m: ShareMode) -> Result<(), SmiError> {
        self.dev.set_share(m)
    }
    fn clients(&self) -> Result<Vec<ClientUsage>, SmiError> {
        self.dev.clients()
    }
    fn identity(&self) -> Result<Option<DeviceIdentity>, SmiError> {
        self.dev.identity()
    }
    fn counters(&self) -> Result<Option<DeviceCounters>, SmiError> {
        self.dev.info()?;
        let n = self.reads.get() + 1;
        self.reads.set(n);
        Ok(Some(DeviceCounters {
            now_ns: n * 1000,
            busy_ns: n * self.busy,
            engines: 1,
            ..DeviceCounters::default()
        }))
    }
    fn sensors(&self) -> Result<Option<DeviceSensors>, SmiError> {
        self.dev.info()?;
        Ok(*self.sensors.borrow())
    }
}

pub(super) struct Rigs(HashMap<String, Rich>);

impl Opener for Rigs {
    fn open(&self, path: &str) -> Result<Box<dyn DeviceAccess>, SmiError> {
        self.0
            .get(path)
            .map(|d| Box::new(d.clone()) as Box<dyn DeviceAccess>)
            .ok_or_else(|| SmiError::new(davinci_uapi::Errno::ENODEV, "open failed: ENODEV"))
    }
}

const A: &str = "mock:/s/davinci0.sock";
const B: &str = "mock:/s/davinci1.sock";
pub(super) const UUID_A: &str = "7ed65465-3573-84da-b31d-04a43b3958d8";

fn sensors() -> DeviceSensors {
    DeviceSensors {
        temperature_mc: 41_400,
        memory_temperature_mc: 47_600,
        power_mw: 69_849,
        power_limit_mw: 700_000,
        voltage_mv: 750,
        throttle: 0,
        slowdown_temperature_mc: 95_000,
        shutdown_temperature_mc: 105_000,
        ..DeviceSensors::default()
    }
}

/// davinci0: a PCI device (00000000:0C:00.0) with identity, sensors and one client using
/// 4 MiB, busy half the time, exclusive; davinci1: no identity, no sensors (a driver before
/// ABI 1.4), shared, idle.
pub(super) fn rigs() -> Rigs {
    let a = fake(0, vec![usage_of(4242, "", 4 << 20)], false, true);
    {
        let mut s = a.state.borrow_mut();
        s.info.features |= Features::IDENTITY | Features::SENSORS;
        let mut id = DeviceIdentity {
            bus_id: DeviceIdentity::text_field("0000:0c:00.0"),
            pci_vendor: 0x19e5,
            pci_device: 0xd802,
            ..DeviceIdentity::default()
        };
        let hex: Vec<u8> = UUID_A.bytes().filter(|b| *b != b'-').collect();
        for (i, pair) in hex.chunks(2).enumerate() {
            id.uuid[i] = u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap();
        }
        id.model = DeviceIdentity::text_field("Ascend910B3");
        id.driver_version = DeviceIdentity::text_field("davinci-mockd 0.1.0");
        s.identity = Some(id);
    }
    let b = fake(1, vec![], true, true);
    let rich = |dev, busy, sensors| Rich {
        dev,
        busy,
        reads: Rc::new(Cell::new(0)),
        sensors: Rc::new(RefCell::new(sensors)),
    };
    Rigs(HashMap::from([
        (A.to_string(), rich(a, 500, Some(sensors()))),
        (B.to_string(), rich(b, 0, None)),
    ]))
}

/// Runs `nvidia-smi ARGS` on both devices (by `--device`); status, stdout, stderr.
pub(super) fn nv(r: &Rigs, args: &[&str]) -> (i32, String, String) {
    nv_sleeping(r, args, &mut |d| panic!("slept {d:?} without -l"))
}

fn nv_sleeping(r: &Rigs, args: &[&str], sleep: &mut dyn FnMut(Duration)) -> (i32, String, String) {
    let mut argv = vec!["/usr/bin/nvidia-smi".to_string()];
    argv.extend(["--device", A, "--device", B].map(String::from));
    argv.extend(args.iter().map(|s| s.to_string()));
    let w = world(vec![]);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_with(&argv, &w.disc, r, &mut out, &mut err, sleep);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// The property lines of a recorded `--help-query-*` (`"name" or "alias"`), as name lists.
pub(super) fn help_names(help: &str) -> Vec<Vec<String>> {
    help.lines()
        .filter(|l| {
            l.starts_with('"')
                && l.split(" or ").all(|n| {
                    n.len() > 2
                        && n.starts_with('"')
                        && n.ends_with('"')
                        && n[1..n.len() - 1]
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
                })
        })
        .map(|l| {
            let mut v: Vec<String> = Vec::new();
            for n in l.split(" or ").map(|n| n.trim_matches('"').to_string()) {
                if !v.contains(&n) {
                    v.push(n);
                }
            }
            v
        })
        .collect()
}

fn table_names(t: &[super::fields::F]) -> Vec<Vec<String>> {
    t.iter()
        .map(|f| {
            let mut v = vec![f.0.to_string()];
            v.extend(f.1.iter().map(|s| s.to_string()));
            v
        })
        .collect()
}

#[test]
fn the_field_tables_are_the_recorded_help_lists() {
    assert_eq!(
        table_names(GPU_FIELDS),
        help_names(sample!("help-query-gpu.txt"))
    );
    assert_eq!(GPU_FIELDS.len(), 241);
    assert_eq!(
        table_names(APP_FIELDS),
        help_names(sample!("help-query-compute-apps.txt"))
    );
    // The units are those of the recorded header of every property.
    let header: Vec<&str> = sample!("query-gpu-all.csv")
        .lines()
        .next()
        .unwrap()
        .split(", ")
        .collect();
    let ours: Vec<String> = GPU_FIELDS.iter().map(|f| f.header()).collect();
    assert_eq!(ours, header);
    // And our own --help-query-* lists the same names, in the same layout.
    let r = rigs();
    for (flag, sample) in [
        ("--help-query-gpu", sample!("help-query-gpu.txt")),
        (
            "--help-query-compute-apps",
            sample!("help-query-compute-apps.txt"),
        ),
    ] {
        let (code, out, _) = nv(&r, &[flag]);
        assert_eq!(code, 0);
        assert_eq!(help_names(&out), help_names(sample), "{flag}");
        assert_eq!(out.lines().next(), sample.lines().next(), "{flag}");
    }
}

/// The header of all 241 properties, asked by their first names, is the recorded header;
/// asked by any alias, the same (nvidia-smi prints the first name); each row has a cell per
/// property, a value with the recorded unit or `[N/A]`.
#[test]
fn every_property_and_alias_is_accepted_with_the_recorded_header_and_units() {
    let r = rigs();
    let recorded = sample!("query-gpu-all.csv");
    let (rec_header, rec_row) = recorded.split_once('\n').unwrap();
    let names: Vec<&str> = GPU_FIELDS.iter().map(|f| f.0).collect();
    let (code, out, err) = nv(
        &r,
        &[&format!("--query-gpu={}", names.join(",")), "--format=csv"],
    );
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], rec_header);
    let rec: Vec<&str> = rec_row.trim_end().split(", ").collect();
    for row in &lines[1..] {
        let cells: Vec<&str> = row.split(", ").collect();
        assert_eq!(cells.len(), GPU_FIELDS.len(), "{row}");
        for ((f, ours), theirs) in GPU_FIELDS.iter().zip(&cells).zip(&rec) {
            if *ours == "[N/A]" {
                continue;
            }
            if let Some(u) = f.2 {
                assert!(ours.ends_with(&format!(" {u}")), "{}: {ours}", f.0);
                assert!(
                    theirs.ends_with(&format!(" {u}")) || theirs.starts_with('['),
                    "{}",
                    f.0
                );
            }
        }
    }
    // Every alias, in one query: the canonical names come back.
    let aliases: Vec<&str> = GPU_FIELDS
        .iter()
        .flat_map(|f| f.1.iter().copied())
        .collect();
    let (code, out, _) = nv(
        &r,
        &[
            &format!("--query-gpu={}", aliases.join(",")),
            "--format=csv",
        ],
    );
    assert_eq!(code, 0);
    let expect: Vec<String> = GPU_FIELDS
        .iter()
        .flat_map(|f| f.1.iter().map(move |_| f.header()))
        .collect();
    assert_eq!(out.lines().next().unwrap(), expect.join(", "));
}

#[test]
fn values_of_a_device_with_identity_sensors_and_a_client() {
    let r = rigs();
    let q = "index,count,name,uuid,driver_version,pci.bus_id,pci.domain,pci.bus,pci.device,\
             pci.device_id,memory.total,memory.used,memory.free,utilization.gpu,temperature.gpu,\
             temperature.memory,power.draw,power.limit,enforced.power.limit,compute_mode,pstate,\
             display_active,display_mode,persistence_mode,fan.speed,serial,\
             clocks_throttle_reasons.supported,clocks_throttle_reasons.active,\
             clocks_event_reasons.gpu_idle,clocks_event_reasons.sw_power_cap";
    let (code, out, err) = nv(&r, &[&format!("--query-gpu={q}"), "--format=csv,noheader"]);
    assert_eq!((code, err.as_str()), (0, ""));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "0, 2, Ascend910B3, GPU-{UUID_A}, 0.1.0, 00000000:0C:00.0, 0x0000, 0x0C, \
             0x00, 0xD80219E5, 256 MiB, 4 MiB, 252 MiB, 50 %, 41, 48, 69.85 W, 700.00 W, \
             700.00 W, Exclusive_Process, P0, Disabled, Disabled, Enabled, [N/A], [N/A], \
             0x000000000000004D, 0x0000000000000000, Not Active, Not Active"
        )
    );
    // A device before ABI 1.4: what GET_INFO says, [N/A] for the rest.
    assert_eq!(
        lines[1],
        "1, 2, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], 256 MiB, 0 MiB, 256 MiB, \
         [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], Default, P0, Disabled, Disabled, Enabled, \
         [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]"
    );
    // Throttling shows in the reasons; nounits drops the units; the options in any order.
    r.0[A].sensors.borrow_mut().as_mut().unwrap().throttle =
        davinci_uapi::THROTTLE_THERMAL | davinci_uapi::THROTTLE_POWER;
    let (_, out, _) = nv(
        &r,
        &[
            "--format=nounits,noheader,csv",
            "-i",
            "0",
            "--query-gpu=clocks_event_reasons.active,clocks_event_reasons.hw_slowdown,\
             clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.sw_thermal_slowdown,\
             power.draw,memory.total,utilization.gpu",
        ],
    );
    assert_eq!(
        out,
        "0x000000000000004C, Active, Active, [N/A], 69.85, 256, 50\n"
    );
}

#[test]
fn bad_fields_and_bad_lines_get_nvidia_smis_answers() {
    let r = rigs();
    // The recorded answer to an unknown field, with that field's name.
    let recorded = sample!("invalid-field.txt").replace("device_minor", "cuda_version");
    for q in ["cuda_version", "index,cuda_version", "name,cuda_version,"] {
        let (code, out, err) = nv(&r, &[&format!("--query-gpu={q}"), "--format=csv"]);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (2, recorded.as_str(), ""),
            "{q}"
        );
    }
    let (code, out, _) = nv(
        &r,
        &["--query-compute-apps=pid,used_gpu_mem", "--format=csv"],
    );
    assert_eq!(
        (code, out.as_str()),
        (
            2,
            "Field \"used_gpu_mem\" is not a valid field to query.\n\n"
        )
    );
    // Names are exact: nvidia-smi does not fold case.
    let (code, _, _) = nv(&r, &["--query-gpu=Name", "--format=csv"]);
    assert_eq!(code, 2);
    let invalid = sample!("invalid-args.txt");
    for bad in [
        &["-L", "--query-gpu=index", "--format=csv"][..],
        &["--query-gpu=index", "--format=csv,json"],
        &["--query-gpu=index", "--format=noheader"],
        &[
            "--query-gpu=index",
            "--query-compute-apps=pid",
            "--format=csv",
        ],
        &["-i"],
        &["--format=csv"],
        &["-d", "MEMORY"],
        &["-q", "-d", "NOPE"],
        &["-L", "-l", "0"],
    ] {
        let (code, out, err) = nv(&r, bad);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (2, invalid, ""),
            "{bad:?}"
        );
    }
    // An option nvidia-smi does not know: the recorded answer, naming it.
    let (code, out, _) = nv(&r, &["--query-gpu=index", "noheader"]);
    assert_eq!((code, out.as_str()), (2, sample!("unknown-option.txt")));
    let (code, out, _) = nv(&r, &["--bogus"]);
    assert_eq!(
        (code, out.as_str()),
        (
            2,
            sample!("unknown-option.txt")
                .replace("noheader", "--bogus")
                .as_str()
        )
    );
}

#[test]
fn trailing_comma_and_spaces_as_device_smi_and_others_send_them() {
    let r = rigs();
    let (code, out, _) = nv(
        &r,
        &[
            "--id=0",
            "--query-gpu=memory.used,utilization.gpu,",
            "--format=csv,noheader,nounits",
        ],
    );
    assert_eq!((code, out.as_str()), (0, "4, 50\n"));
    // `--query-gpu FIELDS` (no `=`), and no --format: CSV with its header.
    let (code, out, _) = nv(&r, &["--query-gpu", "index, memory.total", "-i", "1"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "index, memory.total [MiB]\n1, 256 MiB\n")
    );
}

#[test]
fn id_selects_by_index_uuid_and_bus_id() {
    let r = rigs();
    let idx = |args: &[&str]| {
        let mut a = vec!["--query-gpu=index", "--format=csv,noheader"];
        a.extend_from_slice(args);
        let (code, out, _) = nv(&r, &a);
        (code, out)
    };
    let upper = format!("GPU-{}", UUID_A.to_uppercase());
    for sel in [
        "0",
        &format!("GPU-{UUID_A}")[..],
        UUID_A,
        &upper,
        "00000000:0C:00.0",
        "0000:0c:00.0",
    ] {
        assert_eq!(idx(&["-i", sel]), (0, "0\n".into()), "{sel}");
    }
    assert_eq!(idx(&["--id=1,0"]), (0, "0\n1\n".into()));
    for missing in [
        "2",
        "0,7",
        "GPU-00000000-0000-0000-0000-000000000000",
        "0000:0d:00.0",
    ] {
        let (code, out) = idx(&["-i", missing]);
        assert_eq!(
            (code, out.as_str()),
            (6, "No devices were found\n"),
            "{missing}"
        );
    }
}

#[test]
fn compute_apps_one_row_per_process_as_recorded() {
    let r = rigs();
    // A second open of the same process, and another process.
    {
        let mut s = r.0[A].dev.state.borrow_mut();
        s.clients.push(usage_of(4242, "", 2 << 20));
        s.clients.push(usage_of(77, "", 1 << 20));
    }
    let q = "timestamp,gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,process_name,used_gpu_memory";
    let (code, out, _) = nv(&r, &[&format!("--query-compute-apps={q}"), "--format=csv"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        sample!("query-compute-apps.csv").lines().next().unwrap()
    );
    assert_eq!(lines.len(), 3, "{out}");
    let cells: Vec<&str> = lines[1].split(", ").collect();
    assert!(valid_timestamp(cells[0]), "{}", cells[0]);
    assert_eq!(
        cells[1..].join(", "),
        format!("Ascend910B3, 00000000:0C:00.0, [N/A], GPU-{UUID_A}, 4242, proc4242, 6 MiB")
    );
    assert!(lines[2].ends_with(", 77, proc77, 1 MiB"), "{}", lines[2]);
    // nvsmi's and gpustat's query: aliases, no header, no units.
    let (_, out, _) = nv(
        &r,
        &[
            "--query-compute-apps=pid,name,gpu_uuid,gpu_name,used_memory",
            "--format=csv,noheader,nounits",
        ],
    );
    assert_eq!(
        out,
        format!("4242, proc4242, GPU-{UUID_A}, Ascend910B3, 6\n77, proc77, GPU-{UUID_A}, Ascend910B3, 1\n")
    );
}

/// `YYYY/MM/DD HH:MM:SS.mmm`, as the recorded timestamps.
fn valid_timestamp(s: &str) -> bool {
    let shape: String = s
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    let rec = sample!("query-compute-apps.csv")
        .lines()
        .nth(1)
        .unwrap()
        .split(", ")
        .next()
        .unwrap();
    let rec_shape: String = rec
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    shape == rec_shape
}

#[test]
fn loop_prints_the_header_once_and_stops_when_a_device_goes() {
    let r = rigs();
    let mut pauses = Vec::new();
    let dev = r.0[B].dev.clone();
    let (code, out, err) = nv_sleeping(
        &r,
        &[
            "--query-gpu=index",
            "--format=csv",
            "-i",
            "1",
            "-lms",
            "250",
        ],
        &mut |d| {
            pauses.push(d);
            if pauses.len() == 2 {
                dev.state.borrow_mut().down = true;
            }
        },
    );
    assert_eq!(pauses, vec![Duration::from_millis(250); 2]);
    assert_eq!(out, "index\n1\n1\n");
    assert!(err.contains("device 1"), "{err}");
    assert_eq!(code, crate::exit::NOT_FOUND);
    let mut secs = Vec::new();
    let dev = r.0[B].dev.clone();
    dev.state.borrow_mut().down = false;
    let _ = nv_sleeping(&r, &["-L", "-l"], &mut |d| {
        secs.push(d);
        dev.state.borrow_mut().down = true;
    });
    assert_eq!(secs, vec![Duration::from_secs(5)]);
}

#[test]
fn mode_by_program_name_or_flag_and_output_to_a_file() {
    let r = rigs();
    let w = world(vec![]);
    let run = |argv: &[&str]| {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run_with(&argv, &w.disc, &r, &mut out, &mut err, &mut |_| {});
        (code, String::from_utf8(out).unwrap())
    };
    let (code, out) = run(&["davinci-smi", "--nvidia-smi", "--device", A, "-L"]);
    assert_eq!((code, out.lines().count()), (0, 1), "{out}");
    let (code, out) = run(&["nvidia-smi", "--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("--query-gpu") && out.contains("[N/A]"),
        "{out}"
    );
    let (code, out) = run(&["nvidia-smi", "--version"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("NVIDIA-SMI version  : "), "{out}");
    // `-f`: the output goes to the file.
    let path = std::env::temp_dir().join(format!("nvsmi-f-{}.csv", std::process::id()));
    let p = path.to_str().unwrap();
    let (code, out) = run(&[
        "nvidia-smi",
        "--device",
        A,
        "-f",
        p,
        "--query-gpu=index",
        "--format=csv",
    ]);
    assert_eq!((code, out.as_str()), (0, ""));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "index\n0\n");
    let _ = std::fs::remove_file(&path);
    let _ = fake; // the plain fakes are used through `rigs`
}

#[test]
fn no_devices_is_nvidia_smis_answer() {
    let w = world(vec![]);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let argv: Vec<String> = ["nvidia-smi", "-L"].map(String::from).to_vec();
    let code = run_with(&argv, &w.disc, &w.opener, &mut out, &mut err, &mut |_| {});
    assert_eq!(
        (code, String::from_utf8(out).unwrap().as_str()),
        (6, "No devices were found\n")
    );
    assert!(String::from_utf8(err)
        .unwrap()
        .contains("no davinci devices found"));
}

/// nvidia_gpu_exporter's field discovery (`internal/nvidiasmi/fields.go` ExtractQFields:
/// the first quoted name after a blank line of `--help-query-gpu`), then its query of all of
/// them with `--format=csv`: every discovered field comes back as one column.
#[test]
fn nvidia_gpu_exporters_field_discovery_reads_our_help() {
    let r = rigs();
    let (_, help, _) = nv(&r, &["--help-query-gpu"]);
    let mut fields = Vec::new();
    let lines: Vec<&str> = help.lines().collect();
    for w in lines.windows(2) {
        if w[0].trim().is_empty() && w[1].starts_with('"') {
            fields.push(w[1][1..].split('"').next().unwrap().to_string());
        }
    }
    let recorded: Vec<String> = help_names(sample!("help-query-gpu.txt"))
        .into_iter()
        .map(|n| n[0].clone())
        .collect();
    assert_eq!(fields, recorded);
    let (code, out, _) = nv(
        &r,
        &[&format!("--query-gpu={}", fields.join(",")), "--format=csv"],
    );
    assert_eq!(code, 0);
    for line in out.lines() {
        assert_eq!(line.split(", ").count(), fields.len(), "{line}");
    }
}
