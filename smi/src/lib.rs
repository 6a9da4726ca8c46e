//! `davinci-smi`: the operators' CLI. Lists devices, shows their health, memory, clients and
//! sharing mode, who uses a device (per process and container), and turns device sharing on
//! or off, non-interactively, idempotently, with a result per device; and writes a CDI spec
//! of the devices for container runtimes ([`cdi`]).
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
pub mod cdi;
mod cli;
mod commands;
pub mod discover;
mod error;
pub mod output;
mod query;

use std::io::Write;
use std::time::Duration;

use clap::Parser;
use davinci_uapi::{Errno, ShareMode};

use discover::Discovery;

pub use access::{DeviceAccess, Opener, ShimOpener};
pub use cli::{Cli, IdSel};
pub use error::{combine, exit, SmiError};

use cli::*;
use commands::*;
use output::*;
use query::*;

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
    // Known before parsing, so that a command line clap rejects still gets a JSON answer.
    let json = args.iter().skip(1).any(|a| a == "--json");
    let cli = match Cli::try_parse_from(args) {
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

/// What one round wrote, and its exit status.
struct Round {
    out: String,
    err: String,
    code: i32,
}

/// The command line, checked: what to do, how to print it, how often.
struct Plan {
    command: &'static str,
    id: Option<IdSel>,
    action: Action,
    json: bool,
    csv: Option<(Columns, CsvFormat)>,
    every: Option<Duration>,
    count: Option<u64>,
}

impl Plan {
    fn of(cli: &Cli) -> Result<Plan, String> {
        // Options given after the subcommand win over the same ones before it.
        let pick_q = |sub: &QueryArgs| QueryArgs {
            query: if sub.query.is_empty() {
                cli.query.query.clone()
            } else {
                sub.query.clone()
            },
            format: if sub.format.is_empty() {
                cli.query.format.clone()
            } else {
                sub.format.clone()
            },
        };
        let pick_l = |sub: &LoopArgs| LoopArgs {
            every: sub.every.or(cli.repeat.every),
            count: sub.count.or(cli.repeat.count),
        };
        let none = (QueryArgs::default(), LoopArgs::default());
        let (command, id, action, (query, repeat)) = match &cli.cmd {
            _ if cli.list => (
                "list",
                None,
                Action::List,
                (pick_q(&none.0), pick_l(&none.1)),
            ),
            None => (
                "info",
                None,
                Action::Board,
                (pick_q(&none.0), pick_l(&none.1)),
            ),
            Some(Cmd::List { repeat }) => (
                "list",
                None,
                Action::List,
                (pick_q(&none.0), pick_l(repeat)),
            ),
            Some(Cmd::Info {
                list: true,
                query,
                repeat,
                ..
            }) => ("list", None, Action::List, (pick_q(query), pick_l(repeat))),
            Some(Cmd::Info {
                ty,
                id,
                query,
                repeat,
                ..
            }) => {
                let q = (pick_q(query), pick_l(repeat));
                match ty.unwrap_or(InfoType::Board) {
                    InfoType::Board => ("info", *id, Action::Board, q),
                    InfoType::DeviceShare => ("info-device-share", *id, Action::Share, q),
                    InfoType::Usage => ("info-usage", *id, Action::Usage, q),
                }
            }
            Some(Cmd::Set { id, data, .. }) => (
                "set-device-share",
                Some(*id),
                Action::Set(if *data == 1 {
                    ShareMode::Shared
                } else {
                    ShareMode::Exclusive
                }),
                (pick_q(&none.0), pick_l(&none.1)),
            ),
            Some(Cmd::Cdi {
                cmd: CdiCmd::Generate(g),
            }) => (
                "cdi-generate",
                None,
                Action::Cdi(cdi::Generate {
                    output: g.output.clone(),
                    format: g.format,
                    kind: g.kind.clone(),
                    version: g.cdi_version,
                }),
                (pick_q(&none.0), pick_l(&none.1)),
            ),
        };
        let json = cli.global.json;
        let csv = if query.query.is_empty() && query.format.is_empty() {
            None
        } else {
            let fmt = if query.format.is_empty() {
                CsvFormat {
                    header: true,
                    units: true,
                }
            } else {
                parse_format(&query.format)?
            };
            let cols = match action {
                Action::Board => Columns::Board(select(
                    BOARD_FIELDS,
                    &query.query,
                    BOARD_DEFAULT,
                    "`info`",
                )?),
                Action::Usage => Columns::Usage(select(
                    USAGE_FIELDS,
                    &query.query,
                    USAGE_DEFAULT,
                    "`info -t usage`",
                )?),
                _ => {
                    return Err(format!(
                        "--query and --format apply to `info` (the device table) and `info -t usage`, not to `{command}`"
                    ))
                }
            };
            if json {
                return Err(
                    "--query/--format print CSV and --json prints JSON: give one or the other"
                        .into(),
                );
            }
            Some((cols, fmt))
        };
        if repeat.count.is_some() && repeat.every.is_none() {
            return Err("--count N needs --loop SECONDS".into());
        }
        if repeat.every.is_some() && matches!(action, Action::Set(_)) {
            return Err("--loop and --count do not apply to `set`".into());
        }
        if repeat.every.is_some() && matches!(action, Action::Cdi(_)) {
            return Err("--loop and --count do not apply to `cdi generate`".into());
        }
        Ok(Plan {
            command,
            id,
            action,
            json,
            csv,
            every: repeat.every,
            count: repeat.count,
        })
    }

    /// A JSON document: pretty, or one per line in a loop (JSON Lines).
    fn render(&self, d: &Doc) -> String {
        if self.every.is_some() {
            d.render_line()
        } else {
            d.render()
        }
    }

    /// `list`: the selected devices (none is opened).
    fn list(&self, entries: &[discover::Entry], stamp: String) -> Round {
        let devices: Vec<ListedDevice> = entries
            .iter()
            .map(|e| ListedDevice {
                id: e.id,
                path: e.path.clone(),
            })
            .collect();
        let out = if self.json {
            self.render(&Doc {
                schema: SCHEMA,
                command: self.command,
                exit_code: exit::OK,
                body: Body::List { devices },
            })
        } else {
            let rows: Vec<Vec<String>> = devices
                .iter()
                .map(|d| vec![id_text(d.id), d.path.clone()])
                .collect();
            stamp + &table(&["Device", "Path"], &rows)
        };
        Round {
            out,
            err: String::new(),
            code: exit::OK,
        }
    }

    /// `cdi generate` done: the spec (or where it went) on stdout and warnings on stderr; or
    /// with `--json` one document with all of it.
    fn cdi_round(&self, done: cdi::Generated) -> Round {
        if self.json {
            let d = Doc {
                schema: SCHEMA,
                command: self.command,
                exit_code: exit::OK,
                body: Body::Cdi {
                    output: done.output,
                    format: done.format.name(),
                    kind: done.kind,
                    cdi_version: done.spec.cdi_version.clone(),
                    devices: done.devices,
                    warnings: done.warnings,
                    spec: done.spec,
                },
            };
            Round {
                out: self.render(&d),
                err: String::new(),
                code: exit::OK,
            }
        } else {
            Round {
                out: done.text,
                err: done
                    .warnings
                    .iter()
                    .map(|w| format!("davinci-smi: warning: {w}\n"))
                    .collect(),
                code: exit::OK,
            }
        }
    }

    /// One run of the command: discover, open, ask, print.
    fn round(&self, g: &Global, disc: &Discovery, opener: &dyn Opener, first: bool) -> Round {
        let timestamp = timestamp_now();
        let fail = |e: SmiError| {
            let code = e.exit_code();
            if self.json {
                let d = Doc {
                    schema: SCHEMA,
                    command: self.command,
                    exit_code: code,
                    body: Body::Failed { error: e.json() },
                };
                Round {
                    out: self.render(&d),
                    err: String::new(),
                    code,
                }
            } else {
                Round {
                    out: String::new(),
                    err: format!("davinci-smi: {}\n", e.message),
                    code,
                }
            }
        };
        let entries = dedupe(discover::select(&g.device, g.socket_dir.as_deref(), disc));
        if entries.is_empty() {
            return fail(SmiError::new(
                Errno::ENODEV,
                format!(
                    "no davinci devices found (looked for {})",
                    discover::searched(&g.device, g.socket_dir.as_deref(), disc)
                ),
            ));
        }
        // A header line in text mode for every round of a loop, so rounds can be told apart.
        let stamp = if self.every.is_some() && !self.json && self.csv.is_none() {
            format!("{timestamp}\n")
        } else {
            String::new()
        };
        if matches!(self.action, Action::List) {
            return self.list(&entries, stamp);
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
        if let Some(IdSel::One(n)) = self.id {
            targets.retain(|t| t.entry.id == Some(n));
            if targets.is_empty() {
                return fail(SmiError::new(
                    Errno::ENODEV,
                    format!(
                        "no device with id {n} (see `davinci-smi list`; looked in {})",
                        discover::searched(&g.device, g.socket_dir.as_deref(), disc)
                    ),
                ));
            }
        }
        let report = match self.action {
            Action::Board => board(&targets),
            Action::Share => share(&targets),
            Action::Usage => usage(&targets),
            Action::Set(mode) => set(&targets, mode),
            Action::Cdi(ref g) => {
                return match cdi::generate(&targets, g) {
                    Err(e) => fail(e),
                    Ok(done) => self.cdi_round(done),
                }
            }
            Action::List => {
                let entries: Vec<discover::Entry> = targets.into_iter().map(|t| t.entry).collect();
                return self.list(&entries, stamp);
            }
        };
        let doc = Doc {
            command: self.command,
            ..report.doc
        };
        let code = doc.exit_code;
        if self.json {
            Round {
                out: self.render(&doc),
                err: String::new(),
                code,
            }
        } else if let Some((cols, fmt)) = &self.csv {
            Round {
                out: csv(cols, *fmt, &doc.body, &timestamp, first && fmt.header),
                err: report.errors,
                code,
            }
        } else {
            Round {
                out: stamp + &report.text,
                err: report.errors,
                code,
            }
        }
    }
}

/// The selected devices with each device once: a path named twice, or two paths to the same
/// socket or node (`/run/davinci/./davinci0.sock`, a symlink), keep the first.
fn dedupe(entries: Vec<discover::Entry>) -> Vec<discover::Entry> {
    let mut seen = std::collections::HashSet::new();
    entries
        .into_iter()
        .filter(|e| seen.insert(same_device_key(&e.path)))
        .collect()
}

/// What makes two device paths the same: the kind (`mock:` or not) and the file, resolved
/// when it exists (else the path with `.` and repeated `/` removed).
fn same_device_key(path: &str) -> (bool, std::path::PathBuf) {
    let (mock, file) = match path.strip_prefix("mock:") {
        Some(f) => (true, f),
        None => (false, path),
    };
    let p = std::path::Path::new(file);
    let resolved = std::fs::canonicalize(p).unwrap_or_else(|_| p.components().collect());
    (mock, resolved)
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
