//! The deployment files (issue 24: a node that comes up by itself): every manifest names an
//! image `scripts/images.sh` builds, by the documented name and the workspace's version; the
//! systemd units' command lines are ones the programs accept, and the CDI unit writes a spec.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use davinci_tests::mockd::{bin, Mockd};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `ExecStart=` of a unit, continuation lines joined, split into words.
fn exec_start(unit: &str) -> Vec<String> {
    let text = read(unit).replace("\\\n", " ");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap_or_else(|| panic!("{unit} has no ExecStart"));
    line.split_whitespace().map(str::to_string).collect()
}

#[test]
fn manifests_name_the_images_the_build_script_makes() {
    let script = read("scripts/images.sh");
    let version = env!("CARGO_PKG_VERSION");
    let manifests = [
        "deploy/kubernetes/mockd-daemonset.yaml",
        "deploy/kubernetes/exporter-daemonset.yaml",
        "deploy/kubernetes/device-plugin-daemonset.yaml",
        "deploy/kubernetes/example-pod.yaml",
    ];
    for m in manifests {
        let text = read(m);
        let images: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("image:"))
            .map(str::trim)
            .collect();
        assert!(!images.is_empty(), "{m} names no image");
        for image in images {
            let (name, tag) = image.split_once(':').unwrap_or((image, ""));
            let tool = name
                .strip_prefix("davinci-rs/")
                .unwrap_or_else(|| panic!("{m}: {image} is not davinci-rs/TOOL"));
            assert_eq!(tag, version, "{m}: {image}");
            assert!(
                script.contains(&format!("{tool}|")) || script.contains(&format!("|{tool})")),
                "{m}: scripts/images.sh does not build {tool}"
            );
        }
    }
}

#[test]
fn the_mockd_unit_starts_a_daemon_with_options_it_accepts() {
    let args = exec_start("deploy/systemd/davinci-mockd.service");
    assert_eq!(args[0], "/usr/local/bin/davinci-mockd");
    // The unit's groups come from davinci.sysusers; here any existing group stands in.
    let sysusers = read("deploy/systemd/davinci.sysusers");
    let mut words: Vec<String> = args[1..].to_vec();
    for w in words.iter_mut() {
        if sysusers
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(w.as_str()))
        {
            *w = "0".into();
        }
    }
    match davinci_mockd::cli::parse_args(words.clone()) {
        Ok(davinci_mockd::cli::Command::Run(cfg, ..)) => {
            assert_eq!(cfg.socket_mode, 0o660);
            assert_eq!(cfg.socket_group, Some(0));
            assert_eq!(
                cfg.socket_dir.path,
                PathBuf::from(davinci_mockd_proto::SYSTEM_SOCKET_DIR)
            );
        }
        other => panic!("{words:?}: {other:?}"),
    }
}

#[test]
fn the_cdi_unit_writes_a_spec_of_the_nodes_devices() {
    let args = exec_start("deploy/systemd/davinci-cdi.service");
    assert_eq!(args[0], "/usr/local/bin/davinci-smi");
    let d = Mockd::start(&["--devices", "2"]).unwrap();
    let out = std::env::temp_dir().join(format!("deploy-cdi-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let spec = out.join("davinci.yaml");
    // The unit's arguments, with the spec written here instead of /var/run/cdi.
    let words: Vec<String> = args[1..]
        .iter()
        .map(|w| {
            if w.starts_with("/var/run/cdi/") {
                spec.display().to_string()
            } else {
                w.clone()
            }
        })
        .collect();
    let run = Command::new(bin("testbin-davinci-smi"))
        .args(&words)
        .env("DAVINCI_SOCKET_DIR", d.dir())
        .env_remove("DAVINCI_DEVICE")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(&spec).unwrap();
    assert!(text.starts_with("cdiVersion: 0.5.0\n"), "{text}");
    assert!(text.contains("name: davinci1"), "{text}");
    let _ = std::fs::remove_dir_all(&out);
}
