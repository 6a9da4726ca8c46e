//! nvidia-smi's text outputs: `-L`, `-q` (and `-q -x`, the same tree as XML), the help
//! texts, `--version`, timestamps and process names. Key names, indentation, column widths
//! and XML tags are those of the samples in `tests/nvidia-smi-reference/` (`q.txt`,
//! `q-h100.txt`, `q-x.xml`); sections davinci has no value for at all are left out.
#![forbid(unsafe_code)]

use std::time::SystemTime;

use super::fields::F;
use super::gpu::{reason, Ctx, Gpu};
use super::{apps, App};
use crate::output::printable;

/// Seconds and milliseconds since the epoch.
fn epoch(t: SystemTime) -> (u64, u32) {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (d.as_secs(), d.subsec_millis())
}

/// `--query-*`'s timestamp, `YYYY/MM/DD HH:MM:SS.mmm` (UTC).
pub(crate) fn csv_timestamp(t: SystemTime) -> String {
    let (s, ms) = epoch(t);
    // `YYYY-MM-DDTHH:MM:SS.mmmZ`
    let r = crate::query::rfc3339(s, ms);
    format!("{} {}", r[..10].replace('-', "/"), &r[11..23])
}

/// `-q`'s timestamp, C's `asctime` without the newline: `Wed Aug 12 21:54:00 2026` (UTC).
pub(crate) fn ctime(t: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (s, ms) = epoch(t);
    let r = crate::query::rfc3339(s, ms);
    let month: usize = r[5..7].parse().unwrap_or(1);
    let day: u32 = r[8..10].parse().unwrap_or(1);
    format!(
        "{} {} {day:2} {} {}",
        DAYS[(s / 86_400 % 7) as usize],
        MONTHS[month.clamp(1, 12) - 1],
        &r[11..19],
        &r[..4]
    )
}

/// A process's name as nvidia-smi shows it: the program it runs as its command line names it
/// (`argv[0]`, e.g. `/usr/bin/python3`), else the device's 15-character `comm`. The command
/// line is read only when `/proc/PID/comm` is the client's comm, so another process that
/// reuses the pid (or one in another pid namespace) is never named.
pub(crate) fn process_name(pid: u32, comm: &str) -> String {
    let proc = std::path::PathBuf::from(format!("/proc/{pid}"));
    let same = std::fs::read_to_string(proc.join("comm")).is_ok_and(|c| c.trim_end() == comm);
    let argv0 = same
        .then(|| std::fs::read(proc.join("cmdline")).ok())
        .flatten()
        .and_then(|c| {
            let first = c.split(|&b| b == 0).next()?.to_vec();
            String::from_utf8(first).ok().filter(|s| !s.is_empty())
        });
    printable(&argv0.unwrap_or_else(|| comm.to_string()))
}

/// `-L`: `GPU 0: NAME (UUID: GPU-...)` per device.
pub(crate) fn list(gpus: &[Gpu]) -> String {
    gpus.iter()
        .map(|g| {
            format!(
                "GPU {}: {} (UUID: {})\n",
                g.index,
                printable(g.extras.name.as_deref().unwrap_or("N/A")),
                g.uuid().unwrap_or_else(|| "N/A".into())
            )
        })
        .collect()
}

/// `--version`, in nvidia-smi's layout: davinci-smi's version, the driver's.
pub(crate) fn version(gpu: Option<&Gpu>) -> String {
    let driver = gpu
        .and_then(|g| g.extras.driver_release.clone())
        .unwrap_or_else(|| "N/A".into());
    format!(
        "NVIDIA-SMI version  : {}\nNVML version        : N/A\nDRIVER version      : {}\nCUDA Version        : N/A\n",
        env!("CARGO_PKG_VERSION"),
        printable(&driver)
    )
}

/// `--help-query-gpu` / `--help-query-compute-apps`: every property in nvidia-smi's layout
/// (`"name" or "alias"`), each with what davinci fills it from.
pub(crate) fn help_fields(switch: &str, table: &[F]) -> String {
    let mut s = format!("List of valid properties to query for the switch \"{switch}\":\n\n");
    for f in table {
        let mut names = vec![format!("\"{}\"", f.0)];
        names.extend(f.1.iter().map(|a| format!("\"{a}\"")));
        s += &names.join(" or ");
        s.push('\n');
        s += super::sources::of(switch, f.0);
        s += "\n\n";
    }
    s
}

/// `-h`.
pub(crate) fn help() -> String {
    format!(
        "NVIDIA System Management Interface -- davinci-smi {} in nvidia-smi mode\n\n{}",
        env!("CARGO_PKG_VERSION"),
        super::sources::HELP
    )
}

/// One line or group of `-q`: its text key (`None`: only in XML), its XML tag (`None`: only
/// in the text), and its value or children.
struct Node {
    text: Option<&'static str>,
    tag: Option<&'static str>,
    /// The text value, and the XML one when it differs.
    value: Option<(String, Option<String>)>,
    children: Vec<Node>,
}

fn leaf(text: &'static str, tag: &'static str, v: Option<String>) -> Node {
    Node {
        text: Some(text),
        tag: Some(tag),
        value: Some((v.unwrap_or_else(|| "N/A".into()), None)),
        children: Vec::new(),
    }
}

fn group(text: &'static str, tag: &'static str, children: Vec<Node>) -> Node {
    Node {
        text: Some(text),
        tag: Some(tag),
        value: None,
        children,
    }
}

fn unit(v: Option<String>, u: &str) -> Option<String> {
    v.map(|v| format!("{v} {u}"))
}

/// A GPU's `-q` sections: (the `-d` section it belongs to, if any; the node).
fn tree(g: &Gpu, ctx: &Ctx) -> Vec<(Option<&'static str>, Node)> {
    let v = |name: &str| g.value(name, ctx);
    let na = || None;
    let mut pci = Vec::new();
    for (text, tag, name, xml_len) in [
        ("Bus", "pci_bus", "pci.bus", 2),
        ("Device", "pci_device", "pci.device", 2),
        ("Domain", "pci_domain", "pci.domain", 4),
        ("Device Id", "pci_device_id", "pci.device_id", 8),
    ] {
        // The text shows `0x0C`, the XML `0C`.
        let mut n = leaf(text, tag, v(name));
        if let Some((t, x)) = &mut n.value {
            *x = t.strip_prefix("0x").map(|h| format!("{h:0>xml_len$}"));
        }
        pci.push(n);
    }
    pci.push(leaf("Bus Id", "pci_bus_id", g.bus_id()));
    let r = |bit| g.reason(bit);
    let s = g.extras.sensors.as_ref();
    let mut power = vec![
        leaf(
            "Average Power Draw",
            "power_draw",
            unit(v("power.draw"), "W"),
        ),
        leaf("Instantaneous Power Draw", "", na()),
        leaf(
            "Current Power Limit",
            "current_power_limit",
            unit(v("power.limit"), "W"),
        ),
        leaf(
            "Requested Power Limit",
            "requested_power_limit",
            unit(v("power.limit"), "W"),
        ),
        leaf("Default Power Limit", "default_power_limit", na()),
        leaf("Min Power Limit", "min_power_limit", na()),
        leaf("Max Power Limit", "max_power_limit", na()),
    ];
    power[1].tag = None;
    let mut xml_state = leaf("", "power_state", v("pstate"));
    xml_state.text = None;
    power.insert(0, xml_state);
    let mut voltage = group(
        "Voltage",
        "voltage",
        vec![leaf(
            "Graphics",
            "graphics_volt",
            s.map(|s| format!("{}.000 mV", s.voltage_mv)),
        )],
    );
    voltage.text = None;
    vec![
        (None, leaf("Product Name", "product_name", v("name"))),
        (None, leaf("Product Brand", "product_brand", na())),
        (
            None,
            leaf("Product Architecture", "product_architecture", na()),
        ),
        (
            None,
            leaf("Display Mode", "display_mode", v("display_mode")),
        ),
        (
            None,
            leaf("Display Active", "display_active", v("display_active")),
        ),
        (
            None,
            leaf(
                "Persistence Mode",
                "persistence_mode",
                v("persistence_mode"),
            ),
        ),
        (None, leaf("Addressing Mode", "addressing_mode", na())),
        (
            None,
            group(
                "MIG Mode",
                "mig_mode",
                vec![
                    leaf("Current", "current_mig", na()),
                    leaf("Pending", "pending_mig", na()),
                ],
            ),
        ),
        (
            Some("ACCOUNTING"),
            leaf("Accounting Mode", "accounting_mode", v("accounting.mode")),
        ),
        (
            Some("ACCOUNTING"),
            leaf(
                "Accounting Mode Buffer Size",
                "accounting_mode_buffer_size",
                na(),
            ),
        ),
        (
            None,
            group(
                "Driver Model",
                "driver_model",
                vec![
                    leaf("Current", "current_dm", na()),
                    leaf("Pending", "pending_dm", na()),
                ],
            ),
        ),
        (None, leaf("Serial Number", "serial", na())),
        (None, leaf("GPU UUID", "uuid", g.uuid())),
        (
            None,
            leaf("Minor Number", "minor_number", Some(g.index.to_string())),
        ),
        (None, leaf("VBIOS Version", "vbios_version", na())),
        (
            None,
            leaf("MultiGPU Board", "multigpu_board", Some("No".into())),
        ),
        (None, leaf("Board ID", "board_id", na())),
        (None, group("PCI", "pci", pci)),
        (None, leaf("Fan Speed", "fan_speed", na())),
        (
            Some("PERFORMANCE"),
            leaf("Performance State", "performance_state", v("pstate")),
        ),
        (
            Some("PERFORMANCE"),
            group(
                "Clocks Event Reasons",
                "clocks_event_reasons",
                vec![
                    leaf("Idle", "clocks_event_reason_gpu_idle", r(reason::GPU_IDLE)),
                    leaf(
                        "SW Power Cap",
                        "clocks_event_reason_sw_power_cap",
                        r(reason::SW_POWER_CAP),
                    ),
                    leaf(
                        "HW Slowdown",
                        "clocks_event_reason_hw_slowdown",
                        r(reason::HW_SLOWDOWN),
                    ),
                    leaf(
                        "    HW Thermal Slowdown",
                        "clocks_event_reason_hw_thermal_slowdown",
                        r(reason::HW_THERMAL_SLOWDOWN),
                    ),
                ],
            ),
        ),
        (
            Some("MEMORY"),
            group(
                "FB Memory Usage",
                "fb_memory_usage",
                vec![
                    leaf("Total", "total", unit(v("memory.total"), "MiB")),
                    leaf("Reserved", "reserved", unit(v("memory.reserved"), "MiB")),
                    leaf("Used", "used", unit(v("memory.used"), "MiB")),
                    leaf("Free", "free", unit(v("memory.free"), "MiB")),
                ],
            ),
        ),
        (
            Some("COMPUTE"),
            leaf("Compute Mode", "compute_mode", v("compute_mode")),
        ),
        (
            Some("UTILIZATION"),
            group(
                "Utilization",
                "utilization",
                vec![
                    leaf("GPU", "gpu_util", unit(v("utilization.gpu"), "%")),
                    leaf("Memory", "memory_util", unit(v("utilization.memory"), "%")),
                    leaf("Encoder", "encoder_util", na()),
                    leaf("Decoder", "decoder_util", na()),
                ],
            ),
        ),
        (
            Some("TEMPERATURE"),
            group(
                "Temperature",
                "temperature",
                vec![
                    leaf(
                        "GPU Current Temp",
                        "gpu_temp",
                        unit(v("temperature.gpu"), "C"),
                    ),
                    leaf(
                        "GPU Shutdown Temp",
                        "gpu_temp_max_threshold",
                        unit(s.map(|s| round_c(s.shutdown_temperature_mc)), "C"),
                    ),
                    leaf(
                        "GPU Slowdown Temp",
                        "gpu_temp_slow_threshold",
                        unit(s.map(|s| round_c(s.slowdown_temperature_mc)), "C"),
                    ),
                    leaf(
                        "Memory Current Temp",
                        "memory_temp",
                        unit(v("temperature.memory"), "C"),
                    ),
                ],
            ),
        ),
        (
            Some("POWER"),
            group("GPU Power Readings", "gpu_power_readings", power),
        ),
        (Some("VOLTAGE"), voltage),
    ]
}

/// Milli-degrees as whole degrees, rounded to nearest.
fn round_c(mc: i32) -> String {
    ((i64::from(mc) + if mc < 0 { -500 } else { 500 }) / 1000).to_string()
}

/// `KEY ... : VALUE` with the key (after its indentation) padded to `width`.
fn kv(indent: usize, key: &str, value: &str, width: usize) -> String {
    let k = format!("{}{key}", " ".repeat(indent));
    format!("{k:<width$} : {}\n", printable(value))
}

/// The key column of `-q` (the `:` is at column 55) and of its process entries (42).
const WIDTH: usize = 54;
const PROCESS_WIDTH: usize = 41;

fn render_text(n: &Node, indent: usize, s: &mut String) {
    let Some(key) = n.text else {
        return;
    };
    match &n.value {
        Some((v, _)) => *s += &kv(indent, key, v, WIDTH),
        None => {
            *s += &format!("{}{key}\n", " ".repeat(indent));
            for c in &n.children {
                render_text(c, indent + 4, s);
            }
        }
    }
}

/// `-q`: all sections, or those `-d` names.
pub(crate) fn query(gpus: &[Gpu], ctx: &Ctx, display: Option<&[String]>) -> String {
    let now = SystemTime::now();
    let mut s = String::from("\n==============NVSMI LOG==============\n\n");
    s += &kv(0, "Timestamp", &ctime(now), WIDTH);
    s += &kv(0, "Driver Version", &driver(gpus), WIDTH);
    s += &kv(0, "CUDA Version", "N/A", WIDTH);
    s.push('\n');
    s += &kv(0, "Attached GPUs", &ctx.count.to_string(), WIDTH);
    let shown = |section: Option<&str>| match (display, section) {
        (None, _) => true,
        (Some(d), Some(sec)) => d.iter().any(|x| x == sec),
        (Some(_), None) => false,
    };
    for g in gpus {
        s += &format!("GPU {}\n", g.bus_id().unwrap_or_else(|| "N/A".into()));
        for (section, node) in tree(g, ctx) {
            if shown(section) {
                render_text(&node, 4, &mut s);
            }
        }
        if shown(Some("PIDS")) {
            s += &processes_text(&apps(g));
        }
        s.push('\n');
    }
    s
}

fn driver(gpus: &[Gpu]) -> String {
    gpus.first()
        .and_then(|g| g.extras.driver_release.clone())
        .unwrap_or_else(|| "N/A".into())
}

fn processes_text(apps: &[App]) -> String {
    if apps.is_empty() {
        return kv(4, "Processes", "None", WIDTH);
    }
    let mut s = String::from("    Processes\n");
    for a in apps {
        s += &kv(8, "GPU instance ID", "N/A", PROCESS_WIDTH);
        s += &kv(8, "Compute instance ID", "N/A", PROCESS_WIDTH);
        s += &kv(8, "Process ID", &a.pid.to_string(), PROCESS_WIDTH);
        s += &kv(12, "Type", "C", PROCESS_WIDTH);
        s += &kv(12, "Name", &a.name, PROCESS_WIDTH);
        s += &kv(
            12,
            "Used GPU Memory",
            &format!("{} MiB", crate::query::whole_mib(a.memory_bytes)),
            PROCESS_WIDTH,
        );
    }
    s
}

/// XML's escapes for text and attribute values.
fn esc(s: &str) -> String {
    printable(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn render_xml(n: &Node, depth: usize, s: &mut String) {
    let Some(tag) = n.tag else {
        return;
    };
    let tabs = "\t".repeat(depth);
    match &n.value {
        Some((v, x)) => *s += &format!("{tabs}<{tag}>{}</{tag}>\n", esc(x.as_ref().unwrap_or(v))),
        None => {
            *s += &format!("{tabs}<{tag}>\n");
            for c in &n.children {
                render_xml(c, depth + 1, s);
            }
            *s += &format!("{tabs}</{tag}>\n");
        }
    }
}

/// `-q -x`: the same tree as XML, nvidia-smi's DTD v12 (the tags telegraf's and other
/// parsers read).
pub(crate) fn xml(gpus: &[Gpu], ctx: &Ctx) -> String {
    let mut s = String::from(
        "<?xml version=\"1.0\" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v12.dtd\">\n<nvidia_smi_log>\n",
    );
    s += &format!("\t<timestamp>{}</timestamp>\n", ctime(SystemTime::now()));
    s += &format!(
        "\t<driver_version>{}</driver_version>\n",
        esc(&driver(gpus))
    );
    s += "\t<cuda_version>N/A</cuda_version>\n";
    s += &format!("\t<attached_gpus>{}</attached_gpus>\n", ctx.count);
    for g in gpus {
        s += &format!(
            "\t<gpu id=\"{}\">\n",
            esc(&g.bus_id().unwrap_or_else(|| "N/A".into()))
        );
        for (_, node) in tree(g, ctx) {
            render_xml(&node, 2, &mut s);
        }
        s += "\t\t<processes>\n";
        for a in apps(g) {
            s += "\t\t\t<process_info>\n";
            for (tag, v) in [
                ("gpu_instance_id", "N/A".to_string()),
                ("compute_instance_id", "N/A".into()),
                ("pid", a.pid.to_string()),
                ("type", "C".into()),
                ("process_name", a.name.clone()),
                (
                    "used_memory",
                    format!("{} MiB", crate::query::whole_mib(a.memory_bytes)),
                ),
            ] {
                s += &format!("\t\t\t\t<{tag}>{}</{tag}>\n", esc(&v));
            }
            s += "\t\t\t</process_info>\n";
        }
        s += "\t\t</processes>\n\t</gpu>\n\n";
    }
    s += "</nvidia_smi_log>\n";
    s
}
