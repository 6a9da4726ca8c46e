//! The shim's one error type: what failed, the errno, and what the driver said.
#![forbid(unsafe_code)]

use std::fmt;

use davinci_uapi::Errno;

/// A failed operation: [`op`](Self::op) names it (`"ALLOC_MEMORY"`, `"Stream::synchronize"`),
/// [`errno`](Self::errno) is the errno the driver or the system returned (`None` for errors
/// found by the library itself that have no errno), and [`message`](Self::message) says what
/// was wrong (the driver's message when it gave one). `Display` prints all three:
/// `ALLOC_MEMORY failed: ENOMEM: out of memory for this client`. `Send + Sync`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    errno: Option<Errno>,
    op: &'static str,
    msg: String,
}

impl Error {
    /// An error with an errno.
    pub fn new(errno: Errno, op: &'static str, msg: impl Into<String>) -> Self {
        Self {
            errno: Some(errno),
            op,
            msg: msg.into(),
        }
    }

    /// An error found by the shim that has no errno.
    pub fn other(op: &'static str, msg: impl Into<String>) -> Self {
        Self {
            errno: None,
            op,
            msg: msg.into(),
        }
    }

    /// An error from a system call (`mmap`, ...), keeping its errno when the ABI knows it.
    pub(crate) fn io(op: &'static str, what: &str, e: &std::io::Error) -> Self {
        // std's text of an OS error ends in " (os error N)": the errno is ours to show.
        let text = e.to_string();
        let text = match text.rfind(" (os error ") {
            Some(at) if e.raw_os_error().is_some() => &text[..at],
            _ => &text,
        };
        Self {
            errno: e.raw_os_error().and_then(Errno::from_code),
            op,
            msg: format!("{what}: {text}"),
        }
    }

    /// An error with an errno this ABI may not define (a task's status, a stream's error).
    pub(crate) fn with_errno(errno: Option<Errno>, op: &'static str, msg: String) -> Self {
        Self { errno, op, msg }
    }

    /// The same error, reported as failure of `op`.
    pub(crate) fn in_op(mut self, op: &'static str) -> Self {
        self.op = op;
        self
    }

    /// The errno, if the failure has one.
    pub fn errno(&self) -> Option<Errno> {
        self.errno
    }

    /// What failed: an ioctl's name (`"ALLOC_MEMORY"`) or a method (`"Stream::synchronize"`).
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// What was wrong, in words.
    pub fn message(&self) -> &str {
        &self.msg
    }

    /// Whether the errno is `e`.
    pub fn is(&self, e: Errno) -> bool {
        self.errno == Some(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.errno {
            Some(e) => write!(f, "{} failed: {}: {}", self.op, e.name(), self.msg),
            None => write!(f, "{} failed: {}", self.op, self.msg),
        }
    }
}

impl std::error::Error for Error {}

/// The shim's result type.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_op_errno_and_message() {
        let e = Error::new(
            Errno::ENOMEM,
            "ALLOC_MEMORY",
            "out of memory for this client",
        );
        assert_eq!(
            e.to_string(),
            "ALLOC_MEMORY failed: ENOMEM: out of memory for this client"
        );
        assert!(e.is(Errno::ENOMEM));
        let o = Error::other("Stream::submit", "nothing");
        assert_eq!(o.to_string(), "Stream::submit failed: nothing");
        let io = Error::io(
            "mmap",
            "mapping the ring",
            &std::io::Error::from_raw_os_error(22),
        );
        assert_eq!(io.errno(), Some(Errno::EINVAL));
        assert_eq!(
            io.to_string(),
            "mmap failed: EINVAL: mapping the ring: Invalid argument"
        );
    }
}
