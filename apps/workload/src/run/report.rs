//! What a run reports: the final [`Report`] (with the latency phase's [`LatencyReport`]),
//! the [`Progress`] along the way, and the comparison that counts mismatches.
#![forbid(unsafe_code)]

use serde::Serialize;

/// Round-trip latencies of single tasks.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LatencyReport {
    /// Round trips measured.
    pub samples: usize,
    /// Median, nanoseconds.
    pub p50_ns: u64,
    /// 99th percentile, nanoseconds.
    pub p99_ns: u64,
    /// Slowest, nanoseconds.
    pub max_ns: u64,
    /// Wake-ups of the device (doorbell writes or NOTIFYs) per 1000 tasks in this phase.
    pub doorbells_per_1000_tasks: f64,
}

/// What a run measured and found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Backend description.
    pub device: String,
    /// This run's client id on the device, as `davinci-smi info -t usage` shows it
    /// (GET_INFO's `caller_id`); `None` from a driver older than ABI 1.1.
    pub client_id: Option<u32>,
    /// Streams used.
    pub streams: usize,
    /// Descriptors per submit call.
    pub batch: usize,
    /// Elements per vector.
    pub elements: usize,
    /// Rounds run (fewer than `rounds_planned` if the run was interrupted).
    pub rounds: u64,
    /// Rounds the throughput phase was to run (`tasks` rounded up to whole rounds).
    pub rounds_planned: u64,
    /// Tasks completed in the throughput phase.
    pub tasks: u64,
    /// Time from each round's first submit to its last synchronize, summed (seconds).
    pub device_seconds: f64,
    /// Whole throughput phase including host-side data generation and checking (seconds).
    pub wall_seconds: f64,
    /// `tasks / device_seconds`.
    pub tasks_per_sec: f64,
    /// Wake-ups of the device (doorbell writes or NOTIFYs) in the throughput phase.
    pub doorbells: u64,
    /// Wake-ups of the device per 1000 tasks in the throughput phase.
    pub doorbells_per_1000_tasks: f64,
    /// Values compared with the CPU model.
    pub values_checked: u64,
    /// Values (or completions) that differed from the model: must be 0.
    pub mismatches: u64,
    /// The first few mismatches, described.
    pub first_mismatches: Vec<String>,
    /// The latency phase (0 samples if it did not run).
    pub latency: LatencyReport,
    /// The run was stopped early ([`run_until`](super::run_until)'s flag): the figures cover the work done.
    pub interrupted: bool,
}

impl Report {
    pub(super) fn mismatch(&mut self, what: String) {
        self.mismatches += 1;
        if self.first_mismatches.len() < 10 {
            self.first_mismatches.push(what);
        }
    }
}

/// Which phase a [`Progress`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The checked throughput phase (tasks).
    Throughput,
    /// The latency phase (single-task round trips).
    Latency,
}

/// Where a run is: `done` of `total` tasks (throughput) or round trips (latency) of `phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The phase.
    pub phase: Phase,
    /// Done so far in this phase.
    pub done: u64,
    /// The phase's total: [`WorkloadConfig::planned_tasks`](super::WorkloadConfig::planned_tasks) or `latency_samples`.
    pub total: u64,
}

pub(super) fn compare(report: &mut Report, got: Vec<u32>, want: &[u32], what: impl Fn() -> String) {
    report.values_checked += want.len() as u64;
    if got.len() != want.len() {
        report.mismatch(format!(
            "{}: {} values, expected {}",
            what(),
            got.len(),
            want.len()
        ));
        return;
    }
    let mut first = None;
    let mut n = 0;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g != w {
            n += 1;
            first.get_or_insert((i, *g, *w));
        }
    }
    if let Some((i, g, w)) = first {
        report.mismatches += n - 1;
        report.mismatch(format!(
            "{}: {n} of {} values differ, first at {i}: {g:#010x} != {w:#010x}",
            what(),
            want.len()
        ));
    }
}
