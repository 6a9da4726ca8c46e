//! [`MockPlatform`]: driver-core's [`Platform`] over memfds and threads.
//!
//! Device memory is backed *per allocation*: each allocation `[offset, offset + len)` of a
//! client is its own sealed memfd of exactly `len` bytes ([`Backing`]). A client is only ever
//! given the descriptor of an allocation it holds, so what it can map, and so touch, is
//! exactly what it was granted and what GET_INFO and LIST_CLIENTS count: never another
//! client's memory, never device memory nobody allocated. The memfd can shrink (never grow),
//! so this process reaches it only through the kernel ([`AllocRegion`]): a file a holder
//! shrank fails the task (`EFAULT`), never raises `SIGBUS` here. A freed allocation's memfd
//! is truncated to 0 before FREE_MEMORY returns (so before the device lets go of it; the
//! same on revocation and close), so every mapping of it, the owner's and each importer's,
//! faults with `SIGBUS` from then on, as on the kernel, and pins nothing; a new allocation
//! gets a fresh memfd, never a freed one (`crate::pool` may have made it ahead of time, and
//! unmaps and closes freed ones after the reply).
#![forbid(unsafe_code)]

use davinci_driver_core::observe::{TraceLog, TRACE_BUFFERS};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use davinci_driver_core::{Error, Platform, Result, StdLock, StreamRegions};
use davinci_uapi::Errno;

use crate::memfd::{AllocRegion, MemFd, Sealing, Shrunk};
use crate::pool::{RegionPool, Released};
use crate::stream_mem::{StreamMem, StreamPart};

/// The memfds backing device memory: one per allocation, by `(client, device offset)`.
#[derive(Debug, Default)]
struct Backing(BTreeMap<(u32, u64), AllocRegion>);

impl Backing {
    /// The allocation of `client` that holds `[offset, offset + len)`, and where the range
    /// starts in it (the core validated the range against one allocation before asking).
    fn find(&self, client: u32, offset: u64, len: u64) -> Result<(&AllocRegion, u64)> {
        let outside = || {
            Error::new(
                Errno::EFAULT,
                "device memory access outside the client's allocations",
            )
        };
        let ((_, start), region) = self
            .0
            .range((client, 0)..=(client, offset))
            .next_back()
            .ok_or_else(outside)?;
        let at = offset - start;
        let end = at.checked_add(len).ok_or_else(outside)?;
        if end > region.len() {
            return Err(outside());
        }
        Ok((region, at))
    }
}

/// The mock device's platform: device memory, stream memory, time, and the wake-ups.
pub struct MockPlatform {
    memory_size: u64,
    backing: Backing,
    /// Where new memfds come from and released ones go (`crate::pool`).
    pool: Arc<RegionPool>,
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
    /// Within a control-path call whose host tidies after the reply (`defer_kicks`): the
    /// pollers are woken then, through `kick_pending`, not while the call holds the device.
    defer_kicks: bool,
    /// Set when a wake of the pollers waits for the reply (`Core::kick_after_reply`).
    kick_pending: Arc<AtomicBool>,
    epoch: Instant,
    /// TRACE's buffers (`davinci_driver_core::observe`).
    traces: Box<[TraceLog]>,
}

impl std::fmt::Debug for MockPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockPlatform")
            .field("memory_size", &self.memory_size)
            .field("allocations", &self.backing.0.len())
            .field("streams", &self.streams.len())
            .field("waiters", &self.waiters.load(Ordering::Relaxed))
            .finish()
    }
}

/// A task's access to an allocation whose memfd a holder shrank (`ftruncate`).
fn shrunk(_: Shrunk) -> Error {
    Error::new(
        Errno::EFAULT,
        "the allocation's memfd was truncated by a process that holds it",
    )
}

impl MockPlatform {
    /// A platform for a device of `memory_size` bytes whose host waiters sleep on
    /// `notified` and whose pollers sleep on `kick`.
    pub(crate) fn new(
        memory_size: u64,
        notified: Arc<AtomicU32>,
        kick: Arc<AtomicU32>,
        pool: Arc<RegionPool>,
        kick_pending: Arc<AtomicBool>,
    ) -> Self {
        Self {
            memory_size,
            backing: Backing::default(),
            pool,
            streams: HashMap::new(),
            waiters: AtomicUsize::new(0),
            notified,
            kick,
            sleeping_pollers: AtomicUsize::new(0),
            defer_kicks: false,
            kick_pending,
            epoch: Instant::now(),
            traces: (0..TRACE_BUFFERS).map(|_| TraceLog::new()).collect(),
        }
    }

    /// Bumps the pollers' wake word, and wakes those asleep on it (after the reply, within
    /// [`defer_kicks`](Self::defer_kicks)).
    pub(crate) fn kick_pollers(&self) {
        // SeqCst, paired with `poller_sleeping`: either the poller sees the new word (and
        // does not sleep) or this sees it counted (and wakes it).
        self.kick.fetch_add(1, Ordering::SeqCst);
        if self.sleeping_pollers.load(Ordering::SeqCst) > 0 {
            if self.defer_kicks {
                self.kick_pending.store(true, Ordering::Release);
            } else {
                davinci_shm::futex_wake(&self.kick);
            }
        }
    }

    /// From now on (`on`) until called again with `false`, a wake of the pollers waits for
    /// the host's `tidy` after the reply: set only around a control-path call that holds the
    /// device exclusively (no poller runs meanwhile, so none of theirs is deferred).
    pub(crate) fn defer_kicks(&mut self, on: bool) {
        self.defer_kicks = on;
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

    /// Remembers a new stream's memory under its handle (after `CREATE_STREAM`).
    pub(crate) fn register_stream(&mut self, stream: u32, mem: Arc<StreamMem>) {
        self.streams.insert(stream, mem);
    }

    /// Drops whatever backing a closed client still had (the core freed its allocations
    /// already, so normally nothing).
    pub(crate) fn forget_client(&mut self, client: u32) {
        let gone: Vec<_> = self
            .backing
            .0
            .range((client, 0)..=(client, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in gone {
            if let Some(r) = self.backing.0.remove(&k) {
                r.revoke();
                self.pool.release(Released::Region(r.into_inner()));
            }
        }
    }

    /// The descriptor of `client`'s allocation at device offset `offset` (its whole memfd),
    /// for mapping the allocation's host view.
    pub(crate) fn allocation_fd(&self, client: u32, offset: u64) -> Result<MemFd> {
        match self.backing.0.get(&(client, offset)) {
            Some(region) => Ok(region.fd()),
            None => Err(Error::new(
                Errno::ENOENT,
                "no such allocation for this client",
            )),
        }
    }

    /// The descriptor of a stream's memory and the offset of one part in it.
    pub(crate) fn stream_fd(mem: &StreamMem, part: StreamPart) -> (MemFd, u64) {
        mem.fd(part)
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

    /// Memfds backing device memory (one per live allocation), for tests.
    pub fn backed_allocations(&self) -> usize {
        self.backing.0.len()
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
        let mem = StreamMem::new(
            &self.pool,
            cmd_entries,
            cmd_bytes,
            event_entries,
            event_bytes,
        )
        .map_err(|_| {
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
        // Wake a poller that may sleep on the doorbell: its stream is gone. (Within
        // `defer_kicks`, the doorbell word changes now, before its page is emptied, and the
        // pollers are woken through the kick word, which they sleep on too, after the reply.)
        if self.defer_kicks {
            mem.bump();
            self.kick_pending.store(true, Ordering::Release);
        } else {
            mem.kick();
        }
        // Then its pages go, whatever the client still maps; unmapping and closing it, which
        // nobody can observe, may wait until after the reply.
        mem.discard();
        self.pool.release(Released::Stream(mem));
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
        let size = usize::try_from(len)
            .map_err(|_| Error::new(Errno::ENOMEM, "allocation larger than the address space"))?;
        let nomem = || {
            Error::new(
                Errno::ENOMEM,
                "could not create the allocation's memory (memfd)",
            )
        };
        let region = self
            .pool
            .take("davinci-device-memory", size, Sealing::Revocable)
            .ok()
            .and_then(AllocRegion::new)
            .ok_or_else(nomem)?;
        self.backing.0.insert((client, offset), region);
        Ok(())
    }

    fn free_backing(&mut self, client: u32, offset: u64, _len: u64) {
        if let Some(region) = self.backing.0.remove(&(client, offset)) {
            // Truncated now, even while clients still map it (the owner, importers): every
            // such mapping faults from FREE_MEMORY's return on, and its pages are gone. Only
            // unmapping this process's mapping and closing the memfd may wait for the reply.
            region.revoke();
            self.pool.release(Released::Region(region.into_inner()));
        }
    }

    fn mem_read(&self, client: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (r, at) = self.backing.find(client, offset, buf.len() as u64)?;
        r.read(at, buf).map_err(shrunk)
    }

    fn mem_write(&self, client: u32, offset: u64, data: &[u8]) -> Result<()> {
        let (r, at) = self.backing.find(client, offset, data.len() as u64)?;
        r.write(at, data).map_err(shrunk)
    }

    fn mem_copy(&self, (cd, dst): (u32, u64), (cs, src): (u32, u64), len: u64) -> Result<()> {
        let (to, d) = self.backing.find(cd, dst, len)?;
        let (from, s) = self.backing.find(cs, src, len)?;
        to.copy_from(d, from, s, len).map_err(shrunk)
    }

    fn mem_fill(&self, client: u32, dst: u64, len: u64, pattern: u32) -> Result<()> {
        let (r, at) = self.backing.find(client, dst, len)?;
        r.fill(at, len, pattern).map_err(shrunk)
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn trace_logs(&self) -> &[TraceLog] {
        &self.traces
    }

    fn kick_stream(&mut self, stream: u32) {
        if let Some(mem) = self.streams.get(&stream) {
            mem.kick();
        }
    }

    fn notify_waiters(&self, _client: u32) {
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
