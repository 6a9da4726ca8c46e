//! `-t tenant-share` against fake devices: setting and reading a tenant's share, a container
//! named by a prefix of its id, bad input, and the driver's refusals with their exit statuses.

use serde_json::Value;

use crate::exit;
use crate::tests::*;

const CTR: &str = "3f1c2b8e9a7d00112233445566778899";

/// davinci0 with clients of two containers sharing a prefix, one more, and a user;
/// davinci1 with none.
fn tenants_world() -> World {
    let mut user = usage_of(40, "", 0);
    user.uid = 1000;
    let w = world(vec![
        (
            A,
            fake(
                0,
                vec![
                    usage_of(41, CTR, 0),
                    usage_of(42, "3f1c99", 0),
                    usage_of(43, "abcdef", 0),
                    user,
                ],
                true,
                true,
            ),
        ),
        (B, fake(1, vec![], true, true)),
    ]);
    for d in w.opener.devs.values() {
        d.state.borrow_mut().tenant_slots = 8;
    }
    w
}

fn calls(w: &World, path: &str) -> Vec<(String, Option<u32>)> {
    w.opener.devs[path].state.borrow().tenant_calls.clone()
}

#[test]
fn set_reports_previous_and_new_shares_and_is_idempotent() {
    let w = tenants_world();
    let a = args(
        &BOTH,
        &[
            "set",
            "-t",
            "tenant-share",
            "-i",
            "0",
            "--tenant",
            "user:1000",
            "-d",
            "2",
            "--json",
        ],
    );
    let (code, out, err) = smi(&w, &a);
    assert_eq!(code, 0, "{out}{err}");
    let v = doc(&out);
    assert_eq!(v["command"], "set-tenant-share");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["requested"]["tenant"], "user:1000");
    assert_eq!(v["requested"]["given"], "user:1000");
    assert_eq!(v["requested"]["shares"], 2);
    let r = &v["results"][0];
    assert_eq!(v["results"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(r["status"], "ok");
    assert_eq!(r["changed"], true);
    assert_eq!(r["previous_shares"], 1);
    assert_eq!(r["shares"], 2);
    assert_eq!(r["slots"], 8);
    assert_eq!(r["holds_slots"], true);
    assert_eq!(r["has_opens"], true);
    assert_eq!(r["error"], Value::Null);
    // Three tenants of one slot and this one of two on eight slots: three free.
    assert_eq!(r["free_slots"], 3);
    // Again: success, nothing changed.
    let (code, out, _) = smi(&w, &a);
    assert_eq!(code, 0);
    assert_eq!(doc(&out)["results"][0]["changed"], false);
    // Text, on every device; davinci1 has no client of that user.
    let t = args(
        &BOTH,
        &[
            "set",
            "-t",
            "tenant-share",
            "-i",
            "all",
            "--tenant",
            "user:1000",
            "-d",
            "0",
            "-y",
        ],
    );
    let (code, out, err) = smi(&w, &t);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(
            "Message                        : user:1000 counts for 0 slots: best effort (was 2)"
        ),
        "{out}"
    );
    assert!(
        out.contains("Holds Its Slots                : No (best effort)"),
        "{out}"
    );
    assert!(
        out.contains("Holds Its Slots                : No (no open)"),
        "{out}"
    );
    assert!(
        out.contains("Shares / Slots                 : 0 / 8 (5 free)"),
        "{out}"
    );
    assert!(
        out.contains("Shares / Slots                 : 0 / 8 (8 free)"),
        "{out}"
    );
    assert_eq!(
        out.matches("Status                         : OK").count(),
        2
    );
}

#[test]
fn info_reads_one_tenant_or_every_tenant_with_a_client() {
    let w = tenants_world();
    let set = [
        "set",
        "-t",
        "tenant-share",
        "-i",
        "0",
        "--tenant",
        "container:abc",
        "-d",
        "2",
    ];
    assert_eq!(smi(&w, &args(&BOTH, &set)).0, 0);
    let a = args(&BOTH, &["info", "-t", "tenant-share", "-i", "0", "--json"]);
    let (code, out, err) = smi(&w, &a);
    assert_eq!(code, 0, "{out}{err}");
    let v = doc(&out);
    assert_eq!(v["command"], "info-tenant-share");
    let d = &v["devices"][0];
    assert_eq!(
        (d["health"].as_str(), d["slots"].as_u64()),
        (Some("ok"), Some(8))
    );
    let shares: Vec<(&str, u64)> = d["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["tenant"].as_str().unwrap(), t["shares"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        shares,
        vec![
            (&*format!("container:{CTR}"), 1),
            ("container:3f1c99", 1),
            ("container:abcdef", 2),
            ("user:1000", 1),
        ]
    );
    // The text table: container ids to 12 characters, a prefix --tenant takes.
    let (_, text, _) = smi(&w, &a[..a.len() - 1]);
    assert!(
        text.contains("(mock:/s/davinci0.sock): 8 tenant slot(s), 3 free"),
        "{text}"
    );
    assert!(text.contains("| container:3f1c2b8e9a7d |"), "{text}");
    assert!(text.contains("| Holds its slots "), "{text}");
    // One tenant by a prefix; a tenant with no client; a device with no tenant.
    let one = args(
        &BOTH,
        &[
            "info",
            "-t",
            "tenant-share",
            "-i",
            "0",
            "--tenant",
            "container:3f1c2",
            "--json",
        ],
    );
    let v = doc(&smi(&w, &one).1);
    assert_eq!(
        v["devices"][0]["tenants"][0]["tenant"],
        format!("container:{CTR}")
    );
    let (code, out, _) = smi(
        &w,
        &args(
            &BOTH,
            &["info", "-t", "tenant-share", "--tenant", "user:7", "--json"],
        ),
    );
    assert_eq!(code, 0);
    let v = doc(&out);
    assert_eq!(v["devices"][1]["tenants"][0]["has_opens"], false);
    assert_eq!(v["devices"][1]["tenants"][0]["shares"], 1);
    let (code, out, _) = smi(&w, &args(&BOTH, &["info", "-t", "tenant-share", "-i", "1"]));
    assert_eq!(code, 0);
    assert!(out.contains("no tenant has a client open"), "{out}");
}

#[test]
fn a_container_prefix_resolves_to_the_one_container_it_names() {
    let w = tenants_world();
    let set = |tenant: &str, extra: &[&str]| {
        let mut a = args(
            &BOTH,
            &[
                "set",
                "-t",
                "tenant-share",
                "-i",
                "0",
                "--tenant",
                tenant,
                "-d",
                "2",
            ],
        );
        a.extend_from_slice(extra);
        smi(&w, &a)
    };
    // A unique prefix: the whole id reaches the device.
    let (code, out, err) = set("container:3f1c2", &["--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v = doc(&out);
    assert_eq!(v["requested"]["tenant"], format!("container:{CTR}"));
    assert_eq!(v["requested"]["given"], "container:3f1c2");
    assert!(calls(&w, A)
        .iter()
        .all(|(t, _)| t == &format!("container:{CTR}")));
    // A whole id that is also a prefix of another is that one.
    let (code, out, _) = set("container:3f1c99", &["--json"]);
    assert_eq!(code, 0);
    assert_eq!(doc(&out)["requested"]["tenant"], "container:3f1c99");
    // Several: EINVAL, both named, nothing asked of the device.
    let before = calls(&w, A).len();
    let (code, out, err) = set("container:3f1c", &[]);
    assert_eq!((code, out.as_str()), (exit::OTHER, ""), "{err}");
    assert!(
        err.contains("container id prefix '3f1c' is ambiguous on device 0: it matches")
            && err.contains(CTR)
            && err.contains("3f1c99; give more of the id"),
        "{err}"
    );
    // None: ENOENT (exit 3), the containers listed and --exact suggested.
    let (code, out, _) = set("container:ffff", &["--json"]);
    assert_eq!(code, exit::NOT_FOUND);
    let v = doc(&out);
    assert_eq!(v["error"]["errno"], "ENOENT");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("no container whose id starts with 'ffff' has a client open on device 0")
            && m.contains("abcdef")
            && m.contains("--exact"),
        "{m}"
    );
    assert_eq!(calls(&w, A).len(), before);
    // --exact: the id as given, for a container with no client open.
    let (code, out, err) = set("container:ffff", &["--exact", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(doc(&out)["results"][0]["has_opens"], false);
    assert_eq!(calls(&w, A).last().unwrap().0, "container:ffff");
    // A user tenant is never resolved.
    let (code, _, _) = set("user:4242", &[]);
    assert_eq!(code, 0);
}

#[test]
fn bad_input_is_a_usage_error() {
    let w = tenants_world();
    for (a, why) in [
        (
            &[
                "set",
                "-t",
                "tenant-share",
                "-i",
                "0",
                "--tenant",
                "user:1",
                "-d",
                "65",
            ][..],
            "65 is not in 0..=64",
        ),
        (
            &[
                "set",
                "-t",
                "tenant-share",
                "-i",
                "0",
                "--tenant",
                "user:1",
                "-d",
                "x",
            ],
            "invalid value 'x' for '--data <N>'",
        ),
        (
            &[
                "set",
                "-t",
                "tenant-share",
                "-i",
                "0",
                "--tenant",
                "bob",
                "-d",
                "1",
            ],
            "a tenant is user:UID or container:ID",
        ),
        (
            &[
                "set",
                "-t",
                "tenant-share",
                "-i",
                "0",
                "--tenant",
                "user:x",
                "-d",
                "1",
            ],
            "numeric uid",
        ),
        (
            &[
                "set",
                "-t",
                "tenant-share",
                "-i",
                "0",
                "--tenant",
                "container:",
                "-d",
                "1",
            ],
            "1 to 63 bytes",
        ),
        (
            &["set", "-t", "tenant-share", "-i", "0", "-d", "1"],
            "set -t tenant-share needs --tenant",
        ),
        (
            &[
                "set",
                "-t",
                "device-share",
                "-i",
                "0",
                "--tenant",
                "user:1",
                "-d",
                "1",
            ],
            "--tenant and --exact apply to -t tenant-share only",
        ),
        (
            &["info", "-t", "usage", "--tenant", "user:1"],
            "--tenant and --exact apply to -t tenant-share only",
        ),
        (&["info", "-t", "tenant-share", "--exact"], "--tenant"),
        (
            &[
                "--loop",
                "1",
                "set",
                "-t",
                "tenant-share",
                "-i",
                "0",
                "--tenant",
                "user:1",
                "-d",
                "1",
            ],
            "do not apply to `set`",
        ),
    ] {
        let (code, out, err) = smi(&w, &args(&BOTH, a));
        assert_eq!((code, out.as_str()), (exit::USAGE, ""), "{a:?}: {err}");
        assert!(err.contains(why), "{a:?}: {err}");
        let msg = assert_json_usage_error(&w, &args(&args(&BOTH, a), &["--json"]));
        assert!(msg.contains(why), "{a:?}: {msg}");
    }
    // device-share keeps its range and clap's own message.
    let (code, _, err) = smi(
        &w,
        &args(&BOTH, &["set", "-t", "device-share", "-i", "0", "-d", "2"]),
    );
    assert_eq!(code, exit::USAGE);
    assert_eq!(
        err,
        "error: invalid value '2' for '--data <0|1>': 2 is not in 0..=1\n\nFor more information, try '--help'.\n"
    );
    // Nothing reached a device.
    assert!(calls(&w, A).is_empty());
}

#[test]
fn the_drivers_refusals_keep_its_message_and_their_exit_status() {
    let set = |w: &World, tenant: &str, n: &str| {
        smi(
            w,
            &[
                "--device",
                A,
                "set",
                "-t",
                "tenant-share",
                "-i",
                "0",
                "--tenant",
                tenant,
                "-d",
                n,
                "--json",
            ],
        )
    };
    let error = |out: &str| doc(out)["results"][0].clone();
    // Not an admin: EPERM, exit 4, the setting unknown (TENANT_SHARE reads are an admin's too).
    let denied = world(vec![(A, fake(0, vec![usage_of(1, "", 0)], true, false))]);
    let (code, out, _) = set(&denied, "user:0", "2");
    assert_eq!(code, exit::PERMISSION);
    let r = error(&out);
    assert_eq!(
        (r["status"].as_str(), r["error"]["errno"].as_str()),
        (Some("error"), Some("EPERM"))
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("needs an admin"),
        "{r}"
    );
    assert_eq!(r["changed"], Value::Null);
    assert_eq!(r["shares"], Value::Null);
    let (code, out, err) = smi(
        &denied,
        &[
            "--device",
            A,
            "set",
            "-t",
            "tenant-share",
            "-i",
            "0",
            "--tenant",
            "user:0",
            "-d",
            "2",
        ],
    );
    assert_eq!(code, exit::PERMISSION);
    assert!(
        out.contains("Status                         : Fail"),
        "{out}"
    );
    assert_eq!(
        err,
        "davinci-smi: device 0: TENANT_SHARE failed: EPERM: changing device sharing or a tenant's share needs an admin\n"
    );
    let (code, _, err) = smi(&denied, &["--device", A, "info", "-t", "tenant-share"]);
    assert_eq!(code, exit::PERMISSION, "{err}");
    assert!(err.contains("EPERM"), "{err}");
    // Growing a tenant that holds its slot past the free ones: EBUSY, exit 5, unchanged.
    let full = world(vec![(
        A,
        fake(
            0,
            vec![
                usage_of(1, "a", 0),
                usage_of(2, "b", 0),
                usage_of(3, "c", 0),
                usage_of(4, "d", 0),
            ],
            true,
            true,
        ),
    )]);
    let (code, out, _) = set(&full, "container:a", "2");
    assert_eq!(code, exit::BUSY);
    let r = error(&out);
    assert_eq!(r["error"]["errno"], "EBUSY");
    assert_eq!(
        (r["previous_shares"].as_u64(), r["shares"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(r["holds_slots"], true);
    // More shares than slots: EINVAL with the driver's message, exit 1.
    let (code, out, _) = set(&full, "container:a", "5");
    assert_eq!(code, exit::OTHER);
    assert!(error(&out)["error"]["message"]
        .as_str()
        .unwrap()
        .contains("shares above"));
    // Past the settings the device keeps: ENOSPC, exit 1.
    full.opener.devs[A].state.borrow_mut().max_settings = 0;
    let (code, out, _) = set(&full, "user:5", "2");
    assert_eq!(code, exit::OTHER);
    assert_eq!(error(&out)["error"]["errno"], "ENOSPC");
    // A driver before 1.5: ENOTTY, said so.
    let old = world(vec![(A, fake(0, vec![], true, true))]);
    old.opener.devs[A].state.borrow_mut().tenant_slots = 0;
    let (code, out, _) = set(&old, "user:5", "2");
    assert_eq!(code, exit::OTHER);
    let m = error(&out)["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        m.starts_with("TENANT_SHARE failed: ENOTTY") && m.contains("the driver predates ABI 1.5"),
        "{m}"
    );
    let (code, _, err) = smi(
        &old,
        &[
            "--device",
            A,
            "info",
            "-t",
            "tenant-share",
            "--tenant",
            "user:5",
        ],
    );
    assert_eq!(code, exit::OTHER);
    assert!(err.contains("the driver predates ABI 1.5"), "{err}");
    // One device refuses, one accepts: partial.
    let mixed = world(vec![
        (A, fake(0, vec![], true, false)),
        (B, fake(1, vec![], true, true)),
    ]);
    let (code, out, _) = smi(
        &mixed,
        &args(
            &BOTH,
            &[
                "set",
                "-t",
                "tenant-share",
                "-i",
                "all",
                "--tenant",
                "user:5",
                "-d",
                "3",
                "--json",
            ],
        ),
    );
    assert_eq!(code, exit::PARTIAL);
    let v = doc(&out);
    assert_eq!(v["results"][0]["status"], "error");
    assert_eq!(v["results"][1]["status"], "ok");
}
