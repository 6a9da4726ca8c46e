//! Visible devices (issue 44 item 3) across processes, as Ray, the device plugin and CDI set
//! them: a `davinci-mockd` with three devices, and child processes (this test binary run
//! again, `child`) that see the environment's list: its count, each index's device, the
//! device opened when none is named, and the errors of an empty or malformed list.
#![forbid(unsafe_code)]

use std::process::Command;

use davinci_shim::{Device, DeviceSource};
use davinci_tests::mockd::Mockd;
use serde_json::{json, Value};

const CHILD: &str = "DAVINCI_TEST_VISIBLE_CHILD";

/// What a child process sees, as one JSON line.
#[test]
#[ignore = "a child process of visible_devices_restrict_and_renumber_what_a_process_sees"]
fn child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let err = |e: davinci_shim::Error| json!({"errno": e.errno().map(|e| e.name()), "message": e.message()});
    let count = Device::count();
    let devices: Vec<Value> = match &count {
        Ok(n) => (0..*n + 1)
            .map(|i| match Device::open_index(i) {
                Ok(d) => json!(d.info().device_id),
                Err(e) => err(e),
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    let default = match Device::open_default() {
        Ok((d, _, from)) => json!({
            "device": d.info().device_id,
            "visible": from == DeviceSource::Visible,
        }),
        Err(e) => err(e),
    };
    let out = json!({
        "count": count.map_or_else(err, |n| json!(n)),
        "devices": devices,
        "default": default,
    });
    println!("VISIBLE {out}");
}

/// Runs `child` with `env` (and nothing else of the kind from this process).
fn see(env: &[(&str, &str)]) -> Value {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "1")
    .env_remove("DAVINCI_DEVICE")
    .env_remove("DAVINCI_VISIBLE_DEVICES")
    .env_remove("ASCEND_VISIBLE_DEVICES");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.split_once("VISIBLE ").map(|(_, json)| json))
        .unwrap_or_else(|| {
            panic!(
                "child {env:?}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    serde_json::from_str(line).unwrap()
}

#[test]
fn visible_devices_restrict_and_renumber_what_a_process_sees() {
    let d = Mockd::start(&["--devices", "3"]).expect("davinci-mockd");
    let dev0 = d.path(0);
    let at = |v: &Value, i: usize| v["devices"][i].clone();

    // Ray's way: indices of the node's devices, found beside DAVINCI_DEVICE, in list order.
    let v = see(&[("DAVINCI_DEVICE", &dev0), ("ASCEND_VISIBLE_DEVICES", "2,0")]);
    assert_eq!(v["count"], 2, "{v}");
    assert_eq!((at(&v, 0), at(&v, 1)), (json!(2), json!(0)), "{v}");
    assert_eq!(v["devices"][2]["errno"], "ENODEV", "past the last: {v}");
    assert!(
        v["devices"][2]["message"]
            .as_str()
            .unwrap()
            .contains("ASCEND_VISIBLE_DEVICES"),
        "{v}"
    );
    assert_eq!(v["default"], json!({"device": 2, "visible": true}), "{v}");

    // DAVINCI_VISIBLE_DEVICES wins over ASCEND_VISIBLE_DEVICES.
    let v = see(&[
        ("DAVINCI_DEVICE", &dev0),
        ("DAVINCI_VISIBLE_DEVICES", "1"),
        ("ASCEND_VISIBLE_DEVICES", "2"),
    ]);
    assert_eq!((v["count"].clone(), at(&v, 0)), (json!(1), json!(1)), "{v}");

    // The device plugin's way: device paths, and no DAVINCI_DEVICE needed.
    let list = format!("{},{}", d.path(2), d.path(1));
    let v = see(&[("DAVINCI_VISIBLE_DEVICES", &list)]);
    assert_eq!((at(&v, 0), at(&v, 1)), (json!(2), json!(1)), "{v}");
    assert_eq!(v["default"]["device"], 2, "{v}");

    // No list: every device beside DAVINCI_DEVICE, which stays the default.
    let v = see(&[("DAVINCI_DEVICE", &d.path(1))]);
    assert_eq!(v["count"], 3, "{v}");
    assert_eq!((at(&v, 0), at(&v, 2)), (json!(0), json!(2)), "{v}");
    assert_eq!(v["default"], json!({"device": 1, "visible": false}), "{v}");

    // An empty list: no device, and opening the default says why.
    let v = see(&[("DAVINCI_DEVICE", &dev0), ("ASCEND_VISIBLE_DEVICES", "")]);
    assert_eq!(v["count"], 0, "{v}");
    assert_eq!(v["default"]["errno"], "ENODEV", "{v}");
    assert!(
        v["default"]["message"]
            .as_str()
            .unwrap()
            .contains("is empty"),
        "{v}"
    );

    // A malformed list is refused, naming the entry; a device that is not there is ENODEV.
    let v = see(&[
        ("DAVINCI_DEVICE", &dev0),
        ("DAVINCI_VISIBLE_DEVICES", "0,gpu1"),
    ]);
    assert_eq!(v["count"]["errno"], "EINVAL", "{v}");
    assert!(
        v["count"]["message"].as_str().unwrap().contains("\"gpu1\""),
        "{v}"
    );
    assert_eq!(v["default"]["errno"], "EINVAL", "{v}");
    let v = see(&[("DAVINCI_DEVICE", &dev0), ("ASCEND_VISIBLE_DEVICES", "7")]);
    assert_eq!(v["count"], 1, "{v}");
    assert_eq!(at(&v, 0)["errno"], "ENODEV", "{v}");
}
