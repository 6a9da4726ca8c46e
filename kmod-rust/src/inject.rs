// SPDX-License-Identifier: GPL-2.0

//! The `inject` parameter (`helpers.c`): driver-core's fault injection reached on the kernel as
//! `davinci-mockd --inject` reaches it on the mock, so a runtime's error handling (and the
//! fault tests) run against the module too. Root writes
//! `/sys/module/davinci/parameters/inject`; no client can reach it.

use core::sync::atomic::Ordering;
use kernel::ffi::c_int;

use kernel::prelude::*;

use crate::davinci_driver_core::HostFault;
use crate::davinci_uapi::Errno;
use crate::device::{errno, READY, STATES};

fn parse(text: &str) -> Option<HostFault> {
    HostFault::parse(text)
        .inspect_err(|why| {
            // Escaped ({:?}) and rate-limited: the text is whatever was written.
            if crate::sys::log_ratelimit() {
                pr_err!(
                    "inject {:?}: {}; expected error-at=N[:ERRNO], hang-at=N or stop-at=N \
                     (then optionally @pid=N,uid=N,comm=NAME,streams=N), none or reset\n",
                    text.trim(),
                    why
                )
            }
        })
        .ok()
}

/// Applies `fault` to every software device (driver-core's
/// [`DeviceCore::apply_host_fault`](crate::davinci_driver_core::DeviceCore::apply_host_fault))
/// and forwards its `text` to every PCI device (admin INJECT: the device applies the same).
fn apply(text: &str, fault: &HostFault) -> Result {
    for s in STATES.iter() {
        let p = s.load(Ordering::Acquire);
        // SAFETY: a non-null entry points at a pinned state that lives until module unload.
        // This runs only while READY is set, under the parameter lock (the caller's, sysfs'),
        // and module exit clears READY under that lock before it frees any device: so it
        // runs entirely before exit frees anything, or not at all.
        let Some(st) = (unsafe { p.as_ref() }) else {
            continue;
        };
        let mut dev = st.lock();
        let stopped = dev.apply_host_fault(fault);
        if matches!(fault, HostFault::Reset) {
            pr_info!("davinci{}: reset ({} streams stopped)\n", st.index, stopped);
        }
        st.wake.kick();
    }
    crate::pci::inject_all(text)
}

/// Module init: arms the fault given at load, if any, on the software devices (a PCI
/// device gets it when it is bound: `PciShared::ready`).
pub(crate) fn arm_from_load() {
    let t = crate::sys::inject_text();
    let n = t.iter().position(|&b| b == 0).unwrap_or(t.len());
    if let Ok(text) = core::str::from_utf8(&t[..n]) {
        if let Some(fault @ HostFault::Arm(Some(_))) = parse(text) {
            for s in STATES.iter() {
                let p = s.load(Ordering::Acquire);
                // SAFETY: as in `apply` (init registers the states before this).
                if let Some(st) = unsafe { p.as_ref() } {
                    st.lock().apply_host_fault(&fault);
                }
            }
        }
    }
}

/// The parameter's `set` (from `helpers.c`): 0, or -EINVAL for a text that is no fault.
#[no_mangle]
unsafe extern "C" fn davinci_inject(text: *const u8, len: usize) -> c_int {
    // SAFETY: `text` points at `len` readable bytes (the parameter's value, valid for the
    // call).
    let bytes = unsafe { core::slice::from_raw_parts(text, len) };
    let Ok(text) = core::str::from_utf8(bytes) else {
        return errno(Errno::EINVAL);
    };
    let Some(fault) = parse(text) else {
        return errno(Errno::EINVAL);
    };
    // At load the devices do not exist yet: init arms what was given (`arm_from_load`). At
    // unload READY is cleared (under the parameter lock this runs under) before any device
    // goes.
    if READY.load(Ordering::Acquire) {
        if let Err(e) = apply(text, &fault) {
            return e.to_errno();
        }
    }
    0
}
