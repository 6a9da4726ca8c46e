//! The measurements of a run: what each [`Key`] measures and what it gave ([`Measured`]),
//! each made once however many rows read it, with the embedded device and the daemon they
//! need started on first use.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use davinci_shim::Device;

use super::options::{Options, Windows};
use crate::compute_rows::{self, Move};
use crate::measure::{Fail, LatencyRun, ThroughputRun};
use crate::mockd::{self, Mockd};
use crate::neighbour::Neighbour;
use crate::patterns::{self, Pattern};
use crate::procs::{self, ProcsRun};
use crate::shim_rows::{self, ControlOp, Pace, StreamRun};
use crate::spsc_rows::Rings;
use crate::stats::Summary;
use crate::{device_rows, handoff, spsc_rows, sys};

/// Batch of the multi-stream and multi-process rows.
pub const STREAMS_BATCH: usize = 64;

/// The fraction of the full-load rate the light-load doorbell row is paced at.
pub const LIGHT_LOAD: f64 = 0.10;

/// Where a control-path row runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The embedded mock device (in this process).
    Embedded,
    /// A `davinci-mockd` device (Unix socket round trips).
    Mockd,
}

/// One measurement; several rows may read one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// The two-ring SPSC pipeline on these rings, streaming at this batch.
    TwoRing(Rings, u32),
    /// The two-ring pipeline's round trip on these rings.
    TwoRingRtt(Rings),
    /// io_uring NOPs at this batch.
    Uring(u32),
    /// One empty ioctl per call.
    IoctlFloor,
    /// Ours: streaming NOPs on the embedded device.
    Stream {
        /// Streams (one context, one host thread).
        streams: usize,
        /// Tasks per submit.
        batch: usize,
    },
    /// Ours: one stream of NOPs at this batch, on a device tracing it (`on`) or not
    /// ([`crate::trace_rows`]).
    Traced {
        /// Tasks per submit.
        batch: usize,
        /// Whether the device traces the stream.
        on: bool,
    },
    /// Ours: one stream, batch 1, paced at [`LIGHT_LOAD`] of the full-load batch-1 rate.
    Light,
    /// Ours: round trips with one task in flight.
    Rtt,
    /// Ours: round trips before the CPU hog starts (`--contended` only).
    RttQuiet,
    /// Ours: a control-path operation.
    Control(ControlOp, Backend),
    /// Ours: client processes on one `davinci-mockd` device.
    Procs(usize),
    /// Ours: one SUBMIT_TASK ioctl per task through `davinci-mockd`.
    SubmitTask,
    /// Ours, through `davinci-mockd`: round trips (`None`) or a control operation beside
    /// another client that keeps its stream busy with 128 MiB FILLs ([`crate::neighbour`]).
    Noisy(Option<ControlOp>),
    /// Ours, on the run's device (`--device`): one SUBMIT_TASK ioctl per task.
    DeviceSubmitTask,
    /// Ours, on the run's device: round trips each to a sleeping device (the doorbell or
    /// NOTIFY path, [`crate::device_rows`]).
    RttAsleep,
    /// Ours: a CUDA/ACL usage pattern timed whole ([`crate::patterns`]).
    Pattern(Pattern),
    /// Bytes moved by this means over buffers of this size ([`crate::compute_rows`]).
    Data(Move, usize),
    /// An n×n×n f32 GEMM: on the device (`true`) or on host slices (`false`).
    Gemm(bool, usize),
    /// Two clients of a `davinci-mockd` device handing off by device-side waits on each
    /// other's exported events ([`crate::handoff`]).
    Handoff,
}

/// What a measurement gave.
#[derive(Debug, Clone)]
pub enum Measured {
    /// Tasks over a window.
    Rate(ThroughputRun),
    /// Ours streaming (per stream, counters).
    Streams(StreamRun),
    /// The light-load run and the rate it was paced at.
    Light(StreamRun, f64),
    /// Latency samples' summary.
    Latency(Summary),
    /// Client processes.
    Procs(ProcsRun),
    /// Round trips to a sleeping device: the samples' summary, the round trips made and how
    /// many of them woke the device.
    Asleep(Summary, u64, u64),
}

/// The measurements made so far, and the embedded device and the daemon, once started.
#[derive(Debug)]
pub(super) struct Measurements {
    windows: Windows,
    /// [`Options::client_exe`].
    client_exe: Option<PathBuf>,
    /// [`Options::mockd`].
    mockd_bin: Option<PathBuf>,
    /// [`Options::device`].
    device: Option<String>,
    done: HashMap<Key, Result<Measured, Fail>>,
    // Dropped in this order: the daemon (stopped within 5 s, else killed) before the
    // embedded device, whose shutdown is not bounded.
    mockd: Option<Result<Mockd, Fail>>,
    embedded: Option<Device>,
}

impl Measurements {
    /// None made yet; the windows, executables and embedded device of `opts`.
    pub(super) fn new(opts: &Options) -> Measurements {
        Measurements {
            windows: Windows::new(opts.quick),
            client_exe: opts.client_exe.clone(),
            mockd_bin: opts.mockd.clone(),
            device: opts.device.clone(),
            done: HashMap::new(),
            mockd: None,
            embedded: opts.embedded.clone(),
        }
    }

    /// Forgets the measurements made so far (a new round measures every key again); the
    /// device and the daemon stay up.
    pub(super) fn forget(&mut self) {
        self.done.clear();
    }

    /// The device of the "ours" rows, created on first use: the embedded device, or the one
    /// at `--device`.
    fn embedded(&mut self) -> Result<Device, Fail> {
        if let Some(d) = &self.embedded {
            return Ok(d.clone());
        }
        let d = match &self.device {
            Some(p) => Device::open(p).map_err(|e| Fail::Error(format!("opening {p}: {e}")))?,
            None => Device::embedded()
                .map_err(|e| Fail::Error(format!("cannot start the embedded device: {e}")))?,
        };
        self.embedded = Some(d.clone());
        Ok(d)
    }

    pub(super) fn measure(&mut self, key: Key) -> Result<Measured, Fail> {
        if let Some(r) = self.done.get(&key) {
            return r.clone();
        }
        let r = self.measure_new(key);
        self.done.insert(key, r.clone());
        r
    }

    fn measure_new(&mut self, key: Key) -> Result<Measured, Fail> {
        let w = self.windows;
        let lat = |mut l: LatencyRun| {
            l.summary()
                .map(Measured::Latency)
                .ok_or_else(|| Fail::Error("no latency samples in the window".into()))
        };
        match key {
            Key::TwoRing(r, b) => Ok(Measured::Rate(spsc_rows::throughput(r, b, w.throughput)?)),
            Key::TwoRingRtt(r) => lat(spsc_rows::round_trip(r, w.latency)?),
            Key::Uring(b) => Ok(Measured::Rate(sys::io_uring_nop(b, w.throughput)?)),
            Key::IoctlFloor => Ok(Measured::Rate(sys::empty_ioctl(w.throughput)?)),
            Key::Stream { streams, batch } => {
                let dev = self.embedded()?;
                let r = shim_rows::streaming(&dev, streams, batch, Pace::Full, w.throughput)?;
                Ok(Measured::Streams(r))
            }
            Key::Traced { batch, on } => {
                let dev = self.embedded()?;
                let r = crate::trace_rows::streaming(&dev, batch, on, w.throughput)?;
                Ok(Measured::Streams(r))
            }
            Key::Light => {
                let full = match self.measure(Key::Stream {
                    streams: 1,
                    batch: 1,
                })? {
                    Measured::Streams(s) => s.run.rate(),
                    _ => 0.0,
                };
                if full <= 0.0 {
                    return Err(Fail::Error("the full-load batch-1 rate is 0".into()));
                }
                let paced = full * LIGHT_LOAD;
                let dev = self.embedded()?;
                let r = shim_rows::streaming(&dev, 1, 1, Pace::Rate(paced), w.throughput)?;
                Ok(Measured::Light(r, paced))
            }
            Key::Pattern(p) => {
                let dev = self.embedded()?;
                Ok(Measured::Rate(patterns::run(&dev, p)?))
            }
            Key::Data(how, bytes) => {
                let dev = self.embedded()?;
                let min = w.throughput.measure / 4;
                Ok(Measured::Rate(compute_rows::data(&dev, how, bytes, min)?))
            }
            Key::Gemm(ours, n) => {
                let min = w.throughput.measure / 4;
                let run = if ours {
                    let dev = self.embedded()?;
                    compute_rows::gemm_rate(Some(&dev), n, min)?
                } else {
                    compute_rows::gemm_rate(None, n, min)?
                };
                Ok(Measured::Rate(run))
            }
            Key::Rtt | Key::RttQuiet => {
                let dev = self.embedded()?;
                lat(shim_rows::round_trip(&dev, w.latency)?)
            }
            Key::Control(op, Backend::Embedded) => {
                let dev = self.embedded()?;
                lat(shim_rows::control(&dev, op, w.control)?)
            }
            Key::Control(op, Backend::Mockd) => {
                let dev = self.mockd_device()?;
                lat(shim_rows::control(&dev, op, w.control)?)
            }
            Key::Noisy(op) => {
                let dev = self.mockd_device()?;
                let noisy = Neighbour::start(self.mockd_device()?)?;
                let run = match op {
                    None => shim_rows::round_trip(&dev, w.latency),
                    Some(op) => shim_rows::control(&dev, op, w.control),
                };
                noisy.stop()?;
                lat(run?)
            }
            Key::Handoff => {
                let (a, b) = (self.mockd_device()?, self.mockd_device()?);
                lat(handoff::ping_pong(&a, &b, w.latency)?)
            }
            Key::SubmitTask => {
                let dev = self.mockd_device()?;
                Ok(Measured::Rate(shim_rows::submit_slow(&dev, w.throughput)?))
            }
            Key::DeviceSubmitTask => {
                let dev = self.embedded()?;
                Ok(Measured::Rate(shim_rows::submit_slow(&dev, w.throughput)?))
            }
            Key::RttAsleep => {
                let dev = self.embedded()?;
                let (mut l, rounds, woke) = device_rows::round_trip_asleep(&dev, w.latency)?;
                let s = l
                    .summary()
                    .ok_or_else(|| Fail::Error("no latency samples in the window".into()))?;
                Ok(Measured::Asleep(s, rounds, woke))
            }
            Key::Procs(n) => {
                let exe = self.client_exe.clone().ok_or_else(|| {
                    Fail::Unavailable("no client executable to start processes with".into())
                })?;
                let path = self.mockd()?.device_path();
                Ok(Measured::Procs(procs::run(
                    &exe,
                    &path,
                    n,
                    STREAMS_BATCH,
                    w.throughput,
                )?))
            }
        }
    }

    /// The daemon, started on first use (from the main thread, which outlives it).
    fn mockd(&mut self) -> Result<&Mockd, Fail> {
        if self.mockd.is_none() {
            let started = mockd::find(self.mockd_bin.as_deref())
                .map_err(Fail::Unavailable)
                .and_then(|bin| Mockd::start(&bin).map_err(Fail::Error));
            self.mockd = Some(started);
        }
        match &self.mockd {
            Some(Ok(m)) => Ok(m),
            Some(Err(e)) => Err(e.clone()),
            None => Err(Fail::Error("davinci-mockd was not started".into())),
        }
    }

    fn mockd_device(&mut self) -> Result<Device, Fail> {
        let path = self.mockd()?.device_path();
        Device::open(&path).map_err(|e| Fail::Error(format!("opening {path}: {e}")))
    }
}
