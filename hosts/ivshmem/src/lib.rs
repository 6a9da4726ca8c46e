//! The host side of QEMU's ivshmem server protocol: a process that serves QEMU's
//! `ivshmem-doorbell` PCI device and is itself a peer of it. To the guest the result is a
//! PCI device (vendor 0x1af4, device 0x1110) whose registers, interrupts and memory are
//! this process's:
//!
//! * **BAR0**, 256 bytes of registers: Interrupt Mask (offset 0) and Status (4), unused with
//!   MSI-X; IVPosition (8, read-only: the guest's own peer id); **Doorbell** (12,
//!   write-only: `peer << 16 | vector` signals that peer's eventfd for that vector).
//! * **BAR1**, the MSI-X table and PBA, one entry per vector (`vectors=` on the device).
//! * **BAR2**, the shared memory: a memfd of this process ([`Server::shared`]).
//!
//! # The protocol (QEMU `docs/specs/ivshmem-spec.rst`)
//!
//! The server listens on a Unix stream socket; QEMU connects to it
//! (`-chardev socket,path=PATH,id=ID -device ivshmem-doorbell,chardev=ID,vectors=N`). The
//! connection is one-way: every message is an 8-byte little-endian signed number, with at most
//! one descriptor in `SCM_RIGHTS`. To a new peer the server sends, in order:
//!
//! 1. the protocol version, 0, without a descriptor;
//! 2. the peer's id (0..=65535), without a descriptor;
//! 3. -1 with the shared memory's descriptor;
//! 4. for every other peer, its id once per vector, each with that peer's eventfd for the
//!    vector (in vector order): writing it interrupts that peer;
//! 5. its own id once per vector, each with its own eventfd for the vector: the others'
//!    doorbells signal these, and QEMU turns them into MSI-X vector `vector` in the guest.
//!
//! The other peers receive the newcomer's id with each of its eventfds (as in step 4); when
//! a peer disconnects, the others receive its id without a descriptor. Peers never send
//! anything; the server creates every eventfd.
//!
//! # This crate's server
//!
//! [`Server`] owns the socket, the shared memory (a memfd of a power-of-two size, sealed
//! against shrinking and growing: QEMU maps it as a BAR, and a BAR is a power of two) and
//! is **peer 0**: it creates its own eventfds, one per vector, and never sends itself
//! messages. Each connecting QEMU gets the lowest free id from 1, at most [`MAX_PEERS`] at
//! once, or fewer ([`Server::limit_peers`]: a device that serves one guest sets 1); a client
//! past the limit is closed before any message, so it never receives the shared memory.
//! Then:
//!
//! * a guest's doorbell `0 << 16 | v` arrives as a count on [`Server::doorbells`]`()[v]`
//!   (through [`Server::wait`], which also sees peers leave and clients connect);
//! * [`Server::interrupt`]`(peer, v)` raises MSI-X vector `v` in that peer's guest (QEMU
//!   drops it while the guest has MSI-X disabled: the device has no INTx in this mode);
//! * a peer whose connection closes, or that sends anything, is removed and the others are
//!   told.
//!
//! Nothing a peer does makes the server panic or block: sends never block (a peer whose
//! buffer is full is removed), reads are bounded, every error says what failed and the
//! errno. [`PeerClient`] is the peer side of the protocol (what QEMU does), which the tests
//! use to check the server message by message.
//!
//! Linux only (memfd, eventfd, `SCM_RIGHTS`). The example `ivshmem-echo` is a device for a
//! smoke test with real QEMU (`scripts/ivshmem-smoke.sh`).
#![cfg(target_os = "linux")]
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod error;
mod memory;
mod peer;
mod server;
mod sockio;
pub mod sysfs;

use std::fmt;

pub use error::{Error, Result};
pub use memory::{ShmSpec, MAX_SHM_SIZE, MIN_SHM_SIZE};
pub use nix::sys::eventfd::EventFd;
pub use peer::{Notice, PeerClient, MAX_KNOWN_PEERS};
pub use server::{Activity, Gone, Server};

/// The protocol version this crate speaks (QEMU 2.5 and later).
pub const PROTOCOL_VERSION: i64 = 0;
/// The server's own peer id: the device.
pub const SERVER_ID: PeerId = PeerId(0);
/// The most peers (QEMU processes) connected at once; one more is refused.
pub const MAX_PEERS: usize = 8;
/// The most vectors per peer served (QEMU allows up to 2048 MSI-X vectors; the device needs
/// a handful).
pub const MAX_VECTORS: u16 = 64;

/// A peer's id: the high 16 bits of a Doorbell write, what IVPosition reads in its guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerId(pub u16);

impl PeerId {
    /// The id as a protocol message.
    pub(crate) fn wire(self) -> i64 {
        i64::from(self.0)
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The value a guest writes to the Doorbell register (BAR0 offset 12) to signal `peer`'s
/// `vector`.
pub fn doorbell_value(peer: PeerId, vector: u16) -> u32 {
    (u32::from(peer.0) << 16) | u32::from(vector)
}
