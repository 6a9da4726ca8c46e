//! Command logic against fake devices: output shapes, JSON schema, exit codes.

use super::*;
use davinci_uapi::{ClientUsage, DeviceInfo, Errno, ShareMode};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

#[derive(Clone)]
struct FakeDev {
    state: Rc<RefCell<FakeState>>,
}

struct FakeState {
    info: DeviceInfo,
    clients: Vec<ClientUsage>,
    admin: bool,
    /// Every request fails with ENODEV (the daemon went away).
    down: bool,
}

fn gone() -> SmiError {
    SmiError::new(
        Errno::ENODEV,
        "GET_INFO failed: ENODEV: the device went away",
    )
}

impl DeviceAccess for FakeDev {
    fn info(&self) -> Result<DeviceInfo, SmiError> {
        let s = self.state.borrow();
        if s.down {
            return Err(gone());
        }
        let mut i = s.info;
        i.clients = s.clients.len() as u32;
        Ok(i)
    }
    fn share(&self) -> Result<(ShareMode, u32), SmiError> {
        let s = self.state.borrow();
        if s.down {
            return Err(gone());
        }
        Ok((
            ShareMode::from_u32(s.info.share_mode).unwrap(),
            s.clients.len() as u32,
        ))
    }
    fn set_share(&self, mode: ShareMode) -> Result<(), SmiError> {
        let mut s = self.state.borrow_mut();
        if !s.admin {
            return Err(SmiError::new(
                Errno::EPERM,
                "SET_DEVICE_SHARE failed: EPERM: not admin",
            ));
        }
        if mode == ShareMode::Exclusive && s.clients.len() > 1 {
            return Err(SmiError::new(
                Errno::EBUSY,
                "SET_DEVICE_SHARE failed: EBUSY: stranded",
            ));
        }
        s.info.share_mode = mode as u32;
        Ok(())
    }
    fn clients(&self) -> Result<Vec<ClientUsage>, SmiError> {
        let s = self.state.borrow();
        if s.down {
            return Err(gone());
        }
        Ok(s.clients.clone())
    }
}

#[derive(Default)]
struct FakeOpener {
    devs: HashMap<String, FakeDev>,
}

impl Opener for FakeOpener {
    fn open(&self, path: &str) -> Result<Box<dyn DeviceAccess>, SmiError> {
        match self.devs.get(path) {
            Some(d) => Ok(Box::new(d.clone())),
            None => Err(SmiError::new(
                Errno::ENODEV,
                format!("open failed: ENODEV: {path}: no such socket"),
            )),
        }
    }
}

fn usage_of(pid: u32, container: &str, mem: u64) -> ClientUsage {
    let mut u = ClientUsage {
        client_id: pid + 1000,
        pid,
        uid: 0,
        contexts: 1,
        streams: 2,
        events: 0,
        allocations: 3,
        memory_bytes: mem,
        tasks_submitted: 10,
        tasks_completed: 9,
        tasks_queued: 1,
        comm: ClientUsage::comm_field(&format!("proc{pid}")),
        ..ClientUsage::default()
    };
    u.container[..container.len()].copy_from_slice(container.as_bytes());
    u
}

fn fake(id: u32, clients: Vec<ClientUsage>, shared: bool, admin: bool) -> FakeDev {
    FakeDev {
        state: Rc::new(RefCell::new(FakeState {
            info: DeviceInfo {
                abi_major: 1,
                device_id: id,
                memory_size: 256 << 20,
                memory_used: clients.iter().map(|c| c.memory_bytes).sum(),
                client_memory_limit: 256 << 20,
                max_clients: 64,
                share_mode: shared as u32,
                ..DeviceInfo::default()
            },
            clients,
            admin,
            down: false,
        })),
    }
}

struct World {
    opener: FakeOpener,
    disc: Discovery,
}

fn world(devs: Vec<(&str, FakeDev)>) -> World {
    World {
        opener: FakeOpener {
            devs: devs.into_iter().map(|(p, d)| (p.to_string(), d)).collect(),
        },
        disc: Discovery {
            device_env: None,
            dev_dir: "/nonexistent-dev".into(),
            default_socket_dir: "/nonexistent-socks".into(),
        },
    }
}

fn smi(w: &World, args: &[&str]) -> (i32, String, String) {
    smi_sleeping(w, args, &mut |d| panic!("slept {d:?} without --loop"))
}

/// [`smi`] with `--loop`'s pauses handed to `sleep` (which may change the fakes).
fn smi_sleeping(
    w: &World,
    args: &[&str],
    sleep: &mut dyn FnMut(std::time::Duration),
) -> (i32, String, String) {
    let mut argv = vec!["davinci-smi".to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_with(&argv, &w.disc, &w.opener, &mut out, &mut err, sleep);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn json(s: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"));
    assert_eq!(v["schema"], "davinci-smi/v1");
    v
}

const A: &str = "mock:/s/davinci0.sock";
const B: &str = "mock:/s/davinci1.sock";

fn two() -> World {
    world(vec![
        (
            A,
            fake(
                0,
                vec![usage_of(100, "abcdef0123456789abcdef", 4 << 20)],
                false,
                true,
            ),
        ),
        (B, fake(1, vec![], true, true)),
    ])
}

const BOTH: [&str; 4] = ["--device", A, "--device", B];

#[test]
fn usage_errors_exit_2_and_help_exits_0() {
    let w = two();
    for bad in [
        &["set", "-t", "device-share", "-i", "0", "-d", "2"][..],
        &["set", "-t", "device-share", "-d", "1"],
        &["set", "-t", "frobnicate", "-i", "0", "-d", "1"],
        &["info", "-t", "nope"],
        &["info", "-i", "x"],
        &["bogus"],
    ] {
        let (code, out, err) = smi(&w, bad);
        assert_eq!(code, exit::USAGE, "{bad:?}: {out}{err}");
        assert!(!err.is_empty());
    }
    let (code, out, _) = smi(&w, &["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("Exit status: 0 ok"), "{out}");
    let (code, out, _) = smi(&w, &["set", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--yes"));
}

#[test]
fn list_in_every_spelling() {
    let w = two();
    for args in [&["-l"][..], &["list"], &["info", "-l"]] {
        let mut a: Vec<&str> = BOTH.to_vec();
        a.extend_from_slice(args);
        let (code, out, _) = smi(&w, &a);
        assert_eq!(code, 0);
        assert!(out.contains(A) && out.contains(B), "{out}");
    }
    let (_, out, _) = smi(&w, &["--device", A, "--device", B, "list", "--json"]);
    let v = json(&out);
    assert_eq!(v["command"], "list");
    assert_eq!(v["devices"][1]["id"], 1);
    assert_eq!(v["devices"][1]["path"], B);
}

#[test]
fn info_table_and_json() {
    let w = two();
    let mut a = BOTH.to_vec();
    a.push("info");
    let (code, out, _) = smi(&w, &a);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("| 0      | OK     | 4.0 / 256.0"), "{out}");
    assert!(out.contains("exclusive") && out.contains("shared"));
    assert!(
        out.contains("abcdef012345"),
        "container shortened to 12: {out}"
    );
    a.push("--json");
    let v = json(&smi(&w, &a).1);
    assert_eq!(v["command"], "info");
    assert_eq!(v["exit_code"], 0);
    let d0 = &v["devices"][0];
    assert_eq!(d0["health"], "ok");
    assert_eq!(d0["memory"]["used_bytes"], 4 << 20);
    assert_eq!(d0["memory"]["total_bytes"], 256 << 20);
    assert_eq!(d0["clients"], 1);
    assert_eq!(d0["share_mode"], "exclusive");
    assert_eq!(d0["device_share"], false);
    assert_eq!(d0["error"], serde_json::Value::Null);
    assert_eq!(v["devices"][1]["device_share"], true);
}

#[test]
fn unreachable_devices_are_reported_per_device() {
    let w = two();
    let dead = "mock:/s/davinci7.sock";
    let (code, out, _) = smi(&w, &["--device", A, "--device", dead, "info", "--json"]);
    assert_eq!(code, exit::PARTIAL);
    let v = json(&out);
    assert_eq!(v["exit_code"], exit::PARTIAL);
    assert_eq!(v["devices"][1]["health"], "unreachable");
    assert_eq!(v["devices"][1]["id"], 7);
    assert_eq!(v["devices"][1]["error"]["errno"], "ENODEV");
    assert_eq!(v["devices"][1]["error"]["code"], 19);
    let (code, _, _) = smi(&w, &["--device", dead, "info"]);
    assert_eq!(code, exit::NOT_FOUND);
}

#[test]
fn nothing_found_and_unknown_ids_exit_3() {
    let w = two();
    let (code, _, err) = smi(&w, &["info"]);
    assert_eq!(code, exit::NOT_FOUND);
    assert!(err.contains("no davinci devices found"), "{err}");
    let (code, out, _) = smi(&w, &["info", "--json"]);
    assert_eq!(code, exit::NOT_FOUND);
    let v = json(&out);
    assert_eq!(v["error"]["errno"], "ENODEV");
    assert_eq!(v["exit_code"], 3);
    let mut a = BOTH.to_vec();
    a.extend(["info", "-t", "usage", "-i", "5"]);
    let (code, _, err) = smi(&w, &a);
    assert_eq!(code, exit::NOT_FOUND);
    assert!(err.contains("no device with id 5"), "{err}");
}

#[test]
fn device_share_query() {
    let w = two();
    let mut a = BOTH.to_vec();
    a.extend(["info", "-t", "device-share", "-i", "1"]);
    let (code, out, _) = smi(&w, &a);
    assert_eq!(code, 0);
    assert!(
        out.contains("Device-share Status            : True"),
        "{out}"
    );
    assert!(!out.contains("Device ID                      : 0"));
    a.push("--json");
    let v = json(&smi(&w, &a).1);
    assert_eq!(v["command"], "info-device-share");
    assert_eq!(v["devices"].as_array().unwrap().len(), 1);
    assert_eq!(v["devices"][0]["device_share"], true);
    assert_eq!(v["devices"][0]["share_mode"], "shared");
    assert_eq!(v["devices"][0]["clients"], 0);
}

#[test]
fn usage_lists_clients() {
    let w = two();
    let mut a = BOTH.to_vec();
    a.extend(["info", "-t", "usage", "-i", "0", "--json"]);
    let v = json(&smi(&w, &a).1);
    assert_eq!(v["command"], "info-usage");
    let c = &v["devices"][0]["clients"][0];
    assert_eq!(c["pid"], 100);
    assert_eq!(c["client_id"], 1100);
    assert_eq!(c["container_id"], "abcdef0123456789abcdef");
    assert_eq!(c["streams"], 2);
    assert_eq!(c["allocations"], 3);
    assert_eq!(c["memory_bytes"], 4 << 20);
    assert_eq!(c["tasks_submitted"], 10);
    assert_eq!(c["tasks_completed"], 9);
    let (_, text, _) = smi(&w, &a[..a.len() - 1]);
    assert!(text.contains("| 100 "), "{text}");
}

#[test]
fn set_is_idempotent_and_reports_per_device() {
    let w = two();
    let mut a = BOTH.to_vec();
    a.extend(["set", "-t", "device-share", "-i", "0", "-d", "1", "--json"]);
    let v = json(&smi(&w, &a).1);
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["requested"]["device_share"], true);
    let r = &v["results"][0];
    assert_eq!(
        (r["status"].as_str(), r["changed"].as_bool()),
        (Some("ok"), Some(true))
    );
    assert_eq!(r["previous_share_mode"], "exclusive");
    // Twice: still success, nothing changed.
    let (code, out, _) = smi(&w, &a);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["results"][0]["changed"], false);
    // -y accepted; -i all touches both; the text says what happened.
    let mut b = BOTH.to_vec();
    b.extend(["set", "-t", "device-share", "-i", "all", "-d", "0", "-y"]);
    let (code, out, _) = smi(&w, &b);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.matches("Status                         : OK").count(),
        2,
        "{out}"
    );
    assert!(out.contains("device-share disabled (was enabled)"), "{out}");
}

#[test]
fn set_failures_have_their_own_exit_codes() {
    let busy = world(vec![(
        A,
        fake(0, vec![usage_of(1, "", 0), usage_of(2, "", 0)], true, true),
    )]);
    let (code, out, _) = smi(
        &busy,
        &[
            "--device",
            A,
            "set",
            "-t",
            "device-share",
            "-i",
            "0",
            "-d",
            "0",
        ],
    );
    assert_eq!(code, exit::BUSY);
    assert!(
        out.contains("Status                         : Fail"),
        "{out}"
    );
    let denied = world(vec![(A, fake(0, vec![], false, false))]);
    let (code, out, _) = smi(
        &denied,
        &[
            "--device",
            A,
            "set",
            "-t",
            "device-share",
            "-i",
            "0",
            "-d",
            "1",
            "--json",
        ],
    );
    assert_eq!(code, exit::PERMISSION);
    let v = json(&out);
    assert_eq!(v["results"][0]["status"], "error");
    assert_eq!(v["results"][0]["error"]["errno"], "EPERM");
    assert_eq!(v["results"][0]["changed"], serde_json::Value::Null);
    // One device refuses, one accepts: partial.
    let mixed = world(vec![
        (A, fake(0, vec![], false, false)),
        (B, fake(1, vec![], false, true)),
    ]);
    let mut a = BOTH.to_vec();
    a.extend([
        "set",
        "-t",
        "device-share",
        "-i",
        "all",
        "-d",
        "1",
        "--json",
    ]);
    let (code, out, _) = smi(&mixed, &a);
    assert_eq!(code, exit::PARTIAL);
    let v = json(&out);
    assert_eq!(v["results"][0]["status"], "error");
    assert_eq!(v["results"][1]["status"], "ok");
}

#[test]
fn combine_classes() {
    let busy = SmiError::new(Errno::EBUSY, "b");
    let perm = SmiError::new(Errno::EPERM, "p");
    assert_eq!(combine(&[None, None]), 0);
    assert_eq!(combine(&[Some(&busy)]), exit::BUSY);
    assert_eq!(combine(&[Some(&busy), Some(&busy)]), exit::BUSY);
    assert_eq!(combine(&[Some(&busy), Some(&perm)]), exit::OTHER);
    assert_eq!(combine(&[Some(&busy), None]), exit::PARTIAL);
    assert_eq!(SmiError::new(Errno::EPROTO, "x").exit_code(), exit::OTHER);
}

fn args<'a>(pre: &[&'a str], rest: &[&'a str]) -> Vec<&'a str> {
    let mut a = pre.to_vec();
    a.extend_from_slice(rest);
    a
}

/// A `usage-error` document on stdout, nothing on stderr, exit 2.
fn assert_json_usage_error(w: &World, a: &[&str]) -> String {
    let (code, out, err) = smi(w, a);
    assert_eq!(code, exit::USAGE, "{a:?}: {out}{err}");
    assert_eq!(err, "", "{a:?}: stderr must stay empty with --json");
    let v = json(&out);
    assert_eq!(v["command"], "usage-error", "{a:?}: {v}");
    assert_eq!(v["exit_code"], exit::USAGE);
    assert_eq!(v["error"]["errno"], serde_json::Value::Null);
    let msg = v["error"]["message"].as_str().unwrap().to_string();
    assert!(!msg.is_empty() && !msg.starts_with("error:"), "{msg}");
    assert!(!msg.contains("For more information"), "{msg}");
    msg
}

#[test]
fn chip_zero_is_accepted_for_info_and_set() {
    let w = two();
    for a in [
        &["info", "-t", "device-share", "-i", "0", "-c", "0"][..],
        &["info", "-c", "0"],
        &["info", "-t", "usage", "-i", "1", "--chip", "0"],
        &["set", "-t", "device-share", "-i", "1", "-c", "0", "-d", "1"],
    ] {
        let (code, out, err) = smi(&w, &args(&BOTH, a));
        assert_eq!(code, 0, "{a:?}: {out}{err}");
    }
    let (_, out, _) = smi(
        &w,
        &args(&BOTH, &["info", "-t", "device-share", "-i", "0", "-c", "0"]),
    );
    assert!(
        out.contains("Device-share Status            : False"),
        "{out}"
    );
}

#[test]
fn other_chips_are_a_usage_error() {
    let w = two();
    for chip in ["1", "7", "x", "-1"] {
        let a = args(
            &BOTH,
            &["info", "-t", "device-share", "-i", "0", "-c", chip],
        );
        let (code, out, err) = smi(&w, &a);
        assert_eq!(code, exit::USAGE, "{chip}: {out}{err}");
        assert!(err.contains("exactly one chip, id 0"), "{err}");
        assert_eq!(out, "");
        let msg = assert_json_usage_error(&w, &args(&a, &["--json"]));
        assert!(msg.contains("exactly one chip, id 0"), "{msg}");
    }
    let a = ["set", "-t", "device-share", "-i", "0", "-c", "1", "-d", "1"];
    assert_eq!(smi(&w, &args(&BOTH, &a)).0, exit::USAGE);
    // Nothing was set.
    let v = json(&smi(&w, &args(&BOTH, &["info", "--json"])).1);
    assert_eq!(v["devices"][0]["share_mode"], "exclusive");
}

#[test]
fn json_argument_errors_are_json_documents() {
    let w = two();
    for bad in [
        &["set", "-t", "device-share", "-i", "0", "-d", "2", "--json"][..],
        &["--json", "set", "-t", "device-share", "-d", "1"],
        &["info", "-t", "nope", "--json"],
        &["info", "-i", "x", "--json"],
        &["--json", "bogus"],
        &["--json", "--frobnicate"],
        &["info", "--query", "nope", "--json"],
        &["info", "--query", "index", "--json"],
        &["--json", "--count", "2"],
    ] {
        assert_json_usage_error(&w, &args(&BOTH, bad));
    }
    let msg = assert_json_usage_error(&w, &["info", "-t", "nope", "--json"]);
    assert!(msg.contains("'nope'") && msg.contains("usage"), "{msg}");
    // Without --json: clap's text on stderr, nothing on stdout.
    let (code, out, err) = smi(&w, &["info", "-t", "nope"]);
    assert_eq!((code, out.as_str()), (exit::USAGE, ""));
    assert!(err.starts_with("error: invalid value 'nope'"), "{err}");
}

#[test]
fn text_errors_go_to_stderr() {
    let w = two();
    let dead = "mock:/s/davinci7.sock";
    let pair = ["--device", A, "--device", dead];
    let msg = "open failed: ENODEV: mock:/s/davinci7.sock: no such socket";
    for (a, on_stdout) in [
        (&["info"][..], "| 7      | Unreachable"),
        (
            &["info", "-t", "device-share"],
            "Status                         : Unreachable",
        ),
        (
            &["info", "-t", "usage"],
            "Device 7 (mock:/s/davinci7.sock): unreachable",
        ),
        (
            &["set", "-t", "device-share", "-i", "all", "-d", "1"],
            "Status                         : Fail",
        ),
    ] {
        let (code, out, err) = smi(&w, &args(&pair, a));
        assert_eq!(code, exit::PARTIAL, "{a:?}: {out}{err}");
        assert!(out.contains(on_stdout), "{a:?}: {out}");
        assert!(!out.contains(msg), "{a:?}: error on stdout: {out}");
        assert_eq!(err, format!("davinci-smi: device 7: {msg}\n"), "{a:?}");
    }
    // A failure of the whole command too.
    let (code, out, err) = smi(&w, &["info"]);
    assert_eq!((code, out.as_str()), (exit::NOT_FOUND, ""));
    assert!(
        err.starts_with("davinci-smi: no davinci devices found"),
        "{err}"
    );
}

#[test]
fn a_device_named_twice_is_used_once() {
    let w = two();
    let twice = ["--device", A, "--device", B, "--device", A];
    let (_, out, _) = smi(&w, &args(&twice, &["list", "--json"]));
    let v = json(&out);
    assert_eq!(v["devices"].as_array().unwrap().len(), 2, "{v}");
    for a in [&["info", "--json"][..], &["info", "-t", "usage", "--json"]] {
        let v = json(&smi(&w, &args(&twice, a)).1);
        let paths: Vec<&str> = v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, vec![A, B], "{a:?}");
    }
    let (_, out, _) = smi(&w, &args(&twice, &["info"]));
    assert_eq!(out.matches(A).count(), 1, "{out}");
    // The same socket by another path (`.`, `//`, a symlink): the first spelling is kept.
    let dir = std::env::temp_dir().join(format!("smi-dedupe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("davinci0.sock"), b"").unwrap();
    let _ = std::fs::remove_file(dir.join("link.sock"));
    std::os::unix::fs::symlink(dir.join("davinci0.sock"), dir.join("link.sock")).unwrap();
    let first = format!("mock:{}/davinci0.sock", dir.display());
    let w = world(vec![(first.as_str(), fake(0, vec![], false, true))]);
    let dot = format!("mock:{}/./davinci0.sock", dir.display());
    let slashes = format!("mock:{}//davinci0.sock", dir.display());
    let link = format!("mock:{}/link.sock", dir.display());
    let kernel = format!("{}/davinci0.sock", dir.display());
    let a = [
        "--device", &first, "--device", &dot, "--device", &slashes, "--device", &link, "--device",
        &kernel, "list", "--json",
    ];
    let v = json(&smi(&w, &a).1);
    let paths: Vec<&str> = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    // A kernel path is another way to open it, so it stays.
    assert_eq!(paths, vec![first.as_str(), kernel.as_str()]);
    let _ = std::fs::remove_dir_all(&dir);
}

fn busy_world() -> World {
    world(vec![(
        A,
        fake(
            0,
            vec![usage_of(41, "", 0), usage_of(42, "abcd", 1 << 20)],
            true,
            true,
        ),
    )])
}

const SET_EXCLUSIVE: [&str; 9] = [
    "--device",
    A,
    "set",
    "-t",
    "device-share",
    "-i",
    "0",
    "-d",
    "0",
];

#[test]
fn a_busy_set_names_the_attached_clients() {
    let w = busy_world();
    let (code, out, err) = smi(&w, &SET_EXCLUSIVE);
    assert_eq!(code, exit::BUSY, "{out}{err}");
    assert!(
        err.contains(
            "clients attached: pid 41 (uid 0, no container), pid 42 (uid 0, container abcd)"
        ),
        "{err}"
    );
    let (code, out, _) = smi(&w, &args(&SET_EXCLUSIVE, &["--json"]));
    assert_eq!(code, exit::BUSY);
    let v = json(&out);
    let r = &v["results"][0];
    assert_eq!(r["error"]["errno"], "EBUSY");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("pid 42 (uid 0, container abcd)"),
        "{r}"
    );
    let held: Vec<(u64, &str)> = r["held_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["pid"].as_u64().unwrap(),
                c["container_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(held, vec![(41, ""), (42, "abcd")]);
    assert_eq!(r["held_by"][1]["memory_bytes"], 1 << 20);
    // The mode is known (unchanged): it is reported, not null.
    assert_eq!(r["share_mode"], "shared");
    assert_eq!(r["previous_share_mode"], "shared");
    assert_eq!(r["changed"], serde_json::Value::Null);
}

#[test]
fn held_by_is_null_unless_busy_and_share_mode_is_known_after_other_refusals() {
    let denied = world(vec![(A, fake(0, vec![usage_of(1, "", 0)], false, false))]);
    let a = [
        "--device",
        A,
        "set",
        "-t",
        "device-share",
        "-i",
        "0",
        "-d",
        "1",
        "--json",
    ];
    let (code, out, _) = smi(&denied, &a);
    assert_eq!(code, exit::PERMISSION);
    let r = &json(&out)["results"][0];
    assert_eq!(r["held_by"], serde_json::Value::Null);
    assert_eq!(r["share_mode"], "exclusive");
    let w = two();
    let r = &json(&smi(&w, &args(&BOTH, &a[2..])).1)["results"][0];
    assert_eq!(r["status"], "ok");
    assert_eq!(r["held_by"], serde_json::Value::Null);
    // An unreachable device: the mode is not known.
    let (_, out, _) = smi(&w, &args(&["--device", "mock:/s/davinci3.sock"], &a[2..]));
    let r = &json(&out)["results"][0];
    assert_eq!(r["share_mode"], serde_json::Value::Null);
}

#[test]
fn query_prints_the_device_table_as_csv() {
    let w = two();
    let (code, out, err) = smi(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "--query",
                "index,share_mode,memory.used,clients",
                "--format",
                "csv",
            ],
        ),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "index, share_mode, memory.used [MiB], clients\n0, exclusive, 4.0 MiB, 1\n1, shared, 0.0 MiB, 0\n"
    );
    // noheader, nounits, --format=a,b and the fields in the order asked.
    let (_, out, _) = smi(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "-i",
                "1",
                "--query=memory.total,index",
                "--format=csv,noheader,nounits",
            ],
        ),
    );
    assert_eq!(out, "256.0, 1\n");
    // Before the subcommand, or with no subcommand (nvidia-smi's habit).
    let (_, out, _) = smi(
        &w,
        &args(
            &BOTH,
            &["--query", "index,device_share", "--format=csv,noheader"],
        ),
    );
    assert_eq!(out, "0, false\n1, true\n");
    // --format alone: the default columns; every field has a value.
    let (_, out, _) = smi(&w, &args(&BOTH, &["info", "--format", "csv"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "index, health, memory.used [MiB], memory.total [MiB], clients, share_mode, path"
    );
    assert_eq!(
        lines[1],
        format!("0, ok, 4.0 MiB, 256.0 MiB, 1, exclusive, {A}")
    );
    let every: Vec<&str> = BOARD_FIELDS.iter().map(|f| f.name).collect();
    let (_, out, _) = smi(
        &w,
        &args(
            &BOTH,
            &["info", "--query", &every.join(","), "--format=csv,noheader"],
        ),
    );
    assert!(!out.contains("[N/A]"), "{out}");
    assert!(out.starts_with("20"), "timestamp first: {out}");
}

#[test]
fn query_of_an_unreachable_device_is_na_and_its_error_goes_to_stderr() {
    let w = two();
    let (code, out, err) = smi(
        &w,
        &[
            "--device",
            A,
            "--device",
            "mock:/s/davinci7.sock",
            "info",
            "--query",
            "index,health,clients,path",
            "--format",
            "csv,noheader",
        ],
    );
    assert_eq!(code, exit::PARTIAL);
    assert_eq!(
        out,
        format!("0, ok, 1, {A}\n7, unreachable, [N/A], mock:/s/davinci7.sock\n")
    );
    assert!(
        err.starts_with("davinci-smi: device 7: open failed"),
        "{err}"
    );
}

#[test]
fn query_prints_the_usage_table_as_csv() {
    let w = world(vec![
        (
            A,
            fake(
                0,
                vec![usage_of(100, "abc,def", 4 << 20), usage_of(101, "", 0)],
                true,
                true,
            ),
        ),
        (B, fake(1, vec![usage_of(200, "", 1 << 20)], true, true)),
    ]);
    let (code, out, err) = smi(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "-t",
                "usage",
                "--query",
                "index,pid,container_id,memory.used,tasks.submitted,tasks.completed,client_id",
                "--format",
                "csv",
            ],
        ),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "index, pid, container_id, memory.used [MiB], tasks.submitted, tasks.completed, client_id\n\
         0, 100, \"abc,def\", 4.0 MiB, 10, 9, 1100\n\
         0, 101, , 0.0 MiB, 10, 9, 1101\n\
         1, 200, , 1.0 MiB, 10, 9, 1200\n"
    );
    let (_, out, _) = smi(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "-t",
                "usage",
                "-i",
                "1",
                "--format=csv,noheader,nounits",
            ],
        ),
    );
    assert_eq!(out, "1, 200, proc200, 0, , 1, 2, 0, 3, 1.0, 10, 1, 9\n");
}

#[test]
fn query_errors_are_usage_errors_naming_the_valid_fields() {
    let w = two();
    let (code, out, err) = smi(&w, &args(&BOTH, &["info", "--query", "index,bogus"]));
    assert_eq!((code, out.as_str()), (exit::USAGE, ""));
    assert!(err.contains("unknown field 'bogus'"), "{err}");
    assert!(
        err.contains("valid fields: timestamp, index, path, health"),
        "{err}"
    );
    let (_, _, err) = smi(
        &w,
        &args(&BOTH, &["info", "-t", "usage", "--query", "health"]),
    );
    assert!(
        err.contains("unknown field 'health'")
            && err.contains("pid, uid, process_name, container_id"),
        "{err}"
    );
    for (a, what) in [
        (
            &["info", "--format", "xml"][..],
            "unknown --format option 'xml'",
        ),
        (&["info", "--format", "noheader"], "needs csv"),
        (
            &["info", "-t", "device-share", "--query", "index"],
            "not to `info-device-share`",
        ),
        (&["list", "--format", "csv"], "unexpected argument"),
        (&["--format", "csv", "list"], "not to `list`"),
        (
            &[
                "--query",
                "index",
                "set",
                "-t",
                "device-share",
                "-i",
                "0",
                "-d",
                "1",
            ],
            "not to `set-device-share`",
        ),
        (
            &["info", "--query", "index", "--json"],
            "give one or the other",
        ),
    ] {
        let (code, out, err) = smi(&w, &args(&BOTH, a));
        assert_eq!(code, exit::USAGE, "{a:?}: {out}{err}");
        let text = if out.is_empty() { err } else { out };
        assert!(text.contains(what), "{a:?}: {text}");
    }
}

#[test]
fn loop_repeats_count_times_sleeping_between_rounds() {
    let w = two();
    let mut slept = Vec::new();
    let (code, out, err) = smi_sleeping(
        &w,
        &args(&BOTH, &["--loop", "2.5", "--count", "3", "list", "--json"]),
        &mut |d| slept.push(d),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(slept, vec![std::time::Duration::from_millis(2500); 2]);
    // One document per line.
    let docs: Vec<serde_json::Value> = out.lines().map(json).collect();
    assert_eq!(docs.len(), 3, "{out}");
    assert!(docs.iter().all(|d| d["command"] == "list"));
    // After the subcommand too; CSV has one header; text rounds start with a timestamp.
    let mut n = 0;
    let (_, out, _) = smi_sleeping(
        &w,
        &args(
            &BOTH,
            &[
                "info", "--loop", "1", "--count", "2", "--query", "index", "--format", "csv",
            ],
        ),
        &mut |_| n += 1,
    );
    assert_eq!((out.as_str(), n), ("index\n0\n1\n0\n1\n", 1));
    let (_, out, _) = smi_sleeping(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "-t",
                "device-share",
                "-i",
                "0",
                "--loop",
                "1",
                "--count",
                "2",
            ],
        ),
        &mut |_| {},
    );
    assert_eq!(out.matches("Device-share Status").count(), 2, "{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.len() == 24 && l.ends_with('Z'))
            .count(),
        2,
        "{out}"
    );
}

#[test]
fn each_round_asks_the_devices_again_and_the_last_round_sets_the_status() {
    let dev = fake(0, vec![], false, true);
    let state = dev.state.clone();
    let w = world(vec![(A, dev)]);
    let mut round = 0;
    let (code, out, err) = smi_sleeping(
        &w,
        &[
            "--device",
            A,
            "info",
            "--loop",
            "1",
            "--count",
            "3",
            "--query",
            "clients,health",
            "--format",
            "csv,noheader",
        ],
        &mut |_| {
            round += 1;
            let mut s = state.borrow_mut();
            if round == 1 {
                s.clients.push(usage_of(5, "", 0));
            } else {
                s.down = true;
            }
        },
    );
    assert_eq!(out, "0, ok\n1, ok\n[N/A], unreachable\n");
    assert_eq!(code, exit::NOT_FOUND);
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn loop_usage_errors() {
    let w = two();
    for (a, what) in [
        (&["info", "--count", "2"][..], "--count N needs --loop"),
        (&["--loop", "0", "info"], "greater than 0"),
        (&["--loop", "-1", "info"], "greater than 0"),
        (&["--loop", "x", "info"], "not a number of seconds"),
        (&["--loop", "1e9", "info"], "at most 86400"),
        (&["--loop", "1", "--count", "0", "info"], "0 is not in 1.."),
        (
            &[
                "--loop",
                "1",
                "set",
                "-t",
                "device-share",
                "-i",
                "0",
                "-d",
                "1",
            ],
            "do not apply to `set`",
        ),
    ] {
        let (code, out, err) = smi(&w, &args(&BOTH, a));
        assert_eq!((code, out.as_str()), (exit::USAGE, ""), "{a:?}: {err}");
        assert!(err.contains(what), "{a:?}: {err}");
    }
}

/// Stdout that refuses every write (the reader went away).
struct Closed;

impl Write for Closed {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::BrokenPipe.into())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn an_endless_loop_stops_when_nobody_reads() {
    let w = two();
    let argv: Vec<String> = ["davinci-smi", "--device", A, "--loop", "1", "list"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut sleeps = 0;
    let code = run_with(
        &argv,
        &w.disc,
        &w.opener,
        &mut Closed,
        &mut Vec::new(),
        &mut |_| {
            sleeps += 1;
            assert!(sleeps < 3, "still looping with stdout closed");
        },
    );
    assert_eq!((code, sleeps), (exit::OTHER, 0));
}
