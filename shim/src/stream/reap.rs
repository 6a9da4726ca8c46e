//! Reaping a [`Stream`]'s completions: [`poll`](Stream::poll) copies them out of the mapped
//! event ring; the backlog keeps those that `submit` and `synchronize` took off the ring (per
//! `StreamOptions::keep_completions`), bounded by `backlog_limit` (the oldest go first).
#![forbid(unsafe_code)]

use super::Stream;
use crate::completion::Completion;
use crate::error::Result;
use crate::trace;

impl Stream {
    /// Takes every published completion off the event ring: into the backlog, or dropped
    /// after noting errors, per `keep_completions`. A backlog at `backlog_limit` lets go of
    /// its oldest completion for each new one (counted: [`discarded`](Self::discarded)), so a
    /// stream nobody polls never stops for it; the first failed task's completion is kept
    /// apart for `synchronize` either way. Returns how many were taken. Wakes a device that
    /// had stalled on the full event ring (only a raw submit or SUBMIT_TASK can fill it).
    pub(super) fn drain(&mut self, op: &'static str) -> Result<usize> {
        let keep = self.opts.keep_completions;
        let limit = self.opts.backlog_limit;
        let (backlog, first_error, pending, discarded) = (
            &mut self.backlog,
            &mut self.first_error,
            &mut self.pending,
            &mut self.discarded,
        );
        let (n, wake) = self.rings.consume(usize::MAX, |r| {
            let mut c = Completion::from(r);
            pending.reap(&mut c);
            if !c.is_ok() && first_error.is_none() {
                *first_error = Some(c);
            }
            if keep {
                if backlog.len() >= limit {
                    backlog.pop_front();
                    *discarded += 1;
                }
                if limit > 0 {
                    backlog.push_back(c);
                } else {
                    *discarded += 1;
                }
            }
        });
        trace::reaped(&self.ctx.dev, n);
        if wake {
            self.wake_device(op)?;
        }
        Ok(n)
    }

    /// Completions `keep_completions` kept for [`poll`](Self::poll) that a full backlog let
    /// go of unpolled (oldest first) since the stream was created. 0 for a stream that is
    /// polled at least every `backlog_limit` tasks.
    pub fn discarded(&self) -> u64 {
        self.discarded
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
        trace::reaped(&self.ctx.dev, taken);
        if wake {
            // A failed NOTIFY (only for devices without a doorbell) loses nothing: the
            // device's sleep has a timeout, and the next submit or synchronize wakes it too.
            let _ = self.wake_device("Stream::poll");
        }
        n + taken
    }
}
