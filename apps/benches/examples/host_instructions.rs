//! The host side of streaming NOPs at batch 64, in functions callgrind can count alone
//! (`scripts/bench-callgrind.sh`): `host_submit` builds 64 descriptors and submits them (one publish,
//! at most one doorbell), `host_reap` takes their 64 completions and checks each one's
//! `user_data` and status. The wait in between (`synchronize`) is left out: it is time spent
//! waiting for the device, not work per task. The same run counts the device's side too:
//! the poller's `run_stream` calls, which take, check and complete these tasks.
//!
//! `host_instructions idle` submits nothing: the same device and stream, left alone for
//! 300 ms, so every pass of the poller finds nothing; the script divides its `run_stream`
//! instructions by its passes for the cost of one idle pass.
//!
//! `cargo run --release -p davinci-benches --example host_instructions [BATCHES | idle]`
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use davinci_shim::{task, Completion, Device, Stream, StreamOptions, Task};

const BATCH: u64 = 64;

#[inline(never)]
fn host_submit(s: &mut Stream, descs: &mut Vec<Task>, first: u64) -> davinci_shim::Result<()> {
    descs.clear();
    descs.extend((first..first + BATCH).map(|i| task::nop().with_user_data(i)));
    s.submit_batch(descs).map(|_| ())
}

#[inline(never)]
fn host_reap(s: &mut Stream, next: &mut u64, bad: &mut u64) -> usize {
    s.poll_each(|c: Completion| {
        if c.user_data != *next || !c.is_ok() {
            *bad += 1;
        }
        *next += 1;
    })
}

fn main() -> ExitCode {
    let arg = std::env::args().nth(1);
    if arg.as_deref() == Some("idle") {
        return match idle() {
            Ok(()) => {
                println!("0 NOP tasks: the stream was left idle for {IDLE:?}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("host_instructions idle: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let batches: u64 = match arg.map(|a| a.parse()) {
        None => 2000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!(
                "usage: host_instructions [BATCHES (a positive integer, default 2000) | idle]"
            );
            return ExitCode::from(2);
        }
    };
    match run(batches) {
        Ok(tasks) => {
            println!("{tasks} NOP tasks in {batches} batches of {BATCH}, every completion checked");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("host_instructions: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How long `idle` leaves the stream alone.
const IDLE: Duration = Duration::from_millis(300);

/// The device and stream of `run`, with nothing submitted: the poller's passes over the
/// stream all find nothing (it spins, then sleeps and looks again at each timeout).
fn idle() -> Result<(), String> {
    let dev = Device::embedded().map_err(|e| e.to_string())?;
    let ctx = dev.create_context().map_err(|e| e.to_string())?;
    let s = ctx
        .create_stream_with(StreamOptions::depths(256, 512))
        .map_err(|e| e.to_string())?;
    std::thread::sleep(IDLE);
    drop(s);
    Ok(())
}

fn run(batches: u64) -> Result<u64, String> {
    let dev = Device::embedded().map_err(|e| e.to_string())?;
    let ctx = dev.create_context().map_err(|e| e.to_string())?;
    let mut s = ctx
        .create_stream_with(StreamOptions::depths(256, 512))
        .map_err(|e| e.to_string())?;
    let mut descs = Vec::with_capacity(BATCH as usize);
    let (mut next, mut bad) = (0u64, 0u64);
    for b in 0..batches {
        host_submit(&mut s, &mut descs, b * BATCH).map_err(|e| e.to_string())?;
        s.synchronize(Duration::from_secs(60))
            .map_err(|e| e.to_string())?;
        let got = host_reap(&mut s, &mut next, &mut bad);
        if got as u64 != BATCH {
            return Err(format!("batch {b}: {got} completions, expected {BATCH}"));
        }
    }
    if bad > 0 {
        return Err(format!("{bad} completions out of order or failed"));
    }
    Ok(next)
}
