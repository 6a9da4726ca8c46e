//! Issue 41: a planted per-user socket directory. uid USER has no `$XDG_RUNTIME_DIR`, so its
//! default socket directory is `/tmp/davinci-USER`; uid PLANTER made it first and serves a
//! fake device in it (`davinci-mockd --socket-dir /tmp/davinci-USER`, which the daemon
//! accepts: it is PLANTER's own directory). Run as USER, `davinci-smi`, the exporter and the
//! device plugin find the device and leave it out, saying why; a program on the shim opening
//! "this node's device" is refused with `EACCES` and the same reason. (The preload library:
//! `bindings/preload/tests/preload.rs`.) Needs root and setpriv to be two users; skipped,
//! saying so, otherwise.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use davinci_tests::mockd::bin;

const USER: u32 = 54341;
const PLANTER: u32 = 54342;

fn can_switch_users() -> bool {
    nix::unistd::getuid().is_root()
        && Command::new("setpriv")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
}

/// `program` as `uid`, with none of the variables that choose a socket directory or a device.
fn as_user(uid: u32, program: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(program);
    for v in [
        "DAVINCI_SOCKET_DIR",
        "XDG_RUNTIME_DIR",
        "DAVINCI_DEVICE",
        "DAVINCI_MOCKD_UID",
        "DAVINCI_PRELOAD_SOCKET_DIR",
    ] {
        c.env_remove(v);
    }
    c.stdin(Stdio::null());
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(c: &mut Command) -> Output {
    c.output().unwrap_or_else(|e| panic!("run {c:?}: {e}"))
}

/// PLANTER's daemon in `dir`; SIGTERM and wait on drop.
struct Fake(Child);

impl Fake {
    fn start(dir: &Path) -> Fake {
        let mut child = as_user(PLANTER, &bin("testbin-davinci-mockd"))
            .arg("--socket-dir")
            .arg(dir)
            .arg("--exit-with-parent")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        assert!(line.contains("ready"), "the planter's daemon: {line:?}");
        Fake(child)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.0.wait();
    }
}

#[test]
fn a_planted_default_socket_directory_is_refused_by_every_tool_and_the_shim() {
    use std::os::unix::fs::PermissionsExt;
    if !can_switch_users() {
        eprintln!("not root or no setpriv: the planted-directory test is skipped");
        return;
    }
    let planted = PathBuf::from(format!("/tmp/davinci-{USER}"));
    let _ = std::fs::remove_dir_all(&planted);
    std::fs::create_dir(&planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&planted, Some(PLANTER), Some(PLANTER)).unwrap();
    let fake = Fake::start(&planted);
    let sock = planted.join("davinci0.sock");
    let why = format!(
        "its directory {} is owned by uid {PLANTER}, but your (uid {USER}) per-user socket \
         directory must be owned by uid {USER}",
        planted.display()
    );

    let smi = run(as_user(USER, &bin("testbin-davinci-smi")).args(["list", "--json"]));
    let exporter = run(as_user(USER, &bin("testbin-davinci-exporter")).arg("--once"));
    let plugin = run(as_user(USER, &bin("testbin-davinci-device-plugin")).arg("--list"));
    let shim = run(as_user(USER, &bin("davinci-testclient")).arg("hold"));
    // The control: the directory given to USER (the sockets and the daemon stay PLANTER's),
    // with PLANTER named as the daemon USER means to use: the device is found and opened.
    std::os::unix::fs::chown(&planted, Some(USER), Some(USER)).unwrap();
    let named = run(as_user(USER, &bin("testbin-davinci-smi"))
        .args(["list", "--json"])
        .env("DAVINCI_MOCKD_UID", PLANTER.to_string()));
    drop(fake);
    let _ = std::fs::remove_dir_all(&planted);

    let warning = format!("warning: ignoring mock:{}: {why}", sock.display());
    for (tool, out) in [
        ("davinci-smi", &smi),
        ("exporter", &exporter),
        ("plugin", &plugin),
    ] {
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(stderr.contains(&warning), "{tool}: {stderr}");
        assert!(
            stderr.contains(&format!("rm -r {}", planted.display())),
            "{tool}: {stderr}"
        );
        if tool != "davinci-smi" {
            // (smi's JSON names it, under "ignored": below.)
            assert!(
                !stdout.contains("davinci0.sock"),
                "{tool} advertised it: {stdout}"
            );
        }
    }
    let v: serde_json::Value = serde_json::from_slice(&smi.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&smi.stdout)));
    assert_eq!(v["error"]["errno"], "ENODEV", "no device: {v}");
    assert!(v["devices"].as_array().is_none_or(Vec::is_empty), "{v}");
    assert_eq!(v["ignored"][0]["path"], format!("mock:{}", sock.display()));
    // The shim: "this node's device" is the planted socket, refused saying why.
    let (stdout, stderr) = (text(&shim.stdout), text(&shim.stderr));
    assert_eq!(shim.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains("\"errno\":\"EACCES\"")
            && stdout.contains(&format!("refusing {}: {why}", sock.display())),
        "{stdout}{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&named.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&named.stdout)));
    assert_eq!(v["devices"].as_array().map(Vec::len), Some(1), "{v}");
}
