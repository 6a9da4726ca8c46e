//! `davinci-attacker`: a hostile (or merely heavy) tenant for the noisy-neighbour suite
//! (tests/tests/conformance/neighbours.rs, issue 21). It opens a device through the shim
//! (`--device PATH`), attacks it one way until it is killed, and reports on stdout as JSON
//! lines: `{"event":"ready",...}` once the attack is in place (with what it holds), then
//! `{"event":"progress","n":N}` about every 100 ms while work it does completes (`fills`,
//! `memory`, `pre-hello`). Anything unexpected: `{"event":"error","message":"..."}` and exit 1.
//!
//! Patterns (issue 21's list):
//! * `fills`: four streams of FILLs, each over a quarter of the memory it may hold (at most
//!   128 MiB), four queued per stream, each completion checked, for ever;
//! * `gemms` (issue 43): two streams of f32 GEMMs (512 × 512 × 512, 2 queued per stream,
//!   the kernels cut into units of bounded work), each completion checked, for ever; on a
//!   device without kernels it says so (`error`);
//! * `waits`: 8 client opens, each with 32 threads blocked in a WAIT_EVENT on an event that
//!   is never recorded (a waiting EVENT_WAIT holds its record back); waits a device refuses
//!   (`EBUSY`) are counted, not fatal;
//! * `opens`: client opens until the device refuses one (`ENOSPC`), then control opens until
//!   it refuses one; all held;
//! * `pre-hello`: (the daemon only) connections to the socket that never say HELLO, up to 400,
//!   reopened as the daemon closes them;
//! * `tables`: one open that takes all it may of contexts, streams, events and allocations;
//! * `memory`: allocations of 1 MiB until refused, then every byte of them written through the
//!   client's own mappings, round after round;
//! * `hoard` (issue 41): one process of a tenant spread over several processes and uids:
//!   client opens until refused (at most `--opens N`, 40 by default, so that the tenant's
//!   other processes get some), then over all of them memory (its tenant's share over its
//!   allocation quota per allocation, so both run out together), exports, contexts, streams
//!   and events, each until refused (`ENOSPC`/`ENOMEM`; any other error fails); reports what
//!   it holds and its tenant's usage, and holds it all. With `--gate` it first waits for a
//!   line on stdin (the test moves it into a cgroup meanwhile);
//! * `victim`: not an attack: the quiet tenant beside hoarders (issue 41). It opens, creates
//!   one of every object (context, stream, event, allocation, export), allocates the rest of
//!   its tenant's memory share, then (after 50 NOPs untimed) times 300 NOP round trips and
//!   300 control calls (CREATE + DESTROY_CONTEXT) and reports `{"event":"done",...}` with its
//!   usage and the figures (milliseconds), and exits. Any step refused is `{"event":"error"}`;
//! * `hold`: not an attack either: a tenant that takes a slot and nothing else (issue 41's
//!   late attacker finds every slot taken by such tenants). One client open, its tenant's
//!   usage reported (`ready`), held until killed.
#![forbid(unsafe_code)]

use std::io::Write;
use std::time::{Duration, Instant};

use davinci_shim::{
    task, Control, Device, DeviceMem, Errno, ExportTo, Region, StreamOptions, Task, TaskDesc, Usage,
};
use davinci_tests::hoard::{refused, take_everything};
use serde_json::json;

/// Longer than any test: a wait that only the process's end ends.
const FOREVER: Duration = Duration::from_secs(3600);

fn say(v: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn fail(what: impl std::fmt::Display) -> ! {
    say(json!({"event": "error", "message": what.to_string()}));
    std::process::exit(1);
}

/// Reports `n` as progress about every 100 ms (`last` remembers when it last did).
fn progress(n: u64, last: &mut Instant) {
    if last.elapsed() >= Duration::from_millis(100) {
        say(json!({"event": "progress", "n": n}));
        *last = Instant::now();
    }
}

fn fills(path: &str) -> ! {
    let dev = Device::open(path).unwrap_or_else(|e| fail(e));
    // All the memory it may hold (at most 512 MiB), a quarter per stream.
    let bytes = (dev.info().client_memory_limit.min(512 << 20) as usize / 4) & !4095;
    let buf = dev.alloc(bytes * 4).unwrap_or_else(|e| fail(e));
    let ctx = dev.create_context().unwrap_or_else(|e| fail(e));
    let mut streams: Vec<_> = (0..4)
        .map(|_| {
            ctx.create_stream_with(StreamOptions::depths(8, 8))
                .unwrap_or_else(|e| fail(e))
        })
        .collect();
    let fill = |s: usize, i: u64| {
        let part = Region::range(&buf, s * bytes..(s + 1) * bytes).unwrap_or_else(|e| fail(e));
        task::fill(part, i as u32)
            .unwrap_or_else(|e| fail(e))
            .with_user_data(i)
    };
    for (k, s) in streams.iter_mut().enumerate() {
        let batch: Vec<_> = (0..4).map(|i| fill(k, i)).collect();
        s.submit_batch(&batch).unwrap_or_else(|e| fail(e));
    }
    say(json!({"event": "ready", "streams": 4, "fill_bytes": bytes}));
    let (mut n, mut next, mut last) = (0u64, 4u64, Instant::now());
    let mut done = Vec::new();
    loop {
        for (k, s) in streams.iter_mut().enumerate() {
            done.clear();
            s.poll(&mut done);
            if let Some(c) = done.iter().find(|c| !c.is_ok()) {
                fail(format!("a FILL failed: {c:?}"));
            }
            let batch: Vec<_> = (0..done.len() as u64).map(|j| fill(k, next + j)).collect();
            next += batch.len() as u64;
            n += batch.len() as u64;
            if !batch.is_empty() {
                s.submit_batch(&batch).unwrap_or_else(|e| fail(e));
            }
        }
        progress(n, &mut last);
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn gemms(path: &str) -> ! {
    use davinci_shim::task::Matrix;
    use davinci_shim::{Dtype, Features};
    let dev = Device::open(path).unwrap_or_else(|e| fail(e));
    if !dev.features().contains(Features::KERNELS) {
        fail("the device runs no kernels");
    }
    let n = 512u64;
    let bytes = (n * n * 4) as usize;
    let a = dev.alloc(bytes).unwrap_or_else(|e| fail(e));
    let b = dev.alloc(bytes).unwrap_or_else(|e| fail(e));
    let cs: Vec<_> = (0..2)
        .map(|_| dev.alloc(bytes).unwrap_or_else(|e| fail(e)))
        .collect();
    a.write_slice(0, &vec![0.5f32; (n * n) as usize])
        .unwrap_or_else(|e| fail(e));
    b.write_slice(0, &vec![2.0f32; (n * n) as usize])
        .unwrap_or_else(|e| fail(e));
    let ctx = dev.create_context().unwrap_or_else(|e| fail(e));
    let mut streams: Vec<_> = (0..2)
        .map(|_| {
            ctx.create_stream_with(StreamOptions::depths(8, 8))
                .unwrap_or_else(|e| fail(e))
        })
        .collect();
    let gemm = |k: usize, i: u64| {
        let m = |x| Matrix::new(x, Dtype::F32, n, n);
        task::gemm(m(&a), m(&b), m(&cs[k]), 1.0, 0.0)
            .unwrap_or_else(|e| fail(e))
            .with_user_data(i)
    };
    for (k, s) in streams.iter_mut().enumerate() {
        let batch: Vec<_> = (0..2).map(|i| gemm(k, i)).collect();
        s.submit_batch(&batch).unwrap_or_else(|e| fail(e));
    }
    say(json!({"event": "ready", "streams": 2, "gemm": "512x512x512 f32"}));
    let (mut done_n, mut next, mut last) = (0u64, 2u64, Instant::now());
    let mut done = Vec::new();
    loop {
        for (k, s) in streams.iter_mut().enumerate() {
            done.clear();
            s.poll(&mut done);
            if let Some(c) = done.iter().find(|c| !c.is_ok()) {
                fail(format!("a GEMM failed: {c:?}"));
            }
            let batch: Vec<_> = (0..done.len() as u64).map(|j| gemm(k, next + j)).collect();
            next += batch.len() as u64;
            done_n += batch.len() as u64;
            if !batch.is_empty() {
                s.submit_batch(&batch).unwrap_or_else(|e| fail(e));
            }
        }
        if done_n > 0 && done_n.is_multiple_of(16) {
            // 512 products of 0.5 · 2: every element 512.
            let v = cs[0].read_vec::<f32>(0, 4).unwrap_or_else(|e| fail(e));
            if v != [512.0; 4] {
                fail(format!("a GEMM computed {v:?}, not 512"));
            }
        }
        progress(done_n, &mut last);
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn waits(path: &str) -> ! {
    let mut held = Vec::new();
    let mut waiting = 0usize;
    std::thread::scope(|scope| {
        for _ in 0..8 {
            let dev = Device::open(path).unwrap_or_else(|e| fail(e));
            let ctx = dev.create_context().unwrap_or_else(|e| fail(e));
            let gate = ctx.create_event().unwrap_or_else(|e| fail(e));
            let late = ctx.create_event().unwrap_or_else(|e| fail(e));
            let mut s = ctx.create_stream().unwrap_or_else(|e| fail(e));
            // `late` is recorded behind a wait for `gate`'s first record, which nobody makes.
            let never = Task::from_desc(TaskDesc::event_wait(1, gate.handle(), 1))
                .unwrap_or_else(|e| fail(e));
            s.submit(&never).unwrap_or_else(|e| fail(e));
            late.record(&mut s).unwrap_or_else(|e| fail(e));
            held.push((dev, ctx, gate, late, s));
        }
        for (_, _, _, late, _) in &held {
            for _ in 0..32 {
                scope.spawn(move || match late.synchronize(FOREVER) {
                    Err(e) if e.errno() == Some(Errno::EBUSY) => {}
                    Err(e) => fail(format!("a wait ended: {e}")),
                    Ok(()) => fail("a wait for an event nobody records returned"),
                });
                waiting += 1;
            }
        }
        // Give the waits time to reach the device; EBUSY ones end their threads.
        std::thread::sleep(Duration::from_millis(500));
        say(json!({"event": "ready", "opens": held.len(), "waits": waiting}));
        loop {
            std::thread::park();
        }
    })
}

fn opens(path: &str) -> ! {
    let mut clients = Vec::new();
    let why = loop {
        match Device::open(path) {
            Ok(d) => clients.push(d),
            Err(e) => break e,
        }
        if clients.len() > 4096 {
            fail("4096 client opens and none refused: the device has no bound");
        }
    };
    if why.errno() != Some(Errno::ENOSPC) {
        fail(format!("client opens ended with {why}, not ENOSPC"));
    }
    let mut controls = Vec::new();
    let cwhy = loop {
        match Control::open(path) {
            Ok(c) => controls.push(c),
            Err(e) => break e,
        }
        if controls.len() > 4096 {
            fail("4096 control opens and none refused: the device has no bound");
        }
    };
    say(json!({
        "event": "ready",
        "clients": clients.len(),
        "controls": controls.len(),
        "refused": why.to_string(),
        "control_refused": cwhy.to_string(),
    }));
    loop {
        std::thread::park();
    }
}

fn pre_hello(path: &str) -> ! {
    use davinci_mockd_proto::sockio::SeqPacket;
    let Some(sock) = path.strip_prefix("mock:") else {
        fail("pre-hello needs a davinci-mockd device (mock:PATH)");
    };
    let sock = std::path::Path::new(sock);
    let mut conns: Vec<SeqPacket> = Vec::new();
    let (mut n, mut last) = (0u64, Instant::now());
    let mut ready = false;
    loop {
        // Drop what the daemon closed (after its HELLO timeout), then top up.
        conns.retain(|c| !c.peer_closed());
        while conns.len() < 400 {
            match SeqPacket::connect(sock) {
                Ok(c) => {
                    conns.push(c);
                    n += 1;
                }
                Err(_) => break,
            }
        }
        if !ready {
            say(json!({"event": "ready", "connections": conns.len()}));
            ready = true;
        }
        progress(n, &mut last);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn tables(path: &str) -> ! {
    let dev = Device::open(path).unwrap_or_else(|e| fail(e));
    let mut contexts = Vec::new();
    while let Ok(c) = dev.create_context() {
        contexts.push(c);
    }
    let Some(first) = contexts.first() else {
        fail("no context at all");
    };
    let mut streams = Vec::new();
    while let Ok(s) = first.create_stream_with(StreamOptions::depths(8, 8)) {
        streams.push(s);
    }
    let mut events = Vec::new();
    while let Ok(e) = first.create_event() {
        events.push(e);
    }
    let mut allocations = Vec::new();
    while let Ok(a) = dev.alloc(4096) {
        allocations.push(a);
        if allocations.len() > 1 << 16 {
            fail("65536 allocations and none refused");
        }
    }
    say(json!({
        "event": "ready",
        "contexts": contexts.len(),
        "streams": streams.len(),
        "events": events.len(),
        "allocations": allocations.len(),
    }));
    loop {
        std::thread::park();
    }
}

fn memory(path: &str) -> ! {
    let dev = Device::open(path).unwrap_or_else(|e| fail(e));
    let mut bufs = Vec::new();
    while let Ok(b) = dev.alloc(1 << 20) {
        bufs.push(b);
        if bufs.len() > 1 << 16 {
            fail("64 GiB allocated and none refused");
        }
    }
    say(json!({"event": "ready", "bytes": bufs.len() << 20}));
    let chunk = vec![0x5au8; 1 << 20];
    let (mut n, mut last) = (0u64, Instant::now());
    loop {
        for b in &bufs {
            b.write(0, &chunk).unwrap_or_else(|e| fail(e));
            n += 1;
            progress(n, &mut last);
        }
    }
}

fn hoard(path: &str, most_opens: usize) -> ! {
    let mut devs = Vec::new();
    let mut open_refused = None;
    while devs.len() < most_opens {
        match Device::open(path) {
            Ok(d) => devs.push(d),
            Err(e) if refused(&e) => {
                open_refused = Some(e.to_string());
                break;
            }
            Err(e) => fail(format!("client open {}: {e}", devs.len())),
        }
    }
    if devs.is_empty() {
        say(json!({"event": "ready", "opens": 0, "open_refused": open_refused}));
        loop {
            std::thread::park();
        }
    }
    let h = take_everything(devs).unwrap_or_else(|e| fail(e));
    let t = h.devs[0].usage().unwrap_or_else(|e| fail(e));
    let n = h.devs.len();
    let (bufs, exports, contexts, streams, events) =
        (&h.bufs, &h.exports, &h.contexts, &h.streams, &h.events);
    let chunk = h.chunk;
    say(json!({
        "event": "ready",
        "opens": n,
        "open_refused": open_refused,
        "allocations": bufs.len(),
        "memory": bufs.len() as u64 * chunk,
        "exports": exports.len(),
        "contexts": contexts.len(),
        "streams": streams.len(),
        "events": events.len(),
        "tenant": tenant_json(&t),
    }));
    loop {
        std::thread::park();
    }
}

/// A GET_USAGE's tenant part: its kind, whether it has a slot, and `[held, limit now]` of
/// each resource.
fn tenant_json(t: &Usage) -> serde_json::Value {
    json!({
        "kind": t.tenant.map(|k| k.name()),
        "slotted": t.slotted,
        "memory": [t.memory.held, t.memory.limit],
        "allocations": [t.allocations.held, t.allocations.limit],
        "exports": [t.exports.held, t.exports.limit],
        "contexts": [t.contexts.held, t.contexts.limit],
        "streams": [t.streams.held, t.streams.limit],
        "events": [t.events.held, t.events.limit],
    })
}

fn hold(path: &str) -> ! {
    let dev = Device::open(path).unwrap_or_else(|e| fail(format!("the holder's open: {e}")));
    let t = dev.usage().unwrap_or_else(|e| fail(e));
    say(json!({"event": "ready", "opens": 1, "tenant": tenant_json(&t)}));
    loop {
        std::thread::park();
    }
}

/// `p` (0..=1) of `v`, in milliseconds.
fn pct_ms(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].as_secs_f64() * 1e3
}

fn victim(path: &str) -> ! {
    const T: Duration = Duration::from_secs(60);
    let step =
        |what: &str, e: davinci_shim::Error| -> ! { fail(format!("the victim's {what}: {e}")) };
    let dev = Device::open(path).unwrap_or_else(|e| step("open", e));
    let ctx = dev.create_context().unwrap_or_else(|e| step("context", e));
    let mut s = ctx.create_stream().unwrap_or_else(|e| step("stream", e));
    let ev = ctx.create_event().unwrap_or_else(|e| step("event", e));
    ev.record(&mut s)
        .unwrap_or_else(|e| step("event record", e));
    s.synchronize(T)
        .unwrap_or_else(|e| step("event record's run", e));
    let align = dev.info().mem_align.max(4096) as u64;
    let one = dev
        .alloc(align as usize)
        .unwrap_or_else(|e| step("allocation", e));
    let token = one
        .export(ExportTo::SameUser)
        .unwrap_or_else(|e| step("export", e));
    // The rest of its tenant's memory share: in one allocation if it can, else in halves.
    let u = dev.usage().unwrap_or_else(|e| step("GET_USAGE", e));
    let mut room = u.memory.room() / align * align;
    let (mut chunk, mut rest, mut halvings) = (room, Vec::new(), 0u32);
    while room >= align && chunk >= align {
        match dev.alloc(chunk as usize) {
            Ok(b) => {
                rest.push(b);
                room -= chunk;
                chunk = chunk.min(room);
            }
            Err(e) if refused(&e) => {
                chunk = chunk / 2 / align * align;
                halvings += 1;
            }
            Err(e) => step("memory share", e),
        }
    }
    let after = dev.usage().unwrap_or_else(|e| step("GET_USAGE", e));
    // A warm-up, not timed: the first round trips after the allocations meet the device
    // still busy with them.
    for i in 0..50u64 {
        s.submit(&task::nop().with_user_data(i))
            .unwrap_or_else(|e| step("NOP", e));
        s.synchronize(T).unwrap_or_else(|e| step("NOP's run", e));
    }
    let mut nop: Vec<Duration> = (0..300u64)
        .map(|i| {
            let t0 = Instant::now();
            s.submit(&task::nop().with_user_data(i))
                .unwrap_or_else(|e| step("NOP", e));
            s.synchronize(T).unwrap_or_else(|e| step("NOP's run", e));
            t0.elapsed()
        })
        .collect();
    let mut control: Vec<Duration> = (0..300)
        .map(|_| {
            let t0 = Instant::now();
            drop(
                dev.create_context()
                    .unwrap_or_else(|e| step("control call", e)),
            );
            t0.elapsed()
        })
        .collect();
    say(json!({
        "event": "done",
        "slotted": after.slotted,
        "tenant": after.tenant.map(|k| k.name()),
        "memory": [after.memory.held, after.memory.limit],
        "allocations": after.allocations.held,
        "own": [after.own.contexts, after.own.streams, after.own.events, after.own.allocations,
                after.own.exports],
        "halvings": halvings,
        "page": align,
        "export": token.to_string(),
        "samples": nop.len(),
        "nop_ms": [pct_ms(&mut nop, 0.5), pct_ms(&mut nop, 0.99), pct_ms(&mut nop, 1.0)],
        "control_ms": [pct_ms(&mut control, 0.5), pct_ms(&mut control, 0.99),
                       pct_ms(&mut control, 1.0)],
    }));
    drop((rest, one, ev, s, ctx, dev));
    std::process::exit(0);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: davinci-attacker fills|gemms|waits|opens|pre-hello|tables|memory|hoard|\
                 victim|hold --device PATH [--opens N] [--gate]";
    let mode = args.next().unwrap_or_else(|| fail(usage));
    let (mut path, mut most_opens, mut gate) = (None, 40usize, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--device" => path = Some(args.next().unwrap_or_else(|| fail(usage))),
            "--opens" => {
                most_opens = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| fail(usage))
            }
            "--gate" => gate = true,
            _ => fail(usage),
        }
    }
    let path = path.unwrap_or_else(|| fail(usage));
    if gate {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    }
    match mode.as_str() {
        "fills" => fills(&path),
        "gemms" => gemms(&path),
        "waits" => waits(&path),
        "opens" => opens(&path),
        "pre-hello" => pre_hello(&path),
        "tables" => tables(&path),
        "memory" => memory(&path),
        "hoard" => hoard(&path, most_opens),
        "victim" => victim(&path),
        "hold" => hold(&path),
        other => fail(format!("unknown pattern '{other}'; {usage}")),
    }
}
