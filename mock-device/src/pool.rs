//! [`RegionPool`]: the control path's memfd work moved off the reply path, for a device
//! whose host calls [`MockDevice::tidy`](crate::MockDevice::tidy) after each reply (the
//! daemon does; the embedded device never does, and then nothing here changes what a call
//! does).
//!
//! * **Fresh memfds made ahead of time.** ALLOC_MEMORY and CREATE_STREAM take a memfd of the
//!   size they need from the pool when it has one: made, sized, sealed and mapped (its pages
//!   allocated and mapped: `MAP_POPULATE`) by an earlier `tidy` (at most one per call, so the
//!   work after a reply stays short), never used before, so the call itself makes no system
//!   call and takes no page fault for it. A memfd is never reused: a
//!   client may keep mapping a freed allocation's or destroyed stream's. The pool keeps at
//!   most [`PER_SIZE`] memfds for each of the [`MAX_SIZES`] sizes asked for most recently, at
//!   most [`MAX_READY`] in all (so at most that many mappings of this process are of memfds
//!   nobody holds), none over [`MAX_POOLED_LEN`], and is emptied when the device has no
//!   client left.
//! * **The release after the reply.** A freed allocation's or destroyed stream's memory is
//!   punched (emptied) before the call returns, as docs/abi.md promises; only unmapping it
//!   and closing its memfd, which change nothing anyone can observe, wait for `tidy` (at most
//!   [`MAX_RELEASED`]; beyond that they happen at once).
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};

use crate::memfd::{Sealing, SharedRegion};

/// Memfds kept ready per size.
pub(crate) const PER_SIZE: usize = 2;
/// Sizes the pool keeps memfds for (the most recently asked for).
pub(crate) const MAX_SIZES: usize = 4;
/// Memfds kept ready in all.
pub(crate) const MAX_READY: usize = PER_SIZE * MAX_SIZES;
/// Larger memfds are never made ahead of time.
pub(crate) const MAX_POOLED_LEN: usize = 1 << 20;
/// Released memory waiting for `tidy`, at most.
pub(crate) const MAX_RELEASED: usize = 64;
/// Released memory that makes a `tidy` due ([`RegionPool::due`]).
pub(crate) const RELEASED_BATCH: usize = 16;

/// Memory already emptied, to unmap and close after the reply.
#[derive(Debug)]
#[expect(dead_code, reason = "held only to be dropped after the reply")]
pub(crate) enum Released {
    /// A freed allocation's memfd.
    Region(SharedRegion),
    /// A destroyed stream's memory (a poller may still hold it for its next
    /// pass). Any type: this pool only drops it, and knows nothing of streams.
    Stream(Arc<dyn std::any::Any + Send + Sync>),
}

#[derive(Debug, Default)]
struct Inner {
    /// Whether the host calls `tidy` after each reply (else nothing is kept or deferred).
    tidied: bool,
    ready: Vec<SharedRegion>,
    /// Sizes (and seals) asked for, the most recent last.
    wanted: Vec<(usize, Sealing)>,
    released: Vec<Released>,
    /// A take found no memfd of its size ready since the last `tidy`.
    missed: bool,
}

/// What a ready memfd is for: its length and its seals.
fn kind(s: &SharedRegion) -> (usize, Sealing) {
    (s.len(), s.sealing())
}

/// Fresh memfds made ahead of time and released memory to let go of, behind their own lock
/// (never the device's: `tidy` makes memfds while the pollers run).
#[derive(Debug, Default)]
pub(crate) struct RegionPool(Mutex<Inner>);

impl RegionPool {
    /// The pool's lock (a poisoned one carries on: its state stays consistent between calls,
    /// as for the device's own locks).
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// From now on the host calls [`tidy`](Self::tidy) after each reply.
    pub(crate) fn enable(&self) {
        self.lock().tidied = true;
    }

    /// Whether the host calls [`tidy`](Self::tidy) after each reply.
    pub(crate) fn tidied(&self) -> bool {
        self.lock().tidied
    }

    /// A fresh, sealed (`sealing`), mapped memfd of `len` bytes: one made (and mapped) ahead
    /// of time if the pool has one of that size and sealing, else a new one named `name`.
    pub(crate) fn take(
        &self,
        name: &str,
        len: usize,
        sealing: Sealing,
    ) -> std::io::Result<SharedRegion> {
        let key = (len, sealing);
        let ready = {
            let mut g = self.lock();
            if g.tidied && len <= MAX_POOLED_LEN {
                g.wanted.retain(|&k| k != key);
                g.wanted.push(key);
                let over = g.wanted.len().saturating_sub(MAX_SIZES);
                g.wanted.drain(..over);
            }
            let at = g.ready.iter().position(|s| kind(s) == key);
            if at.is_none() && g.tidied && len <= MAX_POOLED_LEN {
                g.missed = true;
            }
            at.map(|i| g.ready.swap_remove(i))
        };
        match ready {
            Some(r) => Ok(r),
            None => SharedRegion::new(name, len, sealing),
        }
    }

    /// Whether a `tidy` is due for memory alone: a take found its size missing since the
    /// last one, or [`RELEASED_BATCH`] released memfds wait. (A host tidying in the
    /// background wakes its tidier for ALLOC and FREE only then, one wake for several calls.)
    pub(crate) fn due(&self) -> bool {
        let g = self.lock();
        g.missed || g.released.len() >= RELEASED_BATCH
    }

    /// Lets go of released memory: after the next `tidy`, or now.
    pub(crate) fn release(&self, r: Released) {
        let mut g = self.lock();
        if g.tidied && g.released.len() < MAX_RELEASED {
            g.released.push(r);
            return;
        }
        drop(g);
        drop(r);
    }

    /// After a reply: unmaps and closes the released memory, and makes (and maps) one of the
    /// memfds the pool lacks (none while `idle`: the device has no client, and the pool is emptied).
    /// Returns whether it made one (the pool may lack more).
    pub(crate) fn tidy(&self, idle: bool) -> bool {
        let (released, drained) = {
            let mut g = self.lock();
            if idle {
                g.wanted.clear();
            }
            // Sizes no longer asked for recently go (all of them when idle).
            let Inner { ready, wanted, .. } = &mut *g;
            let drained: Vec<SharedRegion> = ready
                .extract_if(.., |s| !wanted.contains(&kind(s)))
                .collect();
            g.missed = false;
            (std::mem::take(&mut g.released), drained)
        };
        drop(released);
        drop(drained);
        {
            let need = {
                let g = self.lock();
                if g.ready.len() >= MAX_READY {
                    None
                } else {
                    g.wanted
                        .iter()
                        .rev()
                        .copied()
                        .find(|&k| g.ready.iter().filter(|s| kind(s) == k).count() < PER_SIZE)
                }
            };
            let Some((len, sealing)) = need else {
                return false;
            };
            let Ok(s) = SharedRegion::new_populated("davinci-memory", len, sealing) else {
                return false;
            };
            let mut g = self.lock();
            if g.ready.len() < MAX_READY {
                g.ready.push(s);
                return true;
            }
            false
        }
    }

    /// Memfds ready now (tests).
    #[cfg(test)]
    pub(crate) fn ready(&self) -> Vec<usize> {
        self.lock().ready.iter().map(SharedRegion::len).collect()
    }

    /// Released memory waiting (tests).
    #[cfg(test)]
    pub(crate) fn released(&self) -> usize {
        self.lock().released.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_kept_or_deferred_until_enabled() {
        let p = RegionPool::default();
        let r = p.take("t", 4096, Sealing::Fixed).unwrap();
        p.release(Released::Region(r));
        p.tidy(false);
        assert_eq!(p.released(), 0);
        assert!(p.ready().is_empty());
    }

    #[test]
    fn the_pool_stays_bounded_and_follows_recent_sizes() {
        let p = RegionPool::default();
        p.enable();
        let sizes = [4096, 8192, 3 * 4096, 16384, 5 * 4096, 4096, 2 << 20];
        for (i, &len) in sizes.iter().enumerate() {
            let r = p.take("t", len, Sealing::Fixed).unwrap();
            assert_eq!(r.map().len(), len);
            p.release(Released::Region(r));
            p.tidy(false);
            let ready = p.ready();
            assert!(ready.len() <= MAX_READY, "{ready:?}");
            for l in &ready {
                assert!(ready.iter().filter(|&x| x == l).count() <= PER_SIZE);
                assert!(*l <= MAX_POOLED_LEN);
            }
            // The sizes kept are those of the last MAX_SIZES pooled requests.
            let recent: Vec<usize> = sizes[..=i]
                .iter()
                .copied()
                .filter(|&l| l <= MAX_POOLED_LEN)
                .collect();
            for l in &ready {
                assert!(recent.iter().rev().take(MAX_SIZES).any(|x| x == l), "{l}");
            }
            assert_eq!(p.released(), 0, "tidy let go of the released memory");
        }
        assert!(!p.ready().contains(&(2 << 20)), "too large to pool");
        assert!(p.ready().contains(&4096));
        // No client left: emptied, and nothing is made again.
        p.tidy(true);
        assert!(p.ready().is_empty());
        p.tidy(false);
        assert!(p.ready().is_empty());
    }

    /// A memfd from the pool is a fresh one: zero, sealed, and never one handed out before
    /// (released memory is dropped, never pooled again).
    #[test]
    fn pooled_memfds_are_fresh_zero_and_sealed() {
        let p = RegionPool::default();
        p.enable();
        let first = p.take("t", 8192, Sealing::Fixed).unwrap();
        first.map().fill(0, 8192, 0xdead_beef).unwrap();
        let ino = |r: &SharedRegion| nix::sys::stat::fstat(r.dup_fd().unwrap()).unwrap().st_ino;
        let old = ino(&first);
        first.discard(0, 8192).unwrap();
        p.release(Released::Region(first));
        p.tidy(false);
        assert_eq!(p.ready(), vec![8192], "one memfd made per tidy");
        p.tidy(false);
        p.tidy(false);
        assert_eq!(p.ready(), vec![8192, 8192]);
        for _ in 0..2 {
            let r = p.take("t", 8192, Sealing::Fixed).unwrap();
            assert_ne!(ino(&r), old);
            let mut back = vec![0xffu8; 8192];
            r.map().read(0, &mut back).unwrap();
            assert!(back.iter().all(|&b| b == 0));
            let seals = crate::memfd::seals(r.dup_fd().unwrap()).unwrap();
            assert!(seals.contains(crate::memfd::REQUIRED_SEALS));
        }
        assert!(p.ready().is_empty());
    }

    /// An empty pool (or one without the size asked for) makes the memfd at once: as fresh,
    /// sealed and mapped as a pooled one. Pooled ones come mapped already, and no memfd is
    /// handed out twice.
    #[test]
    fn an_empty_pool_falls_back_to_a_new_memfd() {
        let p = RegionPool::default();
        p.enable();
        let ino = |r: &SharedRegion| nix::sys::stat::fstat(r.dup_fd().unwrap()).unwrap().st_ino;
        let mut seen = std::collections::HashSet::new();
        // Nothing made yet, then one of another size only, then the pool emptied by takes.
        p.take("t", 4096, Sealing::Fixed)
            .map(|r| p.release(Released::Region(r)))
            .unwrap();
        p.tidy(false);
        assert_eq!(p.ready(), vec![4096]);
        let mut held = Vec::new();
        for len in [8192, 4096, 4096, 4096] {
            let r = p.take("t", len, Sealing::Fixed).unwrap();
            assert_eq!((r.len(), r.map().len()), (len, len), "mapped whole");
            assert!(seen.insert(ino(&r)), "never handed out twice");
            let seals = crate::memfd::seals(r.dup_fd().unwrap()).unwrap();
            assert!(seals.contains(crate::memfd::REQUIRED_SEALS));
            let mut back = vec![0xffu8; len];
            r.map().read(0, &mut back).unwrap();
            assert!(back.iter().all(|&b| b == 0));
            r.map().fill(0, len as u64, 0x0101_0101).unwrap();
            held.push(r);
        }
        assert!(p.ready().is_empty(), "the one pooled memfd was taken");
    }
}
