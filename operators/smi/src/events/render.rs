//! `events`' output: a table (once), lines (`--follow`), and `davinci-smi/v1` documents
//! (command `events`; fields are only ever added).
#![forbid(unsafe_code)]

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use davinci_ops::events::{describe, meaning, name};
use davinci_uapi::{DeviceEvent, DEVICE_EVENTS_MAX};
use serde::Serialize;

use super::{Found, Read};
use crate::commands::id_text;
use crate::error::SmiError;
use crate::output::{printable, table as bordered, ErrorJson, SCHEMA};

/// One event.
#[derive(Debug, Serialize)]
pub(crate) struct EventJson {
    /// Its sequence number in the device's log.
    pub(crate) seq: u64,
    /// The device clock when it happened (ns).
    pub(crate) time_ns: u64,
    /// How long before the read it happened (ns): the read's device clock less `time_ns`.
    pub(crate) age_ns: u64,
    /// When it happened, UTC (RFC 3339): the read's wall clock less `age_ns`.
    pub(crate) time: String,
    /// The code (`DAVINCI_DEVICE_EVENT_*`).
    pub(crate) code: u32,
    /// Its name (`hung_task`); null for a code this davinci-smi does not know.
    pub(crate) name: Option<&'static str>,
    /// What the code means in general; null likewise.
    pub(crate) meaning: Option<&'static str>,
    /// What happened, in words (from `stream`, `detail` and `value`).
    pub(crate) description: String,
    /// The client it concerns (0: the device itself).
    pub(crate) client_id: u32,
    /// That client's process id (0 for the device's own).
    pub(crate) pid: u32,
    /// That client's user id (0 for the device's own).
    pub(crate) uid: u32,
    /// The stream it concerns, as its owner knows it (0: none).
    pub(crate) stream: u32,
    /// Per code (docs/abi.md, "Device events").
    pub(crate) detail: u32,
    /// Per code.
    pub(crate) value: u64,
}

/// One device's read.
#[derive(Debug, Serialize)]
struct DeviceJson {
    id: Option<u32>,
    path: String,
    /// `"ok"` or `"unreachable"`.
    health: &'static str,
    error: Option<ErrorJson>,
    /// The device clock at the read (null when unreachable).
    now_ns: Option<u64>,
    /// The seq the device's next event will have.
    cursor: Option<u64>,
    /// Events the log no longer held when read (it keeps the last 256): before the first
    /// one shown, or (--follow) dropped between two reads.
    lost: u64,
    /// The device's log began again since the previous read (--follow: it restarted).
    restarted: bool,
    /// The device answers again after failing (--follow).
    back: bool,
    /// The new events (filtered by --code), oldest first.
    events: Vec<EventJson>,
}

#[derive(Debug, Serialize)]
struct EventsDoc {
    schema: &'static str,
    command: &'static str,
    exit_code: i32,
    /// When the devices were read (RFC 3339, UTC).
    timestamp: String,
    devices: Vec<DeviceJson>,
}

/// `wall` as RFC 3339 (UTC, milliseconds).
fn utc(wall: SystemTime) -> String {
    let d = wall.duration_since(UNIX_EPOCH).unwrap_or_default();
    crate::query::rfc3339(d.as_secs(), d.subsec_millis())
}

/// When `e` happened: its age at the read, and the wall clock that puts it at.
fn placed(e: &DeviceEvent, f: &Found) -> (u64, String) {
    let age = f.now_ns.saturating_sub(e.time_ns);
    let at = f
        .wall
        .checked_sub(Duration::from_nanos(age))
        .unwrap_or(UNIX_EPOCH);
    (age, utc(at))
}

pub(crate) fn event_json(e: &DeviceEvent, f: &Found) -> EventJson {
    let (age_ns, time) = placed(e, f);
    EventJson {
        seq: e.seq,
        time_ns: e.time_ns,
        age_ns,
        time,
        code: e.code,
        name: name(e.code),
        meaning: meaning(e.code),
        description: describe(e),
        client_id: e.client_id,
        pid: e.pid,
        uid: e.uid,
        stream: e.stream,
        detail: e.detail,
        value: e.value,
    }
}

fn device_json(r: &Read) -> DeviceJson {
    let mut j = DeviceJson {
        id: r.id,
        path: printable(&r.path),
        health: "unreachable",
        error: None,
        now_ns: None,
        cursor: None,
        lost: 0,
        restarted: false,
        back: r.back,
        events: Vec::new(),
    };
    match &r.outcome {
        Err(e) => j.error = Some(e.json()),
        Ok(f) => {
            j.health = "ok";
            j.now_ns = Some(f.now_ns);
            j.cursor = Some(f.cursor);
            j.lost = f.taken.lost;
            j.restarted = f.taken.restarted;
            j.events = f.taken.events.iter().map(|e| event_json(e, f)).collect();
        }
    }
    j
}

fn document(reads: &[&Read], code: i32) -> EventsDoc {
    EventsDoc {
        schema: SCHEMA,
        command: "events",
        exit_code: code,
        timestamp: utc(SystemTime::now()),
        devices: reads.iter().map(|r| device_json(r)).collect(),
    }
}

fn fallback(e: &serde_json::Error) -> String {
    format!(
        "{{\"schema\":\"{SCHEMA}\",\"command\":\"events\",\"exit_code\":1,\"error\":{{\"errno\":null,\"code\":null,\"message\":\"cannot render JSON: {e}\"}}}}\n"
    )
}

/// The document of a read of every device, pretty, with a trailing newline.
pub(crate) fn doc(reads: &[Read], code: i32) -> String {
    let all: Vec<&Read> = reads.iter().collect();
    serde_json::to_string_pretty(&document(&all, code)).map_or_else(|e| fallback(&e), |s| s + "\n")
}

/// A document on one line (--follow --json: one per read with news).
pub(crate) fn doc_line(reads: &[&Read], code: i32) -> String {
    serde_json::to_string(&document(reads, code)).map_or_else(|e| fallback(&e), |s| s + "\n")
}

/// An age for people: `850ms`, `12.5s`, `4m05s`, `3h07m`, `2d04h`.
pub(crate) fn age_text(ns: u64) -> String {
    let ms = ns / 1_000_000;
    let s = ms / 1000;
    match s {
        _ if ms < 1000 => format!("{ms}ms"),
        0..60 => format!("{:.1}s", ms as f64 / 1000.0),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s / 60 % 60),
        _ => format!("{}d{:02}h", s / 86_400, s / 3600 % 24),
    }
}

/// `hung_task (2)`, or `code 42` for a code this davinci-smi does not know.
fn event_word(code: u32) -> String {
    name(code).map_or_else(|| format!("code {code}"), |n| format!("{n} ({code})"))
}

/// `-` for the device's own (client 0).
fn or_dash(client: u32, v: u32) -> String {
    if client == 0 {
        "-".into()
    } else {
        v.to_string()
    }
}

/// The lines that say what a read found besides its events: lost events, a restart, a
/// device that answers again.
fn notes(r: &Read, follow: bool) -> String {
    let dev = format!("device {}", id_text(r.id));
    let mut s = String::new();
    if r.back {
        s += &format!("{dev}: answers again\n");
    }
    let Ok(f) = &r.outcome else {
        return s;
    };
    if f.taken.restarted {
        s += &format!("{dev}: the device restarted: its event log begins again\n");
    }
    if f.taken.lost > 0 {
        let n = f.taken.lost;
        let plural = if n == 1 { "" } else { "s" };
        if follow {
            s += &format!(
                "{dev}: {n} event{plural} lost (the log keeps the last {DEVICE_EVENTS_MAX} and \
                 dropped them before this read; read more often with --interval)\n"
            );
        } else {
            s += &format!(
                "{dev}: {n} earlier event{plural} no longer held (the log keeps the last \
                 {DEVICE_EVENTS_MAX})\n"
            );
        }
    }
    s
}

/// Every event of the reads as a table, then the notes (lost events).
pub(crate) fn table(reads: &[Read]) -> String {
    let headers = [
        "Device",
        "Seq",
        "Time (UTC)",
        "Age",
        "Event",
        "Client",
        "PID",
        "UID",
        "Description",
    ];
    let mut rows = Vec::new();
    for r in reads {
        let Ok(f) = &r.outcome else { continue };
        for e in &f.taken.events {
            let (age, time) = placed(e, f);
            rows.push(vec![
                id_text(r.id),
                e.seq.to_string(),
                time,
                age_text(age),
                event_word(e.code),
                or_dash(e.client_id, e.client_id),
                or_dash(e.client_id, e.pid),
                or_dash(e.client_id, e.uid),
                describe(e),
            ]);
        }
    }
    let mut s = if rows.is_empty() {
        "No events.\n".to_string()
    } else {
        bordered(&headers, &rows)
    };
    for r in reads {
        s += &notes(r, false);
    }
    s
}

/// --follow's text: a line per new event (a header line first), and the notes.
pub(crate) fn lines(reads: &[Read], first: bool) -> String {
    let line = |c: [&str; 8]| {
        format!(
            "{:<24}  {:>6} {:>6}  {:<20} {:>10} {:>7} {:>6}  {}\n",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
        )
    };
    let mut s = String::new();
    if first {
        s += &line([
            "TIME (UTC)",
            "DEVICE",
            "SEQ",
            "EVENT",
            "CLIENT",
            "PID",
            "UID",
            "DESCRIPTION",
        ]);
    }
    for r in reads {
        s += &notes(r, true);
        let Ok(f) = &r.outcome else { continue };
        for e in &f.taken.events {
            let (_, time) = placed(e, f);
            s += &line([
                &time,
                &id_text(r.id),
                &e.seq.to_string(),
                &event_word(e.code),
                &or_dash(e.client_id, e.client_id),
                &or_dash(e.client_id, e.pid),
                &or_dash(e.client_id, e.uid),
                &describe(e),
            ]);
        }
    }
    s
}

/// The command failed as a whole (no devices, no such id): its message on stderr, or an
/// `events` document with the error.
pub(crate) fn failed(e: &SmiError, json: bool, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let code = e.exit_code();
    if json {
        let d = crate::output::Doc {
            schema: SCHEMA,
            command: "events",
            exit_code: code,
            body: crate::output::Body::Failed { error: e.json() },
        };
        let _ = write!(out, "{}", d.render());
    } else {
        let _ = writeln!(err, "davinci-smi: {}", e.message);
    }
    code
}
