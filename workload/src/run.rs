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
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use davinci_shim::{
    DevAddr, Device, DeviceMem, Dtype, Errno, Error, Event, Features, MemPool, PoolBuffer,
    PoolOptions, Result, Stream, StreamOptions, TaskDesc,
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

/// Bytes per pool chunk (one ALLOC_MEMORY each) the workload's buffers are carved from.
const POOL_CHUNK: u64 = 4 << 20;
/// The pool's block alignment.
const POOL_ALIGN: u64 = 64;
/// The pool rounds a chunk to this before it asks the device.
const POOL_PAGE: u64 = 4096;

/// The device memory a [`WorkloadConfig`] needs ([`WorkloadConfig::memory_needed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryNeed {
    /// Device buffers: `streams * (5 * slots + 1)` (A, B, C, F, D per slot, one X per
    /// stream).
    pub buffers: u64,
    /// Bytes of each buffer (`4 * elements`).
    pub buffer_bytes: u64,
    /// ALLOC_MEMORY calls: the pool chunks the buffers are carved from.
    pub allocations: u64,
    /// Bytes of each allocation as the pool asks for it.
    pub allocation_bytes: u64,
    /// Bytes the pool reserves in all (`allocations * allocation_bytes`).
    pub pool_bytes: u64,
    /// Bytes of device memory that takes, each allocation rounded to the device's alignment.
    pub device_bytes: u64,
}

fn round_to(n: u64, align: u64) -> Option<u64> {
    n.checked_next_multiple_of(align.max(1))
}

impl WorkloadConfig {
    /// Tasks per round: `streams * (3 * slots + 3)`.
    pub fn tasks_per_round(&self) -> u64 {
        (self.streams as u64).saturating_mul((self.slots as u64).saturating_mul(3) + 3)
    }

    /// Rounds the throughput phase runs: `tasks` rounded up to whole rounds (at least one).
    pub fn rounds(&self) -> u64 {
        self.tasks.div_ceil(self.tasks_per_round().max(1)).max(1)
    }

    /// Tasks the throughput phase runs: [`rounds`](Self::rounds) `*`
    /// [`tasks_per_round`](Self::tasks_per_round) (the `tasks` of a complete run's
    /// [`Report`]).
    pub fn planned_tasks(&self) -> u64 {
        self.rounds().saturating_mul(self.tasks_per_round())
    }

    /// Streams the run creates: `streams`, plus one for the latency phase unless
    /// `latency_samples` is 0.
    pub fn streams_needed(&self) -> u64 {
        self.streams as u64 + u64::from(self.latency_samples > 0)
    }

    /// The device memory the run allocates on a device whose allocations are rounded to
    /// `mem_align` bytes (GET_INFO's `mem_align`); `None` if the sizes overflow.
    pub fn memory_needed(&self, mem_align: u64) -> Option<MemoryNeed> {
        let buffers = (self.streams as u64).checked_mul((self.slots as u64).checked_mul(5)? + 1)?;
        let buffer_bytes = (self.elements as u64).checked_mul(4)?;
        let block = round_to(buffer_bytes.max(1), POOL_ALIGN)?;
        let (allocations, allocation_bytes) = if block <= POOL_CHUNK {
            (buffers.div_ceil(POOL_CHUNK / block), POOL_CHUNK)
        } else {
            (buffers, round_to(block, POOL_PAGE)?)
        };
        // The run's host copies of A and B must fit the address space too.
        usize::try_from(buffer_bytes.checked_mul(buffers)?).ok()?;
        Some(MemoryNeed {
            buffers,
            buffer_bytes,
            allocations,
            allocation_bytes,
            pool_bytes: allocations.checked_mul(allocation_bytes)?,
            device_bytes: allocations.checked_mul(round_to(allocation_bytes, mem_align)?)?,
        })
    }

    /// Whether the run can start: every count at least 1 (`latency_samples` may be 0: no
    /// latency phase), a timeout, and sizes that do not overflow. The message names the
    /// `davinci-workload` option to change (`--streams` for `streams`).
    ///
    /// # Errors
    /// `EINVAL` (op `"workload"`) saying which value to change.
    pub fn check(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::new(Errno::EINVAL, "workload", msg));
        for (option, value, what) in [
            ("--streams", self.streams as u64, "streams"),
            (
                "--slots",
                self.slots as u64,
                "vector jobs per stream per round",
            ),
            ("--elements", self.elements as u64, "elements per vector"),
            ("--batch", self.batch as u64, "descriptors per submit call"),
        ] {
            if value == 0 {
                return bad(format!("{option} 0: give at least 1 ({what})"));
            }
        }
        if self.tasks == 0 {
            return bad(format!(
                "--tasks 0: give at least 1 (the throughput phase runs whole rounds of {} tasks \
                 with these --streams and --slots)",
                self.tasks_per_round()
            ));
        }
        if self.timeout.is_zero() {
            return bad(
                "--timeout-secs 0 would fail every synchronize at once: give at least 1 \
                        (seconds)"
                    .into(),
            );
        }
        if self.memory_needed(1).is_none() {
            return bad(format!(
                "--streams {} x --slots {} x --elements {}: the buffers' total size overflows; \
                 use smaller values",
                self.streams, self.slots, self.elements
            ));
        }
        Ok(())
    }
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
    /// This run's client id on the device, as `davinci-smi info -t usage` shows it
    /// (GET_INFO's `caller_id`); `None` from a driver older than ABI 1.1.
    pub client_id: Option<u32>,
    /// Streams used.
    pub streams: usize,
    /// Descriptors per submit call.
    pub batch: usize,
    /// Elements per vector.
    pub elements: usize,
    /// Rounds run (fewer than `rounds_planned` if the run was interrupted).
    pub rounds: u64,
    /// Rounds the throughput phase was to run (`tasks` rounded up to whole rounds).
    pub rounds_planned: u64,
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
    /// The latency phase (0 samples if it did not run).
    pub latency: LatencyReport,
    /// The run was stopped early ([`run_until`]'s flag): the figures cover the work done.
    pub interrupted: bool,
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

/// Which phase a [`Progress`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The checked throughput phase (tasks).
    Throughput,
    /// The latency phase (single-task round trips).
    Latency,
}

/// Where a run is: `done` of `total` tasks (throughput) or round trips (latency) of `phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The phase.
    pub phase: Phase,
    /// Done so far in this phase.
    pub done: u64,
    /// The phase's total: [`WorkloadConfig::planned_tasks`] or `latency_samples`.
    pub total: u64,
}

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
    let streams = cfg.streams;
    let slots = cfg.slots;
    let elements = cfg.elements;
    let batch = cfg.batch;
    let bytes = elements * 4;
    let rounds = cfg.rounds();
    let planned = cfg.planned_tasks();
    let info = dev.info();
    let need = cfg
        .memory_needed(u64::from(info.mem_align))
        .ok_or_else(|| Error::new(Errno::EOVERFLOW, "workload", "buffer sizes overflow"))?;
    let mut report = Report {
        device: dev.to_string(),
        client_id: (info.features.contains(Features::CALLER_ID) && info.caller_id != 0)
            .then_some(info.caller_id),
        streams,
        batch,
        elements,
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
    let events: Vec<Event> = (0..streams)
        .map(|_| ctx.create_event())
        .collect::<Result<_>>()?;
    let cmd_entries = (batch.next_power_of_two() as u32).clamp(256, 4096);
    let mut lanes = Vec::with_capacity(streams);
    for _ in 0..streams {
        let alloc =
            || -> Result<Vec<PoolBuffer>> { (0..slots).map(|_| pool.alloc(bytes)).collect() };
        lanes.push(Lane {
            stream: ctx.create_stream_with(
                StreamOptions::depths(cmd_entries, cmd_entries * 2).submit_timeout(cfg.timeout),
            )?,
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
    let mut done_rounds = 0;
    for round in 0..rounds {
        if stop.load(Ordering::Relaxed) {
            report.interrupted = true;
            break;
        }
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
        done_rounds = round + 1;
        progress(Progress {
            phase: Phase::Throughput,
            done: lanes.iter().map(|l| l.next_ud).sum(),
            total: planned,
        });
    }
    report.rounds = done_rounds;
    report.tasks = lanes.iter().map(|l| l.next_ud).sum();
    report.wall_seconds = wall.elapsed().as_secs_f64();
    report.device_seconds = busy.as_secs_f64();
    report.tasks_per_sec = report.tasks as f64 / report.device_seconds.max(1e-9);
    let st = dev.stats().since(&stats0);
    report.doorbells = st.doorbells;
    report.doorbells_per_1000_tasks = st.doorbells_per_1000_tasks();

    if !report.interrupted && cfg.latency_samples > 0 {
        report.latency = latency(dev, &ctx, cfg, stop, &mut progress)?;
        report.interrupted = report.latency.samples < cfg.latency_samples;
    }
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
    stop: &AtomicBool,
    progress: &mut impl FnMut(Progress),
) -> Result<LatencyReport> {
    let mut stream =
        ctx.create_stream_with(StreamOptions::depths(16, 32).submit_timeout(cfg.timeout))?;
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
        let dt = one(i as u64, &mut stream)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use davinci_shim::MockConfig;

    fn small() -> WorkloadConfig {
        WorkloadConfig {
            tasks: 1,
            streams: 2,
            slots: 4,
            elements: 64,
            latency_samples: 10,
            ..WorkloadConfig::default()
        }
    }

    #[test]
    fn check_rejects_zeros_naming_the_option() {
        for (cfg, option) in [
            (
                WorkloadConfig {
                    tasks: 0,
                    ..small()
                },
                "--tasks 0",
            ),
            (
                WorkloadConfig {
                    streams: 0,
                    ..small()
                },
                "--streams 0",
            ),
            (
                WorkloadConfig {
                    slots: 0,
                    ..small()
                },
                "--slots 0",
            ),
            (
                WorkloadConfig {
                    elements: 0,
                    ..small()
                },
                "--elements 0",
            ),
            (
                WorkloadConfig {
                    batch: 0,
                    ..small()
                },
                "--batch 0",
            ),
            (
                WorkloadConfig {
                    timeout: Duration::ZERO,
                    ..small()
                },
                "--timeout-secs 0",
            ),
            (
                WorkloadConfig {
                    elements: usize::MAX / 2,
                    ..small()
                },
                "overflows",
            ),
        ] {
            let e = cfg.check().unwrap_err();
            assert!(e.is(Errno::EINVAL) && e.message().contains(option), "{e}");
            // run refuses it too, before touching the device.
            let dev = Device::embedded().unwrap();
            assert!(run(&dev, &cfg, |_| {}).unwrap_err().is(Errno::EINVAL));
        }
        assert!(WorkloadConfig {
            latency_samples: 0,
            ..small()
        }
        .check()
        .is_ok());
    }

    #[test]
    fn plan_counts_whole_rounds() {
        let cfg = small();
        assert_eq!(cfg.tasks_per_round(), 2 * (3 * 4 + 3));
        assert_eq!(cfg.rounds(), 1);
        let cfg = WorkloadConfig {
            tasks: 31,
            ..small()
        };
        assert_eq!((cfg.rounds(), cfg.planned_tasks()), (2, 60));
        assert_eq!(cfg.streams_needed(), 3);
        assert_eq!(
            WorkloadConfig {
                latency_samples: 0,
                ..cfg
            }
            .streams_needed(),
            2
        );
    }

    /// The estimate is exact: a device of exactly that much memory runs the workload, a page
    /// less does not.
    #[test]
    fn memory_needed_is_what_the_run_allocates() {
        for cfg in [
            small(),
            WorkloadConfig {
                elements: 300_000, // 1.2 MB buffers: three per chunk
                slots: 1,
                streams: 1,
                ..small()
            },
            WorkloadConfig {
                elements: 1_100_000, // larger than a chunk: one allocation each
                slots: 1,
                streams: 1,
                ..small()
            },
        ] {
            let need = cfg.memory_needed(4096).unwrap();
            assert_eq!(
                need.buffers,
                cfg.streams as u64 * (5 * cfg.slots as u64 + 1)
            );
            let dev = |bytes| {
                Device::embedded_with(MockConfig {
                    memory_size: bytes,
                    ..MockConfig::default()
                })
                .unwrap()
            };
            let d = dev(need.device_bytes);
            assert_eq!(u64::from(d.info().mem_align), 4096);
            let r = run(&d, &cfg, |_| {}).unwrap();
            assert_eq!(r.mismatches, 0, "{:?}", r.first_mismatches);
            let e = run(&dev(need.device_bytes - 4096), &cfg, |_| {}).unwrap_err();
            assert!(e.is(Errno::ENOMEM), "{need:?}: {e}");
        }
    }

    #[test]
    fn a_stop_flag_ends_the_run_with_a_partial_report() {
        let dev = Device::embedded().unwrap();
        let stop = AtomicBool::new(false);
        let cfg = WorkloadConfig {
            tasks: 1_000_000,
            ..small()
        };
        let mut seen = Vec::new();
        let r = run_until(&dev, &cfg, &stop, |p| {
            seen.push(p);
            if p.done >= 2 * cfg.tasks_per_round() {
                stop.store(true, Ordering::Relaxed);
            }
        })
        .unwrap();
        assert!(r.interrupted);
        assert_eq!((r.rounds, r.rounds_planned), (2, cfg.rounds()));
        assert_eq!(r.tasks, 2 * cfg.tasks_per_round());
        assert_eq!(r.latency.samples, 0, "the latency phase is skipped");
        assert_eq!(r.mismatches, 0);
        assert!(seen
            .iter()
            .all(|p| p.phase == Phase::Throughput && p.total == cfg.planned_tasks()));
    }

    #[test]
    fn progress_counts_each_phase_against_its_own_total() {
        let dev = Device::embedded().unwrap();
        let cfg = WorkloadConfig {
            tasks: 100,
            latency_samples: 100,
            ..small()
        };
        let mut seen = Vec::new();
        let r = run_until(&dev, &cfg, &AtomicBool::new(false), |p| seen.push(p)).unwrap();
        assert!(!r.interrupted);
        assert!(r.client_id.is_some_and(|id| id > 0));
        let last_throughput = seen
            .iter()
            .rev()
            .find(|p| p.phase == Phase::Throughput)
            .unwrap();
        assert_eq!(last_throughput.done, r.tasks);
        assert_eq!(last_throughput.total, r.tasks);
        assert_eq!(
            seen.last(),
            Some(&Progress {
                phase: Phase::Latency,
                done: 100,
                total: 100
            })
        );
    }

    #[test]
    fn zero_latency_samples_skip_the_latency_phase() {
        let dev = Device::embedded().unwrap();
        let cfg = WorkloadConfig {
            latency_samples: 0,
            ..small()
        };
        let mut seen = Vec::new();
        let r = run_until(&dev, &cfg, &AtomicBool::new(false), |p| seen.push(p)).unwrap();
        assert!(!r.interrupted);
        assert_eq!(r.latency.samples, 0);
        assert!(seen.iter().all(|p| p.phase == Phase::Throughput));
    }
}
