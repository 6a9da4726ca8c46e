//! `davinci-smi cdi generate`: the CDI spec of the devices found (the same discovery as the
//! other commands; the model is [`davinci_ops::cdi`]), each named `davinci<N>` after the id
//! GET_INFO reports (the id in the path when the device does not answer), printed or written
//! atomically to `--output`.
//!
//! A device that does not answer is in the spec all the same, by its path, with a warning; a
//! path that does not exist, or is not a character device (kernel) or a socket (mock), is an
//! error, as is a device whose id nothing says.
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::path::PathBuf;

use davinci_ops::cdi::{build_for, choose_format, write_atomically, CdiVersion, Node, Spec};
use davinci_ops::cdi::{SpecDevice, SpecFormat};
use davinci_ops::device_name;
use davinci_shim::DevicePath;
use davinci_uapi::Errno;

use crate::access::Target;
use crate::error::SmiError;
use crate::output::CdiDeviceJson;

/// `cdi generate`'s options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Generate {
    pub(crate) output: Option<PathBuf>,
    pub(crate) format: Option<SpecFormat>,
    pub(crate) kind: String,
    pub(crate) version: CdiVersion,
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
            name: device_name(id),
            id,
            path: path.clone(),
            health: if error.is_none() { "ok" } else { "unreachable" },
            error: error.as_ref().map(SmiError::json),
        });
        devices.push(SpecDevice { id, node });
    }
    listed.sort_by_key(|d| d.id);
    let spec = build_for(&g.kind, &devices, g.version).map_err(plain)?;
    if g.version != CdiVersion::V0_5_0 {
        warnings.push(format!(
            "cdiVersion {} writes `annotations`: a runtime whose CDI library predates 0.6.0 \
             refuses the whole spec (Debian 12's podman 4.3 says only \"unresolvable CDI \
             devices\"; its debug log: unknown field \"annotations\"); leave out \
             --cdi-version for 0.5.0, which every CDI runtime loads",
            spec.cdi_version
        ));
    }
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

#[cfg(test)]
mod tests;
