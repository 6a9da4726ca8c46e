//! Fixed-capacity handle tables. A handle is `generation << 16 | (index + 1)`: 0 is never a
//! handle, and a stale handle (its slot reused) does not resolve.

use crate::error::{fail, Result};

/// A fixed-capacity table of `T` addressed by generation-checked handles.
pub struct Table<T, const N: usize> {
    slots: [Slot<T>; N],
    len: usize,
}

struct Slot<T> {
    generation: u16,
    value: Option<T>,
}

impl<T, const N: usize> Default for Table<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const N: usize> Table<T, N> {
    const _FITS: () = assert!(N < 0xffff, "table index must fit 16 bits");

    /// An empty table. `const`, so a host may build its device in static storage.
    pub const fn new() -> Self {
        #[allow(clippy::let_unit_value)]
        let _ = Self::_FITS;
        Self {
            slots: [const {
                Slot {
                    generation: 1,
                    value: None,
                }
            }; N],
            len: 0,
        }
    }

    /// Capacity.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Entries in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no entry is in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn handle_of(index: usize, generation: u16) -> u32 {
        ((generation as u32) << 16) | (index as u32 + 1)
    }

    fn index_of(&self, handle: u32) -> Option<usize> {
        let low = (handle & 0xffff) as usize;
        if low == 0 || low > N {
            return None;
        }
        let index = low - 1;
        let slot = self.slots.get(index)?;
        if slot.value.is_some() && slot.generation as u32 == handle >> 16 {
            Some(index)
        } else {
            None
        }
    }

    /// Inserts `value`; `ENOSPC` with `full_msg` if the table is full.
    pub fn insert(&mut self, value: T, full_msg: &'static str) -> Result<u32> {
        let Some(index) = self.slots.iter().position(|s| s.value.is_none()) else {
            fail!(ENOSPC, full_msg);
        };
        let slot = &mut self.slots[index];
        slot.value = Some(value);
        self.len += 1;
        Ok(Self::handle_of(index, slot.generation))
    }

    /// The entry for `handle`.
    pub fn get(&self, handle: u32) -> Option<&T> {
        let i = self.index_of(handle)?;
        self.slots[i].value.as_ref()
    }

    /// The entry for `handle`, mutably.
    pub fn get_mut(&mut self, handle: u32) -> Option<&mut T> {
        let i = self.index_of(handle)?;
        self.slots[i].value.as_mut()
    }

    /// Removes and returns the entry for `handle`; its handle never resolves again (until the
    /// 16-bit generation wraps).
    pub fn remove(&mut self, handle: u32) -> Option<T> {
        let i = self.index_of(handle)?;
        let slot = &mut self.slots[i];
        let value = slot.value.take();
        slot.generation = slot.generation.wrapping_add(1).max(1);
        self.len -= 1;
        value
    }

    /// `(handle, &entry)` for every entry.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.value
                .as_ref()
                .map(|v| (Self::handle_of(i, s.generation), v))
        })
    }

    /// `(handle, &mut entry)` for every entry.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        self.slots.iter_mut().enumerate().filter_map(|(i, s)| {
            let generation = s.generation;
            s.value
                .as_mut()
                .map(move |v| (Self::handle_of(i, generation), v))
        })
    }

    /// The first handle whose entry satisfies `pred`.
    pub fn find(&self, mut pred: impl FnMut(&T) -> bool) -> Option<u32> {
        self.iter().find(|(_, v)| pred(v)).map(|(h, _)| h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove_and_stale_handles() {
        let mut t: Table<u32, 2> = Table::new();
        let a = t.insert(10, "full").unwrap();
        let b = t.insert(20, "full").unwrap();
        assert_ne!(a, 0);
        assert_eq!(
            t.insert(30, "full").unwrap_err().errno,
            davinci_uapi::Errno::ENOSPC
        );
        assert_eq!(t.get(a), Some(&10));
        assert_eq!(t.remove(a), Some(10));
        assert_eq!(t.get(a), None, "stale handle must not resolve");
        let c = t.insert(30, "full").unwrap();
        assert_ne!(c, a, "reused slot gets a new generation");
        assert_eq!(t.get(c), Some(&30));
        assert_eq!(t.get(b), Some(&20));
        assert_eq!(t.get(0), None);
        assert_eq!(t.get(0xffff_0003), None);
        assert_eq!(t.len(), 2);
    }
}
