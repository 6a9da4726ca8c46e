//! `davinci-workload`: runs a checked workload on a davinci device. With no hardware it starts
//! the embedded mock device (the device engine on threads of this process).
//!
//! Vector adds (u32/i32/f32), fills and copies over several streams with cross-stream
//! events; every result is compared with a CPU computation. Prints tasks/s, single-task
//! round-trip latency (p50/p99) and doorbells per 1000 tasks. The exit status says how it
//! ended (see [`AFTER_HELP`](cli::AFTER_HELP)).
//!
//! The workload itself is the library's ([`davinci_workload::run`]); this binary is its
//! command line: the options (`cli.rs`), the device check before a run (`device_check.rs`),
//! progress on stderr (`progress.rs`), the failures and their exit statuses (`failure.rs`),
//! what it prints (`output.rs`) and `--trace FILE`, the run's timeline as Chrome trace-event
//! JSON for the Perfetto UI (`trace.rs`). This file runs them in order.
#![deny(unsafe_code)]

mod cli;
mod device_check;
mod failure;
mod output;
mod progress;
mod trace;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::Parser;
use davinci_shim::{device_path_from_env, Device, DevicePath, MockConfig, DEVICE_ENV};
use davinci_workload::run::{self as workload, Report, WorkloadConfig};

use cli::{exit, used_options, Args, DeviceFrom, UsedOptions, DEFAULT_MEMORY_MIB, MIB};
use device_check::check_device;
use failure::Failure;
use output::{fail, print_failure_json, print_human, print_json_report};
use progress::{progress_interval, ProgressView, PROGRESS_ENV};

/// SIGINT (Ctrl-C) sets the returned flag and interrupts the main thread's blocking wait (a
/// round's `synchronize` on a hung device would otherwise wait for the whole `--timeout`); a
/// second one exits at once with status 130. SIGINT is blocked in this thread (and so in
/// every thread started later: call this first, from the main thread) and taken by a thread
/// of its own with `sigwait`. To interrupt the wait, that thread sends the main thread
/// SIGUSR2, whose handler does nothing and is installed without `SA_RESTART`: the wait
/// returns `EINTR`, and the run sees the flag (docs/abi.md 6.4).
fn catch_interrupt() -> Result<Arc<AtomicBool>, String> {
    use nix::sys::pthread::{pthread_kill, pthread_self};
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal};
    extern "C" fn interrupt(_: nix::libc::c_int) {}
    let flag = Arc::new(AtomicBool::new(false));
    let main = pthread_self();
    let action = SigAction::new(
        SigHandler::Handler(interrupt),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler does nothing, so it is async-signal-safe; SIGUSR2 is this
    // program's own (nothing else in it uses the signal).
    #[allow(unsafe_code)]
    unsafe { nix::sys::signal::sigaction(Signal::SIGUSR2, &action) }
        .map_err(|e| format!("cannot install the SIGUSR2 handler: {e}"))?;
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.thread_block()
        .map_err(|e| format!("cannot block SIGINT: {e}"))?;
    let seen = flag.clone();
    let spawned = std::thread::Builder::new()
        .name("sigint".into())
        .spawn(move || loop {
            if let Ok(Signal::SIGINT) = set.wait() {
                if seen.swap(true, Ordering::SeqCst) {
                    std::process::exit(exit::INTERRUPTED.into());
                }
                // A signal that lands just before the main thread goes to sleep in the
                // driver is not seen by that sleep: send a few, until the run ends (the
                // process exits) or a second Ctrl-C.
                let again = std::thread::spawn(move || {
                    for _ in 0..40 {
                        if pthread_kill(main, Signal::SIGUSR2).is_err() {
                            return;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    }
                });
                drop(again);
            }
        });
    if let Err(e) = spawned {
        // Nobody would take the signal: let it kill the process as before.
        let _ = set.thread_unblock();
        return Err(format!("cannot start the SIGINT thread: {e}"));
    }
    Ok(flag)
}

/// A device of this node that a run without a device named would miss (the shim's rule:
/// `/dev/davinci0`, or `davinci0.sock` in davinci-mockd's default socket directory).
fn node_device() -> Option<String> {
    davinci_shim::node_device().map(|p| p.to_string())
}

/// Everything up to the report (and the trace's summary, with `--trace`).
fn run(
    args: &Args,
    options: &UsedOptions,
    stop: &AtomicBool,
    warnings: &mut Vec<String>,
) -> Result<(Report, Option<trace::TraceSummary>), Failure> {
    let device = &options.device;
    if options.device_from == DeviceFrom::Default {
        if let Some(found) = node_device() {
            return Err(Failure::usage(format!(
                "this node has a davinci device ({found}); without --device or \
                 {DEVICE_ENV} the run would use the in-process embedded mock device and not \
                 touch it: pass --device {found} to run on it (or --device embedded for the \
                 mock)"
            )));
        }
    }
    eprintln!(
        "davinci-workload: device {device} ({})",
        match options.device_from {
            DeviceFrom::Option => "--device",
            DeviceFrom::Env => DEVICE_ENV,
            DeviceFrom::Default => "the default: no device on this node",
        }
    );
    let cfg = WorkloadConfig {
        tasks: options.tasks,
        streams: options.streams,
        batch: options.batch,
        elements: options.elements,
        slots: options.slots,
        latency_samples: options.latency_samples,
        timeout: Duration::from_secs(options.timeout_secs),
        ..WorkloadConfig::default()
    };
    let interval = progress_interval(std::env::var(PROGRESS_ENV).ok().as_deref())?;
    cfg.check().map_err(|e| Failure::usage(e.message()))?;
    let path = DevicePath::parse(device).map_err(|e| {
        let mut f = Failure::open(&e);
        f.message = match options.device_from {
            DeviceFrom::Env => format!("{DEVICE_ENV}={device:?}: {}", e.message()),
            _ => format!("--device {device:?}: {}", e.message()),
        };
        f
    })?;
    let mut warn = |w: String| {
        eprintln!("davinci-workload: warning: {w}");
        warnings.push(w);
    };
    if let (None, Some(m)) = (options.memory_mib, args.memory_mib) {
        warn(format!(
            "--memory-mib {m} applies only to the embedded device; {device} has its own memory: \
             ignored"
        ));
    }
    let per_call = 3 * cfg.slots as u64;
    if args.batch.is_some() && cfg.batch as u64 > per_call {
        warn(format!(
            "--batch {} is more than the {per_call} descriptors a stream submits per round (3 x \
             --slots {}): each round submits them in one call, as --batch {per_call} would",
            cfg.batch, cfg.slots
        ));
    }
    let dev = match &path {
        DevicePath::Embedded => Device::embedded_with(MockConfig {
            memory_size: options
                .memory_mib
                .unwrap_or(DEFAULT_MEMORY_MIB)
                .saturating_mul(MIB),
            ..MockConfig::default()
        }),
        p => Device::open_path(p),
    }
    .map_err(|e| Failure::open(&e))?;
    check_device(&cfg, &dev, options.memory_mib)?;
    let session = match &args.trace {
        Some(path) => Some((trace::start(&dev, path)?, path)),
        None => None,
    };
    let mut view = ProgressView::new(std::io::stderr().is_terminal(), interval);
    let result = workload::run_until(&dev, &cfg, stop, |p| view.update(p));
    view.finish();
    // The trace is written also when the run failed: it shows where.
    let traced = session.map(|(s, path)| trace::finish(s, path, &mut warn));
    let report = result.map_err(|e| Failure::run(&e))?;
    Ok((report, traced.transpose()?))
}

fn main() -> ExitCode {
    // First, before any other thread exists (they inherit the blocked SIGINT).
    let never = Arc::new(AtomicBool::new(false));
    let (stop, stop_warning) = match catch_interrupt() {
        Ok(flag) => (flag, None),
        Err(e) => (never, Some(e)),
    };
    let json_arg = std::env::args_os().skip(1).any(|a| a == "--json");
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            if json_arg
                && !matches!(
                    e.kind(),
                    ErrorKind::DisplayHelp
                        | ErrorKind::DisplayVersion
                        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                )
            {
                let text = e.to_string();
                let first = text.lines().next().unwrap_or_default();
                let message = first.strip_prefix("error: ").unwrap_or(first);
                let f = Failure::usage(format!("{message} (see --help)"));
                print_failure_json(&f, None);
            }
            // Usage errors exit with 2 (exit::USAGE), help and version with 0.
            e.exit()
        }
    };
    let mut warnings: Vec<String> = Vec::new();
    if let Some(w) = stop_warning {
        let w = format!("{w}: Ctrl-C will end the run without a report");
        eprintln!("davinci-workload: warning: {w}");
        warnings.push(w);
    }
    let options = used_options(&args, device_path_from_env());
    let (report, traced) = match run(&args, &options, &stop, &mut warnings) {
        Ok(r) => r,
        Err(f) => return fail(&f, args.json, Some(&options)),
    };
    if args.json {
        print_json_report(&report, &options, &warnings, traced.as_ref());
    } else {
        print_human(&report, traced.as_ref());
    }
    if report.mismatches > 0 {
        eprintln!(
            "davinci-workload: {} results differ from the CPU computation",
            report.mismatches
        );
        return ExitCode::from(exit::MISMATCH);
    }
    if report.interrupted {
        eprintln!(
            "davinci-workload: interrupted (Ctrl-C) after {} of {} rounds: the report is partial",
            report.rounds, report.rounds_planned
        );
        return ExitCode::from(exit::INTERRUPTED);
    }
    ExitCode::SUCCESS
}
