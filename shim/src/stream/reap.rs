//! Reaping a [`Stream`]'s completions: [`poll`](Stream::poll) copies them out of the mapped
//! event ring; the back-pressure backlog keeps those that a full command ring or
//! `synchronize` took off the ring (per `StreamOptions::keep_completions`), bounded by
//! `backlog_limit`.
#![forbid(unsafe_code)]

use davinci_uapi::Errno;

use super::Stream;
use crate::completion::Completion;
use crate::error::{Error, Result};

impl Stream {
    /// Takes completions off the event ring into the backlog (or drops them after noting
    /// errors, per `keep_completions`). Returns `(taken, backlog_full)`. With `must`, a full
    /// backlog with completions waiting is an `EAGAIN` error.
    pub(super) fn drain(&mut self, op: &'static str, must: bool) -> Result<(usize, bool)> {
        let room = if self.opts.keep_completions {
            self.opts.backlog_limit.saturating_sub(self.backlog.len())
        } else {
            usize::MAX
        };
        let keep = self.opts.keep_completions;
        let (backlog, first_error, pending) =
            (&mut self.backlog, &mut self.first_error, &mut self.pending);
        let (n, wake) = self.rings.consume(room, |r| {
            let mut c = Completion::from(r);
            pending.reap(&mut c);
            if !c.is_ok() && first_error.is_none() {
                *first_error = Some(c);
            }
            if keep {
                backlog.push_back(c);
            }
        });
        if wake {
            self.wake_device(op)?;
        }
        let full = room == 0 || (keep && self.backlog.len() >= self.opts.backlog_limit);
        if must && full && self.rings.available() > 0 {
            return Err(Error::new(
                Errno::EAGAIN,
                op,
                format!(
                    "{} completions are kept unpolled (the backlog limit): poll the stream, or \
                     create it with keep_completions = false",
                    self.backlog.len()
                ),
            ));
        }
        Ok((n, full))
    }

    /// Copies every available completion into `out` (kept backlog first, then the event
    /// ring), in stream order. Returns how many were added. No system call, except a doorbell
    /// (or NOTIFY) when the device had stalled on the full event ring and asked to be woken
    /// once it is reaped.
    pub fn poll(&mut self, out: &mut Vec<Completion>) -> usize {
        self.poll_each(|c| out.push(c))
    }

    /// Like [`poll`](Self::poll), handing each completion to `f`.
    pub fn poll_each(&mut self, mut f: impl FnMut(Completion)) -> usize {
        let mut n = 0;
        while let Some(c) = self.backlog.pop_front() {
            f(c);
            n += 1;
        }
        let (first_error, pending) = (&mut self.first_error, &mut self.pending);
        let (taken, wake) = self.rings.consume(usize::MAX, |r| {
            let mut c = Completion::from(r);
            pending.reap(&mut c);
            if !c.is_ok() && first_error.is_none() {
                *first_error = Some(c);
            }
            f(c)
        });
        if wake {
            // A failed NOTIFY (only for devices without a doorbell) loses nothing: the
            // device's sleep has a timeout, and the next submit or synchronize wakes it too.
            let _ = self.wake_device("Stream::poll");
        }
        n + taken
    }
}
