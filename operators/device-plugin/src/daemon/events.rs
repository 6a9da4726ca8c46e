//! Health by the device's event log (READ_EVENTS, ABI 1.5): an event of a code the operator
//! named (`--unhealthy-codes`, `hung_task` by default) makes the device Unhealthy, with the
//! event in words as the reason, until the device is reset or restarted (a `device_reset`
//! or `device_started` event after it, or its log beginning again) or `--unhealthy-hold`
//! has passed since the event (the device's clock), whichever comes first; another event of
//! a named code starts the hold again.
//!
//! Each health check reads the whole log (at most 256 events) and takes what is new
//! ([`Follow`]); the first check takes every event the log holds, so a plugin that restarts
//! within the hold of a hung task still sees it, and older events, past their hold, mark
//! nothing. A plugin that is not an admin of the device sees only the device's own events
//! and its user's clients' (READ_EVENTS' rule).
#![forbid(unsafe_code)]

use std::time::Duration;

use davinci_ops::events::{describe, is_fresh_start, name, Follow};
use davinci_shim::EventBatch;

/// Which events make a device unhealthy, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPolicy {
    /// The codes (none: the event log is not read).
    pub codes: Vec<u32>,
    /// How long after such an event the device stays unhealthy (unless reset first).
    pub hold: Duration,
}

impl EventPolicy {
    /// The codes by name (`hung_task, 9`), for the log.
    pub fn names(&self) -> String {
        if self.codes.is_empty() {
            return "none".into();
        }
        self.codes
            .iter()
            .map(|c| name(*c).map_or_else(|| c.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The event that made a device unhealthy.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Marked {
    /// When it happened (the device clock).
    time_ns: u64,
    /// The reason given while it holds (the same every check, so that it is logged once).
    reason: String,
}

/// One device's log as the health checks follow it.
#[derive(Debug, Default)]
pub(crate) struct EventWatch {
    follow: Follow,
    marked: Option<Marked>,
}

impl EventWatch {
    /// Takes `batch` (a read of the whole log): `Err(reason)` while an event of a code of
    /// `policy` holds the device unhealthy.
    pub(crate) fn verdict(
        &mut self,
        policy: &EventPolicy,
        batch: &EventBatch,
    ) -> Result<(), String> {
        let taken = self.follow.take(batch);
        if taken.restarted {
            // A new log, a new clock: nothing from before holds.
            self.marked = None;
        }
        for e in &taken.events {
            if policy.codes.contains(&e.code) {
                let what = name(e.code).map_or_else(|| format!("code {}", e.code), str::to_string);
                self.marked = Some(Marked {
                    time_ns: e.time_ns,
                    reason: format!(
                        "device event {what} (seq {}): {}; unhealthy until the device is reset \
                         or for {} after it (--unhealthy-hold)",
                        e.seq,
                        describe(e),
                        davinci_units::format_duration(policy.hold)
                    ),
                });
            } else if is_fresh_start(e.code) {
                self.marked = None;
            }
        }
        let hold = u64::try_from(policy.hold.as_nanos()).unwrap_or(u64::MAX);
        match &self.marked {
            Some(m) if batch.now_ns.saturating_sub(m.time_ns) < hold => Err(m.reason.clone()),
            _ => {
                self.marked = None;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use davinci_uapi::DeviceEvent;

    const S: u64 = 1_000_000_000;

    fn ev(seq: u64, code: u32, t: u64) -> DeviceEvent {
        DeviceEvent {
            seq,
            time_ns: t * S,
            code,
            stream: 0x10,
            value: 3,
            ..DeviceEvent::default()
        }
    }

    fn log(events: Vec<DeviceEvent>, now: u64) -> EventBatch {
        let cursor = events.last().map_or(0, |e| e.seq + 1);
        EventBatch {
            events,
            cursor,
            lost: 0,
            now_ns: now * S,
        }
    }

    fn policy(codes: &[u32]) -> EventPolicy {
        EventPolicy {
            codes: codes.to_vec(),
            hold: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_named_code_marks_the_device_and_others_do_not() {
        let p = policy(&[2]);
        let mut w = EventWatch::default();
        // A stopped stream (code 1) is not named.
        let mut events = vec![ev(0, 4, 0), ev(1, 1, 5)];
        assert_eq!(w.verdict(&p, &log(events.clone(), 10)), Ok(()));
        events.push(ev(2, 2, 11));
        let e = w.verdict(&p, &log(events.clone(), 12)).unwrap_err();
        assert!(
            e.starts_with("device event hung_task (seq 2): stream 0x10 holds a task"),
            "{e}"
        );
        assert!(e.ends_with("for 1m after it (--unhealthy-hold)"), "{e}");
        // The same reason at every check while it holds.
        assert_eq!(w.verdict(&p, &log(events.clone(), 70)), Err(e));
        // The hold passed.
        assert_eq!(w.verdict(&p, &log(events, 71)), Ok(()));
    }

    #[test]
    fn a_reset_or_a_restart_ends_it_and_old_events_mark_nothing() {
        let p = policy(&[2, 7]);
        let mut w = EventWatch::default();
        let mut events = vec![ev(0, 4, 0), ev(1, 7, 5), ev(2, 2, 5)];
        assert!(w.verdict(&p, &log(events.clone(), 6)).is_err());
        events.push(ev(3, 3, 7));
        assert_eq!(w.verdict(&p, &log(events, 8)), Ok(()), "reset");
        // The device restarted (a new log) after a hung task.
        let mut w = EventWatch::default();
        assert!(w
            .verdict(&p, &log(vec![ev(0, 4, 0), ev(1, 2, 1)], 2))
            .is_err());
        assert_eq!(w.verdict(&p, &log(vec![ev(0, 4, 0)], 1)), Ok(()));
        // A first check after the hold: the old hung task marks nothing.
        let mut w = EventWatch::default();
        assert_eq!(w.verdict(&p, &log(vec![ev(0, 2, 1)], 100)), Ok(()));
        // No codes named: nothing marks.
        let mut w = EventWatch::default();
        assert_eq!(w.verdict(&policy(&[]), &log(vec![ev(0, 2, 1)], 2)), Ok(()));
        assert_eq!(policy(&[2, 99]).names(), "hung_task, 99");
        assert_eq!(policy(&[]).names(), "none");
    }
}
