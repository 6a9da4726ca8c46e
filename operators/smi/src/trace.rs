//! `davinci-smi trace`: a timeline of everything one device ran for a while (TRACE, scope
//! DEVICE: an admin's), every client's streams as tracks named by their client (id, process
//! name, pid, user, container), written as Chrome trace-event JSON for the Perfetto UI
//! (ui.perfetto.dev) or chrome://tracing. The shim records it
//! ([`davinci_shim::Control::trace_device`]); this is the command line around it: one device,
//! a duration, a file, progress on a terminal, a summary (or a `--json` document).
#![forbid(unsafe_code)]

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use davinci_ops::discover::{self, Discovery};
use davinci_uapi::Errno;
use serde_json::json;

use crate::access::Opener;
use crate::cli::{parse_id, Cli, IdSel};
use crate::error::{exit, SmiError};
use crate::output::{printable, SCHEMA};
use crate::plan::{find, open_targets};

/// The shortest and longest `--duration`.
const DURATIONS: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(3600));

fn parse_span(s: &str) -> Result<Duration, String> {
    davinci_units::parse_duration_between(s, DURATIONS.0, DURATIONS.1)
}

/// `trace`'s options.
#[derive(Debug, Clone, Args)]
pub(crate) struct TraceArgs {
    /// Device id N (of davinciN) [default: the only device]
    #[arg(short = 'i', long = "id", value_name = "ID", value_parser = parse_id)]
    pub(crate) id: Option<IdSel>,
    /// How long to record: 5s, 500ms, 2m (10ms to 1h)
    #[arg(short = 'd', long, value_name = "DURATION", default_value = "5s", value_parser = parse_span)]
    pub(crate) duration: Duration,
    /// The Chrome trace-event JSON file to write (replaced if it exists)
    #[arg(short = 'o', long, value_name = "FILE")]
    pub(crate) output: PathBuf,
}

/// `trace --help`'s text after the options.
pub(crate) const AFTER_HELP: &str = "\
Records what one device runs for DURATION: every task of every client's streams, when the
device took it and when it completed (long copies and kernels also per chunk), on the
device's clock converted to the host's CLOCK_MONOTONIC (the bound of that conversion is in
the file's otherData.clock_bound_ns). Admin only: the kernel driver's CAP_SYS_ADMIN,
davinci-mockd's root, the daemon's own user, --admin-uid or an --admin-group member (a
client traces its own streams with its runtime instead: davinci-workload --trace, the shim's
Device::trace, libdavinci's davinci_trace_start, Python's davinci.trace).

Open the file in ui.perfetto.dev (Open trace file) or chrome://tracing: one process for the
device, one track per stream, named by its client (id, process name, pid, uid, container).
The device keeps 1,024 records per buffer; davinci-smi reads it every 2 ms, and what it had
to overwrite before a read is counted as lost (a run of NOPs the device took together is one
record). The device traces one admin's request at a time per device buffer; a client's own
trace is separate and unaffected.

Examples: davinci-smi trace -i 0 --duration 5s -o run.json
          davinci-smi --json trace -i 1 -d 500ms -o /tmp/t.json";

/// Runs `trace`; returns the exit status.
pub(crate) fn run(
    cli: &Cli,
    args: &TraceArgs,
    disc: &Discovery,
    opener: &dyn Opener,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let json = cli.global.json;
    if cli.repeat.every.is_some() || cli.repeat.count.is_some() {
        return crate::usage_error("--loop and --count do not apply to `trace`", json, out, err);
    }
    if !cli.query.query.is_empty() || !cli.query.format.is_empty() {
        return crate::usage_error(
            "--query and --format do not apply to `trace`",
            json,
            out,
            err,
        );
    }
    let found = discover::discover(&cli.global.device, cli.global.socket_dir.as_deref(), disc);
    for w in discover::ignored_warnings(&found) {
        let _ = writeln!(err, "davinci-smi: {}", printable(&w));
    }
    let mut targets = match find(found)
        .and_then(|entries| open_targets(entries, args.id, &cli.global, disc, opener))
    {
        Ok(t) => t,
        Err(e) => return failed(&e, json, out, err),
    };
    if targets.len() != 1 {
        return crate::usage_error(
            &format!(
                "`trace` records one device; {} found: name one with -i ID",
                targets.len()
            ),
            json,
            out,
            err,
        );
    }
    let target = targets.remove(0);
    let path = target.entry.path.clone();
    let dev = match target.dev {
        Ok(d) => d,
        Err(e) => return failed(&e, json, out, err),
    };
    let show = !json && std::io::stderr().is_terminal();
    let mut last = Duration::ZERO;
    let mut progress = |elapsed: Duration, records: usize| {
        if show && (elapsed >= last + Duration::from_millis(500) || elapsed >= args.duration) {
            last = elapsed;
            let _ = write!(
                err,
                "\rdavinci-smi: recording {path}: {:.1}/{:.1} s, {records} records",
                elapsed.as_secs_f64(),
                args.duration.as_secs_f64()
            );
        }
    };
    let trace = dev.trace(args.duration, &mut progress);
    if show {
        let _ = writeln!(err);
    }
    let trace = match trace {
        Ok(t) => t,
        Err(e) => return failed(&e, json, out, err),
    };
    if let Err(e) = trace.write_chrome_file(&args.output) {
        return failed(&SmiError::from(e), json, out, err);
    }
    let mut clients: Vec<u32> = trace.records().iter().map(|r| r.client_id).collect();
    clients.sort_unstable();
    clients.dedup();
    let file = args.output.display().to_string();
    if json {
        let doc = json!({
            "schema": SCHEMA,
            "command": "trace",
            "exit_code": exit::OK,
            "device": path,
            "output": file,
            "duration_s": args.duration.as_secs_f64(),
            "tasks": trace.tasks(),
            "records": trace.records().len(),
            "clients": clients,
            "lost": trace.lost(),
            "dropped": trace.dropped(),
            "clock_bound_ns": trace.clock_bound_ns(),
        });
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        );
    } else {
        let _ = writeln!(
            out,
            "{file}: {} tasks ({} records) of {} client(s) on {path} over {:.1} s; clock bound {} ns",
            trace.tasks(),
            trace.records().len(),
            clients.len(),
            args.duration.as_secs_f64(),
            trace.clock_bound_ns()
        );
        if trace.lost() > 0 {
            let _ = writeln!(
                out,
                "{} records lost: the device overwrote them before a read (its buffer holds 1,024)",
                trace.lost()
            );
        }
        let _ = writeln!(out, "open it in ui.perfetto.dev or chrome://tracing");
    }
    exit::OK
}

fn failed(e: &SmiError, json: bool, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let code = e.exit_code();
    if json {
        let d = crate::output::Doc {
            schema: SCHEMA,
            command: "trace",
            exit_code: code,
            body: crate::output::Body::Failed { error: e.json() },
        };
        let _ = write!(out, "{}", d.render());
    } else {
        let _ = writeln!(err, "davinci-smi: {}", e.message);
        if e.errno == Some(Errno::EPERM) {
            let _ = writeln!(
                err,
                "davinci-smi: tracing the whole device needs an admin; a client traces its own streams with its runtime (davinci-workload --trace)"
            );
        }
    }
    code
}
