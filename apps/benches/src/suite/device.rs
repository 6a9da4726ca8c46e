//! The rows of a `--device PATH` run: the kernel path in one run, as ratios against the
//! system-call baselines measured in the same place (the QEMU guest of scripts/kmod-test.sh
//! runs it against `/dev/davinci0`, kmod-rust/guest/init.sh). Under TCG absolute numbers mean
//! little; the ratios are what the run is for. No targets: the run reports, it fails only
//! when a row fails its checks (a completion missing, out of order or failed).
#![forbid(unsafe_code)]

use super::measurements::{Key, Measured};
use super::table::Plan;
use super::values::{doorbells, ns_per_call, p50, p99, rate};

/// One empty ioctl in nanoseconds (the round trips' yardstick).
fn ns_of_call(m: &Measured) -> Option<(f64, String)> {
    let (v, note) = ns_per_call(m)?;
    Some((1e9 / v.max(1e-9), note))
}

/// A round trip to a sleeping device: p50, with how many round trips woke it.
fn asleep_p50(m: &Measured) -> Option<(f64, String)> {
    match m {
        Measured::Asleep(s, rounds, woke) => Some((
            s.p50 as f64,
            format!(
                "{} samples: p50 {} ns, p99 {} ns, max {} ns; {woke} of {rounds} round trips \
                 woke the device",
                s.count, s.p50, s.p99, s.max
            ),
        )),
        _ => None,
    }
}

/// The rows of a `--device` run, in table order.
pub fn device_plan() -> Vec<Plan> {
    use Key::*;
    let row = |name, unit, key, value, baseline| Plan {
        name,
        unit,
        key,
        value,
        baseline,
        target: None,
    };
    let ts = "tasks/s";
    let one = |batch| Stream { streams: 1, batch };
    vec![
        row("baseline/io_uring/batch1", ts, Uring(1), rate, None),
        row("baseline/io_uring/batch64", ts, Uring(64), rate, None),
        row(
            "baseline/ioctl-floor",
            "calls/s",
            IoctlFloor,
            ns_per_call,
            None,
        ),
        row(
            "baseline/ioctl-floor-ns",
            "ns",
            IoctlFloor,
            ns_of_call,
            None,
        ),
        row(
            "ours/device/stream/batch1",
            ts,
            one(1),
            rate,
            Some("baseline/io_uring/batch1"),
        ),
        row(
            "ours/device/stream/batch64",
            ts,
            one(64),
            rate,
            Some("baseline/io_uring/batch64"),
        ),
        row(
            "ours/device/doorbells/batch1",
            "per 1000 tasks",
            one(1),
            doorbells,
            None,
        ),
        row(
            "ours/device/rtt/p50",
            "ns",
            Rtt,
            p50,
            Some("baseline/ioctl-floor-ns"),
        ),
        row(
            "ours/device/rtt/p99",
            "ns",
            Rtt,
            p99,
            Some("ours/device/rtt/p50"),
        ),
        row(
            "ours/device/rtt-asleep/p50",
            "ns",
            RttAsleep,
            asleep_p50,
            Some("baseline/ioctl-floor-ns"),
        ),
        row(
            "ours/device/submit-task",
            ts,
            DeviceSubmitTask,
            rate,
            Some("baseline/ioctl-floor"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::{Options, Suite};

    #[test]
    fn baselines_come_first_and_names_are_unique() {
        let rows = device_plan();
        let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
        for (i, r) in rows.iter().enumerate() {
            assert!(!names[i + 1..].contains(&r.name), "{} twice", r.name);
            if let Some(b) = r.baseline {
                let bi = names.iter().position(|n| *n == b);
                assert!(bi.is_some_and(|bi| bi < i), "{}: baseline {b}", r.name);
            }
        }
    }

    /// A device run (here on the embedded device, which `Options::embedded` puts in the
    /// place of the one opened at `device`): every row has a value, the rows through the shim
    /// checked their completions, the round trips to a sleeping device woke it.
    #[test]
    fn a_device_run_measures_every_row() {
        let opts = Options {
            quick: true,
            device: Some("/dev/davinci-unused".into()),
            embedded: Some(crate::test_device()),
            filter: Some("ours/device/".into()),
            ..Options::default()
        };
        let r = Suite::new(opts).run().unwrap();
        let names: Vec<&str> = r.rows.iter().map(|r| r.name.as_str()).collect();
        assert!(names.contains(&"ours/device/rtt-asleep/p50"), "{names:?}");
        for row in &r.rows {
            if row.name.starts_with("baseline/io_uring") {
                continue; // io_uring may be refused here (skipped, with its errno)
            }
            assert_eq!(row.status, crate::report::Status::Ok, "{row:?}");
        }
        let asleep = r
            .rows
            .iter()
            .find(|r| r.name == "ours/device/rtt-asleep/p50")
            .unwrap();
        assert!(asleep
            .note
            .as_deref()
            .unwrap_or("")
            .contains("woke the device"));
    }
}
