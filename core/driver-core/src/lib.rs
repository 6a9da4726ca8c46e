//! Device-side semantics of a davinci device, shared by the kernel module and the mock device:
//! clients (one per open file), contexts, streams with their rings, events, the device memory
//! allocator, ioctl dispatch with full validation, device sharing, and the software engine
//! that executes task descriptors.
//!
//! `no_std`, no heap allocation (fixed-capacity tables; exceeding one is `ENOSPC`), nothing
//! beyond `core`, `davinci-uapi` (no default features) and `davinci-ring`. What differs between
//! kernel and user space sits behind [`Platform`]. No `unsafe` here: raw shared memory is
//! reached only through `davinci-ring` and the platform.
//!
//! Features (the kernel build uses none): `std` adds `StdLock`, the [`Lock`] over
//! `std::sync::Mutex` that user-space hosts use; `test-util` (implies `std`) adds the checking
//! heap platform of `test_util` for tests and fuzz targets; `kernels` (implies `std`) runs the
//! built-in kernels' arithmetic (`davinci-kernels`, floating point) for user-space hosts,
//! which then report `DAVINCI_FEAT_KERNELS`.
//!
//! Locking: the control path (every ioctl, open, close) takes `&mut DeviceCore`, so the host
//! holds the device exclusively for it. The data path ([`DeviceCore::run_stream`] and the sleep
//! handshake) takes `&DeviceCore` plus a per-stream [`Lock`] (and a per-event one for
//! EVENT_RECORD/WAIT), so a host may run different streams on several threads at once,
//! excluded only by the control path. Blocking (WAIT_EVENT, a worker waiting for its
//! doorbell or an event) happens outside, per the [`Reply`] and [`Run`] values returned.
#![no_std]
// No `unsafe` in any build the kernel or the mock device uses; the test support module
// (feature `test-util`) builds ring views over heap memory and is its only exception.
#![cfg_attr(not(feature = "test-util"), forbid(unsafe_code))]
#![cfg_attr(feature = "test-util", deny(unsafe_code))]
#![deny(missing_docs)]

pub mod container;
pub mod device;
pub mod dispatch;
pub mod doorbell;
pub mod engine;
pub mod error;
pub mod identity;
pub mod inject;
pub mod limits;
pub mod memory;
pub mod message;
pub mod observe;
pub mod platform;
pub mod sensors;
pub mod softfloat;
#[cfg(feature = "std")]
pub mod std_lock;
pub mod table;
pub mod tenant;
#[cfg(feature = "test-util")]
pub mod test_util;
pub mod waits;

pub use device::clients::OpenError;
pub use device::entries::{OpenParams, Role, StreamState};
pub use device::streams::MmapTarget;
pub use device::tenants::TenantShare;
pub use device::{Config, DeviceCore};
pub use dispatch::{NoUserMem, Reply, UserMem, WaitSpec, WaitState};
pub use doorbell::DoorbellRegister;
pub use engine::Run;
pub use error::{Error, QuotaHit, QuotaKind, Result};
pub use identity::{derive_uuid, Identity};
pub use inject::{HostFault, Inject, InjectRule, InjectTarget, ParseInjectError, ParseRuleError};
pub use limits::{
    Quota, CONTAINER_LEN, DEFAULT_TENANT_SLOTS, MAX_ALLOCATIONS, MAX_CLIENTS, MAX_CLIENT_EXPORTS,
    MAX_CLIENT_OPENS, MAX_CMD_ENTRIES, MAX_CONTEXTS, MAX_CONTROL_OPENS_PER_TENANT, MAX_EVENTS,
    MAX_EVENT_ENTRIES, MAX_EXPORTS, MAX_IMPORTERS, MAX_STREAMS, MAX_TENANT_SLOTS,
    MAX_USER_CONTROL_OPENS, MIN_PASS_WORK, PASS_WORK,
};
pub use memory::{dva_offset, DVA_BASE, GENERATIONS, GEN_SHIFT};
pub use message::{Message, MESSAGE_MAX};
pub use platform::{Lock, Platform, Serialized, StreamRegions};
pub use sensors::{SensorConfig, SensorModel};
#[cfg(feature = "std")]
pub use std_lock::StdLock;
pub use tenant::Tenant;
pub use waits::{BlockedWait, BlockedWaits, MAX_BLOCKED_WAITS_PER_CLIENT};
