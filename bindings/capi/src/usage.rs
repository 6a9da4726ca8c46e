//! `davinci_device_get_usage`: what this open's tenant (its container, else its user: the
//! quotas of a shared device bind a tenant) holds against each of its limits (the shim's
//! `Device::usage`, GET_USAGE, ABI 1.5), in `<stdint.h>` types like `davinci_device_props`.
//! `davinci_device_props.memory_used` counts every client's memory; this counts the caller's
//! tenant's.
#![allow(unsafe_code)]

use std::ffi::c_int;

use davinci_shim::Usage;

use crate::device::davinci_device;
use crate::ffi::{get, guard, put};

/// This open's tenant's usage (`davinci_device_get_usage`): each limit as what the tenant
/// holds now and the most it may hold now (the tenant's share while the device is shared,
/// the whole table, or the operator's memory limit, while it is exclusive).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct davinci_device_usage {
    /// Device memory the tenant's allocations hold, in bytes (imports are their exporter's).
    pub memory_bytes: u64,
    /// Most device memory it may hold now, in bytes.
    pub memory_limit: u64,
    /// Contexts held.
    pub contexts: u32,
    /// Most contexts it may hold now.
    pub quota_contexts: u32,
    /// Streams held.
    pub streams: u32,
    /// Most streams it may hold now.
    pub quota_streams: u32,
    /// Events held.
    pub events: u32,
    /// Most events it may hold now.
    pub quota_events: u32,
    /// Allocations held, imports included.
    pub allocations: u32,
    /// Most allocations it may hold now.
    pub quota_allocations: u32,
    /// Exports held (`davinci_buffer_export`).
    pub exports: u32,
    /// Most exports it may hold now.
    pub quota_exports: u32,
    /// `DAVINCI_SHARE_*` mode these limits are for.
    pub share_mode: u32,
    /// This open's client id.
    pub client_id: u32,
}

impl From<Usage> for davinci_device_usage {
    fn from(u: Usage) -> Self {
        davinci_device_usage {
            memory_bytes: u.memory.held,
            memory_limit: u.memory.limit,
            contexts: u.contexts.held,
            quota_contexts: u.contexts.limit,
            streams: u.streams.held,
            quota_streams: u.streams.limit,
            events: u.events.held,
            quota_events: u.events.limit,
            allocations: u.allocations.held,
            quota_allocations: u.allocations.limit,
            exports: u.exports.held,
            quota_exports: u.exports.limit,
            share_mode: u.share_mode.map_or(u32::MAX, |m| m as u32),
            client_id: u.client_id,
        }
    }
}

/// What this open holds against each of its limits now, into `*out`: memory, allocations,
/// contexts, streams, events and exports, each with the most it may hold now. The numbers
/// every quota refusal (-ENOSPC, -ENOMEM) repeats in `davinci_last_error()`. -ENOTTY from a
/// driver before ABI 1.5 (no `DAVINCI_FEAT_USAGE`; `davinci_device_query_info`'s `quota_*`
/// and `client_memory_limit` give its limits there).
///
/// # Safety
/// Threads: any. `dev` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_get_usage(
    dev: *const davinci_device,
    out: *mut davinci_device_usage,
) -> c_int {
    guard("davinci_device_get_usage", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let u = d.dev.usage()?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", u.into()) }
    })
}
