//! The bodies of the fuzz targets of `fuzz/`, as plain functions of the input bytes, so that
//! they run on stable too: libFuzzer drives them through the thin `fuzz_target!` wrappers in
//! `fuzz/fuzz_targets/`, and this crate's test `tests/replay.rs` (part of `cargo test
//! --workspace`) replays every checked-in seed (`fuzz/seeds/<target>/`) and every finding ever
//! made (`fuzz/regressions/<target>/`) through the same functions.
//!
//! A function panics when an invariant breaks; an input that does not decode (for the
//! targets whose input is an `arbitrary` value) is ignored, exactly as `fuzz_target!` ignores
//! it. See `fuzz/README.md` for what each target feeds and asserts.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod descriptor_engine;
pub mod ioctl_dispatch;
pub mod kernel_launch;
pub mod mock_device;
pub mod mock_fd_ops;
pub mod mockd_conn;
pub mod mockd_frames;
pub mod ring_device_consumer;

/// A target's body.
pub type Body = fn(&[u8]);

/// Every target: its name (as `cargo fuzz list` prints it) and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("ioctl_dispatch", ioctl_dispatch::run),
    ("ring_device_consumer", ring_device_consumer::run),
    ("descriptor_engine", descriptor_engine::run),
    ("mockd_frames", mockd_frames::run),
    ("mock_fd_ops", mock_fd_ops::run),
    ("mock_device", mock_device::run),
    ("mockd_conn", mockd_conn::run),
    ("kernel_launch", kernel_launch::run),
];
