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

/// Which streams a device-wide fault ([`InjectRule`]) is armed on: those of clients that
/// match every field given, at most `streams` of them. The default matches every stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InjectTarget {
    /// Only streams of clients opened by this process id.
    pub pid: Option<u32>,
    /// Only streams of clients opened by this user id.
    pub uid: Option<u32>,
    /// Only streams of clients whose process name (`comm`, at most 15 bytes) is this one,
    /// NUL-padded.
    pub comm: Option<[u8; 16]>,
    /// Only the first this many matching streams (then the rule is spent): `Some(1)` faults
    /// one stream, and the stream a recovering runtime creates next runs clean.
    pub streams: Option<u32>,
}

/// A device-wide fault and the streams it is armed on (`davinci-mockd --inject`, the kernel
/// module's `inject` parameter, `MockConfig::inject`). An [`Inject`] converts to a rule for
/// every stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InjectRule {
    /// The fault.
    pub fault: Inject,
    /// Which streams.
    pub target: InjectTarget,
}

impl From<Inject> for InjectRule {
    fn from(fault: Inject) -> Self {
        InjectRule {
            fault,
            target: InjectTarget::default(),
        }
    }
}

/// Why a rule's text did not parse ([`InjectRule::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseRuleError<'a> {
    /// The fault before `@`.
    Fault(ParseInjectError<'a>),
    /// A selector that is not `pid=N`, `uid=N`, `comm=NAME` or `streams=N`, or a bad value.
    Selector(&'a str),
}

impl core::fmt::Display for ParseRuleError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ParseRuleError::Fault(e) => e.fmt(f),
            ParseRuleError::Selector(s) => write!(
                f,
                "bad selector '{s}' (pid=N, uid=N, comm=NAME of at most 15 bytes, streams=N \
                 from 1)"
            ),
        }
    }
}

impl InjectRule {
    /// A rule's text: a fault ([`Inject::parse`]), then optionally `@` and comma-separated
    /// selectors: `pid=N`, `uid=N`, `comm=NAME`, `streams=N`. `hang-at=5` hangs every
    /// stream's 5th task; `error-at=3:EFAULT@pid=4242,streams=1` fails the 3rd task of the
    /// first stream process 4242 creates, and no other.
    pub fn parse(s: &str) -> core::result::Result<InjectRule, ParseRuleError<'_>> {
        let (fault, selectors) = match s.split_once('@') {
            Some((f, sel)) => (f, Some(sel)),
            None => (s, None),
        };
        let fault = Inject::parse(fault).map_err(ParseRuleError::Fault)?;
        let mut target = InjectTarget::default();
        for sel in selectors.into_iter().flat_map(|s| s.split(',')) {
            let bad = ParseRuleError::Selector(sel);
            let (key, value) = sel.split_once('=').ok_or(bad)?;
            let value = value.trim();
            let number = value.parse::<u32>().map_err(|_| bad);
            match key.trim() {
                "pid" => target.pid = Some(number?),
                "uid" => target.uid = Some(number?),
                "streams" => target.streams = Some(number.ok().filter(|&n| n >= 1).ok_or(bad)?),
                "comm" if !value.is_empty() && value.len() < 16 => {
                    let mut c = [0u8; 16];
                    c[..value.len()].copy_from_slice(value.as_bytes());
                    target.comm = Some(c);
                }
                _ => return Err(bad),
            }
        }
        Ok(InjectRule { fault, target })
    }

    /// Whether a stream of the client opened with `pid`, `uid` and `comm` is armed (the
    /// `streams` count aside).
    pub fn matches(&self, pid: u32, uid: u32, comm: &[u8; 16]) -> bool {
        let t = &self.target;
        t.pid.is_none_or(|p| p == pid)
            && t.uid.is_none_or(|u| u == uid)
            && t.comm.as_ref().is_none_or(|c| c == comm)
    }
}

/// A host's test hook, as the kernel module's `inject` parameter and the PCI device's admin
/// INJECT carry it: a rule ([`InjectRule::parse`]), `none` (or nothing) to disarm, or `reset`.
/// Applied with [`DeviceCore::apply_host_fault`](crate::DeviceCore::apply_host_fault), so the
/// software device and the PCI device behave alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFault {
    /// Arm (or, `None`, disarm) every stream and every new one; a rule with selectors arms
    /// only the new streams it selects.
    Arm(Option<InjectRule>),
    /// Reset the device ([`DeviceCore::reset`](crate::DeviceCore::reset)).
    Reset,
}

impl HostFault {
    /// Parses a host's fault text (surrounding white space ignored).
    ///
    /// # Errors
    /// Why the rule does not parse.
    pub fn parse(text: &str) -> core::result::Result<HostFault, ParseRuleError<'_>> {
        match text.trim() {
            "" | "none" => Ok(HostFault::Arm(None)),
            "reset" => Ok(HostFault::Reset),
            t => InjectRule::parse(t).map(|r| HostFault::Arm(Some(r))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_with_selectors_and_bad_ones_say_why() {
        assert_eq!(
            InjectRule::parse("hang-at=5"),
            Ok(Inject::HangAt { nth: 5 }.into())
        );
        let r = InjectRule::parse("error-at=3:EFAULT@pid=42,streams=1,comm=myrt").unwrap();
        assert_eq!(
            r.fault,
            Inject::ErrorAt {
                nth: 3,
                errno: Errno::EFAULT
            }
        );
        assert_eq!((r.target.pid, r.target.streams), (Some(42), Some(1)));
        let mut comm = [0u8; 16];
        comm[..4].copy_from_slice(b"myrt");
        assert!(r.matches(42, 7, &comm));
        assert!(!r.matches(43, 7, &comm));
        assert!(!r.matches(42, 7, &[0; 16]));
        for bad in [
            "hang-at=1@pid",
            "hang-at=1@pid=x",
            "hang-at=1@streams=0",
            "hang-at=1@who=1",
        ] {
            let e = InjectRule::parse(bad).unwrap_err();
            assert!(matches!(e, ParseRuleError::Selector(_)), "{bad}: {e:?}");
        }
        assert!(matches!(
            InjectRule::parse("hang-at=0@pid=1"),
            Err(ParseRuleError::Fault(ParseInjectError::BadCount))
        ));
    }
}
