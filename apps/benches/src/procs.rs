//! Client processes on one `davinci-mockd` device: the bench re-executes itself with the
//! hidden `client` subcommand, N times at once; each child opens the device, creates its
//! stream, says `ready`, waits for `go` on stdin, streams NOPs (batch 64, pipelined, every
//! completion checked) for the window and prints one JSON line with what it counted.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use davinci_shim::Device;
use serde::{Deserialize, Serialize};

use crate::measure::{Fail, Window};
use crate::shim_rows::{self, Pace};

/// The hidden subcommand a child runs.
pub const CLIENT_SUBCOMMAND: &str = "client";

/// What a child prints on its last line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClientReport {
    /// Completions in the window.
    pub tasks: u64,
    /// The window, in nanoseconds.
    pub elapsed_ns: u64,
    /// Doorbells over the window.
    pub doorbells: u64,
    /// Set instead when the child failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ClientReport {
    /// Tasks per second.
    pub fn rate(&self) -> f64 {
        if self.elapsed_ns == 0 {
            0.0
        } else {
            self.tasks as f64 * 1e9 / self.elapsed_ns as f64
        }
    }
}

/// The child's side: open `device`, prepare, print `ready`, wait for a line on stdin, run,
/// print the [`ClientReport`] as one JSON line. Returns whether it succeeded.
pub fn client_main(device: &str, batch: usize, window: Window) -> bool {
    let report = match client_run(device, batch, window) {
        Ok(r) => r,
        Err(e) => ClientReport {
            tasks: 0,
            elapsed_ns: 0,
            doorbells: 0,
            error: Some(e),
        },
    };
    let ok = report.error.is_none();
    let line = serde_json::to_string(&report).unwrap_or_else(|e| {
        format!("{{\"tasks\":0,\"elapsed_ns\":0,\"doorbells\":0,\"error\":\"json: {e}\"}}")
    });
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
    ok
}

fn client_run(device: &str, batch: usize, window: Window) -> Result<ClientReport, String> {
    let dev = Device::open(device).map_err(|e| e.to_string())?;
    // Setup (connect, map) is done before `ready`: the first stream is created and dropped
    // here so the measured one is not the first on this connection.
    drop(
        dev.create_context()
            .and_then(|c| c.create_stream())
            .map_err(|e| e.to_string())?,
    );
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    let mut go = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut go)
        .map_err(|e| format!("waiting for go: {e}"))?;
    if go.trim() != "go" {
        return Err(format!("expected go on stdin, got {go:?}"));
    }
    let r = shim_rows::streaming(&dev, 1, batch, Pace::Full, window).map_err(|e| e.to_string())?;
    Ok(ClientReport {
        tasks: r.run.tasks,
        elapsed_ns: u64::try_from(r.run.elapsed.as_nanos()).unwrap_or(u64::MAX),
        doorbells: r.stats.doorbells,
        error: None,
    })
}

/// What `n` client processes measured together.
#[derive(Debug, Clone)]
pub struct ProcsRun {
    /// Each child's report.
    pub clients: Vec<ClientReport>,
}

impl ProcsRun {
    /// The sum of the children's rates (their windows overlap: they start on one `go`).
    pub fn total_rate(&self) -> f64 {
        self.clients.iter().map(ClientReport::rate).sum()
    }

    /// The slowest child's rate over the mean rate.
    pub fn min_share(&self) -> f64 {
        let n = self.clients.len() as f64;
        let total = self.total_rate();
        let min = self
            .clients
            .iter()
            .map(ClientReport::rate)
            .fold(f64::INFINITY, f64::min);
        if total > 0.0 && min.is_finite() {
            min * n / total
        } else {
            0.0
        }
    }
}

struct Kid {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn spawn_kid(exe: &Path, device: &str, batch: usize, window: Window) -> Result<Kid, String> {
    let mut child = Command::new(exe)
        .arg(CLIENT_SUBCOMMAND)
        .arg("--device")
        .arg(device)
        .arg("--batch")
        .arg(batch.to_string())
        .arg("--secs")
        .arg(window.measure.as_secs_f64().to_string())
        .arg("--warmup-secs")
        .arg(window.warmup.as_secs_f64().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start a client process {}: {e}", exe.display()))?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err("client process: no stdout pipe".into());
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(Kid { child, lines: rx })
}

/// Runs `n` client processes of `exe` on `device` at once and collects their reports.
///
/// # Errors
/// A child cannot be started, does not get ready within 30 s, fails, or does not report
/// within the window plus 30 s.
pub fn run(
    exe: &Path,
    device: &str,
    n: usize,
    batch: usize,
    window: Window,
) -> Result<ProcsRun, Fail> {
    let mut kids = Vec::with_capacity(n);
    for _ in 0..n {
        kids.push(spawn_kid(exe, device, batch, window)?);
    }
    for (i, k) in kids.iter().enumerate() {
        match k.lines.recv_timeout(Duration::from_secs(30)) {
            Ok(l) if l == "ready" => {}
            Ok(l) => {
                let why = serde_json::from_str::<ClientReport>(&l)
                    .ok()
                    .and_then(|r| r.error)
                    .unwrap_or(l);
                return Err(Fail::Error(format!("client process {i}: {why}")));
            }
            Err(_) => {
                return Err(Fail::Error(format!(
                    "client process {i} not ready within 30 s"
                )))
            }
        }
    }
    for (i, k) in kids.iter_mut().enumerate() {
        let sent = k
            .child
            .stdin
            .as_mut()
            .map(|s| s.write_all(b"go\n").and_then(|()| s.flush()));
        if !matches!(sent, Some(Ok(()))) {
            return Err(Fail::Error(format!("client process {i}: cannot send go")));
        }
    }
    let limit = window.measure + window.warmup + Duration::from_secs(30);
    let mut clients = Vec::with_capacity(n);
    for (i, k) in kids.iter().enumerate() {
        let line = k
            .lines
            .recv_timeout(limit)
            .map_err(|_| Fail::Error(format!("client process {i} did not report")))?;
        let r: ClientReport = serde_json::from_str(&line).map_err(|e| {
            Fail::Error(format!(
                "client process {i}: unreadable report {line:?}: {e}"
            ))
        })?;
        if let Some(e) = &r.error {
            return Err(Fail::Error(format!("client process {i}: {e}")));
        }
        clients.push(r);
    }
    for (i, mut k) in kids.into_iter().enumerate() {
        let st = k
            .child
            .wait()
            .map_err(|e| Fail::Error(format!("client process {i}: {e}")))?;
        if !st.success() {
            return Err(Fail::Error(format!("client process {i} exited with {st}")));
        }
    }
    Ok(ProcsRun { clients })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_round_trips_and_rates() {
        let r = ClientReport {
            tasks: 500,
            elapsed_ns: 500_000_000,
            doorbells: 3,
            error: None,
        };
        let s = serde_json::to_string(&r).unwrap();
        assert!(!s.contains("error"));
        assert_eq!(serde_json::from_str::<ClientReport>(&s).unwrap(), r);
        assert!((r.rate() - 1000.0).abs() < 1e-9);
        let p = ProcsRun {
            clients: vec![
                r.clone(),
                ClientReport {
                    tasks: 1500,
                    ..r.clone()
                },
            ],
        };
        assert!((p.total_rate() - 4000.0).abs() < 1e-9);
        assert!((p.min_share() - 0.5).abs() < 1e-9);
    }
}
