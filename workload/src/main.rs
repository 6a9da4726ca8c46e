//! `davinci-workload`: runs a checked workload on a davinci device. With no hardware it starts
//! the embedded mock device (the device engine on threads of this process).
//!
//! Vector adds (u32/i32/f32), fills and copies over several streams with cross-stream
//! events; every result is compared with a CPU computation. Prints tasks/s, single-task
//! round-trip latency (p50/p99) and doorbells per 1000 tasks. Exits 1 if any result differs,
//! 2 if the device or the shim failed.
#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use davinci_shim::{Device, MockConfig};
use davinci_workload::run::{self as workload, Report, WorkloadConfig};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Run a checked workload on a davinci device (the embedded mock device by default) and
/// report throughput, latency and doorbells.
#[derive(Debug, Parser)]
#[command(name = "davinci-workload", version)]
struct Args {
    /// Device: "embedded" (in-process mock device), "mock:SOCKET" (a davinci-mockd device) or
    /// "/dev/davinciN" (the kernel driver).
    #[arg(long, default_value = "embedded")]
    device: String,
    /// Tasks in the throughput phase (rounded up to whole rounds).
    #[arg(long, default_value_t = 200_000)]
    tasks: u64,
    /// Streams, all in one context, chained by events.
    #[arg(long, default_value_t = 4)]
    streams: usize,
    /// Descriptors per submit call (one publish and at most one doorbell each).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Elements per vector.
    #[arg(long, default_value_t = 256)]
    elements: usize,
    /// Vector jobs (add, fill, copy) per stream per round.
    #[arg(long, default_value_t = 64)]
    slots: usize,
    /// Single-task round trips measured in the latency phase.
    #[arg(long, default_value_t = 2_000)]
    latency_samples: usize,
    /// Device memory of the embedded device, in MiB.
    #[arg(long, default_value_t = 512)]
    memory_mib: u64,
    /// Seconds a synchronize or a round trip may take before the run fails.
    #[arg(long, default_value_t = 30)]
    timeout_secs: u64,
    /// Print the results as one JSON object on stdout.
    #[arg(long)]
    json: bool,
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
    println!(
        "latency:       p50 {:.1} us, p99 {:.1} us, max {:.1} us over {} single-task round trips \
         ({:.1} doorbells per 1000)",
        r.latency.p50_ns as f64 / 1e3,
        r.latency.p99_ns as f64 / 1e3,
        r.latency.max_ns as f64 / 1e3,
        r.latency.samples,
        r.latency.doorbells_per_1000_tasks
    );
    println!(
        "check:         {} values compared with the CPU, {} mismatches",
        r.values_checked, r.mismatches
    );
    for m in &r.first_mismatches {
        println!("  MISMATCH {m}");
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = MockConfig {
        memory_size: args.memory_mib.saturating_mul(1 << 20),
        ..MockConfig::default()
    };
    let dev = match args.device.as_str() {
        "embedded" => Device::embedded_with(config),
        path => Device::open(path),
    };
    let dev = match dev {
        Ok(d) => d,
        Err(e) => {
            eprintln!("davinci-workload: {e}");
            return ExitCode::from(2);
        }
    };
    let cfg = WorkloadConfig {
        tasks: args.tasks,
        streams: args.streams,
        batch: args.batch,
        elements: args.elements,
        slots: args.slots,
        latency_samples: args.latency_samples,
        timeout: Duration::from_secs(args.timeout_secs),
        ..WorkloadConfig::default()
    };
    let per_round = (cfg.streams.max(1) * (3 * cfg.slots.max(1) + 3)) as u64;
    let total = cfg.tasks.div_ceil(per_round).max(1) * per_round + cfg.latency_samples as u64;
    let bar = ProgressBar::with_draw_target(
        Some(total),
        if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        },
    );
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} tasks")
    {
        bar.set_style(style);
    }
    let result = workload::run(&dev, &cfg, |done| bar.set_position(done));
    bar.finish_and_clear();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("davinci-workload: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("davinci-workload: cannot encode the report: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print_human(&report);
    }
    if report.mismatches > 0 {
        eprintln!(
            "davinci-workload: {} results differ from the CPU computation",
            report.mismatches
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
