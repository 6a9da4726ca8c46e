//! The Chrome trace-event JSON of a [`Trace`] (the format: the module docs of `trace`).
//!
//! Written so that Perfetto's importer takes every event as meant: the slices of one track
//! are nested or disjoint (a stream runs one task at a time and a long task's chunks lie
//! within it; host spans nest by scope, parents first), times are µs with exactly three
//! decimals from a small base (parsed back to the same ns), and each flow event follows the
//! slice it binds to in the file (`s` right after its EVENT_RECORD, at its time; `f` right
//! after the wait it ends, at the wait's end, with `"bp": "e"`), as the importer binds a
//! flow event to the innermost open slice of its track.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::{self, Write};

use davinci_uapi::{Errno, Opcode, TraceRecord, TRACE_KIND_TASK};
use serde::Serialize;
use serde_json::{json, Value};

use super::hook::{Detail, HostSpan};
use super::Trace;

/// Device processes get pids no Linux process has (pid_max is at most 2^22).
const DEVICE_PID_BASE: u32 = 1 << 30;
/// Tracks (stream) ids per device process.
const DEVICE_TIDS: u32 = 1 << 12;

#[derive(Serialize)]
struct Ev<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    cat: &'a str,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
    #[serde(skip_serializing_if = "Value::is_null")]
    args: Value,
}

/// The opcode's name as docs/abi.md writes it.
pub(crate) fn opcode_name(op: u8) -> String {
    match Opcode::from_u8(op) {
        Some(Opcode::Nop) => "NOP".into(),
        Some(Opcode::Fill) => "FILL".into(),
        Some(Opcode::Copy) => "COPY".into(),
        Some(Opcode::Add) => "ADD".into(),
        Some(Opcode::EventRecord) => "EVENT_RECORD".into(),
        Some(Opcode::EventWait) => "EVENT_WAIT".into(),
        Some(Opcode::KernelLaunch) => "KERNEL_LAUNCH".into(),
        None => format!("OPCODE_{op}"),
    }
}

/// A successful record of an event: (value, device time, (stream, index)).
type Released = (u64, u64, (u32, u32));

/// Which EVENT_RECORD released which wait: flow ids by the slices they leave and end at.
#[derive(Default)]
struct Flows {
    /// (stream, index) of a record -> (flow id, event) of each flow leaving it.
    out: HashMap<(u32, u32), Vec<(u64, u32)>>,
    /// (stream, index) of a device wait -> its flows.
    into: HashMap<(u32, u32), Vec<(u64, u32)>>,
    /// Host span (position in `Trace::spans`) -> its flows.
    host: HashMap<usize, Vec<(u64, u32)>>,
    count: u64,
}

impl Flows {
    fn new(t: &Trace, tasks: &HashMap<(u32, u32), &TraceRecord>) -> Flows {
        // Per event: its successful records (value, device time, key), by value, with the
        // earliest time among those of that value or more (the record that first got the
        // event there).
        let mut recs: HashMap<u32, Vec<Released>> = HashMap::new();
        for m in t.marks.iter().filter(|m| m.record) {
            if let Some(r) = tasks.get(&(m.stream, m.index)).filter(|r| r.status == 0) {
                recs.entry(m.event)
                    .or_default()
                    .push((m.value, r.end_ns, (m.stream, m.index)));
            }
        }
        for v in recs.values_mut() {
            v.sort_unstable();
            for i in (0..v.len().saturating_sub(1)).rev() {
                if v[i + 1].1 < v[i].1 {
                    v[i].1 = v[i + 1].1;
                    v[i].2 = v[i + 1].2;
                }
            }
        }
        // The record that released a wait for `value` of `event`: (device time, key).
        let release = |event: u32, value: u64| -> Option<(u64, (u32, u32))> {
            let v = recs.get(&event)?;
            let at = v.partition_point(|e| e.0 < value);
            v.get(at).map(|e| (e.1, e.2))
        };
        let mut f = Flows::default();
        for m in t.marks.iter().filter(|m| !m.record && m.value > 0) {
            let key = (m.stream, m.index);
            let Some(w) = tasks.get(&key).filter(|w| w.status == 0) else {
                continue;
            };
            if let Some((_, from)) = release(m.event, m.value).filter(|r| r.0 <= w.end_ns) {
                f.count += 1;
                f.out.entry(from).or_default().push((f.count, m.event));
                f.into.entry(key).or_default().push((f.count, m.event));
            }
        }
        for (i, s) in t.spans.iter().enumerate() {
            let Detail::Event { event, value } = s.detail else {
                continue;
            };
            let released = release(event, value)
                .filter(|r| t.host_ns(r.0) <= s.end_ns.saturating_add(t.clock.bound_ns));
            if let (Some((_, from)), true) = (released, value > 0) {
                f.count += 1;
                f.out.entry(from).or_default().push((f.count, event));
                f.host.entry(i).or_default().push((f.count, event));
            }
        }
        f
    }
}

struct Out<W: Write> {
    w: W,
    first: bool,
    base: u64,
}

impl<W: Write> Out<W> {
    fn ev(&mut self, e: &Ev<'_>) -> io::Result<()> {
        self.w.write_all(if self.first { b"\n" } else { b",\n" })?;
        self.first = false;
        serde_json::to_writer(&mut self.w, e).map_err(io::Error::other)
    }

    /// µs from the base, three decimals (the ns).
    fn us(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.base) as f64 / 1000.0
    }

    fn meta(&mut self, what: &str, pid: u32, tid: u32, args: Value) -> io::Result<()> {
        self.ev(&Ev {
            name: what,
            cat: "",
            ph: "M",
            ts: None,
            dur: None,
            pid,
            tid,
            id: None,
            bp: None,
            args,
        })
    }

    /// A flow event `ph` ("s" or "f") of each of `flows` at `ns` on a track.
    fn flows(
        &mut self,
        ph: &'static str,
        flows: &[(u64, u32)],
        ns: u64,
        pid: u32,
        tid: u32,
    ) -> io::Result<()> {
        for &(id, event) in flows {
            let name = format!("event {event:#x}");
            self.ev(&Ev {
                name: &name,
                cat: "event",
                ph,
                ts: Some(self.us(ns)),
                dur: None,
                pid,
                tid,
                id: Some(id),
                bp: (ph == "f").then_some("e"),
                args: Value::Null,
            })?;
        }
        Ok(())
    }
}

fn status_args(args: &mut serde_json::Map<String, Value>, status: i32) {
    args.insert("status".into(), json!(status));
    if status < 0 {
        let name = Errno::from_code(-status)
            .map_or_else(|| format!("errno {}", -status), |e| e.name().to_string());
        args.insert("error".into(), json!(name));
    }
}

pub(super) fn write(t: &Trace, w: impl Write) -> io::Result<()> {
    // The base: the earliest time in the file, whole µs.
    let earliest = t
        .records
        .iter()
        .map(|r| t.host_ns(r.start_ns))
        .chain(t.spans.iter().map(|s| s.start_ns))
        .fold(t.started_ns, u64::min);
    let mut out = Out {
        w,
        first: true,
        base: earliest - earliest % 1000,
    };
    out.w.write_all(b"{\"traceEvents\":[")?;

    // The device: a track per stream, in the order their first records came.
    let dev_pid = DEVICE_PID_BASE + (t.device_id % (1 << 16)) * DEVICE_TIDS;
    let mut tracks: Vec<(u32, Vec<&TraceRecord>)> = Vec::new();
    let mut track_of: HashMap<u32, usize> = HashMap::new();
    let mut tasks: HashMap<(u32, u32), &TraceRecord> = HashMap::new();
    for r in &t.records {
        let at = *track_of.entry(r.stream).or_insert_with(|| {
            tracks.push((r.stream, Vec::new()));
            tracks.len() - 1
        });
        tracks[at].1.push(r);
        if r.kind == TRACE_KIND_TASK {
            tasks.insert((r.stream, r.index), r);
        }
    }
    let flows = Flows::new(t, &tasks);
    out.meta(
        "process_name",
        dev_pid,
        dev_pid,
        json!({"name": format!("davinci{} device", t.device_id)}),
    )?;
    out.meta(
        "process_sort_index",
        dev_pid,
        dev_pid,
        json!({"sort_index": 1}),
    )?;
    for (n, (stream, records)) in tracks.iter_mut().enumerate() {
        let tid = dev_pid + 1 + (n as u32 % (DEVICE_TIDS - 1));
        out.meta(
            "thread_name",
            dev_pid,
            tid,
            json!({"name": match records.first().and_then(|r| t.clients.get(&r.client_id)) {
                Some(who) => format!("stream {stream:#x} \u{b7} {who}"),
                None => format!("stream {stream:#x}"),
            }}),
        )?;
        out.meta("thread_sort_index", dev_pid, tid, json!({"sort_index": n}))?;
        // Stream order: by time taken, a task before its chunks (its first chunk starts
        // with it), then as the device wrote them.
        records.sort_by_key(|r| (r.start_ns, r.kind != TRACE_KIND_TASK, r.chunk, r.seq));
        for r in records.iter() {
            let task = r.kind == TRACE_KIND_TASK;
            let op = opcode_name(r.opcode);
            let name = if task {
                op
            } else {
                format!("{op} chunk {}", r.chunk)
            };
            let mut args = serde_json::Map::new();
            args.insert("index".into(), json!(r.index));
            args.insert("user_data".into(), json!(format!("{:#x}", r.user_data)));
            if task {
                status_args(&mut args, r.status);
                if r.tasks > 1 {
                    args.insert("tasks".into(), json!(r.tasks));
                }
            } else {
                args.insert("chunk".into(), json!(r.chunk));
            }
            args.insert("seq".into(), json!(r.seq));
            let (start, end) = (t.host_ns(r.start_ns), t.host_ns(r.end_ns.max(r.start_ns)));
            out.ev(&Ev {
                name: &name,
                cat: if task { "task" } else { "chunk" },
                ph: "X",
                ts: Some(out.us(start)),
                dur: Some(end.saturating_sub(start) as f64 / 1000.0),
                pid: dev_pid,
                tid,
                id: None,
                bp: None,
                args: Value::Object(args),
            })?;
            if task {
                let key = (r.stream, r.index);
                if let Some(f) = flows.out.get(&key) {
                    out.flows("s", f, start, dev_pid, tid)?;
                }
                if let Some(f) = flows.into.get(&key) {
                    out.flows("f", f, end, dev_pid, tid)?;
                }
            }
        }
    }

    // The host: a track per thread, spans parents first.
    let pid = t.pid;
    out.meta("process_name", pid, pid, json!({"name": t.program}))?;
    out.meta("process_sort_index", pid, pid, json!({"sort_index": 0}))?;
    for (tid, name) in &t.threads {
        out.meta("thread_name", pid, *tid, json!({"name": name}))?;
    }
    let mut order: Vec<usize> = (0..t.spans.len()).collect();
    order.sort_by_key(|&i| {
        let s = &t.spans[i];
        (s.tid, s.start_ns, std::cmp::Reverse(s.end_ns))
    });
    for i in order {
        let s: &HostSpan = &t.spans[i];
        out.ev(&Ev {
            name: s.name,
            cat: "host",
            ph: "X",
            ts: Some(out.us(s.start_ns)),
            dur: Some(s.end_ns.saturating_sub(s.start_ns) as f64 / 1000.0),
            pid,
            tid: s.tid,
            id: None,
            bp: None,
            args: span_args(s.detail),
        })?;
        if let Some(f) = flows.host.get(&i) {
            out.flows("f", f, s.end_ns, pid, s.tid)?;
        }
    }

    let other = json!({
        "generator": concat!("davinci-shim ", env!("CARGO_PKG_VERSION")),
        "device": t.device,
        "clock": "CLOCK_MONOTONIC",
        "time_base_ns": out.base,
        "clock_offset_ns": t.clock.offset_ns,
        "clock_bound_ns": t.clock.bound_ns,
        "clock_samples": t.clock.samples,
        "clock_samples_outside_bound": t.clock.outside,
        "started_ns": t.started_ns,
        "finished_ns": t.finished_ns,
        "device_records": t.records.len(),
        "device_tasks": t.tasks(),
        "device_records_lost": t.lost,
        "device_records_dropped": t.records_dropped,
        "host_spans": t.spans.len(),
        "host_spans_dropped": t.spans_dropped,
        "event_marks_dropped": t.marks_dropped,
        "flows": flows.count,
        "read_errors": t.read_errors,
        "last_read_error": t.last_read_error,
    });
    out.w.write_all(b"\n],\"otherData\":")?;
    serde_json::to_writer(&mut out.w, &other).map_err(io::Error::other)?;
    out.w.write_all(b"}\n")
}

fn span_args(d: Detail) -> Value {
    match d {
        Detail::None => Value::Null,
        Detail::Submit {
            stream,
            first,
            count,
        } => {
            json!({"stream": format!("{stream:#x}"), "first_index": first, "tasks": count})
        }
        Detail::Stream { stream, upto } => {
            json!({"stream": format!("{stream:#x}"), "until_index": upto})
        }
        Detail::Event { event, value } => json!({"event": format!("{event:#x}"), "value": value}),
        Detail::Bytes(n) => json!({"bytes": n}),
        Detail::Read { records } => json!({"records": records}),
    }
}
