//! `davinci-smi top`: the devices and the processes using them, live. Every `--interval` it
//! samples each device (GET_INFO, GET_COUNTERS, GET_IDENTITY and GET_SENSORS through
//! [`crate::extras::device_extras`], LIST_CLIENTS) and shows per device its utilization,
//! memory and sensors, and per process (a client open) its memory, utilization and tasks per
//! second over the last interval; sortable by any column, in a terminal UI (ratatui on
//! crossterm: plain escape sequences, so it works over SSH) or, with `--once`, as one frame of
//! text (the same widgets drawn into a buffer) or a `--json` document for scripts.
//!
//! What a caller sees is what LIST_CLIENTS gives it: every client for an admin, its own
//! clients for anyone else.
//!
//! The files: `sample` (what is read from the devices and the figures of one frame: rates
//! from two samples, user names, the sort), `view` (the widgets, and a frame as text),
//! `json` (`--once --json`), `tui` (the interactive terminal).
#![forbid(unsafe_code)]

mod json;
mod sample;
mod tui;
mod view;

use std::io::Write;
use std::time::Duration;

use clap::Args;
use davinci_ops::discover::{self, Discovery};

use crate::access::Opener;
use crate::cli::{parse_id, Cli, IdSel};
use crate::error::{exit, SmiError};
use crate::output::printable;
use crate::plan::{find, open_targets};

pub(crate) use sample::{Sort, SortKey};

pub(crate) const AFTER_HELP: &str = "\
Shows every device (utilization, memory used of total, temperature and power where the
device reports sensors, health, clients) and every process with a client open on one: its
device, pid, user, container, process name, device memory held, utilization of the device,
tasks completed per second over the last interval, streams, and errors (the times its
streams stopped in the error state, LIST_CLIENTS' stream_errors; 0 from a driver before ABI
1.5; the device's row sums every client's, destroyed streams included). An admin of
the device sees every process; anyone else only their own (what LIST_CLIENTS returns).

Keys: q or Esc quit (also Ctrl-C); s or > next sort column, < previous one; m sort by
memory, t by tasks/s, u by utilization, p by pid; r reverse the order; Up/Down, PgUp/PgDn,
Home/End move through the processes. The first frame has no rates yet (-): they need two
samples. Plain terminal escape sequences, no mouse: works over SSH (TERM must be set).

--once: take two samples --interval apart, print one frame as text and exit (--width
columns, default the terminal's or 120; --height rows, default as many as every process
needs), or with --json a davinci-smi/v1 document (command \"top\") with the devices and the
processes and their figures.

Examples: davinci-smi top
          davinci-smi top --once --interval 200ms --sort tasks
          davinci-smi top --once --json | jq '.processes[] | {pid, memory_bytes}'";

/// `top`'s options.
#[derive(Debug, Clone, Args)]
pub(crate) struct TopArgs {
    /// Device id N (of davinciN), or `all` [default: all]
    #[arg(short = 'i', long = "id", value_name = "ID", value_parser = parse_id)]
    pub(crate) id: Option<IdSel>,
    /// Print one frame (two samples --interval apart) and exit: text, or JSON with --json
    #[arg(long)]
    pub(crate) once: bool,
    /// Time between samples: 500ms, 2s, 1.5 (seconds), from 10ms to 1h
    #[arg(long, short = 'n', value_name = "INTERVAL", default_value = "1s",
          value_parser = parse_interval)]
    pub(crate) interval: Duration,
    /// The column to sort the processes by (keys change it live)
    #[arg(long, value_enum, value_name = "COLUMN", default_value = "memory")]
    pub(crate) sort: SortKey,
    /// Reverse the sort order (numbers are largest first, text A to Z, until reversed)
    #[arg(long)]
    pub(crate) reverse: bool,
    /// --once: the frame's width in columns [default: the terminal's, else 120]
    #[arg(long, value_name = "COLUMNS", requires = "once",
          value_parser = clap::value_parser!(u16).range(40..=1000))]
    pub(crate) width: Option<u16>,
    /// --once: the frame's height in rows [default: what every process needs]
    #[arg(long, value_name = "ROWS", requires = "once",
          value_parser = clap::value_parser!(u16).range(8..=10000))]
    pub(crate) height: Option<u16>,
}

/// The shortest and longest `--interval`.
const INTERVALS: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(3600));

/// `--interval`: the project's duration grammar, within [`INTERVALS`].
fn parse_interval(s: &str) -> Result<Duration, String> {
    davinci_units::parse_duration_between(s, INTERVALS.0, INTERVALS.1)
}

/// The frame width `--once` uses without `--width`: the terminal's, else 120.
fn default_width() -> u16 {
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() {
        if let Ok((w, _)) = ratatui::crossterm::terminal::size() {
            return w.clamp(40, 1000);
        }
    }
    120
}

/// Runs `top` (`cli.cmd` is `Top(args)`): the exit status. `sleep` is the wait between the
/// two samples of `--once` (tests change the fakes in it).
pub(crate) fn run(
    cli: &Cli,
    args: &TopArgs,
    disc: &Discovery,
    opener: &dyn Opener,
    out: &mut dyn Write,
    err: &mut dyn Write,
    sleep: &mut dyn FnMut(Duration),
) -> i32 {
    let json = cli.global.json;
    if cli.repeat.every.is_some() || cli.repeat.count.is_some() {
        return crate::usage_error(
            "--loop and --count do not apply to `top`, which refreshes by itself (--interval)",
            json,
            out,
            err,
        );
    }
    if !cli.query.query.is_empty() || !cli.query.format.is_empty() {
        return crate::usage_error(
            "--query and --format do not apply to `top` (--once --json prints its figures)",
            json,
            out,
            err,
        );
    }
    if json && !args.once {
        return crate::usage_error("top --json needs --once", json, out, err);
    }
    if !args.once {
        use std::io::IsTerminal;
        if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
            return crate::usage_error(
                "top needs a terminal (stdin and stdout); use `top --once` in scripts",
                json,
                out,
                err,
            );
        }
    }
    let found = discover::discover(&cli.global.device, cli.global.socket_dir.as_deref(), disc);
    for w in discover::ignored_warnings(&found) {
        let _ = writeln!(err, "davinci-smi: {}", printable(&w));
    }
    let ignored = found.ignored.clone();
    let targets = match find(found)
        .and_then(|entries| open_targets(entries, args.id, &cli.global, disc, opener))
    {
        Ok(t) => t,
        Err(e) => return failed(&e, json, out, err),
    };
    let sort = Sort {
        key: args.sort,
        reverse: args.reverse,
    };
    if !args.once {
        return match tui::run(&targets, sort, args.interval) {
            Ok(()) => exit::OK,
            Err(e) => {
                let _ = writeln!(err, "davinci-smi: top: terminal: {e}");
                exit::OTHER
            }
        };
    }
    let mut users = sample::Users::default();
    let first = sample::take(&targets);
    sleep(args.interval);
    let second = sample::take(&targets);
    let frame = sample::frame(&targets, Some(&first), &second, sort, &mut users);
    let code = frame.exit_code();
    let text = if json {
        json::render(&frame, &ignored)
    } else {
        let width = args.width.unwrap_or_else(default_width);
        view::text(&frame, width, args.height)
    };
    if !json {
        for (id, e) in frame.errors() {
            let _ = write!(err, "{}", crate::commands::error_line(id, e));
        }
    }
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        return exit::OTHER;
    }
    code
}

/// The command failed as a whole (no devices, no such id): its message on stderr, or a
/// `top` document with the error.
fn failed(e: &SmiError, json: bool, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let code = e.exit_code();
    if json {
        let d = crate::output::Doc {
            schema: crate::output::SCHEMA,
            command: "top",
            exit_code: code,
            body: crate::output::Body::Failed { error: e.json() },
        };
        let _ = write!(out, "{}", d.render());
    } else {
        let _ = writeln!(err, "davinci-smi: {}", e.message);
    }
    code
}

#[cfg(test)]
mod tests;
