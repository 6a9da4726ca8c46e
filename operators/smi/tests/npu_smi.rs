//! `davinci-smi` run as `npu-smi` (a symlink of that name, as installers and scripts find it):
//! npu-smi mode by argv[0], against the samples in tests/npu-smi-reference/. The commands
//! against devices are tested with fakes in src/npu/tests.rs; here, what needs no device.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use davinci_smi::test_util::run;

const NOWHERE: &str = "mock:/nonexistent-davinci-smi-test/davinci0.sock";

/// `npu-smi`, a symlink to the built davinci-smi, made once (the tests run in parallel).
fn npu_smi() -> PathBuf {
    static LINK: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LINK.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("smi-npu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("npu-smi");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_davinci-smi"), &link).unwrap();
        link
    })
    .clone()
}

fn npu(args: &[&str]) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!("smi-npu-none-{}", std::process::id()));
    run(Command::new(npu_smi())
        .args(args)
        .stdin(Stdio::null())
        .env_remove("DAVINCI_DEVICE")
        .env("DAVINCI_SOCKET_DIR", &dir))
}

#[test]
fn version_through_a_symlink_named_npu_smi() {
    let (code, out, err) = npu(&["-v"]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, include_str!("npu-smi-reference/v.txt"));
    let (code, out, _) =
        run(Command::new(env!("CARGO_BIN_EXE_davinci-smi")).args(["--npu-smi", "-v"]));
    assert_eq!(
        (code, out.as_str()),
        (0, include_str!("npu-smi-reference/v.txt"))
    );
    // Under its own name: its own version, and -v is no option.
    let (code, out, _) = run(Command::new(env!("CARGO_BIN_EXE_davinci-smi")).arg("-V"));
    assert_eq!(
        (code, out.as_str()),
        (0, concat!("davinci-smi ", env!("CARGO_PKG_VERSION"), "\n"))
    );
    let (code, _, _) = run(Command::new(env!("CARGO_BIN_EXE_davinci-smi")).arg("-v"));
    assert_eq!(code, 2);
}

#[test]
fn an_unreachable_npu_in_npu_smis_table_and_details() {
    let (code, out, err) = npu(&["--device", NOWHERE, "info"]);
    assert_eq!(code, 3, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[1], "| npu-smi 25.5.1                  Version: NA                                                   |");
    assert!(
        out.contains("| 0     NA                  | Unreachable   |"),
        "{out}"
    );
    assert!(
        err.starts_with("davinci-smi: device 0: open failed: ENODEV"),
        "{err}"
    );
    for t in ["usages", "device-share", "board", "health"] {
        let (code, out, err) = npu(&["--device", NOWHERE, "info", "-t", t, "-i", "0", "-c", "0"]);
        assert_eq!((code, out.as_str()), (3, ""), "{t}: {err}");
    }
    // info -l lists what was found without asking it.
    let (code, out, _) = npu(&["--device", NOWHERE, "info", "-l"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        format!(
            "\t{:<30} : 1\n\n\t{:<30} : 0\n\t{:<30} : 1\n",
            "Total Count", "NPU ID", "Chip Count"
        )
    );
}

#[test]
fn set_from_a_pipe_does_not_ask() {
    let (code, out, err) = npu(&[
        "--device",
        NOWHERE,
        "set",
        "-t",
        "device-share",
        "-i",
        "0",
        "-c",
        "0",
        "-d",
        "1",
    ]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(!out.contains("(Y/N)"), "{out}");
    assert!(
        out.starts_with(&format!("\t{:<30} : FAIL\n", "Status")),
        "{out}"
    );
}

#[test]
fn usage_errors_and_help() {
    let (code, out, err) = npu(&["info", "-t", "usages"]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("--id"), "{err}");
    let (code, out, _) = npu(&["--help"]);
    assert_eq!(code, 0);
    for s in [
        "npu-smi mode",
        "usages|common|memory|board|health|temp|power|volt|product|device-share",
        "-t topo",
        "NA",
        "25.5.1",
    ] {
        assert!(out.contains(s), "{s}: {out}");
    }
}
