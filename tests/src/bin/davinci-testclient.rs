//! `davinci-testclient`: a client process for the daemon acceptance tests. It opens a device
//! through the shim (`--device PATH`, else `DAVINCI_DEVICE`), does work whose results it
//! checks against the CPU, and reports on stdout as JSON lines:
//!
//! * `{"event":"ready","pid":P,...}` once it holds a context, a stream and memory (`work`:
//!   with `memory_bytes`, `streams` and `allocations` held);
//! * `{"event":"progress","round":R}` after the first round (`spin`);
//! * `{"event":"done","pid":P,"ok":true,"rounds":R,"tasks":T,"mismatches":0}` (`work`);
//! * `{"event":"error","errno":"EBUSY","message":"..."}` (exit status 1) if anything fails.
//!
//! Modes: `hold` (set up, report ready, wait for stdin to close), `work` (R rounds of FILL +
//! ADD + COPY, each checked; with `--hold` then waits for stdin to close; with `--until-eof`
//! rounds go on until stdin closes, with a `progress` report every 8 rounds), `spin` (rounds
//! until killed), `park` (set up like `hold`, plus an event; then leave work in flight: an
//! EVENT_WAIT on an event nobody records, `--queued Q` FILLs queued behind it, and a thread
//! blocked in `synchronize` (a WAIT_EVENT in the driver); report ready with `"queued":Q` and
//! wait for stdin to close or a signal: the isolation tests SIGKILL it like this), `import`
//! (`--token HEX`: imports memory another process exported, reports the first word it
//! reads, FILLs it with `--pattern N` on a stream of its own, reports
//! `{"event":"done","ok":true,"read":W}`; with `--hold` it then keeps the import until stdin
//! closes), `watch` (set up like `hold`, report ready, then poll the stream's error state in
//! its command ring, with no call to the device, until the device writes one: reports
//! `{"event":"stream-error","errno":E}`; fails after 60 s).
#![forbid(unsafe_code)]

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use davinci_shim::{task, Device, DeviceMem, Region, Task, TaskDesc};
use serde_json::json;

const T: Duration = Duration::from_secs(30);

struct Opts {
    mode: String,
    device: Option<String>,
    elems: usize,
    rounds: u64,
    hold: bool,
    until_eof: bool,
    mem: usize,
    queued: u64,
    token: Option<String>,
    pattern: u32,
}

fn parse() -> Result<Opts, String> {
    let mut args = std::env::args().skip(1);
    let mode = args
        .next()
        .ok_or("usage: davinci-testclient hold|work|spin|park|import|watch [options]")?;
    let mut o = Opts {
        mode,
        device: None,
        elems: 1024,
        rounds: 50,
        hold: false,
        until_eof: false,
        mem: 64 << 10,
        queued: 8,
        token: None,
        pattern: 0x600d,
    };
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> Result<u64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{what} needs a number"))
        };
        match a.as_str() {
            "--device" => o.device = Some(args.next().ok_or("--device needs a path")?),
            "--elems" => o.elems = num("--elems")? as usize,
            "--rounds" => o.rounds = num("--rounds")?,
            "--mem" => o.mem = num("--mem")? as usize,
            "--queued" => o.queued = num("--queued")?,
            "--token" => o.token = Some(args.next().ok_or("--token needs a value")?),
            "--pattern" => o.pattern = num("--pattern")? as u32,
            "--hold" => o.hold = true,
            "--until-eof" => o.until_eof = true,
            other => return Err(format!("unexpected argument {other}")),
        }
    }
    Ok(o)
}

fn say(v: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn wait_stdin_closed() {
    let mut line = String::new();
    let stdin = std::io::stdin();
    let mut lock = stdin.lock();
    while matches!(lock.read_line(&mut line), Ok(n) if n > 0) {
        line.clear();
    }
}

fn fail(e: davinci_shim::Error) -> ! {
    say(json!({
        "event": "error",
        "pid": std::process::id(),
        "errno": e.errno().map(|x| x.name()),
        "message": e.to_string(),
    }));
    std::process::exit(1);
}

fn a_val(pid: u32, r: u64, i: usize) -> u32 {
    pid.wrapping_mul(31)
        .wrapping_add((i as u32).wrapping_mul(7))
        .wrapping_add(r as u32)
}

fn b_val(r: u64, i: usize) -> u32 {
    (i as u32) ^ (r as u32).wrapping_mul(0x9e37_79b9)
}

/// `park`: queues an EVENT_WAIT on an event nobody records and `queued` FILLs behind it on
/// `s`, then blocks in `synchronize` on a thread of its own (a WAIT_EVENT that ends only with
/// the process); the event and the memory stay alive with it.
fn park(
    ctx: &davinci_shim::Context,
    mut s: davinci_shim::Stream,
    m: &davinci_shim::DeviceBuffer,
    queued: u64,
) {
    let gate = ctx.create_event().unwrap_or_else(|e| fail(e));
    let first = Region::range(m, 0..64).unwrap_or_else(|e| fail(e));
    let mut tasks = vec![
        Task::from_desc(TaskDesc::event_wait(2, gate.handle(), 1)).unwrap_or_else(|e| fail(e))
    ];
    for i in 0..queued {
        tasks.push(
            task::fill(first, i as u32)
                .unwrap_or_else(|e| fail(e))
                .with_user_data(3 + i),
        );
    }
    s.submit_batch(&tasks).unwrap_or_else(|e| fail(e));
    std::thread::spawn(move || {
        let _gate = gate;
        // Never reached: nobody records the gate. Ends with the process.
        let _ = s.synchronize(Duration::from_secs(3600));
    });
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("davinci-testclient: {e}");
            std::process::exit(2);
        }
    };
    let pid = std::process::id();
    let dev = match &o.device {
        Some(p) => Device::open(p),
        None => Device::from_env(),
    }
    .unwrap_or_else(|e| fail(e));
    let ctx = dev.create_context().unwrap_or_else(|e| fail(e));
    let mut s = ctx.create_stream().unwrap_or_else(|e| fail(e));
    if o.mode == "import" {
        let token: davinci_shim::ExportToken = o
            .token
            .as_deref()
            .unwrap_or_default()
            .parse()
            .unwrap_or_else(|e| fail(e));
        let m = dev.import(token).unwrap_or_else(|e| fail(e));
        let read = m.read_vec::<u32>(0, 1).unwrap_or_else(|e| fail(e))[0];
        say(json!({"event": "ready", "pid": pid, "memory_bytes": m.len(), "read": read}));
        s.submit(&task::fill(&m, o.pattern).unwrap_or_else(|e| fail(e)))
            .unwrap_or_else(|e| fail(e));
        s.synchronize(T).unwrap_or_else(|e| fail(e));
        say(json!({"event": "done", "pid": pid, "ok": true, "read": read}));
        if o.hold {
            wait_stdin_closed();
        }
        return;
    }
    if o.mode == "watch" {
        let m = dev.alloc(4096).unwrap_or_else(|e| fail(e));
        s.submit(&task::fill(&m, 7).unwrap_or_else(|e| fail(e)))
            .unwrap_or_else(|e| fail(e));
        s.synchronize(T).unwrap_or_else(|e| fail(e));
        say(json!({"event": "ready", "pid": pid}));
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if let Some(e) = s.error_state() {
                say(json!({"event": "stream-error", "pid": pid,
                    "errno": e.errno().map(|x| x.name()), "message": e.to_string()}));
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        say(json!({"event": "error", "pid": pid, "errno": null,
            "message": "no error state in 60 s"}));
        std::process::exit(1);
    }
    if o.mode == "hold" || o.mode == "park" {
        let m = dev.alloc(o.mem).unwrap_or_else(|e| fail(e));
        let whole = Region::range(&m, 0..o.mem & !3).unwrap_or_else(|e| fail(e));
        s.submit(
            &task::fill(whole, 0x5a5a_5a5a)
                .unwrap_or_else(|e| fail(e))
                .with_user_data(1),
        )
        .unwrap_or_else(|e| fail(e));
        s.synchronize(T).unwrap_or_else(|e| fail(e));
        if o.mode == "park" {
            park(&ctx, s, &m, o.queued);
        }
        say(
            json!({"event": "ready", "pid": pid, "memory_bytes": m.len(), "queued": if o.mode == "park" { o.queued } else { 0 }}),
        );
        wait_stdin_closed();
        return;
    }
    let n = o.elems.max(64);
    let bytes = n * 4;
    let a = dev.alloc(bytes).unwrap_or_else(|e| fail(e));
    let b = dev.alloc(bytes).unwrap_or_else(|e| fail(e));
    let c = dev.alloc(bytes).unwrap_or_else(|e| fail(e));
    let memory: usize = a.len() + b.len() + c.len();
    say(
        json!({"event": "ready", "pid": pid, "memory_bytes": memory, "streams": 1, "allocations": 3}),
    );
    let rounds = if o.mode == "spin" || o.until_eof {
        u64::MAX
    } else {
        o.rounds
    };
    // --until-eof: a thread watches stdin and says when it closed.
    let eof = Arc::new(AtomicBool::new(false));
    if o.until_eof {
        let flag = eof.clone();
        std::thread::spawn(move || {
            wait_stdin_closed();
            flag.store(true, Ordering::Release);
        });
    }
    let mut mismatches = 0u64;
    let mut tasks = 0u64;
    let mut done_rounds = 0u64;
    for r in 0..rounds {
        if eof.load(Ordering::Acquire) {
            break;
        }
        let ha: Vec<u32> = (0..n).map(|i| a_val(pid, r, i)).collect();
        let hb: Vec<u32> = (0..n).map(|i| b_val(r, i)).collect();
        a.write_slice(0, &ha).unwrap_or_else(|e| fail(e));
        b.write_slice(0, &hb).unwrap_or_else(|e| fail(e));
        let pattern = (r as u32) ^ pid;
        let round = (|| -> davinci_shim::Result<Vec<Task>> {
            Ok(vec![
                task::fill(&c, pattern)?.with_user_data(3 * r),
                task::add::<u32>(&c, &a, &b)?.with_user_data(3 * r + 1),
                // c[0..16] <- a[0..16]: ordered after the ADD on the same stream.
                task::copy(Region::range(&c, 0..64)?, Region::range(&a, 0..64)?)?
                    .with_user_data(3 * r + 2),
            ])
        })()
        .unwrap_or_else(|e| fail(e));
        s.submit_batch(&round).unwrap_or_else(|e| fail(e));
        s.synchronize(T).unwrap_or_else(|e| fail(e));
        tasks += 3;
        let got = c.read_vec::<u32>(0, n).unwrap_or_else(|e| fail(e));
        for (i, g) in got.iter().enumerate() {
            let want = if i < 16 {
                ha[i]
            } else {
                ha[i].wrapping_add(hb[i])
            };
            if *g != want {
                mismatches += 1;
            }
        }
        let mut done = Vec::new();
        s.poll(&mut done);
        for d in &done {
            if !d.is_ok() {
                mismatches += 1;
            }
        }
        done_rounds = r + 1;
        if (r == 0 && o.mode == "spin") || (o.until_eof && r % 8 == 0) {
            say(json!({"event": "progress", "round": r, "mismatches": mismatches}));
        }
    }
    say(json!({
        "event": "done",
        "pid": pid,
        "ok": mismatches == 0,
        "rounds": done_rounds,
        "tasks": tasks,
        "mismatches": mismatches,
        "memory_bytes": memory,
    }));
    if o.hold && !o.until_eof {
        wait_stdin_closed();
    }
}
