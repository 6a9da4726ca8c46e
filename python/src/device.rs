//! `Device`, `Context`, `Event` and `Recorded`: the shim's opens, contexts and events as
//! Python classes, each closable (`close()`, `with`), and [`Slot`], the closable cell they
//! share.
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex, MutexGuard};

use davinci_shim::{self as shim, DevicePath, ExportToken, ShareMode};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::memory::{Buffer, Mem};
use crate::stream::{Stream, StreamOpts};
use crate::{closed, invalid, timeout, wait_sliced, OrRaise};

/// A value that `close()` takes away: what every closable class holds.
pub(crate) struct Slot<T>(Mutex<Option<T>>);

impl<T> Slot<T> {
    pub(crate) fn new(v: T) -> Slot<T> {
        Slot(Mutex::new(Some(v)))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<T>> {
        // Nothing panics while it is locked; a poisoned lock holds a consistent value.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops the value (closing it, unless something else still holds it).
    pub(crate) fn close(&self) {
        let v = self.lock().take();
        drop(v);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().is_none()
    }
}

impl<T: Clone> Slot<T> {
    /// A clone of the value, or `EBADF` naming `what` once closed.
    pub(crate) fn get(&self, op: &'static str, what: &str) -> PyResult<T> {
        self.lock().clone().ok_or_else(|| closed(op, what))
    }
}

/// An open of a davinci device (`davinci_shim::Device`).
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Device {
    inner: Slot<shim::Device>,
    spec: String,
}

impl Device {
    pub(crate) fn get(&self, op: &'static str) -> PyResult<shim::Device> {
        self.inner.get(op, "device")
    }
}

#[pymethods]
impl Device {
    #[new]
    #[pyo3(signature = (spec = None))]
    fn new(py: Python<'_>, spec: Option<String>) -> PyResult<Device> {
        let spec = spec
            .or_else(shim::device_path_from_env)
            .unwrap_or_else(|| "embedded".to_string());
        let path = DevicePath::parse(&spec).or_raise()?;
        let dev = py.detach(|| shim::Device::open_path(&path)).or_raise()?;
        Ok(Device {
            inner: Slot::new(dev),
            spec,
        })
    }

    /// What it was opened with: `embedded`, `mock:SOCKET` or `/dev/davinciN`.
    #[getter]
    fn spec(&self) -> &str {
        &self.spec
    }

    /// Which device and which client: `davinci-mockd device 0 at mock:... (client 3)`.
    fn __str__(&self) -> String {
        match self.inner.lock().as_ref() {
            Some(d) => d.to_string(),
            None => format!("{} (closed)", self.spec),
        }
    }

    fn __repr__(&self) -> String {
        match self.inner.lock().as_ref() {
            Some(d) => format!("<davinci.Device {d}>"),
            None => format!("<davinci.Device {} (closed)>", self.spec),
        }
    }

    /// The GET_INFO reply read at open, as a dict.
    #[getter]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        info_dict(py, self.get("Device.info")?.info())
    }

    /// A fresh GET_INFO (memory in use, clients now), as a dict.
    fn query_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dev = self.get("Device.query_info")?;
        let info = py.detach(|| dev.query_info()).or_raise()?;
        info_dict(py, &info)
    }

    /// This open's client id (what `davinci-smi info -t usage` shows), if the driver says.
    #[getter]
    fn client_id(&self) -> PyResult<Option<u32>> {
        Ok(self.get("Device.client_id")?.client_id())
    }

    /// Device memory allocated by all clients now, in bytes.
    fn memory_used(&self, py: Python<'_>) -> PyResult<u64> {
        let dev = self.get("Device.memory_used")?;
        py.detach(|| dev.memory_used()).or_raise()
    }

    /// Allocates `nbytes` of device memory, zeroed, with a host view.
    fn alloc(&self, py: Python<'_>, nbytes: usize) -> PyResult<Buffer> {
        let dev = self.get("Device.alloc")?;
        let b = py.detach(|| dev.alloc(nbytes)).or_raise()?;
        Ok(Buffer::new(Mem::Dev(b)))
    }

    /// A new context (streams and events live in one).
    fn create_context(&self, py: Python<'_>) -> PyResult<Context> {
        let dev = self.get("Device.create_context")?;
        let ctx = py.detach(|| dev.create_context()).or_raise()?;
        Ok(Context {
            inner: Slot::new(ctx),
        })
    }

    /// Imports a buffer another client exported (`Buffer.export()`'s token: 16 hex digits,
    /// or the integer).
    fn import_buffer(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        let dev = self.get("Device.import_buffer")?;
        let token = if let Ok(s) = token.extract::<String>() {
            s.parse::<ExportToken>().or_raise()?
        } else if let Ok(v) = token.extract::<u64>() {
            ExportToken(v)
        } else {
            return Err(invalid(
                "Device.import_buffer",
                "the token is Buffer.export()'s string (16 hex digits) or an int",
            ));
        };
        let b = py.detach(|| dev.import(token)).or_raise()?;
        Ok(Buffer::new(Mem::Dev(b)))
    }

    /// Sets the sharing mode: "shared" (many isolated clients) or "exclusive".
    fn set_share_mode(&self, py: Python<'_>, mode: &str) -> PyResult<()> {
        let m = match mode {
            "shared" => ShareMode::Shared,
            "exclusive" => ShareMode::Exclusive,
            _ => {
                return Err(invalid(
                    "Device.set_share_mode",
                    format!("mode {mode:?}: use \"shared\" or \"exclusive\""),
                ))
            }
        };
        let dev = self.get("Device.set_share_mode")?;
        py.detach(|| dev.set_share_mode(m)).or_raise()
    }

    /// The sharing mode ("shared" or "exclusive") and the clients attached.
    fn share_mode(&self, py: Python<'_>) -> PyResult<(&'static str, u32)> {
        let dev = self.get("Device.share_mode")?;
        let (m, n) = py.detach(|| dev.share_mode()).or_raise()?;
        Ok((
            match m {
                ShareMode::Shared => "shared",
                ShareMode::Exclusive => "exclusive",
            },
            n,
        ))
    }

    /// Closes this handle of the open; the open itself closes when nothing made from it
    /// (contexts, streams, buffers) is left.
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
}

fn info_dict<'py>(py: Python<'py>, i: &shim::DeviceInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("abi_version", (i.abi_major, i.abi_minor))?;
    d.set_item("features", i.features.bits())?;
    d.set_item("device_id", i.device_id)?;
    d.set_item("page_size", i.page_size)?;
    d.set_item("memory_size", i.memory_size)?;
    d.set_item("memory_used", i.memory_used)?;
    d.set_item("client_memory_limit", i.client_memory_limit)?;
    d.set_item("max_clients", i.max_clients)?;
    d.set_item("max_contexts", i.max_contexts)?;
    d.set_item("max_streams", i.max_streams)?;
    d.set_item("max_events", i.max_events)?;
    d.set_item("max_allocations", i.max_allocations)?;
    d.set_item("max_cmd_entries", i.max_cmd_entries)?;
    d.set_item("max_event_entries", i.max_event_entries)?;
    d.set_item("mem_align", i.mem_align)?;
    d.set_item("share_mode", i.share_mode)?;
    d.set_item("clients", i.clients)?;
    Ok(d)
}

/// A context: the streams and events made from it may order each other.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Context {
    inner: Slot<shim::Context>,
}

#[pymethods]
impl Context {
    /// The driver's handle.
    #[getter]
    fn handle(&self) -> PyResult<u32> {
        Ok(self.inner.get("Context.handle", "context")?.handle())
    }

    /// A new stream; the options are `davinci_shim::StreamOptions`'s (seconds for the
    /// timeout).
    #[pyo3(signature = (*, cmd_entries = 256, event_entries = 512, keep_completions = true,
                        backlog_limit = None, submit_timeout = None))]
    fn create_stream(
        &self,
        py: Python<'_>,
        cmd_entries: u32,
        event_entries: u32,
        keep_completions: bool,
        backlog_limit: Option<usize>,
        submit_timeout: Option<f64>,
    ) -> PyResult<Stream> {
        const OP: &str = "Context.create_stream";
        let ctx = self.inner.get(OP, "context")?;
        let opts = StreamOpts {
            cmd_entries,
            event_entries,
            keep_completions,
            backlog_limit,
            submit_timeout: timeout(OP, submit_timeout)?,
        }
        .build();
        let s = py.detach(|| ctx.create_stream_with(opts)).or_raise()?;
        Ok(Stream::new(s))
    }

    /// A new event.
    fn create_event(&self, py: Python<'_>) -> PyResult<Event> {
        let ctx = self.inner.get("Context.create_event", "context")?;
        let e = py.detach(|| ctx.create_event()).or_raise()?;
        Ok(Event {
            inner: Slot::new(Arc::new(e)),
        })
    }

    /// Allocates device memory (as `Device.alloc`).
    fn alloc(&self, py: Python<'_>, nbytes: usize) -> PyResult<Buffer> {
        let ctx = self.inner.get("Context.alloc", "context")?;
        let b = py.detach(|| ctx.alloc(nbytes)).or_raise()?;
        Ok(Buffer::new(Mem::Dev(b)))
    }

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
}

/// An event: a point in a stream that streams and the host wait for.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Event {
    inner: Slot<Arc<shim::Event>>,
}

impl Event {
    pub(crate) fn get(&self, op: &'static str) -> PyResult<Arc<shim::Event>> {
        self.inner.get(op, "event")
    }
}

#[pymethods]
impl Event {
    #[getter]
    fn handle(&self) -> PyResult<u32> {
        Ok(self.get("Event.handle")?.handle())
    }

    /// The value of its latest record (0: never recorded).
    #[getter]
    fn recorded(&self) -> PyResult<u64> {
        Ok(self.get("Event.recorded")?.recorded())
    }

    /// Records it on `stream`: the returned token's value is reached when the stream gets
    /// there.
    fn record(&self, py: Python<'_>, stream: &Stream) -> PyResult<Recorded> {
        let ev = self.get("Event.record")?;
        stream.record_event(py, "Event.record", ev)
    }

    /// Waits on the host until the latest record has been reached (`timeout` seconds, None:
    /// no limit). Ctrl-C interrupts it.
    #[pyo3(signature = (timeout = None))]
    fn synchronize(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        const OP: &str = "Event.synchronize";
        let ev = self.get(OP)?;
        let t = crate::timeout(OP, timeout)?;
        wait_sliced(py, OP, t, |slice| ev.synchronize(slice))
    }

    /// Whether the latest record has been reached (no wait).
    fn query(&self, py: Python<'_>) -> PyResult<bool> {
        let ev = self.get("Event.query")?;
        py.detach(|| ev.query()).or_raise()
    }

    /// The value the device has reached.
    fn value(&self, py: Python<'_>) -> PyResult<u64> {
        let ev = self.get("Event.value")?;
        py.detach(|| ev.value()).or_raise()
    }

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
}

/// One record of an event (`Event.record`'s token). It keeps its event alive: a token
/// outlives a temporary `Event` object.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Recorded {
    pub(crate) inner: shim::Recorded,
    pub(crate) event: Arc<shim::Event>,
}

#[pymethods]
impl Recorded {
    /// The value this record sets the event to.
    #[getter]
    fn value(&self) -> u64 {
        self.inner.value()
    }

    #[getter]
    fn event_handle(&self) -> u32 {
        self.inner.event_handle()
    }

    #[getter]
    fn stream_handle(&self) -> u32 {
        self.inner.stream_handle()
    }

    /// The record's task id in its stream.
    #[getter]
    fn task(&self) -> u64 {
        self.inner.task().get()
    }

    /// Device time of the record (ns), once its stream reaped its completion.
    #[getter]
    fn timestamp_ns(&self) -> Option<u64> {
        self.inner.timestamp_ns()
    }

    /// Waits on the host until the event reaches this record (`timeout` seconds, None: no
    /// limit). Ctrl-C interrupts it.
    #[pyo3(signature = (timeout = None))]
    fn synchronize(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        const OP: &str = "Recorded.synchronize";
        let t = crate::timeout(OP, timeout)?;
        let r = self.inner.clone();
        wait_sliced(py, OP, t, |slice| r.synchronize(slice))
    }

    /// Whether the event has reached this record (no wait).
    fn query(&self, py: Python<'_>) -> PyResult<bool> {
        let r = self.inner.clone();
        py.detach(|| r.query()).or_raise()
    }

    /// Seconds of device time from this record to `end` (both completed and reaped).
    fn elapsed(&self, end: &Recorded) -> PyResult<f64> {
        Ok(shim::Recorded::elapsed(&self.inner, &end.inner)
            .or_raise()?
            .as_secs_f64())
    }

    fn __repr__(&self) -> String {
        format!(
            "<davinci.Recorded event={:#x} value={} task={}>",
            self.inner.event_handle(),
            self.inner.value(),
            self.inner.task().get()
        )
    }
}

/// The symbolic name of an errno this ABI knows (`"ETIMEDOUT"`), or None.
#[pyfunction]
pub fn errno_name(code: i32) -> Option<&'static str> {
    shim::Errno::from_code(code).map(shim::Errno::name)
}
