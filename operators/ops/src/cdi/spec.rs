//! The CDI spec's types: the fields written here (all of them CDI 0.6.0 or older), named
//! and ordered as in the CDI specification, with their JSON and YAML; and [`SpecDevice`],
//! one davinci device as a spec names and reaches it.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::names::SOCKET_MOUNT_OPTIONS;

/// A CDI spec: the fields this module writes (all of them CDI 0.6.0 or older). Field names
/// and order as in the CDI specification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    /// The CDI version the spec follows.
    pub cdi_version: String,
    /// `vendor/class`: what a container asks for (`KIND=NAME`).
    pub kind: String,
    /// Key-value information for consumers (CDI 0.6.0).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The devices.
    pub devices: Vec<Device>,
}

/// One CDI device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Device {
    /// The name a container asks for.
    pub name: String,
    /// Key-value information for consumers (CDI 0.6.0).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// What the runtime does to a container given this device.
    pub container_edits: ContainerEdits,
}

/// Edits to a container's OCI spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerEdits {
    /// `NAME=VALUE` environment entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Device nodes to create in the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    /// Mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
}

/// A device node: the runtime takes its type and numbers from the host's node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceNode {
    /// Its path in the container (and on the host).
    pub path: String,
}

/// A mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mount {
    /// What is mounted.
    pub host_path: String,
    /// Where, in the container.
    pub container_path: String,
    /// Mount options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

/// One davinci device, as the spec names and reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecDevice {
    /// N of davinciN.
    pub id: u32,
    /// How a container reaches it.
    pub node: Node,
}

/// How a container reaches a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A kernel device node (absolute path).
    Kernel(PathBuf),
    /// A `davinci-mockd` socket (absolute path).
    Mock(PathBuf),
}

impl Node {
    /// The device path as `DAVINCI_DEVICE` takes it.
    pub fn device_path(&self) -> String {
        match self {
            Node::Kernel(p) => p.display().to_string(),
            Node::Mock(p) => format!("mock:{}", p.display()),
        }
    }

    fn file(&self) -> String {
        match self {
            Node::Kernel(p) | Node::Mock(p) => p.display().to_string(),
        }
    }

    /// Adds what gives a container this device: its node, or a bind mount of its socket.
    pub(crate) fn add_to(&self, e: &mut ContainerEdits) {
        match self {
            Node::Kernel(_) => e.device_nodes.push(DeviceNode { path: self.file() }),
            Node::Mock(_) => e.mounts.push(Mount {
                host_path: self.file(),
                container_path: self.file(),
                options: SOCKET_MOUNT_OPTIONS.iter().map(|s| s.to_string()).collect(),
            }),
        }
    }
}

impl Spec {
    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        // Plain strings, vectors and maps with string keys: serialising cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// YAML.
    ///
    /// # Errors
    /// The YAML serialiser failed (it does not for these plain types).
    pub fn to_yaml(&self) -> Result<String, String> {
        serde_norway::to_string(self).map_err(|e| format!("cannot render YAML: {e}"))
    }

    /// The spec as a JSON value.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}
