//! What `davinci-workload` prints: the report for people, or with `--json` one object of
//! schema `davinci-workload/v1` on stdout (the report, or the error and its exit status).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use davinci_shim::Errno;
use davinci_workload::run::Report;
use serde::Serialize;

use crate::cli::UsedOptions;
use crate::failure::{Failure, Kind};
use crate::trace::TraceSummary;

/// The `schema` of every JSON object this program prints (reports and errors).
const SCHEMA: &str = "davinci-workload/v1";

#[derive(Serialize)]
struct JsonErrorBody<'a> {
    kind: Kind,
    exit_code: u8,
    message: &'a str,
    errno: Option<&'static str>,
}

#[derive(Serialize)]
struct JsonError<'a> {
    schema: &'static str,
    error: JsonErrorBody<'a>,
    options: Option<&'a UsedOptions>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    schema: &'static str,
    #[serde(flatten)]
    report: &'a Report,
    options: &'a UsedOptions,
    warnings: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    trace: Option<&'a TraceSummary>,
}

fn print_json(value: &impl Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => println!("{s}"),
        // Cannot happen for these types (no maps with non-string keys, no failing Serialize).
        Err(e) => eprintln!("davinci-workload: cannot encode JSON: {e}"),
    }
}

/// Prints `f` as the JSON error object on stdout; `options` is `None` when the command line
/// itself could not be read.
pub(crate) fn print_failure_json(f: &Failure, options: Option<&UsedOptions>) {
    print_json(&JsonError {
        schema: SCHEMA,
        error: JsonErrorBody {
            kind: f.kind,
            exit_code: f.kind.exit_code(),
            message: &f.message,
            errno: f.errno.map(Errno::name),
        },
        options,
    });
}

/// Prints `f` (stderr, and stdout as a JSON object with `--json`); returns its exit status.
pub(crate) fn fail(f: &Failure, json: bool, options: Option<&UsedOptions>) -> ExitCode {
    eprintln!("davinci-workload: {}", f.message);
    if json {
        print_failure_json(f, options);
    }
    ExitCode::from(f.kind.exit_code())
}

/// Prints the report as JSON on stdout, with the options and warnings of the run (and
/// what its `--trace` file holds).
pub(crate) fn print_json_report(
    report: &Report,
    options: &UsedOptions,
    warnings: &[String],
    trace: Option<&TraceSummary>,
) {
    print_json(&JsonReport {
        schema: SCHEMA,
        report,
        options,
        warnings,
        trace,
    });
}

pub(crate) fn print_human(r: &Report, trace: Option<&TraceSummary>) {
    println!("device:        {}", r.device);
    println!(
        "workload:      {} tasks in {} rounds over {} streams (batch {}, {} elements/vector)",
        r.tasks, r.rounds, r.streams, r.batch, r.elements
    );
    println!(
        "throughput:    {:.0} tasks/s ({:.3} s submit..synchronize; {:.3} s with host-side checking)",
        r.tasks_per_sec, r.device_seconds, r.wall_seconds
    );
    println!(
        "doorbells:     {:.2} per 1000 tasks ({} in total)",
        r.doorbells_per_1000_tasks, r.doorbells
    );
    if r.latency.samples == 0 {
        println!(
            "latency:       not measured ({})",
            if r.interrupted {
                "interrupted"
            } else {
                "--latency-samples 0"
            }
        );
    } else {
        println!(
            "latency:       p50 {:.1} us, p99 {:.1} us, max {:.1} us over {} single-task round \
             trips ({:.1} doorbells per 1000)",
            r.latency.p50_ns as f64 / 1e3,
            r.latency.p99_ns as f64 / 1e3,
            r.latency.max_ns as f64 / 1e3,
            r.latency.samples,
            r.latency.doorbells_per_1000_tasks
        );
    }
    println!(
        "check:         {} values compared with the CPU, {} mismatches",
        r.values_checked, r.mismatches
    );
    for m in &r.first_mismatches {
        println!("  MISMATCH {m}");
    }
    if let Some(t) = trace {
        println!(
            "trace:         {} ({} device tasks, {} host spans, {} lost; clock bound {} ns)",
            t.file.display(),
            t.device_tasks,
            t.host_spans,
            t.lost,
            t.clock_bound_ns
        );
    }
    if r.interrupted {
        println!(
            "interrupted:   after {} of {} rounds (Ctrl-C); the figures cover the work done",
            r.rounds, r.rounds_planned
        );
    }
}
