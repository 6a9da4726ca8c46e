//! Why `davinci-workload` failed: a [`Failure`] of a [`Kind`] (usage, device unavailable,
//! timeout, device error), each with its exit status, from a shim error or a usage mistake.
#![forbid(unsafe_code)]

use davinci_shim::Errno;
use serde::Serialize;

use crate::cli::exit;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    Usage,
    DeviceUnavailable,
    Timeout,
    DeviceError,
}

impl Kind {
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Kind::Usage => exit::USAGE,
            Kind::DeviceUnavailable => exit::UNAVAILABLE,
            Kind::Timeout => exit::TIMEOUT,
            Kind::DeviceError => exit::DEVICE,
        }
    }
}

/// Why the program failed, with what to change in the message.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) kind: Kind,
    pub(crate) message: String,
    pub(crate) errno: Option<Errno>,
}

impl Failure {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure {
            kind: Kind::Usage,
            message: message.into(),
            errno: None,
        }
    }

    /// A shim error while opening the device: a malformed path is a usage error, the rest
    /// say the device is unavailable.
    pub(crate) fn open(e: &davinci_shim::Error) -> Self {
        let kind = if e.is(Errno::EINVAL) {
            Kind::Usage
        } else {
            Kind::DeviceUnavailable
        };
        Failure {
            kind,
            message: e.to_string(),
            errno: e.errno(),
        }
    }

    /// A shim error during the run.
    pub(crate) fn run(e: &davinci_shim::Error) -> Self {
        let kind = if e.is(Errno::ETIMEDOUT) {
            Kind::Timeout
        } else if e.is(Errno::ENODEV) {
            Kind::DeviceUnavailable
        } else if e.is(Errno::EINVAL) && e.op() == "workload" {
            Kind::Usage
        } else {
            Kind::DeviceError
        };
        let mut message = e.to_string();
        if kind == Kind::Timeout {
            message.push_str(" (raise --timeout-secs if the device is just slow)");
        }
        Failure {
            kind,
            message,
            errno: e.errno(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::AFTER_HELP;
    use davinci_shim::DevicePath;

    #[test]
    fn run_errors_map_to_distinct_exit_codes() {
        let code = |e: davinci_shim::Error| Failure::run(&e).kind.exit_code();
        assert_eq!(
            code(davinci_shim::Error::new(
                Errno::ETIMEDOUT,
                "Stream::synchronize",
                "still running"
            )),
            exit::TIMEOUT
        );
        assert_eq!(
            code(davinci_shim::Error::new(
                Errno::ENODEV,
                "CREATE_STREAM",
                "gone"
            )),
            exit::UNAVAILABLE
        );
        assert_eq!(
            code(davinci_shim::Error::new(
                Errno::ENOMEM,
                "ALLOC_MEMORY",
                "full"
            )),
            exit::DEVICE
        );
        assert_eq!(
            code(davinci_shim::Error::new(
                Errno::EINVAL,
                "workload",
                "--tasks 0"
            )),
            exit::USAGE
        );
        let t = Failure::run(&davinci_shim::Error::new(Errno::ETIMEDOUT, "x", "y"));
        assert!(t.message.contains("--timeout-secs"), "{}", t.message);
        let codes = [
            exit::MISMATCH,
            exit::USAGE,
            exit::UNAVAILABLE,
            exit::TIMEOUT,
            exit::DEVICE,
            exit::INTERRUPTED,
        ];
        for (i, c) in codes.iter().enumerate() {
            assert!(!codes[..i].contains(c), "exit code {c} used twice");
            assert!(
                AFTER_HELP.contains(&format!("\n  {c} ")),
                "{c} not in --help"
            );
        }
    }

    #[test]
    fn open_errors_are_usage_or_unavailable() {
        let e = DevicePath::parse("davinci0").unwrap_err();
        assert_eq!(Failure::open(&e).kind, Kind::Usage);
        let e = davinci_shim::Error::new(Errno::EBUSY, "open", "held by pid 1");
        assert_eq!(Failure::open(&e).kind, Kind::DeviceUnavailable);
    }
}
