//! The latency phase: single-task round trips (submit one NOP, poll until its completion)
//! on a stream of their own, after a warm-up; p50/p99/max and doorbells per 1000.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use davinci_shim::{task, Context, Device, Errno, Error, Result, Stream, StreamOptions};

use super::config::WorkloadConfig;
use super::report::{LatencyReport, Phase, Progress};

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(super) fn latency(
    dev: &Device,
    ctx: &Context,
    cfg: &WorkloadConfig,
    stop: &AtomicBool,
    progress: &mut impl FnMut(Progress),
) -> Result<LatencyReport> {
    let mut stream =
        ctx.create_stream_with(StreamOptions::depths(16, 32).submit_timeout(cfg.timeout))?;
    let one = |i: u64, stream: &mut Stream| -> Result<Duration> {
        let t = Instant::now();
        stream.submit(&task::nop().with_user_data(i))?;
        loop {
            let mut got = None;
            stream.poll_each(|c| got = Some(c));
            if let Some(c) = got {
                let dt = t.elapsed();
                c.result()?;
                return Ok(dt);
            }
            if stop.load(Ordering::Relaxed) {
                return Err(Error::new(Errno::EINTR, "workload latency", "stopped"));
            }
            if t.elapsed() > cfg.timeout {
                return Err(Error::new(
                    Errno::ETIMEDOUT,
                    "workload latency",
                    format!("no completion of a NOP within {:?}", cfg.timeout),
                ));
            }
            std::hint::spin_loop();
        }
    };
    for i in 0..64 {
        one(i, &mut stream)?;
    }
    let stats0 = dev.stats();
    let mut samples = Vec::with_capacity(cfg.latency_samples);
    let total = cfg.latency_samples as u64;
    for i in 0..cfg.latency_samples {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let dt = match one(i as u64, &mut stream) {
            Err(e) if e.is(Errno::EINTR) => break,
            r => r?,
        };
        samples.push(u64::try_from(dt.as_nanos()).unwrap_or(u64::MAX));
        if i % 64 == 63 {
            progress(Progress {
                phase: Phase::Latency,
                done: i as u64 + 1,
                total,
            });
        }
    }
    progress(Progress {
        phase: Phase::Latency,
        done: samples.len() as u64,
        total,
    });
    let st = dev.stats().since(&stats0);
    samples.sort_unstable();
    Ok(LatencyReport {
        samples: samples.len(),
        p50_ns: percentile(&samples, 0.50),
        p99_ns: percentile(&samples, 0.99),
        max_ns: samples.last().copied().unwrap_or(0),
        doorbells_per_1000_tasks: st.doorbells_per_1000_tasks(),
    })
}
