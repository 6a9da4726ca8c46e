// SPDX-License-Identifier: GPL-2.0

//! [`KernelPlatform`]: driver-core's `Platform` in the kernel. Ring, doorbell and device memory
//! are vmalloc buffers ([`VBuf`]) charged to the opener's memory cgroup, which clients map
//! page by page on fault (`fops`); freeing an object revokes its mappings first
//! ([`Platform::revoke_mappings`] through the owner's file mapping), so no page outlives the
//! device's accounting. The device side touches the buffers only with the relaxed-atomic
//! copies of `davinci_shm_copy`, since the client's mapping writes them concurrently.
//!
//! # Invariants
//!
//! Every method runs with the device mutex held: this host serialises every call on a device,
//! control path and data path alike (its one worker runs the streams), so the backing table is
//! never touched concurrently, and driver-core's per-stream and per-event locks are
//! [`Serialized`] cells.

use core::ptr::NonNull;

use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::alloc::KVVec;
use kernel::prelude::*;

use crate::davinci_driver_core::observe::{TraceLog, TRACE_BUFFERS};
use crate::davinci_driver_core::{
    Error, Platform, Result, Serialized, StreamRegions, MAX_ALLOCATIONS, MAX_CLIENTS,
};
use crate::davinci_ring::RingRegion;
use crate::davinci_shm_copy::{copy_from_shared, copy_to_shared, fill_shared};
use crate::davinci_uapi::task::{EVENT_RECORD_SIZE, TASK_DESC_SIZE};
use crate::davinci_uapi::{Errno, DOORBELL_SIZE};
use crate::sys::{self, FileMapping};
use crate::wake::Wake;

/// Buffers alive, over every device: zero once every client closed, checked at
/// module unload (a leak is reported as `davinci: leak: ...`).
pub(crate) static LIVE_BUFFERS: AtomicUsize = AtomicUsize::new(0);

/// A zeroed, page-aligned vmalloc buffer charged to its creator's memory cgroup, freed on
/// drop.
///
/// # Invariants
///
/// `ptr` points at `len` bytes from `sys::buf_alloc`, owned by this value until it is
/// dropped. Driver-core revokes an object's mappings before it drops its buffer, so no page
/// is mapped when it is freed.
pub(crate) struct VBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain kernel memory owned by this value; whoever holds it may use it
// from any thread (all accesses happen under the device mutex or through atomics).
unsafe impl Send for VBuf {}

impl VBuf {
    /// `len` zeroed bytes (a page multiple), or `ENOMEM`.
    pub(crate) fn new(len: usize) -> Result<VBuf> {
        if len == 0 {
            return Err(Error::new(Errno::EINVAL, "buffer of 0 bytes"));
        }
        match sys::buf_alloc(len) {
            Some(ptr) => {
                LIVE_BUFFERS.fetch_add(1, Ordering::Relaxed);
                Ok(VBuf { ptr, len })
            }
            None => Err(Error::new(Errno::ENOMEM, "out of kernel memory (vmalloc)")),
        }
    }

    /// The first byte, for `remap_vmalloc_range` and ring views.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `[offset, offset + n)` as a pointer, if it lies inside the buffer.
    fn range(&self, offset: u64, n: usize) -> Option<*mut u8> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(n)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `start <= end <= len`: within (or one past) the allocation.
        Some(unsafe { self.ptr.as_ptr().add(start) })
    }
}

impl Drop for VBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `buf_alloc(len)` and is freed exactly once, here (type
        // invariant); its object's mappings were revoked before (`revoke_mappings`).
        unsafe { sys::buf_free(self.ptr, self.len) };
        LIVE_BUFFERS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One stream's shared memory.
pub(crate) struct StreamMem {
    pub(crate) cmd: VBuf,
    pub(crate) event: VBuf,
    pub(crate) doorbell: VBuf,
}

/// One allocation's backing.
struct Backing {
    client: u32,
    offset: u64,
    buf: VBuf,
}

/// Freed device memory at least this large is dropped after the device lock is released
/// ([`KernelPlatform::take_dying`]), not under it: freeing a large vmalloc buffer costs about
/// what zeroing it did.
const DEFER_FREE_BYTES: usize = 1 << 20;

/// The kernel's platform: device-memory backings, each open's file mapping (where its
/// objects' mappings are linked, for revoking them) and the device's wake-ups.
pub(crate) struct KernelPlatform {
    backings: [Option<Backing>; MAX_ALLOCATIONS],
    mappings: [Option<(u32, FileMapping)>; MAX_CLIENTS],
    wake: Option<Wake>,
    /// The buffer the ALLOC_MEMORY in progress made before it took the device lock
    /// (`ioctl::premade`): [`alloc_backing`](Platform::alloc_backing) takes it when it is the
    /// size driver-core backs, so no large buffer is allocated and zeroed under the lock.
    premade: Option<VBuf>,
    /// Large buffers freed under the device lock, dropped once it is released
    /// ([`take_dying`](Self::take_dying), from the lock guard's drop).
    dying: KVVec<VBuf>,
    /// TRACE's buffers (224 KiB, in the device's static storage like the rest of it).
    traces: [TraceLog; TRACE_BUFFERS],
}

fn fault() -> Error {
    Error::new(Errno::EFAULT, "device memory access outside the allocation")
}

impl KernelPlatform {
    /// No backings; wake-ups go nowhere until [`set_wake`](Self::set_wake). `const`: it lives
    /// in the device's static storage.
    pub(crate) const fn new() -> Self {
        KernelPlatform {
            backings: [const { None }; MAX_ALLOCATIONS],
            mappings: [const { None }; MAX_CLIENTS],
            wake: None,
            premade: None,
            dying: KVVec::new(),
            traces: [const { TraceLog::new() }; TRACE_BUFFERS],
        }
    }

    /// Hands the buffer an ALLOC_MEMORY made before it took the lock to the call about to
    /// run (`None` clears it).
    pub(crate) fn set_premade(&mut self, buf: Option<VBuf>) {
        self.premade = buf;
    }

    /// The premade buffer, if the call did not take it (it failed, or backed another size),
    /// goes with the freed ones: dropped once the lock is released.
    pub(crate) fn retire_premade(&mut self) {
        if let Some(b) = self.premade.take() {
            // If the list cannot grow, the buffer is freed here, under the lock.
            let _ = self.dying.push(b, GFP_KERNEL | __GFP_NOWARN);
        }
    }

    /// The large buffers freed since the lock was taken, to drop once it is released.
    pub(crate) fn take_dying(&mut self) -> KVVec<VBuf> {
        core::mem::replace(&mut self.dying, KVVec::new())
    }

    /// Open `client`'s file mapping (set in `open`, right after the device's own open): its
    /// slot, which is also the wait queue its WAIT_EVENTs sleep on (`wake::WAIT_QUEUES`).
    /// `None` only if every slot is taken, which the device's own bound on opens
    /// (`MAX_CLIENTS`) prevents.
    pub(crate) fn set_mapping(&mut self, client: u32, mapping: FileMapping) -> Option<usize> {
        // The device has at most MAX_CLIENTS opens, each set once and cleared at release.
        let (i, slot) = self
            .mappings
            .iter_mut()
            .enumerate()
            .find(|(_, m)| m.is_none())?;
        *slot = Some((client, mapping));
        Some(i)
    }

    /// The slot (and wait queue) of open `client`.
    fn slot_of(&self, client: u32) -> Option<usize> {
        self.mappings
            .iter()
            .position(|m| matches!(m, Some((c, _)) if *c == client))
    }

    /// Forgets open `client`'s file mapping (at release, after its objects went).
    pub(crate) fn clear_mapping(&mut self, client: u32) {
        for m in self.mappings.iter_mut() {
            if matches!(m, Some((c, _)) if *c == client) {
                *m = None;
            }
        }
    }

    /// Where wake-ups go (the device's wait queues), once they exist.
    pub(crate) fn set_wake(&mut self, wake: Wake) {
        self.wake = Some(wake);
    }

    fn find(&self, client: u32, offset: u64, len: u64) -> Result<(&VBuf, u64)> {
        for b in self.backings.iter().flatten() {
            if b.client != client || offset < b.offset {
                continue;
            }
            let rel = offset - b.offset;
            if rel
                .checked_add(len)
                .is_some_and(|end| end <= b.buf.len() as u64)
            {
                return Ok((&b.buf, rel));
            }
        }
        Err(fault())
    }

    /// The buffer backing the allocation of `client` that starts at `offset` (for mmap).
    pub(crate) fn backing(&self, client: u32, offset: u64) -> Option<&VBuf> {
        self.backings
            .iter()
            .flatten()
            .find(|b| b.client == client && b.offset == offset)
            .map(|b| &b.buf)
    }
}

impl Platform for KernelPlatform {
    type StreamMem = StreamMem;
    // Every device call runs with the device mutex held, so the per-stream and per-event
    // locks need no atomics of their own.
    type Lock<T> = Serialized<T>;

    fn create_stream(
        &mut self,
        _client: u32,
        cmd_entries: u32,
        cmd_bytes: usize,
        event_entries: u32,
        event_bytes: usize,
    ) -> Result<StreamRegions<StreamMem>> {
        let mem = StreamMem {
            cmd: VBuf::new(cmd_bytes)?,
            event: VBuf::new(event_bytes)?,
            doorbell: VBuf::new(DOORBELL_SIZE as usize)?,
        };
        // SAFETY: each buffer is page aligned (so 64-byte aligned), `len` bytes long, and lives
        // in the `StreamMem` that driver-core keeps next to these views, dropping the views
        // before handing the memory back (`release_stream`). On the device side only these
        // ring ends touch it; the client reaches it through its own mapping.
        let cmd = unsafe {
            RingRegion::new(mem.cmd.as_ptr(), mem.cmd.len(), cmd_entries, TASK_DESC_SIZE)
        };
        // SAFETY: as above, for the event ring.
        let event = unsafe {
            RingRegion::new(
                mem.event.as_ptr(),
                mem.event.len(),
                event_entries,
                EVENT_RECORD_SIZE,
            )
        };
        match (cmd, event) {
            (Ok(cmd), Ok(event)) => Ok(StreamRegions { mem, cmd, event }),
            _ => Err(Error::new(
                Errno::EINVAL,
                "ring geometry does not fit its buffer",
            )),
        }
    }

    fn release_stream(&mut self, _client: u32, stream: u32, mem: StreamMem) {
        drop(mem);
        // Wake the worker: its stream is gone.
        self.kick_stream(stream);
    }

    fn alloc_backing(&mut self, client: u32, offset: u64, len: u64) -> Result<()> {
        let len = usize::try_from(len)
            .map_err(|_| Error::new(Errno::ENOMEM, "allocation larger than the address space"))?;
        let Some(slot) = self.backings.iter_mut().find(|b| b.is_none()) else {
            return Err(Error::new(Errno::ENOSPC, "backing table full"));
        };
        // The buffer the caller made before it took the lock (`ioctl::premade`), if it is
        // this size; else (another size, or no premade one) one made here, under the lock.
        let buf = match self.premade.take() {
            Some(b) if b.len() == len => b,
            other => {
                self.premade = other;
                VBuf::new(len)?
            }
        };
        *slot = Some(Backing {
            client,
            offset,
            buf,
        });
        Ok(())
    }

    fn free_backing(&mut self, client: u32, offset: u64, _len: u64) {
        if let Some(slot) = self
            .backings
            .iter_mut()
            .find(|b| matches!(b, Some(b) if b.client == client && b.offset == offset))
        {
            // Its mappings were revoked (`revoke_mappings`): the pages go now (a large
            // buffer once the lock is released); the next allocation gets fresh zeroed ones.
            if let Some(b) = slot.take() {
                if b.buf.len() >= DEFER_FREE_BYTES {
                    // If the list cannot grow, the buffer is freed here, under the lock.
                    let _ = self.dying.push(b.buf, GFP_KERNEL | __GFP_NOWARN);
                }
            }
        }
    }

    fn revoke_mappings(&mut self, client: u32, cookie: u64, len: u64) {
        let Some((_, mapping)) = self.mappings.iter().flatten().find(|(c, _)| *c == client) else {
            // No file: the open is going and has no mapping left.
            return;
        };
        // SAFETY: the mapping is the file's of an open still attached (cleared at release,
        // after everything it held went); every platform call runs in process context with
        // only the device mutex held.
        unsafe { sys::revoke(*mapping, cookie, len) };
    }

    fn mem_read(&self, client: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (b, rel) = self.find(client, offset, buf.len() as u64)?;
        let src = b.range(rel, buf.len()).ok_or_else(fault)?;
        // SAFETY: `range` checked `[src, src + len)` lies in the live buffer; `buf` is kernel
        // memory outside it; every access to the shared bytes is atomic.
        unsafe { copy_from_shared(src, buf) };
        Ok(())
    }

    fn mem_write(&self, client: u32, offset: u64, data: &[u8]) -> Result<()> {
        let (b, rel) = self.find(client, offset, data.len() as u64)?;
        let dst = b.range(rel, data.len()).ok_or_else(fault)?;
        // SAFETY: as in `mem_read`, in the other direction.
        unsafe { copy_to_shared(dst, data) };
        Ok(())
    }

    fn mem_copy(&self, (cd, dst): (u32, u64), (cs, src): (u32, u64), len: u64) -> Result<()> {
        // Each range lies in one allocation (driver-core validated them; they may be two, of
        // two clients when one was exported). A bounce buffer makes each step a complete read
        // before its write, stepping in the order an overlap within one buffer needs.
        const STEP: usize = 256;
        let (bd, rel_dst) = self.find(cd, dst, len)?;
        let (bs, rel_src) = self.find(cs, src, len)?;
        let n = usize::try_from(len).map_err(|_| fault())?;
        let d = bd.range(rel_dst, n).ok_or_else(fault)?;
        let s = bs.range(rel_src, n).ok_or_else(fault)?;
        let mut bounce = [0u8; STEP];
        let mut step = |off: usize, k: usize| {
            // SAFETY: `off + k <= n` (loops below) and both `[s, s + n)` and `[d, d + n)` lie
            // in the live buffer (`range`); the bounce buffer is kernel stack memory.
            unsafe {
                copy_from_shared(s.add(off), &mut bounce[..k]);
                copy_to_shared(d.add(off), &bounce[..k]);
            }
        };
        if (d as usize) <= (s as usize) {
            let mut off = 0;
            while off < n {
                let k = (n - off).min(STEP);
                step(off, k);
                off += k;
            }
        } else {
            let mut end = n;
            while end > 0 {
                let k = end.min(STEP);
                step(end - k, k);
                end -= k;
            }
        }
        Ok(())
    }

    fn mem_fill(&self, client: u32, dst: u64, len: u64, pattern: u32) -> Result<()> {
        let (b, rel) = self.find(client, dst, len)?;
        let n = usize::try_from(len).map_err(|_| fault())?;
        let d = b.range(rel, n).ok_or_else(fault)?;
        // SAFETY: `range` checked `[d, d + n)` lies in the live buffer; the device side
        // touches it only atomically (the client's mapping may write it concurrently).
        unsafe { fill_shared(d, n, pattern) };
        Ok(())
    }

    fn now_ns(&self) -> u64 {
        sys::now_ns()
    }

    fn trace_logs(&self) -> &[TraceLog] {
        &self.traces
    }

    fn kick_stream(&mut self, _stream: u32) {
        // One worker serves every stream of the device.
        if let Some(w) = &self.wake {
            w.kick();
        }
    }

    fn notify_waiters(&self, client: u32) {
        if let Some(w) = &self.wake {
            w.notify(self.slot_of(client));
        }
    }
}
