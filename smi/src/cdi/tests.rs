//! The spec builder, its checks, and `cdi generate` against fake devices, every spec
//! validated against upstream's JSON schema (smi/cdi-schema/).

use super::cdi_schema::{CdiSchema, BAD, GOOD};
use super::*;
use crate::discover::Discovery;
use crate::{exit, DeviceAccess, Opener};
use davinci_uapi::{ClientUsage, DeviceInfo, ShareMode};
use serde_json::{json, Value};
use std::os::unix::net::UnixListener;

fn kernel(id: u32) -> SpecDevice {
    SpecDevice {
        id,
        node: Node::Kernel(format!("/dev/davinci{id}").into()),
    }
}

fn mock(dir: &str, id: u32) -> SpecDevice {
    SpecDevice {
        id,
        node: Node::Mock(format!("{dir}/davinci{id}.sock").into()),
    }
}

/// The spec as JSON, valid by the schema and by [`Spec::check`].
fn valid(spec: &Spec) -> Value {
    let v = spec.to_value();
    CdiSchema::load().assert_valid(&v);
    spec.check().unwrap();
    v
}

fn device<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no device {name}: {v:#}"))
}

fn names(v: &Value) -> Vec<&str> {
    v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect()
}

#[test]
fn the_vendored_schema_gives_upstreams_verdicts_on_upstreams_test_data() {
    let s = CdiSchema::load();
    for (name, text) in GOOD {
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(s.errors(&v), Vec::<String>::new(), "{name}");
    }
    for (name, text) in BAD {
        let v: Value = serde_json::from_str(text).unwrap();
        assert!(!s.errors(&v).is_empty(), "{name} passed");
    }
}

#[test]
fn kernel_devices_get_their_nodes_and_device_env() {
    let spec = build(DEFAULT_KIND, &[kernel(0), kernel(1)]).unwrap();
    let v = valid(&spec);
    assert_eq!(v["cdiVersion"], CDI_VERSION);
    assert_eq!(v["kind"], "davinci.ai/npu");
    assert_eq!(names(&v), ["davinci0", "davinci1", "all"]);
    let d1 = device(&v, "davinci1");
    assert_eq!(
        d1["containerEdits"],
        json!({
            "env": ["DAVINCI_DEVICE=/dev/davinci1"],
            "deviceNodes": [{"path": "/dev/davinci1"}],
        })
    );
    assert_eq!(d1["annotations"][PATH_ANNOTATION], "/dev/davinci1");
    let all = device(&v, "all");
    assert_eq!(
        all["containerEdits"],
        json!({
            "env": [
                "DAVINCI_DEVICE=/dev/davinci0",
                "DAVINCI_VISIBLE_DEVICES=/dev/davinci0,/dev/davinci1",
            ],
            "deviceNodes": [{"path": "/dev/davinci0"}, {"path": "/dev/davinci1"}],
        })
    );
    assert!(v["annotations"][GENERATOR_ANNOTATION]
        .as_str()
        .unwrap()
        .starts_with("davinci-smi "));
}

#[test]
fn mock_devices_get_a_bind_mount_of_their_socket_and_a_mock_path() {
    let spec = build(DEFAULT_KIND, &[mock("/run/davinci", 0)]).unwrap();
    let v = valid(&spec);
    assert_eq!(names(&v), ["davinci0", "all"]);
    let mount = json!({
        "hostPath": "/run/davinci/davinci0.sock",
        "containerPath": "/run/davinci/davinci0.sock",
        "options": ["nosuid", "nodev", "rbind", "rprivate", "noexec"],
    });
    assert_eq!(
        device(&v, "davinci0")["containerEdits"],
        json!({
            "env": ["DAVINCI_DEVICE=mock:/run/davinci/davinci0.sock"],
            "mounts": [mount],
        })
    );
    let all = &device(&v, "all")["containerEdits"];
    assert_eq!(
        all["env"],
        json!([
            "DAVINCI_DEVICE=mock:/run/davinci/davinci0.sock",
            "DAVINCI_VISIBLE_DEVICES=mock:/run/davinci/davinci0.sock",
        ])
    );
    assert_eq!(all["mounts"], json!([mount]));
    assert!(all.get("deviceNodes").is_none(), "{all}");
}

#[test]
fn mixed_devices_are_ordered_by_id_and_all_has_every_node_and_mount() {
    let spec = build(
        "example.com/npu.v2",
        &[mock("/run/davinci", 3), kernel(1), mock("/tmp/d", 2)],
    )
    .unwrap();
    let v = valid(&spec);
    assert_eq!(v["kind"], "example.com/npu.v2");
    assert_eq!(names(&v), ["davinci1", "davinci2", "davinci3", "all"]);
    let all = &device(&v, "all")["containerEdits"];
    assert_eq!(
        all["env"],
        json!([
            "DAVINCI_DEVICE=/dev/davinci1",
            "DAVINCI_VISIBLE_DEVICES=/dev/davinci1,mock:/tmp/d/davinci2.sock,mock:/run/davinci/davinci3.sock",
        ])
    );
    assert_eq!(all["deviceNodes"], json!([{"path": "/dev/davinci1"}]));
    let hosts: Vec<&str> = all["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["hostPath"].as_str().unwrap())
        .collect();
    assert_eq!(
        hosts,
        ["/tmp/d/davinci2.sock", "/run/davinci/davinci3.sock"]
    );
    // A dot in the class is a 0.6.0 feature: the version written has it.
    assert_eq!(spec.required_version(), "0.6.0");
}

#[test]
fn the_version_written_is_the_oldest_with_every_field_used() {
    let mut spec = build(DEFAULT_KIND, &[kernel(0)]).unwrap();
    assert_eq!(spec.required_version(), CDI_VERSION);
    // Without annotations nothing here needs more than 0.3.0.
    spec.annotations.clear();
    for d in &mut spec.devices {
        d.annotations.clear();
    }
    assert_eq!(spec.required_version(), "0.3.0");
    spec.devices[0].name = "0".into();
    assert_eq!(spec.required_version(), "0.5.0");
}

#[test]
fn build_refuses_what_a_runtime_could_not_use() {
    let e = build(DEFAULT_KIND, &[]).unwrap_err();
    assert!(e.contains("no devices"), "{e}");
    let e = build(DEFAULT_KIND, &[kernel(0), mock("/run/davinci", 0)]).unwrap_err();
    assert!(
        e.contains("both davinci0 (/dev/davinci0 and mock:/run/davinci/davinci0.sock)"),
        "{e}"
    );
    let e = build(DEFAULT_KIND, &[mock("/run/a,b", 0)]).unwrap_err();
    assert!(e.contains("','"), "{e}");
    let rel = SpecDevice {
        id: 0,
        node: Node::Mock("run/davinci0.sock".into()),
    };
    let e = build(DEFAULT_KIND, &[rel]).unwrap_err();
    assert!(e.contains("must be absolute"), "{e}");
    let e = build("davinci", &[kernel(0)]).unwrap_err();
    assert!(e.contains("not a CDI kind"), "{e}");
}

#[test]
fn kinds_are_checked_as_upstream_checks_them() {
    for ok in [
        "davinci.ai/npu",
        "vendor.com/foo",
        "foo.bar.baz/foo-bar123.B_az",
        "yet_another-vendor2.com/c-lass_2",
        "a/b",
    ] {
        assert_eq!(parse_kind(ok).as_deref(), Ok(ok));
    }
    for (bad, why) in [
        ("foo", "no '/'"),
        (
            "vendor.com/foo/",
            "the class \"foo/\" has the character '/'",
        ),
        ("vendor.com/foo/bar", "has the character '/'"),
        ("/npu", "the vendor is empty"),
        ("davinci.ai/", "the class is empty"),
        ("_invalid.com/class", "must start with a letter"),
        ("invalid2.com-/class", "must end with a letter or digit"),
        ("invalid3.com/_class", "must start with a letter"),
        ("invalid4.com/class_", "must end with a letter or digit"),
        ("*.com/*dev", "must start with a letter"),
        ("vendor.com/np u", "has the character ' '"),
    ] {
        let e = parse_kind(bad).unwrap_err();
        assert!(e.contains(why), "{bad}: {e}");
        assert!(e.contains("VENDOR/CLASS, e.g. davinci.ai/npu"), "{e}");
    }
    let long_class = format!("v.com/{}", "c".repeat(64));
    assert!(parse_kind(&long_class)
        .unwrap_err()
        .contains("longer than 63"));
    assert!(parse_kind(&format!("v.com/{}", "c".repeat(63))).is_ok());
}

#[test]
fn the_schema_catches_a_broken_spec() {
    let s = CdiSchema::load();
    let good = build(DEFAULT_KIND, &[kernel(0)]).unwrap().to_value();
    assert!(s.errors(&good).is_empty());
    let broken = |f: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        f(&mut v);
        s.errors(&v)
    };
    let e = broken(&|v| {
        v.as_object_mut().unwrap().remove("cdiVersion");
    });
    assert!(e.iter().any(|m| m.contains("cdiVersion")), "{e:?}");
    let e = broken(&|v| v["kind"] = json!(7));
    assert!(e.iter().any(|m| m.starts_with("/kind")), "{e:?}");
    let e = broken(&|v| {
        v["devices"][0]
            .as_object_mut()
            .unwrap()
            .remove("containerEdits");
    });
    assert!(e.iter().any(|m| m.contains("containerEdits")), "{e:?}");
    let e = broken(&|v| {
        v["devices"][0]["containerEdits"]["deviceNodes"] = json!([{"hostPath": "/dev/x"}])
    });
    assert!(
        e.iter()
            .any(|m| m.starts_with("/devices/0/containerEdits/deviceNodes/0")),
        "{e:?}"
    );
    let e = broken(&|v| v["devices"][1]["containerEdits"]["deviceNodes"][0]["uid"] = json!(-1));
    assert!(
        !e.is_empty(),
        "a negative uid passed: the $ref to defs.json is not followed"
    );
    let e = broken(&|v| v["annotations"]["x"] = json!(1));
    assert!(!e.is_empty(), "a number annotation passed");
}

#[test]
fn check_catches_what_the_schema_does_not() {
    let good = build(DEFAULT_KIND, &[kernel(0), kernel(1)]).unwrap();
    let broken = |f: &dyn Fn(&mut Spec)| {
        let mut s = good.clone();
        f(&mut s);
        // The schema has no opinion on any of these...
        CdiSchema::load().assert_valid(&s.to_value());
        // ... the check has.
        s.check().unwrap_err()
    };
    let e = broken(&|s| s.kind = "npu".into());
    assert!(e.contains("not a CDI kind"), "{e}");
    let e = broken(&|s| s.devices[1].name = "davinci0".into());
    assert!(e.contains("two devices are named \"davinci0\""), "{e}");
    let e = broken(&|s| s.devices[0].name = "-x".into());
    assert!(e.contains("not a CDI device name"), "{e}");
    let e = broken(&|s| s.devices[0].container_edits.env[0] = "=x".into());
    assert!(e.contains("not NAME=VALUE"), "{e}");
    let e = broken(&|s| s.cdi_version = "0.9.0".into());
    assert!(e.contains("not a CDI version"), "{e}");
    let e = broken(&|s| s.cdi_version = "0.5.0".into());
    assert!(e.contains("at least 0.6.0"), "{e}");
    let e = broken(&|s| s.devices.clear());
    assert!(e.contains("no devices"), "{e}");
    let e = broken(&|s| s.devices[0].container_edits = ContainerEdits::default());
    assert!(e.contains("no container edits"), "{e}");
    let e = broken(&|s| s.devices[0].container_edits.device_nodes[0].path = "dev/x".into());
    assert!(e.contains("not an absolute path"), "{e}");
    let e = broken(&|s| {
        s.annotations.insert("Bad Key".into(), "v".into());
    });
    assert!(e.contains("not a qualified name"), "{e}");
}

#[test]
fn yaml_and_json_say_the_same() {
    let spec = build(DEFAULT_KIND, &[kernel(0), mock("/run/davinci", 1)]).unwrap();
    let yaml = spec.to_yaml().unwrap();
    assert!(
        yaml.starts_with("cdiVersion: 0.6.0\nkind: davinci.ai/npu\n"),
        "{yaml}"
    );
    let from_yaml: Value = serde_norway::from_str(&yaml).unwrap();
    assert_eq!(from_yaml, spec.to_value());
    CdiSchema::load().assert_valid(&from_yaml);
    let from_json: Value = serde_json::from_str(&spec.to_json()).unwrap();
    assert_eq!(from_json, spec.to_value());
    let back: Spec = serde_norway::from_str(&yaml).unwrap();
    assert_eq!(back, spec);
}

#[test]
fn the_format_follows_the_option_then_the_file_name() {
    let f = |fmt, out: Option<&str>| choose_format(fmt, out.map(Path::new));
    assert_eq!(f(None, None), Ok((SpecFormat::Yaml, None)));
    assert_eq!(
        f(Some(SpecFormat::Json), None),
        Ok((SpecFormat::Json, None))
    );
    assert_eq!(
        f(None, Some("/etc/cdi/davinci.json")),
        Ok((SpecFormat::Json, None))
    );
    assert_eq!(
        f(None, Some("/etc/cdi/davinci.yaml")),
        Ok((SpecFormat::Yaml, None))
    );
    // JSON is YAML: a .yaml file may hold it.
    assert_eq!(
        f(Some(SpecFormat::Json), Some("/etc/cdi/davinci.yaml")),
        Ok((SpecFormat::Json, None))
    );
    let e = f(Some(SpecFormat::Yaml), Some("/etc/cdi/davinci.json")).unwrap_err();
    assert!(e.contains("ends in .json"), "{e}");
    for name in ["/etc/cdi/davinci.yml", "/etc/cdi/davinci"] {
        let (fmt, w) = f(None, Some(name)).unwrap();
        assert_eq!(fmt, SpecFormat::Yaml);
        assert!(w.unwrap().contains("load only those"), "{name}");
    }
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("smi-cdi-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn files_are_written_atomically_with_mode_0644() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("write");
    let file = dir.join("davinci.yaml");
    std::fs::write(&file, "old").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    write_atomically(&file, b"new spec\n").unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "new spec\n");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o644);
    // Nothing else is left in the directory.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("davinci.yaml")]);
    // A missing directory: a clear error, nothing created.
    let e = write_atomically(&dir.join("no/such/davinci.yaml"), b"x").unwrap_err();
    assert!(
        e.message.contains(&format!(
            "the directory {} does not exist (create it first: mkdir -p",
            dir.join("no/such").display()
        )),
        "{}",
        e.message
    );
    assert!(!dir.join("no").exists());
    // A directory where the file should be: refused, untouched.
    let e = write_atomically(&dir, b"x").unwrap_err();
    assert!(e.message.ends_with("it is a directory"), "{}", e.message);
    // A file where the directory should be.
    let e = write_atomically(&file.join("x.yaml"), b"x").unwrap_err();
    assert!(e.message.contains("is not a directory"), "{}", e.message);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "new spec\n");
    let _ = std::fs::remove_dir_all(&dir);
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
        json!([format!("DAVINCI_DEVICE={p7}")])
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
    assert_eq!(d["cdi_version"], CDI_VERSION);
    assert_eq!(d["devices"][0]["health"], "ok");
    assert_eq!(d["devices"][1]["name"], "davinci7");
    assert_eq!(d["devices"][1]["health"], "unreachable");
    assert_eq!(d["devices"][1]["error"]["errno"], "ENODEV");
    assert_eq!(d["warnings"].as_array().unwrap().len(), 1);
    CdiSchema::load().assert_valid(&d["spec"]);
    // --cdi-version 0.5.0: declared, and no annotations anywhere.
    let (code, out, _) = smi(
        &[
            "--socket-dir",
            dir,
            "cdi",
            "generate",
            "--json",
            "--cdi-version",
            "0.5.0",
        ],
        &opener,
        &disc,
    );
    assert_eq!(code, exit::OK);
    let d: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&d["cdi_version"], &d["spec"]["cdiVersion"]),
        (&json!("0.5.0"), &json!("0.5.0"))
    );
    assert!(
        !d["spec"].to_string().contains("annotations"),
        "{}",
        d["spec"]
    );
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
            "wrote {} (json, cdiVersion 0.6.0): example.com/npu=davinci1, example.com/npu=all\n",
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

/// `--cdi-version 0.5.0`: the same devices and edits without annotations, declared 0.5.0,
/// valid by the schema and by the checks a 0.5.0 library makes; a kind that needs 0.6.0 (a
/// dot in its class) is refused rather than written under a version that cannot carry it.
#[test]
fn a_0_5_0_spec_has_no_annotations_and_refuses_what_needs_0_6_0() {
    let old = build_for(
        DEFAULT_KIND,
        &[kernel(0), mock("/run/davinci", 1)],
        CdiVersion::V0_5_0,
    )
    .unwrap();
    let v = valid(&old);
    assert_eq!(v["cdiVersion"], "0.5.0");
    assert!(v
        .get("annotations")
        .is_none_or(|a| a.as_object().is_some_and(|m| m.is_empty())));
    for d in v["devices"].as_array().unwrap() {
        assert!(
            d.get("annotations")
                .is_none_or(|a| a.as_object().is_some_and(|m| m.is_empty())),
            "{d}"
        );
    }
    assert!(version_triple(old.required_version()) <= version_triple("0.5.0"));
    let new = build(DEFAULT_KIND, &[kernel(0), mock("/run/davinci", 1)]).unwrap();
    let edits = |s: &Spec| {
        s.devices
            .iter()
            .map(|d| {
                (
                    d.name.clone(),
                    serde_json::to_value(&d.container_edits).unwrap(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(edits(&old), edits(&new), "only the annotations differ");
    assert_eq!(new.cdi_version, "0.6.0");

    let e = build_for("davinci.ai/n.pu", &[kernel(0)], CdiVersion::V0_5_0).unwrap_err();
    assert!(e.contains("at least 0.6.0"), "{e}");
    assert!(build_for("davinci.ai/n.pu", &[kernel(0)], CdiVersion::V0_6_0).is_ok());
}
