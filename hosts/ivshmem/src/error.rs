//! [`Error`]: what went wrong on either side of the protocol, with the errno of a failed call
//! and what was being done.

use std::fmt;

use nix::errno::Errno;

use crate::PeerId;

/// Everything the server ([`crate::Server`]) and the peer side ([`crate::PeerClient`]) can
/// fail with.
#[derive(Debug)]
pub enum Error {
    /// A system call failed: `what` was being done, `errno` is what the kernel said.
    Sys {
        /// What was being done (names the path, the peer or the vector involved).
        what: String,
        /// The kernel's error.
        errno: Errno,
    },
    /// The requested shared memory or vector count is not one QEMU accepts or this crate
    /// serves.
    BadSpec(String),
    /// Nothing arrived within the timeout: `what` was being waited for.
    Timeout(&'static str),
    /// A client connected while the server's peer limit ([`crate::MAX_PEERS`], or fewer:
    /// [`crate::Server::limit_peers`]) was reached; its connection was closed before any
    /// message, so it received no descriptor (the protocol has no error message: QEMU fails
    /// to realize the device and says the server closed the connection).
    TooManyPeers {
        /// The bound that was reached.
        max: usize,
    },
    /// No peer with this id is connected.
    NoSuchPeer(PeerId),
    /// A vector outside `0..vectors`.
    NoSuchVector {
        /// The vector asked for.
        vector: u16,
        /// How many vectors every peer has.
        vectors: u16,
    },
    /// The other side broke the protocol: what it sent, or did, that it must not.
    Protocol(String),
    /// The other side closed the connection.
    Disconnected,
}

impl Error {
    /// A failed system call.
    pub(crate) fn sys(what: impl Into<String>, errno: Errno) -> Error {
        Error::Sys {
            what: what.into(),
            errno,
        }
    }

    /// The errno of a failed system call, if this is one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Sys { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Sys { what, errno } => {
                write!(f, "{what}: {} ({})", errno.desc(), *errno as i32)
            }
            Error::BadSpec(why) => write!(f, "bad ivshmem configuration: {why}"),
            Error::Timeout(what) => write!(f, "timed out waiting for {what}"),
            Error::TooManyPeers { max } => {
                write!(f, "refused a connection: {max} peers are already connected")
            }
            Error::NoSuchPeer(id) => write!(f, "no peer {id} is connected"),
            Error::NoSuchVector { vector, vectors } => {
                write!(f, "vector {vector} out of range (the device has {vectors})")
            }
            Error::Protocol(why) => write!(f, "ivshmem protocol violation: {why}"),
            Error::Disconnected => f.write_str("the other side closed the connection"),
        }
    }
}

impl std::error::Error for Error {}

/// The crate's result.
pub type Result<T> = std::result::Result<T, Error>;
