//! [`MockDevice`]: one driver-core [`DeviceCore`] behind a reader-writer lock, a bounded set of
//! poller threads that serve all its streams (one by default, like an io_uring SQPOLL
//! thread), and the blocking half of WAIT_EVENT.
//!
//! Locking: the control path (ioctls, open, close, mmap) holds the device exclusively. The
//! data path (a poller running a stream, arming its doorbell) holds it shared plus that
//! stream's own lock (driver-core's per-stream [`Lock`](davinci_driver_core::Lock)), so
//! pollers never exclude each other and a stream's lock is only ever contended by a usage
//! report.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;
use davinci_driver_core::{
    Config, DeviceCore, Error, Inject, MmapTarget, OpenError, OpenParams, Platform, Reply, Role,
    Run, UserMem, WaitSpec, CONTAINER_LEN,
};
use davinci_uapi::{
    ClientUsage, DeviceInfo, Errno, Features, ShareMode, DRIVER_CMD_DESTROY_CONTEXT,
    DRIVER_CMD_DESTROY_STREAM,
};

use davinci_shm::{futex_wait, futex_waitv, involuntary_switches, FutexWaiter, FUTEX_WAITV_MAX};

use crate::platform::MockPlatform;
use crate::stream_mem::{StreamMem, StreamPart};

/// Configuration of a mock device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MockConfig {
    /// N of the device name (`davinciN`).
    pub device_id: u32,
    /// Device memory in bytes. Backed sparsely: only pages written cost memory.
    pub memory_size: u64,
    /// Per-client memory limit in bytes (0 = the whole device).
    pub client_memory_limit: u64,
    /// Poller threads that serve the device's streams (like io_uring's SQPOLL threads): each
    /// stream is served by one, the least loaded when it was created. More start only when
    /// every poller serves `FUTEX_WAITV_MAX - 1` streams.
    pub pollers: usize,
    /// Descriptors a poller runs per stream per pass (and per lock acquisition).
    pub run_budget: u32,
    /// Longest a poller sleeps on its doorbell before it looks at the ring anyway (a safety
    /// net; the doorbell protocol does not rely on it).
    pub doorbell_timeout: Duration,
    /// Longest a poller with an event-blocked stream sleeps before it looks again (also a safety net).
    pub event_timeout: Duration,
    /// How long an idle poller keeps looking (spinning, then yielding) before it arms
    /// NEED_WAKEUP and sleeps: while it looks, the host rings no doorbell (like SQPOLL's
    /// `sq_thread_idle`). Longer = fewer doorbells and more CPU burnt while idle. The spin
    /// ends early when the poller is preempted while it looks (its involuntary context
    /// switches grow): then another runnable thread (perhaps the host it waits for) needs the
    /// core, and spinning would only delay it.
    pub idle_spin: Duration,
    /// A fault every stream is armed with from its creation ([`Inject`]; `None`: a healthy
    /// device). For testing a runtime's error handling; [`MockDevice::inject`] changes it
    /// later, per stream or for the device.
    pub inject: Option<Inject>,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            device_id: 0,
            memory_size: 256 << 20,
            client_memory_limit: 0,
            pollers: 1,
            run_budget: 64,
            doorbell_timeout: Duration::from_millis(50),
            event_timeout: Duration::from_millis(50),
            idle_spin: Duration::from_millis(2),
            inject: None,
        }
    }
}

/// Where a client maps an mmap cookie: a descriptor (its own, to close) and the file offset.
#[derive(Debug)]
pub struct MapSource {
    /// The file to map (a memfd).
    pub fd: OwnedFd,
    /// Offset of the object in that file.
    pub offset: u64,
}

/// OpenParams for the calling process: pid, uid, admin if uid 0 or `admin` is set, no
/// container.
pub fn local_open_params(role: Role, admin: bool) -> OpenParams {
    let uid = nix::unistd::getuid().as_raw();
    OpenParams {
        role,
        pid: std::process::id(),
        uid,
        admin: admin || uid == 0,
        container: [0; CONTAINER_LEN],
        comm: match std::fs::read_to_string("/proc/self/comm") {
            Ok(s) => davinci_uapi::ClientUsage::comm_field(s.trim_end_matches('\n')),
            Err(_) => [0; 16],
        },
    }
}

/// A stream being served: whose it is and the poller that serves it (whose set holds its
/// memory while it may look at it).
struct Served {
    client: u32,
    poller: usize,
}

/// The streams one poller serves, and a generation that changes with them.
#[derive(Default)]
struct PollerSet {
    streams: Mutex<Vec<(u32, Arc<StreamMem>)>>,
    generation: AtomicU64,
    /// Set when the poller is retired (it served no stream and was one more than
    /// `config.pollers`): it returns at its next look.
    retired: AtomicBool,
}

/// A poller thread and its streams.
struct Poller {
    set: Arc<PollerSet>,
    join: JoinHandle<()>,
}

struct Core {
    /// Exclusive for the control path, shared for the pollers (see the module docs).
    dev: RwLock<DeviceCore<MockPlatform>>,
    /// Host threads in WAIT_EVENT sleep on this word (see `MockPlatform::add_waiter`).
    notified: Arc<AtomicU32>,
    /// The pollers' wake word (see `MockPlatform::kick_pollers`).
    kick: Arc<AtomicU32>,
    /// Every stream being served, by handle. Lock order: device, then `served`, then
    /// `pollers`, then a poller's set.
    served: Mutex<HashMap<u32, Served>>,
    pollers: Mutex<Vec<Poller>>,
    shutdown: AtomicBool,
    config: MockConfig,
}

fn relock<T>(r: std::sync::LockResult<T>) -> T {
    // A poisoned lock means a thread panicked while holding it; driver-core has no panicking
    // paths, and the state it protects stays consistent between calls, so carry on.
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A pass that ran fewer tasks than this (over all of a poller's streams) is followed by a
/// pause of `PAUSE_SPINS` spin-loop hints before the next one.
const SMALL_PASS: usize = 16;
const PAUSE_SPINS: u32 = 128;

/// What one pass found a stream doing, to decide how the poller may sleep.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Ran descriptors (nothing to arm).
    Busy,
    /// Nothing to run: sleep on its doorbell with NEED_WAKEUP armed.
    Idle,
    /// The event ring is full: sleep on its doorbell with the stall half armed.
    Stalled,
    /// Waiting for an event: the pollers' kick word announces it (`event_timeout` is the
    /// safety net).
    Blocked,
    /// Gone, failed or halted by an injected fault: nothing to wait for.
    Done,
}

type Exclusive<'a> = RwLockWriteGuard<'a, DeviceCore<MockPlatform>>;

impl Core {
    /// The device held exclusively: the control path.
    fn lock(&self) -> Exclusive<'_> {
        relock(self.dev.write())
    }

    /// The device held shared: the data path (and reports that change nothing).
    fn shared(&self) -> RwLockReadGuard<'_, DeviceCore<MockPlatform>> {
        relock(self.dev.read())
    }

    fn served(&self) -> MutexGuard<'_, HashMap<u32, Served>> {
        relock(self.served.lock())
    }

    fn pollers(&self) -> MutexGuard<'_, Vec<Poller>> {
        relock(self.pollers.lock())
    }

    /// Hands stream `stream` of `client` to a poller: the one serving the fewest streams,
    /// starting a new one while fewer than `config.pollers` run or every one is full
    /// (a poller sleeps on at most `FUTEX_WAITV_MAX - 1` doorbells). Call with the device
    /// locked (`g`), so the poller cannot run the stream before it is registered.
    fn serve(
        self: &Arc<Self>,
        g: &DeviceCore<MockPlatform>,
        client: u32,
        stream: u32,
        mem: Arc<StreamMem>,
    ) -> std::io::Result<()> {
        let mut served = self.served();
        let mut pollers = self.pollers();
        let load = |p: &Poller| relock(p.set.streams.lock()).len();
        let least = pollers.iter().enumerate().min_by_key(|(_, p)| load(p));
        let index = match least {
            Some((i, p))
                if pollers.len() >= self.config.pollers.max(1) && load(p) < FUTEX_WAITV_MAX - 1 =>
            {
                i
            }
            _ => {
                drop(pollers);
                let index = self.start_poller()?;
                pollers = self.pollers();
                index
            }
        };
        let set = &pollers[index].set;
        relock(set.streams.lock()).push((stream, mem));
        set.generation.fetch_add(1, Ordering::AcqRel);
        served.insert(
            stream,
            Served {
                client,
                poller: index,
            },
        );
        g.platform().kick_pollers();
        Ok(())
    }

    /// Starts one more poller; returns its index.
    fn start_poller(self: &Arc<Self>) -> std::io::Result<usize> {
        let mut pollers = self.pollers();
        let set = Arc::new(PollerSet::default());
        let core = self.clone();
        let pset = set.clone();
        let index = pollers.len();
        let join = std::thread::Builder::new()
            .name(format!("davinci{}-poll{index}", self.config.device_id))
            .spawn(move || core.run_poller(&pset))?;
        pollers.push(Poller { set, join });
        Ok(index)
    }

    /// Stops serving the streams that no longer exist (or all, at shutdown); a poller drops
    /// its reference to their memory at its next pass.
    fn reap(&self, all: bool) {
        let live: Vec<u32> = if all {
            Vec::new()
        } else {
            self.shared().stream_handles().collect()
        };
        let mut served = self.served();
        let gone: Vec<(u32, usize)> = served
            .iter()
            .filter(|(h, _)| all || !live.contains(h))
            .map(|(h, s)| (*h, s.poller))
            .collect();
        if gone.is_empty() {
            return;
        }
        let mut pollers = self.pollers();
        for (h, p) in gone {
            served.remove(&h);
            if let Some(p) = pollers.get(p) {
                relock(p.set.streams.lock()).retain(|(s, _)| *s != h);
                p.set.generation.fetch_add(1, Ordering::AcqRel);
            }
        }
        // Pollers started beyond `config.pollers` for a crowd of streams go when the crowd
        // has gone: the last ones, while they serve nothing (only the last, so the indices
        // `served` keeps stay valid).
        let mut retired = Vec::new();
        while pollers.len() > self.config.pollers.max(1)
            && pollers
                .last()
                .is_some_and(|p| relock(p.set.streams.lock()).is_empty())
        {
            if let Some(p) = pollers.pop() {
                p.set.retired.store(true, Ordering::Release);
                retired.push(p);
            }
        }
        drop(pollers);
        drop(served);
        self.shared().platform().kick_pollers();
        for p in retired {
            // As in `shutdown`: a poller has no path that panics.
            let _ = p.join.join();
        }
    }

    fn shutdown(&self) {
        {
            let g = self.lock();
            self.shutdown.store(true, Ordering::Release);
            g.platform().wake_waiters();
            g.platform().kick_pollers();
        }
        self.reap(true);
        let pollers: Vec<Poller> = self.pollers().drain(..).collect();
        {
            // A poller that registered as sleeping after the kick above still sees the
            // shutdown flag at its next look; wake it now rather than at its timeout.
            let g = self.shared();
            g.platform().kick_pollers();
        }
        for p in pollers {
            // A poller cannot panic on any path (driver-core and this crate have none); if it
            // did, there is nothing left to clean up for it.
            let _ = p.join.join();
        }
    }

    /// One poller: runs each of its streams for up to `run_budget` descriptors per pass while
    /// any makes progress; when none does, keeps looking for `idle_spin` (spinning, then
    /// yielding), then arms NEED_WAKEUP on every idle or stalled stream (docs/abi.md 5.3,
    /// 5.4) and sleeps on all their doorbells and the kick word at once (`futex_waitv`), at
    /// most `doorbell_timeout`.
    fn run_poller(&self, set: &PollerSet) {
        let budget = self.config.run_budget.max(1);
        let backoff = Backoff::new();
        let mut idle_since: Option<Instant> = None;
        let mut preempted: Option<u64> = None;
        let mut small_streak = 0u32;
        let mut idle_spins = 0u32;
        let mut streams: Vec<(u32, Arc<StreamMem>)> = Vec::new();
        let mut seen: Vec<Seen> = Vec::new();
        let mut generation = u64::MAX;
        loop {
            if self.shutdown.load(Ordering::Acquire) || set.retired.load(Ordering::Acquire) {
                return;
            }
            // Read before the stream set and the pass: anything that announces work after it
            // (a stream added, an event recorded) changes the word, so the sleep below
            // returns at once. Read after the set, a stream added in between would be
            // neither in the set nor announced: the poller slept on without serving it.
            let k0 = self.kick.load(Ordering::Acquire);
            // Retired after this look, the kick that follows changes the word read above,
            // so the sleep below cannot outlast it.
            if set.retired.load(Ordering::Acquire) {
                return;
            }
            let g_now = set.generation.load(Ordering::Acquire);
            if g_now != generation {
                streams = relock(set.streams.lock()).clone();
                generation = g_now;
            }
            seen.clear();
            let mut progress = false;
            let mut ran = 0usize;
            for (h, _) in &streams {
                let r = self.shared().run_stream(*h, budget);
                seen.push(match r {
                    Run::Progress(n) => {
                        progress = true;
                        ran += n as usize;
                        Seen::Busy
                    }
                    Run::Idle => Seen::Idle,
                    Run::Stalled => Seen::Stalled,
                    Run::Blocked { .. } => Seen::Blocked,
                    Run::Failed(_) | Run::Halted | Run::Gone => Seen::Done,
                });
            }
            if progress {
                backoff.reset();
                idle_since = None;
                idle_spins = 0;
                preempted = None;
                // Passes that keep finding only a few tasks, with no empty pass between them,
                // mean the host streams tasks one by one and this poller keeps up: looking
                // again at once would take every task alone and pull the ring's index lines
                // back and forth between the two cores for each. A short pause lets a few
                // accumulate. (A lone small pass, like a round trip's, is not paused: the
                // host waits for it, and the next pass finds the ring empty.)
                small_streak = if ran < SMALL_PASS {
                    small_streak + 1
                } else {
                    0
                };
                if small_streak >= 3 {
                    for _ in 0..PAUSE_SPINS {
                        std::hint::spin_loop();
                    }
                }
                continue;
            }
            small_streak = 0;
            let since = *idle_since.get_or_insert_with(Instant::now);
            idle_spins = idle_spins.wrapping_add(1);
            // Every 64 idle looks (a syscall, only in a spin that lasts): preempted since the
            // first of these checks means the core is oversubscribed, so park now and leave
            // the core to the others.
            let mut crowded = false;
            if idle_spins % 64 == 0 {
                let now = involuntary_switches();
                crowded = *preempted.get_or_insert(now) != now;
            }
            if !streams.is_empty()
                && !crowded
                && (!backoff.is_completed() || since.elapsed() < self.config.idle_spin)
            {
                backoff.snooze();
                continue;
            }
            idle_since = None;
            idle_spins = 0;
            preempted = None;
            backoff.reset();
            self.park(&streams, &seen, k0);
        }
    }

    /// Arms NEED_WAKEUP on the idle and stalled streams and sleeps on their doorbells and the
    /// kick word (`k0` read before the pass). Returns without sleeping if any of them found
    /// work while being armed.
    fn park(&self, streams: &[(u32, Arc<StreamMem>)], seen: &[Seen], k0: u32) {
        let mut armed: Vec<(u32, &AtomicU32, u32)> = Vec::with_capacity(streams.len());
        let g = self.shared();
        let mut rerun = false;
        for ((h, mem), s) in streams.iter().zip(seen) {
            if !matches!(s, Seen::Idle | Seen::Stalled) {
                continue;
            }
            let Some(word) = mem.doorbell_word() else {
                continue;
            };
            // The doorbell value before NEED_WAKEUP is armed: a ring after that changes it.
            let d0 = mem.doorbell_value();
            let sleep = if *s == Seen::Idle {
                g.stream_prepare_sleep(*h)
            } else {
                g.stream_prepare_stall_sleep(*h)
            };
            if !sleep {
                rerun = true;
                break;
            }
            armed.push((*h, word, d0));
        }
        if rerun || self.shutdown.load(Ordering::Acquire) {
            for (h, _, _) in &armed {
                g.stream_woke(*h, false);
            }
            return;
        }
        g.platform().poller_sleeping(true);
        drop(g);
        let mut waiters = Vec::with_capacity(armed.len() + 1);
        waiters.push(FutexWaiter {
            word: &self.kick,
            expected: k0,
            // `kick_pollers` wakes it with the shared `futex_wake`.
            private: false,
        });
        waiters.extend(armed.iter().map(|(_, word, d0)| FutexWaiter {
            word,
            expected: *d0,
            private: false,
        }));
        waiters.truncate(FUTEX_WAITV_MAX);
        // With no stream to serve, only a kick (a new stream, shutdown) can give work: no
        // safety-net wake-ups then. Otherwise the safety net of what the streams wait for.
        let timeout = if streams.is_empty() {
            Duration::from_secs(3600)
        } else if seen.contains(&Seen::Blocked) {
            self.config.doorbell_timeout.min(self.config.event_timeout)
        } else {
            self.config.doorbell_timeout
        };
        if futex_waitv(&waiters, timeout).is_err() {
            // No futex_waitv (a kernel before 5.16): a short bounded sleep instead, so a
            // doorbell is noticed within a millisecond.
            futex_wait(
                &self.kick,
                k0,
                Duration::from_millis(1).min(self.config.doorbell_timeout),
            );
        }
        let g = self.shared();
        g.platform().poller_sleeping(false);
        // A doorbell woke a stream whose word changed while the poller slept (the host's
        // ring, or a NOTIFY or SUBMIT_TASK, which change it too).
        for (h, word, d0) in &armed {
            g.stream_woke(*h, word.load(Ordering::Acquire) != *d0);
        }
    }
}

/// Stops every poller when the last [`MockDevice`] handle goes.
struct Owner {
    core: Arc<Core>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.core.shutdown();
    }
}

/// A davinci device without hardware: the driver-core engine on threads of this process.
///
/// Clones share the device. Dropping the last clone (or [`shutdown`](Self::shutdown)) stops
/// and joins every poller. Each open (client or control) gets a handle from
/// [`open`](Self::open) and is served by [`ioctl`](Self::ioctl) and [`map`](Self::map)
/// exactly as the kernel module serves a file descriptor; [`close`](Self::close) releases
/// everything the open held.
#[derive(Clone)]
pub struct MockDevice {
    owner: Arc<Owner>,
}

impl std::fmt::Debug for MockDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockDevice")
            .field("config", &self.core().config)
            .finish_non_exhaustive()
    }
}

impl MockDevice {
    /// A new device with no clients, in exclusive mode.
    pub fn new(config: MockConfig) -> Self {
        let notified = Arc::new(AtomicU32::new(0));
        let kick = Arc::new(AtomicU32::new(0));
        let platform = MockPlatform::new(config.memory_size, notified.clone(), kick.clone());
        let mut dev = DeviceCore::new(
            Config {
                device_id: config.device_id,
                memory_size: config.memory_size,
                client_memory_limit: config.client_memory_limit,
                page_size: 4096,
                platform_features: Features::DOORBELL_FUTEX,
            },
            platform,
        );
        // Cannot fail for the whole device (no stream to look up).
        let _ = dev.inject(None, config.inject);
        let core = Arc::new(Core {
            dev: RwLock::new(dev),
            notified,
            kick,
            served: Mutex::new(HashMap::new()),
            pollers: Mutex::new(Vec::new()),
            shutdown: AtomicBool::new(false),
            config,
        });
        // The pollers start with the device (a fixed set of threads, not one per stream). One
        // that cannot be started now is started with the first stream (or that fails then).
        for _ in 0..config.pollers.max(1) {
            if core.start_poller().is_err() {
                break;
            }
        }
        Self {
            owner: Arc::new(Owner { core }),
        }
    }

    fn core(&self) -> &Core {
        &self.owner.core
    }

    /// The configuration.
    pub fn config(&self) -> MockConfig {
        self.core().config
    }

    /// Attaches an open (client or control). In exclusive mode a second client gets `EBUSY`
    /// naming the holder.
    pub fn open(&self, params: OpenParams) -> Result<u32, Box<OpenError>> {
        let core = self.core();
        if core.shutdown.load(Ordering::Acquire) {
            return Err(Box::new(OpenError {
                error: Error::new(Errno::ENODEV, "the device has shut down"),
                holder: None,
            }));
        }
        core.lock().open(params).map_err(Box::new)
    }

    /// Detaches an open and releases everything it held; its streams leave their pollers.
    pub fn close(&self, client: u32) {
        let core = self.core();
        {
            let mut g = core.lock();
            g.close(client);
            g.platform_mut().forget_client(client);
        }
        core.reap(false);
    }

    /// One ioctl for `client`: `arg` holds the argument bytes (`_IOC_SIZE(request)` of them)
    /// and receives the reply fields (also on most errors, e.g. WAIT_EVENT's `status`).
    /// Blocks for WAIT_EVENT, with the device unlocked.
    pub fn ioctl(
        &self,
        client: u32,
        request: u32,
        arg: &mut [u8],
        user: &mut dyn UserMem,
    ) -> Result<(), Error> {
        let core = self.core();
        let mut g = core.lock();
        if core.shutdown.load(Ordering::Acquire) {
            return Err(Error::new(Errno::ENODEV, "the device has shut down"));
        }
        match g.ioctl(client, request, arg, user)? {
            Reply::Done => {
                drop(g);
                if request == DRIVER_CMD_DESTROY_STREAM || request == DRIVER_CMD_DESTROY_CONTEXT {
                    core.reap(false);
                }
                Ok(())
            }
            Reply::Wait(spec) => self.wait(g, client, &spec, arg),
            Reply::StreamCreated(stream) => self.start_worker(g, client, stream),
            Reply::Kick(stream) => {
                g.platform_mut().kick_stream(stream);
                Ok(())
            }
        }
    }

    /// The blocking half of WAIT_EVENT: checks with the device held exclusively, sleeps on
    /// the platform's wake word with it released.
    fn wait<'a>(
        &'a self,
        mut g: Exclusive<'a>,
        client: u32,
        spec: &WaitSpec,
        arg: &mut [u8],
    ) -> Result<(), Error> {
        let core = self.core();
        let start = Instant::now();
        let timeout = Duration::from_nanos(spec.timeout_ns);
        loop {
            let elapsed = start.elapsed();
            let timed_out = elapsed >= timeout;
            // Counted (and the word read) before the check: a notification that misses the
            // check changes the word or wakes this waiter.
            let word = g.platform().add_waiter();
            let done = g.finish_wait(client, spec, arg, timed_out);
            if !matches!(done, Ok(None)) {
                g.platform().remove_waiter();
                return done.map(|_| ());
            }
            if core.shutdown.load(Ordering::Acquire) {
                g.platform().remove_waiter();
                return Err(Error::new(
                    Errno::ENODEV,
                    "the device shut down during the wait",
                ));
            }
            drop(g);
            futex_wait(&core.notified, word, timeout.saturating_sub(elapsed));
            g = core.lock();
            g.platform().remove_waiter();
        }
    }

    fn start_worker(&self, mut g: Exclusive<'_>, client: u32, stream: u32) -> Result<(), Error> {
        let Some(mem) = g.stream_mem(client, stream).cloned() else {
            return Err(Error::new(Errno::ENOENT, "new stream vanished"));
        };
        g.platform_mut().register_stream(stream, mem.clone());
        match self.owner.core.serve(&g, client, stream, mem) {
            Ok(()) => Ok(()),
            Err(_) => {
                let _ = g.destroy_stream(client, stream);
                Err(Error::new(
                    Errno::ENOMEM,
                    "could not start a poller thread for the stream",
                ))
            }
        }
    }

    /// Resolves an mmap request of `client`: `cookie` must name an object it owns and `len`
    /// must not exceed the object. Returns a descriptor to map and the offset within it.
    pub fn map(&self, client: u32, cookie: u64, len: u64) -> Result<MapSource, Error> {
        let g = self.core().shared();
        match g.mmap_target(client, cookie, len)? {
            MmapTarget::Memory { offset, .. } => Ok(MapSource {
                fd: g.platform().arena_fd(client)?,
                offset,
            }),
            MmapTarget::CmdRing { stream } => self.stream_part(&g, client, stream, StreamPart::Cmd),
            MmapTarget::EventRing { stream } => {
                self.stream_part(&g, client, stream, StreamPart::Event)
            }
            MmapTarget::Doorbell { stream } => {
                self.stream_part(&g, client, stream, StreamPart::Doorbell)
            }
        }
    }

    fn stream_part(
        &self,
        g: &DeviceCore<MockPlatform>,
        client: u32,
        stream: u32,
        part: StreamPart,
    ) -> Result<MapSource, Error> {
        let Some(mem) = g.stream_mem(client, stream) else {
            return Err(Error::new(Errno::ENOENT, "no such stream for this client"));
        };
        Ok(MapSource {
            fd: MockPlatform::stream_fd(mem, part)?,
            offset: 0,
        })
    }

    /// GET_INFO, without an open.
    pub fn info(&self) -> DeviceInfo {
        self.core().shared().info()
    }

    /// Usage of every attached client.
    pub fn clients(&self) -> Vec<ClientUsage> {
        self.core().shared().clients().collect()
    }

    /// The sharing mode now in force.
    pub fn share_mode(&self) -> ShareMode {
        self.core().shared().share_mode()
    }

    /// Streams being served by the device's pollers (every live stream, until reaped).
    pub fn workers(&self) -> usize {
        self.core().served().len()
    }

    /// Streams of one client being served.
    pub fn client_workers(&self, client: u32) -> usize {
        self.core()
            .served()
            .values()
            .filter(|w| w.client == client)
            .count()
    }

    /// Poller threads running (`MockConfig::pollers`, more only past
    /// `FUTEX_WAITV_MAX - 1` streams per poller).
    pub fn pollers(&self) -> usize {
        self.core().pollers().len()
    }

    /// Arms `fault` (or disarms, `None`) on stream `stream` (its handle, whoever owns it), or
    /// with `stream` `None` on every stream and on every stream created from now on
    /// (docs/abi.md 5.6 says what clients see). `ENOENT` if the stream does not exist.
    pub fn inject(&self, stream: Option<u32>, fault: Option<Inject>) -> Result<(), Error> {
        let g = {
            let mut g = self.core().lock();
            g.inject(stream, fault)?;
            g
        };
        // A halted stream's poller looks again (a fault disarmed does not restart it, but a
        // stream armed while its poller sleeps is reconsidered at once).
        g.platform().kick_pollers();
        Ok(())
    }

    /// A device reset (docs/abi.md 5.6): every running stream stops in the error state with
    /// `ECANCELED`; clients, contexts, events and memory stay, and new streams run. Returns
    /// the number of streams stopped.
    pub fn reset(&self) -> u32 {
        self.core().lock().reset()
    }

    /// Stops and joins every poller now; afterwards every call fails with `ENODEV`.
    /// (Dropping the last handle does the same.)
    pub fn shutdown(&self) {
        self.core().shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use davinci_driver_core::NoUserMem;
    use davinci_ring::{Consumer, Producer};
    use davinci_uapi::{
        CreateContextArgs, CreateStreamArgs, EventRecord, TaskDesc, Wire,
        DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_STREAM,
    };

    fn call<T: Wire>(dev: &MockDevice, c: u32, request: u32, args: &mut T) {
        let mut arg = vec![0u8; T::SIZE];
        args.encode(&mut arg);
        dev.ioctl(c, request, &mut arg, &mut NoUserMem).unwrap();
        *args = T::decode(&arg);
    }

    /// The data path never needs the device exclusively: with the device held shared (as a
    /// usage report holds it, or as another poller does while it runs its streams), the
    /// pollers still take, run and complete descriptors. With one device-wide mutex they
    /// would wait for the holder.
    #[test]
    fn pollers_serve_streams_while_the_device_is_held_shared() {
        let dev = MockDevice::new(MockConfig {
            pollers: 2,
            ..MockConfig::default()
        });
        let c = dev
            .open(local_open_params(Role::Client, true))
            .expect("open");
        let mut ctx = CreateContextArgs::default();
        call(&dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut ctx);
        let mut ends = Vec::new();
        for _ in 0..2 {
            let mut s = CreateStreamArgs {
                ctx: ctx.handle,
                cmd_entries: 64,
                event_entries: 64,
                ..Default::default()
            };
            call(&dev, c, DRIVER_CMD_CREATE_STREAM, &mut s);
            let mem = dev
                .core()
                .shared()
                .stream_mem(c, s.handle)
                .cloned()
                .expect("the stream's memory");
            let (cmd, evt) = mem.ring_regions().expect("ring regions");
            ends.push((
                Producer::<TaskDesc>::new(cmd),
                Consumer::<EventRecord>::new(evt),
                mem,
            ));
        }
        assert_eq!(dev.pollers(), 2);

        let held = dev.core().shared();
        for (i, (prod, _, mem)) in ends.iter_mut().enumerate() {
            for k in 0..50u64 {
                prod.push(&TaskDesc::nop(i as u64 * 1000 + k)).unwrap();
            }
            prod.publish();
            mem.kick();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for (i, (_, cons, _)) in ends.iter_mut().enumerate() {
            let mut seen = Vec::new();
            while seen.len() < 50 {
                cons.consume(usize::MAX, |r| seen.push((r.user_data, r.status)));
                assert!(
                    Instant::now() < deadline,
                    "stream {i}: {} of 50 completions while the device was held shared",
                    seen.len()
                );
                std::thread::yield_now();
            }
            let want: Vec<(u64, i32)> = (0..50).map(|k| (i as u64 * 1000 + k, 0)).collect();
            assert_eq!(seen, want);
        }
        drop(held);
        drop(ends);
        dev.close(c);
    }
}
