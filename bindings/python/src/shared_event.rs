//! Events shared between clients for Python (ABI 1.5): `ImportedEvent`, what
//! `Context.import_event` makes of another process's `Event.export()` token; the token's
//! parsing is shared with `Device.import_buffer`'s.
#![forbid(unsafe_code)]

use std::sync::Arc;

use davinci_shim::{self as shim, ExportToken};
use pyo3::prelude::*;

use crate::base::{type_error, type_name, wait_sliced, OrRaise, Slot};

/// An export token from Python: `export()`'s string (16 hex digits) or the integer.
pub(crate) fn token_arg(op: &'static str, token: &Bound<'_, PyAny>) -> PyResult<ExportToken> {
    if let Ok(s) = token.extract::<String>() {
        s.parse::<ExportToken>().or_raise()
    } else if let Ok(v) = token.extract::<u64>() {
        Ok(ExportToken(v))
    } else {
        Err(type_error(
            op,
            "token",
            format!(
                "must be export()'s string (16 hex digits) or an int, not {}",
                type_name(token)
            ),
        ))
    }
}

/// Another process's event, imported into a context (`Context.import_event`): its streams
/// (`Stream.wait_imported`) and this host (`synchronize`) wait for the exporter's values;
/// only the exporter records it. Once the exporter destroys the event (or ends), every wait
/// raises an ``ECANCELED`` `DavinciError`.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct ImportedEvent {
    inner: Slot<Arc<shim::ImportedEvent>>,
}

impl ImportedEvent {
    pub(crate) fn new(ev: shim::ImportedEvent) -> ImportedEvent {
        ImportedEvent {
            inner: Slot::new(Arc::new(ev)),
        }
    }

    pub(crate) fn get(&self, op: &'static str) -> PyResult<Arc<shim::ImportedEvent>> {
        self.inner.get(op, "imported event")
    }
}

#[pymethods]
impl ImportedEvent {
    /// The import's handle (this client's).
    #[getter]
    fn handle(&self) -> PyResult<u32> {
        Ok(self.get("ImportedEvent.handle")?.handle())
    }

    /// The exporter's value now.
    fn value(&self, py: Python<'_>) -> PyResult<u64> {
        let ev = self.get("ImportedEvent.value")?;
        py.detach(|| ev.value()).or_raise()
    }

    /// Waits on the host until the exporter's event reaches `value` (`timeout` seconds,
    /// None: no limit). Ctrl-C interrupts it.
    #[pyo3(signature = (value, timeout = None))]
    fn synchronize(&self, py: Python<'_>, value: u64, timeout: Option<f64>) -> PyResult<()> {
        const OP: &str = "ImportedEvent.synchronize";
        let ev = self.get(OP)?;
        let t = crate::base::timeout(OP, timeout)?;
        wait_sliced(py, OP, t, |slice| ev.synchronize_value(value, slice))
    }

    /// Whether the exporter's event has reached `value` (no wait).
    fn query(&self, py: Python<'_>, value: u64) -> PyResult<bool> {
        let ev = self.get("ImportedEvent.query")?;
        py.detach(|| ev.query_value(value)).or_raise()
    }

    /// Releases the import (it goes once no queued wait names it).
    fn close(&self) {
        self.inner.close();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }
}
