//! The `davinci-mockd` daemon the daemon rows run against: found next to this executable (or
//! given with `--mockd`), started in a private socket directory with one shared device,
//! stopped (SIGTERM) when the bench is done.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The daemon's binary name.
pub const MOCKD: &str = "davinci-mockd";

/// How to get the daemon, for messages.
pub const BUILD_HINT: &str = "build it into the same target directory with `cargo build --release \
     -p davinci-mockd`, or pass --mockd PATH";

/// Where the daemon binary is: `explicit` if given, else `davinci-mockd` in the directory of
/// this executable (or its parent, for an executable under `deps/`).
///
/// # Errors
/// Not found: the message says where it looked and how to build it.
pub fn find(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(format!("--mockd {}: no such file", p.display()))
        };
    }
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find this executable to look for {MOCKD} beside it: {e}"))?;
    let mut looked = Vec::new();
    let mut dir = exe.parent().map(Path::to_path_buf);
    for _ in 0..2 {
        let Some(d) = dir else { break };
        let cand = d.join(MOCKD);
        if cand.is_file() {
            return Ok(cand);
        }
        looked.push(cand.display().to_string());
        dir = if d.ends_with("deps") {
            d.parent().map(Path::to_path_buf)
        } else {
            None
        };
    }
    Err(format!(
        "{MOCKD} not found (looked for {}): {BUILD_HINT}",
        looked.join(", ")
    ))
}

/// A running daemon with one device in shared mode; stopped on drop.
#[derive(Debug)]
pub struct Mockd {
    child: Option<Child>,
    dir: PathBuf,
    log: PathBuf,
    _stdout: Option<BufReader<ChildStdout>>,
}

fn unique(tag: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(
        "davinci-bench-{}-{nanos:09}-{tag}",
        std::process::id()
    ))
}

impl Mockd {
    /// Starts `bin --socket-dir DIR --devices 1 --share-mode shared --exit-with-parent` and
    /// waits (at most 20 s) for its ready line. Its log (RUST_LOG=warn unless set) goes to a
    /// file, quoted when it fails to start. Call from a thread that lives as long as the
    /// daemon should (the parent-death signal fires when the starting thread ends).
    ///
    /// # Errors
    /// It cannot be started or does not get ready: why, with the end of its log.
    pub fn start(bin: &Path) -> Result<Mockd, String> {
        let dir = unique("sock");
        let log = unique("mockd.log");
        let log_file =
            File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let mut cmd = Command::new(bin);
        cmd.arg("--socket-dir")
            .arg(&dir)
            .args([
                "--devices",
                "1",
                "--share-mode",
                "shared",
                // The noisy neighbour's 128 MiB fill buffer: more than a quarter of the
                // default 256 MiB, the shared device's default per-tenant share.
                "--tenant-memory-limit",
                "192M",
                "--exit-with-parent",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "warn");
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{MOCKD}: no stdout pipe"));
        };
        let mut m = Mockd {
            child: Some(child),
            dir,
            log,
            _stdout: None,
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            let res = r.read_line(&mut line).map(|_| line);
            let _ = tx.send((res, r));
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok((Ok(line), reader)) if line.contains("ready") => {
                m._stdout = Some(reader);
                Ok(m)
            }
            Ok((Ok(line), _)) => Err(m.failed(&format!("exited before it was ready ({line:?})"))),
            Ok((Err(e), _)) => Err(m.failed(&format!("cannot read its output: {e}"))),
            Err(_) => Err(m.failed("not ready after 20 s")),
        }
    }

    fn failed(&mut self, what: &str) -> String {
        self.stop();
        let mut text = String::new();
        if let Ok(mut f) = File::open(&self.log) {
            let _ = f.read_to_string(&mut text);
        }
        let tail: String = text
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join(" | ");
        if tail.is_empty() {
            format!("{MOCKD} {what}")
        } else {
            format!("{MOCKD} {what}; its log: {tail}")
        }
    }

    /// The device path of its device (`mock:DIR/davinci0.sock`).
    pub fn device_path(&self) -> String {
        format!("mock:{}", self.dir.join("davinci0.sock").display())
    }

    /// Sends SIGTERM and waits (at most 5 s, then SIGKILL).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let t0 = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if t0.elapsed() > Duration::from_secs(5) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

impl Drop for Mockd {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.log);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_daemon_says_how_to_build_it() {
        let e = find(Some(Path::new("/nonexistent/davinci-mockd"))).unwrap_err();
        assert!(e.contains("no such file"), "{e}");
        if let Err(e) = find(None) {
            assert!(e.contains("cargo build --release"), "{e}");
        }
    }

    #[test]
    fn a_program_that_is_not_the_daemon_fails_cleanly() {
        let e = Mockd::start(Path::new("/bin/true")).unwrap_err();
        assert!(e.contains("before it was ready"), "{e}");
    }
}
