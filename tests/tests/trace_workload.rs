//! `davinci-workload --trace FILE` (issue 46, Timelines), on the embedded device and on a
//! real `davinci-mockd`: the file is Chrome trace-event JSON in which every task the
//! workload submitted appears exactly once, with start <= end, on its stream's track and
//! with its own `user_data`; every EVENT_WAIT ends at or after the end of the EVENT_RECORD
//! that released it, linked to it by a flow arrow (bound as Perfetto's importer binds flow
//! events); the host's submit spans start before their tasks did and its synchronize spans
//! end after the tasks they waited for ended, both within the clock bound the file states
//! (which is under a millisecond, every clock sample agreeing with it); nothing was lost.
//! Then the file goes through Perfetto's own trace processor (scripts/perfetto-check.py:
//! the `perfetto` package from PyPI), which must import every slice and flow with no error
//! or data-loss statistic; where that package or its binary is missing the check says why
//! and is skipped.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use davinci_tests::mockd::{bin, Mockd};
use serde_json::Value;

const STREAMS: u64 = 3;
const TASKS: &str = "6000";
const LATENCY: u64 = 200;
/// The latency phase's warm-up round trips (apps/workload/src/run/latency.rs).
const WARMUP: u64 = 64;
/// The clock bound a software device must meet: a TRACE call round trip is microseconds.
const BOUND_LIMIT_NS: i64 = 1_000_000;

struct Traced {
    report: Value,
    trace: Value,
    file: PathBuf,
}

impl Drop for Traced {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Runs the workload binary on `device` with `--trace` and `--json`.
fn run_traced(device: &str, tag: &str) -> Traced {
    let file =
        std::env::temp_dir().join(format!("davinci-trace-{}-{tag}.json", std::process::id()));
    let out = Command::new(bin("davinci-workload"))
        .args(["--device", device, "--tasks", TASKS, "--json"])
        .args(["--streams", &STREAMS.to_string()])
        .args(["--latency-samples", &LATENCY.to_string()])
        .arg("--trace")
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): cargo build -p davinci-workload",
                bin("davinci-workload").display()
            )
        });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    assert!(
        stderr.contains("trace written to"),
        "the run says where the trace went: {stderr}"
    );
    let text = std::fs::read_to_string(&file).expect("the trace file");
    let trace: Value = serde_json::from_str(&text).expect("the trace file is JSON");
    Traced {
        report,
        trace,
        file,
    }
}

/// ns from a JSON time in µs (three decimals).
fn ns(x: &Value) -> i64 {
    (x.as_f64().unwrap_or_else(|| panic!("not a number: {x}")) * 1000.0).round() as i64
}

fn hex(x: &Value) -> u64 {
    let s = x.as_str().unwrap_or_else(|| panic!("not a string: {x}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// One device task as the file has it.
#[derive(Debug, Clone)]
struct Task {
    name: String,
    user_data: Option<u64>,
    start: i64,
    end: i64,
    status: i64,
    event: usize,
}

/// A track's open slices: (start, duration, event).
type Stack = Vec<(i64, i64, usize)>;

/// The slice each flow event binds to, as Perfetto's importer binds it (the innermost slice
/// of the flow's track still open at its time, events taken in (time, file) order), after
/// checking that the slices of every track nest or are disjoint (the importer spills a
/// partial overlap to another track and flags it as an error). Returns (phase, id, slice).
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
                assert!(dur >= 0, "{e}");
                while let Some(&(s, d, open)) = stack.last() {
                    if s + d < t || (s + d == t && !(d == 0 && dur == 0)) {
                        stack.pop();
                    } else {
                        assert!(t + dur <= s + d, "{e} overlaps {}", ev[open]);
                        break;
                    }
                }
                stack.push((t, dur, i));
            }
            ph @ ("s" | "f") => {
                let &(_, _, at) = stack
                    .last()
                    .unwrap_or_else(|| panic!("{e} has no enclosing slice"));
                out.push((ph.chars().next().unwrap(), e["id"].as_u64().unwrap(), at));
            }
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    out
}

fn check(t: &Traced, backend: &str) {
    let other = &t.trace["otherData"];
    let ev = t.trace["traceEvents"].as_array().expect("traceEvents");
    for key in [
        "device_records_lost",
        "device_records_dropped",
        "host_spans_dropped",
        "event_marks_dropped",
        "read_errors",
        "clock_samples_outside_bound",
    ] {
        assert_eq!(other[key], 0, "{backend}: {key}: {other}");
    }
    let bound = other["clock_bound_ns"].as_i64().expect("clock_bound_ns");
    assert!((0..BOUND_LIMIT_NS).contains(&bound), "{backend}: {other}");
    assert!(other["clock_samples"].as_u64().unwrap() >= 16, "{other}");
    let summary = &t.report["trace"];
    assert_eq!(summary["clock_bound_ns"], other["clock_bound_ns"]);
    assert_eq!(
        (&summary["lost"], &summary["dropped"]),
        (&0.into(), &0.into())
    );
    println!(
        "{backend}: clock bound {bound} ns over {} samples",
        other["clock_samples"]
    );

    // The tracks: thread names, and which process is the device.
    let mut names: HashMap<(u64, u64), String> = HashMap::new();
    let mut device_pid = None;
    for e in ev.iter().filter(|e| e["ph"] == "M") {
        let track = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let name = e["args"]["name"].as_str().unwrap_or_default().to_string();
        match e["name"].as_str() {
            Some("thread_name") => {
                names.insert(track, name);
            }
            Some("process_name") if name.ends_with(" device") => device_pid = Some(track.0),
            _ => {}
        }
    }
    let device_pid = device_pid.expect("a device process");

    // Every task once, start <= end, on its stream's track.
    let mut tasks: BTreeMap<(u32, u32), Task> = BTreeMap::new();
    for (i, e) in ev.iter().enumerate() {
        if e["ph"] != "X" || e["cat"] != "task" {
            continue;
        }
        assert_eq!(e["pid"].as_u64(), Some(device_pid), "{e}");
        let track = &names[&(device_pid, e["tid"].as_u64().unwrap())];
        let stream = hex(&track
            .strip_prefix("stream ")
            .expect("a stream track")
            .into()) as u32;
        let (start, dur) = (ns(&e["ts"]), ns(&e["dur"]));
        assert!(dur >= 0, "start <= end: {e}");
        let first = e["args"]["index"].as_u64().unwrap() as u32;
        let run = e["args"]["tasks"].as_u64().unwrap_or(1) as u32;
        for k in 0..run {
            let task = Task {
                name: e["name"].as_str().unwrap().to_string(),
                user_data: (k == 0).then(|| hex(&e["args"]["user_data"])),
                start,
                end: start + dur,
                status: e["args"]["status"].as_i64().unwrap(),
                event: i,
            };
            let old = tasks.insert((stream, first + k), task);
            assert!(
                old.is_none(),
                "task {first}+{k} of stream {stream:#x} twice: {e}"
            );
        }
    }
    assert_eq!(tasks.len() as u64, other["device_tasks"].as_u64().unwrap());
    assert!(
        tasks.values().all(|t| t.status == 0),
        "every task succeeded"
    );

    // Per stream: indices 0..n; a lane of the throughput phase carries user_data
    // (lane << 48) | index (apps/workload/src/run/throughput.rs), the latency stream NOPs.
    let mut per_stream: BTreeMap<u32, Vec<(u32, &Task)>> = BTreeMap::new();
    for (&(s, i), task) in &tasks {
        per_stream.entry(s).or_default().push((i, task));
    }
    assert_eq!(per_stream.len() as u64, STREAMS + 1, "{per_stream:?}");
    let mut lanes: BTreeMap<u64, u32> = BTreeMap::new();
    let (mut lane_tasks, mut nops) = (0u64, 0u64);
    for (s, list) in &per_stream {
        let indices: Vec<u32> = list.iter().map(|(i, _)| *i).collect();
        assert_eq!(
            indices,
            (0..list.len() as u32).collect::<Vec<_>>(),
            "stream {s:#x}"
        );
        if list.iter().all(|(_, t)| t.name == "NOP") {
            nops += list.len() as u64;
            continue;
        }
        let lane = list[0].1.user_data.unwrap() >> 48;
        for (i, task) in list {
            assert_eq!(
                task.user_data,
                Some((lane << 48) | u64::from(*i)),
                "{task:?}"
            );
        }
        lanes.insert(lane, *s);
        lane_tasks += list.len() as u64;
    }
    assert_eq!(
        lanes.keys().copied().collect::<Vec<_>>(),
        (0..STREAMS).collect::<Vec<_>>()
    );
    assert_eq!(
        lane_tasks,
        t.report["tasks"].as_u64().unwrap(),
        "the report's tasks"
    );
    assert_eq!(nops, WARMUP + LATENCY);

    // Host spans against device times: the submits cover every task exactly once and began
    // before it did; each synchronize ended after the tasks it waited for ended.
    let mut submitted: BTreeSet<(u32, u32)> = BTreeSet::new();
    let (mut syncs, mut slack_submit, mut slack_sync) = (0, i64::MAX, i64::MAX);
    for e in ev.iter().filter(|e| e["ph"] == "X" && e["cat"] == "host") {
        let (start, end) = (ns(&e["ts"]), ns(&e["ts"]) + ns(&e["dur"]));
        let a = &e["args"];
        match e["name"].as_str().unwrap() {
            "submit" => {
                let s = hex(&a["stream"]) as u32;
                let first = a["first_index"].as_u64().unwrap() as u32;
                for i in first..first + a["tasks"].as_u64().unwrap() as u32 {
                    assert!(
                        submitted.insert((s, i)),
                        "task {i} of {s:#x} submitted twice"
                    );
                    let task = &tasks[&(s, i)];
                    assert!(start <= task.start + bound, "{e} after {task:?}");
                    slack_submit = slack_submit.min(task.start - start);
                }
            }
            "synchronize" => {
                let s = hex(&a["stream"]) as u32;
                let upto = a["until_index"].as_u64().unwrap() as u32;
                if let Some(last) = upto.checked_sub(1) {
                    let task = &tasks[&(s, last)];
                    assert!(task.end <= end + bound, "{e} before {task:?} ended");
                    slack_sync = slack_sync.min(end - task.end);
                    syncs += 1;
                }
            }
            _ => {}
        }
    }
    assert_eq!(
        submitted,
        tasks.keys().copied().collect::<BTreeSet<_>>(),
        "the host submitted what the device ran"
    );
    let rounds = t.report["rounds"].as_u64().unwrap();
    assert!(
        syncs as u64 >= rounds * STREAMS,
        "{syncs} synchronize spans"
    );
    println!(
        "{backend}: closest submit {slack_submit} ns before its task, closest synchronize \
         {slack_sync} ns after its last task"
    );

    // Flows: from each round's EVENT_RECORD of lane s to the EVENT_WAIT of lane s + 1.
    let lane_of: HashMap<u32, u64> = lanes.iter().map(|(l, s)| (*s, *l)).collect();
    let stream_of_event = |i: usize| -> u32 {
        let track = &names[&(device_pid, ev[i]["tid"].as_u64().unwrap())];
        hex(&track.strip_prefix("stream ").unwrap().into()) as u32
    };
    let flows = bound_flows(ev);
    let starts: HashMap<u64, usize> = flows
        .iter()
        .filter(|f| f.0 == 's')
        .map(|f| (f.1, f.2))
        .collect();
    let mut waits_released: BTreeSet<usize> = BTreeSet::new();
    for &(_, id, w) in flows.iter().filter(|f| f.0 == 'f') {
        let r = starts[&id];
        let (rec, wait) = (&ev[r], &ev[w]);
        assert_eq!(
            (rec["name"].as_str(), wait["name"].as_str()),
            (Some("EVENT_RECORD"), Some("EVENT_WAIT"))
        );
        assert!(
            ns(&wait["ts"]) + ns(&wait["dur"]) >= ns(&rec["ts"]) + ns(&rec["dur"]),
            "{wait} ended before {rec}"
        );
        let (lr, lw) = (lane_of[&stream_of_event(r)], lane_of[&stream_of_event(w)]);
        assert_eq!(lw, (lr + 1) % STREAMS, "{rec} -> {wait}");
        assert!(waits_released.insert(w), "{wait} released twice");
    }
    let waits: BTreeSet<usize> = tasks
        .values()
        .filter(|t| t.name == "EVENT_WAIT")
        .map(|t| t.event)
        .collect();
    assert_eq!(waits.len() as u64, rounds * STREAMS);
    assert_eq!(waits_released, waits, "every wait has its arrow");
    assert_eq!(other["flows"].as_u64(), Some(waits.len() as u64));

    perfetto(&t.file, ev);
}

/// scripts/perfetto-check.py on `file`, with the project's Python environment
/// (target/python-venv, scripts/python-test.sh installs `perfetto` there) or python3.
fn perfetto(file: &Path, ev: &[Value]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let script = root.join("scripts/perfetto-check.py");
    let mut reasons = Vec::new();
    for py in [
        target.join("python-venv/bin/python"),
        PathBuf::from("python3"),
    ] {
        let child = Command::new(&py)
            .arg(&script)
            .arg(file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            reasons.push(format!("{}: not found", py.display()));
            continue;
        };
        // Bounded: the package fetches its binary on first use.
        let until = Instant::now() + Duration::from_secs(300);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > until {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last = stdout.lines().last().unwrap_or_default();
        let v: Value = match serde_json::from_str(last) {
            Ok(v) => v,
            Err(_) => {
                reasons.push(format!(
                    "{}: {} {stdout} {}",
                    py.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
                continue;
            }
        };
        if let Some(why) = v["skipped"].as_str() {
            reasons.push(format!("{}: {why}", py.display()));
            // Another interpreter helps only where this one lacks the package.
            if why.starts_with("perfetto not installed") {
                continue;
            }
            break;
        }
        assert_eq!(
            out.status.code(),
            Some(0),
            "the trace processor failed: {v}"
        );
        assert_eq!(v["problems"], Value::Array(vec![]), "import errors: {v}");
        let count = |ph: &str| ev.iter().filter(|e| e["ph"] == ph).count() as u64;
        assert_eq!(
            v["slices"].as_u64(),
            Some(count("X")),
            "every slice imported: {v}"
        );
        assert_eq!(
            v["flows"].as_u64(),
            Some(count("f")),
            "every flow bound: {v}"
        );
        println!("perfetto trace processor ({}): {v}", py.display());
        return;
    }
    println!(
        "skipped: the Perfetto trace-processor check: {}",
        reasons.join("; ")
    );
}

#[test]
fn a_traced_workload_on_the_embedded_device() {
    let t = run_traced("embedded", "embedded");
    check(&t, "embedded");
}

#[test]
fn a_traced_workload_on_davinci_mockd() {
    let d = Mockd::start(&[]).expect("davinci-mockd");
    let t = run_traced(&d.path(0), "mockd");
    check(&t, "davinci-mockd");
}
