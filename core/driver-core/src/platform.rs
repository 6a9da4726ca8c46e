//! What differs between the kernel module and the mock device: where shared pages come from,
//! how device memory is backed and touched, time, and how sleepers are woken.

use crate::error::Result;
use davinci_ring::RingRegion;

/// The memory of one stream, created by the platform: its two rings (already mapped where the
/// device side can reach them) plus whatever the platform keeps to back them and the doorbell.
pub struct StreamRegions<M> {
    /// Platform-owned backing (pages, memfds, mappings); released by
    /// [`Platform::release_stream`].
    pub mem: M,
    /// The command ring (header + `cmd_entries` task slots), valid as long as `mem` lives.
    pub cmd: RingRegion,
    /// The event ring (header + `event_entries` record slots), valid as long as `mem` lives.
    pub event: RingRegion,
}

/// A lock the host provides around the state the data path changes: one per stream (its ring
/// ends and engine state) and one per event (its value).
///
/// The data path ([`DeviceCore::run_stream`](crate::DeviceCore::run_stream) and the sleep handshake)
/// takes `&DeviceCore` and these locks, so a host may run several streams at once (the mock
/// device's pollers, under the shared side of its device lock); the control path takes
/// `&mut DeviceCore` and reaches the values through [`get_mut`](Lock::get_mut), without locking.
/// The core holds at most one stream lock and, inside it, one event lock at a time.
pub trait Lock<T> {
    /// A lock holding `value`.
    fn new(value: T) -> Self;

    /// Runs `f` on the value with the lock held. `None` only if the lock cannot be taken
    /// because this thread already holds it: the core never does that, so a correct host
    /// never sees `None` (a cell-based lock, like [`Serialized`], reports it instead of
    /// panicking).
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R>;

    /// The value, through exclusive access to the lock (no locking needed).
    fn get_mut(&mut self) -> &mut T;
}

/// [`Lock`] for a host that serialises every call on a device already (the kernel module
/// holds its device mutex around each one): a cell, no atomics, not `Sync`.
pub struct Serialized<T>(core::cell::RefCell<T>);

impl<T> Lock<T> for Serialized<T> {
    fn new(value: T) -> Self {
        Self(core::cell::RefCell::new(value))
    }

    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.0.try_borrow_mut().ok().map(|mut v| f(&mut v))
    }

    fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }
}

/// Services the device core needs from its host environment.
///
/// The `&mut self` methods (the control path: streams and memory created and released,
/// kicks) are called with the device held exclusively. The `&self` ones (device memory
/// access, time, waking waiters) are the data path: a host that runs streams concurrently
/// gets them from several threads at once, for different streams. Implementations must not
/// call back into the device.
pub trait Platform {
    /// Backing of a stream's rings and doorbell.
    type StreamMem;

    /// The lock around each stream's and each event's data-path state.
    type Lock<T>: Lock<T>;

    /// Creates the zeroed shared memory of a new stream: a command ring of `cmd_bytes`, an event
    /// ring of `event_bytes` (both page-rounded by the caller) and a doorbell page.
    fn create_stream(
        &mut self,
        client: u32,
        cmd_entries: u32,
        cmd_bytes: usize,
        event_entries: u32,
        event_bytes: usize,
    ) -> Result<StreamRegions<Self::StreamMem>>;

    /// Releases a stream's memory. The core has already dropped its ring views.
    fn release_stream(&mut self, client: u32, stream: u32, mem: Self::StreamMem);

    /// Backs `[offset, offset + len)` of device memory for `client`; reads as zero.
    fn alloc_backing(&mut self, client: u32, offset: u64, len: u64) -> Result<()>;

    /// Releases the backing of `[offset, offset + len)`; its contents must not be visible to
    /// the next owner.
    fn free_backing(&mut self, client: u32, offset: u64, len: u64);

    /// The object `client` could map at `cookie` (its mmap cookie; `len` bytes) is going: a
    /// FREE_MEMORY, a DESTROY_STREAM, a close. Called before its backing is released
    /// ([`free_backing`](Self::free_backing), [`release_stream`](Self::release_stream)). A
    /// host whose mappings pin the object's pages (the kernel module) must make them stop
    /// reaching them here, so no page outlives the device's own accounting; a host whose
    /// backing release already does (the mock's punched memfds) has nothing to do.
    fn revoke_mappings(&mut self, client: u32, cookie: u64, len: u64) {
        let _ = (client, cookie, len);
    }

    /// Copies device memory at `offset` (owned by `client`, already validated) into `buf`.
    fn mem_read(&self, client: u32, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Copies `data` into device memory at `offset` (owned by `client`, validated).
    fn mem_write(&self, client: u32, offset: u64, data: &[u8]) -> Result<()>;

    /// `memmove` of `len` bytes from `src` to `dst`, each a `(client, offset)`: the client
    /// whose allocation holds the range (they differ when one is memory another client
    /// exported: ABI 1.4), and its device-memory offset (both ranges validated).
    fn mem_copy(&self, dst: (u32, u64), src: (u32, u64), len: u64) -> Result<()>;

    /// Fills `len` bytes (a multiple of 4) at `dst` with `pattern` (validated).
    fn mem_fill(&self, client: u32, dst: u64, len: u64, pattern: u32) -> Result<()>;

    /// TRACE's buffers: [`TRACE_BUFFERS`](crate::observe::TRACE_BUFFERS) logs the host keeps
    /// for the device (zeroed storage, [`TraceLog::new`](crate::observe::TraceLog)), or none
    /// (the default): a host without them does not report `DAVINCI_FEAT_TRACE`, and TRACE
    /// answers `ENOTTY`.
    fn trace_logs(&self) -> &[crate::observe::TraceLog] {
        &[]
    }

    /// Device monotonic time in nanoseconds.
    fn now_ns(&self) -> u64;

    /// Wakes the device worker of `stream` (after SUBMIT_TASK or NOTIFY).
    fn kick_stream(&mut self, stream: u32);

    /// Wakes the WAIT_EVENT sleepers of open `client` (the handle `open` returned), and
    /// event-blocked streams: completions of its streams were published, one of its events
    /// was recorded or destroyed, one of its streams stopped, or it closed. Only that open's
    /// sleepers can be waiting for what changed (handles are per client), so a host may wake
    /// just them: one tenant's waiters do not all wake on every other tenant's completion.
    fn notify_waiters(&self, client: u32);
}

/// `f` on the value of `lock`; `EBUSY` if this thread holds it already (which the core
/// never does: a host bug, reported rather than a panic).
pub(crate) fn locked<T, R>(lock: &impl Lock<T>, f: impl FnOnce(&mut T) -> R) -> Result<R> {
    lock.with(f).ok_or(crate::error::Error::new(
        davinci_uapi::Errno::EBUSY,
        "device state is already locked by this thread (a host bug)",
    ))
}
