//! The device these tests run: driver-core's own checking heap platform (`test_util`), with
//! room for the larger allocations the tests make, and open parameters by pid and uid.
#![allow(dead_code)]

use davinci_driver_core::{DeviceCore, OpenParams, Role, CONTAINER_LEN};

pub use davinci_driver_core::test_util::HeapPlatform;

/// Device memory of the test device.
pub const MEM: u64 = 16 << 20;

/// A fresh device: [`MEM`] bytes, 8 MiB per client.
pub fn device() -> DeviceCore<HeapPlatform> {
    davinci_driver_core::test_util::device_with(MEM, 8 << 20)
}

/// Open parameters for `pid` running as `uid` (admin if 0), in container `ctr-<pid>`.
pub fn params(pid: u32, uid: u32, role: Role) -> OpenParams {
    let mut container = [0u8; CONTAINER_LEN];
    let name = format!("ctr-{pid}");
    container[..name.len()].copy_from_slice(name.as_bytes());
    OpenParams {
        role,
        pid,
        uid,
        admin: uid == 0,
        container,
        comm: davinci_uapi::ClientUsage::comm_field(&format!("proc-{pid}")),
    }
}
