//! `davinci-smi cdi generate`: a CDI (Container Device Interface) spec for the davinci devices,
//! so that container runtimes with CDI support (containerd, CRI-O, Podman, Docker) give a
//! container a device by name: `--device davinci.ai/npu=davinci0`, or `=all`.
//!
//! The spec has one device per device found (the same discovery as the other commands),
//! named `davinci<N>` after the id GET_INFO reports (the id in the path when the device does
//! not answer), and `all` with every device:
//!
//! * a kernel device `/dev/davinciN`: `deviceNodes: [{path: /dev/davinciN}]` and the
//!   environment `DAVINCI_DEVICE=/dev/davinciN`;
//! * a `davinci-mockd` device `mock:SOCKET`: a bind mount of the socket at the same path
//!   (options `nosuid, nodev, rbind, rprivate, noexec`, as NVIDIA's toolkit mounts its IPC
//!   sockets: not read-only, `connect(2)` needs write permission) and
//!   `DAVINCI_DEVICE=mock:SOCKET`;
//! * `all`: every device's nodes and mounts, `DAVINCI_DEVICE` naming the first and
//!   `DAVINCI_VISIBLE_DEVICES` every device path, comma-separated.
//!
//! Each device carries the annotation `davinci.ai/device-path` (its path) and the spec
//! `davinci.ai/generated-by`; annotations are a CDI 0.6.0 field, so the spec declares
//! `cdiVersion: 0.6.0` ([`CDI_VERSION`]; the oldest version that has every field written
//! here, so older runtimes load it too).
//!
//! Before anything is written the spec is checked as upstream's Go library checks a spec it
//! loads ([`Spec::check`]); the tests also validate it against upstream's JSON schema
//! (vendored in `smi/cdi-schema/`).
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::ValueEnum;
use davinci_shim::DevicePath;
use davinci_uapi::Errno;
use serde::{Deserialize, Serialize};

use crate::commands::Target;
use crate::error::SmiError;
use crate::output::ErrorJson;

/// The kind written unless `--kind` says otherwise.
pub const DEFAULT_KIND: &str = "davinci.ai/npu";

/// The `cdiVersion` written: 0.6.0 added annotations (and dots in the class of a kind), the
/// newest field this module writes; a runtime whose CDI library knows 0.6.0 or later loads
/// the spec (upstream's library refuses a version it does not know).
pub const CDI_VERSION: &str = "0.6.0";

/// The CDI versions upstream's library knows (`specs-go/version.go` at v1.1.0).
pub const KNOWN_VERSIONS: [&str; 10] = [
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
];

/// The name of the device that has every device.
pub const ALL: &str = "all";

/// The environment variable naming the device a client opens (the shim's `DAVINCI_DEVICE`).
pub const DEVICE_ENV: &str = davinci_shim::DEVICE_ENV;

/// The environment variable listing every device path of a container, comma-separated (set
/// by `all`; the device plugin sets the same).
pub const VISIBLE_ENV: &str = "DAVINCI_VISIBLE_DEVICES";

/// The mount options of a `davinci-mockd` socket: a private recursive bind mount, without
/// set-uid, device files or execution; writable, as connecting needs write permission.
pub const SOCKET_MOUNT_OPTIONS: [&str; 5] = ["nosuid", "nodev", "rbind", "rprivate", "noexec"];

/// Device annotation: the device path, as `DAVINCI_DEVICE` takes it.
pub const PATH_ANNOTATION: &str = "davinci.ai/device-path";

/// Spec annotation: what wrote the spec.
pub const GENERATOR_ANNOTATION: &str = "davinci.ai/generated-by";

/// Most bytes of all annotations of one spec or device (upstream's limit, from Kubernetes).
const ANNOTATIONS_MAX_BYTES: usize = 256 << 10;

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

    fn add_to(&self, e: &mut ContainerEdits) {
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

/// The spec for `devices` under `kind`: `davinci<N>` for each, in the order of N, then `all`.
///
/// # Errors
/// No devices; two devices with the same id; a device path that is not absolute or has a
/// `,` (the separator of [`VISIBLE_ENV`]); an invalid kind.
pub fn build(kind: &str, devices: &[SpecDevice]) -> Result<Spec, String> {
    build_for(kind, devices, CdiVersion::V0_6_0)
}

/// [`build`], declaring `version`: 0.5.0 leaves the annotations out (and refuses a kind
/// that needs 0.6.0).
///
/// # Errors
/// As [`build`]; a kind whose class has a dot with 0.5.0.
pub fn build_for(kind: &str, devices: &[SpecDevice], version: CdiVersion) -> Result<Spec, String> {
    parse_kind(kind)?;
    if devices.is_empty() {
        return Err("no devices to put in the spec".into());
    }
    let mut sorted: Vec<&SpecDevice> = devices.iter().collect();
    sorted.sort_by_key(|d| d.id);
    for pair in sorted.windows(2) {
        if pair[0].id == pair[1].id {
            return Err(format!(
                "two devices are both davinci{} ({} and {}): CDI device names must be unique; \
                 name one of them only (--device)",
                pair[0].id,
                pair[0].node.device_path(),
                pair[1].node.device_path()
            ));
        }
    }
    for d in &sorted {
        let path = d.node.device_path();
        let (Node::Kernel(p) | Node::Mock(p)) = &d.node;
        if !p.is_absolute() {
            return Err(format!("{path}: the path must be absolute"));
        }
        if path.contains(',') {
            return Err(format!(
                "{path}: a device path with ',' cannot be listed in {VISIBLE_ENV} (comma-separated)"
            ));
        }
    }
    let mut out: Vec<Device> = sorted
        .iter()
        .map(|d| {
            let mut edits = ContainerEdits {
                env: vec![format!("{DEVICE_ENV}={}", d.node.device_path())],
                ..ContainerEdits::default()
            };
            d.node.add_to(&mut edits);
            Device {
                name: format!("davinci{}", d.id),
                annotations: BTreeMap::from([(PATH_ANNOTATION.to_string(), d.node.device_path())]),
                container_edits: edits,
            }
        })
        .collect();
    let paths: Vec<String> = sorted.iter().map(|d| d.node.device_path()).collect();
    let mut all = ContainerEdits {
        env: vec![
            format!("{DEVICE_ENV}={}", paths[0]),
            format!("{VISIBLE_ENV}={}", paths.join(",")),
        ],
        ..ContainerEdits::default()
    };
    for d in &sorted {
        d.node.add_to(&mut all);
    }
    out.push(Device {
        name: ALL.into(),
        annotations: BTreeMap::new(),
        container_edits: all,
    });
    let mut spec = Spec {
        cdi_version: version.as_str().into(),
        kind: kind.into(),
        annotations: BTreeMap::from([(
            GENERATOR_ANNOTATION.to_string(),
            format!("davinci-smi {}", env!("CARGO_PKG_VERSION")),
        )]),
        devices: out,
    };
    if version == CdiVersion::V0_5_0 {
        spec.annotations.clear();
        for d in &mut spec.devices {
            d.annotations.clear();
        }
    }
    spec.check()?;
    Ok(spec)
}

/// `(major, minor, patch)` of a version `M.m.p` (a leading `v` allowed, as upstream).
fn version_triple(v: &str) -> Option<(u64, u64, u64)> {
    let mut it = v.strip_prefix('v').unwrap_or(v).split('.');
    let t = (
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    );
    it.next().is_none().then_some(t)
}

impl Spec {
    /// The oldest CDI version with every field this spec uses (upstream's
    /// `MinimumRequiredVersion`, for the fields this module has).
    pub fn required_version(&self) -> &'static str {
        let class_has_dot = self
            .kind
            .split_once('/')
            .is_some_and(|(_, class)| class.contains('.'));
        if !self.annotations.is_empty()
            || self.devices.iter().any(|d| !d.annotations.is_empty())
            || class_has_dot
        {
            "0.6.0"
        } else if self
            .devices
            .iter()
            .any(|d| d.name.starts_with(|c: char| c.is_ascii_digit()))
        {
            "0.5.0"
        } else {
            "0.3.0"
        }
    }

    /// Checks what upstream's Go library checks when it loads a spec (and the JSON schema
    /// does not): a known `cdiVersion` that has every field used, the kind, the annotation
    /// keys and sizes, at least one device, device names valid and unique, each device
    /// with edits, `NAME=VALUE` environment entries, and non-empty absolute paths.
    ///
    /// # Errors
    /// The first problem found.
    pub fn check(&self) -> Result<(), String> {
        let Some(have) = version_triple(&self.cdi_version)
            .filter(|_| KNOWN_VERSIONS.contains(&self.cdi_version.trim_start_matches('v')))
        else {
            return Err(format!(
                "cdiVersion {:?} is not a CDI version (known: {})",
                self.cdi_version,
                KNOWN_VERSIONS.join(", ")
            ));
        };
        let need = self.required_version();
        if version_triple(need).is_some_and(|n| n > have) {
            return Err(format!(
                "cdiVersion {} is too old for the fields used: at least {need}",
                self.cdi_version
            ));
        }
        parse_kind(&self.kind)?;
        check_annotations("spec", &self.annotations)?;
        if self.devices.is_empty() {
            return Err("the spec has no devices".into());
        }
        let mut seen = HashMap::new();
        for d in &self.devices {
            check_device_name(&d.name)?;
            if seen.insert(d.name.as_str(), ()).is_some() {
                return Err(format!("two devices are named {:?}", d.name));
            }
            check_annotations(&d.name, &d.annotations)?;
            let e = &d.container_edits;
            if e.env.is_empty() && e.device_nodes.is_empty() && e.mounts.is_empty() {
                return Err(format!("device {:?} has no container edits", d.name));
            }
            for v in &e.env {
                if v.find('=').is_none_or(|i| i == 0) {
                    return Err(format!(
                        "device {:?}: environment entry {v:?} is not NAME=VALUE",
                        d.name
                    ));
                }
            }
            let absolute = |what: &str, p: &str| {
                if p.starts_with('/') {
                    Ok(())
                } else {
                    Err(format!(
                        "device {:?}: {what} {p:?} is not an absolute path",
                        d.name
                    ))
                }
            };
            for n in &e.device_nodes {
                absolute("device node", &n.path)?;
            }
            for m in &e.mounts {
                absolute("mount host path", &m.host_path)?;
                absolute("mount container path", &m.container_path)?;
            }
        }
        Ok(())
    }

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

/// The characters allowed inside a vendor or class name (besides the first and last).
fn vendor_or_class_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// A vendor or class name: a letter first, a letter or digit last, `_`, `-`, `.` between.
fn check_vendor_or_class(what: &str, name: &str, max: usize) -> Result<(), String> {
    let Some(first) = name.chars().next() else {
        return Err(format!("the {what} is empty"));
    };
    if !first.is_ascii_alphabetic() {
        return Err(format!("the {what} {name:?} must start with a letter"));
    }
    if let Some(c) = name.chars().find(|c| !vendor_or_class_char(*c)) {
        return Err(format!(
            "the {what} {name:?} has the character {c:?} (allowed: letters, digits, '_', '-', '.')"
        ));
    }
    if !name.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!(
            "the {what} {name:?} must end with a letter or digit"
        ));
    }
    if name.len() > max {
        return Err(format!(
            "the {what} {name:?} is longer than {max} characters"
        ));
    }
    Ok(())
}

/// Checks a CDI kind `vendor/class` as upstream does (`vendor.com/device`; the vendor at
/// most 253 characters, the class at most 63, as the CDI specification says).
///
/// # Errors
/// What is wrong, with the expected form.
pub fn parse_kind(s: &str) -> Result<String, String> {
    let form = "a CDI kind is VENDOR/CLASS, e.g. davinci.ai/npu";
    let Some((vendor, class)) = s.split_once('/') else {
        return Err(format!("{s:?} is not a CDI kind: no '/' ({form})"));
    };
    check_vendor_or_class("vendor", vendor, 253)
        .and_then(|()| check_vendor_or_class("class", class, 63))
        .map_err(|e| format!("{s:?} is not a CDI kind: {e} ({form})"))?;
    Ok(s.to_string())
}

/// A device name: a letter or digit first and last, letters, digits, `_`, `-`, `.`, `:`
/// between.
fn check_device_name(name: &str) -> Result<(), String> {
    let ok_inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':');
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge(name.chars().next()) || !edge(name.chars().last()) || !name.chars().all(ok_inner) {
        return Err(format!(
            "{name:?} is not a CDI device name (letters, digits, '_', '-', '.', ':'; a letter \
             or digit first and last)"
        ));
    }
    Ok(())
}

/// A DNS-1123 subdomain: lowercase labels of letters, digits and `-` between dots.
fn dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// Annotation keys are Kubernetes qualified names (case-insensitive): `[prefix/]name`, the
/// prefix a DNS subdomain, the name at most 63 characters; all annotations at most 256 KiB.
fn check_annotations(owner: &str, a: &BTreeMap<String, String>) -> Result<(), String> {
    let mut size = 0;
    for (k, v) in a {
        size += k.len() + v.len();
        let lower = k.to_ascii_lowercase();
        let (prefix, name) = match lower.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, lower.as_str()),
        };
        let name_ok = !name.is_empty()
            && name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !name_ok || prefix.is_some_and(|p| !dns_subdomain(p)) {
            return Err(format!(
                "{owner}: annotation key {k:?} is not a qualified name ([DNS-subdomain/]name)"
            ));
        }
    }
    if size > ANNOTATIONS_MAX_BYTES {
        return Err(format!(
            "{owner}: the annotations are {size} bytes, more than {ANNOTATIONS_MAX_BYTES}"
        ));
    }
    Ok(())
}

/// `--cdi-version`: the `cdiVersion` a spec declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum CdiVersion {
    /// 0.5.0: without annotations, for runtimes whose CDI library predates 0.6.0 (Debian
    /// 12's podman 4.3, library 0.5.2); a kind whose class has a dot needs 0.6.0
    #[value(name = "0.5.0")]
    V0_5_0,
    /// 0.6.0: with annotations (which device path each entry came from, what generated it)
    #[default]
    #[value(name = "0.6.0")]
    V0_6_0,
}

impl CdiVersion {
    /// `"0.5.0"` or `"0.6.0"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CdiVersion::V0_5_0 => "0.5.0",
            CdiVersion::V0_6_0 => CDI_VERSION,
        }
    }
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SpecFormat {
    /// JSON (also valid YAML)
    Json,
    /// YAML
    Yaml,
}

impl SpecFormat {
    /// `"json"` or `"yaml"`.
    pub fn name(self) -> &'static str {
        match self {
            SpecFormat::Json => "json",
            SpecFormat::Yaml => "yaml",
        }
    }
}

/// The extensions container runtimes load from their CDI directories.
const LOADED_EXTENSIONS: [&str; 2] = ["json", "yaml"];

/// The format to write: `--format`, else JSON for a `.json` file, else YAML; and a warning
/// when runtimes would not load the file by its name.
///
/// # Errors
/// `--format yaml` with a `.json` file (YAML is not JSON; JSON in a `.yaml` file is fine:
/// JSON is YAML).
pub fn choose_format(
    format: Option<SpecFormat>,
    output: Option<&Path>,
) -> Result<(SpecFormat, Option<String>), String> {
    let ext = output.and_then(|p| p.extension()).and_then(|e| e.to_str());
    let chosen = match (format, ext) {
        (Some(SpecFormat::Yaml), Some("json")) => {
            return Err(format!(
                "--format yaml, but {} ends in .json: name it .yaml, or leave out --format",
                output.map(|p| p.display().to_string()).unwrap_or_default()
            ))
        }
        (Some(f), _) => f,
        (None, Some("json")) => SpecFormat::Json,
        (None, _) => SpecFormat::Yaml,
    };
    let warning = match output {
        Some(p) if !ext.is_some_and(|e| LOADED_EXTENSIONS.contains(&e)) => Some(format!(
            "{} does not end in .json or .yaml: container runtimes load only those from their \
             CDI directories (/etc/cdi, /var/run/cdi)",
            p.display()
        )),
        _ => None,
    };
    Ok((chosen, warning))
}

/// `cdi generate`'s options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Generate {
    pub(crate) output: Option<PathBuf>,
    pub(crate) format: Option<SpecFormat>,
    pub(crate) kind: String,
    pub(crate) version: CdiVersion,
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

/// What `cdi generate` did: the JSON body's parts, the text for stdout, warnings for stderr.
pub(crate) struct Generated {
    pub(crate) output: Option<String>,
    pub(crate) format: SpecFormat,
    pub(crate) kind: String,
    pub(crate) devices: Vec<CdiDeviceJson>,
    pub(crate) warnings: Vec<String>,
    pub(crate) spec: Spec,
    pub(crate) text: String,
}

/// The file of a device path, checked: it exists and is a character device (kernel) or a
/// socket (mock). `Ok(Some(warning))` when it cannot be examined (it is used all the same).
fn check_file(node: &Node) -> Result<Option<String>, SmiError> {
    use std::os::unix::fs::FileTypeExt;
    let (Node::Kernel(p) | Node::Mock(p)) = node;
    let what = match node {
        Node::Kernel(_) => "device node",
        Node::Mock(_) => "socket",
    };
    match std::fs::metadata(p) {
        Ok(m) => {
            let t = m.file_type();
            let fits = match node {
                Node::Kernel(_) => t.is_char_device(),
                Node::Mock(_) => t.is_socket(),
            };
            if fits {
                Ok(None)
            } else {
                Err(SmiError {
                    errno: None,
                    message: format!(
                        "{}: not a {} (a container could not use it)",
                        node.device_path(),
                        if matches!(node, Node::Kernel(_)) {
                            "character device"
                        } else {
                            "socket"
                        }
                    ),
                })
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SmiError::new(
            Errno::ENOENT,
            format!("{}: no such {what}", node.device_path()),
        )),
        Err(e) => Ok(Some(format!(
            "cannot examine {} ({e}); it is in the spec all the same",
            node.device_path()
        ))),
    }
}

/// The node of a device path: kernel or mock, absolute.
fn node_of(path: &str) -> Result<Node, SmiError> {
    let bad = |m: String| SmiError {
        errno: None,
        message: m,
    };
    match DevicePath::parse(path) {
        Ok(DevicePath::Kernel(p)) => Ok(Node::Kernel(p)),
        Ok(DevicePath::Mock(p)) => std::path::absolute(&p)
            .map(Node::Mock)
            .map_err(|e| bad(format!("{path}: cannot make the socket path absolute: {e}"))),
        Ok(DevicePath::Embedded) => Err(bad(
            "embedded: a device inside one process cannot be given to a container; name \
             /dev/davinciN or mock:SOCKET"
                .into(),
        )),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// `cdi generate` over the opened devices: name each (GET_INFO's id, else the path's),
/// build and check the spec, and print or write it.
pub(crate) fn generate(targets: &[Target], g: &Generate) -> Result<Generated, SmiError> {
    let plain = |m: String| SmiError {
        errno: None,
        message: m,
    };
    let (format, ext_warning) = choose_format(g.format, g.output.as_deref()).map_err(plain)?;
    let mut warnings: Vec<String> = ext_warning.into_iter().collect();
    let mut devices = Vec::new();
    let mut listed = Vec::new();
    for t in targets {
        let path = &t.entry.path;
        let node = node_of(path)?;
        if let Some(w) = check_file(&node)? {
            warnings.push(w);
        }
        let answer = t.dev.as_ref().map_err(Clone::clone).and_then(|d| d.info());
        let (id, error) = match answer {
            Ok(info) => (Some(info.device_id), None),
            Err(e) => (t.entry.id, Some(e)),
        };
        let Some(id) = id else {
            let why = error.map_or_else(String::new, |e| format!(" ({})", e.message));
            return Err(plain(format!(
                "{path}: cannot name this device: its path does not say N of davinciN and it \
                 does not answer GET_INFO{why}"
            )));
        };
        if let Some(e) = &error {
            warnings.push(format!(
                "device {id} ({path}) is unreachable ({}); it is in the spec by its path",
                e.message
            ));
        }
        listed.push(CdiDeviceJson {
            name: format!("davinci{id}"),
            id,
            path: path.clone(),
            health: if error.is_none() { "ok" } else { "unreachable" },
            error: error.as_ref().map(SmiError::json),
        });
        devices.push(SpecDevice { id, node });
    }
    listed.sort_by_key(|d| d.id);
    let spec = build_for(&g.kind, &devices, g.version).map_err(plain)?;
    let body = match format {
        SpecFormat::Json => spec.to_json(),
        SpecFormat::Yaml => spec.to_yaml().map_err(plain)?,
    };
    let names: Vec<&str> = spec.devices.iter().map(|d| d.name.as_str()).collect();
    let text = match &g.output {
        None => body,
        Some(file) => {
            write_atomically(file, body.as_bytes())?;
            let mut s = String::new();
            let _ = writeln!(
                s,
                "wrote {} ({}, cdiVersion {}): {}",
                file.display(),
                format.name(),
                spec.cdi_version,
                names
                    .iter()
                    .map(|n| format!("{}={n}", spec.kind))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            s
        }
    };
    Ok(Generated {
        output: g.output.as_ref().map(|p| p.display().to_string()),
        format,
        kind: spec.kind.clone(),
        devices: listed,
        warnings,
        spec,
        text,
    })
}

/// Writes `data` to `path` atomically: a temporary file in the same directory (a hidden
/// `.NAME.PID.tmp`, which runtimes watching the directory ignore), mode 0644, synced, then
/// renamed over `path`. The directory must exist.
///
/// # Errors
/// The directory does not exist, `path` is a directory, or writing fails (the temporary file
/// is removed; `path` is untouched).
pub fn write_atomically(path: &Path, data: &[u8]) -> Result<(), SmiError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let fail = |what: String, e: &std::io::Error| {
        let errno = match e.kind() {
            std::io::ErrorKind::PermissionDenied => Some(Errno::EACCES),
            _ => None,
        };
        SmiError {
            errno,
            message: format!("cannot write {}: {what}: {e}", path.display()),
        }
    };
    let plain = |m: String| SmiError {
        errno: None,
        message: format!("cannot write {}: {m}", path.display()),
    };
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Err(plain("not a file name".into()));
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(plain(format!("{} is not a directory", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(plain(format!(
                "the directory {} does not exist (create it first: mkdir -p {})",
                dir.display(),
                dir.display()
            )))
        }
        Err(e) => return Err(fail(format!("cannot examine {}", dir.display()), &e)),
    }
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(plain("it is a directory".into()));
    }
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
    };
    let mut f = match open() {
        // Left by an earlier run of a process with this pid that died.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let _ = std::fs::remove_file(&tmp);
            open()
        }
        r => r,
    }
    .map_err(|e| fail(format!("cannot create {}", tmp.display()), &e))?;
    let written = f
        .write_all(data)
        // The umask may have taken bits away.
        .and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(0o644)))
        .and_then(|()| f.sync_all())
        .map_err(|e| fail(format!("cannot write {}", tmp.display()), &e))
        .and_then(|()| {
            std::fs::rename(&tmp, path).map_err(|e| {
                fail(
                    format!("cannot rename {} to {}", tmp.display(), path.display()),
                    &e,
                )
            })
        });
    drop(f);
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return written;
    }
    // Make the rename durable (best effort: not every filesystem syncs a directory).
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
#[path = "../tests/support/cdi_schema.rs"]
mod cdi_schema;

#[cfg(test)]
mod tests;
