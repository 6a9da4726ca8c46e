//! `MemPool`: the shim's caching allocator of device memory, handing out `Buffer`s.
#![forbid(unsafe_code)]

use davinci_shim::{self as shim, PoolOptions};
use pyo3::prelude::*;

use crate::base::{size, OrRaise};
use crate::device::Device;
use crate::memory::{Buffer, Mem};

/// A caching allocator of device memory (`davinci_shim::MemPool`).
#[pyclass(frozen, module = "davinci._davinci")]
pub struct MemPool {
    inner: shim::MemPool,
}

#[pymethods]
impl MemPool {
    #[new]
    #[pyo3(signature = (device, *, chunk_size = None, max_bytes = None, align = None))]
    fn new(
        device: &Device,
        chunk_size: Option<usize>,
        max_bytes: Option<u64>,
        align: Option<usize>,
    ) -> PyResult<MemPool> {
        let dev = device.get("MemPool")?;
        let mut o = PoolOptions::default();
        if let Some(c) = chunk_size {
            o = o.chunk_size(c);
        }
        if let Some(m) = max_bytes {
            o = o.max_bytes(m);
        }
        if let Some(a) = align {
            o = o.align(a);
        }
        Ok(MemPool {
            inner: shim::MemPool::with_options(&dev, o),
        })
    }

    /// A block of `nbytes` (not zeroed: a reused block keeps its old bytes).
    fn alloc(&self, py: Python<'_>, nbytes: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        let nbytes = size("MemPool.alloc", "nbytes", nbytes)?;
        let b = py.detach(|| self.inner.alloc(nbytes)).or_raise()?;
        Ok(Buffer::new(Mem::Pool(b)))
    }

    /// Gives the chunks with no live block back to the driver; returns how many.
    fn trim(&self, py: Python<'_>) -> usize {
        py.detach(|| self.inner.trim())
    }

    /// What it holds and has done, as a dict.
    fn stats(&self) -> std::collections::BTreeMap<&'static str, u64> {
        let s = self.inner.stats();
        [
            ("chunks", s.chunks as u64),
            ("reserved_bytes", s.reserved_bytes),
            ("in_use_bytes", s.in_use_bytes),
            ("blocks", s.blocks as u64),
            ("allocs", s.allocs),
            ("driver_allocs", s.driver_allocs),
            ("driver_frees", s.driver_frees),
            ("leased_blocks", s.leased_blocks as u64),
        ]
        .into_iter()
        .collect()
    }
}
