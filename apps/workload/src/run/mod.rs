//! The workload of `davinci-workload`: vector adds (u32, i32, f32), fills and copies over
//! several streams with cross-stream events, every result checked against the CPU, then a
//! latency phase of single submit -> completion round trips.
//!
//! One round, per stream `s` (with `K` slots of `elements`-long vectors):
//! ```text
//! stream s:    ADD  C[k] = A[k] + B[k]  (dtype rotates u32/i32/f32)   \
//!              FILL F[k] = pattern(round, s, k)                        } k = 0..K
//!              COPY D[k] <- C[k]                                      /
//!              EVENT_RECORD ev[s]
//!              EVENT_WAIT   ev[s-1]          (the previous stream's record of this round)
//!              COPY X <- C_{s-1}[0]          (reads what the other stream computed)
//! host:        synchronize every stream, poll every completion (exactly once, in order,
//!              status 0), compare C, F, D, X with the CPU model, write new inputs.
//! ```
//!
//! [`run`] runs it to the end; [`run_until`] also stops early (between rounds, or between
//! round trips of the latency phase) when a flag is set, and reports progress per phase.
//!
//! The parts: [`WorkloadConfig`] (`config.rs`), the throughput phase (`throughput.rs`), the
//! latency phase (`latency.rs`) and what a run reports ([`Report`], [`Progress`]:
//! `report.rs`).
#![forbid(unsafe_code)]

use std::sync::atomic::AtomicBool;

use davinci_shim::{Device, Errno, Error, Features, MemPool, PoolOptions, Result};

mod config;
mod latency;
mod report;
mod throughput;

pub use config::{MemoryNeed, WorkloadConfig};
pub use report::{LatencyReport, Phase, Progress, Report};

use config::{POOL_ALIGN, POOL_CHUNK};
use throughput::Throughput;

/// Runs the workload on `dev`. `progress` is called with the tasks done so far (throughput
/// tasks, then latency round trips on top). Mismatches are counted in the report, not
/// returned as errors; an `Err` means the device or the shim failed, or the configuration
/// is invalid ([`WorkloadConfig::check`]).
pub fn run(dev: &Device, cfg: &WorkloadConfig, mut progress: impl FnMut(u64)) -> Result<Report> {
    let never = AtomicBool::new(false);
    let base = cfg.planned_tasks();
    run_until(dev, cfg, &never, |p| match p.phase {
        Phase::Throughput => progress(p.done),
        Phase::Latency => progress(base + p.done),
    })
}

/// [`run`], stopping early when `stop` becomes true: it is checked between rounds of the
/// throughput phase and between round trips of the latency phase (a throughput stop skips
/// the latency phase). The report of a stopped run has `interrupted` set and covers the
/// work done. `progress` is called after every round and every 64 round trips, and once at
/// the end of each phase.
///
/// # Errors
/// As [`run`].
pub fn run_until(
    dev: &Device,
    cfg: &WorkloadConfig,
    stop: &AtomicBool,
    mut progress: impl FnMut(Progress),
) -> Result<Report> {
    cfg.check()?;
    let rounds = cfg.rounds();
    let info = dev.info();
    let need = cfg
        .memory_needed(u64::from(info.mem_align))
        .ok_or_else(|| Error::new(Errno::EOVERFLOW, "workload", "buffer sizes overflow"))?;
    let mut report = Report {
        device: dev.to_string(),
        client_id: (info.features.contains(Features::CALLER_ID) && info.caller_id != 0)
            .then_some(info.caller_id),
        streams: cfg.streams,
        batch: cfg.batch,
        elements: cfg.elements,
        rounds,
        rounds_planned: rounds,
        ..Report::default()
    };

    let ctx = dev.create_context()?;
    let pool = MemPool::with_options(
        dev,
        PoolOptions::default()
            .chunk_size(POOL_CHUNK as usize)
            .max_bytes(need.pool_bytes)
            .align(POOL_ALIGN as usize),
    );
    let mut throughput = Throughput::create(&ctx, &pool, cfg)?;
    throughput.run(dev, cfg, stop, &mut report, &mut progress)?;

    if !report.interrupted && cfg.latency_samples > 0 {
        report.latency = latency::latency(dev, &ctx, cfg, stop, &mut progress)?;
        report.interrupted = report.latency.samples < cfg.latency_samples;
    }
    Ok(report)
}

#[cfg(test)]
mod tests;
