// SPDX-License-Identifier: GPL-2.0

//! Bringing a device up and down. [`DevState::new`] builds everything a device needs (its
//! pinned state, the driver-core device with its id, memory, secret and quota, its worker)
//! without making it reachable; [`DevState::register_node`] then registers `/dev/davinciN`.
//! Module init builds every device before it registers any node, and sets `READY` last, so a
//! failure anywhere leaves no file open on a device that is going away. Dropping a state
//! deregisters its node (if it got one), stops its worker and frees the device.

use core::ffi::c_void;
use core::pin::Pin;
use core::sync::atomic::Ordering;

use kernel::prelude::*;
use kernel::sync::new_mutex;

use crate::davinci_driver_core::{derive_uuid, Identity, Quota};
use crate::device::{new_storage, DevState, STATES};
use crate::sys::{self, Misc, Params, Worker};
use crate::wake::{Wake, Wakeups};
use crate::worker::worker_main;

/// GET_IDENTITY's `driver_version`: the module and the ABI it speaks.
const DRIVER_VERSION: &str = "davinci-kmod (ABI 1.5)";

impl DevState {
    /// Creates device `index` with its worker running, not yet reachable from user space.
    /// `step` counts init's steps for the `fail_init` test parameter.
    pub(crate) fn new(index: usize, p: &Params, step: &mut u32) -> Result<Pin<KBox<Self>>> {
        p.step(step, "a device's storage")?;
        let core = new_storage()?;
        p.step(step, "a device's state")?;
        let mut st = KBox::pin_init(
            pin_init!(DevState {
                index,
                lock <- new_mutex!(()),
                wake <- Wakeups::new(),
                core,
                misc: None,
                worker: None,
                stopping: core::sync::atomic::AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )?;
        let raw: *const DevState = &*st;
        // SAFETY: `st.wake` is pinned inside `st`, which outlives every device call (it is
        // dropped at module unload, after the worker stopped and no file is open).
        let wake = unsafe { Wake::new(&st.wake) };
        {
            let mut dev = st.lock();
            dev.platform_mut().set_wake(wake);
            let quota = quota_of(p);
            let memory = u64::from(p.memory_mb) << 20;
            if let Err(e) = dev
                .set_identity(index as u32, memory)
                .and_then(|()| dev.set_secret(sys::random_u64()))
                .and_then(|()| dev.set_tenant_slots(p.tenant_slots))
                .and_then(|()| dev.set_quota(quota))
            {
                pr_err!(
                    "davinci{}: {} (memory_mb={} tenant_slots={} quota_contexts={} \
                     quota_streams={} quota_events={} quota_allocations={} quota_exports={})\n",
                    index,
                    e.msg,
                    p.memory_mb,
                    p.tenant_slots,
                    quota.contexts,
                    quota.streams,
                    quota.events,
                    quota.allocations,
                    quota.exports
                );
                return Err(EINVAL);
            }
            // GET_IDENTITY: no device of its own to read a serial from, so a UUID derived
            // from the device's index, the same across reloads and reboots; one worker runs
            // every stream (one engine).
            dev.set_device_identity(
                Identity::new(
                    derive_uuid(&[b"davinci-kmod", &(index as u32).to_le_bytes()]),
                    "davinci_kmod",
                    DRIVER_VERSION,
                    -1,
                    1,
                )
                .with_names("davinci_kmod", "kmod0"),
            );
        }
        // The worker. It only ever reaches the state through `raw`.
        p.step(step, "a device's worker")?;
        // SAFETY: `raw` points at the pinned state, which outlives the thread: the `Worker`
        // lives in the state and is dropped (the thread stopped) in `PinnedDrop`, before the
        // state goes.
        let worker =
            unsafe { Worker::start(worker_main, raw.cast_mut().cast::<c_void>(), index as u32) };
        let worker = match worker {
            Ok(w) => w,
            Err(e) => {
                pr_err!(
                    "davinci{}: cannot start the worker thread ({:?})\n",
                    index,
                    e
                );
                return Err(e);
            }
        };
        // SAFETY: not registered yet: nothing else reaches the state (its worker only reads
        // the lock, the wake-ups and the device).
        unsafe { Pin::get_unchecked_mut(st.as_mut()) }.worker = Some(worker);
        STATES[index].store(raw.cast_mut(), Ordering::Release);
        Ok(st)
    }

    /// Registers `/dev/davinci<index>` (mode `mode`): opens can come from now on (once the
    /// module is `READY`).
    pub(crate) fn register_node(self: Pin<&mut Self>, p: &Params, step: &mut u32) -> Result {
        p.step(step, "a device's node")?;
        let mode = p.mode;
        let misc = Misc::register(self.index as u32, mode).inspect_err(|e| {
            pr_err!(
                "davinci{}: cannot register the device node ({:?})\n",
                self.index,
                e
            );
        })?;
        // SAFETY: `misc` is not a pinned field; replacing it does not move the state.
        unsafe { Pin::get_unchecked_mut(self) }.misc = Some(misc);
        Ok(())
    }
}

#[pinned_drop]
impl PinnedDrop for DevState {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: neither `misc` nor `worker` is a pinned field; taking them does not move
        // the state.
        let this = unsafe { Pin::get_unchecked_mut(self) };
        // No new opens (every file is closed: the module is going, or init failed before
        // READY, when no open could succeed).
        drop(this.misc.take());
        // The worker must not go back to sleep after `kthread_stop`'s wake-up: mark it
        // stopping and kick it under the lock it checks both under.
        {
            let _g = this.lock.lock();
            this.stopping.store(true, Ordering::Relaxed);
            this.wake.kick();
        }
        drop(this.worker.take());
        STATES[this.index].store(core::ptr::null_mut(), Ordering::Release);
    }
}

/// The quota the module parameters ask for: each 0 (not given) is the default's.
fn quota_of(p: &Params) -> Quota {
    let or = |v: u32, d: u32| if v == 0 { d } else { v };
    let d = Quota::for_slots(p.tenant_slots);
    Quota {
        contexts: or(p.quota[0], d.contexts),
        streams: or(p.quota[1], d.streams),
        events: or(p.quota[2], d.events),
        allocations: or(p.quota[3], d.allocations),
        exports: or(p.quota[4], d.exports),
    }
}
