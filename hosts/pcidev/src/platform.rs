//! [`Bar2Platform`]: driver-core's [`Platform`] over BAR2's heap. Stream rings, their
//! doorbell pages and device memory are runs of heap pages ([`PageAllocator`]), named to
//! the guest by BAR2 offset; device memory offsets (driver-core's) map to the run backing
//! each allocation. The heap is two areas ([`ring_pages`]): the rings' (its first pages) and
//! device memory's (the rest, which is all GET_INFO's `memory_size` says), so streams never
//! take memory a client was promised, and a client's memory limit is exact. Every run is zeroed when taken (the guest may have written free pages)
//! and when given back (what a client still maps of it reads zeros). The wake-ups are
//! recorded, not performed: the device loop raises vector 1 once per pass when they were.
//! So are the revocations (`revoke_mappings`): the request that made them lists them in its
//! completion ([`Bar2Platform::take_revokes`]), and the guest unmaps the pages before it sends
//! another request, so pages a client still mapped never reach the next owner mapped.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use davinci_driver_core::{Error, Platform, Result, StdLock, StreamRegions, UserMem};
use davinci_hwif::layout::{notify_offset, Bar2Layout, LIST_BUF, PAGE_SIZE};
use davinci_hwif::{Revoke, MAX_REVOKES};
use davinci_shm::OutOfBounds;
use davinci_uapi::task::{EVENT_RECORD_SIZE, TASK_DESC_SIZE};
use davinci_uapi::{Errno, DOORBELL_SIZE};

use crate::alloc::PageAllocator;
use crate::bar2::Bar2;

/// One stream's pages: command ring, event ring, doorbell page, in one run.
#[derive(Debug)]
pub struct StreamPages {
    first: u64,
    pages: u64,
    /// BAR2 offset and page-rounded length of the command ring.
    pub cmd: (u64, u64),
    /// BAR2 offset and page-rounded length of the event ring.
    pub event: (u64, u64),
    /// BAR2 offset of the doorbell page.
    pub doorbell: u64,
    // Last: keeps the mapping alive for the ring views the core holds beside this.
    _bar2: Arc<Bar2>,
}

/// Heap pages kept for stream rings out of `heap_pages`: an eighth, and at least 16 (half of
/// a small heap).
pub fn ring_pages(heap_pages: u64) -> u64 {
    (heap_pages / 8).max((heap_pages / 2).min(16))
}

/// The heap run backing one allocation.
#[derive(Debug, Clone, Copy)]
struct Run {
    first: u64,
    pages: u64,
    len: u64,
}

fn outside() -> Error {
    Error::new(
        Errno::EFAULT,
        "device memory access outside the client's allocations",
    )
}

fn oob(_: OutOfBounds) -> Error {
    outside()
}

fn pages_of(bytes: u64) -> Option<u64> {
    bytes.checked_add(PAGE_SIZE - 1).map(|b| b / PAGE_SIZE)
}

/// The platform of the PCI device.
#[derive(Debug)]
pub struct Bar2Platform {
    bar2: Arc<Bar2>,
    layout: Bar2Layout,
    /// Device memory's pages (heap pages `ring_pages..`, numbered from 0 here).
    heap: PageAllocator,
    /// The rings' pages (heap pages `0..ring_pages`).
    rings: PageAllocator,
    ring_pages: u64,
    backing: BTreeMap<(u32, u64), Run>,
    /// Completions published or events changed since the last pass: raise vector 1.
    irq: AtomicBool,
    /// A stream may have work no doorbell announced (SUBMIT_TASK, NOTIFY, an event reached).
    kicked: AtomicBool,
    /// Revocations since the last [`take_revokes`](Self::take_revokes) (listed up to
    /// [`MAX_REVOKES`], counted beyond).
    revokes: Vec<Revoke>,
    revokes_dropped: u32,
    epoch: Instant,
    /// TRACE's buffers (`davinci_driver_core::observe`).
    traces: Box<[davinci_driver_core::observe::TraceLog]>,
}

impl Bar2Platform {
    /// A platform over `bar2`, laid out as `layout`, with every heap page free.
    pub fn new(bar2: Arc<Bar2>, layout: Bar2Layout) -> Self {
        Self {
            bar2,
            layout,
            heap: PageAllocator::new(layout.heap_pages - ring_pages(layout.heap_pages)),
            rings: PageAllocator::new(ring_pages(layout.heap_pages)),
            ring_pages: ring_pages(layout.heap_pages),
            backing: BTreeMap::new(),
            irq: AtomicBool::new(false),
            kicked: AtomicBool::new(false),
            revokes: Vec::new(),
            revokes_dropped: 0,
            epoch: Instant::now(),
            traces: (0..davinci_driver_core::observe::TRACE_BUFFERS)
                .map(|_| davinci_driver_core::observe::TraceLog::new())
                .collect(),
        }
    }

    /// Device memory's bytes (what driver-core may hand out as device memory at most).
    pub fn heap_bytes(&self) -> u64 {
        (self.layout.heap_pages - self.ring_pages) * PAGE_SIZE
    }

    /// Free pages of device memory.
    pub fn free_pages(&self) -> u64 {
        self.heap.free_pages()
    }

    /// Free pages of the rings' area.
    pub fn free_ring_pages(&self) -> u64 {
        self.rings.free_pages()
    }

    /// Allocations backed now.
    pub fn backed_allocations(&self) -> usize {
        self.backing.len()
    }

    /// Whether vector 1 is due, clearing it.
    pub fn take_irq(&self) -> bool {
        self.irq.swap(false, Ordering::AcqRel)
    }

    /// Whether a stream was kicked, clearing it.
    pub fn take_kick(&self) -> bool {
        self.kicked.swap(false, Ordering::AcqRel)
    }

    /// Where LIST_CLIENTS writes its entries: BAR2's list area.
    pub fn list_area(&self) -> ListArea {
        ListArea {
            bar2: self.bar2.clone(),
            offset: self.layout.list_offset,
            len: self.layout.list_bytes,
        }
    }

    /// The revocations made since the last call, and how many more were made than listed.
    pub fn take_revokes(&mut self) -> (Vec<Revoke>, u32) {
        (
            std::mem::take(&mut self.revokes),
            std::mem::replace(&mut self.revokes_dropped, 0),
        )
    }

    /// The BAR2 range (offset, page-rounded length) backing `owner`'s allocation at device
    /// offset `offset`.
    pub fn allocation_range(&self, owner: u32, offset: u64) -> Result<(u64, u64)> {
        let run = self.backing.get(&(owner, offset)).ok_or(Error::new(
            Errno::ENOENT,
            "no such allocation for this client",
        ))?;
        let at = self.layout.page_offset(run.first).ok_or_else(outside)?;
        Ok((at, run.pages * PAGE_SIZE))
    }

    /// Drops whatever backing a closed client still had (the core freed its allocations
    /// already, so normally nothing).
    pub fn forget_client(&mut self, client: u32) {
        let gone: Vec<_> = self
            .backing
            .range((client, 0)..=(client, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for (c, off) in gone {
            self.free_backing(c, off, 0);
        }
    }

    /// Takes a zeroed run of `pages` pages from the rings' area (`ring`) or device memory's:
    /// its first heap page and BAR2 offset.
    fn take(&mut self, ring: bool, pages: u64) -> Result<(u64, u64)> {
        let (pool, base) = if ring {
            (&mut self.rings, 0)
        } else {
            (&mut self.heap, self.ring_pages)
        };
        let what = if ring {
            "BAR2's ring area has no free run that large"
        } else {
            "BAR2's device memory has no free run that large"
        };
        let got = pool.alloc(pages).ok_or(Error::new(Errno::ENOMEM, what))?;
        let first = base + got;
        let at = match self.layout.page_offset(first) {
            Some(at) if self.bar2.zero(at, pages * PAGE_SIZE).is_ok() => at,
            _ => {
                pool.free(got, pages);
                return Err(outside());
            }
        };
        Ok((first, at))
    }

    /// Zeroes and frees a run (heap pages from `first`).
    fn give_back(&mut self, first: u64, pages: u64) {
        if let Some(at) = self.layout.page_offset(first) {
            let _ = self.bar2.zero(at, pages * PAGE_SIZE);
        }
        if first < self.ring_pages {
            self.rings.free(first, pages);
        } else {
            self.heap.free(first - self.ring_pages, pages);
        }
    }

    /// The BAR2 offset of `[offset, offset + len)` of `client`'s device memory, inside one
    /// allocation.
    fn find(&self, client: u32, offset: u64, len: u64) -> Result<u64> {
        let ((_, start), run) = self
            .backing
            .range((client, 0)..=(client, offset))
            .next_back()
            .ok_or_else(outside)?;
        let at = offset - start;
        if at.checked_add(len).is_none_or(|end| end > run.len) {
            return Err(outside());
        }
        let base = self.layout.page_offset(run.first).ok_or_else(outside)?;
        base.checked_add(at).ok_or_else(outside)
    }
}

/// LIST_CLIENTS' "user memory" on this device: BAR2's list area, addressed from
/// [`LIST_BUF`] (the guest's transport asks with that `buf` and copies the entries to its
/// caller). A write that does not fit is `EFAULT`.
pub struct ListArea {
    bar2: Arc<Bar2>,
    offset: u64,
    len: u64,
}

impl UserMem for ListArea {
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        let fault = || {
            Error::new(
                Errno::EFAULT,
                "LIST entries beyond BAR2's list area (buf must be LIST_BUF)",
            )
        };
        let addr = addr.checked_sub(LIST_BUF).ok_or_else(fault)?;
        let end = addr.checked_add(data.len() as u64).ok_or_else(fault)?;
        if end > self.len {
            return Err(fault());
        }
        self.bar2
            .mapping()
            .write(self.offset + addr, data)
            .map_err(|_| fault())
    }
}

impl Platform for Bar2Platform {
    type StreamMem = StreamPages;
    type Lock<T> = StdLock<T>;

    fn create_stream(
        &mut self,
        _client: u32,
        cmd_entries: u32,
        cmd_bytes: usize,
        event_entries: u32,
        event_bytes: usize,
    ) -> Result<StreamRegions<StreamPages>> {
        let too_big = || Error::new(Errno::ENOMEM, "stream rings larger than BAR2's heap");
        let cmd_pages = pages_of(cmd_bytes as u64).ok_or_else(too_big)?;
        let event_pages = pages_of(event_bytes as u64).ok_or_else(too_big)?;
        let bell_pages = pages_of(DOORBELL_SIZE).ok_or_else(too_big)?;
        let pages = cmd_pages
            .checked_add(event_pages)
            .and_then(|p| p.checked_add(bell_pages))
            .ok_or_else(too_big)?;
        let (first, at) = self.take(true, pages)?;
        let cmd = (at, cmd_pages * PAGE_SIZE);
        let event = (at + cmd.1, event_pages * PAGE_SIZE);
        let doorbell = event.0 + event.1;
        let rings = self
            .bar2
            .ring(cmd.0, cmd.1, cmd_entries, TASK_DESC_SIZE)
            .and_then(|c| {
                self.bar2
                    .ring(event.0, event.1, event_entries, EVENT_RECORD_SIZE)
                    .map(|e| (c, e))
            });
        let (cmd_ring, event_ring) = match rings {
            Ok(r) => r,
            Err(_) => {
                self.give_back(first, pages);
                return Err(Error::new(
                    Errno::EINVAL,
                    "ring geometry does not fit its pages",
                ));
            }
        };
        Ok(StreamRegions {
            mem: StreamPages {
                first,
                pages,
                cmd,
                event,
                doorbell,
                _bar2: self.bar2.clone(),
            },
            cmd: cmd_ring,
            event: event_ring,
        })
    }

    fn release_stream(&mut self, _client: u32, _stream: u32, mem: StreamPages) {
        self.give_back(mem.first, mem.pages);
    }

    fn alloc_backing(&mut self, client: u32, offset: u64, len: u64) -> Result<()> {
        let pages = pages_of(len)
            .filter(|&p| p > 0)
            .ok_or(Error::new(Errno::EINVAL, "allocation of no pages"))?;
        let (first, _) = self.take(false, pages)?;
        if let Some(old) = self
            .backing
            .insert((client, offset), Run { first, pages, len })
        {
            // The core never backs one offset twice; keep the heap consistent if it did.
            self.give_back(old.first, old.pages);
        }
        Ok(())
    }

    fn free_backing(&mut self, client: u32, offset: u64, _len: u64) {
        if let Some(run) = self.backing.remove(&(client, offset)) {
            self.give_back(run.first, run.pages);
        }
    }

    fn mem_read(&self, client: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        let at = self.find(client, offset, buf.len() as u64)?;
        self.bar2.mapping().read(at, buf).map_err(oob)
    }

    fn mem_write(&self, client: u32, offset: u64, data: &[u8]) -> Result<()> {
        let at = self.find(client, offset, data.len() as u64)?;
        self.bar2.mapping().write(at, data).map_err(oob)
    }

    fn mem_copy(&self, (cd, dst): (u32, u64), (cs, src): (u32, u64), len: u64) -> Result<()> {
        let d = self.find(cd, dst, len)?;
        let s = self.find(cs, src, len)?;
        // One mapping: a memmove within it, whichever allocations the ranges are in.
        self.bar2.mapping().copy_within(d, s, len).map_err(oob)
    }

    fn mem_fill(&self, client: u32, dst: u64, len: u64, pattern: u32) -> Result<()> {
        let at = self.find(client, dst, len)?;
        self.bar2.mapping().fill(at, len, pattern).map_err(oob)
    }

    fn revoke_mappings(&mut self, client: u32, cookie: u64, len: u64) {
        if self.revokes.len() < MAX_REVOKES {
            self.revokes.push(Revoke {
                client,
                cookie,
                len,
            });
        } else {
            self.revokes_dropped = self.revokes_dropped.saturating_add(1);
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn trace_logs(&self) -> &[davinci_driver_core::observe::TraceLog] {
        &self.traces
    }

    fn kick_stream(&mut self, _stream: u32) {
        self.kicked.store(true, Ordering::Release);
    }

    fn notify_waiters(&self, client: u32) {
        // The client's notification word first (its sleepers in the guest wait for it to
        // change), then vector 1, which wakes them to look (hwif::layout, since layout 3).
        if let Ok(w) = self.bar2.mapping().word(notify_offset(client)) {
            w.fetch_add(1, Ordering::Release);
        }
        self.irq.store(true, Ordering::Release);
        // A stream blocked on an event this reached may run again.
        self.kicked.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests;
