//! `--query FIELDS --format csv[,noheader][,nounits]`: the device table and the usage table
//! as CSV, in the manner of `nvidia-smi --query-gpu=... --format=csv`.
//!
//! Each table is a list of [`Field`]s computed from the same rows as the JSON output
//! ([`DeviceJson`], [`ClientJson`]), so the CSV and the JSON never disagree. A new field is
//! one line in [`BOARD_FIELDS`] or [`USAGE_FIELDS`] (and, if the JSON lacks it, one field in
//! `output.rs`); the `info --help` text is generated from these lists.
#![forbid(unsafe_code)]

use crate::output::{Body, ClientJson, DeviceJson};

/// One row of the device table.
pub(crate) struct BoardRow {
    /// When this round was taken.
    pub(crate) timestamp: String,
    /// The device.
    pub(crate) dev: DeviceJson,
}

/// The device a usage row's client is attached to.
pub(crate) struct UsageDevice {
    /// N of davinciN.
    pub(crate) id: Option<u32>,
    /// The device path.
    pub(crate) path: String,
    /// `"exclusive"` or `"shared"`.
    pub(crate) share_mode: Option<&'static str>,
}

/// One row of the usage table: a client of a device.
pub(crate) struct UsageRow {
    /// When this round was taken.
    pub(crate) timestamp: String,
    /// The device.
    pub(crate) dev: UsageDevice,
    /// The client.
    pub(crate) client: ClientJson,
}

/// A column: its name in `--query`, its unit (in the header as `name [unit]`, after each
/// value unless `nounits`), what it is, and its value (`None`: not known, printed `[N/A]`).
pub(crate) struct Field<R> {
    pub(crate) name: &'static str,
    pub(crate) unit: Option<&'static str>,
    pub(crate) help: &'static str,
    pub(crate) get: fn(&R) -> Option<String>,
}

const MIB: Option<&str> = Some("MiB");

/// Bytes as whole MiB (rounded down), as nvidia-smi prints memory: `32768`.
pub(crate) fn whole_mib(bytes: u64) -> String {
    (bytes / davinci_units::MIB).to_string()
}

const PERCENT: Option<&str> = Some("%");

/// The device table (`info --query`).
#[rustfmt::skip]
pub(crate) const BOARD_FIELDS: &[Field<BoardRow>] = &[
    Field { name: "timestamp", unit: None, help: "when the row was taken (UTC, RFC 3339)", get: |r| Some(r.timestamp.to_string()) },
    Field { name: "index", unit: None, help: "device id N of davinciN", get: |r| r.dev.id.map(|i| i.to_string()) },
    Field { name: "path", unit: None, help: "device path", get: |r| Some(r.dev.path.clone()) },
    Field { name: "health", unit: None, help: "ok or unreachable", get: |r| Some(r.dev.health.to_string()) },
    Field { name: "abi", unit: None, help: "driver ABI major.minor", get: |r| r.dev.abi.clone() },
    Field { name: "name", unit: None, help: "model name (nvidia-smi's name; [N/A] until the driver reports it)", get: |r| r.dev.extras.name.clone() },
    Field { name: "uuid", unit: None, help: "unique device id ([N/A] until the driver reports it)", get: |r| r.dev.extras.uuid.clone() },
    Field { name: "pci.bus_id", unit: None, help: "PCI address DDDD:BB:DD.F (nvidia-smi's pci.bus_id; [N/A] for a device on no bus)", get: |r| r.dev.extras.bus_id.clone() },
    Field { name: "memory.total", unit: MIB, help: "device memory", get: |r| r.dev.memory.map(|m| whole_mib(m.total_bytes)) },
    Field { name: "memory.used", unit: MIB, help: "memory held by all clients", get: |r| r.dev.memory.map(|m| whole_mib(m.used_bytes)) },
    Field { name: "memory.free", unit: MIB, help: "memory not held", get: |r| r.dev.memory.map(|m| whole_mib(m.total_bytes.saturating_sub(m.used_bytes))) },
    Field { name: "utilization.gpu", unit: PERCENT, help: "time the device was busy ([N/A] until the driver reports it)", get: |r| r.dev.extras.busy_percent.map(|p| p.to_string()) },
    Field { name: "utilization.memory", unit: PERCENT, help: "time device memory was read or written (always [N/A]: no driver reports it)", get: |r| r.dev.extras.memory_busy_percent.map(|p| p.to_string()) },
    Field { name: "memory.client_limit", unit: MIB, help: "most memory one client may hold", get: |r| r.dev.memory.map(|m| whole_mib(m.client_limit_bytes)) },
    Field { name: "clients", unit: None, help: "clients attached", get: |r| r.dev.clients.map(|c| c.to_string()) },
    Field { name: "clients.max", unit: None, help: "most clients the device takes", get: |r| r.dev.max_clients.map(|c| c.to_string()) },
    Field { name: "share_mode", unit: None, help: "exclusive or shared", get: |r| r.dev.share_mode.map(str::to_string) },
    Field { name: "device_share", unit: None, help: "true when shared", get: |r| r.dev.device_share.map(|b| b.to_string()) },
];

/// The usage table (`info -t usage --query`): one row per client.
#[rustfmt::skip]
pub(crate) const USAGE_FIELDS: &[Field<UsageRow>] = &[
    Field { name: "timestamp", unit: None, help: "when the row was taken (UTC, RFC 3339)", get: |r| Some(r.timestamp.to_string()) },
    Field { name: "index", unit: None, help: "device id N of davinciN", get: |r| r.dev.id.map(|i| i.to_string()) },
    Field { name: "path", unit: None, help: "device path", get: |r| Some(r.dev.path.clone()) },
    Field { name: "share_mode", unit: None, help: "the device's mode: exclusive or shared", get: |r| r.dev.share_mode.map(str::to_string) },
    Field { name: "client_id", unit: None, help: "driver-assigned client id", get: |r| Some(r.client.client_id.to_string()) },
    Field { name: "pid", unit: None, help: "process id of the client", get: |r| Some(r.client.pid.to_string()) },
    Field { name: "uid", unit: None, help: "user id of the client", get: |r| Some(r.client.uid.to_string()) },
    Field { name: "process_name", unit: None, help: "process name (comm) of the client", get: |r| Some(r.client.process_name.clone()) },
    Field { name: "container_id", unit: None, help: "container id (empty on the host)", get: |r| Some(r.client.container_id.clone()) },
    Field { name: "tenant", unit: None, help: "whose quotas bind the client: user:UID or container:ID", get: |r| Some(r.client.tenant.clone()) },
    Field { name: "contexts", unit: None, help: "contexts held", get: |r| Some(r.client.contexts.to_string()) },
    Field { name: "streams", unit: None, help: "streams held", get: |r| Some(r.client.streams.to_string()) },
    Field { name: "events", unit: None, help: "events held", get: |r| Some(r.client.events.to_string()) },
    Field { name: "allocations", unit: None, help: "allocations held", get: |r| Some(r.client.allocations.to_string()) },
    Field { name: "memory.used", unit: MIB, help: "device memory held", get: |r| Some(whole_mib(r.client.memory_bytes)) },
    Field { name: "tasks.submitted", unit: None, help: "descriptors the device has taken", get: |r| Some(r.client.tasks_submitted.to_string()) },
    Field { name: "tasks.queued", unit: None, help: "descriptors published, not yet taken by the device", get: |r| Some(r.client.tasks_queued.to_string()) },
    Field { name: "tasks.completed", unit: None, help: "completions the device has written", get: |r| Some(r.client.tasks_completed.to_string()) },
];

/// `--format csv` without `--query`: these columns.
pub(crate) const BOARD_DEFAULT: &[&str] = &[
    "index",
    "health",
    "memory.used",
    "memory.total",
    "clients",
    "share_mode",
    "path",
];

/// `info -t usage --format csv` without `--query`: these columns.
pub(crate) const USAGE_DEFAULT: &[&str] = &[
    "index",
    "pid",
    "process_name",
    "uid",
    "container_id",
    "contexts",
    "streams",
    "events",
    "allocations",
    "memory.used",
    "tasks.submitted",
    "tasks.queued",
    "tasks.completed",
];

/// What `--format` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CsvFormat {
    /// Print the header line.
    pub(crate) header: bool,
    /// Print units after values (`12.0 MiB`).
    pub(crate) units: bool,
}

/// Parses `--format` (already split at commas): `csv` and the options `noheader`, `nounits`.
pub(crate) fn parse_format(items: &[String]) -> Result<CsvFormat, String> {
    let mut f = CsvFormat {
        header: true,
        units: true,
    };
    let mut csv = false;
    for item in items {
        match item.trim() {
            "csv" => csv = true,
            "noheader" => f.header = false,
            "nounits" => f.units = false,
            "" => {}
            other => {
                return Err(format!(
                    "unknown --format option '{other}' (valid: csv, noheader, nounits; e.g. --format=csv,noheader)"
                ))
            }
        }
    }
    if !csv {
        return Err(
            "--format needs csv (the one format; options noheader, nounits), e.g. --format=csv,noheader"
                .into(),
        );
    }
    Ok(f)
}

/// The columns named by `--query` (or `defaults` when none), in the order given; an unknown
/// name is an error listing the valid ones.
pub(crate) fn select<R>(
    fields: &'static [Field<R>],
    names: &[String],
    defaults: &[&str],
    table: &str,
) -> Result<Vec<&'static Field<R>>, String> {
    let names: Vec<&str> = if names.iter().all(|n| n.trim().is_empty()) {
        defaults.to_vec()
    } else {
        names
            .iter()
            .map(|n| n.trim())
            .filter(|n| !n.is_empty())
            .collect()
    };
    names
        .iter()
        .map(|n| {
            fields.iter().find(|f| f.name == *n).ok_or_else(|| {
                format!(
                    "unknown field '{n}' in --query for {table}; valid fields: {}",
                    fields.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
                )
            })
        })
        .collect()
}

/// One CSV value: quoted when it holds a comma, quote or line break.
fn cell(s: &str) -> String {
    let s = &crate::output::printable(s);
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The header line (`name [unit]`, separated by `, ` as nvidia-smi does).
pub(crate) fn header<R>(cols: &[&Field<R>]) -> String {
    let mut line = cols
        .iter()
        .map(|f| match f.unit {
            Some(u) => cell(&format!("{} [{u}]", f.name)),
            None => cell(f.name),
        })
        .collect::<Vec<_>>()
        .join(", ");
    line.push('\n');
    line
}

/// One row.
pub(crate) fn row<R>(cols: &[&Field<R>], r: &R, fmt: CsvFormat) -> String {
    let mut line = cols
        .iter()
        .map(|f| match ((f.get)(r), f.unit) {
            (None, _) => "[N/A]".to_string(),
            (Some(v), Some(u)) if fmt.units => cell(&format!("{v} {u}")),
            (Some(v), _) => cell(&v),
        })
        .collect::<Vec<_>>()
        .join(", ");
    line.push('\n');
    line
}

fn describe<R>(fields: &[Field<R>]) -> String {
    let mut s = String::new();
    for f in fields {
        let name = match f.unit {
            Some(u) => format!("{} [{u}]", f.name),
            None => f.name.to_string(),
        };
        s += &format!("  {name:<26} {}\n", f.help);
    }
    s
}

/// The columns `--query`/`--format` selected, for the table of the command.
pub(crate) enum Columns {
    /// `info`.
    Board(Vec<&'static Field<BoardRow>>),
    /// `info -t usage`.
    Usage(Vec<&'static Field<UsageRow>>),
}

/// A command's result as CSV: the header (if `header`) and a row per device (`info`) or per
/// client (`info -t usage`). Other bodies give no rows.
pub(crate) fn csv(
    cols: &Columns,
    fmt: CsvFormat,
    body: &Body,
    timestamp: &str,
    header: bool,
) -> String {
    let mut out = String::new();
    match (cols, body) {
        (Columns::Board(cols), Body::Info { devices }) => {
            if header {
                out += &self::header(cols);
            }
            for d in devices {
                let r = BoardRow {
                    timestamp: timestamp.to_string(),
                    dev: d.clone(),
                };
                out += &row(cols, &r, fmt);
            }
        }
        (Columns::Usage(cols), Body::Usage { devices }) => {
            if header {
                out += &self::header(cols);
            }
            for d in devices {
                for c in &d.clients {
                    let r = UsageRow {
                        timestamp: timestamp.to_string(),
                        dev: UsageDevice {
                            id: d.id,
                            path: d.path.clone(),
                            share_mode: d.share_mode,
                        },
                        client: c.clone(),
                    };
                    out += &row(cols, &r, fmt);
                }
            }
        }
        _ => {}
    }
    out
}

/// `info --help`'s closing text: the fields of both tables.
pub(crate) fn info_after_help() -> String {
    format!(
        "Fields of --query for `info` (default: {}):\n{}\n\
         Fields of --query for `info -t usage`, one row per client (default: {}):\n{}\n\
         Values not known (an unreachable device; name, uuid and utilization.* until the driver\n\
         reports them; pci.bus_id of a device on no bus) are [N/A]; memory is in whole MiB. --query-gpu is another name of --query,\n\
         for nvidia-smi's command lines. Example:\n  \
         davinci-smi info -t usage --query index,pid,container_id,memory.used --format=csv,noheader --loop 5",
        BOARD_DEFAULT.join(","),
        describe(BOARD_FIELDS),
        USAGE_DEFAULT.join(","),
        describe(USAGE_FIELDS),
    )
}

/// Now, UTC, as RFC 3339 with milliseconds (`2026-11-24T10:22:41.418Z`).
pub(crate) fn timestamp_now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(d.as_secs(), d.subsec_millis())
}

/// `secs` since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (proleptic Gregorian, UTC).
pub(crate) fn rfc3339(secs: u64, millis: u32) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days, for days since 1970-01-01 (never negative here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests;
