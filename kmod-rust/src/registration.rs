// SPDX-License-Identifier: GPL-2.0

//! Bringing a device up and down: [`DevState::register`] builds its pinned state, starts its
//! worker thread and registers its misc device (`/dev/davinciN`); dropping the state
//! deregisters the misc device and stops the worker.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::pin::Pin;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::ffi::c_int;

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::new_mutex;

use crate::davinci_driver_core::Quota;
use crate::device::{DevState, Misc, STATES};
use crate::fops::fops;
use crate::wake::{Wake, Wakeups};
use crate::worker::worker_main;

impl DevState {
    /// Creates, wires and registers device `index` (`/dev/davinci<index>`) and its worker.
    pub(crate) fn register(index: usize, module: &'static ThisModule) -> Result<Pin<KBox<Self>>> {
        let mut name = [0u8; 16];
        let label = b"davinci";
        name[..label.len()].copy_from_slice(label);
        name[label.len()] = b'0' + index as u8;
        let st = KBox::pin_init(
            pin_init!(DevState {
                index,
                lock <- new_mutex!(()),
                wake <- Wakeups::new(),
                // SAFETY: an all-zero miscdevice is the C "unset" value; it is filled in below
                // before registration.
                misc: Misc(UnsafeCell::new(unsafe { core::mem::zeroed() })),
                name,
                worker: AtomicPtr::new(core::ptr::null_mut()),
            }),
            GFP_KERNEL,
        )?;
        let raw: *const DevState = &*st;
        // SAFETY: `st.wake` is pinned inside `st`, which outlives every device call (it is
        // dropped at module unload, after the worker stopped and no file is open).
        let wake = unsafe { Wake::new(&st.wake) };
        st.lock().platform_mut().set_wake(wake);
        // What is known only now, before the first open: a random handle secret and the
        // quota parameters.
        {
            let mut dev = st.lock();
            let quota = quota_params();
            if let Err(e) = dev
                .set_secret(random_u64())
                .and_then(|()| dev.set_quota(quota))
            {
                pr_err!(
                    "davinci{}: {} (quota_contexts={} quota_streams={} quota_events={} \
                     quota_allocations={})\n",
                    index,
                    e.msg,
                    quota.contexts,
                    quota.streams,
                    quota.events,
                    quota.allocations
                );
                return Err(EINVAL);
            }
        }
        STATES[index].store(raw.cast_mut(), Ordering::Release);

        // The worker.
        // SAFETY: `worker_main` matches the kthread signature; `raw` outlives the thread
        // (it is stopped in `PinnedDrop` before the state goes); the format string is a
        // NUL-terminated literal and takes one `%d`.
        let task = unsafe {
            bindings::kthread_create_on_node(
                Some(worker_main),
                raw.cast_mut().cast::<c_void>(),
                bindings::NUMA_NO_NODE,
                c"davinci%d".as_ptr().cast(),
                index as c_int,
            )
        };
        if task.is_null() || (task as isize) < 0 && (task as isize) > -4096 {
            return Err(ENOMEM);
        }
        st.worker.store(task, Ordering::Release);
        // SAFETY: `task` is the thread just created, not yet running.
        unsafe { bindings::wake_up_process(task) };

        // The misc device.
        // SAFETY: registration has not happened yet, so nothing else reads `misc`.
        let misc = unsafe { &mut *st.misc.0.get() };
        misc.minor = bindings::MISC_DYNAMIC_MINOR as c_int;
        misc.name = st.name.as_ptr().cast();
        misc.fops = fops(module);
        misc.mode = 0o666;
        // SAFETY: `misc` is fully initialised, pinned inside `st` and deregistered in
        // `PinnedDrop` before it goes.
        let r = unsafe { bindings::misc_register(st.misc.0.get()) };
        if r != 0 {
            return Err(Error::from_errno(r));
        }
        pr_info!("/dev/davinci{} ready\n", index);
        Ok(st)
    }
}

#[pinned_drop]
impl PinnedDrop for DevState {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: registered in `register` (a state is only dropped after it succeeded or
        // before `misc_register` ran, when `this_device` is still null).
        unsafe {
            if !(*self.misc.0.get()).this_device.is_null() {
                bindings::misc_deregister(self.misc.0.get());
            }
        }
        let task = self.worker.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if !task.is_null() {
            // SAFETY: `task` is the worker created in `register`; `kthread_stop` wakes it,
            // waits for it to return and drops the creation reference.
            unsafe { bindings::kthread_stop(task) };
        }
        STATES[self.index].store(core::ptr::null_mut(), Ordering::Release);
    }
}

extern "C" {
    /// `helpers.c`: the module parameters quota_contexts, quota_streams, quota_events and
    /// quota_allocations, in that order (0: the default).
    fn davinci_quota_params(out: *mut u32);
    /// `helpers.c`: `get_random_u64()`.
    fn davinci_random_u64() -> u64;
}

/// The quota the module parameters ask for: each 0 (not given) is the default's.
fn quota_params() -> Quota {
    let mut p = [0u32; 4];
    // SAFETY: `p` is a live array of the four `unsigned int`s the helper writes.
    unsafe { davinci_quota_params(p.as_mut_ptr()) };
    let or = |v: u32, d: u32| if v == 0 { d } else { v };
    let d = Quota::FAIR;
    Quota {
        contexts: or(p[0], d.contexts),
        streams: or(p[1], d.streams),
        events: or(p[2], d.events),
        allocations: or(p[3], d.allocations),
    }
}

/// A random number from the kernel's generator.
fn random_u64() -> u64 {
    // SAFETY: no arguments; get_random_u64 may be called in process context at any time.
    unsafe { davinci_random_u64() }
}
