//! One `davinci-bench` run: the rows, what each measures, and the runner ([`Suite`]):
//! measurements are made once (rows sharing one reuse it), in table order, with progress
//! lines on stderr.
//!
//! The parts: the options (`options.rs`), the measurements (`measurements.rs`), how a row
//! reads its value from one (`values.rs`) and the row table (`table.rs`); this file runs
//! them.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::Write;
use std::time::Instant;

use crate::hog::{self, Hog};
use crate::measure::Fail;
use crate::report::{self, Machine, Outcome, Report, RowSpec};

mod device;
mod measurements;
mod options;
mod table;
mod values;

pub use device::device_plan;
pub use measurements::{Backend, Key, Measured, LIGHT_LOAD, STREAMS_BATCH};
pub use options::{Options, Windows};
pub use table::{plan, select, Plan};

use measurements::Measurements;

/// A run: the measurements made so far, the embedded device and the daemon, once started.
/// Dropping it shuts the device down and stops the daemon.
#[derive(Debug)]
pub struct Suite {
    opts: Options,
    /// Who measured a key first (for "same measurement as" progress lines).
    first: HashMap<Key, &'static str>,
    measurements: Measurements,
}

impl Suite {
    /// A run with `opts` (nothing is started yet).
    pub fn new(opts: Options) -> Suite {
        Suite {
            measurements: Measurements::new(&opts),
            opts,
            first: HashMap::new(),
        }
    }

    /// Runs the rows the options select and returns the report (rows that failed say so;
    /// the caller decides the exit status). The device and the daemon stay up until the
    /// suite is dropped.
    ///
    /// # Errors
    /// The filter selects no row, or the CPU hog cannot be started.
    pub fn run(&mut self) -> Result<Report, String> {
        let opts = self.opts.clone();
        let opts = &opts;
        let machine = Machine::detect();
        let all = match opts.device {
            Some(_) => device_plan(),
            None => plan(opts.contended),
        };
        let rows = select(all.clone(), opts.filter.as_deref());
        if rows.is_empty() {
            return Err(format!(
                "--filter {:?} matches no row; rows: {}",
                opts.filter.as_deref().unwrap_or(""),
                all.iter().map(|r| r.name).collect::<Vec<_>>().join(", ")
            ));
        }
        let rounds = opts.rounds.max(1);
        if rounds > 1 && opts.contended {
            return Err(
                "--rounds applies to quiet runs (a contended run measures its quiet \
                        round trip once, before the hog starts)"
                    .into(),
            );
        }
        let runner = self;
        let mut hog: Option<Hog> = None;
        let mut per_round = Vec::with_capacity(rounds);
        for round in 1..=rounds {
            if round > 1 {
                runner.measurements.forget();
            }
            let label = match rounds {
                1 => String::new(),
                n => format!("round {round}/{n} "),
            };
            let outcomes = runner.run_round(&rows, &label, &mut hog)?;
            per_round.push(report::evaluate(outcomes));
        }
        if let Some(h) = &hog {
            if h.spins() == 0 {
                progress(
                    opts.progress,
                    format_args!("warning: the CPU hog never ran\n"),
                );
            }
        }
        drop(hog);
        Ok(Report {
            schema: report::SCHEMA.into(),
            machine,
            quick: opts.quick,
            contended: opts.contended,
            rows: if rounds == 1 {
                per_round.pop().unwrap_or_default()
            } else {
                let targets: Vec<_> = rows.iter().map(|r| r.target).collect();
                report::combine_rounds(per_round, &targets)
            },
        })
    }

    /// One round of `rows`, in order: each measurement made once (rows sharing one reuse
    /// it), progress lines prefixed by `label`; starts the CPU hog (in `hog`) before the
    /// first row after the quiet round trip of a contended run.
    fn run_round(
        &mut self,
        rows: &[Plan],
        label: &str,
        hog: &mut Option<Hog>,
    ) -> Result<Vec<(RowSpec, Outcome)>, String> {
        let opts = self.opts.clone();
        let opts = &opts;
        let total = rows.len();
        let mut outcomes = Vec::with_capacity(total);
        self.first.clear();
        for (i, r) in rows.iter().enumerate() {
            if opts.contended && hog.is_none() && r.key != Key::RttQuiet {
                let h = Hog::start(hog::cpus())?;
                progress(
                    opts.progress,
                    format_args!(
                        "CPU hog: {} busy threads running from here on\n",
                        h.threads()
                    ),
                );
                *hog = Some(h);
            }
            progress(
                opts.progress,
                format_args!("{label}[{}/{total}] {} ... ", i + 1, r.name),
            );
            let t0 = Instant::now();
            let reused = self.first.get(&r.key).copied();
            let m = self.measurements.measure(r.key);
            self.first.entry(r.key).or_insert(r.name);
            let outcome = match m {
                Ok(m) => match (r.value)(&m) {
                    Some((v, note)) => Outcome::Value(v, Some(note)),
                    None => Outcome::Error(format!("{} has no value of this kind", r.name)),
                },
                Err(Fail::Unavailable(why)) => Outcome::Skipped(why),
                Err(Fail::Error(e)) => Outcome::Error(e),
            };
            let shown = match &outcome {
                Outcome::Value(v, _) => format!("{} {}", report::fmt_value(*v, r.unit), r.unit),
                Outcome::Skipped(why) => format!("skipped: {why}"),
                Outcome::Error(e) => format!("ERROR: {e}"),
            };
            match reused {
                Some(by) => progress(
                    opts.progress,
                    format_args!("{shown} (same measurement as {by})\n"),
                ),
                None => progress(
                    opts.progress,
                    format_args!("{shown} ({:.1} s)\n", t0.elapsed().as_secs_f64()),
                ),
            }
            outcomes.push((
                RowSpec {
                    name: r.name.to_string(),
                    unit: r.unit.to_string(),
                    baseline: r.baseline.map(String::from),
                    target: r.target,
                },
                outcome,
            ));
        }
        Ok(outcomes)
    }
}

/// Writes a progress line (part) on stderr if `on`.
fn progress(on: bool, text: std::fmt::Arguments<'_>) {
    if on {
        let mut e = std::io::stderr().lock();
        let _ = e.write_fmt(text);
        let _ = e.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tiny_run_through_the_shim_checks_every_completion() {
        let opts = Options {
            quick: true,
            filter: Some("ours/streams/4".into()),
            embedded: Some(crate::test_device()),
            ..Options::default()
        };
        let r = Suite::new(opts).run().unwrap();
        let names: Vec<&str> = r.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["ours/streams/1", "ours/streams/4"]);
        for row in &r.rows {
            assert_eq!(row.status, report::Status::Ok, "{row:?}");
            assert!(row.value.is_some_and(|v| v > 0.0), "{row:?}");
            let note = row.note.as_deref().unwrap_or("");
            assert!(note.contains("completions checked in order"), "{note}");
        }
        assert!(r.rows[1].ratio.is_some());
    }

    #[test]
    fn rounds_measure_every_row_again_and_report_medians() {
        let opts = Options {
            quick: true,
            filter: Some("ours/streams/4".into()),
            embedded: Some(crate::test_device()),
            rounds: 2,
            ..Options::default()
        };
        let r = Suite::new(opts).run().unwrap();
        let names: Vec<&str> = r.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["ours/streams/1", "ours/streams/4"]);
        for row in &r.rows {
            assert_eq!(row.status, report::Status::Ok, "{row:?}");
            let note = row.note.as_deref().unwrap_or("");
            // Two values: the second round measured again (a reused measurement would
            // still say 2 rounds, but the run below would not take two windows).
            assert!(note.starts_with("median of 2 rounds: values "), "{note}");
            assert!(note.contains("completions checked in order"), "{note}");
        }
        assert!(r.rows[1].ratio.is_some());
        let contended = Options {
            quick: true,
            contended: true,
            rounds: 3,
            embedded: Some(crate::test_device()),
            ..Options::default()
        };
        let e = Suite::new(contended).run().unwrap_err();
        assert!(e.contains("--rounds applies to quiet runs"), "{e}");
    }

    #[test]
    fn missing_daemon_skips_its_rows() {
        let opts = Options {
            quick: true,
            filter: Some("ours/ctl/alloc4k/mockd".into()),
            mockd: Some("/nonexistent/davinci-mockd".into()),
            embedded: Some(crate::test_device()),
            ..Options::default()
        };
        let r = Suite::new(opts).run().unwrap();
        let row = r
            .rows
            .iter()
            .find(|r| r.name == "ours/ctl/alloc4k/mockd")
            .unwrap();
        assert_eq!(row.status, report::Status::Skipped);
        assert!(row.note.as_deref().unwrap_or("").contains("skipped: "));
        let emb = r
            .rows
            .iter()
            .find(|r| r.name == "ours/ctl/alloc4k/embedded")
            .unwrap();
        assert_eq!(emb.status, report::Status::Ok);
    }
}
