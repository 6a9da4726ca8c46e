// SPDX-License-Identifier: GPL-2.0

//! One `/dev/davinciN`: [`DevState`] (its mutex, its wait queues, the driver-core device in
//! vmalloc'd storage, its node and worker), the locked device, and one open file ([`Open`]). Registration (`registration`), the file operations (`fops`, `ioctl`) and
//! the worker thread (`worker`) build on these.
//!
//! Everything the ABI means is driver-core's: the module only moves bytes between user space
//! and `DeviceCore::ioctl`, maps the buffers `DeviceCore::mmap_target` names, and sleeps and
//! wakes.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::mem::ManuallyDrop;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
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
use crate::sys::{Misc, Worker};
use crate::wake::Wakeups;

/// Most devices the module can host (`devices` parameter: 1 to this).
pub(crate) const MAX_DEVICES: usize = 8;

/// What every device starts as; `set_identity` gives it its id and memory size (the module
/// parameters) before its first open.
const fn config() -> Config {
    Config {
        device_id: 0,
        memory_size: 256 << 20,
        client_memory_limit: 0,
        page_size: 1 << bindings::PAGE_SHIFT,
        // No doorbell a client can ring without a system call: clients wake the worker with
        // NOTIFY (docs/abi.md 5.3), and only while it sleeps (NEED_WAKEUP).
        // Export fds are the module's (`export_fd`), whatever the device.
        platform_features: Features::EXPORT_FD,
        quota: Quota::FAIR,
    }
}

/// A driver-core device (about 190 KB: it lives in vmalloc'd memory, never on a kernel
/// stack).
///
/// # Invariants
///
/// A device's storage is only reached through [`DevState::lock`], which holds the state's
/// mutex for as long as the reference lives. [`BLANK`] is never reached at all except to be
/// copied.
pub(crate) struct Storage(UnsafeCell<DeviceCore<KernelPlatform>>);

// SAFETY: a device is only accessed with the mutex of its `DevState` held (type invariant);
// `BLANK` is only read, to be copied.
unsafe impl Sync for Storage {}

/// The blank device every device is copied from (built at compile time: its constructor is
/// `const`, so no 190 KB value is ever built on a stack).
static BLANK: Storage = Storage(UnsafeCell::new(DeviceCore::new(
    config(),
    KernelPlatform::new(),
)));

/// A fresh device in vmalloc'd storage.
pub(crate) fn new_storage() -> Result<VBox<Storage>> {
    let mut b = VBox::<Storage>::new_uninit(GFP_KERNEL | __GFP_NOWARN)?;
    // SAFETY: `BLANK` is a valid, const-built device that is never used otherwise (never
    // locked, written or dropped): a bitwise copy is a fresh, independent device. It owns
    // nothing (every table is empty, the platform has no buffers) and holds no pointer into
    // itself, so the copy may live anywhere. `b` is a distinct allocation of the right size
    // and alignment.
    unsafe { core::ptr::copy_nonoverlapping(&BLANK, b.as_mut_ptr(), 1) };
    // SAFETY: initialised just above.
    Ok(unsafe { b.assume_init() })
}

/// The registered states, by device index (for `open`, which gets only the misc device).
pub(crate) static STATES: [AtomicPtr<DevState>; MAX_DEVICES] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_DEVICES];

/// Set once every device is registered (module init cannot fail after that), cleared when
/// unloading starts: an `open` before it fails, so no file can outlive a failed init.
pub(crate) static READY: AtomicBool = AtomicBool::new(false);

/// One device: its lock, its wait queues, the driver-core device, its node and its worker.
/// Built in `registration`.
#[pin_data(PinnedDrop)]
pub(crate) struct DevState {
    pub(crate) index: usize,
    #[pin]
    pub(crate) lock: Mutex<()>,
    /// WAIT_EVENT sleepers and the worker's sleep.
    #[pin]
    pub(crate) wake: Wakeups,
    pub(crate) core: VBox<Storage>,
    /// `/dev/davinci<index>`, once registered.
    pub(crate) misc: Option<Misc>,
    /// The worker thread, once started.
    pub(crate) worker: Option<Worker>,
    /// Set (under the lock) before the worker is stopped: it must not go to sleep again.
    pub(crate) stopping: AtomicBool,
}

// SAFETY: every mutable field is either behind the mutex (the device), atomic, or set only
// during registration and teardown, when no file is open (`misc`, `worker`).
unsafe impl Sync for DevState {}
// SAFETY: as for `Sync`.
unsafe impl Send for DevState {}

/// The locked device: derefs to the driver-core device; waiting releases the lock. Dropping
/// it releases the lock, then frees the large buffers the call freed (`KernelPlatform`'s
/// dying list): a vfree of gigabytes does not hold up the device's other callers (and an
/// open waiting for the device holds the misc core's global mutex).
pub(crate) struct Locked<'a> {
    guard: ManuallyDrop<Guard<'a, (), MutexBackend>>,
    core: &'a Storage,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: the guard still holds the device's mutex (it is released just below), so
        // this is the only reference to the device.
        let dying = unsafe { &mut *self.core.0.get() }
            .platform_mut()
            .take_dying();
        // SAFETY: the guard is dropped once, here, and not used again.
        unsafe { ManuallyDrop::drop(&mut self.guard) };
        drop(dying);
    }
}

impl core::ops::Deref for Locked<'_> {
    type Target = DeviceCore<KernelPlatform>;
    fn deref(&self) -> &Self::Target {
        // SAFETY: the guard holds the device's mutex (Storage invariant), so no other
        // reference to the device exists while this one lives.
        unsafe { &*self.core.0.get() }
    }
}

impl core::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference.
        unsafe { &mut *self.core.0.get() }
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
        match cv.wait_interruptible_timeout(&mut *self.guard, msecs_to_jiffies(ms)) {
            R::Timeout => Woke::TimedOut,
            R::Woken { .. } => Woke::Notified,
            R::Signal { .. } => Woke::Signal,
        }
    }

    /// Releases the lock and sleeps on `cv` until it is notified (a kthread: no signal ends
    /// it; `kthread_stop` wakes it).
    pub(crate) fn wait_forever(&mut self, cv: &CondVar) {
        let _ = cv.wait_interruptible(&mut *self.guard);
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
            guard: ManuallyDrop::new(self.lock.lock()),
            core: &self.core,
        }
    }

    /// The registered device whose misc device is `misc` (for `open`).
    pub(crate) fn of_misc(misc: *mut c_void) -> Option<&'static DevState> {
        STATES.iter().find_map(|s| {
            let p = s.load(Ordering::Acquire);
            // SAFETY: a non-null entry points at a pinned state that outlives every open of
            // its device (module refcounting keeps it until unload).
            let st = unsafe { p.as_ref() }?;
            st.misc.as_ref().is_some_and(|m| m.is(misc)).then_some(st)
        })
    }

    /// Wakes the worker (a file was released: its streams are gone).
    pub(crate) fn worker_kick(&self) {
        let _g = self.lock();
        self.wake.kick();
    }
}

/// One open file: which device, and its `client` there.
pub(crate) struct Open {
    pub(crate) dev: &'static DevState,
    /// The open's handle in driver-core's client table.
    pub(crate) client: u32,
    /// The wait queue its WAIT_EVENTs sleep on (its slot in the platform's table of opens).
    pub(crate) queue: usize,
    /// Its blocked WAIT_EVENTs (bounded) and the deadlines of interrupted ones.
    pub(crate) waits: crate::waits::OpenWaits,
}
