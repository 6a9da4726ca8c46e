//! Events on a [`Stream`]: [`Event::record`] submits EVENT_RECORD and returns the value it
//! records as a [`Recorded`] token; [`Stream::wait_event`] and [`Stream::wait_recorded`]
//! submit EVENT_WAIT; all only between a context's own streams and events.
#![forbid(unsafe_code)]

use std::sync::{Arc, OnceLock};

use davinci_uapi::*;

use super::Stream;
use crate::error::{Error, Result};
use crate::event::{Event, Recorded};
use crate::task::Task;

impl Stream {
    /// Makes this stream wait (on the device) until `event` reaches the value of its latest
    /// [`record`](Event::record) (`aclrtStreamWaitEvent` / `cudaStreamWaitEvent`). Nothing is
    /// waited for if the event was never recorded. `user_data` of the task is 0.
    ///
    /// "Latest" is read now: if another thread records the event again before this call, the
    /// stream waits for that later record. To wait for one particular record, use
    /// [`wait_recorded`](Self::wait_recorded) with its token.
    pub fn wait_event(&mut self, event: &Event) -> Result<()> {
        self.wait_event_tagged(event, 0)
    }

    /// Like [`wait_event`](Self::wait_event), with the task's `user_data`.
    pub fn wait_event_tagged(&mut self, event: &Event, user_data: u64) -> Result<()> {
        check_context(event.context(), event.handle(), self, "Stream::wait_event")?;
        self.submit(&Task::bare(TaskDesc::event_wait(
            user_data,
            event.handle(),
            event.recorded(),
        )))?;
        // The event's handle lives until the wait is reaped, however soon `event` is dropped.
        self.pending.hold_last(event.hold());
        Ok(())
    }

    /// Makes this stream wait (on the device) until the event of `record` reaches its value:
    /// exactly that record, whatever was recorded since (a later record only raises the
    /// value further, so the wait never waits for more than it names).
    ///
    /// ```
    /// # fn main() -> davinci_shim::Result<()> {
    /// # #[cfg(feature = "embedded")] {
    /// use davinci_shim::{task, Device, DeviceMem};
    /// use std::time::Duration;
    /// let dev = Device::embedded()?;
    /// let ctx = dev.create_context()?;
    /// let (mut a, mut b) = (ctx.create_stream()?, ctx.create_stream()?);
    /// let (x, y) = (dev.alloc(64)?, dev.alloc(64)?);
    /// let ev = ctx.create_event()?;
    /// a.submit(&task::fill(&x, 1)?)?;
    /// let first = ev.record(&mut a)?;   // value 1
    /// let _second = ev.record(&mut a)?; // value 2: does not move `first`
    /// b.wait_recorded(&first)?;         // waits for value 1 only
    /// b.submit(&task::copy(&y, &x)?)?;
    /// b.synchronize(Duration::from_secs(5))?;
    /// assert_eq!((first.value(), y.read_vec::<u32>(0, 1)?[0]), (1, 1));
    /// # }
    /// # Ok(()) }
    /// ```
    pub fn wait_recorded(&mut self, record: &Recorded) -> Result<()> {
        check_context(
            record.context(),
            record.event_handle(),
            self,
            "Stream::wait_recorded",
        )?;
        self.submit(&Task::bare(TaskDesc::event_wait(
            0,
            record.event_handle(),
            record.value(),
        )))?;
        self.pending.hold_last(record.hold());
        Ok(())
    }
}

impl Stream {
    /// Makes this stream wait (on the device) until `event` reaches `value`, a value that
    /// may not be recorded yet: a timeline semaphore's wait, for a producer that records
    /// `value` later from another stream of the context (a proxy that finishes host work,
    /// as davinci-ccl's stream-ordered calls do). The caller owns the promise that some
    /// record reaches `value`: until then the stream's later tasks do not run (destroying
    /// the stream ends the wait; the stream holds the event until then).
    ///
    /// # Errors
    /// `EINVAL` the event belongs to another context; the submit's errors.
    pub fn wait_value(&mut self, event: &Event, value: u64) -> Result<()> {
        check_context(event.context(), event.handle(), self, "Stream::wait_value")?;
        self.submit(&Task::bare(TaskDesc::event_wait(0, event.handle(), value)))?;
        self.pending.hold_last(event.hold());
        Ok(())
    }

    /// Makes this stream wait (on the device) until the imported event reaches `value`
    /// (`cudaStreamWaitEvent` on an IPC event; [`crate::ImportedEvent`]): the consumer's side
    /// of a hand-off between processes. If the exporter destroys the event first, the wait
    /// completes with `ECANCELED` and the stream goes on (its later tasks run: check the
    /// completion).
    ///
    /// # Errors
    /// `EINVAL` the import belongs to another context; the submit's errors.
    pub fn wait_imported(&mut self, event: &crate::ImportedEvent, value: u64) -> Result<()> {
        check_context(
            event.context(),
            event.handle(),
            self,
            "Stream::wait_imported",
        )?;
        self.submit(&Task::bare(TaskDesc::event_wait(0, event.handle(), value)))?;
        self.pending.hold_last(event.hold());
        Ok(())
    }
}

impl Event {
    /// Records the event on `stream` (`aclrtRecordEvent` / `cudaEventRecord`): once the
    /// stream reaches this point, the event's value becomes the returned one. The token
    /// names that value: wait for it ([`Stream::wait_recorded`], [`Recorded::synchronize`])
    /// or time between two of them ([`Recorded::elapsed`]). The task's `user_data` is 0.
    pub fn record(&self, stream: &mut Stream) -> Result<Recorded> {
        self.record_tagged(stream, 0)
    }

    /// Like [`record`](Self::record), with the task's `user_data`.
    pub fn record_tagged(&self, stream: &mut Stream, user_data: u64) -> Result<Recorded> {
        check_context(self.context(), self.handle(), stream, "Event::record")?;
        let value = self.next_record();
        let task = match stream.submit(&Task::bare(TaskDesc::event_record(
            user_data,
            self.handle(),
            value,
        ))) {
            Ok(id) => id,
            Err(e) => {
                // Not recorded: give the value back unless another record took a later one.
                self.unrecord(value);
                return Err(e);
            }
        };
        let stamp = Arc::new(OnceLock::new());
        // The event's handle lives until the record is reaped, however soon `self` and the
        // token are dropped.
        stream.pending.record_last(self.hold(), stamp.clone());
        Ok(Recorded::new(self, value, stream.handle(), task, stamp))
    }
}

/// `EINVAL` unless the event (of context `ctx`) and `stream` belong to the same context.
fn check_context(
    ctx: &Arc<crate::context::ContextInner>,
    event: u32,
    stream: &Stream,
    op: &'static str,
) -> Result<()> {
    if Arc::ptr_eq(&stream.ctx, ctx) {
        Ok(())
    } else {
        Err(Error::new(
            Errno::EINVAL,
            op,
            format!(
                "event {event:#x} belongs to context {:#x}, stream {:#x} to context {:#x}: \
                 events work within one context",
                ctx.handle,
                stream.handle(),
                stream.context_handle()
            ),
        ))
    }
}
