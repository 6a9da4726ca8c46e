// SPDX-License-Identifier: GPL-2.0

//! The `inject` parameter (`helpers.c`): driver-core's fault injection reached on the kernel as
//! `davinci-mockd --inject` reaches it on the mock, so a runtime's error handling (and the
//! fault tests) run against the module too. Root writes
//! `/sys/module/davinci/parameters/inject`; no client can reach it.

use core::sync::atomic::Ordering;
use kernel::ffi::c_int;

use kernel::prelude::*;

use crate::davinci_driver_core::{InjectRule, InjectTarget};
use crate::davinci_uapi::Errno;
use crate::device::{errno, READY, STATES};

/// What the parameter's text asks for.
enum Fault {
    /// Arm (or, `None`, disarm) every stream of every device, and every new one; a rule with
    /// selectors arms only the new streams it selects.
    Arm(Option<InjectRule>),
    /// Reset every device.
    Reset,
}

fn parse(text: &str) -> Option<Fault> {
    match text.trim() {
        "" | "none" => Some(Fault::Arm(None)),
        "reset" => Some(Fault::Reset),
        t => match InjectRule::parse(t) {
            Ok(f) => Some(Fault::Arm(Some(f))),
            Err(why) => {
                pr_err!(
                    "inject '{}': {}; expected error-at=N[:ERRNO], hang-at=N or stop-at=N \
                     (then optionally @pid=N,uid=N,comm=NAME,streams=N), none or reset\n",
                    t,
                    why
                );
                None
            }
        },
    }
}

/// Applies `fault` to every registered device.
fn apply(fault: &Fault) {
    for s in STATES.iter() {
        let p = s.load(Ordering::Acquire);
        // SAFETY: a non-null entry points at a pinned state that lives until module unload,
        // which cannot run while a parameter is written (sysfs holds the module) or during
        // init.
        let Some(st) = (unsafe { p.as_ref() }) else {
            continue;
        };
        let mut dev = st.lock();
        match fault {
            Fault::Arm(Some(rule)) if rule.target != InjectTarget::default() => {
                dev.inject_rule(Some(*rule));
            }
            Fault::Arm(f) => {
                let _ = dev.inject(None, f.map(|r| r.fault));
            }
            Fault::Reset => {
                let stopped = dev.reset();
                pr_info!("davinci{}: reset ({} streams stopped)\n", st.index, stopped);
            }
        }
        st.wake.kick();
    }
}

/// Module init: arms the fault given at load, if any.
pub(crate) fn arm_from_load() {
    let t = crate::sys::inject_text();
    let n = t.iter().position(|&b| b == 0).unwrap_or(t.len());
    if let Some(fault @ Fault::Arm(Some(_))) = core::str::from_utf8(&t[..n]).ok().and_then(parse) {
        apply(&fault);
    }
}

/// The parameter's `set` (from `helpers.c`): 0, or -EINVAL for a text that is no fault.
#[no_mangle]
unsafe extern "C" fn davinci_inject(text: *const u8, len: usize) -> c_int {
    // SAFETY: `text` points at `len` readable bytes (the parameter's value, valid for the
    // call).
    let bytes = unsafe { core::slice::from_raw_parts(text, len) };
    let Some(fault) = core::str::from_utf8(bytes).ok().and_then(parse) else {
        return errno(Errno::EINVAL);
    };
    // At load the devices do not exist yet: init arms what was given (`arm_from_load`).
    if READY.load(Ordering::Acquire) {
        apply(&fault);
    }
    0
}
