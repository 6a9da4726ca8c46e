//! Acceptance of device sharing with real processes: a `davinci-mockd` daemon, client
//! processes (`davinci-testclient`) and `davinci-smi`, each its own process, talking over the
//! daemon's sockets exactly as they would to a kernel driver.
#![forbid(unsafe_code)]

use davinci_tests::descs::SubmitDescs;
use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use davinci_shim::{Device, Errno};
use davinci_tests::mockd::{bin, Mockd, TestClient as Client};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(60);

fn smi_cmd(d: &Mockd, args: &[&str]) -> Command {
    let mut c = Command::new(bin("testbin-davinci-smi"));
    c.arg("--socket-dir").arg(d.dir()).args(args);
    c
}

fn run(mut c: Command) -> (i32, String) {
    let out = c.output().expect("run davinci-smi");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `davinci-smi ARGS --json`: exit code and the document (schema checked).
fn smi(d: &Mockd, args: &[&str]) -> (i32, Value) {
    let mut a = args.to_vec();
    a.push("--json");
    let (code, out) = run(smi_cmd(d, &a));
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["schema"], "davinci-smi/v1");
    assert_eq!(v["exit_code"], code, "{v}");
    (code, v)
}

/// Per-pid usage of device 0.
fn usage(d: &Mockd) -> HashMap<u64, Value> {
    let (code, v) = smi(d, &["info", "-t", "usage", "-i", "0"]);
    assert_eq!(code, 0, "{v}");
    v["devices"][0]["clients"]
        .as_array()
        .expect("clients array")
        .iter()
        .map(|c| (c["pid"].as_u64().expect("pid"), c.clone()))
        .collect()
}

fn device0(d: &Mockd) -> Value {
    let (code, v) = smi(d, &["info", "-i", "0"]);
    assert_eq!(code, 0, "{v}");
    v["devices"][0].clone()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < LONG, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn set_share(d: &Mockd, on: bool) -> (i32, Value) {
    smi(
        d,
        &[
            "set",
            "-t",
            "device-share",
            "-i",
            "0",
            "-d",
            if on { "1" } else { "0" },
        ],
    )
}

#[test]
fn exclusive_mode_second_client_gets_ebusy_naming_the_first() {
    let d = Mockd::start(&["--memory", "64M"]).unwrap();
    let a = Client::start(&d.path(0), &["hold"]);
    a.expect("ready");
    // Another process: refused, and told who holds the device.
    let b = Client::start(&d.path(0), &["hold"]);
    let err = b.expect("error");
    assert_eq!(err["errno"], "EBUSY", "{err}");
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains(&format!("held by pid {}", a.pid)), "{msg}");
    assert_eq!(b.release(), 1);
    // The same through the shim in this process.
    let e = Device::open(&d.path(0)).unwrap_err();
    assert!(e.is(Errno::EBUSY), "{e}");
    assert!(e.message().contains(&format!("pid {}", a.pid)), "{e}");
    // The operator sees the one holder.
    let dev = device0(&d);
    assert_eq!(
        (dev["clients"].as_u64(), dev["share_mode"].as_str()),
        (Some(1), Some("exclusive"))
    );
    let u = usage(&d);
    assert_eq!(u.keys().copied().collect::<Vec<_>>(), vec![a.pid as u64]);
    assert_eq!(u[&(a.pid as u64)]["streams"], 1);
    // Once it leaves, the next client gets in.
    assert_eq!(a.release(), 0);
    let c = Client::start(&d.path(0), &["hold"]);
    c.expect("ready");
    assert_eq!(c.release(), 0);
}

#[test]
fn shared_mode_four_processes_submit_concurrently_and_usage_lists_each() {
    let d = Mockd::start(&["--memory", "64M"]).unwrap();
    let (code, v) = set_share(&d, true);
    assert_eq!(code, 0, "{v}");
    let rounds = 60u64;
    let clients: Vec<Client> = (0..4)
        .map(|i| {
            let elems = (1024 * (i + 1)).to_string();
            Client::start(
                &d.path(0),
                &[
                    "work",
                    "--rounds",
                    &rounds.to_string(),
                    "--elems",
                    &elems,
                    "--hold",
                ],
            )
        })
        .collect();
    let mut expect_mem = HashMap::new();
    for c in &clients {
        c.expect("ready");
    }
    for c in &clients {
        let done = c.expect("done");
        assert_eq!(done["ok"], true, "client {}: {done}", c.pid);
        assert_eq!(done["tasks"], 3 * rounds);
        expect_mem.insert(c.pid as u64, done["memory_bytes"].as_u64().unwrap());
    }
    let u = usage(&d);
    assert_eq!(u.len(), 4, "{u:?}");
    for c in &clients {
        let e = &u[&(c.pid as u64)];
        assert_eq!(e["tasks_submitted"], 3 * rounds, "{e}");
        assert_eq!(e["tasks_completed"], 3 * rounds, "{e}");
        assert_eq!(
            (e["contexts"].as_u64(), e["streams"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(e["allocations"], 3);
        assert_eq!(e["memory_bytes"], expect_mem[&(c.pid as u64)]);
        assert_eq!(e["uid"], nix::unistd::getuid().as_raw());
        let cg = std::fs::read_to_string(format!("/proc/{}/cgroup", c.pid)).unwrap();
        assert_eq!(
            e["container_id"],
            davinci_mockd::peer::container_id_from_cgroup(&cg)
        );
    }
    let dev = device0(&d);
    assert_eq!(dev["clients"], 4);
    assert_eq!(
        dev["memory"]["used_bytes"],
        expect_mem.values().sum::<u64>()
    );
    for c in clients {
        assert_eq!(c.release(), 0);
    }
    wait_until("every client is gone", || usage(&d).is_empty());
    assert_eq!(device0(&d)["memory"]["used_bytes"], 0);
}

#[test]
fn set_device_share_needs_admin_is_idempotent_and_refuses_to_strand_clients() {
    const GROUP: u32 = 4242;
    let d = Mockd::start(&["--no-root-admin", "--admin-group", &GROUP.to_string()]).unwrap();
    let root = nix::unistd::getuid().is_root();
    // This process (root here, but not in the admin group): EPERM, exit 4, nothing changes.
    let (code, v) = set_share(&d, true);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["results"][0]["status"], "error");
    assert_eq!(v["results"][0]["error"]["errno"], "EPERM");
    assert_eq!(device0(&d)["share_mode"], "exclusive");
    if !root {
        eprintln!("not root: cannot run davinci-smi with gid {GROUP}; admin cases skipped");
        return;
    }
    let admin = |args: &[&str]| {
        let mut a = args.to_vec();
        a.push("--json");
        let mut c = smi_cmd(&d, &a);
        c.gid(GROUP);
        let (code, out) = run(c);
        (code, serde_json::from_str::<Value>(&out).unwrap())
    };
    let set = ["set", "-t", "device-share", "-i", "0", "-d"];
    let (code, v) = admin(&[&set[..], &["1"]].concat());
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["results"][0]["changed"], true);
    // Twice: a no-op success.
    let (code, v) = admin(&[&set[..], &["1"]].concat());
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["results"][0]["changed"], false);
    // Two clients attached: going exclusive would strand one: EBUSY, exit 5.
    let a = Client::start(&d.path(0), &["hold"]);
    let b = Client::start(&d.path(0), &["hold"]);
    a.expect("ready");
    b.expect("ready");
    let (code, v) = admin(&[&set[..], &["0"]].concat());
    assert_eq!(code, 5, "{v}");
    assert_eq!(v["results"][0]["error"]["errno"], "EBUSY");
    assert_eq!(device0(&d)["share_mode"], "shared");
    // One left: allowed.
    assert_eq!(b.release(), 0);
    wait_until("one client left", || usage(&d).len() == 1);
    let (code, v) = admin(&[&set[..], &["0"]].concat());
    assert_eq!(code, 0, "{v}");
    assert_eq!(device0(&d)["share_mode"], "exclusive");
    assert_eq!(a.release(), 0);
}

#[test]
fn kill_9_mid_submission_releases_everything_and_others_finish() {
    let d = Mockd::start(&["--memory", "64M"]).unwrap();
    assert_eq!(set_share(&d, true).0, 0);
    let workers: Vec<Client> = (0..2)
        .map(|_| Client::start(&d.path(0), &["work", "--rounds", "150", "--hold"]))
        .collect();
    let victim = Client::start(&d.path(0), &["spin", "--elems", "4096"]);
    victim.expect("ready");
    victim.expect("progress");
    let vpid = victim.pid as u64;
    let before = usage(&d);
    assert_eq!(before[&vpid]["allocations"], 3);
    assert!(before[&vpid]["memory_bytes"].as_u64().unwrap() >= 3 * 16384);
    // A hostile connection sends garbage meanwhile; nobody else notices.
    {
        use davinci_mockd_proto::sockio::SeqPacket;
        let sock = SeqPacket::connect(std::path::Path::new(
            d.path(0).strip_prefix("mock:").unwrap(),
        ))
        .unwrap();
        for junk in [&b"\0\0\0\0"[..], &[0xff; 300], b"DVMD garbage frame"] {
            let _ = sock.send(junk, &[]);
        }
    }
    victim.kill9();
    wait_until("the killed client's usage disappears", || {
        !usage(&d).contains_key(&vpid)
    });
    let mut mem = 0;
    for w in &workers {
        w.expect("ready");
        let done = w.expect("done");
        assert_eq!(done["ok"], true, "{done}");
        mem += done["memory_bytes"].as_u64().unwrap();
    }
    let u = usage(&d);
    assert_eq!(u.len(), 2);
    assert_eq!(device0(&d)["memory"]["used_bytes"], mem);
    for w in workers {
        assert_eq!(w.release(), 0);
    }
    wait_until("all clients gone", || usage(&d).is_empty());
    assert_eq!(device0(&d)["memory"]["used_bytes"], 0);
}

#[test]
fn two_hundred_connect_kill_cycles_leave_the_counters_where_they_started() {
    let d = Mockd::start(&["--memory", "64M"]).unwrap();
    // Before any connection: the listeners, the acceptor threads, nothing else.
    let s0 = d.stats();
    assert_eq!(set_share(&d, true).0, 0);
    let base = device0(&d);
    assert_eq!(
        (
            base["clients"].as_u64(),
            base["memory"]["used_bytes"].as_u64()
        ),
        (Some(0), Some(0))
    );
    for i in 0..200u32 {
        let c = Client::start(&d.path(0), &["hold", "--mem", "40000"]);
        if i % 2 == 0 {
            // Killed while holding a context, a stream and memory.
            c.expect("ready");
        } else {
            // Killed somewhere during open or setup.
            std::thread::sleep(Duration::from_micros(u64::from(i % 7) * 300));
        }
        c.kill9();
    }
    wait_until("no clients and no memory in use", || {
        let dev = device0(&d);
        dev["clients"] == 0 && dev["memory"]["used_bytes"] == 0
    });
    assert!(usage(&d).is_empty());
    let mut now = d.stats();
    wait_until(
        "the daemon's descriptors, threads and mappings are back",
        || {
            now = d.stats();
            now == s0
        },
    );
    assert_eq!(now, s0);
    let end = device0(&d);
    assert_eq!(end["share_mode"], base["share_mode"]);
    assert_eq!(end["memory"], base["memory"]);
    // Still fully usable, exclusive again included.
    assert_eq!(set_share(&d, false).0, 0);
    let c = Client::start(&d.path(0), &["work", "--rounds", "5"]);
    c.expect("ready");
    assert_eq!(c.expect("done")["ok"], true);
}

#[test]
fn sigterm_removes_the_sockets_and_clients_see_the_device_go() {
    let mut d = Mockd::start(&["--devices", "2"]).unwrap();
    let dir = d.dir().to_path_buf();
    let c = Client::start(&d.path(1), &["hold"]);
    c.expect("ready");
    let st = d.terminate().unwrap();
    assert!(st.success(), "{st}");
    assert!(!dir.exists(), "sockets and their directory removed");
    let (code, out) = run({
        let mut c = Command::new(bin("testbin-davinci-smi"));
        c.args(["--device", &d.path(1), "info", "--json"]);
        c
    });
    assert_eq!(code, 3, "{out}");
    let e = Device::open(&d.path(0)).unwrap_err();
    assert!(e.is(Errno::ENODEV), "{e}");
    assert!(e.message().contains("davinci-mockd"), "{e}");
    assert_eq!(
        c.release(),
        0,
        "a client whose daemon went away still exits cleanly"
    );
}

#[test]
fn one_open_serves_other_threads_while_one_waits() {
    let d = Mockd::start(&[]).unwrap();
    let dev = Device::open(&d.path(0)).unwrap();
    let ctx = dev.create_context().unwrap();
    let ev = ctx.create_event().unwrap();
    let mut waiting = ctx.create_stream().unwrap();
    let mut other = ctx.create_stream().unwrap();
    // The stream stalls until the event's first record; its synchronize blocks in WAIT_EVENT
    // on the one socket.
    waiting
        .submit_desc(&davinci_shim::TaskDesc::event_wait(9, ev.handle(), 1))
        .unwrap();
    let waiter = std::thread::spawn(move || waiting.synchronize(Duration::from_secs(30)));
    std::thread::sleep(Duration::from_millis(100));
    // Were requests serialised behind that wait, these would hang until it timed out and the
    // waiter would then fail with ETIMEDOUT.
    for _ in 0..20 {
        assert_eq!(dev.query_info().unwrap().clients, 1);
    }
    assert!(
        !waiter.is_finished(),
        "the stream must still be stalled on the event"
    );
    let buf = dev.alloc(4096).unwrap();
    other
        .submit_desc(&davinci_shim::TaskDesc::fill(
            1,
            davinci_shim::DeviceMem::dev_addr(&buf),
            4096,
            7,
        ))
        .unwrap();
    ev.record(&mut other).unwrap();
    other.synchronize(Duration::from_secs(30)).unwrap();
    waiter.join().unwrap().unwrap();
    assert_eq!(
        davinci_shim::DeviceMem::read_vec::<u32>(&buf, 0, 4).unwrap(),
        vec![7; 4]
    );
}

/// Who sees whom (ABI 1.4, docs/abi.md LIST_CLIENTS): root's client is listed to root (an
/// admin) and not to another user running `davinci-smi`, who still sees how many clients the
/// device has, but not who they are.
#[test]
fn a_user_sees_only_their_own_clients_and_an_admin_sees_everyone() {
    if !nix::unistd::getuid().is_root() {
        eprintln!("not root: cannot run davinci-smi as another user; skipped");
        return;
    }
    // Group 65534 may connect, so uid/gid 65534 reaches the device.
    let d = Mockd::start(&["--share-mode", "shared", "--socket-group", "65534"]).unwrap();
    let a = Client::start(&d.path(0), &["hold"]);
    a.expect("ready");
    let listed = usage(&d);
    assert_eq!(
        listed.len(),
        1,
        "root (an admin) sees root's client: {listed:?}"
    );
    // The same query as uid/gid 65534 (nobody).
    let mut c = smi_cmd(&d, &["info", "-t", "usage", "-i", "0", "--json"]);
    c.uid(65534).gid(65534);
    let (code, out) = run(c);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(code, 0, "{v}");
    let clients = v["devices"][0]["clients"]
        .as_array()
        .expect("clients array");
    assert!(
        clients.is_empty(),
        "another user sees none of root's clients: {clients:?}"
    );
    let mut c = smi_cmd(&d, &["info", "-i", "0", "--json"]);
    c.uid(65534).gid(65534);
    let (code, out) = run(c);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["devices"][0]["clients"], 1, "the count stays public: {v}");
    assert_eq!(a.release(), 0);
}

/// Ctrl-C ends a workload whose device hung (issue 23): the round's `synchronize` is
/// interrupted (EINTR) instead of waiting out its timeout, and the report says the run was
/// interrupted, having checked no half round.
#[test]
fn ctrl_c_ends_a_workload_on_a_hung_device_without_waiting_for_the_timeout() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::io::Read;
    use std::process::Stdio;
    // Every stream hangs at its 40th task: the first round never completes.
    let d = Mockd::start(&["--inject", "hang-at=40"]).unwrap();
    let mut child = Command::new(bin("davinci-workload"))
        .args(["--device", &d.path(0), "--timeout-secs", "120", "--json"])
        .args(["--tasks", "1000", "--latency-samples", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start davinci-workload");
    // Under way and hung by then (a safety margin, not a measurement).
    std::thread::sleep(Duration::from_secs(2));
    assert!(child.try_wait().unwrap().is_none(), "the run ended early");
    let t0 = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < LONG,
            "the workload still runs {LONG:?} after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = t0.elapsed();
    println!("mockd: Ctrl-C ended a hung workload in {took:?}");
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["interrupted"], true, "{v}");
    assert_eq!(v["rounds"], 0, "{v}");
    assert!(
        took < Duration::from_secs(60),
        "Ctrl-C took {took:?}: the wait ran to its timeout"
    );
}

/// `--inject FAULT@pid=N,streams=1` (issue 23): only the first stream of that process is
/// armed; the stream a recovering runtime creates next runs clean, and another process's
/// streams never fault.
#[test]
fn a_targeted_inject_faults_one_stream_of_one_process() {
    let me = std::process::id();
    let rule = format!("error-at=2:EFAULT@pid={me},streams=1");
    let d = Mockd::start(&["--inject", &rule]).unwrap();
    let dev = Device::open(&d.path(0)).unwrap();
    let ctx = dev.create_context().unwrap();
    let buf = dev.alloc(4096).unwrap();
    let run = |s: &mut davinci_shim::Stream| {
        for v in 0..3 {
            s.submit(&davinci_shim::task::fill(&buf, v).unwrap())
                .unwrap();
        }
        s.synchronize(Duration::from_secs(30))
    };
    let mut first = ctx.create_stream().unwrap();
    let e = run(&mut first).unwrap_err();
    assert!(e.is(Errno::EIO) && e.message().contains("EFAULT"), "{e}");
    // Recovery: a new stream, not armed (the rule was for one stream).
    drop(first);
    let mut second = ctx.create_stream().unwrap();
    run(&mut second).unwrap();
    drop((second, ctx, buf, dev));
    // Another process (a test client) is never armed.
    let c = Client::start(&d.path(0), &["work", "--rounds", "5"]);
    c.expect("ready");
    assert_eq!(
        c.expect("done")["ok"],
        true,
        "another process's streams were armed"
    );
}

/// Two processes share a buffer through EXPORT_MEMORY / IMPORT_MEMORY (issue 23): the
/// exporter's bytes reach the importer and the importer's FILL reaches the exporter.
#[test]
fn two_processes_share_a_buffer_by_token() {
    let d = Mockd::start(&[]).unwrap();
    assert_eq!(set_share(&d, true).0, 0);
    let done = davinci_tests::ipc::share_with_another_process(&d.path(0));
    assert_eq!(done["read"], 0x1234_5678u32);
}

/// GET_IDENTITY's UUID survives a daemon restart and a share-mode change (derived from the
/// host's machine id and the index), differs between two devices of one daemon, and
/// `--uuid-seed` gives a second daemon on the host UUIDs of its own (issue 24).
#[test]
fn device_uuids_survive_restarts_and_share_changes() {
    let uuids = |d: &Mockd| -> Vec<[u8; 16]> {
        (0..2)
            .map(|n| {
                davinci_shim::Control::open(&d.path(n))
                    .expect("control open")
                    .identity()
                    .expect("GET_IDENTITY")
                    .uuid
            })
            .collect()
    };
    let mut first = Mockd::start(&["--devices", "2"]).expect("start davinci-mockd");
    let before = uuids(&first);
    assert_ne!(before[0], before[1], "two devices, two UUIDs");
    assert_eq!(set_share(&first, true).0, 0);
    assert_eq!(uuids(&first), before, "a share-mode change keeps the UUID");
    first.terminate();
    let second = Mockd::start(&["--devices", "2"]).expect("restart davinci-mockd");
    assert_eq!(uuids(&second), before, "a restart keeps the UUIDs");
    let seeded = Mockd::start(&["--devices", "2", "--uuid-seed", "second daemon"]).unwrap();
    let other = uuids(&seeded);
    assert!(
        other.iter().all(|u| !before.contains(u)),
        "{other:?} vs {before:?}"
    );
}
