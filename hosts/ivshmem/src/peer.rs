//! [`PeerClient`]: the peer side of the protocol, what QEMU's `ivshmem-doorbell` does with the
//! server's messages, in Rust. The server's tests speak to it; a host process could use it
//! to be a peer of another ivshmem server.
//!
//! It follows QEMU 7.2's device: the version must be 0 and come without a descriptor, then
//! the id (0..=65535, no descriptor), then -1 with the shared memory; then a peer id with a
//! descriptor adds that peer's next vector (descriptors past the configured vector count
//! are closed), a peer id without one is a disconnect. Anything else is
//! [`Error::Protocol`].

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use davinci_shm::SharedMapping;
use nix::errno::Errno;
use nix::sys::stat::fstat;
use nix::unistd::{read, write};

use crate::error::{Error, Result};
use crate::memory::{libc_eio, MAX_SHM_SIZE};
use crate::sockio::{recv_msg, wait_readable, Received};
use crate::{PeerId, MAX_VECTORS, PROTOCOL_VERSION};

/// The most other peers a [`PeerClient`] keeps track of.
pub const MAX_KNOWN_PEERS: usize = 64;

/// One message after the opening, as [`PeerClient::next_notice`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// A descriptor for `peer`'s vector `vector` arrived (its own id: an interrupt setup).
    Vector {
        /// Whose.
        peer: PeerId,
        /// Which vector it interrupts (the count of its descriptors so far).
        vector: u16,
    },
    /// A descriptor past the configured vectors arrived for `peer` and was closed.
    ExtraVector(PeerId),
    /// `peer` disconnected (its descriptors were closed).
    Gone(PeerId),
}

/// A connected peer: its id, the shared memory, the eventfds that interrupt the other peers
/// and its own (which the others' doorbells signal).
#[derive(Debug)]
pub struct PeerClient {
    sock: UnixStream,
    id: PeerId,
    vectors: u16,
    shm_size: u64,
    mapping: SharedMapping,
    peers: BTreeMap<PeerId, Vec<OwnedFd>>,
}

fn proto(why: impl Into<String>) -> Error {
    Error::Protocol(why.into())
}

fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc_eio()))
}

impl PeerClient {
    /// Connects to the server at `path` as a device with `vectors` vectors and reads the
    /// opening up to the shared memory (version, id, memory), waiting at most `timeout`.
    /// The eventfds that follow are read by [`PeerClient::next_notice`] (or
    /// [`PeerClient::wait_ready`]).
    ///
    /// # Errors
    /// [`Error::Protocol`] when the server's opening differs from the protocol's;
    /// [`Error::Timeout`]; [`Error::Disconnected`]; [`Error::Sys`].
    pub fn connect(path: &Path, vectors: u16, timeout: Duration) -> Result<PeerClient> {
        if vectors == 0 || vectors > MAX_VECTORS {
            return Err(Error::BadSpec(format!("{vectors} vectors")));
        }
        let deadline = Instant::now() + timeout;
        let sock = UnixStream::connect(path)
            .map_err(|e| Error::sys(format!("connect {}", path.display()), io_errno(&e)))?;
        let next = || -> Result<(i64, Option<OwnedFd>)> {
            let left = deadline.saturating_duration_since(Instant::now());
            match recv_msg(sock.as_fd(), left) {
                Ok(Received::Msg(v, fd)) => Ok((v, fd)),
                Ok(Received::Eof) => Err(Error::Disconnected),
                Ok(Received::Timeout) => Err(Error::Timeout("the server's opening")),
                Err(e) => Err(Error::sys("recvmsg from the server", e)),
            }
        };
        match next()? {
            (PROTOCOL_VERSION, None) => {}
            (v, None) => return Err(proto(format!("version {v}, expected {PROTOCOL_VERSION}"))),
            (_, Some(_)) => return Err(proto("the version came with a descriptor")),
        }
        let id = match next()? {
            (v, None) => u16::try_from(v)
                .map(PeerId)
                .map_err(|_| proto(format!("id {v} outside 0..=65535")))?,
            (_, Some(_)) => return Err(proto("the id came with a descriptor")),
        };
        let shm = match next()? {
            (-1, Some(fd)) => fd,
            (v, fd) => {
                return Err(proto(format!(
                    "expected -1 with the shared memory, got {v} {} a descriptor",
                    if fd.is_some() { "with" } else { "without" }
                )))
            }
        };
        let st = fstat(&shm).map_err(|e| Error::sys("fstat of the shared memory", e))?;
        let size = u64::try_from(st.st_size).unwrap_or(0);
        if !size.is_power_of_two() || size > MAX_SHM_SIZE {
            return Err(proto(format!("shared memory of {size} bytes")));
        }
        let len = usize::try_from(size).map_err(|_| proto("size"))?;
        let mapping = SharedMapping::map(shm.as_fd(), 0, len)
            .map_err(|e| Error::sys("mmap of the shared memory", io_errno(&e)))?;
        Ok(PeerClient {
            sock,
            id,
            vectors,
            shm_size: size,
            mapping,
            peers: BTreeMap::new(),
        })
    }

    /// This peer's id.
    pub fn id(&self) -> PeerId {
        self.id
    }

    /// The shared memory's size (from the descriptor).
    pub fn shm_size(&self) -> u64 {
        self.shm_size
    }

    /// This process's mapping of the shared memory.
    pub fn shared(&self) -> &SharedMapping {
        &self.mapping
    }

    /// How many vector descriptors `peer` has (its own id included).
    pub fn vectors_of(&self, peer: PeerId) -> usize {
        self.peers.get(&peer).map_or(0, Vec::len)
    }

    /// The peers with at least one descriptor (its own id included once its setup began).
    pub fn known_peers(&self) -> Vec<PeerId> {
        self.peers.keys().copied().collect()
    }

    /// Reads the next message, waiting at most `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::Disconnected`] when the server closed the connection;
    /// [`Error::Protocol`] for a message the protocol does not allow (a number outside
    /// 0..=65535, a second shared memory, a disconnect of an unknown peer or of itself,
    /// more than [`MAX_KNOWN_PEERS`] peers).
    pub fn next_notice(&mut self, timeout: Duration) -> Result<Notice> {
        let (v, fd) = match recv_msg(self.sock.as_fd(), timeout) {
            Ok(Received::Msg(v, fd)) => (v, fd),
            Ok(Received::Eof) => return Err(Error::Disconnected),
            Ok(Received::Timeout) => return Err(Error::Timeout("a message from the server")),
            Err(e) => return Err(Error::sys("recvmsg from the server", e)),
        };
        let peer = u16::try_from(v)
            .map(PeerId)
            .map_err(|_| proto(format!("message {v} after the opening")))?;
        match fd {
            Some(fd) => {
                if !self.peers.contains_key(&peer) && self.peers.len() >= MAX_KNOWN_PEERS {
                    return Err(proto(format!("more than {MAX_KNOWN_PEERS} peers")));
                }
                let fds = self.peers.entry(peer).or_default();
                if fds.len() >= usize::from(self.vectors) {
                    drop(fd);
                    return Ok(Notice::ExtraVector(peer));
                }
                fds.push(fd);
                let vector = u16::try_from(fds.len() - 1).unwrap_or(u16::MAX);
                Ok(Notice::Vector { peer, vector })
            }
            None => {
                if peer == self.id {
                    return Err(proto("a disconnect of this peer itself"));
                }
                if self.peers.remove(&peer).is_none() {
                    return Err(proto(format!("a disconnect of unknown peer {peer}")));
                }
                Ok(Notice::Gone(peer))
            }
        }
    }

    /// Reads messages until this peer has all its own vectors (the end of the opening),
    /// waiting at most `timeout` in all.
    ///
    /// # Errors
    /// As [`PeerClient::next_notice`].
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while self.vectors_of(self.id) < usize::from(self.vectors) {
            self.next_notice(deadline.saturating_duration_since(Instant::now()))?;
        }
        Ok(())
    }

    /// What a guest's Doorbell write of `peer << 16 | vector` does: signals that peer's
    /// eventfd for the vector. Ignored (`Ok(false)`) when the peer or vector is not connected,
    /// as QEMU ignores such a write.
    ///
    /// # Errors
    /// The `write(2)` errno.
    pub fn ring(&self, peer: PeerId, vector: u16) -> Result<bool> {
        let Some(fd) = self
            .peers
            .get(&peer)
            .and_then(|v| v.get(usize::from(vector)))
        else {
            return Ok(false);
        };
        match write(fd, &1u64.to_ne_bytes()) {
            Ok(_) | Err(Errno::EAGAIN) => Ok(true),
            Err(e) => Err(Error::sys(
                format!("write to peer {peer} vector {vector}"),
                e,
            )),
        }
    }

    /// Waits up to `timeout` for an interrupt on this peer's own `vector` (what QEMU turns
    /// into an MSI-X message) and returns its count.
    ///
    /// # Errors
    /// [`Error::NoSuchVector`] when that vector's descriptor has not arrived;
    /// [`Error::Timeout`]; the `read(2)` errno.
    pub fn wait_interrupt(&self, vector: u16, timeout: Duration) -> Result<u64> {
        let fd = self
            .peers
            .get(&self.id)
            .and_then(|v| v.get(usize::from(vector)))
            .ok_or(Error::NoSuchVector {
                vector,
                vectors: self.vectors,
            })?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if !wait_readable(fd.as_fd(), left).map_err(|e| Error::sys("poll", e))? {
                return Err(Error::Timeout("an interrupt"));
            }
            let mut buf = [0u8; 8];
            match read(fd, &mut buf) {
                Ok(8) => return Ok(u64::from_ne_bytes(buf)),
                Ok(n) => return Err(proto(format!("an eventfd read of {n} bytes"))),
                Err(Errno::EAGAIN | Errno::EINTR) => continue,
                Err(e) => return Err(Error::sys("read of an interrupt eventfd", e)),
            }
        }
    }
}
