//! (skeleton)
#![forbid(unsafe_code)]

/// Runs the program with the process's arguments; returns the exit status.
pub fn main() -> i32 {
    0
}
