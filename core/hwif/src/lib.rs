//! The hardware interface of the davinci PCI device: QEMU's `ivshmem-doorbell` (1af4:1110)
//! whose host process, `davinci-pcidev` (peer 0 of the ivshmem server), is the device.
//! Shared by that process and, later, the kernel module's PCI transport: both sides build
//! and parse BAR2 with these pure functions, and each treats what the other wrote as
//! hostile input (every field read once, from a copy, and validated).
//!
//! * [`regs`]: BAR0's registers and the doorbell value, the vector plan.
//! * [`layout`]: BAR2's layout (a header page, the admin submission and completion rings, a
//!   heap of 4 KiB pages the device carves for stream rings and device memory) and the
//!   header's encoding.
//! * [`admin`]: the admin queue's entries (requests: OPEN, CLOSE, IOCTL, MMAP_TARGET,
//!   WAIT_AGAIN;
//!   completions: [`reply`]), encoded into and decoded from fixed-size byte slots.
//!
//! The admin rings are `davinci-ring` rings (the one place ordering lives) whose slots are
//! [`admin::AdminSlot`]s; this crate only says where they are and what their bytes mean.
//!
//! `no_std`, no heap, no `unsafe`; nothing but `core` and `davinci-uapi` without features.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod admin;
pub mod bytes;
pub mod layout;
pub mod regs;
pub mod reply;

pub use admin::{
    AdminKind, AdminOp, AdminRequest, AdminSlot, ArgBuf, DecodeError, OpenArgs, ADMIN_DEPTH,
    ADMIN_ENTRY_SIZE, ARG_CAPACITY, INJECT_TEXT_MAX, MAX_IOCTL_ARG, MAX_REVOKES, MSG_CAPACITY,
};
pub use layout::{Bar2Header, Bar2Layout, DeviceState, HeaderError, LayoutError, PAGE_SIZE};
pub use regs::{doorbell_value, VECTORS, VECTOR_ADMIN, VECTOR_DATA};
pub use reply::{Completion, MapKind, MmapReply, ReplyKind, Revoke};
