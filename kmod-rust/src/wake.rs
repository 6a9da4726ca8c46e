// SPDX-License-Identifier: GPL-2.0

//! How a device's sleepers are woken: [`Wakeups`], the wait queues and kick counter pinned in
//! each device (WAIT_EVENT sleepers, the worker), and [`Wake`], the platform's handle on them
//! (driver-core calls the platform, with the device lock held, when the worker must look again
//! or a waiter may go on). Below both the device and the platform, which each use it.

use core::sync::atomic::{AtomicU64, Ordering};

use kernel::init::pin_init_array_from_fn;
use kernel::prelude::*;
use kernel::sync::{new_condvar, CondVar};

/// WAIT_EVENT sleepers' queues per device: an open sleeps on the queue of its client handle
/// ([`queue_of`]) and is woken only by what its own streams and events do (and the few opens
/// hashed with it), not by every completion of every tenant.
pub(crate) const WAIT_QUEUES: usize = 16;

/// The queue an open's WAIT_EVENT sleeps on (handles are scrambled, so this spreads them).
pub(crate) fn queue_of(client: u32) -> usize {
    client as usize % WAIT_QUEUES
}

/// A device's wait queues, and the count of the worker's wake-ups.
#[pin_data]
pub(crate) struct Wakeups {
    /// WAIT_EVENT sleepers, by [`queue_of`] their open.
    #[pin]
    pub(crate) waiters: [CondVar; WAIT_QUEUES],
    /// The worker's sleep.
    #[pin]
    pub(crate) worker_cv: CondVar,
    /// Bumped by every wake-up of the worker, under the device lock.
    pub(crate) kicks: AtomicU64,
}

impl Wakeups {
    /// Empty wait queues, no kicks yet.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Wakeups {
            waiters <- pin_init_array_from_fn(|_| new_condvar!()),
            worker_cv <- new_condvar!(),
            kicks: AtomicU64::new(0),
        })
    }

    /// The worker must look again (SUBMIT_TASK, NOTIFY, a new or destroyed stream).
    pub(crate) fn kick(&self) {
        self.kicks.fetch_add(1, Ordering::Relaxed);
        self.worker_cv.notify_all();
    }

    /// Something open `client`'s waiters may wait for happened (its completions published,
    /// its event recorded, its stream stopped): wake the sleepers of its queue, and the
    /// worker (a stream blocked on an event may go on).
    pub(crate) fn notify(&self, client: u32) {
        if let Some(q) = self.waiters.get(queue_of(client)) {
            q.notify_all();
        }
        self.kick();
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
    pub(crate) fn notify(&self, client: u32) {
        // SAFETY: as in `kick`.
        unsafe { &*self.0 }.notify(client);
    }
}
