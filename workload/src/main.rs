//! `davinci-workload`: runs a checked workload on a davinci device. With no hardware it starts
//! the embedded mock device (the device engine on threads of this process).
//!
//! Vector adds (u32/i32/f32), fills and copies over several streams with cross-stream
//! events; every result is compared with a CPU computation. Prints tasks/s, single-task
//! round-trip latency (p50/p99) and doorbells per 1000 tasks. The exit status says how it
//! ended (see [`AFTER_HELP`]).
#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::error::ErrorKind;
use clap::Parser;
use davinci_shim::{device_path_from_env, Device, DevicePath, Errno, MockConfig, DEVICE_ENV};
use davinci_workload::run::{self as workload, Phase, Progress, Report, WorkloadConfig};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

/// The `schema` of every JSON object this program prints (reports and errors).
const SCHEMA: &str = "davinci-workload/v1";
/// Seconds between progress lines when stderr is not a terminal.
const PROGRESS_ENV: &str = "DAVINCI_WORKLOAD_PROGRESS_SECS";
const DEFAULT_PROGRESS_SECS: f64 = 5.0;
const DEFAULT_MEMORY_MIB: u64 = 512;
const DEFAULT_BATCH: usize = 32;
const MIB: u64 = 1 << 20;

/// Exit statuses.
mod exit {
    pub const MISMATCH: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const UNAVAILABLE: u8 = 3;
    pub const TIMEOUT: u8 = 4;
    pub const DEVICE: u8 = 5;
    pub const INTERRUPTED: u8 = 130;
}

const AFTER_HELP: &str = "\
Device selection: --device, else $DAVINCI_DEVICE (when set and not empty), else \"embedded\".

Environment:
  DAVINCI_DEVICE                   the device when --device is not given (any --device value)
  DAVINCI_WORKLOAD_PROGRESS_SECS   seconds between progress lines on stderr when it is not a
                                   terminal (default 5; 0: after every round); on a terminal a
                                   progress bar shows the rate and ETA instead

Exit status:
  0    every result matched the CPU computation
  1    some results differ from the CPU computation (also when interrupted)
  2    usage: an option or DAVINCI_DEVICE is invalid or more than the device allows
  3    device unavailable: it cannot be opened (no node, no daemon, busy, permissions)
  4    timeout: a synchronize or round trip took longer than --timeout-secs
  5    the device or the shim failed during the run
  130  interrupted (Ctrl-C): the partial report is printed; Ctrl-C again quits at once

With --json, stdout carries one JSON object with \"schema\": \"davinci-workload/v1\": the report
(with \"client_id\", \"options\", \"warnings\", \"interrupted\"), or on failure
{\"schema\", \"error\": {\"kind\", \"exit_code\", \"message\", \"errno\"}, \"options\"}
(\"options\" is null when the command line itself could not be read).";

/// Run a checked workload on a davinci device (the embedded mock device by default) and
/// report throughput, latency and doorbells.
#[derive(Debug, Parser)]
#[command(name = "davinci-workload", version, after_help = AFTER_HELP)]
struct Args {
    /// Device: "embedded" (in-process mock device), "mock:SOCKET" (a davinci-mockd device) or
    /// "/dev/davinciN" (the kernel driver) [default: $DAVINCI_DEVICE, else embedded].
    #[arg(long, value_name = "PATH")]
    device: Option<String>,
    /// Tasks in the throughput phase, at least 1 (rounded up to whole rounds of
    /// streams x (3 x slots + 3) tasks).
    #[arg(long, default_value_t = 200_000)]
    tasks: u64,
    /// Streams, all in one context, chained by events; at most the device's stream limit
    /// less one (the latency phase has its own stream).
    #[arg(long, default_value_t = 4)]
    streams: usize,
    /// Descriptors per submit call (one publish and at most one doorbell each), at least 1
    /// [default: 32].
    #[arg(long, value_name = "BATCH")]
    batch: Option<usize>,
    /// Elements per vector (4 bytes each), at least 1.
    #[arg(long, default_value_t = 256)]
    elements: usize,
    /// Vector jobs (add, fill, copy) per stream per round, at least 1.
    #[arg(long, default_value_t = 64)]
    slots: usize,
    /// Single-task round trips measured in the latency phase (0: no latency phase).
    #[arg(long, default_value_t = 2_000)]
    latency_samples: usize,
    /// Device memory of the embedded device, in MiB [default: 512]; must hold the
    /// workload's buffers (the error says how much). Other devices have their own memory:
    /// ignored for them, with a warning.
    #[arg(long, value_name = "MIB")]
    memory_mib: Option<u64>,
    /// Seconds a synchronize or a round trip may take before the run fails (exit status 4),
    /// at least 1.
    #[arg(long, default_value_t = 30)]
    timeout_secs: u64,
    /// Print the results (or the error) as one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// Where the device path came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum DeviceFrom {
    /// `--device`.
    Option,
    /// `DAVINCI_DEVICE`.
    Env,
    /// Neither: "embedded".
    Default,
}

/// The options a run used, in the JSON report and error objects.
#[derive(Debug, Clone, Serialize)]
struct UsedOptions {
    device: String,
    device_from: DeviceFrom,
    tasks: u64,
    streams: usize,
    batch: usize,
    elements: usize,
    slots: usize,
    latency_samples: usize,
    /// `None` for a device other than the embedded one (the option does not apply).
    memory_mib: Option<u64>,
    timeout_secs: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Usage,
    DeviceUnavailable,
    Timeout,
    DeviceError,
}

impl Kind {
    fn exit_code(self) -> u8 {
        match self {
            Kind::Usage => exit::USAGE,
            Kind::DeviceUnavailable => exit::UNAVAILABLE,
            Kind::Timeout => exit::TIMEOUT,
            Kind::DeviceError => exit::DEVICE,
        }
    }
}

/// Why the program failed, with what to change in the message.
#[derive(Debug, Clone)]
struct Failure {
    kind: Kind,
    message: String,
    errno: Option<Errno>,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Failure {
            kind: Kind::Usage,
            message: message.into(),
            errno: None,
        }
    }

    /// A shim error while opening the device: a malformed path is a usage error, the rest
    /// say the device is unavailable.
    fn open(e: &davinci_shim::Error) -> Self {
        let kind = if e.is(Errno::EINVAL) {
            Kind::Usage
        } else {
            Kind::DeviceUnavailable
        };
        Failure {
            kind,
            message: e.to_string(),
            errno: e.errno(),
        }
    }

    /// A shim error during the run.
    fn run(e: &davinci_shim::Error) -> Self {
        let kind = if e.is(Errno::ETIMEDOUT) {
            Kind::Timeout
        } else if e.is(Errno::ENODEV) {
            Kind::DeviceUnavailable
        } else if e.is(Errno::EINVAL) && e.op() == "workload" {
            Kind::Usage
        } else {
            Kind::DeviceError
        };
        let mut message = e.to_string();
        if kind == Kind::Timeout {
            message.push_str(" (raise --timeout-secs if the device is just slow)");
        }
        Failure {
            kind,
            message,
            errno: e.errno(),
        }
    }
}

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
}

fn print_json(value: &impl Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => println!("{s}"),
        // Cannot happen for these types (no maps with non-string keys, no failing Serialize).
        Err(e) => eprintln!("davinci-workload: cannot encode JSON: {e}"),
    }
}

/// Prints `f` (stderr, and stdout as a JSON object with `--json`); returns its exit status.
fn fail(f: &Failure, json: bool, options: Option<&UsedOptions>) -> ExitCode {
    eprintln!("davinci-workload: {}", f.message);
    if json {
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
    ExitCode::from(f.kind.exit_code())
}

fn print_human(r: &Report) {
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
    if r.interrupted {
        println!(
            "interrupted:   after {} of {} rounds (Ctrl-C); the figures cover the work done",
            r.rounds, r.rounds_planned
        );
    }
}

/// SIGINT (Ctrl-C) sets the returned flag; a second one exits at once with status 130.
/// SIGINT is blocked in this thread (and so in every thread started later: call this first)
/// and taken by a thread of its own with `sigwait`, so no signal handler is needed.
fn catch_interrupt() -> Result<Arc<AtomicBool>, String> {
    use nix::sys::signal::{SigSet, Signal};
    let flag = Arc::new(AtomicBool::new(false));
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
            }
        });
    if let Err(e) = spawned {
        // Nobody would take the signal: let it kill the process as before.
        let _ = set.thread_unblock();
        return Err(format!("cannot start the SIGINT thread: {e}"));
    }
    Ok(flag)
}

/// The progress bar template on a terminal: position, rate and ETA of the current phase.
const BAR_TEMPLATE: &str =
    "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg} ({per_sec:0}, ETA {eta})";

fn phase_unit(phase: Phase) -> &'static str {
    match phase {
        Phase::Throughput => "tasks",
        Phase::Latency => "round trips",
    }
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Throughput => "throughput",
        Phase::Latency => "latency",
    }
}

/// `1h02m03s`, `2m05s`, `7s`.
fn short_duration(secs: f64) -> String {
    let s = if secs.is_finite() && secs > 0.0 {
        secs.round() as u64
    } else {
        0
    };
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, s) => format!("{h}h{m:02}m{s:02}s"),
    }
}

/// One progress line (for a stderr that is not a terminal).
fn progress_line(p: &Progress, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        p.done as f64 / secs
    } else {
        0.0
    };
    let eta = if rate > 0.0 {
        short_duration(p.total.saturating_sub(p.done) as f64 / rate)
    } else {
        "unknown".into()
    };
    let unit = phase_unit(p.phase);
    format!(
        "davinci-workload: {} {}/{} {unit} ({}%), {rate:.0} {unit}/s, ETA {eta}",
        phase_name(p.phase),
        p.done,
        p.total,
        (p.done.saturating_mul(100))
            .checked_div(p.total)
            .unwrap_or(100)
    )
}

/// Progress on stderr: a bar on a terminal, otherwise a line every `interval`.
struct ProgressView {
    bar: Option<ProgressBar>,
    interval: Duration,
    phase: Option<Phase>,
    phase_start: Instant,
    last_line: Instant,
}

impl ProgressView {
    fn new(terminal: bool, interval: Duration) -> Self {
        let bar = terminal.then(|| {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(BAR_TEMPLATE) {
                bar.set_style(style);
            }
            bar
        });
        let now = Instant::now();
        ProgressView {
            bar,
            interval,
            phase: None,
            phase_start: now,
            last_line: now,
        }
    }

    fn update(&mut self, p: Progress) {
        if self.phase != Some(p.phase) {
            self.phase = Some(p.phase);
            self.phase_start = Instant::now();
            if let Some(bar) = &self.bar {
                bar.reset();
                bar.set_length(p.total);
                bar.set_message(phase_unit(p.phase));
            }
        }
        match &self.bar {
            Some(bar) => bar.set_position(p.done),
            None => {
                if self.last_line.elapsed() >= self.interval {
                    self.last_line = Instant::now();
                    eprintln!("{}", progress_line(&p, self.phase_start.elapsed()));
                }
            }
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// [`PROGRESS_ENV`] as an interval.
fn progress_interval(value: Option<&str>) -> Result<Duration, Failure> {
    let Some(text) = value.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(Duration::from_secs_f64(DEFAULT_PROGRESS_SECS));
    };
    text.parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| {
            Failure::usage(format!(
                "{PROGRESS_ENV}={text:?} is not a number of seconds: set it to e.g. 5, 0.5 or 0 \
                 (a line after every round), or unset it"
            ))
        })
}

/// `--device`, else `DAVINCI_DEVICE` (set and not empty), else "embedded".
fn resolve_device(option: Option<&str>, env: Option<String>) -> (String, DeviceFrom) {
    match (option, env) {
        (Some(d), _) => (d.to_string(), DeviceFrom::Option),
        (None, Some(d)) => (d, DeviceFrom::Env),
        (None, None) => ("embedded".to_string(), DeviceFrom::Default),
    }
}

use davinci_units::mib_text as mib;

/// What the run needs against what the opened device has: streams, events, memory and
/// allocations.
fn check_device(
    cfg: &WorkloadConfig,
    dev: &Device,
    embedded_mib: Option<u64>,
) -> Result<(), Failure> {
    let info = dev.info();
    let streams_needed = cfg.streams_needed();
    if streams_needed > u64::from(info.max_streams) {
        let room = u64::from(info.max_streams).saturating_sub(streams_needed - cfg.streams as u64);
        return Err(Failure::usage(format!(
            "--streams {} is more than the device allows: it has at most {} streams{}; use \
             --streams {room} or fewer",
            cfg.streams,
            info.max_streams,
            if cfg.latency_samples > 0 {
                " and the latency phase uses one more"
            } else {
                ""
            }
        )));
    }
    if cfg.streams as u64 > u64::from(info.max_events) {
        return Err(Failure::usage(format!(
            "--streams {} is more than the device allows: each stream needs an event and it has \
             at most {} events; use --streams {} or fewer",
            cfg.streams, info.max_events, info.max_events
        )));
    }
    let Some(need) = cfg.memory_needed(u64::from(info.mem_align)) else {
        return Err(Failure::usage(format!(
            "--streams {} x --slots {} x --elements {}: the buffers' total size overflows; use \
             smaller values",
            cfg.streams, cfg.slots, cfg.elements
        )));
    };
    let what = format!(
        "this workload needs {} of device memory: {} buffers of {} bytes ({} streams x (5 x {} \
         slots + 1), {} elements each) in {} allocation{} of {}",
        mib(need.device_bytes),
        need.buffers,
        need.buffer_bytes,
        cfg.streams,
        cfg.slots,
        cfg.elements,
        need.allocations,
        if need.allocations == 1 { "" } else { "s" },
        mib(need.allocation_bytes)
    );
    if need.allocations > u64::from(info.max_allocations) {
        return Err(Failure::usage(format!(
            "{what}, but the device allows at most {} allocations; use fewer --streams or \
             --slots, or fewer --elements (buffers of up to 4 MiB share allocations)",
            info.max_allocations
        )));
    }
    match embedded_mib {
        Some(m) => {
            if need.device_bytes > info.memory_size {
                return Err(Failure::usage(format!(
                    "--memory-mib {m} is too small: {what}; use --memory-mib {} or more, or \
                     fewer --streams, --slots or --elements",
                    need.device_bytes.div_ceil(MIB)
                )));
            }
        }
        None => {
            let now = dev.query_info().unwrap_or(*info);
            let free = now.memory_size.saturating_sub(now.memory_used);
            let available = free.min(now.client_memory_limit);
            if need.device_bytes > available {
                return Err(Failure::usage(format!(
                    "{what}, but the device has {} free ({} in all, {} in use, at most {} per \
                     client); use fewer --streams, --slots or --elements",
                    mib(free),
                    mib(now.memory_size),
                    mib(now.memory_used),
                    mib(now.client_memory_limit)
                )));
            }
        }
    }
    Ok(())
}

/// The options as the run uses them: defaults filled in, the device resolved.
fn used_options(args: &Args, env_device: Option<String>) -> UsedOptions {
    let (device, device_from) = resolve_device(args.device.as_deref(), env_device);
    let embedded = device == "embedded";
    UsedOptions {
        device,
        device_from,
        tasks: args.tasks,
        streams: args.streams,
        batch: args.batch.unwrap_or(DEFAULT_BATCH),
        elements: args.elements,
        slots: args.slots,
        latency_samples: args.latency_samples,
        memory_mib: embedded.then(|| args.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB)),
        timeout_secs: args.timeout_secs,
    }
}

/// Everything up to the report.
fn run(
    args: &Args,
    options: &UsedOptions,
    stop: &AtomicBool,
    warnings: &mut Vec<String>,
) -> Result<Report, Failure> {
    let device = &options.device;
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
    let mut view = ProgressView::new(std::io::stderr().is_terminal(), interval);
    let result = workload::run_until(&dev, &cfg, stop, |p| view.update(p));
    view.finish();
    result.map_err(|e| Failure::run(&e))
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
                print_json(&JsonError {
                    schema: SCHEMA,
                    error: JsonErrorBody {
                        kind: f.kind,
                        exit_code: f.kind.exit_code(),
                        message: &f.message,
                        errno: None,
                    },
                    options: None,
                });
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
    let report = match run(&args, &options, &stop, &mut warnings) {
        Ok(r) => r,
        Err(f) => return fail(&f, args.json, Some(&options)),
    };
    if args.json {
        print_json(&JsonReport {
            schema: SCHEMA,
            report: &report,
            options: &options,
            warnings: &warnings,
        });
    } else {
        print_human(&report);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_errors_map_to_distinct_exit_codes() {
        let code = |e: davinci_shim::Error| Failure::run(&e).kind.exit_code();
        assert_eq!(
            code(davinci_shim::Error::new(
                Errno::ETIMEDOUT,
                "Stream::synchronize",
                "still running"
            )),
            exit::TIMEOUT
        );
        assert_eq!(
            code(davinci_shim::Error::new(
                Errno::ENODEV,
                "CREATE_STREAM",
                "gone"
            )),
            exit::UNAVAILABLE
        );
        assert_eq!(
            code(davinci_shim::Error::new(
                Errno::ENOMEM,
                "ALLOC_MEMORY",
                "full"
            )),
            exit::DEVICE
        );
        assert_eq!(
            code(davinci_shim::Error::new(
                Errno::EINVAL,
                "workload",
                "--tasks 0"
            )),
            exit::USAGE
        );
        let t = Failure::run(&davinci_shim::Error::new(Errno::ETIMEDOUT, "x", "y"));
        assert!(t.message.contains("--timeout-secs"), "{}", t.message);
        let codes = [
            exit::MISMATCH,
            exit::USAGE,
            exit::UNAVAILABLE,
            exit::TIMEOUT,
            exit::DEVICE,
            exit::INTERRUPTED,
        ];
        for (i, c) in codes.iter().enumerate() {
            assert!(!codes[..i].contains(c), "exit code {c} used twice");
            assert!(
                AFTER_HELP.contains(&format!("\n  {c} ")),
                "{c} not in --help"
            );
        }
    }

    #[test]
    fn open_errors_are_usage_or_unavailable() {
        let e = DevicePath::parse("davinci0").unwrap_err();
        assert_eq!(Failure::open(&e).kind, Kind::Usage);
        let e = davinci_shim::Error::new(Errno::EBUSY, "open", "held by pid 1");
        assert_eq!(Failure::open(&e).kind, Kind::DeviceUnavailable);
    }

    #[test]
    fn the_device_option_wins_over_the_environment() {
        let env = || Some("mock:/run/davinci/davinci0.sock".to_string());
        assert_eq!(
            resolve_device(Some("embedded"), env()),
            ("embedded".into(), DeviceFrom::Option)
        );
        assert_eq!(
            resolve_device(None, env()),
            ("mock:/run/davinci/davinci0.sock".into(), DeviceFrom::Env)
        );
        assert_eq!(
            resolve_device(None, None),
            ("embedded".into(), DeviceFrom::Default)
        );
    }

    #[test]
    fn the_bar_shows_rate_and_eta() {
        assert!(ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
        assert!(BAR_TEMPLATE.contains("{per_sec") && BAR_TEMPLATE.contains("{eta}"));
    }

    #[test]
    fn progress_lines_give_rate_and_eta() {
        let p = Progress {
            phase: Phase::Throughput,
            done: 1000,
            total: 4000,
        };
        assert_eq!(
            progress_line(&p, Duration::from_secs(2)),
            "davinci-workload: throughput 1000/4000 tasks (25%), 500 tasks/s, ETA 6s"
        );
        let p = Progress {
            phase: Phase::Latency,
            done: 0,
            total: 10,
        };
        assert!(progress_line(&p, Duration::ZERO).ends_with("ETA unknown"));
        assert_eq!(short_duration(3725.0), "1h02m05s");
        assert_eq!(short_duration(125.0), "2m05s");
    }

    #[test]
    fn progress_interval_parses_seconds() {
        assert_eq!(progress_interval(None).unwrap(), Duration::from_secs(5));
        assert_eq!(progress_interval(Some("")).unwrap(), Duration::from_secs(5));
        assert_eq!(progress_interval(Some("0")).unwrap(), Duration::ZERO);
        assert_eq!(
            progress_interval(Some("0.5")).unwrap(),
            Duration::from_millis(500)
        );
        for bad in ["-1", "soon", "NaN", "1e400"] {
            let f = progress_interval(Some(bad)).unwrap_err();
            assert!(f.message.contains(PROGRESS_ENV), "{}", f.message);
        }
    }
}
