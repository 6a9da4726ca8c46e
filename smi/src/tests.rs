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
}

impl DeviceAccess for FakeDev {
    fn info(&self) -> Result<DeviceInfo, SmiError> {
        let s = self.state.borrow();
        let mut i = s.info;
        i.clients = s.clients.len() as u32;
        Ok(i)
    }
    fn share(&self) -> Result<(ShareMode, u32), SmiError> {
        let s = self.state.borrow();
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
        Ok(self.state.borrow().clients.clone())
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
    let mut argv = vec!["davinci-smi".to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&argv, &w.disc, &w.opener, &mut out, &mut err);
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
