//! davinci-ccl: collectives across davinci devices, shaped like NCCL and HCCL.
//!
//! One rank per device (or several on one device), in one process ([`Comm::init_all`]) or
//! one process each ([`Comm::init_rank`] with a [`UniqueId`] made by one of them and sent to
//! the others, as `ncclGetUniqueId`'s): all-reduce (sum, product, max, min), all-gather,
//! reduce-scatter, broadcast and reduce, on f32, f16, bf16 and i32, between buffers of each
//! rank's device ([`davinci_shim::DeviceMem`]: allocations, pool blocks, imports).
//!
//! ```
//! use davinci_ccl::{Comm, DataType, RedOp};
//! use davinci_shim::{Device, DeviceMem};
//! # fn main() -> davinci_shim::Result<()> {
//! let comms = Comm::init_all(2)?;
//! std::thread::scope(|s| {
//!     for mut comm in comms {
//!         s.spawn(move || -> davinci_shim::Result<()> {
//!             let dev = Device::embedded()?; // each rank its own device
//!             let mut stream = dev.create_context()?.create_stream()?;
//!             let buf = dev.alloc(4 * 1024)?;
//!             buf.write_slice(0, &vec![comm.rank() as f32 + 1.0; 1024])?;
//!             comm.all_reduce(&buf, &buf, 1024, DataType::F32, RedOp::Sum, &mut stream)?;
//!             assert_eq!(buf.read_vec::<f32>(0, 1)?, [3.0]); // 1 + 2
//!             Ok(())
//!         });
//!     }
//! });
//! # Ok(()) }
//! ```
//!
//! Send and receive, alone or in groups ([`Comm::group`]), complete the set. Data moves
//! through the host (each device's memory has a host view): directly between the ranks'
//! buffers when every rank is in one process, through a shared-memory segment per
//! communicator otherwise, which is why any two devices of one node work together,
//! whichever hosts them. [`Comm`]'s calls are blocking: each waits for the work queued on
//! `stream`, runs, and returns with the result in place; [`Comm::into_stream_ordered`]
//! makes them stream-ordered instead ([`StreamComm`]: enqueue and return).
#![forbid(unsafe_code)]

mod comm;
mod direct;
mod ordered;
mod p2p;
mod reduce;
mod segment;

use std::fmt;
use std::io::Read;

pub use comm::{Bytes, Comm, DEFAULT_TIMEOUT, ONE_SHOT_BYTES, SLOT_BYTES};
pub use ordered::{StreamComm, MAX_QUEUED};
pub use p2p::{Group, MAX_GROUP_OPS};
pub use reduce::{reduce_into, DataType, RedOp};
pub use segment::MAX_RANKS;

use davinci_shim::{Errno, Error, Result};

/// What names a communicator to the ranks joining it (`ncclUniqueId`): made once, by one
/// rank (or the launcher), sent to the others by any channel (32 hex digits as text:
/// `Display` / `FromStr`). The segment it names is the ranks' user's alone (mode 0600; a
/// file of another user under that name is refused with `EPERM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId([u8; 16]);

impl UniqueId {
    /// A new id, from the system's random source.
    ///
    /// # Errors
    /// `EIO` if `/dev/urandom` cannot be read.
    pub fn new() -> Result<UniqueId> {
        let mut b = [0u8; 16];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut b))
            .map_err(|e| Error::new(Errno::EIO, "ccl unique id", format!("/dev/urandom: {e}")))?;
        Ok(UniqueId(b))
    }

    /// Its 16 bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0
    }

    /// From [`to_bytes`](Self::to_bytes).
    pub fn from_bytes(b: [u8; 16]) -> UniqueId {
        UniqueId(b)
    }
}

impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for UniqueId {
    type Err = Error;

    fn from_str(s: &str) -> Result<UniqueId> {
        let bad = || {
            Error::new(
                Errno::EINVAL,
                "ccl unique id",
                format!("{s:?} is not a unique id (32 hex digits)"),
            )
        };
        if s.len() != 32 || !s.is_ascii() {
            return Err(bad());
        }
        let mut b = [0u8; 16];
        for (i, out) in b.iter_mut().enumerate() {
            *out = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(UniqueId(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unique_id_round_trips_as_text_and_bad_text_is_refused() {
        let id = UniqueId::new().unwrap();
        assert_eq!(id.to_string().parse::<UniqueId>().unwrap(), id);
        assert_ne!(UniqueId::new().unwrap(), id);
        for bad in ["", "xyz", &"0".repeat(31), &"g".repeat(32), &"é".repeat(16)] {
            assert!(
                bad.parse::<UniqueId>().unwrap_err().is(Errno::EINVAL),
                "{bad}"
            );
        }
    }
}
