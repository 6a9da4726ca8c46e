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
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_shim::{
    DevAddr, Device, DeviceMem, Dtype, Event, MemPool, PoolBuffer, PoolOptions, Result, Stream,
    StreamOptions, TaskDesc,
};
use serde::Serialize;

use crate::model::{self, Rng, DTYPES};

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadConfig {
    /// Tasks of the throughput phase (rounded up to whole rounds).
    pub tasks: u64,
    /// Streams (all in one context).
    pub streams: usize,
    /// Descriptors per `submit_batch` call.
    pub batch: usize,
    /// Elements per vector.
    pub elements: usize,
    /// Vector jobs per stream per round.
    pub slots: usize,
    /// Single-task round trips of the latency phase.
    pub latency_samples: usize,
    /// Longest a synchronize or a round trip may take before the run fails.
    pub timeout: Duration,
    /// Seed of the input data.
    pub seed: u64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            tasks: 200_000,
            streams: 4,
            batch: 32,
            elements: 256,
            slots: 64,
            latency_samples: 2_000,
            timeout: Duration::from_secs(30),
            seed: 0x5eed,
        }
    }
}

/// Round-trip latencies of single tasks.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LatencyReport {
    /// Round trips measured.
    pub samples: usize,
    /// Median, nanoseconds.
    pub p50_ns: u64,
    /// 99th percentile, nanoseconds.
    pub p99_ns: u64,
    /// Slowest, nanoseconds.
    pub max_ns: u64,
    /// Wake-ups of the device (doorbell writes or NOTIFYs) per 1000 tasks in this phase.
    pub doorbells_per_1000_tasks: f64,
}

/// What a run measured and found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Backend description.
    pub device: String,
    /// Streams used.
    pub streams: usize,
    /// Descriptors per submit call.
    pub batch: usize,
    /// Elements per vector.
    pub elements: usize,
    /// Rounds run.
    pub rounds: u64,
    /// Tasks completed in the throughput phase.
    pub tasks: u64,
    /// Time from each round's first submit to its last synchronize, summed (seconds).
    pub device_seconds: f64,
    /// Whole throughput phase including host-side data generation and checking (seconds).
    pub wall_seconds: f64,
    /// `tasks / device_seconds`.
    pub tasks_per_sec: f64,
    /// Wake-ups of the device (doorbell writes or NOTIFYs) in the throughput phase.
    pub doorbells: u64,
    /// Wake-ups of the device per 1000 tasks in the throughput phase.
    pub doorbells_per_1000_tasks: f64,
    /// Values compared with the CPU model.
    pub values_checked: u64,
    /// Values (or completions) that differed from the model: must be 0.
    pub mismatches: u64,
    /// The first few mismatches, described.
    pub first_mismatches: Vec<String>,
    /// The latency phase.
    pub latency: LatencyReport,
}

impl Report {
    fn mismatch(&mut self, what: String) {
        self.mismatches += 1;
        if self.first_mismatches.len() < 10 {
            self.first_mismatches.push(what);
        }
    }
}

struct Lane {
    stream: Stream,
    a: Vec<PoolBuffer>,
    b: Vec<PoolBuffer>,
    c: Vec<PoolBuffer>,
    f: Vec<PoolBuffer>,
    d: Vec<PoolBuffer>,
    x: PoolBuffer,
    host_a: Vec<Vec<u32>>,
    host_b: Vec<Vec<u32>>,
    next_ud: u64,
    expect_ud: u64,
}

fn ud(stream: usize, seq: u64) -> u64 {
    ((stream as u64) << 48) | seq
}

fn dtype_of(round: u64, k: usize) -> Dtype {
    DTYPES[(round as usize + k) % DTYPES.len()]
}

fn pattern(round: u64, s: usize, k: usize) -> u32 {
    model::mix(round, ((s as u64) << 32) | k as u64) as u32
}

/// Runs the workload on `dev`. `progress` is called with the tasks done so far (throughput
/// tasks, then latency round trips on top). Mismatches are counted in the report, not
/// returned as errors; an `Err` means the device or the shim failed.
pub fn run(dev: &Device, cfg: &WorkloadConfig, mut progress: impl FnMut(u64)) -> Result<Report> {
    let streams = cfg.streams.max(1);
    let slots = cfg.slots.max(1);
    let elements = cfg.elements.max(1);
    let batch = cfg.batch.max(1);
    let bytes = elements * 4;
    let per_round = (streams * (3 * slots + 3)) as u64;
    let rounds = cfg.tasks.div_ceil(per_round).max(1);
    let mut report = Report {
        device: dev.to_string(),
        streams,
        batch,
        elements,
        rounds,
        ..Report::default()
    };

    let ctx = dev.create_context()?;
    let pool = MemPool::with_options(
        dev,
        PoolOptions::default()
            .chunk_size(4 << 20)
            .max_bytes(1 << 30)
            .align(64),
    );
    let events: Vec<Event> = (0..streams)
        .map(|_| ctx.create_event())
        .collect::<Result<_>>()?;
    let cmd_entries = (batch.next_power_of_two() as u32).clamp(256, 4096);
    let mut lanes = Vec::with_capacity(streams);
    for _ in 0..streams {
        let alloc =
            || -> Result<Vec<PoolBuffer>> { (0..slots).map(|_| pool.alloc(bytes)).collect() };
        lanes.push(Lane {
            stream: ctx.create_stream_with(StreamOptions::depths(cmd_entries, cmd_entries * 2))?,
            a: alloc()?,
            b: alloc()?,
            c: alloc()?,
            f: alloc()?,
            d: alloc()?,
            x: pool.alloc(bytes)?,
            host_a: vec![vec![0; elements]; slots],
            host_b: vec![vec![0; elements]; slots],
            next_ud: 0,
            expect_ud: 0,
        });
    }

    let mut rng = Rng::new(cfg.seed);
    let stats0 = dev.stats();
    let wall = Instant::now();
    let mut busy = Duration::ZERO;
    let mut descs: Vec<TaskDesc> = Vec::with_capacity(3 * slots + 3);
    for round in 0..rounds {
        // Inputs for this round (the device is idle: the last round was synchronized).
        for lane in &mut lanes {
            for k in 0..slots {
                let float = dtype_of(round, k) == Dtype::F32;
                for (x, y) in lane.host_a[k].iter_mut().zip(lane.host_b[k].iter_mut()) {
                    (*x, *y) = if float {
                        (rng.float_bits(), rng.float_bits())
                    } else {
                        (rng.next_u32(), rng.next_u32())
                    };
                }
                lane.a[k].write_slice(0, &lane.host_a[k])?;
                lane.b[k].write_slice(0, &lane.host_b[k])?;
            }
        }
        let t0 = Instant::now();
        // Phase 1: adds, fills, copies, then the record.
        for (s, lane) in lanes.iter_mut().enumerate() {
            descs.clear();
            for k in 0..slots {
                let mut next = || {
                    lane.next_ud += 1;
                    ud(s, lane.next_ud - 1)
                };
                descs.push(TaskDesc::add(
                    next(),
                    dtype_of(round, k),
                    lane.c[k].dev_addr(),
                    lane.a[k].dev_addr(),
                    lane.b[k].dev_addr(),
                    elements as u64,
                ));
                descs.push(TaskDesc::fill(
                    next(),
                    lane.f[k].dev_addr(),
                    bytes as u64,
                    pattern(round, s, k),
                ));
                descs.push(TaskDesc::copy(
                    next(),
                    lane.d[k].dev_addr(),
                    lane.c[k].dev_addr(),
                    bytes as u64,
                ));
            }
            for chunk in descs.chunks(batch) {
                lane.stream.submit_batch(chunk)?;
            }
            events[s].record_tagged(&mut lane.stream, ud(s, lane.next_ud))?;
            lane.next_ud += 1;
        }
        // Phase 2: each stream waits for the previous stream's record, then reads its result.
        let c0: Vec<DevAddr> = lanes.iter().map(|l| l.c[0].dev_addr()).collect();
        for (s, lane) in lanes.iter_mut().enumerate() {
            let prev = (s + streams - 1) % streams;
            lane.stream
                .wait_event_tagged(&events[prev], ud(s, lane.next_ud))?;
            lane.next_ud += 1;
            lane.stream.submit(&TaskDesc::copy(
                ud(s, lane.next_ud),
                lane.x.dev_addr(),
                c0[prev],
                bytes as u64,
            ))?;
            lane.next_ud += 1;
        }
        for lane in &mut lanes {
            lane.stream.synchronize(cfg.timeout)?;
        }
        busy += t0.elapsed();
        // Every completion exactly once, in order, successful.
        for (s, lane) in lanes.iter_mut().enumerate() {
            let mut bad = Vec::new();
            let expect = &mut lane.expect_ud;
            lane.stream.poll_each(|c| {
                if c.user_data != ud(s, *expect) || !c.is_ok() {
                    bad.push(format!(
                        "stream {s}: completion user_data {:#x} status {} (expected {:#x}, 0)",
                        c.user_data,
                        c.status,
                        ud(s, *expect)
                    ));
                }
                *expect += 1;
            });
            if lane.expect_ud != lane.next_ud {
                bad.push(format!(
                    "stream {s}: {} completions, {} tasks submitted",
                    lane.expect_ud, lane.next_ud
                ));
                lane.expect_ud = lane.next_ud;
            }
            for b in bad {
                report.mismatch(b);
            }
        }
        // Results against the CPU model.
        let c0_host: Vec<Vec<u32>> = lanes
            .iter()
            .map(|l| model::add(dtype_of(round, 0), &l.host_a[0], &l.host_b[0]))
            .collect();
        for (s, lane) in lanes.iter().enumerate() {
            for k in 0..slots {
                let want_c = model::add(dtype_of(round, k), &lane.host_a[k], &lane.host_b[k]);
                let want_f = vec![pattern(round, s, k); elements];
                for (name, buf, want) in [
                    ("ADD", &lane.c[k], &want_c),
                    ("FILL", &lane.f[k], &want_f),
                    ("COPY", &lane.d[k], &want_c),
                ] {
                    compare(&mut report, buf.read_vec::<u32>(0, elements)?, want, || {
                        format!("round {round} stream {s} slot {k} {name}")
                    });
                }
            }
            let prev = (s + streams - 1) % streams;
            compare(
                &mut report,
                lane.x.read_vec::<u32>(0, elements)?,
                &c0_host[prev],
                || format!("round {round} stream {s} cross-stream COPY from stream {prev}"),
            );
        }
        progress(lanes.iter().map(|l| l.next_ud).sum());
    }
    report.tasks = lanes.iter().map(|l| l.next_ud).sum();
    report.wall_seconds = wall.elapsed().as_secs_f64();
    report.device_seconds = busy.as_secs_f64();
    report.tasks_per_sec = report.tasks as f64 / report.device_seconds.max(1e-9);
    let st = dev.stats().since(&stats0);
    report.doorbells = st.doorbells;
    report.doorbells_per_1000_tasks = st.doorbells_per_1000_tasks();

    report.latency = latency(dev, &ctx, cfg, report.tasks, &mut progress)?;
    Ok(report)
}

fn compare(report: &mut Report, got: Vec<u32>, want: &[u32], what: impl Fn() -> String) {
    report.values_checked += want.len() as u64;
    if got.len() != want.len() {
        report.mismatch(format!(
            "{}: {} values, expected {}",
            what(),
            got.len(),
            want.len()
        ));
        return;
    }
    let mut first = None;
    let mut n = 0;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g != w {
            n += 1;
            first.get_or_insert((i, *g, *w));
        }
    }
    if let Some((i, g, w)) = first {
        report.mismatches += n - 1;
        report.mismatch(format!(
            "{}: {n} of {} values differ, first at {i}: {g:#010x} != {w:#010x}",
            what(),
            want.len()
        ));
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn latency(
    dev: &Device,
    ctx: &davinci_shim::Context,
    cfg: &WorkloadConfig,
    base: u64,
    progress: &mut impl FnMut(u64),
) -> Result<LatencyReport> {
    let mut stream = ctx.create_stream_with(StreamOptions::depths(16, 32))?;
    let one = |i: u64, stream: &mut Stream| -> Result<Duration> {
        let t = Instant::now();
        stream.submit(&TaskDesc::nop(i))?;
        loop {
            let mut got = None;
            stream.poll_each(|c| got = Some(c));
            if let Some(c) = got {
                let dt = t.elapsed();
                c.result()?;
                return Ok(dt);
            }
            if t.elapsed() > cfg.timeout {
                return Err(davinci_shim::Error::new(
                    davinci_shim::Errno::ETIMEDOUT,
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
    for i in 0..cfg.latency_samples {
        let dt = one(i as u64, &mut stream)?;
        samples.push(u64::try_from(dt.as_nanos()).unwrap_or(u64::MAX));
        if i % 64 == 63 {
            progress(base + i as u64 + 1);
        }
    }
    progress(base + cfg.latency_samples as u64);
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
