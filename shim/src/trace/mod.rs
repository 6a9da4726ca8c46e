//! Timelines (issue 46): [`Device::trace`] records what the device did with this open's
//! tasks (TRACE, scope CLIENT: one record per task taken and completed, one per chunk of a
//! long task) beside what the runtime library did on the host (spans of submit,
//! synchronize, event waits, pool alloc and free, and its own reads of the device's
//! buffer), and [`Trace::write_chrome`] exports both as one Chrome trace-event JSON file,
//! which the Perfetto UI (ui.perfetto.dev), Perfetto's trace processor and chrome://tracing
//! open.
//!
//! **Clocks.** Host spans are `CLOCK_MONOTONIC`. The device's records are on the device clock
//! (docs/abi.md, TRACE: the mock devices count from their creation, the kernel module uses
//! ktime), converted to the host clock with an offset measured at every read of the device's
//! buffer: the host clock is read just before and just after the call, the device's
//! `now_ns` comes back from it, so the offset lies within that window; the session keeps
//! the window of the fastest call, and its half width is the **bound**: every device time
//! in the export is within that many ns of the host clock. The export states the offset
//! and the bound, and how many other samples disagreed with them (a device clock that runs
//! at another rate; 0 on every software device).
//!
//! **The file.** One JSON object `{"traceEvents": [...], "otherData": {...}}`, times in µs
//! with ns precision from a base stated in `otherData.time_base_ns` (small numbers parse
//! exactly; `displayTimeUnit` is left out: older trace processors took `"ns"` as the unit of
//! `ts`). A process for the host (its pid: one track per thread that made calls) and one for
//! the device (`davinciN device`: one track per stream, `stream 0x…`). Each device task is a
//! complete event (`ph: "X"`, category `task`) named by its opcode (`COPY`, `EVENT_WAIT`,
//! ...; a run of NOPs the device took together is one `NOP` with `args.tasks`), with its
//! `user_data`, command-ring `index`, `status` and record `seq`; the chunks of a long task
//! nest inside it (category `chunk`). Flow arrows (`ph: "s"` / `"f"`, `"bp": "e"`, category
//! `event`) go from an EVENT_RECORD to each EVENT_WAIT, and each host wait for the event
//! (`Event::synchronize`, `Recorded::synchronize`), that it released.
//!
//! **Why serde_json and no tracing crate.** The crates that write this format
//! (`tracing-chrome`, `tracing-chrometrace`) are layers of the `tracing` ecosystem: they
//! record the program's own spans on its own threads as they happen. The device's tracks
//! come from another clock, after the fact, with flows between slices of different
//! processes, so the events are written directly (serde's derive and serde_json).
//!
//! **Bounds and cost.** A session keeps at most 2^20 host spans, 2^20 device records and
//! 2^20 event records and waits (150 MiB at most), counting the rest as dropped. The
//! device's buffer holds 1,024 records, so the library reads it at every synchronize and
//! wait and every 256 completions reaped, and [`TraceSession::drain`] reads it on demand
//! (records the device had to overwrite first are counted as `lost`). While no session
//! runs, each hook costs one relaxed atomic load; while one runs, a span costs two clock
//! reads and a lock, and each read of the device's buffer is one TRACE call (shown on the
//! timeline as a `trace read` span).
#![forbid(unsafe_code)]

mod chrome;
mod device_scope;
pub use device_scope::WeakDevice;
pub(crate) mod hook;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use davinci_uapi::{Errno, Features, TraceRecord, TRACE_KIND_TASK};

use crate::error::{Error, Result};
use crate::observe::{trace_op, TraceScope};
use crate::Device;
use hook::{now_ns, HostSpan, Mark, Shared};
pub(crate) use hook::{pool, reaped, span, submit, synchronize, wait_event, Hook};

/// TRACE READs a session makes when it starts and when it finishes, for the clock offset
/// (the fastest round trip sets the bound).
const CLOCK_SAMPLES: usize = 8;

/// A running trace of one open ([`Device::trace`]). [`finish`](Self::finish) stops it and
/// returns the [`Trace`]; dropping it stops it and discards what was collected.
pub struct TraceSession {
    dev: Device,
    shared: Arc<Shared>,
    started_ns: u64,
    done: bool,
}

impl std::fmt::Debug for TraceSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("TraceSession")
            .field("device", &self.dev.to_string())
            .field("records", &st.records.len())
            .field("host_spans", &st.spans.len())
            .field("lost", &st.lost)
            .finish()
    }
}

impl Device {
    /// Starts a timeline of this open: the device's record of every task of its streams
    /// (TRACE, scope CLIENT) and the library's host spans (submit, synchronize, event waits,
    /// pool alloc/free) on the same clock, until [`TraceSession::finish`], whose [`Trace`]
    /// writes Chrome trace-event JSON for the Perfetto UI (the [`trace`](crate::trace)
    /// module docs say what is in it).
    ///
    /// ```
    /// # fn main() -> davinci_shim::Result<()> {
    /// # #[cfg(feature = "embedded")] {
    /// use davinci_shim::{task, Device};
    /// use std::time::Duration;
    /// let dev = Device::embedded()?;
    /// let session = dev.trace()?;
    /// let ctx = dev.create_context()?;
    /// let (mut a, mut b) = (ctx.create_stream()?, ctx.create_stream()?);
    /// let buf = dev.alloc(4096)?;
    /// a.submit(&task::fill(&buf, 7)?.with_user_data(1))?;
    /// let done = ctx.create_event()?.record(&mut a)?;
    /// b.wait_recorded(&done)?; // an arrow from the record to this wait
    /// b.synchronize(Duration::from_secs(5))?;
    /// let trace = session.finish()?;
    /// assert_eq!((trace.tasks(), trace.lost()), (3, 0));
    /// assert!(trace.clock_bound_ns() < 1_000_000);
    /// let json = trace.to_chrome_json(); // or trace.write_chrome_file("trace.json")
    /// assert!(json.contains("\"EVENT_WAIT\""));
    /// # }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// `EBUSY` if this open (or another open of its tenant) is tracing already; `ENOTTY`
    /// from a device without `Features::TRACE`; the TRACE call's errors.
    pub fn trace(&self) -> Result<TraceSession> {
        const OP: &str = "Device::trace";
        if !self.features().contains(Features::TRACE) {
            return Err(Error::new(
                Errno::ENOTTY,
                OP,
                format!("{self} keeps no traces (no Features::TRACE: a driver older than ABI 1.5)"),
            ));
        }
        let shared = Arc::new(Shared::default());
        if !self.inner.trace.attach(&shared) {
            return Err(Error::new(
                Errno::EBUSY,
                OP,
                "this open is being traced already: finish that TraceSession first",
            ));
        }
        let started_ns = now_ns();
        let session = TraceSession {
            dev: self.clone(),
            shared,
            started_ns,
            done: false,
        };
        // On failure the session's drop detaches it again (and stops the trace).
        let cursor =
            trace_op(&*self.inner.backend, TraceScope::Own, true).map_err(|e| e.in_op(OP))?;
        *session
            .shared
            .cursor
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = cursor;
        for _ in 0..CLOCK_SAMPLES {
            session.shared.read(self).map_err(|e| e.in_op(OP))?;
        }
        Ok(session)
    }
}

impl TraceSession {
    /// Reads the device's trace buffer now (the library does at every synchronize and wait
    /// and every 256 completions reaped; a program that lets more than 1,024 tasks complete
    /// without either calls this, or loses the oldest records: [`Trace::lost`]).
    ///
    /// # Errors
    /// The TRACE call's (`ENODEV`: the device went away).
    pub fn drain(&self) -> Result<()> {
        self.shared
            .read(&self.dev)
            .map(|_| ())
            .map_err(|e| e.in_op("TraceSession::drain"))
    }

    /// Stops the trace and returns it: the last records are read, TRACE STOP, then what the
    /// device completed meanwhile.
    ///
    /// # Errors
    /// The TRACE calls' (`ENODEV`: the device went away); the session is stopped either way.
    pub fn finish(mut self) -> Result<Trace> {
        const OP: &str = "TraceSession::finish";
        self.done = true;
        let r = (|| {
            for _ in 0..CLOCK_SAMPLES {
                self.shared.read(&self.dev)?;
            }
            trace_op(&*self.dev.inner.backend, TraceScope::Own, false)?;
            self.shared.read(&self.dev)
        })();
        self.dev.inner.trace.detach();
        r.map_err(|e| e.in_op(OP))?;
        let st = std::mem::take(&mut *self.shared.lock());
        Ok(Trace::new(&self.dev, st, self.started_ns, now_ns()))
    }
}

impl Drop for TraceSession {
    fn drop(&mut self) {
        if !self.done {
            self.dev.inner.trace.detach();
            let _ = trace_op(&*self.dev.inner.backend, TraceScope::Own, false);
        }
    }
}

/// How the device clock maps to the host's: host = device + `offset_ns`, within `bound_ns`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ClockFit {
    pub(crate) offset_ns: i64,
    pub(crate) bound_ns: u64,
    pub(crate) samples: usize,
    /// Samples whose window does not meet `offset ± bound` (a clock of another rate).
    pub(crate) outside: usize,
}

impl ClockFit {
    fn new(st: &hook::State) -> ClockFit {
        let Some(best) = st.best else {
            return ClockFit::default();
        };
        let (lo, hi) = best.range();
        let offset = lo + (hi - lo) / 2;
        let bound = (hi - lo + 1) / 2;
        let outside = st
            .samples
            .iter()
            .filter(|s| {
                let (a, b) = s.range();
                b < offset - bound || a > offset + bound
            })
            .count();
        ClockFit {
            offset_ns: i64::try_from(offset).unwrap_or(i64::MAX),
            bound_ns: u64::try_from(bound).unwrap_or(u64::MAX),
            samples: st.samples.len(),
            outside,
        }
    }
}

/// A finished timeline ([`TraceSession::finish`]): the device's records, the host's spans
/// and how their clocks line up; [`write_chrome`](Self::write_chrome) exports it.
pub struct Trace {
    device: String,
    device_id: u32,
    pid: u32,
    program: String,
    records: Vec<TraceRecord>,
    spans: Vec<HostSpan>,
    threads: BTreeMap<u32, String>,
    marks: Vec<Mark>,
    clock: ClockFit,
    lost: u64,
    records_dropped: u64,
    spans_dropped: u64,
    marks_dropped: u64,
    read_errors: u64,
    last_read_error: Option<String>,
    started_ns: u64,
    finished_ns: u64,
    /// Device-scope traces: who each client id is (`client 7 (python3, pid 1234, uid
    /// 1000)`), for the stream tracks' names.
    clients: BTreeMap<u32, String>,
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace")
            .field("device", &self.device)
            .field("records", &self.records.len())
            .field("tasks", &self.tasks())
            .field("host_spans", &self.spans.len())
            .field("lost", &self.lost)
            .field("dropped", &self.dropped())
            .field("clock_offset_ns", &self.clock.offset_ns)
            .field("clock_bound_ns", &self.clock.bound_ns)
            .finish()
    }
}

impl Trace {
    fn new(dev: &Device, st: hook::State, started_ns: u64, finished_ns: u64) -> Trace {
        Trace::of(
            dev.to_string(),
            dev.info().device_id,
            st,
            started_ns,
            finished_ns,
        )
    }

    fn of(
        device: String,
        device_id: u32,
        st: hook::State,
        started_ns: u64,
        finished_ns: u64,
    ) -> Trace {
        let program = std::fs::read_to_string("/proc/self/comm")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "host".to_string());
        Trace {
            device,
            device_id,
            pid: std::process::id(),
            program,
            clock: ClockFit::new(&st),
            records: st.records,
            spans: st.spans,
            threads: st.threads,
            marks: st.marks,
            lost: st.lost,
            records_dropped: st.records_dropped,
            spans_dropped: st.spans_dropped,
            marks_dropped: st.marks_dropped,
            read_errors: st.read_errors,
            last_read_error: st.last_read_error,
            started_ns,
            finished_ns,
            clients: BTreeMap::new(),
        }
    }

    /// The device traced, as its open names itself (`mock:/run/davinci/davinci0.sock`).
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The device's records (tasks and chunks), in the order it wrote them, on the device
    /// clock ([`host_ns`](Self::host_ns) converts).
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// Tasks the device recorded (a run of NOPs taken together counts each of them).
    pub fn tasks(&self) -> u64 {
        self.records
            .iter()
            .filter(|r| r.kind == TRACE_KIND_TASK)
            .map(|r| u64::from(r.tasks.max(1)))
            .sum()
    }

    /// Host spans recorded.
    pub fn host_spans(&self) -> usize {
        self.spans.len()
    }

    /// Device records overwritten in the device's buffer before the session read them.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Records and spans past the session's own bounds, not kept.
    pub fn dropped(&self) -> u64 {
        self.records_dropped + self.spans_dropped + self.marks_dropped
    }

    /// Host clock minus device clock, ns.
    pub fn clock_offset_ns(&self) -> i64 {
        self.clock.offset_ns
    }

    /// How far a device time converted to the host clock may be from the truth, ns: half
    /// the fastest TRACE round trip.
    pub fn clock_bound_ns(&self) -> u64 {
        self.clock.bound_ns
    }

    /// A device time on the host's `CLOCK_MONOTONIC`.
    pub fn host_ns(&self, device_ns: u64) -> u64 {
        let t = i128::from(device_ns) + i128::from(self.clock.offset_ns);
        u64::try_from(t.max(0)).unwrap_or(u64::MAX)
    }

    /// Writes the Chrome trace-event JSON (the module docs say what is in it).
    ///
    /// # Errors
    /// The writer's.
    pub fn write_chrome(&self, w: impl std::io::Write) -> std::io::Result<()> {
        chrome::write(self, w)
    }

    /// [`write_chrome`](Self::write_chrome) into a new file at `path` (replacing one there).
    ///
    /// # Errors
    /// The file cannot be created or written (its errno, and the path).
    pub fn write_chrome_file(&self, path: impl AsRef<Path>) -> Result<()> {
        const OP: &str = "Trace::write_chrome_file";
        let path = path.as_ref();
        let what = format!("{}", path.display());
        let file = std::fs::File::create(path).map_err(|e| Error::io(OP, &what, &e))?;
        let mut w = std::io::BufWriter::new(file);
        self.write_chrome(&mut w)
            .and_then(|()| std::io::Write::flush(&mut w))
            .map_err(|e| Error::io(OP, &what, &e))
    }

    /// The Chrome trace-event JSON as a string.
    pub fn to_chrome_json(&self) -> String {
        let mut out = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = self.write_chrome(&mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(all(test, feature = "embedded"))]
mod tests;
