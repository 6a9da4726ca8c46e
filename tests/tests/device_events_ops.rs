//! The device event log as operators see it (issue 46 item 3), with real processes against a
//! real `davinci-mockd`: this process provokes every code (`hang-at` injection: hung_task and
//! injected_fault; a faulting FILL: stream_stopped; a freed export: import_revoked; refusals
//! past a tenant quota: quota_storm; SIGUSR1: device_reset; the daemon's start:
//! device_started), then each is in `davinci-smi events --json` (by code and name, with its
//! client and description), in `--follow`'s documents as it comes, and in the exporter's
//! `davinci_device_log_events_total`; and `davinci-device-plugin` marks the device Unhealthy
//! on a code it is told to (`--unhealthy-codes`), not on others, and Healthy again after a
//! reset.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use davinci_shim::{Control, Device, ExportTo, Stream, TaskDesc};
use davinci_smi::test_util::{doc, run};
use davinci_tests::descs::SubmitDescs;
use davinci_tests::mockd::{bin, Mockd};
use davinci_uapi::{DevAddr, DEVICE_EVENT_CODES, QUOTA_STORM_REFUSALS};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

const T: Duration = Duration::from_secs(20);

/// Waits until the device's log (read by a control open) has an event of `code`.
fn wait_for_code(path: &str, code: u32) {
    let ctl = Control::open(path).expect("control open");
    let until = Instant::now() + T;
    loop {
        let b = ctl.read_events(0).expect("READ_EVENTS");
        if b.events.iter().any(|e| e.code == code) {
            return;
        }
        assert!(Instant::now() < until, "no event {code} in {b:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `davinci-smi ARGS --device PATH`: exit status, stdout, stderr.
fn smi(path: &str, args: &[&str]) -> (i32, String, String) {
    run(Command::new(bin("testbin-davinci-smi"))
        .args(args)
        .args(["--device", path]))
}

/// A stream whose first task is the daemon's `hang-at=1` (the first stream created), and a
/// stream that a FILL of an address nobody holds stopped.
struct Provoked {
    _hung: Stream,
    _stopped: Stream,
}

/// Runs a FILL of 0x10 on a new stream of `ctx`: the device faults it (stream_stopped).
fn faulting_fill(ctx: &davinci_shim::Context) -> Stream {
    let mut s = ctx.create_stream().expect("stream");
    s.submit_desc(&TaskDesc::fill(7, DevAddr(0x10), 64, 0))
        .expect("submit");
    assert!(s.synchronize(T).is_err(), "the FILL of 0x10 must fail");
    s
}

/// Every code on `d`'s device 0, by this process (pid, uid: ours) and the daemon.
fn provoke_every_code(d: &Mockd, dev: &Device, ctx: &davinci_shim::Context) -> Provoked {
    let path = d.path(0);
    // hung_task and injected_fault: the first stream's first task hangs.
    let mut hung = ctx.create_stream().expect("stream");
    hung.submit_desc(&TaskDesc::nop(1)).expect("submit");
    wait_for_code(&path, davinci_uapi::DEVICE_EVENT_HUNG_TASK);
    // stream_stopped.
    let stopped = faulting_fill(ctx);
    // import_revoked: another client (this user's) imports our memory; we free it.
    let other = Device::open(&path).expect("open");
    let mem = dev.alloc(8192).expect("alloc");
    let imported = other
        .import(mem.export(ExportTo::SameUser).expect("export"))
        .expect("import");
    drop(mem);
    wait_for_code(&path, davinci_uapi::DEVICE_EVENT_IMPORT_REVOKED);
    drop(imported);
    // quota_storm: contexts past the tenant's quota (2), many times within a second.
    let mut held = Vec::new();
    while let Ok(c) = dev.create_context() {
        held.push(c);
        assert!(held.len() < 64, "no context quota refused");
    }
    for _ in 0..2 * QUOTA_STORM_REFUSALS {
        assert!(dev.create_context().is_err());
    }
    wait_for_code(&path, davinci_uapi::DEVICE_EVENT_QUOTA_STORM);
    // device_reset: SIGUSR1 to the daemon (it stops the hung stream).
    kill(Pid::from_raw(d.pid() as i32), Signal::SIGUSR1).expect("SIGUSR1");
    wait_for_code(&path, davinci_uapi::DEVICE_EVENT_DEVICE_RESET);
    Provoked {
        _hung: hung,
        _stopped: stopped,
    }
}

#[test]
fn every_code_reaches_smi_events_and_the_exporter() {
    let d = Mockd::start(&[
        "--share-mode",
        "shared",
        "--tenant-quota",
        "contexts=2",
        "--inject",
        "hang-at=1@streams=1",
    ])
    .expect("start davinci-mockd");
    let path = d.path(0);
    let dev = Device::open(&path).expect("open");
    let ctx = dev.create_context().expect("context");
    let _provoked = provoke_every_code(&d, &dev, &ctx);

    // davinci-smi events --json: every code, by number and name, with what it concerns.
    let (code, out, err) = smi(&path, &["events", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v = doc(&out);
    assert_eq!(v["command"], "events");
    let dev0 = &v["devices"][0];
    assert_eq!(
        (dev0["health"].as_str(), dev0["lost"].as_u64()),
        (Some("ok"), Some(0))
    );
    let events = dev0["events"].as_array().expect("events");
    let me = std::process::id();
    for (c, name, meaning) in DEVICE_EVENT_CODES {
        let e = events
            .iter()
            .find(|e| e["code"] == *c)
            .unwrap_or_else(|| panic!("no {name} in {out}"));
        assert_eq!(
            (e["name"].as_str(), e["meaning"].as_str()),
            (Some(*name), Some(*meaning))
        );
        assert!(!e["description"].as_str().unwrap().is_empty(), "{e}");
        assert!(
            e["age_ns"].as_u64().is_some() && e["time"].is_string(),
            "{e}"
        );
        // The device's own events have no client; the others are this process's.
        let own = matches!(*name, "device_started" | "device_reset");
        assert_eq!(e["pid"], if own { 0 } else { me }, "{e}");
    }
    let find = |name: &str| events.iter().find(|e| e["name"] == name).unwrap();
    assert_eq!(find("device_started")["seq"], 0);
    assert_eq!(find("injected_fault")["detail"], 2, "hang-at");
    assert!(find("hung_task")["description"]
        .as_str()
        .unwrap()
        .contains("holds a task it does not complete"));
    assert!(find("stream_stopped")["description"]
        .as_str()
        .unwrap()
        .contains("stopped in the error state"));
    // --code by name and by number; the text table names them too.
    let (_, out, _) = smi(&path, &["events", "--json", "--code", "hung_task,6"]);
    let names: Vec<Value> = doc(&out)["devices"][0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].clone())
        .collect();
    assert_eq!(names, ["hung_task", "import_revoked"]);
    let (code, text, _) = smi(&path, &["events"]);
    assert_eq!(code, 0);
    for (c, name, _) in DEVICE_EVENT_CODES {
        assert!(text.contains(&format!("{name} ({c})")), "{name}: {text}");
    }

    // The exporter: a counter per code, each event once.
    let (code, out, err) =
        run(Command::new(bin("testbin-davinci-exporter")).args(["--once", "--device", &path]));
    assert_eq!(code, 0, "{err}");
    for (c, name, _) in DEVICE_EVENT_CODES {
        let want = format!("code=\"{c}\",name=\"{name}\"}}");
        let line = out
            .lines()
            .find(|l| l.starts_with("davinci_device_log_events_total{") && l.contains(&want))
            .unwrap_or_else(|| panic!("no series for {name}: {out}"));
        let n: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        let logged = events.iter().filter(|e| e["code"] == *c).count();
        assert_eq!(n, logged as f64, "{line}");
    }
    assert!(
        out.lines()
            .any(|l| l.starts_with("davinci_device_log_events_lost_total{") && l.ends_with(" 0")),
        "{out}"
    );
}

/// `davinci-smi events --follow --json` as a process: a document with the log, then one per
/// read that found something new.
#[test]
fn follow_prints_new_events_as_they_come() {
    let d = Mockd::start(&[]).expect("start davinci-mockd");
    let path = d.path(0);
    let dev = Device::open(&path).expect("open");
    let ctx = dev.create_context().expect("context");
    let mut child = Command::new(bin("testbin-davinci-smi"))
        .args(["events", "--follow", "--json", "--interval", "50ms"])
        .args(["--device", &path])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start davinci-smi");
    let lines = lines_of(child.stdout.take().unwrap());
    let first = doc(&next_line(&lines));
    let names = |v: &Value| -> Vec<String> {
        v["devices"][0]["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&first), ["device_started"]);
    let _stopped = faulting_fill(&ctx);
    let next = doc(&next_line(&lines));
    assert_eq!(names(&next), ["stream_stopped"], "{next}");
    assert_eq!(next["devices"][0]["events"][0]["seq"], 1);
    assert_eq!(next["devices"][0]["events"][0]["pid"], std::process::id());
    let _ = child.kill();
    let _ = child.wait();
}

fn lines_of(out: std::process::ChildStdout) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn next_line(rx: &Receiver<String>) -> String {
    rx.recv_timeout(T)
        .expect("a line from davinci-smi events --follow")
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("davinci-evops-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `davinci-device-plugin --list --json --device PATH ARGS`: device 0's health and reason.
fn listed(path: &str, args: &[&str]) -> (String, Value) {
    let (code, out, err) = run(Command::new(bin("testbin-davinci-device-plugin"))
        .args(["--list", "--json", "--device", path])
        .args(args));
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    let d = &v["devices"][0];
    (
        d["health"].as_str().unwrap().to_string(),
        d["reason"].clone(),
    )
}

/// The plugin's status file, once it says device 0's health is `health`.
fn wait_status(file: &Path, health: &str) -> Value {
    let until = Instant::now() + T;
    loop {
        if let Some(v) = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        {
            if v["devices"][0]["health"] == health {
                return v;
            }
            assert!(Instant::now() < until, "not {health}: {v}");
        }
        assert!(Instant::now() < until, "no status file {}", file.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_plugin_marks_a_device_unhealthy_on_a_named_code_only() {
    let d = Mockd::start(&["--inject", "hang-at=1@streams=1"]).expect("start davinci-mockd");
    let path = d.path(0);
    let k8s = TempDir::new("plugin");
    let status = k8s.0.join("status.json");
    let plugin = Killed(
        Command::new(bin("testbin-davinci-device-plugin"))
            .arg("--kubelet-dir")
            .arg(&k8s.0)
            .args(["--device", &path, "--health-interval", "50ms"])
            .args(["--unhealthy-codes", "hung_task", "--unhealthy-hold", "1h"])
            .arg("--status-file")
            .arg(&status)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start davinci-device-plugin"),
    );
    wait_status(&status, "Healthy");

    let dev = Device::open(&path).expect("open");
    let ctx = dev.create_context().expect("context");
    // The first stream is the one hang-at arms; its task comes later.
    let mut hung = ctx.create_stream().expect("stream");
    // stream_stopped is not a named code: the device stays Healthy.
    let _stopped = faulting_fill(&ctx);
    wait_for_code(&path, davinci_uapi::DEVICE_EVENT_STREAM_STOPPED);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        wait_status(&status, "Healthy")["devices"][0]["reason"],
        Value::Null
    );
    // ... unless it is named.
    assert_eq!(listed(&path, &[]).0, "Healthy");
    let (health, reason) = listed(&path, &["--unhealthy-codes", "stream_stopped"]);
    assert_eq!(health, "Unhealthy");
    let reason = reason.as_str().unwrap();
    assert!(
        reason.starts_with("device event stream_stopped (seq 1): stream ")
            && reason.contains(
                "stopped in the error state: EACCES at command-ring index 0 (fault not_owned)"
            ),
        "{reason}"
    );
    // hung_task is named: Unhealthy, the event in words as the reason.
    hung.submit_desc(&TaskDesc::nop(1)).expect("submit");
    let v = wait_status(&status, "Unhealthy");
    let reason = v["devices"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("device event hung_task (seq ")
            && reason.contains("holds a task it does not complete")
            && reason.contains("for 1h after it"),
        "{reason}"
    );
    // Still named by its UUID and mode while unhealthy.
    assert_eq!(v["devices"][0]["share_mode"], "exclusive");
    // A reset ends it.
    kill(Pid::from_raw(d.pid() as i32), Signal::SIGUSR1).expect("SIGUSR1");
    wait_status(&status, "Healthy");
    assert_eq!(listed(&path, &[]).0, "Healthy");
    drop(plugin);
}
