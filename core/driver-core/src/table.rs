//! Fixed-capacity handle tables. A handle is `generation << 16 | (index + 1)` passed through
//! the device's [`Scramble`]: 0 is never a handle, a stale handle (its slot reused) does not
//! resolve, and a handle's value says nothing a tenant can read about the slot or how often
//! it was used (docs/abi.md 1.2).

use crate::error::{fail, Result};

/// A keyed bijection of `u32` that keeps 0 at 0 (and so every other value away from 0):
/// xor-shifts and multiplications by odd numbers, both invertible modulo 2^32. Handles and
/// client ids go out through it, so their values carry no sequence (slot, generation, open
/// count) another tenant's activity would show in. It hides; it is not a cipher: the key is
/// random per device (the host's [`DeviceCore::set_secret`](crate::DeviceCore::set_secret)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scramble {
    m1: u32,
    m2: u32,
    inv1: u32,
    inv2: u32,
}

impl Scramble {
    /// The key before a host sets one (fmix32's multipliers).
    pub const DEFAULT: Scramble = Scramble::from_multipliers(0x85eb_ca6b, 0xc2b2_ae35);

    /// The scramble for a secret `key` (any value; the multipliers are forced odd).
    pub const fn new(key: u64) -> Scramble {
        // splitmix64's finaliser spreads any key (0 too) over both multipliers.
        let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        Scramble::from_multipliers(z as u32, (z >> 32) as u32)
    }

    const fn from_multipliers(m1: u32, m2: u32) -> Scramble {
        let (m1, m2) = (m1 | 1, m2 | 1);
        Scramble {
            m1,
            m2,
            inv1: inverse(m1),
            inv2: inverse(m2),
        }
    }

    /// `x` scrambled (0 stays 0).
    pub const fn apply(&self, x: u32) -> u32 {
        let mut x = x ^ (x >> 16);
        x = x.wrapping_mul(self.m1);
        x ^= x >> 16;
        x = x.wrapping_mul(self.m2);
        x ^ (x >> 16)
    }

    /// The `x` whose [`apply`](Self::apply) is `y`.
    pub const fn undo(&self, y: u32) -> u32 {
        // `x ^= x >> 16` is its own inverse on 32 bits.
        let mut x = y ^ (y >> 16);
        x = x.wrapping_mul(self.inv2);
        x ^= x >> 16;
        x = x.wrapping_mul(self.inv1);
        x ^ (x >> 16)
    }
}

/// The inverse of odd `a` modulo 2^32 (Newton's iteration doubles the correct bits each step:
/// 3, 6, 12, 24, 48).
const fn inverse(a: u32) -> u32 {
    let mut x = a;
    let mut i = 0;
    while i < 4 {
        x = x.wrapping_mul(2u32.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

/// A fixed-capacity table of `T` addressed by generation-checked, scrambled handles.
pub struct Table<T, const N: usize> {
    slots: [Slot<T>; N],
    len: usize,
    scramble: Scramble,
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
            scramble: Scramble::DEFAULT,
        }
    }

    /// Sets the scramble of the table's handles. Only while the table is empty (a handle
    /// given out under the old one would no longer resolve): `false` otherwise, nothing done.
    pub fn set_scramble(&mut self, scramble: Scramble) -> bool {
        if self.len != 0 {
            return false;
        }
        self.scramble = scramble;
        true
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

    /// The unscrambled handle of slot `index` at `generation`.
    const fn raw(index: usize, generation: u16) -> u32 {
        ((generation as u32) << 16) | (index as u32 + 1)
    }

    fn handle_of(&self, index: usize, generation: u16) -> u32 {
        self.scramble.apply(Self::raw(index, generation))
    }

    fn index_of(&self, handle: u32) -> Option<usize> {
        let handle = self.scramble.undo(handle);
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
        let generation = slot.generation;
        Ok(self.handle_of(index, generation))
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
                .map(|v| (self.handle_of(i, s.generation), v))
        })
    }

    /// `(handle, &mut entry)` for every entry.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut T)> {
        let scramble = self.scramble;
        self.slots.iter_mut().enumerate().filter_map(move |(i, s)| {
            let handle = scramble.apply(Self::raw(i, s.generation));
            s.value.as_mut().map(move |v| (handle, v))
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

    #[test]
    fn scramble_is_a_bijection_that_keeps_zero_and_hides_the_slot() {
        for key in [0u64, 1, 42, u64::MAX, 0x1234_5678_9abc_def0] {
            let s = Scramble::new(key);
            assert_eq!(s.apply(0), 0);
            for x in (1u32..=70_000).chain([u32::MAX, 0x8000_0000, 0xffff_0001]) {
                let y = s.apply(x);
                assert_ne!(y, 0, "{x:#x} scrambled to 0 under key {key}");
                assert_eq!(s.undo(y), x, "undo(apply({x:#x})) under key {key}");
            }
        }
        // Neighbouring slots and successive generations do not give neighbouring values.
        let s = Scramble::new(7);
        let (a, b, c) = (s.apply(0x1_0001), s.apply(0x1_0002), s.apply(0x2_0001));
        assert!(
            a.abs_diff(b) > 0xffff && a.abs_diff(c) > 0xffff,
            "{a:#x} {b:#x} {c:#x}"
        );
        assert_ne!(Scramble::new(1), Scramble::new(2));
    }

    #[test]
    fn handles_depend_on_the_key_and_the_key_changes_only_while_empty() {
        let mut t: Table<u32, 4> = Table::new();
        assert!(t.set_scramble(Scramble::new(1)));
        let a = t.insert(1, "full").unwrap();
        assert!(!t.set_scramble(Scramble::new(2)), "a handle is out");
        assert_eq!(t.get(a), Some(&1));
        let mut u: Table<u32, 4> = Table::new();
        assert!(u.set_scramble(Scramble::new(2)));
        let b = u.insert(1, "full").unwrap();
        assert_ne!(a, b, "the same slot under another key");
        assert_eq!(u.get(a), None);
        assert_eq!(t.remove(a), Some(1));
        assert!(t.set_scramble(Scramble::new(2)));
    }
}
