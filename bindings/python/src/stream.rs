//! `Stream` (an in-order queue of tasks: submit, poll, synchronize, event waits),
//! `Completion` (one task's completion, copied out of the event ring), `Event` and
//! `Recorded` (an event and one record of it: recorded on streams, waited for by streams and
//! the host).
//!
//! A stream is used by one thread at a time in the shim (`&mut`); here it sits behind a mutex
//! that is taken with the GIL released, so another Python thread using the same stream waits
//! for it without holding up the interpreter.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use davinci_shim as shim;
use pyo3::prelude::*;

use crate::base::{closed, type_error, type_name, wait_sliced, OrRaise, Slot};
use crate::callback::{self, Ready};
use crate::task::Task;

/// `davinci_shim::StreamOptions` as keyword arguments.
pub(crate) struct StreamOpts {
    pub cmd_entries: u32,
    pub event_entries: u32,
    pub keep_completions: bool,
    pub backlog_limit: Option<usize>,
    pub submit_timeout: Option<Duration>,
}

impl StreamOpts {
    pub(crate) fn build(self) -> shim::StreamOptions {
        let mut o = shim::StreamOptions::depths(self.cmd_entries, self.event_entries)
            .keep_completions(self.keep_completions);
        if let Some(l) = self.backlog_limit {
            o = o.backlog_limit(l);
        }
        if let Some(t) = self.submit_timeout {
            o = o.submit_timeout(t);
        }
        o
    }
}

/// An in-order queue of tasks on the device.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Stream {
    /// The shim's stream. Its queued EVENT_RECORD and EVENT_WAIT tasks keep their events
    /// (the shim's rule), so an `Event` object or a `Recorded` token may be a temporary.
    inner: Mutex<Option<shim::Stream>>,
    /// Host callbacks (`launch_host_func`) reached or cancelled, to call with the GIL.
    ready: Ready,
}

impl Drop for Stream {
    /// Dropping the stream cancels its callbacks not yet reached: they are called (with
    /// ECANCELED) here, as `close()` calls them.
    fn drop(&mut self) {
        let s = self
            .inner
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        drop(s);
        Python::attach(|py| callback::run(py, &self.ready));
    }
}

impl Stream {
    pub(crate) fn new(s: shim::Stream) -> Stream {
        Stream {
            inner: Mutex::new(Some(s)),
            ready: Ready::default(),
        }
    }

    /// Records `ev` on this stream (`Event.record`, `Stream.record`).
    pub(crate) fn record_event(
        &self,
        py: Python<'_>,
        op: &'static str,
        ev: Arc<shim::Event>,
    ) -> PyResult<Recorded> {
        let r = self.with(py, op, |s| ev.record(s))?;
        Ok(Recorded { inner: r })
    }

    fn lock(&self) -> MutexGuard<'_, Option<shim::Stream>> {
        // Nothing panics while it is locked; a poisoned lock holds a consistent stream.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the stream with the GIL released (it may block: a submit waiting for room).
    pub(crate) fn with<R, F>(&self, py: Python<'_>, op: &'static str, f: F) -> PyResult<R>
    where
        R: Send,
        F: FnOnce(&mut shim::Stream) -> shim::Result<R> + Send,
    {
        let r = py.detach(|| {
            let mut g = self.lock();
            g.as_mut().map(f)
        });
        callback::run(py, &self.ready);
        match r {
            Some(r) => r.or_raise(),
            None => Err(closed(op, "stream")),
        }
    }

    /// Runs `f` on the stream with the GIL held (it does not block).
    fn quick<R>(&self, op: &'static str, f: impl FnOnce(&mut shim::Stream) -> R) -> PyResult<R> {
        let r = self.lock().as_mut().map(f);
        Python::attach(|py| callback::run(py, &self.ready));
        r.ok_or_else(|| closed(op, "stream"))
    }
}

#[pymethods]
impl Stream {
    /// The driver's handle.
    #[getter]
    fn handle(&self) -> PyResult<u32> {
        self.quick("Stream.handle", |s| s.handle())
    }

    /// Submits a task; returns its task id. Waits (GIL released) while the command ring is
    /// full, up to the stream's `submit_timeout`.
    fn submit(&self, py: Python<'_>, task: &Task) -> PyResult<u64> {
        let t = task.inner.clone();
        self.with(py, "Stream.submit", move |s| s.submit(&t))
            .map(shim::TaskId::get)
    }

    /// Submits tasks in order, published together; returns the first one's task id.
    fn submit_batch(&self, py: Python<'_>, tasks: Vec<PyRef<'_, Task>>) -> PyResult<u64> {
        let ts: Vec<shim::Task> = tasks.iter().map(|t| t.inner.clone()).collect();
        self.with(py, "Stream.submit_batch", move |s| s.submit_batch(&ts))
            .map(shim::TaskId::get)
    }

    /// The completions available now, in stream order (no wait).
    fn poll(&self) -> PyResult<Vec<Completion>> {
        self.quick("Stream.poll", |s| {
            let mut out = Vec::new();
            s.poll(&mut out);
            out.into_iter().map(|c| Completion { c }).collect()
        })
    }

    /// Waits until everything submitted has completed (`timeout` seconds, None: no limit);
    /// raises the first failed task's error. Ctrl-C interrupts it (KeyboardInterrupt;
    /// nothing is lost: synchronize again to go on waiting).
    #[pyo3(signature = (timeout = None))]
    fn synchronize(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        const OP: &str = "Stream.synchronize";
        let t = crate::base::timeout(OP, timeout)?;
        // Closed before or during the wait (by another thread): ClosedError.
        let gone = AtomicBool::new(false);
        let waited = wait_sliced(py, OP, t, |slice| match self.lock().as_mut() {
            Some(s) => s.synchronize(slice),
            None => {
                gone.store(true, Ordering::Relaxed);
                Ok(())
            }
        });
        callback::run(py, &self.ready);
        waited?;
        if gone.load(Ordering::Relaxed) {
            return Err(closed(OP, "stream"));
        }
        Ok(())
    }

    /// Calls `fn(error)` on the host once the stream gets here (`cudaLaunchHostFunc`): a NOP
    /// is queued, and `fn` is called, with the GIL, by the call that reaps that NOP's
    /// completion (`synchronize`, `poll`, a submit waiting for room), after every earlier
    /// task completed and before that call returns. `error` is None when the point was
    /// reached, or the `DavinciError` saying why it never will be (a `TaskError` with
    /// ECANCELED when the stream is closed or dropped first). An exception `fn` raises goes
    /// to `sys.unraisablehook`. The device does not wait for `fn`. Returns the NOP's task id.
    #[pyo3(signature = (r#fn))]
    fn launch_host_func(&self, py: Python<'_>, r#fn: Bound<'_, PyAny>) -> PyResult<u64> {
        const OP: &str = "Stream.launch_host_func";
        if !r#fn.is_callable() {
            return Err(type_error(
                OP,
                "fn",
                format!("must be callable, not {}", type_name(&r#fn)),
            ));
        }
        let cb = callback::queue_on(&self.ready, r#fn.unbind());
        self.with(py, OP, move |s| s.launch_host_func(cb))
            .map(shim::TaskId::get)
    }

    /// Makes the stream wait (on the device) for the event's latest record.
    fn wait_event(&self, py: Python<'_>, event: &Event) -> PyResult<()> {
        let ev = event.get("Stream.wait_event")?;
        self.with(py, "Stream.wait_event", |s| s.wait_event(&ev))
    }

    /// Makes the stream wait (on the device) until another process's event, imported here
    /// (`Context.import_event`), reaches `value`: the consumer's side of a hand-off.
    fn wait_imported(
        &self,
        py: Python<'_>,
        event: &crate::shared_event::ImportedEvent,
        value: u64,
    ) -> PyResult<()> {
        let ev = event.get("Stream.wait_imported")?;
        self.with(py, "Stream.wait_imported", |s| s.wait_imported(&ev, value))
    }

    /// Makes the stream wait (on the device) for exactly this record.
    fn wait_recorded(&self, py: Python<'_>, recorded: &Recorded) -> PyResult<()> {
        let r = recorded.inner.clone();
        self.with(py, "Stream.wait_recorded", |s| s.wait_recorded(&r))
    }

    /// Records `event` here (as `event.record(stream)`).
    fn record(&self, py: Python<'_>, event: &Event) -> PyResult<Recorded> {
        let ev = event.get("Stream.record")?;
        self.record_event(py, "Stream.record", ev)
    }

    /// Arms a device fault on this stream (embedded device only; None disarms), to test error
    /// handling: "error-at=N[:ERRNO]", "hang-at=N" or "stop-at=N", counted in tasks from the
    /// next one (davinci-mockd --inject takes the same text for its devices).
    #[pyo3(signature = (fault))]
    fn inject_fault(&self, fault: Option<&str>) -> PyResult<()> {
        const OP: &str = "Stream.inject_fault";
        let f = match fault {
            None => None,
            Some(text) => Some(shim::Inject::parse(text).map_err(|e| {
                crate::base::invalid(
                    OP,
                    format!("{text:?}: {e} (error-at=N[:ERRNO], hang-at=N or stop-at=N)"),
                )
            })?),
        };
        self.quick(OP, |s| s.inject_fault(f))?.or_raise()
    }

    /// Tasks submitted and not yet reaped, of every kind: never more than `event_entries`.
    #[getter]
    fn pending_tasks(&self) -> PyResult<usize> {
        self.quick("Stream.pending_tasks", |s| s.pending_tasks())
    }

    /// Completions kept for `poll()` that a full backlog (`backlog_limit`) let go of
    /// unpolled, oldest first.
    #[getter]
    fn discarded(&self) -> PyResult<u64> {
        self.quick("Stream.discarded", |s| s.discarded())
    }

    /// The id the next submitted task gets.
    #[getter]
    fn next_task(&self) -> PyResult<u64> {
        self.quick("Stream.next_task", |s| s.next_task().get())
    }

    /// Why the device stopped this stream, if it did: (errno or None, task id, text).
    fn error_state(&self) -> PyResult<Option<(Option<i32>, u64, String)>> {
        self.quick("Stream.error_state", |s| {
            s.error_state().map(|e| {
                (
                    e.errno().map(shim::Errno::code),
                    e.task().get(),
                    e.to_string(),
                )
            })
        })
    }

    /// Destroys the stream: tasks not yet run are discarded, then the buffers they named are
    /// released. Waits (GIL released) for the driver.
    fn close(&self, py: Python<'_>) {
        py.detach(|| {
            let s = self.lock().take();
            drop(s);
        });
        callback::run(py, &self.ready);
    }

    #[getter]
    fn closed(&self) -> bool {
        self.lock().is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<&Bound<'_, PyAny>>,
        _v: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) {
        self.close(py);
    }
}

/// One task's completion.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Completion {
    c: shim::Completion,
}

#[pymethods]
impl Completion {
    /// The task's `user_data`.
    #[getter]
    fn user_data(&self) -> u64 {
        self.c.user_data
    }

    /// 0 on success, else a negative errno.
    #[getter]
    fn status(&self) -> i32 {
        self.c.status
    }

    /// The task's errno, None on success.
    #[getter]
    fn errno(&self) -> Option<i32> {
        self.c.errno().map(shim::Errno::code)
    }

    #[getter]
    fn ok(&self) -> bool {
        self.c.is_ok()
    }

    /// The opcode's name (`"FILL"`), or its number.
    #[getter]
    fn opcode(&self) -> String {
        crate::task::opcode_name(self.c.opcode)
    }

    /// Opcode-specific result (bytes, elements, event value).
    #[getter]
    fn result(&self) -> u64 {
        self.c.result
    }

    /// Device time of completion (ns).
    #[getter]
    fn timestamp_ns(&self) -> u64 {
        self.c.timestamp_ns
    }

    /// The task id `submit` returned for it.
    #[getter]
    fn task(&self) -> u64 {
        self.c.task.get()
    }

    /// Raises the task's error if it failed.
    fn check(&self) -> PyResult<()> {
        self.c.result().map(|_| ()).or_raise()
    }

    fn __repr__(&self) -> String {
        format!(
            "<davinci.Completion task={} user_data={:#x} {} status={}>",
            self.c.task.get(),
            self.c.user_data,
            self.opcode(),
            self.c.status
        )
    }
}

/// An event: a point in a stream that streams and the host wait for.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Event {
    inner: Slot<Arc<shim::Event>>,
}

impl Event {
    pub(crate) fn new(ev: Arc<shim::Event>) -> Event {
        Event {
            inner: Slot::new(ev),
        }
    }

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
        let t = crate::base::timeout(OP, timeout)?;
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

    /// Shares it with other processes' clients of the device (of this user by default;
    /// `uid`, or the one client `client_id`): the token (16 hex digits) for
    /// `Context.import_event`, whose streams then wait for this event's records.
    #[pyo3(signature = (*, uid = None, client_id = None))]
    fn export(&self, py: Python<'_>, uid: Option<u32>, client_id: Option<u32>) -> PyResult<String> {
        let ev = self.get("Event.export")?;
        let to = crate::memory::export_to(uid, client_id);
        let t = py.detach(|| ev.export(to)).or_raise()?;
        Ok(t.to_string())
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

/// One record of an event (`Event.record`'s token). It keeps its event alive (the shim's
/// rule): a token outlives a temporary `Event` object.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Recorded {
    pub(crate) inner: shim::Recorded,
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
        let t = crate::base::timeout(OP, timeout)?;
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
