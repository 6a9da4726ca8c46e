//! Waiting on a [`Stream`]: [`synchronize`](Stream::synchronize), waiting for room in a
//! full command ring, WAIT_EVENT on the stream in bounded slices, and the wait policy they
//! share ([`SpinWait`], [`SPIN_LIMIT`]): spin while the device is about to answer, sleep in
//! the driver otherwise.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;
use davinci_uapi::*;

use super::Stream;
use crate::error::{Error, Result};
use crate::trace;

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
        if !self.looks.is_multiple_of(64) {
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

/// A duration for messages, as people write it: `30 s`, `1.5 s`, `20 ms`, `250 µs`.
pub(crate) struct Secs(pub(crate) Duration);

impl std::fmt::Display for Secs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.0;
        if d >= Duration::from_secs(1) {
            // To the millisecond, without trailing zeros: `30 s`, `1.5 s`.
            write!(f, "{} s", d.as_millis() as f64 / 1000.0)
        } else if d >= Duration::from_millis(1) {
            write!(f, "{} ms", d.as_millis())
        } else {
            write!(f, "{} µs", d.as_micros())
        }
    }
}

/// `Instant::now() + d`, or a century away if that overflows.
pub(crate) fn deadline(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}

impl Stream {
    /// Blocks until every task submitted so far has completed (`aclrtSynchronizeStream` /
    /// `cudaStreamSynchronize`), at most `timeout` (`ETIMEDOUT`).
    ///
    /// Completions it takes off the event ring stay available to [`poll`](Self::poll) (unless
    /// `keep_completions` is off).
    ///
    /// A signal handler installed without `SA_RESTART` that runs on this thread while it
    /// sleeps ends the wait with `EINTR` (`Error::is(Errno::EINTR)`), on every backend, so a
    /// Ctrl-C handler that sets a flag gets control back; nothing is lost, and calling again
    /// goes on waiting. (With `SA_RESTART` the kernel driver and `davinci-mockd` go on
    /// waiting; the embedded device cannot tell the two apart and returns `EINTR`.) Fails with the first failed task's errno if a task failed
    /// since the last `synchronize` (whether `poll` already returned it or not), with `EIO` if
    /// the device put the stream in the error state.
    pub fn synchronize(&mut self, timeout: Duration) -> Result<()> {
        const OP: &str = "Stream::synchronize";
        let until = deadline(timeout);
        let target = self.rings.tail();
        let _span = trace::synchronize(&self.ctx.dev, self.handle, target);
        loop {
            let head = self.rings.head();
            let entries = self.rings.event_entries();
            // The device cannot run more than an event ring ahead of what was taken off it.
            // The library's submits (SUBMIT_TASK's included) keep within that, so this bites
            // only for the test hook that submits as a raw client (`debug_ignore_event_credit`).
            let value = if target.wrapping_sub(head) <= entries {
                target
            } else {
                head.wrapping_add(entries)
            };
            let remaining = until.saturating_duration_since(Instant::now());
            let waited = self.wait_stream(OP, value, remaining);
            // Whatever happened, take what completed (error completions included).
            self.drain(OP)?;
            match waited {
                Ok(_) => {}
                Err(e) if e.is(Errno::EAGAIN) || e.is(Errno::ETIMEDOUT) => {
                    let left = target.wrapping_sub(self.rings.head());
                    let hint = self.stuck_hint();
                    return Err(Error::new(
                        Errno::ETIMEDOUT,
                        OP,
                        format!(
                            "{left} of stream {:#x}'s tasks had not completed when the {} \
                             timeout ran out{}",
                            self.handle,
                            Secs(timeout),
                            hint
                        ),
                    ));
                }
                Err(e) if e.is(Errno::EINTR) => {
                    return Err(Error::new(
                        Errno::EINTR,
                        OP,
                        format!(
                            "interrupted by a signal: {} of stream {:#x}'s tasks were still \
                             running; nothing is lost (synchronize again to go on waiting)",
                            target.wrapping_sub(self.rings.head()),
                            self.handle
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
        }
        if let Some(c) = self.first_error.take() {
            return Err(c.to_error(OP));
        }
        Ok(())
    }

    /// What a wait that timed out with tasks queued may be stuck on, for its message: the
    /// device is not stalled on completions (the library never lets them fill the event
    /// ring), so a stream that makes no progress waits for an event nobody records, or runs a
    /// long task.
    fn stuck_hint(&self) -> String {
        if self.error_state().is_some() || self.rings.unreaped() == 0 {
            return String::new();
        }
        "; the stream is not stalled on unreaped completions (the library never lets them \
         fill its event ring): it waits for an event nobody recorded yet, or runs a long task"
            .to_string()
    }

    pub(super) fn wait_for_room(
        &mut self,
        op: &'static str,
        until: Instant,
        want: usize,
    ) -> Result<()> {
        let backoff = Backoff::new();
        let mut spin = SpinWait::new();
        loop {
            if self.rings.free() > 0 {
                return Ok(());
            }
            self.check_error(op)?;
            // Completions taken off the event ring give the credit back (rings.rs).
            if self.drain(op)? > 0 {
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
                return Err(Error::new(
                    Errno::ETIMEDOUT,
                    op,
                    format!(
                        "stream {:#x} had no room for {want} more task(s) for {}: its {} \
                         queued tasks made no progress (waiting for an event nobody records, \
                         or a long task)",
                        self.handle,
                        Secs(self.opts.submit_timeout),
                        self.rings.unreaped()
                    ),
                ));
            }
            // Sleep in the driver until the device completes more tasks (or 20 ms): enough
            // for the rest of the batch, up to a quarter of the ring, so that a host that
            // had to sleep (an oversubscribed machine) wakes once per group of completions,
            // not once per task.
            let quarter = (self.rings.cmd_entries() / 4).max(1);
            let group = u32::try_from(want).unwrap_or(u32::MAX).clamp(1, quarter);
            let next = self
                .rings
                .head()
                .wrapping_add(self.rings.available())
                .wrapping_add(group);
            let slice = (until - now).min(Duration::from_millis(20));
            match self.wait_stream(op, next, slice) {
                Ok(_) => {}
                // A signal does not end a submit (it would leave a batch half submitted):
                // the wait for room is bounded by `submit_timeout` anyway.
                Err(e) if e.is(Errno::ETIMEDOUT) || e.is(Errno::EAGAIN) || e.is(Errno::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
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
        match self.ctx.dev.call_wait(op, &mut a) {
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
}
