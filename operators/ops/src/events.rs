//! The device's event log (READ_EVENTS, ABI 1.5) as the operators' tools show it: each
//! code's name, a sentence for an event (what `davinci-smi events` prints, what the device
//! plugin gives as the reason a device is unhealthy), the codes an operator names on a
//! command line (`hung_task`, `2`), and [`Follow`], a reader's place in the log across
//! reads, device restarts included.
//!
//! Every tool reads the whole log each time (`read_events(0)`: at most
//! `DAVINCI_DEVICE_EVENTS_MAX` events) and lets [`Follow`] pick what is new: a log that
//! begins again (a daemon or module restarted) has its `seq` from 0 again, which a cursor
//! beyond its end cannot see.
#![forbid(unsafe_code)]

use davinci_shim::{DeviceEvent, EventBatch};
use davinci_uapi::{
    Errno, CONST_GROUPS, DEVICE_EVENT_CODES, DEVICE_EVENT_DEVICE_RESET,
    DEVICE_EVENT_DEVICE_STARTED, DEVICE_EVENT_HUNG_TASK, DEVICE_EVENT_IMPORT_REVOKED,
    DEVICE_EVENT_INJECTED_FAULT, DEVICE_EVENT_QUOTA_STORM, DEVICE_EVENT_STREAM_STOPPED,
};

/// The name of `code` (`"hung_task"`), `None` for a code this build does not know (a newer
/// driver's: shown by its number).
pub fn name(code: u32) -> Option<&'static str> {
    davinci_uapi::device_event_name(code)
}

/// What `code` means in general (`"a stream holds a task it does not complete"`).
pub fn meaning(code: u32) -> Option<&'static str> {
    DEVICE_EVENT_CODES
        .iter()
        .find(|(c, _, _)| *c == code)
        .map(|(_, _, m)| *m)
}

/// A code as an operator names it: its name in any case (`hung_task`, `HUNG_TASK`) or its
/// number (any, so that a newer driver's codes can be named too).
pub fn parse_code(s: &str) -> Result<u32, String> {
    let t = s.trim();
    if let Ok(n) = t.parse::<u32>() {
        if n == 0 {
            return Err("0 is not an event code (codes start at 1)".into());
        }
        return Ok(n);
    }
    davinci_uapi::device_event_code(&t.to_ascii_lowercase()).ok_or_else(|| {
        let names: Vec<&str> = DEVICE_EVENT_CODES.iter().map(|(_, n, _)| *n).collect();
        format!(
            "{t:?} is not an event code: give a number or one of {}",
            names.join(", ")
        )
    })
}

/// A comma-separated list of codes ([`parse_code`] each), each once, in the order given;
/// `""` or `none` is the empty list.
pub fn parse_code_list(s: &str) -> Result<Vec<u32>, String> {
    let t = s.trim();
    if t.is_empty() || t.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for part in t.split(',') {
        let c = parse_code(part)?;
        if !out.contains(&c) {
            out.push(c);
        }
    }
    Ok(out)
}

/// The lowercase name of `value` in the header's constant group `prefix`
/// (`DAVINCI_FAULT_PAST_END` → `past_end`).
fn const_name(prefix: &str, value: u32) -> Option<String> {
    CONST_GROUPS
        .iter()
        .flat_map(|g| g.iter())
        .find(|g| g.c_prefix == prefix)?
        .items
        .iter()
        .find(|(_, v, _)| *v == u64::from(value))
        .map(|(n, _, _)| n.to_ascii_lowercase())
}

/// An errno by its name (`EIO`), else its number.
fn errno_text(code: u64) -> String {
    i32::try_from(code)
        .ok()
        .and_then(Errno::from_code)
        .map_or_else(|| format!("errno {code}"), |e| e.name().to_string())
}

/// One sentence saying what happened, from the event's `stream`, `detail` and `value` as
/// docs/abi.md's "Device events" table gives them.
pub fn describe(e: &DeviceEvent) -> String {
    let stream = format!("stream {:#x}", e.stream);
    match e.code {
        DEVICE_EVENT_STREAM_STOPPED => {
            let index = e.value & 0xffff_ffff;
            let kind = (e.value >> 32) as u32;
            let mut s = format!(
                "{stream} stopped in the error state: {} at command-ring index {index}",
                errno_text(e.detail.into())
            );
            if kind != 0 {
                let k = const_name("DAVINCI_FAULT_", kind).unwrap_or_else(|| kind.to_string());
                s += &format!(" (fault {k})");
            }
            s
        }
        DEVICE_EVENT_HUNG_TASK => format!(
            "{stream} holds a task it does not complete (command-ring index {}); nothing \
             after it runs",
            e.value
        ),
        DEVICE_EVENT_DEVICE_RESET => format!(
            "the device was reset: {} running stream{} stopped with ECANCELED",
            e.detail,
            if e.detail == 1 { "" } else { "s" }
        ),
        DEVICE_EVENT_DEVICE_STARTED => "the device started (its log begins here)".to_string(),
        DEVICE_EVENT_QUOTA_STORM => format!(
            "{} requests refused by the client's quotas within a second (the last: {})",
            e.value,
            const_name("DAVINCI_QUOTA_KIND_", e.detail).unwrap_or_else(|| e.detail.to_string())
        ),
        DEVICE_EVENT_IMPORT_REVOKED => {
            let what = match e.detail {
                1 => "memory".to_string(),
                2 => "event".to_string(),
                d => format!("object of kind {d}"),
            };
            format!(
                "the imported {what} {:#x} was revoked (its exporter freed, unexported or \
                 closed it)",
                e.value
            )
        }
        DEVICE_EVENT_INJECTED_FAULT => match e.detail {
            1 => format!(
                "an injected error-at fired on {stream}: {}",
                errno_text(e.value)
            ),
            2 => format!("an injected hang-at fired on {stream}"),
            3 => format!("an injected stop-at fired on {stream}"),
            d => format!("an injected fault (kind {d}) fired on {stream}"),
        },
        c => format!(
            "event code {c} (stream {:#x}, detail {}, value {})",
            e.stream, e.detail, e.value
        ),
    }
}

/// What [`Follow::take`] found new in a read of the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    /// The events not taken before, oldest first.
    pub events: Vec<DeviceEvent>,
    /// Events the log dropped before they could be taken (it holds the last 256).
    pub lost: u64,
    /// The log began again since the last read (the device restarted): `events` are the new
    /// log's from its start.
    pub restarted: bool,
}

/// A reader's place in a device's event log, across reads of the whole log
/// (`read_events(0)`). A log begins again when its device restarts (`seq` from 0 again, the
/// device clock from 0 on a software device); that is seen by its end (`cursor`) falling
/// behind the place, its clock (`now_ns`) going back, or its first event (seq 0,
/// `device_started`) having another time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Follow {
    /// The first `seq` not taken yet.
    next: u64,
    /// Whether a read was taken (only then can a restart be told).
    read: bool,
    /// The device clock at the last read.
    now_ns: u64,
    /// The time of the log's first event (seq 0), when one was seen.
    first_ns: Option<u64>,
}

impl Follow {
    /// From the oldest event the log holds.
    pub fn from_start() -> Follow {
        Follow::default()
    }

    /// From `seq` on (`davinci-smi events --since SEQ`).
    pub fn from_seq(seq: u64) -> Follow {
        Follow {
            next: seq,
            ..Follow::default()
        }
    }

    /// The first `seq` not taken yet.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// The events of `batch` (a read of the whole log, `read_events(0)`) not taken yet.
    pub fn take(&mut self, batch: &EventBatch) -> Taken {
        let first = batch.events.iter().find(|e| e.seq == 0).map(|e| e.time_ns);
        let restarted = self.read
            && (batch.cursor < self.next
                || batch.now_ns < self.now_ns
                || matches!((self.first_ns, first), (Some(a), Some(b)) if a != b));
        if restarted {
            self.next = 0;
            self.first_ns = None;
        }
        // Read from 0, `lost` is the seq of the oldest event held.
        let lost = batch.lost.saturating_sub(self.next);
        let events: Vec<DeviceEvent> = batch
            .events
            .iter()
            .filter(|e| e.seq >= self.next)
            .copied()
            .collect();
        self.next = self.next.max(batch.cursor);
        self.now_ns = batch.now_ns;
        self.read = true;
        if first.is_some() {
            self.first_ns = first;
        }
        Taken {
            events,
            lost,
            restarted,
        }
    }
}

/// Whether `code` says the device began afresh (reset or started): what clears a device the
/// device plugin marked unhealthy by an earlier event.
pub fn is_fresh_start(code: u32) -> bool {
    code == DEVICE_EVENT_DEVICE_RESET || code == DEVICE_EVENT_DEVICE_STARTED
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, code: u32) -> DeviceEvent {
        DeviceEvent {
            seq,
            time_ns: 1000 + seq,
            code,
            ..DeviceEvent::default()
        }
    }

    fn batch(events: Vec<DeviceEvent>, oldest: u64, next: u64, now_ns: u64) -> EventBatch {
        EventBatch {
            events,
            cursor: next,
            lost: oldest,
            now_ns,
        }
    }

    #[test]
    fn codes_by_name_or_number() {
        assert_eq!(parse_code("hung_task"), Ok(2));
        assert_eq!(parse_code(" HUNG_TASK "), Ok(2));
        assert_eq!(parse_code("7"), Ok(7));
        assert_eq!(parse_code("99"), Ok(99), "a newer driver's code");
        assert!(parse_code("0").unwrap_err().contains("start at 1"));
        let e = parse_code("hung").unwrap_err();
        assert!(e.contains("stream_stopped, hung_task, device_reset"), "{e}");
        assert_eq!(parse_code_list("hung_task,3,hung_task"), Ok(vec![2, 3]));
        assert_eq!(parse_code_list(""), Ok(vec![]));
        assert_eq!(parse_code_list("none"), Ok(vec![]));
        assert!(parse_code_list("hung_task,,3").is_err());
        assert_eq!(name(4), Some("device_started"));
        assert_eq!(name(1000), None);
        assert_eq!(meaning(3), Some("the device was reset"));
    }

    #[test]
    fn every_code_is_described_from_its_fields() {
        let mut e = ev(0, DEVICE_EVENT_STREAM_STOPPED);
        e.stream = 0x12;
        e.detail = Errno::EFAULT.code() as u32;
        e.value = (2u64 << 32) | 17;
        assert_eq!(
            describe(&e),
            "stream 0x12 stopped in the error state: EFAULT at command-ring index 17 \
             (fault past_end)"
        );
        e.value = 5;
        e.detail = 999;
        assert_eq!(
            describe(&e),
            "stream 0x12 stopped in the error state: errno 999 at command-ring index 5"
        );
        e.code = DEVICE_EVENT_HUNG_TASK;
        e.value = 4;
        assert!(describe(&e)
            .starts_with("stream 0x12 holds a task it does not complete (command-ring index 4)"));
        e.code = DEVICE_EVENT_DEVICE_RESET;
        e.detail = 1;
        assert_eq!(
            describe(&e),
            "the device was reset: 1 running stream stopped with ECANCELED"
        );
        e.code = DEVICE_EVENT_DEVICE_STARTED;
        assert!(describe(&e).contains("started"));
        e.code = DEVICE_EVENT_QUOTA_STORM;
        e.detail = davinci_uapi::QUOTA_KIND_STREAMS;
        e.value = 20;
        assert_eq!(
            describe(&e),
            "20 requests refused by the client's quotas within a second (the last: streams)"
        );
        e.code = DEVICE_EVENT_IMPORT_REVOKED;
        e.detail = 2;
        e.value = 0x30;
        assert!(describe(&e).starts_with("the imported event 0x30 was revoked"));
        e.code = DEVICE_EVENT_INJECTED_FAULT;
        e.detail = 1;
        e.value = Errno::EIO.code() as u64;
        assert_eq!(
            describe(&e),
            "an injected error-at fired on stream 0x12: EIO"
        );
        e.detail = 2;
        assert_eq!(describe(&e), "an injected hang-at fired on stream 0x12");
        e.code = 42;
        assert_eq!(
            describe(&e),
            "event code 42 (stream 0x12, detail 2, value 5)"
        );
    }

    #[test]
    fn follow_takes_what_is_new_and_counts_what_the_log_dropped() {
        let mut f = Follow::from_start();
        let t = f.take(&batch(vec![ev(0, 4), ev(1, 1)], 0, 2, 10));
        assert_eq!(t.events.len(), 2);
        assert_eq!((t.lost, t.restarted), (0, false));
        assert_eq!(f.next(), 2);
        // Nothing new.
        let t = f.take(&batch(vec![ev(0, 4), ev(1, 1)], 0, 2, 11));
        assert!(t.events.is_empty());
        // The log wrapped past us: events 2..5 are gone, 5 and 6 are new.
        let t = f.take(&batch(vec![ev(5, 1), ev(6, 2)], 5, 7, 12));
        assert_eq!(t.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [5, 6]);
        assert_eq!((t.lost, t.restarted), (3, false));
        // A non-admin's gaps (other users' events) are not losses.
        let t = f.take(&batch(vec![ev(5, 1), ev(6, 2), ev(9, 3)], 5, 10, 13));
        assert_eq!(t.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [9]);
        assert_eq!(t.lost, 0);
    }

    #[test]
    fn follow_sees_a_restarted_device() {
        // The log's end fell behind us.
        let mut f = Follow::from_start();
        f.take(&batch(vec![ev(0, 4), ev(1, 2), ev(2, 3)], 0, 3, 100));
        let t = f.take(&batch(vec![ev(0, 4)], 0, 1, 500));
        assert!(t.restarted);
        assert_eq!(t.events.len(), 1);
        assert_eq!(f.next(), 1);
        // The clock went back, though the new log is already longer.
        let t = f.take(&batch((0..5).map(|s| ev(s, 1)).collect(), 0, 5, 50));
        assert!(t.restarted);
        assert_eq!(t.events.len(), 5);
        // Its first event has another time.
        let mut other = ev(0, 4);
        other.time_ns = 7;
        let t = f.take(&batch(vec![other, ev(1, 1), ev(5, 1)], 0, 6, 60));
        assert!(t.restarted);
        assert_eq!(t.events.len(), 3);
        // --since: from a seq on; the first read is no restart.
        let mut f = Follow::from_seq(1);
        let t = f.take(&batch(vec![ev(0, 4), ev(1, 1)], 0, 2, 10));
        assert_eq!(t.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [1]);
        assert!(!t.restarted);
        assert!(is_fresh_start(3) && is_fresh_start(4) && !is_fresh_start(2));
    }
}
