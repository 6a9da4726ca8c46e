//! [`Device::usage`]: what this open's *tenant* (its container, else its user: the quotas of
//! a shared device bind a tenant, docs/security.md) holds against each of its limits
//! (GET_USAGE, ABI 1.5): device memory, allocations, contexts, streams, events and exports,
//! each held now and the most it may hold now, and what this open holds of it.
//! [`Device::memory_used`] counts every client's memory; this counts the caller's tenant's,
//! against the limit its next allocation meets.
#![forbid(unsafe_code)]

use davinci_uapi::{
    Errno, Features, ShareMode, Usage as RawUsage, DRIVER_CMD_GET_USAGE, TENANT_CONTAINER,
    TENANT_SLOTTED, TENANT_USER,
};

use crate::device::Device;
use crate::error::{Error, Result};

/// One limit: what the open's tenant holds now and the most it may hold now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held<T> {
    /// Held now.
    pub held: T,
    /// The most it may hold now: the tenant's share while the device is shared (less for a
    /// tenant without a slot: what the others' shares leave), the whole table (or the
    /// operator's memory limit) while it is exclusive.
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

/// This open's tenant's usage against each of its limits, and this open's own part of it
/// ([`Device::usage`]). A snapshot: the share mode (and so the limits) may change, and the
/// tenant's other opens and threads create and destroy.
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
    /// What this open holds of the tenant's holdings above.
    pub own: Own,
    /// What the tenant is (`None`: a value this ABI does not know).
    pub tenant: Option<TenantKind>,
    /// Whether the tenant holds one of the device's tenant slots, so its share is kept for it
    /// (a tenant without one gets only what the others' shares leave, and the next freed
    /// slot).
    pub slotted: bool,
}

/// What one open holds (part of its tenant's [`Usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Own {
    /// Device memory in bytes.
    pub memory: u64,
    /// Allocations, imports included.
    pub allocations: u32,
    /// Contexts.
    pub contexts: u32,
    /// Streams.
    pub streams: u32,
    /// Events.
    pub events: u32,
    /// Exports.
    pub exports: u32,
}

/// Who the quotas bind (docs/security.md, "Tenants").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantKind {
    /// The client's user (outside containers).
    User,
    /// The client's container.
    Container,
}

impl TenantKind {
    /// `"user"` or `"container"`.
    pub fn name(self) -> &'static str {
        match self {
            TenantKind::User => "user",
            TenantKind::Container => "container",
        }
    }
}

impl From<RawUsage> for Usage {
    fn from(u: RawUsage) -> Usage {
        let held = |held, limit| Held { held, limit };
        let f = u.tenant_flags;
        Usage {
            memory: Held {
                held: u.tenant_memory_bytes,
                limit: u.memory_limit,
            },
            allocations: held(u.tenant_allocations, u.quota_allocations),
            contexts: held(u.tenant_contexts, u.quota_contexts),
            streams: held(u.tenant_streams, u.quota_streams),
            events: held(u.tenant_events, u.quota_events),
            exports: held(u.tenant_exports, u.quota_exports),
            share_mode: ShareMode::from_u32(u.share_mode),
            client_id: u.client_id,
            own: Own {
                memory: u.memory_bytes,
                allocations: u.allocations,
                contexts: u.contexts,
                streams: u.streams,
                events: u.events,
                exports: u.exports,
            },
            tenant: match f & (TENANT_USER | TENANT_CONTAINER) {
                TENANT_USER => Some(TenantKind::User),
                TENANT_CONTAINER => Some(TenantKind::Container),
                _ => None,
            },
            slotted: f & TENANT_SLOTTED != 0,
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

    /// GET_IDENTITY (ABI 1.4): the device's UUID (the same across share-mode changes, daemon
    /// restarts, module reloads and reboots: how two processes tell they opened the same
    /// device), model, driver and NUMA node. As [`Control::identity`](crate::Control::identity)
    /// from a client open.
    ///
    /// # Errors
    /// `ENOTTY` from a driver before ABI 1.4 (no `Features::IDENTITY`); `ENODEV` if the
    /// device went away.
    pub fn identity(&self) -> Result<davinci_uapi::DeviceIdentity> {
        let mut id = davinci_uapi::DeviceIdentity::default();
        self.call(
            "GET_IDENTITY",
            davinci_uapi::DRIVER_CMD_GET_IDENTITY,
            &mut id,
        )?;
        Ok(id)
    }

    /// GET_SENSORS (ABI 1.5): the device's temperature, power, voltage and throttle reasons
    /// now. As [`Control::sensors`](crate::Control::sensors) from a client open.
    ///
    /// # Errors
    /// `ENOTTY` from a driver without `Features::SENSORS`; `ENODEV` if the device went
    /// away.
    pub fn sensors(&self) -> Result<davinci_uapi::DeviceSensors> {
        let mut s = davinci_uapi::DeviceSensors::default();
        self.call("GET_SENSORS", davinci_uapi::DRIVER_CMD_GET_SENSORS, &mut s)?;
        Ok(s)
    }
}
