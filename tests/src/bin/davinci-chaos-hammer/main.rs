//! `davinci-chaos-hammer`: the guest-side client of the chaos device (issue 42, item 2). Against
//! a kernel node backed by `davinci-pcidev --chaos` it drives every ioctl, mmap and fault path
//! for a fixed number of rounds, each call ending in success or an errno (never a hang: every
//! blocking call runs under `alarm`, whose handler only interrupts it), and reports the count of
//! each outcome per operation.
//!
//! `davinci-chaos-hammer --device PATH --rounds N [--workers W] [--seed S] [--timeout SECS]`
//! runs W worker processes (4 by default) of N/W rounds each, ending at the first loss of the
//! device; `--requests N --bus BUS [--lives L]` instead runs them until the kernel counts N
//! admin requests answered by the device at BUS, which this process re-probes (at most L
//! times, default 1000) each time it is lost ([`lives`]); either way it waits at most SECS
//! (default 900); a worker still there is reported with its kernel wait channel and state, then
//! SIGKILLed (one that does not die in 10 s is reported unkillable). Each worker, every round,
//! picks with its own seeded PRNG one of: an ioctl of the ABI's table with a plausible argument
//! (its own handles) or random bytes, in a buffer guarded past `_IOC_SIZE` (a write beyond it
//! is reported: the kernel let the device size a user copy); `mmap` of one of its objects
//! (rings, doorbell page, memory) at its size, a page, or more; touching mapped pages through
//! a pipe (the kernel's copies fault them in, and a refused fault is an `EFAULT`, not a
//! signal); `munmap`; WAIT_EVENT with a short timeout; LIST_CLIENTS with a guarded buffer;
//! closing and reopening its file (its mappings kept); and, every so often, a child process
//! (`touch` mode) that maps its own objects and touches every page directly, where a refused
//! fault is SIGBUS (counted, never an error).
//!
//! Output: JSON lines; the last is `{"event":"done",...}` with rounds, the outcome counts per
//! operation (`ok`, or an errno name), guard overruns, signals, and whether the device was
//! lost (an open refused with `ENODEV`/`ENOENT`/`ENXIO`). Exit status: 0 every worker ended;
//! 3 the same, but the device was lost (the guest may re-probe it and run again); 4 (requests
//! mode) the requests were not all answered (re-probes used up, or the deadline); 1 a worker
//! hung, was unkillable, or died of a signal other than SIGBUS (a panic is SIGABRT); 2 usage.
//! Every worker ends either way: the deadline stops them.
#![deny(unsafe_code)]

mod lives;
mod sys;
mod worker;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateStreamArgs, DeviceShareArgs, Wire,
    DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_STREAM,
    DRIVER_CMD_SET_DEVICE_SHARE,
};
use serde_json::{json, Value};

use lives::{Lives, Orders};
use sys::{arm_alarm_handler, open_node, PAGE};
use worker::{Tally, Worker};

pub(crate) fn say(v: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

pub(crate) fn errno_name(e: i32) -> String {
    if e == 0 {
        return "ok".into();
    }
    format!("{:?}", nix::errno::Errno::from_raw(e))
}

struct Args {
    device: String,
    rounds: u64,
    workers: u32,
    seed: u64,
    timeout: u64,
    /// Requests mode: stop when the kernel counts this many admin requests answered (0:
    /// rounds mode, which ends at the first loss).
    requests: u64,
    /// The device's PCI name (requests mode: its debugfs count, unbind and bind).
    bus: String,
    /// Re-probes allowed (requests mode).
    lives: u64,
    /// A worker of requests mode: no round limit, orders on stdin.
    stay: bool,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        device: "/dev/davinci0".into(),
        rounds: 1000,
        workers: 4,
        seed: 1,
        timeout: 900,
        requests: 0,
        bus: String::new(),
        lives: 1000,
        stay: false,
    };
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let mut v = || it.next().cloned().ok_or(format!("{k} needs a value"));
        let num = |s: String| s.parse::<u64>().map_err(|_| format!("{k}: not a number"));
        match k.as_str() {
            "--device" => a.device = v()?,
            "--rounds" => a.rounds = num(v()?)?,
            "--workers" => a.workers = num(v()?)?.clamp(1, 64) as u32,
            "--seed" => a.seed = num(v()?)?,
            "--timeout" => a.timeout = num(v()?)?,
            "--requests" => a.requests = num(v()?)?,
            "--bus" => a.bus = v()?,
            "--lives" => a.lives = num(v()?)?,
            "--stay" => a.stay = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.requests > 0 && a.bus.is_empty() {
        return Err("--requests needs --bus (the device's PCI name)".into());
    }
    Ok(a)
}

/// `touch` mode: a short-lived child that maps its own objects and touches every page
/// directly (a refused fault kills it with SIGBUS, which its parent counts). Exit 0, or the
/// errno of the first call that failed (capped at 125).
fn touch_mode(path: &str, seed: u64) -> i32 {
    arm_alarm_handler();
    let mut w = Worker::new(path, seed);
    match open_node(path, true) {
        Ok(n) => w.node = Some(n),
        Err(e) => return e.min(125),
    }
    if let Some(c) = w.call(
        "CREATE_CONTEXT",
        DRIVER_CMD_CREATE_CONTEXT,
        &CreateContextArgs::default(),
    ) {
        w.ctxs.push(c.handle);
    }
    let a = CreateStreamArgs {
        ctx: w.ctxs.first().copied().unwrap_or(0),
        cmd_entries: 64,
        event_entries: 64,
        ..Default::default()
    };
    let mut targets = Vec::new();
    if let Some(r) = w.call("CREATE_STREAM", DRIVER_CMD_CREATE_STREAM, &a) {
        targets.push((r.cmd_ring.mmap_offset, r.cmd_ring.mmap_size));
        targets.push((r.event_ring.mmap_offset, r.event_ring.mmap_size));
    }
    let size = w.rng.u64(1..=64) * PAGE as u64;
    if let Some(r) = w.call(
        "ALLOC_MEMORY",
        DRIVER_CMD_ALLOC_MEMORY,
        &AllocMemoryArgs {
            size,
            ..Default::default()
        },
    ) {
        targets.push((r.mmap_offset, r.alloc_size));
    }
    let Some(node) = w.node.as_ref() else {
        return 101;
    };
    for (cookie, size) in targets {
        let len = size.max(PAGE as u64) as usize;
        let m = match node.mmap(len, cookie) {
            Ok(m) => m,
            Err(e) => return e.min(125),
        };
        for p in (0..len).step_by(PAGE) {
            m.touch_direct(p);
        }
    }
    0
}

/// A worker: `rounds` rounds, ending at the first loss; or, with `orders` (requests mode),
/// until told to stop, waiting for the device to come back after each loss.
fn worker_mode(path: &str, rounds: u64, seed: u64, me: &str, orders: Option<Orders>) -> i32 {
    arm_alarm_handler();
    let mut w = Worker::new(path, seed);
    let mut done = 0;
    let mut last = Instant::now();
    let mut touches = 0u64;
    let mut gen = 0;
    while done < rounds {
        if orders.as_ref().is_some_and(|o| o.poll(&mut gen)) {
            break;
        }
        w.round();
        done += 1;
        if w.lost {
            // The device is gone (an open refused): nothing more to hammer until it is
            // brought back (by the parent in requests mode, else by the guest).
            let Some(o) = orders.as_ref() else { break };
            say(json!({"event": "lost", "gen": gen}));
            match o.wait() {
                Some(g) => {
                    gen = gen.max(g);
                    w.lost = false;
                }
                None => break,
            }
        }
        if done % 97 == 0 {
            touches += 1;
            // A direct toucher in a child (mappings are not inherited across fork).
            match Command::new(me)
                .args([
                    "touch",
                    "--device",
                    path,
                    "--seed",
                    &(seed ^ touches).to_string(),
                ])
                .stdout(Stdio::null())
                .spawn()
            {
                Ok(mut c) => {
                    let r = wait_bounded(&mut c, Duration::from_secs(120));
                    match r {
                        Ended::Code(0) => w.tally.count("touch-direct", 0),
                        Ended::Code(e) => w.tally.count("touch-direct", e),
                        Ended::Signal(s) => {
                            *w.tally.signals.entry(s.clone()).or_insert(0) += 1;
                            w.tally.count("touch-direct", 0);
                            w.tally.count(&format!("touch-direct:{s}"), 0);
                        }
                        Ended::Hung(why) => {
                            say(json!({"event": "hung", "what": "touch child", "state": why}));
                            return 1;
                        }
                    }
                }
                Err(e) => eprintln!("spawn toucher: {e}"),
            }
        }
        if last.elapsed() > Duration::from_secs(10) {
            say(json!({"event": "progress", "rounds": done}));
            last = Instant::now();
        }
    }
    w.maps.clear();
    w.node = None;
    let mut v = w.tally.json();
    v["event"] = json!("worker-done");
    v["rounds"] = json!(done);
    v["lost"] = json!(w.lost);
    say(v);
    0
}

enum Ended {
    Code(i32),
    Signal(String),
    Hung(String),
}

/// The kernel's view of a process: its state and wait channel (and stack if readable).
fn kernel_state(pid: u32) -> String {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default();
    let state = read("status")
        .lines()
        .find(|l| l.starts_with("State:"))
        .unwrap_or("")
        .to_string();
    format!(
        "{state}; wchan {}; stack {}",
        read("wchan"),
        read("stack").replace('\n', " | ")
    )
}

/// Waits for `c` at most `limit`; then reports its state, SIGKILLs it and waits 10 s more.
fn wait_bounded(c: &mut Child, limit: Duration) -> Ended {
    use std::os::unix::process::ExitStatusExt;
    let t = Instant::now();
    loop {
        match c.try_wait() {
            Ok(Some(st)) => {
                return match (st.code(), st.signal()) {
                    (Some(code), _) => Ended::Code(code),
                    (None, Some(s)) => Ended::Signal(
                        nix::sys::signal::Signal::try_from(s)
                            .map_or(format!("signal {s}"), |s| s.as_str().to_string()),
                    ),
                    _ => Ended::Code(-1),
                }
            }
            Ok(None) => {}
            Err(e) => return Ended::Hung(format!("wait: {e}")),
        }
        if t.elapsed() > limit {
            let state = kernel_state(c.id());
            let _ = c.kill();
            let t2 = Instant::now();
            while t2.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = c.try_wait() {
                    return Ended::Hung(format!("{state} (killed)"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            return Ended::Hung(format!(
                "{state} (UNKILLABLE: still there 10 s after SIGKILL: {})",
                kernel_state(c.id())
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let me = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| argv[0].clone());
    match argv.get(1).map(String::as_str) {
        Some("touch") => {
            let a = parse(&argv[2..]).unwrap_or_else(|e| {
                eprintln!("davinci-chaos-hammer touch: {e}");
                std::process::exit(2)
            });
            std::process::exit(touch_mode(&a.device, a.seed));
        }
        Some("worker") => {
            let a = parse(&argv[2..]).unwrap_or_else(|e| {
                eprintln!("davinci-chaos-hammer worker: {e}");
                std::process::exit(2)
            });
            let (rounds, orders) = if a.stay {
                (u64::MAX, Some(Orders::start()))
            } else {
                (a.rounds, None)
            };
            std::process::exit(worker_mode(&a.device, rounds, a.seed, &me, orders));
        }
        Some("-h" | "--help") => {
            println!(
                "davinci-chaos-hammer --device PATH --rounds N [--workers W] [--seed S] [--timeout SECS]"
            );
            return;
        }
        _ => {}
    }
    let a = parse(&argv[1..]).unwrap_or_else(|e| {
        eprintln!("davinci-chaos-hammer: {e}");
        std::process::exit(2)
    });
    arm_alarm_handler();
    let t0 = Instant::now();
    let mut tally = Tally::default();
    // Shared, so that the workers' opens coexist (an admin's control open; refused or failed
    // calls are counted like any other).
    match open_node(&a.device, false) {
        Ok(n) => {
            let mut b = vec![0u8; DeviceShareArgs::SIZE];
            DeviceShareArgs {
                mode: 1,
                ..Default::default()
            }
            .encode(&mut b);
            let (e, _) = n.ioctl_guarded(DRIVER_CMD_SET_DEVICE_SHARE, &mut b);
            tally.count("SET_DEVICE_SHARE", e);
        }
        Err(e) => tally.count("open-control", e),
    }
    let per = a.rounds.div_ceil(u64::from(a.workers));
    let mut kids = Vec::new();
    for i in 0..a.workers {
        let seed = a.seed.wrapping_mul(1000).wrapping_add(u64::from(i));
        let mut cmd = Command::new(&me);
        cmd.args(["worker", "--device", &a.device, "--seed", &seed.to_string()]);
        if a.requests > 0 {
            cmd.arg("--stay").stdin(Stdio::piped());
        } else {
            cmd.args(["--rounds", &per.to_string()]);
        }
        match cmd.stdout(Stdio::piped()).spawn() {
            Ok(c) => kids.push(c),
            Err(e) => {
                say(json!({"event": "error", "message": format!("spawn worker: {e}")}));
                std::process::exit(1);
            }
        }
    }
    // Each worker's lines, on a thread of its own, to this thread (`None`: its end).
    let (tx, rx) = mpsc::channel::<(usize, Option<Value>)>();
    let mut stdins: Vec<_> = kids.iter_mut().map(|c| c.stdin.take()).collect();
    for (i, c) in kids.iter_mut().enumerate() {
        let Some(out) = c.stdout.take() else { continue };
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send((i, Some(v)));
                }
            }
            let _ = tx.send((i, None));
        });
    }
    drop(tx);
    let deadline = Duration::from_secs(a.timeout);
    let mut lives = (a.requests > 0).then(|| Lives::new(&a.bus, &a.device, a.requests, a.lives));
    let (mut ended, mut last) = (vec![false; kids.len()], vec![Value::Null; kids.len()]);
    let (mut stopping, mut exhausted) = (false, false);
    while ended.iter().any(|e| !e) && t0.elapsed() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok((i, None)) => ended[i] = true,
            Ok((i, Some(v))) => {
                if v["event"] == "progress" || v["event"] == "hung" {
                    say(json!({"event": v["event"], "worker": i, "detail": v}));
                }
                if let (Some(l), "lost", false) =
                    (lives.as_mut(), v["event"].as_str().unwrap_or(""), stopping)
                {
                    if !l.on_lost(v["gen"].as_u64().unwrap_or(0), &mut stdins, i) {
                        exhausted = true;
                    }
                }
                if v["event"] == "worker-done" {
                    last[i] = v;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if !stopping && (exhausted || lives.as_ref().is_some_and(Lives::reached)) {
            stopping = true;
            for w in stdins.iter_mut() {
                lives::send(w, "stop");
            }
        }
    }
    // (Requests mode: the deadline passed with workers still hammering.)
    for w in stdins.iter_mut() {
        lives::send(w, "stop");
    }
    let (mut rounds, mut lost, mut bad) = (0u64, false, Vec::new());
    for (i, c) in kids.iter_mut().enumerate() {
        // (At least past the 30 s alarm bounding a call a worker told to stop may be in.)
        let left = deadline
            .saturating_sub(t0.elapsed())
            .max(Duration::from_secs(40));
        match wait_bounded(c, left) {
            Ended::Code(0) => {}
            Ended::Code(code) => bad.push(format!("worker {i} exited {code}")),
            Ended::Signal(s) if s == "SIGBUS" => {
                *tally.signals.entry(s).or_insert(0) += 1;
            }
            Ended::Signal(s) => bad.push(format!("worker {i} died of {s}")),
            Ended::Hung(state) => bad.push(format!("worker {i} HUNG: {state}")),
        }
    }
    // A worker's last line may still be on its way.
    while let Ok((i, v)) = rx.recv_timeout(Duration::from_millis(500)) {
        if let Some(v) = v.filter(|v| v["event"] == "worker-done") {
            last[i] = v;
        }
    }
    for v in &last {
        if v["event"] == "worker-done" {
            rounds += v["rounds"].as_u64().unwrap_or(0);
            lost |= v["lost"].as_bool().unwrap_or(false);
            tally.merge(v);
        }
    }
    let mut v = tally.json();
    v["event"] = json!("done");
    v["rounds"] = json!(rounds);
    v["lost"] = json!(lost);
    v["failures"] = json!(bad);
    v["seconds"] = json!(t0.elapsed().as_secs_f64());
    let short = lives.as_ref().is_some_and(|l| !l.reached());
    if let Some(l) = &lives {
        if let (Value::Object(o), Value::Object(extra)) = (&mut v, l.json()) {
            o.extend(extra);
        }
    }
    say(v);
    // Requests mode: a loss is expected (the device is brought back); the requests not all
    // answered (re-probes used up, or the deadline) is its failure.
    std::process::exit(if !bad.is_empty() {
        1
    } else if short {
        4
    } else if lost && lives.is_none() {
        3
    } else {
        0
    });
}
