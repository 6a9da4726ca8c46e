//! `davinci_trace_*`: a timeline of this open (the shim's `Device::trace`, ABI 1.5 TRACE):
//! what the device did with every task of the open's streams, beside what libdavinci did on
//! the host (submits, synchronizes, event waits, pool allocations), on one clock, written as
//! Chrome trace-event JSON for ui.perfetto.dev or chrome://tracing (docs/runtimes.md,
//! "Profiling a run").
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};

use crate::device::davinci_device;
use crate::ffi::{c_str, get, guard, Fail};

/// What `davinci_trace_stop` wrote.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct davinci_trace_summary {
    /// Tasks the device recorded (a run of NOPs it took together counts each).
    pub tasks: u64,
    /// Device records (tasks, runs and chunks of long tasks).
    pub records: u64,
    /// Host spans (submit, synchronize, waits, pool).
    pub host_spans: u64,
    /// Records the device overwrote before libdavinci read them (its buffer holds 1,024:
    /// libdavinci reads it at every synchronize and wait and every 256 completions; a
    /// program that lets more complete without either calls `davinci_trace_drain`).
    pub lost: u64,
    /// Records and spans past the session's own bounds, not kept.
    pub dropped: u64,
    /// How far a device time in the file may be from the host clock, in ns.
    pub clock_bound_ns: u64,
}

/// Starts a timeline of this open: from now on the device records each task of its streams
/// and libdavinci each host call, until `davinci_trace_stop`.
///
/// Returns 0; -EBUSY if this open (or another open of its tenant: one trace buffer per
/// tenant) traces already; -ENOSPC if every trace buffer of the device is taken; -ENOTTY from
/// a driver before ABI 1.5.
///
/// # Safety
/// Threads: any. `dev` a live handle.
#[no_mangle]
pub unsafe extern "C" fn davinci_trace_start(dev: *const davinci_device) -> c_int {
    guard("davinci_trace_start", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let mut slot = d.trace.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return Err(Fail::new(
                libc::EBUSY,
                "this device handle is tracing already: davinci_trace_stop first",
            ));
        }
        *slot = Some(d.dev.trace()?);
        Ok(())
    })
}

/// Reads the device's trace buffer now (libdavinci does at every synchronize and wait and
/// every 256 completions it reaps).
///
/// Returns 0; -ENOENT if no trace is running.
///
/// # Safety
/// Threads: any. `dev` a live handle.
#[no_mangle]
pub unsafe extern "C" fn davinci_trace_drain(dev: *const davinci_device) -> c_int {
    guard("davinci_trace_drain", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let slot = d.trace.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_ref() {
            Some(s) => Ok(s.drain()?),
            None => Err(Fail::new(
                libc::ENOENT,
                "no trace is running: davinci_trace_start",
            )),
        }
    })
}

/// Stops the timeline and writes it to `path` as Chrome trace-event JSON (replacing a file
/// there; NULL: nothing is written), and what it holds into `*out` (may be NULL).
///
/// Returns 0; -ENOENT if no trace is running; the file's errno if it cannot be written (the
/// trace is stopped either way).
///
/// # Safety
/// Threads: any. `dev` a live handle; `path` NULL or a NUL-terminated string; `out` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_trace_stop(
    dev: *const davinci_device,
    path: *const c_char,
    out: *mut davinci_trace_summary,
) -> c_int {
    guard("davinci_trace_stop", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let path = if path.is_null() {
            None
        } else {
            // SAFETY: the caller's contract.
            Some(unsafe { c_str(path, "path") }?.to_string())
        };
        let session = d.trace.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(session) = session else {
            return Err(Fail::new(
                libc::ENOENT,
                "no trace is running: davinci_trace_start",
            ));
        };
        let trace = session.finish()?;
        if let Some(p) = &path {
            trace.write_chrome_file(p)?;
        }
        let summary = davinci_trace_summary {
            tasks: trace.tasks(),
            records: trace.records().len() as u64,
            host_spans: trace.host_spans() as u64,
            lost: trace.lost(),
            dropped: trace.dropped(),
            clock_bound_ns: trace.clock_bound_ns(),
        };
        if !out.is_null() {
            // SAFETY: the caller's contract: non-NULL `out` is writable.
            unsafe { out.write(summary) };
        }
        Ok(())
    })
}
