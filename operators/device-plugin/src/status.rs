//! The plugin's status as JSON (schema `davinci-device-plugin/v1`), for `--list --json` and
//! `--status-file`, and the text table of `--list`.
//!
//! ```json
//! {
//!   "schema": "davinci-device-plugin/v1",
//!   "resource": "davinci.ai/npu",
//!   "replicas": 4,
//!   "registration": {                     // --status-file only
//!     "kubelet_socket": "/var/lib/kubelet/device-plugins/kubelet.sock",
//!     "plugin_socket": "/var/lib/kubelet/device-plugins/davinci.sock",
//!     "registered": true,
//!     "registrations": 1,
//!     "last_registered_unix": 1767225600
//!   },
//!   "devices": [{
//!     "name": "davinci0", "path": "mock:/run/davinci/davinci0.sock", "kind": "mock",
//!     "health": "Healthy", "reason": null, "share_mode": "shared", "clients": 0,
//!     "ids": ["davinci0::0", "davinci0::1", "davinci0::2", "davinci0::3"],
//!     "allocated": ["davinci0::1"], "allocations_total": 1
//!   }]
//! }
//! ```
//!
//! `share_mode` is `null` for a device never reached, `reason` says why a device is
//! unhealthy, `allocated` lists the IDs held now and `allocations_total` counts the
//! allocations since the plugin started ([`crate::alloc::Allocations`]).
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::path::Path;

use davinci_uapi::ShareMode;
use serde::Serialize;

use crate::alloc::Allocations;
use crate::inventory::{Inventory, HEALTHY, UNHEALTHY};

/// The JSON schema name.
pub const SCHEMA: &str = "davinci-device-plugin/v1";

/// The whole status.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The resource advertised.
    pub resource: String,
    /// The IDs of a shared device.
    pub replicas: u32,
    /// The registration with the kubelet (the daemon only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registration: Option<Registration>,
    /// Every device.
    pub devices: Vec<DeviceReport>,
}

/// The registration with the kubelet.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct Registration {
    /// The kubelet's socket.
    pub kubelet_socket: String,
    /// This plugin's socket.
    pub plugin_socket: String,
    /// Whether the plugin is registered with the kubelet now.
    pub registered: bool,
    /// Successful registrations since the start (one more after each kubelet restart).
    pub registrations: u64,
    /// When the last one succeeded (seconds since the epoch).
    pub last_registered_unix: Option<u64>,
}

/// One device.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DeviceReport {
    /// davinciN.
    pub name: String,
    /// The device path as the shim takes it.
    pub path: String,
    /// `kernel` or `mock`.
    pub kind: &'static str,
    /// `Healthy` or `Unhealthy`.
    pub health: &'static str,
    /// Why it is unhealthy.
    pub reason: Option<String>,
    /// `exclusive`, `shared`, or `null` if never read.
    pub share_mode: Option<&'static str>,
    /// Clients attached at the last check.
    pub clients: Option<u32>,
    /// The IDs advertised.
    pub ids: Vec<String>,
    /// The IDs allocated and held now.
    pub allocated: Vec<String>,
    /// Allocations since the start.
    pub allocations_total: u64,
}

/// The status of `inv` (and `allocs`, if the daemon has any).
pub fn report(
    resource: &str,
    inv: &Inventory,
    allocs: Option<&Allocations>,
    registration: Option<Registration>,
) -> Report {
    let devices = inv
        .devices()
        .map(|d| DeviceReport {
            name: d.name(),
            path: d.path.clone(),
            kind: d.kind().as_str(),
            health: if d.healthy { HEALTHY } else { UNHEALTHY },
            reason: d.reason.clone(),
            share_mode: d.mode.map(ShareMode::name),
            clients: d.clients,
            ids: d
                .ids(inv.replicas())
                .into_iter()
                .map(|id| d.id_string(id))
                .collect(),
            allocated: allocs
                .map(|a| {
                    a.held_on(d.index)
                        .into_iter()
                        .map(|id| d.id_string(id))
                        .collect()
                })
                .unwrap_or_default(),
            allocations_total: allocs.map_or(0, |a| a.total(d.index)),
        })
        .collect();
    Report {
        schema: SCHEMA,
        resource: resource.to_string(),
        replicas: inv.replicas(),
        registration,
        devices,
    }
}

impl Report {
    /// Pretty JSON, with a final newline.
    pub fn json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_else(|e| {
            format!("{{\"schema\":\"{SCHEMA}\",\"error\":\"cannot render the status: {e}\"}}")
        });
        s.push('\n');
        s
    }

    /// The `--list` table.
    pub fn text(&self) -> String {
        let ids: usize = self.devices.iter().map(|d| d.ids.len()).sum();
        let healthy: usize = self
            .devices
            .iter()
            .filter(|d| d.health == HEALTHY)
            .map(|d| d.ids.len())
            .sum();
        let mut out = format!(
            "{}: {ids} ID{} ({healthy} healthy) from {} device{}\n",
            self.resource,
            if ids == 1 { "" } else { "s" },
            self.devices.len(),
            if self.devices.len() == 1 { "" } else { "s" }
        );
        let rows: Vec<[String; 5]> = self
            .devices
            .iter()
            .map(|d| {
                [
                    d.name.clone(),
                    d.path.clone(),
                    d.health.to_string(),
                    d.share_mode.unwrap_or("-").to_string(),
                    id_summary(&d.ids),
                ]
            })
            .collect();
        let head = ["DEVICE", "PATH", "HEALTH", "MODE", "IDS"];
        let mut width = head.map(str::len);
        for r in &rows {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.len());
            }
        }
        let mut line = |cells: [&str; 5]| {
            let mut l = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    l.push_str(c);
                } else {
                    let _ = write!(l, "{c:<w$}  ", w = width[i]);
                }
            }
            out.push_str(l.trim_end());
            out.push('\n');
        };
        line(head);
        for r in &rows {
            line([&r[0], &r[1], &r[2], &r[3], &r[4]]);
        }
        for d in &self.devices {
            if let Some(why) = &d.reason {
                out.push_str(&format!("{}: {why}\n", d.name));
            }
        }
        out
    }

    /// Writes the JSON to `path` (through a new temporary file renamed over it, so a reader
    /// never sees half of it, and a link planted where the temporary file goes is never
    /// followed: `davinci_ops::files`).
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn write_to(&self, path: &Path) -> std::io::Result<()> {
        davinci_ops::files::write_atomically(path, self.json().as_bytes()).map_err(|e| {
            std::io::Error::new(e.kind.unwrap_or(std::io::ErrorKind::Other), e.message)
        })
    }
}

/// `davinci0::0 .. davinci0::3 (4)` for many IDs, the IDs themselves for one or two.
fn id_summary(ids: &[String]) -> String {
    match ids {
        [] => "-".into(),
        [a] => a.clone(),
        [a, b] => format!("{a}, {b}"),
        [a, .., z] => format!("{a} .. {z} ({})", ids.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::DeviceId;
    use crate::inventory::Probe;
    use davinci_uapi::ShareMode;

    fn inv() -> Inventory {
        let mut inv = Inventory::new(3);
        inv.discovered(&[
            (0, "mock:/s/davinci0.sock".into()),
            (1, "/dev/davinci1".into()),
        ]);
        inv.checked(
            0,
            Ok(Probe {
                mode: ShareMode::Shared,
                clients: 2,
                numa_node: None,
                uuid: None,
            }),
        );
        inv.checked(1, Err("ENODEV: no such device".into()));
        inv
    }

    #[test]
    fn the_report_has_every_device_and_its_allocations() {
        let mut a = Allocations::default();
        a.record(&[DeviceId::replica(0, 1)]);
        let r = report("davinci.ai/npu", &inv(), Some(&a), None);
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        assert!(v.get("registration").is_none());
        let d0 = &v["devices"][0];
        assert_eq!(d0["name"], "davinci0");
        assert_eq!(d0["kind"], "mock");
        assert_eq!(d0["health"], "Healthy");
        assert_eq!(d0["share_mode"], "shared");
        assert_eq!(d0["clients"], 2);
        assert_eq!(d0["ids"].as_array().unwrap().len(), 3);
        assert_eq!(d0["allocated"][0], "davinci0::1");
        assert_eq!(d0["allocations_total"], 1);
        let d1 = &v["devices"][1];
        assert_eq!(d1["health"], "Unhealthy");
        assert_eq!(d1["reason"], "ENODEV: no such device");
        assert_eq!(d1["share_mode"], serde_json::Value::Null);
        assert_eq!(d1["ids"][0], "davinci1");
    }

    #[test]
    fn the_status_file_never_follows_a_planted_link() {
        let dir = std::env::temp_dir().join(format!("dp-status-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "root's file\n").unwrap();
        let file = dir.join("status.json");
        // Links where a temporary file could go: the old name and the new one.
        for tmp in [
            "status.json.tmp".to_string(),
            format!(".status.json.{}.tmp", std::process::id()),
        ] {
            std::os::unix::fs::symlink(&victim, dir.join(tmp)).unwrap();
        }
        let r = report("davinci.ai/npu", &inv(), None, None);
        r.write_to(&file).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file\n");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_table() {
        let r = report("davinci.ai/npu", &inv(), None, None);
        assert_eq!(
            r.text(),
            "davinci.ai/npu: 4 IDs (3 healthy) from 2 devices\n\
             DEVICE    PATH                   HEALTH     MODE    IDS\n\
             davinci0  mock:/s/davinci0.sock  Healthy    shared  davinci0::0 .. davinci0::2 (3)\n\
             davinci1  /dev/davinci1          Unhealthy  -       davinci1\n\
             davinci1: ENODEV: no such device\n"
        );
    }
}
