// SPDX-License-Identifier: GPL-2.0

//! One `/dev/davinciN`: the driver-core device in static storage, the state that must not move
//! ([`DevState`]: its mutex, its wait queues, its misc device), the locked device, and one open
//! file ([`Open`]). Registration (`registration`), the file operations (`fops`, `ioctl`) and
//! the worker thread (`worker`) build on these.
//!
//! Everything the ABI means is driver-core's: the module only moves bytes between user space
//! and `DeviceCore::ioctl`, maps the buffers `DeviceCore::mmap_target` names, and sleeps and
//! wakes.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::ffi::c_int;

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::lock::mutex::MutexBackend;
use kernel::sync::lock::Guard;
use kernel::sync::{CondVar, Mutex};
use kernel::time::msecs_to_jiffies;

use crate::davinci_driver_core::{Config, DeviceCore, Quota};
use crate::davinci_uapi::{Errno, Features};
use crate::platform::KernelPlatform;
use crate::wake::Wakeups;

/// Devices the module can host (`/dev/davinci0` .. `/dev/davinci{DEVICES-1}`).
pub(crate) const DEVICES: usize = 2;
/// Device memory of each device (an accounting bound: allocations are backed on demand).
const MEMORY_SIZE: u64 = 256 << 20;

const fn config(device_id: u32) -> Config {
    Config {
        device_id,
        memory_size: MEMORY_SIZE,
        client_memory_limit: 0,
        page_size: 1 << bindings::PAGE_SHIFT,
        // No doorbell a client can ring without a system call: clients wake the worker with
        // NOTIFY (docs/abi.md 5.3), and only while it sleeps (NEED_WAKEUP).
        platform_features: Features::empty(),
        quota: Quota::FAIR,
    }
}

/// A driver-core device in static storage: about 190 KB, built at compile time (its
/// constructor is `const`), never on a kernel stack.
///
/// # Invariants
///
/// The device is only reached through [`DevState::lock`], which holds the state's mutex for
/// as long as the reference lives.
struct Storage(UnsafeCell<DeviceCore<KernelPlatform>>);

// SAFETY: the device is only accessed with the mutex of its `DevState` held (type invariant),
// so sharing the static between threads is sound.
unsafe impl Sync for Storage {}

static STORAGE: [Storage; DEVICES] = [
    Storage(UnsafeCell::new(DeviceCore::new(
        config(0),
        KernelPlatform::new(),
    ))),
    Storage(UnsafeCell::new(DeviceCore::new(
        config(1),
        KernelPlatform::new(),
    ))),
];

/// The registered states, by device index (for `open`, which gets only the misc device).
pub(crate) static STATES: [AtomicPtr<DevState>; DEVICES] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; DEVICES];

/// A misc device that is registered while this value lives.
pub(crate) struct Misc(pub(crate) UnsafeCell<bindings::miscdevice>);

/// The part of a device that must not move: its lock, its wait queues, its misc device.
/// Registered and dropped (deregistered) in `registration`.
#[pin_data(PinnedDrop)]
pub(crate) struct DevState {
    pub(crate) index: usize,
    #[pin]
    pub(crate) lock: Mutex<()>,
    /// WAIT_EVENT sleepers and the worker's sleep.
    #[pin]
    pub(crate) wake: Wakeups,
    pub(crate) misc: Misc,
    pub(crate) name: [u8; 16],
    pub(crate) worker: AtomicPtr<bindings::task_struct>,
}

// SAFETY: every mutable field is either behind the mutex (the device), atomic, or written only
// during registration before the state is shared (`misc`, `name`).
unsafe impl Sync for DevState {}
// SAFETY: as for `Sync`; the raw pointers are owned kernel objects valid for the state's life.
unsafe impl Send for DevState {}

/// The locked device: derefs to the driver-core device; waiting releases the lock.
pub(crate) struct Locked<'a> {
    guard: Guard<'a, (), MutexBackend>,
    index: usize,
}

impl core::ops::Deref for Locked<'_> {
    type Target = DeviceCore<KernelPlatform>;
    fn deref(&self) -> &Self::Target {
        // SAFETY: the guard holds the device's mutex (Storage invariant), so no other
        // reference to the device exists while this one lives.
        unsafe { &*STORAGE[self.index].0.get() }
    }
}

impl core::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference.
        unsafe { &mut *STORAGE[self.index].0.get() }
    }
}

/// What waiting returned.
pub(crate) enum Woke {
    Notified,
    TimedOut,
    Signal,
}

impl Locked<'_> {
    /// Releases the lock and sleeps on `cv` for at most `ms`, interruptibly.
    pub(crate) fn wait(&mut self, cv: &CondVar, ms: u32) -> Woke {
        use kernel::sync::CondVarTimeoutResult as R;
        match cv.wait_interruptible_timeout(&mut self.guard, msecs_to_jiffies(ms)) {
            R::Timeout => Woke::TimedOut,
            R::Woken { .. } => Woke::Notified,
            R::Signal { .. } => Woke::Signal,
        }
    }
}

/// `e` as a file operation returns it: negative.
pub(crate) fn errno(e: Errno) -> c_int {
    -e.code()
}

impl DevState {
    /// Takes the device's mutex: the driver-core device, until the guard goes.
    pub(crate) fn lock(&self) -> Locked<'_> {
        Locked {
            guard: self.lock.lock(),
            index: self.index,
        }
    }

    /// The registered device whose misc device is `misc` (for `open`).
    pub(crate) fn of_misc(misc: *mut c_void) -> Option<&'static DevState> {
        STATES.iter().find_map(|s| {
            let p = s.load(Ordering::Acquire);
            // SAFETY: a non-null entry points at a registered, pinned state that outlives
            // every open of its device (module refcounting keeps it until unload).
            (!p.is_null() && unsafe { (*p).misc.0.get().cast::<c_void>() } == misc)
                .then(|| unsafe { &*p })
        })
    }

    /// Wakes the worker (a file was released: its streams are gone).
    pub(crate) fn worker_kick(&self) {
        let _g = self.lock();
        self.wake.kick();
    }
}

/// One open file: which device and which driver-core open.
pub(crate) struct Open {
    pub(crate) dev: &'static DevState,
    pub(crate) client: u32,
}
