//! The driver's error: an errno for the wire and a message saying what was wrong.

use davinci_uapi::Errno;

/// An errno plus a static message naming the offending field or condition. The kernel module
/// returns the errno (and may log the message); the mock daemon sends both to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error {
    /// What goes on the wire.
    pub errno: Errno,
    /// What was wrong, for people.
    pub msg: &'static str,
}

impl Error {
    /// An error with a message.
    pub const fn new(errno: Errno, msg: &'static str) -> Self {
        Self { errno, msg }
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
