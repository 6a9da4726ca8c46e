// SPDX-License-Identifier: GPL-2.0

//! The PCI device locked ([`Locked`], from [`PciShared::lock`]): one admin request at a time
//! and its completion ([`Locked::call`]), checked against its request before anything uses
//! it (a completion that breaks the protocol loses the device), what the completion revoked
//! unmapped before the lock goes, the opens table, the mapping rights the device granted
//! (faults are served from them with no round trip), BAR2's list area, and losing the device
//! (a completion that does not come while the heartbeat stands still, that does not decode,
//! or that does not answer its request).

use core::marker::PhantomData;
use core::sync::atomic::Ordering;
use kernel::bindings;
use kernel::ffi::c_int;
use kernel::prelude::*;

use super::dev::{fail_ring, read_shm, Inner, MapRight, PciShared, RingNote};
use crate::davinci_hwif::bytes::{bytes_to_words, words_to_bytes};
use crate::davinci_hwif::layout::HEARTBEAT_OFFSET;
use crate::davinci_hwif::{
    AdminOp, AdminRequest, Completion, ReplyKind, ADMIN_ENTRY_SIZE, VECTOR_ADMIN,
};
use crate::davinci_uapi::{Errno, DRIVER_CMD_WAIT_EVENT};
use crate::sys;

extern "C" {
    fn davinci_pci_mutex_lock_killable(m: *mut bindings::mutex) -> c_int;
    fn davinci_pci_mutex_lock(m: *mut bindings::mutex);
    fn davinci_pci_mutex_trylock(m: *mut bindings::mutex) -> c_int;
    fn davinci_pci_mutex_unlock(m: *mut bindings::mutex);
}

impl PciShared {
    /// The device's lock, for a call: `Err(EINTR)` if the caller is killed while it waits.
    pub(crate) fn lock(&self) -> Result<Locked<'_>> {
        // SAFETY: the mutex was initialised in `new` and lives as long as `self`.
        if unsafe { davinci_pci_mutex_lock_killable(self.lock.get()) } != 0 {
            return Err(EINTR);
        }
        // SAFETY: this task has just taken the mutex.
        Ok(unsafe { Locked::taken(self) })
    }

    /// The device's lock, whatever signal comes (release, remove: what they do must happen).
    pub(crate) fn lock_always(&self) -> Locked<'_> {
        // SAFETY: as in `lock`.
        unsafe { davinci_pci_mutex_lock(self.lock.get()) };
        // SAFETY: as in `lock`.
        unsafe { Locked::taken(self) }
    }

    /// The device's lock if nobody holds it (the watchdog).
    fn try_lock(&self) -> Option<Locked<'_>> {
        // SAFETY: as in `lock`.
        if unsafe { davinci_pci_mutex_trylock(self.lock.get()) } == 0 {
            return None;
        }
        // SAFETY: as in `lock`.
        Some(unsafe { Locked::taken(self) })
    }

    /// A PCI error was reported on the device: it is lost (`why` logged), as when it stops
    /// answering. Marked first, so that a call waiting for its completion gives up.
    pub(crate) fn lose_now(&self, why: &str) {
        self.dead.store(true, Ordering::Release);
        self.wake_all();
        self.lock_always().lose(why);
    }

    /// No new open; the device is gone for every open file (`ENODEV`), every sleeper wakes,
    /// every mapping of its BARs goes. Called by remove before the BARs are unmapped (and by
    /// a probe failing after `ready`, and by shutdown); a second call does nothing more.
    ///
    /// The device is marked gone (`dead`) before the lock is taken, as `drm_dev_unplug` does:
    /// a call waiting for its completion gives up at once, every later one finds it gone, so
    /// removal waits for no device round trip.
    pub(crate) fn stop(&self) {
        self.deregister_node();
        self.dead.store(true, Ordering::Release);
        self.wake_all();
        let mut l = self.lock_always();
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
/// Most mapping rights it records (beyond them, a fault asks the device).
const MAX_MAPS: usize = 2048;
/// Most command rings it notes for a loss (driver-core's stream table holds 256; a ring not
/// noted is only not marked: its client learns of the loss at its next call).
const MAX_RINGS: usize = 256;

/// Empties `v` (its capacity kept).
fn clear<T: Copy>(v: &mut KVec<T>) {
    // SAFETY: 0 is at most the length; the elements are plain data (`Copy`, no drop).
    unsafe { v.set_len(0) };
}

/// Removes every element of `v` that `gone` picks (the order is not kept).
pub(super) fn remove_where<T: Copy>(v: &mut KVec<T>, mut gone: impl FnMut(&T) -> bool) {
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

/// What a request allows its completion to say (`Locked::check`).
struct Expect {
    /// OPEN: the completion names the new open (its handle must be new).
    open: bool,
    /// WAIT_EVENT and WAIT_AGAIN: WAIT_NEEDED is an answer.
    may_wait: bool,
    /// IOCTL and WAIT_AGAIN: the reply's bytes go back to the caller's argument, which has
    /// this size.
    arg_len: Option<usize>,
}

impl Expect {
    fn of(op: &AdminOp) -> Expect {
        let (open, may_wait, arg_len) = match op {
            AdminOp::Open(_) => (true, false, None),
            AdminOp::Ioctl { request, arg } => (
                false,
                *request == DRIVER_CMD_WAIT_EVENT,
                Some(arg.as_slice().len()),
            ),
            AdminOp::WaitAgain { arg, .. } => (false, true, Some(arg.as_slice().len())),
            _ => (false, false, None),
        };
        Expect {
            open,
            may_wait,
            arg_len,
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
        let Some(mut l) = self.try_lock() else {
            return true;
        };
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
///
/// # Invariants
///
/// The task that made it holds `dev.lock`; only [`PciShared::lock`], `lock_always` and
/// `try_lock` make one. Not `Send` (a mutex is released by the task that took it).
pub(crate) struct Locked<'a> {
    dev: &'a PciShared,
    _task: PhantomData<*mut ()>,
}

impl<'a> Locked<'a> {
    /// The guard of `dev`'s lock.
    ///
    /// # Safety
    ///
    /// The calling task has just taken `dev.lock`, and hands it to this guard.
    unsafe fn taken(dev: &'a PciShared) -> Self {
        Locked {
            dev,
            _task: PhantomData,
        }
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: this task holds the mutex (type invariant), released once, here.
        unsafe { davinci_pci_mutex_unlock(self.dev.lock.get()) };
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
        clear(&mut self.maps);
        clear(&mut self.rings);
        self.dev.inode.revoke(0, 0);
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
        clear(&mut self.maps);
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

    /// Records what MMAP_TARGET granted `client` at `cookie` (checked by the caller): later
    /// faults of that mapping are served from it, with no device round trip, until a
    /// completion revokes it or the client closes. A full table records nothing more (those
    /// faults ask the device).
    pub(crate) fn note_map(&mut self, m: MapRight) {
        if self.maps.len() >= MAX_MAPS {
            return;
        }
        remove_where(&mut self.maps, |n| {
            n.client == m.client && n.cookie == m.cookie
        });
        let _ = self.maps.push(m, GFP_KERNEL);
    }

    /// What the device granted `client` at `cookie`, if recorded and not revoked since.
    pub(crate) fn mapped(&self, client: u32, cookie: u64) -> Option<MapRight> {
        self.maps
            .iter()
            .find(|m| m.client == client && m.cookie == cookie)
            .copied()
    }

    /// Adds an open's file mapping (after its OPEN succeeded).
    pub(crate) fn add_open(&mut self, client: u32) -> Result {
        if self.opens.len() >= MAX_OPENS {
            return Err(ENOSPC);
        }
        self.opens.push(client, GFP_KERNEL)?;
        Ok(())
    }

    /// Forgets an open (at its release).
    pub(crate) fn remove_open(&mut self, client: u32) {
        remove_where(&mut self.opens, |c| *c == client);
        remove_where(&mut self.rings, |r| r.client == client);
        remove_where(&mut self.maps, |m| m.client == client);
        self.forget_refusals(client);
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

    /// One admin request and its completion (tag checked, then checked against the request:
    /// [`Expect`]); what it revoked is unmapped before this returns. `ENODEV` once the device
    /// is gone (or goes while this waits: lost, or stopped by removal), `EIO` if the
    /// completion breaks the protocol (the device is lost with it).
    pub(crate) fn call(&mut self, client: u32, op: AdminOp) -> Result<KBox<Completion>, Errno> {
        let dev = self.dev;
        let expect = Expect::of(&op);
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
            match self.take_completion() {
                Ok(Some(c)) if c.tag != tag => {
                    // (What it revokes is unmapped all the same: always safe.)
                    self.revoke(&c);
                    // One request is in flight at a time, so the device's next completion
                    // answers it: another tag (an old one, a duplicate, one never sent, one
                    // with no request) breaks the protocol, and the request's own would
                    // never come: the device is lost now, not after the admin timeout.
                    pr_notice!(
                        "davinci{}: an admin completion for tag {} while tag {} was in flight\n",
                        dev.index,
                        c.tag,
                        tag
                    );
                    return Err(self.violation("it answered with a tag not in flight"));
                }
                Ok(Some(c)) => {
                    dev.answered.fetch_add(1, Ordering::Relaxed);
                    // Unmapping is always safe: what a completion revokes is unmapped even
                    // if the rest of it is refused below.
                    self.revoke(&c);
                    if let Err(why) = self.check(client, &expect, &c) {
                        return Err(self.violation(why));
                    }
                    if c.reply == ReplyKind::Failed {
                        self.device_failed(client, c.errno);
                    }
                    return Ok(c);
                }
                Ok(None) => {}
                Err(why) => {
                    self.lose(why);
                    return Err(Errno::ENODEV);
                }
            }
            // Removal marked the device gone before it waits for this lock: give up.
            if dev.dead.load(Ordering::Acquire) {
                return Err(Errno::ENODEV);
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

    /// Whether `c` answers the request [`Expect`] describes, sent for `client`: `Err` says
    /// which rule it broke.
    fn check(&self, client: u32, e: &Expect, c: &Completion) -> Result<(), &'static str> {
        if c.reply == ReplyKind::WaitNeeded && !e.may_wait {
            return Err("it answered a request that cannot wait with WAIT_NEEDED");
        }
        if e.open {
            // The new open's handle names it in revocations and mapping rights: two opens
            // with one handle would let one's revocation miss the other's mappings.
            if c.reply == ReplyKind::Done && self.opens.iter().any(|cl| *cl == c.client) {
                return Err("it gave a new open the handle of an open one");
            }
        } else if c.client != client {
            return Err("it answered for another client");
        }
        if let Some(n) = e.arg_len {
            // An ioctl's reply is copied back to the caller's argument: exactly its size
            // (`_IOC_SIZE`), or nothing for a failure that wrote nothing back.
            let got = c.arg.as_slice().len();
            if got != n && !(c.reply == ReplyKind::Failed && got == 0) {
                return Err("its reply to an ioctl is not the size of the ioctl's argument");
            }
        }
        Ok(())
    }

    /// The device broke the admin protocol (`why`, logged): it is lost, and the call that
    /// saw it fails with `EIO` (every later one with `ENODEV`).
    pub(crate) fn violation(&mut self, why: &str) -> Errno {
        self.lose(why);
        Errno::EIO
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

    /// The next completion, if one came (its tag is the caller's to check). `Err` (why) when
    /// what the device wrote cannot be a completion.
    fn take_completion(&mut self) -> core::result::Result<Option<KBox<Completion>>, &'static str> {
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
        KBox::new(c, GFP_KERNEL)
            .map(Some)
            .map_err(|_| "out of memory for a completion")
    }

    /// Unmaps what `c` says the device freed, before another request can hand those pages to
    /// someone else.
    fn revoke(&mut self, c: &Completion) {
        if c.revokes_overflowed() {
            clear(&mut self.rings);
            clear(&mut self.maps);
        }
        for r in c.revokes() {
            let end = r.cookie.saturating_add(r.len);
            remove_where(&mut self.rings, |n| {
                n.client == r.client && n.cookie >= r.cookie && n.cookie < end
            });
            remove_where(&mut self.maps, |n| {
                n.client == r.client && n.cookie >= r.cookie && n.cookie < end
            });
        }
        // Every open maps through the device's one address space: a revocation reaches every
        // mapping of the range, whichever open or node made it (another client's mapping of
        // the same cookie, if any, faults back in from its own right).
        if c.revokes_overflowed() {
            self.dev.inode.revoke(0, 0);
            return;
        }
        for r in c.revokes() {
            self.dev.inode.revoke(r.cookie, r.len);
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
