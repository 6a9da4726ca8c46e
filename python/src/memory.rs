//! Device memory: `Buffer` (a `DeviceBuffer` or a pool block: copies in and out, typed
//! values, the zero-copy view, export), `Region` (a byte range of one, as a task operand) and
//! `HostHold` (what keeps a buffer mapped while a host view of it lives).
#![forbid(unsafe_code)]

use std::sync::Arc;

use davinci_shim::{self as shim, DeviceMem};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::base::{invalid, OrRaise, Slot};

/// The memory behind a `Buffer`.
pub(crate) enum Mem {
    Dev(shim::DeviceBuffer),
    Pool(shim::PoolBuffer),
}

impl Mem {
    fn as_mem(&self) -> &dyn MemOps {
        match self {
            Mem::Dev(b) => b,
            Mem::Pool(b) => b,
        }
    }

    /// A region of it: all of it, or bytes `start..stop`.
    pub(crate) fn region(&self, range: Option<(usize, usize)>) -> shim::Result<shim::Region<'_>> {
        match (self, range) {
            (Mem::Dev(b), None) => Ok(b.into()),
            (Mem::Pool(b), None) => Ok(b.into()),
            (Mem::Dev(b), Some((s, e))) => shim::Region::range(b, s..e),
            (Mem::Pool(b), Some((s, e))) => shim::Region::range(b, s..e),
        }
    }
}

/// What `Buffer` needs of either kind of memory (`DeviceMem` has generic methods, so it is
/// not object safe).
trait MemOps: Send + Sync {
    fn len(&self) -> usize;
    fn dev_addr(&self) -> u64;
    fn write(&self, offset: usize, data: &[u8]) -> shim::Result<()>;
    fn read(&self, offset: usize, out: &mut [u8]) -> shim::Result<()>;
    fn host_mapping(&self) -> shim::HostMapping;
    fn pending_uses(&self) -> usize;
}

macro_rules! mem_ops {
    ($t:ty) => {
        impl MemOps for $t {
            fn len(&self) -> usize {
                DeviceMem::len(self)
            }
            fn dev_addr(&self) -> u64 {
                DeviceMem::dev_addr(self).0
            }
            fn write(&self, offset: usize, data: &[u8]) -> shim::Result<()> {
                DeviceMem::write(self, offset, data)
            }
            fn read(&self, offset: usize, out: &mut [u8]) -> shim::Result<()> {
                DeviceMem::read(self, offset, out)
            }
            fn host_mapping(&self) -> shim::HostMapping {
                DeviceMem::host_mapping(self)
            }
            fn pending_uses(&self) -> usize {
                <$t>::pending_uses(self)
            }
        }
    };
}
mem_ops!(shim::DeviceBuffer);
mem_ops!(shim::PoolBuffer);

/// Element types of typed reads, writes, fills and adds.
#[derive(Clone, Copy)]
pub(crate) enum Dtype {
    F32,
    I32,
    U32,
}

impl Dtype {
    pub(crate) fn parse(op: &'static str, s: &str) -> PyResult<Dtype> {
        match s {
            "f32" | "float32" | "f" => Ok(Dtype::F32),
            "i32" | "int32" | "i" => Ok(Dtype::I32),
            "u32" | "uint32" | "I" => Ok(Dtype::U32),
            _ => Err(invalid(
                op,
                format!("dtype {s:?}: use \"f32\", \"i32\" or \"u32\" (or numpy's names)"),
            )),
        }
    }

    /// A Python number as this type's 4 bytes.
    pub(crate) fn bits(self, op: &'static str, v: &Bound<'_, PyAny>) -> PyResult<u32> {
        let bad = |what: &str| invalid(op, format!("{v} is not {what}"));
        match self {
            Dtype::F32 => Ok((v.extract::<f64>().map_err(|_| bad("a number"))? as f32).to_bits()),
            Dtype::I32 => {
                Ok(v.extract::<i32>()
                    .map_err(|_| bad("an int32 (-2**31 to 2**31-1)"))? as u32)
            }
            Dtype::U32 => v
                .extract::<u32>()
                .map_err(|_| bad("a uint32 (0 to 2**32-1)")),
        }
    }

    fn value<'py>(self, py: Python<'py>, b: [u8; 4]) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self {
            Dtype::F32 => f32::from_ne_bytes(b).into_pyobject(py)?.into_any(),
            Dtype::I32 => i32::from_ne_bytes(b).into_pyobject(py)?.into_any(),
            Dtype::U32 => u32::from_ne_bytes(b).into_pyobject(py)?.into_any(),
        })
    }
}

/// Device memory with a host view: from `Device.alloc` (or `import_buffer`) or a `MemPool`.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Buffer {
    inner: Slot<Arc<Mem>>,
}

impl Buffer {
    pub(crate) fn new(m: Mem) -> Buffer {
        Buffer {
            inner: Slot::new(Arc::new(m)),
        }
    }

    pub(crate) fn get(&self, op: &'static str) -> PyResult<Arc<Mem>> {
        self.inner.get(op, "buffer")
    }
}

#[pymethods]
impl Buffer {
    /// Length in bytes.
    #[getter]
    fn nbytes(&self) -> PyResult<usize> {
        Ok(self.get("Buffer.nbytes")?.as_mem().len())
    }

    fn __len__(&self) -> PyResult<usize> {
        self.nbytes()
    }

    /// The device address of the first byte (what descriptors name).
    #[getter]
    fn dev_addr(&self) -> PyResult<u64> {
        Ok(self.get("Buffer.dev_addr")?.as_mem().dev_addr())
    }

    /// Holders besides this object: queued tasks not yet reaped and live host views (its
    /// free waits for them).
    #[getter]
    fn pending_uses(&self) -> PyResult<usize> {
        Ok(self.get("Buffer.pending_uses")?.as_mem().pending_uses())
    }

    /// Whether it was imported from another client.
    #[getter]
    fn is_imported(&self) -> PyResult<bool> {
        Ok(matches!(&*self.get("Buffer.is_imported")?, Mem::Dev(b) if b.is_imported()))
    }

    /// Copies `data` (bytes, bytearray or any contiguous buffer) to byte `offset`.
    #[pyo3(signature = (data, offset = 0))]
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>, offset: usize) -> PyResult<()> {
        let m = self.get("Buffer.write")?;
        if let Ok(b) = data.cast::<PyBytes>() {
            return m.as_mem().write(offset, b.as_bytes()).or_raise();
        }
        // bytearray, memoryview, numpy arrays: their bytes, C-contiguous.
        let bytes = py
            .import("davinci._view")?
            .getattr("as_bytes")?
            .call1((data,))?;
        let b = bytes.cast::<PyBytes>()?;
        m.as_mem().write(offset, b.as_bytes()).or_raise()
    }

    /// `nbytes` bytes (default: to the end) from byte `offset`, copied.
    #[pyo3(signature = (nbytes = None, offset = 0))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        nbytes: Option<usize>,
        offset: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let m = self.get("Buffer.read")?;
        let n = nbytes.unwrap_or_else(|| m.as_mem().len().saturating_sub(offset));
        let mut v = vec![0u8; n];
        m.as_mem().read(offset, &mut v).or_raise()?;
        Ok(PyBytes::new(py, &v))
    }

    /// Writes numbers as `dtype` ("f32", "i32", "u32") from byte `offset`.
    #[pyo3(signature = (values, dtype = "f32", offset = 0))]
    fn write_values(
        &self,
        values: Vec<Bound<'_, PyAny>>,
        dtype: &str,
        offset: usize,
    ) -> PyResult<()> {
        const OP: &str = "Buffer.write_values";
        let d = Dtype::parse(OP, dtype)?;
        let m = self.get(OP)?;
        let mut bytes = Vec::with_capacity(values.len() * 4);
        for v in &values {
            bytes.extend_from_slice(&d.bits(OP, v)?.to_ne_bytes());
        }
        m.as_mem().write(offset, &bytes).or_raise()
    }

    /// `count` numbers of `dtype` (default: to the end) from byte `offset`, as a list.
    #[pyo3(signature = (dtype = "f32", count = None, offset = 0))]
    fn read_values<'py>(
        &self,
        py: Python<'py>,
        dtype: &str,
        count: Option<usize>,
        offset: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        const OP: &str = "Buffer.read_values";
        let d = Dtype::parse(OP, dtype)?;
        let m = self.get(OP)?;
        let n = count.unwrap_or_else(|| m.as_mem().len().saturating_sub(offset) / 4);
        let nbytes = n
            .checked_mul(4)
            .ok_or_else(|| invalid(OP, format!("count {n} is too large")))?;
        let mut v = vec![0u8; nbytes];
        m.as_mem().read(offset, &mut v).or_raise()?;
        let out = PyList::empty(py);
        for c in v.chunks_exact(4) {
            out.append(d.value(py, [c[0], c[1], c[2], c[3]])?)?;
        }
        Ok(out)
    }

    /// The bytes `start..stop` as a task operand.
    #[pyo3(signature = (start = 0, stop = None))]
    fn region(slf: Bound<'_, Self>, start: usize, stop: Option<usize>) -> PyResult<Region> {
        let m = slf.get().get("Buffer.region")?;
        let stop = stop.unwrap_or_else(|| m.as_mem().len());
        m.region(Some((start, stop))).or_raise()?;
        Ok(Region {
            mem: m,
            start,
            stop,
        })
    }

    /// The host view as a writable `memoryview` without copying (format "B", or `dtype`'s:
    /// "f32", "i32", "u32"); it keeps the buffer alive while it (or anything made from it,
    /// such as a numpy array) lives. The device writes it while tasks on the buffer run: read
    /// it after `synchronize`.
    #[pyo3(signature = (dtype = None))]
    fn view<'py>(&self, py: Python<'py>, dtype: Option<&str>) -> PyResult<Bound<'py, PyAny>> {
        let fmt = match dtype {
            None | Some("u8" | "uint8" | "B") => "B",
            Some(d) => match Dtype::parse("Buffer.view", d)? {
                Dtype::F32 => "f",
                Dtype::I32 => "i",
                Dtype::U32 => "I",
            },
        };
        let hold = self.host_hold()?;
        py.import("davinci._view")?
            .getattr("make_view")?
            .call1((hold, fmt))
    }

    /// A hold on the host view's mapping (address, length): `view()` builds on it.
    fn host_hold(&self) -> PyResult<HostHold> {
        let m = self.get("Buffer.view")?;
        Ok(HostHold {
            map: m.as_mem().host_mapping(),
        })
    }

    /// Shares it with other clients of the device (of this user by default; `uid`, or the one
    /// client `client_id`): the token (16 hex digits) for `Device.import_buffer`.
    #[pyo3(signature = (*, uid = None, client_id = None))]
    fn export(&self, py: Python<'_>, uid: Option<u32>, client_id: Option<u32>) -> PyResult<String> {
        const OP: &str = "Buffer.export";
        let m = self.get(OP)?;
        let Mem::Dev(b) = &*m else {
            return Err(invalid(
                OP,
                "a pool block cannot be exported: export a Device.alloc buffer",
            ));
        };
        let to = match (uid, client_id) {
            (None, None) => shim::ExportTo::SameUser,
            (Some(u), None) => shim::ExportTo::User(u),
            (uid, Some(c)) => shim::ExportTo::Client { uid, client_id: c },
        };
        let t = py.detach(|| b.export(to)).or_raise()?;
        Ok(t.to_string())
    }

    /// Lets go of the buffer: freed once no queued task and no host view holds it.
    fn close(&self) {
        self.inner.close();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        _t: Option<&Bound<'_, PyAny>>,
        _v: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) {
        self.close();
    }

    fn __repr__(&self) -> String {
        match self.inner.lock().as_ref() {
            Some(m) => format!(
                "<davinci.Buffer {} bytes at {:#x}>",
                m.as_mem().len(),
                m.as_mem().dev_addr()
            ),
            None => "<davinci.Buffer (closed)>".to_string(),
        }
    }
}

/// A byte range of a buffer, as a task operand (`Buffer.region`).
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Region {
    pub(crate) mem: Arc<Mem>,
    pub(crate) start: usize,
    pub(crate) stop: usize,
}

#[pymethods]
impl Region {
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
    map: shim::HostMapping,
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
