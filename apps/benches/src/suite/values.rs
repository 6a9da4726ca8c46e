//! How a row reads its value (and a note) from a measurement: rates, nanoseconds per call,
//! the slowest stream's share, doorbells per 1000 tasks, latency percentiles.
#![forbid(unsafe_code)]

use super::measurements::{Measured, LIGHT_LOAD};
use crate::report;
use crate::stats::Summary;

/// Reads a row's value and a detail note from a measurement (`None`: not of this kind).
pub(super) type Extract = fn(&Measured) -> Option<(f64, String)>;

pub(super) fn rate(m: &Measured) -> Option<(f64, String)> {
    let r = match m {
        Measured::Rate(r) => *r,
        Measured::Streams(s) => s.run,
        Measured::Procs(p) => {
            let each: Vec<String> = p
                .clients
                .iter()
                .map(|c| report::fmt_value(c.rate(), "/s"))
                .collect();
            return Some((
                p.total_rate(),
                format!(
                    "{} process(es), tasks/s each: {}",
                    p.clients.len(),
                    each.join(", ")
                ),
            ));
        }
        _ => return None,
    };
    let mut note = format!("{} tasks in {:.2} s", r.tasks, r.elapsed.as_secs_f64());
    if let Measured::Streams(s) = m {
        note.push_str(&format!(", all {} completions checked in order", s.checked));
    }
    Some((r.rate(), note))
}

/// Bytes per second of the best call ([`crate::compute_rows`]: `tasks` are its bytes).
pub(super) fn bytes(m: &Measured) -> Option<(f64, String)> {
    match m {
        Measured::Rate(r) => Some((
            r.rate(),
            format!(
                "{} bytes in {} ns (the best of repeated calls)",
                r.tasks,
                r.elapsed.as_nanos()
            ),
        )),
        _ => None,
    }
}

/// FLOP per second of the best call (`tasks` are its 2·n³ FLOPs).
pub(super) fn flops(m: &Measured) -> Option<(f64, String)> {
    match m {
        Measured::Rate(r) => Some((
            r.rate(),
            format!(
                "{} FLOPs in {:.2} ms (the best of repeated calls), result checked",
                r.tasks,
                r.elapsed.as_secs_f64() * 1e3
            ),
        )),
        _ => None,
    }
}

/// The seconds a whole run took (a pattern: [`crate::patterns`]), with its steps per second.
pub(super) fn seconds(m: &Measured) -> Option<(f64, String)> {
    match m {
        Measured::Rate(r) => Some((
            r.elapsed.as_secs_f64(),
            format!(
                "{} steps in {:.3} s ({:.0} steps/s), results checked",
                r.tasks,
                r.elapsed.as_secs_f64(),
                r.rate()
            ),
        )),
        _ => None,
    }
}

pub(super) fn ns_per_call(m: &Measured) -> Option<(f64, String)> {
    let (v, n) = rate(m)?;
    Some((v, format!("{n}, {:.0} ns per call", 1e9 / v.max(1e-9))))
}

pub(super) fn min_share(m: &Measured) -> Option<(f64, String)> {
    match m {
        Measured::Streams(s) => {
            let max = s.per_stream.iter().max().copied().unwrap_or(0);
            let min = s.per_stream.iter().min().copied().unwrap_or(0);
            Some((
                s.min_share(),
                format!(
                    "{} streams: tasks per stream min {min}, max {max}",
                    s.per_stream.len()
                ),
            ))
        }
        Measured::Procs(p) => Some((p.min_share(), "slowest process over the mean".into())),
        _ => None,
    }
}

pub(super) fn doorbells(m: &Measured) -> Option<(f64, String)> {
    let (s, paced) = match m {
        Measured::Streams(s) => (s, None),
        Measured::Light(s, r) => (s, Some(*r)),
        _ => return None,
    };
    let mut note = format!(
        "{} doorbells for {} tasks ({} futex wakes)",
        s.stats.doorbells, s.stats.tasks_submitted, s.stats.futex_wakes
    );
    if let Some(r) = paced {
        note.push_str(&format!(
            "; paced at {} tasks/s ({:.0}% of the full-load batch-1 rate), ran at {}",
            report::fmt_value(r, "/s"),
            LIGHT_LOAD * 100.0,
            report::fmt_value(s.run.rate(), "/s")
        ));
    }
    Some((s.stats.doorbells_per_1000_tasks(), note))
}

pub(super) fn p50(m: &Measured) -> Option<(f64, String)> {
    match m {
        Measured::Latency(s) => Some((s.p50 as f64, latency_note(s))),
        _ => None,
    }
}

/// One hand-off's share of a round trip of two (`Key::Handoff`): half the p50.
pub(super) fn handoff_p50(m: &Measured) -> Option<(f64, String)> {
    match m {
        Measured::Latency(s) => Some((
            s.p50 as f64 / 2.0,
            format!("half a round trip A -> B -> A; {}", latency_note(s)),
        )),
        _ => None,
    }
}

pub(super) fn p99(m: &Measured) -> Option<(f64, String)> {
    match m {
        Measured::Latency(s) => Some((s.p99 as f64, latency_note(s))),
        _ => None,
    }
}

fn latency_note(s: &Summary) -> String {
    format!(
        "{} samples: p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns, mean {:.0} ns",
        s.count, s.p50, s.p99, s.p999, s.max, s.mean
    )
}
