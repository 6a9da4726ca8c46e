//! `davinci-smi` against a real `davinci-mockd` with client processes: npu-smi's `-c`, a
//! device named twice, a refused `set` naming the clients it would strand, `--query` CSV and
//! `--loop`, a tenant's share of the slots (`-t tenant-share`). (The same behaviours against fake devices: the unit tests in operators/smi/src; the binary
//! without a device: operators/smi/tests/cli.rs.)
#![forbid(unsafe_code)]

use std::process::Command;

use davinci_smi::test_util::{doc, run};
use davinci_tests::mockd::{bin, Mockd, TestClient as Client};
use serde_json::Value;

/// `davinci-smi --socket-dir DIR ARGS`: exit status, stdout, stderr.
fn smi(d: &Mockd, args: &[&str]) -> (i32, String, String) {
    run(Command::new(bin("testbin-davinci-smi"))
        .arg("--socket-dir")
        .arg(d.dir())
        .args(args))
}

/// A daemon where this user may change sharing.
fn daemon(devices: &str) -> Mockd {
    let uid = nix::unistd::getuid().as_raw().to_string();
    Mockd::start(&["--devices", devices, "--memory", "64M", "--admin-uid", &uid]).unwrap()
}

const SET: [&str; 6] = ["set", "-t", "device-share", "-i", "0", "-d"];

#[test]
fn a_refused_switch_to_exclusive_names_the_clients_it_would_strand() {
    let d = daemon("1");
    let (code, out, err) = smi(&d, &[&SET[..], &["1", "-c", "0"]].concat());
    assert_eq!(code, 0, "{out}{err}");
    let a = Client::start(&d.path(0), &["hold"]);
    let b = Client::start(&d.path(0), &["hold"]);
    a.expect("ready");
    b.expect("ready");
    let uid = nix::unistd::getuid().as_raw();
    // Text: the result on stdout, the error naming both clients on stderr.
    let (code, out, err) = smi(&d, &[&SET[..], &["0"]].concat());
    assert_eq!(code, 5, "{out}{err}");
    assert!(
        out.contains("Status                         : Fail"),
        "{out}"
    );
    assert!(!out.contains("EBUSY"), "{out}");
    assert!(
        err.starts_with("davinci-smi: device 0: SET_DEVICE_SHARE failed: EBUSY"),
        "{err}"
    );
    for c in [&a, &b] {
        assert!(
            err.contains(&format!("pid {} (uid {uid}, ", c.pid)),
            "{err}"
        );
    }
    // JSON: the clients as a list, and the mode that stays in force.
    let (code, out, _) = smi(&d, &[&SET[..], &["0", "--json"]].concat());
    assert_eq!(code, 5);
    let r = &doc(&out)["results"][0];
    assert_eq!(r["error"]["errno"], "EBUSY");
    assert_eq!(r["share_mode"], "shared");
    let mut held: Vec<u64> = r["held_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["pid"].as_u64().unwrap())
        .collect();
    held.sort_unstable();
    let mut want = vec![u64::from(a.pid), u64::from(b.pid)];
    want.sort_unstable();
    assert_eq!(held, want);
    assert_eq!(b.release(), 0);
    assert_eq!(a.release(), 0);
}

#[test]
fn chip_0_and_a_device_named_twice() {
    let d = daemon("2");
    let again = format!("mock:{}/./davinci0.sock", d.dir().display());
    let (code, out, err) = smi(
        &d,
        &[
            "--device",
            &d.path(0),
            "--device",
            &again,
            "--device",
            &d.path(0),
            "info",
            "-t",
            "device-share",
            "-i",
            "0",
            "-c",
            "0",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v = doc(&out);
    assert_eq!(v["devices"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["devices"][0]["path"], d.path(0));
    let (code, out, err) = smi(&d, &["info", "-c", "1"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("exactly one chip, id 0"), "{err}");
}

#[test]
fn query_csv_and_loop() {
    let d = daemon("2");
    let c = Client::start(&d.path(1), &["hold"]);
    c.expect("ready");
    let (code, out, err) = smi(
        &d,
        &[
            "info",
            "-t",
            "usage",
            "--query",
            "index,pid,process_name,streams,tasks.queued",
            "--format",
            "csv",
        ],
    );
    assert_eq!(code, 0, "{err}");
    // The process name is the kernel's comm of the client: at most 15 bytes.
    assert_eq!(
        out,
        format!(
            "index, pid, process_name, streams, tasks.queued\n1, {}, davinci-testcli, 1, 0\n",
            c.pid
        )
    );
    let (code, out, err) = smi(
        &d,
        &[
            "--query",
            "index,clients,share_mode",
            "--format=csv,noheader",
            "--loop",
            "0.01",
            "--count",
            "2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "0, 0, exclusive\n1, 1, exclusive\n".repeat(2));
    let (code, out, _) = smi(
        &d,
        &[
            "info", "-i", "1", "--json", "--loop", "0.01", "--count", "3",
        ],
    );
    assert_eq!(code, 0);
    let docs: Vec<Value> = out.lines().map(doc).collect();
    assert_eq!(docs.len(), 3);
    assert!(docs.iter().all(|v| v["devices"][0]["clients"] == 1));
    assert_eq!(c.release(), 0);
}

/// An argument that is not UTF-8 is a usage error that says which, for both binaries (they
/// panicked with exit status 101 before: issue 24).
#[test]
fn arguments_that_are_not_utf8_are_usage_errors_not_panics() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"\xff");
    for (name, args) in [
        (
            "testbin-davinci-smi",
            vec![std::ffi::OsStr::new("info"), bad],
        ),
        ("davinci-mockd", vec![bad]),
    ] {
        let out = Command::new(bin(name)).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains("is not valid UTF-8"), "{name}: {err}");
    }
    let out = Command::new(bin("testbin-davinci-smi"))
        .args([
            std::ffi::OsStr::new("info"),
            bad,
            std::ffi::OsStr::new("--json"),
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["command"], "usage-error", "{v}");
    assert_eq!(v["exit_code"], 2, "{v}");
}

/// ABI 1.4 in the tools' words (issue 24): nvidia-smi's `uuid` and `name` are the device's
/// GET_IDENTITY, `utilization.gpu` shows a working client's busy time, and npu-smi's health
/// turns Warning while a stream is hung.
#[test]
fn identity_utilization_and_health_reach_the_operator() {
    let d = Mockd::start(&["--inject", "hang-at=1@streams=1"]).unwrap();
    let id = davinci_shim::Control::open(&d.path(0))
        .unwrap()
        .identity()
        .unwrap();
    let (code, out, err) = smi(
        &d,
        &[
            "--query-gpu=uuid,name,utilization.gpu",
            "--format=csv,noheader",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        format!("{}, davinci_mock, 0 %", id.uuid_string()),
        "{err}"
    );
    // npu-smi, by its name: healthy, then a client's first stream hangs on its first task.
    let dir = std::env::temp_dir().join(format!("npu-smi-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let npu = dir.join("npu-smi");
    let _ = std::fs::remove_file(&npu);
    std::os::unix::fs::symlink(bin("testbin-davinci-smi"), &npu).unwrap();
    let health = || {
        let (code, out, err) = run(Command::new(&npu)
            .env("DAVINCI_SOCKET_DIR", d.dir())
            .args(["info", "-t", "health", "-i", "0"]));
        assert_eq!(code, 0, "{err}");
        out
    };
    assert!(
        health().contains("\tHealth Status                  : OK\n"),
        "{}",
        health()
    );
    let mut hung = Client::start(&d.path(0), &["spin"]);
    let mut now = String::new();
    for _ in 0..100 {
        now = health();
        if now.contains("Warning") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        now.contains("\tHealth Status                  : Warning\n")
            && now.contains("1 stream(s) stopped on a task that does not finish"),
        "{now}"
    );
    hung.sigkill();
    let _ = hung.reap(std::time::Duration::from_secs(10));

    // A client at work: the device is busy.
    let d2 = Mockd::start(&[]).unwrap();
    let mut worker = Client::start(&d2.path(0), &["spin"]);
    worker.expect("ready");
    worker.expect("progress");
    let mut busy = 0;
    for _ in 0..10 {
        let (_, out, _) = smi(
            &d2,
            &[
                "--query-gpu=utilization.gpu",
                "--format=csv,noheader,nounits",
            ],
        );
        busy = out.trim().parse::<u32>().unwrap_or(0);
        if busy > 0 {
            break;
        }
    }
    assert!(busy > 0 && busy <= 100, "{busy}");
    worker.sigkill();
    let _ = worker.reap(std::time::Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Discovery trust (issue 24): in a sticky, world-writable socket directory a socket another
/// user planted (uid 1000's `davinci1.sock` next to root's daemon) is left out, said on
/// stderr and in the JSON; named explicitly it is listed, and refused when opened. Needs root
/// (to give the planted socket to another user).
#[test]
fn a_socket_another_user_planted_is_ignored_and_said() {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::getuid().is_root() {
        eprintln!("skipped: needs root to plant another user's socket");
        return;
    }
    let d = Mockd::start(&[]).unwrap();
    std::fs::set_permissions(d.dir(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let planted = d.dir().join("davinci1.sock");
    let _listener = davinci_mockd_proto::sockio::SeqListener::bind(&planted, 0o666).unwrap();
    std::os::unix::fs::chown(&planted, Some(1000), Some(1000)).unwrap();
    let (code, out, err) = smi(&d, &["list", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{v}");
    assert_eq!(devices[0]["id"], 0);
    let ignored = v["ignored"].as_array().expect("ignored in the JSON");
    assert_eq!(
        ignored[0]["path"],
        format!("mock:{}", planted.display()),
        "{v}"
    );
    assert!(ignored[0]["why"]
        .as_str()
        .unwrap()
        .contains("owned by uid 1000"));
    assert!(
        err.contains(&format!("warning: ignoring mock:{}", planted.display())),
        "{err}"
    );
    // Text mode says it too. Named explicitly it is listed as named, but opening it applies
    // the same rule (issue 41): refused, saying whose it is, unless that uid is named as the
    // daemon's.
    let (_, out, err) = smi(&d, &["list"]);
    assert!(
        !out.contains("davinci1.sock") && err.contains("owned by uid 1000"),
        "{out}{err}"
    );
    let named = |args: &[&str]| {
        let mut c = Command::new(bin("testbin-davinci-smi"));
        c.arg("--device")
            .arg(format!("mock:{}", planted.display()))
            .args(args)
            .env_remove("DAVINCI_MOCKD_UID");
        run(&mut c)
    };
    let (_, out, _) = named(&["list"]);
    assert!(out.contains("davinci1.sock"), "{out}");
    let (code, _, err) = named(&["info"]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "EACCES: refusing {}: the socket is owned by uid 1000",
            planted.display()
        )) && err.contains("DAVINCI_MOCKD_UID=1000"),
        "{err}"
    );
}

/// TENANT_SHARE (ABI 1.5) through `davinci-smi`: an admin makes the tenant of a client (its
/// own: an admin's open, which holds no slot) count for two slots and reads it back (the tenant with a client, and a container by its whole id
/// that has none); a container prefix nothing matches, more shares than slots, and an operator
/// who is not the daemon's admin are refused with the daemon's words and their exit statuses.
#[test]
fn an_admin_sets_a_tenants_share_and_reads_it_back() {
    let uid = nix::unistd::getuid().as_raw().to_string();
    let d = Mockd::start(&[
        "--devices",
        "1",
        "--share-mode",
        "shared",
        "--tenant-slots",
        "4",
        "--admin-uid",
        &uid,
        "--tenant-share",
        "container:feedbeef=0",
    ])
    .unwrap();
    let c = Client::start(&d.path(0), &["hold"]);
    c.expect("ready");
    // Client and daemon share a container (or the host): the client's tenant is its user.
    let me = format!("user:{uid}");
    let set = ["set", "-t", "tenant-share", "-i", "0", "--tenant"];
    let (code, out, err) = smi(&d, &[&set[..], &[&me, "-d", "2", "--json"]].concat());
    assert_eq!(code, 0, "{out}{err}");
    let v = doc(&out);
    assert_eq!(v["command"], "set-tenant-share");
    let r = &v["results"][0];
    assert_eq!(r["status"], "ok", "{v}");
    assert_eq!(r["changed"], true);
    assert_eq!(
        (r["previous_shares"].as_u64(), r["shares"].as_u64()),
        (Some(1), Some(2))
    );
    // The client is an admin's (this user's), which takes no slot: none is held.
    assert_eq!(
        (r["slots"].as_u64(), r["free_slots"].as_u64()),
        (Some(4), Some(4))
    );
    assert_eq!(
        (r["holds_slots"].as_bool(), r["has_opens"].as_bool()),
        (Some(false), Some(true))
    );
    // Read back: the tenants with a client, and one named by its whole id.
    let (code, out, err) = smi(&d, &["info", "-t", "tenant-share", "-i", "0", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = doc(&out);
    assert_eq!(v["command"], "info-tenant-share");
    let t = &v["devices"][0]["tenants"];
    assert_eq!(t.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(t[0]["tenant"], me.as_str());
    assert_eq!(
        (t[0]["shares"].as_u64(), t[0]["has_opens"].as_bool()),
        (Some(2), Some(true))
    );
    let (code, out, err) = smi(
        &d,
        &[
            "info",
            "-t",
            "tenant-share",
            "--tenant",
            "container:feedbeef",
            "--exact",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("| container:feedbeef | 0      | No (no open) "),
        "{out}"
    );
    // A prefix no client's container has; more shares than the device has slots.
    let (code, _, err) = smi(&d, &[&set[..], &["container:feed", "-d", "1"]].concat());
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("no container whose id starts with 'feed'"),
        "{err}"
    );
    let (code, out, err) = smi(&d, &[&set[..], &[&me, "-d", "5"]].concat());
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.starts_with("davinci-smi: device 0: TENANT_SHARE failed: EINVAL: "),
        "{err}"
    );
    assert_eq!(c.release(), 0);
    // Not the daemon's admin: EPERM, exit 4, with the daemon's hint on becoming one.
    let strict =
        Mockd::start(&["--no-root-admin", "--no-owner-admin", "--admin-uid", "4242"]).unwrap();
    let (code, out, err) = smi(&strict, &[&set[..], &["user:1000", "-d", "2"]].concat());
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        out.contains("Status                         : Fail"),
        "{out}"
    );
    assert!(
        err.contains("TENANT_SHARE failed: EPERM") && err.contains("--admin-uid"),
        "{err}"
    );
    let (code, out, _) = smi(
        &strict,
        &[
            "info",
            "-t",
            "tenant-share",
            "--tenant",
            "user:1000",
            "--json",
        ],
    );
    assert_eq!(code, 4);
    assert_eq!(doc(&out)["devices"][0]["error"]["errno"], "EPERM");
}
