//! The driver's error: an errno for the wire and a message saying what was wrong.

use davinci_uapi::{Errno, Fault, FaultKind, FaultOperand};

/// An errno plus a static message naming the offending field or condition, and, for a
/// descriptor, which operand was wrong ([`Fault`], written into its failed event record). The
/// mock daemon sends errno and message to the client; the kernel module returns the errno and
/// keeps the message for GET_LAST_ERROR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error {
    /// What goes on the wire.
    pub errno: Errno,
    /// What was wrong, for people.
    pub msg: &'static str,
    /// For a failed descriptor: which operand, what was wrong with it.
    pub fault: Option<Fault>,
}

impl Error {
    /// An error with a message.
    pub const fn new(errno: Errno, msg: &'static str) -> Self {
        Self {
            errno,
            msg,
            fault: None,
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
        write!(f, "{}: {}", self.errno.name(), self.msg)
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
