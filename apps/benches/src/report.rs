//! The result of one run: rows with their baseline, ratio and target, printed as a table or
//! as the versioned JSON object `davinci-bench/v1` (documented in the binary's `--help`).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The `schema` field of the JSON object; bumped when a field changes meaning or goes away.
pub const SCHEMA: &str = "davinci-bench/v1";

/// Which way a target bounds its quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// At least the bound (throughput, shares).
    AtLeast,
    /// At most the bound (latency, doorbells).
    AtMost,
}

/// What a target bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    /// The ratio value / baseline value (written with a trailing `×`).
    Ratio,
    /// The value itself (no `×`).
    Value,
}

/// A target: `≥0.6×` (ratio at least 0.6), `≤5` (value at most 5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    /// Which way.
    pub cmp: Cmp,
    /// The bound.
    pub bound: f64,
    /// Of what.
    pub on: On,
}

impl Target {
    /// Ratio at least `bound`.
    pub const fn ratio_at_least(bound: f64) -> Target {
        Target {
            cmp: Cmp::AtLeast,
            bound,
            on: On::Ratio,
        }
    }

    /// Ratio at most `bound`.
    pub const fn ratio_at_most(bound: f64) -> Target {
        Target {
            cmp: Cmp::AtMost,
            bound,
            on: On::Ratio,
        }
    }

    /// Value at least `bound`.
    pub const fn value_at_least(bound: f64) -> Target {
        Target {
            cmp: Cmp::AtLeast,
            bound,
            on: On::Value,
        }
    }

    /// Value at most `bound`.
    pub const fn value_at_most(bound: f64) -> Target {
        Target {
            cmp: Cmp::AtMost,
            bound,
            on: On::Value,
        }
    }

    /// Whether `value` (or `ratio`, per [`On`]) meets the target; `None` when the quantity
    /// it bounds is missing or not a finite number.
    pub fn met(&self, value: Option<f64>, ratio: Option<f64>) -> Option<bool> {
        let x = match self.on {
            On::Ratio => ratio?,
            On::Value => value?,
        };
        if !x.is_finite() {
            return None;
        }
        Some(match self.cmp {
            Cmp::AtLeast => x >= self.bound,
            Cmp::AtMost => x <= self.bound,
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cmp = match self.cmp {
            Cmp::AtLeast => "≥",
            Cmp::AtMost => "≤",
        };
        let times = match self.on {
            On::Ratio => "×",
            On::Value => "",
        };
        write!(f, "{cmp}{}{times}", self.bound)
    }
}

/// How a row ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Measured.
    Ok,
    /// Not measurable here (no daemon, io_uring forbidden, ...): `note` says why.
    Skipped,
    /// The measurement failed (a device error, a completion missing or out of order):
    /// `note` says what; the run exits with status 1.
    Error,
}

/// One row of the table / of `rows` in the JSON object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Unique name, `ours/...` or `baseline/...`.
    pub name: String,
    /// The measured value (`null` when skipped or failed).
    pub value: Option<f64>,
    /// Its unit (`tasks/s`, `ns`, ...).
    pub unit: String,
    /// The name of the row this one is compared with, if any.
    pub baseline: Option<String>,
    /// `value / baseline's value`, when both exist.
    pub ratio: Option<f64>,
    /// The target, e.g. `≥0.6×` (on the ratio) or `≤5` (on the value).
    pub target: Option<String>,
    /// Whether the target is met (`null`: no target, or nothing to evaluate it on).
    pub met: Option<bool>,
    /// `ok`, `skipped` or `error`.
    pub status: Status,
    /// Details (samples, per-stream counts), or why the row was skipped or failed.
    pub note: Option<String>,
}

/// The machine a run was on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPUs this process may use.
    pub cpus: usize,
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// The CPU model (`/proc/cpuinfo`'s first `model name`).
    pub cpu_model: String,
    /// The 1-minute load average when the run started (`/proc/loadavg`): other work on
    /// the machine skews every row.
    #[serde(default)]
    pub load_1min: Option<f64>,
}

impl Machine {
    /// This machine (`"unknown"` for what cannot be read).
    pub fn detect() -> Machine {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| cpu_model(&s))
            .unwrap_or_else(|| "unknown".into());
        let load_1min = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok());
        Machine {
            cpus: crate::hog::cpus(),
            kernel,
            cpu_model,
            load_1min,
        }
    }
}

/// The CPU model named in the text of `/proc/cpuinfo`.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Model", "Hardware", "cpu model", "cpu"]
        .iter()
        .find_map(|key| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == *key && !v.trim().is_empty()).then(|| v.trim().to_string())
            })
        })
}

/// The JSON object of a run (see the binary's `--help`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: String,
    /// Where it ran.
    pub machine: Machine,
    /// `--quick` (short windows).
    pub quick: bool,
    /// `--contended` (a CPU hog on every CPU).
    pub contended: bool,
    /// The rows, in table order.
    pub rows: Vec<Row>,
}

/// What a row is before it is measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RowSpec {
    /// Name.
    pub name: String,
    /// Unit.
    pub unit: String,
    /// Name of the row compared with.
    pub baseline: Option<String>,
    /// Target.
    pub target: Option<Target>,
}

/// What a measurement gave a row: the value and a detail, or why none.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A value and a note.
    Value(f64, Option<String>),
    /// Not measurable here: why.
    Skipped(String),
    /// The measurement failed: what.
    Error(String),
}

/// Builds the rows: ratios against the baseline rows' values (by name, among `rows`) and
/// target evaluation.
pub fn evaluate(rows: Vec<(RowSpec, Outcome)>) -> Vec<Row> {
    let values: HashMap<String, f64> = rows
        .iter()
        .filter_map(|(s, o)| match o {
            Outcome::Value(v, _) => Some((s.name.clone(), *v)),
            _ => None,
        })
        .collect();
    rows.into_iter()
        .map(|(spec, outcome)| {
            let (value, status, mut note) = match outcome {
                Outcome::Value(v, n) => (Some(v), Status::Ok, n),
                Outcome::Skipped(why) => (None, Status::Skipped, Some(format!("skipped: {why}"))),
                Outcome::Error(e) => (None, Status::Error, Some(format!("error: {e}"))),
            };
            let base = spec.baseline.as_ref().and_then(|b| values.get(b).copied());
            let ratio = match (value, base) {
                (Some(v), Some(b)) if b != 0.0 && v.is_finite() && b.is_finite() => Some(v / b),
                _ => None,
            };
            if let (Some(_), Some(b), None) = (value, &spec.baseline, base) {
                let why = format!("no value for baseline {b}");
                note = Some(match note {
                    Some(n) => format!("{n}; {why}"),
                    None => why,
                });
            }
            let met = spec.target.and_then(|t| t.met(value, ratio));
            Row {
                name: spec.name,
                value,
                unit: spec.unit,
                baseline: spec.baseline,
                ratio,
                target: spec.target.map(|t| t.to_string()),
                met,
                status,
                note,
            }
        })
        .collect()
}

/// The rows of several rounds of one table (`rounds[k]` is round k's rows, every round the
/// same rows in the same order, `targets` their targets) as one: each row's median value,
/// the median of its per-round ratios (each ratio taken within its round, so a machine
/// whose speed changes between rounds moves both sides of it together), the target
/// evaluated on those, and a note with the ranges and the note of the round nearest the
/// median. A row that failed in any round fails (with that round's note); a row skipped
/// in every round is skipped.
pub fn combine_rounds(rounds: Vec<Vec<Row>>, targets: &[Option<Target>]) -> Vec<Row> {
    let n = rounds.len();
    let mut rounds: Vec<std::vec::IntoIter<Row>> = rounds.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    for target in targets {
        let rows: Vec<Row> = rounds.iter_mut().filter_map(Iterator::next).collect();
        let Some(first) = rows.first().cloned() else {
            break;
        };
        if let Some((k, bad)) = rows
            .iter()
            .enumerate()
            .find(|(_, r)| r.status == Status::Error)
        {
            let mut bad = bad.clone();
            bad.note = Some(format!(
                "round {} of {n}: {}",
                k + 1,
                bad.note.as_deref().unwrap_or("failed")
            ));
            out.push(bad);
            continue;
        }
        let ok: Vec<&Row> = rows.iter().filter(|r| r.value.is_some()).collect();
        let values: Vec<f64> = ok.iter().filter_map(|r| r.value).collect();
        let ratios: Vec<f64> = ok.iter().filter_map(|r| r.ratio).collect();
        let (Some(value), Some((vmin, vmax))) = (median(&values), range(&values)) else {
            out.push(first);
            continue;
        };
        let ratio = median(&ratios);
        let nearest = ok
            .iter()
            .min_by(|a, b| {
                let da = (a.value.unwrap_or(f64::NAN) - value).abs();
                let db = (b.value.unwrap_or(f64::NAN) - value).abs();
                da.total_cmp(&db)
            })
            .and_then(|r| r.note.clone());
        let mut note = format!(
            "median of {} rounds: values {}-{} {}",
            values.len(),
            fmt_value(vmin, &first.unit),
            fmt_value(vmax, &first.unit),
            first.unit
        );
        if let Some((rmin, rmax)) = range(&ratios) {
            note.push_str(&format!(", ratios {rmin:.2}-{rmax:.2}×"));
        }
        if values.len() < n {
            note.push_str(&format!(", {} round(s) without a value", n - values.len()));
        }
        if let Some(x) = nearest {
            note.push_str(&format!("; the round nearest the median: {x}"));
        }
        out.push(Row {
            value: Some(value),
            ratio,
            met: target.and_then(|t| t.met(Some(value), ratio)),
            status: Status::Ok,
            note: Some(note),
            ..first
        });
    }
    out
}

/// The median of `xs` (the mean of the middle two for an even count); `None` when empty.
fn median(xs: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    match v.len() {
        0 => None,
        l if l % 2 == 1 => v.get(m).copied(),
        _ => Some((v.get(m - 1)? + v.get(m)?) / 2.0),
    }
}

/// The smallest and largest of `xs`; `None` when empty.
fn range(xs: &[f64]) -> Option<(f64, f64)> {
    let lo = xs
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .min_by(f64::total_cmp)?;
    let hi = xs
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .max_by(f64::total_cmp)?;
    Some((lo, hi))
}

/// `value` for the table: 3 significant digits with k/M/G for rates (`12.3M`), whole
/// numbers from 100 up, 2 decimals below.
pub fn fmt_value(v: f64, unit: &str) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if unit.ends_with("/s") {
        let (x, suffix) = if v >= 1e9 {
            (v / 1e9, "G")
        } else if v >= 1e6 {
            (v / 1e6, "M")
        } else if v >= 1e3 {
            (v / 1e3, "k")
        } else {
            (v, "")
        };
        let digits = if x >= 100.0 {
            0
        } else if x >= 10.0 {
            1
        } else {
            2
        };
        format!("{x:.digits$}{suffix}")
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The mark column: `pass`, `MISS`, or why there is none.
pub fn mark(row: &Row) -> &'static str {
    match (row.status, row.met, &row.target) {
        (Status::Skipped, _, _) => "skipped",
        (Status::Error, _, _) => "ERROR",
        (_, Some(true), _) => "pass",
        (_, Some(false), _) => "MISS",
        (_, None, Some(_)) => "n/a",
        (_, None, None) => "",
    }
}

/// The table of `report`: a header line, one line per row, the notes and a summary.
pub fn table(report: &Report) -> String {
    let header = [
        "name", "value", "unit", "baseline", "ratio", "target", "mark",
    ];
    let cells: Vec<[String; 7]> = report
        .rows
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                match (r.value, r.status) {
                    (Some(v), _) => fmt_value(v, &r.unit),
                    (None, Status::Skipped) => "skipped".into(),
                    (None, _) => "error".into(),
                },
                r.unit.clone(),
                r.baseline.clone().unwrap_or_else(|| "-".into()),
                r.ratio.map_or_else(|| "-".into(), |x| format!("{x:.2}×")),
                r.target.clone().unwrap_or_else(|| "-".into()),
                mark(r).to_string(),
            ]
        })
        .collect();
    let mut width = header.map(|h| h.chars().count());
    for c in &cells {
        for (w, s) in width.iter_mut().zip(c) {
            *w = (*w).max(s.chars().count());
        }
    }
    // Numbers right-aligned, text left-aligned.
    let right = [false, true, false, false, true, false, false];
    let line = |c: &[String]| -> String {
        let mut s = String::new();
        for (i, ((cell, w), r)) in c.iter().zip(width).zip(right).enumerate() {
            let pad = w.saturating_sub(cell.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if r {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                if i + 1 < c.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
        }
        s.trim_end().to_string()
    };
    let m = &report.machine;
    let load = m
        .load_1min
        .map(|l| format!(", load {l:.2} at start"))
        .unwrap_or_default();
    let mut out = format!(
        "davinci-bench ({SCHEMA}): {} CPUs, {}, kernel {}{load}; {}{}\n\n",
        m.cpus,
        m.cpu_model,
        m.kernel,
        if report.quick {
            "quick windows"
        } else {
            "full windows"
        },
        if report.contended {
            ", contended (a CPU hog on every CPU)"
        } else {
            ", quiet"
        }
    );
    out.push_str(&line(&header.map(String::from)));
    out.push('\n');
    out.push_str(&line(&width.map(|w| "-".repeat(w))));
    out.push('\n');
    for c in &cells {
        out.push_str(&line(c));
        out.push('\n');
    }
    let notes: Vec<String> = report
        .rows
        .iter()
        .filter_map(|r| r.note.as_ref().map(|n| format!("  {}: {n}", r.name)))
        .collect();
    if !notes.is_empty() {
        out.push_str("\nnotes:\n");
        for n in notes {
            out.push_str(&n);
            out.push('\n');
        }
    }
    let count = |f: &dyn Fn(&Row) -> bool| report.rows.iter().filter(|r| f(r)).count();
    out.push_str(&format!(
        "\ntargets: {} met, {} missed, {} not evaluated; rows: {} measured, {} skipped, {} failed\n",
        count(&|r| r.met == Some(true)),
        count(&|r| r.met == Some(false)),
        count(&|r| r.target.is_some() && r.met.is_none()),
        count(&|r| r.status == Status::Ok),
        count(&|r| r.status == Status::Skipped),
        count(&|r| r.status == Status::Error),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, baseline: Option<&str>, target: Option<Target>) -> RowSpec {
        RowSpec {
            name: name.into(),
            unit: "tasks/s".into(),
            baseline: baseline.map(String::from),
            target,
        }
    }

    fn v(x: f64) -> Outcome {
        Outcome::Value(x, None)
    }

    /// One round: a baseline row and an "ours" row with a ratio target of at least 1.
    fn round(base: Outcome, ours: Outcome) -> Vec<Row> {
        evaluate(vec![
            (spec("base", None, None), base),
            (
                spec("ours", Some("base"), Some(Target::ratio_at_least(1.0))),
                ours,
            ),
        ])
    }

    #[test]
    fn rounds_combine_into_medians_of_values_and_of_per_round_ratios() {
        let targets = [None, Some(Target::ratio_at_least(1.0))];
        // The machine halves its speed in round 2 and doubles it in round 3: each round's
        // ratio is 1.5, 1.5 and 0.5; the medians of the values alone would say 100/100 = 1.
        let rows = combine_rounds(
            vec![
                round(v(100.0), v(150.0)),
                round(v(50.0), v(75.0)),
                round(v(200.0), v(100.0)),
            ],
            &targets,
        );
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].value, Some(100.0));
        assert_eq!(rows[0].ratio, None);
        assert_eq!(rows[1].value, Some(100.0));
        assert_eq!(rows[1].ratio, Some(1.5));
        assert_eq!(rows[1].met, Some(true));
        let note = rows[1].note.as_deref().unwrap();
        assert!(
            note.starts_with("median of 3 rounds: values 75.0-150 tasks/s"),
            "{note}"
        );
        assert!(note.contains("ratios 0.50-1.50×"), "{note}");
        // An even count: the mean of the middle two.
        let rows = combine_rounds(
            vec![round(v(10.0), v(5.0)), round(v(10.0), v(7.0))],
            &targets,
        );
        assert_eq!(rows[1].value, Some(6.0));
        assert_eq!(rows[1].ratio, Some(0.6));
        assert_eq!(rows[1].met, Some(false));
    }

    #[test]
    fn a_failed_round_fails_the_row_and_skips_need_every_round() {
        let targets = [None, Some(Target::ratio_at_least(1.0))];
        let rows = combine_rounds(
            vec![
                round(v(100.0), v(150.0)),
                round(v(100.0), Outcome::Error("completion 7 missing".into())),
            ],
            &targets,
        );
        assert_eq!(rows[1].status, Status::Error);
        let note = rows[1].note.as_deref().unwrap();
        assert!(
            note.starts_with("round 2 of 2: error: completion 7 missing"),
            "{note}"
        );
        let rows = combine_rounds(
            vec![
                round(Outcome::Skipped("no io_uring".into()), v(1.0)),
                round(v(4.0), v(2.0)),
            ],
            &targets,
        );
        // Skipped once: the other round's value and ratio, and the note says so.
        assert_eq!(rows[0].value, Some(4.0));
        assert_eq!(rows[1].ratio, Some(0.5));
        assert!(rows[0]
            .note
            .as_deref()
            .unwrap()
            .contains("1 round(s) without a value"));
        let rows = combine_rounds(
            vec![
                round(Outcome::Skipped("no io_uring".into()), v(1.0)),
                round(Outcome::Skipped("no io_uring".into()), v(2.0)),
            ],
            &targets,
        );
        assert_eq!(rows[0].status, Status::Skipped);
        assert_eq!(rows[1].ratio, None);
        assert_eq!(rows[1].met, None);
    }

    #[test]
    fn targets_display_and_evaluate() {
        let t = Target::ratio_at_least(0.6);
        assert_eq!(t.to_string(), "≥0.6×");
        assert_eq!(t.met(Some(1.0), Some(0.6)), Some(true));
        assert_eq!(t.met(Some(1.0), Some(0.59)), Some(false));
        assert_eq!(t.met(Some(1.0), None), None);
        let t = Target::ratio_at_most(1.5);
        assert_eq!(t.to_string(), "≤1.5×");
        assert_eq!(t.met(None, Some(1.5)), Some(true));
        assert_eq!(t.met(None, Some(1.6)), Some(false));
        let t = Target::value_at_most(5.0);
        assert_eq!(t.to_string(), "≤5");
        assert_eq!(t.met(Some(4.9), None), Some(true));
        assert_eq!(t.met(Some(5.1), Some(0.0)), Some(false));
        assert_eq!(t.met(Some(f64::NAN), None), None);
        assert_eq!(Target::value_at_least(0.5).to_string(), "≥0.5");
        assert_eq!(Target::ratio_at_least(4.0).to_string(), "≥4×");
    }

    #[test]
    fn evaluate_computes_ratios_against_named_rows() {
        let rows = evaluate(vec![
            (spec("base", None, None), v(100.0)),
            (
                spec("fast", Some("base"), Some(Target::ratio_at_least(0.6))),
                v(80.0),
            ),
            (
                spec("slow", Some("base"), Some(Target::ratio_at_least(0.6))),
                v(10.0),
            ),
            (
                spec("skipped", Some("base"), Some(Target::ratio_at_least(1.0))),
                Outcome::Skipped("no daemon".into()),
            ),
            (
                spec("orphan", Some("gone"), Some(Target::ratio_at_least(1.0))),
                v(5.0),
            ),
            (spec("abs", None, Some(Target::value_at_most(5.0))), v(0.5)),
            (spec("bad", None, None), Outcome::Error("reordered".into())),
        ]);
        assert_eq!(rows[0].ratio, None);
        assert_eq!(rows[0].met, None);
        assert_eq!(rows[1].ratio, Some(0.8));
        assert_eq!(rows[1].met, Some(true));
        assert_eq!(rows[1].target.as_deref(), Some("≥0.6×"));
        assert_eq!(rows[2].met, Some(false));
        assert_eq!(rows[3].status, Status::Skipped);
        assert_eq!(rows[3].value, None);
        assert_eq!(rows[3].met, None);
        assert_eq!(rows[3].note.as_deref(), Some("skipped: no daemon"));
        assert_eq!(rows[4].ratio, None);
        assert_eq!(rows[4].met, None);
        assert!(rows[4].note.as_deref().unwrap_or("").contains("gone"));
        assert_eq!(rows[5].met, Some(true));
        assert_eq!(rows[6].status, Status::Error);
        assert_eq!(mark(&rows[1]), "pass");
        assert_eq!(mark(&rows[2]), "MISS");
        assert_eq!(mark(&rows[3]), "skipped");
        assert_eq!(mark(&rows[4]), "n/a");
        assert_eq!(mark(&rows[6]), "ERROR");
        assert_eq!(mark(&rows[0]), "");
    }

    fn report(rows: Vec<Row>) -> Report {
        Report {
            schema: SCHEMA.into(),
            machine: Machine {
                cpus: 2,
                kernel: "6.1.0".into(),
                cpu_model: "Test CPU".into(),
                load_1min: Some(0.5),
            },
            quick: true,
            contended: false,
            rows,
        }
    }

    #[test]
    fn json_has_the_documented_fields() {
        let rows = evaluate(vec![
            (spec("base", None, None), v(100.0)),
            (
                spec("ours", Some("base"), Some(Target::ratio_at_least(0.6))),
                v(80.0),
            ),
            (spec("gone", None, None), Outcome::Skipped("why".into())),
        ]);
        let j = serde_json::to_value(report(rows)).unwrap();
        assert_eq!(j["schema"], "davinci-bench/v1");
        assert_eq!(j["machine"]["cpus"], 2);
        assert_eq!(j["machine"]["kernel"], "6.1.0");
        assert_eq!(j["machine"]["cpu_model"], "Test CPU");
        assert_eq!(j["quick"], true);
        assert_eq!(j["contended"], false);
        let rows = j["rows"].as_array().unwrap();
        for r in rows {
            for k in [
                "name", "value", "unit", "baseline", "ratio", "target", "met", "status", "note",
            ] {
                assert!(r.get(k).is_some(), "row {r} lacks {k}");
            }
        }
        assert_eq!(rows[0]["baseline"], serde_json::Value::Null);
        assert_eq!(rows[0]["ratio"], serde_json::Value::Null);
        assert_eq!(rows[0]["target"], serde_json::Value::Null);
        assert_eq!(rows[1]["baseline"], "base");
        assert_eq!(rows[1]["ratio"], 0.8);
        assert_eq!(rows[1]["target"], "≥0.6×");
        assert_eq!(rows[1]["met"], true);
        assert_eq!(rows[2]["value"], serde_json::Value::Null);
        assert_eq!(rows[2]["status"], "skipped");
        // And it reads back.
        let back: Report = serde_json::from_value(j).unwrap();
        assert_eq!(back.rows.len(), 3);
    }

    #[test]
    fn table_prints_every_row_with_ratio_and_mark() {
        let rows = evaluate(vec![
            (spec("baseline/x", None, None), v(2_000_000.0)),
            (
                spec(
                    "ours/x",
                    Some("baseline/x"),
                    Some(Target::ratio_at_least(4.0)),
                ),
                v(3_000_000.0),
            ),
            (
                spec("ours/y", None, None),
                Outcome::Skipped("no daemon".into()),
            ),
        ]);
        let t = table(&report(rows));
        assert!(t.contains("2.00M"), "{t}");
        let ours = t.lines().find(|l| l.starts_with("ours/x")).unwrap();
        assert!(
            ours.contains("baseline/x") && ours.contains("1.50×"),
            "{ours}"
        );
        assert!(ours.contains("≥4×") && ours.ends_with("MISS"), "{ours}");
        assert!(t.contains("ours/y: skipped: no daemon"), "{t}");
        assert!(t.contains("0 met, 1 missed"), "{t}");
    }

    #[test]
    fn values_are_formatted_by_unit() {
        assert_eq!(fmt_value(12_345_678.0, "tasks/s"), "12.3M");
        assert_eq!(fmt_value(123_456_789.0, "tasks/s"), "123M");
        assert_eq!(fmt_value(1_234.0, "calls/s"), "1.23k");
        assert_eq!(fmt_value(2.5e9, "tasks/s"), "2.50G");
        assert_eq!(fmt_value(812.4, "ns"), "812");
        assert_eq!(fmt_value(0.734, "× fair share"), "0.73");
    }

    #[test]
    fn cpu_model_is_read_from_cpuinfo() {
        let text = "processor\t: 0\nvendor_id\t: X\nmodel name\t: Some CPU @ 2.0GHz\n";
        assert_eq!(cpu_model(text).as_deref(), Some("Some CPU @ 2.0GHz"));
        assert_eq!(cpu_model("nothing"), None);
    }
}
