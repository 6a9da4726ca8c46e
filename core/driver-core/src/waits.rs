//! The bound on blocking waits: how many WAIT_EVENTs one open may have sleeping in its host
//! at once. A host that sleeps for a blocked wait (the kernel module's software and PCI
//! devices, a daemon's wait thread) holds each one somewhere (a task, a queue entry) and
//! wakes it when what it waits for may have changed; without a bound, one open could park
//! any number of them, and every completion of its streams would wake them all. Every host
//! applies this one rule: a wait that must block while its open already has
//! [`MAX_BLOCKED_WAITS_PER_CLIENT`] blocked is refused with `EBUSY` (docs/abi.md,
//! WAIT_EVENT), and the caller retries once one of its waits ended.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, Result};

/// Most blocking WAIT_EVENTs one open may have in flight at once; one more is `EBUSY`.
pub const MAX_BLOCKED_WAITS_PER_CLIENT: u32 = 32;

/// One open's blocked waits in flight, bounded by [`MAX_BLOCKED_WAITS_PER_CLIENT`]. `const`
/// and lock-free, so a host can keep it in its per-open state and count from any thread.
#[derive(Debug, Default)]
pub struct BlockedWaits(AtomicU32);

impl BlockedWaits {
    /// None in flight.
    pub const fn new() -> Self {
        BlockedWaits(AtomicU32::new(0))
    }

    /// A wait that must block begins: counted until the returned guard drops, or `EBUSY` if
    /// the open has [`MAX_BLOCKED_WAITS_PER_CLIENT`] in flight already.
    pub fn enter(&self) -> Result<BlockedWait<'_>> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_BLOCKED_WAITS_PER_CLIENT).then_some(n + 1)
            })
            .map(|_| BlockedWait(&self.0))
            .map_err(|_| {
                Error::new(
                    davinci_uapi::Errno::EBUSY,
                    "this open already has 32 blocking WAIT_EVENTs in flight: retry once one has ended",
                )
            })
    }

    /// Waits in flight now.
    pub fn in_flight(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }
}

/// One blocked wait, counted in its open's [`BlockedWaits`] until dropped.
#[derive(Debug)]
pub struct BlockedWait<'a>(&'a AtomicU32);

impl Drop for BlockedWait<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_refuses_one_more_and_frees_on_drop() {
        let w = BlockedWaits::new();
        let held: [_; MAX_BLOCKED_WAITS_PER_CLIENT as usize] =
            core::array::from_fn(|_| w.enter().expect("within the bound"));
        assert_eq!(w.in_flight(), MAX_BLOCKED_WAITS_PER_CLIENT);
        let e = w.enter().expect_err("one more");
        assert_eq!(e.errno, davinci_uapi::Errno::EBUSY);
        drop(held);
        assert_eq!(w.in_flight(), 0);
        let _one = w.enter().expect("free again");
        assert_eq!(w.in_flight(), 1);
    }
}
