//! Submitting on a [`Stream`]: descriptors into the mapped command ring with one release
//! store per batch, the doorbell (or NOTIFY) when the device asked to be woken, and the slow
//! path (SUBMIT_TASK). A full ring waits for room (`wait.rs`).
#![deny(unsafe_code)]

use std::sync::atomic::Ordering;
use std::sync::Arc;

use davinci_uapi::*;

use super::wait::deadline;
use super::{Pending, Stream, TaskId};
use crate::error::{Error, Result};
use crate::rings::Wake;
use crate::stats::Stats;
use crate::task::Task;
use crate::trace;

impl Stream {
    /// Submits one task. Returns its [`TaskId`] once it is in the command ring (not when it
    /// ran). If the ring is full, waits for room (taking completions off the event ring into
    /// the backlog if the device is stalled on it), at most `submit_timeout`; a signal does
    /// not end that wait.
    ///
    /// The stream keeps the task's leases until its completion is reaped, so the buffers it
    /// names live at least that long ([`task`](crate::task) module docs). `EINVAL` if a buffer
    /// belongs to another open of the device (its address means nothing here).
    pub fn submit(&mut self, task: &Task) -> Result<TaskId> {
        self.submit_batch(std::slice::from_ref(task))
    }

    /// Submits tasks in order with one publish (and at most one doorbell) per ring-full of
    /// them; waits for room like [`submit`](Self::submit). Returns the first task's id (the
    /// others follow: [`TaskId::offset`]). If the wait for room fails midway, the tasks
    /// already submitted stay submitted and the error says how many.
    pub fn submit_batch(&mut self, tasks: &[Task]) -> Result<TaskId> {
        const OP: &str = "Stream::submit";
        // One pass over the tags: a batch of tasks that name no memory (NOP, events) has no
        // device to check and nothing to keep, only a count.
        let leased = tasks.iter().any(Task::has_leases);
        if leased {
            self.check_devices(OP, tasks)?;
        }
        self.submit_with(OP, tasks, Task::desc, |p, pushed| {
            if leased {
                for t in pushed {
                    p.push(t);
                }
            } else {
                p.count(pushed.len());
            }
        })
    }

    /// Submits as many of `tasks` as fit without waiting (in order); returns how many.
    pub fn try_submit_batch(&mut self, tasks: &[Task]) -> Result<usize> {
        const OP: &str = "Stream::try_submit";
        let mut span = trace::submit(&self.ctx.dev, self.handle, self.rings.tail());
        self.check_error(OP)?;
        self.reap_for(OP, tasks.len())?;
        let leased = tasks.iter().any(Task::has_leases);
        if leased {
            self.check_devices(OP, tasks)?;
        }
        let done = self.rings.push_with(tasks, Task::desc);
        if leased {
            for t in &tasks[..done] {
                self.pending.push(t);
            }
        } else {
            self.pending.count(done);
        }
        self.publish(OP, done)?;
        span.pushed(self.rings.tail(), tasks.iter().map(Task::desc));
        Ok(done)
    }

    /// Submits one raw descriptor: [`submit`](Self::submit) for runtimes that manage buffer
    /// lifetimes themselves (and for tests of what the device does with bad descriptors).
    ///
    /// # Safety
    ///
    /// Nothing keeps the memory `desc` names alive. The caller guarantees that every device
    /// address it names stays allocated to this open, and is not freed and handed out again
    /// (by the driver or by a [`MemPool`](crate::MemPool)), until the task's completion has
    /// been reaped or the stream dropped. Otherwise the task may write into memory that now
    /// belongs to another buffer or pool block of this process. (Addresses that belong to
    /// nobody, or to another client, are safe: the device faults the task.)
    #[allow(unsafe_code)]
    pub unsafe fn submit_raw(&mut self, desc: &TaskDesc) -> Result<TaskId> {
        // SAFETY: the caller's contract is this function's.
        unsafe { self.submit_raw_batch(std::slice::from_ref(desc)) }
    }

    /// [`submit_batch`](Self::submit_batch) of raw descriptors.
    ///
    /// # Safety
    ///
    /// As [`submit_raw`](Self::submit_raw), for every descriptor.
    #[allow(unsafe_code)]
    pub unsafe fn submit_raw_batch(&mut self, descs: &[TaskDesc]) -> Result<TaskId> {
        self.submit_with(
            "Stream::submit",
            descs,
            |d| d,
            |p, pushed| {
                p.count(pushed.len());
            },
        )
    }

    /// [`try_submit_batch`](Self::try_submit_batch) of raw descriptors.
    ///
    /// # Safety
    ///
    /// As [`submit_raw`](Self::submit_raw), for every descriptor submitted.
    #[allow(unsafe_code)]
    pub unsafe fn try_submit_raw_batch(&mut self, descs: &[TaskDesc]) -> Result<usize> {
        const OP: &str = "Stream::try_submit";
        let mut span = trace::submit(&self.ctx.dev, self.handle, self.rings.tail());
        self.check_error(OP)?;
        self.reap_for(OP, descs.len())?;
        let n = self.rings.push_slice(descs);
        self.pending.count(n);
        self.publish(OP, n)?;
        span.pushed(self.rings.tail(), descs.iter());
        Ok(n)
    }

    /// The slow path: SUBMIT_TASK has the driver place the task in the ring for us (one
    /// system call per task; for debugging and for clients that cannot map the rings).
    /// Returns its id.
    pub fn submit_slow(&mut self, task: &Task) -> Result<TaskId> {
        const OP: &str = "SUBMIT_TASK";
        let mut span = trace::submit(&self.ctx.dev, self.handle, self.rings.tail());
        self.check_devices(OP, std::slice::from_ref(task))?;
        self.credit_for_one(OP)?;
        let mut a = SubmitTaskArgs {
            stream: self.handle,
            desc: *task.desc(),
            ..Default::default()
        };
        self.ctx.dev.call(OP, DRIVER_CMD_SUBMIT_TASK, &mut a)?;
        self.rings.resync_tail();
        span.pushed(self.rings.tail(), [task.desc()].into_iter());
        self.note_published();
        Stats::bump(&self.stats.slow_submits, 1);
        Stats::bump(&self.stats.tasks, 1);
        Ok(self.pending.push(task))
    }

    /// [`submit_slow`](Self::submit_slow) of a raw descriptor.
    ///
    /// # Safety
    ///
    /// As [`submit_raw`](Self::submit_raw).
    #[allow(unsafe_code)]
    pub unsafe fn submit_slow_raw(&mut self, desc: &TaskDesc) -> Result<TaskId> {
        const OP: &str = "SUBMIT_TASK";
        let mut span = trace::submit(&self.ctx.dev, self.handle, self.rings.tail());
        self.credit_for_one(OP)?;
        let mut a = SubmitTaskArgs {
            stream: self.handle,
            desc: *desc,
            ..Default::default()
        };
        self.ctx.dev.call(OP, DRIVER_CMD_SUBMIT_TASK, &mut a)?;
        self.rings.resync_tail();
        span.pushed(self.rings.tail(), [desc].into_iter());
        self.note_published();
        Stats::bump(&self.stats.slow_submits, 1);
        Stats::bump(&self.stats.tasks, 1);
        Ok(self.pending.count(1))
    }

    /// `EINVAL` unless every buffer the tasks name belongs to this stream's open.
    fn check_devices(&self, op: &'static str, tasks: &[Task]) -> Result<()> {
        let ours = &self.ctx.dev.inner;
        for (i, t) in tasks.iter().enumerate() {
            if let Some(l) = t
                .leases()
                .iter()
                .find(|l| !Arc::ptr_eq(&l.device().inner, ours))
            {
                return Err(Error::new(
                    Errno::EINVAL,
                    op,
                    format!(
                        "task {i} of the batch names a buffer of another open ({}), not of this \
                         stream's ({}): device addresses are per open",
                        l.device(),
                        self.ctx.dev
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Pushes the descriptors of `items` (`desc` finds each one's) straight into the ring,
    /// noting each run pushed with `keep`, publishing per ring-full and waiting for room in
    /// between. A host span of the trace, if one runs.
    fn submit_with<S>(
        &mut self,
        op: &'static str,
        items: &[S],
        desc: impl Fn(&S) -> &TaskDesc,
        keep: impl FnMut(&mut Pending, &[S]),
    ) -> Result<TaskId> {
        let mut span = trace::submit(&self.ctx.dev, self.handle, self.rings.tail());
        let r = self.push_all(op, items, &desc, keep);
        span.pushed(self.rings.tail(), items.iter().map(desc));
        r
    }

    fn push_all<S>(
        &mut self,
        op: &'static str,
        items: &[S],
        desc: impl Fn(&S) -> &TaskDesc,
        mut keep: impl FnMut(&mut Pending, &[S]),
    ) -> Result<TaskId> {
        self.check_error(op)?;
        let first = self.next_task();
        let n = items.len();
        let mut done = 0;
        let mut until = None;
        loop {
            let rest = &items[done..];
            self.reap_for(op, rest.len())?;
            let pushed = self.rings.push_with(rest, &desc);
            keep(&mut self.pending, &rest[..pushed]);
            done += pushed;
            self.publish(op, pushed)?;
            if done == n {
                return Ok(first);
            }
            let d = *until.get_or_insert_with(|| deadline(self.opts.submit_timeout));
            Stats::bump(&self.stats.full_waits, 1);
            if let Err(e) = self.wait_for_room(op, d, n - done) {
                if done == 0 {
                    return Err(e);
                }
                let msg = format!(
                    "{}; {done} of the batch's {n} tasks were submitted ({first} on), the rest \
                     were not",
                    e.message()
                );
                return Err(Error::with_errno(e.errno(), op, msg));
            }
        }
    }

    /// Takes published completions off the event ring when the credit they hold back is
    /// needed for `want` more tasks (rings.rs, `event_credit`): no system call, and nothing
    /// at all while the credit suffices.
    #[inline]
    fn reap_for(&mut self, op: &'static str, want: usize) -> Result<()> {
        if (self.rings.event_credit() as usize) < want {
            self.drain(op)?;
        }
        Ok(())
    }

    /// Makes sure one more task fits the event ring's credit before the driver places one
    /// (SUBMIT_TASK bypasses the library's ring end): reaps, and waits for the device if
    /// that is not enough.
    fn credit_for_one(&mut self, op: &'static str) -> Result<()> {
        self.reap_for(op, 1)?;
        if self.rings.event_credit() == 0 {
            self.wait_for_room(op, deadline(self.opts.submit_timeout), 1)?;
        }
        Ok(())
    }

    /// Notes the tail just published for [`Device::synchronize`](crate::Device::synchronize)
    /// (a store to this stream's own counters' line).
    #[inline]
    fn note_published(&self) {
        self.stats
            .published
            .store(self.rings.tail(), Ordering::Relaxed);
    }

    /// Publishes what was pushed; rings the doorbell if the device asked for it.
    fn publish(&mut self, op: &'static str, pushed: usize) -> Result<()> {
        if pushed == 0 {
            return Ok(());
        }
        Stats::bump(&self.stats.tasks, pushed as u64);
        let wake = self.rings.publish();
        self.note_published();
        if !wake {
            return Ok(());
        }
        self.wake_device(op)
    }

    /// Wakes a device that asked for it (NEED_WAKEUP, after a publish or a reap): the doorbell,
    /// or NOTIFY for a device without one.
    pub(super) fn wake_device(&self, op: &'static str) -> Result<()> {
        let s = &self.stats;
        if self.rings.wake() == Wake::Notify {
            self.notify_as(op)?;
            s.doorbells.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let woke = self.rings.ring_doorbell();
        s.doorbells.fetch_add(1, Ordering::Relaxed);
        if woke {
            s.futex_wakes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn notify_as(&self, op: &'static str) -> Result<()> {
        self.ctx
            .dev
            .call_handle(op, DRIVER_CMD_NOTIFY, self.handle)?;
        self.stats.notifies.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// NOTIFY: wakes the device for this stream through the driver (never needed with a
    /// doorbell; harmless).
    pub fn notify(&self) -> Result<()> {
        self.notify_as("NOTIFY")
    }

    /// Test hook: from now on this stream submits as a raw ABI client that manages its rings
    /// itself may: beyond the event ring's credit, so that a stream nobody reaps stalls on its
    /// full event ring (docs/abi.md 5.4), for the conformance tests of that handshake. Only
    /// with the cargo feature `test-util` (not part of the production API).
    #[cfg(feature = "test-util")]
    pub fn debug_ignore_event_credit(&mut self) {
        self.rings.ignore_event_credit();
    }

    /// Test hook: overwrites the shared command-ring tail with `tail` (as a buggy or hostile
    /// producer could) and wakes the device. The device must detect it and stop this stream
    /// with `EPROTO`; nothing else may be affected. Only with the cargo feature `test-util`
    /// (for the conformance tests; not part of the production API).
    #[cfg(feature = "test-util")]
    pub fn debug_store_cmd_tail(&mut self, tail: u32) -> Result<()> {
        self.rings.store_raw_cmd_tail(tail);
        self.notify_as("debug_store_cmd_tail")
    }
}
