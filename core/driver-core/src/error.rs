//! The driver's error: an errno for the wire and a message saying what was wrong.

use davinci_uapi::{Errno, Fault, FaultKind, FaultOperand};

/// An errno plus a static message naming the offending field or condition, and, for a
/// descriptor, which operand was wrong ([`Fault`], written into its failed event record); for
/// a quota refusal, the numbers ([`QuotaHit`]). The mock daemon sends errno and message to the
/// client; the kernel module returns the errno and keeps the message for GET_LAST_ERROR. Every
/// host turns an error into text with [`Error::message`] (or [`Error::message_within`] for a
/// smaller buffer), so a quota refusal's numbers reach every client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error {
    /// What goes on the wire.
    pub errno: Errno,
    /// What was wrong, for people (without a quota's numbers: see [`Error::message`]).
    pub msg: &'static str,
    /// For a failed descriptor: which operand, what was wrong with it.
    pub fault: Option<Fault>,
    /// For a refusal by one of the client's limits: which, and the numbers.
    pub quota: Option<QuotaHit>,
}

/// Which of a client's limits refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaKind {
    /// Device memory in bytes (`ENOMEM`; GET_INFO `client_memory_limit`).
    Memory,
    /// Contexts (`ENOSPC`).
    Contexts,
    /// Streams (`ENOSPC`).
    Streams,
    /// Events (`ENOSPC`).
    Events,
    /// Allocations, imports included (`ENOSPC`).
    Allocations,
    /// Exports (`ENOSPC`).
    Exports,
    /// Client opens of one tenant (`ENOSPC`).
    Opens,
}

impl QuotaKind {
    /// The kind's name as `davinci-mockd --tenant-quota` spells it (`"streams"`), and
    /// `"memory"`.
    pub const fn name(self) -> &'static str {
        match self {
            QuotaKind::Memory => "memory",
            QuotaKind::Contexts => "contexts",
            QuotaKind::Streams => "streams",
            QuotaKind::Events => "events",
            QuotaKind::Allocations => "allocations",
            QuotaKind::Exports => "exports",
            QuotaKind::Opens => "opens",
        }
    }
}

/// The numbers of a quota refusal: the client asked for `asked` more (1 object, or bytes of
/// memory), held `held`, and may hold `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaHit {
    /// Which limit.
    pub kind: QuotaKind,
    /// What the request would have added.
    pub asked: u64,
    /// What the client held.
    pub held: u64,
    /// The most it may hold now.
    pub limit: u64,
    /// Whether the device was shared (the table quotas apply only then).
    pub shared: bool,
}

impl Error {
    /// An error with a message.
    pub const fn new(errno: Errno, msg: &'static str) -> Self {
        Self {
            errno,
            msg,
            fault: None,
            quota: None,
        }
    }

    /// A refusal by one of the client's limits, with its numbers.
    pub const fn quota(errno: Errno, msg: &'static str, hit: QuotaHit) -> Self {
        Self {
            errno,
            msg,
            fault: None,
            quota: Some(hit),
        }
    }

    /// A descriptor's error about `operand`.
    pub const fn at(
        errno: Errno,
        msg: &'static str,
        operand: FaultOperand,
        kind: FaultKind,
    ) -> Self {
        Self {
            errno,
            msg,
            fault: Some(Fault::new(operand, kind)),
            quota: None,
        }
    }

    /// This error with the fault's kind-specific value (an alignment, a byte count).
    pub const fn value(mut self, value: u32) -> Self {
        if let Some(f) = self.fault {
            self.fault = Some(Fault::with_value(f.operand, f.kind, value));
        }
        self
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}", self.errno.name(), self.message())
    }
}

/// The driver's result type.
pub type Result<T> = core::result::Result<T, Error>;

/// `Err(Error::new(Errno::$e, $msg))`.
macro_rules! fail {
    ($e:ident, $msg:expr) => {
        return Err($crate::error::Error::new(davinci_uapi::Errno::$e, $msg))
    };
}

/// `Err(Error::at(Errno::$e, $msg, FaultOperand::$op, FaultKind::$kind))`: a descriptor's
/// error about one operand.
macro_rules! fail_at {
    ($e:ident, $msg:expr, $op:ident, $kind:ident) => {
        return Err($crate::error::Error::at(
            davinci_uapi::Errno::$e,
            $msg,
            davinci_uapi::FaultOperand::$op,
            davinci_uapi::FaultKind::$kind,
        ))
    };
}

/// Fails with `$e` unless `$cond`.
macro_rules! ensure {
    ($cond:expr, $e:ident, $msg:expr) => {
        if !$cond {
            $crate::error::fail!($e, $msg);
        }
    };
}

pub(crate) use ensure;
pub(crate) use fail;
pub(crate) use fail_at;
