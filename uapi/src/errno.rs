//! Errno values on the wire (Linux generic numbering, as returned by the kernel module and in
//! the mock daemon's reply frames) and what each means for this device.

/// An errno the driver returns. The numeric values are Linux's (asm-generic/errno-base.h,
/// asm-generic/errno.h); other values never appear on the wire from a conforming driver.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Errno {
    /// Operation not permitted: an admin-only command from a non-admin, or a resource command
    /// on a control handle.
    EPERM = 1,
    /// No such object: the handle does not exist *for this client* (foreign handles look the
    /// same as stale ones, so nothing leaks across clients).
    ENOENT = 2,
    /// Interrupted: a blocking wait was interrupted by a signal (kernel) or the device shut
    /// down (mock); retry.
    EINTR = 4,
    /// I/O error: the stream is in the error state (the ring's `error` field says why).
    EIO = 5,
    /// Bad file descriptor: IMPORT_MEMORY through an fd (ABI 1.5) named no open descriptor.
    EBADF = 9,
    /// Argument list too long: a size or count above a hard ABI bound.
    E2BIG = 7,
    /// Try again: a non-blocking operation would block (ring full, wait with zero timeout).
    EAGAIN = 11,
    /// Out of device memory (allocation, or a per-client memory limit).
    ENOMEM = 12,
    /// Bad address: a user pointer (`LIST_CLIENTS` buffer) could not be written.
    EFAULT = 14,
    /// Busy: the device is held exclusively by another client, the object is still in use, or
    /// a share-mode change would strand attached clients.
    EBUSY = 16,
    /// No such device.
    ENODEV = 19,
    /// Invalid argument: a reserved field or bit is non-zero, a size or enum is out of range.
    EINVAL = 22,
    /// Inappropriate ioctl: unknown command, or an argument size that does not match the
    /// command's struct.
    ENOTTY = 25,
    /// Too many open files: EXPORT_MEMORY as an fd (ABI 1.5) found no free descriptor.
    EMFILE = 24,
    /// No space: a fixed-capacity table (contexts, streams, events, allocations, clients) is full.
    ENOSPC = 28,
    /// Result out of range: an address or length overflows.
    ERANGE = 34,
    /// Protocol error: the peer (driver or client) speaks another ABI major, or a malformed frame.
    EPROTO = 71,
    /// Bad message: a descriptor failed validation (unknown opcode, reserved bits).
    EBADMSG = 74,
    /// Value too large: a size computation would overflow.
    EOVERFLOW = 75,
    /// Access denied by address check: a descriptor named device memory the client does not own.
    EACCES = 13,
    /// Timed out: a blocking wait reached its timeout.
    ETIMEDOUT = 110,
    /// Cancelled: the stream or client was torn down while the operation was pending.
    ECANCELED = 125,
}

impl Errno {
    /// Every errno the ABI uses.
    pub const ALL: [Errno; 22] = [
        Errno::EPERM,
        Errno::ENOENT,
        Errno::EINTR,
        Errno::EIO,
        Errno::EBADF,
        Errno::E2BIG,
        Errno::EAGAIN,
        Errno::ENOMEM,
        Errno::EACCES,
        Errno::EFAULT,
        Errno::EBUSY,
        Errno::ENODEV,
        Errno::EINVAL,
        Errno::EMFILE,
        Errno::ENOTTY,
        Errno::ENOSPC,
        Errno::ERANGE,
        Errno::EPROTO,
        Errno::EBADMSG,
        Errno::EOVERFLOW,
        Errno::ETIMEDOUT,
        Errno::ECANCELED,
    ];

    /// The positive errno value.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The errno for a positive value, if the ABI uses it.
    pub const fn from_code(code: i32) -> Option<Errno> {
        let mut i = 0;
        while i < Self::ALL.len() {
            if Self::ALL[i] as i32 == code {
                return Some(Self::ALL[i]);
            }
            i += 1;
        }
        None
    }

    /// The symbolic name (`"EINVAL"`).
    pub const fn name(self) -> &'static str {
        match self {
            Errno::EPERM => "EPERM",
            Errno::ENOENT => "ENOENT",
            Errno::EINTR => "EINTR",
            Errno::EIO => "EIO",
            Errno::EBADF => "EBADF",
            Errno::E2BIG => "E2BIG",
            Errno::EAGAIN => "EAGAIN",
            Errno::ENOMEM => "ENOMEM",
            Errno::EACCES => "EACCES",
            Errno::EFAULT => "EFAULT",
            Errno::EBUSY => "EBUSY",
            Errno::ENODEV => "ENODEV",
            Errno::EINVAL => "EINVAL",
            Errno::EMFILE => "EMFILE",
            Errno::ENOTTY => "ENOTTY",
            Errno::ENOSPC => "ENOSPC",
            Errno::ERANGE => "ERANGE",
            Errno::EPROTO => "EPROTO",
            Errno::EBADMSG => "EBADMSG",
            Errno::EOVERFLOW => "EOVERFLOW",
            Errno::ETIMEDOUT => "ETIMEDOUT",
            Errno::ECANCELED => "ECANCELED",
        }
    }

    /// A one-line description of what this errno means from this driver.
    pub const fn describe(self) -> &'static str {
        match self {
            Errno::EPERM => "operation not permitted for this caller",
            Errno::ENOENT => "no such handle for this client",
            Errno::EINTR => "wait interrupted",
            Errno::EIO => "stream is in the error state",
            Errno::EBADF => "no such open file descriptor",
            Errno::E2BIG => "size or count above the ABI bound",
            Errno::EAGAIN => "would block",
            Errno::ENOMEM => "out of device memory",
            Errno::EACCES => "device address not owned by this client",
            Errno::EFAULT => "bad user pointer",
            Errno::EBUSY => "device or object busy",
            Errno::ENODEV => "no such device",
            Errno::EINVAL => "invalid argument",
            Errno::EMFILE => "no file descriptor free in this process",
            Errno::ENOTTY => "unknown command or wrong argument size",
            Errno::ENOSPC => "a fixed-capacity table is full",
            Errno::ERANGE => "address or length out of range",
            Errno::EPROTO => "ABI or protocol mismatch",
            Errno::EBADMSG => "invalid task descriptor",
            Errno::EOVERFLOW => "size computation overflows",
            Errno::ETIMEDOUT => "timed out",
            Errno::ECANCELED => "cancelled by teardown",
        }
    }
}

impl core::fmt::Display for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} ({})", self.name(), self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        for (i, e) in Errno::ALL.iter().enumerate() {
            assert_eq!(Errno::from_code(e.code()), Some(*e));
            for other in &Errno::ALL[i + 1..] {
                assert_ne!(e.code(), other.code());
            }
        }
        assert_eq!(Errno::from_code(0), None);
        assert_eq!(Errno::from_code(9999), None);
    }

    #[test]
    fn linux_values() {
        assert_eq!(Errno::EINVAL.code(), 22);
        assert_eq!(Errno::ENOTTY.code(), 25);
        assert_eq!(Errno::ETIMEDOUT.code(), 110);
        assert_eq!(Errno::EBUSY.code(), 16);
    }
}
