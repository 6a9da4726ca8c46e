//! The user buffer of the commands that return entries (LIST_CLIENTS, LIST_KERNELS, TRACE's
//! READ, READ_EVENTS): `capacity` entries `entry_size` bytes apart from `buf`.

use davinci_uapi::Wire;

use super::UserMem;
use crate::error::{ensure, fail, Result};

/// Largest `entry_size` accepted.
const LIST_ENTRY_MAX: u64 = 4096;
static ZEROS: [u8; 256] = [0; 256];

/// A LIST_* command's user buffer: `capacity` entries `stride` bytes apart from `buf`.
pub(crate) struct List {
    buf: u64,
    capacity: u32,
    stride: u64,
}

impl List {
    pub(crate) fn new(buf: u64, capacity: u32, entry_size: u32) -> Result<List> {
        let stride = entry_size as u64;
        ensure!(
            (8..=LIST_ENTRY_MAX).contains(&stride) && stride.is_multiple_of(8),
            EINVAL,
            "entry_size must be a multiple of 8 between 8 and 4096"
        );
        ensure!(
            capacity == 0 || buf != 0,
            EFAULT,
            "buf is NULL with a non-zero capacity"
        );
        Ok(List {
            buf,
            capacity,
            stride,
        })
    }

    /// Writes the first `capacity` of `items`, each as the first `min(stride, its size)`
    /// bytes of its entry and zeros for the rest (an older caller gets the prefix it knows, a
    /// newer one zeros in the fields this driver does not have); returns how many there are.
    pub(crate) fn write<T: Wire>(
        &self,
        user: &mut dyn UserMem,
        items: impl Iterator<Item = T>,
    ) -> Result<u32> {
        const { assert!(T::SIZE <= 256, "a LIST entry larger than its buffer") };
        let mut count = 0u32;
        let mut bytes = [0u8; 256];
        let known = (self.stride as usize).min(T::SIZE).min(bytes.len());
        for item in items {
            if count < self.capacity {
                item.encode(&mut bytes[..T::SIZE]);
                let Some(addr) = (count as u64)
                    .checked_mul(self.stride)
                    .and_then(|o| self.buf.checked_add(o))
                    .filter(|at| at.checked_add(self.stride).is_some())
                else {
                    fail!(EFAULT, "buf + capacity * entry_size overflows");
                };
                user.write(addr, &bytes[..known])?;
                let mut at = known as u64;
                while at < self.stride {
                    let n = (self.stride - at).min(ZEROS.len() as u64);
                    user.write(addr + at, &ZEROS[..n as usize])?;
                    at += n;
                }
            }
            count += 1;
        }
        Ok(count)
    }
}
