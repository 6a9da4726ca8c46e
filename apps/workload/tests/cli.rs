//! The `davinci-workload` binary as users run it: device selection, option checks, exit
//! statuses, the JSON report and errors, progress on a non-terminal stderr, Ctrl-C.
//! Every run is on the embedded mock device (or a device path that does not exist) and small.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_davinci-workload");
const PROGRESS_ENV: &str = "DAVINCI_WORKLOAD_PROGRESS_SECS";
/// A socket path where no daemon listens.
const NO_DAEMON: &str = "mock:/nonexistent-davinci-workload-test/davinci0.sock";
/// A small run: 2 streams x (3 x 4 + 3) = 30 tasks, 10 round trips.
const SMALL: &[(&str, &str)] = &[
    ("--tasks", "1"),
    ("--streams", "2"),
    ("--slots", "4"),
    ("--elements", "64"),
    ("--latency-samples", "10"),
];

/// The binary with a clean environment for the variables it reads.
fn cmd() -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("DAVINCI_DEVICE").env_remove(PROGRESS_ENV);
    // No daemon socket of this machine decides the default device.
    c.env("DAVINCI_SOCKET_DIR", "/nonexistent/davinci-workload-test");
    c
}

fn run(c: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = c.output().expect("run davinci-workload");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// The small run with `extra`: an option of [`SMALL`] given in `extra` replaces its value
/// there (the program takes each option once).
fn small(extra: &[&str]) -> Command {
    let mut c = cmd();
    for (option, value) in SMALL {
        if !extra.contains(option) {
            c.args([option, value]);
        }
    }
    c.args(extra);
    c
}

fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[test]
fn help_documents_options_exit_statuses_and_environment() {
    let (code, out, _) = run(cmd().arg("--help"));
    assert_eq!(code, 0);
    for want in [
        "--device",
        "$DAVINCI_DEVICE, else embedded",
        "--latency-samples",
        "0: no latency phase",
        "--memory-mib",
        "--timeout-secs",
        "--json",
        "--trace",
        "DAVINCI_DEVICE",
        "DAVINCI_WORKLOAD_PROGRESS_SECS",
        "Exit status:",
        "  0 ",
        "  1 ",
        "  2 ",
        "  3 ",
        "  4 ",
        "  5 ",
        "  130 ",
        "davinci-workload/v1",
    ] {
        assert!(out.contains(want), "--help lacks {want:?}:\n{out}");
    }
}

#[test]
fn a_small_run_succeeds_on_the_embedded_device_by_default() {
    let (code, out, err) = run(&mut small(&[]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("device:        embedded"), "{out}");
    assert!(out.contains("30 tasks in 1 rounds"), "{out}");
    assert!(out.contains(", 0 mismatches"), "{out}");
}

#[test]
fn davinci_device_names_the_device_when_device_is_not_given() {
    let (code, out, err) = run(small(&["--json"]).env("DAVINCI_DEVICE", NO_DAEMON));
    assert_eq!(code, 3, "device unavailable: {err}");
    assert!(
        err.contains("/nonexistent-davinci-workload-test/davinci0.sock"),
        "{err}"
    );
    let v = json(&out);
    assert_eq!(v["options"]["device"], NO_DAEMON);
    assert_eq!(v["options"]["device_from"], "env");
}

#[test]
fn the_device_option_wins_over_davinci_device() {
    let (code, out, err) =
        run(small(&["--device", "embedded", "--json"]).env("DAVINCI_DEVICE", NO_DAEMON));
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["options"]["device_from"], "option");
}

#[test]
fn an_empty_davinci_device_means_the_embedded_default() {
    let (code, out, err) = run(small(&["--json"]).env("DAVINCI_DEVICE", ""));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["options"]["device"], "embedded");
    assert_eq!(v["options"]["device_from"], "default");
}

#[test]
fn a_malformed_device_is_a_usage_error_naming_where_it_came_from() {
    let (code, out, err) = run(small(&[]).env("DAVINCI_DEVICE", "davinci0"));
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("DAVINCI_DEVICE=\"davinci0\""), "{err}");
    assert!(err.contains("mock:SOCKET"), "{err}");
    let (code, _, err) = run(&mut small(&["--device", "davinci0"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--device \"davinci0\""), "{err}");
}

#[test]
fn zero_values_are_rejected_naming_the_option() {
    for option in [
        "--tasks",
        "--streams",
        "--batch",
        "--slots",
        "--elements",
        "--timeout-secs",
    ] {
        let (code, out, err) = run(&mut small(&[option, "0"]));
        assert_eq!(code, 2, "{option} 0: {err}");
        assert!(out.is_empty(), "{option} 0 printed a report: {out}");
        assert!(
            err.contains(&format!("{option} 0")) && err.contains("at least 1"),
            "{option} 0: {err}"
        );
    }
}

#[test]
fn too_many_streams_gives_the_device_limit() {
    let (code, _, err) = run(&mut small(&["--streams", "1000"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at most 256 streams"), "{err}");
    assert!(err.contains("use --streams 255 or fewer"), "{err}");
    // Without a latency phase the last stream is free for the workload.
    let (code, _, err) = run(&mut small(&["--streams", "1000", "--latency-samples", "0"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("use --streams 256 or fewer"), "{err}");
}

#[test]
fn too_little_memory_gives_the_size_needed_and_that_size_works() {
    let (code, _, err) = run(&mut small(&["--memory-mib", "0"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("needs 4 MiB of device memory"), "{err}");
    let advice = err
        .split("use --memory-mib ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap_or_else(|| panic!("no advice: {err}"));
    let mib: u64 = advice.parse().unwrap();
    let (code, _, err) = run(&mut small(&["--memory-mib", &mib.to_string()]));
    assert_eq!(code, 0, "the advised --memory-mib {mib} must work: {err}");
    let (code, _, err) = run(&mut small(&["--memory-mib", &(mib - 1).to_string()]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("--memory-mib {} is too small", mib - 1)),
        "{err}"
    );
}

#[test]
fn memory_mib_for_another_device_warns_that_it_does_not_apply() {
    let (code, out, err) = run(&mut small(&[
        "--device",
        NO_DAEMON,
        "--memory-mib",
        "64",
        "--json",
    ]));
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("warning: --memory-mib 64 applies only to the embedded device"),
        "{err}"
    );
    assert_eq!(json(&out)["options"]["memory_mib"], Value::Null);
}

#[test]
fn a_batch_larger_than_a_round_warns() {
    let (code, out, err) = run(&mut small(&["--batch", "1000", "--json"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning: --batch 1000 is more than the 12 descriptors"),
        "{err}"
    );
    let v = json(&out);
    assert!(
        v["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("--batch 1000")),
        "{v}"
    );
}

#[test]
fn zero_latency_samples_skip_the_latency_phase() {
    let (code, out, err) = run(&mut small(&["--latency-samples", "0"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("latency:       not measured (--latency-samples 0)"),
        "{out}"
    );
}

#[test]
fn the_json_report_carries_schema_client_id_and_options() {
    let (code, out, err) = run(&mut small(&["--json"]));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["schema"], "davinci-workload/v1");
    assert!(v["client_id"].as_u64().is_some_and(|id| id > 0), "{v}");
    // The fields reports always had.
    for field in [
        "device",
        "streams",
        "batch",
        "elements",
        "rounds",
        "tasks",
        "device_seconds",
        "wall_seconds",
        "tasks_per_sec",
        "doorbells",
        "doorbells_per_1000_tasks",
        "values_checked",
        "mismatches",
        "first_mismatches",
        "latency",
    ] {
        assert!(!v[field].is_null(), "no {field}: {v}");
    }
    assert_eq!(v["tasks"], 30);
    assert_eq!(v["rounds_planned"], 1);
    assert_eq!(v["interrupted"], false);
    assert_eq!(v["latency"]["samples"], 10);
    let o = &v["options"];
    assert_eq!(o["device"], "embedded");
    assert_eq!(o["device_from"], "default");
    assert_eq!(o["tasks"], 1);
    assert_eq!(o["streams"], 2);
    assert_eq!(o["batch"], 32);
    assert_eq!(o["elements"], 64);
    assert_eq!(o["slots"], 4);
    assert_eq!(o["latency_samples"], 10);
    assert_eq!(o["memory_mib"], 512);
    assert_eq!(o["timeout_secs"], 30);
    assert_eq!(v["warnings"], Value::Array(vec![]));
}

#[test]
fn json_failures_print_an_error_object() {
    for (args, kind, code, errno) in [
        (&["--streams", "0"][..], "usage", 2, Value::Null),
        (&["--tasks", "many"][..], "usage", 2, Value::Null),
        (
            &["--device", NO_DAEMON][..],
            "device_unavailable",
            3,
            Value::from("ENODEV"),
        ),
    ] {
        let (got, out, err) = run(small(args).arg("--json"));
        assert_eq!(got, code, "{args:?}: {err}");
        let v = json(&out);
        assert_eq!(v["schema"], "davinci-workload/v1", "{v}");
        assert_eq!(v["error"]["kind"], kind, "{v}");
        assert_eq!(v["error"]["exit_code"], code, "{v}");
        assert_eq!(v["error"]["errno"], errno, "{v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            !message.is_empty() && err.contains(message.split(" (").next().unwrap()),
            "{v} / {err}"
        );
    }
}

#[test]
fn trace_writes_the_timeline_and_says_where() {
    let file = std::env::temp_dir().join(format!(
        "davinci-workload-cli-trace-{}.json",
        std::process::id()
    ));
    let path = file.to_str().unwrap();
    let (code, out, err) = run(&mut small(&["--json", "--trace", path]));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let t = &v["trace"];
    assert_eq!(
        (&t["file"], &v["options"]["trace"]),
        (&path.into(), &path.into())
    );
    // The 30 tasks and the latency phase's 64 + 10 NOP round trips.
    assert_eq!(t["device_tasks"], 30 + 64 + 10, "{v}");
    assert_eq!(
        (t["lost"].as_u64(), t["dropped"].as_u64()),
        (Some(0), Some(0))
    );
    assert!(err.contains(&format!("trace written to {path}")), "{err}");
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(trace["otherData"]["device_tasks"], t["device_tasks"]);
    assert_eq!(trace["otherData"]["clock_bound_ns"], t["clock_bound_ns"]);
    std::fs::remove_file(&file).unwrap();
    // A file that cannot be created fails before the run, as a usage error.
    let (code, _, err) = run(&mut small(&["--trace", "/nonexistent-dir/trace.json"]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--trace /nonexistent-dir/trace.json: cannot create the file"),
        "{err}"
    );
}

#[test]
fn a_bad_progress_interval_is_a_usage_error() {
    let (code, _, err) = run(small(&[]).env(PROGRESS_ENV, "soon"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("DAVINCI_WORKLOAD_PROGRESS_SECS=\"soon\""),
        "{err}"
    );
}

fn progress_lines(stderr: &str, phase: &str) -> Vec<String> {
    let prefix = format!("davinci-workload: {phase} ");
    stderr
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

#[test]
fn progress_lines_on_a_pipe_count_the_throughput_phase_with_rate_and_eta() {
    // 4 rounds of 30 tasks; a line after every round.
    let (code, out, err) = run(small(&["--tasks", "100", "--json"]).env(PROGRESS_ENV, "0"));
    assert_eq!(code, 0, "{err}");
    let tasks = json(&out)["tasks"].as_u64().unwrap();
    assert_eq!(tasks, 120);
    let lines = progress_lines(&err, "throughput");
    assert_eq!(lines.len(), 4, "{err}");
    for (i, l) in lines.iter().enumerate() {
        let done = 30 * (i as u64 + 1);
        assert!(
            l.contains(&format!(" {done}/{tasks} tasks (")),
            "the total is the report's task count: {l}"
        );
        assert!(l.contains(" tasks/s, ETA "), "{l}");
    }
    assert!(lines[3].contains("(100%)"), "{}", lines[3]);
    // The latency phase has its own count.
    let latency = progress_lines(&err, "latency");
    assert!(
        latency
            .last()
            .is_some_and(|l| l.contains(" 10/10 round trips (100%)")),
        "{err}"
    );
}

/// Kills the child if the test fails before it exits.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn ctrl_c_prints_a_partial_report_and_exits_130() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let mut child = Reap(
        small(&["--tasks", "1000000000", "--json"])
            .env(PROGRESS_ENV, "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn davinci-workload"),
    );
    let stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // Wait for the run to be under way (a safety limit, not a measurement).
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("a progress line on stderr");
        if line.starts_with("davinci-workload: throughput ") {
            break;
        }
    }
    kill(Pid::from_raw(child.0.id() as i32), Signal::SIGINT).unwrap();
    let mut out = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let status = child.0.wait().unwrap();
    let err = reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted (Ctrl-C)"), "{err}");
    let v = json(&out);
    assert_eq!(v["interrupted"], true, "{v}");
    let rounds = v["rounds"].as_u64().unwrap();
    let planned = v["rounds_planned"].as_u64().unwrap();
    assert!(rounds >= 1 && rounds < planned, "{v}");
    assert_eq!(v["tasks"].as_u64().unwrap(), 30 * rounds, "{v}");
    assert_eq!(v["mismatches"], 0, "{v}");
    assert_eq!(v["latency"]["samples"], 0, "{v}");
}

/// A node with a device: a run that names none is refused (it would test the in-process
/// mock, not the node), saying which device to name (issue 24).
#[test]
fn a_run_without_a_device_on_a_node_with_one_is_refused() {
    let dir = std::env::temp_dir().join(format!("workload-node-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("davinci0.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let (code, out, err) = run(small(&["--json"]).env("DAVINCI_SOCKET_DIR", &dir));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 2, "{out}{err}");
    let v = json(&out);
    let msg = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.contains(&format!("--device mock:{}", sock.display())),
        "{v}"
    );
    // Named, it runs; and the device used is said on stderr.
    let (code, _, err) = run(&mut small(&["--device", "embedded"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("davinci-workload: device embedded (--device)"),
        "{err}"
    );
}
