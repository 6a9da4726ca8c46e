//! `davinci-bench`: the data path of davinci-shim against its baselines, in one run, one
//! table.
//!
//! Every "ours" row goes through the public `davinci-shim` API (the embedded mock device, or
//! a `davinci-mockd` device for the daemon rows) and checks every completion: each task's
//! `user_data` seen once, in submission order, with status 0. The baselines run in the same
//! process: a hand-written two-ring SPSC pipeline (64-byte descriptors, 16-byte
//! completions, two threads: the limit of the design on this machine), io_uring NOPs, and
//! an empty `ioctl(2)` (the floor of a system call per task).
//!
//! # Output
//!
//! A table on stdout (name, value, unit, baseline, ratio, target, mark), or with `--json`
//! one JSON object (`--json-out FILE`: the object to FILE as well as the table to stdout),
//! schema `davinci-bench/v1`:
//!
//! ```text
//! {
//!   "schema": "davinci-bench/v1",
//!   "machine": {"cpus": 2, "kernel": "6.1.0-...", "cpu_model": "...",
//!               "load_1min": 0.12},  // load average at the start (null if unknown)
//!   "quick": false,            // --quick: short windows
//!   "contended": false,        // --contended: a CPU hog on every CPU
//!   "rows": [{
//!     "name": "ours/stream/batch64",
//!     "value": 41234567.8,     // null when skipped or failed
//!     "unit": "tasks/s",       // tasks/s, calls/s, ns, per 1000 tasks, × fair share
//!     "baseline": "baseline/two-ring/batch64",  // the row compared with, or null
//!     "ratio": 0.41,           // value / baseline's value, or null
//!     "target": "≥0.6×",       // "×": on the ratio; no "×": on the value; or null
//!     "met": false,            // null: no target, or nothing to evaluate it on
//!     "status": "ok",          // ok | skipped | error
//!     "note": "..."            // details, or "skipped: why" / "error: what"; or null
//!   }, ...]
//! }
//! ```
//!
//! Within `v1` fields are only added; a change of meaning or a removal bumps the version.
//!
//! Exit status: 0 the run finished (targets missed are results, not failures), 1 a
//! measurement failed (a completion missing or out of order, a device error: the row says
//! which), 2 usage.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use davinci_benches::measure::Window;
use davinci_benches::report::{self, Report, Status};
use davinci_benches::suite::{self, Options, Suite};
use davinci_benches::{plot, procs};

const AFTER_HELP: &str = "\
Rows (--list prints their names): streaming NOPs at batch 1 and 64 (host pipelining: the ring
is kept full and completions are reaped while submitting), 1/4/16 streams and the slowest
stream's share, 1 and 4 client processes on one davinci-mockd device, round trips with one
task in flight (p50, p99), doorbells per 1000 tasks at full load and at 10% of it, the control
path (create/destroy a stream, alloc/free 4 KiB; embedded and through the daemon) and
SUBMIT_TASK (one ioctl per task) through the daemon, and three CUDA/ACL patterns timed whole
(a side stream nobody synchronizes, a 100,000-task burst, 100,000 rounds of four-stream event
ping-pong: docs/runtimes.md). Baselines: the two-ring SPSC pipeline
(batch 1, 64, round trip), io_uring NOP (batch 1, 64) and an empty ioctl.

--device PATH (the kernel module: /dev/davinci0) runs other rows, on that device, each with
the system-call baseline it is compared with: streaming NOPs at batch 1 and 64 (against
io_uring), doorbells per 1000 tasks at batch 1, round trips p50/p99 and round trips to a
sleeping device (against one empty ioctl in ns), SUBMIT_TASK (against the empty ioctl).

Targets: ours/stream/batch64 ≥0.6× two-ring batch 64 and ≥4× io_uring batch 64; batch 1 ≥2×
io_uring batch 1; round-trip p50 ≤1.5× the two-ring's; 16 streams ≥0.8× 1 stream, slowest
stream ≥0.5 of its fair share; the patterns ≤2 s, ≤1 s and ≤5 s; 4 processes ≥0.7× 1
process; ≤5 doorbells per 1000 tasks at full load; with --contended, round-trip p99 ≤20× the quiet p50 (measured first, before the hog).

The daemon rows need davinci-mockd: beside this executable (cargo build --release -p
davinci-mockd) or --mockd PATH; without it they say
\"skipped: <why>\". io_uring rows say skipped (with the errno) where io_uring_setup fails.

Progress lines go to stderr; the table (or JSON) to stdout. A default run takes under a
minute on 2 cores, --quick about 10 s.

JSON (--json), schema \"davinci-bench/v1\":
  {\"schema\": \"davinci-bench/v1\",
   \"machine\": {\"cpus\": N, \"kernel\": \"uname -r\", \"cpu_model\": \"...\",
               \"load_1min\": load average at the start (number|null)},
   \"quick\": bool, \"contended\": bool,
   \"rows\": [{\"name\", \"value\" (number|null), \"unit\", \"baseline\" (row name|null),
             \"ratio\" (value/baseline value|null), \"target\" (\"≥0.6×\" on the ratio,
             \"≤5\" on the value, or null), \"met\" (bool|null), \"status\"
             (\"ok\"|\"skipped\"|\"error\"), \"note\" (details or why|null)}, ...]}
  Within v1 fields are only added; a change of meaning bumps the version.

Chart: davinci-bench plot FILE.json > throughput.svg

Exit status:
  0  the run finished (missed targets are results, not failures)
  1  a measurement failed (a completion missing or out of order, a device error)
  2  usage (bad option, --filter matching nothing, unreadable plot input)";

/// Benchmark the davinci data path against its baselines (two-ring SPSC pipeline,
/// io_uring, ioctl) and print one table with every row's ratio and target.
#[derive(Debug, Parser)]
#[command(
    name = "davinci-bench",
    version,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Short windows (whole run in about 10 s; numbers are noisier).
    #[arg(long)]
    quick: bool,
    /// Run the rows with a CPU hog (one busy thread per CPU); the quiet round trip is
    /// measured first, without it.
    #[arg(long)]
    contended: bool,
    /// Only the rows whose name contains SUBSTR (plus the rows they are compared with).
    #[arg(long, value_name = "SUBSTR")]
    filter: Option<String>,
    /// Measure the whole table N times, in turn, and report each row's median value and
    /// the median of its per-round ratios (ranges in the notes): on a machine whose speed
    /// changes from minute to minute (a shared VM), one round's ratios can mislead. Quiet
    /// runs only; 1 to 20.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Print one JSON object (schema davinci-bench/v1, below) instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON object to FILE (the table still goes to stdout): one run, both
    /// forms.
    #[arg(long, value_name = "FILE")]
    json_out: Option<PathBuf>,
    /// Run the device rows against the device at PATH instead of the embedded rows: the
    /// kernel path (`/dev/davinci0`) against io_uring NOPs and an empty ioctl measured in
    /// the same run (streaming NOPs at batch 1 and 64, round trips, round trips to a sleeping
    /// device, SUBMIT_TASK), as ratios; no targets.
    #[arg(long, value_name = "PATH")]
    device: Option<String>,
    /// The davinci-mockd binary [default: davinci-mockd beside this executable].
    #[arg(long, value_name = "PATH")]
    mockd: Option<PathBuf>,
    /// List the row names (with --contended: of a contended run) and exit.
    #[arg(long)]
    list: bool,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Write an SVG bar chart of a --json report's throughput rows to stdout (batch sizes,
    /// streams, processes; ours and the baselines).
    Plot {
        /// A report written by `davinci-bench --json`.
        file: PathBuf,
    },
    /// (internal) One client process of the multi-process rows.
    #[command(hide = true)]
    Client {
        #[arg(long)]
        device: String,
        #[arg(long)]
        batch: usize,
        #[arg(long)]
        secs: f64,
        #[arg(long)]
        warmup_secs: f64,
    },
}

const EXIT_MEASUREMENT: u8 = 1;
const EXIT_USAGE: u8 = 2;

fn usage(msg: &str) -> ExitCode {
    eprintln!("davinci-bench: {msg}");
    ExitCode::from(EXIT_USAGE)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.cmd {
        Some(Cmd::Plot { file }) => return plot_main(&file),
        Some(Cmd::Client {
            device,
            batch,
            secs,
            warmup_secs,
        }) => {
            let (Ok(m), Ok(w)) = (
                Duration::try_from_secs_f64(secs),
                Duration::try_from_secs_f64(warmup_secs),
            ) else {
                return usage("client: --secs and --warmup-secs must be non-negative seconds");
            };
            return if procs::client_main(&device, batch.max(1), Window::new(m, w)) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_MEASUREMENT)
            };
        }
        None => {}
    }
    if cli.list {
        let rows = match cli.device {
            Some(_) => suite::device_plan(),
            None => suite::plan(cli.contended),
        };
        for r in rows {
            println!("{}", r.name);
        }
        return ExitCode::SUCCESS;
    }
    if let Some(p) = &cli.mockd {
        if !p.is_file() {
            return usage(&format!("--mockd {}: no such file", p.display()));
        }
    }
    // Created before the run, so that a path that cannot be written fails at once.
    let mut json_out = match &cli.json_out {
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Some((p.clone(), f)),
            Err(e) => return usage(&format!("--json-out {}: {e}", p.display())),
        },
        None => None,
    };
    let opts = Options {
        quick: cli.quick,
        contended: cli.contended,
        filter: cli.filter,
        mockd: cli.mockd,
        client_exe: std::env::current_exe().ok(),
        device: cli.device,
        progress: true,
        rounds: cli.rounds as usize,
        embedded: None,
    };
    let t0 = Instant::now();
    let mut suite = Suite::new(opts);
    let report = match suite.run() {
        Ok(r) => r,
        Err(e) if e.contains("--filter") || e.contains("--rounds") => return usage(&e),
        Err(e) => {
            eprintln!("davinci-bench: {e}");
            return ExitCode::from(EXIT_MEASUREMENT);
        }
    };
    eprintln!(
        "davinci-bench: {} rows in {:.1} s",
        report.rows.len(),
        t0.elapsed().as_secs_f64()
    );
    let json = match serde_json::to_string_pretty(&report) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("davinci-bench: cannot encode the JSON report: {e}");
            return ExitCode::from(EXIT_MEASUREMENT);
        }
    };
    if cli.json {
        println!("{json}");
    } else {
        print!("{}", report::table(&report));
    }
    if let Some((path, f)) = json_out.as_mut() {
        if let Err(e) = writeln!(f, "{json}").and_then(|()| f.flush()) {
            eprintln!("davinci-bench: cannot write {}: {e}", path.display());
            return ExitCode::from(EXIT_MEASUREMENT);
        }
    }
    let failed: Vec<&str> = report
        .rows
        .iter()
        .filter(|r| r.status == Status::Error)
        .map(|r| r.name.as_str())
        .collect();
    let mut code = ExitCode::SUCCESS;
    if !failed.is_empty() {
        eprintln!(
            "davinci-bench: measurement failed in {} (see the notes)",
            failed.join(", ")
        );
        code = ExitCode::from(EXIT_MEASUREMENT);
    }
    if let Err(e) = teardown(suite, TEARDOWN_LIMIT) {
        eprintln!("davinci-bench: {e}");
        code = ExitCode::from(EXIT_MEASUREMENT);
    }
    code
}

/// Longest the device shutdown and the daemon's stop may take at the end.
const TEARDOWN_LIMIT: Duration = Duration::from_secs(15);

/// Drops `suite` (shuts the embedded device down, stops the daemon) on another thread and
/// waits at most `limit` for it: a device that does not stop is reported, not waited for
/// forever (the process exits anyway).
fn teardown(suite: Suite, limit: Duration) -> Result<(), String> {
    let t0 = Instant::now();
    let h = std::thread::Builder::new()
        .name("teardown".into())
        .spawn(move || drop(suite))
        .map_err(|e| format!("cannot start the teardown thread: {e}"))?;
    while !h.is_finished() {
        if t0.elapsed() > limit {
            return Err(format!(
                "the embedded mock device did not shut down within {limit:?} (its poller \
                 threads did not stop: a mock-device bug); exiting without waiting for it"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    h.join()
        .map_err(|_| "the device shutdown panicked".to_string())
}

fn plot_main(file: &std::path::Path) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => return usage(&format!("plot: cannot read {}: {e}", file.display())),
    };
    let report: Report = match serde_json::from_str(&text) {
        Ok(r) => r,
        Err(e) => {
            return usage(&format!(
                "plot: {} is not a davinci-bench --json report: {e}",
                file.display()
            ))
        }
    };
    if report.schema != report::SCHEMA {
        return usage(&format!(
            "plot: {} has schema {:?}, this program reads {:?}",
            file.display(),
            report.schema,
            report::SCHEMA
        ));
    }
    print!("{}", plot::svg(&report));
    ExitCode::SUCCESS
}
