//! Visible devices: which of the node's devices a process may use, and its own numbering of
//! them, as `CUDA_VISIBLE_DEVICES` does for GPUs. Set by whoever places the process on
//! devices: Ray sets [`ASCEND_VISIBLE_ENV`] per worker (its NPU accelerator manager counts
//! `/dev/davinci?` nodes), the device plugin and CDI set [`VISIBLE_ENV`].
//!
//! The list is [`VISIBLE_ENV`] if set, else [`ASCEND_VISIBLE_ENV`]: comma-separated entries,
//! each a device index `N` (the node's `davinciN`) or a device path (`/dev/davinciN`,
//! `mock:SOCKET`, `embedded`: what the device plugin writes). Its order is the process's
//! numbering: with `ASCEND_VISIBLE_DEVICES=3,1`, device 0 is `davinci3` and device 1 is
//! `davinci1`. An empty list makes no device visible. A malformed or repeated entry is an
//! error naming it (never silently a shorter list).
//!
//! An index is looked for where the node's devices are: beside `DAVINCI_DEVICE` if it names
//! one (`/dev/davinci0` → `/dev/davinciN`; `mock:/run/davinci/davinci0.sock` →
//! `mock:/run/davinci/davinciN.sock`; `embedded` has device 0 only), else `/dev/davinciN`
//! if the node has any `/dev/davinci<N>`, else `davinciN.sock` in `davinci-mockd`'s default
//! socket directory, else (nothing on the node) the embedded device as device 0.
//!
//! Without a list every device of that place is visible, in the order of their indices.
//! With a list, the device a program opens without naming one (`Device::from_env`,
//! [`DevicePath::default_device`]) is the list's first.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use davinci_uapi::Errno;

use crate::error::{Error, Result};
use crate::path::{device_path_from_env, DevicePath, DEFAULT_DEVICE, DEVICE_ENV};

/// The list of visible devices this library reads first.
pub const VISIBLE_ENV: &str = "DAVINCI_VISIBLE_DEVICES";
/// The list it reads when [`VISIBLE_ENV`] is not set: Ascend's and Ray's convention.
pub const ASCEND_VISIBLE_ENV: &str = "ASCEND_VISIBLE_DEVICES";

/// Most entries a list may have.
pub const MAX_VISIBLE: usize = 1024;

/// The visible-device list in the environment: the variable that holds it and its text;
/// `None` when neither is set.
pub fn visible_list_from_env() -> Option<(&'static str, String)> {
    [VISIBLE_ENV, ASCEND_VISIBLE_ENV]
        .into_iter()
        .find_map(|k| std::env::var(k).ok().map(|v| (k, v)))
}

/// Where the node's devices are, to find device `N` ([module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DevicePlace {
    /// `DIR/davinciN` kernel nodes.
    Kernel(PathBuf),
    /// `DIR/davinciN.sock` daemon sockets.
    Mock(PathBuf),
    /// The embedded device, device 0 only.
    Embedded,
}

impl DevicePlace {
    /// The place [`DEVICE_ENV`] points at, else the node's ([module docs](self)).
    ///
    /// # Errors
    /// `EINVAL` for a malformed `DAVINCI_DEVICE`.
    pub fn from_env() -> Result<DevicePlace> {
        match device_path_from_env() {
            Some(named) => Ok(Self::beside(&DevicePath::parse(&named).map_err(|e| {
                Error::new(
                    Errno::EINVAL,
                    "open",
                    format!("{DEVICE_ENV}={named:?}: {}", e.message()),
                )
            })?)),
            None => Ok(Self::node()),
        }
    }

    /// The place of the devices beside `path` (its directory).
    pub fn beside(path: &DevicePath) -> DevicePlace {
        let dir = |p: &Path| {
            p.parent()
                .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
        };
        match path {
            DevicePath::Embedded => DevicePlace::Embedded,
            DevicePath::Kernel(p) => DevicePlace::Kernel(dir(p)),
            DevicePath::Mock(p) => DevicePlace::Mock(dir(p)),
        }
    }

    /// The node's place: `/dev` if it has a `davinci<N>` node, else the default socket
    /// directory if it has a `davinci<N>.sock`, else the embedded device.
    pub fn node() -> DevicePlace {
        let dev = Path::new(DEFAULT_DEVICE)
            .parent()
            .map_or_else(|| PathBuf::from("/dev"), Path::to_path_buf);
        if !indices(&dev, "").is_empty() {
            return DevicePlace::Kernel(dev);
        }
        let socks = davinci_mockd_proto::default_socket_dir();
        if !indices(&socks, ".sock").is_empty() {
            return DevicePlace::Mock(socks);
        }
        DevicePlace::Embedded
    }

    /// Device `n` of this place (`None`: the embedded place has device 0 only).
    pub fn device(&self, n: u32) -> Option<DevicePath> {
        match self {
            DevicePlace::Kernel(d) => Some(DevicePath::Kernel(d.join(format!("davinci{n}")))),
            DevicePlace::Mock(d) => Some(DevicePath::Mock(d.join(format!("davinci{n}.sock")))),
            DevicePlace::Embedded => (n == 0).then_some(DevicePath::Embedded),
        }
    }

    /// Every device of this place, by index.
    pub fn all(&self) -> Vec<DevicePath> {
        match self {
            DevicePlace::Kernel(d) => indices(d, "")
                .into_iter()
                .filter_map(|n| self.device(n))
                .collect(),
            DevicePlace::Mock(d) => indices(d, ".sock")
                .into_iter()
                .filter_map(|n| self.device(n))
                .collect(),
            DevicePlace::Embedded => vec![DevicePath::Embedded],
        }
    }
}

/// The indices N of `davinci<N><suffix>` in `dir`, sorted (nothing if it cannot be read).
fn indices(dir: &Path, suffix: &str) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<u32> = rd
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| {
            let digits = name.strip_prefix("davinci")?.strip_suffix(suffix)?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok()
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Parses a visible-device list (`var` names where it came from, for messages): each entry
/// an index, resolved in `place`, or a device path.
///
/// # Errors
/// `EINVAL` naming the entry: not an index or a device path, an index the place has no name
/// for (the embedded place beyond 0), a repeated device, more than [`MAX_VISIBLE`] entries.
pub fn parse_visible(var: &str, list: &str, place: &DevicePlace) -> Result<Vec<DevicePath>> {
    let bad = |what: String| {
        Error::new(
            Errno::EINVAL,
            "visible devices",
            format!("{var}={list:?}: {what}"),
        )
    };
    let list = list.trim();
    if list.is_empty() {
        return Ok(Vec::new());
    }
    let mut out: Vec<DevicePath> = Vec::new();
    for (i, entry) in list.split(',').map(str::trim).enumerate() {
        if i >= MAX_VISIBLE {
            return Err(bad(format!("more than {MAX_VISIBLE} entries")));
        }
        let path = if !entry.is_empty() && entry.bytes().all(|b| b.is_ascii_digit()) {
            let n: u32 = entry
                .parse()
                .map_err(|_| bad(format!("entry {entry:?} is too large an index")))?;
            place.device(n).ok_or_else(|| {
                bad(format!(
                    "entry {n}: the embedded device is device 0 only (name a device with \
                     {DEVICE_ENV} to find others)"
                ))
            })?
        } else {
            DevicePath::parse(entry).map_err(|_| {
                bad(format!(
                    "entry {entry:?} is neither a device index (0, 1, ...) nor a device path \
                     (/dev/davinciN, mock:SOCKET, embedded)"
                ))
            })?
        };
        if out.contains(&path) {
            return Err(bad(format!("entry {entry:?} names {path} twice")));
        }
        out.push(path);
    }
    Ok(out)
}

/// The devices this process sees, in its own numbering: the visible list of the
/// environment resolved ([`parse_visible`]), or, with none, every device of the place
/// ([`DevicePlace::from_env`]).
///
/// # Errors
/// As [`parse_visible`] and [`DevicePlace::from_env`].
pub fn visible_devices() -> Result<Vec<DevicePath>> {
    let place = DevicePlace::from_env()?;
    match visible_list_from_env() {
        Some((var, list)) => parse_visible(var, &list, &place),
        None => Ok(place.all()),
    }
}

/// Device `index` of this process's numbering ([`visible_devices`]).
///
/// # Errors
/// `ENODEV` past the last visible device (saying how many there are and why); as
/// [`visible_devices`].
pub fn visible_device(index: usize) -> Result<DevicePath> {
    let all = visible_devices()?;
    all.get(index).cloned().ok_or_else(|| {
        let why = match visible_list_from_env() {
            Some((var, list)) => format!("{var}={list:?}"),
            None => "no visible-device list: every device of the node".to_string(),
        };
        Error::new(
            Errno::ENODEV,
            "open",
            format!(
                "device {index} is not visible: {} visible ({why})",
                all.len()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_indices_in_the_place_or_paths_in_list_order() {
        let mock = DevicePlace::Mock("/run/davinci".into());
        let got = parse_visible("V", " 3, 1,/dev/davinci7,mock:/x/davinci0.sock ", &mock).unwrap();
        let want = [
            "mock:/run/davinci/davinci3.sock",
            "mock:/run/davinci/davinci1.sock",
            "/dev/davinci7",
            "mock:/x/davinci0.sock",
        ];
        assert_eq!(got.iter().map(|p| p.to_string()).collect::<Vec<_>>(), want);
        let kernel = DevicePlace::Kernel("/dev".into());
        assert_eq!(
            parse_visible("V", "2", &kernel).unwrap(),
            [DevicePath::Kernel("/dev/davinci2".into())]
        );
        assert_eq!(parse_visible("V", "", &kernel).unwrap(), []);
        assert_eq!(
            parse_visible("V", "0,embedded", &kernel).unwrap(),
            [
                DevicePath::Kernel("/dev/davinci0".into()),
                DevicePath::Embedded
            ]
        );
    }

    #[test]
    fn bad_entries_are_refused_by_name() {
        let kernel = DevicePlace::Kernel("/dev".into());
        for (list, says) in [
            ("0,x", "\"x\" is neither"),
            ("1,,2", "\"\" is neither"),
            ("1,1", "twice"),
            ("0,/dev/davinci0", "twice"),
            ("-1", "\"-1\" is neither"),
            ("99999999999", "too large"),
        ] {
            let e = parse_visible("ASCEND_VISIBLE_DEVICES", list, &kernel).unwrap_err();
            assert_eq!(e.errno(), Some(Errno::EINVAL), "{list}");
            assert!(
                e.message().contains(says) && e.message().contains("ASCEND_VISIBLE_DEVICES"),
                "{list}: {e}"
            );
        }
        let e = parse_visible("V", "1", &DevicePlace::Embedded).unwrap_err();
        assert!(e.message().contains("device 0 only"), "{e}");
        let long = vec!["0"; MAX_VISIBLE + 1].join(",");
        assert!(parse_visible("V", &long, &kernel).is_err());
    }

    #[test]
    fn a_place_is_the_directory_beside_a_named_device_and_lists_its_devices_by_index() {
        let dir = std::env::temp_dir().join(format!("visible-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in [
            "davinci10.sock",
            "davinci2.sock",
            "davinci_manager",
            "davinci3",
            "x.sock",
        ] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        let place = DevicePlace::beside(&DevicePath::Mock(dir.join("davinci2.sock")));
        assert_eq!(place, DevicePlace::Mock(dir.clone()));
        let all: Vec<String> = place.all().iter().map(|p| p.to_string()).collect();
        assert_eq!(
            all,
            [
                format!("mock:{}", dir.join("davinci2.sock").display()),
                format!("mock:{}", dir.join("davinci10.sock").display()),
            ]
        );
        let kernel = DevicePlace::beside(&DevicePath::Kernel(dir.join("davinci3")));
        assert_eq!(kernel.all(), [DevicePath::Kernel(dir.join("davinci3"))]);
        assert_eq!(
            DevicePlace::beside(&DevicePath::Embedded).all(),
            [DevicePath::Embedded]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
