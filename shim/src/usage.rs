//! [`Device::usage`]: what this open holds against each of its limits (GET_USAGE, ABI 1.5):
//! device memory, allocations, contexts, streams, events and exports, each held now and the
//! most it may hold now. [`Device::memory_used`] counts every client's memory; this counts the
//! caller's own, against the limit its next allocation meets.
#![forbid(unsafe_code)]

use davinci_uapi::{Errno, Features, ShareMode, Usage as RawUsage, DRIVER_CMD_GET_USAGE};

use crate::device::Device;
use crate::error::{Error, Result};

/// One limit: what the open holds now and the most it may hold now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held<T> {
    /// Held now.
    pub held: T,
    /// The most it may hold now: the per-client quota while the device is shared, the whole
    /// table (or the operator's memory limit) while it is exclusive.
    pub limit: T,
}

impl<T: Copy + core::ops::Sub<Output = T> + PartialOrd + Default> Held<T> {
    /// How many more it may take now (0 at or past the limit: a device that went shared
    /// while it held more keeps what it has, but creates no more).
    pub fn room(&self) -> T {
        if self.held < self.limit {
            self.limit - self.held
        } else {
            T::default()
        }
    }
}

/// This open's usage against each of its limits ([`Device::usage`]). A snapshot: the share
/// mode (and so the limits) may change, and the open's other threads create and destroy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Device memory in bytes (imports are their exporter's, not counted here).
    pub memory: Held<u64>,
    /// Allocations, imports included.
    pub allocations: Held<u32>,
    /// Contexts.
    pub contexts: Held<u32>,
    /// Streams.
    pub streams: Held<u32>,
    /// Events.
    pub events: Held<u32>,
    /// Exports (`DeviceBuffer::export`).
    pub exports: Held<u32>,
    /// The sharing mode these limits are for (`None`: a mode this ABI does not know).
    pub share_mode: Option<ShareMode>,
    /// This open's client id.
    pub client_id: u32,
}

impl From<RawUsage> for Usage {
    fn from(u: RawUsage) -> Usage {
        let held = |held, limit| Held { held, limit };
        Usage {
            memory: Held {
                held: u.memory_bytes,
                limit: u.memory_limit,
            },
            allocations: held(u.allocations, u.quota_allocations),
            contexts: held(u.contexts, u.quota_contexts),
            streams: held(u.streams, u.quota_streams),
            events: held(u.events, u.quota_events),
            exports: held(u.exports, u.quota_exports),
            share_mode: ShareMode::from_u32(u.share_mode),
            client_id: u.client_id,
        }
    }
}

impl Device {
    /// What this open holds against each of its limits now (GET_USAGE): device memory,
    /// allocations, contexts, streams, events and exports, each with the most it may hold
    /// now. The call a caching allocator makes before it grows, and the numbers every
    /// quota refusal (`ENOSPC`, `ENOMEM`) repeats in its text.
    ///
    /// # Errors
    /// `ENOTTY` from a driver before ABI 1.5 (no `Features::USAGE`), without a call: GET_INFO's
    /// `quota_*` and `client_memory_limit` ([`Device::query_info`]) give its limits there;
    /// `ENODEV` if the device went away.
    pub fn usage(&self) -> Result<Usage> {
        const OP: &str = "Device::usage";
        let info = self.info();
        if !info.features.contains(Features::USAGE) {
            return Err(Error::new(
                Errno::ENOTTY,
                OP,
                format!(
                    "the driver speaks ABI {}.{}, without GET_USAGE (ABI 1.5, \
                     DAVINCI_FEAT_USAGE): its limits are GET_INFO's quota_* and \
                     client_memory_limit",
                    info.abi_major, info.abi_minor
                ),
            ));
        }
        let mut raw = RawUsage::default();
        self.call(OP, DRIVER_CMD_GET_USAGE, &mut raw)?;
        Ok(raw.into())
    }
}
