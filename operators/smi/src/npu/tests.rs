//! npu-smi mode against the samples of the real npu-smi in `tests/npu-smi-reference/`: the
//! fakes mirror the sampled machines (two NPUs, 64 GiB HBM each), so every line is compared
//! byte for byte; where a value differs it is one a davinci device does not report, and the
//! line is then the sample's line with that value replaced by `NA` (same key, indentation,
//! alignment and separator). The telegraf samples were copied from a terminal, which shows
//! npu-smi's leading TAB as 8 spaces: they are compared with [`spaces`] of the output.

use std::io::BufRead;

use davinci_uapi::ClientUsage;

use super::render::title;
use super::COMPAT_VERSION;
use crate::exit;
use crate::run_with_input;
use crate::tests::*;

macro_rules! sample {
    ($f:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/npu-smi-reference/",
            $f
        ))
    };
}

pub(super) const MIB: u64 = 1 << 20;

/// Runs `args` as npu-smi (argv[0] `npu-smi`), answering `input` to a prompt when given.
pub(super) fn npu_in(w: &World, args: &[&str], input: Option<&str>) -> (i32, String, String) {
    let mut argv = vec!["npu-smi".to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut reader = input.map(|s| std::io::Cursor::new(s.as_bytes().to_vec()));
    let code = run_with_input(
        &argv,
        &w.disc,
        &w.opener,
        &mut out,
        &mut err,
        &mut |d| panic!("slept {d:?}"),
        reader.as_mut().map(|r| r as &mut dyn BufRead),
    );
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

pub(super) fn npu(w: &World, args: &[&str]) -> (i32, String, String) {
    let mut a = BOTH.to_vec();
    a.extend_from_slice(args);
    let (code, out, err) = npu_in(w, &a, None);
    assert_eq!(code, 0, "{args:?}: {out}{err}");
    assert_eq!(err, "", "{args:?}");
    (code, out, err)
}

fn client(pid: u32, comm: &str, mem: u64) -> ClientUsage {
    let mut u = usage_of(pid, "", mem);
    u.comm = ClientUsage::comm_field(comm);
    u
}

/// Two NPUs as in the samples: 65536 MB of HBM each, 65099 and 65098 MB used, one `python`
/// process each; davinci0 exclusive, davinci1 shared.
pub(super) fn sampled() -> World {
    let w = world(vec![
        (
            A,
            fake(0, vec![client(576489, "python", 60703 * MIB)], false, true),
        ),
        (
            B,
            fake(1, vec![client(576491, "python", 60704 * MIB)], true, true),
        ),
    ]);
    for (p, used) in [(A, 65099), (B, 65098)] {
        let mut s = w.opener.devs[p].state.borrow_mut();
        s.info.memory_size = 65536 * MIB;
        s.info.memory_used = used * MIB;
    }
    w
}

/// `out` as a terminal shows it: each line's leading TAB as 8 spaces.
pub(super) fn spaces(out: &str) -> String {
    out.split_inclusive('\n')
        .map(|l| match l.strip_prefix('\t') {
            Some(rest) => format!("        {rest}"),
            None => l.to_string(),
        })
        .collect()
}

/// `line` with the value after `" : "` replaced by `v`.
pub(super) fn with_value(line: &str, v: &str) -> String {
    let (k, _) = line
        .split_once(" : ")
        .unwrap_or_else(|| panic!("no ` : ` in {line:?}"));
    format!("{k} : {v}")
}

/// The sample with the values of the keys in `na` replaced by `NA`; every other line as is.
pub(super) fn sample_with_na(sample: &str, na: &[&str]) -> String {
    let mut s = String::new();
    for line in sample.lines() {
        let key = line.split(" : ").next().unwrap_or("").trim();
        if na.contains(&key) {
            s += &with_value(line, "NA");
        } else {
            s += line;
        }
        s.push('\n');
    }
    s
}

#[test]
fn version_is_npu_smis_line() {
    let w = sampled();
    let (_, out, _) = npu(&w, &["-v"]);
    assert_eq!(out, sample!("v.txt"));
    assert_eq!(out, format!("npu-smi version: {COMPAT_VERSION}\n"));
}

#[test]
fn info_list_is_the_sample() {
    let w = sampled();
    assert_eq!(npu(&w, &["info", "-l"]).1, sample!("info_l.txt"));
}

#[test]
fn info_map_is_the_sample_without_mcus_and_chip_names() {
    let w = sampled();
    let out = npu(&w, &["info", "-m"]).1;
    // davinci devices have no MCU and do not report a chip name yet.
    let want: String = sample!("info_m.txt")
        .lines()
        .filter(|l| !l.contains("Mcu"))
        .map(|l| l.replace("Ascend 910B3", "NA          ") + "\n")
        .collect();
    assert_eq!(out, want);
}

#[test]
fn info_table_is_the_sample_with_what_a_davinci_device_does_not_report_na() {
    let w = sampled();
    let out = npu(&w, &["info"]).1;
    let sample = sample!("info.txt");
    // The title's format reproduces the sample's title exactly.
    assert_eq!(
        title("23.0.rc3.3", "23.0.rc3.3"),
        format!("{}\n", sample.lines().nth(1).unwrap())
    );
    let want: String = sample
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let l = if i == 1 {
                title(COMPAT_VERSION, "NA").trim_end().to_string()
            } else {
                // No identity: no name, on no bus; no sensors, no counters.
                l.replace("910B1", "NA   ")
                    .replace("271.1       41", "NA          NA")
                    .replace("275.0       42", "NA          NA")
                    .replace("0000:C1:00.0  | 55", "0000:00:00.0  | NA")
                    .replace("0000:01:00.0  | 66", "0000:00:00.0  | NA")
            };
            l + "\n"
        })
        .collect();
    assert_eq!(out, want);
    // Every line but the sample's short title is as wide as the sample's.
    assert!(out.lines().skip(2).all(|l| l.len() == 98), "{out}");
}

#[test]
fn info_table_without_processes_and_with_an_unreachable_npu() {
    let w = world(vec![
        (A, fake(0, vec![], false, true)),
        ("mock:/s/davinci7.sock", fake(7, vec![], false, true)),
    ]);
    w.opener.devs["mock:/s/davinci7.sock"]
        .state
        .borrow_mut()
        .down = true;
    let (code, out, err) = npu_in(
        &w,
        &["--device", A, "--device", "mock:/s/davinci7.sock", "info"],
        None,
    );
    assert_eq!(code, exit::PARTIAL, "{out}{err}");
    assert!(out.contains("| 0     NA                  | OK            | NA          NA                0    / 0             |\n"), "{out}");
    assert!(out.contains("| 0                         | 0000:00:00.0  | NA          0    / 0          0    / 256           |\n"), "{out}");
    assert!(
        out.contains("| 7     NA                  | Unreachable   |"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "| {:<95}|\n",
            "No running processes found in NPU 0"
        )),
        "{out}"
    );
    assert!(out.lines().skip(2).all(|l| l.len() == 98), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("davinci-smi: device 7: "), "{err}");
}

/// Keys of `-t usages` no davinci device reports (yet): NA.
const USAGES_NA: &[&str] = &[
    "Aicore Usage Rate(%)",
    "Aivector Usage Rate(%)",
    "Aicpu Usage Rate(%)",
    "Ctrlcpu Usage Rate(%)",
    "HBM Bandwidth Usage Rate(%)",
    "NPU Utilization(%)",
    "Aicube Usage Rate(%)",
];

#[test]
fn usages_are_the_samples_with_unreported_rates_na() {
    let mut w = sampled();
    // 5 % of the HBM held, as in the sample (3300 MiB of 65536, rounded down).
    w.opener
        .devs
        .get_mut(A)
        .unwrap()
        .state
        .borrow_mut()
        .info
        .memory_used = 3300 * MIB;
    // npu-smi's card view ends each chip with a blank line (the sample's trailing one was
    // lost in the copy).
    let out = npu(&w, &["info", "-t", "usages", "-i", "0"]).1;
    assert_eq!(
        spaces(&out),
        sample_with_na(sample!("usages.txt"), USAGES_NA) + "\n"
    );
    let out = npu(&w, &["info", "-t", "usages", "-i", "0", "-c", "0"]).1;
    assert_eq!(
        spaces(&out),
        sample_with_na(sample!("usages_c.txt"), USAGES_NA)
    );
    // The rate follows the memory: 65099 of 65536 MB is 99 %.
    let out = npu(&w, &["info", "-t", "usages", "-i", "1", "-c", "0"]).1;
    assert!(
        out.contains(&format!("\t{:<30} : 99\n", "HBM Usage Rate(%)")),
        "{out}"
    );
    assert!(
        out.contains(&format!("\t{:<30} : 65536\n", "HBM Capacity(MB)")),
        "{out}"
    );
}

#[test]
fn board_temp_power_are_the_samples_with_sensors_and_identity_na() {
    let w = sampled();
    let out = npu(&w, &["info", "-t", "board", "-i", "0"]).1;
    let keep = ["NPU ID", "Compatibility", "Chip Count", "PCIe Bus Info"];
    let na: Vec<&str> = sample!("board.txt")
        .lines()
        .filter_map(|l| l.split(" : ").next().map(str::trim))
        .filter(|k| !keep.contains(k))
        .collect();
    assert_eq!(na.len(), 15);
    // On no bus: the bus address of a chip without one.
    let want = sample_with_na(sample!("board.txt"), &na).replace("0000:C1:00.0", "0000:00:00.0");
    assert_eq!(spaces(&out), want);
    // Temperature: the NPU's sensor line as sampled, then the chip's blank line; no MCU block
    // (there is no MCU).
    let out = npu(&w, &["info", "-t", "temp", "-i", "0"]).1;
    let temp: String = sample!("temp.txt")
        .lines()
        .take(6)
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        spaces(&out),
        sample_with_na(&temp, &["NPU Temperature (C)"])
    );
    let out = npu(&w, &["info", "-t", "temp", "-i", "0", "-c", "0"]).1;
    assert_eq!(
        out,
        sample_with_na(sample!("temp_c.txt"), &["NPU Temperature (C)"])
    );
    assert_eq!(
        npu(&w, &["info", "-t", "temperature", "-i", "0", "-c", "0"]).1,
        out
    );
    let out = npu(&w, &["info", "-t", "power", "-i", "0"]).1;
    assert_eq!(
        spaces(&out),
        sample_with_na(sample!("power.txt"), &["NPU Real-time Power(W)"]) + "\n"
    );
    let out = npu(&w, &["info", "-t", "power", "-i", "0", "-c", "0"]).1;
    assert_eq!(out, format!("\t{:<30} : NA\n", "NPU Real-time Power(W)"));
}

/// A PCI device's GET_IDENTITY (ABI 1.4) fills npu-smi's Bus-Id column and the board's
/// `PCIe Bus Info`, `PCI Vendor ID` and `PCI Device ID`, in the sample's very lines; a
/// device on no bus (the other NPU here, and every mock) shows the zero address and `NA` ids.
#[test]
fn a_pci_devices_bus_id_and_ids_are_shown() {
    let w = sampled();
    {
        let mut s = w.opener.devs[A].state.borrow_mut();
        s.info.features |= davinci_uapi::Features::IDENTITY;
        let mut id = davinci_uapi::DeviceIdentity {
            bus_id: davinci_uapi::DeviceIdentity::text_field("0000:C1:00.0"),
            pci_vendor: 0x19e5,
            pci_device: 0xd802,
            ..Default::default()
        };
        id.model = davinci_uapi::DeviceIdentity::text_field("910B1");
        s.identity = Some(id);
    }
    let out = npu(&w, &["info"]).1;
    let bus_rows: Vec<&str> = out.lines().filter(|l| l.contains("6509")).collect();
    assert_eq!(
        bus_rows,
        [
            "| 0                         | 0000:C1:00.0  | NA          0    / 0          65099/ 65536         |",
            "| 0                         | 0000:00:00.0  | NA          0    / 0          65098/ 65536         |",
        ],
        "{out}"
    );
    let out = npu(&w, &["info", "-t", "board", "-i", "0"]).1;
    let shown = ["PCIe Bus Info", "PCI Vendor ID", "PCI Device ID"];
    for line in sample!("board.txt").lines() {
        let key = line.split(" : ").next().unwrap_or("").trim();
        if shown.contains(&key) {
            assert!(
                spaces(&out).contains(&format!("{line}\n")),
                "{line:?} in {out}"
            );
        }
    }
    // The other NPU is on no bus.
    let out = npu(&w, &["info", "-t", "board", "-i", "1"]).1;
    assert!(
        out.contains(&format!("\t{:<30} : 0000:00:00.0\n", "PCIe Bus Info")),
        "{out}"
    );
    for key in &shown[1..] {
        assert!(out.contains(&format!("\t{key:<30} : NA\n")), "{key}: {out}");
    }
}

#[test]
fn device_share_is_the_one_tab_line() {
    let w = sampled();
    let out = npu(&w, &["info", "-t", "device-share", "-i", "0", "-c", "0"]).1;
    assert_eq!(out, sample!("device_share.txt"));
    let out = npu(&w, &["info", "-t", "device-share", "-i", "1", "-c", "0"]).1;
    assert_eq!(
        out,
        with_value(sample!("device_share.txt").trim_end(), "True") + "\n"
    );
    // Without -c, npu-smi's card view around the chip's line.
    let card = npu(&w, &["info", "-t", "device-share", "-i", "1"]).1;
    assert_eq!(
        card,
        format!(
            "\t{:<30} : 1\n\t{:<30} : 1\n\n{out}\t{:<30} : 0\n\n",
            "NPU ID", "Chip Count", "Chip ID"
        )
    );
    // What the parsers in the wild do: strip tabs, split at ':'.
    let v = out.replace('\t', "");
    let (_, v) = v.split_once(':').unwrap();
    assert_eq!(v.trim(), "True");
}

/// Every line of a `-t` type without a sample: empty, or a `"\t%-30s : %s"` line.
pub(super) fn assert_kv_shape(out: &str) {
    for l in out.lines() {
        if l.is_empty() {
            continue;
        }
        let (k, v) = l.split_once(" : ").unwrap_or_else(|| panic!("{l:?}"));
        assert!(k.starts_with('\t') && !k[1..].starts_with(' '), "{l:?}");
        assert!(k.len() >= 31 && !v.is_empty(), "{l:?}");
    }
}

#[test]
fn common_memory_and_health_in_npu_smis_shape() {
    let w = sampled();
    let value = |out: &str, key: &str| -> String {
        out.lines()
            .find_map(|l| {
                l.split_once(" : ")
                    .filter(|(k, _)| k.trim() == key)
                    .map(|(_, v)| v.to_string())
            })
            .unwrap_or_else(|| panic!("no {key} in {out}"))
    };
    for ty in ["common", "memory", "health"] {
        let out = npu(&w, &["info", "-t", ty, "-i", "1"]).1;
        assert_kv_shape(&out);
        assert!(
            out.starts_with(&format!(
                "\t{:<30} : 1\n\t{:<30} : 1\n\n",
                "NPU ID", "Chip Count"
            )),
            "{ty}: {out}"
        );
        assert_eq!(value(&out, "Chip ID"), "0", "{ty}");
        let chip = npu(&w, &["info", "-t", ty, "-i", "1", "-c", "0"]).1;
        assert_kv_shape(&chip);
        assert!(
            !chip.contains("NPU ID") && !chip.contains("Chip ID"),
            "{ty}: {chip}"
        );
    }
    let out = npu(&w, &["info", "-t", "common", "-i", "1"]).1;
    assert_eq!(value(&out, "HBM Usage Rate(%)"), "99");
    assert_eq!(value(&out, "Temperature(C)"), "NA");
    assert_eq!(value(&out, "NPU Real-time Power(W)"), "NA");
    assert_eq!(value(&out, "Aicore Usage Rate(%)"), "NA");
    let out = npu(&w, &["info", "-t", "memory", "-i", "0"]).1;
    assert_eq!(value(&out, "HBM Capacity(MB)"), "65536");
    assert_eq!(value(&out, "HBM Usage Rate(%)"), "99");
    assert_eq!(value(&out, "DDR Capacity(MB)"), "0");
    let out = npu(&w, &["info", "-t", "health", "-i", "0"]).1;
    assert_eq!(value(&out, "Health Status"), "OK");
    // The chip's health lines are mind-cluster's sample, byte for byte.
    let out = npu(&w, &["info", "-t", "health", "-i", "0", "-c", "0"]).1;
    assert_eq!(out, sample!("health_c.txt"));
}

#[test]
fn set_device_share_prints_the_sample_and_sets() {
    let w = sampled();
    let a = ["set", "-t", "device-share", "-i", "0", "-c", "0", "-d", "1"];
    // Not a terminal: no question.
    let (code, out, err) = npu_in(&w, &args(&BOTH, &a), None);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, sample!("set_share.txt"));
    let share = ["info", "-t", "device-share", "-i", "0", "-c", "0"];
    let out = npu(&w, &share).1;
    assert!(out.ends_with(": True\n"), "{out}");
    // On a terminal: Y sets, anything else sets nothing; -y does not ask.
    let off = ["set", "-t", "device-share", "-i", "0", "-c", "0", "-d", "0"];
    let (code, out, err) = npu_in(&w, &args(&BOTH, &off), Some("n\n"));
    assert_eq!(code, exit::OTHER, "{out}{err}");
    assert!(out.contains("(Y/N): "), "{out}");
    assert!(!out.contains("Status"), "{out}");
    assert!(err.contains("nothing was set"), "{err}");
    assert!(npu(&w, &share).1.ends_with(": True\n"));
    let (code, _, _) = npu_in(&w, &args(&BOTH, &off), Some(""));
    assert_eq!(code, exit::OTHER, "end of input is no");
    let (code, out, _) = npu_in(&w, &args(&BOTH, &off), Some("Y\n"));
    assert_eq!(code, 0);
    assert!(out.ends_with(sample!("set_share.txt")), "{out}");
    assert!(npu(&w, &share).1.ends_with(": False\n"));
    let (code, out, _) = npu_in(&w, &args(&BOTH, &args(&a, &["-y"])), Some("n\n"));
    assert_eq!((code, out.as_str()), (0, sample!("set_share.txt")));
}

#[test]
fn a_refused_set_says_fail_and_why() {
    let w = world(vec![(A, fake(0, vec![], false, false))]);
    let a = [
        "--device",
        A,
        "set",
        "-t",
        "device-share",
        "-i",
        "0",
        "-d",
        "1",
    ];
    let (code, out, err) = npu_in(&w, &a, None);
    assert_eq!(code, exit::PERMISSION, "{out}{err}");
    assert_eq!(
        out,
        format!(
            "\t{:<30} : FAIL\n\t{:<30} : SET_DEVICE_SHARE failed: EPERM: not admin\n",
            "Status", "Message"
        )
    );
    assert!(
        err.starts_with("davinci-smi: device 0: SET_DEVICE_SHARE failed"),
        "{err}"
    );
}

#[test]
fn usage_errors_exit_2_and_print_nothing() {
    let w = sampled();
    for a in [
        &[][..],
        &["info", "-t", "usages"],
        &["info", "-t", "bogus", "-i", "0"],
        &["info", "-t", "usages", "-i", "0", "-c", "1"],
        &["info", "-t", "usages", "-i", "x"],
        // npu-smi's -i is a number (npu-smi's str2int): no `all`.
        &["info", "-t", "usages", "-i", "all"],
        &["info", "-t", "board"],
        &["info", "-l", "-t", "usages", "-i", "0"],
        &["set", "-t", "device-share", "-i", "0", "-d", "2"],
        &["set", "-t", "device-share", "-d", "1"],
        &["-V"],
    ] {
        let (code, out, err) = npu_in(&w, &args(&BOTH, a), None);
        assert_eq!((code, out.as_str()), (exit::USAGE, ""), "{a:?}: {err}");
        assert!(!err.is_empty(), "{a:?}");
    }
    let (code, out, _) = npu_in(&w, &["--help"], None);
    assert_eq!(code, 0);
    assert!(out.contains("npu-smi mode") && out.contains("NA"), "{out}");
}

#[test]
fn an_unknown_or_unreachable_npu_prints_nothing_on_stdout() {
    let w = sampled();
    let (code, out, err) = npu_in(&w, &args(&BOTH, &["info", "-t", "usages", "-i", "5"]), None);
    assert_eq!((code, out.as_str()), (exit::NOT_FOUND, ""));
    assert!(err.contains("no device with id 5"), "{err}");
    w.opener.devs[A].state.borrow_mut().down = true;
    let (code, out, err) = npu_in(&w, &args(&BOTH, &["info", "-t", "health", "-i", "0"]), None);
    assert_eq!((code, out.as_str()), (exit::NOT_FOUND, ""));
    assert!(err.starts_with("davinci-smi: device 0: "), "{err}");
}

#[test]
fn npu_smi_mode_by_name_or_flag_and_davinci_smi_unchanged() {
    let w = sampled();
    for argv0 in ["npu-smi", "/usr/local/bin/npu-smi", "./npu-smi"] {
        let argv: Vec<String> = [argv0, "-v"].iter().map(|s| s.to_string()).collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = crate::run(&argv, &w.disc, &w.opener, &mut out, &mut err);
        assert_eq!(
            (code, out.as_slice()),
            (0, sample!("v.txt").as_bytes()),
            "{argv0}"
        );
    }
    let (code, out, _) = smi(&w, &["--npu-smi", "-v"]);
    assert_eq!((code, out.as_str()), (0, sample!("v.txt")));
    let (_, out, _) = smi(
        &w,
        &args(
            &["--npu-smi"],
            &args(&BOTH, &["info", "-t", "device-share", "-i", "0", "-c", "0"]),
        ),
    );
    assert_eq!(out, sample!("device_share.txt"));
    // Under its own name davinci-smi keeps its own formats.
    let (_, out, _) = smi(&w, &args(&BOTH, &["info", "-t", "device-share", "-i", "0"]));
    assert!(out.starts_with("        Device ID "), "{out}");
    let (code, _, _) = smi(&w, &["-v"]);
    assert_eq!(code, exit::USAGE);
    // npu-smi-mode is not a davinci-smi option elsewhere than first.
    let (code, _, _) = smi(&w, &["info", "--npu-smi"]);
    assert_eq!(code, exit::USAGE);
}

#[test]
fn a_tenants_process_name_is_escaped_in_the_process_table() {
    let w = world(vec![(
        A,
        fake(0, vec![client(9, "x\x1b[2J\ny", MIB)], false, true),
    )]);
    let (code, out, _) = npu_in(&w, &["--device", A, "info"], None);
    assert_eq!(code, 0);
    assert!(!out.contains('\x1b'), "{out:?}");
    assert!(out.contains("| 9             | x\\u{1b}[2J\\ny"), "{out}");
}

#[test]
fn a_bidi_override_and_a_name_that_is_not_utf8_are_escaped_in_the_process_table() {
    let mut raw = client(8, "", MIB);
    raw.comm[..5].copy_from_slice(b"\xffroot");
    let w = world(vec![(
        A,
        fake(
            0,
            vec![client(7, "evil\u{202e}gpj.exe", MIB), raw],
            false,
            true,
        ),
    )]);
    let (code, out, _) = npu_in(&w, &["--device", A, "info"], None);
    assert_eq!(code, 0);
    assert!(!out.contains('\u{202e}'), "{out:?}");
    assert!(out.contains(r"| evil\u{202e}gpj.exe"), "{out}");
    assert!(out.contains(r"| \xffroot"), "{out}");
}
