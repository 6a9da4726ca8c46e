//! [`DevicePath`]: what names a device, for clients ([`Device::open`](crate::Device::open))
//! and operators ([`Control::open`](crate::Control::open)) alike.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use davinci_uapi::Errno;

use crate::error::{Error, Result};

/// The environment variable naming the device when the program is not told otherwise
/// (`/dev/davinci0`, `mock:/run/davinci/davinci0.sock`, `embedded`).
pub const DEVICE_ENV: &str = "DAVINCI_DEVICE";

/// The kernel node a program opens when neither a path nor [`DEVICE_ENV`] names one and the
/// node has it ([`DevicePath::default_device`]); what operators' tools open by default.
pub const DEFAULT_DEVICE: &str = "/dev/davinci0";

/// Where the device a program opens without naming one comes from
/// ([`DevicePath::default_device`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceSource {
    /// [`DEVICE_ENV`] named it.
    Env,
    /// This node has a device: the kernel driver's `/dev/davinci0`, else `davinci0.sock` in
    /// `davinci-mockd`'s default socket directory.
    Node,
    /// Nothing named one and the node has none: a new in-process mock device.
    Embedded,
    /// The first entry of the visible-device list (`DAVINCI_VISIBLE_DEVICES`, else
    /// `ASCEND_VISIBLE_DEVICES`: [`crate::visible`]).
    Visible,
}

impl fmt::Display for DeviceSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceSource::Env => DEVICE_ENV,
            DeviceSource::Node => "this node's device",
            DeviceSource::Embedded => "no device named and none on this node: the embedded mock",
            DeviceSource::Visible => "the first visible device",
        })
    }
}

/// This node's device, if it has one: the kernel driver's `/dev/davinci0`, else a
/// `davinci-mockd` socket `davinci0.sock` in the default socket directory
/// ([`default_socket_dir`](crate::default_socket_dir)).
///
/// A socket found there is returned even if this process does not trust it (a
/// `/tmp/davinci-$UID` another user made first, a socket another user owns): opening it is
/// then refused with `EACCES` saying why (`davinci_mockd_proto::trust`, the rule every
/// client applies), rather than the program silently running on another device.
pub fn node_device() -> Option<DevicePath> {
    let node = std::path::Path::new(DEFAULT_DEVICE);
    let sock = davinci_mockd_proto::default_socket_dir().join("davinci0.sock");
    if node.exists() {
        Some(DevicePath::Kernel(node.into()))
    } else if sock.exists() {
        Some(DevicePath::Mock(sock))
    } else {
        None
    }
}

/// The device path in [`DEVICE_ENV`], if set and not empty.
pub fn device_path_from_env() -> Option<String> {
    std::env::var(DEVICE_ENV).ok().filter(|s| !s.is_empty())
}

/// A device path, parsed: `embedded`, `/dev/davinciN` (any absolute path) or `mock:SOCKET`.
/// [`Display`](fmt::Display) gives back the text it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DevicePath {
    /// `embedded`: a new mock device inside this process (the `embedded` feature).
    Embedded,
    /// A kernel device node (any absolute path, normally `/dev/davinciN`).
    Kernel(PathBuf),
    /// `mock:SOCKET`: a `davinci-mockd` device socket.
    Mock(PathBuf),
}

impl DevicePath {
    /// Parses `embedded`, `/dev/davinciN` (any absolute path) or `mock:SOCKET`.
    ///
    /// # Errors
    /// `EINVAL` for anything else, with the accepted forms in the message.
    pub fn parse(path: &str) -> Result<DevicePath> {
        if path == "embedded" {
            Ok(DevicePath::Embedded)
        } else if let Some(sock) = path.strip_prefix("mock:") {
            if sock.is_empty() {
                Err(Error::new(
                    Errno::EINVAL,
                    "open",
                    "mock: needs a socket path (mock:/run/davinci/davinci0.sock)",
                ))
            } else {
                Ok(DevicePath::Mock(PathBuf::from(sock)))
            }
        } else if path.starts_with('/') {
            Ok(DevicePath::Kernel(PathBuf::from(path)))
        } else {
            Err(Error::new(
                Errno::EINVAL,
                "open",
                format!(
                    "{path:?} is not a device path: use \"/dev/davinciN\", \"mock:SOCKET\" or \
                     \"embedded\""
                ),
            ))
        }
    }

    /// [`DEVICE_ENV`], or [`DEFAULT_DEVICE`] when it is not set: the device operators' tools
    /// ([`Control::from_env`](crate::Control::from_env)) open. A runtime opens
    /// [`default_device`](Self::default_device) instead.
    ///
    /// # Errors
    /// As [`parse`](Self::parse), for a malformed `DAVINCI_DEVICE`.
    pub fn from_env() -> Result<DevicePath> {
        Self::parse(&device_path_from_env().unwrap_or_else(|| DEFAULT_DEVICE.to_string()))
    }

    /// The one rule for a program that names no device, the same in Rust, C and Python and in
    /// `davinci-workload`: the first visible device if a visible-device list is set
    /// (`DAVINCI_VISIBLE_DEVICES`, else `ASCEND_VISIBLE_DEVICES`, resolved beside
    /// [`DEVICE_ENV`]'s device: [`crate::visible`]; an empty list is `ENODEV`); else
    /// [`DEVICE_ENV`] if it is set; else this node's device if it has one
    /// ([`node_device`]); else the embedded mock device (built with the `embedded` feature;
    /// without it, [`DEFAULT_DEVICE`], whose open then fails with `ENODEV`). Returns the path
    /// and where it came from, so a program can say which device it opened and why.
    ///
    /// # Errors
    /// As [`parse`](Self::parse), for a malformed `DAVINCI_DEVICE`.
    pub fn default_device() -> Result<(DevicePath, DeviceSource)> {
        if let Some((var, list)) = crate::visible::visible_list_from_env() {
            let place = crate::visible::DevicePlace::from_env()?;
            let all = crate::visible::parse_visible(var, &list, &place)?;
            return match all.into_iter().next() {
                Some(first) => Ok((first, DeviceSource::Visible)),
                None => Err(Error::new(
                    Errno::ENODEV,
                    "open",
                    format!("{var} is empty: no device is visible to this process"),
                )),
            };
        }
        if let Some(named) = device_path_from_env() {
            return Self::parse(&named)
                .map(|p| (p, DeviceSource::Env))
                .map_err(|e| {
                    Error::new(
                        Errno::EINVAL,
                        "open",
                        format!("{DEVICE_ENV}={named:?}: {}", e.message()),
                    )
                });
        }
        if let Some(node) = node_device() {
            return Ok((node, DeviceSource::Node));
        }
        if cfg!(feature = "embedded") {
            Ok((DevicePath::Embedded, DeviceSource::Embedded))
        } else {
            Ok((
                DevicePath::Kernel(DEFAULT_DEVICE.into()),
                DeviceSource::Node,
            ))
        }
    }
}

impl FromStr for DevicePath {
    type Err = Error;

    fn from_str(s: &str) -> Result<DevicePath> {
        Self::parse(s)
    }
}

impl fmt::Display for DevicePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DevicePath::Embedded => f.write_str("embedded"),
            DevicePath::Kernel(p) => write!(f, "{}", p.display()),
            DevicePath::Mock(p) => write!(f, "mock:{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_device_paths() {
        for (text, want) in [
            ("embedded", DevicePath::Embedded),
            ("/dev/davinci3", DevicePath::Kernel("/dev/davinci3".into())),
            (
                "mock:/run/davinci/davinci0.sock",
                DevicePath::Mock("/run/davinci/davinci0.sock".into()),
            ),
        ] {
            let p: DevicePath = text.parse().unwrap();
            assert_eq!(p, want);
            assert_eq!(p.to_string(), text);
        }
        assert!(DevicePath::parse("mock:").unwrap_err().is(Errno::EINVAL));
        let e = DevicePath::parse("davinci0").unwrap_err();
        assert!(
            e.is(Errno::EINVAL) && e.to_string().contains("mock:SOCKET"),
            "{e}"
        );
    }
}
