//! [`MockDevice`]: one driver-core [`Device`] behind a mutex, a worker thread per stream, and
//! the blocking half of WAIT_EVENT.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;
use davinci_driver_core::{
    Config, Device, Error, MmapTarget, OpenError, OpenParams, Platform, Reply, Role, Run, UserMem,
    WaitSpec, CONTAINER_LEN,
};
use davinci_uapi::{
    ClientUsage, DeviceInfo, Errno, Features, ShareMode, DRIVER_CMD_DESTROY_CONTEXT,
    DRIVER_CMD_DESTROY_STREAM,
};

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
    /// Descriptors a worker runs per lock acquisition.
    pub run_budget: u32,
    /// Longest a worker sleeps on its doorbell before it looks at the ring anyway (a safety
    /// net; the doorbell protocol does not rely on it).
    pub doorbell_timeout: Duration,
    /// Longest an event-blocked worker sleeps before it looks again (also a safety net).
    pub event_timeout: Duration,
    /// How long an idle worker keeps looking (spinning, then yielding) before it arms
    /// NEED_WAKEUP and sleeps: while it looks, the host rings no doorbell (like SQPOLL's
    /// `sq_thread_idle`). Longer = fewer doorbells and more CPU burnt while idle.
    pub idle_spin: Duration,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            device_id: 0,
            memory_size: 256 << 20,
            client_memory_limit: 0,
            run_budget: 64,
            doorbell_timeout: Duration::from_millis(50),
            event_timeout: Duration::from_millis(50),
            idle_spin: Duration::from_millis(2),
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
        comm: crate::peer::comm_of_pid(std::process::id()),
    }
}

struct Worker {
    client: u32,
    stop: Arc<AtomicBool>,
    mem: Arc<StreamMem>,
    join: JoinHandle<()>,
}

struct Core {
    dev: Mutex<Device<MockPlatform>>,
    cond: Arc<Condvar>,
    workers: Mutex<HashMap<u32, Worker>>,
    shutdown: AtomicBool,
    config: MockConfig,
}

fn relock<T>(r: std::sync::LockResult<T>) -> T {
    // A poisoned lock means a thread panicked while holding it; driver-core has no panicking
    // paths, and the state it protects stays consistent between calls, so carry on.
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Core {
    fn lock(&self) -> MutexGuard<'_, Device<MockPlatform>> {
        relock(self.dev.lock())
    }

    fn workers(&self) -> MutexGuard<'_, HashMap<u32, Worker>> {
        relock(self.workers.lock())
    }

    /// Sleeps on the condition variable (device unlocked) for at most `timeout`.
    fn sleep<'a>(
        &self,
        mut g: MutexGuard<'a, Device<MockPlatform>>,
        timeout: Duration,
    ) -> MutexGuard<'a, Device<MockPlatform>> {
        g.platform_mut().add_waiter();
        let (mut g, _) = relock(self.cond.wait_timeout(g, timeout));
        g.platform_mut().remove_waiter();
        g
    }

    /// Stops and joins the workers whose streams no longer exist (or all, at shutdown).
    fn reap(&self, all: bool) {
        let live: Vec<u32> = if all {
            Vec::new()
        } else {
            self.lock().stream_handles().collect()
        };
        let dead: Vec<Worker> = {
            let mut w = self.workers();
            let gone: Vec<u32> = w
                .keys()
                .copied()
                .filter(|h| all || !live.contains(h))
                .collect();
            gone.iter().filter_map(|h| w.remove(h)).collect()
        };
        for w in &dead {
            w.stop.store(true, Ordering::Release);
            w.mem.kick();
        }
        if !dead.is_empty() {
            // Event-blocked workers sleep on the condition variable.
            let _g = self.lock();
            self.cond.notify_all();
        }
        for w in dead {
            // A worker cannot panic on any path (driver-core and this crate have none); if it
            // did, there is nothing left to clean up for it.
            let _ = w.join.join();
        }
    }

    fn shutdown(&self) {
        {
            let _g = self.lock();
            self.shutdown.store(true, Ordering::Release);
            self.cond.notify_all();
        }
        self.reap(true);
    }

    fn stopping(&self, stop: &AtomicBool) -> bool {
        stop.load(Ordering::Acquire) || self.shutdown.load(Ordering::Acquire)
    }

    /// The worker of one stream: runs descriptors while there are any, then keeps looking for
    /// `idle_spin` (spinning, then yielding), then sleeps on the doorbell with NEED_WAKEUP armed
    /// (an empty command ring, or a full event ring the host must reap), or on the condition
    /// variable (an event it waits for).
    fn run_worker(&self, stream: u32, mem: &StreamMem, stop: &AtomicBool) {
        let budget = self.config.run_budget.max(1);
        let backoff = Backoff::new();
        let mut idle_since: Option<Instant> = None;
        loop {
            if self.stopping(stop) {
                return;
            }
            let mut g = self.lock();
            match g.run_stream(stream, budget) {
                Run::Progress(_) => {
                    drop(g);
                    backoff.reset();
                    idle_since = None;
                }
                Run::Idle => {
                    drop(g);
                    let since = *idle_since.get_or_insert_with(Instant::now);
                    if !backoff.is_completed() || since.elapsed() < self.config.idle_spin {
                        backoff.snooze();
                        continue;
                    }
                    idle_since = None;
                    // d0 before NEED_WAKEUP is armed: a doorbell rung after that changes it.
                    let d0 = mem.doorbell_value();
                    if self.lock().stream_prepare_sleep(stream) {
                        if !self.stopping(stop) {
                            mem.wait_doorbell(d0, self.config.doorbell_timeout);
                        }
                        self.lock().stream_woke(stream);
                    }
                    backoff.reset();
                }
                Run::Stalled => {
                    // Only the host reaping its event ring unblocks this. Look a little, then
                    // sleep on the doorbell, which the host rings after reaping while
                    // NEED_WAKEUP is set (docs/abi.md 5.4: the stall half of the handshake).
                    drop(g);
                    if !backoff.is_completed() {
                        backoff.snooze();
                        continue;
                    }
                    idle_since = None;
                    let d0 = mem.doorbell_value();
                    if self.lock().stream_prepare_stall_sleep(stream) {
                        if !self.stopping(stop) {
                            mem.wait_doorbell(d0, self.config.doorbell_timeout);
                        }
                        self.lock().stream_woke(stream);
                    }
                    backoff.reset();
                }
                Run::Blocked { .. } => {
                    // Checked under the lock, so a shutdown's notify cannot slip in between.
                    if self.shutdown.load(Ordering::Acquire) || stop.load(Ordering::Acquire) {
                        return;
                    }
                    drop(self.sleep(g, self.config.event_timeout));
                    backoff.reset();
                }
                Run::Failed(_) | Run::Gone => return,
            }
        }
    }
}

/// Stops every worker when the last [`MockDevice`] handle goes.
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
/// and joins every worker. Each open (client or control) gets a handle from
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
        let cond = Arc::new(Condvar::new());
        let platform = MockPlatform::new(config.memory_size, cond.clone());
        let dev = Device::new(
            Config {
                device_id: config.device_id,
                memory_size: config.memory_size,
                client_memory_limit: config.client_memory_limit,
                page_size: 4096,
                platform_features: Features::DOORBELL_FUTEX,
            },
            platform,
        );
        let core = Arc::new(Core {
            dev: Mutex::new(dev),
            cond,
            workers: Mutex::new(HashMap::new()),
            shutdown: AtomicBool::new(false),
            config,
        });
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

    /// Detaches an open and releases everything it held; stops and joins its workers.
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

    fn wait(
        &self,
        mut g: MutexGuard<'_, Device<MockPlatform>>,
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
            if g.finish_wait(client, spec, arg, timed_out)?.is_some() {
                return Ok(());
            }
            if core.shutdown.load(Ordering::Acquire) {
                return Err(Error::new(
                    Errno::ENODEV,
                    "the device shut down during the wait",
                ));
            }
            g = core.sleep(g, timeout.saturating_sub(elapsed));
        }
    }

    fn start_worker(
        &self,
        mut g: MutexGuard<'_, Device<MockPlatform>>,
        client: u32,
        stream: u32,
    ) -> Result<(), Error> {
        let Some(mem) = g.stream_mem(client, stream).cloned() else {
            return Err(Error::new(Errno::ENOENT, "new stream vanished"));
        };
        g.platform_mut().register_stream(stream, mem.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let core = self.owner.core.clone();
        let (wmem, wstop) = (mem.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("davinci-stream-{stream:#x}"))
            .spawn(move || core.run_worker(stream, &wmem, &wstop));
        match spawned {
            Ok(join) => {
                // Lock order: device, then workers.
                self.core().workers().insert(
                    stream,
                    Worker {
                        client,
                        stop,
                        mem,
                        join,
                    },
                );
                Ok(())
            }
            Err(_) => {
                let _ = g.destroy_stream(client, stream);
                Err(Error::new(
                    Errno::ENOMEM,
                    "could not start the stream's worker thread",
                ))
            }
        }
    }

    /// Resolves an mmap request of `client`: `cookie` must name an object it owns and `len`
    /// must not exceed the object. Returns a descriptor to map and the offset within it.
    pub fn map(&self, client: u32, cookie: u64, len: u64) -> Result<MapSource, Error> {
        let g = self.core().lock();
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
        g: &Device<MockPlatform>,
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
        self.core().lock().info()
    }

    /// Usage of every attached client.
    pub fn clients(&self) -> Vec<ClientUsage> {
        self.core().lock().clients().collect()
    }

    /// The sharing mode now in force.
    pub fn share_mode(&self) -> ShareMode {
        self.core().lock().share_mode()
    }

    /// Worker threads running (one per live stream, until reaped).
    pub fn workers(&self) -> usize {
        self.core().workers().len()
    }

    /// Worker threads of one client.
    pub fn client_workers(&self, client: u32) -> usize {
        self.core()
            .workers()
            .values()
            .filter(|w| w.client == client)
            .count()
    }

    /// Stops and joins every worker now; afterwards every call fails with `ENODEV`.
    /// (Dropping the last handle does the same.)
    pub fn shutdown(&self) {
        self.core().shutdown();
    }
}
