//! What failed, and the exit status that says so.
#![forbid(unsafe_code)]

use davinci_ops::cdi::WriteError;
use davinci_uapi::Errno;

use crate::output::ErrorJson;

/// Exit statuses: one per failure class, so scripts can tell them apart.
pub mod exit {
    /// Success (for `set`: every targeted device is in the requested mode).
    pub const OK: i32 = 0;
    /// Any other failure (protocol or ABI mismatch, unexpected errno).
    pub const OTHER: i32 = 1;
    /// Bad command line.
    pub const USAGE: i32 = 2;
    /// No such device, nothing found, or the device is unreachable (`ENODEV`).
    pub const NOT_FOUND: i32 = 3;
    /// Permission denied (`EPERM`: not an admin; socket or node permissions).
    pub const PERMISSION: i32 = 4;
    /// Busy (`EBUSY`: switching to exclusive would strand attached clients).
    pub const BUSY: i32 = 5;
    /// Partial failure: some targeted devices succeeded, some failed (see the per-device
    /// results).
    pub const PARTIAL: i32 = 6;
}

/// A failure talking to a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmiError {
    /// The errno, when there is one.
    pub errno: Option<Errno>,
    /// The full message.
    pub message: String,
}

impl SmiError {
    /// An error with an errno.
    pub fn new(errno: Errno, message: impl Into<String>) -> Self {
        Self {
            errno: Some(errno),
            message: message.into(),
        }
    }

    pub(crate) fn json(&self) -> ErrorJson {
        ErrorJson {
            errno: self.errno.map(|e| e.name()),
            code: self.errno.map(|e| e.code()),
            message: self.message.clone(),
        }
    }

    /// The exit status of this failure class.
    pub fn exit_code(&self) -> i32 {
        match self.errno {
            Some(Errno::ENODEV | Errno::ENOENT) => exit::NOT_FOUND,
            Some(Errno::EPERM | Errno::EACCES) => exit::PERMISSION,
            Some(Errno::EBUSY) => exit::BUSY,
            _ => exit::OTHER,
        }
    }
}

impl From<davinci_shim::Error> for SmiError {
    fn from(e: davinci_shim::Error) -> Self {
        Self {
            errno: e.errno(),
            message: e.to_string(),
        }
    }
}
impl From<WriteError> for SmiError {
    /// A spec that could not be written: `EACCES` when permission was denied, else no errno.
    fn from(e: WriteError) -> Self {
        Self {
            errno: (e.kind == Some(std::io::ErrorKind::PermissionDenied)).then_some(Errno::EACCES),
            message: e.message,
        }
    }
}

/// The exit status of a run over several devices: 0 if all succeeded; the failure class if
/// all failed alike (1 if they failed differently); [`exit::PARTIAL`] if some succeeded.
pub fn combine(outcomes: &[Option<&SmiError>]) -> i32 {
    let failed: Vec<&SmiError> = outcomes.iter().flatten().copied().collect();
    if failed.is_empty() {
        exit::OK
    } else if failed.len() < outcomes.len() {
        exit::PARTIAL
    } else {
        let first = failed[0].exit_code();
        if failed.iter().all(|e| e.exit_code() == first) {
            first
        } else {
            exit::OTHER
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine_classes() {
        let busy = SmiError::new(Errno::EBUSY, "b");
        let perm = SmiError::new(Errno::EPERM, "p");
        assert_eq!(combine(&[None, None]), 0);
        assert_eq!(combine(&[Some(&busy)]), exit::BUSY);
        assert_eq!(combine(&[Some(&busy), Some(&busy)]), exit::BUSY);
        assert_eq!(combine(&[Some(&busy), Some(&perm)]), exit::OTHER);
        assert_eq!(combine(&[Some(&busy), None]), exit::PARTIAL);
        assert_eq!(SmiError::new(Errno::EPROTO, "x").exit_code(), exit::OTHER);
    }
}
