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

/// `$e` on the communicator `$c`, blocking or stream-ordered (the calls have one shape).
macro_rules! both {
    ($self:ident, $c:ident => $e:expr) => {
        $self.run_inner(|inner| match inner {
            Inner::Blocking($c) => $e,
            Inner::Ordered($c) => $e,
        })
    };
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
    inner: Mutex<Option<Inner>>,
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
            inner: Mutex::new(Some(Inner::Blocking(c))),
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
        py.detach(|| self.run_blocking("Comm.barrier", |c| c.barrier()))
            .or_raise()
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
        stream.with(
            py,
            OP,
            |st| both!(self, c => c.all_reduce(&*s, &*r, n, ty, rop, st)),
        )
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
        stream.with(
            py,
            OP,
            |st| both!(self, c => c.all_gather(&*s, &*r, n, ty, st)),
        )
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
        stream.with(
            py,
            OP,
            |st| both!(self, c => c.reduce_scatter(&*s, &*r, n, ty, rop, st)),
        )
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
        stream.with(
            py,
            OP,
            |st| both!(self, c => c.broadcast(&*s, &*r, n, ty, root, st)),
        )
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
        stream.with(
            py,
            OP,
            |st| both!(self, c => c.reduce(&*s, &*r, n, ty, rop, root, st)),
        )
    }

    /// Sends `count` elements (default: all of `buf`) to rank `peer`, which receives them
    /// with `recv`; returns once it has.
    #[pyo3(signature = (buf, peer, stream, *, dtype, count = None))]
    fn send(
        &self,
        py: Python<'_>,
        buf: &Buffer,
        peer: usize,
        stream: &Stream,
        dtype: &Bound<'_, PyAny>,
        count: Option<usize>,
    ) -> PyResult<()> {
        let op = P2p::new("Comm.send", true, buf, peer, dtype, count)?;
        self.run_group(py, "Comm.send", vec![op], stream)
    }

    /// Receives `count` elements (default: all `buf` holds) from rank `peer` into `buf`.
    #[pyo3(signature = (buf, peer, stream, *, dtype, count = None))]
    fn recv(
        &self,
        py: Python<'_>,
        buf: &Buffer,
        peer: usize,
        stream: &Stream,
        dtype: &Bound<'_, PyAny>,
        count: Option<usize>,
    ) -> PyResult<()> {
        let op = P2p::new("Comm.recv", false, buf, peer, dtype, count)?;
        self.run_group(py, "Comm.recv", vec![op], stream)
    }

    /// A group of sends and receives that run together (`ncclGroupStart`/`ncclGroupEnd`):
    /// `with comm.group(stream) as g: g.send(...); g.recv(...)`; they all run when the
    /// `with` block ends (not if it raised) and are complete after it.
    fn group(slf: Py<Self>, stream: Py<Stream>) -> Group {
        Group {
            comm: slf,
            stream,
            ops: Mutex::new(Vec::new()),
        }
    }

    /// Makes the calls stream-ordered from now on (NCCL's model): each queues and returns at
    /// once; work submitted to the stream before a call is its input, work submitted after
    /// it sees its result. `context`: the context of the streams the calls are given (a
    /// proxy thread of the communicator records an event there when each call is done). A
    /// failed call lets its stream go on; its error is raised by the next call and by
    /// `synchronize()`. Buffers are held until their call ran. Not reversible.
    fn stream_ordered(&self, py: Python<'_>, context: &crate::device::Context) -> PyResult<()> {
        const OP: &str = "Comm.stream_ordered";
        let ctx = context.get(OP)?;
        let mut g = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match g.take() {
            Some(Inner::Blocking(c)) => match py.detach(|| c.into_stream_ordered(&ctx)) {
                Ok(o) => {
                    *g = Some(Inner::Ordered(o));
                    Ok(())
                }
                // The communicator went with the failed call: closed.
                Err(e) => Err(e).or_raise(),
            },
            Some(o @ Inner::Ordered(_)) => {
                *g = Some(o);
                Err(invalid(OP, "the communicator is stream-ordered already"))
            }
            None => Err(closed_comm()).or_raise(),
        }
    }

    /// Whether the calls are stream-ordered (`stream_ordered()`).
    #[getter]
    fn is_stream_ordered(&self) -> bool {
        matches!(
            *self
                .inner
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            Some(Inner::Ordered(_))
        )
    }

    /// Waits until every queued call ran (at most `timeout` seconds) and raises the first
    /// failed one's error (`ncclCommGetAsyncError`); a blocking communicator returns at once.
    #[pyo3(signature = (timeout = 60.0))]
    fn synchronize(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        const OP: &str = "Comm.synchronize";
        if !(timeout.is_finite() && timeout >= 0.0) {
            return Err(invalid(
                OP,
                format!("timeout {timeout}: seconds, 0 or more"),
            ));
        }
        let t = Duration::from_secs_f64(timeout);
        py.detach(|| {
            self.run_inner(|inner| match inner {
                Inner::Blocking(_) => Ok(()),
                Inner::Ordered(o) => o.synchronize(t),
            })
        })
        .or_raise()
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
    fn run_group(
        &self,
        py: Python<'_>,
        op: &'static str,
        ops: Vec<P2p>,
        stream: &Stream,
    ) -> PyResult<()> {
        stream.with(py, op, |st| {
            self.run_inner(|inner| match inner {
                Inner::Blocking(c) => c.group(st, |g| {
                    for o in &ops {
                        if o.send {
                            g.send(&*o.buf, o.count, o.ty, o.peer)?;
                        } else {
                            g.recv(&*o.buf, o.count, o.ty, o.peer)?;
                        }
                    }
                    Ok(())
                }),
                // Stream-ordered: one queued group, run together by the proxy.
                Inner::Ordered(sc) => {
                    let list: Vec<(&dyn ccl::Bytes, usize, ccl::DataType, usize, bool)> = ops
                        .iter()
                        .map(|o| (&*o.buf as &dyn ccl::Bytes, o.count, o.ty, o.peer, o.send))
                        .collect();
                    sc.group(&list, st)
                }
            })
        })
    }

    /// `f` on the communicator, whichever kind it is (the GIL already released by the
    /// stream's `with`).
    fn run_inner<R>(
        &self,
        f: impl FnOnce(&mut Inner) -> davinci_shim::Result<R>,
    ) -> davinci_shim::Result<R> {
        let mut g = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match g.as_mut() {
            Some(inner) => f(inner),
            None => Err(closed_comm()),
        }
    }

    /// `f` on a blocking communicator (`EINVAL` for a stream-ordered one).
    fn run_blocking<R>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut ccl::Comm) -> davinci_shim::Result<R>,
    ) -> davinci_shim::Result<R> {
        self.run_inner(|inner| match inner {
            Inner::Blocking(c) => f(c),
            Inner::Ordered(_) => Err(davinci_shim::Error::new(
                davinci_shim::Errno::EINVAL,
                op,
                "not on a stream-ordered communicator (order the streams with events instead)",
            )),
        })
    }
}

fn closed_comm() -> davinci_shim::Error {
    davinci_shim::Error::new(
        davinci_shim::Errno::EINVAL,
        "Comm",
        "the communicator is closed",
    )
}

/// A communicator's calls: blocking, or stream-ordered after `Comm.stream_ordered`.
enum Inner {
    Blocking(ccl::Comm),
    Ordered(ccl::StreamComm),
}

/// One send or receive of a group.
struct P2p {
    send: bool,
    buf: std::sync::Arc<Mem>,
    peer: usize,
    ty: ccl::DataType,
    count: usize,
}

impl P2p {
    fn new(
        op: &'static str,
        send: bool,
        buf: &Buffer,
        peer: usize,
        dtype: &Bound<'_, PyAny>,
        count: Option<usize>,
    ) -> PyResult<P2p> {
        let ty = data_type(op, dtype)?;
        let buf = buf.get(op)?;
        let count = count.unwrap_or_else(|| count_of(&buf, ty, 1));
        Ok(P2p {
            send,
            buf,
            peer,
            ty,
            count,
        })
    }
}

/// The sends and receives of `Comm.group(stream)`, run together when its `with` block ends.
#[pyclass(module = "davinci._davinci")]
pub struct Group {
    comm: Py<Comm>,
    stream: Py<Stream>,
    ops: Mutex<Vec<P2p>>,
}

#[pymethods]
impl Group {
    /// Adds a send of `count` elements (default: all of `buf`) to rank `peer`.
    #[pyo3(signature = (buf, peer, *, dtype, count = None))]
    fn send(
        &self,
        buf: &Buffer,
        peer: usize,
        dtype: &Bound<'_, PyAny>,
        count: Option<usize>,
    ) -> PyResult<()> {
        let op = P2p::new("Group.send", true, buf, peer, dtype, count)?;
        self.push(op)
    }

    /// Adds a receive of `count` elements (default: all `buf` holds) from rank `peer`.
    #[pyo3(signature = (buf, peer, *, dtype, count = None))]
    fn recv(
        &self,
        buf: &Buffer,
        peer: usize,
        dtype: &Bound<'_, PyAny>,
        count: Option<usize>,
    ) -> PyResult<()> {
        let op = P2p::new("Group.recv", false, buf, peer, dtype, count)?;
        self.push(op)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Runs the group, unless the block raised (then nothing runs).
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let ops = std::mem::take(
            &mut *self
                .ops
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if exc_type.is_some() {
            return Ok(false);
        }
        let comm = self.comm.borrow(py);
        let stream = self.stream.borrow(py);
        comm.run_group(py, "Comm.group", ops, &stream)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let n = self
            .ops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        format!("<davinci.ccl.Group of {n} operations>")
    }
}

impl Group {
    fn push(&self, op: P2p) -> PyResult<()> {
        let mut ops = self
            .ops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if ops.len() >= ccl::MAX_GROUP_OPS {
            return Err(invalid(
                "Group",
                format!("a group holds at most {} operations", ccl::MAX_GROUP_OPS),
            ));
        }
        ops.push(op);
        Ok(())
    }
}
