//! npu-smi's tables and detail blocks: `info` (both tables), `info -t TYPE` in npu-smi's
//! shapes (the key/value blocks with their TAB or 8-space indents).
#![forbid(unsafe_code)]

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
            .and_then(|n| n.extras.driver_version.clone())
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
                &na(n.extras.name.as_deref()),
                n.extras.health.as_deref().unwrap_or("OK"),
                NA,
                NA,
                ("0", "0"),
                "0",
                &na(n.extras.bus_id.as_deref()),
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

/// The lines of `-t TYPE` for NPU `n`: without `-c` the NPU's id and chip count, a blank line,
/// the chip's values and its id; with `-c` the chip's values alone.
pub(super) fn detail_of(n: &Npu, ty: NpuType, chip: bool) -> String {
    let head = || sp("NPU ID", n.id) + &sp("Chip Count", 1) + "\n";
    let block = |pairs: &[(&str, String)]| {
        let body: String = pairs.iter().map(|(k, v)| sp(k, v)).collect();
        if chip {
            body
        } else {
            head() + &body + &sp("Chip ID", 0)
        }
    };
    match ty {
        NpuType::Usages => block(&usages(n)),
        NpuType::Common => {
            let pairs = [
                ("Memory Usage Rate(%)", "0".to_string()),
                ("HBM Usage Rate(%)", n.hbm_rate()),
                ("Aicore Usage Rate(%)", na(n.extras.busy_percent)),
                ("Aicore Freq(MHZ)", NA.into()),
                ("Aicore curFreq(MHZ)", NA.into()),
                ("Aicore Count", NA.into()),
                ("Temperature(C)", NA.into()),
                ("NPU Real-time Power(W)", NA.into()),
            ];
            if chip {
                block(&pairs)
            } else {
                // npu-smi's common block starts with the chip's id.
                let body: String = pairs.iter().map(|(k, v)| sp(k, v)).collect();
                head() + &sp("Chip ID", 0) + &body
            }
        }
        NpuType::Memory => block(&[
            ("DDR Capacity(MB)", "0".into()),
            ("DDR Clock Speed(MHz)", NA.into()),
            ("DDR Usage Rate(%)", "0".into()),
            ("HBM Capacity(MB)", n.hbm_total_mb()),
            ("HBM Clock Speed(MHz)", NA.into()),
            ("HBM Usage Rate(%)", n.hbm_rate()),
            ("HBM Temperature(C)", NA.into()),
        ]),
        NpuType::Health => block(&[
            (
                "Health Status",
                n.extras.health.clone().unwrap_or_else(|| "OK".into()),
            ),
            ("Error Code", NA.into()),
            (
                "Error Information",
                match n.extras.hung_streams {
                    Some(h) if h > 0 => {
                        format!("{h} stream(s) stopped on a task that does not finish")
                    }
                    _ => NA.into(),
                },
            ),
        ]),
        NpuType::Board => {
            let pairs: [(&str, String); 19] = [
                ("NPU ID", n.id.to_string()),
                ("Product Name", na(n.extras.name.as_deref())),
                ("Model", NA.into()),
                ("Manufacturer", NA.into()),
                ("Serial Number", NA.into()),
                ("Software Version", na(n.extras.driver_version.as_deref())),
                ("Firmware Version", NA.into()),
                // The client library accepted the driver's ABI.
                ("Compatibility", "OK".into()),
                ("Board ID", NA.into()),
                ("PCB ID", NA.into()),
                ("BOM ID", NA.into()),
                ("PCIe Bus Info", na(n.extras.bus_id.as_deref())),
                ("Slot ID", NA.into()),
                ("Class ID", NA.into()),
                (
                    "PCI Vendor ID",
                    na(n.extras.pci_ids.map(|(v, _)| hex_id(v))),
                ),
                (
                    "PCI Device ID",
                    na(n.extras.pci_ids.map(|(_, d)| hex_id(d))),
                ),
                ("Subsystem Vendor ID", NA.into()),
                ("Subsystem Device ID", NA.into()),
                ("Chip Count", "1".into()),
            ];
            pairs.iter().map(|(k, v)| sp(k, v)).collect()
        }
        NpuType::Temp if chip => tab("NPU Temperature (C)", NA),
        NpuType::Temp => block(&[("NPU Temperature (C)", NA.into())]),
        NpuType::Power if chip => tab("NPU Real-time Power(W)", NA),
        NpuType::Power => block(&[("NPU Real-time Power(W)", NA.into())]),
        NpuType::DeviceShare => tab(
            "Device-share Status",
            match n.mode {
                Some(ShareMode::Shared) => "True",
                Some(ShareMode::Exclusive) => "False",
                None => NA,
            },
        ),
    }
}
