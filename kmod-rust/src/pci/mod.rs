// SPDX-License-Identifier: GPL-2.0

//! The PCI driver of QEMU's `ivshmem-doorbell` device (1af4:1110; issue 27), whose engine
//! runs in a host process (`davinci-pcidev`). Linux 6.12 has no Rust PCI abstractions:
//! `pci/helpers.c` holds the `struct pci_driver` and does every PCI call (enable, regions,
//! BAR0 `pci_iomap`, BAR2 `memremap` write-back, bus mastering, MSI-X vectors, `request_irq`)
//! and their undoing. This module is the Rust half of that boundary:
//!
//! * [`PciDriver`]: the driver's registration, held by the module (unregistered on drop,
//!   which removes every bound device first);
//! * the per-device state, [`PciShared`] (`pci_dev`: the transport), claimed a slot among at
//!   most [`MAX_PCI`] devices (node `/dev/davinci<devices + slot>`), and [`PciDev`], the
//!   handle through which Rust reaches the device's C side (the doorbell);
//! * the `extern "C"` functions `pci/helpers.c` calls: `davinci_pci_attach` at the end of a
//!   probe (after the resources, before the interrupt handlers), `davinci_pci_ready` once the
//!   handlers are in (the node is registered), `davinci_pci_interrupt` from each vector's
//!   hard-irq handler, `davinci_pci_stop` first in remove (no new open, every file sees the
//!   device gone, its mappings of the BARs revoked), `davinci_pci_detach` after every handler
//!   was freed, before the resources go, and the test hooks' `davinci_pci_count` and
//!   `davinci_pci_ring`.
//!
//! The state crosses to C as the pointer of a leaked `Arc` (`Arc::into_raw` in attach,
//! `Arc::from_raw` in detach): C keeps it in its `struct davinci_pci` and hands it back
//! unchanged, and by the order above no handler or debugfs file can reach it after detach.
//! Open files hold their own references: after detach they find the device stopped.

use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::ffi::{c_int, c_uint};

use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow};

mod admin;
mod dev;
mod entries;
mod fops;
mod inode;
mod irq;
mod lasterr;
mod rights;

use dev::{Bound, PciDev, PciShared, VECTORS};

/// Most ivshmem devices the module drives at once (the `pci_devices` parameter: 0 to this);
/// probe refuses another (EBUSY, logged).
pub(crate) const MAX_PCI: usize = 8;

/// What probe tells [`davinci_pci_attach`] (`pci/helpers.c`'s `struct davinci_pci_info`,
/// same layout).
#[repr(C)]
pub(crate) struct PciInfo {
    /// IVPosition: this guest's peer id.
    peer: u32,
    /// MSI-X vectors granted (2 to [`VECTORS`]).
    vectors: u32,
    /// BAR0's length (registers).
    regs_len: u64,
    /// BAR2's length (shared memory).
    shm_len: u64,
    /// The device's bus number and devfn.
    bus: u32,
    devfn: u32,
    /// BAR0's and BAR2's bus addresses.
    regs_phys: u64,
    shm_phys: u64,
    /// The kernel's write-back mapping of BAR2.
    shm: *mut c_void,
    /// The PCI domain, vendor and device ids.
    domain: u32,
    vendor: u16,
    device: u16,
    /// BAR0's page holds nothing but BAR0 (1), so a client may map it as its doorbell page.
    regs_alone: u32,
}

extern "C" {
    fn davinci_pci_register(mode: c_uint) -> c_int;
    fn davinci_pci_unregister();
    fn davinci_pci_node_state(slot: c_uint) -> *mut c_void;
}

/// The driver's registration: while it lives, every ivshmem device present (and any that
/// comes) is probed.
pub(crate) struct PciDriver(());

impl PciDriver {
    /// Registers the driver; binds every matching device now (probe runs in this call). With
    /// no ivshmem device, nothing binds.
    /// EBUSY if it is registered already (there is one static `struct pci_driver`).
    pub(crate) fn register() -> Result<PciDriver> {
        if REGISTERED
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return Err(EBUSY);
        }
        // SAFETY: process context (module init); `REGISTERED` makes this the only
        // registration of the static driver until the `PciDriver` is dropped.
        let err = unsafe { davinci_pci_register(crate::sys::params().mode) };
        if err != 0 {
            REGISTERED.store(false, Ordering::Release);
            return Err(Error::from_errno(err));
        }
        Ok(PciDriver(()))
    }
}

/// Whether a [`PciDriver`] exists (the static driver is registered).
static REGISTERED: AtomicBool = AtomicBool::new(false);

impl Drop for PciDriver {
    fn drop(&mut self) {
        // SAFETY: registered by this value's `register`, unregistered once, here; every bound
        // device is removed (detached) before it returns.
        unsafe { davinci_pci_unregister() };
        REGISTERED.store(false, Ordering::Release);
    }
}

/// Which of the [`MAX_PCI`] slots are taken.
static SLOTS: [AtomicBool; MAX_PCI] = [const { AtomicBool::new(false) }; MAX_PCI];

/// Claims a slot: EBUSY (logged) if `pci_devices` (at most [`MAX_PCI`]) devices are bound.
fn claim_slot(info: &PciInfo) -> Result<usize> {
    let most = (crate::sys::params().pci_devices as usize).min(MAX_PCI);
    SLOTS
        .iter()
        .take(most)
        .position(|s| {
            s.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
        .ok_or_else(|| {
            pr_err!(
                "pci {:02x}:{:02x}.{}: refused: {} ivshmem devices are bound already (the most \
                 the module drives: pci_devices={})\n",
                info.bus,
                info.devfn >> 3,
                info.devfn & 7,
                most,
                most
            );
            EBUSY
        })
}

/// `DDDD:BB:DD.F`, NUL-padded.
fn bus_id(info: &PciInfo) -> [u8; 16] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut b = [0u8; 16];
    let mut at = 0;
    let mut put = |v: u32, digits: u32, sep: u8| {
        for i in (0..digits).rev() {
            b[at] = HEX[((v >> (4 * i)) & 0xf) as usize];
            at += 1;
        }
        if sep != 0 {
            b[at] = sep;
            at += 1;
        }
    };
    put(info.domain & 0xffff, 4, b':');
    put(info.bus & 0xff, 2, b':');
    put((info.devfn >> 3) & 0x1f, 2, b'.');
    put(info.devfn & 7, 1, 0);
    b
}

/// The end of a probe: `dp` (the device's C side) has its resources and vectors, no interrupt
/// handler yet. Returns the state C keeps, or an `ERR_PTR` (probe fails with it).
///
/// # Safety
///
/// `dp` is the probing device's `struct davinci_pci`, live until `davinci_pci_detach` of the
/// returned state has returned; `info` is live for this call.
#[no_mangle]
unsafe extern "C" fn davinci_pci_attach(dp: *mut c_void, info: *const PciInfo) -> *mut c_void {
    // SAFETY: `info` is live for this call (the caller's contract).
    let info = unsafe { &*info };
    let Some(dp) = NonNull::new(dp) else {
        return EINVAL.to_ptr();
    };
    let slot = match claim_slot(info) {
        Ok(s) => s,
        Err(e) => return e.to_ptr(),
    };
    let p = crate::sys::params();
    let b = Bound {
        index: p.devices + slot as u32,
        slot,
        peer: info.peer,
        vectors: info.vectors.min(VECTORS as u32),
        regs_phys: info.regs_phys,
        regs_alone: info.regs_alone != 0,
        shm_phys: info.shm_phys,
        shm: info.shm.cast(),
        shm_len: info.shm_len,
        bus_id: bus_id(info),
        pci_ids: (info.vendor, info.device),
    };
    // SAFETY: `dp` is live until the state is detached (the caller's contract); the handle
    // lives in the state, and `stop` (before detach) drops it.
    let handle = unsafe { PciDev::new(dp) };
    match PciShared::new(b, handle) {
        Ok(st) => {
            pr_info!(
                "davinci{}: PCI device {} (slot {}, peer {}): BAR0 {} B at {:#x}, BAR2 {} B \
                 at {:#x}, {} MSI-X vectors, BAR2 heap {} pages\n",
                st.index,
                st.bus_text(),
                st.slot,
                st.peer,
                info.regs_len,
                info.regs_phys,
                info.shm_len,
                info.shm_phys,
                st.vectors,
                st.layout().heap_pages
            );
            if !st.regs_alone {
                pr_warn!(
                    "davinci{}: BAR0 at {:#x} shares its page with other registers: no client \
                     may map it, so mapping a stream's doorbell page fails (SIGBUS)\n",
                    st.index,
                    info.regs_phys
                );
            }
            Arc::into_raw(st).cast_mut().cast()
        }
        Err(e) => {
            SLOTS[slot].store(false, Ordering::Release);
            e.to_ptr()
        }
    }
}

/// The end of a probe, the interrupts requested: registers the device's node. 0 or -errno.
///
/// # Safety
///
/// `state` came from `davinci_pci_attach` and was not detached.
#[no_mangle]
unsafe extern "C" fn davinci_pci_ready(state: *mut c_void) -> c_int {
    // SAFETY: the caller's contract: the leaked `Arc` is alive until detach; borrowing it
    // does not change its count.
    let st = unsafe { ArcBorrow::<PciShared>::from_raw(state.cast()) };
    let st: Arc<PciShared> = st.into();
    match PciShared::ready(&st) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Remove (or a probe failing after ready), first: no new open, every file's calls fail with
/// ENODEV, its mappings of the BARs go, its sleepers wake.
///
/// # Safety
///
/// As for [`davinci_pci_ready`].
#[no_mangle]
unsafe extern "C" fn davinci_pci_stop(state: *mut c_void) {
    // SAFETY: as in `davinci_pci_ready`.
    dev::from_raw(state).stop();
}

/// A PCI error was reported on the device (`pci/helpers.c`'s error handler): it is lost.
///
/// # Safety
///
/// As for [`davinci_pci_ready`].
#[no_mangle]
unsafe extern "C" fn davinci_pci_lose(state: *mut c_void) {
    dev::from_raw(state).lose_now("a PCI error was reported");
}

/// A vector's interrupt handler (hard-irq context).
///
/// # Safety
///
/// `state` came from `davinci_pci_attach` and was not detached (C frees every irq before it
/// detaches).
#[no_mangle]
unsafe extern "C" fn davinci_pci_interrupt(state: *mut c_void, vector: u32) {
    // (The caller's contract: a live state, only shared.)
    dev::from_raw(state).interrupt(vector);
}

/// Test hook (debugfs `info`, `ring`): interrupts counted on `vector`.
///
/// # Safety
///
/// As for [`davinci_pci_interrupt`] (C removes the debugfs files, waiting for their users,
/// before it detaches).
#[no_mangle]
unsafe extern "C" fn davinci_pci_count(state: *mut c_void, vector: u32) -> u64 {
    dev::from_raw(state).count(vector)
}

/// Test hook (debugfs `info`): admin requests the device answered.
///
/// # Safety
///
/// As for [`davinci_pci_count`].
#[no_mangle]
unsafe extern "C" fn davinci_pci_answered(state: *mut c_void) -> u64 {
    dev::from_raw(state).answered.load(Ordering::Relaxed)
}

/// The watchdog's tick (`pci/helpers.c`): whether to tick again.
///
/// # Safety
///
/// As for [`davinci_pci_interrupt`] (remove cancels the watchdog, waiting for a running
/// tick, before it stops and detaches the state).
#[no_mangle]
unsafe extern "C" fn davinci_pci_watch(state: *mut c_void) -> c_int {
    c_int::from(dev::from_raw(state).watch())
}

/// Test hook (debugfs `ring`): rings the host's doorbell `vector`; 0 or a negative errno.
///
/// # Safety
///
/// As for [`davinci_pci_count`].
#[no_mangle]
unsafe extern "C" fn davinci_pci_ring(state: *mut c_void, vector: u32) -> c_int {
    let st = dev::from_raw(state);
    if vector >= st.vectors {
        return EINVAL.to_errno();
    }
    match st.lock().and_then(|l| l.ring_device(vector as u16)) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Remove (or a probe failing after attach): frees the state and its slot.
///
/// # Safety
///
/// `state` came from `davinci_pci_attach`, is detached once, and nothing reaches it any more
/// (every irq freed, the debugfs files removed).
#[no_mangle]
unsafe extern "C" fn davinci_pci_detach(state: *mut c_void) {
    // SAFETY: the caller's contract: the `Arc` leaked by attach, reclaimed once; open files
    // may hold more references (they see the device stopped).
    let st = unsafe { Arc::<PciShared>::from_raw(state.cast()) };
    if let Some(taken) = SLOTS.get(st.slot) {
        taken.store(false, Ordering::Release);
    }
    let mut counts = [0u64; VECTORS];
    for (v, n) in counts.iter_mut().enumerate() {
        *n = st.count(v as u32);
    }
    pr_info!(
        "pci slot {}: detached (peer {}, interrupts per vector {:?})\n",
        st.slot,
        st.peer,
        counts.get(..st.vectors as usize).unwrap_or(&counts)
    );
}

/// Forwards the `inject` parameter's text to every PCI device with a node (a lost one is
/// logged and skipped: it runs nothing to arm). `EINVAL` if a device refused it.
pub(crate) fn inject_all(text: &str) -> Result {
    let mut result = Ok(());
    for slot in 0..MAX_PCI {
        // SAFETY: a slot index; C returns a new reference on the slot's registered state
        // (taken under its node table's lock, as an open does) or null.
        let p = unsafe { davinci_pci_node_state(slot as c_uint) };
        if p.is_null() {
            continue;
        }
        // SAFETY: the reference `davinci_pci_node_state` took (one `Arc` count), owned here
        // and dropped at the end of this iteration.
        let st = unsafe { Arc::<PciShared>::from_raw(p.cast::<PciShared>()) };
        match st.inject(text) {
            Ok(()) => {}
            Err(e) if e == EINVAL => result = Err(EINVAL),
            Err(e) => pr_warn!(
                "davinci{}: inject '{}' not forwarded to the PCI device ({:?})\n",
                st.index,
                text.trim(),
                e
            ),
        }
    }
    result
}
