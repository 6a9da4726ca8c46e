//! The daemon's audit log, rate-limited: on each device, each kind of record ([`Record`])
//! from each uid may write a burst of [`AUDIT_BURST`] lines, then one per
//! [`AUDIT_INTERVAL`]; what is held back is counted, and the next line that kind and uid
//! writes is preceded by one saying "N similar records suppressed" (`suppressed = N`, with
//! `record` and `uid`). When the daemon stops, every count still pending is written the same
//! way, so the lines plus the suppressed counts always add up to the records.
//!
//! Not every line goes through here: an admin's accepted SET_DEVICE_SHARE is always logged
//! (it is rare and it is what an audit is for), and control opens log at `debug` only.
//! Without the limit a tenant refused SET_DEVICE_SHARE in a loop grew the log by 37 MiB/s,
//! and open/close cycles by 457 KiB/s (issue 21).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tracing::{info, warn};

/// Lines one kind of record from one uid may write on one device before the limit applies.
pub const AUDIT_BURST: u32 = 10;
/// Once a burst is spent, one more line per this long (per device, kind of record and uid).
pub const AUDIT_INTERVAL: Duration = Duration::from_secs(1);
/// Above this many (kind, uid) entries on a device, idle ones (nothing pending, burst
/// refilled) are dropped, so the table holds only who logged recently.
const KEEP_ENTRIES: usize = 1024;

/// A kind of audit record that is rate-limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Record {
    /// A SET_DEVICE_SHARE refused (not an admin, or it would strand clients).
    ShareRefused,
    /// A client open.
    ClientOpened,
    /// An open refused (exclusive mode, no room).
    OpenRefused,
    /// A client open closed.
    ClientClosed,
}

impl Record {
    /// Its name in the `record` field of a "suppressed" line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Record::ShareRefused => "share-refused",
            Record::ClientOpened => "client-opened",
            Record::OpenRefused => "open-refused",
            Record::ClientClosed => "client-closed",
        }
    }

    /// Whether its lines are warnings (else `info`).
    fn warns(self) -> bool {
        self == Record::ShareRefused
    }
}

/// One (kind, uid)'s budget: a token bucket of `burst` lines refilled one per interval.
#[derive(Debug)]
struct Bucket {
    tokens: u32,
    /// When the next token started to accrue.
    since: Instant,
    /// Records held back since the last line written.
    suppressed: u64,
}

/// The rate limit itself, over a clock the caller passes (`now`), so it is tested without
/// sleeping.
#[derive(Debug)]
pub(crate) struct Limiter {
    burst: u32,
    interval: Duration,
    buckets: HashMap<(Record, u32), Bucket>,
    /// False once drained (the daemon is stopping): everything is written from then on.
    limiting: bool,
}

impl Limiter {
    /// A limit of `burst` lines, then one per `interval` (at least a nanosecond).
    pub(crate) fn new(burst: u32, interval: Duration) -> Limiter {
        Limiter {
            burst: burst.max(1),
            interval: interval.max(Duration::from_nanos(1)),
            buckets: HashMap::new(),
            limiting: true,
        }
    }

    /// One record of `kind` from `uid` at `now`: `Some(n)` = write its line, after one
    /// saying `n` similar records were suppressed if `n > 0`; `None` = suppressed (counted).
    pub(crate) fn admit(&mut self, kind: Record, uid: u32, now: Instant) -> Option<u64> {
        if !self.limiting {
            return Some(0);
        }
        if self.buckets.len() >= KEEP_ENTRIES {
            self.drop_idle(now);
        }
        let (burst, interval) = (self.burst, self.interval);
        let b = self.buckets.entry((kind, uid)).or_insert(Bucket {
            tokens: burst,
            since: now,
            suppressed: 0,
        });
        refill(b, burst, interval, now);
        if b.tokens == 0 {
            b.suppressed = b.suppressed.saturating_add(1);
            return None;
        }
        if b.tokens == burst {
            // A full bucket accrues nothing: the interval starts with the first token spent.
            b.since = now;
        }
        b.tokens -= 1;
        Some(std::mem::take(&mut b.suppressed))
    }

    /// Every count still pending, as (kind, uid, count); the limit is lifted from now on
    /// (the daemon is stopping: the lines its last closes write are few and bounded).
    pub(crate) fn drain(&mut self) -> Vec<(Record, u32, u64)> {
        self.limiting = false;
        let mut out: Vec<_> = self
            .buckets
            .drain()
            .filter(|(_, b)| b.suppressed > 0)
            .map(|((kind, uid), b)| (kind, uid, b.suppressed))
            .collect();
        out.sort_by_key(|&(kind, uid, _)| (kind.name(), uid));
        out
    }

    fn drop_idle(&mut self, now: Instant) {
        let (burst, interval) = (self.burst, self.interval);
        self.buckets.retain(|_, b| {
            refill(b, burst, interval, now);
            b.suppressed > 0 || b.tokens < burst
        });
    }
}

/// Adds the tokens accrued since `b.since` (whole intervals; the rest carries over).
fn refill(b: &mut Bucket, burst: u32, interval: Duration, now: Instant) {
    if b.tokens >= burst {
        return;
    }
    let elapsed = now.saturating_duration_since(b.since);
    let n = elapsed.as_nanos() / interval.as_nanos();
    let missing = burst - b.tokens;
    if n >= u128::from(missing) {
        b.tokens = burst;
        b.since = now;
    } else if n > 0 {
        // n < missing <= u32::MAX.
        let n = n as u32;
        b.tokens += n;
        b.since += interval * n;
    }
}

/// One device's audit log: [`Limiter`] on the real clock, and the "suppressed" lines.
#[derive(Debug)]
pub(crate) struct AuditLog {
    device: String,
    limiter: Mutex<Limiter>,
}

impl AuditLog {
    /// The audit log of device `device` (`davinciN`), with the daemon's limit.
    pub(crate) fn new(device: String) -> AuditLog {
        AuditLog {
            device,
            limiter: Mutex::new(Limiter::new(AUDIT_BURST, AUDIT_INTERVAL)),
        }
    }

    fn limiter(&self) -> MutexGuard<'_, Limiter> {
        self.limiter.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One record of `kind` from `uid`: `write` logs its line unless the limit suppresses
    /// it; a line saying how many similar records were suppressed goes first if any were.
    pub(crate) fn record(&self, kind: Record, uid: u32, write: impl FnOnce()) {
        let verdict = self.limiter().admit(kind, uid, Instant::now());
        if let Some(n) = verdict {
            if n > 0 {
                self.suppressed_line(kind, uid, n);
            }
            write();
        }
    }

    /// Writes every count still pending and lifts the limit (the daemon is stopping).
    pub(crate) fn flush(&self) {
        let pending = self.limiter().drain();
        for (kind, uid, n) in pending {
            self.suppressed_line(kind, uid, n);
        }
    }

    fn suppressed_line(&self, kind: Record, uid: u32, n: u64) {
        let (device, record) = (&self.device, kind.name());
        if kind.warns() {
            warn!(device = %device, record = %record, uid, suppressed = n, "{n} similar records suppressed");
        } else {
            info!(device = %device, record = %record, uid, suppressed = n, "{n} similar records suppressed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// `n` records of `kind` from `uid` at `at`: how many were written, and the suppressed
    /// counts their lines carried.
    fn send(l: &mut Limiter, kind: Record, uid: u32, at: Instant, n: u32) -> (u32, u64) {
        let (mut written, mut carried) = (0, 0);
        for _ in 0..n {
            if let Some(s) = l.admit(kind, uid, at) {
                written += 1;
                carried += s;
            }
        }
        (written, carried)
    }

    #[test]
    fn a_burst_then_one_line_per_interval_and_the_next_line_carries_the_count() {
        let t0 = Instant::now();
        let mut l = Limiter::new(10, S);
        let share = Record::ShareRefused;
        // 1000 at once: the burst of 10 is written, 990 are counted.
        assert_eq!(send(&mut l, share, 1000, t0, 1000), (10, 0));
        // Still within the first interval: nothing more.
        assert_eq!(l.admit(share, 1000, t0 + S / 2), None);
        // One interval later one line, saying 991 were suppressed; then nothing again.
        assert_eq!(l.admit(share, 1000, t0 + S), Some(991));
        assert_eq!(l.admit(share, 1000, t0 + S), None);
        assert_eq!(l.admit(share, 1000, t0 + S * 3 / 2), None);
        // Two more intervals: two lines' worth (the first carries the two suppressed).
        assert_eq!(send(&mut l, share, 1000, t0 + S * 3, 5), (2, 2));
        // A long quiet spell refills the burst, never more.
        assert_eq!(send(&mut l, share, 1000, t0 + S * 100, 50), (10, 3));
        // Every record is a line or in a count: 10 + 1 + 2 + 10 lines, and what they
        // carried plus what is pending.
        let pending: u64 = l.drain().iter().map(|p| p.2).sum();
        assert_eq!(pending, 40);
        assert_eq!(23 + 991 + 2 + 3 + pending, 1000 + 1 + 1 + 1 + 1 + 5 + 50);
    }

    #[test]
    fn each_kind_and_uid_has_its_own_budget() {
        let t0 = Instant::now();
        let mut l = Limiter::new(10, S);
        assert_eq!(send(&mut l, Record::ShareRefused, 1, t0, 20), (10, 0));
        // Another uid, another kind: untouched by the first's flood.
        assert_eq!(send(&mut l, Record::ShareRefused, 2, t0, 3), (3, 0));
        assert_eq!(send(&mut l, Record::ClientOpened, 1, t0, 12), (10, 0));
        assert_eq!(send(&mut l, Record::ClientClosed, 1, t0, 12), (10, 0));
        assert_eq!(send(&mut l, Record::OpenRefused, 1, t0, 1), (1, 0));
        assert_eq!(
            l.drain(),
            vec![
                (Record::ClientClosed, 1, 2),
                (Record::ClientOpened, 1, 2),
                (Record::ShareRefused, 1, 10),
            ]
        );
    }

    #[test]
    fn a_partial_interval_carries_over_and_a_full_bucket_banks_nothing() {
        let t0 = Instant::now();
        let mut l = Limiter::new(2, S);
        let k = Record::ClientOpened;
        // Full for a long time before the first record: still a burst of 2, not more.
        assert_eq!(send(&mut l, k, 7, t0 + S * 50, 3), (2, 0));
        // 1.5 intervals after the burst began: one token, the half carries over...
        assert_eq!(l.admit(k, 7, t0 + S * 50 + S * 3 / 2), Some(1));
        // ...so the next comes at 2 intervals, not 2.5.
        assert_eq!(l.admit(k, 7, t0 + S * 52 - Duration::from_nanos(1)), None);
        assert_eq!(l.admit(k, 7, t0 + S * 52), Some(1));
        // A clock that goes backwards (it cannot, but) gives nothing and takes nothing.
        assert_eq!(l.admit(k, 7, t0), None);
    }

    #[test]
    fn drained_counts_lift_the_limit_and_idle_entries_are_dropped() {
        let t0 = Instant::now();
        let mut l = Limiter::new(1, S);
        // More uids than the table keeps, each with one line: the idle ones go once their
        // burst is back, the ones with something pending stay.
        assert_eq!(send(&mut l, Record::ShareRefused, 0, t0, 3), (1, 0));
        for uid in 1..=KEEP_ENTRIES as u32 {
            l.admit(Record::ClientOpened, uid, t0);
        }
        assert_eq!(l.buckets.len(), KEEP_ENTRIES + 1);
        l.admit(Record::ClientOpened, 99_999, t0 + S * 2);
        assert_eq!(l.buckets.len(), 2, "{:?}", l.buckets.keys());
        assert_eq!(l.drain(), vec![(Record::ShareRefused, 0, 2)]);
        // Stopping: everything is written.
        assert_eq!(send(&mut l, Record::ShareRefused, 0, t0, 100), (100, 0));
        assert!(l.drain().is_empty());
    }
}
