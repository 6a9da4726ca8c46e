//! `davinci.ccl`'s native part: `Comm`, one rank of a communicator (davinci-ccl), with its
//! collectives between `Buffer`s of the rank's device.
#![forbid(unsafe_code)]

use std::sync::Mutex;
use std::time::Duration;

use davinci_ccl as ccl;
use davinci_shim::DeviceMem;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::base::{invalid, type_error, type_name, OrRaise};
use crate::dtype::numpy_name;
use crate::memory::{Buffer, Mem};
use crate::stream::Stream;

impl ccl::Bytes for Mem {
    fn len(&self) -> usize {
        match self {
            Mem::Dev(b) => DeviceMem::len(b),
            Mem::Pool(b) => DeviceMem::len(b),
        }
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> davinci_shim::Result<()> {
        match self {
            Mem::Dev(b) => DeviceMem::read(b, offset, out),
            Mem::Pool(b) => DeviceMem::read(b, offset, out),
        }
    }
    fn write(&self, offset: usize, data: &[u8]) -> davinci_shim::Result<()> {
        match self {
            Mem::Dev(b) => DeviceMem::write(b, offset, data),
            Mem::Pool(b) => DeviceMem::write(b, offset, data),
        }
    }
    fn host_view(&self) -> Option<davinci_shim::HostMapping> {
        Some(match self {
            Mem::Dev(b) => b.host_mapping(),
            Mem::Pool(b) => b.host_mapping(),
        })
    }
}

const TYPES: &str = "\"f32\", \"f16\", \"bf16\" or \"i32\" (numpy's float32, float16, int32 too)";

fn data_type(op: &'static str, v: &Bound<'_, PyAny>) -> PyResult<ccl::DataType> {
    let name = match v.cast::<PyString>() {
        Ok(s) => s.to_cow()?.into_owned(),
        Err(_) => numpy_name(v).ok_or_else(|| {
            type_error(
                op,
                "dtype",
                format!("must be {TYPES}, not {}", type_name(v)),
            )
        })?,
    };
    Ok(match name.as_str() {
        "f32" | "float32" => ccl::DataType::F32,
        "f16" | "float16" => ccl::DataType::F16,
        "bf16" | "bfloat16" => ccl::DataType::Bf16,
        "i32" | "int32" => ccl::DataType::I32,
        other => return Err(invalid(op, format!("dtype {other:?}: use {TYPES}"))),
    })
}

fn red_op(op: &'static str, v: &str) -> PyResult<ccl::RedOp> {
    ccl::RedOp::ALL
        .into_iter()
        .find(|o| o.name() == v)
        .ok_or_else(|| {
            invalid(
                op,
                format!("op {v:?}: use \"sum\", \"prod\", \"max\" or \"min\""),
            )
        })
}

/// One rank of a communicator: `Comm(unique_id, nranks, rank)` in each rank's process
/// (`Comm.unique_id()` made once, sent to the others), then collectives between `Buffer`s of
/// the rank's device, in the same order on every rank. Blocking: each waits for the work
/// queued on `stream`, runs, and returns with the result in place.
#[pyclass(module = "davinci._davinci")]
pub struct Comm {
    inner: Mutex<Option<ccl::Comm>>,
    rank: usize,
    nranks: usize,
}

/// The element count of `buf` (its bytes over the type's), when not given.
fn count_of(buf: &Mem, ty: ccl::DataType, parts: usize) -> usize {
    ccl::Bytes::len(buf) / ty.size() / parts.max(1)
}

#[pymethods]
impl Comm {
    /// Joins communicator `unique_id` as `rank` of `nranks`; returns once every rank joined
    /// (`timeout` seconds at most at each barrier: a rank that never comes is a
    /// `DeviceTimeoutError`, not a hang).
    #[new]
    #[pyo3(signature = (unique_id, nranks, rank, *, timeout = 60.0))]
    fn new(
        py: Python<'_>,
        unique_id: &str,
        nranks: usize,
        rank: usize,
        timeout: f64,
    ) -> PyResult<Self> {
        const OP: &str = "Comm";
        let id: ccl::UniqueId = unique_id.parse().or_raise()?;
        if !(timeout.is_finite() && timeout > 0.0) {
            return Err(invalid(
                OP,
                format!("timeout {timeout}: a number of seconds above 0"),
            ));
        }
        let t = Duration::from_secs_f64(timeout);
        let c = py
            .detach(|| ccl::Comm::init_rank_timeout(&id, nranks, rank, t))
            .or_raise()?;
        Ok(Comm {
            inner: Mutex::new(Some(c)),
            rank,
            nranks,
        })
    }

    /// A new unique id (32 hex digits) for the ranks of one communicator.
    #[staticmethod]
    fn unique_id() -> PyResult<String> {
        Ok(ccl::UniqueId::new().or_raise()?.to_string())
    }

    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    #[getter]
    fn nranks(&self) -> usize {
        self.nranks
    }

    /// Waits for every rank.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.run_inner(|c| c.barrier())).or_raise()
    }

    /// `recv = send op ...` over every rank, `count` elements (default: all of `send`).
    #[pyo3(signature = (send, recv, stream, *, dtype, op = "sum", count = None))]
    #[allow(clippy::too_many_arguments)]
    fn all_reduce(
        &self,
        py: Python<'_>,
        send: &Buffer,
        recv: &Buffer,
        stream: &Stream,
        dtype: &Bound<'_, PyAny>,
        op: &str,
        count: Option<usize>,
    ) -> PyResult<()> {
        const OP: &str = "Comm.all_reduce";
        let (ty, rop) = (data_type(OP, dtype)?, red_op(OP, op)?);
        let (s, r) = (send.get(OP)?, recv.get(OP)?);
        let n = count.unwrap_or_else(|| count_of(&s, ty, 1));
        stream.with(py, OP, |st| {
            self.run_inner(|c| c.all_reduce(&*s, &*r, n, ty, rop, st))
        })
    }

    /// Rank r's `count` elements of `send` land at `recv[r * count:]` on every rank.
    #[pyo3(signature = (send, recv, stream, *, dtype, count = None))]
    fn all_gather(
        &self,
        py: Python<'_>,
        send: &Buffer,
        recv: &Buffer,
        stream: &Stream,
        dtype: &Bound<'_, PyAny>,
        count: Option<usize>,
    ) -> PyResult<()> {
        const OP: &str = "Comm.all_gather";
        let ty = data_type(OP, dtype)?;
        let (s, r) = (send.get(OP)?, recv.get(OP)?);
        let n = count.unwrap_or_else(|| count_of(&s, ty, 1));
        stream.with(py, OP, |st| {
            self.run_inner(|c| c.all_gather(&*s, &*r, n, ty, st))
        })
    }

    /// `send` holds nranks blocks of `count`; rank r gets block r reduced over every rank.
    #[pyo3(signature = (send, recv, stream, *, dtype, op = "sum", count = None))]
    #[allow(clippy::too_many_arguments)]
    fn reduce_scatter(
        &self,
        py: Python<'_>,
        send: &Buffer,
        recv: &Buffer,
        stream: &Stream,
        dtype: &Bound<'_, PyAny>,
        op: &str,
        count: Option<usize>,
    ) -> PyResult<()> {
        const OP: &str = "Comm.reduce_scatter";
        let (ty, rop) = (data_type(OP, dtype)?, red_op(OP, op)?);
        let (s, r) = (send.get(OP)?, recv.get(OP)?);
        let n = count.unwrap_or_else(|| count_of(&r, ty, 1));
        stream.with(py, OP, |st| {
            self.run_inner(|c| c.reduce_scatter(&*s, &*r, n, ty, rop, st))
        })
    }

    /// `root`'s `count` elements of `send` land in every rank's `recv`.
    #[pyo3(signature = (send, recv, stream, *, dtype, root = 0, count = None))]
    #[allow(clippy::too_many_arguments)]
    fn broadcast(
        &self,
        py: Python<'_>,
        send: &Buffer,
        recv: &Buffer,
        stream: &Stream,
        dtype: &Bound<'_, PyAny>,
        root: usize,
        count: Option<usize>,
    ) -> PyResult<()> {
        const OP: &str = "Comm.broadcast";
        let ty = data_type(OP, dtype)?;
        let (s, r) = (send.get(OP)?, recv.get(OP)?);
        let n = count.unwrap_or_else(|| count_of(&r, ty, 1));
        stream.with(py, OP, |st| {
            self.run_inner(|c| c.broadcast(&*s, &*r, n, ty, root, st))
        })
    }

    /// As `all_reduce`, the result in `root`'s `recv` only.
    #[pyo3(signature = (send, recv, stream, *, dtype, op = "sum", root = 0, count = None))]
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &self,
        py: Python<'_>,
        send: &Buffer,
        recv: &Buffer,
        stream: &Stream,
        dtype: &Bound<'_, PyAny>,
        op: &str,
        root: usize,
        count: Option<usize>,
    ) -> PyResult<()> {
        const OP: &str = "Comm.reduce";
        let (ty, rop) = (data_type(OP, dtype)?, red_op(OP, op)?);
        let (s, r) = (send.get(OP)?, recv.get(OP)?);
        let n = count.unwrap_or_else(|| count_of(&s, ty, 1));
        stream.with(py, OP, |st| {
            self.run_inner(|c| c.reduce(&*s, &*r, n, ty, rop, root, st))
        })
    }

    /// Leaves the communicator (its calls fail with `InvalidArgumentError` from then on).
    fn close(&self) {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }

    fn __repr__(&self) -> String {
        format!("<davinci.ccl.Comm rank {} of {}>", self.rank, self.nranks)
    }
}

impl Comm {
    /// `f` on the communicator (the GIL already released by the stream's `with`).
    fn run_inner<R>(
        &self,
        f: impl FnOnce(&mut ccl::Comm) -> davinci_shim::Result<R>,
    ) -> davinci_shim::Result<R> {
        let mut g = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match g.as_mut() {
            Some(c) => f(c),
            None => Err(davinci_shim::Error::new(
                davinci_shim::Errno::EINVAL,
                "Comm",
                "the communicator is closed",
            )),
        }
    }
}
