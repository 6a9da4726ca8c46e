//! `davinci-smi` as a process: what reaches stdout and stderr, and the exit status. These need
//! no device (tests with a running `davinci-mockd` are in tests/tests/smi_cli.rs).
#![forbid(unsafe_code)]

use std::process::Command;

use davinci_ops::cdi::schema::CdiSchema;
use davinci_smi::test_util::{doc, run};
use serde_json::Value;

/// `davinci-smi ARGS` with nothing to discover unless the arguments name a device: exit
/// status, stdout, stderr.
fn smi(args: &[&str]) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!("smi-cli-none-{}", std::process::id()));
    run(Command::new(env!("CARGO_BIN_EXE_davinci-smi"))
        .args(args)
        .env_remove("DAVINCI_DEVICE")
        .env("DAVINCI_SOCKET_DIR", &dir))
}

const NOWHERE: &str = "mock:/nonexistent-davinci-smi-test/davinci0.sock";

#[test]
fn argument_errors_with_json_print_a_document_on_stdout() {
    for a in [
        &["--json", "set", "-t", "device-share", "-i", "0", "-d", "2"][..],
        &["info", "--bogus", "--json"],
        &["info", "-c", "1", "--json"],
        &["--json", "info", "--query", "nope"],
    ] {
        let (code, out, err) = smi(a);
        assert_eq!(code, 2, "{a:?}: {out}{err}");
        assert_eq!(err, "", "{a:?}");
        let v = doc(&out);
        assert_eq!(v["command"], "usage-error");
        assert_eq!(v["exit_code"], 2);
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
}

#[test]
fn text_errors_go_to_stderr_and_results_to_stdout() {
    let (code, out, err) = smi(&["info", "-t", "nope"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("invalid value 'nope'"), "{err}");
    let (code, out, err) = smi(&["--device", NOWHERE, "info", "-c", "0"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("| Unreachable |"), "{out}");
    assert!(!out.contains("ENODEV"), "{out}");
    assert!(
        err.starts_with("davinci-smi: device 0: open failed: ENODEV:"),
        "{err}"
    );
    let (code, out, err) = smi(&["info"]);
    assert_eq!((code, out.as_str()), (3, ""));
    assert!(err.contains("no davinci devices found"), "{err}");
    // With --json the error is in the document and stderr stays empty.
    let (code, out, err) = smi(&["--device", NOWHERE, "info", "--json"]);
    assert_eq!((code, err.as_str()), (3, ""));
    assert_eq!(doc(&out)["devices"][0]["error"]["errno"], "ENODEV");
}

#[test]
fn loop_with_count_prints_one_document_per_line() {
    let (code, out, err) = smi(&[
        "--device", NOWHERE, "--device", NOWHERE, "list", "--loop", "0.01", "--count", "3",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let docs: Vec<Value> = out.lines().map(doc).collect();
    assert_eq!(docs.len(), 3, "{out}");
    for d in docs {
        // Named twice, listed once.
        assert_eq!(d["devices"].as_array().map(Vec::len), Some(1), "{d}");
    }
}

#[test]
fn help_documents_the_new_options() {
    let (code, out, _) = smi(&["--help"]);
    assert_eq!(code, 0);
    for s in [
        "--query",
        "--format",
        "--loop",
        "--count",
        "usage-error",
        "used once",
        "--query-gpu",
        "npu-smi mode",
        "--npu-smi",
        "npu-smi version: 25.5.1",
        "info -t usages|common|memory|",
    ] {
        assert!(out.contains(s), "{s}: {out}");
    }
    let (_, out, _) = smi(&["info", "--help"]);
    for s in [
        "-c, --chip",
        "memory.used [MiB]",
        "tasks.completed",
        "share_mode",
        "utilization.gpu [%]",
        "uuid",
        "name",
    ] {
        assert!(out.contains(s), "{s}: {out}");
    }
    let (_, out, _) = smi(&["set", "--help"]);
    assert!(out.contains("-c, --chip"), "{out}");
}

#[test]
fn cdi_generate_is_documented_in_help() {
    let (code, out, _) = smi(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("cdi "), "{out}");
    let (code, out, _) = smi(&["cdi", "generate", "--help"]);
    assert_eq!(code, 0);
    for s in [
        "-o, --output <FILE>",
        "--format <FORMAT>",
        "[default: davinci.ai/npu]",
        "DAVINCI_VISIBLE_DEVICES",
        "rbind",
        "cdiVersion is 0.5.0",
        "--socket-group",
        "/etc/cdi",
        "atomically",
    ] {
        assert!(out.contains(s), "{s}: {out}");
    }
}

#[test]
fn cdi_generate_keeps_a_device_whose_daemon_is_gone_and_says_so() {
    // A socket file nobody listens on: the daemon died without removing it.
    let dir = std::env::temp_dir().join(format!("smi-cli-cdi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    drop(std::os::unix::net::UnixListener::bind(dir.join("davinci3.sock")).unwrap());
    let (code, out, err) = smi(&["--socket-dir", dir.to_str().unwrap(), "cdi", "generate"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
    let sock = format!("mock:{}/davinci3.sock", dir.display());
    assert!(
        err.starts_with(&format!(
            "davinci-smi: warning: device 3 ({sock}) is unreachable (open failed: "
        )),
        "{err}"
    );
    assert!(err.ends_with("; it is in the spec by its path\n"), "{err}");
    let spec: Value = serde_norway::from_str(&out).unwrap();
    CdiSchema::load().assert_valid(&spec);
    assert_eq!(spec["devices"][0]["name"], "davinci3");
    assert_eq!(
        spec["devices"][0]["containerEdits"]["env"][0],
        format!("DAVINCI_DEVICE={sock}").as_str()
    );
}
