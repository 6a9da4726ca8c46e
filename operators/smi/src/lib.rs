//! `davinci-smi`: the operators' CLI. Lists devices, shows their health, memory, clients and
//! sharing mode, who uses a device (per process and container), turns device sharing on or
//! off and sets how many tenant slots a tenant counts for, non-interactively, idempotently,
//! with a result per device; writes a CDI spec of the devices for container runtimes
//! (`cdi generate`); shows the devices and the processes using them live (`top`, a terminal
//! UI, or one frame with `top --once`); and prints the devices' event logs (`events`, once or
//! `--follow`). Discovery and the CDI model are `davinci-ops`', which the exporter and the
//! device plugin share.
//!
//! Output: text for people (may change between releases) or `--json` (schema
//! `davinci-smi/v1`, documented in docs/operators.md; only additions within v1). Exit status
//! says what kind of failure happened ([`exit`]).
//!
//! Everything below [`main`] takes its environment as arguments ([`Discovery`], an
//! [`Opener`]) so the command logic is tested without devices or processes.
//!
//! The files, each importing only those below it: `cli` (clap's view of the arguments),
//! `plan` (the command line checked, and one round of it), `commands` (the device commands),
//! `tenants` (`-t tenant-share`), `cdi_generate`, `top` (the live view) and `events` (the
//! event logs), both run without a plan, `query` (`--query` CSV), `access` (a device reached
//! through a trait), `error` (failures and exit statuses), [`output`] (the JSON schema and
//! the text rendering).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod access;
mod cdi_generate;
mod cli;
mod commands;
mod error;
mod events;
mod extras;
mod npu;
mod nvsmi;
pub mod output;
mod plan;
mod query;
mod tenants;
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;
mod top;
mod trace;

use std::io::{BufRead, Write};
use std::time::Duration;

use clap::Parser;
use davinci_ops::discover::Discovery;

pub use access::{DeviceAccess, Opener, ShimOpener};
pub use cli::{Cli, IdSel};
pub use error::{combine, exit, SmiError};
pub use extras::Extras;

use output::{Body, Doc, ErrorJson, SCHEMA};
use plan::Plan;

/// Parses and runs a command line (`args[0]` is the program name); writes to `out`/`err`
/// and returns the exit status. With `--loop` it sleeps between rounds.
pub fn run(
    args: &[String],
    disc: &Discovery,
    opener: &dyn Opener,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    run_with(args, disc, opener, out, err, &mut std::thread::sleep)
}

/// [`run`], with the pause between the rounds of `--loop` made explicit (tests record it
/// instead of sleeping).
pub fn run_with(
    args: &[String],
    disc: &Discovery,
    opener: &dyn Opener,
    out: &mut dyn Write,
    err: &mut dyn Write,
    sleep: &mut dyn FnMut(Duration),
) -> i32 {
    run_with_input(args, disc, opener, out, err, sleep, None)
}

/// [`run_with`], with the terminal `set` asks for confirmation on in npu-smi mode (`None`:
/// stdin is not a terminal, and nothing is asked, as npu-smi does not ask a pipe).
///
/// npu-smi mode (Huawei npu-smi's commands and output shapes) is on when `args[0]`'s file
/// name is `npu-smi` or `args[1]` is `--npu-smi`; nvidia-smi mode likewise with `nvidia-smi`
/// and `--nvidia-smi`.
pub fn run_with_input(
    args: &[String],
    disc: &Discovery,
    opener: &dyn Opener,
    out: &mut dyn Write,
    err: &mut dyn Write,
    sleep: &mut dyn FnMut(Duration),
    input: Option<&mut dyn BufRead>,
) -> i32 {
    if let Some(npu_args) = npu::npu_args(args) {
        return npu::run(&npu_args, disc, opener, out, err, input);
    }
    if let Some(nv_args) = nvsmi::nvidia_args(args) {
        return nvsmi::run(&nv_args, disc, opener, out, err, sleep);
    }
    // Known before parsing, so that a command line clap rejects still gets a JSON answer.
    let json = args.iter().skip(1).any(|a| a == "--json");
    let cli = match Cli::try_parse_from(args).and_then(cli::validated) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = write!(out, "{}", e.render());
                return exit::OK;
            }
            let text = e.render().to_string();
            if json {
                let msg = text.trim();
                let msg = msg.strip_prefix("error: ").unwrap_or(msg);
                let msg = msg
                    .strip_suffix("For more information, try '--help'.")
                    .unwrap_or(msg)
                    .trim();
                return usage_error(msg, true, out, err);
            }
            let _ = write!(err, "{text}");
            return exit::USAGE;
        }
    };
    if let Some(cli::Cmd::Top(t)) = &cli.cmd {
        return top::run(&cli, t, disc, opener, out, err, sleep);
    }
    if let Some(cli::Cmd::Events(e)) = &cli.cmd {
        return events::run(&cli, e, disc, opener, out, err, sleep);
    }
    if let Some(cli::Cmd::Trace(t)) = &cli.cmd {
        return trace::run(&cli, t, disc, opener, out, err);
    }
    let plan = match Plan::of(&cli) {
        Ok(p) => p,
        Err(msg) => return usage_error(&msg, json, out, err),
    };
    let mut round: u64 = 0;
    loop {
        round += 1;
        let r = plan.round(&cli.global, disc, opener, round == 1);
        let wrote = out.write_all(r.out.as_bytes()).and_then(|()| out.flush());
        let _ = err.write_all(r.err.as_bytes());
        let Some(every) = plan.every else {
            return r.code;
        };
        if wrote.is_err() {
            // Nobody reads any more (`| head`): stop.
            return exit::OTHER;
        }
        if plan.count.is_some_and(|n| round >= n) {
            return r.code;
        }
        sleep(every);
    }
}

/// A command line that parsed but cannot be run, or one clap rejected: `message` on stderr,
/// or as a `usage-error` document with `--json`; exit status 2.
fn usage_error(message: &str, json: bool, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if json {
        let d = Doc {
            schema: SCHEMA,
            command: "usage-error",
            exit_code: exit::USAGE,
            body: Body::Failed {
                error: ErrorJson {
                    errno: None,
                    code: None,
                    message: message.to_string(),
                },
            },
        };
        let _ = write!(out, "{}", d.render());
    } else {
        let _ = writeln!(err, "davinci-smi: {message}");
    }
    exit::USAGE
}

/// `davinci-smi` on the process's arguments and environment; returns the exit status.
pub fn main() -> i32 {
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    // Not `env::args()`, which panics on an argument that is not UTF-8.
    let args: Vec<String> = match std::env::args_os()
        .enumerate()
        .map(|(i, a)| a.into_string().map_err(|a| (i, a)))
        .collect()
    {
        Ok(a) => a,
        Err((i, a)) => {
            let json = std::env::args_os().any(|a| a == "--json");
            let m = format!("argument {i} ({a:?}) is not valid UTF-8");
            return usage_error(&m, json, &mut out, &mut err);
        }
    };
    let stdin = std::io::stdin();
    let mut terminal = std::io::IsTerminal::is_terminal(&stdin).then(|| stdin.lock());
    let code = run_with_input(
        &args,
        &Discovery::from_env(),
        &ShimOpener,
        &mut out,
        &mut err,
        &mut std::thread::sleep,
        terminal.as_mut().map(|t| t as &mut dyn BufRead),
    );
    let _ = out.flush();
    code
}

#[cfg(test)]
mod tests;
