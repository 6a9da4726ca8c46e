//! The command line of `davinci-workload`: the options ([`Args`]), `--help`'s epilogue and
//! the exit statuses it documents, and the options as a run uses them ([`UsedOptions`]:
//! defaults filled in, the device resolved from `--device` or `DAVINCI_DEVICE`).
#![forbid(unsafe_code)]

use clap::Parser;
use serde::Serialize;

pub(crate) const DEFAULT_MEMORY_MIB: u64 = 512;
/// Bytes per MiB (`--memory-mib`).
pub(crate) const MIB: u64 = 1 << 20;
const DEFAULT_BATCH: usize = 32;

/// Exit statuses.
pub(crate) mod exit {
    pub const MISMATCH: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const UNAVAILABLE: u8 = 3;
    pub const TIMEOUT: u8 = 4;
    pub const DEVICE: u8 = 5;
    pub const INTERRUPTED: u8 = 130;
}

pub(crate) const AFTER_HELP: &str = "\
Device selection: --device, else $DAVINCI_DEVICE (when set and not empty), else \"embedded\"
(refused when the node has a device: /dev/davinci0, or davinci0.sock in davinci-mockd's
default socket directory; name it, or --device embedded). The device used is said on stderr.

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
pub(crate) struct Args {
    /// Device: "embedded" (in-process mock device), "mock:SOCKET" (a davinci-mockd device) or
    /// "/dev/davinciN" (the kernel driver) [default: $DAVINCI_DEVICE, else embedded].
    #[arg(long, value_name = "PATH")]
    pub(crate) device: Option<String>,
    /// Tasks in the throughput phase, at least 1 (rounded up to whole rounds of
    /// streams x (3 x slots + 3) tasks).
    #[arg(long, default_value_t = 200_000)]
    pub(crate) tasks: u64,
    /// Streams, all in one context, chained by events; at most the device's stream limit
    /// less one (the latency phase has its own stream).
    #[arg(long, default_value_t = 4)]
    pub(crate) streams: usize,
    /// Descriptors per submit call (one publish and at most one doorbell each), at least 1
    /// [default: 32].
    #[arg(long, value_name = "BATCH")]
    pub(crate) batch: Option<usize>,
    /// Elements per vector (4 bytes each), at least 1.
    #[arg(long, default_value_t = 256)]
    pub(crate) elements: usize,
    /// Vector jobs (add, fill, copy) per stream per round, at least 1.
    #[arg(long, default_value_t = 64)]
    pub(crate) slots: usize,
    /// Single-task round trips measured in the latency phase (0: no latency phase).
    #[arg(long, default_value_t = 2_000)]
    pub(crate) latency_samples: usize,
    /// Device memory of the embedded device, in MiB [default: 512]; must hold the
    /// workload's buffers (the error says how much). Other devices have their own memory:
    /// ignored for them, with a warning.
    #[arg(long, value_name = "MIB")]
    pub(crate) memory_mib: Option<u64>,
    /// Seconds a synchronize or a round trip may take before the run fails (exit status 4),
    /// at least 1.
    #[arg(long, default_value_t = 30)]
    pub(crate) timeout_secs: u64,
    /// Print the results (or the error) as one JSON object on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write the run's timeline to FILE as Chrome trace-event JSON (open it in
    /// ui.perfetto.dev or chrome://tracing): the device's tasks per stream beside the
    /// library's host spans, on one clock, with arrows from event records to their waits.
    #[arg(long, value_name = "FILE")]
    pub(crate) trace: Option<std::path::PathBuf>,
}

/// Where the device path came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DeviceFrom {
    /// `--device`.
    Option,
    /// `DAVINCI_DEVICE`.
    Env,
    /// Neither: "embedded".
    Default,
}

/// The options a run used, in the JSON report and error objects.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct UsedOptions {
    pub(crate) device: String,
    pub(crate) device_from: DeviceFrom,
    pub(crate) tasks: u64,
    pub(crate) streams: usize,
    pub(crate) batch: usize,
    pub(crate) elements: usize,
    pub(crate) slots: usize,
    pub(crate) latency_samples: usize,
    /// `None` for a device other than the embedded one (the option does not apply).
    pub(crate) memory_mib: Option<u64>,
    pub(crate) timeout_secs: u64,
    /// `--trace`.
    pub(crate) trace: Option<std::path::PathBuf>,
}

/// `--device`, else `DAVINCI_DEVICE` (set and not empty), else "embedded".
fn resolve_device(option: Option<&str>, env: Option<String>) -> (String, DeviceFrom) {
    match (option, env) {
        (Some(d), _) => (d.to_string(), DeviceFrom::Option),
        (None, Some(d)) => (d, DeviceFrom::Env),
        (None, None) => ("embedded".to_string(), DeviceFrom::Default),
    }
}

/// The options as the run uses them: defaults filled in, the device resolved.
pub(crate) fn used_options(args: &Args, env_device: Option<String>) -> UsedOptions {
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
        trace: args.trace.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
