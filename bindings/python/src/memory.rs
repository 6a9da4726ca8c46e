//! Device memory: `Buffer` (a `DeviceBuffer` or a pool block: copies in and out, typed
//! values, the zero-copy view through the buffer protocol and DLPack, export). `Region` (a
//! byte range of one, as a task operand) and `HostHold` (what keeps a buffer mapped while a
//! host view of it lives).
//!
//! `unsafe` here is the buffer protocol's FFI and nothing else: `Buffer.__getbuffer__` fills
//! CPython's `Py_buffer` with the buffer's host mapping and parks a [`shim::HostMapping`]
//! (a hold of the buffer) in its `internal` field; `__releasebuffer__` takes it back. So a
//! `memoryview`, or a numpy array made from one, keeps the memory allocated and mapped
//! even after `Buffer.close()`.
#![deny(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use davinci_shim::{self as shim, DeviceMem};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyMemoryView};

use crate::base::{invalid, opt_size, OrRaise, Slot};
use crate::dtype::Dtype;
use crate::region::{HostHold, Region};

/// The memory behind a `Buffer`.
pub(crate) enum Mem {
    Dev(shim::DeviceBuffer),
    Pool(shim::PoolBuffer),
}

impl Mem {
    pub(crate) fn as_mem(&self) -> &dyn MemOps {
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
pub(crate) trait MemOps: Send + Sync {
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

/// Device memory with a host view: from `Device.alloc` (or `import_buffer`) or a `MemPool`.
#[pyclass(frozen, weakref, module = "davinci._davinci")]
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

    /// Whether the exporter freed this imported buffer, revoking the import: its tasks then
    /// fail and its view no longer reaches the memory (an access raises SIGBUS, on the mock
    /// device too).
    /// Always False for this client's own memory. One driver round trip.
    fn is_revoked(&self, py: Python<'_>) -> PyResult<bool> {
        let mem = self.get("Buffer.is_revoked")?;
        match &*mem {
            Mem::Dev(b) => py.detach(|| b.is_revoked()).or_raise(),
            _ => Ok(false),
        }
    }

    /// Copies `data` (bytes, bytearray or any contiguous buffer) to byte `offset`.
    #[pyo3(signature = (data, offset = None))]
    fn write(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        offset: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        const OP: &str = "Buffer.write";
        let offset = opt_size(OP, "offset", offset)?.unwrap_or(0);
        let m = self.get(OP)?;
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
    #[pyo3(signature = (nbytes = None, offset = None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        nbytes: Option<&Bound<'py, PyAny>>,
        offset: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        const OP: &str = "Buffer.read";
        let offset = opt_size(OP, "offset", offset)?.unwrap_or(0);
        let nbytes = opt_size(OP, "nbytes", nbytes)?;
        let m = self.get(OP)?;
        let n = nbytes.unwrap_or_else(|| m.as_mem().len().saturating_sub(offset));
        let mut v = vec![0u8; n];
        m.as_mem().read(offset, &mut v).or_raise()?;
        Ok(PyBytes::new(py, &v))
    }

    /// Writes numbers as `dtype` ("f32", "i32", "u32", or numpy's dtypes) from byte `offset`.
    #[pyo3(signature = (values, dtype = None, offset = None))]
    fn write_values(
        &self,
        values: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        offset: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        const OP: &str = "Buffer.write_values";
        let d = Dtype::from_opt(OP, dtype)?.unwrap_or(Dtype::F32);
        let offset = opt_size(OP, "offset", offset)?.unwrap_or(0);
        let m = self.get(OP)?;
        let mut bytes = Vec::new();
        let items = values
            .try_iter()
            .map_err(|_| crate::base::type_error(OP, "values", "must be an iterable of numbers"))?;
        for (i, v) in items.enumerate() {
            let v = v?;
            bytes.extend_from_slice(&d.bits(OP, &format!("values[{i}]"), &v)?.to_ne_bytes());
        }
        m.as_mem().write(offset, &bytes).or_raise()
    }

    /// `count` numbers of `dtype` (default: to the end) from byte `offset`, as a list.
    #[pyo3(signature = (dtype = None, count = None, offset = None))]
    fn read_values<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        count: Option<&Bound<'py, PyAny>>,
        offset: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        const OP: &str = "Buffer.read_values";
        let d = Dtype::from_opt(OP, dtype)?.unwrap_or(Dtype::F32);
        let offset = opt_size(OP, "offset", offset)?.unwrap_or(0);
        let count = opt_size(OP, "count", count)?;
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

    /// The bytes `[start, stop)` as a task operand (`stop` None: to the end).
    #[pyo3(signature = (start = None, stop = None))]
    fn region(
        slf: Bound<'_, Self>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Region> {
        const OP: &str = "Buffer.region";
        let start = opt_size(OP, "start", start)?.unwrap_or(0);
        let stop = opt_size(OP, "stop", stop)?;
        let m = slf.get().get(OP)?;
        let len = m.as_mem().len();
        let stop = stop.unwrap_or(len);
        if start > stop {
            return Err(invalid(
                OP,
                format!("the range [{start}, {stop}) is inverted: start must not exceed stop"),
            ));
        }
        if stop > len {
            return Err(invalid(
                OP,
                format!("the range [{start}, {stop}) runs past the end of the {len}-byte buffer"),
            ));
        }
        m.region(Some((start, stop))).or_raise()?;
        Ok(Region {
            mem: m,
            buffer: slf.unbind(),
            start,
            stop,
        })
    }

    /// The host view as a writable `memoryview` without copying (format "B", or `dtype`'s:
    /// "f32", "i32", "u32", numpy's dtypes too); the same as `memoryview(buf)` (cast). It
    /// keeps the buffer's memory allocated and mapped while it (or anything made from it,
    /// such as a numpy array) lives; its `obj` is this `Buffer`. The device writes it while
    /// tasks on the buffer run: read it after `synchronize`.
    #[pyo3(signature = (dtype = None))]
    fn view<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        const OP: &str = "Buffer.view";
        let fmt = match dtype {
            Some(d)
                if d.extract::<&str>()
                    .is_ok_and(|s| matches!(s, "u8" | "uint8" | "B")) =>
            {
                "B"
            }
            d => Dtype::from_opt(OP, d)?.map_or("B", Dtype::format),
        };
        slf.get().get(OP)?;
        let mv = PyMemoryView::from(slf.as_any())?.into_any();
        if fmt == "B" {
            Ok(mv)
        } else {
            mv.call_method1("cast", (fmt,))
        }
    }

    /// numpy's array interface (version 3): the host view as a 1-D uint8 array, so
    /// `np.asarray(buf)` is zero-copy (numpy reads the buffer protocol first; this is for
    /// consumers that only know this protocol). The array keeps a reference to this object,
    /// not a hold of the memory: `memoryview(buf)` is the form that outlives `close()`.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.get("Buffer.__array_interface__")?;
        let map = m.as_mem().host_mapping();
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", (map.len(),))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (map.addr(), false))?;
        Ok(d)
    }

    /// DLPack (`np.from_dlpack(buf)`, `torch.from_dlpack(buf)`): the host view as a 1-D
    /// uint8 tensor on the CPU, zero-copy. Delegated to numpy: a numpy array over
    /// `memoryview(buf)` exports it, so the capsule's owner holds the memory (as
    /// `memoryview` does). Needs numpy.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        slf.get().get("Buffer.__dlpack__")?;
        let np = py.import("numpy")?;
        let arr = np
            .getattr("asarray")?
            .call1((PyMemoryView::from(slf.as_any())?,))?;
        let kw = PyDict::new(py);
        for (k, v) in [
            ("stream", stream),
            ("max_version", max_version),
            ("dl_device", dl_device),
            ("copy", copy),
        ] {
            if let Some(v) = v.filter(|v| !v.is_none()) {
                kw.set_item(k, v)?;
            }
        }
        arr.call_method("__dlpack__", (), Some(&kw))
    }

    /// `(kDLCPU, 0)` = `(1, 0)`: what the host reads and writes is this process's mapping of
    /// the device memory (CUDA's mapped pinned memory), plain CPU memory to a DLPack
    /// consumer; the device's own address is `dev_addr`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }

    /// The buffer protocol: the host mapping, writable, format "B", one dimension. The
    /// `Py_buffer` carries a hold of the memory until it is released.
    #[allow(unsafe_code)]
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "Buffer.__getbuffer__: no Py_buffer to fill",
            ));
        }
        let m = match slf.get().get("Buffer.__getbuffer__") {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: `view` is not null and CPython passes a `Py_buffer` it owns for
                // this call; on failure the protocol asks for `obj` to be NULL.
                unsafe { (*view).obj = std::ptr::null_mut() };
                return Err(e);
            }
        };
        let hold = Box::new(m.as_mem().host_mapping());
        let (addr, len) = (hold.addr(), hold.len());
        let Ok(len) = isize::try_from(len) else {
            // SAFETY: as above.
            unsafe { (*view).obj = std::ptr::null_mut() };
            return Err(invalid(
                "Buffer.__getbuffer__",
                "the buffer is too large to view",
            ));
        };
        // SAFETY: `view` is a valid `Py_buffer` for CPython to fill (non-null, checked);
        // `slf` is a live object (PyBuffer_FillInfo takes a new reference to it as `obj`);
        // `addr..addr + len` is the buffer's host mapping, readable and writable, which
        // stays mapped while `hold` lives: `hold` goes into `internal` and is dropped only
        // by `__releasebuffer__`, which CPython calls once for this view.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), addr as *mut c_void, len, 0, flags)
        };
        if rc != 0 {
            // PyBuffer_FillInfo set the exception (and left `obj` NULL).
            return Err(PyErr::fetch(slf.py()));
        }
        // SAFETY: `view` was filled above; `internal` is ours (the protocol leaves it to the
        // exporter).
        unsafe { (*view).internal = Box::into_raw(hold).cast::<c_void>() };
        Ok(())
    }

    /// Releases the hold `__getbuffer__` put in the `Py_buffer`.
    #[allow(unsafe_code)]
    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        // SAFETY: CPython passes the `Py_buffer` our `__getbuffer__` filled, once; its
        // `internal` is the `Box<HostMapping>` put there (or NULL if it never was).
        let internal = unsafe { (*view).internal };
        if !internal.is_null() {
            // SAFETY: made by `Box::into_raw` in `__getbuffer__`, released only here.
            drop(unsafe { Box::from_raw(internal.cast::<shim::HostMapping>()) });
            // SAFETY: as above: the view is ours to clear.
            unsafe { (*view).internal = std::ptr::null_mut() };
        }
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
    ///
    /// `lease=True` (ABI 1.5): the memory outlives this buffer's close until every importer
    /// closed its import (still charged to this client meanwhile); without it, closing this
    /// buffer revokes every import. `offset` / `nbytes`: whole pages of it only (the
    /// importer reaches those alone). A pool block is exported alone, not its chunk (its
    /// pool made with `align` of a page or more); with a lease it is not reused until its
    /// importers let go.
    #[pyo3(signature = (*, uid = None, client_id = None, lease = false, offset = None, nbytes = None))]
    fn export(
        &self,
        py: Python<'_>,
        uid: Option<u32>,
        client_id: Option<u32>,
        lease: bool,
        offset: Option<usize>,
        nbytes: Option<usize>,
    ) -> PyResult<String> {
        const OP: &str = "Buffer.export";
        let m = self.get(OP)?;
        let to = export_to(uid, client_id);
        let lifetime = if lease {
            shim::Lifetime::Lease
        } else {
            shim::Lifetime::Revoke
        };
        let t = match (&*m, offset, nbytes) {
            (Mem::Dev(b), None, None) if lease => py.detach(|| b.export_lease(to)),
            (Mem::Dev(b), None, None) => py.detach(|| b.export(to)),
            (Mem::Dev(b), o, n) => {
                let o = o.unwrap_or(0);
                let n = match n {
                    Some(n) => n,
                    None => usize::try_from(b.capacity())
                        .unwrap_or(usize::MAX)
                        .checked_sub(o)
                        .ok_or_else(|| {
                            invalid(OP, format!("offset {o} is past the buffer's end"))
                        })?,
                };
                py.detach(|| b.export_range(o, n, to, lifetime))
            }
            (Mem::Pool(b), None, None) => py.detach(|| b.export(to, lifetime)),
            (Mem::Pool(_), _, _) => {
                return Err(invalid(
                    OP,
                    "a pool block is exported whole: no offset or nbytes",
                ))
            }
        }
        .or_raise()?;
        Ok(t.to_string())
    }

    /// Ends this buffer's exports (all of them, or those of the range `offset` / `nbytes`
    /// named) and keeps the buffer (ABI 1.5): imports without a lease are revoked now; a
    /// lease takes no new import and ends with its last import. Returns how many imports of
    /// leases still stand (0: the memory is this client's alone again).
    #[pyo3(signature = (*, offset = None, nbytes = None))]
    fn unexport(
        &self,
        py: Python<'_>,
        offset: Option<usize>,
        nbytes: Option<usize>,
    ) -> PyResult<u32> {
        const OP: &str = "Buffer.unexport";
        let m = self.get(OP)?;
        let Mem::Dev(b) = &*m else {
            return Err(invalid(
                OP,
                "a pool block's exports end when the block is closed (it goes back to its \
                 pool then)",
            ));
        };
        match (offset, nbytes) {
            (None, None) => py.detach(|| b.unexport()),
            (o, Some(n)) => py.detach(|| b.unexport_range(o.unwrap_or(0), n)),
            (Some(_), None) => {
                return Err(invalid(
                    OP,
                    "offset without nbytes: name the exported range",
                ))
            }
        }
        .or_raise()
    }

    /// Shares it as a file descriptor (the kernel module's devices: `Device.features` has
    /// `EXPORT_FD`): an int the caller owns (`os.close` it once sent), the right to import it
    /// with `Device.import_fd` for the clients `uid` / `client_id` name (as `export`). Send it
    /// with `socket.send_fds`; unlike a token no other process can guess it.
    #[pyo3(signature = (*, uid = None, client_id = None))]
    fn export_fd(&self, py: Python<'_>, uid: Option<u32>, client_id: Option<u32>) -> PyResult<i32> {
        const OP: &str = "Buffer.export_fd";
        let m = self.get(OP)?;
        let Mem::Dev(b) = &*m else {
            return Err(invalid(
                OP,
                "a pool block cannot be exported: export a Device.alloc buffer",
            ));
        };
        let to = export_to(uid, client_id);
        let fd = py.detach(|| b.export_fd(to)).or_raise()?;
        Ok(std::os::fd::IntoRawFd::into_raw_fd(fd))
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

/// Whom `Buffer.export` and `Buffer.export_fd` grant: this user by default, `uid`, or the one
/// client `client_id` (of `uid`, else of this user).
pub(crate) fn export_to(uid: Option<u32>, client_id: Option<u32>) -> shim::ExportTo {
    match (uid, client_id) {
        (None, None) => shim::ExportTo::SameUser,
        (Some(u), None) => shim::ExportTo::User(u),
        (uid, Some(c)) => shim::ExportTo::Client { uid, client_id: c },
    }
}
