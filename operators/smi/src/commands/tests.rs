//! The device commands against fake devices: the tables, the `--json` documents, per-device
//! failures and their exit statuses, and `set`'s idempotence and refusals.

use crate::exit;
use crate::tests::*;

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
    let v = doc(&smi(&w, &a).1);
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
    let v = doc(&out);
    assert_eq!(v["exit_code"], exit::PARTIAL);
    assert_eq!(v["devices"][1]["health"], "unreachable");
    assert_eq!(v["devices"][1]["id"], 7);
    assert_eq!(v["devices"][1]["error"]["errno"], "ENODEV");
    assert_eq!(v["devices"][1]["error"]["code"], 19);
    let (code, _, _) = smi(&w, &["--device", dead, "info"]);
    assert_eq!(code, exit::NOT_FOUND);
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
    let v = doc(&smi(&w, &a).1);
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
    let v = doc(&smi(&w, &a).1);
    assert_eq!(v["command"], "info-usage");
    let c = &v["devices"][0]["clients"][0];
    assert_eq!(c["pid"], 100);
    assert_eq!(c["client_id"], 1100);
    assert_eq!(c["container_id"], "abcdef0123456789abcdef");
    assert_eq!(c["tenant"], "container:abcdef0123456789abcdef");
    assert_eq!(c["streams"], 2);
    assert_eq!(c["allocations"], 3);
    assert_eq!(c["memory_bytes"], 4 << 20);
    assert_eq!(c["tasks_submitted"], 10);
    assert_eq!(c["tasks_completed"], 9);
    let (_, text, _) = smi(&w, &a[..a.len() - 1]);
    assert!(text.contains("| 100 "), "{text}");
    assert!(
        text.contains("Tenant") && text.contains("ctr abcdef012345"),
        "{text}"
    );
    // The query vocabulary has the tenant too.
    let mut q = BOTH.to_vec();
    q.extend([
        "info",
        "-t",
        "usage",
        "-i",
        "0",
        "--query",
        "pid,tenant",
        "--format",
        "csv",
    ]);
    let (code, csv, err) = smi(&w, &q);
    assert_eq!(code, 0, "{err}");
    assert!(
        csv.contains("100, container:abcdef0123456789abcdef"),
        "{csv}"
    );
}

#[test]
fn set_is_idempotent_and_reports_per_device() {
    let w = two();
    let mut a = BOTH.to_vec();
    a.extend(["set", "-t", "device-share", "-i", "0", "-d", "1", "--json"]);
    let v = doc(&smi(&w, &a).1);
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
    assert_eq!(doc(&out)["results"][0]["changed"], false);
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
    let v = doc(&out);
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
    let v = doc(&out);
    assert_eq!(v["results"][0]["status"], "error");
    assert_eq!(v["results"][1]["status"], "ok");
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
    let v = doc(&out);
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
    let r = &doc(&out)["results"][0];
    assert_eq!(r["held_by"], serde_json::Value::Null);
    assert_eq!(r["share_mode"], "exclusive");
    let w = two();
    let r = &doc(&smi(&w, &args(&BOTH, &a[2..])).1)["results"][0];
    assert_eq!(r["status"], "ok");
    assert_eq!(r["held_by"], serde_json::Value::Null);
    // An unreachable device: the mode is not known.
    let (_, out, _) = smi(&w, &args(&["--device", "mock:/s/davinci3.sock"], &a[2..]));
    let r = &doc(&out)["results"][0];
    assert_eq!(r["share_mode"], serde_json::Value::Null);
}
