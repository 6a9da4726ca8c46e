//! How the program ends: its exit statuses, and [`Failure`], what stops it with status 1.
#![forbid(unsafe_code)]

/// Clean shutdown, or `--list` done.
pub const OK: i32 = 0;
/// Cannot run: no kubelet directory, no devices, registration refused, a socket that cannot
/// be created.
pub const FAILURE: i32 = 1;
/// Usage.
pub const USAGE: i32 = 2;

/// A failure that stops the program (exit status 1), with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);
