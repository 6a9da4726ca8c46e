//! What a [`Stream`](super::Stream) keeps for tasks submitted and not yet reaped: the leases
//! of the memory they name (so it is freed in stream order), holds on the events that
//! EVENT_RECORD and EVENT_WAIT tasks name (so their driver handles are destroyed only after
//! those tasks ran), the timestamp cells of event records ([`Recorded`](crate::Recorded)) and
//! host callbacks. An entry goes when its task's
//! completion is taken off the event ring; whatever is left goes when the stream is dropped,
//! after the driver destroyed it. Bounded by the rings: a stream has at most a command ring
//! and an event ring of tasks submitted and not reaped.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use davinci_uapi::Errno;

use crate::completion::{Completion, TaskId};
use crate::error::{Error, Result};
use crate::event_handle::EventHold;
use crate::task::{Leases, Task};

/// Where a reaped EVENT_RECORD leaves its device timestamp (and status).
pub(crate) type Stamp = Arc<OnceLock<(u64, i32)>>;

/// A host callback: runs once, with `Ok` when the stream reached it, or the reason it never
/// will.
pub(crate) type Callback = Box<dyn FnOnce(Result<()>) + Send + 'static>;

enum Hook {
    Stamp(Stamp),
    Callback(Callback),
}

struct Entry {
    seq: u64,
    /// Held, never read: dropping the entry releases them.
    _leases: Option<Leases>,
    /// The event an EVENT_RECORD/EVENT_WAIT names. Held, never read: dropping the entry
    /// releases it (and destroys the event's handle if nothing else holds it).
    _event: Option<EventHold>,
    hook: Option<Hook>,
}

/// The stream's submitted-and-unreaped bookkeeping.
#[derive(Default)]
pub(crate) struct Pending {
    /// Descriptors given to the stream so far (the next one's [`TaskId`]).
    pub(crate) submitted: u64,
    /// Completions taken off the event ring so far (the next one's [`TaskId`]).
    pub(crate) reaped: u64,
    entries: VecDeque<Entry>,
}

impl Pending {
    /// Notes `n` descriptors given to the stream (raw ones: nothing to keep). Returns the
    /// first one's id.
    pub(crate) fn count(&mut self, n: usize) -> TaskId {
        let id = TaskId(self.submitted);
        self.submitted = self.submitted.wrapping_add(n as u64);
        id
    }

    /// Notes one task given to the stream, keeping its leases.
    pub(crate) fn push(&mut self, task: &Task) -> TaskId {
        let id = self.count(1);
        if task.has_leases() {
            self.entries.push_back(Entry {
                seq: id.0,
                _leases: task.clone_leases(),
                _event: None,
                hook: None,
            });
        }
        id
    }

    /// Attaches a hold on its event and a stamp to the task just given (an EVENT_RECORD).
    pub(crate) fn record_last(&mut self, event: EventHold, stamp: Stamp) {
        self.with_last(|e| {
            e._event = Some(event);
            e.hook = Some(Hook::Stamp(stamp));
        });
    }

    /// Attaches a hold on its event to the task just given (an EVENT_WAIT).
    pub(crate) fn hold_last(&mut self, event: EventHold) {
        self.with_last(|e| e._event = Some(event));
    }

    /// Attaches a callback to the task just given (a NOP).
    pub(crate) fn callback_last(&mut self, f: Callback) {
        self.with_last(|e| e.hook = Some(Hook::Callback(f)));
    }

    /// Changes the entry of the task just given, made if it has none yet.
    fn with_last(&mut self, f: impl FnOnce(&mut Entry)) {
        let seq = self.submitted.wrapping_sub(1);
        if self.entries.back().is_none_or(|e| e.seq != seq) {
            self.entries.push_back(Entry {
                seq,
                _leases: None,
                _event: None,
                hook: None,
            });
        }
        if let Some(e) = self.entries.back_mut() {
            f(e);
        }
    }

    /// One completion taken off the event ring: sets its task's id. Releases what that task
    /// (and any earlier one) kept, fills an event record's stamp and runs a host callback.
    pub(crate) fn reap(&mut self, c: &mut Completion) {
        let id = TaskId(self.reaped);
        c.task = id;
        self.reaped = self.reaped.wrapping_add(1);
        while let Some(e) = self.entries.front() {
            if id.0.wrapping_sub(e.seq) >= (1 << 63) {
                break; // a later task
            }
            let Some(e) = self.entries.pop_front() else {
                break;
            };
            match e.hook {
                Some(Hook::Stamp(s)) if e.seq == id.0 => {
                    let _ = s.set((c.timestamp_ns, c.status));
                }
                Some(Hook::Callback(f)) if e.seq == id.0 => f(if c.is_ok() {
                    Ok(())
                } else {
                    Err(c.to_error("host callback"))
                }),
                Some(Hook::Callback(f)) => f(Err(never_ran())),
                _ => {}
            }
        }
    }

    /// The stream is gone (destroyed by the driver, so nothing of it runs any more): releases
    /// every lease and event hold, and runs every callback left with `ECANCELED`.
    pub(crate) fn discard(&mut self, why: &str) {
        while let Some(e) = self.entries.pop_front() {
            if let Some(Hook::Callback(f)) = e.hook {
                f(Err(Error::new(
                    Errno::ECANCELED,
                    "host callback",
                    format!("{} never reached it: {why}", TaskId(e.seq)),
                )));
            }
        }
    }
}

fn never_ran() -> Error {
    Error::new(
        Errno::ECANCELED,
        "host callback",
        "the stream's completions skipped it",
    )
}
