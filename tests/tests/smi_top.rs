//! `davinci-smi top` against a real `davinci-mockd` (issue 46): two tenants' processes at work
//! on one device, root's and uid 65534's (one user's when this test is not root), each
//! holding its own memory and completing tasks; `top --once` lists both with their pid, user,
//! memory and tasks per second under the devices' header, `top --once --json` with the
//! same figures as LIST_CLIENTS and the clients' own reports; the non-admin sees only its own
//! process; and `top` without a terminal says to use `--once`. (The figures from samples made
//! by hand, the sort and the keys: the unit tests in operators/smi/src/top/tests.rs.)
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};

use davinci_smi::test_util::{doc, run};
use davinci_tests::mockd::{bin, Mockd, REPORT_TIMEOUT};
use serde_json::Value;

/// The other tenant's uid and gid (`nobody` on Debian), also the daemon's socket group.
const OTHER: u32 = 65534;

/// A `davinci-testclient work --until-eof` process: FILL/ADD/COPY rounds checked against the
/// CPU until its stdin closes (on drop, with a kill to be sure).
struct Worker {
    child: Child,
    _stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    pid: u32,
    /// The device memory it holds, as it reported when ready.
    memory_bytes: u64,
}

impl Worker {
    /// Starts one on `device` with buffers of `elems` words, as `uid` (and its gid) if given,
    /// and waits until it has done a round.
    fn start(device: &str, elems: u32, uid: Option<u32>) -> Worker {
        let mut cmd = Command::new(bin("davinci-testclient"));
        cmd.args(["work", "--until-eof", "--elems", &elems.to_string()])
            .arg("--device")
            .arg(device)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        let mut child = cmd.spawn().expect("start davinci-testclient");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            }
        });
        let mut w = Worker {
            pid: child.id(),
            _stdin: child.stdin.take(),
            child,
            lines,
            memory_bytes: 0,
        };
        let ready = w.next();
        assert_eq!(ready["event"], "ready", "{ready}");
        w.memory_bytes = ready["memory_bytes"].as_u64().expect("memory_bytes");
        let progress = w.next();
        assert_eq!(progress["event"], "progress", "{progress}");
        w
    }

    fn next(&self) -> Value {
        self.lines
            .recv_timeout(REPORT_TIMEOUT)
            .unwrap_or_else(|_| panic!("client {}: no report", self.pid))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `davinci-smi --socket-dir DIR ARGS` (as `uid`, if given): exit status, stdout, stderr.
fn smi(d: &Mockd, uid: Option<u32>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(bin("testbin-davinci-smi"));
    cmd.arg("--socket-dir")
        .arg(d.dir())
        .args(args)
        .stdin(Stdio::null());
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    run(&mut cmd)
}

/// The user name `top` shows for `uid`.
fn user(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => u.name,
        _ => uid.to_string(),
    }
}

#[test]
fn top_once_lists_two_tenants_processes_with_their_figures() {
    let root = nix::unistd::getuid().is_root();
    // Root runs the other tenant as uid 65534, which reaches the socket through its group.
    let d = Mockd::start(&[
        "--devices",
        "2",
        "--share-mode",
        "shared",
        "--socket-group",
        &OTHER.to_string(),
    ])
    .expect("start davinci-mockd");
    let me = nix::unistd::getuid().as_raw();
    let other = if root {
        OTHER
    } else {
        eprintln!("not root: both processes are this user's (one tenant)");
        me
    };
    let a = Worker::start(&d.path(0), 4096, None);
    let b = Worker::start(&d.path(0), 1024, root.then_some(OTHER));
    assert!(
        a.memory_bytes > b.memory_bytes,
        "{} {}",
        a.memory_bytes,
        b.memory_bytes
    );

    // Text: the device header, then both processes, the larger memory first.
    let (code, out, err) = smi(&d, None, &["top", "--once", "--interval", "300ms"]);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("davinci-smi top  "), "{out}");
    assert!(lines[0].contains("2 device(s), 2 process(es)"), "{out}");
    assert!(lines.iter().all(|l| l.chars().count() <= 120), "{out}");
    let dev0 = lines
        .iter()
        .find(|l| l.starts_with("│0   davinci_mock"))
        .unwrap_or_else(|| panic!("no davinci0 row: {out}"));
    assert!(
        dev0.contains("KiB/256.0 MiB") && dev0.contains("shared"),
        "{dev0}"
    );
    let rows: Vec<Vec<&str>> = lines
        .iter()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|r| r.len() == 12 && r[4] == "davinci-testcli")
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    for (row, (w, uid)) in rows.iter().zip([(&a, me), (&b, other)]) {
        assert_eq!(row[1], w.pid.to_string(), "{out}");
        assert_eq!(
            row[2],
            user(uid).chars().take(10).collect::<String>(),
            "{out}"
        );
        let kib = format!("{:.1}", w.memory_bytes as f64 / 1024.0);
        assert_eq!((row[5], row[6]), (kib.as_str(), "KiB"), "{out}");
        let tasks: f64 = row[8].parse().unwrap_or_else(|_| panic!("tasks/s: {out}"));
        assert!(tasks > 0.0, "{out}");
    }

    // JSON: the same processes, their figures those of LIST_CLIENTS and the clients.
    let (code, out, err) = smi(
        &d,
        None,
        &["top", "--once", "--json", "--interval", "300ms"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v = doc(&out);
    assert_eq!(v["command"], "top");
    assert!(v["interval_s"].as_f64().unwrap() >= 0.3, "{v}");
    assert_eq!(v["devices"][0]["clients"], 2);
    let procs = v["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "{v}");
    let mut tenants = Vec::new();
    for (p, (w, uid)) in procs.iter().zip([(&a, me), (&b, other)]) {
        assert_eq!(p["pid"], w.pid, "{v}");
        assert_eq!(p["device_id"], 0);
        assert_eq!(p["uid"], uid);
        assert_eq!(p["user"], user(uid));
        assert_eq!(p["memory_bytes"], w.memory_bytes);
        assert_eq!(p["streams"], 1);
        assert!(p["tasks_per_second"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["tasks_completed"].as_u64().unwrap() > 0, "{p}");
        assert!(p["utilization_percent"].as_u64().unwrap() <= 100, "{p}");
        assert_eq!(p["errors"], 0, "the workers' streams never failed: {p}");
        tenants.push(p["tenant"].as_str().unwrap().to_string());
    }
    if root {
        assert_eq!(tenants, [format!("user:{me}"), format!("user:{OTHER}")]);
    }
    let used: u64 = procs
        .iter()
        .map(|p| p["memory_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(v["devices"][0]["memory"]["used_bytes"], used);

    // The other tenant, not an admin, sees its own process only.
    if root {
        let (code, out, err) = smi(&d, Some(OTHER), &["top", "--once", "--json", "-n", "100ms"]);
        assert_eq!(code, 0, "{out}{err}");
        let v = doc(&out);
        let pids: Vec<u64> = v["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(pids, [u64::from(b.pid)], "{v}");
    }

    // Live mode needs a terminal; a pipe is told to use --once.
    let (code, out, err) = smi(&d, None, &["top"]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.contains("use `top --once` in scripts"), "{err}");
}
