// SPDX-License-Identifier: GPL-2.0

//! What an open keeps about its WAIT_EVENTs, on either kind of node: how many are blocked
//! (driver-core's bound, [`BlockedWaits`]: one more is `EBUSY`), and the deadlines of those a
//! signal interrupted ([`RestartNotes`]), so that the call the kernel restarts after the
//! handler (`SA_RESTART`) keeps its first deadline instead of starting its whole relative
//! timeout again.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::davinci_driver_core::BlockedWaits;
use crate::sys;

/// Interrupted waits remembered per open (more at once: the oldest expired one is replaced,
/// else the new one is not remembered and restarts with its whole timeout).
const NOTES: usize = 8;

/// A key being written into a slot.
const CLAIMED: u64 = u64::MAX;

/// An open's interrupted WAIT_EVENTs: for each, a key (the thread, the argument's address
/// and its input fields, hashed) and its deadline. Lock-free: a slot is claimed by a
/// compare-and-swap of its key, and only the thread that made a key can take it back (its
/// thread id is in it), so two threads never contend for one note.
pub(crate) struct RestartNotes {
    keys: [AtomicU64; NOTES],
    deadlines: [AtomicU64; NOTES],
}

impl RestartNotes {
    const fn new() -> Self {
        RestartNotes {
            keys: [const { AtomicU64::new(0) }; NOTES],
            deadlines: [const { AtomicU64::new(0) }; NOTES],
        }
    }

    /// Remembers `deadline` (monotonic ns) for the wait `key` that a signal interrupted.
    fn note(&self, key: u64, deadline: u64, now: u64) {
        for (k, d) in self.keys.iter().zip(self.deadlines.iter()) {
            let cur = k.load(Ordering::Acquire);
            // A free slot, or one whose deadline passed (its call, if it ever comes back,
            // times out at once either way: it gets a fresh timeout instead).
            let free = cur == 0 || (cur != CLAIMED && d.load(Ordering::Acquire) <= now);
            if free
                && k.compare_exchange(cur, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                d.store(deadline, Ordering::Release);
                k.store(key, Ordering::Release);
                return;
            }
        }
    }

    /// The deadline remembered for `key`, forgotten now (whether or not the call blocks).
    fn take(&self, key: u64) -> Option<u64> {
        for (k, d) in self.keys.iter().zip(self.deadlines.iter()) {
            if k.load(Ordering::Acquire) == key {
                let deadline = d.load(Ordering::Acquire);
                if k.compare_exchange(key, 0, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Some(deadline);
                }
            }
        }
        None
    }
}

/// What an open keeps about its WAIT_EVENTs.
pub(crate) struct OpenWaits {
    /// Its blocked waits, bounded (driver-core's rule).
    pub(crate) blocked: BlockedWaits,
    notes: RestartNotes,
}

impl OpenWaits {
    pub(crate) const fn new() -> Self {
        OpenWaits {
            blocked: BlockedWaits::new(),
            notes: RestartNotes::new(),
        }
    }

    /// The deadline of a WAIT_EVENT with argument `arg` (its bytes as copied in) at user
    /// address `addr`, `timeout_ns` from now: the first call's deadline if this is the same
    /// thread asking again what a signal interrupted (the kernel's restart under
    /// `SA_RESTART`, or a loop that retries on `EINTR` with the same argument), else `now +
    /// timeout_ns`. Returns the key to [`interrupted`](Self::interrupted) with.
    pub(crate) fn deadline(&self, addr: u64, arg: &[u8], timeout_ns: u64, now: u64) -> (u64, u64) {
        let key = key_of(addr, arg);
        let deadline = self
            .notes
            .take(key)
            .unwrap_or_else(|| now.saturating_add(timeout_ns));
        (key, deadline)
    }

    /// A signal interrupted the wait `key` (deadline `deadline`): the call restarted by the
    /// kernel finds its deadline again. A wait without a deadline needs no note.
    pub(crate) fn interrupted(&self, key: u64, deadline: u64) {
        if deadline != u64::MAX {
            self.notes.note(key, deadline, sys::now_ns());
        }
    }
}

/// The key of a wait: the calling thread, the argument's address and its input fields (the
/// first 24 bytes: kind, handle, value, timeout; `current` and `status` are outputs), FNV-1a
/// hashed, never 0 or [`CLAIMED`].
fn key_of(addr: u64, arg: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    for b in u64::from(sys::current_pid()).to_le_bytes() {
        eat(b);
    }
    for b in addr.to_le_bytes() {
        eat(b);
    }
    for &b in arg.iter().take(24) {
        eat(b);
    }
    match h {
        0 | CLAIMED => 1,
        h => h,
    }
}
