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

/// The binary serving `sock` under the umask `umask` (set by `sh`, which then execs it) with
/// `extra` arguments, once its socket is there; its stderr piped.
fn serve(sock: &std::path::Path, umask: &str, extra: &[&str]) -> std::process::Child {
    use std::time::{Duration, Instant};
    let mut child = Command::new("sh")
        .args(["-c", "umask \"$1\"; shift; exec \"$@\"", "sh", umask])
        .arg(env!("CARGO_BIN_EXE_davinci-pcidev"))
        .args(["--socket", sock.to_str().unwrap(), "--size", "1M"])
        .args(extra)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    // Bound, then given its mode: the line that says so comes after both.
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains(" mode ") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut err, &mut line).unwrap();
        assert!(n > 0 && Instant::now() < deadline, "never bound: {line}");
    }
    child.stderr = Some(std::process::ChildStderr::from(std::os::fd::OwnedFd::from(
        err.into_inner(),
    )));
    child
}

/// SIGTERM, then the rest of its stderr.
fn stop(mut child: std::process::Child) -> String {
    use nix::sys::signal::{kill, Signal};
    kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        Signal::SIGTERM,
    )
    .unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0), "{err}");
    err
}

/// Whoever may connect gets BAR2 mapped read-write: the socket is 0600 under any umask (000
/// included), and takes the mode and group asked for.
#[test]
fn the_socket_is_0600_whatever_the_umask_and_takes_the_mode_and_group_asked() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("dev.sock");
    let child = serve(&sock, "000", &[]);
    let m = std::fs::metadata(&sock).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o600);
    stop(child);
    let gid = nix::unistd::getegid().as_raw().to_string();
    let child = serve(
        &sock,
        "000",
        &["--socket-mode", "0660", "--socket-group", &gid],
    );
    let m = std::fs::metadata(&sock).unwrap();
    assert_eq!((m.mode() & 0o7777, m.gid().to_string()), (0o660, gid));
    stop(child);
}

/// One guest at a time: a second peer is turned away while the first is connected, before
/// the ivshmem opening, so it receives nothing (no byte, so no descriptor: not BAR2's memfd,
/// no eventfd); said on stderr and counted; the first stays connected and hears nothing of
/// it. Once the first has gone, the next peer is served.
#[test]
fn a_second_peer_is_refused_before_it_receives_bar2() {
    use davinci_ivshmem::{Error, PeerClient};
    use std::time::Duration;
    let limit = Duration::from_secs(20);
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("dev.sock");
    let child = serve(&sock, "022", &[]);
    let mut first = PeerClient::connect(&sock, 2, limit).unwrap();
    first.wait_ready(limit).unwrap();
    let second = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    second.set_read_timeout(Some(limit)).unwrap();
    assert_eq!(
        received_until_closed(&second),
        (0, 0),
        "the refused peer got bytes or descriptors"
    );
    let end = first.next_notice(Duration::from_millis(300)).unwrap_err();
    assert!(matches!(end, Error::Timeout(_)), "{end}");
    drop(first);
    let mut next = PeerClient::connect(&sock, 2, limit).unwrap();
    next.wait_ready(limit).unwrap();
    assert_eq!(next.id().0, 1, "the lowest free id");
    drop(next);
    let err = stop(child);
    assert!(
        err.contains(&format!("refused a peer on {}", sock.display()))
            && err.contains("guest peer 1 is connected"),
        "{err}"
    );
    assert!(err.contains("; peers refused 1"), "{err}");
}

/// The bytes and descriptors (`SCM_RIGHTS`, counted and closed) `sock` receives until the
/// other end closes it.
fn received_until_closed(sock: &std::os::unix::net::UnixStream) -> (usize, usize) {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
    use std::os::fd::{AsRawFd, RawFd};
    let (mut bytes, mut fds) = (0, 0);
    loop {
        let mut buf = [0u8; 64];
        let mut cmsg = nix::cmsg_space!([RawFd; 8]);
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let msg = recvmsg::<UnixAddr>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .expect("recvmsg (timed out: the device neither sent nor closed)");
        for c in msg.cmsgs().unwrap() {
            if let ControlMessageOwned::ScmRights(raw) = c {
                for r in raw {
                    fds += 1;
                    nix::unistd::close(r).unwrap();
                }
            }
        }
        if msg.bytes == 0 {
            return (bytes, fds);
        }
        bytes += msg.bytes;
    }
}
