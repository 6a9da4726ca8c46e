//! The JSON schema (`davinci-smi/v1`, stable: fields are only ever added) and the text
//! rendering (for people; may change).
#![forbid(unsafe_code)]

use davinci_ops::cdi::Spec;
use serde::Serialize;

/// The schema id every JSON document carries.
pub const SCHEMA: &str = "davinci-smi/v1";

/// An error in JSON.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ErrorJson {
    /// Symbolic errno (`"EBUSY"`), or null for failures without one.
    pub errno: Option<&'static str>,
    /// Numeric errno, or null.
    pub code: Option<i32>,
    /// What went wrong, including the driver's message.
    pub message: String,
}

/// `list`: one device.
#[derive(Debug, Clone, Serialize)]
pub struct ListedDevice {
    /// N of davinciN (null if the path does not say).
    pub id: Option<u32>,
    /// The device path (`/dev/davinciN` or `mock:SOCKET`).
    pub path: String,
}

/// Device memory.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct MemoryJson {
    /// Total device memory.
    pub total_bytes: u64,
    /// Allocated by all clients.
    pub used_bytes: u64,
    /// Most one client may hold.
    pub client_limit_bytes: u64,
}

/// `info`: one device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceJson {
    /// N of davinciN.
    pub id: Option<u32>,
    /// The device path.
    pub path: String,
    /// `"ok"` or `"unreachable"`.
    pub health: &'static str,
    /// Why it is unreachable (null when ok).
    pub error: Option<ErrorJson>,
    /// Driver ABI `"major.minor"`.
    pub abi: Option<String>,
    /// Memory.
    pub memory: Option<MemoryJson>,
    /// Clients attached.
    pub clients: Option<u32>,
    /// Most opens the device takes.
    pub max_clients: Option<u32>,
    /// `"exclusive"` or `"shared"`.
    pub share_mode: Option<&'static str>,
    /// Whether device sharing is on (npu-smi's "Device-share Status").
    pub device_share: Option<bool>,
    /// What the ABI does not report yet (the `--query` fields `name`, `uuid`,
    /// `utilization.*`); not in the JSON.
    #[serde(skip)]
    pub extras: crate::Extras,
}

/// `info -t device-share`: one device.
#[derive(Debug, Clone, Serialize)]
pub struct ShareJson {
    /// N of davinciN.
    pub id: Option<u32>,
    /// The device path.
    pub path: String,
    /// `"ok"` or `"unreachable"`.
    pub health: &'static str,
    /// Why it is unreachable.
    pub error: Option<ErrorJson>,
    /// Whether device sharing is on.
    pub device_share: Option<bool>,
    /// `"exclusive"` or `"shared"`.
    pub share_mode: Option<&'static str>,
    /// Clients attached.
    pub clients: Option<u32>,
}

/// `info -t usage`: one client.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ClientJson {
    /// Driver-assigned client id.
    pub client_id: u32,
    /// Process id (as the driver saw it when the client opened the device).
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Container id from the process's cgroup (empty string on the host).
    pub container_id: String,
    /// Whose quotas bind the client (ABI 1.5, docs/security.md "Tenants"): `user:UID` or
    /// `container:ID`; empty from an older driver.
    pub tenant: String,
    /// Contexts held.
    pub contexts: u32,
    /// Streams held.
    pub streams: u32,
    /// Events held.
    pub events: u32,
    /// Allocations held.
    pub allocations: u32,
    /// Device memory held.
    pub memory_bytes: u64,
    /// Descriptors the device has taken from this client's rings.
    pub tasks_submitted: u64,
    /// Completions the device has written for this client.
    pub tasks_completed: u64,
    /// Descriptors published on its streams that the device has not taken yet (ABI 1.2;
    /// 0 from an older driver).
    pub tasks_queued: u64,
    /// Process name (comm) of the client (ABI 1.2; empty from an older driver).
    pub process_name: String,
}

/// `info -t usage`: one device.
#[derive(Debug, Clone, Serialize)]
pub struct UsageJson {
    /// N of davinciN.
    pub id: Option<u32>,
    /// The device path.
    pub path: String,
    /// `"ok"` or `"unreachable"`.
    pub health: &'static str,
    /// Why it is unreachable.
    pub error: Option<ErrorJson>,
    /// `"exclusive"` or `"shared"`.
    pub share_mode: Option<&'static str>,
    /// Every attached client (empty when unreachable).
    pub clients: Vec<ClientJson>,
}

/// `set -t device-share`: one device's result.
#[derive(Debug, Clone, Serialize)]
pub struct SetResultJson {
    /// N of davinciN.
    pub id: Option<u32>,
    /// The device path.
    pub path: String,
    /// `"ok"` or `"error"`.
    pub status: &'static str,
    /// Whether the mode changed (false: it already was the requested one). Null on error.
    pub changed: Option<bool>,
    /// The mode before (null if it could not be read).
    pub previous_share_mode: Option<&'static str>,
    /// The mode in force afterwards: the requested one when ok; after a refusal the one the
    /// device reports (null only when it cannot be read).
    pub share_mode: Option<&'static str>,
    /// Why it failed (null when ok).
    pub error: Option<ErrorJson>,
    /// The clients attached when switching to exclusive was refused with `EBUSY` (they would
    /// have been stranded); null otherwise.
    pub held_by: Option<Vec<ClientJson>>,
}

/// What `set` asked for.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SetRequestJson {
    /// `-d 1`.
    pub device_share: bool,
    /// The mode that means.
    pub share_mode: &'static str,
}

/// A tenant's share of the slots, as TENANT_SHARE reports it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TenantJson {
    /// `user:UID` or `container:ID` (the whole id).
    pub tenant: String,
    /// How many of the device's tenant slots it counts for (1 without a setting; 0: best
    /// effort, it never holds a slot).
    pub shares: u32,
    /// Whether it holds its slots now: a tenant with a non-admin's client open holds them
    /// when enough are free (else it waits); admins' opens and control opens hold none.
    pub holds_slots: bool,
    /// Whether it has an open of the device (a client or a control open).
    pub has_opens: bool,
}

/// `info -t tenant-share`: one device.
#[derive(Debug, Clone, Serialize)]
pub struct TenantShareJson {
    /// N of davinciN.
    pub id: Option<u32>,
    /// The device path.
    pub path: String,
    /// `"ok"` or `"unreachable"` (also for a refused read: see `error`).
    pub health: &'static str,
    /// Why it could not be read (null when ok).
    pub error: Option<ErrorJson>,
    /// The device's tenant slots (null when not read: no tenant to ask about).
    pub slots: Option<u32>,
    /// Slots no tenant holds now (null likewise).
    pub free_slots: Option<u32>,
    /// The tenant `--tenant` names, else every tenant with a client open, in LIST_CLIENTS'
    /// order (empty when unreachable).
    pub tenants: Vec<TenantJson>,
}

/// What `set -t tenant-share` asked for.
#[derive(Debug, Clone, Serialize)]
pub struct TenantRequestJson {
    /// The tenant with its whole id (a container prefix resolved).
    pub tenant: String,
    /// `--tenant` as given.
    pub given: String,
    /// `-d N`.
    pub shares: u32,
}

/// `set -t tenant-share`: one device's result.
#[derive(Debug, Clone, Serialize)]
pub struct TenantSetResultJson {
    /// N of davinciN.
    pub id: Option<u32>,
    /// The device path.
    pub path: String,
    /// `"ok"` or `"error"`.
    pub status: &'static str,
    /// Whether the setting changed (false: it already was the requested one). Null on error.
    pub changed: Option<bool>,
    /// The shares before (null if they could not be read).
    pub previous_shares: Option<u32>,
    /// The shares in force afterwards: the requested ones when ok; after a refusal what the
    /// device reports (null only when it cannot be read).
    pub shares: Option<u32>,
    /// The device's tenant slots (null when not read).
    pub slots: Option<u32>,
    /// Slots no tenant holds now, after the change (null when not read).
    pub free_slots: Option<u32>,
    /// Whether the tenant holds its slots now (null when not read).
    pub holds_slots: Option<bool>,
    /// Whether the tenant has an open of the device (null when not read).
    pub has_opens: Option<bool>,
    /// Why it failed (null when ok).
    pub error: Option<ErrorJson>,
}

/// `cdi generate` in JSON: one device.
#[derive(Debug, Clone, Serialize)]
pub struct CdiDeviceJson {
    /// Its CDI name (`davinci0`).
    pub name: String,
    /// N of davinciN.
    pub id: u32,
    /// The device path.
    pub path: String,
    /// `"ok"` or `"unreachable"` (in the spec all the same, by its path).
    pub health: &'static str,
    /// Why it is unreachable (null when ok).
    pub error: Option<ErrorJson>,
}

/// Every JSON document: the schema id, the command, and its body.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Body {
    /// `list`.
    List {
        /// Devices found.
        devices: Vec<ListedDevice>,
    },
    /// `info`.
    Info {
        /// Per device.
        devices: Vec<DeviceJson>,
    },
    /// `info -t device-share`.
    Share {
        /// Per device.
        devices: Vec<ShareJson>,
    },
    /// `info -t usage`.
    Usage {
        /// Per device.
        devices: Vec<UsageJson>,
    },
    /// `set -t device-share`.
    Set {
        /// What was asked.
        requested: SetRequestJson,
        /// Per device.
        results: Vec<SetResultJson>,
    },
    /// `info -t tenant-share`.
    TenantShare {
        /// Per device.
        devices: Vec<TenantShareJson>,
    },
    /// `set -t tenant-share`.
    TenantSet {
        /// What was asked.
        requested: TenantRequestJson,
        /// Per device.
        results: Vec<TenantSetResultJson>,
    },
    /// `cdi generate`.
    Cdi {
        /// The file written, or null (the spec went to stdout: here, in `spec`).
        output: Option<String>,
        /// `"json"` or `"yaml"`: the file's format.
        format: &'static str,
        /// The CDI kind.
        kind: String,
        /// The spec's `cdiVersion`.
        cdi_version: String,
        /// The devices in the spec (besides `all`), in the order of their ids.
        devices: Vec<CdiDeviceJson>,
        /// What the operator should know: unreachable devices, a file name runtimes ignore.
        warnings: Vec<String>,
        /// The spec itself.
        spec: Spec,
    },
    /// The command failed as a whole (no devices, unknown id, a bad command line).
    Failed {
        /// Why.
        error: ErrorJson,
    },
}

/// A whole JSON document.
#[derive(Debug, Clone, Serialize)]
pub struct Doc {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// `"list"`, `"info"`, `"info-device-share"`, `"info-usage"`, `"info-tenant-share"`,
    /// `"set-device-share"`, `"set-tenant-share"`, `"cdi-generate"`, or `"usage-error"` (the
    /// command line could not be used; exit status 2).
    pub command: &'static str,
    /// The process exit status this run ends with (see `davinci-smi --help`).
    pub exit_code: i32,
    /// The command's output.
    #[serde(flatten)]
    pub body: Body,
}

impl Doc {
    /// Pretty JSON with a trailing newline.
    pub fn render(&self) -> String {
        match serde_json::to_string_pretty(self) {
            Ok(s) => s + "\n",
            // Serialising these plain structs cannot fail; keep a valid document anyway.
            Err(e) => format!(
                "{{\"schema\":\"{SCHEMA}\",\"command\":\"{}\",\"exit_code\":1,\"error\":{{\"errno\":null,\"code\":null,\"message\":\"cannot render JSON: {e}\"}}}}\n",
                self.command
            ),
        }
    }
}

impl Doc {
    /// Compact JSON on one line with a trailing newline (a document per line in `--loop`).
    pub fn render_line(&self) -> String {
        match serde_json::to_string(self) {
            Ok(s) => s + "\n",
            Err(_) => self.render().replace('\n', "") + "\n",
        }
    }
}

/// A bordered text table.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(x) = w.get_mut(i) {
                *x = (*x).max(c.chars().count());
            }
        }
    }
    let line = |fill: char| {
        let mut s = String::from("+");
        for x in &w {
            s.extend(std::iter::repeat_n(fill, x + 2));
            s.push('+');
        }
        s.push('\n');
        s
    };
    let row = |cells: &mut dyn Iterator<Item = String>| {
        let mut s = String::from("|");
        for x in &w {
            let c = cells.next().unwrap_or_default();
            let pad = x.saturating_sub(c.chars().count());
            s.push(' ');
            s.push_str(&c);
            s.extend(std::iter::repeat_n(' ', pad + 1));
            s.push('|');
        }
        s.push('\n');
        s
    };
    let mut out = line('-');
    out += &row(&mut headers.iter().map(|h| h.to_string()));
    out += &line('=');
    for r in rows {
        out += &row(&mut r.iter().cloned());
    }
    out += &line('-');
    out
}

/// `key : value` lines in npu-smi's layout.
pub fn kv(pairs: &[(&str, String)]) -> String {
    let mut s = String::new();
    for (k, v) in pairs {
        s += &format!("        {k:<30} : {v}\n");
    }
    s
}

pub use davinci_units::mib;

/// `s` safe to print on a terminal, in a CSV row or a JSON value: every control, bidi and
/// format character (escape sequences, newlines, U+202E, U+200B) shown as its Rust escape
/// (`\u{1b}`, `\n`, `\u{202e}`), everything else as is. For strings a tenant chose (process
/// names, container ids) and paths: printed raw, an `ESC[2J` would clear the operator's
/// screen, a newline forge a row and a bidi override reorder the row. The one escaping of
/// every operators' tool ([`davinci_ops::text`]); a field that is not UTF-8 goes through
/// [`printable_field`], which shows its bytes as `\xNN`.
pub(crate) use davinci_ops::text::{printable, printable_field};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let t = table(
            &["A", "Long header"],
            &[vec!["wide cell".into(), "x".into()], vec!["y".into()]],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 6);
        assert!(lines
            .iter()
            .all(|l| l.chars().count() == lines[0].chars().count()));
        assert!(lines[1].contains("| A         | Long header |"));
        assert!(lines[4].starts_with("| y "));
        assert_eq!(
            kv(&[("Device ID", "0".into())]),
            format!("        {:<30} : 0\n", "Device ID")
        );
        assert_eq!(mib(3 << 20), "3.0");
    }

    #[test]
    fn documents_carry_schema_command_and_exit_code() {
        let d = Doc {
            schema: SCHEMA,
            command: "list",
            exit_code: 0,
            body: Body::List {
                devices: vec![ListedDevice {
                    id: Some(0),
                    path: "mock:/x/davinci0.sock".into(),
                }],
            },
        };
        let v: serde_json::Value = serde_json::from_str(&d.render()).unwrap();
        assert_eq!(v["schema"], "davinci-smi/v1");
        assert_eq!(v["command"], "list");
        assert_eq!(v["exit_code"], 0);
        assert_eq!(v["devices"][0]["path"], "mock:/x/davinci0.sock");
    }
}
