//! The spec builder, its checks, the format and the atomic write, every spec validated
//! against upstream's JSON schema (operators/ops/cdi-schema/).

use super::check::version_triple;
use super::schema::{device, device_names as names, CdiSchema, BAD, GOOD};
use super::*;
use serde_json::{json, Value};
use std::path::Path;

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
            "env": ["DAVINCI_DEVICE=/dev/davinci1", "DAVINCI_VISIBLE_DEVICES=/dev/davinci1"],
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
            "env": [
                "DAVINCI_DEVICE=mock:/run/davinci/davinci0.sock",
                "DAVINCI_VISIBLE_DEVICES=mock:/run/davinci/davinci0.sock",
            ],
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

#[test]
fn files_are_written_atomically_with_mode_0644() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("ops-cdi-write-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
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
