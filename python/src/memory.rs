//! Device memory and tasks: `Buffer` (a `DeviceBuffer` or a pool block), `Region` (a byte
//! range of one), `MemPool`, `HostHold` (what keeps a buffer mapped while a host view of it
//! lives), and `Task` with the builders of `davinci.task`.
#![forbid(unsafe_code)]

use std::sync::Arc;

use davinci_shim::{self as shim, task, DeviceMem, PoolOptions};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyList};

use crate::device::{Device, Slot};
use crate::{invalid, OrRaise};

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
    fn region(&self, range: Option<(usize, usize)>) -> shim::Result<shim::Region<'_>> {
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
enum Dtype {
    F32,
    I32,
    U32,
}

impl Dtype {
    fn parse(op: &'static str, s: &str) -> PyResult<Dtype> {
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
    fn bits(self, op: &'static str, v: &Bound<'_, PyAny>) -> PyResult<u32> {
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

    fn get(&self, op: &'static str) -> PyResult<Arc<Mem>> {
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
    mem: Arc<Mem>,
    start: usize,
    stop: usize,
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
    fn alloc(&self, py: Python<'_>, nbytes: usize) -> PyResult<Buffer> {
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
        ]
        .into_iter()
        .collect()
    }
}

/// A task checked on the host, holding the buffers it names until it has run.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Task {
    pub(crate) inner: shim::Task,
}

#[pymethods]
impl Task {
    #[getter]
    fn user_data(&self) -> u64 {
        self.inner.user_data()
    }

    /// The same task with this `user_data` (completions carry it).
    fn with_user_data(&self, user_data: u64) -> Task {
        Task {
            inner: self.inner.clone().with_user_data(user_data),
        }
    }

    /// The opcode's name (`"ADD"`).
    #[getter]
    fn opcode(&self) -> String {
        opcode_name(self.inner.desc().opcode)
    }

    fn __repr__(&self) -> String {
        format!(
            "<davinci.Task {} user_data={:#x}>",
            self.opcode(),
            self.inner.user_data()
        )
    }
}

/// An opcode's name as docs/abi.md spells it (`"EVENT_WAIT"`), or its number.
pub(crate) fn opcode_name(code: u8) -> String {
    let Some(op) = shim::Opcode::from_u8(code) else {
        return code.to_string();
    };
    let mut out = String::new();
    for (i, ch) in format!("{op:?}").chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

/// A task operand: a `Buffer` or a `Region`.
struct Operand {
    mem: Arc<Mem>,
    range: Option<(usize, usize)>,
}

impl Operand {
    fn from_py(op: &'static str, name: &str, v: &Bound<'_, PyAny>) -> PyResult<Operand> {
        if let Ok(b) = v.cast::<Buffer>() {
            return Ok(Operand {
                mem: b.get().get(op)?,
                range: None,
            });
        }
        if let Ok(r) = v.cast::<Region>() {
            let r = r.get();
            return Ok(Operand {
                mem: r.mem.clone(),
                range: Some((r.start, r.stop)),
            });
        }
        Err(invalid(
            op,
            format!("{name} must be a davinci.Buffer or a Buffer.region(...)"),
        ))
    }

    fn region(&self) -> shim::Result<shim::Region<'_>> {
        self.mem.region(self.range)
    }
}

/// FILL: every 4-byte word of `dst` set to `value` (an int: its 32 bits; a float: its f32
/// bits; or as `dtype`).
#[pyfunction]
#[pyo3(signature = (dst, value, dtype = None, user_data = 0))]
pub fn task_fill(
    dst: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
    dtype: Option<&str>,
    user_data: u64,
) -> PyResult<Task> {
    const OP: &str = "task.fill";
    let d = match dtype {
        Some(s) => Dtype::parse(OP, s)?,
        None if value.is_instance_of::<PyFloat>() => Dtype::F32,
        None if value.extract::<i64>().is_ok_and(|v| v < 0) => Dtype::I32,
        None => Dtype::U32,
    };
    let pattern = d.bits(OP, value)?;
    let dst = Operand::from_py(OP, "dst", dst)?;
    let t = task::fill(dst.region().or_raise()?, pattern).or_raise()?;
    Ok(Task {
        inner: t.with_user_data(user_data),
    })
}

/// COPY: `src`'s bytes into `dst` (the same length).
#[pyfunction]
#[pyo3(signature = (dst, src, user_data = 0))]
pub fn task_copy(dst: &Bound<'_, PyAny>, src: &Bound<'_, PyAny>, user_data: u64) -> PyResult<Task> {
    const OP: &str = "task.copy";
    let (dst, src) = (
        Operand::from_py(OP, "dst", dst)?,
        Operand::from_py(OP, "src", src)?,
    );
    let t = task::copy(dst.region().or_raise()?, src.region().or_raise()?).or_raise()?;
    Ok(Task {
        inner: t.with_user_data(user_data),
    })
}

/// ADD: `dst = a + b` elementwise, as `dtype` ("f32", "i32", "u32").
#[pyfunction]
#[pyo3(signature = (dst, a, b, dtype = "f32", user_data = 0))]
pub fn task_add(
    dst: &Bound<'_, PyAny>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    dtype: &str,
    user_data: u64,
) -> PyResult<Task> {
    const OP: &str = "task.add";
    let d = Dtype::parse(OP, dtype)?;
    let (dst, a, b) = (
        Operand::from_py(OP, "dst", dst)?,
        Operand::from_py(OP, "a", a)?,
        Operand::from_py(OP, "b", b)?,
    );
    let (rd, ra, rb) = (
        dst.region().or_raise()?,
        a.region().or_raise()?,
        b.region().or_raise()?,
    );
    let t = match d {
        Dtype::F32 => task::add::<f32>(rd, ra, rb),
        Dtype::I32 => task::add::<i32>(rd, ra, rb),
        Dtype::U32 => task::add::<u32>(rd, ra, rb),
    }
    .or_raise()?;
    Ok(Task {
        inner: t.with_user_data(user_data),
    })
}

/// NOP: a task that does nothing (a marker in the stream).
#[pyfunction]
#[pyo3(signature = (user_data = 0))]
pub fn task_nop(user_data: u64) -> Task {
    Task {
        inner: task::nop().with_user_data(user_data),
    }
}
