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
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Devices of each shared daemon behind the `mockd` backend (one per `open_backend` call;
/// a second daemon serves the next ones).
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

    /// The socket of davinci`n`.
    pub fn socket(&self, n: u32) -> PathBuf {
        self.dir.join(format!("davinci{n}.sock"))
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Whether the daemon is still running; `Err` with how it ended if it is not (a signal
    /// such as SIGBUS shows here).
    pub fn check_alive(&mut self) -> Result<(), String> {
        let Some(child) = self.child.as_mut() else {
            return Err("davinci-mockd was terminated by the test".into());
        };
        match child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(st)) => Err(format!("davinci-mockd died: {st}")),
            Err(e) => Err(format!("cannot wait for davinci-mockd: {e}")),
        }
    }

    /// The daemon's descriptors, threads and shared-memory mappings now.
    pub fn stats(&self) -> ProcStats {
        ProcStats::of(self.pid())
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
}

/// Daemons the backend starts at most, one after another as each one's devices are all
/// handed out (the second numbers its devices from [`SHARED_DEVICES`]).
const SHARED_DAEMONS: u32 = 2;

/// Devices handed out so far, across the daemons.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Daemon `k` of the `mockd` backend: started on first use, by a thread that lives as long
/// as the test process (the daemon's `--exit-with-parent` signal fires when the thread that
/// started it ends), with [`SHARED_DEVICES`] devices (numbered from `k` times that) so every
/// open gets a fresh device.
fn shared(k: u32) -> Result<&'static Shared, String> {
    static SHARED: [OnceLock<Result<Shared, String>>; SHARED_DAEMONS as usize] =
        [const { OnceLock::new() }; SHARED_DAEMONS as usize];
    let Some(slot) = SHARED.get(k as usize) else {
        return Err(format!(
            "the mockd test backend has only {} devices per test process",
            SHARED_DEVICES * SHARED_DAEMONS
        ));
    };
    slot.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        let n = SHARED_DEVICES.to_string();
        let first = (k * SHARED_DEVICES).to_string();
        let spawned = std::thread::Builder::new()
            .name(format!("mockd-keeper-{k}"))
            .spawn(move || {
                match Mockd::start(&["--devices", &n, "--first-device", &first]) {
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
            Ok(Ok(dir)) => Ok(Shared { dir }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("the mockd keeper thread died".into()),
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// A fresh (never opened) device of the test daemons, as a device path.
///
/// # Errors
/// A daemon cannot be started, or every device has been handed out.
pub fn next_device() -> Result<String, String> {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let s = shared(n / SHARED_DEVICES)?;
    Ok(format!("mock:{}/davinci{n}.sock", s.dir.display()))
}

/// The device path of davinci`id` of the test daemons.
///
/// # Errors
/// The daemon cannot be started.
pub fn shared_path(id: u32) -> Result<String, String> {
    Ok(format!(
        "mock:{}/davinci{id}.sock",
        shared(id / SHARED_DEVICES)?.dir.display()
    ))
}

/// What a process holds, from `/proc/PID`: a resource leak shows as a count that does not
/// come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStats {
    /// Open file descriptors.
    pub fds: usize,
    /// Threads.
    pub threads: usize,
    /// Mappings of davinci memfds (rings, doorbells, allocations).
    pub memfd_maps: usize,
}

impl ProcStats {
    /// Reads the counts of process `pid` (0 for what cannot be read).
    pub fn of(pid: u32) -> ProcStats {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
        let threads = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Threads:"))
                    .and_then(|t| t.trim().parse().ok())
            })
            .unwrap_or(0);
        let memfd_maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_or(0, |m| {
            m.lines().filter(|l| l.contains("/memfd:davinci")).count()
        });
        ProcStats {
            fds,
            threads,
            memfd_maps,
        }
    }
}

/// How long [`TestClient::expect`] waits for a report.
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(60);

/// A `davinci-testclient` process and its JSON-line reports (see that program's docs).
#[derive(Debug)]
pub struct TestClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<serde_json::Value>,
    /// Its pid.
    pub pid: u32,
}

impl TestClient {
    /// Starts `davinci-testclient ARGS --device DEVICE`.
    ///
    /// # Panics
    /// If the program cannot be started (a test setup failure).
    pub fn start(device: &str, args: &[&str]) -> TestClient {
        let mut child = Command::new(bin("davinci-testclient"))
            .args(args)
            .arg("--device")
            .arg(device)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start davinci-testclient");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<serde_json::Value>(&line) {
                    Ok(v) => {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                    Err(e) => panic!("testclient printed non-JSON {line:?}: {e}"),
                }
            }
        });
        let pid = child.id();
        TestClient {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            pid,
        }
    }

    /// The next report.
    ///
    /// # Panics
    /// Unless it is `event` (or on timeout).
    pub fn expect(&self, event: &str) -> serde_json::Value {
        let v = self
            .lines
            .recv_timeout(REPORT_TIMEOUT)
            .unwrap_or_else(|_| panic!("client {}: no {event:?} report", self.pid));
        assert_eq!(v["event"], event, "client {}: {v}", self.pid);
        v
    }

    /// The next report, whatever its kind: `None` if none comes within `timeout` (or the
    /// client's stdout closed).
    pub fn next_report(&self, timeout: Duration) -> Option<serde_json::Value> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Sends SIGKILL and returns at once ([`reap`](Self::reap) waits for the end), so that a
    /// set of clients can be killed together.
    pub fn sigkill(&self) {
        let _ = kill(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
    }

    /// Waits at most `timeout` for the process to end: its status, or `None` if it is still
    /// there (a process stuck in the driver would be).
    pub fn reap(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let t0 = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) => return Some(st),
                Ok(None) if t0.elapsed() < timeout => std::thread::sleep(Duration::from_millis(1)),
                _ => return None,
            }
        }
    }

    /// Every report already received and not yet read.
    pub fn drain(&self) -> Vec<serde_json::Value> {
        self.lines.try_iter().collect()
    }

    /// Closes stdin (the client finishes, drops its device and exits); returns the exit code.
    pub fn release(mut self) -> i32 {
        drop(self.stdin.take());
        self.child.wait().map_or(-1, |st| st.code().unwrap_or(-1))
    }

    /// Closes stdin and returns every report after that, and the exit code.
    pub fn finish(mut self) -> (Vec<serde_json::Value>, i32) {
        drop(self.stdin.take());
        let code = self.child.wait().map_or(-1, |st| st.code().unwrap_or(-1));
        let mut rest = Vec::new();
        while let Ok(v) = self.lines.recv_timeout(REPORT_TIMEOUT) {
            rest.push(v);
        }
        (rest, code)
    }

    /// SIGKILL, and reaps it.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for TestClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
