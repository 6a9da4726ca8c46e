//! Which devices `davinci-smi` talks to: the same device selection as the shim
//! (`--device PATH` / `DAVINCI_DEVICE`), or every `davinci<N>.sock` in a `davinci-mockd`
//! socket directory, or every `/dev/davinci<N>` node.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

/// One device to talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// N of davinciN, from the name (`None` when the path does not say; GET_INFO does).
    pub id: Option<u32>,
    /// The device path as the shim takes it (`/dev/davinci0`, `mock:/run/davinci/davinci0.sock`).
    pub path: String,
}

/// Where devices are looked for (the environment, made explicit so it can be tested).
#[derive(Debug, Clone)]
pub struct Discovery {
    /// `DAVINCI_DEVICE`.
    pub device_env: Option<String>,
    /// Directory of kernel device nodes (`/dev`).
    pub dev_dir: PathBuf,
    /// `davinci-mockd`'s default socket directory.
    pub default_socket_dir: PathBuf,
}

impl Discovery {
    /// The process's environment.
    pub fn from_env() -> Self {
        Self {
            device_env: davinci_shim::device_path_from_env(),
            dev_dir: PathBuf::from("/dev"),
            default_socket_dir: davinci_shim::default_socket_dir(),
        }
    }
}

/// N from `davinci<N><suffix>` (digits only; `davinci_manager` and friends do not match).
pub fn index_of(name: &str, suffix: &str) -> Option<u32> {
    let digits = name.strip_prefix("davinci")?.strip_suffix(suffix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The id a device path names, if its file name says (`/dev/davinci3`, `.../davinci3.sock`).
pub fn id_from_path(path: &str) -> Option<u32> {
    let p = path.strip_prefix("mock:").unwrap_or(path);
    let name = Path::new(p).file_name()?.to_str()?;
    index_of(name, ".sock").or_else(|| index_of(name, ""))
}

/// `davinci<N><suffix>` entries of `dir`, sorted by N, as paths with `prefix`.
fn scan(dir: &Path, suffix: &str, prefix: &str) -> Vec<Entry> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<Entry> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = index_of(&name, suffix)?;
            Some(Entry {
                id: Some(id),
                path: format!("{prefix}{}", e.path().display()),
            })
        })
        .collect();
    out.sort_by_key(|e| e.id);
    out
}

/// Every `davinci<N>.sock` in a socket directory.
pub fn sockets_in(dir: &Path) -> Vec<Entry> {
    scan(dir, ".sock", "mock:")
}

/// The devices selected by the command line and the environment, in this order of
/// precedence: `--device` paths; `--socket-dir`; `DAVINCI_DEVICE`; `/dev/davinci<N>` nodes;
/// the default socket directory. Empty if none of these names anything.
pub fn select(devices: &[String], socket_dir: Option<&Path>, d: &Discovery) -> Vec<Entry> {
    if !devices.is_empty() {
        return devices
            .iter()
            .map(|p| Entry {
                id: id_from_path(p),
                path: p.clone(),
            })
            .collect();
    }
    if let Some(dir) = socket_dir {
        return sockets_in(dir);
    }
    if let Some(p) = &d.device_env {
        return vec![Entry {
            id: id_from_path(p),
            path: p.clone(),
        }];
    }
    let nodes = scan(&d.dev_dir, "", "");
    if !nodes.is_empty() {
        return nodes;
    }
    sockets_in(&d.default_socket_dir)
}

/// Where [`select`] looked, for the "no devices" message.
pub fn searched(devices: &[String], socket_dir: Option<&Path>, d: &Discovery) -> String {
    if !devices.is_empty() {
        return format!("--device {}", devices.join(", "));
    }
    if let Some(dir) = socket_dir {
        return format!("{}/davinci<N>.sock", dir.display());
    }
    if let Some(p) = &d.device_env {
        return format!("DAVINCI_DEVICE={p}");
    }
    format!(
        "{}/davinci<N> and {}/davinci<N>.sock (set --device, --socket-dir or DAVINCI_DEVICE)",
        d.dev_dir.display(),
        d.default_socket_dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(index_of("davinci0", ""), Some(0));
        assert_eq!(index_of("davinci12.sock", ".sock"), Some(12));
        assert_eq!(index_of("davinci_manager", ""), None);
        assert_eq!(index_of("davinci", ""), None);
        assert_eq!(index_of("davinci1.sock", ""), None);
        assert_eq!(id_from_path("mock:/run/davinci/davinci3.sock"), Some(3));
        assert_eq!(id_from_path("/dev/davinci7"), Some(7));
        assert_eq!(id_from_path("mock:/tmp/x.sock"), None);
    }

    #[test]
    fn precedence_and_scanning() {
        let root = std::env::temp_dir().join(format!("smi-disc-{}", std::process::id()));
        let (dev, socks) = (root.join("dev"), root.join("socks"));
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(&socks).unwrap();
        for f in ["davinci10.sock", "davinci2.sock", "davinci_x.sock", "other"] {
            std::fs::write(socks.join(f), b"").unwrap();
        }
        let mut d = Discovery {
            device_env: None,
            dev_dir: dev.clone(),
            default_socket_dir: socks.clone(),
        };
        // Nothing in /dev: the default socket directory, sorted by N.
        let got = select(&[], None, &d);
        assert_eq!(
            got.iter().map(|e| e.id).collect::<Vec<_>>(),
            vec![Some(2), Some(10)]
        );
        assert_eq!(
            got[0].path,
            format!("mock:{}", socks.join("davinci2.sock").display())
        );
        // Kernel nodes win over the default socket directory.
        std::fs::write(dev.join("davinci0"), b"").unwrap();
        std::fs::write(dev.join("davinci_manager"), b"").unwrap();
        let got = select(&[], None, &d);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].path, dev.join("davinci0").display().to_string());
        // DAVINCI_DEVICE wins over both; --socket-dir over it; --device over everything.
        d.device_env = Some("mock:/x/davinci5.sock".into());
        assert_eq!(select(&[], None, &d)[0].id, Some(5));
        assert_eq!(select(&[], Some(&socks), &d).len(), 2);
        let got = select(&["/dev/davinci9".into()], Some(&socks), &d);
        assert_eq!(
            got,
            vec![Entry {
                id: Some(9),
                path: "/dev/davinci9".into()
            }]
        );
        assert!(select(&[], Some(&root.join("nope")), &d).is_empty());
        assert!(searched(
            &[],
            None,
            &Discovery {
                device_env: None,
                ..d
            }
        )
        .contains("--socket-dir"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
