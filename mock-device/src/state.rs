//! The state every [`MockDevice`](crate::MockDevice) handle and poller thread shares
//! ([`Core`]): the driver-core [`DeviceCore`] behind a reader-writer lock, the wake words of
//! WAIT_EVENT sleepers and of the pollers, the table of served streams and the pollers with
//! their stream sets. The behaviour lives elsewhere: `pollers` (serving streams),
//! `waits` (WAIT_EVENT sleepers), `mock_device` (the control path).
//!
//! Locking: the control path (ioctls, open, close, mmap) holds the device exclusively. The
//! data path (a poller running a stream, arming its doorbell) holds it shared plus that
//! stream's own lock (driver-core's per-stream [`Lock`](davinci_driver_core::Lock)), so
//! pollers never exclude each other and a stream's lock is only ever contended by a usage
//! report.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use davinci_driver_core::DeviceCore;

use crate::config::MockConfig;
use crate::platform::MockPlatform;
use crate::pool::RegionPool;
use crate::stream_mem::StreamMem;

/// The longest a poller lets waiting control-path callers go first before its next run.
const WRITERS_FIRST: Duration = Duration::from_millis(1);

/// A stream being served: whose it is and the poller that serves it (whose set holds its
/// memory while it may look at it).
pub(crate) struct Served {
    pub(crate) client: u32,
    pub(crate) poller: usize,
}

/// The streams one poller serves, and a generation that changes with them.
#[derive(Default)]
pub(crate) struct PollerSet {
    pub(crate) streams: Mutex<Vec<(u32, Arc<StreamMem>)>>,
    pub(crate) generation: AtomicU64,
    /// Set when the poller is retired (it served no stream and was one more than
    /// `config.pollers`): it returns at its next look.
    pub(crate) retired: AtomicBool,
    /// While the poller sleeps: how many words it sleeps on (the kick word and its idle
    /// streams' doorbells); 0 while it runs. For tests.
    pub(crate) sleeping_on: AtomicUsize,
}

/// A poller thread and its streams.
pub(crate) struct Poller {
    pub(crate) set: Arc<PollerSet>,
    pub(crate) join: JoinHandle<()>,
}

/// The device and everything that serves it, shared by the handles and the pollers.
pub(crate) struct Core {
    /// Exclusive for the control path, shared for the pollers (see the module docs).
    /// Boxed: a device is about 470 KB, built once on the heap rather than moved through
    /// stack frames (a debug build's copies of it overflowed a 2 MiB thread stack).
    pub(crate) dev: RwLock<Box<DeviceCore<MockPlatform>>>,
    /// Host threads in WAIT_EVENT sleep on this word (see `MockPlatform::add_waiter`).
    pub(crate) notified: Arc<AtomicU32>,
    /// The pollers' wake word (see `MockPlatform::kick_pollers`).
    pub(crate) kick: Arc<AtomicU32>,
    /// Every stream being served, by handle. Lock order: device, then `served`, then
    /// `pollers`, then a poller's set.
    pub(crate) served: Mutex<HashMap<u32, Served>>,
    pub(crate) pollers: Mutex<Vec<Poller>>,
    pub(crate) shutdown: AtomicBool,
    pub(crate) config: MockConfig,
    /// Control-path callers waiting for the device (see [`Core::lock`]).
    pub(crate) writers: AtomicU32,
    /// Memfds made ahead of time, released memory to let go of (the platform's too).
    pub(crate) pool: Arc<RegionPool>,
    /// A kick of the pollers waits for the reply (`Core::kick`, `Core::kick_after_reply`);
    /// shared with the platform (`MockPlatform::defer_kicks`).
    pub(crate) kick_pending: Arc<AtomicBool>,
    /// The thread doing `tidy` for a host without an after-the-reply moment (if started).
    pub(crate) tidier: Tidier,
    /// Times a poller gave its core away for a stream whose host looked starved
    /// (`Starved` in `pollers.rs`); for tests.
    pub(crate) starved_yields: AtomicU64,
}

pub(crate) fn relock<T>(r: std::sync::LockResult<T>) -> T {
    // A poisoned lock means a thread panicked while holding it; driver-core has no panicking
    // paths, and the state it protects stays consistent between calls, so carry on.
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The device held exclusively (the control path).
pub(crate) type Exclusive<'a> = RwLockWriteGuard<'a, Box<DeviceCore<MockPlatform>>>;

impl Core {
    /// The device held exclusively: the control path. Counted in `writers` while it waits,
    /// so the pollers let it in between two runs ([`Core::shared_for_run`]): std's
    /// reader-writer lock clears its writer-waiting mark when it wakes the writer, and a
    /// poller taking the lock again at once could keep a command out for as long as it has
    /// work.
    pub(crate) fn lock(&self) -> Exclusive<'_> {
        self.writers.fetch_add(1, Ordering::SeqCst);
        let g = relock(self.dev.write());
        self.writers.fetch_sub(1, Ordering::SeqCst);
        g
    }

    /// The device held shared for a poller's next run: after the control-path callers that
    /// wait for it (a command waits for at most one run of one stream per poller), though
    /// never more than [`WRITERS_FIRST`] (callers arriving without pause do not stop the
    /// data path).
    pub(crate) fn shared_for_run(&self) -> RwLockReadGuard<'_, Box<DeviceCore<MockPlatform>>> {
        if self.writers.load(Ordering::SeqCst) > 0 {
            let start = Instant::now();
            while self.writers.load(Ordering::SeqCst) > 0 && start.elapsed() < WRITERS_FIRST {
                std::thread::yield_now();
            }
        }
        self.shared()
    }

    /// The device held shared: the data path (and reports that change nothing).
    pub(crate) fn shared(&self) -> RwLockReadGuard<'_, Box<DeviceCore<MockPlatform>>> {
        relock(self.dev.read())
    }

    /// The table of served streams.
    pub(crate) fn served(&self) -> MutexGuard<'_, HashMap<u32, Served>> {
        relock(self.served.lock())
    }

    /// The pollers, by index.
    pub(crate) fn pollers(&self) -> MutexGuard<'_, Vec<Poller>> {
        relock(self.pollers.lock())
    }
}

/// The tidier's thread and its wake word (`tidier.rs` runs it).
#[derive(Debug, Default)]
pub(crate) struct Tidier {
    /// Bumped by every nudge; the thread sleeps on it.
    pub(crate) word: AtomicU32,
    /// The thread is about to sleep or sleeps (a nudge then wakes it).
    pub(crate) asleep: AtomicBool,
    /// The thread, while it runs (joined at shutdown).
    pub(crate) join: Mutex<Option<JoinHandle<()>>>,
    /// Set once the thread runs.
    pub(crate) on: AtomicBool,
}
