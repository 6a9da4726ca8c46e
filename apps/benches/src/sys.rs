//! The baselines that need system calls, and the only `unsafe` of this crate: io_uring NOPs
//! (through the `io-uring` crate, whose `push` is `unsafe`) and one empty `ioctl(2)` per task.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use io_uring::{opcode, IoUring};

use crate::measure::{Fail, ThroughputRun, Window};

/// Submission-queue entries of the io_uring baseline's ring.
const URING_ENTRIES: u32 = 256;

/// The request number of the floor ioctl: `DAVINCI_IOCTL_SUBMIT_TASK` (`_IOWR('d', 0x03, 80
/// bytes)`), which `/dev/null` does not implement: the kernel enters the system call, looks
/// the descriptor up, finds no handler and returns `ENOTTY`. What a SUBMIT_TASK costs before
/// any driver work.
pub const FLOOR_REQUEST: u32 = 0xC050_6403;

fn errno_text(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => format!("{e} (errno {n})"),
        None => e.to_string(),
    }
}

/// io_uring NOPs (`IORING_OP_NOP`): `batch` entries pushed, one `io_uring_enter` submitting
/// them and waiting for all `batch` completions, completions checked in order; repeated over
/// `window`.
///
/// # Errors
/// [`Fail::Unavailable`] when io_uring cannot be set up here (`EPERM` in a container whose
/// seccomp profile forbids it, `ENOSYS`, `kernel.io_uring_disabled`), with the errno;
/// [`Fail::Error`] for a failure or a wrong completion afterwards.
pub fn io_uring_nop(batch: u32, window: Window) -> Result<ThroughputRun, Fail> {
    let batch = batch.clamp(1, URING_ENTRIES);
    let mut ring = IoUring::new(URING_ENTRIES)
        .map_err(|e| Fail::Unavailable(format!("io_uring_setup failed: {}", errno_text(&e))))?;
    let mut next = 0u64;
    let mut expected = 0u64;
    let mut w = window.start();
    loop {
        {
            let mut sq = ring.submission();
            for _ in 0..batch {
                let e = opcode::Nop::new().build().user_data(next);
                // SAFETY: a NOP entry refers to no buffer or descriptor, so nothing it names
                // has to outlive the operation; the entry itself is copied into the ring.
                unsafe { sq.push(&e) }
                    .map_err(|_| Fail::Error("io_uring submission queue full".into()))?;
                next += 1;
            }
        }
        ring.submit_and_wait(batch as usize)
            .map_err(|e| Fail::Error(format!("io_uring_enter failed: {}", errno_text(&e))))?;
        let mut bad = None;
        for cqe in ring.completion() {
            if cqe.user_data() != expected || cqe.result() != 0 {
                bad.get_or_insert((cqe.user_data(), cqe.result(), expected));
            }
            expected += 1;
        }
        if let Some((got, res, want)) = bad {
            return Err(Fail::Error(format!(
                "io_uring NOP completion user_data {got} result {res} where {want} was expected"
            )));
        }
        if w.tick(expected) {
            break;
        }
    }
    if expected != next {
        return Err(Fail::Error(format!(
            "io_uring: {} NOP completions missing",
            next - expected
        )));
    }
    Ok(w.finish(expected))
}

/// One `ioctl(2)` per task: [`FLOOR_REQUEST`] on `/dev/null`, which fails with `ENOTTY`
/// after the system call's entry, the descriptor lookup and the dispatch; over `window`.
///
/// # Errors
/// [`Fail::Unavailable`] if `/dev/null` cannot be opened; [`Fail::Error`] if the ioctl
/// answers anything but `ENOTTY` (then it is not the empty path this row measures).
pub fn empty_ioctl(window: Window) -> Result<ThroughputRun, Fail> {
    let null = File::open("/dev/null")
        .map_err(|e| Fail::Unavailable(format!("cannot open /dev/null: {}", errno_text(&e))))?;
    let fd = null.as_raw_fd();
    let mut arg = [0u8; 80];
    let mut calls = 0u64;
    let mut w = window.start();
    loop {
        // SAFETY: `fd` is open for the whole loop (`null` lives until the function returns);
        // the request's size field says 80 bytes and `arg` is an 80-byte buffer this
        // function owns, so even a driver that did implement the request could only read
        // and write inside it.
        let r = unsafe { libc::ioctl(fd, FLOOR_REQUEST as _, arg.as_mut_ptr()) };
        if r != -1 {
            return Err(Fail::Error(format!(
                "ioctl({FLOOR_REQUEST:#x}) on /dev/null returned {r}: not the empty path"
            )));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOTTY) {
            return Err(Fail::Error(format!(
                "ioctl({FLOOR_REQUEST:#x}) on /dev/null failed with {} instead of ENOTTY",
                errno_text(&e)
            )));
        }
        calls += 1;
        if w.tick(calls) {
            break;
        }
    }
    Ok(w.finish(calls))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn w() -> Window {
        Window::new(Duration::from_millis(20), Duration::from_millis(2))
    }

    #[test]
    fn empty_ioctl_counts_calls() {
        let r = empty_ioctl(w()).unwrap();
        assert!(r.tasks > 0);
    }

    #[test]
    fn io_uring_runs_or_says_why_not() {
        for batch in [1, 64] {
            match io_uring_nop(batch, w()) {
                Ok(r) => assert!(r.tasks > 0),
                Err(Fail::Unavailable(why)) => assert!(why.contains("io_uring_setup")),
                Err(Fail::Error(e)) => panic!("{e}"),
            }
        }
    }
}
