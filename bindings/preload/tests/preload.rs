//! `libdavinci-preload.so` against a real `davinci-mockd`: `uapi/examples/client.c` built
//! unchanged passes through it; a program's files, pipes, mappings and duplicates are
//! untouched by it; a davinci descriptor behaves as the kernel module's (`tests/probe.c`:
//! read/write, poll/epoll, foreign ioctls, bad pointers, dup, LIST_CLIENTS, fork); a
//! WAIT_EVENT interrupted by a signal ends with `EINTR`, and one in flight holds up no other
//! thread's ioctls on the same descriptor; a device with no socket is `ENOENT`; a socket the
//! program's user does not trust (a directory others may write to, a `/tmp/davinci-$UID`
//! another user made) is `EACCES`, said once; a create whose reply cannot be copied back
//! creates nothing (`tests/lost_reply.c`).
//!
//! The library is this package's cdylib (cargo builds it before the tests), copied under its
//! installed name; the daemon is the workspace's `davinci-mockd`, built with cargo when the
//! target directory does not have it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("bindings/preload/ is in the workspace")
        .to_path_buf()
}

/// The target profile directory this test runs from (`target/debug`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("test binary dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("preload-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    dir
}

/// The library under its installed name.
fn library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let built = [
            profile_dir().join("libdavinci_preload.so"),
            profile_dir().join("deps/libdavinci_preload.so"),
        ]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "libdavinci_preload.so is not in {} (cargo builds it with the tests: run them with cargo test -p davinci-preload)",
                profile_dir().display()
            )
        });
        let dir = scratch("lib");
        let lib = dir.join("libdavinci-preload.so");
        std::fs::copy(&built, &lib).unwrap_or_else(|e| panic!("copy {}: {e}", built.display()));
        lib
    })
}

/// `davinci-mockd`: the target directory's, else built now.
fn mockd_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = profile_dir().join("davinci-mockd");
        if !bin.exists() {
            let profile = profile_dir();
            let target = profile.parent().expect("target dir");
            let mut cmd = Command::new(env!("CARGO"));
            cmd.args(["build", "-p", "davinci-mockd", "--bin", "davinci-mockd"])
                .arg("--target-dir")
                .arg(target)
                .current_dir(workspace_root());
            if profile.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let st = cmd.status().expect("run cargo build -p davinci-mockd");
            assert!(st.success(), "cargo build -p davinci-mockd failed: {st}");
        }
        assert!(bin.exists(), "{} missing after the build", bin.display());
        bin
    })
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Compiles `src` (with the ABI header) to `dir/name` as the example's comment says, with
/// `extra` flags.
fn compile(src: &Path, dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let out = Command::new(cc())
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .args(extra)
        .arg("-I")
        .arg(workspace_root().join("uapi/include"))
        .arg(src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} (Debian: apt-get install gcc): {e}", cc()));
    assert!(
        out.status.success(),
        "{} does not compile:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// A `davinci-mockd` on its own socket directory; SIGTERM and wait on drop.
struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Daemon {
    fn start(name: &str, devices: u32) -> Daemon {
        Daemon::start_with(name, devices, &[])
    }

    /// [`start`](Daemon::start) with more of the daemon's options.
    fn start_with(name: &str, devices: u32, options: &[&str]) -> Daemon {
        let dir = scratch(&format!("sock-{name}")).join("sd");
        let mut child = Command::new(mockd_bin())
            .arg("--socket-dir")
            .arg(&dir)
            .args(["--devices", &devices.to_string(), "--exit-with-parent"])
            .args(options)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", mockd_bin().display()));
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        BufReader::new(out)
            .read_line(&mut line)
            .expect("read the daemon's ready line");
        assert!(
            line.contains("ready"),
            "davinci-mockd did not get ready: {line:?}"
        );
        Daemon { child, dir }
    }

    /// Runs `exe args` with the library preloaded on this daemon's sockets.
    fn run(&self, exe: &Path, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
        Command::new(exe)
            .args(args)
            .env("LD_PRELOAD", library())
            .env("DAVINCI_PRELOAD_SOCKET_DIR", &self.dir)
            .envs(extra_env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", exe.display()))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn assert_ok(out: &Output, stdout_has: &str, what: &str) {
    assert!(
        out.status.code() == Some(0) && text(&out.stdout).contains(stdout_has),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn probe(dir: &Path) -> PathBuf {
    compile(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/probe.c"),
        dir,
        "probe",
        // Fortified, so glibc's __open_2 and __openat_2 are what it calls (probe.c).
        &["-pthread", "-O2", "-D_FORTIFY_SOURCE=2"],
    )
}

#[test]
fn the_unchanged_c_example_client_passes_on_the_daemon() {
    let dir = scratch("client");
    let client = compile(
        &workspace_root().join("uapi/examples/client.c"),
        &dir,
        "client",
        &[],
    );
    let d = Daemon::start("client", 2);
    // Without the library the same run fails (this machine has no kernel module's node).
    if !Path::new("/dev/davinci0").exists() {
        let out = Command::new(&client)
            .arg("/dev/davinci0")
            .env_remove("LD_PRELOAD")
            .output()
            .expect("run the client");
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    }
    // Twice on one device: the first run's close released the device (exclusive mode
    // would refuse the second open otherwise), and on the second device.
    for dev in ["/dev/davinci0", "/dev/davinci0", "/dev/davinci1"] {
        let out = d.run(&client, &[dev], &[]);
        assert_ok(
            &out,
            &format!("davinci example: FILL of 4096 bytes completed on {dev}"),
            dev,
        );
        assert!(
            out.stderr.is_empty(),
            "{dev}: stderr: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_device_without_a_socket_is_enoent_and_the_library_says_why_only_when_asked() {
    let dir = scratch("missing");
    let client = compile(
        &workspace_root().join("uapi/examples/client.c"),
        &dir,
        "client",
        &[],
    );
    let d = Daemon::start("missing", 1);
    let out = d.run(&client, &["/dev/davinci7"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "davinci example: /dev/davinci7: No such file or directory\n"
    );
    let out = d.run(&client, &["/dev/davinci7"], &[("DAVINCI_PRELOAD_LOG", "1")]);
    let err = text(&out.stderr);
    let sock = d.dir.join("davinci7.sock");
    assert!(
        err.contains(&format!(
            "libdavinci-preload: cannot connect to {}",
            sock.display()
        )) && err.contains("davinci example: /dev/davinci7: No such file or directory"),
        "{err}"
    );
}

/// A socket directory every user may write to is not trusted (issue 41): the open fails
/// with `EACCES` and the library says why on stderr, once, with or without
/// `DAVINCI_PRELOAD_LOG`.
#[test]
fn an_untrusted_socket_directory_is_eacces_and_said_once() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("untrusted");
    let client = compile(
        &workspace_root().join("uapi/examples/client.c"),
        &dir,
        "client",
        &[],
    );
    let d = Daemon::start("untrusted", 1);
    std::fs::set_permissions(&d.dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock = d.dir.join("davinci0.sock");
    for log in ["0", "1"] {
        let out = d.run(&client, &["/dev/davinci0"], &[("DAVINCI_PRELOAD_LOG", log)]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let said = format!(
            "libdavinci-preload: refusing {}: its directory {} (mode 0777) is writable by \
             every user and not sticky",
            sock.display(),
            d.dir.display()
        );
        assert_eq!(err.matches(&said).count(), 1, "LOG={log}: {err}");
        assert!(
            err.ends_with("davinci example: /dev/davinci0: Permission denied\n"),
            "{err}"
        );
    }
    // Made private again, the same device opens.
    std::fs::set_permissions(&d.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = d.run(&client, &["/dev/davinci0"], &[]);
    assert_ok(&out, "completed", "client after chmod 0755");
}

/// The case, run as another user (needs root and setpriv, else skipped): uid U has no
/// `$XDG_RUNTIME_DIR`, and uid U+1 made `/tmp/davinci-U` first and put a socket in it. An
/// unmodified program of uid U with the library preloaded and no socket directory named is
/// refused, and told whose directory it is and what to do.
#[test]
fn a_planted_default_socket_directory_is_refused_as_its_user() {
    use std::os::unix::fs::PermissionsExt;
    const USER: u32 = 54331;
    const PLANTER: u32 = 54332;
    let setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !nix::unistd::getuid().is_root() || !setpriv {
        eprintln!("not root or no setpriv: the planted-directory test is skipped");
        return;
    }
    let dir = scratch("planted");
    let client = compile(
        &workspace_root().join("uapi/examples/client.c"),
        &dir,
        "client",
        &[],
    );
    let planted = PathBuf::from(format!("/tmp/davinci-{USER}"));
    let _ = std::fs::remove_dir_all(&planted);
    std::fs::create_dir(&planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = planted.join("davinci0.sock");
    let _fake = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::os::unix::fs::chown(&sock, Some(PLANTER), Some(PLANTER)).unwrap();
    std::os::unix::fs::chown(&planted, Some(PLANTER), Some(PLANTER)).unwrap();
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={USER}"),
            &format!("--regid={USER}"),
            "--clear-groups",
        ])
        .arg(&client)
        .arg("/dev/davinci0")
        .env("LD_PRELOAD", library())
        .env_remove("DAVINCI_PRELOAD_SOCKET_DIR")
        .env_remove("DAVINCI_SOCKET_DIR")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("DAVINCI_MOCKD_UID")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&planted);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "libdavinci-preload: refusing {}: its directory {} is owned by uid {PLANTER}, but \
             your (uid {USER}) per-user socket directory must be owned by uid {USER}",
            sock.display(),
            planted.display()
        )) && err.contains(&format!("rm -r {}", planted.display()))
            && err.ends_with("davinci example: /dev/davinci0: Permission denied\n"),
        "{err}"
    );
}

#[test]
fn files_pipes_mappings_and_duplicates_pass_through_untouched() {
    let dir = scratch("passthrough");
    let probe = probe(&dir);
    let d = Daemon::start("passthrough", 1);
    // Without a davinci descriptor (the lock-free path) and with one open throughout (the
    // table's checks on every call).
    let d_str = dir.to_str().expect("utf-8 path");
    for args in [
        &["passthrough", d_str][..],
        &["passthrough", d_str, "/dev/davinci0"],
    ] {
        let out = d.run(&probe, args, &[]);
        assert_ok(&out, "ok passthrough", &args.join(" "));
    }
}

#[test]
fn a_davinci_descriptor_behaves_as_the_modules() {
    let dir = scratch("semantics");
    let probe = probe(&dir);
    let d = Daemon::start("semantics", 1);
    let out = d.run(&probe, &["semantics", "/dev/davinci0"], &[]);
    assert_ok(&out, "ok semantics", "semantics");
}

#[test]
fn wait_event_interrupted_by_a_signal_is_eintr_and_cancelled() {
    let dir = scratch("eintr");
    let probe = probe(&dir);
    let d = Daemon::start("eintr", 1);
    let out = d.run(&probe, &["eintr", "/dev/davinci0"], &[]);
    assert_ok(&out, "ok eintr", "eintr");
}

/// A create whose reply cannot be copied back (`EFAULT`) creates nothing, as on the kernel
/// module (docs/abi.md 1.4): `tests/lost_reply.c`, each creating command with its argument in
/// read-only memory.
#[test]
fn a_create_whose_reply_is_lost_creates_nothing() {
    let dir = scratch("lost-reply");
    let exe = compile(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/lost_reply.c"),
        &dir,
        "lost_reply",
        &[],
    );
    let d = Daemon::start_with(
        "lost-reply",
        1,
        &["--share-mode", "shared", "--tenant-quota", "contexts=2"],
    );
    let out = d.run(&exe, &["/dev/davinci0"], &[]);
    assert_ok(&out, "ok lost_reply", "lost_reply");
}

#[test]
fn a_thread_blocked_in_wait_event_holds_up_no_other_thread() {
    let dir = scratch("threads");
    let probe = probe(&dir);
    let d = Daemon::start("threads", 1);
    let out = d.run(&probe, &["threads", "/dev/davinci0"], &[]);
    assert_ok(&out, "ok threads", "threads");
}
