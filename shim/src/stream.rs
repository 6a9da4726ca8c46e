//! [`Stream`]: an ordered queue of tasks with a command ring, an event (completion) ring and a
//! doorbell, all mapped into this process. Submitting is a memory write, not a system call.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;
use davinci_uapi::rings::RingOffsets;
use davinci_uapi::task::{EVENT_RECORD_SIZE, TASK_DESC_SIZE};
use davinci_uapi::*;

use crate::completion::{Completion, StreamError};
use crate::device::{ContextInner, DeviceStats, Stats};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::rings::{StreamRings, Wake};

/// Ring depths and behaviour of a stream. Start from [`StreamOptions::default`] or
/// [`StreamOptions::depths`] and change what you need:
///
/// ```
/// use davinci_shim::StreamOptions;
/// use std::time::Duration;
/// let o = StreamOptions::depths(64, 128)
///     .keep_completions(false)
///     .submit_timeout(Duration::from_secs(1));
/// assert_eq!((o.cmd_entries, o.keep_completions), (64, false));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamOptions {
    /// Command-ring slots (a power of two within the device's limits).
    pub cmd_entries: u32,
    /// Event-ring slots (a power of two, at least `cmd_entries`).
    pub event_entries: u32,
    /// Keep completions that `submit` (ring full) and `synchronize` take off the event ring
    /// so that `poll` still returns them (`true`, the default), or drop them after noting
    /// errors (`false`: for callers that never poll, CUDA style).
    pub keep_completions: bool,
    /// Most completions kept that way before `submit`/`synchronize` fail with `EAGAIN`
    /// asking the caller to poll (bounded, like everything).
    pub backlog_limit: usize,
    /// Longest `submit`/`submit_batch` waits for room in a full command ring before it fails
    /// with `ETIMEDOUT`.
    pub submit_timeout: Duration,
}

impl Default for StreamOptions {
    fn default() -> Self {
        Self {
            cmd_entries: 256,
            event_entries: 512,
            keep_completions: true,
            backlog_limit: 1 << 18,
            submit_timeout: Duration::from_secs(10),
        }
    }
}

impl StreamOptions {
    /// Default options with these ring depths.
    pub fn depths(cmd_entries: u32, event_entries: u32) -> Self {
        Self {
            cmd_entries,
            event_entries,
            ..Self::default()
        }
    }

    /// These options with `keep_completions` set (see the field).
    pub fn keep_completions(mut self, keep: bool) -> Self {
        self.keep_completions = keep;
        self
    }

    /// These options with `backlog_limit` set (see the field).
    pub fn backlog_limit(mut self, limit: usize) -> Self {
        self.backlog_limit = limit;
        self
    }

    /// These options with `submit_timeout` set (see the field).
    pub fn submit_timeout(mut self, timeout: Duration) -> Self {
        self.submit_timeout = timeout;
        self
    }
}

/// An in-order queue of tasks on the device (`aclrtStream` / `cudaStream_t`).
///
/// * [`submit`](Self::submit) / [`submit_batch`](Self::submit_batch) write descriptors into the
///   mapped command ring and publish them with one release store; the doorbell is written only
///   when the device said it is going to sleep (NEED_WAKEUP), so a busy device costs no
///   system call per task.
/// * [`poll`](Self::poll) copies completions out of the mapped event ring (no system call).
/// * [`synchronize`](Self::synchronize) blocks in the driver until everything submitted has
///   completed.
///
/// A stream is used by one thread at a time (`&mut self`); it may move between threads.
/// Dropping it destroys the stream (tasks not yet executed are discarded).
///
/// ```
/// # fn main() -> davinci_shim::Result<()> {
/// # #[cfg(feature = "embedded")] {
/// use davinci_shim::{DeviceMem, Device, TaskDesc};
/// use std::time::Duration;
/// let dev = Device::embedded()?;
/// let buf = dev.alloc(256)?;
/// let mut stream = dev.create_context()?.create_stream()?;
/// // Two tasks, one publish; completions come back in order, tagged with user_data.
/// stream.submit_batch(&[
///     TaskDesc::fill(1, buf.dev_addr(), 256, 0xabcd),
///     TaskDesc::copy(2, buf.dev_addr() + 128, buf.dev_addr(), 64),
/// ])?;
/// stream.synchronize(Duration::from_secs(5))?;
/// let mut done = Vec::new();
/// stream.poll(&mut done);
/// assert_eq!(done.iter().map(|c| c.user_data).collect::<Vec<_>>(), [1, 2]);
/// assert!(done.iter().all(|c| c.is_ok()));
/// assert_eq!(buf.read_vec::<u32>(128, 2)?, [0xabcd, 0xabcd]);
/// # }
/// # Ok(()) }
/// ```
pub struct Stream {
    rings: StreamRings,
    ctx: Arc<ContextInner>,
    handle: u32,
    opts: StreamOptions,
    backlog: VecDeque<Completion>,
    first_error: Option<Completion>,
    stats: Arc<Stats>,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("handle", &self.handle)
            .field("context", &self.ctx.handle)
            .field("rings", &self.rings)
            .finish_non_exhaustive()
    }
}

/// How long a [`SpinWait`] spins before it says sleep (unless the thread is preempted first).
/// A device drains a full ring of short tasks well within it.
pub const SPIN_LIMIT: Duration = Duration::from_micros(200);

/// When a wait for the device should stop spinning and sleep: the policy of the shim's own
/// blocking calls, public for runtimes that run their own poll loops.
///
/// Spinning (looking again, with a `yield` in between) is cheaper than a sleep and a wake-up
/// in the driver while the device is about to answer and nobody else needs the core. So
/// [`keep_spinning`](Self::keep_spinning) says yes for at most [`SPIN_LIMIT`], and only while
/// the thread is not preempted: every 64 looks it reads the thread's involuntary context
/// switches, and one since the spin began means the machine is oversubscribed (perhaps by
/// the device's own poller, or a CPU hog), where spinning only takes the core from whoever
/// would make progress.
///
/// ```
/// let mut spin = davinci_shim::SpinWait::new();
/// let mut looks = 0;
/// while spin.keep_spinning() {
///     looks += 1; // look at the rings here; break when there is work
///     std::thread::yield_now();
/// }
/// assert!(looks > 0); // then sleep, e.g. Stream::synchronize
/// ```
#[derive(Debug, Default)]
pub struct SpinWait {
    looks: u32,
    started: Option<(Instant, u64)>,
}

impl SpinWait {
    /// A new spin (the clock starts at its first check).
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether to look once more (`false`: sleep now). Cheap: a counter, and a clock read and
    /// a `getrusage` every 64th call.
    pub fn keep_spinning(&mut self) -> bool {
        self.looks = self.looks.wrapping_add(1);
        if self.looks % 64 != 0 {
            return true;
        }
        let now = (Instant::now(), davinci_shm::involuntary_switches());
        let (t0, sw0) = *self.started.get_or_insert(now);
        now.1 == sw0 && now.0.duration_since(t0) < SPIN_LIMIT
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `Instant::now() + d`, or a century away if that overflows.
pub(crate) fn deadline(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}

impl Stream {
    pub(crate) fn new(ctx: Arc<ContextInner>, opts: StreamOptions) -> Result<Stream> {
        const OP: &str = "CREATE_STREAM";
        let dev = ctx.dev.clone();
        let mut a = CreateStreamArgs {
            ctx: ctx.handle,
            cmd_entries: opts.cmd_entries,
            event_entries: opts.event_entries,
            ..Default::default()
        };
        dev.call(OP, DRIVER_CMD_CREATE_STREAM, &mut a)?;
        let handle = a.handle;
        // From here on a failure must destroy the stream again.
        let destroy = |e: Error| {
            let _ = dev.call_handle("DESTROY_STREAM", DRIVER_CMD_DESTROY_STREAM, handle);
            e
        };
        if a.cmd_ring.offsets != RingOffsets::standard(TASK_DESC_SIZE as u32)
            || a.event_ring.offsets != RingOffsets::standard(EVENT_RECORD_SIZE as u32)
        {
            return Err(destroy(Error::new(
                Errno::EPROTO,
                OP,
                "the driver lays its rings out differently from this ABI version",
            )));
        }
        let cmd = dev
            .map(OP, a.cmd_ring.mmap_offset, a.cmd_ring.mmap_size)
            .map_err(destroy)?;
        let event = dev
            .map(OP, a.event_ring.mmap_offset, a.event_ring.mmap_size)
            .map_err(destroy)?;
        let bell = dev
            .map(OP, a.doorbell_offset, a.doorbell_size)
            .map_err(destroy)?;
        let rings = StreamRings::new(
            cmd,
            a.cmd_ring.entries,
            event,
            a.event_ring.entries,
            bell,
            Wake::for_features(dev.features()),
        )
        .map_err(|m| destroy(Error::new(Errno::EPROTO, OP, m)))?;
        Ok(Stream {
            rings,
            ctx,
            handle,
            opts,
            backlog: VecDeque::new(),
            first_error: None,
            stats: dev.inner.register_stream(),
        })
    }

    /// The driver's handle of this stream.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The handle of the stream's context.
    pub fn context_handle(&self) -> u32 {
        self.ctx.handle
    }

    pub(crate) fn same_context(&self, ctx: &Arc<ContextInner>) -> bool {
        Arc::ptr_eq(&self.ctx, ctx)
    }

    /// The options the stream was created with.
    pub fn options(&self) -> &StreamOptions {
        &self.opts
    }

    /// Command-ring slots.
    pub fn cmd_entries(&self) -> u32 {
        self.rings.cmd_entries()
    }

    /// Event-ring slots.
    pub fn event_entries(&self) -> u32 {
        self.rings.event_entries()
    }

    /// Free command slots now, as the device has freed them (it re-reads the ring's head): a
    /// submit of this many will not wait.
    pub fn free_slots(&mut self) -> u32 {
        self.rings.free_now()
    }

    /// Tasks submitted whose completions were not yet taken off the event ring.
    pub fn in_flight(&self) -> u32 {
        self.rings.tail().wrapping_sub(self.rings.head())
    }

    /// Completions taken off the ring but not yet returned by `poll`.
    pub fn backlog(&self) -> usize {
        self.backlog.len()
    }

    /// Whether the device has asked for a doorbell (NEED_WAKEUP is set: its worker for this
    /// stream is asleep or about to be). While it is not, submits write no doorbell at all.
    /// A snapshot, for diagnostics and tests.
    pub fn device_asleep(&self) -> bool {
        self.rings.cmd_flags().contains(RingFlags::NEED_WAKEUP)
    }

    /// The device's error state of this stream, if it stopped.
    pub fn error_state(&self) -> Option<StreamError> {
        self.rings
            .cmd_error()
            .map(|(raw, index)| StreamError::from_header(raw, index))
    }

    fn check_error(&self, op: &'static str) -> Result<()> {
        if !self.rings.cmd_flags().contains(RingFlags::ERROR) {
            return Ok(());
        }
        Err(self.stopped(op, "no reason recorded"))
    }

    /// `EIO` for a stream the device stopped, saying why (the failed task and its operand,
    /// once its completion has been taken off the ring; else the ring's error) and what to do
    /// about it. `fallback` if the device left no reason.
    fn stopped(&self, op: &'static str, fallback: &str) -> Error {
        let state = self.error_state();
        let task = self
            .first_error
            .filter(|c| state.is_none_or(|st| st.errno() == c.errno()));
        let what = match (task, state) {
            (Some(c), Some(st)) => c.describe(Some(st.index())),
            (Some(c), None) => c.describe(None),
            (None, Some(st)) => st.to_string(),
            (None, None) => fallback.to_string(),
        };
        Error::new(
            Errno::EIO,
            op,
            format!(
                "stream {:#x} was stopped by the device: {what}. A stopped stream runs nothing \
                 more; drop it and create a new one (Context::create_stream): the context, its \
                 events, its other streams and device memory are unaffected",
                self.handle
            ),
        )
    }

    /// This stream's data-path counters so far (the same counters as [`Device::stats`], which
    /// sums them over the open's streams).
    ///
    /// [`Device::stats`]: crate::Device::stats
    pub fn stats(&self) -> DeviceStats {
        self.stats.snapshot()
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
    fn wake_device(&self, op: &'static str) -> Result<()> {
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

    fn wait_for_room(&mut self, op: &'static str, until: Instant, want: usize) -> Result<()> {
        let backoff = Backoff::new();
        let mut spin = SpinWait::new();
        loop {
            if self.rings.free() > 0 {
                return Ok(());
            }
            self.check_error(op)?;
            // The device takes a descriptor only with an event slot free: make room there.
            let (drained, _) = self.drain(op, false)?;
            if drained > 0 {
                continue;
            }
            if !backoff.is_completed() {
                backoff.snooze();
                continue;
            }
            if spin.keep_spinning() {
                std::thread::yield_now();
                continue;
            }
            let now = Instant::now();
            if now >= until {
                let full = if self.backlog.len() >= self.opts.backlog_limit {
                    format!(
                        "; the completion backlog is full ({} kept): poll the stream",
                        self.backlog.len()
                    )
                } else {
                    String::new()
                };
                return Err(Error::new(
                    Errno::ETIMEDOUT,
                    op,
                    format!(
                        "command ring of stream {:#x} stayed full for {:?}: the device made no \
                         progress (blocked on an event nobody records?){full}",
                        self.handle, self.opts.submit_timeout
                    ),
                ));
            }
            // Sleep in the driver until the device completes more tasks (or 20 ms): enough
            // for the rest of the batch, up to a quarter of the ring, so that a host that
            // had to sleep (an oversubscribed machine) wakes once per group of completions,
            // not once per task. Just one when the backlog is full: then the device can only
            // complete what fits in the event ring.
            let group =
                if self.opts.keep_completions && self.backlog.len() >= self.opts.backlog_limit {
                    1
                } else {
                    let quarter = (self.rings.cmd_entries() / 4).max(1);
                    u32::try_from(want).unwrap_or(u32::MAX).clamp(1, quarter)
                };
            let next = self
                .rings
                .head()
                .wrapping_add(self.rings.available())
                .wrapping_add(group);
            let slice = (until - now).min(Duration::from_millis(20));
            match self.wait_stream(op, next, slice) {
                Ok(_) => {}
                Err(e) if e.is(Errno::ETIMEDOUT) || e.is(Errno::EAGAIN) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes completions off the event ring into the backlog (or drops them after noting
    /// errors, per `keep_completions`). Returns `(taken, backlog_full)`. With `must`, a full
    /// backlog with completions waiting is an `EAGAIN` error.
    fn drain(&mut self, op: &'static str, must: bool) -> Result<(usize, bool)> {
        let room = if self.opts.keep_completions {
            self.opts.backlog_limit.saturating_sub(self.backlog.len())
        } else {
            usize::MAX
        };
        let keep = self.opts.keep_completions;
        let (backlog, first_error) = (&mut self.backlog, &mut self.first_error);
        let (n, wake) = self.rings.consume(room, |r| {
            let c = Completion::from(r);
            if !c.is_ok() && first_error.is_none() {
                *first_error = Some(c);
            }
            if keep {
                backlog.push_back(c);
            }
        });
        if wake {
            self.wake_device(op)?;
        }
        let full = room == 0 || (keep && self.backlog.len() >= self.opts.backlog_limit);
        if must && full && self.rings.available() > 0 {
            return Err(Error::new(
                Errno::EAGAIN,
                op,
                format!(
                    "{} completions are kept unpolled (the backlog limit): poll the stream, or \
                     create it with keep_completions = false",
                    self.backlog.len()
                ),
            ));
        }
        Ok((n, full))
    }

    /// WAIT_EVENT on this stream: until its completion count reaches `value` (wrapping).
    fn wait_stream(
        &self,
        op: &'static str,
        value: u32,
        timeout: Duration,
    ) -> Result<WaitEventArgs> {
        let mut a = WaitEventArgs {
            kind: WaitKind::Stream as u32,
            handle: self.handle,
            value: value as u64,
            timeout_ns: ns(timeout),
            ..Default::default()
        };
        match self.ctx.dev.call(op, DRIVER_CMD_WAIT_EVENT, &mut a) {
            Ok(()) => Ok(a),
            Err(e) if e.is(Errno::EIO) => {
                // The ring header says why; WAIT_EVENT's status is the fallback.
                let status = Errno::from_code(a.status as i32)
                    .map(|s| s.name().to_string())
                    .unwrap_or_else(|| format!("status {}", a.status));
                Err(self.stopped(op, &status))
            }
            Err(e) => Err(e),
        }
    }

    /// Copies every available completion into `out` (kept backlog first, then the event
    /// ring), in stream order. Returns how many were added. No system call, except a doorbell
    /// (or NOTIFY) when the device had stalled on the full event ring and asked to be woken
    /// once it is reaped.
    pub fn poll(&mut self, out: &mut Vec<Completion>) -> usize {
        self.poll_each(|c| out.push(c))
    }

    /// Like [`poll`](Self::poll), handing each completion to `f`.
    pub fn poll_each(&mut self, mut f: impl FnMut(Completion)) -> usize {
        let mut n = 0;
        while let Some(c) = self.backlog.pop_front() {
            f(c);
            n += 1;
        }
        let first_error = &mut self.first_error;
        let (taken, wake) = self.rings.consume(usize::MAX, |r| {
            let c = Completion::from(r);
            if !c.is_ok() && first_error.is_none() {
                *first_error = Some(c);
            }
            f(c)
        });
        if wake {
            // A failed NOTIFY (only for devices without a doorbell) loses nothing: the
            // device's sleep has a timeout, and the next submit or synchronize wakes it too.
            let _ = self.wake_device("Stream::poll");
        }
        n + taken
    }

    /// Blocks until every task submitted so far has completed (`aclrtSynchronizeStream` /
    /// `cudaStreamSynchronize`), at most `timeout` (`ETIMEDOUT`).
    ///
    /// Completions it takes off the event ring stay available to [`poll`](Self::poll) (unless
    /// `keep_completions` is off). Fails with the first failed task's errno if a task failed
    /// since the last `synchronize` (whether `poll` already returned it or not), with `EIO` if
    /// the device put the stream in the error state.
    pub fn synchronize(&mut self, timeout: Duration) -> Result<()> {
        const OP: &str = "Stream::synchronize";
        let until = deadline(timeout);
        let target = self.rings.tail();
        loop {
            let head = self.rings.head();
            let entries = self.rings.event_entries();
            // The device cannot run more than an event ring ahead of what was taken off it.
            let value = if target.wrapping_sub(head) <= entries {
                target
            } else {
                head.wrapping_add(entries)
            };
            let remaining = until.saturating_duration_since(Instant::now());
            let waited = self.wait_stream(OP, value, remaining);
            // Whatever happened, take what completed (error completions included).
            self.drain(OP, false)?;
            match waited {
                Ok(_) => {}
                Err(e) if e.is(Errno::EAGAIN) || e.is(Errno::ETIMEDOUT) => {
                    return Err(Error::new(
                        Errno::ETIMEDOUT,
                        OP,
                        format!(
                            "{} of stream {:#x}'s tasks still running after {:?}",
                            target.wrapping_sub(self.rings.head()),
                            self.handle,
                            timeout
                        ),
                    ))
                }
                // Stopped: say so again now that the failed task's completion is drained,
                // so the message names the task and its operand.
                Err(e) if e.is(Errno::EIO) => return Err(self.check_error(OP).err().unwrap_or(e)),
                Err(e) => return Err(e),
            }
            if value == target {
                break;
            }
            // More to wait for: the event ring must have room again.
            self.drain(OP, true)?;
        }
        if let Some(c) = self.first_error.take() {
            return Err(c.to_error(OP));
        }
        Ok(())
    }

    /// Makes this stream wait (on the device) until `event` reaches the value of its latest
    /// [`record`](Event::record) (`aclrtStreamWaitEvent` / `cudaStreamWaitEvent`). Nothing is
    /// waited for if the event was never recorded. `user_data` of the task is 0.
    pub fn wait_event(&mut self, event: &Event) -> Result<()> {
        self.wait_event_tagged(event, 0)
    }

    /// Like [`wait_event`](Self::wait_event), with the task's `user_data`.
    pub fn wait_event_tagged(&mut self, event: &Event, user_data: u64) -> Result<()> {
        event.check_context(self, "Stream::wait_event")?;
        self.submit(&TaskDesc::event_wait(
            user_data,
            event.handle(),
            event.recorded(),
        ))
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
    /// with `EPROTO`; nothing else may be affected.
    #[doc(hidden)]
    pub fn debug_store_cmd_tail(&mut self, tail: u32) -> Result<()> {
        self.rings.store_raw_cmd_tail(tail);
        self.notify_as("debug_store_cmd_tail")
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.ctx.dev.inner.retire_stream(&self.stats);
        // On failure the context's (or the open's) teardown releases it anyway.
        let _ = self
            .ctx
            .dev
            .call_handle("DESTROY_STREAM", DRIVER_CMD_DESTROY_STREAM, self.handle);
        // The ring ends and mappings are released after this (field drops).
    }
}

#[cfg(test)]
mod tests {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_can_cross_threads() {
        // Compile-time: a stream moves between threads (one user at a time, `&mut self`);
        // everything else may be shared.
        send::<super::Stream>();
        send_sync::<crate::Device>();
        send_sync::<crate::Context>();
        send_sync::<crate::Event>();
        send_sync::<crate::DeviceBuffer>();
        send_sync::<crate::MemPool>();
        send_sync::<crate::PoolBuffer>();
        send_sync::<crate::Error>();
    }
}
