//! Timelines on the embedded device: what a session records, what the export says, and that
//! the hooks go quiet when no session runs.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use crate::{task, Device, Errno, MemPool, StreamOptions};

const T: Duration = Duration::from_secs(10);

fn export(trace: &super::Trace) -> Value {
    let text = trace.to_chrome_json();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn events(v: &Value) -> &Vec<Value> {
    v["traceEvents"].as_array().expect("traceEvents")
}

fn ns(x: &Value) -> i64 {
    (x.as_f64().expect("a number") * 1000.0).round() as i64
}

/// A track's open slices: (start, duration, event).
type Stack = Vec<(i64, i64, usize)>;

/// The slice each flow event binds to, as Perfetto's importer binds it: the innermost
/// slice of its track still open at the flow's time, in (time, file) order.
fn bound_flows(ev: &[Value]) -> Vec<(char, u64, usize)> {
    let mut order: Vec<usize> = (0..ev.len()).filter(|&i| ev[i]["ph"] != "M").collect();
    order.sort_by_key(|&i| (ns(&ev[i]["ts"]), i));
    let mut stacks: HashMap<(u64, u64), Stack> = HashMap::new();
    let mut out = Vec::new();
    for i in order {
        let e = &ev[i];
        let track = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let stack = stacks.entry(track).or_default();
        let t = ns(&e["ts"]);
        match e["ph"].as_str().unwrap() {
            "X" => {
                let dur = ns(&e["dur"]);
                while let Some(&(s, d, _)) = stack.last() {
                    if s + d < t || (s + d == t && !(d == 0 && dur == 0)) {
                        stack.pop();
                    } else {
                        assert!(
                            t + dur <= s + d,
                            "{e} overlaps {}",
                            ev[stack.last().unwrap().2]
                        );
                        break;
                    }
                }
                stack.push((t, dur, i));
            }
            ph @ ("s" | "f") => {
                let (_, _, at) = *stack.last().unwrap_or_else(|| panic!("{e} has no slice"));
                out.push((ph.chars().next().unwrap(), e["id"].as_u64().unwrap(), at));
            }
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    out
}

/// What the module docs promise: 150 MiB at most.
#[test]
fn a_full_session_stays_within_its_bound() {
    use super::hook::{HostSpan, Mark, DEVICE_RECORDS_MAX, HOST_SPANS_MAX, MARKS_MAX};
    let bytes = HOST_SPANS_MAX * std::mem::size_of::<HostSpan>()
        + DEVICE_RECORDS_MAX * std::mem::size_of::<crate::TraceRecord>()
        + MARKS_MAX * std::mem::size_of::<Mark>();
    assert!(bytes <= 150 << 20, "{} MiB", bytes >> 20);
}

#[test]
fn one_session_per_open_and_dropping_one_stops_it() {
    let dev = Device::embedded().unwrap();
    let s = dev.trace().unwrap();
    let e = dev.trace().unwrap_err();
    assert!(e.is(Errno::EBUSY), "{e}");
    assert!(dev.clone().trace().unwrap_err().is(Errno::EBUSY));
    drop(s);
    // Stopped and detached: a new session starts, and sees nothing of the time between.
    let ctx = dev.create_context().unwrap();
    let mut stream = ctx.create_stream().unwrap();
    stream.submit(&task::nop()).unwrap();
    stream.synchronize(T).unwrap();
    let s = dev.trace().unwrap();
    let t = s.finish().unwrap();
    assert_eq!((t.tasks(), t.records().len()), (0, 0), "{t:?}");
    assert_eq!(t.host_spans(), 0, "{t:?}");
    let v = export(&t);
    assert!(!events(&v).iter().any(|e| e["ph"] == "X"), "{v}");
}

#[test]
fn tasks_chunks_and_spans_line_up_on_one_clock() {
    let dev = Device::embedded().unwrap();
    let session = dev.trace().unwrap();
    let pool = MemPool::new(&dev);
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    let big = dev.alloc(4 << 20).unwrap();
    let small = pool.alloc(4096).unwrap();
    s.submit(&task::fill(&big, 1).unwrap().with_user_data(10))
        .unwrap();
    let nops: Vec<_> = (0..40)
        .map(|i| task::nop().with_user_data(100 + i))
        .collect();
    s.submit_batch(&nops).unwrap();
    s.submit(&task::fill(&small, 2).unwrap().with_user_data(11))
        .unwrap();
    s.synchronize(T).unwrap();
    drop(small);
    let t = session.finish().unwrap();
    assert_eq!((t.tasks(), t.lost(), t.dropped()), (42, 0, 0), "{t:?}");
    assert!(t.clock_bound_ns() < 1_000_000, "{t:?}");
    let v = export(&t);
    let other = &v["otherData"];
    assert_eq!(other["clock_samples_outside_bound"], 0, "{other}");
    assert_eq!(other["device_tasks"], 42, "{other}");
    let ev = events(&v);
    let x = |name: &str| -> Vec<&Value> {
        ev.iter()
            .filter(|e| e["ph"] == "X" && e["name"] == name)
            .collect()
    };
    // The 4 MiB fill ran over several passes: its chunks nest inside it, the first one
    // starting with it and the last one ending with it.
    let fill = x("FILL")
        .into_iter()
        .find(|e| e["args"]["user_data"] == "0xa")
        .expect("the big fill");
    let chunks = x("FILL chunk 0").len() + x("FILL chunk 1").len();
    assert!(chunks >= 2, "{chunks} chunks");
    let (fs, fe) = (ns(&fill["ts"]), ns(&fill["ts"]) + ns(&fill["dur"]));
    for c in ev.iter().filter(|e| e["cat"] == "chunk") {
        let (cs, ce) = (ns(&c["ts"]), ns(&c["ts"]) + ns(&c["dur"]));
        assert!(fs <= cs && ce <= fe, "{c} outside {fill}");
    }
    // The NOPs: every index once, as single records or runs.
    let mut indices: Vec<u64> = x("NOP")
        .iter()
        .flat_map(|e| {
            let first = e["args"]["index"].as_u64().unwrap();
            first..first + e["args"]["tasks"].as_u64().unwrap_or(1)
        })
        .collect();
    indices.sort_unstable();
    assert_eq!(indices, (1..41).collect::<Vec<u64>>());
    // Host spans: the submits started before their tasks did, the synchronize ended after
    // the last one ended (within the bound), pool alloc and free are there.
    let bound = t.clock_bound_ns() as i64;
    let submit = x("submit");
    assert_eq!(submit.len(), 3);
    assert!(ns(&submit[0]["ts"]) <= fs + bound);
    let sync = x("synchronize");
    let last = ev
        .iter()
        .filter(|e| e["cat"] == "task")
        .map(|e| ns(&e["ts"]) + ns(&e["dur"]))
        .max()
        .unwrap();
    assert!(last <= ns(&sync[0]["ts"]) + ns(&sync[0]["dur"]) + bound);
    assert_eq!((x("pool alloc").len(), x("pool free").len()), (1, 1));
    assert_eq!(x("pool alloc")[0]["args"]["bytes"], 4096);
    bound_flows(ev);
}

#[test]
fn arrows_go_from_a_record_to_the_waits_it_released() {
    let dev = Device::embedded().unwrap();
    let session = dev.trace().unwrap();
    let ctx = dev.create_context().unwrap();
    let (mut a, mut b, mut c) = (
        ctx.create_stream().unwrap(),
        ctx.create_stream().unwrap(),
        ctx.create_stream().unwrap(),
    );
    let buf = dev.alloc(1 << 20).unwrap();
    let ev = ctx.create_event().unwrap();
    // b and c wait before a records: their waits span the record.
    b.wait_value(&ev, 1).unwrap();
    c.wait_value(&ev, 1).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    a.submit(&task::fill(&buf, 3).unwrap()).unwrap();
    let rec = ev.record(&mut a).unwrap();
    rec.synchronize(T).unwrap();
    for s in [&mut a, &mut b, &mut c] {
        s.synchronize(T).unwrap();
    }
    // A wait for a value nobody records (never released) gets no arrow.
    let t = session.finish().unwrap();
    let v = export(&t);
    let ev = events(&v);
    let flows = bound_flows(ev);
    let mut from: HashMap<u64, usize> = HashMap::new();
    let mut to: Vec<(u64, usize)> = Vec::new();
    for (ph, id, at) in flows {
        if ph == 's' {
            assert!(from.insert(id, at).is_none(), "flow {id} starts twice");
        } else {
            to.push((id, at));
        }
    }
    let mut ends: Vec<&str> = to
        .iter()
        .map(|&(id, at)| {
            let r = &ev[from[&id]];
            let w = &ev[at];
            assert_eq!(r["name"], "EVENT_RECORD", "{r}");
            // The wait ends when (or after) the record happened.
            assert!(ns(&w["ts"]) + ns(&w["dur"]) >= ns(&r["ts"]) + ns(&r["dur"]));
            w["name"].as_str().unwrap()
        })
        .collect();
    ends.sort_unstable();
    assert_eq!(ends, ["EVENT_WAIT", "EVENT_WAIT", "wait event"]);
    assert_eq!(v["otherData"]["flows"], 3);
}

#[test]
fn a_buffer_read_too_late_counts_what_it_lost() {
    let dev = Device::embedded().unwrap();
    let ctx = dev.create_context().unwrap();
    let buf = dev.alloc(64).unwrap();
    let fills: Vec<_> = (0..500).map(|_| task::fill(&buf, 1).unwrap()).collect();
    let mut streams: Vec<_> = (0..3)
        .map(|_| {
            ctx.create_stream_with(StreamOptions::depths(512, 512))
                .unwrap()
        })
        .collect();
    for drain_between in [false, true] {
        let session = dev.trace().unwrap();
        for s in &mut streams {
            s.submit_batch(&fills).unwrap();
            if drain_between {
                // Device::synchronize reads the buffer as it returns (it reaps nothing);
                // and so does drain.
                dev.synchronize(T).unwrap();
                session.drain().unwrap();
            }
        }
        dev.synchronize(T).unwrap();
        let t = session.finish().unwrap();
        if drain_between {
            assert_eq!((t.lost(), t.tasks()), (0, 1500), "{t:?}");
        } else {
            // 1,500 records into a buffer of 1,024 before any read.
            assert_eq!(t.lost() + t.tasks(), 1500, "{t:?}");
            assert!(t.lost() >= 1500 - 1024, "{t:?}");
            let v = export(&t);
            assert_eq!(v["otherData"]["device_records_lost"], t.lost());
        }
        for s in &mut streams {
            s.synchronize(T).unwrap();
        }
    }
}
