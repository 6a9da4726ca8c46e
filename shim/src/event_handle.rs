//! The driver's handle of an event and who holds it: the [`Event`](crate::Event), its
//! [`Recorded`](crate::Recorded) tokens and the stream entries of queued tasks naming it
//! (`stream/pending.rs`). DESTROY_EVENT runs when the last of them goes, as with
//! `cudaEventDestroy`. Below both `event.rs` and `stream/`, so neither imports the other
//! for it.
#![forbid(unsafe_code)]

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use davinci_uapi::*;

use crate::context::ContextInner;

/// What an [`Event`](crate::Event), its [`Recorded`](crate::Recorded) tokens and the stream
/// entries of queued tasks naming it share: the driver's handle, destroyed (DESTROY_EVENT)
/// when the last of them goes.
pub(crate) struct EventInner {
    pub(crate) ctx: Arc<ContextInner>,
    pub(crate) handle: u32,
    pub(crate) recorded: AtomicU64,
}

/// A hold on an event's driver handle: while one exists, the handle is not destroyed.
pub(crate) type EventHold = Arc<EventInner>;

/// Destroys the driver's handle (DESTROY_EVENT) once the [`Event`](crate::Event), every
/// [`Recorded`](crate::Recorded) token of it and every queued task naming it are gone.
impl Drop for EventInner {
    fn drop(&mut self) {
        let _ = self
            .ctx
            .dev
            .call_handle("DESTROY_EVENT", DRIVER_CMD_DESTROY_EVENT, self.handle);
    }
}
