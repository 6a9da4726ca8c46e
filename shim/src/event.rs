//! [`Event`]: a point in a stream that other streams (and the host) can wait for; made by
//! [`Context::create_event`]. Recording one on a stream and making a stream wait for one
//! are in `stream/events.rs` ([`Event::record`], [`Stream::wait_event`](crate::Stream::wait_event)).
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use davinci_uapi::*;

use crate::completion::TaskId;
use crate::context::{Context, ContextInner};
use crate::error::{Error, Result};
use crate::event_handle::{EventHold, EventInner};
use crate::stream::Stamp;

/// An event (`aclrtEvent` / `cudaEvent_t`). `Send + Sync`: record it from one thread, wait
/// for it from another.
///
/// On the device an event is a monotonically increasing 64-bit value. The shim keeps a
/// counter per event: [`record`](Self::record) submits `EVENT_RECORD(++n)` on a stream and
/// returns a [`Recorded`] token naming `n`. [`Stream::wait_event`](crate::Stream::wait_event)
/// / [`synchronize`](Self::synchronize) / [`query`](Self::query) wait for the value of the
/// latest record, so "wait for the last record" means what it means in CUDA; the token's
/// waits ([`Stream::wait_recorded`](crate::Stream::wait_recorded),
/// [`Recorded::synchronize`]) wait for exactly its record, however often the event was
/// recorded since, and [`Recorded::elapsed`] times two records on the device's clock.
/// Events work between streams of the same context only.
///
/// **Lifetime** (`cudaEventDestroy`'s rule): dropping an `Event` does not destroy it under
/// work that names it. Its driver handle is destroyed (DESTROY_EVENT) only once the `Event`,
/// every [`Recorded`] token of it and every queued EVENT_RECORD/EVENT_WAIT task naming it
/// (held by its stream until the task's completion is reaped, or the stream is dropped) are
/// gone. So a temporary event is fine:
/// `consumer.wait_recorded(&ctx.create_event()?.record(&mut producer)?)` orders the two
/// streams, and the handle goes once both tasks have run and been reaped.
///
/// ```
/// # fn main() -> davinci_shim::Result<()> {
/// # #[cfg(feature = "embedded")] {
/// use davinci_shim::{task, DeviceMem, Device};
/// use std::time::Duration;
/// let dev = Device::embedded()?;
/// let ctx = dev.create_context()?;
/// let (mut producer, mut consumer) = (ctx.create_stream()?, ctx.create_stream()?);
/// let (src, dst) = (dev.alloc(64)?, dev.alloc(64)?);
/// let ready = ctx.create_event()?;
/// producer.submit(&task::fill(&src, 42)?)?;
/// let filled = ready.record(&mut producer)?;
/// assert_eq!(filled.value(), 1);
/// // The consumer's copy runs only after the producer's fill, on the device.
/// consumer.wait_recorded(&filled)?;
/// consumer.submit(&task::copy(&dst, &src)?)?;
/// consumer.synchronize(Duration::from_secs(5))?;
/// assert!(ready.query()?);
/// assert_eq!(dst.read_vec::<u32>(0, 16)?, vec![42; 16]);
/// # }
/// # Ok(()) }
/// ```
pub struct Event {
    inner: Arc<EventInner>,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("handle", &self.handle())
            .field("recorded", &self.recorded())
            .finish()
    }
}

impl Context {
    /// Creates an event (`aclrtCreateEvent` / `cudaEventCreate`).
    pub fn create_event(&self) -> Result<Event> {
        Event::new(self.inner.clone())
    }
}

impl Event {
    fn new(ctx: Arc<ContextInner>) -> Result<Event> {
        let mut a = CreateEventArgs {
            ctx: ctx.handle,
            ..Default::default()
        };
        ctx.dev
            .call("CREATE_EVENT", DRIVER_CMD_CREATE_EVENT, &mut a)?;
        Ok(Event {
            inner: Arc::new(EventInner {
                ctx,
                handle: a.handle,
                recorded: AtomicU64::new(0),
            }),
        })
    }

    /// The driver's handle of this event.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// The value of the latest record handed to a stream (0: never recorded).
    pub fn recorded(&self) -> u64 {
        self.inner.recorded.load(Ordering::Acquire)
    }

    /// The context the event belongs to (events work between its streams only).
    pub(crate) fn context(&self) -> &Arc<ContextInner> {
        &self.inner.ctx
    }

    /// A hold on the driver's handle, for a queued task naming it (kept by its stream until
    /// the task is reaped).
    pub(crate) fn hold(&self) -> EventHold {
        self.inner.clone()
    }

    /// Takes the value of a new record (the latest one plus one).
    pub(crate) fn next_record(&self) -> u64 {
        self.inner
            .recorded
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1)
    }

    /// A record of `value` did not reach its stream: gives the value back unless another
    /// record took a later one.
    pub(crate) fn unrecord(&self, value: u64) {
        let _ = self.inner.recorded.compare_exchange(
            value,
            value.wrapping_sub(1),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    fn wait(&self, op: &'static str, value: u64, timeout_ns: u64) -> Result<WaitEventArgs> {
        wait_value(self.context(), self.handle(), op, value, timeout_ns)
    }

    /// `EINVAL` for a value no record of this event was given (a wait for it could only time
    /// out).
    fn check_recorded(&self, op: &'static str, value: u64) -> Result<()> {
        let latest = self.recorded();
        if value > latest {
            return Err(Error::new(
                Errno::EINVAL,
                op,
                format!(
                    "event {:#x} was never recorded with value {value} (its latest record is \
                     {latest}): a wait for it could only time out",
                    self.handle()
                ),
            ));
        }
        Ok(())
    }

    /// Blocks until the event reaches `value` on the device (a value a [`record`](Self::record)
    /// returned: [`Recorded::value`]), at most `timeout`. Errors as
    /// [`synchronize`](Self::synchronize); `EINVAL` for a value never recorded.
    pub fn synchronize_value(&self, value: u64, timeout: Duration) -> Result<()> {
        const OP: &str = "Event::synchronize_value";
        self.check_recorded(OP, value)?;
        sync_value(self.context(), self.handle(), OP, value, timeout)
    }
}

/// WAIT_EVENT on event `handle` for `value`. Says which event, which value and what it
/// reached when the wait times out; why, when the recording stream stopped.
pub(crate) fn wait_value(
    ctx: &ContextInner,
    handle: u32,
    op: &'static str,
    value: u64,
    timeout_ns: u64,
) -> Result<WaitEventArgs> {
    {
        let mut a = WaitEventArgs {
            kind: WaitKind::Event as u32,
            handle,
            value,
            timeout_ns,
            ..Default::default()
        };
        match ctx.dev.call_wait(op, &mut a) {
            Ok(()) => Ok(a),
            Err(e) if e.is(Errno::ETIMEDOUT) => Err(Error::new(
                Errno::ETIMEDOUT,
                op,
                format!(
                    "event {handle:#x} did not reach value {value} within {}: it is at {} \
                     (no stream has run the record of {value} yet)",
                    crate::stream::wait::Secs(Duration::from_nanos(timeout_ns)),
                    a.current
                ),
            )),
            // The stream that was to record the value stopped (abi.md 8): say why it did.
            Err(e) if e.is(Errno::EIO) => {
                let why = match Errno::from_code(a.status as i32) {
                    Some(s) => format!("{}: {}", s.name(), s.describe()),
                    None => format!("status {}", a.status),
                };
                Err(Error::new(
                    Errno::EIO,
                    op,
                    format!(
                        "event {handle:#x} will not reach its record {}: the stream that was to \
                         record it was stopped by the device ({why}); see that stream's error",
                        a.value
                    ),
                ))
            }
            Err(e) => Err(e),
        }
    }
}

/// A blocking wait for `value` (timeout 0: one look).
pub(crate) fn sync_value(
    ctx: &ContextInner,
    handle: u32,
    op: &'static str,
    value: u64,
    timeout: Duration,
) -> Result<()> {
    let t = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    let _span = crate::trace::wait_event(&ctx.dev, handle, value);
    match wait_value(ctx, handle, op, value, t) {
        Ok(_) => Ok(()),
        Err(e) if e.is(Errno::EAGAIN) => {
            // Timeout 0: looked once.
            let mut a = WaitEventArgs {
                kind: WaitKind::Event as u32,
                handle,
                ..Default::default()
            };
            let _ = ctx.dev.call(op, DRIVER_CMD_WAIT_EVENT, &mut a);
            Err(Error::new(
                Errno::ETIMEDOUT,
                op,
                format!(
                    "event {handle:#x} has not reached value {value} (timeout 0): it is at {}",
                    a.current
                ),
            ))
        }
        Err(e) => Err(e),
    }
}

impl Event {
    /// Blocks until the latest record has happened on the device (`aclrtSynchronizeEvent`),
    /// at most `timeout` (`ETIMEDOUT`, saying the value waited for and the value reached).
    /// Fails at once with `EIO` if the stream that was to record it has been stopped by the
    /// device (or stops while this waits), as `cudaEventSynchronize` returns the stream's
    /// error; with `EINTR` if a signal handler (installed without `SA_RESTART`) ran on this
    /// thread meanwhile (docs/abi.md 6.4).
    ///
    /// "Latest" is read now; to wait for one particular record, use
    /// [`Recorded::synchronize`] or [`synchronize_value`](Self::synchronize_value).
    pub fn synchronize(&self, timeout: Duration) -> Result<()> {
        sync_value(
            self.context(),
            self.handle(),
            "Event::synchronize",
            self.recorded(),
            timeout,
        )
    }

    /// Whether the latest record has happened (`aclrtQueryEventStatus` / `cudaEventQuery`),
    /// without blocking. `EIO` if it never will: the stream that was to record it has been
    /// stopped by the device.
    pub fn query(&self) -> Result<bool> {
        match self.wait("Event::query", self.recorded(), 0) {
            Ok(_) => Ok(true),
            Err(e) if e.is(Errno::EAGAIN) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The event's value on the device now.
    pub fn value(&self) -> Result<u64> {
        let mut a = WaitEventArgs {
            kind: WaitKind::Event as u32,
            handle: self.handle(),
            value: 0,
            timeout_ns: 0,
            ..Default::default()
        };
        self.context()
            .dev
            .call("Event::value", DRIVER_CMD_WAIT_EVENT, &mut a)?;
        Ok(a.current)
    }
}

/// One record of an [`Event`]: the value [`Event::record`] gave it, on which stream, and
/// (once the stream reaped the record's completion) the device time it happened. Cheap to
/// clone; `Send + Sync`. Keeps its event (and so the event's context) alive: its waits and
/// [`elapsed`](Self::elapsed) work after the [`Event`] was dropped, and the event's driver
/// handle is destroyed only once the `Event`, every token and every queued task naming it
/// are gone.
///
/// ```
/// # fn main() -> davinci_shim::Result<()> {
/// # #[cfg(feature = "embedded")] {
/// use davinci_shim::{task, Device, Recorded};
/// use std::time::Duration;
/// let dev = Device::embedded()?;
/// let ctx = dev.create_context()?;
/// let mut s = ctx.create_stream()?;
/// let (start, end) = (ctx.create_event()?, ctx.create_event()?);
/// let buf = dev.alloc(1 << 20)?;
/// let t0 = start.record(&mut s)?;
/// s.submit(&task::fill(&buf, 7)?)?;
/// let t1 = end.record(&mut s)?;
/// t1.synchronize(Duration::from_secs(5))?; // the host waits for exactly this record
/// s.synchronize(Duration::from_secs(5))?;  // reaps the records' completions (their times)
/// let took = Recorded::elapsed(&t0, &t1)?; // cudaEventElapsedTime
/// assert!(took > Duration::ZERO);
/// # }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Recorded {
    event: EventHold,
    value: u64,
    stream: u32,
    task: TaskId,
    stamp: Stamp,
}

impl fmt::Debug for Recorded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorded")
            .field("event", &self.event.handle)
            .field("value", &self.value)
            .field("stream", &self.stream)
            .field("task", &self.task)
            .field("timestamp_ns", &self.timestamp_ns())
            .finish()
    }
}

impl Recorded {
    pub(crate) fn new(event: &Event, value: u64, stream: u32, task: TaskId, stamp: Stamp) -> Self {
        Recorded {
            event: event.hold(),
            value,
            stream,
            task,
            stamp,
        }
    }

    /// The value this record sets the event to.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// The handle of the event recorded.
    pub fn event_handle(&self) -> u32 {
        self.event.handle
    }

    /// The handle of the stream it was recorded on.
    pub fn stream_handle(&self) -> u32 {
        self.stream
    }

    /// The EVENT_RECORD task's id in that stream.
    pub fn task(&self) -> TaskId {
        self.task
    }

    pub(crate) fn context(&self) -> &Arc<ContextInner> {
        &self.event.ctx
    }

    /// A hold on its event's driver handle (see [`Event::hold`]).
    pub(crate) fn hold(&self) -> EventHold {
        self.event.clone()
    }

    /// The device time (ns) the record happened, once its stream has reaped its completion
    /// (`poll`, `synchronize`); `None` before, or if the record failed.
    pub fn timestamp_ns(&self) -> Option<u64> {
        self.stamp.get().filter(|(_, st)| *st == 0).map(|(t, _)| *t)
    }

    /// Blocks until the event reached this record's value (whatever was recorded since), at
    /// most `timeout`. Errors as [`Event::synchronize`].
    pub fn synchronize(&self, timeout: Duration) -> Result<()> {
        sync_value(
            self.context(),
            self.event.handle,
            "Recorded::synchronize",
            self.value,
            timeout,
        )
    }

    /// Whether the event reached this record's value, without blocking.
    pub fn query(&self) -> Result<bool> {
        match wait_value(
            self.context(),
            self.event.handle,
            "Recorded::query",
            self.value,
            0,
        ) {
            Ok(_) => Ok(true),
            Err(e) if e.is(Errno::EAGAIN) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Device time from `start` to `end` (`cudaEventElapsedTime`, `aclrtEventElapsedTime`),
    /// from the timestamps of their completions: exactly `end`'s completion `timestamp_ns`
    /// minus `start`'s. Both must have completed and been reaped by their streams (`poll`,
    /// `synchronize`): else `EAGAIN` naming the one that was not. `EINVAL` if `end` happened
    /// before `start`, or if they are of different devices; `EIO` if a record failed.
    pub fn elapsed(start: &Recorded, end: &Recorded) -> Result<Duration> {
        const OP: &str = "Recorded::elapsed";
        if !Arc::ptr_eq(&start.context().dev.inner, &end.context().dev.inner) {
            return Err(Error::new(
                Errno::EINVAL,
                OP,
                "the records are of different device opens: their clocks do not compare",
            ));
        }
        let time = |r: &Recorded, which: &str| -> Result<u64> {
            match r.stamp.get() {
                Some(&(t, 0)) => Ok(t),
                Some(&(_, st)) => Err(Error::new(
                    Errno::EIO,
                    OP,
                    format!(
                        "the {which} record (event {:#x} value {}) failed with status {st}",
                        r.event.handle, r.value
                    ),
                )),
                None => Err(Error::new(
                    Errno::EAGAIN,
                    OP,
                    format!(
                        "the {which} record (event {:#x} value {}, {} of stream {:#x}) has no \
                         time yet: it has not completed, or its stream has not reaped its \
                         completion (Stream::synchronize or Stream::poll)",
                        r.event.handle, r.value, r.task, r.stream
                    ),
                )),
            }
        };
        let (t0, t1) = (time(start, "start")?, time(end, "end")?);
        if t1 < t0 {
            return Err(Error::new(
                Errno::EINVAL,
                OP,
                format!(
                    "the end record happened {} ns before the start record",
                    t0 - t1
                ),
            ));
        }
        Ok(Duration::from_nanos(t1 - t0))
    }
}
