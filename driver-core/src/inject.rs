//! Fault injection: a device fault armed on a stream (or on every stream), so a runtime's error
//! handling can be tested against the mock device. The engine fires it
//! ([`DeviceCore::run_stream`](crate::DeviceCore::run_stream)); the host arms it
//! ([`DeviceCore::inject`](crate::DeviceCore::inject)). No client can reach it.

use davinci_uapi::Errno;

/// A device fault to inject, so a runtime's error handling can be tested against the mock
/// device (`MockConfig::inject`, `MockDevice::inject`, `davinci-mockd --inject`). Counted per
/// stream, in tasks the stream takes from the moment the fault is armed (the first is 1);
/// each fires once. docs/abi.md 5.6 says what a host sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inject {
    /// The `nth` task completes with `-errno` (no fault detail: a device error, not a bad
    /// descriptor) and the stream enters the error state with `errno`.
    ErrorAt {
        /// Which task (1 = the next one).
        nth: u64,
        /// The status it completes with (positive; `EIO` for a hardware error).
        errno: Errno,
    },
    /// The `nth` task is taken (the command ring's head moves past it) but never completes,
    /// and nothing after it is taken: waits for it time out.
    HangAt {
        /// Which task.
        nth: u64,
    },
    /// The stream stops consuming before the `nth` task: its command ring fills up.
    StopAt {
        /// Which task.
        nth: u64,
    },
}

impl Inject {
    /// The task it fires on (at least 1).
    pub fn nth(&self) -> u64 {
        match *self {
            Inject::ErrorAt { nth, .. } | Inject::HangAt { nth } | Inject::StopAt { nth } => {
                nth.max(1)
            }
        }
    }
}

/// Why a fault's text did not parse ([`Inject::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseInjectError<'a> {
    /// No `=` between the fault and its task number.
    NoEquals,
    /// The task number is not a whole number from 1.
    BadCount,
    /// The errno is neither a known name nor a known number.
    UnknownErrno(&'a str),
    /// Only `error-at` takes an errno.
    ErrnoNotAllowed,
    /// Not `error-at`, `hang-at` nor `stop-at`.
    UnknownFault(&'a str),
}

impl core::fmt::Display for ParseInjectError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ParseInjectError::NoEquals => f.write_str("no '='"),
            ParseInjectError::BadCount => f.write_str("N must be a whole number from 1"),
            ParseInjectError::UnknownErrno(e) => write!(f, "unknown errno '{e}'"),
            ParseInjectError::ErrnoNotAllowed => f.write_str("only error-at takes an errno"),
            ParseInjectError::UnknownFault(k) => write!(f, "unknown fault '{k}'"),
        }
    }
}

impl Inject {
    /// What a host's fault text asks for (the mock daemon's `--inject`, the kernel module's
    /// `inject` parameter): `error-at=N[:ERRNO]` (ERRNO a name such as `EFAULT`, any case, or
    /// a number; `EIO` if left out), `hang-at=N` or `stop-at=N`, N from 1.
    pub fn parse(s: &str) -> core::result::Result<Inject, ParseInjectError<'_>> {
        let (kind, rest) = s.split_once('=').ok_or(ParseInjectError::NoEquals)?;
        let (n, errno) = match rest.split_once(':') {
            Some((n, e)) => (n, Some(e)),
            None => (rest, None),
        };
        let nth: u64 = n
            .trim()
            .parse()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or(ParseInjectError::BadCount)?;
        let errno = match errno {
            None => Errno::EIO,
            Some(e) => {
                let e = e.trim();
                let by_name = (1..=4095)
                    .filter_map(Errno::from_code)
                    .find(|x| x.name().eq_ignore_ascii_case(e));
                by_name
                    .or_else(|| e.parse().ok().and_then(Errno::from_code))
                    .ok_or(ParseInjectError::UnknownErrno(e))?
            }
        };
        match kind.trim() {
            "error-at" => Ok(Inject::ErrorAt { nth, errno }),
            "hang-at" | "stop-at" if rest.contains(':') => Err(ParseInjectError::ErrnoNotAllowed),
            "hang-at" => Ok(Inject::HangAt { nth }),
            "stop-at" => Ok(Inject::StopAt { nth }),
            other => Err(ParseInjectError::UnknownFault(other)),
        }
    }
}
