//! The throughput phase: rounds of adds, fills and copies over every stream, chained across
//! streams by events (the round drawn in [`run`](super)), each round synchronized, its
//! completions reaped and its results compared with the CPU model.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use davinci_shim::{
    task, Context, Device, DeviceMem, Dtype, Errno, Event, MemPool, PoolBuffer, Result, Stream,
    StreamOptions, Task,
};

use super::config::WorkloadConfig;
use super::report::{compare, Phase, Progress, Report};
use crate::model::{self, Rng, DTYPES};

/// One stream of the phase: its buffers (A, B, C, F, D per slot, one X), the inputs it
/// wrote, and the `user_data` of its next task and of its next expected completion.
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

/// The phase's device objects: a lane per stream and an event per stream. They live until
/// the run ends (the latency phase runs beside them).
pub(super) struct Throughput {
    lanes: Vec<Lane>,
    events: Vec<Event>,
}

impl Throughput {
    /// Creates the events, then each lane's stream and buffers (carved from `pool`).
    pub(super) fn create(ctx: &Context, pool: &MemPool, cfg: &WorkloadConfig) -> Result<Self> {
        let (streams, slots, elements) = (cfg.streams, cfg.slots, cfg.elements);
        let bytes = elements * 4;
        let events: Vec<Event> = (0..streams)
            .map(|_| ctx.create_event())
            .collect::<Result<_>>()?;
        let cmd_entries = (cfg.batch.next_power_of_two() as u32).clamp(256, 4096);
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
        Ok(Throughput { lanes, events })
    }

    /// Runs the rounds (until `stop` is set between two of them) and fills in the phase's
    /// part of `report`: rounds, tasks, times, doorbells, mismatches.
    pub(super) fn run(
        &mut self,
        dev: &Device,
        cfg: &WorkloadConfig,
        stop: &AtomicBool,
        report: &mut Report,
        progress: &mut impl FnMut(Progress),
    ) -> Result<()> {
        let rounds = cfg.rounds();
        let planned = cfg.planned_tasks();
        let mut rng = Rng::new(cfg.seed);
        let stats0 = dev.stats();
        let wall = Instant::now();
        let mut busy = Duration::ZERO;
        let mut descs: Vec<Task> = Vec::with_capacity(3 * cfg.slots + 3);
        let mut done_rounds = 0;
        // Tasks of the rounds that completed (a round interrupted by Ctrl-C does not count).
        let mut done_tasks = 0;
        for round in 0..rounds {
            if stop.load(Ordering::Relaxed) {
                report.interrupted = true;
                break;
            }
            // Inputs for this round (the device is idle: the last round was synchronized).
            self.write_inputs(round, cfg.slots, &mut rng)?;
            let t0 = Instant::now();
            self.submit_round(round, cfg, &mut descs)?;
            if !self.synchronize(cfg, stop)? {
                // Ctrl-C during the round: it is not counted (nor checked).
                report.interrupted = true;
                break;
            }
            busy += t0.elapsed();
            self.reap(report);
            self.check_results(round, cfg, report)?;
            done_rounds = round + 1;
            done_tasks = self.tasks();
            progress(Progress {
                phase: Phase::Throughput,
                done: self.tasks(),
                total: planned,
            });
        }
        report.rounds = done_rounds;
        report.tasks = done_tasks;
        report.wall_seconds = wall.elapsed().as_secs_f64();
        report.device_seconds = busy.as_secs_f64();
        report.tasks_per_sec = report.tasks as f64 / report.device_seconds.max(1e-9);
        let st = dev.stats().since(&stats0);
        report.doorbells = st.doorbells;
        report.doorbells_per_1000_tasks = st.doorbells_per_1000_tasks();
        Ok(())
    }

    /// Waits for every stream's round. `false` if a stop came meanwhile: the binary's Ctrl-C
    /// sets `stop` and interrupts the wait (a signal: `EINTR`), so a round on a hung device
    /// does not keep it waiting for the whole timeout. A signal without a stop waits on.
    fn synchronize(&mut self, cfg: &WorkloadConfig, stop: &AtomicBool) -> Result<bool> {
        for lane in &mut self.lanes {
            loop {
                match lane.stream.synchronize(cfg.timeout) {
                    Ok(()) => break,
                    Err(e) if e.is(Errno::EINTR) => {
                        if stop.load(Ordering::Relaxed) {
                            return Ok(false);
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(true)
    }

    /// Tasks submitted so far, over every stream.
    fn tasks(&self) -> u64 {
        self.lanes.iter().map(|l| l.next_ud).sum()
    }

    /// New random inputs A and B of every slot (floats for the f32 adds), on the host and
    /// on the device.
    fn write_inputs(&mut self, round: u64, slots: usize, rng: &mut Rng) -> Result<()> {
        for lane in &mut self.lanes {
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
        Ok(())
    }

    /// Submits one round on every stream: adds, fills, copies and the record, then the
    /// wait for the previous stream's record and the cross-stream copy.
    fn submit_round(
        &mut self,
        round: u64,
        cfg: &WorkloadConfig,
        descs: &mut Vec<Task>,
    ) -> Result<()> {
        let streams = cfg.streams;
        // Phase 1: adds, fills, copies, then the record.
        for (s, lane) in self.lanes.iter_mut().enumerate() {
            descs.clear();
            for k in 0..cfg.slots {
                let mut next = || {
                    lane.next_ud += 1;
                    ud(s, lane.next_ud - 1)
                };
                let (a, b, c) = (&lane.a[k], &lane.b[k], &lane.c[k]);
                let add = match dtype_of(round, k) {
                    Dtype::F32 => task::add::<f32>(c, a, b)?,
                    Dtype::I32 => task::add::<i32>(c, a, b)?,
                    _ => task::add::<u32>(c, a, b)?,
                };
                descs.push(add.with_user_data(next()));
                descs.push(task::fill(&lane.f[k], pattern(round, s, k))?.with_user_data(next()));
                descs.push(task::copy(&lane.d[k], c)?.with_user_data(next()));
            }
            for chunk in descs.chunks(cfg.batch) {
                lane.stream.submit_batch(chunk)?;
            }
            self.events[s].record_tagged(&mut lane.stream, ud(s, lane.next_ud))?;
            lane.next_ud += 1;
        }
        // Phase 2: each stream waits for the previous stream's record, then reads its result.
        let reads = (0..streams)
            .map(|s| {
                task::copy(
                    &self.lanes[s].x,
                    &self.lanes[(s + streams - 1) % streams].c[0],
                )
            })
            .collect::<Result<Vec<Task>>>()?;
        for ((s, lane), read) in self.lanes.iter_mut().enumerate().zip(reads) {
            let prev = (s + streams - 1) % streams;
            lane.stream
                .wait_event_tagged(&self.events[prev], ud(s, lane.next_ud))?;
            lane.next_ud += 1;
            lane.stream
                .submit(&read.with_user_data(ud(s, lane.next_ud)))?;
            lane.next_ud += 1;
        }
        Ok(())
    }

    /// Every completion exactly once, in order, successful: anything else is a mismatch.
    fn reap(&mut self, report: &mut Report) {
        for (s, lane) in self.lanes.iter_mut().enumerate() {
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
    }

    /// The round's results (C, F, D of every slot and each stream's X) against the CPU
    /// model.
    fn check_results(&self, round: u64, cfg: &WorkloadConfig, report: &mut Report) -> Result<()> {
        let (streams, elements) = (cfg.streams, cfg.elements);
        let c0_host: Vec<Vec<u32>> = self
            .lanes
            .iter()
            .map(|l| model::add(dtype_of(round, 0), &l.host_a[0], &l.host_b[0]))
            .collect();
        for (s, lane) in self.lanes.iter().enumerate() {
            for k in 0..cfg.slots {
                let want_c = model::add(dtype_of(round, k), &lane.host_a[k], &lane.host_b[k]);
                let want_f = vec![pattern(round, s, k); elements];
                for (name, buf, want) in [
                    ("ADD", &lane.c[k], &want_c),
                    ("FILL", &lane.f[k], &want_f),
                    ("COPY", &lane.d[k], &want_c),
                ] {
                    compare(report, buf.read_vec::<u32>(0, elements)?, want, || {
                        format!("round {round} stream {s} slot {k} {name}")
                    });
                }
            }
            let prev = (s + streams - 1) % streams;
            compare(
                report,
                lane.x.read_vec::<u32>(0, elements)?,
                &c0_host[prev],
                || format!("round {round} stream {s} cross-stream COPY from stream {prev}"),
            );
        }
        Ok(())
    }
}
