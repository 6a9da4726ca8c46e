//! Memory shared with another party: the device (the mock device's engine, or hardware
//! behind the kernel driver), a client of the device, another process.
//!
//! [`SharedMapping`] is the one audited type for such memory in user space, used by the
//! runtime library (`davinci-shim`: the host's views of rings, doorbells and device memory)
//! and by the mock device (`davinci-mock-device`: its allocations' and streams' memory). Its rules:
//!
//! * No `&`/`&mut` to mapped bytes is ever formed: the other party writes them whenever it
//!   likes. Bytes move with relaxed atomic loads and stores ([`copy_from_shared`],
//!   [`copy_to_shared`]), so a racing writer produces wrong values, never undefined
//!   behaviour on this side; whatever orders the data is the ring protocol's business.
//!   Reads and writes of 4 KiB or more, and copies between mappings
//!   ([`SharedMapping::copy_to`]), use the string instructions instead (memory speed, as
//!   opaque to the compiler): a racing writer again makes bytes wrong, nothing worse.
//! * Every access is bounds-checked against the mapping here, whatever the caller checked.
//! * A 4-byte word of the mapping can be had as an `&AtomicU32` ([`SharedMapping::word`]),
//!   which is also what the futex calls ([`futex_wait`], [`futex_wake`]) take: a doorbell.
//!
//! * Bulk moves of memory a peer may shrink under the mapping (a memfd it may `ftruncate`)
//!   go through the `direct_*` methods ([`Direct`]): string instructions at memory speed,
//!   each access's ranges announced to a process-wide `SIGBUS` handler that turns a fault in
//!   them into [`Direct::Shrunk`] (`guard.rs`), never a signal that kills the process.
//!
//! The ring views over a mapping (`davinci_ring::RingRegion`) are built by the two hosts
//! themselves, which own the lifetimes that make them sound.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod bulk;
mod copy;
mod direct;
mod guard;
mod mapping;

pub use copy::{copy_from_shared, copy_to_shared, fill_shared};
pub use direct::Direct;
pub use mapping::{
    futex_wait, futex_waitv, futex_wake, involuntary_switches, same_file, FutexWaiter, OutOfBounds,
    SharedMapping, FUTEX_WAITV_MAX,
};
