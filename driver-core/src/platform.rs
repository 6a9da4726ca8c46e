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

/// Services the device core needs from its host environment. Every method is called with the
/// device state locked by the caller, so implementations must not call back into the device.
pub trait Platform {
    /// Backing of a stream's rings and doorbell.
    type StreamMem;

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

    /// Copies device memory at `offset` (owned by `client`, already validated) into `buf`.
    fn mem_read(&mut self, client: u32, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Copies `data` into device memory at `offset` (owned by `client`, validated).
    fn mem_write(&mut self, client: u32, offset: u64, data: &[u8]) -> Result<()>;

    /// `memmove` of `len` bytes within `client`'s device memory (both ranges validated).
    fn mem_copy(&mut self, client: u32, dst: u64, src: u64, len: u64) -> Result<()>;

    /// Fills `len` bytes (a multiple of 4) at `dst` with `pattern` (validated).
    fn mem_fill(&mut self, client: u32, dst: u64, len: u64, pattern: u32) -> Result<()>;

    /// Device monotonic time in nanoseconds.
    fn now_ns(&self) -> u64;

    /// Wakes the device worker of `stream` (after SUBMIT_TASK or NOTIFY).
    fn kick_stream(&mut self, stream: u32);

    /// Wakes WAIT_EVENT sleepers and event-blocked streams: completions were published or an
    /// event was recorded.
    fn notify_waiters(&mut self);
}
