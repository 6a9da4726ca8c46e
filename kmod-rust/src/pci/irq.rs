// SPDX-License-Identifier: GPL-2.0

//! A PCI device's interrupt side: the handler's counts per vector, the notification words
//! vector 1's handler copies out of BAR2 (hwif layout 3), and the sleeps on them (an admin
//! request awaiting vector 0 on the admin queue, a WAIT_EVENT awaiting its client's word on
//! that word's queue, woken out of hard-irq context by the fan-out's work item).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::bindings;
use kernel::ffi::{c_int, c_long, c_uint};
use kernel::prelude::*;

use super::dev::PciShared;
use crate::davinci_hwif::layout::{NOTIFY_OFFSET, NOTIFY_WORDS};
use crate::davinci_hwif::VECTOR_DATA;

extern "C" {
    fn davinci_wq_wake(wq: *mut bindings::wait_queue_head);
    fn davinci_wq_wait(
        wq: *mut bindings::wait_queue_head,
        counter: *const u64,
        before: u64,
        dead: *const u8,
        timeout_ms: c_uint,
        interruptible: c_int,
    ) -> c_long;
}

impl PciShared {
    /// An interrupt on `vector` (hard-irq context): counts it and wakes its sleepers. The
    /// admin vector wakes the admin queue (one request in flight: one sleeper). The data
    /// vector copies the notification words and marks those that changed; their sleepers
    /// are woken by the fan-out's work item, in process context: the work done here is
    /// bounded by the words, whatever the sleepers.
    pub(crate) fn interrupt(&self, vector: u32) {
        let data = vector == u32::from(VECTOR_DATA);
        if data {
            self.copy_notified();
        }
        if let Some(c) = self.irqs.get(vector as usize) {
            c.fetch_add(1, Ordering::Release);
        }
        if data {
            self.fanout.kick();
        } else {
            // SAFETY: the wait queue was initialised in `new` and lives as long as `self`;
            // wake_up_all may be called from any context.
            unsafe { davinci_wq_wake(self.wq.get()) };
        }
    }

    /// Copies the device's notification words (vector 1's handler: the device bumped them
    /// before it raised the vector).
    fn copy_notified(&self) {
        let Some(end) = NOTIFY_OFFSET.checked_add(u64::from(NOTIFY_WORDS) * 4) else {
            return;
        };
        if end > self.shm.len {
            return;
        }
        for (i, copy) in self.notified.iter().enumerate() {
            // SAFETY: `[NOTIFY_OFFSET, end)` lies in BAR2's kernel mapping (checked above),
            // which stays mapped while an interrupt handler can run (remove frees the irqs
            // before it unmaps); the offset is a multiple of 4 in a page-aligned mapping;
            // the device writes these words concurrently, only atomically.
            let word = unsafe {
                AtomicU32::from_ptr(
                    self.shm
                        .ptr
                        .as_ptr()
                        .add(NOTIFY_OFFSET as usize + i * 4)
                        .cast::<u32>(),
                )
            };
            let v = u64::from(word.load(Ordering::Acquire));
            if copy.load(Ordering::Relaxed) != v {
                copy.store(v, Ordering::Release);
                self.fanout.mark(i as u32);
            }
        }
    }

    /// `client`'s notification word as last copied.
    pub(crate) fn notified(&self, client: u32) -> u64 {
        self.notified[(client % NOTIFY_WORDS) as usize].load(Ordering::Acquire)
    }

    /// Sleeps until `client`'s notification word differs from `before` (or the device is
    /// gone), at most `ms`. `Err(ERESTARTSYS)` on a signal.
    pub(crate) fn wait_notified(&self, client: u32, before: u64, ms: u32) -> Result {
        let word = client % NOTIFY_WORDS;
        let Some(queue) = self.fanout.queue(word) else {
            return Err(EINVAL);
        };
        self.sleep_on(queue, &self.notified[word as usize], before, ms, true)
    }

    /// Interrupts counted on `vector`.
    pub(crate) fn count(&self, vector: u32) -> u64 {
        self.irqs
            .get(vector as usize)
            .map_or(0, |c| c.load(Ordering::Acquire))
    }

    /// Sleeps until `vector`'s count differs from `before` (or the device is gone), at most
    /// `ms`. `Err(ERESTARTSYS)` on a signal when `interruptible`.
    pub(crate) fn wait_irq(
        &self,
        vector: u32,
        before: u64,
        ms: u32,
        interruptible: bool,
    ) -> Result {
        let Some(c) = self.irqs.get(vector as usize) else {
            return Err(EINVAL);
        };
        self.sleep(c, before, ms, interruptible)
    }

    /// Sleeps on the admin queue until `counter` differs from `before` or the device is
    /// gone, at most `ms`.
    fn sleep(&self, counter: &AtomicU64, before: u64, ms: u32, interruptible: bool) -> Result {
        self.sleep_on(self.wq.get(), counter, before, ms, interruptible)
    }

    /// Sleeps on `queue` (the admin queue or a word's, both `self`'s) until `counter`
    /// differs from `before` or the device is gone, at most `ms`.
    fn sleep_on(
        &self,
        queue: *mut bindings::wait_queue_head,
        counter: &AtomicU64,
        before: u64,
        ms: u32,
        interruptible: bool,
    ) -> Result {
        // SAFETY: the queue lives as long as `self` (its admin queue, or one of its fan-out's
        // queues); `counter` (one of `self`'s) and `dead` are live atomics (a u64, a bool's
        // byte), which the helper only reads (READ_ONCE) while it sleeps.
        let r = unsafe {
            davinci_wq_wait(
                queue,
                counter.as_ptr().cast_const(),
                before,
                self.dead.as_ptr().cast_const().cast::<u8>(),
                ms,
                c_int::from(interruptible),
            )
        };
        if r < 0 {
            Err(ERESTARTSYS)
        } else {
            Ok(())
        }
    }

    /// Wakes every sleeper (the device went: `dead` is set, which their wait checks).
    pub(crate) fn wake_all(&self) {
        // SAFETY: as in `interrupt`.
        unsafe { davinci_wq_wake(self.wq.get()) };
        self.fanout.wake_all();
    }
}
