//! Quick start: one complete davinci-shim program.
//!
//! ```sh
//! cargo run -p davinci-shim --example quickstart                  # the embedded mock device
//! cargo run -p davinci-shim --example quickstart -- /dev/davinci0 # the kernel driver
//! cargo run -p davinci-shim --example quickstart -- mock:/run/davinci/davinci0.sock
//! ```
//!
//! It takes device memory from a pool, fills and adds vectors on one stream, makes a second
//! stream wait for the first through an event record, drops a buffer with work still queued
//! on it (safe: it returns to the pool once that work ran), reads the result back and checks
//! it, then shows what errors look like: one caught on the host before submitting, one the
//! device reports.
use std::process::ExitCode;
use std::time::Duration;

use davinci_shim::{task, Device, DeviceMem, MemPool, Region, Result};

const N: usize = 1024;
const TIMEOUT: Duration = Duration::from_secs(10);

fn run(path: &str) -> Result<()> {
    let dev = if path == "embedded" {
        Device::embedded()?
    } else {
        Device::open(path)?
    };
    println!("device: {dev}");

    // Device memory from a pool (one driver allocation for all three): two inputs and a
    // result, N f32 each.
    let bytes = N * 4;
    let pool = MemPool::new(&dev);
    let (a, b, sum) = (pool.alloc(bytes)?, pool.alloc(bytes)?, pool.alloc(bytes)?);
    a.write_slice(0, &(0..N).map(|i| i as f32).collect::<Vec<_>>())?;

    // Two streams in one context: `producer` fills b and records an event; `consumer` waits
    // for the event on the device, then adds.
    let ctx = dev.create_context()?;
    let mut producer = ctx.create_stream()?;
    let mut consumer = ctx.create_stream()?;
    let filled = ctx.create_event()?;

    producer.submit(&task::fill(&b, 0.5f32.to_bits())?.with_user_data(1))?;
    // The record's token names its value: a wait for it waits for exactly this record.
    let ready = filled.record(&mut producer)?;
    consumer.wait_recorded(&ready)?;
    consumer.submit(&task::add::<f32>(&sum, &a, &b)?.with_user_data(2))?;
    // Safe with the add still queued: `b` goes back to the pool once the tasks that name it
    // (the fill, the add) have run and their streams reaped them.
    drop(b);
    consumer.synchronize(TIMEOUT)?;
    producer.synchronize(TIMEOUT)?;
    println!(
        "event {:#x} reached value {}; pool: {:?}",
        ready.event_handle(),
        ready.value(),
        pool.stats()
    );

    let out: Vec<f32> = sum.read_vec(0, N)?;
    assert!(out.iter().enumerate().all(|(i, &x)| x == i as f32 + 0.5));
    println!(
        "sum[0..4] = {:?} ({} elements checked)",
        &out[..4],
        out.len()
    );

    // Errors, 1: caught on the host. The regions differ in length, so no task is submitted.
    let half = Region::range(&a, 0..bytes / 2)?;
    match task::add::<f32>(&sum, half, &a) {
        Err(e) => println!("host check: {e}"),
        Ok(_) => unreachable!("the lengths differ"),
    }

    // Errors, 2: reported by the device. This COPY reads 4 bytes past the end of `a` (the
    // raw descriptor API does no host checks, and keeps nothing alive: hence `unsafe`); the
    // device stops the stream, and the error says which operand and what to do.
    // (A buffer of its own: past the end of a pool block is still the pool's chunk.)
    let lone = dev.alloc(bytes)?;
    let mut s = ctx.create_stream()?;
    let past_end =
        davinci_shim::TaskDesc::copy(3, lone.dev_addr(), lone.dev_addr() + 4, bytes as u64);
    // SAFETY: `lone`, which the descriptor names, lives until the end of this function, after
    // the stream is dropped (below).
    unsafe { s.submit_raw(&past_end)? };
    if let Err(e) = s.synchronize(TIMEOUT) {
        println!("device error: {e}");
    }
    // The context and the other streams are unaffected; a new stream works.
    drop(s);
    let mut again = ctx.create_stream()?;
    again.submit(&task::copy(&sum, &a)?)?;
    again.synchronize(TIMEOUT)?;
    println!("a new stream works after the error");
    Ok(())
}

fn main() -> ExitCode {
    let path = std::env::args().nth(1).unwrap_or_else(|| "embedded".into());
    match run(&path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}
