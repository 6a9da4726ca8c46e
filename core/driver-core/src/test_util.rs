//! Test support (feature `test-util`): [`HeapPlatform`], a single-threaded heap
//! implementation of [`Platform`] that also *checks* the core (every device-memory access
//! must lie in a range the core backed for that very client, backings never overlap, every
//! release matches a backing, no stream is released twice), a device over it, and
//! [`RingMem`], raw access to a stream's ring memory so a test or a fuzz target can play the
//! host, hostile or not. Used by this crate's tests and by the fuzz targets.
//!
//! Not part of any production build: the kernel module and the mock device never enable the
//! feature, and without it this crate forbids `unsafe` entirely.
#![allow(unsafe_code)]

extern crate std;

use core::sync::atomic::{AtomicU32, Ordering};
use std::collections::HashMap;
use std::format;
use std::sync::{Mutex, MutexGuard};
use std::vec::Vec;

use davinci_ring::test_util::AlignedBuf;
use davinci_ring::{Consumer, Producer, RingRegion};
use davinci_uapi::{Errno, EventRecord, Features, TaskDesc};

use crate::{
    Config, DeviceCore, Error, OpenParams, Platform, Quota, Result, Role, StdLock, StreamRegions,
    CONTAINER_LEN,
};

/// Device memory of the fuzz device (small: arenas are real heap buffers).
pub const MEM: u64 = 1 << 20;
/// Per-client limit.
pub const CLIENT_LIMIT: u64 = 512 << 10;
/// Page size (allocation alignment).
pub const PAGE: u32 = 4096;

/// Ring header field offsets and size, from `davinci_uapi::RingHeader`.
pub mod hdr {
    use core::mem::offset_of;
    use davinci_uapi::RingHeader;

    /// Producer index.
    pub const TAIL: usize = offset_of!(RingHeader, tail);
    /// Consumer index.
    pub const HEAD: usize = offset_of!(RingHeader, head);
    /// Slot count.
    pub const ENTRIES: usize = offset_of!(RingHeader, entries);
    /// `entries - 1`.
    pub const MASK: usize = offset_of!(RingHeader, mask);
    /// RingFlags.
    pub const FLAGS: usize = offset_of!(RingHeader, flags);
    /// Dropped counter.
    pub const DROPPED: usize = offset_of!(RingHeader, dropped);
    /// Errno of the error state.
    pub const ERROR: usize = offset_of!(RingHeader, error);
    /// Index of the failing descriptor.
    pub const ERROR_INDEX: usize = offset_of!(RingHeader, error_index);
    /// Header size.
    pub const SIZE: usize = davinci_uapi::rings::RING_HEADER_SIZE;
}

/// A stream's shared memory: both rings, owned by the device's stream entry.
pub struct StreamMem {
    _cmd: AlignedBuf,
    _event: AlignedBuf,
    /// Base of the command ring (header + slots).
    pub cmd_ptr: *mut u8,
    /// Bytes of the command ring mapping.
    pub cmd_len: usize,
    /// Base of the event ring.
    pub event_ptr: *mut u8,
    /// Bytes of the event ring mapping.
    pub event_len: usize,
    /// Command ring depth.
    pub cmd_entries: u32,
    /// Event ring depth.
    pub event_entries: u32,
}

/// Heap platform that checks what the core asks of it.
#[derive(Default)]
pub struct HeapPlatform {
    /// Behind a mutex: the data path reaches device memory through `&self`.
    arenas: Mutex<HashMap<u32, Vec<u8>>>,
    /// Backed ranges per client: `(offset, len)`.
    pub backed: HashMap<u32, Vec<(u64, u64)>>,
    /// Streams created and not yet released.
    pub live_streams: u32,
    /// Streams released so far.
    pub released_streams: u32,
    /// Fake clock: each read returns the next value (1, 2, 3, ...), so tests see how often
    /// the engine reads it.
    pub now: core::sync::atomic::AtomicU64,
    /// Kicks seen.
    pub kicks: u64,
    /// The open of every `notify_waiters` call, in order.
    pub notified: Mutex<Vec<u32>>,
    /// Every `revoke_mappings` call, in order: `(client, cookie, len)`.
    pub revoked: Vec<(u32, u64, u64)>,
    /// TRACE's buffers.
    pub traces: Traces,
}

/// A host's trace buffers ([`Platform::trace_logs`]), on the heap.
pub struct Traces(std::boxed::Box<[crate::observe::TraceLog]>);

impl Default for Traces {
    fn default() -> Self {
        Traces(
            (0..crate::observe::TRACE_BUFFERS)
                .map(|_| crate::observe::TraceLog::new())
                .collect(),
        )
    }
}

impl std::ops::Deref for Traces {
    type Target = [crate::observe::TraceLog];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

// SAFETY: the raw pointers in `StreamMem` point into the `AlignedBuf`s it owns, which move
// with it; every access to that memory is atomic (ring ends, `RingMem`), so the memory may be
// reached from any thread.
unsafe impl Send for StreamMem {}
// SAFETY: as for `Send`: shared access goes only through atomics.
unsafe impl Sync for StreamMem {}

impl HeapPlatform {
    /// Total bytes currently backed (all clients).
    pub fn backed_bytes(&self) -> u64 {
        self.backed.values().flatten().map(|&(_, l)| l).sum()
    }

    /// Bytes backed for `client`.
    pub fn backed_of(&self, client: u32) -> u64 {
        self.backed
            .get(&client)
            .map_or(0, |v| v.iter().map(|&(_, l)| l).sum())
    }

    /// A copy of `client`'s arena (empty if never backed).
    pub fn arena_copy(&self, client: u32) -> Vec<u8> {
        self.arenas().get(&client).cloned().unwrap_or_default()
    }

    fn arenas(&self) -> MutexGuard<'_, HashMap<u32, Vec<u8>>> {
        self.arenas
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `f` on the arena of `client`; it grows to cover every range backed for it, so the
    /// ranges `check` accepts are always inside it.
    fn arena<R>(&self, client: u32, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        f(self.arenas().entry(client).or_default())
    }

    /// The core promised this range was validated: it must lie inside one backed range of
    /// `client`. A violation is a driver-core bug, so it panics (the fuzzer reports it).
    fn check(&self, client: u32, offset: u64, len: u64, what: &str) {
        if len == 0 {
            return;
        }
        let end = offset.checked_add(len);
        let ok = end.is_some_and(|end| {
            self.backed.get(&client).is_some_and(|v| {
                v.iter()
                    .any(|&(o, l)| offset >= o && end <= o.saturating_add(l))
            })
        });
        assert!(
            ok,
            "driver-core asked for {what} of [{offset:#x}, +{len:#x}) of client {client}, \
             outside every range backed for it: {:?}",
            self.backed.get(&client)
        );
    }
}

impl Platform for HeapPlatform {
    type StreamMem = StreamMem;
    type Lock<T> = StdLock<T>;

    fn create_stream(
        &mut self,
        _client: u32,
        cmd_entries: u32,
        cmd_bytes: usize,
        event_entries: u32,
        event_bytes: usize,
    ) -> Result<StreamRegions<StreamMem>> {
        let mut cmd = AlignedBuf::new(cmd_bytes);
        let mut event = AlignedBuf::new(event_bytes);
        // SAFETY: both buffers are 64-byte aligned, `len()` bytes long, never reallocated,
        // and owned by the `StreamMem` the device keeps as long as these regions. The fuzz
        // targets touch this memory only through atomics, `copy_to_shared` and ring ends
        // (one producer and one consumer per ring), all on the one fuzzing thread.
        let (c, e) = unsafe {
            (
                RingRegion::new(cmd.as_mut_ptr(), cmd.len(), cmd_entries, 64),
                RingRegion::new(event.as_mut_ptr(), event.len(), event_entries, 32),
            )
        };
        let (Ok(c), Ok(e)) = (c, e) else {
            return Err(Error::new(Errno::EINVAL, "bad region"));
        };
        self.live_streams += 1;
        Ok(StreamRegions {
            mem: StreamMem {
                cmd_ptr: cmd.as_mut_ptr(),
                cmd_len: cmd.len(),
                event_ptr: event.as_mut_ptr(),
                event_len: event.len(),
                _cmd: cmd,
                _event: event,
                cmd_entries,
                event_entries,
            },
            cmd: c,
            event: e,
        })
    }

    fn release_stream(&mut self, _client: u32, _stream: u32, _mem: StreamMem) {
        assert!(self.live_streams > 0, "stream released twice");
        self.live_streams -= 1;
        self.released_streams += 1;
    }

    fn alloc_backing(&mut self, client: u32, offset: u64, len: u64) -> Result<()> {
        assert!(
            offset.checked_add(len).is_some() && len > 0,
            "backing [{offset:#x}, +{len:#x}) outside device memory"
        );
        for v in self.backed.values() {
            for &(o, l) in v {
                assert!(
                    offset >= o + l || offset + len <= o,
                    "backing [{offset:#x}, +{len:#x}) overlaps live [{o:#x}, +{l:#x})"
                );
            }
        }
        self.backed.entry(client).or_default().push((offset, len));
        self.arena(client, |a| {
            if a.len() < (offset + len) as usize {
                a.resize((offset + len) as usize, 0);
            }
            a[offset as usize..(offset + len) as usize].fill(0);
        });
        Ok(())
    }

    fn revoke_mappings(&mut self, client: u32, cookie: u64, len: u64) {
        self.revoked.push((client, cookie, len));
    }

    fn free_backing(&mut self, client: u32, offset: u64, len: u64) {
        let v = self.backed.entry(client).or_default();
        let Some(i) = v.iter().position(|&r| r == (offset, len)) else {
            panic!("free_backing [{offset:#x}, +{len:#x}) of client {client} was never backed");
        };
        v.swap_remove(i);
        self.arena(client, |a| {
            a[offset as usize..(offset + len) as usize].fill(0xEE)
        });
    }

    fn mem_read(&self, client: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check(client, offset, buf.len() as u64, "a read");
        let o = offset as usize;
        let n = buf.len();
        self.arena(client, |a| buf.copy_from_slice(&a[o..o + n]));
        Ok(())
    }

    fn mem_write(&self, client: u32, offset: u64, data: &[u8]) -> Result<()> {
        self.check(client, offset, data.len() as u64, "a write");
        let o = offset as usize;
        self.arena(client, |a| a[o..o + data.len()].copy_from_slice(data));
        Ok(())
    }

    fn mem_copy(&self, (cd, dst): (u32, u64), (cs, src): (u32, u64), len: u64) -> Result<()> {
        self.check(cd, dst, len, "a copy destination");
        self.check(cs, src, len, "a copy source");
        let (d, s, n) = (dst as usize, src as usize, len as usize);
        if cd == cs {
            self.arena(cd, |a| a.copy_within(s..s + n, d));
        } else {
            let bytes = self.arena(cs, |a| a[s..s + n].to_vec());
            self.arena(cd, |a| a[d..d + n].copy_from_slice(&bytes));
        }
        Ok(())
    }

    fn mem_fill(&self, client: u32, dst: u64, len: u64, pattern: u32) -> Result<()> {
        assert!(
            len.is_multiple_of(4),
            "fill length {len} not a multiple of 4"
        );
        self.check(client, dst, len, "a fill");
        let (d, n) = (dst as usize, len as usize);
        self.arena(client, |a| {
            for c in a[d..d + n].chunks_exact_mut(4) {
                c.copy_from_slice(&pattern.to_ne_bytes());
            }
        });
        Ok(())
    }

    fn now_ns(&self) -> u64 {
        self.now.fetch_add(1, core::sync::atomic::Ordering::Relaxed) + 1
    }

    fn trace_logs(&self) -> &[crate::observe::TraceLog] {
        &self.traces
    }

    fn kick_stream(&mut self, _stream: u32) {
        self.kicks += 1;
    }

    fn notify_waiters(&self, client: u32) {
        self.notified
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(client);
    }
}

/// A fresh device of [`MEM`] bytes (per-client limit [`CLIENT_LIMIT`]) over a
/// [`HeapPlatform`].
pub fn device() -> DeviceCore<HeapPlatform> {
    device_with(MEM, CLIENT_LIMIT)
}

/// A fresh device of `memory_size` bytes, `client_limit` per client (0: the whole device),
/// over a [`HeapPlatform`].
pub fn device_with(memory_size: u64, client_limit: u64) -> DeviceCore<HeapPlatform> {
    DeviceCore::new(
        Config {
            device_id: 0,
            memory_size,
            client_memory_limit: client_limit,
            page_size: PAGE,
            platform_features: Features::DOORBELL_FUTEX,
            quota: Quota::FAIR,
        },
        HeapPlatform::default(),
    )
}

/// Open parameters for `pid`.
pub fn params(pid: u32, role: Role, admin: bool) -> OpenParams {
    let mut container = [0u8; CONTAINER_LEN];
    let name = format!("fuzz-{pid}");
    container[..name.len()].copy_from_slice(name.as_bytes());
    OpenParams {
        role,
        pid,
        uid: if admin { 0 } else { 1000 + pid },
        admin,
        container,
        comm: davinci_uapi::ClientUsage::comm_field(&name),
        tenant: crate::Tenant::of(if admin { 0 } else { 1000 + pid }, &container),
    }
}

/// Raw pointers to one stream's shared memory, copied out of the device's `StreamMem` (the
/// memory stays put while the stream lives).
#[derive(Clone, Copy, Debug)]
pub struct RingMem {
    /// Command ring base.
    pub cmd: *mut u8,
    /// Command ring bytes.
    pub cmd_len: usize,
    /// Event ring base.
    pub event: *mut u8,
    /// Event ring bytes.
    pub event_len: usize,
    /// Command ring depth.
    pub cmd_entries: u32,
    /// Event ring depth.
    pub event_entries: u32,
}

impl RingMem {
    /// The memory of `client`'s `stream`.
    pub fn of(dev: &DeviceCore<HeapPlatform>, client: u32, stream: u32) -> Option<RingMem> {
        dev.stream_mem(client, stream).map(|m| RingMem {
            cmd: m.cmd_ptr,
            cmd_len: m.cmd_len,
            event: m.event_ptr,
            event_len: m.event_len,
            cmd_entries: m.cmd_entries,
            event_entries: m.event_entries,
        })
    }

    fn word(base: *mut u8, off: usize) -> &'static AtomicU32 {
        assert!(off + 4 <= hdr::SIZE && off.is_multiple_of(4));
        // SAFETY: `base` is a live, 64-byte-aligned ring mapping of at least `hdr::SIZE`
        // bytes (callers use a `RingMem` only while its stream exists), `off` is a 4-aligned
        // header offset, and every access to header words anywhere is atomic.
        unsafe { AtomicU32::from_ptr(base.add(off).cast::<u32>()) }
    }

    /// Reads a command-ring header word.
    pub fn cmd_hdr(&self, off: usize) -> u32 {
        Self::word(self.cmd, off).load(Ordering::Acquire)
    }
    /// Writes a command-ring header word (the host's side, hostile or not).
    pub fn set_cmd_hdr(&self, off: usize, v: u32) {
        Self::word(self.cmd, off).store(v, Ordering::Release)
    }
    /// Reads an event-ring header word.
    pub fn event_hdr(&self, off: usize) -> u32 {
        Self::word(self.event, off).load(Ordering::Acquire)
    }
    /// Writes an event-ring header word.
    pub fn set_event_hdr(&self, off: usize, v: u32) {
        Self::word(self.event, off).store(v, Ordering::Release)
    }

    /// Writes raw bytes into command slot `index & (entries - 1)`.
    pub fn write_cmd_slot(&self, index: u32, bytes: &[u8; 64]) {
        let i = (index & (self.cmd_entries - 1)) as usize;
        let off = hdr::SIZE + i * 64;
        assert!(off + 64 <= self.cmd_len);
        // SAFETY: `off + 64` lies inside the live command ring mapping (checked above); the
        // copy is made of relaxed atomic stores, like every other access to shared memory.
        unsafe { store_bytes(self.cmd.add(off), bytes) }
    }

    /// Scribbles `bytes` over the event ring's slot area starting at byte `at` (wrapping).
    pub fn scribble_event_slots(&self, at: usize, bytes: &[u8]) {
        let area = self.event_len - hdr::SIZE;
        if area == 0 || bytes.is_empty() {
            return;
        }
        let start = at % area;
        let n = bytes.len().min(area - start);
        // SAFETY: `[hdr::SIZE + start, + n)` lies inside the live event ring mapping; the
        // copy is made of relaxed atomic stores.
        unsafe { store_bytes(self.event.add(hdr::SIZE + start), &bytes[..n]) }
    }

    /// A host producer end on the command ring. Build at most one at a time per stream, and
    /// drop it before the stream is destroyed.
    pub fn host_producer(&self) -> Producer<TaskDesc> {
        // SAFETY: the mapping is live and aligned (see `create_stream`); the device holds
        // the only consumer end and this is the only producer end.
        let r = unsafe { RingRegion::new(self.cmd, self.cmd_len, self.cmd_entries, 64) };
        Producer::new(r.expect("command ring region the device accepted"))
    }

    /// A host consumer end on the event ring (same rules as [`host_producer`](Self::host_producer)).
    pub fn host_consumer(&self) -> Consumer<EventRecord> {
        // SAFETY: as for `host_producer`; the device holds the only producer end of the
        // event ring and this is the only consumer end.
        let r = unsafe { RingRegion::new(self.event, self.event_len, self.event_entries, 32) };
        Consumer::new(r.expect("event ring region the device accepted"))
    }
}

/// Copies `bytes` to `dst` with relaxed atomic byte stores (the memory is shared with the
/// device side of the same test, which reads it atomically).
///
/// # Safety
/// `[dst, dst + bytes.len())` is valid for writes for the whole call and reached only
/// through atomics meanwhile.
unsafe fn store_bytes(dst: *mut u8, bytes: &[u8]) {
    for (i, &b) in bytes.iter().enumerate() {
        // SAFETY: `i < bytes.len()`: inside the range of the contract; bytes need no
        // alignment.
        unsafe { core::sync::atomic::AtomicU8::from_ptr(dst.add(i)) }.store(b, Ordering::Relaxed);
    }
}
