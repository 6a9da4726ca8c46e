//! `davinci-smi events`: the devices' event logs (READ_EVENTS, ABI 1.5): coded events an
//! operator can alert on, each with a stable number (docs/abi.md "Device events"), the time
//! it happened, the client (pid, uid) and stream it concerns, and a sentence saying what
//! happened. Once (a table, or a `--json` document), or `--follow`: read again every
//! `--interval` and print what is new as it comes, across a device going away and coming
//! back (a restarted device's log begins again: said, and followed from its start).
//!
//! Every read takes the whole log (at most 256 events) and [`Follow`] keeps the place per
//! device. What a caller sees is what READ_EVENTS gives it: every event for an admin, the
//! device's own and its user's clients' for anyone else.
//!
//! The files: this one (the options, the reads, the loop) and `render` (text and JSON).
#![forbid(unsafe_code)]

mod render;

use std::io::Write;
use std::time::{Duration, SystemTime};

use clap::Args;
use davinci_ops::discover::{self, Discovery};
use davinci_ops::events::{parse_code, Follow, Taken};
use davinci_uapi::{Errno, DEVICE_EVENTS_MAX, DEVICE_EVENT_CODES};

use crate::access::{Opener, Target};
use crate::cli::{parse_id, Cli, IdSel};
use crate::error::{combine, exit, SmiError};
use crate::output::printable;
use crate::plan::{find, open_targets};

/// `events --help`'s text after the options: the codes, who sees what, the output.
pub(crate) fn after_help() -> String {
    let mut codes = String::new();
    for (c, n, m) in DEVICE_EVENT_CODES {
        codes += &format!("  {c:>2} {n:<16} {m}\n");
    }
    format!(
        "\
The codes (stable numbers: a code never changes meaning; an unknown, newer one is shown by
its number):
{codes}
Each event has its device's sequence number (seq, from 0, one counter per device), its time
(the device's clock, shown as its age at the read and as a UTC time estimated from it), the
client it concerns (client id, pid, uid; 0 for the device's own), the stream, and detail and
value per code (docs/abi.md, \"Device events\"), put into words in the description.

Who sees what: an admin of the device sees every event; anyone else sees the device's own
events and those of their own user's clients (what READ_EVENTS returns), so seq may show
gaps: other users' events.

The log holds the last {DEVICE_EVENTS_MAX} events of a device; older ones are counted as no
longer held (lost). --follow reads every --interval and prints each new event once, as a
line (a davinci-smi/v1 document per read with --json), until interrupted; events the log
dropped between two reads are counted (\"N events lost\"), and a device that restarted (its
log begins again) or went away and came back is said so and followed from its log's start.

Examples: davinci-smi events
          davinci-smi events --code hung_task,stream_stopped --json
          davinci-smi events --follow --interval 1s -i 0"
    )
}

/// `events`' options.
#[derive(Debug, Clone, Args)]
pub(crate) struct EventsArgs {
    /// Device id N (of davinciN), or `all` [default: all]
    #[arg(short = 'i', long = "id", value_name = "ID", value_parser = parse_id)]
    pub(crate) id: Option<IdSel>,
    /// Keep reading and print new events as they come, until interrupted
    #[arg(short = 'f', long)]
    pub(crate) follow: bool,
    /// --follow: time between reads: 250ms, 1s, 1.5 (seconds), from 10ms to 1h
    #[arg(long, short = 'n', value_name = "INTERVAL", default_value = "250ms",
          value_parser = parse_interval, requires = "follow")]
    pub(crate) interval: Duration,
    /// Only events from this sequence number on (of each device)
    #[arg(long, value_name = "SEQ")]
    pub(crate) since: Option<u64>,
    /// Only events of this code: a name (hung_task) or a number; repeatable or comma-separated
    #[arg(long = "code", value_name = "CODE", value_delimiter = ',', value_parser = parse_code)]
    pub(crate) codes: Vec<u32>,
    /// --follow: stop after N reads (the first included)
    #[arg(long, value_name = "N", requires = "follow",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) count: Option<u64>,
}

/// The shortest and longest `--interval`.
const INTERVALS: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(3600));

fn parse_interval(s: &str) -> Result<Duration, String> {
    davinci_units::parse_duration_between(s, INTERVALS.0, INTERVALS.1)
}

/// A device followed: its target, its place in its log, and what the last read said.
struct Dev {
    target: Target,
    follow: Follow,
    /// The last read's error (a change is reported once).
    down: Option<String>,
}

/// What one read of a device found.
pub(crate) struct Read {
    pub(crate) id: Option<u32>,
    pub(crate) path: String,
    pub(crate) outcome: Result<Found, SmiError>,
    /// The device answered again after failing (only with --follow).
    pub(crate) back: bool,
    /// The read failed, and the read before did not, or failed otherwise.
    pub(crate) new_error: bool,
}

/// The events a read found, and the clocks to place them.
pub(crate) struct Found {
    /// What was new, filtered by `--code`.
    pub(crate) taken: Taken,
    /// The device clock at the read.
    pub(crate) now_ns: u64,
    /// The wall clock at the read.
    pub(crate) wall: SystemTime,
    /// The log's end: the seq the next event will have.
    pub(crate) cursor: u64,
}

impl Read {
    pub(crate) fn error(&self) -> Option<&SmiError> {
        self.outcome.as_ref().err()
    }

    /// Whether anything is worth printing in a --follow round.
    fn news(&self) -> bool {
        let found = match &self.outcome {
            Ok(f) => !f.taken.events.is_empty() || f.taken.lost > 0 || f.taken.restarted,
            Err(_) => self.new_error,
        };
        found || self.back
    }
}

/// Reads the device's log and takes what is new. With `reopen`, a device whose open or last
/// read failed is opened again first (a daemon that restarted).
fn read(d: &mut Dev, opener: &dyn Opener, codes: &[u32], reopen: bool) -> Read {
    if reopen && d.target.dev.is_err() {
        d.target.dev = opener.open(&d.target.entry.path);
    }
    let outcome = match &d.target.dev {
        Err(e) => Err(e.clone()),
        Ok(dev) => match dev.events() {
            Ok(batch) => {
                let wall = SystemTime::now();
                let mut taken = d.follow.take(&batch);
                if !codes.is_empty() {
                    taken.events.retain(|e| codes.contains(&e.code));
                }
                Ok(Found {
                    taken,
                    now_ns: batch.now_ns,
                    wall,
                    cursor: batch.cursor,
                })
            }
            Err(e) => Err(explain(e)),
        },
    };
    if reopen {
        if let Err(e) = &outcome {
            // Opened again at the next read: the daemon may be back by then.
            d.target.dev = Err(e.clone());
        }
    }
    let now = outcome.as_ref().err().map(|e| e.message.clone());
    let back = now.is_none() && d.down.is_some();
    let new_error = now.is_some() && now != d.down;
    d.down = now;
    Read {
        id: d.target.entry.id,
        path: d.target.entry.path.clone(),
        outcome,
        back,
        new_error,
    }
}

/// A driver without the event log says so.
fn explain(mut e: SmiError) -> SmiError {
    if e.errno == Some(Errno::ENOTTY) {
        e.message += " (the driver has no event log: READ_EVENTS is ABI 1.5)";
    }
    e
}

/// Runs `events` (`cli.cmd` is `Events(args)`): the exit status. `sleep` is the wait between
/// the reads of `--follow` (tests change the fakes in it).
pub(crate) fn run(
    cli: &Cli,
    args: &EventsArgs,
    disc: &Discovery,
    opener: &dyn Opener,
    out: &mut dyn Write,
    err: &mut dyn Write,
    sleep: &mut dyn FnMut(Duration),
) -> i32 {
    let json = cli.global.json;
    if cli.repeat.every.is_some() || cli.repeat.count.is_some() {
        return crate::usage_error(
            "--loop and --count do not apply to `events`; use `events --follow` (and its --count)",
            json,
            out,
            err,
        );
    }
    if !cli.query.query.is_empty() || !cli.query.format.is_empty() {
        return crate::usage_error(
            "--query and --format do not apply to `events` (--json prints every field)",
            json,
            out,
            err,
        );
    }
    let found = discover::discover(&cli.global.device, cli.global.socket_dir.as_deref(), disc);
    for w in discover::ignored_warnings(&found) {
        let _ = writeln!(err, "davinci-smi: {}", printable(&w));
    }
    let targets = match find(found)
        .and_then(|entries| open_targets(entries, args.id, &cli.global, disc, opener))
    {
        Ok(t) => t,
        Err(e) => return render::failed(&e, json, out, err),
    };
    let start = args.since.map_or_else(Follow::from_start, Follow::from_seq);
    let mut devs: Vec<Dev> = targets
        .into_iter()
        .map(|target| Dev {
            target,
            follow: start.clone(),
            down: None,
        })
        .collect();
    if !args.follow {
        let reads: Vec<Read> = devs
            .iter_mut()
            .map(|d| read(d, opener, &args.codes, false))
            .collect();
        let code = exit_code(&reads);
        let text = if json {
            render::doc(&reads, code)
        } else {
            for r in &reads {
                if let Some(e) = r.error() {
                    let _ = write!(err, "{}", crate::commands::error_line(r.id, e));
                }
            }
            render::table(&reads)
        };
        return match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => code,
            Err(_) => exit::OTHER,
        };
    }
    let mut round = 0u64;
    loop {
        round += 1;
        let reads: Vec<Read> = devs
            .iter_mut()
            .map(|d| read(d, opener, &args.codes, true))
            .collect();
        let code = exit_code(&reads);
        let text = if json {
            // The first round says where every device stands; later ones what changed.
            let news: Vec<&Read> = reads.iter().filter(|r| round == 1 || r.news()).collect();
            if news.is_empty() {
                String::new()
            } else {
                render::doc_line(&news, code)
            }
        } else {
            for r in &reads {
                // An error once, when it begins or changes (the device went away).
                if let (Some(e), true) = (r.error(), r.new_error) {
                    let _ = write!(err, "{}", crate::commands::error_line(r.id, e));
                }
            }
            render::lines(&reads, round == 1)
        };
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            // Nobody reads any more (`| head`): stop.
            return exit::OTHER;
        }
        if args.count.is_some_and(|n| round >= n) {
            return code;
        }
        sleep(args.interval);
    }
}

/// The status of a run over the reads: as the other commands combine per-device outcomes.
fn exit_code(reads: &[Read]) -> i32 {
    let outcomes: Vec<Option<&SmiError>> = reads.iter().map(Read::error).collect();
    combine(&outcomes)
}

#[cfg(test)]
mod tests;
