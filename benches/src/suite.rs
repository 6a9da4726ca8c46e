//! The rows of one `davinci-bench` run, what each measures, and the runner: measurements are
//! made once (rows sharing one reuse it), in table order, with progress lines on stderr.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use davinci_shim::Device;

use crate::hog::{self, Hog};
use crate::measure::{Fail, LatencyRun, ThroughputRun, Window};
use crate::mockd::{self, Mockd};
use crate::shim_rows::{self, ControlOp, Pace, StreamRun};
use crate::procs::{self, ProcsRun};
use crate::report::{self, Machine, Outcome, Report, RowSpec, Target};
use crate::stats::Summary;
use crate::{spsc, sys};

/// Batch of the multi-stream and multi-process rows.
pub const STREAMS_BATCH: usize = 64;

/// The fraction of the full-load rate the light-load doorbell row is paced at.
pub const LIGHT_LOAD: f64 = 0.10;

/// How a run is configured.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Short windows.
    pub quick: bool,
    /// A CPU hog on every CPU while the rows run (after the quiet round trip).
    pub contended: bool,
    /// Run only the rows whose name contains this (and the rows they are compared with).
    pub filter: Option<String>,
    /// The `davinci-mockd` binary (else looked for beside this executable).
    pub mockd: Option<PathBuf>,
    /// The executable the client processes run (`<exe> client ...`): `davinci-bench`
    /// itself. `None`: the multi-process rows are skipped.
    pub client_exe: Option<PathBuf>,
    /// Print progress lines on stderr.
    pub progress: bool,
    /// The embedded device the embedded rows use (each on its own context and streams).
    /// `None`: the run creates one ([`Device::embedded`]) and drops it with the [`Suite`].
    pub embedded: Option<Device>,
}

/// The measurement windows of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// Throughput rows.
    pub throughput: Window,
    /// Round-trip latency rows.
    pub latency: Window,
    /// Control-path rows (each sample is a driver round trip or two).
    pub control: Window,
}

impl Windows {
    /// The windows of a default run (about a minute of windows in all) or of a `--quick`
    /// one (a few seconds).
    pub fn new(quick: bool) -> Windows {
        let ms = Duration::from_millis;
        if quick {
            Windows {
                throughput: Window::new(ms(250), ms(50)),
                latency: Window::new(ms(250), ms(50)),
                control: Window::new(ms(100), ms(20)),
            }
        } else {
            Windows {
                throughput: Window::new(ms(3000), ms(200)),
                latency: Window::new(ms(2000), ms(200)),
                control: Window::new(ms(1000), ms(100)),
            }
        }
    }
}

/// Where a control-path row runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The embedded mock device (in this process).
    Embedded,
    /// A `davinci-mockd` device (Unix socket round trips).
    Mockd,
}

/// One measurement; several rows may read one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// The two-ring SPSC pipeline, streaming at this batch.
    TwoRing(u32),
    /// The two-ring pipeline's round trip.
    TwoRingRtt,
    /// io_uring NOPs at this batch.
    Uring(u32),
    /// One empty ioctl per call.
    IoctlFloor,
    /// Ours: streaming NOPs on the embedded device.
    Stream {
        /// Streams (one context, one host thread).
        streams: usize,
        /// Tasks per submit.
        batch: usize,
    },
    /// Ours: one stream, batch 1, paced at [`LIGHT_LOAD`] of the full-load batch-1 rate.
    Light,
    /// Ours: round trips with one task in flight.
    Rtt,
    /// Ours: round trips before the CPU hog starts (`--contended` only).
    RttQuiet,
    /// Ours: a control-path operation.
    Control(ControlOp, Backend),
    /// Ours: client processes on one `davinci-mockd` device.
    Procs(usize),
    /// Ours: one SUBMIT_TASK ioctl per task through `davinci-mockd`.
    SubmitTask,
}

/// What a measurement gave.
#[derive(Debug, Clone)]
pub enum Measured {
    /// Tasks over a window.
    Rate(ThroughputRun),
    /// Ours streaming (per stream, counters).
    Streams(StreamRun),
    /// The light-load run and the rate it was paced at.
    Light(StreamRun, f64),
    /// Latency samples' summary.
    Latency(Summary),
    /// Client processes.
    Procs(ProcsRun),
}

type Extract = fn(&Measured) -> Option<(f64, String)>;

/// One row: its name, unit, measurement, how its value is read from it, what it is compared
/// with and its target.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Name.
    pub name: &'static str,
    /// Unit.
    pub unit: &'static str,
    /// The measurement.
    pub key: Key,
    /// Its value and a detail note.
    pub value: Extract,
    /// The row compared with.
    pub baseline: Option<&'static str>,
    /// The target.
    pub target: Option<Target>,
}

fn rate(m: &Measured) -> Option<(f64, String)> {
    let r = match m {
        Measured::Rate(r) => *r,
        Measured::Streams(s) => s.run,
        Measured::Procs(p) => {
            let each: Vec<String> = p
                .clients
                .iter()
                .map(|c| report::fmt_value(c.rate(), "/s"))
                .collect();
            return Some((
                p.total_rate(),
                format!(
                    "{} process(es), tasks/s each: {}",
                    p.clients.len(),
                    each.join(", ")
                ),
            ));
        }
        _ => return None,
    };
    let mut note = format!("{} tasks in {:.2} s", r.tasks, r.elapsed.as_secs_f64());
    if let Measured::Streams(s) = m {
        note.push_str(&format!(", all {} completions checked in order", s.checked));
    }
    Some((r.rate(), note))
}

fn ns_per_call(m: &Measured) -> Option<(f64, String)> {
    let (v, n) = rate(m)?;
    Some((v, format!("{n}, {:.0} ns per call", 1e9 / v.max(1e-9))))
}

fn min_share(m: &Measured) -> Option<(f64, String)> {
    match m {
        Measured::Streams(s) => {
            let max = s.per_stream.iter().max().copied().unwrap_or(0);
            let min = s.per_stream.iter().min().copied().unwrap_or(0);
            Some((
                s.min_share(),
                format!(
                    "{} streams: tasks per stream min {min}, max {max}",
                    s.per_stream.len()
                ),
            ))
        }
        Measured::Procs(p) => Some((p.min_share(), "slowest process over the mean".into())),
        _ => None,
    }
}

fn doorbells(m: &Measured) -> Option<(f64, String)> {
    let (s, paced) = match m {
        Measured::Streams(s) => (s, None),
        Measured::Light(s, r) => (s, Some(*r)),
        _ => return None,
    };
    let mut note = format!(
        "{} doorbells for {} tasks ({} futex wakes)",
        s.stats.doorbells, s.stats.tasks_submitted, s.stats.futex_wakes
    );
    if let Some(r) = paced {
        note.push_str(&format!(
            "; paced at {} tasks/s ({:.0}% of the full-load batch-1 rate), ran at {}",
            report::fmt_value(r, "/s"),
            LIGHT_LOAD * 100.0,
            report::fmt_value(s.run.rate(), "/s")
        ));
    }
    Some((s.stats.doorbells_per_1000_tasks(), note))
}

fn p50(m: &Measured) -> Option<(f64, String)> {
    match m {
        Measured::Latency(s) => Some((s.p50 as f64, latency_note(s))),
        _ => None,
    }
}

fn p99(m: &Measured) -> Option<(f64, String)> {
    match m {
        Measured::Latency(s) => Some((s.p99 as f64, latency_note(s))),
        _ => None,
    }
}

fn latency_note(s: &Summary) -> String {
    format!(
        "{} samples: p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns, mean {:.0} ns",
        s.count, s.p50, s.p99, s.p999, s.max, s.mean
    )
}

/// The rows of a run, in table order (`contended` adds the quiet round trip first and
/// bounds the p99 by it).
pub fn plan(contended: bool) -> Vec<Plan> {
    use Key::*;
    let row = |name, unit, key, value: Extract, baseline, target| Plan {
        name,
        unit,
        key,
        value,
        baseline,
        target,
    };
    let ts = "tasks/s";
    let mut rows = Vec::new();
    if contended {
        rows.push(row("ours/rtt/quiet-p50", "ns", RttQuiet, p50, None, None));
    }
    rows.extend([
        row("baseline/two-ring/batch1", ts, TwoRing(1), rate, None, None),
        row(
            "baseline/two-ring/batch64",
            ts,
            TwoRing(64),
            rate,
            None,
            None,
        ),
        row(
            "baseline/two-ring/rtt-p50",
            "ns",
            TwoRingRtt,
            p50,
            None,
            None,
        ),
        row("baseline/io_uring/batch1", ts, Uring(1), rate, None, None),
        row("baseline/io_uring/batch64", ts, Uring(64), rate, None, None),
        row(
            "baseline/ioctl-floor",
            "calls/s",
            IoctlFloor,
            ns_per_call,
            None,
            None,
        ),
        row(
            "ours/stream/batch1",
            ts,
            Stream {
                streams: 1,
                batch: 1,
            },
            rate,
            Some("baseline/io_uring/batch1"),
            Some(Target::ratio_at_least(2.0)),
        ),
        row(
            "ours/stream/batch64",
            ts,
            Stream {
                streams: 1,
                batch: 64,
            },
            rate,
            Some("baseline/two-ring/batch64"),
            Some(Target::ratio_at_least(0.6)),
        ),
        row(
            "ours/stream/batch64-vs-io_uring",
            ts,
            Stream {
                streams: 1,
                batch: 64,
            },
            rate,
            Some("baseline/io_uring/batch64"),
            Some(Target::ratio_at_least(4.0)),
        ),
        row(
            "ours/streams/1",
            ts,
            Stream {
                streams: 1,
                batch: STREAMS_BATCH,
            },
            rate,
            None,
            None,
        ),
        row(
            "ours/streams/4",
            ts,
            Stream {
                streams: 4,
                batch: STREAMS_BATCH,
            },
            rate,
            Some("ours/streams/1"),
            None,
        ),
        row(
            "ours/streams/16",
            ts,
            Stream {
                streams: 16,
                batch: STREAMS_BATCH,
            },
            rate,
            Some("ours/streams/1"),
            Some(Target::ratio_at_least(0.8)),
        ),
        row(
            "ours/streams/16-min-share",
            "× fair share",
            Stream {
                streams: 16,
                batch: STREAMS_BATCH,
            },
            min_share,
            None,
            Some(Target::value_at_least(0.5)),
        ),
        row(
            "ours/rtt/p50",
            "ns",
            Rtt,
            p50,
            Some("baseline/two-ring/rtt-p50"),
            Some(Target::ratio_at_most(1.5)),
        ),
        if contended {
            row(
                "ours/rtt/p99",
                "ns",
                Rtt,
                p99,
                Some("ours/rtt/quiet-p50"),
                Some(Target::ratio_at_most(20.0)),
            )
        } else {
            row("ours/rtt/p99", "ns", Rtt, p99, Some("ours/rtt/p50"), None)
        },
        row(
            "ours/doorbells/full-load",
            "per 1000 tasks",
            Stream {
                streams: 1,
                batch: 1,
            },
            doorbells,
            None,
            Some(Target::value_at_most(5.0)),
        ),
        row(
            "ours/doorbells/10pct-load",
            "per 1000 tasks",
            Light,
            doorbells,
            None,
            None,
        ),
        row(
            "ours/ctl/stream/embedded",
            "ns",
            Control(ControlOp::StreamCreateDestroy, Backend::Embedded),
            p50,
            None,
            None,
        ),
        row(
            "ours/ctl/alloc4k/embedded",
            "ns",
            Control(ControlOp::AllocFree4K, Backend::Embedded),
            p50,
            None,
            None,
        ),
        row(
            "ours/ctl/stream/mockd",
            "ns",
            Control(ControlOp::StreamCreateDestroy, Backend::Mockd),
            p50,
            Some("ours/ctl/stream/embedded"),
            None,
        ),
        row(
            "ours/ctl/alloc4k/mockd",
            "ns",
            Control(ControlOp::AllocFree4K, Backend::Mockd),
            p50,
            Some("ours/ctl/alloc4k/embedded"),
            None,
        ),
        row("ours/mockd/procs1", ts, Procs(1), rate, None, None),
        row(
            "ours/mockd/procs4",
            ts,
            Procs(4),
            rate,
            Some("ours/mockd/procs1"),
            Some(Target::ratio_at_least(0.7)),
        ),
        row(
            "ours/mockd/procs4-min-share",
            "× fair share",
            Procs(4),
            min_share,
            None,
            None,
        ),
        row(
            "ours/mockd/submit-task",
            ts,
            SubmitTask,
            rate,
            Some("baseline/ioctl-floor"),
            None,
        ),
    ]);
    rows
}

/// The rows `filter` selects (name contains it), plus the rows they are compared with, in
/// table order. Every row without a filter.
pub fn select(rows: Vec<Plan>, filter: Option<&str>) -> Vec<Plan> {
    let Some(f) = filter else { return rows };
    let mut keep: Vec<bool> = rows.iter().map(|r| r.name.contains(f)).collect();
    // Baselines of kept rows, transitively (a baseline of a baseline is at most two deep).
    for _ in 0..3 {
        let wanted: Vec<&str> = rows
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .filter_map(|(r, _)| r.baseline)
            .collect();
        for (r, k) in rows.iter().zip(keep.iter_mut()) {
            if wanted.contains(&r.name) {
                *k = true;
            }
        }
    }
    rows.into_iter()
        .zip(keep)
        .filter_map(|(r, k)| k.then_some(r))
        .collect()
}

/// A run: the measurements made so far, the embedded device and the daemon, once started.
/// Dropping it shuts the device down and stops the daemon.
#[derive(Debug)]
pub struct Suite {
    opts: Options,
    windows: Windows,
    done: HashMap<Key, Result<Measured, Fail>>,
    /// Who measured a key first (for "same measurement as" progress lines).
    first: HashMap<Key, &'static str>,
    // Dropped in this order: the daemon (stopped within 5 s, else killed) before the
    // embedded device, whose shutdown is not bounded.
    mockd: Option<Result<Mockd, Fail>>,
    embedded: Option<Device>,
}

impl Suite {
    /// A run with `opts` (nothing is started yet).
    pub fn new(opts: Options) -> Suite {
        Suite {
            windows: Windows::new(opts.quick),
            embedded: opts.embedded.clone(),
            opts,
            done: HashMap::new(),
            first: HashMap::new(),
            mockd: None,
        }
    }

    /// The embedded device of the run, created on first use.
    fn embedded(&mut self) -> Result<Device, Fail> {
        if let Some(d) = &self.embedded {
            return Ok(d.clone());
        }
        let d = Device::embedded()
            .map_err(|e| Fail::Error(format!("cannot start the embedded device: {e}")))?;
        self.embedded = Some(d.clone());
        Ok(d)
    }

    fn measure(&mut self, key: Key) -> Result<Measured, Fail> {
        if let Some(r) = self.done.get(&key) {
            return r.clone();
        }
        let r = self.measure_new(key);
        self.done.insert(key, r.clone());
        r
    }

    fn measure_new(&mut self, key: Key) -> Result<Measured, Fail> {
        let w = self.windows;
        let lat = |mut l: LatencyRun| {
            l.summary()
                .map(Measured::Latency)
                .ok_or_else(|| Fail::Error("no latency samples in the window".into()))
        };
        match key {
            Key::TwoRing(b) => Ok(Measured::Rate(spsc::throughput(b, w.throughput)?)),
            Key::TwoRingRtt => lat(spsc::round_trip(w.latency)?),
            Key::Uring(b) => Ok(Measured::Rate(sys::io_uring_nop(b, w.throughput)?)),
            Key::IoctlFloor => Ok(Measured::Rate(sys::empty_ioctl(w.throughput)?)),
            Key::Stream { streams, batch } => {
                let dev = self.embedded()?;
                let r = shim_rows::streaming(&dev, streams, batch, Pace::Full, w.throughput)?;
                Ok(Measured::Streams(r))
            }
            Key::Light => {
                let full = match self.measure(Key::Stream {
                    streams: 1,
                    batch: 1,
                })? {
                    Measured::Streams(s) => s.run.rate(),
                    _ => 0.0,
                };
                if full <= 0.0 {
                    return Err(Fail::Error("the full-load batch-1 rate is 0".into()));
                }
                let paced = full * LIGHT_LOAD;
                let dev = self.embedded()?;
                let r = shim_rows::streaming(&dev, 1, 1, Pace::Rate(paced), w.throughput)?;
                Ok(Measured::Light(r, paced))
            }
            Key::Rtt | Key::RttQuiet => {
                let dev = self.embedded()?;
                lat(shim_rows::round_trip(&dev, w.latency)?)
            }
            Key::Control(op, Backend::Embedded) => {
                let dev = self.embedded()?;
                lat(shim_rows::control(&dev, op, w.control)?)
            }
            Key::Control(op, Backend::Mockd) => {
                let dev = self.mockd_device()?;
                lat(shim_rows::control(&dev, op, w.control)?)
            }
            Key::SubmitTask => {
                let dev = self.mockd_device()?;
                Ok(Measured::Rate(shim_rows::submit_slow(&dev, w.throughput)?))
            }
            Key::Procs(n) => {
                let exe = self.opts.client_exe.clone().ok_or_else(|| {
                    Fail::Unavailable("no client executable to start processes with".into())
                })?;
                let path = self.mockd()?.device_path();
                Ok(Measured::Procs(procs::run(
                    &exe,
                    &path,
                    n,
                    STREAMS_BATCH,
                    w.throughput,
                )?))
            }
        }
    }

    /// The daemon, started on first use (from the main thread, which outlives it).
    fn mockd(&mut self) -> Result<&Mockd, Fail> {
        if self.mockd.is_none() {
            let started = mockd::find(self.opts.mockd.as_deref())
                .map_err(Fail::Unavailable)
                .and_then(|bin| Mockd::start(&bin).map_err(Fail::Error));
            self.mockd = Some(started);
        }
        match &self.mockd {
            Some(Ok(m)) => Ok(m),
            Some(Err(e)) => Err(e.clone()),
            None => Err(Fail::Error("davinci-mockd was not started".into())),
        }
    }

    fn mockd_device(&mut self) -> Result<Device, Fail> {
        let path = self.mockd()?.device_path();
        Device::open(&path).map_err(|e| Fail::Error(format!("opening {path}: {e}")))
    }
}

fn progress(on: bool, text: std::fmt::Arguments<'_>) {
    if on {
        let mut e = std::io::stderr().lock();
        let _ = e.write_fmt(text);
        let _ = e.flush();
    }
}

impl Suite {
    /// Runs the rows the options select and returns the report (rows that failed say so;
    /// the caller decides the exit status). The device and the daemon stay up until the
    /// suite is dropped.
    ///
    /// # Errors
    /// The filter selects no row, or the CPU hog cannot be started.
    pub fn run(&mut self) -> Result<Report, String> {
        let opts = self.opts.clone();
        let opts = &opts;
        let machine = Machine::detect();
        let rows = select(plan(opts.contended), opts.filter.as_deref());
        if rows.is_empty() {
            return Err(format!(
                "--filter {:?} matches no row; rows: {}",
                opts.filter.as_deref().unwrap_or(""),
                plan(opts.contended)
                    .iter()
                    .map(|r| r.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let runner = self;
        let total = rows.len();
        let mut hog: Option<Hog> = None;
        let mut outcomes = Vec::with_capacity(total);
        for (i, r) in rows.iter().enumerate() {
            if opts.contended && hog.is_none() && r.key != Key::RttQuiet {
                let h = Hog::start(hog::cpus())?;
                progress(
                    opts.progress,
                    format_args!(
                        "CPU hog: {} busy threads running from here on\n",
                        h.threads()
                    ),
                );
                hog = Some(h);
            }
            progress(
                opts.progress,
                format_args!("[{}/{total}] {} ... ", i + 1, r.name),
            );
            let t0 = Instant::now();
            let reused = runner.first.get(&r.key).copied();
            let m = runner.measure(r.key);
            runner.first.entry(r.key).or_insert(r.name);
            let outcome = match m {
                Ok(m) => match (r.value)(&m) {
                    Some((v, note)) => Outcome::Value(v, Some(note)),
                    None => Outcome::Error(format!("{} has no value of this kind", r.name)),
                },
                Err(Fail::Unavailable(why)) => Outcome::Skipped(why),
                Err(Fail::Error(e)) => Outcome::Error(e),
            };
            let shown = match &outcome {
                Outcome::Value(v, _) => format!("{} {}", report::fmt_value(*v, r.unit), r.unit),
                Outcome::Skipped(why) => format!("skipped: {why}"),
                Outcome::Error(e) => format!("ERROR: {e}"),
            };
            match reused {
                Some(by) => progress(
                    opts.progress,
                    format_args!("{shown} (same measurement as {by})\n"),
                ),
                None => progress(
                    opts.progress,
                    format_args!("{shown} ({:.1} s)\n", t0.elapsed().as_secs_f64()),
                ),
            }
            outcomes.push((
                RowSpec {
                    name: r.name.to_string(),
                    unit: r.unit.to_string(),
                    baseline: r.baseline.map(String::from),
                    target: r.target,
                },
                outcome,
            ));
        }
        if let Some(h) = &hog {
            if h.spins() == 0 {
                progress(
                    opts.progress,
                    format_args!("warning: the CPU hog never ran\n"),
                );
            }
        }
        drop(hog);
        Ok(Report {
            schema: report::SCHEMA.into(),
            machine,
            quick: opts.quick,
            contended: opts.contended,
            rows: report::evaluate(outcomes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_names_are_unique_and_baselines_exist() {
        for contended in [false, true] {
            let rows = plan(contended);
            let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
            for (i, n) in names.iter().enumerate() {
                assert!(!names[i + 1..].contains(n), "{n} twice");
            }
            for r in &rows {
                if let Some(b) = r.baseline {
                    let bi = names.iter().position(|n| *n == b);
                    let ri = names.iter().position(|n| *n == r.name);
                    assert!(bi.is_some(), "{}: baseline {b} is not a row", r.name);
                    assert!(bi < ri, "{}: baseline {b} comes later", r.name);
                }
                if matches!(r.target, Some(t) if t.on == report::On::Ratio) {
                    assert!(
                        r.baseline.is_some(),
                        "{}: ratio target, no baseline",
                        r.name
                    );
                }
            }
            assert_eq!(names.contains(&"ours/rtt/quiet-p50"), contended);
        }
    }

    #[test]
    fn filter_keeps_the_rows_compared_with() {
        let rows = select(plan(false), Some("ours/stream/batch64-vs"));
        let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
        assert_eq!(
            names,
            [
                "baseline/io_uring/batch64",
                "ours/stream/batch64-vs-io_uring"
            ]
        );
        let rows = select(plan(true), Some("ours/rtt/p99"));
        let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
        assert_eq!(names, ["ours/rtt/quiet-p50", "ours/rtt/p99"]);
        assert!(select(plan(false), Some("nothing-matches")).is_empty());
        assert_eq!(select(plan(false), None).len(), plan(false).len());
    }

    #[test]
    fn a_tiny_run_through_the_shim_checks_every_completion() {
        let opts = Options {
            quick: true,
            filter: Some("ours/streams/4".into()),
            embedded: Some(crate::test_device()),
            ..Options::default()
        };
        let r = Suite::new(opts).run().unwrap();
        let names: Vec<&str> = r.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["ours/streams/1", "ours/streams/4"]);
        for row in &r.rows {
            assert_eq!(row.status, report::Status::Ok, "{row:?}");
            assert!(row.value.is_some_and(|v| v > 0.0), "{row:?}");
            let note = row.note.as_deref().unwrap_or("");
            assert!(note.contains("completions checked in order"), "{note}");
        }
        assert!(r.rows[1].ratio.is_some());
    }

    #[test]
    fn missing_daemon_skips_its_rows() {
        let opts = Options {
            quick: true,
            filter: Some("ours/ctl/alloc4k/mockd".into()),
            mockd: Some("/nonexistent/davinci-mockd".into()),
            embedded: Some(crate::test_device()),
            ..Options::default()
        };
        let r = Suite::new(opts).run().unwrap();
        let row = r
            .rows
            .iter()
            .find(|r| r.name == "ours/ctl/alloc4k/mockd")
            .unwrap();
        assert_eq!(row.status, report::Status::Skipped);
        assert!(row.note.as_deref().unwrap_or("").contains("skipped: "));
        let emb = r
            .rows
            .iter()
            .find(|r| r.name == "ours/ctl/alloc4k/embedded")
            .unwrap();
        assert_eq!(emb.status, report::Status::Ok);
    }
}
