//! `cdi generate` against fake devices: devices named by GET_INFO, unreachable ones kept
//! with a warning, paths a container could not use refused with nothing written, the file
//! written and said so; every spec validated against upstream's JSON schema.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use davinci_ops::cdi::schema::{device, device_names as names, CdiSchema};
use davinci_ops::cdi::{CDI_VERSION, DEFAULT_KIND};
use davinci_ops::discover::Discovery;
use davinci_uapi::{ClientUsage, DeviceInfo, Errno, ShareMode};
use serde_json::{json, Value};

use crate::{exit, DeviceAccess, Opener, SmiError};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("smi-cdi-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A device that answers GET_INFO with `id`.
struct Answers(u32);

impl DeviceAccess for Answers {
    fn info(&self) -> Result<DeviceInfo, SmiError> {
        Ok(DeviceInfo {
            device_id: self.0,
            ..DeviceInfo::default()
        })
    }
    fn share(&self) -> Result<(ShareMode, u32), SmiError> {
        Ok((ShareMode::Exclusive, 0))
    }
    fn set_share(&self, _: ShareMode) -> Result<(), SmiError> {
        Ok(())
    }
    fn clients(&self) -> Result<Vec<ClientUsage>, SmiError> {
        Ok(Vec::new())
    }
}

/// Opens the paths it knows (answering with their ids); the rest are refused.
struct Fakes(Vec<(String, u32)>);

impl Opener for Fakes {
    fn open(&self, path: &str) -> Result<Box<dyn DeviceAccess>, SmiError> {
        match self.0.iter().find(|(p, _)| p == path) {
            Some((_, id)) => Ok(Box::new(Answers(*id))),
            None => Err(SmiError::new(
                Errno::ENODEV,
                format!("open failed: ENODEV: {path}: nobody listens"),
            )),
        }
    }
}

fn smi(args: &[&str], opener: &dyn Opener, disc: &Discovery) -> (i32, String, String) {
    let mut argv = vec!["davinci-smi".to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = crate::run(&argv, disc, opener, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn nowhere(root: &Path) -> Discovery {
    Discovery {
        device_env: None,
        dev_dir: root.join("dev"),
        default_socket_dir: root.join("none").into(),
    }
}

#[test]
fn generate_names_devices_by_get_info_and_keeps_unreachable_ones_with_a_warning() {
    let root = scratch("gen");
    let socks = root.join("run");
    std::fs::create_dir_all(&socks).unwrap();
    // Sockets that exist; davinci0 answers (as device 0), davinci7's daemon is gone.
    let _l0 = UnixListener::bind(socks.join("davinci0.sock")).unwrap();
    drop(UnixListener::bind(socks.join("davinci7.sock")).unwrap());
    let p0 = format!("mock:{}/davinci0.sock", socks.display());
    let p7 = format!("mock:{}/davinci7.sock", socks.display());
    let opener = Fakes(vec![(p0.clone(), 0)]);
    let disc = nowhere(&root);
    let dir = socks.to_str().unwrap();
    let (code, out, err) = smi(&["--socket-dir", dir, "cdi", "generate"], &opener, &disc);
    assert_eq!(code, exit::OK, "{err}");
    let v: Value = serde_norway::from_str(&out).unwrap();
    CdiSchema::load().assert_valid(&v);
    assert_eq!(names(&v), ["davinci0", "davinci7", "all"]);
    assert_eq!(
        device(&v, "davinci7")["containerEdits"]["env"],
        json!([
            format!("DAVINCI_DEVICE={p7}"),
            format!("DAVINCI_VISIBLE_DEVICES={p7}")
        ])
    );
    assert_eq!(
        err,
        format!(
            "davinci-smi: warning: device 7 ({p7}) is unreachable (open failed: ENODEV: \
             {p7}: nobody listens); it is in the spec by its path\n"
        )
    );
    // With --json: one document, the spec in it, the unreachable device marked.
    let (code, out, err) = smi(
        &["--socket-dir", dir, "cdi", "generate", "--json"],
        &opener,
        &disc,
    );
    assert_eq!((code, err.as_str()), (exit::OK, ""));
    let d: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["schema"], "davinci-smi/v1");
    assert_eq!(d["command"], "cdi-generate");
    assert_eq!(d["exit_code"], 0);
    assert_eq!(d["output"], Value::Null);
    assert_eq!(d["kind"], DEFAULT_KIND);
    // 0.5.0 unless told otherwise: every CDI runtime loads it (Debian 12's podman 4.3 too).
    assert_eq!(d["cdi_version"], "0.5.0");
    assert!(!d["spec"].to_string().contains("annotations"));
    assert_eq!(d["devices"][0]["health"], "ok");
    assert_eq!(d["devices"][1]["name"], "davinci7");
    assert_eq!(d["devices"][1]["health"], "unreachable");
    assert_eq!(d["devices"][1]["error"]["errno"], "ENODEV");
    assert_eq!(d["warnings"].as_array().unwrap().len(), 1);
    CdiSchema::load().assert_valid(&d["spec"]);
    // --cdi-version 0.6.0: declared, with annotations, and a warning naming the field a
    // runtime with an older CDI library refuses.
    let (code, out, _) = smi(
        &[
            "--socket-dir",
            dir,
            "cdi",
            "generate",
            "--json",
            "--cdi-version",
            "0.6.0",
        ],
        &opener,
        &disc,
    );
    assert_eq!(code, exit::OK);
    let d: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&d["cdi_version"], &d["spec"]["cdiVersion"]),
        (&json!(CDI_VERSION), &json!("0.6.0"))
    );
    assert!(
        d["spec"].to_string().contains("annotations"),
        "{}",
        d["spec"]
    );
    let warnings = d["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[1]
        .as_str()
        .unwrap()
        .contains("unknown field \"annotations\""));
    CdiSchema::load().assert_valid(&d["spec"]);
    // GET_INFO's id wins over the file name's.
    let opener = Fakes(vec![(p0.clone(), 4)]);
    let (_, out, _) = smi(
        &["--device", &p0, "cdi", "generate", "--format", "json"],
        &opener,
        &disc,
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(names(&v), ["davinci4", "all"]);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn generate_refuses_devices_a_container_could_not_use_and_writes_nothing() {
    let root = scratch("refuse");
    let disc = nowhere(&root);
    let out_file = root.join("davinci.yaml");
    let o = out_file.to_str().unwrap();
    let none = Fakes(Vec::new());
    let run = |args: &[&str]| {
        let r = smi(args, &none, &disc);
        assert!(!out_file.exists(), "{args:?} wrote a file");
        r
    };
    // Nothing found: where it looked.
    let (code, out, err) = run(&["cdi", "generate", "-o", o]);
    assert_eq!((code, out.as_str()), (exit::NOT_FOUND, ""));
    assert!(
        err.starts_with("davinci-smi: no davinci devices found (looked for "),
        "{err}"
    );
    assert!(err.contains("/dev/davinci<N>: no such directory"), "{err}");
    // A named node that does not exist.
    let missing = root.join("davinci3");
    let m = missing.to_str().unwrap();
    let (code, _, err) = run(&["--device", m, "cdi", "generate", "-o", o]);
    assert_eq!(code, exit::NOT_FOUND);
    assert_eq!(err, format!("davinci-smi: {m}: no such device node\n"));
    // A regular file is not a device node; a socket path that is not a socket.
    std::fs::write(&missing, b"").unwrap();
    let (code, _, err) = run(&["--device", m, "cdi", "generate", "-o", o]);
    assert_eq!(code, exit::OTHER);
    assert!(err.contains("not a character device"), "{err}");
    let sock = format!("mock:{m}");
    let (_, _, err) = run(&["--device", &sock, "cdi", "generate"]);
    assert!(err.contains(": not a socket"), "{err}");
    // The embedded mock lives in one process.
    let (code, _, err) = run(&["--device", "embedded", "cdi", "generate", "-o", o]);
    assert_eq!(code, exit::OTHER);
    assert!(err.contains("cannot be given to a container"), "{err}");
    // A path that does not say its id, of a device that does not answer.
    let odd = root.join("npu.sock");
    let _l = UnixListener::bind(&odd).unwrap();
    let p = format!("mock:{}", odd.display());
    let (code, _, err) = run(&["--device", &p, "cdi", "generate", "-o", o]);
    assert_eq!(code, exit::OTHER);
    assert!(err.contains("cannot name this device"), "{err}");
    // Usage errors: a bad kind, --loop, yaml into .json, no subcommand.
    let (code, _, err) = run(&["cdi", "generate", "--kind", "npu"]);
    assert_eq!(code, exit::USAGE);
    assert!(err.contains("'npu' for '--kind <KIND>'"), "{err}");
    assert!(err.contains("VENDOR/CLASS"), "{err}");
    let (code, out, _) = run(&["--json", "cdi", "generate", "--kind", "a/b/c"]);
    assert_eq!(code, exit::USAGE);
    let d: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(d["command"], "usage-error");
    let (code, _, err) = run(&["--loop", "1", "cdi", "generate"]);
    assert_eq!(code, exit::USAGE);
    assert!(err.contains("do not apply to `cdi generate`"), "{err}");
    let (code, _, err) = run(&["--query", "id", "cdi", "generate"]);
    assert_eq!(code, exit::USAGE, "{err}");
    let (code, _, _) = run(&["cdi"]);
    assert_eq!(code, exit::USAGE);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn generate_writes_the_file_and_says_so() {
    let root = scratch("file");
    let socks = root.join("run");
    std::fs::create_dir_all(&socks).unwrap();
    let _l = UnixListener::bind(socks.join("davinci1.sock")).unwrap();
    let p1 = format!("mock:{}/davinci1.sock", socks.display());
    let opener = Fakes(vec![(p1.clone(), 1)]);
    let disc = nowhere(&root);
    let file = root.join("davinci.json");
    let (code, out, err) = smi(
        &[
            "--device",
            &p1,
            "cdi",
            "generate",
            "--kind",
            "example.com/npu",
            "-o",
            file.to_str().unwrap(),
        ],
        &opener,
        &disc,
    );
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(
        out,
        format!(
            "wrote {} (json, cdiVersion 0.5.0): example.com/npu=davinci1, example.com/npu=all\n",
            file.display()
        )
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    CdiSchema::load().assert_valid(&v);
    assert_eq!(v["kind"], "example.com/npu");
    // An extension runtimes do not load: written, with a warning.
    let yml = root.join("davinci.yml");
    let (code, _, err) = smi(
        &[
            "--device",
            &p1,
            "cdi",
            "generate",
            "-o",
            yml.to_str().unwrap(),
        ],
        &opener,
        &disc,
    );
    assert_eq!(code, 0);
    assert!(
        err.contains("warning:") && err.contains("load only those"),
        "{err}"
    );
    let v: Value = serde_norway::from_str(&std::fs::read_to_string(&yml).unwrap()).unwrap();
    CdiSchema::load().assert_valid(&v);
    let _ = std::fs::remove_dir_all(&root);
}
