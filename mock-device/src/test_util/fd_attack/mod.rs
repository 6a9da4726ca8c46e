//! A stateful attack on a mock device through the files behind its shared memory: a client
//! that interleaves ring operations (descriptors written into its command ring, the tail
//! published, NOTIFY, SUBMIT_TASK, its event ring reaped, WAIT_EVENT) with everything a file
//! descriptor allows (ftruncate, fallocate with any mode, F_ADD_SEALS, writes anywhere,
//! reopening through `/proc`, closing and mapping again, re-creating the stream), while a
//! well-behaved client of the same device runs checked rounds.
//!
//! [`run`] executes one sequence of [`Op`]s on a fresh embedded [`MockDevice`] and panics on
//! the first broken invariant (a SIGBUS kills the process: the harshest failure). It is driven
//! by random sequences in `mock-device/tests/fd_attack.rs` (stable, in the test command) and
//! by libFuzzer through the fuzz target `mock_fd_ops` (`davinci-fuzz-harness`).
//!
//! Invariants, checked after every operation: no descriptor the device handed out grew or
//! lost a seal, and none but the allocation's shrank (which the attacker may shrink: the
//! device's tasks on it then fail, the device never); any other resize attempt failed with
//! `EPERM`; adding a seal failed with `EPERM`. At every [`Op::Good`] and at the end: the good client's FILL completes with status
//! 0 and reads back exactly, and its canary buffer (filled once) is unchanged. At the end,
//! closing the attacker releases its memory and its worker threads; closing both returns the
//! device to zero.
//!
//! Ring writes go through `pwrite` on the memfd (the same pages the device maps), so this
//! module needs no `unsafe`; the daemon test `mockd_hostile_fds` also writes through mappings.
//!
//! The parts: `ops` (the input: [`Op`], [`Part`], [`desc`]), `attacker` (applies an op and
//! checks the descriptors), `good_client` (the checked rounds), `device_io` (ioctls, maps,
//! file reads and writes, ring header offsets); [`run`] and the device it attacks
//! ([`config`]) here.
#![forbid(unsafe_code)]

mod attacker;
mod device_io;
mod good_client;
mod ops;

use std::time::Duration;

use davinci_uapi::{DeviceShareArgs, ShareMode, DRIVER_CMD_SET_DEVICE_SHARE};

use crate::{MockConfig, MockDevice};
use attacker::Attacker;
use device_io::call;
use good_client::Good;

pub use ops::{desc, Op, Part, MAX_OPS, MAX_WRITE};

/// The device [`run`] attacks: small, with short sleeps so a sequence runs in milliseconds.
pub fn config() -> MockConfig {
    MockConfig {
        memory_size: 1 << 20,
        idle_spin: Duration::from_micros(50),
        doorbell_timeout: Duration::from_millis(5),
        event_timeout: Duration::from_millis(5),
        ..MockConfig::default()
    }
}

/// Runs (at most [`MAX_OPS`] of) `ops` against a fresh device; panics on a broken invariant.
pub fn run(ops: &[Op]) {
    let dev = MockDevice::new(config());
    let mut good = Good::new(&dev);
    let mut share = DeviceShareArgs {
        mode: ShareMode::Shared as u32,
        ..DeviceShareArgs::default()
    };
    call(&dev, good.client, DRIVER_CMD_SET_DEVICE_SHARE, &mut share).expect("share the device");
    let mut att = Attacker::new(&dev);
    for op in ops.iter().take(MAX_OPS) {
        att.apply(&dev, &mut good, op);
    }
    good.round(&dev);
    // The attacker leaves: its memory and its workers go; the good client works on.
    let (client, used) = (att.client, dev.info().memory_used);
    let attacker_memory = att.mem.alloc_size;
    drop(att.held);
    dev.close(client);
    assert_eq!(
        dev.client_workers(client),
        0,
        "the attacker's workers are gone"
    );
    assert_eq!(
        dev.info().memory_used,
        used - attacker_memory,
        "the attacker's memory is released"
    );
    good.round(&dev);
    let gc = good.client;
    drop(good);
    dev.close(gc);
    let info = dev.info();
    assert_eq!((info.memory_used, info.clients), (0, 0));
    assert_eq!(dev.workers(), 0);
}
