//! The two-ring baseline's rows: which rings ([`Rings`]: the own ring of `spsc_ring.rs`, THE
//! baseline, and the alternatives of `spsc_alt.rs`), streaming throughput and the round trip
//! on each, over the host and device loops of `spsc.rs`.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use crate::measure::{LatencyRun, ThroughputRun, Window};
use crate::spsc::{Cpl, Desc, OwnPipeline, Pipeline, Rx, Stores, Tx};

/// Which rings a pipeline runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rings {
    /// This file's own ring, batches written with non-temporal stores: THE baseline
    /// (`baseline/two-ring/...`).
    Own,
    /// The own ring written with relaxed atomic stores of each word only (what safe Rust
    /// gives: no wide or non-temporal stores).
    Plain,
    /// `rtrb::RingBuffer` (chunks: one index store per batch).
    Rtrb,
    /// `crossbeam_queue::ArrayQueue` (a bounded MPMC queue: a stamp per slot, a CAS per item).
    ArrayQueue,
}

impl Rings {
    /// Every kind, THE baseline first.
    pub const ALL: [Rings; 4] = [Rings::Own, Rings::Plain, Rings::Rtrb, Rings::ArrayQueue];
}

/// The depth of the streaming rows' rings: ours's (`shim_rows::stream_options`), 4096.
pub const STREAM_DEPTH: u32 = 4096;

/// Streaming throughput on `rings`: `batch` descriptors per publish, the host submitting
/// whenever the command ring has room and reaping in between (pipelined), over `window`.
///
/// # Errors
/// A completion out of order or missing, or the thread cannot be spawned.
pub fn throughput(rings: Rings, batch: u32, window: Window) -> Result<ThroughputRun, String> {
    match rings {
        Rings::Own => stream(
            OwnPipeline::start(STREAM_DEPTH, Stores::WideNt)?,
            batch,
            window,
        ),
        Rings::Plain => stream(
            OwnPipeline::start(STREAM_DEPTH, Stores::Words)?,
            batch,
            window,
        ),
        Rings::Rtrb => stream(crate::spsc_alt::rtrb(STREAM_DEPTH)?, batch, window),
        Rings::ArrayQueue => stream(crate::spsc_alt::array_queue(STREAM_DEPTH)?, batch, window),
    }
}

/// Round trip on `rings` with one descriptor in flight: push, publish, spin until its
/// completion.
///
/// # Errors
/// A completion out of order or missing, or the thread cannot be spawned.
pub fn round_trip(rings: Rings, window: Window) -> Result<LatencyRun, String> {
    // The depth of ours's round-trip row (`shim_rows::latency_options`).
    const DEPTH: u32 = 1024;
    match rings {
        Rings::Own => trips(OwnPipeline::start(DEPTH, Stores::WideNt)?, window),
        Rings::Plain => trips(OwnPipeline::start(DEPTH, Stores::Words)?, window),
        Rings::Rtrb => trips(crate::spsc_alt::rtrb(DEPTH)?, window),
        Rings::ArrayQueue => trips(crate::spsc_alt::array_queue(DEPTH)?, window),
    }
}

fn stream<T: Tx<Desc>, R: Rx<Cpl>>(
    mut p: Pipeline<T, R>,
    batch: u32,
    window: Window,
) -> Result<ThroughputRun, String> {
    let mut w = window.start();
    loop {
        p.try_submit(batch);
        p.reap()?;
        if w.tick(p.completed()) {
            break;
        }
    }
    let run = w.finish(p.completed());
    p.drain(Duration::from_secs(10))?;
    p.stop()?;
    Ok(run)
}

fn trips<T: Tx<Desc>, R: Rx<Cpl>>(
    mut p: Pipeline<T, R>,
    window: Window,
) -> Result<LatencyRun, String> {
    let mut lat = LatencyRun::new(window);
    loop {
        let t0 = Instant::now();
        p.try_submit(1);
        let mut spins = 0u32;
        while p.reap()? == 0 {
            spins = spins.wrapping_add(1);
            // No spin-loop hint: a `pause` here cost 15 % of the round trip (it is slow on this
            // VM, and the reply is due within a microsecond).
            if spins.is_multiple_of(1 << 20) && t0.elapsed() > Duration::from_secs(10) {
                return Err("two-ring baseline: no completion within 10 s".into());
            }
        }
        if lat.record(t0) {
            break;
        }
    }
    p.stop()?;
    Ok(lat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipeline_delivers_every_item_in_order_across_threads() {
        for rings in Rings::ALL {
            let t0 = Instant::now();
            let total = 200_000u64;
            let check = |submitted: u64| {
                assert!(t0.elapsed() < Duration::from_secs(60), "{rings:?} stalled");
                // Batches of 7 and of NT_BATCH and more (the two ways the host writes).
                let batch = if submitted.is_multiple_of(3) { 7 } else { 20 };
                (submitted < total).then(|| ((total - submitted) as u32).min(batch))
            };
            match rings {
                Rings::Own => run_all(
                    OwnPipeline::start(64, Stores::WideNt).unwrap(),
                    total,
                    check,
                ),
                Rings::Plain => {
                    run_all(OwnPipeline::start(64, Stores::Words).unwrap(), total, check)
                }
                Rings::Rtrb => run_all(crate::spsc_alt::rtrb(64).unwrap(), total, check),
                Rings::ArrayQueue => {
                    run_all(crate::spsc_alt::array_queue(64).unwrap(), total, check)
                }
            }
        }
    }

    fn run_all<T: Tx<Desc>, R: Rx<Cpl>>(
        mut p: Pipeline<T, R>,
        total: u64,
        check: impl Fn(u64) -> Option<u32>,
    ) {
        while p.completed() < total {
            if let Some(batch) = check(p.submitted()) {
                p.try_submit(batch);
            }
            p.reap().unwrap();
        }
        assert_eq!(p.submitted(), total);
        assert_eq!(p.completed(), total);
        p.stop().unwrap();
    }

    #[test]
    fn throughput_and_round_trip_run() {
        let w = Window::new(Duration::from_millis(200), Duration::from_millis(10));
        for rings in Rings::ALL {
            let t = throughput(rings, 64, w).unwrap();
            assert!(t.tasks > 0, "{rings:?}");
            let l = round_trip(rings, w).unwrap();
            assert!(l.samples.len() > 10, "{rings:?}");
        }
    }
}
