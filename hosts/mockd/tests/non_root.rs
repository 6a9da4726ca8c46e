//! The `davinci-mockd` binary run by a non-root user (needs root and setpriv here, else
//! skipped): a fallback socket directory someone else made or others may write is refused,
//! its own user is an admin and another user is not (`--no-owner-admin`, `--no-root-admin`),
//! and the log says who changed the sharing mode and who was refused.
#![forbid(unsafe_code)]

mod support;

use std::path::{Path, PathBuf};

use davinci_mockd_proto::{Kind, WireRole};
use davinci_uapi::{Errno, DRIVER_CMD_SET_DEVICE_SHARE};
use support::{share_arg, Raw};

/// A uid no account uses, so the fallback directory `/tmp/davinci-<uid>` is ours to test.
const USER: u32 = 54321;
const OTHER_USER: u32 = 54322;
const HELPER_ENV: &str = "DAVINCI_MOCKD_TEST_HELPER_SOCKET";

/// Not a test on its own: the e2e test runs this test binary again, as another user, with
/// [`HELPER_ENV`] naming a socket; it asks for `shared` mode there and prints the reply.
#[test]
fn helper_set_share_as_another_user() {
    let Some(sock) = std::env::var_os(HELPER_ENV) else {
        return;
    };
    let (mut c, r) = Raw::open(Path::new(&sock), WireRole::Control);
    assert_eq!(r.errno, 0, "{}", r.msg);
    let mode = std::env::var("DAVINCI_MOCKD_TEST_HELPER_MODE")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(1);
    let (r, _) = c.call(Kind::Ioctl, DRIVER_CMD_SET_DEVICE_SHARE, share_arg(mode));
    println!("\nHELPER-RESULT {} {}", r.errno, r.msg);
}

fn can_switch_users() -> bool {
    nix::unistd::getuid().is_root()
        && std::process::Command::new("setpriv")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
}

fn as_user(uid: u32, program: &Path) -> std::process::Command {
    let mut c = std::process::Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(program);
    c
}

/// davinci-mockd as `USER`, with its default socket directory (`/tmp/davinci-USER`).
fn mockd_as_user(args: &[&str]) -> std::process::Command {
    let mut c = as_user(USER, Path::new(env!("CARGO_BIN_EXE_davinci-mockd")));
    c.args(args)
        .env_remove("DAVINCI_SOCKET_DIR")
        .env_remove("XDG_RUNTIME_DIR")
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null());
    c
}

/// SET_DEVICE_SHARE `mode` on `sock` from a process of `uid`: (errno, message).
fn set_share_as(uid: u32, sock: &Path, mode: u32) -> (i32, String) {
    let exe = std::env::current_exe().unwrap();
    let out = as_user(uid, &exe)
        .args([
            "--exact",
            "helper_set_share_as_another_user",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, sock)
        .env("DAVINCI_MOCKD_TEST_HELPER_MODE", mode.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("HELPER-RESULT ").map(|(_, r)| r))
        .unwrap_or_else(|| {
            panic!(
                "helper printed no result: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let (errno, msg) = line.split_once(' ').unwrap_or((line, ""));
    (errno.parse().unwrap(), msg.to_string())
}

#[test]
fn a_users_own_daemon_its_admins_audit_log_and_socket_directory() {
    use std::io::{BufRead, Read};
    use std::os::unix::fs::PermissionsExt;
    if !can_switch_users() {
        eprintln!("not root or no setpriv: the run-as-another-user test is skipped");
        return;
    }
    let dir = PathBuf::from(format!("/tmp/davinci-{USER}"));
    let _ = std::fs::remove_dir_all(&dir);

    // 1. A world-writable fallback directory pre-created by someone else (root here): refused.
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = mockd_as_user(&[]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "davinci-mockd: refusing socket directory {}: it is owned by uid 0, not by uid {USER}",
            dir.display()
        )),
        "{err}"
    );
    // Its own, but writable by others: refused, saying how to fix it.
    nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(USER)), None).unwrap();
    let out = mockd_as_user(&[]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("mode 0777 lets other users write to it"),
        "{err}"
    );
    assert!(
        err.contains(&format!("chmod go-w {}", dir.display())),
        "{err}"
    );
    std::fs::remove_dir(&dir).unwrap();

    // 2. The daemon creates its directory; starts shared; its own user is an admin.
    let mut child = mockd_as_user(&[
        "--share-mode",
        "shared",
        "--socket-mode",
        "0666",
        "--exit-with-parent",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut ready = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(
        ready,
        format!("davinci-mockd: ready: 1 device(s) in {}\n", dir.display())
    );
    let sock = dir.join("davinci0.sock");
    // The owner switches to exclusive; another user may not switch back.
    let (errno, msg) = set_share_as(USER, &sock, 0);
    assert_eq!(errno, 0, "{msg}");
    let (errno, msg) = set_share_as(OTHER_USER, &sock, 1);
    assert_eq!(errno, Errno::EPERM.code(), "{msg}");
    assert!(
        msg.contains(&format!(
            "you are uid {OTHER_USER} (gid {OTHER_USER}); its admins are uid 0 (root), uid {USER} (the daemon's user); to become one, restart davinci-mockd with --admin-uid {OTHER_USER}"
        )),
        "{msg}"
    );
    // Stop it and read the whole log.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{log}");
    let line = |what: &str| {
        log.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in the log:\n{log}"))
            .to_string()
    };
    let l = line("davinci-mockd ready");
    assert!(l.contains("share_mode=shared"), "{l}");
    assert!(
        l.contains(&format!(
            "admins=uid 0 (root), uid {USER} (the daemon's user)"
        )),
        "{l}"
    );
    let l = line("device sharing set at start-up");
    assert!(l.contains("from=exclusive to=shared"), "{l}");
    let l = line("device sharing set device=");
    assert!(
        l.contains(&format!("uid={USER}")) && l.contains("from=shared to=exclusive changed=true"),
        "{l}"
    );
    let l = line("device sharing change refused");
    assert!(
        l.contains(&format!("uid={OTHER_USER}"))
            && l.contains("mode=exclusive requested=shared errno=EPERM"),
        "{l}"
    );
    assert!(!dir.exists(), "the daemon removes the directory it created");

    // 3. --no-owner-admin: the owner is refused too (and with --no-root-admin nobody is an
    // admin, which the log warns about).
    let mut child = mockd_as_user(&["--no-owner-admin", "--no-root-admin", "--exit-with-parent"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    let (errno, msg) = set_share_as(USER, &sock, 1);
    assert_eq!(errno, Errno::EPERM.code(), "{msg}");
    assert!(
        msg.contains("; nobody is its admin; to become one"),
        "{msg}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{log}");
    assert!(log.contains("admins=nobody"), "{log}");
    assert!(
        log.contains("nobody may change device sharing: give --admin-uid or --admin-group"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
