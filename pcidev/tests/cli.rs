//! The `davinci-pcidev` binary's command line, run as a user runs it.

use std::process::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_davinci-pcidev"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_and_bad_command_lines() {
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--socket PATH") && out.contains("ivshmem-doorbell"));
    let (code, _, err) = run(&[]);
    assert_eq!(code, 2);
    assert!(err.contains("--socket PATH is required"), "{err}");
    let (code, _, err) = run(&["--socket", "/nonexistent/x", "--size", "3M"]);
    assert_eq!(code, 2);
    assert!(err.contains("power of two"), "{err}");
}

#[test]
fn a_socket_that_cannot_be_bound_is_a_clear_failure() {
    let dir = tempfile::tempdir().unwrap();
    let taken = dir.path().join("taken");
    std::fs::write(&taken, b"").unwrap();
    let (code, _, err) = run(&["--socket", taken.to_str().unwrap(), "--size", "64K"]);
    assert_eq!(code, 1);
    assert!(err.contains("bind") && err.contains("taken"), "{err}");
}
