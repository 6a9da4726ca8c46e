//! The devices the plugin knows, their health and sharing mode, and the list it advertises.
//!
//! A device, once found, stays known for the life of the process: when it can no longer
//! be reached (its socket or node is gone, its daemon stopped) it is advertised as
//! `Unhealthy` rather than dropped, so the kubelet keeps its allocations and stops placing
//! new pods on it until it is reachable again. The health of each device comes from a
//! control open and GET_INFO ([`Probe`]); its sharing mode decides how many IDs it is
//! advertised as ([`crate::ids`]). When the mode cannot be read the last mode seen is kept
//! (exclusive until one is seen), so the IDs do not change while a device is unreachable.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;

use davinci_uapi::ShareMode;

use crate::api;
use crate::ids::{advertised_ids, device_name, DeviceId, IdScheme, MAX_REPLICAS};

/// The kubelet's word for a device that may be allocated.
pub const HEALTHY: &str = "Healthy";
/// The kubelet's word for a device that may not be allocated.
pub const UNHEALTHY: &str = "Unhealthy";

/// Most devices the plugin advertises; more are ignored (with a warning).
pub const MAX_DEVICES: usize = 1024;

/// How a device is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A kernel device node (`/dev/davinciN`): given to containers as a device.
    Kernel,
    /// A `davinci-mockd` socket (`mock:/run/davinci/davinciN.sock`): given to containers as
    /// a bind mount of the socket.
    Mock,
}

impl Kind {
    /// The kind of a device path as the shim takes it.
    pub fn of(path: &str) -> Kind {
        if path.starts_with("mock:") {
            Kind::Mock
        } else {
            Kind::Kernel
        }
    }

    /// `kernel` or `mock`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Kernel => "kernel",
            Kind::Mock => "mock",
        }
    }
}

/// What a successful health check read from a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The sharing mode in force.
    pub mode: ShareMode,
    /// Clients attached now.
    pub clients: u32,
    /// The device's UUID (GET_IDENTITY, ABI 1.4), if it reports one: its IDs are named
    /// after it ([`DeviceState::id_string`]).
    pub uuid: Option<[u8; 16]>,
    /// The device's NUMA node, if known ([`crate::topology::numa_node`]).
    pub numa_node: Option<i64>,
}

/// Why a health check found a device unhealthy, and what it read of it if it answered (a
/// device that answers but is unfit: a health word, its temperature, a device event), so
/// that its IDs are named and counted as when healthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfit {
    /// What the check read, if the device answered.
    pub probe: Option<Probe>,
    /// Why it is unhealthy.
    pub reason: String,
}

impl From<String> for Unfit {
    fn from(reason: String) -> Unfit {
        Unfit {
            probe: None,
            reason,
        }
    }
}

impl From<&str> for Unfit {
    fn from(reason: &str) -> Unfit {
        Unfit::from(reason.to_string())
    }
}

/// One known device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceState {
    /// N of davinciN.
    pub index: u32,
    /// The device path as the shim takes it (`/dev/davinci0`, `mock:/run/davinci/davinci0.sock`).
    pub path: String,
    /// Whether the last health check succeeded (`false` until the first one has).
    pub healthy: bool,
    /// Why the device is unhealthy (the last check's error); `None` when healthy.
    pub reason: Option<String>,
    /// The last sharing mode read from the device (`None`: never reached).
    pub mode: Option<ShareMode>,
    /// Clients attached at the last check.
    pub clients: Option<u32>,
    /// The NUMA node read by the last successful check (kept while unreachable).
    pub numa_node: Option<i64>,
    /// The UUID read by a successful check (kept while unreachable): the IDs' name.
    pub uuid: Option<[u8; 16]>,
}

impl DeviceState {
    /// `davinci<N>`.
    pub fn name(&self) -> String {
        device_name(self.index)
    }

    /// Kernel node or mock socket.
    pub fn kind(&self) -> Kind {
        Kind::of(&self.path)
    }

    /// The file on the host: the node, or the socket without `mock:`.
    pub fn host_path(&self) -> &str {
        self.path.strip_prefix("mock:").unwrap_or(&self.path)
    }

    /// The mode the IDs are computed from: the last one read, exclusive if none was.
    pub fn effective_mode(&self) -> ShareMode {
        self.mode.unwrap_or(ShareMode::Exclusive)
    }

    /// The IDs this device is advertised as.
    pub fn ids(&self, replicas: u32) -> Vec<DeviceId> {
        advertised_ids(self.index, self.effective_mode(), replicas)
    }

    /// What the kubelet is told an ID is: `UUID::k` for a device that reports its UUID
    /// (`UUID::0` for a device in exclusive mode, `UUID::0` .. `UUID::<R-1>` shared), so the
    /// ID a pod holds stays the same when the sharing mode changes, the daemon restarts or
    /// the device is found at another index; `davinci<N>` / `davinci<N>::<k>` (the index's
    /// names) for a device without one (a driver before ABI 1.4).
    pub fn id_string(&self, id: DeviceId) -> String {
        match &self.uuid {
            Some(u) => format!(
                "{}::{}",
                davinci_uapi::uuid_text(u),
                id.replica.unwrap_or(0)
            ),
            None => id.to_string(),
        }
    }
}

/// Something that changed about a device, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A device was found.
    Added {
        /// davinciN.
        name: String,
        /// Its path.
        path: String,
    },
    /// A known device was found at another path.
    Moved {
        /// davinciN.
        name: String,
        /// The old path.
        from: String,
        /// The new path.
        to: String,
    },
    /// A device became healthy.
    Healthy {
        /// davinciN.
        name: String,
    },
    /// A device became unhealthy (or its reason changed).
    Unhealthy {
        /// davinciN.
        name: String,
        /// Why.
        reason: String,
    },
    /// A device's sharing mode changed, and with it its IDs.
    Mode {
        /// davinciN.
        name: String,
        /// The new mode.
        mode: ShareMode,
        /// How many IDs it is advertised as now.
        ids: u32,
    },
}

impl Change {
    /// Whether this is bad news (logged as a warning).
    pub fn is_warning(&self) -> bool {
        matches!(self, Change::Unhealthy { .. })
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Added { name, path } => write!(f, "{name}: found at {path}"),
            Change::Moved { name, from, to } => write!(f, "{name}: moved from {from} to {to}"),
            Change::Healthy { name } => write!(f, "{name}: Healthy"),
            Change::Unhealthy { name, reason } => write!(f, "{name}: Unhealthy: {reason}"),
            Change::Mode { name, mode, ids } => write!(
                f,
                "{name}: share mode {}: advertised as {ids} ID{}",
                mode.name(),
                if *ids == 1 { "" } else { "s" }
            ),
        }
    }
}

/// Why an ID in a request cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownId(pub String);

impl fmt::Display for UnknownId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Every known device, by N.
#[derive(Debug, Clone)]
pub struct Inventory {
    devices: BTreeMap<u32, DeviceState>,
    replicas: u32,
    scheme: IdScheme,
}

impl Inventory {
    /// No devices; a shared device is advertised as `replicas` IDs (clamped to
    /// 1..=[`MAX_REPLICAS`]).
    pub fn new(replicas: u32) -> Inventory {
        Inventory {
            devices: BTreeMap::new(),
            replicas: replicas.clamp(1, MAX_REPLICAS),
            scheme: IdScheme::default(),
        }
    }

    /// IDs named after `scheme` from now on (set before the first check).
    pub fn set_id_scheme(&mut self, scheme: IdScheme) {
        self.scheme = scheme;
    }

    /// The replica count of a shared device.
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// The known devices, by N.
    pub fn devices(&self) -> impl Iterator<Item = &DeviceState> {
        self.devices.values()
    }

    /// Device N.
    pub fn get(&self, index: u32) -> Option<&DeviceState> {
        self.devices.get(&index)
    }

    /// How many devices are known.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// Whether no device is known.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Takes in what discovery found: new devices are added (unhealthy until checked), a
    /// known device at a new path follows it; devices not found stay (their checks fail).
    /// Past [`MAX_DEVICES`] devices, more are not added.
    pub fn discovered(&mut self, found: &[(u32, String)]) -> Vec<Change> {
        let mut changes = Vec::new();
        for (index, path) in found {
            let full = self.devices.len() >= MAX_DEVICES;
            match self.devices.get_mut(index) {
                Some(d) if d.path != *path => {
                    changes.push(Change::Moved {
                        name: d.name(),
                        from: std::mem::replace(&mut d.path, path.clone()),
                        to: path.clone(),
                    });
                }
                Some(_) => {}
                None if full => {}
                None => {
                    self.devices.insert(
                        *index,
                        DeviceState {
                            index: *index,
                            path: path.clone(),
                            healthy: false,
                            reason: Some("not checked yet".into()),
                            mode: None,
                            clients: None,
                            numa_node: None,
                            uuid: None,
                        },
                    );
                    changes.push(Change::Added {
                        name: device_name(*index),
                        path: path.clone(),
                    });
                }
            }
        }
        changes
    }

    /// Takes in the result of a health check of device `index`.
    pub fn checked(&mut self, index: u32, result: Result<Probe, Unfit>) -> Vec<Change> {
        let (replicas, scheme) = (self.replicas, self.scheme);
        let Some(d) = self.devices.get_mut(&index) else {
            return Vec::new();
        };
        let mut changes = Vec::new();
        // What the device said of itself, healthy or not.
        let probe = match &result {
            Ok(p) => Some(*p),
            Err(u) => u.probe,
        };
        d.clients = probe.map(|p| p.clients);
        if let Some(p) = probe {
            d.numa_node = p.numa_node;
            if p.uuid.is_some() && scheme == IdScheme::Uuid {
                d.uuid = p.uuid;
            }
            if d.mode != Some(p.mode) {
                let before = d.ids(replicas);
                d.mode = Some(p.mode);
                let after = d.ids(replicas);
                if before != after {
                    changes.push(Change::Mode {
                        name: d.name(),
                        mode: p.mode,
                        ids: after.len() as u32,
                    });
                }
            }
        }
        match result {
            Ok(_) => {
                if !d.healthy {
                    changes.insert(0, Change::Healthy { name: d.name() });
                }
                d.healthy = true;
                d.reason = None;
            }
            Err(Unfit { reason, .. }) => {
                if d.healthy || d.reason.as_deref() != Some(reason.as_str()) {
                    changes.insert(
                        0,
                        Change::Unhealthy {
                            name: d.name(),
                            reason: reason.clone(),
                        },
                    );
                }
                d.healthy = false;
                d.reason = Some(reason);
            }
        }
        changes
    }

    /// The list for ListAndWatch: every ID of every device, in order, with its health.
    pub fn advertised(&self) -> Vec<api::Device> {
        self.devices
            .values()
            .flat_map(|d| {
                let health = if d.healthy { HEALTHY } else { UNHEALTHY };
                let topology = crate::topology::topology(d.numa_node);
                d.ids(self.replicas).into_iter().map(move |id| api::Device {
                    id: d.id_string(id),
                    health: health.to_string(),
                    topology: topology.clone(),
                })
            })
            .collect()
    }

    /// The device an ID names. An ID is accepted when it is one this plugin could have
    /// advertised for a known device (`davinci<N>` or `davinci<N>::<k>`, k below the
    /// replica count), so that IDs handed out before a sharing-mode change still resolve.
    ///
    /// # Errors
    /// The ID is malformed, names no known device, or a replica past the count; the
    /// message says which and what IDs look like.
    pub fn resolve(&self, id: &str) -> Result<(DeviceId, &DeviceState), UnknownId> {
        let shown: String = id.chars().take(80).collect();
        let Some(parsed) = DeviceId::parse(id).or_else(|| self.parse_uuid_id(id)) else {
            return Err(UnknownId(format!(
                "unknown device ID {shown:?}: this plugin's IDs are UUID::<k> (replica k of the \
                 device with that UUID; 0 for a device in exclusive mode), or for a device \
                 without a UUID davinci<N> (exclusive) or davinci<N>::<k> (shared)"
            )));
        };
        let Some(d) = self.devices.get(&parsed.device) else {
            let known: Vec<String> = self.devices.values().map(DeviceState::name).collect();
            return Err(UnknownId(format!(
                "unknown device ID {shown:?}: there is no device {} (known: {})",
                device_name(parsed.device),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )));
        };
        if let Some(k) = parsed.replica {
            if k >= self.replicas {
                return Err(UnknownId(format!(
                    "unknown device ID {shown:?}: {} has replicas 0 to {} (--replicas {})",
                    d.name(),
                    self.replicas - 1,
                    self.replicas
                )));
            }
        }
        Ok((parsed, d))
    }

    /// `UUID::<k>` of a known device's UUID, as the index's [`DeviceId`]: replica k of a
    /// shared device, the whole device for `::0` of one in exclusive mode (and replica k of
    /// one in exclusive mode that was shared when the ID was handed out).
    fn parse_uuid_id(&self, id: &str) -> Option<DeviceId> {
        let (uuid, k) = id.split_once("::")?;
        if k.is_empty()
            || !k.bytes().all(|b| b.is_ascii_digit())
            || (k.len() > 1 && k.starts_with('0'))
        {
            return None;
        }
        let k: u32 = k.parse().ok()?;
        let d = self.devices.values().find(|d| {
            d.uuid
                .is_some_and(|u| davinci_uapi::uuid_text(&u).as_str() == uuid)
        })?;
        Some(match (d.effective_mode(), k) {
            (ShareMode::Exclusive, 0) => DeviceId::whole(d.index),
            _ => DeviceId::replica(d.index, k),
        })
    }

    /// The ID the kubelet knows for `id` ([`DeviceState::id_string`]); the index's name for
    /// a device not known.
    pub fn id_string(&self, id: DeviceId) -> String {
        self.devices
            .get(&id.device)
            .map_or_else(|| id.to_string(), |d| d.id_string(id))
    }
}

#[cfg(test)]
mod tests;
