//! Events on a [`Stream`]: [`Event::record`] submits EVENT_RECORD, [`Stream::wait_event`]
//! submits EVENT_WAIT; both only between a context's own streams and events.
#![forbid(unsafe_code)]

use std::sync::Arc;

use davinci_uapi::*;

use super::Stream;
use crate::error::{Error, Result};
use crate::event::Event;

impl Stream {
    /// Makes this stream wait (on the device) until `event` reaches the value of its latest
    /// [`record`](Event::record) (`aclrtStreamWaitEvent` / `cudaStreamWaitEvent`). Nothing is
    /// waited for if the event was never recorded. `user_data` of the task is 0.
    pub fn wait_event(&mut self, event: &Event) -> Result<()> {
        self.wait_event_tagged(event, 0)
    }

    /// Like [`wait_event`](Self::wait_event), with the task's `user_data`.
    pub fn wait_event_tagged(&mut self, event: &Event, user_data: u64) -> Result<()> {
        check_context(event, self, "Stream::wait_event")?;
        self.submit(&TaskDesc::event_wait(
            user_data,
            event.handle(),
            event.recorded(),
        ))
    }
}

impl Event {
    /// Records the event on `stream` (`aclrtRecordEvent` / `cudaEventRecord`): once the
    /// stream reaches this point, the event's value becomes the returned one. The task's
    /// `user_data` is 0.
    pub fn record(&self, stream: &mut Stream) -> Result<u64> {
        self.record_tagged(stream, 0)
    }

    /// Like [`record`](Self::record), with the task's `user_data`.
    pub fn record_tagged(&self, stream: &mut Stream, user_data: u64) -> Result<u64> {
        check_context(self, stream, "Event::record")?;
        let value = self.next_record();
        if let Err(e) = stream.submit(&TaskDesc::event_record(user_data, self.handle(), value)) {
            // Not recorded: give the value back unless another record took a later one.
            self.unrecord(value);
            return Err(e);
        }
        Ok(value)
    }
}

/// `EINVAL` unless `event` and `stream` belong to the same context.
fn check_context(event: &Event, stream: &Stream, op: &'static str) -> Result<()> {
    if Arc::ptr_eq(&stream.ctx, event.context()) {
        Ok(())
    } else {
        Err(Error::new(
            Errno::EINVAL,
            op,
            format!(
                "event {:#x} belongs to context {:#x}, stream {:#x} to context {:#x}: \
                 events work within one context",
                event.handle(),
                event.context().handle,
                stream.handle(),
                stream.context_handle()
            ),
        ))
    }
}
