//! The davinci PCI device outside the guest (issue 27): the host process that serves QEMU's
//! `ivshmem-doorbell` device and *is* the device. It is the ivshmem server (peer 0,
//! `davinci-ivshmem`), runs driver-core's [`DeviceCore`](davinci_driver_core::DeviceCore)
//! (the device's semantics, unchanged) over the shared region (BAR2 in the guest), and
//! speaks `davinci-hwif`'s hardware interface: an admin queue in BAR2 over which the guest
//! kernel's transport forwards its clients' control calls, stream rings and device memory
//! carved from BAR2's heap, doorbells and interrupts on two vectors.
//!
//! * `alloc`: [`PageAllocator`], the bounded page allocator of BAR2's heap.
//! * `bar2`: [`Bar2`], the device's mapping of BAR2 and the ring views over it (the one
//!   module with `unsafe`).
//! * `platform`: [`Bar2Platform`], driver-core's `Platform` over BAR2's heap.
//! * `exec`: one admin request run on the core.
//! * `device`: [`PciDevice`], the device loop.
//! * `chaos`: the chaos device (`--chaos SEED[,RATE]`): replies wrong on purpose.
//! * `cli`: the command line of `davinci-pcidev`.
//! * `guest`: the guest's side (BAR2's header, the admin queue's host ends, ring views), for
//!   the tests' in-process guest and the driver-less guest program of
//!   `scripts/pcidev-smoke.sh`.
//!
//! Everything the guest writes in BAR2 is hostile input: the admin rings and stream rings
//! through `davinci-ring`'s device ends (indices checked, each slot copied once), each admin
//! entry decoded from that copy by `davinci-hwif` (every field validated).
#![cfg(target_os = "linux")]
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod alloc;
pub mod bar2;
pub mod chaos;
pub mod cli;
pub mod device;
pub mod exec;
pub mod guest;
pub mod platform;

pub use alloc::PageAllocator;
pub use bar2::Bar2;
pub use device::{DeviceConfig, DeviceError, PciDevice, Stats};
pub use platform::{Bar2Platform, StreamPages};
