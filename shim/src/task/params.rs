//! Where kernel launches' parameter blocks live: slots of [`SLOT`] bytes in slabs of device
//! memory the open keeps ([`ParamArena`], one per [`Device`]), so a launch costs no ALLOC of
//! its own. A launch's task leases its slot like any buffer it names; the slot is free again
//! once the task's completion is reaped (or the task dropped unsubmitted). The device copies
//! a block when it takes the descriptor (docs/abi.md 6.1), so a reaped slot can be reused.
//!
//! A slab is one ALLOC of [`SLAB`] bytes; an open keeps at most [`MAX_SLABS`] of them (4096
//! launches in flight); past that, or if the device refuses a slab, a launch allocates its
//! block alone, as before. The slabs are not freed while the open lives (a slab holds no
//! [`Device`], which would keep the open alive for ever): the open's close frees them with
//! everything else.
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex, PoisonError};

use davinci_shm::SharedMapping;
use davinci_uapi::*;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{Held, Lease};

/// Bytes a slot holds (the largest block, `davinci_elementwise_params`, is 176).
pub(crate) const SLOT: usize = 256;
/// Bytes a slab holds: 256 slots.
pub(crate) const SLAB: usize = 64 << 10;
/// Slabs an open keeps at most.
pub(crate) const MAX_SLABS: usize = 16;

/// One slab: its allocation's mapping and address, and its free slots.
struct Slab {
    map: SharedMapping,
    dev_addr: DevAddr,
    free: Mutex<Vec<u16>>,
}

/// An open's slabs.
#[derive(Default)]
pub(crate) struct ParamArena {
    slabs: Mutex<Vec<Arc<Slab>>>,
}

/// A task's hold on its parameter block's slot: given back when the task lets go.
struct Slot {
    dev: Device,
    slab: Arc<Slab>,
    index: u16,
}

impl Held for Slot {
    fn device(&self) -> &Device {
        &self.dev
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slab
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self.index);
    }
}

impl ParamArena {
    /// `block` written into a free slot of `dev`'s slabs: its device address and the lease
    /// that holds the slot. `Ok(None)` when every slot is taken and no slab may be added (the
    /// caller allocates the block alone).
    ///
    /// # Errors
    /// `EINVAL` for a block longer than a slot; the mapping's errors.
    pub(crate) fn place(&self, dev: &Device, block: &[u8]) -> Result<Option<(DevAddr, Lease)>> {
        const OP: &str = "KERNEL_LAUNCH";
        if block.len() > SLOT {
            return Err(Error::new(
                Errno::EINVAL,
                OP,
                format!(
                    "a parameter block of {} bytes (at most {SLOT})",
                    block.len()
                ),
            ));
        }
        let mut slabs = self.slabs.lock().unwrap_or_else(PoisonError::into_inner);
        let taken = slabs.iter().find_map(|s| {
            let index = s
                .free
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop()?;
            Some((s.clone(), index))
        });
        let (slab, index) = match taken {
            Some(t) => t,
            None if slabs.len() < MAX_SLABS => {
                let Ok(slab) = Slab::new(dev) else {
                    return Ok(None);
                };
                let slab = Arc::new(slab);
                slabs.push(slab.clone());
                let index = slab
                    .free
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .pop()
                    .unwrap_or(0);
                (slab, index)
            }
            None => return Ok(None),
        };
        drop(slabs);
        let offset = usize::from(index) * SLOT;
        // Given back on any error below (the lease's drop).
        let slot = Slot {
            dev: dev.clone(),
            slab: slab.clone(),
            index,
        };
        slab.map.write(offset as u64, block).map_err(|_| {
            Error::new(
                Errno::EFAULT,
                OP,
                "parameter slot outside its slab".to_string(),
            )
        })?;
        let lease: Lease = Arc::new(slot);
        Ok(Some((slab.dev_addr + offset as u64, lease)))
    }
}

impl Slab {
    /// A new slab: one ALLOC of [`SLAB`] bytes, mapped, every slot free.
    fn new(dev: &Device) -> Result<Slab> {
        const OP: &str = "ALLOC_MEMORY";
        let mut a = AllocMemoryArgs {
            size: SLAB as u64,
            ..Default::default()
        };
        dev.call(OP, DRIVER_CMD_ALLOC_MEMORY, &mut a)?;
        let mapped = if a.alloc_size < SLAB as u64 {
            Err(Error::new(
                Errno::EPROTO,
                OP,
                "the driver reserved less than asked",
            ))
        } else {
            dev.map(OP, a.mmap_offset, SLAB as u64)
        };
        match mapped {
            Ok(map) => Ok(Slab {
                map,
                dev_addr: DevAddr(a.dev_addr),
                // Popped from the end: slot 0 first.
                free: Mutex::new((0..(SLAB / SLOT) as u16).rev().collect()),
            }),
            Err(e) => {
                let _ = dev.call_handle("FREE_MEMORY", DRIVER_CMD_FREE_MEMORY, a.handle);
                Err(e)
            }
        }
    }
}
