//! Test support (feature `test-util`), for this crate's tests and the fuzz targets of
//! `davinci-fuzz-harness`; not part of any production build.
//!
//! * [`fd_attack`]: random file operations on the memfds a client receives, between ring
//!   operations, against a fresh device, with a well-behaved client checked throughout.
#![forbid(unsafe_code)]

pub mod fd_attack;
