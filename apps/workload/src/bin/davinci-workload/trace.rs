//! `--trace FILE`: the run's timeline (`Device::trace`) written as Chrome trace-event JSON,
//! for the Perfetto UI (ui.perfetto.dev) or chrome://tracing: the device's tasks per stream
//! beside the library's host spans, on one clock, with arrows from each event record to the
//! waits it released.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use davinci_shim::{Device, TraceSession};
use serde::Serialize;

use crate::failure::Failure;

/// What the trace held, in the report (`"trace"` of the JSON, a line of the human one).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TraceSummary {
    pub(crate) file: PathBuf,
    pub(crate) device_tasks: u64,
    pub(crate) device_records: usize,
    pub(crate) host_spans: usize,
    /// Device records overwritten before the library read them.
    pub(crate) lost: u64,
    /// Records and spans past the session's bounds.
    pub(crate) dropped: u64,
    pub(crate) clock_offset_ns: i64,
    pub(crate) clock_bound_ns: u64,
}

/// Creates `path` (so that a path that cannot be written fails before the run, not after
/// it) and starts tracing `dev`.
pub(crate) fn start(dev: &Device, path: &Path) -> Result<TraceSession, Failure> {
    std::fs::File::create(path).map_err(|e| {
        Failure::usage(format!(
            "--trace {}: cannot create the file: {e}",
            path.display()
        ))
    })?;
    dev.trace().map_err(|e| Failure::run(&e))
}

/// Stops the trace and writes it to `path`; warns (through `warn`) about what it misses.
pub(crate) fn finish(
    session: TraceSession,
    path: &Path,
    warn: &mut impl FnMut(String),
) -> Result<TraceSummary, Failure> {
    let trace = session.finish().map_err(|e| Failure::run(&e))?;
    trace
        .write_chrome_file(path)
        .map_err(|e| Failure::run(&e))?;
    let s = TraceSummary {
        file: path.to_path_buf(),
        device_tasks: trace.tasks(),
        device_records: trace.records().len(),
        host_spans: trace.host_spans(),
        lost: trace.lost(),
        dropped: trace.dropped(),
        clock_offset_ns: trace.clock_offset_ns(),
        clock_bound_ns: trace.clock_bound_ns(),
    };
    eprintln!(
        "davinci-workload: trace written to {}: {} device tasks ({} records), {} host spans; \
         device times within {} ns of the host clock; open it in ui.perfetto.dev",
        path.display(),
        s.device_tasks,
        s.device_records,
        s.host_spans,
        s.clock_bound_ns
    );
    if s.lost > 0 {
        warn(format!(
            "the trace lost {} device records (the device's buffer overflowed between two \
             reads): some tasks are missing from {}",
            s.lost,
            path.display()
        ));
    }
    if s.dropped > 0 {
        warn(format!(
            "the trace dropped {} records and spans past its bounds: {} covers the start of \
             the run (trace fewer tasks)",
            s.dropped,
            path.display()
        ));
    }
    Ok(s)
}
