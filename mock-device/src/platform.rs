//! [`MockPlatform`]: driver-core's [`Platform`] over memfds and threads.
//!
//! Device memory is backed *per client*: each client that allocates gets an arena, a sparse
//! memfd of the device's `memory_size`, and its allocation `[offset, offset + len)` lives at
//! the same offset in its own arena. A client is only ever given descriptors of its own
//! arena, so no mapping can reach another client's memory (the isolation the daemon relies
//! on). Freed ranges are punched out of the arena: the pages are released and read as zero.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use davinci_driver_core::{Error, Platform, Result, StdLock, StreamRegions};
use davinci_uapi::Errno;

use davinci_shm::OutOfBounds;

use crate::memfd::SharedRegion;
use crate::stream_mem::{StreamMem, StreamPart};

/// The mock device's platform: arenas, stream memory, time, and the wake-ups.
pub struct MockPlatform {
    memory_size: u64,
    arenas: HashMap<u32, SharedRegion>,
    /// Live streams' memory, by stream handle (registered once the core assigned the handle),
    /// to kick their pollers.
    streams: HashMap<u32, Arc<StreamMem>>,
    /// Threads sleeping on `notified` (WAIT_EVENT callers).
    waiters: AtomicUsize,
    /// The WAIT_EVENT sleepers' wake word: bumped by `notify_waiters` (completions
    /// published, an event recorded or destroyed, a stream stopped) while anyone waits, and
    /// `FUTEX_WAKE`d. A waiter reads it before it checks its condition, with the device held
    /// exclusively, so a notification after the check changes the word it sleeps on.
    notified: Arc<AtomicU32>,
    /// The pollers' wake word: bumped whenever a poller may have new work that no doorbell
    /// announces (an event reached, a stream added or removed), `FUTEX_WAKE`d while a poller
    /// sleeps on it.
    kick: Arc<AtomicU32>,
    /// Pollers asleep (on `kick` and their streams' doorbells).
    sleeping_pollers: AtomicUsize,
    epoch: Instant,
}

impl std::fmt::Debug for MockPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockPlatform")
            .field("memory_size", &self.memory_size)
            .field("arenas", &self.arenas.len())
            .field("streams", &self.streams.len())
            .field("waiters", &self.waiters.load(Ordering::Relaxed))
            .finish()
    }
}

fn oob(_: OutOfBounds) -> Error {
    Error::new(
        Errno::EFAULT,
        "device memory access outside the client's arena",
    )
}

impl MockPlatform {
    /// A platform for a device of `memory_size` bytes whose host waiters sleep on
    /// `notified` and whose pollers sleep on `kick`.
    pub(crate) fn new(memory_size: u64, notified: Arc<AtomicU32>, kick: Arc<AtomicU32>) -> Self {
        Self {
            memory_size,
            arenas: HashMap::new(),
            streams: HashMap::new(),
            waiters: AtomicUsize::new(0),
            notified,
            kick,
            sleeping_pollers: AtomicUsize::new(0),
            epoch: Instant::now(),
        }
    }

    /// Bumps the pollers' wake word, and wakes those asleep on it.
    pub(crate) fn kick_pollers(&self) {
        // SeqCst, paired with `poller_sleeping`: either the poller sees the new word (and
        // does not sleep) or this sees it counted (and wakes it).
        self.kick.fetch_add(1, Ordering::SeqCst);
        if self.sleeping_pollers.load(Ordering::SeqCst) > 0 {
            davinci_shm::futex_wake(&self.kick);
        }
    }

    /// A poller is about to sleep (`true`: before it checks the kick word one last time, in
    /// `futex_waitv`) or woke (`false`).
    pub(crate) fn poller_sleeping(&self, asleep: bool) {
        if asleep {
            self.sleeping_pollers.fetch_add(1, Ordering::SeqCst);
        } else {
            let _ = self
                .sleeping_pollers
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
    }

    fn arena(&self, client: u32) -> Result<&SharedRegion> {
        self.arenas.get(&client).ok_or(Error::new(
            Errno::EFAULT,
            "client has no device memory backing",
        ))
    }

    /// Remembers a new stream's memory under its handle (after `CREATE_STREAM`).
    pub(crate) fn register_stream(&mut self, stream: u32, mem: Arc<StreamMem>) {
        self.streams.insert(stream, mem);
    }

    /// Drops a closed client's arena (its allocations were freed by the core already).
    pub(crate) fn forget_client(&mut self, client: u32) {
        self.arenas.remove(&client);
    }

    /// A descriptor of `client`'s arena, for mapping an allocation's host view.
    pub(crate) fn arena_fd(&self, client: u32) -> Result<OwnedFd> {
        self.arena(client)?
            .dup_fd()
            .map_err(|_| Error::new(Errno::ENOMEM, "could not duplicate the arena descriptor"))
    }

    /// A descriptor of one part of a stream's memory.
    pub(crate) fn stream_fd(mem: &StreamMem, part: StreamPart) -> Result<OwnedFd> {
        mem.dup_fd(part).map_err(|_| {
            Error::new(
                Errno::ENOMEM,
                "could not duplicate the stream memory descriptor",
            )
        })
    }

    /// One more WAIT_EVENT caller is about to check its condition and sleep: the value of the
    /// wake word to sleep on (read after the caller counts itself, so a notification that
    /// misses the check either changes the word or sees the waiter and wakes it).
    pub(crate) fn add_waiter(&self) -> u32 {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        self.notified.load(Ordering::SeqCst)
    }

    /// A WAIT_EVENT caller stopped waiting.
    pub(crate) fn remove_waiter(&self) {
        let _ = self
            .waiters
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// Wakes every WAIT_EVENT sleeper (shutdown).
    pub(crate) fn wake_waiters(&self) {
        self.notified.fetch_add(1, Ordering::SeqCst);
        davinci_shm::futex_wake(&self.notified);
    }

    /// Number of arenas (clients with device memory), for tests.
    pub fn arenas(&self) -> usize {
        self.arenas.len()
    }
}

impl Platform for MockPlatform {
    type StreamMem = Arc<StreamMem>;
    type Lock<T> = StdLock<T>;

    fn create_stream(
        &mut self,
        _client: u32,
        cmd_entries: u32,
        cmd_bytes: usize,
        event_entries: u32,
        event_bytes: usize,
    ) -> Result<StreamRegions<Self::StreamMem>> {
        let mem =
            StreamMem::new(cmd_entries, cmd_bytes, event_entries, event_bytes).map_err(|_| {
                Error::new(
                    Errno::ENOMEM,
                    "could not create the stream's shared memory (memfd)",
                )
            })?;
        let (cmd, event) = mem
            .ring_regions()
            .map_err(|_| Error::new(Errno::EINVAL, "ring geometry does not fit its mapping"))?;
        Ok(StreamRegions {
            mem: Arc::new(mem),
            cmd,
            event,
        })
    }

    fn release_stream(&mut self, _client: u32, stream: u32, mem: Self::StreamMem) {
        self.streams.remove(&stream);
        // Wake a poller that may sleep on the doorbell: its stream is gone.
        mem.kick();
    }

    fn alloc_backing(&mut self, client: u32, offset: u64, len: u64) -> Result<()> {
        let end = offset
            .checked_add(len)
            .ok_or(Error::new(Errno::ERANGE, "allocation range overflows"))?;
        if end > self.memory_size {
            return Err(Error::new(
                Errno::ENOMEM,
                "allocation beyond the device memory",
            ));
        }
        if !self.arenas.contains_key(&client) {
            let size = usize::try_from(self.memory_size).map_err(|_| {
                Error::new(Errno::ENOMEM, "device memory larger than the address space")
            })?;
            let arena = SharedRegion::new("davinci-device-memory", size).map_err(|_| {
                Error::new(
                    Errno::ENOMEM,
                    "could not create the client's device memory (memfd)",
                )
            })?;
            self.arenas.insert(client, arena);
        }
        Ok(())
    }

    fn free_backing(&mut self, client: u32, offset: u64, len: u64) {
        if let Some(arena) = self.arenas.get(&client) {
            // Out of range cannot happen for a range the core allocated; nothing to release then.
            let _ = arena.discard(offset, len);
        }
    }

    fn mem_read(&self, client: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.arena(client)?.map().read(offset, buf).map_err(oob)
    }

    fn mem_write(&self, client: u32, offset: u64, data: &[u8]) -> Result<()> {
        self.arena(client)?.map().write(offset, data).map_err(oob)
    }

    fn mem_copy(&self, client: u32, dst: u64, src: u64, len: u64) -> Result<()> {
        self.arena(client)?
            .map()
            .copy_within(dst, src, len)
            .map_err(oob)
    }

    fn mem_fill(&self, client: u32, dst: u64, len: u64, pattern: u32) -> Result<()> {
        self.arena(client)?
            .map()
            .fill(dst, len, pattern)
            .map_err(oob)
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn kick_stream(&mut self, stream: u32) {
        if let Some(mem) = self.streams.get(&stream) {
            mem.kick();
        }
    }

    fn notify_waiters(&self) {
        // Nothing written and no syscall when nobody waits (the common case on the data
        // path). A waiter counts itself and checks its condition with the device held
        // exclusively, which this caller excludes: either its check saw what this announces,
        // or it was counted before, and then is seen here.
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.notified.fetch_add(1, Ordering::SeqCst);
            davinci_shm::futex_wake(&self.notified);
        }
        // A poller may have a stream blocked on an event this reached.
        self.kick_pollers();
    }
}
