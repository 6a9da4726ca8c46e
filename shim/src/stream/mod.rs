//! [`Stream`]: an ordered queue of tasks with a command ring, an event (completion) ring and a
//! doorbell, all mapped into this process. Submitting is a memory write, not a system call.
//!
//! This file holds the type, its options, creation ([`Context::create_stream`]), its state
//! and drop. Each role is an `impl Stream` block of its own: `submit` (descriptors into the
//! command ring, the doorbell, NOTIFY, the slow path), `reap` (completions off the event
//! ring: `poll` and the back-pressure backlog), `wait` (`synchronize`, waiting for room,
//! and the wait policy [`SpinWait`](crate::SpinWait)) and `events` (recording and waiting
//! for events on a stream).
#![deny(unsafe_code)]

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use davinci_uapi::rings::RingOffsets;
use davinci_uapi::task::{EVENT_RECORD_SIZE, TASK_DESC_SIZE};
use davinci_uapi::*;

pub use crate::completion::TaskId;
use crate::completion::{Completion, StreamError};
use crate::context::{Context, ContextInner};
use crate::error::{Error, Result};
use crate::rings::{StreamRings, Wake};
use crate::stats::{DeviceStats, Stats};
pub(crate) use pending::{Pending, Stamp};

mod events;
mod host;
mod pending;
mod reap;
mod submit;
pub(crate) mod wait;

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
    /// Keep completions that `submit` and `synchronize` take off the event ring so that
    /// `poll` still returns them (`true`, the default), or drop them after noting errors
    /// (`false`: for callers that never poll, CUDA style). Either way the stream never stops
    /// for completions nobody polled: `submit` takes them off the ring as it needs room.
    pub keep_completions: bool,
    /// Most completions kept that way; beyond it the oldest unpolled one goes for each new
    /// one, counted by [`Stream::discarded`] (bounded, like everything; a failed task's
    /// completion is kept apart for `synchronize` regardless).
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
/// A stream is used by one thread at a time (`&mut self`): it is `Send`, not `Sync`.
/// Dropping it destroys the stream: tasks not yet executed are discarded, and the buffers
/// and events that queued tasks named are released (freed or destroyed, if nothing else holds
/// them) once the driver has destroyed it (see [`Drop`](#impl-Drop-for-Stream)).
///
/// ```
/// # fn main() -> davinci_shim::Result<()> {
/// # #[cfg(feature = "embedded")] {
/// use davinci_shim::{task, DeviceMem, Device, Region};
/// use std::time::Duration;
/// let dev = Device::embedded()?;
/// let buf = dev.alloc(256)?;
/// let mut stream = dev.create_context()?.create_stream()?;
/// // Two tasks, one publish; completions come back in order, tagged with user_data.
/// let first = stream.submit_batch(&[
///     task::fill(&buf, 0xabcd)?.with_user_data(1),
///     task::copy(Region::range(&buf, 128..192)?, Region::range(&buf, 0..64)?)?.with_user_data(2),
/// ])?;
/// stream.synchronize(Duration::from_secs(5))?;
/// let mut done = Vec::new();
/// stream.poll(&mut done);
/// assert_eq!(done.iter().map(|c| c.user_data).collect::<Vec<_>>(), [1, 2]);
/// assert_eq!((done[0].task, done[1].task), (first, first.offset(1)));
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
    discarded: u64,
    first_error: Option<Completion>,
    stats: Arc<Stats>,
    pending: Pending,
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

impl Context {
    /// Creates a stream with the default ring depths (`aclrtCreateStream` /
    /// `cudaStreamCreate`).
    pub fn create_stream(&self) -> Result<Stream> {
        self.create_stream_with(StreamOptions::default())
    }

    /// Creates a stream with explicit ring depths and options.
    pub fn create_stream_with(&self, options: StreamOptions) -> Result<Stream> {
        Stream::new(self.inner.clone(), options)
    }
}

impl Stream {
    fn new(ctx: Arc<ContextInner>, opts: StreamOptions) -> Result<Stream> {
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
        let [cmd, event, bell] = dev
            .map_stream(
                OP,
                [
                    (a.cmd_ring.mmap_offset, a.cmd_ring.mmap_size),
                    (a.event_ring.mmap_offset, a.event_ring.mmap_size),
                    (a.doorbell_offset, a.doorbell_size),
                ],
            )
            .map_err(destroy)?;
        let rings = StreamRings::new(
            cmd,
            a.cmd_ring.entries,
            event,
            a.event_ring.entries,
            bell,
            Wake::for_info(dev.info()),
        )
        .map_err(|m| destroy(Error::new(Errno::EPROTO, OP, m)))?;
        Ok(Stream {
            rings,
            ctx,
            handle,
            opts,
            backlog: VecDeque::new(),
            discarded: 0,
            first_error: None,
            stats: dev.inner.stats.register_stream(handle),
            pending: Pending::default(),
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

    /// Completions the device has published on the event ring that were not yet taken off
    /// it (by `poll`, `submit` or `synchronize`). A snapshot, for diagnostics and tests.
    pub fn completions_ready(&mut self) -> u32 {
        self.rings.available()
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

    /// Where the command ring is mapped (tests).
    #[cfg(all(test, feature = "embedded"))]
    pub(crate) fn cmd_addr(&self) -> usize {
        self.rings.cmd_addr()
    }

    /// The device's error state of this stream, if it stopped.
    pub fn error_state(&self) -> Option<StreamError> {
        self.rings.cmd_error().map(|(raw, index)| {
            // The index is free-running and 32-bit: count back from the next task's id.
            let back = self.pending.submitted as u32;
            let back = u64::from(back.wrapping_sub(index));
            StreamError::from_header(
                raw,
                index,
                TaskId(self.pending.submitted.wrapping_sub(back)),
            )
        })
    }

    /// The id the next task submitted will get.
    pub fn next_task(&self) -> TaskId {
        TaskId(self.pending.submitted)
    }

    /// Tasks submitted whose completions were not yet taken off the event ring, of every
    /// kind (NOPs too): queued, running, or completed and not yet reaped by `poll`, `submit`
    /// or `synchronize`. At most the event ring's size ([`event_entries`](Self::event_entries)):
    /// the library never lets more pile up.
    pub fn pending_tasks(&self) -> usize {
        usize::try_from(self.pending.submitted.wrapping_sub(self.pending.reaped))
            .unwrap_or(usize::MAX)
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
        // docs/abi.md 5.6: a lost device stops every stream with ENODEV; that is no stream
        // error a new stream recovers from.
        if state.and_then(|st| st.errno()) == Some(Errno::ENODEV) {
            return Error::new(
                Errno::ENODEV,
                op,
                format!(
                    "stream {:#x}: the device was lost; nothing more runs on this open: drop \
                     the device and open it again once it is back",
                    self.handle
                ),
            );
        }
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

    /// Arms `fault` on this stream (or disarms it, `None`), counted from the next task it
    /// takes; the other streams are not affected. For testing a runtime's error handling
    /// against the embedded mock device; example on [`Inject`](crate::Inject). `ENODEV` on
    /// another backend: start `davinci-mockd --inject FAULT@pid=N,streams=1`, or write the
    /// kernel module's `inject` parameter, instead.
    #[cfg(feature = "embedded")]
    pub fn inject_fault(&mut self, fault: Option<crate::Inject>) -> Result<()> {
        const OP: &str = "Stream::inject_fault";
        let Some(mock) = self.ctx.dev.mock_device() else {
            return Err(Error::new(
                Errno::ENODEV,
                OP,
                format!(
                    "{} is not the embedded mock device: use davinci-mockd --inject \
                     FAULT@pid=N,streams=1 or the kernel module's inject parameter",
                    self.ctx.dev
                ),
            ));
        };
        mock.inject(Some(self.handle), fault)
            .map_err(|e| Error::new(e.errno, OP, e.msg))
    }

    /// This stream's data-path counters so far (the same counters as [`Device::stats`], which
    /// sums them over the open's streams).
    ///
    /// [`Device::stats`]: crate::Device::stats
    pub fn stats(&self) -> DeviceStats {
        self.stats.snapshot()
    }
}

/// Destroys the stream (DESTROY_STREAM). It returns as soon as the driver has destroyed it:
/// tasks not started are discarded, never run; a task the device was executing stops at its
/// next chunk boundary (docs/abi.md 3.4), so the call takes at most one chunk's time. Then,
/// with nothing of the stream running any more, the leases and event holds its queued tasks
/// held are released (so their buffers are freed or return to their pool now, and their
/// events are destroyed, if nothing else holds them) and host callbacks not reached run with
/// `ECANCELED`.
impl Drop for Stream {
    fn drop(&mut self) {
        self.ctx.dev.inner.stats.retire_stream(&self.stats);
        // On failure the context's (or the open's) teardown releases it anyway.
        let r = self
            .ctx
            .dev
            .call_handle("DESTROY_STREAM", DRIVER_CMD_DESTROY_STREAM, self.handle);
        let why = match r {
            Ok(()) => "the stream was dropped".to_string(),
            Err(e) => format!("the stream was dropped ({e})"),
        };
        self.pending.discard(&why);
        // The ring ends and mappings are released after this (field drops).
    }
}

#[cfg(test)]
mod tests {
    /// The inode of the file mapped at `addr` (`/proc/self/maps`).
    #[cfg(feature = "embedded")]
    fn inode_at(addr: usize) -> u64 {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let (lo, hi) = f.next()?.split_once('-')?;
                let lo = usize::from_str_radix(lo, 16).ok()?;
                let hi = usize::from_str_radix(hi, 16).ok()?;
                (lo <= addr && addr < hi).then(|| f.nth(3)?.parse().ok())?
            })
            .unwrap()
    }

    /// This process's mappings of the file with inode `ino` (`/proc/self/maps`).
    #[cfg(feature = "embedded")]
    fn mappings_of(ino: u64) -> usize {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter(|l| l.split_whitespace().nth(4) == Some(ino.to_string().as_str()))
            .count()
    }

    /// On the mock device a stream's three parts lie back to back in one memfd: the shim maps
    /// them with one `mmap` (beside the device's own mapping), and the parts work (a task
    /// runs, the doorbell included: the device sleeps between the two).
    #[cfg(feature = "embedded")]
    #[test]
    fn a_mock_streams_parts_are_mapped_once() {
        let dev = crate::Device::embedded().unwrap();
        let ctx = dev.create_context().unwrap();
        let mut s = ctx.create_stream().unwrap();
        let ino = inode_at(s.cmd_addr());
        assert_eq!(
            mappings_of(ino),
            2,
            "the device's mapping and the shim's one"
        );
        for i in 0..2 {
            s.submit(&crate::task::nop().with_user_data(i)).unwrap();
            s.synchronize(std::time::Duration::from_secs(10)).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        drop(s);
        // The shim unmaps at once; the device lets go of its own mapping after DESTROY (its
        // tidier): none is left, in the end.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while mappings_of(ino) != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the stream's memory is still mapped {} times",
                mappings_of(ino)
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_can_cross_threads() {
        // Compile-time: a stream moves between threads (one user at a time, `&mut self`);
        // everything else may be shared.
        send::<super::Stream>();
        send_sync::<crate::Recorded>();
        send_sync::<crate::Task>();
        send_sync::<crate::Control>();
        send_sync::<super::TaskId>();
        send_sync::<crate::Device>();
        send_sync::<crate::Context>();
        send_sync::<crate::Event>();
        send_sync::<crate::DeviceBuffer>();
        send_sync::<crate::MemPool>();
        send_sync::<crate::PoolBuffer>();
        send_sync::<crate::Error>();
    }
}
