// SPDX-License-Identifier: GPL-2.0

//! The PCI device locked ([`Locked`], from [`PciShared::lock`]): one admin request at a time
//! and its completion ([`Locked::call`]), what the completion revoked unmapped before the
//! lock goes, the opens table, BAR2's list area, and losing the device (a completion that
//! does not come while the heartbeat stands still, or that does not decode).

use core::sync::atomic::Ordering;
use kernel::bindings;
use kernel::ffi::c_int;
use kernel::prelude::*;

use super::dev::{fail_ring, read_shm, Inner, PciShared, RingNote};
use crate::davinci_hwif::bytes::{bytes_to_words, words_to_bytes};
use crate::davinci_hwif::layout::HEARTBEAT_OFFSET;
use crate::davinci_hwif::{AdminOp, AdminRequest, Completion, ADMIN_ENTRY_SIZE, VECTOR_ADMIN};
use crate::davinci_uapi::Errno;
use crate::sys::{self, FileMapping};

extern "C" {
    fn davinci_wq_wake_one(wq: *mut bindings::wait_queue_head);
    fn davinci_lock_wait(
        wq: *mut bindings::wait_queue_head,
        locked: *mut i32,
        killable: c_int,
    ) -> c_int;
}

impl PciShared {
    /// The device's lock, for a call: `Err(EINTR)` if the caller is killed while it waits.
    pub(crate) fn lock(&self) -> Result<Locked<'_>> {
        self.acquire(true)?;
        Ok(Locked::new(self))
    }

    /// The device's lock, whatever signal comes (release, remove: what they do must happen).
    pub(crate) fn lock_idle(&self) -> Locked<'_> {
        while self.acquire(false).is_err() {}
        Locked::new(self)
    }

    fn acquire(&self, killable: bool) -> Result {
        if self
            .locked
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return Ok(());
        }
        // SAFETY: `lock_wq` lives as long as `self`; `locked` is a live atomic the helper only
        // touches with `cmpxchg` (fully ordered: acquiring).
        let r = unsafe {
            davinci_lock_wait(
                self.lock_wq.get(),
                self.locked.as_ptr(),
                c_int::from(killable),
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(EINTR)
        }
    }

    /// No new open; the device is gone for every open file (`ENODEV`), every sleeper wakes,
    /// every mapping of its BARs goes. Called by remove before the BARs are unmapped (and by
    /// a probe failing after `ready`); a second call does nothing more.
    pub(crate) fn stop(&self) {
        self.deregister_node();
        let mut l = self.lock_idle();
        l.kill();
        drop(l);
        self.wake_all();
    }
}

/// The longest a device may take to answer one admin request while its heartbeat moves.
const ADMIN_TIMEOUT_NS: u64 = 30_000_000_000;
/// A heartbeat standing still this long while a request waits: the device is lost.
const HEARTBEAT_STALL_NS: u64 = 3_000_000_000;
/// How often a waiting request looks again without an interrupt (a safety net).
const ADMIN_POLL_MS: u32 = 10;
/// Most opens a PCI device tracks (its client table is driver-core's, 320).
const MAX_OPENS: usize = 320;
/// Most command rings it notes for a loss (driver-core's stream table holds 256; a ring not
/// noted is only not marked: its client learns of the loss at its next call).
const MAX_RINGS: usize = 256;

/// Removes every element of `v` that `gone` picks (the order is not kept).
fn remove_where<T: Copy>(v: &mut KVec<T>, mut gone: impl FnMut(&T) -> bool) {
    let mut i = 0;
    while i < v.len() {
        if gone(&v[i]) {
            let last = v.len() - 1;
            v.as_mut_slice().swap(i, last);
            // SAFETY: `last < len`; the element past the new length is plain data (`Copy`,
            // no drop), now unreachable.
            unsafe { v.set_len(last) };
        } else {
            i += 1;
        }
    }
}

impl PciShared {
    /// The watchdog's tick (`pci/helpers.c`, once a second): a heartbeat that stood still for
    /// [`HEARTBEAT_STALL_NS`] loses the device. `false` once it is lost or stopped (no more
    /// ticks). A call in progress holds the lock and watches the heartbeat itself.
    pub(crate) fn watch(&self) -> bool {
        if self.dead.load(Ordering::Acquire) {
            return false;
        }
        if self
            .locked
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return true;
        }
        let mut l = Locked::new(self);
        if l.dead() {
            return false;
        }
        let (hb, now) = (l.heartbeat(), sys::now_ns());
        if l.beat.1 == 0 || hb != l.beat.0 {
            l.beat = (hb, now);
        } else if now.wrapping_sub(l.beat.1) > HEARTBEAT_STALL_NS {
            l.lose("its heartbeat stopped (watchdog)");
            return false;
        }
        true
    }
}

/// The locked device: admin calls and the opens table. Releases the lock on drop.
pub(crate) struct Locked<'a> {
    dev: &'a PciShared,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.dev.locked.store(0, Ordering::Release);
        // SAFETY: the wait queue lives as long as the device.
        unsafe { davinci_wq_wake_one(self.dev.lock_wq.get()) };
    }
}

impl core::ops::Deref for Locked<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        // SAFETY: this value holds the lock (type invariant): no other reference to `inner`.
        unsafe { &*self.dev.inner.get() }
    }
}

impl core::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        // SAFETY: as in `deref`; `&mut self` makes this the only one.
        unsafe { &mut *self.dev.inner.get() }
    }
}

impl Locked<'_> {
    /// Forgets the admin rings and the C side; every mapping goes (the device is being
    /// removed: its BARs are unmapped next).
    pub(crate) fn kill(&mut self) {
        self.dev.dead.store(true, Ordering::Release);
        self.admin = None;
        self.pci = None;
        for (_, m) in self.opens.iter() {
            // SAFETY: each mapping is an open file's (removed at its release); process
            // context with only the device lock held.
            unsafe { sys::revoke(*m, 0, 0) };
        }
    }

    /// The device stopped answering: it is lost for good (logged with `why`). Every call
    /// fails with `ENODEV` from now on and every sleeper wakes; what clients mapped stays
    /// mapped (BAR2 is still the guest's memory while the device is bound: nothing moves in
    /// it any more) until removal, and a page not yet mapped faults (SIGBUS).
    fn lose(&mut self, why: &str) {
        if self.admin.is_none() {
            return;
        }
        pr_err!(
            "davinci{}: PCI device {} lost: {}; its clients get ENODEV\n",
            self.dev.index,
            self.dev.bus_text(),
            why
        );
        // Every stream a client maps stops in the error state, so that one polling its rings
        // without a system call sees the loss too.
        let mut marked = 0;
        for r in self.rings.iter() {
            // SAFETY: `admin` is still present (the mapping is live) and the device is lost.
            if unsafe { fail_ring(&self.dev.shm, r.offset, r.len, Errno::ENODEV.code() as u32) } {
                marked += 1;
            }
        }
        if marked > 0 {
            pr_err!(
                "davinci{}: {} streams put in the error state (ENODEV)\n",
                self.dev.index,
                marked
            );
        }
        self.dev.dead.store(true, Ordering::Release);
        self.admin = None;
        self.dev.wake_all();
    }

    /// Notes a command ring `client` maps at `cookie` (MMAP_TARGET's reply): marked if the
    /// device is lost.
    pub(crate) fn note_ring(&mut self, client: u32, cookie: u64, offset: u64, len: u64) {
        let rings = &mut self.rings;
        if rings.len() >= MAX_RINGS
            || rings
                .iter()
                .any(|r| r.client == client && r.cookie == cookie)
        {
            return;
        }
        let _ = rings.push(
            RingNote {
                client,
                cookie,
                offset,
                len,
            },
            GFP_KERNEL,
        );
    }

    /// Adds an open's file mapping (after its OPEN succeeded).
    pub(crate) fn add_open(&mut self, client: u32, mapping: FileMapping) -> Result {
        if self.opens.len() >= MAX_OPENS {
            return Err(ENOSPC);
        }
        self.opens.push((client, mapping), GFP_KERNEL)?;
        Ok(())
    }

    /// Forgets an open (at its release).
    pub(crate) fn remove_open(&mut self, client: u32) {
        remove_where(&mut self.opens, |(c, _)| *c == client);
        remove_where(&mut self.rings, |r| r.client == client);
    }

    /// Rings the device's `vector` (test hook).
    pub(crate) fn ring_device(&self, vector: u16) -> Result {
        let pci = self.pci.as_ref().ok_or(ENODEV)?;
        pci.doorbell(crate::davinci_hwif::regs::DEVICE_PEER, vector);
        Ok(())
    }

    /// Whether the device is gone.
    pub(crate) fn dead(&self) -> bool {
        self.admin.is_none()
    }

    /// One admin request and its completion (tag checked); what it revoked is unmapped before
    /// this returns. `ENODEV` once the device is gone (or goes while this waits).
    pub(crate) fn call(&mut self, client: u32, op: AdminOp) -> Result<KBox<Completion>, Errno> {
        let dev = self.dev;
        let mut before = 0;
        let tag = {
            let g = &mut **self;
            let (Some(admin), Some(pci)) = (g.admin.as_mut(), g.pci.as_ref()) else {
                return Err(Errno::ENODEV);
            };
            g.tag = g.tag.wrapping_add(1);
            AdminRequest {
                tag: g.tag,
                client,
                op,
            }
            .encode(&mut g.slot);
            g.words = bytes_to_words(&g.slot);
            if admin.sq.push(&g.words).is_ok() {
                before = dev.count(u32::from(VECTOR_ADMIN));
                admin.sq.publish();
                pci.doorbell(crate::davinci_hwif::regs::DEVICE_PEER, VECTOR_ADMIN);
                Some(g.tag)
            } else {
                None
            }
        };
        let Some(tag) = tag else {
            // One request in flight at a time: a full ring means the device took none.
            self.lose("its admin submission ring stayed full");
            return Err(Errno::ENODEV);
        };
        let start = sys::now_ns();
        let mut beat = (self.heartbeat(), start);
        loop {
            match self.take_completion(tag) {
                Ok(Some(c)) => {
                    self.revoke(&c);
                    return Ok(c);
                }
                Ok(None) => {}
                Err(why) => {
                    self.lose(why);
                    return Err(Errno::ENODEV);
                }
            }
            let now = sys::now_ns();
            let hb = self.heartbeat();
            if hb != beat.0 {
                beat = (hb, now);
            }
            if now.wrapping_sub(beat.1) > HEARTBEAT_STALL_NS {
                self.lose("its heartbeat stopped while a request waited");
                return Err(Errno::ENODEV);
            }
            if now.wrapping_sub(start) > ADMIN_TIMEOUT_NS {
                self.lose("no admin completion within 30 s");
                return Err(Errno::ENODEV);
            }
            let _ = dev.wait_irq(u32::from(VECTOR_ADMIN), before, ADMIN_POLL_MS, false);
            before = dev.count(u32::from(VECTOR_ADMIN));
        }
    }

    /// BAR2's heartbeat word now (0 if unreadable).
    fn heartbeat(&self) -> u32 {
        let mut w = [0u8; 4];
        // SAFETY: called with `admin` present (the mapping is live); the range is checked.
        if unsafe { read_shm(&self.dev.shm, HEARTBEAT_OFFSET, &mut w) } {
            u32::from_le_bytes(w)
        } else {
            0
        }
    }

    /// The completion for `tag`, if it came; one for another tag (stale) is dropped.
    /// `Err` (why) when what the device wrote cannot be a completion.
    fn take_completion(
        &mut self,
        tag: u64,
    ) -> core::result::Result<Option<KBox<Completion>>, &'static str> {
        let g = &mut **self;
        let Some(admin) = g.admin.as_mut() else {
            return Err("stopped");
        };
        let mut got = false;
        let words = &mut g.words;
        admin.cq.consume(1, |s| {
            *words = s;
            got = true;
        });
        if !got {
            return Ok(None);
        }
        let bytes: [u8; ADMIN_ENTRY_SIZE] = words_to_bytes(&g.words);
        let c = Completion::decode(&bytes).map_err(|_| "it wrote a malformed admin completion")?;
        if c.tag != tag {
            // Rate-limited: a device can send these at will.
            if crate::sys::log_ratelimit() {
                pr_notice!(
                    "davinci{}: dropped an admin completion for tag {} (waiting for {})\n",
                    self.dev.index,
                    c.tag,
                    tag
                );
            }
            return Ok(None);
        }
        KBox::new(c, GFP_KERNEL)
            .map(Some)
            .map_err(|_| "out of memory for a completion")
    }

    /// Unmaps what `c` says the device freed, before another request can hand those pages to
    /// someone else.
    fn revoke(&mut self, c: &Completion) {
        if c.revokes_overflowed() {
            remove_where(&mut self.rings, |_| true);
        }
        for r in c.revokes() {
            let end = r.cookie.saturating_add(r.len);
            remove_where(&mut self.rings, |n| {
                n.client == r.client && n.cookie >= r.cookie && n.cookie < end
            });
        }
        let opens = &self.opens;
        if c.revokes_overflowed() {
            for (_, m) in opens.iter() {
                // SAFETY: an open file's mapping (removed at release); process context.
                unsafe { sys::revoke(*m, 0, 0) };
            }
            return;
        }
        for r in c.revokes() {
            if let Some((_, m)) = opens.iter().find(|(cl, _)| *cl == r.client) {
                // SAFETY: as above.
                unsafe { sys::revoke(*m, r.cookie, r.len) };
            }
        }
    }

    /// Copies `out.len()` bytes of BAR2's list area (from its start) into `out`.
    pub(crate) fn read_list(&self, out: &mut [u8]) -> Result {
        if self.dead() || out.len() as u64 > self.dev.layout.list_bytes {
            return Err(ENODEV);
        }
        // SAFETY: the device is not stopped (the mapping is live); the range is checked.
        if unsafe { read_shm(&self.dev.shm, self.dev.layout.list_offset, out) } {
            Ok(())
        } else {
            Err(EFAULT)
        }
    }
}

impl<'a> Locked<'a> {
    /// The guard of `dev`, whose lock the caller has just taken.
    pub(crate) fn new(dev: &'a PciShared) -> Self {
        Locked { dev }
    }
}
