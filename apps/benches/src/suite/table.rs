//! The row table of a run: every row ([`Plan`]) in table order with its unit, the
//! measurement it reads, how it reads its value, its baseline and target; and the rows a
//! `--filter` selects.
#![forbid(unsafe_code)]

use super::measurements::{Backend, Key, STREAMS_BATCH};
use super::values::{
    bytes, doorbells, flops, handoff_p50, min_share, ns_per_call, p50, p99, rate, seconds, Extract,
};
use crate::compute_rows::Move;
use crate::patterns::Pattern as P;
use crate::report::Target;
use crate::shim_rows::ControlOp;
use crate::spsc_rows::Rings;

/// One row: its name, unit, measurement, how its value is read from it, what it is compared
/// with and its target.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Name.
    pub name: &'static str,
    /// Unit.
    pub unit: &'static str,
    /// The measurement.
    pub key: Key,
    /// Its value and a detail note.
    pub value: Extract,
    /// The row compared with.
    pub baseline: Option<&'static str>,
    /// The target.
    pub target: Option<Target>,
}

/// The rows of a run, in table order (`contended` adds the quiet round trip first and
/// bounds the p99 by it).
pub fn plan(contended: bool) -> Vec<Plan> {
    use Key::*;
    let row = |name, unit, key, value: Extract, baseline, target| Plan {
        name,
        unit,
        key,
        value,
        baseline,
        target,
    };
    let ts = "tasks/s";
    let mut rows = Vec::new();
    if contended {
        rows.push(row("ours/rtt/quiet-p50", "ns", RttQuiet, p50, None, None));
    }
    rows.extend([
        row(
            "baseline/two-ring/batch1",
            ts,
            TwoRing(Rings::Own, 1),
            rate,
            None,
            None,
        ),
        row(
            "baseline/two-ring/batch64",
            ts,
            TwoRing(Rings::Own, 64),
            rate,
            None,
            None,
        ),
        row(
            "baseline/two-ring/rtt-p50",
            "ns",
            TwoRingRtt(Rings::Own),
            p50,
            None,
            None,
        ),
        // The same pipeline on other SPSC rings (slower here: the baseline above is the
        // fastest ring measured; docs/performance.md, Method).
        row(
            "baseline/two-ring-plain/batch64",
            ts,
            TwoRing(Rings::Plain, 64),
            rate,
            Some("baseline/two-ring/batch64"),
            None,
        ),
        row(
            "baseline/two-ring-rtrb/batch64",
            ts,
            TwoRing(Rings::Rtrb, 64),
            rate,
            Some("baseline/two-ring/batch64"),
            None,
        ),
        row(
            "baseline/two-ring-rtrb/rtt-p50",
            "ns",
            TwoRingRtt(Rings::Rtrb),
            p50,
            Some("baseline/two-ring/rtt-p50"),
            None,
        ),
        row(
            "baseline/two-ring-arrayqueue/batch64",
            ts,
            TwoRing(Rings::ArrayQueue, 64),
            rate,
            Some("baseline/two-ring/batch64"),
            None,
        ),
        row(
            "baseline/two-ring-arrayqueue/rtt-p50",
            "ns",
            TwoRingRtt(Rings::ArrayQueue),
            p50,
            Some("baseline/two-ring/rtt-p50"),
            None,
        ),
        row("baseline/io_uring/batch1", ts, Uring(1), rate, None, None),
        row("baseline/io_uring/batch64", ts, Uring(64), rate, None, None),
        row(
            "baseline/ioctl-floor",
            "calls/s",
            IoctlFloor,
            ns_per_call,
            None,
            None,
        ),
        row(
            "ours/stream/batch1",
            ts,
            Stream {
                streams: 1,
                batch: 1,
            },
            rate,
            Some("baseline/io_uring/batch1"),
            Some(Target::ratio_at_least(5.0)),
        ),
        row(
            "ours/stream/batch64",
            ts,
            Stream {
                streams: 1,
                batch: 64,
            },
            rate,
            Some("baseline/two-ring/batch64"),
            Some(Target::ratio_at_least(0.5)),
        ),
        row(
            "ours/stream/batch64-vs-io_uring",
            ts,
            Stream {
                streams: 1,
                batch: 64,
            },
            rate,
            Some("baseline/io_uring/batch64"),
            Some(Target::ratio_at_least(3.5)),
        ),
    ]);
    // What tracing costs (issue 46): untraced (the same code as the rows above, measured
    // again: the two differ by the run's noise), then traced with a reader thread.
    for (batch, off, on, base) in [
        (
            1,
            "ours/tracing/off/batch1",
            "ours/tracing/on/batch1",
            "ours/stream/batch1",
        ),
        (
            64,
            "ours/tracing/off/batch64",
            "ours/tracing/on/batch64",
            "ours/stream/batch64",
        ),
    ] {
        let (untraced, traced) = (Traced { batch, on: false }, Traced { batch, on: true });
        let off_target = Some(Target::ratio_at_least(0.98));
        let on_target = Some(Target::ratio_at_least(0.85));
        rows.push(row(off, ts, untraced, rate, Some(base), off_target));
        rows.push(row(on, ts, traced, rate, Some(off), on_target));
    }
    rows.extend([
        row(
            "ours/streams/1",
            ts,
            Stream {
                streams: 1,
                batch: STREAMS_BATCH,
            },
            rate,
            None,
            None,
        ),
        row(
            "ours/streams/4",
            ts,
            Stream {
                streams: 4,
                batch: STREAMS_BATCH,
            },
            rate,
            Some("ours/streams/1"),
            None,
        ),
        row(
            "ours/streams/16",
            ts,
            Stream {
                streams: 16,
                batch: STREAMS_BATCH,
            },
            rate,
            Some("ours/streams/1"),
            Some(Target::ratio_at_least(0.8)),
        ),
        row(
            "ours/streams/16-min-share",
            "× fair share",
            Stream {
                streams: 16,
                batch: STREAMS_BATCH,
            },
            min_share,
            None,
            Some(Target::value_at_least(0.5)),
        ),
        // The CUDA/ACL patterns of the conformance suite, timed whole (docs/runtimes.md,
        // "Porting from CUDA/ACL"): the tests say each finishes; these bound how long.
        row(
            "ours/pattern/side-stream-2k",
            "s",
            Pattern(P::SideStream),
            seconds,
            None,
            Some(Target::value_at_most(2.0)),
        ),
        row(
            "ours/pattern/burst-100k",
            "s",
            Pattern(P::Burst),
            seconds,
            None,
            Some(Target::value_at_most(1.0)),
        ),
        row(
            "ours/pattern/ping-pong-100k",
            "s",
            Pattern(P::PingPong),
            seconds,
            None,
            Some(Target::value_at_most(5.0)),
        ),
        // Data movement and GEMM against this host's own limits (issue 43's targets: COPY and
        // FILL at least 0.7 of memcpy and memset from 1 MiB, an f32 GEMM at least 0.5 of the
        // single-threaded reference at 1024^3).
        row(
            "baseline/memcpy/4K",
            "B/s",
            Data(Move::Memcpy, 4 << 10),
            bytes,
            None,
            None,
        ),
        row(
            "ours/copy/4K",
            "B/s",
            Data(Move::Copy, 4 << 10),
            bytes,
            Some("baseline/memcpy/4K"),
            None,
        ),
        row(
            "baseline/memcpy/1M",
            "B/s",
            Data(Move::Memcpy, 1 << 20),
            bytes,
            None,
            None,
        ),
        row(
            "ours/copy/1M",
            "B/s",
            Data(Move::Copy, 1 << 20),
            bytes,
            Some("baseline/memcpy/1M"),
            Some(Target::ratio_at_least(0.7)),
        ),
        row(
            "baseline/memcpy/64M",
            "B/s",
            Data(Move::Memcpy, 64 << 20),
            bytes,
            None,
            None,
        ),
        row(
            "ours/copy/64M",
            "B/s",
            Data(Move::Copy, 64 << 20),
            bytes,
            Some("baseline/memcpy/64M"),
            Some(Target::ratio_at_least(0.7)),
        ),
        row(
            "baseline/memset/1M",
            "B/s",
            Data(Move::Memset, 1 << 20),
            bytes,
            None,
            None,
        ),
        row(
            "ours/fill/1M",
            "B/s",
            Data(Move::Fill, 1 << 20),
            bytes,
            Some("baseline/memset/1M"),
            Some(Target::ratio_at_least(0.7)),
        ),
        row(
            "baseline/memset/64M",
            "B/s",
            Data(Move::Memset, 64 << 20),
            bytes,
            None,
            None,
        ),
        row(
            "ours/fill/64M",
            "B/s",
            Data(Move::Fill, 64 << 20),
            bytes,
            Some("baseline/memset/64M"),
            Some(Target::ratio_at_least(0.7)),
        ),
        row(
            "baseline/sgemm/1024",
            "FLOP/s",
            Gemm(false, 1024),
            flops,
            None,
            None,
        ),
        row(
            "ours/gemm/1024",
            "FLOP/s",
            Gemm(true, 1024),
            flops,
            Some("baseline/sgemm/1024"),
            Some(Target::ratio_at_least(0.5)),
        ),
        row(
            "ours/rtt/p50",
            "ns",
            Rtt,
            p50,
            Some("baseline/two-ring/rtt-p50"),
            Some(Target::ratio_at_most(1.3)),
        ),
        if contended {
            row(
                "ours/rtt/p99",
                "ns",
                Rtt,
                p99,
                Some("ours/rtt/quiet-p50"),
                Some(Target::ratio_at_most(20.0)),
            )
        } else {
            row("ours/rtt/p99", "ns", Rtt, p99, Some("ours/rtt/p50"), None)
        },
        row(
            "ours/doorbells/full-load",
            "per 1000 tasks",
            Stream {
                streams: 1,
                batch: 1,
            },
            doorbells,
            None,
            Some(Target::value_at_most(5.0)),
        ),
        row(
            "ours/doorbells/10pct-load",
            "per 1000 tasks",
            Light,
            doorbells,
            None,
            None,
        ),
        row(
            "ours/ctl/stream/embedded",
            "ns",
            Control(ControlOp::StreamCreateDestroy, Backend::Embedded),
            p50,
            None,
            None,
        ),
        row(
            "ours/ctl/alloc4k/embedded",
            "ns",
            Control(ControlOp::AllocFree4K, Backend::Embedded),
            p50,
            None,
            None,
        ),
        row(
            "ours/ctl/stream/mockd",
            "ns",
            Control(ControlOp::StreamCreateDestroy, Backend::Mockd),
            p50,
            Some("ours/ctl/stream/embedded"),
            None,
        ),
        row(
            "ours/ctl/alloc4k/mockd",
            "ns",
            Control(ControlOp::AllocFree4K, Backend::Mockd),
            p50,
            Some("ours/ctl/alloc4k/embedded"),
            None,
        ),
        // One call alone (issue 26's targets are per call): the pair's other half untimed.
        row(
            "ours/ctl/create-stream/embedded",
            "ns",
            Control(ControlOp::StreamCreate, Backend::Embedded),
            p50,
            None,
            Some(Target::value_at_most(30_000.0)),
        ),
        row(
            "ours/ctl/create-stream/mockd",
            "ns",
            Control(ControlOp::StreamCreate, Backend::Mockd),
            p50,
            Some("ours/ctl/create-stream/embedded"),
            Some(Target::value_at_most(60_000.0)),
        ),
        row(
            "ours/ctl/alloc/mockd",
            "ns",
            Control(ControlOp::Alloc4K, Backend::Mockd),
            p50,
            None,
            Some(Target::value_at_most(25_000.0)),
        ),
        row(
            "ours/ctl/free/mockd",
            "ns",
            Control(ControlOp::Free4K, Backend::Mockd),
            p50,
            None,
            Some(Target::value_at_most(25_000.0)),
        ),
        row("ours/mockd/procs1", ts, Procs(1), rate, None, None),
        row(
            "ours/mockd/procs4",
            ts,
            Procs(4),
            rate,
            Some("ours/mockd/procs1"),
            Some(Target::ratio_at_least(0.7)),
        ),
        row(
            "ours/mockd/procs4-min-share",
            "× fair share",
            Procs(4),
            min_share,
            None,
            Some(Target::value_at_least(0.8)),
        ),
        row(
            "ours/mockd/submit-task",
            ts,
            SubmitTask,
            rate,
            Some("baseline/ioctl-floor"),
            None,
        ),
        // Another tenant keeps the device busy with 128 MiB FILLs (issue 21's targets).
        row(
            "ours/noisy/rtt-p99",
            "ns",
            Noisy(None),
            p99,
            None,
            Some(Target::value_at_most(5e6)),
        ),
        row(
            "ours/handoff/event-p50",
            "ns",
            Handoff,
            handoff_p50,
            None,
            Some(Target::value_at_most(20e3)),
        ),
        row(
            "ours/noisy/alloc4k-p99",
            "ns",
            Noisy(Some(ControlOp::AllocFree4K)),
            p99,
            None,
            Some(Target::value_at_most(50e6)),
        ),
    ]);
    rows
}

/// The rows `filter` selects (name contains it), plus the rows they are compared with, in
/// table order. Every row without a filter.
pub fn select(rows: Vec<Plan>, filter: Option<&str>) -> Vec<Plan> {
    let Some(f) = filter else { return rows };
    let mut keep: Vec<bool> = rows.iter().map(|r| r.name.contains(f)).collect();
    // Baselines of kept rows, transitively (a baseline of a baseline is at most two deep).
    for _ in 0..3 {
        let wanted: Vec<&str> = rows
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .filter_map(|(r, _)| r.baseline)
            .collect();
        for (r, k) in rows.iter().zip(keep.iter_mut()) {
            if wanted.contains(&r.name) {
                *k = true;
            }
        }
    }
    rows.into_iter()
        .zip(keep)
        .filter_map(|(r, k)| k.then_some(r))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report;

    #[test]
    fn row_names_are_unique_and_baselines_exist() {
        for contended in [false, true] {
            let rows = plan(contended);
            let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
            for (i, n) in names.iter().enumerate() {
                assert!(!names[i + 1..].contains(n), "{n} twice");
            }
            for r in &rows {
                if let Some(b) = r.baseline {
                    let bi = names.iter().position(|n| *n == b);
                    let ri = names.iter().position(|n| *n == r.name);
                    assert!(bi.is_some(), "{}: baseline {b} is not a row", r.name);
                    assert!(bi < ri, "{}: baseline {b} comes later", r.name);
                }
                if matches!(r.target, Some(t) if t.on == report::On::Ratio) {
                    assert!(
                        r.baseline.is_some(),
                        "{}: ratio target, no baseline",
                        r.name
                    );
                }
            }
            assert_eq!(names.contains(&"ours/rtt/quiet-p50"), contended);
        }
    }

    #[test]
    fn issue_26_targets_are_in_the_table() {
        let rows = plan(false);
        let target = |name: &str| {
            rows.iter()
                .find(|r| r.name == name)
                .and_then(|r| r.target)
                .unwrap_or_else(|| panic!("{name}: no target"))
        };
        assert_eq!(target("ours/stream/batch1"), Target::ratio_at_least(5.0));
        assert_eq!(target("ours/stream/batch64"), Target::ratio_at_least(0.5));
        assert_eq!(
            target("ours/stream/batch64-vs-io_uring"),
            Target::ratio_at_least(3.5)
        );
        assert_eq!(target("ours/rtt/p50"), Target::ratio_at_most(1.3));
        assert_eq!(
            target("ours/ctl/create-stream/embedded"),
            Target::value_at_most(30_000.0)
        );
        assert_eq!(
            target("ours/ctl/create-stream/mockd"),
            Target::value_at_most(60_000.0)
        );
        assert_eq!(
            target("ours/ctl/alloc/mockd"),
            Target::value_at_most(25_000.0)
        );
        assert_eq!(
            target("ours/ctl/free/mockd"),
            Target::value_at_most(25_000.0)
        );
        assert_eq!(
            target("ours/mockd/procs4-min-share"),
            Target::value_at_least(0.8)
        );
        // THE baseline the ratios use is the own ring; the other rings are extra rows.
        let b64 = rows
            .iter()
            .find(|r| r.name == "baseline/two-ring/batch64")
            .unwrap();
        assert_eq!(b64.key, Key::TwoRing(Rings::Own, 64));
        for alt in ["plain", "rtrb", "arrayqueue"] {
            let name = format!("baseline/two-ring-{alt}/batch64");
            assert!(rows.iter().any(|r| r.name == name), "{name}");
        }
    }

    #[test]
    fn filter_keeps_the_rows_compared_with() {
        let rows = select(plan(false), Some("ours/stream/batch64-vs"));
        let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
        assert_eq!(
            names,
            [
                "baseline/io_uring/batch64",
                "ours/stream/batch64-vs-io_uring"
            ]
        );
        let rows = select(plan(true), Some("ours/rtt/p99"));
        let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
        assert_eq!(names, ["ours/rtt/quiet-p50", "ours/rtt/p99"]);
        assert!(select(plan(false), Some("nothing-matches")).is_empty());
        assert_eq!(select(plan(false), None).len(), plan(false).len());
    }
}
