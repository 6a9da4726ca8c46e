//! Measurement windows: a warm-up not counted, then a fixed duration counted.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use crate::stats::{summarize, Summary};

/// Why a row has no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fail {
    /// It cannot be measured here (no daemon, io_uring not permitted, ...): the reason. Not
    /// an error of the thing measured.
    Unavailable(String),
    /// The measurement failed (a device error, a completion missing or out of order).
    Error(String),
}

impl From<String> for Fail {
    fn from(e: String) -> Self {
        Fail::Error(e)
    }
}

impl From<davinci_shim::Error> for Fail {
    fn from(e: davinci_shim::Error) -> Self {
        Fail::Error(e.to_string())
    }
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Unavailable(m) => write!(f, "unavailable: {m}"),
            Fail::Error(m) => write!(f, "error: {m}"),
        }
    }
}

/// How long a row measures: `warmup` first (not counted), then `measure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The counted part.
    pub measure: Duration,
    /// Run before counting starts.
    pub warmup: Duration,
}

/// Most latency samples a row keeps (the window ends early when reached).
pub const MAX_SAMPLES: usize = 2_000_000;

impl Window {
    /// A window of `measure` after `warmup`.
    pub fn new(measure: Duration, warmup: Duration) -> Window {
        Window { measure, warmup }
    }

    /// A window of `measure` with the default warm-up: a fifth of it, at most 200 ms.
    pub fn for_secs(measure: Duration) -> Window {
        Window::new(measure, (measure / 5).min(Duration::from_millis(200)))
    }

    /// Starts counting time now.
    pub fn start(self) -> WindowRun {
        let now = Instant::now();
        WindowRun {
            window: self,
            started: now,
            counting: None,
            calls: 0,
        }
    }
}

/// A window in progress (see [`Window::start`]).
#[derive(Debug)]
pub struct WindowRun {
    window: Window,
    started: Instant,
    /// When counting started and the count then.
    counting: Option<(Instant, u64)>,
    calls: u32,
}

impl WindowRun {
    /// Called from the measuring loop with the running task count; `true` once the window
    /// is over. Reads the clock only every 16th call.
    pub fn tick(&mut self, count: u64) -> bool {
        self.calls = self.calls.wrapping_add(1);
        if !self.calls.is_multiple_of(16) {
            return false;
        }
        self.check(count)
    }

    /// Like [`tick`](Self::tick), reading the clock every call (for slow loops).
    pub fn check(&mut self, count: u64) -> bool {
        let now = Instant::now();
        match self.counting {
            None => {
                if now.duration_since(self.started) >= self.window.warmup {
                    self.counting = Some((now, count));
                }
                false
            }
            Some((t, _)) => now.duration_since(t) >= self.window.measure,
        }
    }

    /// Whether the warm-up is over.
    pub fn counting(&self) -> bool {
        self.counting.is_some()
    }

    /// The counted tasks and time, given the count now.
    pub fn finish(&self, count: u64) -> ThroughputRun {
        let now = Instant::now();
        let (t, c0) = self.counting.unwrap_or((self.started, 0));
        ThroughputRun {
            tasks: count.saturating_sub(c0),
            elapsed: now.duration_since(t),
        }
    }
}

/// Tasks completed over a measured time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThroughputRun {
    /// Tasks completed in the window.
    pub tasks: u64,
    /// The window's length.
    pub elapsed: Duration,
}

impl ThroughputRun {
    /// Tasks per second.
    pub fn rate(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.tasks as f64 / s
        } else {
            0.0
        }
    }
}

/// Latency samples collected over a window.
#[derive(Debug)]
pub struct LatencyRun {
    window: WindowRun,
    /// Nanoseconds per sample (after the warm-up).
    pub samples: Vec<u64>,
}

impl LatencyRun {
    /// Starts collecting now.
    pub fn new(window: Window) -> LatencyRun {
        LatencyRun {
            window: window.start(),
            samples: Vec::new(),
        }
    }

    /// Records the time since `t0` as one sample (if the warm-up is over); `true` once the
    /// window is over or [`MAX_SAMPLES`] are kept.
    pub fn record(&mut self, t0: Instant) -> bool {
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if self.window.counting() {
            self.samples.push(ns);
        }
        self.samples.len() >= MAX_SAMPLES || self.window.tick(self.samples.len() as u64)
    }

    /// Like [`record`](Self::record), reading the clock for the window on every call (for
    /// samples long enough that 16 of them could overrun it).
    pub fn record_slow(&mut self, t0: Instant) -> bool {
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if self.window.counting() {
            self.samples.push(ns);
        }
        self.samples.len() >= MAX_SAMPLES || self.window.check(self.samples.len() as u64)
    }

    /// Sorts the samples and summarises them.
    pub fn summary(&mut self) -> Option<Summary> {
        summarize(&mut self.samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_counts_after_warmup_only() {
        let w = Window::new(Duration::from_millis(20), Duration::from_millis(10));
        let mut r = w.start();
        let mut count = 0;
        let t0 = Instant::now();
        while !r.check(count) {
            count += 1;
            std::thread::sleep(Duration::from_micros(200));
        }
        let run = r.finish(count);
        assert!(run.tasks < count, "warm-up tasks are not counted");
        assert!(run.elapsed >= Duration::from_millis(20));
        assert!(t0.elapsed() >= Duration::from_millis(30));
        assert!(run.rate() > 0.0);
    }

    #[test]
    fn default_warmup_is_bounded() {
        assert_eq!(
            Window::for_secs(Duration::from_secs(5)).warmup,
            Duration::from_millis(200)
        );
        assert_eq!(
            Window::for_secs(Duration::from_millis(100)).warmup,
            Duration::from_millis(20)
        );
    }
}
