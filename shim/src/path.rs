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

/// The device opened when neither a path nor [`DEVICE_ENV`] names one.
pub const DEFAULT_DEVICE: &str = "/dev/davinci0";

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

    /// [`DEVICE_ENV`], or [`DEFAULT_DEVICE`] when it is not set.
    ///
    /// # Errors
    /// As [`parse`](Self::parse), for a malformed `DAVINCI_DEVICE`.
    pub fn from_env() -> Result<DevicePath> {
        Self::parse(&device_path_from_env().unwrap_or_else(|| DEFAULT_DEVICE.to_string()))
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
