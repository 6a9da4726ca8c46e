//! `davinci-smi`: the operators' CLI. Lists devices, shows their health, memory, clients and
//! sharing mode, who uses a device (per process and container), and turns device sharing on
//! or off, non-interactively, idempotently, with a result per device.
//!
//! Output: text for people (may change between releases) or `--json` (schema
//! `davinci-smi/v1`, documented in docs/operators.md; only additions within v1). Exit status
//! says what kind of failure happened ([`exit`]).
//!
//! Everything below [`main`] takes its environment as arguments ([`discover::Discovery`], an
//! [`Opener`]) so the command logic is tested without devices or processes.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod access;
mod cli;
mod commands;
pub mod discover;
mod error;
pub mod output;

use std::io::Write;

use clap::Parser;
use davinci_uapi::{Errno, ShareMode};

use discover::Discovery;

pub use access::{DeviceAccess, Opener, ShimOpener};
pub use cli::{Cli, IdSel};
pub use error::{combine, exit, SmiError};

use cli::*;
use commands::*;
use output::*;

/// Parses and runs a command line (`args[0]` is the program name); writes to `out`/`err`
/// and returns the exit status.
pub fn run(
    args: &[String],
    disc: &Discovery,
    opener: &dyn Opener,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => exit::OK,
                _ => exit::USAGE,
            };
            let text = e.render().to_string();
            if code == exit::OK {
                let _ = write!(out, "{text}");
            } else {
                let _ = write!(err, "{text}");
            }
            return code;
        }
    };
    let g = &cli.global;
    let entries = discover::select(&g.device, g.socket_dir.as_deref(), disc);
    let (command, id, action) = match &cli.cmd {
        _ if cli.list => ("list", None, Action::List),
        None => ("info", None, Action::Board),
        Some(Cmd::List) => ("list", None, Action::List),
        Some(Cmd::Info { list: true, .. }) => ("list", None, Action::List),
        Some(Cmd::Info { ty, id, .. }) => match ty.unwrap_or(InfoType::Board) {
            InfoType::Board => ("info", *id, Action::Board),
            InfoType::DeviceShare => ("info-device-share", *id, Action::Share),
            InfoType::Usage => ("info-usage", *id, Action::Usage),
        },
        Some(Cmd::Set { id, data, .. }) => (
            "set-device-share",
            Some(*id),
            Action::Set(if *data == 1 {
                ShareMode::Shared
            } else {
                ShareMode::Exclusive
            }),
        ),
    };
    let fail = |e: SmiError, out: &mut dyn Write, err: &mut dyn Write| {
        let code = e.exit_code();
        if g.json {
            let d = Doc {
                schema: SCHEMA,
                command,
                exit_code: code,
                body: Body::Failed { error: e.json() },
            };
            let _ = write!(out, "{}", d.render());
        } else {
            let _ = writeln!(err, "davinci-smi: {}", e.message);
        }
        code
    };
    if entries.is_empty() {
        let e = SmiError::new(
            Errno::ENODEV,
            format!(
                "no davinci devices found (looked for {})",
                discover::searched(&g.device, g.socket_dir.as_deref(), disc)
            ),
        );
        return fail(e, out, err);
    }
    if matches!(action, Action::List) {
        let devices: Vec<ListedDevice> = entries
            .iter()
            .map(|e| ListedDevice {
                id: e.id,
                path: e.path.clone(),
            })
            .collect();
        if g.json {
            let d = Doc {
                schema: SCHEMA,
                command,
                exit_code: exit::OK,
                body: Body::List { devices },
            };
            let _ = write!(out, "{}", d.render());
        } else {
            let rows: Vec<Vec<String>> = devices
                .iter()
                .map(|d| vec![d.id.map_or("-".into(), |i| i.to_string()), d.path.clone()])
                .collect();
            let _ = write!(out, "{}", table(&["Device", "Path"], &rows));
        }
        return exit::OK;
    }
    // Open the targeted devices.
    let mut targets: Vec<Target> = entries
        .into_iter()
        .map(|e| {
            let dev = opener.open(&e.path);
            Target { entry: e, dev }
        })
        .collect();
    // Paths that do not name their id get it from GET_INFO.
    for t in &mut targets {
        if t.entry.id.is_none() {
            if let Ok(d) = &t.dev {
                t.entry.id = d.info().ok().map(|i| i.device_id);
            }
        }
    }
    if let Some(IdSel::One(n)) = id {
        targets.retain(|t| t.entry.id == Some(n));
        if targets.is_empty() {
            let e = SmiError::new(
                Errno::ENODEV,
                format!(
                    "no device with id {n} (see `davinci-smi list`; looked in {})",
                    discover::searched(&g.device, g.socket_dir.as_deref(), disc)
                ),
            );
            return fail(e, out, err);
        }
    }
    let (doc, text) = match action {
        Action::Board => board(&targets),
        Action::Share => share(&targets),
        Action::Usage => usage(&targets),
        Action::Set(mode) => set(&targets, mode),
        Action::List => return exit::OK,
    };
    let doc = Doc { command, ..doc };
    if g.json {
        let _ = write!(out, "{}", doc.render());
    } else {
        let _ = write!(out, "{text}");
    }
    doc.exit_code
}

/// `davinci-smi` on the process's arguments and environment; returns the exit status.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().collect();
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    let code = run(
        &args,
        &Discovery::from_env(),
        &ShimOpener,
        &mut out,
        &mut err,
    );
    let _ = out.flush();
    code
}

#[cfg(test)]
mod tests;
