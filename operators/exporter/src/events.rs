//! The devices' event logs (READ_EVENTS, ABI 1.5) as counters: each scrape reads a device's
//! whole log (at most 256 events) and counts, per code, the events it had not counted yet
//! ([`davinci_ops::events::Follow`] keeps the place per device, across the device's
//! restarts); events the log dropped before a scrape read them are counted apart. The
//! counts are the exporter's: they start at its first read of the device (with every event
//! the log holds then) and only grow while it runs, a device restart included, so
//! `increase()` over them never sees a reset a restart did not cause.
//!
//! Who sees what: READ_EVENTS gives an admin every event and anyone else the device's own
//! events and those of its own user's clients, so an exporter that is not an admin of the
//! device counts only those.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use davinci_ops::events::Follow;
use davinci_shim::EventBatch;
use davinci_uapi::DEVICE_EVENT_CODES;

/// Most codes this build does not know (a newer driver's) counted per device; events of
/// further unknown codes are not counted.
pub const MAX_UNKNOWN_CODES: usize = 32;

/// What the exporter has counted of a device's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventCounts {
    /// Events counted per code: every code this build knows (0 when never seen), and the
    /// unknown ones seen.
    pub by_code: BTreeMap<u32, u64>,
    /// Events the log dropped before a read counted them.
    pub lost: u64,
}

impl Default for EventCounts {
    fn default() -> EventCounts {
        EventCounts {
            by_code: DEVICE_EVENT_CODES.iter().map(|(c, _, _)| (*c, 0)).collect(),
            lost: 0,
        }
    }
}

/// One device's log as the exporter follows it.
#[derive(Debug, Default)]
pub struct LogMemory {
    follow: Follow,
    counts: EventCounts,
}

impl LogMemory {
    /// Counts what is new in `batch` (a read of the whole log); the counts after it.
    pub fn take(&mut self, batch: &EventBatch) -> EventCounts {
        let t = self.follow.take(batch);
        let c = &mut self.counts;
        c.lost = c.lost.saturating_add(t.lost);
        let known = DEVICE_EVENT_CODES.len();
        for e in &t.events {
            if !c.by_code.contains_key(&e.code) && c.by_code.len() >= known + MAX_UNKNOWN_CODES {
                continue;
            }
            let n = c.by_code.entry(e.code).or_insert(0);
            *n = n.saturating_add(1);
        }
        c.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use davinci_uapi::DeviceEvent;

    fn ev(seq: u64, code: u32) -> DeviceEvent {
        DeviceEvent {
            seq,
            time_ns: seq + 1,
            code,
            ..DeviceEvent::default()
        }
    }

    fn log(events: Vec<DeviceEvent>, oldest: u64, now_ns: u64) -> EventBatch {
        let cursor = events.last().map_or(oldest, |e| e.seq + 1);
        EventBatch {
            events,
            cursor,
            lost: oldest,
            now_ns,
        }
    }

    #[test]
    fn each_event_is_counted_once_and_every_code_is_there() {
        let mut m = LogMemory::default();
        let c = m.take(&log(vec![ev(0, 4), ev(1, 2)], 0, 10));
        assert_eq!(c.by_code.len(), 7);
        assert_eq!((c.by_code[&4], c.by_code[&2], c.by_code[&1]), (1, 1, 0));
        // The same log again: nothing new.
        assert_eq!(m.take(&log(vec![ev(0, 4), ev(1, 2)], 0, 11)), c);
        // New events, some dropped before this read.
        let c = m.take(&log(vec![ev(5, 2), ev(6, 1)], 5, 12));
        assert_eq!((c.by_code[&2], c.by_code[&1], c.lost), (2, 1, 3));
    }

    #[test]
    fn counts_grow_across_a_device_restart_and_unknown_codes_are_bounded() {
        let mut m = LogMemory::default();
        m.take(&log(vec![ev(0, 4), ev(1, 3), ev(2, 2)], 0, 100));
        // Restarted: its new log (seq from 0 again) counts on top.
        let c = m.take(&log(vec![ev(0, 4)], 0, 5));
        assert_eq!((c.by_code[&4], c.by_code[&3], c.by_code[&2]), (2, 1, 1));
        let many: Vec<DeviceEvent> = (0..100).map(|i| ev(1 + i, 1000 + i as u32)).collect();
        let c = m.take(&log(many, 0, 6));
        assert_eq!(c.by_code.len(), 7 + MAX_UNKNOWN_CODES);
        assert_eq!(c.by_code[&1000], 1);
        assert!(!c.by_code.contains_key(&1099));
    }
}
