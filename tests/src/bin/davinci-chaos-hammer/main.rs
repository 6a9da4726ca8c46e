//! `davinci-chaos-hammer`: the guest-side client of the chaos device (issue 42, item 2). Against
//! a kernel node backed by `davinci-pcidev --chaos` it drives every ioctl, mmap and fault path
//! for a fixed number of rounds, each call ending in success or an errno (never a hang: every
//! blocking call runs under `alarm`, whose handler only interrupts it), and reports the count of
//! each outcome per operation.
//!
//! `davinci-chaos-hammer --device PATH --rounds N [--workers W] [--seed S] [--timeout SECS]`
//! runs W worker processes (4 by default) of N/W rounds each and waits for them at most SECS
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
//! 3 the same, but the device was lost (the guest may re-probe it and run again); 1 a worker
//! hung, was unkillable, or died of a signal other than SIGBUS (a panic is SIGABRT); 2 usage.
#![deny(unsafe_code)]

mod sys;
mod worker;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateStreamArgs, DeviceShareArgs, Wire,
    DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_STREAM,
    DRIVER_CMD_SET_DEVICE_SHARE,
};
use serde_json::{json, Value};

use sys::{arm_alarm_handler, open_node, PAGE};
use worker::{Tally, Worker};

fn say(v: Value) {
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
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        device: "/dev/davinci0".into(),
        rounds: 1000,
        workers: 4,
        seed: 1,
        timeout: 900,
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
            other => return Err(format!("unknown argument {other}")),
        }
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

fn worker_mode(path: &str, rounds: u64, seed: u64, me: &str) -> i32 {
    arm_alarm_handler();
    let mut w = Worker::new(path, seed);
    let mut done = 0;
    let mut last = Instant::now();
    let mut touches = 0u64;
    while done < rounds {
        w.round();
        done += 1;
        if w.lost {
            // The device is gone (an open refused): nothing more to hammer until the guest
            // brings it back.
            break;
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
            std::process::exit(worker_mode(&a.device, a.rounds, a.seed, &me));
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
        match Command::new(&me)
            .args([
                "worker",
                "--device",
                &a.device,
                "--rounds",
                &per.to_string(),
                "--seed",
                &seed.to_string(),
            ])
            .stdout(Stdio::piped())
            .spawn()
        {
            Ok(c) => kids.push(c),
            Err(e) => {
                say(json!({"event": "error", "message": format!("spawn worker: {e}")}));
                std::process::exit(1);
            }
        }
    }
    // Each worker's lines on a thread of its own (progress echoed, the last kept).
    let mut readers = Vec::new();
    for (i, c) in kids.iter_mut().enumerate() {
        let Some(out) = c.stdout.take() else { continue };
        readers.push(std::thread::spawn(move || {
            let mut last = Value::Null;
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if v["event"] == "progress" || v["event"] == "hung" {
                        say(json!({"event": v["event"], "worker": i, "detail": v}));
                    }
                    last = v;
                }
            }
            last
        }));
    }
    let deadline = Duration::from_secs(a.timeout);
    let (mut rounds, mut lost, mut bad) = (0u64, false, Vec::new());
    for (i, c) in kids.iter_mut().enumerate() {
        let left = deadline.saturating_sub(t0.elapsed());
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
    for r in readers {
        if let Ok(v) = r.join() {
            if v["event"] == "worker-done" {
                rounds += v["rounds"].as_u64().unwrap_or(0);
                lost |= v["lost"].as_bool().unwrap_or(false);
                tally.merge(&v);
            }
        }
    }
    let mut v = tally.json();
    v["event"] = json!("done");
    v["rounds"] = json!(rounds);
    v["lost"] = json!(lost);
    v["failures"] = json!(bad);
    v["seconds"] = json!(t0.elapsed().as_secs_f64());
    say(v);
    std::process::exit(if !bad.is_empty() {
        1
    } else if lost {
        3
    } else {
        0
    });
}
