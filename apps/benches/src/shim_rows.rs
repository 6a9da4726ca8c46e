//! The rows measured through the public `davinci-shim` API (the `ours/...` rows, against the
//! baselines of `spsc.rs` and `sys.rs`): streaming NOPs (pipelined, every completion
//! checked), many streams, round trips, doorbells, the control path, and the SUBMIT_TASK
//! slow path.
#![forbid(unsafe_code)]

use std::thread;
use std::time::{Duration, Instant};

use davinci_shim::{task, Completion, Device, DeviceStats, SpinWait, Stream, StreamOptions, Task};

use crate::measure::{Fail, LatencyRun, ThroughputRun, Window};

/// Longest a drain at the end of a row, or a single round trip, may take.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Ring depths for the data-path rows: the device's deepest command ring (4096 slots on the
/// mock device, as the two-ring baseline's) and twice that in event slots, within its limits.
/// Depth matters on this design: from 1024 to 4096 slots, batch 64 went from 23 M to 44 M
/// tasks/s here (and the two-ring baseline from 86 M to 120 M): the host's writes and the
/// device's reads of the same cache lines are further apart.
pub fn stream_options(dev: &Device) -> StreamOptions {
    options_up_to(dev, 4096)
}

/// Ring depths for the round-trip row (one task in flight): 1024 command slots. With the
/// 4096-slot rings of the throughput rows, the round trip's p99 under `--contended` was a
/// scheduler tick (8 ms) instead of under a microsecond, for a reason not yet understood
/// (docs/performance.md); quiet, the depth makes no difference.
pub fn latency_options(dev: &Device) -> StreamOptions {
    options_up_to(dev, 1024)
}

fn options_up_to(dev: &Device, depth: u32) -> StreamOptions {
    let info = dev.info();
    let pow2_floor = |v: u32| {
        if v == 0 {
            0
        } else {
            1u32 << (31 - v.leading_zeros())
        }
    };
    let max_cmd = pow2_floor(info.max_cmd_entries);
    let max_evt = pow2_floor(info.max_event_entries);
    let cmd = if max_cmd == 0 {
        depth
    } else {
        depth.min(max_cmd)
    };
    let evt = if max_evt == 0 {
        2 * cmd
    } else {
        (2 * cmd).min(max_evt).max(cmd)
    };
    StreamOptions::depths(cmd, evt)
}

/// Checks completions of one stream: each `user_data` must be the next expected one (tasks
/// are numbered from 0 in submission order) and succeed.
#[derive(Debug, Default)]
pub struct OrderCheck {
    /// The next `user_data` expected (= completions seen so far).
    pub next: u64,
    /// The first violation.
    pub bad: Option<String>,
}

impl OrderCheck {
    /// Takes one completion.
    pub fn see(&mut self, c: Completion) {
        self.see_parts(c.user_data, c.status);
    }

    /// Takes one completion given as its `user_data` and `status` (0 = success).
    pub fn see_parts(&mut self, user_data: u64, status: i32) {
        if (user_data != self.next || status != 0) && self.bad.is_none() {
            self.bad = Some(format!(
                "completion #{} has user_data {user_data} status {status} (expected user_data \
                 {}, status 0)",
                self.next, self.next
            ));
        }
        self.next += 1;
    }

    /// The violation, if any, as an error.
    pub fn result(&self, what: &str) -> Result<(), Fail> {
        match &self.bad {
            Some(b) => Err(Fail::Error(format!("{what}: {b}"))),
            None => Ok(()),
        }
    }
}

struct Lane {
    stream: Stream,
    submitted: u64,
    check: OrderCheck,
}

impl Lane {
    /// Polls, checking every completion; returns how many.
    fn poll(&mut self) -> u64 {
        let check = &mut self.check;
        self.stream.poll_each(|c| check.see(c)) as u64
    }

    /// Submits `descs.len()` NOPs numbered on from `submitted` if they fit without waiting;
    /// returns whether it did.
    fn try_submit(&mut self, descs: &mut [Task]) -> Result<bool, Fail> {
        if (self.stream.free_slots() as usize) < descs.len() {
            return Ok(false);
        }
        for (i, d) in descs.iter_mut().enumerate() {
            *d = task::nop().with_user_data(self.submitted + i as u64);
        }
        self.stream.submit_batch(descs)?;
        self.submitted += descs.len() as u64;
        Ok(true)
    }

    /// Submits `descs.len()` NOPs numbered on from `submitted`, waiting for room in the shim
    /// (`Stream::submit_batch` blocks when the ring is full).
    fn submit(&mut self, descs: &mut [Task]) -> Result<(), Fail> {
        for (i, d) in descs.iter_mut().enumerate() {
            *d = task::nop().with_user_data(self.submitted + i as u64);
        }
        self.stream.submit_batch(descs)?;
        self.submitted += descs.len() as u64;
        Ok(())
    }

    /// Waits for every submitted task and checks the rest of the completions.
    fn drain(&mut self, what: &str) -> Result<(), Fail> {
        self.stream.synchronize(DRAIN_TIMEOUT)?;
        self.poll();
        self.check.result(what)?;
        if self.check.next != self.submitted {
            return Err(Fail::Error(format!(
                "{what}: {} tasks submitted, {} completions seen",
                self.submitted, self.check.next
            )));
        }
        Ok(())
    }
}

/// What a streaming row measured.
#[derive(Debug, Clone)]
pub struct StreamRun {
    /// All streams together.
    pub run: ThroughputRun,
    /// Completions of each stream in the window.
    pub per_stream: Vec<u64>,
    /// The device's counters over the window.
    pub stats: DeviceStats,
    /// Tasks submitted over the whole row (warm-up and drain included).
    pub submitted: u64,
    /// Completions checked over the whole row (each stream's in order, each once, status
    /// 0): equal to `submitted` once the row succeeded.
    pub checked: u64,
}

impl StreamRun {
    /// The slowest stream's completions over its fair share (total / streams): 1.0 when all
    /// ran equally, 0 when one starved.
    pub fn min_share(&self) -> f64 {
        let n = self.per_stream.len() as f64;
        let total: u64 = self.per_stream.iter().sum();
        match self.per_stream.iter().min() {
            Some(&m) if total > 0 => m as f64 * n / total as f64,
            _ => 0.0,
        }
    }
}

/// How the host paces submissions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// As fast as the rings allow (full load).
    Full,
    /// About this many tasks per second, sleeping between batches.
    Rate(f64),
}

/// Streaming NOPs on `streams` streams of one context, `batch` per submit, from one host
/// thread: it submits to every stream with room and polls every stream in between (the
/// device is never starved, nothing synchronizes per batch); every completion is checked
/// (each stream's user_data in order, each once, status 0).
///
/// # Errors
/// A shim error, a completion missing or out of order.
pub fn streaming(
    dev: &Device,
    streams: usize,
    batch: usize,
    pace: Pace,
    window: Window,
) -> Result<StreamRun, Fail> {
    let ctx = dev.create_context()?;
    let opts = stream_options(dev);
    let batch = batch.clamp(1, opts.cmd_entries as usize);
    let mut lanes = Vec::with_capacity(streams);
    for _ in 0..streams.max(1) {
        lanes.push(Lane {
            stream: ctx.create_stream_with(opts)?,
            submitted: 0,
            check: OrderCheck::default(),
        });
    }
    let mut descs = vec![task::nop(); batch];
    let interval = match pace {
        Pace::Full => None,
        Pace::Rate(r) if r > 0.0 => Some(Duration::from_secs_f64(batch as f64 / r)),
        Pace::Rate(_) => None,
    };
    let mut due = Instant::now();
    let mut total = 0u64;
    let mut base: Option<(Vec<u64>, DeviceStats)> = None;
    let mut w = window.start();
    let backoff = crossbeam_utils::Backoff::new();
    let mut spin: Option<SpinWait> = None;
    loop {
        match interval {
            None => {
                let mut progress = false;
                for lane in &mut lanes {
                    progress |= lane.try_submit(&mut descs)?;
                    let n = lane.poll();
                    total += n;
                    progress |= n > 0;
                }
                if progress {
                    backoff.reset();
                    spin = None;
                } else if !backoff.is_completed() {
                    backoff.snooze();
                } else if spin.get_or_insert_with(SpinWait::new).keep_spinning() {
                    thread::yield_now();
                } else {
                    // Every ring full and nothing completed while this thread was preempted
                    // (or for SpinWait's limit): wait as a runtime would, in the shim's
                    // blocking submit (asleep in the driver until the device completes a
                    // task), not in a busy loop that takes the core from the device.
                    if let Some(lane) = lanes.first_mut() {
                        lane.submit(&mut descs)?;
                    }
                    backoff.reset();
                    spin = None;
                }
            }
            Some(every) => {
                let now = Instant::now();
                if now >= due {
                    if let Some(lane) = lanes.first_mut() {
                        if lane.try_submit(&mut descs)? {
                            due += every;
                            // Fell far behind (descheduled): do not burst to catch up.
                            if now.saturating_duration_since(due) > every * 4 {
                                due = now + every;
                            }
                        }
                    }
                } else if due - now > Duration::from_micros(60) {
                    thread::sleep(due - now - Duration::from_micros(30));
                }
                for lane in &mut lanes {
                    total += lane.poll();
                }
            }
        }
        for lane in &lanes {
            lane.check.result("streaming")?;
        }
        let was = w.counting();
        let done = w.tick(total);
        if !was && w.counting() {
            base = Some((lanes.iter().map(|l| l.check.next).collect(), dev.stats()));
        }
        if done {
            break;
        }
    }
    let run = w.finish(total);
    let end = dev.stats();
    let (start_counts, start_stats) = base.unwrap_or_else(|| (vec![0; lanes.len()], end));
    let per_stream = lanes
        .iter()
        .zip(&start_counts)
        .map(|(l, s)| l.check.next.saturating_sub(*s))
        .collect();
    for lane in &mut lanes {
        lane.drain("streaming")?;
    }
    Ok(StreamRun {
        run,
        per_stream,
        stats: end.since(&start_stats),
        submitted: lanes.iter().map(|l| l.submitted).sum(),
        checked: lanes.iter().map(|l| l.check.next).sum(),
    })
}

/// Round trips with one task in flight: submit one NOP, spin on `poll` until its
/// completion, repeat; one sample per task.
///
/// # Errors
/// A shim error, a wrong completion, or none within 10 s.
pub fn round_trip(dev: &Device, window: Window) -> Result<LatencyRun, Fail> {
    let ctx = dev.create_context()?;
    let mut lane = Lane {
        stream: ctx.create_stream_with(latency_options(dev))?,
        submitted: 0,
        check: OrderCheck::default(),
    };
    let mut lat = LatencyRun::new(window);
    loop {
        let t0 = Instant::now();
        lane.stream
            .submit(&task::nop().with_user_data(lane.submitted))?;
        lane.submitted += 1;
        let mut spins = 0u32;
        while lane.poll() == 0 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) {
                if t0.elapsed() > DRAIN_TIMEOUT {
                    return Err(Fail::Error(format!(
                        "round trip: no completion within {DRAIN_TIMEOUT:?}"
                    )));
                }
                if let Some(e) = lane.stream.error_state() {
                    return Err(Fail::Error(format!("round trip: stream stopped: {e}")));
                }
            }
            // No spin-loop hint, as in the two-ring baseline's round trip: a `pause` cost
            // about 120 ns of a trip on this VM.
        }
        lane.check.result("round trip")?;
        if lat.record(t0) {
            break;
        }
    }
    lane.drain("round trip")?;
    Ok(lat)
}

/// Control-path operations timed per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlOp {
    /// `Context::create_stream` (default depths) and dropping the stream (DESTROY_STREAM).
    StreamCreateDestroy,
    /// `Device::alloc(4096)` and dropping the buffer (FREE_MEMORY).
    AllocFree4K,
    /// `Context::create_stream` (default depths) alone: the stream is dropped after the
    /// sample is taken, untimed.
    StreamCreate,
    /// `Device::alloc(4096)` (ALLOC_MEMORY) alone: the buffer is dropped untimed.
    Alloc4K,
    /// Dropping a 4 KiB buffer with no work queued (FREE_MEMORY) alone: its allocation
    /// is untimed.
    Free4K,
}

/// Times `op` repeatedly over `window`; one sample per create+destroy (alloc+free), or per
/// single call for the `ControlOp`s that time one (the other half of the pair runs untimed,
/// so the loop neither leaks nor grows).
///
/// # Errors
/// A shim error.
pub fn control(dev: &Device, op: ControlOp, window: Window) -> Result<LatencyRun, Fail> {
    let ctx = dev.create_context()?;
    let mut lat = LatencyRun::new(window);
    loop {
        let done = match op {
            ControlOp::StreamCreateDestroy => {
                let t0 = Instant::now();
                drop(ctx.create_stream()?);
                lat.record_slow(t0)
            }
            ControlOp::AllocFree4K => {
                let t0 = Instant::now();
                drop(dev.alloc(4096)?);
                lat.record_slow(t0)
            }
            ControlOp::StreamCreate => {
                let t0 = Instant::now();
                let s = ctx.create_stream()?;
                let done = lat.record_slow(t0);
                drop(s);
                done
            }
            ControlOp::Alloc4K => {
                let t0 = Instant::now();
                let b = dev.alloc(4096)?;
                let done = lat.record_slow(t0);
                drop(b);
                done
            }
            ControlOp::Free4K => {
                let b = dev.alloc(4096)?;
                let t0 = Instant::now();
                drop(b);
                lat.record_slow(t0)
            }
        };
        if done {
            break;
        }
    }
    Ok(lat)
}

/// The slow path: one SUBMIT_TASK ioctl per NOP (`Stream::submit_slow`), completions
/// polled and checked between calls; the ring never overfills.
///
/// # Errors
/// A shim error, a wrong or missing completion.
pub fn submit_slow(dev: &Device, window: Window) -> Result<ThroughputRun, Fail> {
    let ctx = dev.create_context()?;
    let mut lane = Lane {
        stream: ctx.create_stream_with(stream_options(dev))?,
        submitted: 0,
        check: OrderCheck::default(),
    };
    let mut total = 0u64;
    let mut w = window.start();
    loop {
        if lane.stream.free_slots() > 0 {
            lane.stream
                .submit_slow(&task::nop().with_user_data(lane.submitted))?;
            lane.submitted += 1;
        }
        total += lane.poll();
        lane.check.result("SUBMIT_TASK")?;
        if w.check(total) {
            break;
        }
    }
    let run = w.finish(total);
    lane.drain("SUBMIT_TASK")?;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w() -> Window {
        Window::new(Duration::from_millis(40), Duration::from_millis(5))
    }

    #[test]
    fn streaming_checks_and_counts() {
        let dev = crate::test_device();
        let r = streaming(&dev, 2, 64, Pace::Full, w()).unwrap();
        assert!(r.run.tasks > 0);
        // Every task submitted came back and was checked (in order, once, status 0).
        assert!(r.submitted >= r.run.tasks);
        assert_eq!(r.checked, r.submitted);
        assert_eq!(r.per_stream.len(), 2);
        assert_eq!(r.per_stream.iter().sum::<u64>(), r.run.tasks);
        assert!(r.min_share() > 0.0 && r.min_share() <= 1.0 + 1e-9);
    }

    #[test]
    fn paced_streaming_runs() {
        let dev = crate::test_device();
        let r = streaming(&dev, 1, 8, Pace::Rate(50_000.0), w()).unwrap();
        assert!(r.run.tasks > 0);
        // Paced at 50k/s: well under it plus slack.
        assert!(r.run.rate() < 100_000.0, "{}", r.run.rate());
    }

    #[test]
    fn round_trip_and_control_path() {
        let dev = crate::test_device();
        let mut l = round_trip(&dev, w()).unwrap();
        assert!(l.summary().unwrap().count > 0);
        for op in [
            ControlOp::StreamCreateDestroy,
            ControlOp::AllocFree4K,
            ControlOp::StreamCreate,
            ControlOp::Alloc4K,
            ControlOp::Free4K,
        ] {
            let used = dev.memory_used().unwrap();
            let mut l = control(&dev, op, w()).unwrap();
            assert!(l.summary().unwrap().count > 0);
            // The untimed half ran too: nothing the loop allocated is left.
            assert_eq!(dev.memory_used().unwrap(), used, "{op:?}");
        }
    }

    #[test]
    fn submit_slow_path_checks_completions() {
        let dev = crate::test_device();
        let r = submit_slow(&dev, w()).unwrap();
        assert!(r.tasks > 0);
    }

    #[test]
    fn order_check_accepts_in_order_successes() {
        let mut c = OrderCheck::default();
        for i in 0..5 {
            c.see_parts(i, 0);
        }
        assert_eq!(c.next, 5);
        assert!(c.result("t").is_ok());
    }

    #[test]
    fn order_check_flags_reordered_duplicated_missing_and_failed() {
        let cases: [&[(u64, i32)]; 4] = [
            &[(0, 0), (2, 0), (1, 0)], // reordered
            &[(0, 0), (1, 0), (1, 0)], // duplicated
            &[(0, 0), (2, 0)],         // one missing
            &[(0, 0), (1, -5)],        // failed (status -EIO)
        ];
        for seq in cases {
            let mut c = OrderCheck::default();
            for &(u, st) in seq {
                c.see_parts(u, st);
            }
            match c.result("t") {
                Err(Fail::Error(m)) => assert!(m.contains("completion #"), "{m}"),
                other => panic!("{seq:?} not flagged: {other:?}"),
            }
        }
        // The first violation is the one reported.
        let mut c = OrderCheck::default();
        c.see_parts(1, 0);
        c.see_parts(7, 0);
        let Err(Fail::Error(m)) = c.result("t") else {
            panic!("not flagged")
        };
        assert!(m.contains("completion #0 has user_data 1"), "{m}");
    }

    #[test]
    fn min_share_of_uneven_streams() {
        let r = StreamRun {
            run: ThroughputRun {
                tasks: 300,
                elapsed: Duration::from_secs(1),
            },
            per_stream: vec![50, 250],
            stats: DeviceStats::default(),
            submitted: 300,
            checked: 300,
        };
        assert!((r.min_share() - (50.0 * 2.0 / 300.0)).abs() < 1e-9);
    }
}
