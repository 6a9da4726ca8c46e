//! Events shared between clients, across processes (ABI 1.5, `Features::SHARED_EVENTS`;
//! `cudaIpcGetEventHandle` / `cudaIpcOpenEventHandle`, HCCL's notify): [`Event::export`]
//! names an event by a token; [`Context::import_event`] makes the token an [`ImportedEvent`]
//! whose waits, on a stream ([`Stream::wait_imported`]) and on the host
//! ([`ImportedEvent::synchronize_value`]), are for the exporter's records. A producer records
//! its event once per item (values 1, 2, 3, ...) and the consumer's stream waits for item
//! `n` by value `n`: the hand-off between the two processes' streams happens on the device,
//! with no host round trip.
//!
//! Used across processes on `davinci-mockd` and the kernel module (the embedded device is one
//! process's); `tests/tests/conformance/shared_events.rs` shows the calls.
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use davinci_uapi::*;

use crate::context::Context;
use crate::error::Result;
use crate::event::{sync_value, wait_value, Event};
use crate::event_handle::EventInner;
use crate::memory::{ExportTo, ExportToken};

impl Event {
    /// Makes this event importable by other clients of the device, as `to` says
    /// (EXPORT_EVENT): the token another process passes to [`Context::import_event`]. Its
    /// imports wait for this event's records; the event's destruction (its last holder gone,
    /// or this open's close) ends their waits with `ECANCELED`. Exporting again with the same
    /// grant returns the same token.
    ///
    /// # Errors
    /// `EBUSY` exported already with another grant; `ENOTTY` a driver before ABI 1.5 (no
    /// `Features::SHARED_EVENTS`).
    pub fn export(&self, to: ExportTo) -> Result<ExportToken> {
        let (uid, client) = to.grant();
        let mut a = ExportEventArgs {
            handle: self.handle(),
            uid,
            client,
            ..Default::default()
        };
        self.context()
            .dev
            .call("EXPORT_EVENT", DRIVER_CMD_EXPORT_EVENT, &mut a)?;
        Ok(ExportToken(a.token))
    }
}

/// Another client's event, imported into a context of this one ([`Context::import_event`]):
/// its streams ([`Stream::wait_imported`](crate::Stream::wait_imported)) and this host ([`synchronize_value`](Self::synchronize_value))
/// wait for the exporter's values; only the exporter records it. When the exporter destroys
/// the event (or its process ends), every wait on the import ends with `ECANCELED`. The
/// import is destroyed (DESTROY_EVENT) once this handle and every queued wait naming it are
/// gone.
pub struct ImportedEvent {
    inner: Arc<EventInner>,
}

impl fmt::Debug for ImportedEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportedEvent")
            .field("handle", &self.inner.handle)
            .finish()
    }
}

impl Context {
    /// Imports the event `token` names into this context (IMPORT_EVENT).
    ///
    /// # Errors
    /// `ENOENT` the token names no event export this client may import (unknown, destroyed,
    /// granted to another user or client); `EBUSY` this client imported it already; `ENOSPC`
    /// the export has 8 imports, or the event quota is reached; `ENOTTY` a driver before
    /// ABI 1.5.
    pub fn import_event(&self, token: ExportToken) -> Result<ImportedEvent> {
        let mut a = ImportEventArgs {
            token: token.0,
            ctx: self.inner.handle,
            ..Default::default()
        };
        self.inner
            .dev
            .call("IMPORT_EVENT", DRIVER_CMD_IMPORT_EVENT, &mut a)?;
        Ok(ImportedEvent {
            inner: Arc::new(EventInner {
                ctx: self.inner.clone(),
                handle: a.handle,
                recorded: AtomicU64::new(0),
            }),
        })
    }
}

impl ImportedEvent {
    /// The import's driver handle (this client's).
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// The context it was imported into.
    pub(crate) fn context(&self) -> &Arc<crate::context::ContextInner> {
        &self.inner.ctx
    }

    /// A hold on the import's handle, for a queued wait naming it.
    pub(crate) fn hold(&self) -> crate::event_handle::EventHold {
        self.inner.clone()
    }

    /// The exporter's value now.
    ///
    /// # Errors
    /// `ECANCELED` once the exporter destroyed the event.
    pub fn value(&self) -> Result<u64> {
        wait_value(&self.inner.ctx, self.handle(), "ImportedEvent::value", 0, 0).map(|a| a.current)
    }

    /// Blocks until the exporter's event reaches `value` on the device, at most `timeout`.
    ///
    /// # Errors
    /// `ETIMEDOUT` (saying the value reached); `ECANCELED` the exporter destroyed the event
    /// (or ended) before; `EIO` the exporter's stream that was to record it was stopped.
    pub fn synchronize_value(&self, value: u64, timeout: Duration) -> Result<()> {
        sync_value(
            &self.inner.ctx,
            self.handle(),
            "ImportedEvent::synchronize_value",
            value,
            timeout,
        )
    }

    /// Whether the exporter's event has reached `value`, without blocking.
    ///
    /// # Errors
    /// As [`synchronize_value`](Self::synchronize_value), but never `ETIMEDOUT`.
    pub fn query_value(&self, value: u64) -> Result<bool> {
        match wait_value(
            &self.inner.ctx,
            self.handle(),
            "ImportedEvent::query",
            value,
            0,
        ) {
            Ok(_) => Ok(true),
            Err(e) if e.is(Errno::EAGAIN) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
