// SPDX-License-Identifier: GPL-2.0

//! The PCI driver of QEMU's `ivshmem-doorbell` device (1af4:1110; issue 27), whose engine
//! runs in a host process (`davinci-ivshmem`). Linux 6.12 has no Rust PCI abstractions:
//! `pci_helpers.c` holds the `struct pci_driver` and does every PCI call (enable, regions,
//! BAR0 `pci_iomap`, BAR2 `memremap` write-back, bus mastering, MSI-X vectors, `request_irq`)
//! and their undoing. This module is the Rust half of that boundary:
//!
//! * [`PciDriver`]: the driver's registration, held by the module (unregistered on drop,
//!   which removes every bound device first);
//! * the per-device state, [`PciState`]: its slot among at most [`MAX_PCI`] devices, its
//!   peer id, its vectors and the interrupts counted per vector, and [`PciDev`], the handle
//!   through which Rust reaches the device (the doorbell);
//! * the `extern "C"` functions `pci_helpers.c` calls: `davinci_pci_attach` at the end of a
//!   probe (after the resources, before the interrupt handlers), `davinci_pci_interrupt` from
//!   each vector's hard-irq handler, `davinci_pci_detach` in remove (after every handler was
//!   freed, before the resources go), and the test hooks' `davinci_pci_count` and
//!   `davinci_pci_ring`.
//!
//! The state crosses to C as the pointer of a leaked `KBox` (`KBox::into_raw` in attach,
//! `KBox::from_raw` in detach): C keeps it in its `struct davinci_pci` and hands it back
//! unchanged, and by the order above no handler or debugfs file can reach it after detach.

use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::ffi::c_int;

use kernel::prelude::*;

/// Most ivshmem devices the module drives at once (the `pci_devices` parameter: 0 to this);
/// probe refuses another (EBUSY, logged).
pub(crate) const MAX_PCI: usize = 8;

/// Most MSI-X vectors a device gets (probe asks for 1 to this many).
pub(crate) const VECTORS: usize = 4;

/// The peer id of the host process, whose doorbells the guest rings.
const HOST_PEER: u16 = 0;

/// What probe tells [`davinci_pci_attach`] (`pci_helpers.c`'s `struct davinci_pci_info`,
/// same layout).
#[repr(C)]
struct PciInfo {
    /// IVPosition: this guest's peer id.
    peer: u32,
    /// MSI-X vectors granted (1 to [`VECTORS`]).
    vectors: u32,
    /// BAR0's length (registers).
    regs_len: u64,
    /// BAR2's length (shared memory).
    shm_len: u64,
    /// The device's bus number and devfn, for the log.
    bus: u32,
    devfn: u32,
}

extern "C" {
    fn davinci_pci_register() -> c_int;
    fn davinci_pci_unregister();
    fn davinci_pci_doorbell(dp: *mut c_void, peer: u32, vector: u32);
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
        let err = unsafe { davinci_pci_register() };
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

/// A handle on a bound device's C side (`struct davinci_pci`: its mapped BARs).
///
/// # Invariants
///
/// Points at the live `struct davinci_pci` of a bound device: it is only held in that
/// device's [`PciState`], which is freed (detach) before the C structure and its mappings go.
pub(crate) struct PciDev(NonNull<c_void>);

// SAFETY: the C structure is immutable after probe; its functions may run on any thread.
unsafe impl Send for PciDev {}
// SAFETY: as above; the doorbell is a single MMIO write, safe from several threads at once.
unsafe impl Sync for PciDev {}

impl PciDev {
    /// Rings `peer`'s doorbell `vector` (BAR0 offset 12): the peer gets an event on its
    /// eventfd `vector` (QEMU drops doorbells to a peer or vector that does not exist).
    pub(crate) fn doorbell(&self, peer: u16, vector: u16) {
        // SAFETY: the structure is live and BAR0 mapped (type invariant); any value is a
        // valid doorbell.
        unsafe { davinci_pci_doorbell(self.0.as_ptr(), u32::from(peer), u32::from(vector)) }
    }
}

/// One bound ivshmem device, as Rust keeps it.
pub(crate) struct PciState {
    /// Its slot in [`SLOTS`], freed on drop.
    slot: usize,
    /// Its C side.
    dev: PciDev,
    /// This guest's peer id (IVPosition).
    peer: u32,
    /// MSI-X vectors granted.
    vectors: u32,
    /// Interrupts counted per vector (incremented in hard-irq context).
    irqs: [AtomicU64; VECTORS],
}

/// A state's `slot` before it claimed one.
const UNCLAIMED: usize = MAX_PCI;

/// Which of the [`MAX_PCI`] slots are taken.
static SLOTS: [AtomicBool; MAX_PCI] = [const { AtomicBool::new(false) }; MAX_PCI];

impl PciState {
    /// Builds the state of a device probe has set up and claims a slot for it: ENOMEM, or
    /// EBUSY (logged) if `pci_devices` (at most [`MAX_PCI`]) devices are bound already.
    fn new(dev: PciDev, info: &PciInfo) -> Result<KBox<PciState>> {
        let mut st = KBox::new(
            PciState {
                slot: UNCLAIMED,
                dev,
                peer: info.peer,
                vectors: info.vectors.min(VECTORS as u32),
                irqs: [const { AtomicU64::new(0) }; VECTORS],
            },
            GFP_KERNEL,
        )?;
        let most = (crate::sys::params().pci_devices as usize).min(MAX_PCI);
        let Some(slot) = SLOTS.iter().take(most).position(|s| {
            s.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }) else {
            pr_err!(
                "pci {:02x}:{:02x}.{}: refused: {} ivshmem devices are bound already (the most \
                 the module drives: pci_devices={})\n",
                info.bus,
                info.devfn >> 3,
                info.devfn & 7,
                most,
                most
            );
            return Err(EBUSY);
        };
        st.slot = slot;
        Ok(st)
    }

    /// An interrupt on `vector` (hard-irq context: counts only).
    fn interrupt(&self, vector: u32) {
        if let Some(c) = self.irqs.get(vector as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Interrupts counted on `vector` so far (0 for a vector the device does not have).
    fn count(&self, vector: u32) -> u64 {
        self.irqs
            .get(vector as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Rings the host's doorbell `vector`: EINVAL for a vector the device was not granted.
    fn ring(&self, vector: u32) -> Result {
        if vector >= self.vectors {
            return Err(EINVAL);
        }
        let vector = u16::try_from(vector).map_err(|_| EINVAL)?;
        self.dev.doorbell(HOST_PEER, vector);
        Ok(())
    }
}

impl Drop for PciState {
    fn drop(&mut self) {
        let Some(taken) = SLOTS.get(self.slot) else {
            return; // Refused: it never had a slot.
        };
        let mut counts = [0u64; VECTORS];
        for (n, c) in counts.iter_mut().zip(&self.irqs) {
            *n = c.load(Ordering::Relaxed);
        }
        pr_info!(
            "pci slot {}: detached (peer {}, interrupts per vector {:?})\n",
            self.slot,
            self.peer,
            counts.get(..self.vectors as usize).unwrap_or(&counts)
        );
        taken.store(false, Ordering::Release);
    }
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
    // INVARIANT: `dp` is live until the state is detached (the caller's contract), and the
    // handle lives in the state.
    match PciState::new(PciDev(dp), info) {
        Ok(st) => {
            pr_info!(
                "pci {:02x}:{:02x}.{}: slot {}, peer {}, BAR0 {} B, BAR2 {} B, {} MSI-X \
                 vectors\n",
                info.bus,
                info.devfn >> 3,
                info.devfn & 7,
                st.slot,
                st.peer,
                info.regs_len,
                info.shm_len,
                st.vectors
            );
            KBox::into_raw(st).cast()
        }
        Err(e) => e.to_ptr(),
    }
}

/// A vector's interrupt handler (hard-irq context).
///
/// # Safety
///
/// `state` came from `davinci_pci_attach` and was not detached (C frees every irq before it
/// detaches).
#[no_mangle]
unsafe extern "C" fn davinci_pci_interrupt(state: *mut c_void, vector: u32) {
    // SAFETY: the caller's contract: a live state, only shared (every field is read-only or
    // atomic).
    let st = unsafe { &*state.cast::<PciState>() };
    st.interrupt(vector);
}

/// Test hook (debugfs `info`, `ring`): interrupts counted on `vector`.
///
/// # Safety
///
/// As for [`davinci_pci_interrupt`] (C removes the debugfs files, waiting for their users,
/// before it detaches).
#[no_mangle]
unsafe extern "C" fn davinci_pci_count(state: *mut c_void, vector: u32) -> u64 {
    // SAFETY: the caller's contract.
    let st = unsafe { &*state.cast::<PciState>() };
    st.count(vector)
}

/// Test hook (debugfs `ring`): rings the host's doorbell `vector`; 0 or a negative errno.
///
/// # Safety
///
/// As for [`davinci_pci_count`].
#[no_mangle]
unsafe extern "C" fn davinci_pci_ring(state: *mut c_void, vector: u32) -> c_int {
    // SAFETY: the caller's contract.
    let st = unsafe { &*state.cast::<PciState>() };
    match st.ring(vector) {
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
    // SAFETY: the caller's contract: the `KBox` leaked by attach, reclaimed once.
    drop(unsafe { KBox::from_raw(state.cast::<PciState>()) });
}
