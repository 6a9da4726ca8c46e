//! Progress on stderr while `davinci-workload` runs: a bar with rate and ETA on a terminal,
//! otherwise a line every `DAVINCI_WORKLOAD_PROGRESS_SECS` seconds.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_workload::run::{Phase, Progress};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::failure::Failure;

/// Seconds between progress lines when stderr is not a terminal.
pub(crate) const PROGRESS_ENV: &str = "DAVINCI_WORKLOAD_PROGRESS_SECS";
const DEFAULT_PROGRESS_SECS: f64 = 5.0;

/// The progress bar template on a terminal: position, rate and ETA of the current phase.
const BAR_TEMPLATE: &str =
    "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg} ({per_sec:0}, ETA {eta})";

fn phase_unit(phase: Phase) -> &'static str {
    match phase {
        Phase::Throughput => "tasks",
        Phase::Latency => "round trips",
    }
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Throughput => "throughput",
        Phase::Latency => "latency",
    }
}

/// `1h02m03s`, `2m05s`, `7s`.
fn short_duration(secs: f64) -> String {
    let s = if secs.is_finite() && secs > 0.0 {
        secs.round() as u64
    } else {
        0
    };
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, s) => format!("{h}h{m:02}m{s:02}s"),
    }
}

/// One progress line (for a stderr that is not a terminal).
fn progress_line(p: &Progress, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        p.done as f64 / secs
    } else {
        0.0
    };
    let eta = if rate > 0.0 {
        short_duration(p.total.saturating_sub(p.done) as f64 / rate)
    } else {
        "unknown".into()
    };
    let unit = phase_unit(p.phase);
    format!(
        "davinci-workload: {} {}/{} {unit} ({}%), {rate:.0} {unit}/s, ETA {eta}",
        phase_name(p.phase),
        p.done,
        p.total,
        (p.done.saturating_mul(100))
            .checked_div(p.total)
            .unwrap_or(100)
    )
}

/// Progress on stderr: a bar on a terminal, otherwise a line every `interval`.
pub(crate) struct ProgressView {
    bar: Option<ProgressBar>,
    interval: Duration,
    phase: Option<Phase>,
    phase_start: Instant,
    last_line: Instant,
}

impl ProgressView {
    pub(crate) fn new(terminal: bool, interval: Duration) -> Self {
        let bar = terminal.then(|| {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(BAR_TEMPLATE) {
                bar.set_style(style);
            }
            bar
        });
        let now = Instant::now();
        ProgressView {
            bar,
            interval,
            phase: None,
            phase_start: now,
            last_line: now,
        }
    }

    pub(crate) fn update(&mut self, p: Progress) {
        if self.phase != Some(p.phase) {
            self.phase = Some(p.phase);
            self.phase_start = Instant::now();
            if let Some(bar) = &self.bar {
                bar.reset();
                bar.set_length(p.total);
                bar.set_message(phase_unit(p.phase));
            }
        }
        match &self.bar {
            Some(bar) => bar.set_position(p.done),
            None => {
                if self.last_line.elapsed() >= self.interval {
                    self.last_line = Instant::now();
                    eprintln!("{}", progress_line(&p, self.phase_start.elapsed()));
                }
            }
        }
    }

    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// [`PROGRESS_ENV`] as an interval.
pub(crate) fn progress_interval(value: Option<&str>) -> Result<Duration, Failure> {
    let Some(text) = value.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(Duration::from_secs_f64(DEFAULT_PROGRESS_SECS));
    };
    text.parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| {
            Failure::usage(format!(
                "{PROGRESS_ENV}={text:?} is not a number of seconds: set it to e.g. 5, 0.5 or 0 \
                 (a line after every round), or unset it"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_shows_rate_and_eta() {
        assert!(ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
        assert!(BAR_TEMPLATE.contains("{per_sec") && BAR_TEMPLATE.contains("{eta}"));
    }

    #[test]
    fn progress_lines_give_rate_and_eta() {
        let p = Progress {
            phase: Phase::Throughput,
            done: 1000,
            total: 4000,
        };
        assert_eq!(
            progress_line(&p, Duration::from_secs(2)),
            "davinci-workload: throughput 1000/4000 tasks (25%), 500 tasks/s, ETA 6s"
        );
        let p = Progress {
            phase: Phase::Latency,
            done: 0,
            total: 10,
        };
        assert!(progress_line(&p, Duration::ZERO).ends_with("ETA unknown"));
        assert_eq!(short_duration(3725.0), "1h02m05s");
        assert_eq!(short_duration(125.0), "2m05s");
    }

    #[test]
    fn progress_interval_parses_seconds() {
        assert_eq!(progress_interval(None).unwrap(), Duration::from_secs(5));
        assert_eq!(progress_interval(Some("")).unwrap(), Duration::from_secs(5));
        assert_eq!(progress_interval(Some("0")).unwrap(), Duration::ZERO);
        assert_eq!(
            progress_interval(Some("0.5")).unwrap(),
            Duration::from_millis(500)
        );
        for bad in ["-1", "soon", "NaN", "1e400"] {
            let f = progress_interval(Some(bad)).unwrap_err();
            assert!(f.message.contains(PROGRESS_ENV), "{}", f.message);
        }
    }
}
