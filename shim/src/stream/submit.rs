//! Submitting on a [`Stream`]: descriptors into the mapped command ring with one release
//! store per batch, the doorbell (or NOTIFY) when the device asked to be woken, and the slow
//! path (SUBMIT_TASK). A full ring waits for room (`wait.rs`).
#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;

use davinci_uapi::*;

use super::wait::deadline;
use super::Stream;
use crate::error::Result;
use crate::rings::Wake;
use crate::stats::Stats;

impl Stream {
    /// Submits one task. Returns once it is in the command ring (not when it ran). If the
    /// ring is full, waits for room (taking completions off the event ring into the backlog
    /// if the device is stalled on it), at most `submit_timeout`.
    pub fn submit(&mut self, desc: &TaskDesc) -> Result<()> {
        self.submit_batch(std::slice::from_ref(desc))
    }

    /// Submits tasks in order with one publish (and at most one doorbell) per ring-full of
    /// them; waits for room like [`submit`](Self::submit).
    pub fn submit_batch(&mut self, descs: &[TaskDesc]) -> Result<()> {
        const OP: &str = "Stream::submit";
        self.check_error(OP)?;
        let mut rest = descs;
        let mut until = None;
        loop {
            let n = self.rings.push_slice(rest);
            rest = rest.get(n..).unwrap_or_default();
            self.publish(OP, n)?;
            if rest.is_empty() {
                return Ok(());
            }
            let d = *until.get_or_insert_with(|| deadline(self.opts.submit_timeout));
            Stats::bump(&self.stats.full_waits, 1);
            self.wait_for_room(OP, d, rest.len())?;
        }
    }

    /// Submits as many of `descs` as fit without waiting (in order); returns how many.
    pub fn try_submit_batch(&mut self, descs: &[TaskDesc]) -> Result<usize> {
        const OP: &str = "Stream::try_submit";
        self.check_error(OP)?;
        let n = self.rings.push_slice(descs);
        self.publish(OP, n)?;
        Ok(n)
    }

    /// The slow path: SUBMIT_TASK has the driver place `desc` in the ring for us (one system
    /// call per task; for debugging and for clients that cannot map the rings). Returns the
    /// ring index used.
    pub fn submit_slow(&mut self, desc: &TaskDesc) -> Result<u32> {
        const OP: &str = "SUBMIT_TASK";
        let mut a = SubmitTaskArgs {
            stream: self.handle,
            desc: *desc,
            ..Default::default()
        };
        self.ctx.dev.call(OP, DRIVER_CMD_SUBMIT_TASK, &mut a)?;
        self.rings.resync_tail();
        Stats::bump(&self.stats.slow_submits, 1);
        Stats::bump(&self.stats.tasks, 1);
        Ok(a.index)
    }

    /// Publishes what was pushed; rings the doorbell if the device asked for it.
    fn publish(&mut self, op: &'static str, pushed: usize) -> Result<()> {
        if pushed == 0 {
            return Ok(());
        }
        Stats::bump(&self.stats.tasks, pushed as u64);
        if !self.rings.publish() {
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
