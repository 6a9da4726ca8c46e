//! [`Event`]: a point in a stream that other streams (and the host) can wait for; made by
//! [`Context::create_event`]. Recording one on a stream and making a stream wait for one
//! are in `stream/events.rs` ([`Event::record`], [`Stream::wait_event`](crate::Stream::wait_event)).
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use davinci_uapi::*;

use crate::context::{Context, ContextInner};
use crate::error::{Error, Result};

/// An event (`aclrtEvent` / `cudaEvent_t`).
///
/// On the device an event is a monotonically increasing 64-bit value. The shim keeps a
/// counter per event: [`record`](Self::record) submits `EVENT_RECORD(++n)` on a stream, and
/// [`Stream::wait_event`](crate::Stream::wait_event) / [`synchronize`](Self::synchronize) / [`query`](Self::query) wait
/// for the value of the latest record, so "wait for the last record" means what it means in
/// CUDA. Events work between streams of the same context only.
///
/// ```
/// # fn main() -> davinci_shim::Result<()> {
/// # #[cfg(feature = "embedded")] {
/// use davinci_shim::{DeviceMem, Device, TaskDesc};
/// use std::time::Duration;
/// let dev = Device::embedded()?;
/// let ctx = dev.create_context()?;
/// let (mut producer, mut consumer) = (ctx.create_stream()?, ctx.create_stream()?);
/// let (src, dst) = (dev.alloc(64)?, dev.alloc(64)?);
/// let ready = ctx.create_event()?;
/// producer.submit(&TaskDesc::fill(1, src.dev_addr(), 64, 42))?;
/// ready.record(&mut producer)?;
/// // The consumer's copy runs only after the producer's fill, on the device.
/// consumer.wait_event(&ready)?;
/// consumer.submit(&TaskDesc::copy(2, dst.dev_addr(), src.dev_addr(), 64))?;
/// consumer.synchronize(Duration::from_secs(5))?;
/// assert!(ready.query()?);
/// assert_eq!(dst.read_vec::<u32>(0, 16)?, vec![42; 16]);
/// # }
/// # Ok(()) }
/// ```
pub struct Event {
    ctx: Arc<ContextInner>,
    handle: u32,
    recorded: AtomicU64,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("handle", &self.handle)
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
            ctx,
            handle: a.handle,
            recorded: AtomicU64::new(0),
        })
    }

    /// The driver's handle of this event.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The value of the latest record handed to a stream (0: never recorded).
    pub fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Acquire)
    }

    /// The context the event belongs to (events work between its streams only).
    pub(crate) fn context(&self) -> &Arc<ContextInner> {
        &self.ctx
    }

    /// Takes the value of a new record (the latest one plus one).
    pub(crate) fn next_record(&self) -> u64 {
        self.recorded.fetch_add(1, Ordering::AcqRel).wrapping_add(1)
    }

    /// A record of `value` did not reach its stream: gives the value back unless another
    /// record took a later one.
    pub(crate) fn unrecord(&self, value: u64) {
        let _ = self.recorded.compare_exchange(
            value,
            value.wrapping_sub(1),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    fn wait(&self, op: &'static str, timeout_ns: u64) -> Result<WaitEventArgs> {
        let mut a = WaitEventArgs {
            kind: WaitKind::Event as u32,
            handle: self.handle,
            value: self.recorded(),
            timeout_ns,
            ..Default::default()
        };
        match self.ctx.dev.call_wait(op, &mut a) {
            Ok(()) => Ok(a),
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
                        "event {:#x} will not reach its record {}: the stream that was to record \
                         it was stopped by the device ({why}); see that stream's error",
                        self.handle, a.value
                    ),
                ))
            }
            Err(e) => Err(e),
        }
    }

    /// Blocks until the latest record has happened on the device (`aclrtSynchronizeEvent`),
    /// at most `timeout` (`ETIMEDOUT`). Fails at once with `EIO` if the stream that was to
    /// record it has been stopped by the device (or stops while this waits), as
    /// `cudaEventSynchronize` returns the stream's error.
    pub fn synchronize(&self, timeout: Duration) -> Result<()> {
        let t = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        if t == 0 {
            return match self.query()? {
                true => Ok(()),
                false => Err(Error::new(
                    Errno::ETIMEDOUT,
                    "Event::synchronize",
                    "not reached (timeout 0)",
                )),
            };
        }
        self.wait("Event::synchronize", t).map(|_| ())
    }

    /// Whether the latest record has happened (`aclrtQueryEventStatus` / `cudaEventQuery`),
    /// without blocking. `EIO` if it never will: the stream that was to record it has been
    /// stopped by the device.
    pub fn query(&self) -> Result<bool> {
        match self.wait("Event::query", 0) {
            Ok(_) => Ok(true),
            Err(e) if e.is(Errno::EAGAIN) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The event's value on the device now.
    pub fn value(&self) -> Result<u64> {
        let mut a = WaitEventArgs {
            kind: WaitKind::Event as u32,
            handle: self.handle,
            value: 0,
            timeout_ns: 0,
            ..Default::default()
        };
        self.ctx
            .dev
            .call("Event::value", DRIVER_CMD_WAIT_EVENT, &mut a)?;
        Ok(a.current)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self
            .ctx
            .dev
            .call_handle("DESTROY_EVENT", DRIVER_CMD_DESTROY_EVENT, self.handle);
    }
}
