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
    let (code, _, err) = run(&["--socket", taken.to_str().unwrap(), "--size", "128K"]);
    assert_eq!(code, 1);
    assert!(err.contains("bind") && err.contains("taken"), "{err}");
}

/// SIGTERM (or SIGINT) stops the device cleanly: exit 0, its socket file gone, so the next
/// start binds the same path.
#[test]
fn sigterm_stops_the_device_and_removes_its_socket() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("dev.sock");
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_davinci-pcidev"))
            .args(["--socket", sock.to_str().unwrap(), "--size", "1M"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !sock.exists() {
            assert!(
                Instant::now() < deadline,
                "the device never bound its socket"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        kill(Pid::from_raw(child.id() as i32), signal).unwrap();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{signal}: the device did not stop");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(0), "{signal}: {err}");
        assert!(err.contains("stopping") && err.contains("stopped"), "{err}");
        // What it served, for the operator (and scripts/pcidev-smoke.sh).
        assert!(
            err.contains("guests gone 0; admin requests 0 (0 malformed); data doorbells 0"),
            "{err}"
        );
        assert!(!sock.exists(), "{signal}: the socket file stayed behind");
    }
}
