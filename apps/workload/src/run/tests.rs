//! Tests of the run: the configuration's checks and plan, the memory estimate against a
//! device of exactly that size, stopping early and progress.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::*;
use davinci_shim::MockConfig;

fn small() -> WorkloadConfig {
    WorkloadConfig {
        tasks: 1,
        streams: 2,
        slots: 4,
        elements: 64,
        latency_samples: 10,
        ..WorkloadConfig::default()
    }
}

#[test]
fn check_rejects_zeros_naming_the_option() {
    for (cfg, option) in [
        (
            WorkloadConfig {
                tasks: 0,
                ..small()
            },
            "--tasks 0",
        ),
        (
            WorkloadConfig {
                streams: 0,
                ..small()
            },
            "--streams 0",
        ),
        (
            WorkloadConfig {
                slots: 0,
                ..small()
            },
            "--slots 0",
        ),
        (
            WorkloadConfig {
                elements: 0,
                ..small()
            },
            "--elements 0",
        ),
        (
            WorkloadConfig {
                batch: 0,
                ..small()
            },
            "--batch 0",
        ),
        (
            WorkloadConfig {
                timeout: Duration::ZERO,
                ..small()
            },
            "--timeout-secs 0",
        ),
        (
            WorkloadConfig {
                elements: usize::MAX / 2,
                ..small()
            },
            "overflows",
        ),
    ] {
        let e = cfg.check().unwrap_err();
        assert!(e.is(Errno::EINVAL) && e.message().contains(option), "{e}");
        // run refuses it too, before touching the device.
        let dev = Device::embedded().unwrap();
        assert!(run(&dev, &cfg, |_| {}).unwrap_err().is(Errno::EINVAL));
    }
    assert!(WorkloadConfig {
        latency_samples: 0,
        ..small()
    }
    .check()
    .is_ok());
}

#[test]
fn plan_counts_whole_rounds() {
    let cfg = small();
    assert_eq!(cfg.tasks_per_round(), 2 * (3 * 4 + 3));
    assert_eq!(cfg.rounds(), 1);
    let cfg = WorkloadConfig {
        tasks: 31,
        ..small()
    };
    assert_eq!((cfg.rounds(), cfg.planned_tasks()), (2, 60));
    assert_eq!(cfg.streams_needed(), 3);
    assert_eq!(
        WorkloadConfig {
            latency_samples: 0,
            ..cfg
        }
        .streams_needed(),
        2
    );
}

/// The estimate is exact: a device of exactly that much memory runs the workload, a page
/// less does not.
#[test]
fn memory_needed_is_what_the_run_allocates() {
    for cfg in [
        small(),
        WorkloadConfig {
            elements: 300_000, // 1.2 MB buffers: three per chunk
            slots: 1,
            streams: 1,
            ..small()
        },
        WorkloadConfig {
            elements: 1_100_000, // larger than a chunk: one allocation each
            slots: 1,
            streams: 1,
            ..small()
        },
    ] {
        let need = cfg.memory_needed(4096).unwrap();
        assert_eq!(
            need.buffers,
            cfg.streams as u64 * (5 * cfg.slots as u64 + 1)
        );
        let dev = |bytes| {
            Device::embedded_with(MockConfig {
                memory_size: bytes,
                ..MockConfig::default()
            })
            .unwrap()
        };
        let d = dev(need.device_bytes);
        assert_eq!(u64::from(d.info().mem_align), 4096);
        let r = run(&d, &cfg, |_| {}).unwrap();
        assert_eq!(r.mismatches, 0, "{:?}", r.first_mismatches);
        let e = run(&dev(need.device_bytes - 4096), &cfg, |_| {}).unwrap_err();
        assert!(e.is(Errno::ENOMEM), "{need:?}: {e}");
    }
}

#[test]
fn a_stop_flag_ends_the_run_with_a_partial_report() {
    let dev = Device::embedded().unwrap();
    let stop = AtomicBool::new(false);
    let cfg = WorkloadConfig {
        tasks: 1_000_000,
        ..small()
    };
    let mut seen = Vec::new();
    let r = run_until(&dev, &cfg, &stop, |p| {
        seen.push(p);
        if p.done >= 2 * cfg.tasks_per_round() {
            stop.store(true, Ordering::Relaxed);
        }
    })
    .unwrap();
    assert!(r.interrupted);
    assert_eq!((r.rounds, r.rounds_planned), (2, cfg.rounds()));
    assert_eq!(r.tasks, 2 * cfg.tasks_per_round());
    assert_eq!(r.latency.samples, 0, "the latency phase is skipped");
    assert_eq!(r.mismatches, 0);
    assert!(seen
        .iter()
        .all(|p| p.phase == Phase::Throughput && p.total == cfg.planned_tasks()));
}

#[test]
fn progress_counts_each_phase_against_its_own_total() {
    let dev = Device::embedded().unwrap();
    let cfg = WorkloadConfig {
        tasks: 100,
        latency_samples: 100,
        ..small()
    };
    let mut seen = Vec::new();
    let r = run_until(&dev, &cfg, &AtomicBool::new(false), |p| seen.push(p)).unwrap();
    assert!(!r.interrupted);
    assert!(r.client_id.is_some_and(|id| id > 0));
    let last_throughput = seen
        .iter()
        .rev()
        .find(|p| p.phase == Phase::Throughput)
        .unwrap();
    assert_eq!(last_throughput.done, r.tasks);
    assert_eq!(last_throughput.total, r.tasks);
    assert_eq!(
        seen.last(),
        Some(&Progress {
            phase: Phase::Latency,
            done: 100,
            total: 100
        })
    );
}

#[test]
fn zero_latency_samples_skip_the_latency_phase() {
    let dev = Device::embedded().unwrap();
    let cfg = WorkloadConfig {
        latency_samples: 0,
        ..small()
    };
    let mut seen = Vec::new();
    let r = run_until(&dev, &cfg, &AtomicBool::new(false), |p| seen.push(p)).unwrap();
    assert!(!r.interrupted);
    assert_eq!(r.latency.samples, 0);
    assert!(seen.iter().all(|p| p.phase == Phase::Throughput));
}
