//! What `davinci.trace` (`davinci/_trace.py`) runs on: the devices this process opened
//! (weakly: a profiler keeps no open alive), and timelines of them (the shim's
//! `Device::trace`) from `_trace_begin` to `_trace_end`, which hands each device's Chrome
//! trace-event JSON and figures to Python to merge into one file. A device opened while a
//! trace runs is traced from its open.
#![forbid(unsafe_code)]

use std::sync::{Mutex, MutexGuard};

use davinci_shim::{self as shim, Errno, Error, TraceSession, WeakDevice};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::base::{err, OrRaise};
use crate::device::Device;

/// Opens this process made through the package (pruned of closed ones as it grows).
static OPENS: Mutex<Vec<WeakDevice>> = Mutex::new(Vec::new());
/// The running trace's sessions: `Some` from `_trace_begin` to `_trace_end`.
static ACTIVE: Mutex<Option<Vec<TraceSession>>> = Mutex::new(None);
/// The running trace follows every open (none were named): devices opened during it are
/// traced too.
static ALL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Opens made during a trace that could not be traced (another tenant's open traces), for
/// the summary.
static MISSED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A device was opened: remembered, and traced if a trace runs.
pub(crate) fn opened(dev: &shim::Device) {
    {
        let mut opens = lock(&OPENS);
        if opens.len() >= 64 {
            opens.retain(|w| w.upgrade().is_some());
        }
        opens.push(dev.downgrade());
    }
    if !ALL.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    if let Some(sessions) = lock(&ACTIVE).as_mut() {
        match dev.trace() {
            Ok(s) => sessions.push(s),
            Err(e) => lock(&MISSED).push(format!("{dev}: {e}")),
        }
    }
}

/// Starts tracing `devices`, or every open device of this process (and those opened until
/// `_trace_end`). Returns how many are traced.
#[pyfunction]
#[pyo3(signature = (devices = None))]
pub(crate) fn _trace_begin(py: Python<'_>, devices: Option<Vec<Py<Device>>>) -> PyResult<usize> {
    let mut active = lock(&ACTIVE);
    if active.is_some() {
        return Err(err(Error::new(
            Errno::EBUSY,
            "davinci.trace",
            "a trace is running in this process already: one davinci.trace at a time",
        )));
    }
    let mut missed = Vec::new();
    let mut sessions = Vec::new();
    ALL.store(devices.is_none(), std::sync::atomic::Ordering::Relaxed);
    match devices {
        // Named devices: each must be traced (dropping the sessions started so far stops them).
        Some(list) => {
            for d in &list {
                let d = d.get().get("davinci.trace")?;
                sessions.push(py.detach(|| d.trace()).or_raise()?);
            }
        }
        // Every open device, newest first: another open of the same tenant on the same
        // device traces already (one buffer per tenant), or the device keeps no traces, is
        // said in the summary rather than raised.
        None => {
            let devs: Vec<shim::Device> = lock(&OPENS)
                .iter()
                .rev()
                .filter_map(WeakDevice::upgrade)
                .collect();
            for d in devs {
                match py.detach(|| d.trace()) {
                    Ok(s) => sessions.push(s),
                    Err(e) => missed.push(format!("{d}: {e}")),
                }
            }
        }
    }
    *lock(&MISSED) = missed;
    let n = sessions.len();
    *active = Some(sessions);
    Ok(n)
}

/// One device's trace: its Chrome trace-event JSON and its figures.
type Traced = (String, Py<PyDict>);

/// Stops the trace: per device, its Chrome trace-event JSON and a dict of figures (device,
/// tasks, records, host_spans, lost, dropped, clock_bound_ns); and the opens that could not
/// be traced.
#[pyfunction]
pub(crate) fn _trace_end(py: Python<'_>) -> PyResult<(Vec<Traced>, Vec<String>)> {
    let Some(sessions) = lock(&ACTIVE).take() else {
        return Err(err(Error::new(
            Errno::ENOENT,
            "davinci.trace",
            "no trace is running",
        )));
    };
    let mut out = Vec::with_capacity(sessions.len());
    let mut first_error = None;
    for s in sessions {
        match py.detach(|| s.finish()) {
            Ok(t) => {
                let d = PyDict::new(py);
                d.set_item("device", t.device())?;
                d.set_item("tasks", t.tasks())?;
                d.set_item("records", t.records().len())?;
                d.set_item("host_spans", t.host_spans())?;
                d.set_item("lost", t.lost())?;
                d.set_item("dropped", t.dropped())?;
                d.set_item("clock_bound_ns", t.clock_bound_ns())?;
                out.push((t.to_chrome_json(), d.unbind()));
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(err(e));
    }
    Ok((out, std::mem::take(&mut *lock(&MISSED))))
}
