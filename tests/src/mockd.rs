//! The programs the acceptance tests run as real processes: `davinci-mockd`, `davinci-smi`
//! and `davinci-testclient`, and the daemon behind the `mockd` test backend.
//!
//! The tests package builds `testbin-davinci-mockd` and `testbin-davinci-smi`: the same
//! `main` as the installed `davinci-mockd` and `davinci-smi` (one line each), under names
//! that do not collide with those binaries, so `cargo test` always runs freshly built ones.
//! They sit next to the test executables' `deps/` directory; `DAVINCI_TEST_BIN_DIR`
//! overrides where they are looked for.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Devices of the shared daemon behind the `mockd` backend (one per `open_backend` call).
pub const SHARED_DEVICES: u32 = 64;

/// Where a test program is: `$DAVINCI_TEST_BIN_DIR/NAME`, else next to `deps/`.
pub fn bin(name: &str) -> PathBuf {
    if let Some(d) = std::env::var_os("DAVINCI_TEST_BIN_DIR") {
        return PathBuf::from(d).join(name);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join(name)
}

fn unique_dir(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "davinci-test-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A running `davinci-mockd` in its own socket directory; stopped (SIGTERM) on drop.
#[derive(Debug)]
pub struct Mockd {
    child: Option<Child>,
    dir: PathBuf,
    _stdout: Option<BufReader<ChildStdout>>,
}

impl Mockd {
    /// Starts the daemon with `args` (besides `--socket-dir` and `--exit-with-parent`) and
    /// waits for its ready line.
    ///
    /// # Errors
    /// The daemon cannot be started or exits before it is ready.
    pub fn start(args: &[&str]) -> std::io::Result<Mockd> {
        let dir = unique_dir("mockd");
        let mut cmd = Command::new(bin("testbin-davinci-mockd"));
        cmd.arg("--socket-dir")
            .arg(&dir)
            .arg("--exit-with-parent")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "warn");
        }
        let mut child = cmd.spawn().map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "cannot start {}: {e}",
                    bin("testbin-davinci-mockd").display()
                ),
            )
        })?;
        let mut out = BufReader::new(
            child
                .stdout
                .take()
                .ok_or_else(|| std::io::Error::other("no stdout pipe"))?,
        );
        let mut line = String::new();
        out.read_line(&mut line)?;
        if !line.contains("ready") {
            let status = child.wait()?;
            return Err(std::io::Error::other(format!(
                "davinci-mockd did not get ready ({status}): {line:?}"
            )));
        }
        Ok(Mockd {
            child: Some(child),
            dir,
            _stdout: Some(out),
        })
    }

    /// The socket directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The device path of davinci`n` (`mock:DIR/davinciN.sock`).
    pub fn path(&self, n: u32) -> String {
        format!("mock:{}/davinci{n}.sock", self.dir.display())
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends SIGTERM and waits for the exit (at most 10 s, then SIGKILL).
    pub fn terminate(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return Some(st);
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Mockd {
    fn drop(&mut self) {
        self.terminate();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Shared {
    dir: PathBuf,
    next: AtomicU32,
}

/// The daemon behind the `mockd` backend: started on first use, by a thread that lives as
/// long as the test process (the daemon's `--exit-with-parent` signal fires when the thread
/// that started it ends), with [`SHARED_DEVICES`] devices so every open gets a fresh device.
fn shared() -> Result<&'static Shared, String> {
    static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            let n = SHARED_DEVICES.to_string();
            let spawned = std::thread::Builder::new()
                .name("mockd-keeper".into())
                .spawn(move || {
                    match Mockd::start(&["--devices", &n]) {
                        Ok(d) => {
                            let _ = tx.send(Ok(d.dir.clone()));
                            // Keep the daemon (and this thread) until the process exits.
                            let _keep = d;
                            loop {
                                std::thread::park();
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e.to_string()));
                        }
                    }
                });
            if let Err(e) = spawned {
                return Err(format!("cannot start the mockd keeper thread: {e}"));
            }
            match rx.recv() {
                Ok(Ok(dir)) => Ok(Shared {
                    dir,
                    next: AtomicU32::new(0),
                }),
                Ok(Err(e)) => Err(e),
                Err(_) => Err("the mockd keeper thread died".into()),
            }
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A fresh (never opened) device of the shared test daemon, as a device path.
///
/// # Errors
/// The daemon cannot be started, or every device has been handed out.
pub fn next_device() -> Result<String, String> {
    let s = shared()?;
    let n = s.next.fetch_add(1, Ordering::Relaxed);
    if n >= SHARED_DEVICES {
        return Err(format!(
            "the mockd test backend has only {SHARED_DEVICES} devices per test process"
        ));
    }
    Ok(format!("mock:{}/davinci{n}.sock", s.dir.display()))
}

/// The device path of davinci`id` of the shared test daemon.
///
/// # Errors
/// The daemon cannot be started.
pub fn shared_path(id: u32) -> Result<String, String> {
    Ok(format!("mock:{}/davinci{id}.sock", shared()?.dir.display()))
}
