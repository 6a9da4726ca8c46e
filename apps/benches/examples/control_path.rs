//! The control path alone, for profiling: ALLOC+FREE of 4 KiB or CREATE+DESTROY_STREAM in a
//! loop for a given time, embedded or through a `davinci-mockd` it starts, then p50/p99.
//!
//! `cargo build --release -p davinci-mockd && cargo run --release -p davinci-benches
//! --example control_path -- mockd alloc 5` (modes `embedded`/`mockd`, ops
//! `alloc`/`stream`/`create` (CREATE_STREAM alone, its DESTROY untimed)/`destroy`
//! (DESTROY_STREAM alone, its CREATE untimed)/`info` (GET_INFO: one round trip), seconds);
//! run `perf record` on it while it loops.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_benches::mockd::{find, Mockd};
use davinci_benches::stats::summarize;
use davinci_shim::Device;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: control_path embedded|mockd alloc|stream|create|destroy|info [SECONDS]";
    let (Some(mode), Some(op)) = (args.first(), args.get(1)) else {
        return Err(usage.into());
    };
    let secs: f64 = args
        .get(2)
        .map_or(Ok(3.0), |s| s.parse())
        .map_err(|e| format!("{e}"))?;
    let _daemon;
    let dev = match mode.as_str() {
        "embedded" => Device::embedded().map_err(|e| e.to_string())?,
        "mockd" => {
            // Beside the release directory this example is built into (`examples/..`).
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let beside = exe
                .parent()
                .and_then(|d| d.parent())
                .map(|d| d.join("davinci-mockd"));
            let d = Mockd::start(&find(beside.as_deref())?)?;
            let dev = Device::open(&d.device_path()).map_err(|e| e.to_string())?;
            _daemon = d;
            dev
        }
        _ => return Err(usage.into()),
    };
    let ctx = dev.create_context().map_err(|e| e.to_string())?;
    let mut samples = Vec::new();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        if op == "create" {
            let t0 = Instant::now();
            let s = ctx.create_stream().map_err(|e| e.to_string())?;
            samples.push(t0.elapsed().as_nanos() as u64);
            drop(s);
            continue;
        }
        if op == "destroy" {
            let s = ctx.create_stream().map_err(|e| e.to_string())?;
            let t0 = Instant::now();
            drop(s);
            samples.push(t0.elapsed().as_nanos() as u64);
            continue;
        }
        let t0 = Instant::now();
        match op.as_str() {
            "alloc" => drop(dev.alloc(4096).map_err(|e| e.to_string())?),
            "stream" => drop(ctx.create_stream().map_err(|e| e.to_string())?),
            "info" => drop(dev.query_info().map_err(|e| e.to_string())?),
            _ => return Err(usage.into()),
        }
        samples.push(t0.elapsed().as_nanos() as u64);
    }
    let s = summarize(&mut samples).ok_or("no samples")?;
    println!(
        "{mode} {op}: {} samples, p50 {:.1} us, p99 {:.1} us, mean {:.1} us",
        s.count,
        s.p50 as f64 / 1e3,
        s.p99 as f64 / 1e3,
        s.mean / 1e3
    );
    Ok(())
}
