// SPDX-License-Identifier: GPL-2.0

//! The PCI transport's device: [`PciShared`], one bound ivshmem device as its files see it
//! (reference-counted: an open file keeps it after the device is unbound, and then gets
//! `ENODEV`). The engine is the host process's (`davinci-pcidev`); this side only forwards:
//!
//! * every control call of a file is one admin request ([`PciShared::call`], `davinci-hwif`'s
//!   entries on the admin rings in BAR2): one request in flight per device, under the
//!   device's mutex, the admin doorbell written to BAR0 (`writel`), the completion awaited on
//!   vector 0's interrupt (MSI-X), and what it revoked unmapped before the mutex is released;
//! * WAIT_EVENT sleepers wait for vector 1's interrupt ([`PciShared::wait_data`]) and ask
//!   again (WAIT_AGAIN);
//! * a device that stops answering (its process died, or it wedged: the admin completion
//!   does not come and BAR2's heartbeat stands still) is *lost*: every waiter wakes, every
//!   call fails with `ENODEV`, every mapping of its memory is gone.
//!
//! Everything the device writes (completions, BAR2's header) is read once, from a copy, and
//! validated by `davinci-hwif`: a broken device makes calls fail, never the kernel.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::ffi::{c_int, c_uint};

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow};
use kernel::types::Opaque;

use crate::davinci_driver_core::HostFault;
use crate::davinci_hwif::layout::{
    Bar2Header, Bar2Layout, DeviceState, HEADER_FIELDS, HEARTBEAT_OFFSET, NOTIFY_WORDS, PAGE_SIZE,
};
use crate::davinci_hwif::{AdminOp, AdminSlot, MapKind, ADMIN_DEPTH, ADMIN_ENTRY_SIZE};
use crate::davinci_ring::{Consumer, DeviceConsumer, Producer, RingRegion};
use crate::davinci_shm_copy::copy_from_shared;
use crate::davinci_uapi::rings::RING_MIN_ENTRIES;
use crate::davinci_uapi::task::TASK_DESC_SIZE;
use crate::davinci_uapi::TaskDesc;

use crate::wake::Fanout;

pub(crate) use super::inode::DevInode;

extern "C" {
    fn davinci_wq_init(wq: *mut bindings::wait_queue_head);
    fn davinci_pci_mutex_init(m: *mut bindings::mutex);
    fn davinci_msleep(ms: c_uint);
    fn davinci_pci_mutex_destroy(m: *mut bindings::mutex);
    fn davinci_pci_doorbell(dp: *mut c_void, peer: u32, vector: u32);
    fn davinci_pci_node_add(state: *mut c_void, slot: c_uint, index: c_uint) -> c_int;
    fn davinci_pci_node_del(slot: c_uint);
}

/// Most MSI-X vectors a device gets (probe asks for 1 to this many).
pub(crate) const VECTORS: usize = 4;

/// A handle on a bound device's C side (`struct davinci_pci`: its mapped BARs).
///
/// # Invariants
///
/// Points at the live `struct davinci_pci` of a bound device: it is only held in that
/// device's [`PciShared`], which drops it (`stop`, under the device's mutex) before the C
/// structure and its mappings go.
pub(crate) struct PciDev(NonNull<c_void>);

// SAFETY: the C structure is immutable after probe; its functions may run on any thread.
unsafe impl Send for PciDev {}
// SAFETY: as above; the doorbell is a single MMIO write, safe from several threads at once.
unsafe impl Sync for PciDev {}

impl PciDev {
    /// The handle on `dp`.
    ///
    /// # Safety
    ///
    /// `dp` is the probing device's `struct davinci_pci`, live until its state is detached;
    /// the handle is only kept in that device's [`PciShared`].
    pub(crate) unsafe fn new(dp: NonNull<c_void>) -> PciDev {
        PciDev(dp)
    }

    /// Rings `peer`'s doorbell `vector` (BAR0 offset 12): the peer gets an event on its
    /// eventfd `vector` (QEMU drops doorbells to a peer or vector that does not exist).
    pub(crate) fn doorbell(&self, peer: u16, vector: u16) {
        // SAFETY: the structure is live and BAR0 mapped (type invariant); any value is a
        // valid doorbell.
        unsafe { davinci_pci_doorbell(self.0.as_ptr(), u32::from(peer), u32::from(vector)) }
    }
}

/// The admin rings' host ends (the guest produces requests and consumes completions).
pub(crate) struct Admin {
    pub(crate) sq: Producer<AdminSlot>,
    pub(crate) cq: Consumer<AdminSlot>,
}

/// What the device's mutex guards.
pub(crate) struct Inner {
    /// The admin rings; `None` once the device is stopped or lost (nothing in BAR2 or BAR0
    /// is touched after that).
    pub(crate) admin: Option<Admin>,
    /// The C side (BAR0's doorbell); `None` once stopped.
    pub(crate) pci: Option<PciDev>,
    /// The last tag used.
    pub(crate) tag: u64,
    /// Every open file's client (the device's handle on it, unique among them: checked).
    pub(crate) opens: KVec<u32>,
    /// The command rings clients map (MMAP_TARGET's replies), put in the error state with
    /// `ENODEV` if the device is lost; forgotten when revoked or at the client's release.
    pub(crate) rings: KVec<RingNote>,
    /// What MMAP_TARGET granted each client (checked against BAR2's heap), which faults are
    /// served from; forgotten when a completion revokes it, at the client's release, and
    /// when the device goes.
    pub(crate) maps: KVec<MapRight>,
    /// The module's own refusals of each open, for GET_LAST_ERROR (`pci/lasterr.rs`).
    pub(crate) refusals: KVec<super::lasterr::Refusal>,
    /// The heartbeat as the watchdog last saw it move: its value and when.
    pub(crate) beat: (u32, u64),
    /// The request being encoded (kept here, off the kernel stack).
    pub(crate) slot: [u8; ADMIN_ENTRY_SIZE],
    pub(crate) words: AdminSlot,
}

/// A mapping right: what the device said `client`'s `cookie` maps (the kind matches the
/// cookie's; a memory or ring range lies in BAR2's heap, at least as long as asked).
#[derive(Clone, Copy)]
pub(crate) struct MapRight {
    pub(crate) client: u32,
    pub(crate) cookie: u64,
    pub(crate) kind: MapKind,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

/// A command ring a client maps: where it lies in BAR2.
#[derive(Clone, Copy)]
pub(crate) struct RingNote {
    pub(crate) client: u32,
    pub(crate) cookie: u64,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

// SAFETY: the ring ends point into BAR2's kernel mapping, which lives while the device is
// bound (and they are dropped, under the mutex, before it goes: `stop`). Everything is
// reached under the mutex only.
unsafe impl Send for Inner {}

/// Where BAR2 is for this side.
pub(crate) struct Shm {
    /// The kernel's write-back mapping (valid while the device is bound and not stopped).
    pub(crate) ptr: NonNull<u8>,
    pub(crate) len: u64,
}

// SAFETY: a plain pointer into a mapping that outlives every use (reads happen under the
// mutex with `admin` present, which `stop` clears before the mapping goes).
unsafe impl Send for Shm {}
// SAFETY: as above; only read through atomic copies.
unsafe impl Sync for Shm {}

/// One bound ivshmem device, shared by the PCI driver and every file opened on it.
#[pin_data(PinnedDrop)]
pub(crate) struct PciShared {
    /// N of `/dev/davinciN`.
    pub(crate) index: u32,
    /// Which device an export fd names (`export_fd`): never reused while the module is
    /// loaded, so an fd of a removed device names nothing on the next one.
    pub(crate) instance: u64,
    /// The PCI slot among [`MAX_PCI`].
    pub(crate) slot: usize,
    /// This guest's peer id (IVPosition).
    pub(crate) peer: u32,
    /// MSI-X vectors granted.
    pub(crate) vectors: u32,
    /// Interrupts counted per vector (hard-irq context).
    pub(crate) irqs: [AtomicU64; VECTORS],
    /// Admin requests the device answered (a completion with the request's tag came), for
    /// debugfs `info`.
    pub(crate) answered: AtomicU64,
    /// The device's notification words (BAR2 page 0, hwif layout 3) as vector 1's handler
    /// last copied them: a WAIT_EVENT sleeper waits for its client's to change, so another
    /// tenant's completions do not send it to the device. A copy in kernel memory, since a
    /// sleeper may still look after the BARs are unmapped.
    pub(crate) notified: [AtomicU64; NOTIFY_WORDS as usize],
    /// WAIT_EVENT sleepers, one queue per notification word, woken out of hard-irq context
    /// when their word changed (`pci/irq.rs`).
    pub(crate) fanout: Fanout,
    /// Set once the device is stopped or lost.
    pub(crate) dead: AtomicBool,
    /// BAR0's bus address (a client's doorbell page) and whether it may be mapped (page
    /// aligned: the page holds nothing but BAR0).
    pub(crate) regs_phys: u64,
    /// BAR0's page holds nothing else (`pci/helpers.c`'s check at probe).
    pub(crate) regs_alone: bool,
    /// BAR2's bus address and size (clients' rings and memory).
    pub(crate) shm_phys: u64,
    pub(crate) shm: Shm,
    pub(crate) layout: Bar2Layout,
    /// `DDDD:BB:DD.F`, NUL-padded.
    pub(crate) bus_id: [u8; 16],
    pub(crate) pci_ids: (u16, u16),
    /// Sleepers: the admin request awaiting vector 0 (WAIT_EVENT sleepers are on `fanout`).
    #[pin]
    pub(crate) wq: Opaque<bindings::wait_queue_head>,
    /// The device's lock (`lock`, `lock_always`, `try_lock` in `pci/admin.rs`): a `struct
    /// mutex` of its own lockdep class (`pci/helpers.c`), waited for killably by a call and
    /// uninterruptibly by release and removal.
    #[pin]
    pub(crate) lock: Opaque<bindings::mutex>,
    /// Reached only with `lock` held (through `Locked`, which only the lock functions make).
    pub(crate) inner: UnsafeCell<Inner>,
    /// Whether the node is registered (`ready`, until `stop`).
    node: AtomicBool,
    /// The device's address space.
    pub(crate) inode: DevInode,
}

/// What attach knows of the device.
pub(crate) struct Bound {
    pub(crate) index: u32,
    pub(crate) slot: usize,
    pub(crate) peer: u32,
    pub(crate) vectors: u32,
    pub(crate) regs_phys: u64,
    pub(crate) regs_alone: bool,
    pub(crate) shm_phys: u64,
    pub(crate) shm: *mut u8,
    pub(crate) shm_len: u64,
    pub(crate) bus_id: [u8; 16],
    pub(crate) pci_ids: (u16, u16),
}

/// Copies `n` bytes at `off` of BAR2 (kernel mapping) into `out`.
///
/// # Safety
///
/// `shm` maps at least `off + out.len()` bytes (checked by the callers against its length)
/// and is live.
pub(crate) unsafe fn read_shm(shm: &Shm, off: u64, out: &mut [u8]) -> bool {
    let Some(end) = off.checked_add(out.len() as u64) else {
        return false;
    };
    if end > shm.len {
        return false;
    }
    // SAFETY: `[off, end)` lies in the live mapping (the caller's contract and the check
    // above); the device writes it concurrently, which the atomic copy allows.
    unsafe { copy_from_shared(shm.ptr.as_ptr().add(off as usize), out) };
    true
}

/// Whether BAR2's heartbeat (bumped by a serving device at the end of every pass, at least
/// every 100 ms) moves within 2 s: a device whose process died leaves a header that still
/// says ready. The device is rung first (its admin doorbell, with nothing new to take), so a
/// live one makes a pass at once and the move is seen in milliseconds, not in its idle
/// period; and any request a previous load left in the submission ring is answered within
/// that pass, before the heartbeat moves, so the probe's drain of stale completions (after
/// this) finds it.
fn heartbeat_moves(shm: &Shm, dev: &PciDev) -> bool {
    let beat = || {
        let mut w = [0u8; 4];
        // SAFETY: the mapping is live during probe; `read_shm` checks the range.
        unsafe { read_shm(shm, HEARTBEAT_OFFSET, &mut w) }.then(|| u32::from_le_bytes(w))
    };
    let Some(first) = beat() else {
        return false;
    };
    dev.doorbell(
        crate::davinci_hwif::regs::DEVICE_PEER,
        crate::davinci_hwif::VECTOR_ADMIN,
    );
    let start = crate::sys::now_ns();
    while crate::sys::now_ns().wrapping_sub(start) < 2_000_000_000 {
        // SAFETY: probe runs in process context.
        unsafe { davinci_msleep(2) };
        if beat() != Some(first) {
            return true;
        }
    }
    false
}

/// Puts the command ring at `[off, off + len)` of BAR2 in the error state with `errno`, at
/// its head (the lost device's streams: a client polling its stream sees the error without
/// a system call). `false` if the range cannot be a ring.
///
/// # Safety
///
/// `shm` is live (the device is not stopped) and the device is lost: nothing consumes the
/// ring any more (its client may still write its tail, which the header's atomics allow).
pub(crate) unsafe fn fail_ring(shm: &Shm, off: u64, len: u64, errno: u32) -> bool {
    let Some(end) = off.checked_add(len) else {
        return false;
    };
    let Ok(n) = usize::try_from(len) else {
        return false;
    };
    if end > shm.len {
        return false;
    }
    // Only the header is touched: a view of the ring's first slots is enough.
    // SAFETY: `[off, end)` lies in the live mapping (checked above, the caller's contract);
    // `RingRegion::new` checks alignment and that `n` holds the header and those slots; this
    // is the ring's only consumer end now (the device is lost).
    let region = unsafe {
        RingRegion::new(
            shm.ptr.as_ptr().add(off as usize),
            n,
            RING_MIN_ENTRIES,
            TASK_DESC_SIZE,
        )
    };
    let Ok(Ok(c)) = region.map(DeviceConsumer::<TaskDesc>::try_new) else {
        return false;
    };
    c.set_error(errno, c.head());
    true
}

impl PciShared {
    /// The device as probe found it. With BAR2's header saying ready, the admin rings are
    /// taken (a completion left from a previous load is dropped) and the device serves
    /// (`ready` registers its node); with no davinci header (another program serves the
    /// ivshmem device, like the interrupt test's ivshmem-echo) it is bound without a node:
    /// only the test hooks reach it.
    pub(crate) fn new(b: Bound, dev: PciDev) -> Result<Arc<PciShared>> {
        let shm = Shm {
            ptr: NonNull::new(b.shm).ok_or(EINVAL)?,
            len: b.shm_len,
        };
        let mut page = [0u8; HEADER_FIELDS];
        // SAFETY: the mapping is live during probe; `read_shm` checks the range.
        if !unsafe { read_shm(&shm, 0, &mut page) } {
            return Err(ENODEV);
        }
        let hooks = crate::sys::params().pci_hooks != 0;
        let header = match Bar2Header::decode(&page, b.shm_len) {
            Ok(h) if h.state == DeviceState::Ready && heartbeat_moves(&shm, &dev) => Some(h),
            Ok(h) if h.state == DeviceState::Ready => {
                pr_err!(
                    "davinci{}: the PCI device's heartbeat stands still (process gone?): {}\n",
                    b.index,
                    if hooks {
                        "bound without a node"
                    } else {
                        "not bound"
                    }
                );
                None
            }
            Ok(h) => {
                pr_err!(
                    "davinci{}: the PCI device is not ready ({:?}, errno {}): {} (restart \
                     davinci-pcidev, then rebind)\n",
                    b.index,
                    h.state,
                    h.failure,
                    if hooks {
                        "bound without a node"
                    } else {
                        "not bound"
                    }
                );
                None
            }
            Err(e) => {
                pr_notice!(
                    "davinci{}: {}: not a davinci device, {}\n",
                    b.index,
                    e,
                    if hooks {
                        "bound without a node (pci_hooks)"
                    } else {
                        "not bound"
                    }
                );
                None
            }
        };
        // Only a davinci device is driven; another ivshmem device (another program's, a dead
        // one's) is left unbound, unless the test hooks ask for it.
        if header.is_none() && !hooks {
            return Err(ENODEV);
        }
        let l = match header {
            Some(h) => h.layout,
            None => Bar2Layout::for_region(b.shm_len).unwrap_or(Bar2Layout {
                region_size: b.shm_len,
                sq_offset: 0,
                cq_offset: 0,
                ring_bytes: 0,
                list_offset: 0,
                list_bytes: 0,
                heap_offset: b.shm_len,
                heap_pages: 0,
            }),
        };
        let ring = |at: u64| -> Result<RingRegion> {
            let len = usize::try_from(l.ring_bytes).map_err(|_| EINVAL)?;
            // (`Bar2Layout` puts both rings inside the region: decode checked it is the BAR's.)
            // SAFETY: `[at, at + ring_bytes)` lies in BAR2's kernel mapping, live while the
            // device is bound; the ring ends are dropped (`stop`) before it is unmapped. This
            // side has one producer on the submission ring and one consumer on the completion
            // ring; the device writes concurrently, which the ring protocol allows.
            unsafe {
                RingRegion::new(
                    shm.ptr.as_ptr().add(at as usize),
                    len,
                    ADMIN_DEPTH,
                    ADMIN_ENTRY_SIZE,
                )
            }
            .map_err(|_| EINVAL)
        };
        let admin = match header {
            Some(_) => {
                let sq = Producer::try_new(ring(l.sq_offset)?).map_err(|_| EINVAL)?;
                let mut cq = Consumer::try_new(ring(l.cq_offset)?).map_err(|_| EINVAL)?;
                // A completion a previous load left behind is nobody's.
                let stale = cq.consume(ADMIN_DEPTH as usize, |_| {});
                if stale > 0 {
                    pr_notice!(
                        "davinci{}: dropped {} stale admin completions\n",
                        b.index,
                        stale
                    );
                }
                Some(Admin { sq, cq })
            }
            None => None,
        };
        let serving = admin.is_some();
        let fanout = Fanout::new(NOTIFY_WORDS)?;
        let inode = DevInode::new()?;
        let inner = Inner {
            admin,
            pci: Some(dev),
            tag: 0,
            opens: KVec::new(),
            rings: KVec::new(),
            maps: KVec::new(),
            refusals: KVec::new(),
            beat: (0, 0),
            slot: [0; ADMIN_ENTRY_SIZE],
            words: [0; ADMIN_ENTRY_SIZE / 8],
        };
        Arc::pin_init(
            pin_init!(PciShared {
                index: b.index,
                instance: crate::export_fd::next_instance(),
                slot: b.slot,
                peer: b.peer,
                vectors: b.vectors,
                irqs: [const { AtomicU64::new(0) }; VECTORS],
                answered: AtomicU64::new(0),
                notified: [const { AtomicU64::new(0) }; NOTIFY_WORDS as usize],
                fanout,
                dead: AtomicBool::new(!serving),
                regs_phys: b.regs_phys,
                regs_alone: b.regs_alone,
                shm_phys: b.shm_phys,
                shm,
                layout: l,
                bus_id: b.bus_id,
                pci_ids: b.pci_ids,
                // SAFETY: `p` is the pinned, uninitialised wait queue head.
                wq <- Opaque::ffi_init(|p| unsafe { davinci_wq_init(p) }),
                // SAFETY: `p` is the pinned, uninitialised mutex; it is destroyed in drop.
                lock <- Opaque::ffi_init(|p| unsafe { davinci_pci_mutex_init(p) }),
                inner: UnsafeCell::new(inner),
                node: AtomicBool::new(false),
                inode,
            }),
            GFP_KERNEL,
        )
    }

    /// BAR2's layout.
    pub(crate) fn layout(&self) -> &Bar2Layout {
        &self.layout
    }

    /// Registers `/dev/davinci<index>` (the interrupts are in): a character device of its own
    /// (`pci/helpers.c`), whose open takes its own reference on this state.
    pub(crate) fn ready(this: &Arc<PciShared>) -> Result {
        if this.dead.load(Ordering::Acquire) {
            // Not a davinci device (or not ready): no node.
            return Ok(());
        }
        // A fault armed at load (the `inject` parameter) reaches the device before any client.
        let text = crate::sys::inject_text();
        let n = text.iter().position(|&b| b == 0).unwrap_or(text.len());
        match core::str::from_utf8(&text[..n]).map(HostFault::parse) {
            Ok(Ok(HostFault::Arm(Some(_)))) => {
                let t = core::str::from_utf8(&text[..n]).unwrap_or("");
                this.inject(t)?;
            }
            _ => {}
        }
        let raw: *const PciShared = &**this;
        // SAFETY: `raw` stays valid while the node is registered: `stop` deregisters it
        // before detach drops C's reference, and an open takes its own reference under the
        // node table's lock (`davinci_pci_get`).
        let err =
            unsafe { davinci_pci_node_add(raw.cast_mut().cast(), this.slot as c_uint, this.index) };
        if err != 0 {
            return Err(Error::from_errno(err));
        }
        this.node.store(true, Ordering::Release);
        Ok(())
    }

    /// Deregisters the node, if registered: no open finds the device from now on.
    pub(crate) fn deregister_node(&self) {
        if self.node.swap(false, Ordering::AcqRel) {
            // SAFETY: the node of this slot is this device's (registered by `ready`).
            unsafe { davinci_pci_node_del(self.slot as c_uint) };
        }
    }

    /// The bus id as text.
    pub(crate) fn bus_text(&self) -> &str {
        let n = self.bus_id.iter().position(|&b| b == 0).unwrap_or(16);
        core::str::from_utf8(&self.bus_id[..n]).unwrap_or("?")
    }
}

#[pinned_drop]
impl PinnedDrop for PciShared {
    fn drop(self: Pin<&mut Self>) {
        pr_info!(
            "davinci{}: PCI device {} released (interrupts per vector: admin {}, data {})\n",
            self.index,
            self.bus_text(),
            self.count(0),
            self.count(1)
        );
        // SAFETY: the mutex was initialised in `new`; nothing holds it (no reference to the
        // state is left).
        unsafe { davinci_pci_mutex_destroy(self.lock.get()) };
    }
}

// SAFETY: `inner` is only reached through `Locked`, which exists only while `lock` is held
// (one at a time); everything else is atomic, immutable after construction, or its own lock.
unsafe impl Sync for PciShared {}
// SAFETY: as above; `Inner` is `Send`.
unsafe impl Send for PciShared {}

/// A page of BAR2 (`PAGE_SIZE`) in kernel pages.
const _: () = assert!(PAGE_SIZE == 1 << bindings::PAGE_SHIFT);

/// A new reference on a registered state, for an open (`pci/helpers.c`'s node table, under
/// its lock: the state is registered, so C's own reference keeps it alive meanwhile).
///
/// # Safety
///
/// `state` is a state `ready` registered and `stop` has not deregistered (the caller holds
/// the node table's lock).
#[no_mangle]
unsafe extern "C" fn davinci_pci_get(state: *mut c_void) -> *mut c_void {
    // SAFETY: the caller's contract: C's reference (attach's leaked `Arc`) is alive.
    let st: Arc<PciShared> = unsafe { ArcBorrow::<PciShared>::from_raw(state.cast()) }.into();
    Arc::into_raw(st).cast_mut().cast()
}

impl PciShared {
    /// The host's fault injection (the `inject` parameter's text, checked by the caller):
    /// one admin INJECT. `ENODEV` if the device is gone, `EINVAL` if it refused the text
    /// (logged with its reason).
    pub(crate) fn inject(&self, text: &str) -> Result {
        let op = AdminOp::inject(text.trim()).ok_or(EINVAL)?;
        let c = self.lock()?.call(0, op).map_err(|_| ENODEV)?;
        if c.errno != 0 {
            pr_err!(
                "davinci{}: the PCI device refused inject '{}': {}\n",
                self.index,
                text.trim(),
                c.message()
            );
            return Err(EINVAL);
        }
        Ok(())
    }
}

/// `davinci_pci_count`'s and the debugfs files' view: nothing else reaches a state by
/// pointer.
pub(crate) fn from_raw<'a>(p: *mut c_void) -> &'a PciShared {
    // SAFETY: C passes the pointer `davinci_pci_attach` returned (an `Arc` leaked until
    // detach), only while it is attached.
    unsafe { &*p.cast::<PciShared>() }
}
