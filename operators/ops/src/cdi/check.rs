//! What upstream's Go library checks when it loads a spec and the JSON schema does not: a
//! known `cdiVersion` high enough for the fields used, the kind ([`parse_kind`]), device
//! names, annotation keys and sizes, `NAME=VALUE` environment entries, absolute paths.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};

use super::names::KNOWN_VERSIONS;
use super::spec::Spec;

/// Most bytes of all annotations of one spec or device (upstream's limit, from Kubernetes).
const ANNOTATIONS_MAX_BYTES: usize = 256 << 10;

/// `(major, minor, patch)` of a version `M.m.p` (a leading `v` allowed, as upstream).
pub(crate) fn version_triple(v: &str) -> Option<(u64, u64, u64)> {
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
