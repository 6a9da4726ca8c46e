//! `davinci-smi trace` against a real `davinci-mockd` (issue 46): an admin records everything
//! one device runs for a while. Two clients of the device submit tasks on their streams while
//! it records; the file is Chrome trace-event JSON whose device process has a track per
//! stream named by its client (id, process name, pid), every task slice on its stream's track
//! in stream order, and the document (`--json`) counts what the file holds. Bad input: no
//! output path, two devices without `-i`, a non-admin (when this test runs as root).
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use davinci_shim::{task, Device};
use davinci_smi::test_util::{doc, run};
use davinci_tests::mockd::{bin, Mockd};
use serde_json::Value;

/// Submits NOP batches and COPYs on one stream of a new client of `path` until `stop`;
/// returns the client's id and the tasks it completed.
fn busy(path: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u32, u64)> {
    std::thread::spawn(move || {
        let dev = Device::open(&path).expect("client open");
        let ctx = dev.create_context().expect("context");
        let mut s = ctx.create_stream().expect("stream");
        let buf = dev.alloc(1 << 20).expect("alloc");
        let mut done = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let copy = task::copy(
                davinci_shim::Region::range(&buf, 512 << 10..1 << 20).unwrap(),
                davinci_shim::Region::range(&buf, 0..512 << 10).unwrap(),
            )
            .unwrap();
            s.submit_batch(&[task::nop(), task::nop(), task::nop(), copy])
                .expect("submit");
            s.synchronize(Duration::from_secs(10)).expect("synchronize");
            done += 4;
        }
        (dev.client_id().expect("client id"), done)
    })
}

fn smi(d: &Mockd) -> Command {
    let mut c = Command::new(bin("testbin-davinci-smi"));
    c.arg("--socket-dir").arg(d.dir());
    c
}

#[test]
fn an_admin_records_every_clients_tasks_into_a_chrome_trace() {
    let d = Mockd::start(&["--devices", "2"]).expect("davinci-mockd");
    let (code, out, err) = run(smi(&d).args(["set", "-t", "device-share", "-i", "0", "-d", "1"]));
    assert_eq!(code, 0, "two clients need a shared device: {out}{err}");
    let stop = Arc::new(AtomicBool::new(false));
    let clients = [busy(d.path(0), stop.clone()), busy(d.path(0), stop.clone())];
    std::thread::sleep(Duration::from_millis(200));
    let file = d.dir().join("trace.json");
    let (code, out, err) = run(smi(&d)
        .args(["--json", "trace", "-i", "0", "--duration", "400ms", "-o"])
        .arg(&file));
    stop.store(true, Ordering::Relaxed);
    let ids: BTreeSet<u32> = clients
        .into_iter()
        .map(|c| c.join().expect("client thread").0)
        .collect();
    assert_eq!(code, 0, "{out}{err}");
    let summary = doc(&out);
    assert_eq!(summary["command"], "trace", "{summary}");
    let seen: BTreeSet<u32> = summary["clients"]
        .as_array()
        .expect("clients")
        .iter()
        .map(|c| c.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(seen, ids, "both clients' tasks are in the trace: {summary}");

    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let device_pid = events
        .iter()
        .find(|e| {
            e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"] == "davinci0 device"
        })
        .map(|e| e["pid"].clone())
        .expect("the device's process");
    // Track names: stream and client (id, process name, pid of this test).
    let names: BTreeMap<u64, String> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == device_pid)
        .map(|e| {
            (
                e["tid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(names.len() >= 2, "a track per stream: {names:?}");
    for id in &ids {
        let me = format!("client {id} (");
        let pid = format!("pid {}", std::process::id());
        assert!(
            names.values().any(|n| n.contains(&me) && n.contains(&pid)),
            "a track names client {id} and this process: {names:?}"
        );
    }
    // Task slices: on the device's tracks, start <= end, in order per track, and as many
    // tasks (NOP runs counted whole) as the summary says.
    let mut tasks = 0u64;
    let mut last: BTreeMap<u64, (f64, u64)> = BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "task")
    {
        assert_eq!(e["pid"], device_pid, "{e}");
        let tid = e["tid"].as_u64().unwrap();
        assert!(names.contains_key(&tid), "{e}");
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        assert!(dur >= 0.0, "{e}");
        let index = e["args"]["index"].as_u64().unwrap();
        if let Some((t, i)) = last.insert(tid, (ts, index)) {
            assert!(ts >= t && index > i, "stream order on track {tid}: {e}");
        }
        tasks += e["args"]["tasks"].as_u64().unwrap_or(1);
    }
    assert!(tasks > 0);
    assert_eq!(summary["tasks"].as_u64(), Some(tasks), "{summary}");
    assert!(
        events.iter().any(|e| e["ph"] == "X" && e["name"] == "COPY"),
        "the copies are on the timeline"
    );
}

#[test]
fn bad_trace_requests_say_why() {
    let d = Mockd::start(&["--devices", "2"]).expect("davinci-mockd");
    let (code, _, err) = run(smi(&d).args(["trace", "-i", "0"]));
    assert_eq!(code, 2, "no output file: a usage error: {err}");
    assert!(err.contains("--output"), "{err}");
    let file = d.dir().join("t.json");
    let (code, out, _) = run(smi(&d)
        .args(["--json", "trace", "-d", "20ms", "-o"])
        .arg(&file));
    assert_eq!(code, 2, "two devices, no -i: {out}");
    assert!(
        doc(&out)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("-i ID"),
        "{out}"
    );
    let (code, _, err) = run(smi(&d)
        .args(["trace", "-i", "0", "-d", "0s", "-o"])
        .arg(&file));
    assert_eq!(code, 2, "a duration below 10ms: {err}");
    if nix::unistd::geteuid().is_root() {
        // uid 65534 is not the daemon's admin: EPERM, exit status 4, and what to do instead.
        let mut c = smi(&d);
        c.args([
            "trace",
            "-i",
            "0",
            "-d",
            "20ms",
            "-o",
            "/tmp/davinci-smi-trace-eperm.json",
        ])
        .uid(65534)
        .gid(65534);
        let (code, _, err) = run(&mut c);
        assert_eq!(code, 4, "{err}");
        assert!(err.contains("admin"), "{err}");
    }
}
