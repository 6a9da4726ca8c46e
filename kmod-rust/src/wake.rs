// SPDX-License-Identifier: GPL-2.0

//! How a device's sleepers are woken: [`Wakeups`], the wait queues and kick counter pinned in
//! each device (WAIT_EVENT sleepers, the worker), and [`Wake`], the platform's handle on them
//! (driver-core calls the platform, with the device lock held, when the worker must look again
//! or a waiter may go on). Below both the device and the platform, which each use it.

use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::bindings;
use kernel::ffi::c_uint;

use kernel::init::pin_init_array_from_fn;
use kernel::prelude::*;
use kernel::sync::{new_condvar, CondVar};

use crate::davinci_driver_core::MAX_CLIENTS;

/// WAIT_EVENT sleepers' queues per device: one per open (the open's slot in the platform's
/// table of opens, [`KernelPlatform::set_mapping`](crate::platform::KernelPlatform::set_mapping)),
/// so a wake-up reaches only the sleepers of the open whose streams or events moved, at most
/// [`MAX_BLOCKED_WAITS_PER_CLIENT`](crate::davinci_driver_core::MAX_BLOCKED_WAITS_PER_CLIENT)
/// of them, never another open's.
pub(crate) const WAIT_QUEUES: usize = MAX_CLIENTS;

/// A device's wait queues, and the count of the worker's wake-ups.
#[pin_data]
pub(crate) struct Wakeups {
    /// WAIT_EVENT sleepers, by their open's slot.
    #[pin]
    pub(crate) waiters: [CondVar; WAIT_QUEUES],
    /// The worker's sleep.
    #[pin]
    pub(crate) worker_cv: CondVar,
    /// Bumped by every wake-up of the worker, under the device lock.
    pub(crate) kicks: AtomicU64,
    /// Whether a completion or a recorded event may give the worker work
    /// ([`notify`](Self::notify)): cleared by the worker, under the device lock, when it goes
    /// to sleep with no stream blocked on an event (EVENT_WAIT); set again when it wakes.
    pub(crate) blocked: AtomicBool,
    /// When a NOTIFY or SUBMIT_TASK last ran a stream in its caller (`worker::serve_kick`),
    /// under the device lock.
    pub(crate) last_inline_ns: AtomicU64,
}

impl Wakeups {
    /// Empty wait queues, no kicks yet.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Wakeups {
            waiters <- pin_init_array_from_fn(|_| new_condvar!()),
            worker_cv <- new_condvar!(),
            kicks: AtomicU64::new(0),
            blocked: AtomicBool::new(true),
            last_inline_ns: AtomicU64::new(0),
        })
    }

    /// The worker must look again (SUBMIT_TASK, NOTIFY, a new or destroyed stream).
    pub(crate) fn kick(&self) {
        self.kicks.fetch_add(1, Ordering::Relaxed);
        self.worker_cv.notify_all();
    }

    /// Something the waiters of the open in slot `queue` may wait for happened (its
    /// completions published, its event recorded, its stream stopped): wake the sleepers of
    /// its queue (`None`: an open without a slot, which has no sleepers), and the
    /// worker if it sleeps with a stream blocked on an event (which may go on now). A worker
    /// with no blocked stream has nothing to do for a completion (its other streams wait for
    /// their doorbells): the kick count still moves, so an awake worker looks again before
    /// it sleeps, but a sleeping one is not woken. (Waking it on every completion cost a
    /// round trip run in its caller, NOTIFY's, the wake-up it saves.)
    pub(crate) fn notify(&self, queue: Option<usize>) {
        if let Some(q) = queue.and_then(|i| self.waiters.get(i)) {
            q.notify_all();
        }
        if self.blocked.load(Ordering::Relaxed) {
            self.kick();
        } else {
            self.kicks.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// How the platform wakes sleepers: a pointer to its device's pinned [`Wakeups`].
///
/// # Invariants
///
/// The pointee is pinned and outlives every device call (it is dropped at module unload, after
/// the worker stopped and no file is open).
pub(crate) struct Wake(*const Wakeups);

impl Wake {
    /// The platform's handle on `wakeups`.
    ///
    /// # Safety
    ///
    /// `wakeups` is pinned and outlives every call of the device whose platform gets the
    /// handle.
    pub(crate) unsafe fn new(wakeups: *const Wakeups) -> Wake {
        Wake(wakeups)
    }

    /// [`Wakeups::kick`].
    pub(crate) fn kick(&self) {
        // SAFETY: the wake-ups outlive every device call (type invariant).
        unsafe { &*self.0 }.kick();
    }

    /// [`Wakeups::notify`].
    pub(crate) fn notify(&self, queue: Option<usize>) {
        // SAFETY: as in `kick`.
        unsafe { &*self.0 }.notify(queue);
    }
}

extern "C" {
    fn davinci_fanout_new(n: c_uint) -> *mut c_void;
    fn davinci_fanout_free(f: *mut c_void);
    fn davinci_fanout_mark(f: *mut c_void, i: c_uint);
    fn davinci_fanout_kick(f: *mut c_void);
    fn davinci_fanout_queue(f: *mut c_void, i: c_uint) -> *mut bindings::wait_queue_head;
    fn davinci_fanout_wake_all(f: *mut c_void);
}

/// A PCI device's data wake-ups (`helpers.c`): one wait queue per notification word, and a
/// work item that wakes, in process context, the queues of the words the data vector's
/// hard-irq handler marked as changed. So the hard-irq handler does a bounded amount of work
/// whatever the sleepers, and a completion wakes only the sleepers of the words it changed.
///
/// # Invariants
///
/// A live `davinci_fanout` from `davinci_fanout_new`, freed once, on drop.
pub(crate) struct Fanout(NonNull<c_void>);

// SAFETY: the C side is safe to use from any context and thread (atomic bitops, wait queues,
// a work item).
unsafe impl Send for Fanout {}
// SAFETY: as for `Send`.
unsafe impl Sync for Fanout {}

impl Fanout {
    /// `n` queues.
    pub(crate) fn new(n: u32) -> Result<Fanout> {
        // SAFETY: no preconditions (process context).
        NonNull::new(unsafe { davinci_fanout_new(n) })
            .map(Fanout)
            .ok_or(ENOMEM)
    }

    /// Word `i` changed (any context): its sleepers wake at the next [`kick`](Self::kick).
    pub(crate) fn mark(&self, i: u32) {
        // SAFETY: live (type invariant); bounds are checked in C.
        unsafe { davinci_fanout_mark(self.0.as_ptr(), i) }
    }

    /// Wakes the marked words' sleepers from process context (any context).
    pub(crate) fn kick(&self) {
        // SAFETY: live (type invariant).
        unsafe { davinci_fanout_kick(self.0.as_ptr()) }
    }

    /// Word `i`'s queue, to sleep on.
    pub(crate) fn queue(&self, i: u32) -> Option<*mut bindings::wait_queue_head> {
        // SAFETY: live (type invariant); bounds are checked in C.
        let q = unsafe { davinci_fanout_queue(self.0.as_ptr(), i) };
        (!q.is_null()).then_some(q)
    }

    /// Wakes every sleeper.
    pub(crate) fn wake_all(&self) {
        // SAFETY: live (type invariant).
        unsafe { davinci_fanout_wake_all(self.0.as_ptr()) }
    }
}

impl Drop for Fanout {
    fn drop(&mut self) {
        // SAFETY: live and freed once, here (type invariant); the owner drops it after its
        // interrupts were freed and with no sleeper left, and the C side waits for the work
        // item.
        unsafe { davinci_fanout_free(self.0.as_ptr()) }
    }
}
