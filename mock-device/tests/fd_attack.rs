//! Random attack sequences on an in-process mock device through the files behind its shared
//! memory (`davinci_mock_device::test_util::fd_attack`, feature `test-util`): the property the
//! fuzz target `mock_fd_ops` checks, kept on stable and in the test command. Each case is a
//! seeded pseudo-random byte string read as a sequence of operations with `arbitrary`, so a
//! failing case is reproducible from the seed the panic message names.
//!
//! `DAVINCI_FD_ATTACK_CASES` sets the number of cases (default 128) and
//! `DAVINCI_FD_ATTACK_SEED` the first seed.
#![forbid(unsafe_code)]

use arbitrary::{Arbitrary, Unstructured};
use davinci_mock_device::test_util::fd_attack::{run, Op, Part, MAX_OPS};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// xorshift64*: enough to spread bytes; the seed alone determines the case.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

fn ops_of(seed: u64) -> Vec<Op> {
    let data = bytes(seed, 4096);
    let mut u = Unstructured::new(&data);
    let mut ops = Vec::new();
    while let Ok(op) = Op::arbitrary(&mut u) {
        ops.push(op);
        if ops.len() == MAX_OPS || u.is_empty() {
            break;
        }
    }
    ops
}

#[test]
fn random_file_operations_between_ring_operations_never_hurt_the_device() {
    let cases = env_u64("DAVINCI_FD_ATTACK_CASES", 128);
    let first = env_u64("DAVINCI_FD_ATTACK_SEED", 1);
    let mut kinds = std::collections::HashSet::new();
    let mut total = 0;
    for seed in first..first + cases {
        let ops = ops_of(seed);
        total += ops.len();
        for op in &ops {
            kinds.insert(std::mem::discriminant(op));
        }
        let r = std::panic::catch_unwind(|| run(&ops));
        if let Err(e) = r {
            eprintln!(
                "DAVINCI_FD_ATTACK_SEED={seed} DAVINCI_FD_ATTACK_CASES=1 reproduces: {ops:#?}"
            );
            std::panic::resume_unwind(e);
        }
    }
    eprintln!("{cases} cases, {total} operations");
    // The generator reaches every kind of operation (13: the variants of `Op`), else the
    // property says little.
    assert!(
        cases < 16 || kinds.len() == 13,
        "only {} kinds of op generated",
        kinds.len()
    );
}

/// The attack from the issue and its relatives, written out: every resize, seal and hole on
/// every descriptor, between pushes, submits and waits.
#[test]
fn the_scripted_attack_on_every_descriptor() {
    let mut ops = Vec::new();
    for part in [Part::Cmd, Part::Event, Part::Doorbell, Part::Memory] {
        ops.extend([
            Op::Push {
                n: 3,
                kind: 1,
                notify: true,
            },
            Op::Truncate { part, len: 0 },
            Op::Truncate { part, len: 1 << 20 },
            Op::Fallocate {
                part,
                mode: 0,
                offset: 0,
                len: 1 << 20,
            },
            Op::AddSeals { part, seals: 0x08 },
            Op::Wait { ms: 5 },
            Op::Good,
            Op::Fallocate {
                part,
                mode: 0x03,
                offset: 0,
                len: 1 << 20,
            },
            Op::Submit { kind: 1 },
            Op::Reopen { part },
            Op::Truncate { part, len: 0 },
            Op::Remap { part },
            Op::Write {
                part,
                offset: 60,
                bytes: vec![0xff; 200],
            },
            Op::Reap,
            Op::Wait { ms: 5 },
            Op::Good,
        ]);
    }
    ops.push(Op::Recreate);
    ops.push(Op::Push {
        n: 2,
        kind: 0,
        notify: true,
    });
    ops.push(Op::Good);
    run(&ops);
}
