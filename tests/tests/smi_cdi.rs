//! `davinci-smi cdi generate` against a real `davinci-mockd`: the spec it writes is valid by
//! upstream's CDI JSON schema (vendored in operators/ops/cdi-schema/), names the daemon's devices, and
//! the device path it puts in a container's environment reaches that device. (The spec
//! builder and its checks: operators/ops/src/cdi/tests.rs; `cdi generate` against fake devices:
//! operators/smi/src/cdi_generate/tests.rs.)
#![forbid(unsafe_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use davinci_ops::cdi::schema::CdiSchema;
use davinci_smi::test_util::run;
use davinci_tests::mockd::{bin, Mockd};
use serde_json::Value;

/// `davinci-smi ARGS`: exit status, stdout, stderr.
fn smi(args: &[&str]) -> (i32, String, String) {
    run(Command::new(bin("testbin-davinci-smi"))
        .args(args)
        .env_remove("DAVINCI_DEVICE"))
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("smi-cdi-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn device<'a>(spec: &'a Value, name: &str) -> &'a Value {
    spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no device {name}: {spec:#}"))
}

/// The value of `NAME=` in a device's environment edits.
fn env<'a>(dev: &'a Value, name: &str) -> &'a str {
    dev["containerEdits"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find_map(|e| e.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name} in {dev:#}"))
}

fn dir_of(d: &Mockd) -> &str {
    d.dir().to_str().unwrap()
}

#[test]
fn a_spec_for_a_daemon_with_two_devices_is_valid_and_reaches_them() {
    let d = Mockd::start(&["--devices", "2"]).unwrap();
    let out_dir = scratch("two");
    let file = out_dir.join("davinci.json");
    let (code, out, err) = smi(&[
        "--socket-dir",
        dir_of(&d),
        "cdi",
        "generate",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(
        out.starts_with(&format!(
            "wrote {} (json, cdiVersion 0.5.0): ",
            file.display()
        )),
        "{out}"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let schema = CdiSchema::load();
    schema.assert_valid(&spec);
    assert_eq!(spec["cdiVersion"], "0.5.0");
    assert_eq!(spec["kind"], "davinci.ai/npu");
    let names: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["davinci0", "davinci1", "all"]);
    for n in 0..2 {
        let dev = device(&spec, &format!("davinci{n}"));
        assert_eq!(env(dev, "DAVINCI_DEVICE"), d.path(n));
        assert_eq!(env(dev, "DAVINCI_VISIBLE_DEVICES"), d.path(n));
        let mounts = dev["containerEdits"]["mounts"].as_array().unwrap();
        assert_eq!(mounts.len(), 1);
        let sock = d.socket(n).display().to_string();
        assert_eq!(mounts[0]["hostPath"], sock.as_str());
        assert_eq!(mounts[0]["containerPath"], sock.as_str());
        // What a container given davinciN gets in DAVINCI_DEVICE opens davinciN.
        let (code, out, err) = smi(&["--device", env(dev, "DAVINCI_DEVICE"), "info", "--json"]);
        assert_eq!(code, 0, "{err}");
        let info: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(info["devices"][0]["id"], n, "{info}");
        assert_eq!(info["devices"][0]["health"], "ok", "{info}");
    }
    let all = device(&spec, "all");
    assert_eq!(env(all, "DAVINCI_DEVICE"), d.path(0));
    assert_eq!(
        env(all, "DAVINCI_VISIBLE_DEVICES"),
        format!("{},{}", d.path(0), d.path(1))
    );
    assert_eq!(all["containerEdits"]["mounts"].as_array().unwrap().len(), 2);

    // YAML on stdout by default; with --json a davinci-smi/v1 document carrying the spec.
    let (code, yaml, err) = smi(&["--socket-dir", dir_of(&d), "cdi", "generate"]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(
        yaml.starts_with("cdiVersion: 0.5.0\nkind: davinci.ai/npu\n"),
        "{yaml}"
    );
    assert!(yaml.contains("- name: davinci1\n"), "{yaml}");
    let (code, out, err) = smi(&["--socket-dir", dir_of(&d), "cdi", "generate", "--json"]);
    assert_eq!((code, err.as_str()), (0, ""));
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["schema"], "davinci-smi/v1");
    assert_eq!(doc["command"], "cdi-generate");
    assert_eq!(doc["exit_code"], 0);
    assert_eq!(doc["spec"], spec);
    for n in 0..2 {
        assert_eq!(doc["devices"][n]["health"], "ok", "{doc}");
        assert_eq!(doc["devices"][n]["path"], d.path(n as u32));
    }
    let _ = std::fs::remove_dir_all(&out_dir);
}

#[test]
fn output_into_a_missing_directory_is_a_clear_error_and_writes_nothing() {
    let d = Mockd::start(&["--devices", "2"]).unwrap();
    let out_dir = scratch("missing");
    let missing = out_dir.join("etc/cdi");
    let file = missing.join("davinci.yaml");
    let (code, out, err) = smi(&[
        "--socket-dir",
        dir_of(&d),
        "cdi",
        "generate",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!(
            "davinci-smi: cannot write {}: the directory {} does not exist (create it first: \
             mkdir -p {})\n",
            file.display(),
            missing.display(),
            missing.display()
        )
    );
    assert!(!out_dir.join("etc").exists());
    // The same as a document with --json.
    let (code, out, _) = smi(&[
        "--socket-dir",
        dir_of(&d),
        "--json",
        "cdi",
        "generate",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["command"], "cdi-generate");
    assert!(doc["error"]["message"]
        .as_str()
        .unwrap()
        .contains("does not exist"));
    let _ = std::fs::remove_dir_all(&out_dir);
}

#[test]
fn a_stopped_daemon_leaves_nothing_to_generate_and_nothing_is_written() {
    let mut d = Mockd::start(&["--devices", "2"]).unwrap();
    let dir = d.dir().to_path_buf();
    d.terminate();
    let out_dir = scratch("stopped");
    let file = out_dir.join("davinci.yaml");
    let (code, out, err) = smi(&[
        "--socket-dir",
        dir.to_str().unwrap(),
        "cdi",
        "generate",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!((code, out.as_str()), (3, ""));
    // Where it looked (the daemon removed its sockets, and its directory with them).
    assert!(
        err.starts_with(&format!(
            "davinci-smi: no davinci devices found (looked for {}/davinci<N>.sock \
             (--socket-dir): ",
            dir.display()
        )),
        "{err}"
    );
    assert!(
        err.ends_with("name a device with --device, --socket-dir or DAVINCI_DEVICE)\n"),
        "{err}"
    );
    assert!(!Path::new(&file).exists());
    let _ = std::fs::remove_dir_all(&out_dir);
}
