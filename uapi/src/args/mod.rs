//! ioctl commands and their argument structs.
//!
//! Every struct is `#[repr(C)]` with only fixed-width integers (user pointers as `u64`), no
//! implicit padding (checked at compile time), and reserved/pad fields that must be zero (the
//! driver rejects non-zero ones with `EINVAL`). "to driver" fields are read by the driver,
//! "from driver" fields are written by it; the driver ignores the incoming value of a
//! "from driver" field.
//!
//! By role: [`commands`] (the request numbers and the command table), [`resources`] (what only
//! a client calls: contexts, memory, streams, events, submit, wait), [`device_info`] (GET_INFO
//! and sharing) [`usage`] (LIST_CLIENTS, GET_LAST_ERROR, GET_COUNTERS) [`sensors`] (GET_SENSORS) and [`observe`] (TRACE, READ_EVENTS). Everything is
//! re-exported here and at the crate root.

use crate::layout::ConstGroup;

pub mod commands;
pub mod device_info;
pub mod observe;
pub mod resources;
pub mod sensors;
pub mod usage;

pub use commands::*;
pub use device_info::*;
pub use observe::*;
pub use resources::*;
pub use sensors::*;
pub use usage::*;

/// Wire constants of this module, for the C header.
pub const CONSTS: &[ConstGroup] = &[
    device_info::SHARE_MODES,
    resources::WAIT_KINDS,
    resources::EXPORT_UIDS,
    resources::EXPORT_FLAGS,
    resources::IMPORT_FLAGS,
    usage::HEALTHS,
    usage::TENANTS,
    sensors::THROTTLES,
    observe::TRACE_OPS,
    observe::TRACE_SCOPES,
    observe::TRACE_KINDS,
    observe::OBSERVE_LIMITS,
    observe::DEVICE_EVENTS,
    observe::QUOTA_KINDS,
];
