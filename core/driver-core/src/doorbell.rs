//! A hardware doorbell register ([`DoorbellRegister`]): where in a stream's doorbell page a
//! client writes, and what, to wake a device with `DAVINCI_FEAT_DOORBELL_MMIO` (GET_INFO's
//! `doorbell_offset` and `doorbell_value`, docs/abi.md 5.3). A host whose doorbell page is a
//! device register (the PCI device: BAR0's Doorbell register) sets it with
//! [`DeviceCore::set_doorbell`](crate::DeviceCore::set_doorbell).

use davinci_uapi::mmap::DOORBELL_SIZE;
use davinci_uapi::Errno;

use crate::error::{Error, Result};

/// The doorbell register of a device with `DAVINCI_FEAT_DOORBELL_MMIO`: a 4-byte aligned
/// `u32` inside the doorbell page, and the value that rings it. Made only by
/// [`new`](Self::new), which checks both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoorbellRegister {
    offset: u32,
    value: u32,
}

impl DoorbellRegister {
    /// The register at byte `offset` of the doorbell page, rung by storing `value`.
    ///
    /// # Errors
    /// `EINVAL` when `offset` is not a multiple of 4, or the register (`offset + 4` bytes)
    /// does not fit in the doorbell page (`DOORBELL_SIZE`).
    pub const fn new(offset: u32, value: u32) -> Result<Self> {
        if !offset.is_multiple_of(4) {
            return Err(Error::new(
                Errno::EINVAL,
                "the doorbell register's offset must be a multiple of 4",
            ));
        }
        if offset as u64 + 4 > DOORBELL_SIZE {
            return Err(Error::new(
                Errno::EINVAL,
                "the doorbell register must lie inside the doorbell page (offset + 4 <= DOORBELL_SIZE)",
            ));
        }
        Ok(DoorbellRegister { offset, value })
    }

    /// Its byte offset in the doorbell page (GET_INFO `doorbell_offset`).
    pub const fn offset(&self) -> u32 {
        self.offset
    }

    /// What a client stores to ring it (GET_INFO `doorbell_value`).
    pub const fn value(&self) -> u32 {
        self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_register_must_be_aligned_and_inside_the_page() {
        let r = DoorbellRegister::new(12, 1).unwrap();
        assert_eq!((r.offset(), r.value()), (12, 1));
        let last = DOORBELL_SIZE as u32 - 4;
        assert_eq!(DoorbellRegister::new(last, 7).map(|r| r.offset()), Ok(last));
        for bad in [2, 13, last + 1, last + 4, u32::MAX - 3] {
            assert_eq!(
                DoorbellRegister::new(bad, 1).map_err(|e| e.errno),
                Err(Errno::EINVAL),
                "offset {bad}"
            );
        }
        assert!(DoorbellRegister::new(6, 0)
            .unwrap_err()
            .msg
            .contains("multiple of 4"));
        assert!(DoorbellRegister::new(4096, 0)
            .unwrap_err()
            .msg
            .contains("inside the doorbell page"));
    }
}
