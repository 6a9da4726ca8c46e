//! The spec of a set of davinci devices: `davinci<N>` for each, then `all`, checked before it
//! is returned.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use super::check::parse_kind;
use super::names::{
    CdiVersion, ALL, DEVICE_ENV, GENERATOR_ANNOTATION, PATH_ANNOTATION, VISIBLE_ENV,
};
use super::spec::{ContainerEdits, Device, Node, Spec, SpecDevice};
use crate::device_name;

/// The spec for `devices` under `kind`: `davinci<N>` for each, in the order of N, then `all`,
/// declaring 0.6.0 with every annotation ([`build_for`] with [`CdiVersion::default`], 0.5.0,
/// is what `davinci-smi cdi generate` writes unless told otherwise).
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
            // DAVINCI_VISIBLE_DEVICES on every entry, as the device plugin sets it: a
            // container given one device sees the same variables as one given several.
            let mut edits = ContainerEdits {
                env: vec![
                    format!("{DEVICE_ENV}={}", d.node.device_path()),
                    format!("{VISIBLE_ENV}={}", d.node.device_path()),
                ],
                ..ContainerEdits::default()
            };
            d.node.add_to(&mut edits);
            Device {
                name: device_name(d.id),
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
        // `davinci-smi cdi generate` writes specs; the tools share the workspace's version.
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
