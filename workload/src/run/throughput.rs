//! The throughput phase: rounds of adds, fills and copies over every stream, chained across
//! streams by events (the round drawn in [`run`](super)), each round synchronized, its
//! completions reaped and its results compared with the CPU model.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use davinci_shim::{
    Context, DevAddr, Device, DeviceMem, Dtype, Event, MemPool, PoolBuffer, Result, Stream,
    StreamOptions, TaskDesc,
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
        let mut descs: Vec<TaskDesc> = Vec::with_capacity(3 * cfg.slots + 3);
        let mut done_rounds = 0;
        for round in 0..rounds {
            if stop.load(Ordering::Relaxed) {
                report.interrupted = true;
                break;
            }
            // Inputs for this round (the device is idle: the last round was synchronized).
            self.write_inputs(round, cfg.slots, &mut rng)?;
            let t0 = Instant::now();
            self.submit_round(round, cfg, &mut descs)?;
            for lane in &mut self.lanes {
                lane.stream.synchronize(cfg.timeout)?;
            }
            busy += t0.elapsed();
            self.reap(report);
            self.check_results(round, cfg, report)?;
            done_rounds = round + 1;
            progress(Progress {
                phase: Phase::Throughput,
                done: self.tasks(),
                total: planned,
            });
        }
        report.rounds = done_rounds;
        report.tasks = self.tasks();
        report.wall_seconds = wall.elapsed().as_secs_f64();
        report.device_seconds = busy.as_secs_f64();
        report.tasks_per_sec = report.tasks as f64 / report.device_seconds.max(1e-9);
        let st = dev.stats().since(&stats0);
        report.doorbells = st.doorbells;
        report.doorbells_per_1000_tasks = st.doorbells_per_1000_tasks();
        Ok(())
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
        descs: &mut Vec<TaskDesc>,
    ) -> Result<()> {
        let (streams, elements) = (cfg.streams, cfg.elements);
        let bytes = elements * 4;
        // Phase 1: adds, fills, copies, then the record.
        for (s, lane) in self.lanes.iter_mut().enumerate() {
            descs.clear();
            for k in 0..cfg.slots {
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
            for chunk in descs.chunks(cfg.batch) {
                lane.stream.submit_batch(chunk)?;
            }
            self.events[s].record_tagged(&mut lane.stream, ud(s, lane.next_ud))?;
            lane.next_ud += 1;
        }
        // Phase 2: each stream waits for the previous stream's record, then reads its result.
        let c0: Vec<DevAddr> = self.lanes.iter().map(|l| l.c[0].dev_addr()).collect();
        for (s, lane) in self.lanes.iter_mut().enumerate() {
            let prev = (s + streams - 1) % streams;
            lane.stream
                .wait_event_tagged(&self.events[prev], ud(s, lane.next_ud))?;
            lane.next_ud += 1;
            lane.stream.submit(&TaskDesc::copy(
                ud(s, lane.next_ud),
                lane.x.dev_addr(),
                c0[prev],
                bytes as u64,
            ))?;
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
