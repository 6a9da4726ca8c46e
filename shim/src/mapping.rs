//! The shim's only module with `unsafe`: the host's mappings of device objects (memmap2
//! [`MmapRaw`]), bounds-checked copies in and out of them, the ring ends and the doorbell
//! built over a stream's mappings, and the doorbell's `FUTEX_WAKE`.
//!
//! Everything mapped here is also written by the device (another thread in embedded mode,
//! another process or the hardware otherwise), so no `&`/`&mut` to mapped bytes is ever
//! formed: bytes are copied with relaxed atomic loads and stores (the ring protocol's
//! acquire/release orders them), ring fields are reached by the ring crate's atomics.
#![allow(unsafe_code)]

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};

use davinci_ring::{Consumer, Doorbell, Producer, RingRegion};
use davinci_uapi::task::{EVENT_RECORD_SIZE, TASK_DESC_SIZE};
use davinci_uapi::{EventRecord, RingFlags, TaskDesc};
use memmap2::{MmapOptions, MmapRaw};

/// A file descriptor and an offset in it where a device object can be mapped (what a
/// backend's `map` returns: a memfd from the mock device, the device node itself for the
/// kernel driver, with the cookie as offset).
#[derive(Debug)]
pub(crate) struct MapFd {
    pub(crate) fd: OwnedFd,
    pub(crate) offset: u64,
}

/// A range outside a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutOfBounds;

/// One shared read/write mapping of a device object.
#[derive(Debug)]
pub(crate) struct SharedMap {
    map: MmapRaw,
    len: usize,
}

impl SharedMap {
    /// Maps `len` bytes of `src` (shared, read/write). The descriptor may be closed afterwards.
    pub(crate) fn new(src: &MapFd, len: usize) -> std::io::Result<Self> {
        if len == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        // The length is always explicit: a device node's fstat size is 0.
        let map = MmapOptions::new()
            .len(len)
            .offset(src.offset)
            .map_raw(&src.fd)?;
        if map.len() != len {
            return Err(std::io::Error::other(
                "mapping length differs from the request",
            ));
        }
        Ok(Self { map, len })
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn range(&self, offset: usize, len: usize) -> Result<*mut u8, OutOfBounds> {
        let end = offset.checked_add(len).ok_or(OutOfBounds)?;
        if end > self.len {
            return Err(OutOfBounds);
        }
        // SAFETY: `offset <= end <= self.len`, the length of the live mapping: the pointer
        // stays within (or one past the end of) the mapping.
        Ok(unsafe { self.map.as_mut_ptr().add(offset) })
    }

    /// Copies `out.len()` bytes at `offset` out of the mapping.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), OutOfBounds> {
        let src = self.range(offset, out.len())?;
        // SAFETY: `[src, src + out.len())` lies in the live read/write mapping (`range`), and
        // `out` is ordinary memory outside it.
        unsafe { davinci_ring::shared::copy_from_shared(src, out) };
        Ok(())
    }

    /// Copies `data` into the mapping at `offset`.
    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> Result<(), OutOfBounds> {
        let dst = self.range(offset, data.len())?;
        // SAFETY: `[dst, dst + data.len())` lies in the live read/write mapping (`range`), and
        // `data` is ordinary memory outside it.
        unsafe { davinci_ring::shared::copy_to_shared(dst, data) };
        Ok(())
    }

    fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
}

/// The host's ends of one stream: the command-ring producer, the event-ring consumer and the
/// doorbell, together with the mappings they point into (so they cannot outlive them).
pub(crate) struct StreamRings {
    // Field order = drop order: the ends (raw pointers into the maps) go before the maps.
    producer: Producer<TaskDesc>,
    consumer: Consumer<EventRecord>,
    doorbell: Doorbell,
    futex: bool,
    cmd: SharedMap,
    _event: SharedMap,
    _bell: SharedMap,
}

impl std::fmt::Debug for StreamRings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamRings")
            .field("tail", &self.producer.tail())
            .field("head", &self.consumer.head())
            .finish_non_exhaustive()
    }
}

impl StreamRings {
    /// Builds the ring ends over the three mappings. `futex`: the device watches the doorbell
    /// word in software (`DOORBELL_FUTEX`): wake it after writing.
    pub(crate) fn new(
        cmd: SharedMap,
        cmd_entries: u32,
        event: SharedMap,
        event_entries: u32,
        bell: SharedMap,
        futex: bool,
    ) -> Result<Self, String> {
        if bell.len() < 4 {
            return Err("doorbell mapping shorter than the register".into());
        }
        // SAFETY: `cmd` is a live shared read/write mapping of `cmd.len()` bytes, page aligned
        // (so 64-byte aligned). The region and the producer built on it are fields of the
        // returned value declared before `cmd`, so they are dropped before the mapping; they
        // are private and never moved out. Within this process the only other accesses to the
        // ring are the device's ring ends (embedded mode), over its own mapping.
        let cmd_region =
            unsafe { RingRegion::new(cmd.base(), cmd.len(), cmd_entries, TASK_DESC_SIZE) }
                .map_err(|e| format!("command ring: {e}"))?;
        // SAFETY: as above, for the event ring and its consumer.
        let event_region =
            unsafe { RingRegion::new(event.base(), event.len(), event_entries, EVENT_RECORD_SIZE) }
                .map_err(|e| format!("event ring: {e}"))?;
        let producer = Producer::try_new(cmd_region).map_err(|e| format!("command ring: {e}"))?;
        let consumer = Consumer::try_new(event_region).map_err(|e| format!("event ring: {e}"))?;
        // SAFETY: the doorbell register is the first word of the doorbell page (page aligned,
        // writable, at least 4 bytes: checked above), mapped for as long as `_bell` lives; the
        // doorbell is a field declared before `_bell` and never moved out. Nothing else in this
        // process writes the word non-atomically (the embedded device only uses atomics).
        let doorbell = unsafe { Doorbell::new(bell.base().cast::<u32>()) };
        Ok(Self {
            producer,
            consumer,
            doorbell,
            futex,
            cmd,
            _event: event,
            _bell: bell,
        })
    }

    /// Command-ring slots.
    pub(crate) fn cmd_entries(&self) -> u32 {
        self.producer.capacity()
    }

    /// Event-ring slots.
    pub(crate) fn event_entries(&self) -> u32 {
        self.consumer.region().entries()
    }

    /// Copies as many descriptors as fit into free slots; returns how many (not published).
    pub(crate) fn push_slice(&mut self, descs: &[TaskDesc]) -> usize {
        self.producer.push_slice(descs)
    }

    /// Free command slots.
    pub(crate) fn free(&mut self) -> u32 {
        self.producer.free()
    }

    /// Publishes pushed descriptors; `true` if the device asked for a doorbell.
    pub(crate) fn publish(&mut self) -> bool {
        self.producer.publish()
    }

    /// The command ring's tail (every descriptor pushed).
    pub(crate) fn tail(&self) -> u32 {
        self.producer.tail()
    }

    /// Re-reads the shared tail after a SUBMIT_TASK.
    pub(crate) fn resync_tail(&mut self) {
        self.producer.resync_tail();
    }

    /// Writes the tail to the doorbell register and, for a software device, `FUTEX_WAKE`s it.
    /// Returns whether a futex wake was issued.
    pub(crate) fn ring_doorbell(&self) -> bool {
        self.doorbell.ring(self.producer.tail());
        if self.futex {
            // SAFETY: FUTEX_WAKE only uses the address as a key (the kernel does not access
            // the word); it is the doorbell register inside `_bell`, alive for the call. Shared
            // (not FUTEX_PRIVATE): the watcher may be another process. A failure only means
            // nobody was woken, and the device's sleep has a timeout.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.doorbell.as_ptr(),
                    libc::FUTEX_WAKE,
                    i32::MAX,
                );
            }
        }
        self.futex
    }

    /// Copies out up to `max` completions, in order.
    pub(crate) fn consume(&mut self, max: usize, f: impl FnMut(EventRecord)) -> usize {
        self.consumer.consume(max, f)
    }

    /// Completions published and not consumed.
    pub(crate) fn available(&mut self) -> u32 {
        self.consumer.available()
    }

    /// The event ring's head (every completion consumed).
    pub(crate) fn head(&self) -> u32 {
        self.consumer.head()
    }

    /// The command ring's flags.
    pub(crate) fn cmd_flags(&self) -> RingFlags {
        self.producer.region().flags()
    }

    /// `(errno, index)` once the device put the stream in the error state.
    pub(crate) fn cmd_error(&self) -> Option<(u32, u32)> {
        self.producer.region().error()
    }

    /// Test hook: stores `tail` into the shared command-ring tail, as a broken or hostile
    /// producer would (Release, like a real publish). The local producer is not told.
    pub(crate) fn store_raw_cmd_tail(&self, tail: u32) {
        let offset = core::mem::offset_of!(davinci_uapi::RingHeader, tail);
        // SAFETY: the tail is a 4-byte aligned word (offset 0) inside the live command-ring
        // mapping (at least a header long: checked by `RingRegion::new`); every access to it
        // from this process, here and in the ring crate, is atomic.
        let word = unsafe { AtomicU32::from_ptr(self.cmd.base().add(offset).cast::<u32>()) };
        word.store(tail, Ordering::Release);
    }
}
