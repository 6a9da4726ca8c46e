//! npu-smi's tables and detail blocks: `info` (both tables), `info -t TYPE` in npu-smi's
//! shapes (the `"\t%-30s : %s\n"` key/value blocks; per NPU, as npu-smi's card view prints
//! them, `NPU ID` and `Chip Count`, a blank line, then per chip its values, `Chip ID` and a
//! blank line).
#![forbid(unsafe_code)]

use super::values::{self, bus_id, chip_name};
use super::*;

pub(super) const RULE: &str =
    "+------------------------------------------------------------------------------------------------+\n";
pub(super) const RULE3: &str =
    "+---------------------------+---------------+----------------------------------------------------+\n";
pub(super) const RULE3D: &str =
    "+===========================+===============+====================================================+\n";
pub(super) const HEAD1: &str =
    "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n";
pub(super) const HEAD2: &str =
    "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |\n";
pub(super) const PHEAD: &str =
    "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |\n";

/// The `info` table's title line (`| npu-smi VERSION   Version: DRIVER   |`).
pub(super) fn title(version: &str, driver: &str) -> String {
    format!("| npu-smi {version:<24}Version: {driver:<53}|\n")
}

/// A PCI id as npu-smi prints it (`0x19E5`).
fn hex_id(id: u16) -> String {
    format!("0x{id:04X}")
}

/// An NPU's two rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn npu_rows(
    npu: &str,
    name: &str,
    health: &str,
    power: &str,
    temp: &str,
    huge: (&str, &str),
    chip: &str,
    bus: &str,
    aicore: &str,
    ddr: (&str, &str),
    hbm: (&str, &str),
) -> String {
    format!(
        "| {npu:<6}{name:<20}| {health:<14}| {power:<12}{temp:<18}{:<5}/ {:<14}|\n\
         | {chip:<26}| {bus:<14}| {aicore:<12}{:<5}/ {:<11}{:<5}/ {:<14}|\n",
        huge.0, huge.1, ddr.0, ddr.1, hbm.0, hbm.1
    )
}

/// `info`: npu-smi's table of NPUs (two rows each), then the process table.
pub(super) fn table(targets: &[Target]) -> Out {
    let (asked, err, code) = ask_all(targets, true);
    let driver = asked.iter().find_map(|r| {
        r.as_ref()
            .ok()
            .and_then(|n| n.extras.driver_release.clone())
    });
    let mut out = String::from(RULE);
    out += &title(COMPAT_VERSION, &na(driver));
    out += RULE3;
    out += HEAD1;
    out += HEAD2;
    out += RULE3D;
    for r in &asked {
        out += &match r {
            Ok(n) => npu_rows(
                &n.id.to_string(),
                &na(chip_name(&n.extras)),
                n.extras.health.as_deref().unwrap_or("OK"),
                &values::power(&n.extras),
                &values::temperature(&n.extras),
                ("0", "0"),
                "0",
                &bus_id(&n.extras),
                &na(n.extras.busy_percent),
                ("0", "0"),
                (&n.hbm_used_mb(), &n.hbm_total_mb()),
            ),
            Err((id, _)) => npu_rows(
                &crate::commands::id_text(*id),
                NA,
                "Unreachable",
                NA,
                NA,
                (NA, NA),
                "0",
                NA,
                NA,
                (NA, NA),
                (NA, NA),
            ),
        };
        out += RULE3D;
    }
    out += RULE3;
    out += PHEAD;
    out += RULE3D;
    for n in asked.iter().filter_map(|r| r.as_ref().ok()) {
        if n.clients.is_empty() {
            out += &format!(
                "| {:<95}|\n",
                format!("No running processes found in NPU {}", n.id)
            );
        }
        for c in &n.clients {
            out += &format!(
                "| {:<8}{:<18}| {:<14}| {:<25}| {:<24}|\n",
                n.id,
                0,
                c.pid,
                dash_if_empty(&crate::output::printable_field(&c.comm)),
                whole_mib(c.memory_bytes)
            );
        }
        out += RULE3D;
    }
    Out { out, err, code }
}

/// The `-t usages` keys and values (`-t common` and `-t memory` share some).
pub(super) fn usages(n: &Npu) -> Vec<(&'static str, String)> {
    let busy = na(n.extras.busy_percent);
    vec![
        ("DDR Capacity(MB)", "0".into()),
        ("DDR Usage Rate(%)", "0".into()),
        ("DDR Hugepages Total(page)", "0".into()),
        ("DDR Hugepages Usage Rate(%)", "0".into()),
        ("HBM Capacity(MB)", n.hbm_total_mb()),
        ("HBM Usage Rate(%)", n.hbm_rate()),
        ("Aicore Usage Rate(%)", busy.clone()),
        ("Aivector Usage Rate(%)", NA.into()),
        ("Aicpu Usage Rate(%)", NA.into()),
        ("Ctrlcpu Usage Rate(%)", NA.into()),
        ("DDR Bandwidth Usage Rate(%)", "0".into()),
        ("HBM Bandwidth Usage Rate(%)", NA.into()),
        ("NPU Utilization(%)", busy),
        ("Aicube Usage Rate(%)", NA.into()),
    ]
}

/// `info -t TYPE -i N [-c 0]`: one NPU's details in npu-smi's shape for that type.
pub(super) fn detail(targets: &[Target], ty: NpuType, chip: bool) -> Out {
    let busy = matches!(ty, NpuType::Usages | NpuType::Common);
    let (asked, err, code) = ask_all(targets, busy);
    let mut out = String::new();
    for n in asked.iter().filter_map(|r| r.as_ref().ok()) {
        out += &detail_of(n, ty, chip);
    }
    Out { out, err, code }
}

/// The lines of `-t TYPE` for NPU `n`: without `-c` the NPU's id and chip count, a blank
/// line, the chip's values, its id and a blank line (npu-smi's card view); with `-c` the
/// chip's values alone (`board -c`: the chip's identity block).
pub(super) fn detail_of(n: &Npu, ty: NpuType, chip: bool) -> String {
    let e = &n.extras;
    let head = || tab("NPU ID", n.id) + &tab("Chip Count", 1) + "\n";
    let block = |pairs: &[(&str, String)]| {
        let body: String = pairs.iter().map(|(k, v)| tab(k, v)).collect();
        if chip {
            body
        } else {
            head() + &body + &tab("Chip ID", 0) + "\n"
        }
    };
    match ty {
        NpuType::Usages => block(&usages(n)),
        NpuType::Common => {
            let pairs = [
                ("Memory Usage Rate(%)", "0".to_string()),
                ("HBM Usage Rate(%)", n.hbm_rate()),
                ("Aicore Usage Rate(%)", na(e.busy_percent)),
                ("Aicore Freq(MHZ)", NA.into()),
                ("Aicore curFreq(MHZ)", NA.into()),
                ("Aicore Count", NA.into()),
                ("Temperature(C)", values::temperature(e)),
                ("NPU Real-time Power(W)", values::power(e)),
            ];
            let body: String = pairs.iter().map(|(k, v)| tab(k, v)).collect();
            if chip {
                body
            } else {
                // npu-smi's common block starts with the chip's id.
                head() + &tab("Chip ID", 0) + &body
            }
        }
        NpuType::Memory => block(&[
            ("DDR Capacity(MB)", "0".into()),
            ("DDR Clock Speed(MHz)", NA.into()),
            ("DDR Usage Rate(%)", "0".into()),
            ("HBM Capacity(MB)", n.hbm_total_mb()),
            ("HBM Clock Speed(MHz)", NA.into()),
            ("HBM Usage Rate(%)", n.hbm_rate()),
            ("HBM Temperature(C)", values::memory_temperature(e)),
        ]),
        NpuType::Health => block(&[
            (
                "Health Status",
                e.health.clone().unwrap_or_else(|| "OK".into()),
            ),
            ("Error Code", NA.into()),
            (
                "Error Information",
                match e.hung_streams {
                    Some(h) if h > 0 => {
                        format!("{h} stream(s) stopped on a task that does not finish")
                    }
                    _ => NA.into(),
                },
            ),
        ]),
        NpuType::Board if chip => chip_board(n),
        NpuType::Board => {
            let pairs: [(&str, String); 19] = [
                ("NPU ID", n.id.to_string()),
                ("Product Name", na(e.name.as_deref())),
                ("Model", NA.into()),
                ("Manufacturer", NA.into()),
                ("Serial Number", NA.into()),
                ("Software Version", na(e.driver_release.as_deref())),
                ("Firmware Version", NA.into()),
                // The client library accepted the driver's ABI.
                ("Compatibility", "OK".into()),
                ("Board ID", NA.into()),
                ("PCB ID", NA.into()),
                ("BOM ID", NA.into()),
                ("PCIe Bus Info", bus_id(e)),
                ("Slot ID", NA.into()),
                ("Class ID", NA.into()),
                ("PCI Vendor ID", na(e.pci_ids.map(|(v, _)| hex_id(v)))),
                ("PCI Device ID", na(e.pci_ids.map(|(_, d)| hex_id(d)))),
                ("Subsystem Vendor ID", NA.into()),
                ("Subsystem Device ID", NA.into()),
                ("Chip Count", "1".into()),
            ];
            pairs.iter().map(|(k, v)| tab(k, v)).collect()
        }
        NpuType::Temp => block(&[("NPU Temperature (C)", values::temperature(e))]),
        NpuType::Power => block(&[("NPU Real-time Power(W)", values::power(e))]),
        NpuType::Volt => block(&[("Voltage(V)", values::voltage(e))]),
        NpuType::Product => block(&[("Product Type", NA.into())]),
        NpuType::DeviceShare => block(&[(
            "Device-share Status",
            match n.mode {
                Some(ShareMode::Shared) => "True",
                Some(ShareMode::Exclusive) => "False",
                None => NA,
            }
            .into(),
        )]),
        // Answered by topo::topo, never per NPU.
        NpuType::Topo => String::new(),
    }
}

/// `info -t board -i N -c 0`: the chip's identity, the lines and order of npu-smi's chip
/// view (`Chip Type`, `Chip Name` and `Chip Version` from GET_IDENTITY, `VDie ID` from its
/// UUID, `PCIe Bus Info` its bus address; what no davinci device has, `NA`).
fn chip_board(n: &Npu) -> String {
    let e = &n.extras;
    [
        ("NPU ID", n.id.to_string()),
        ("Chip ID", "0".into()),
        ("Chip Type", na(values::chip_type(e))),
        ("Chip Name", na(chip_name(e))),
        // The first version of the chip (each davinci model has one).
        ("Chip Version", "V1".into()),
        ("Board ID", NA.into()),
        ("PCB ID", NA.into()),
        ("BOM ID", NA.into()),
        ("VDie ID", values::vdie_id(e)),
        ("NDie ID", NA.into()),
        // The device's one chip is the first on its board.
        ("Chip Position ID", "0".into()),
        ("PCIe Bus Info", bus_id(e)),
        ("Firmware Version", NA.into()),
    ]
    .iter()
    .map(|(k, v)| tab(k, v))
    .collect()
}
