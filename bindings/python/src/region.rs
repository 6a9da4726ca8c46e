//! `Region` (a byte range of a buffer, as a task operand: `Buffer.region`) and `HostHold`
//! (what keeps a buffer's host view mapped while a view of it lives).

use std::sync::Arc;

use pyo3::prelude::*;

use davinci_shim as shim;

use crate::memory::{Buffer, Mem};

/// A byte range of a buffer, as a task operand (`Buffer.region`).
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Region {
    pub(crate) mem: Arc<Mem>,
    pub(crate) buffer: Py<Buffer>,
    pub(crate) start: usize,
    pub(crate) stop: usize,
}

#[pymethods]
impl Region {
    /// The `Buffer` it is a range of.
    #[getter]
    fn buffer(&self, py: Python<'_>) -> Py<Buffer> {
        self.buffer.clone_ref(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "<davinci.Region [{}, {}) of a {}-byte buffer>",
            self.start,
            self.stop,
            self.mem.as_mem().len()
        )
    }

    #[getter]
    fn start(&self) -> usize {
        self.start
    }

    #[getter]
    fn stop(&self) -> usize {
        self.stop
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.stop - self.start
    }
}

/// What keeps a buffer's host view mapped: `view()`'s memoryview holds one, so the buffer
/// outlives every view of it.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct HostHold {
    pub(crate) map: shim::HostMapping,
}

#[pymethods]
impl HostHold {
    /// The view's first byte in this process.
    #[getter]
    fn address(&self) -> usize {
        self.map.addr()
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.map.len()
    }
}
