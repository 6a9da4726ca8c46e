//! The data-path counters: [`DeviceStats`] (the public snapshot), `Stats` (one stream's
//! counters, written only by that stream) and `StatsRegistry` (an open's live streams'
//! counters and the totals of those already dropped, summed by `Device::stats`).
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Counters of the data path of one [`Stream`](crate::Stream), written only by that stream
/// (on its own cache lines, so streams on different threads never write a shared line per
/// task) and summed over the live streams and the retired totals by
/// [`Device::stats`](crate::Device::stats).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Stats {
    /// The stream's driver handle (set at registration).
    pub(crate) handle: u32,
    /// The command ring's tail as last published: what `Device::synchronize` waits for.
    pub(crate) published: AtomicU32,
    pub(crate) tasks: AtomicU64,
    pub(crate) doorbells: AtomicU64,
    pub(crate) futex_wakes: AtomicU64,
    pub(crate) notifies: AtomicU64,
    pub(crate) slow_submits: AtomicU64,
    pub(crate) full_waits: AtomicU64,
}

impl Stats {
    /// Adds `n` to a counter that only its stream's `&mut self` paths write: a plain load and
    /// store (no locked read-modify-write on the hot path). Readers may see the old value.
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64, n: u64) {
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    pub(crate) fn snapshot(&self) -> DeviceStats {
        DeviceStats {
            tasks_submitted: self.tasks.load(Ordering::Relaxed),
            doorbells: self.doorbells.load(Ordering::Relaxed),
            futex_wakes: self.futex_wakes.load(Ordering::Relaxed),
            notify_ioctls: self.notifies.load(Ordering::Relaxed),
            slow_submits: self.slow_submits.load(Ordering::Relaxed),
            ring_full_waits: self.full_waits.load(Ordering::Relaxed),
        }
    }
}

/// The per-stream counters of one open: those of its live streams, and the totals of the
/// streams already dropped. Locked only when a stream is created or dropped and on reads.
#[derive(Debug, Default)]
pub(crate) struct StatsRegistry(Mutex<Registered>);

#[derive(Debug, Default)]
struct Registered {
    live: Vec<Arc<Stats>>,
    retired: DeviceStats,
}

impl StatsRegistry {
    fn lock(&self) -> MutexGuard<'_, Registered> {
        // A panic elsewhere while holding it leaves only counters behind: still usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counters for a new stream, summed into [`total`](Self::total) from now on.
    pub(crate) fn register_stream(&self, handle: u32) -> Arc<Stats> {
        let s = Arc::new(Stats {
            handle,
            ..Stats::default()
        });
        self.lock().live.push(Arc::clone(&s));
        s
    }

    /// Every live stream's handle and last published tail, now (bounded by the device's
    /// stream limit).
    pub(crate) fn published(&self) -> Vec<(u32, u32)> {
        self.lock()
            .live
            .iter()
            .map(|s| (s.handle, s.published.load(Ordering::Relaxed)))
            .collect()
    }

    /// A dropped stream's counters move into the retired totals.
    pub(crate) fn retire_stream(&self, s: &Arc<Stats>) {
        let mut r = self.lock();
        if let Some(i) = r.live.iter().position(|x| Arc::ptr_eq(x, s)) {
            r.live.swap_remove(i);
            r.retired = r.retired.zip(&s.snapshot(), u64::wrapping_add);
        }
    }

    /// The live streams' counters and the retired totals, summed now.
    pub(crate) fn total(&self) -> DeviceStats {
        let r = self.lock();
        r.live.iter().fold(r.retired, |acc, s| {
            acc.zip(&s.snapshot(), u64::wrapping_add)
        })
    }
}

/// A snapshot of the data-path counters of a [`Device`](crate::Device).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Descriptors published through stream rings (fast path) and SUBMIT_TASK.
    pub tasks_submitted: u64,
    /// Wake-ups of a sleeping device (one per publish or reap that found NEED_WAKEUP set): a
    /// doorbell write, or a NOTIFY on a device without a doorbell the host can write (the
    /// kernel module's software engine).
    pub doorbells: u64,
    /// `FUTEX_WAKE`s after a doorbell write (software devices).
    pub futex_wakes: u64,
    /// NOTIFY ioctls: the wake-ups of a device with neither an MMIO nor a futex doorbell
    /// (also counted in `doorbells`), and explicit `Stream::notify` calls.
    pub notify_ioctls: u64,
    /// SUBMIT_TASK ioctls (the slow path).
    pub slow_submits: u64,
    /// Times a submit found the command ring full and had to wait for the device.
    pub ring_full_waits: u64,
}

impl DeviceStats {
    /// Doorbell writes per 1000 tasks submitted (0 if none were).
    pub fn doorbells_per_1000_tasks(&self) -> f64 {
        if self.tasks_submitted == 0 {
            0.0
        } else {
            self.doorbells as f64 * 1000.0 / self.tasks_submitted as f64
        }
    }

    /// The counters accumulated since `earlier`.
    pub fn since(&self, earlier: &DeviceStats) -> DeviceStats {
        self.zip(earlier, u64::wrapping_sub)
    }

    fn zip(&self, o: &DeviceStats, f: impl Fn(u64, u64) -> u64) -> DeviceStats {
        DeviceStats {
            tasks_submitted: f(self.tasks_submitted, o.tasks_submitted),
            doorbells: f(self.doorbells, o.doorbells),
            futex_wakes: f(self.futex_wakes, o.futex_wakes),
            notify_ioctls: f(self.notify_ioctls, o.notify_ioctls),
            slow_submits: f(self.slow_submits, o.slow_submits),
            ring_full_waits: f(self.ring_full_waits, o.ring_full_waits),
        }
    }
}
