//! Benchmarks of the data path against baselines, in one run: the library behind the
//! `davinci-bench` binary (measurements, baselines, the table and its JSON form).
//!
//! Only [`sys`] (the io_uring push and the empty `ioctl(2)`) and [`wide`] (the two-ring
//! baseline's wide stores) contain `unsafe`; every other module is
//! `#![forbid(unsafe_code)]`.
#![deny(unsafe_code)]

pub mod compute_rows;
pub mod device_rows;
pub mod handoff;
pub mod hog;
pub mod measure;
pub mod mockd;
pub mod neighbour;
pub mod patterns;
pub mod plot;
pub mod procs;
pub mod report;
pub mod shim_rows;
pub mod spsc;
pub mod spsc_alt;
pub mod spsc_ring;
pub mod spsc_rows;
pub mod stats;
pub mod suite;
pub mod sys;
pub mod trace_rows;
pub mod wide;

/// One embedded device for all the unit tests of this crate (each test on its own context
/// and streams), never torn down: cheaper than a device per test.
#[cfg(test)]
pub(crate) fn test_device() -> davinci_shim::Device {
    use std::sync::OnceLock;
    static DEV: OnceLock<Result<davinci_shim::Device, String>> = OnceLock::new();
    match DEV.get_or_init(|| davinci_shim::Device::embedded().map_err(|e| e.to_string())) {
        Ok(d) => d.clone(),
        Err(e) => panic!("cannot start the embedded device: {e}"),
    }
}
