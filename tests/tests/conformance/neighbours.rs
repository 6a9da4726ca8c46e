//! Noisy and hostile neighbours (issue 21): for each way one tenant can lean on a shared
//! device (`davinci-attacker`: long FILLs on several streams, blocking waits by the hundred,
//! opens until refused, connections that never say HELLO, every table at its quota, writing
//! all the memory it may hold), another tenant meanwhile measures its NOP round trips, its
//! control calls (GET_INFO, ALLOC + FREE) and fresh opens, and the operators' tools
//! (`davinci-smi info`, the device plugin's health check) run beside it: all of it must work,
//! and the attacker's own work must go on. Then the attacker is SIGKILLed and the device,
//! and for the daemon its threads, descriptors and memfd mappings, must come back to where
//! they were.
//!
//! The attacker runs as another user (uid and gid 65534), as a tenant would: the per-user
//! bounds (client opens, control opens, connections before HELLO) are what keep the other
//! tenant's opens going. So the test needs root, and it needs other processes to reach the
//! device: it runs against `davinci-mockd` (its own daemon, so the counts are this test's)
//! and the kernel module in QEMU; elsewhere it prints why and passes.
//!
//! Beside every pattern another unprivileged tenant too (`davinci-attacker victim`, as uid
//! 61010, conformance/hoarders.rs) must open, create one of every object and allocate its
//! whole memory share, with its NOP round-trip p99 ≤ 5 ms and control-call p99 ≤ 50 ms: the
//! bounds issue 41 states, where this machine shows them with no attacker (not beside the
//! kernel's `fills`, over them under QEMU's emulation: printed). The quiet tenant's latencies are printed (one `neighbours:` line per
//! pattern, the figures docs/security.md quotes), not asserted: speed is the bench's to
//! claim (`davinci-bench --filter noisy`).
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use davinci_shim::{Control, Device};
use davinci_tests::backend_name;
use davinci_tests::mockd::{bin, Mockd};
use serde_json::Value;

use super::hoarders::{victim_beside, TIMING, VICTIM_UID};
use super::isolation::SharedMode;

/// The attacker's user and group: `nobody`, another tenant than this test's root.
const ATTACKER_ID: u32 = 65534;
/// How long a report, a tool or the return to baseline may take before the test fails (a
/// hang, not a speed claim).
pub(super) const LONG: Duration = Duration::from_secs(60);

/// A `davinci-attacker` process and its JSON-line reports.
struct Attacker {
    child: Child,
    lines: Receiver<Value>,
    pattern: &'static str,
    progress: u64,
}

impl Attacker {
    fn start(pattern: &'static str, path: &str) -> Attacker {
        let mut child = Command::new(bin("davinci-attacker"))
            .args([pattern, "--device", path])
            .uid(ATTACKER_ID)
            .gid(ATTACKER_ID)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start davinci-attacker");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            }
        });
        Attacker {
            child,
            lines,
            pattern,
            progress: 0,
        }
    }

    /// Takes one report: its `ready` line, or a `progress` one (kept).
    fn next(&mut self, timeout: Duration) -> Option<Value> {
        let v = self.lines.recv_timeout(timeout).ok()?;
        assert_ne!(v["event"], "error", "attacker {}: {v}", self.pattern);
        if v["event"] == "progress" {
            self.progress = self.progress.max(v["n"].as_u64().unwrap_or(0));
        }
        Some(v)
    }

    fn ready(&mut self) -> Value {
        let t0 = Instant::now();
        while t0.elapsed() < LONG {
            if let Some(v) = self.next(LONG) {
                if v["event"] == "ready" {
                    return v;
                }
            }
        }
        panic!("attacker {}: not ready within {LONG:?}", self.pattern);
    }

    /// The attacker's progress so far (every report read).
    fn progress(&mut self) -> u64 {
        while self.next(Duration::ZERO).is_some() {}
        self.progress
    }

    /// SIGKILL, and the process reaped (one stuck in the driver would fail here).
    fn kill(&mut self) {
        let _ = self.child.kill();
        let t0 = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if t0.elapsed() < LONG => std::thread::sleep(Duration::from_millis(2)),
                _ => panic!("attacker {} did not die of SIGKILL", self.pattern),
            }
        }
    }
}

impl Drop for Attacker {
    /// A test that fails half-way leaves no attacker running (a no-op after `kill`).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the quiet tenant saw beside one attacker.
struct Figures {
    rtt: Vec<Duration>,
    control: Vec<Duration>,
    opens: Vec<Duration>,
    smi: Duration,
    plugin: Duration,
}

fn pct(v: &[Duration], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].as_secs_f64() * 1e3
}

/// One run of an operators' tool against `path`: it must succeed and say `want`. The tool
/// is the workspace's test build of it (`testbin-NAME`) or, in the kernel guest, `NAME`.
fn tool(program: &str, args: &[&str], path: &str, want: &str) -> Duration {
    let test_build = bin(&format!("testbin-{program}"));
    let exe = if test_build.exists() {
        test_build
    } else {
        bin(program)
    };
    let t0 = Instant::now();
    let out = Command::new(&exe)
        .args(["--device", path])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    let took = t0.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(want),
        "{program} {args:?} beside the attacker: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// The quiet tenant's calls beside an attacker (each must succeed; times kept).
fn measure(path: &str, ctl: &Control) -> Figures {
    let mut opens = Vec::new();
    let t0 = Instant::now();
    let dev = Device::open(path).expect("the quiet tenant's open beside the attacker");
    opens.push(t0.elapsed());
    let ctx = dev.create_context().expect("context");
    let mut s = ctx.create_stream().expect("stream");
    let rtt = (0..200u64)
        .map(|i| {
            let t0 = Instant::now();
            s.submit(&davinci_shim::task::nop().with_user_data(i))
                .expect("NOP");
            s.synchronize(LONG).expect("the NOP completes");
            t0.elapsed()
        })
        .collect();
    let control = (0..50)
        .map(|_| {
            let t0 = Instant::now();
            ctl.info().expect("GET_INFO");
            drop(dev.alloc(4096).expect("ALLOC"));
            t0.elapsed()
        })
        .collect();
    for _ in 0..5 {
        let t0 = Instant::now();
        drop(Device::open(path).expect("another open beside the attacker"));
        opens.push(t0.elapsed());
    }
    let smi = tool("davinci-smi", &["info", "--json"], path, "\"abi\"");
    let plugin = tool(
        "davinci-device-plugin",
        &["--list", "--json"],
        path,
        "\"Healthy\"",
    );
    Figures {
        rtt,
        control,
        opens,
        smi,
        plugin,
    }
}

/// The device's state that must come back: clients and memory (GET_INFO), the objects
/// (GET_COUNTERS), and no client listed.
pub(super) fn state(ctl: &Control) -> (u32, u64, [u32; 4], usize) {
    let i = ctl.info().expect("GET_INFO");
    let c = ctl.counters().expect("GET_COUNTERS");
    (
        i.clients,
        i.memory_used,
        [c.contexts, c.streams, c.events, c.allocations],
        ctl.clients().expect("LIST_CLIENTS").len(),
    )
}

/// Where attacker processes of other users can reach a device: `None` (said, with `why` for
/// the embedded backend, as `who`) on the embedded backend or when not root; else the
/// daemon started for the test (mockd: shared, socket group 65534) or none (a device path),
/// the device's path, and the group that may open it (the node's, 65534 in the kernel
/// guest; the daemon's socket group).
pub(super) fn attack_target(who: &str, why: &str) -> Option<(Option<Mockd>, String, u32)> {
    let backend = backend_name();
    if backend == "embedded" {
        eprintln!("{who}: skipped on the embedded backend ({why})");
        return None;
    }
    if !nix::unistd::getuid().is_root() {
        eprintln!("{who}: skipped: not root, so the attackers cannot run as other users");
        return None;
    }
    let daemon = (backend == "mockd").then(|| {
        Mockd::start(&["--share-mode", "shared", "--socket-group", "65534"])
            .expect("start davinci-mockd")
    });
    let path = match &daemon {
        Some(d) => d.path(0),
        None => backend,
    };
    let gid = std::fs::metadata(&path).map_or(ATTACKER_ID, |m| m.gid());
    Some((daemon, path, gid))
}

#[test]
fn hostile_neighbours_hold_up_no_other_tenant_and_leave_nothing_behind() {
    let Some((daemon, path, gid)) = attack_target(
        "neighbours",
        "the device lives in this process; the attacker, another process, cannot reach it. \
         It runs with DAVINCI_TEST_BACKEND=mockd and in the kernel guest",
    ) else {
        return;
    };
    let _timing = TIMING.lock().unwrap_or_else(PoisonError::into_inner);
    let backend = backend_name();
    let shared = SharedMode::enable(Control::open(&path).expect("control open"));
    let ctl = &shared.ctl;
    let base = state(ctl);
    let base_proc = daemon.as_ref().map(Mockd::stats);
    let mut patterns = vec!["fills", "waits", "opens", "tables", "memory"];
    if daemon.is_some() {
        patterns.push("pre-hello");
    }
    // A GEMM neighbour (issue 43) where the device runs kernels (not the kernel module's
    // software device).
    let kernels = davinci_shim::Device::open(&path)
        .is_ok_and(|d| d.features().contains(davinci_shim::Features::KERNELS));
    if kernels {
        patterns.push("gemms");
    }
    for pattern in patterns {
        let mut a = Attacker::start(pattern, &path);
        let ready = a.ready();
        let before = a.progress();
        let f = measure(&path, ctl);
        // And another unprivileged tenant: it opens, takes one of every object and its
        // whole memory share; its round trips are printed against issue 41's targets.
        let v = victim_beside(&format!("the {pattern} attacker"), &path, gid, None);
        if matches!(pattern, "fills" | "memory" | "pre-hello" | "gemms") {
            // Its own work went on meanwhile.
            let t0 = Instant::now();
            while a.progress() <= before {
                assert!(
                    t0.elapsed() < LONG,
                    "attacker {pattern}: no progress beside the quiet tenant"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let threads = daemon.as_ref().map(|d| d.stats().threads);
        if let Some(n) = threads {
            // The daemon (one device, the binary's defaults) within its documented bound.
            let bound = davinci_mockd::daemon::DaemonConfig::default().most_threads();
            assert!(
                n <= bound,
                "davinci-mockd runs {n} threads beside the {pattern} attacker, over its bound {bound}"
            );
        }
        a.kill();
        drop(a);
        // Back to the baseline.
        let t0 = Instant::now();
        loop {
            let now = state(ctl);
            let proc_back = match (&daemon, base_proc) {
                (Some(d), Some(p0)) => d.stats() == p0,
                _ => true,
            };
            if now == base && proc_back {
                break;
            }
            assert!(
                t0.elapsed() < LONG,
                "after the {pattern} attacker died: {now:?} (baseline {base:?}), daemon {:?} \
                 (baseline {base_proc:?})",
                daemon.as_ref().map(Mockd::stats)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let back = t0.elapsed();
        eprintln!(
            "neighbours: {backend}: {pattern} ({ready}): quiet tenant NOP round trip p50 \
             {:.2} ms p99 {:.2} ms max {:.2} ms; control p99 {:.2} ms max {:.2} ms; open max \
             {:.2} ms; davinci-smi info {:.0} ms; device plugin --list {:.0} ms (Healthy); \
             daemon threads {threads:?}; baseline {:.0} ms after SIGKILL; victim (uid {}, \
             its {} MiB share and one of every object) NOP p99 {:.2} ms, control p99 {:.2} ms",
            pct(&f.rtt, 0.5),
            pct(&f.rtt, 0.99),
            pct(&f.rtt, 1.0),
            pct(&f.control, 0.99),
            pct(&f.control, 1.0),
            pct(&f.opens, 1.0),
            f.smi.as_secs_f64() * 1e3,
            f.plugin.as_secs_f64() * 1e3,
            back.as_secs_f64() * 1e3,
            VICTIM_UID,
            v["memory"][1].as_u64().unwrap_or(0) >> 20,
            v["nop_ms"][1].as_f64().unwrap_or(f64::NAN),
            v["control_ms"][1].as_f64().unwrap_or(f64::NAN),
        );
    }
    drop(shared);
}
