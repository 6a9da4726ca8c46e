//! Little-endian fields of byte slices, bounds-checked (`None` past the end), and
//! [`AdminSlot`](crate::AdminSlot) words to bytes and back.

/// The `u32` at `at`, little-endian.
pub fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// The `u64` at `at`, little-endian.
pub fn get_u64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    let mut w = [0u8; 8];
    w.copy_from_slice(s);
    Some(u64::from_le_bytes(w))
}

/// Writes `v` at `at`, little-endian; `false` (nothing written) past the end.
pub fn put_u32(b: &mut [u8], at: usize, v: u32) -> bool {
    match at.checked_add(4).and_then(|end| b.get_mut(at..end)) {
        Some(s) => {
            s.copy_from_slice(&v.to_le_bytes());
            true
        }
        None => false,
    }
}

/// Writes `v` at `at`, little-endian; `false` (nothing written) past the end.
pub fn put_u64(b: &mut [u8], at: usize, v: u64) -> bool {
    match at.checked_add(8).and_then(|end| b.get_mut(at..end)) {
        Some(s) => {
            s.copy_from_slice(&v.to_le_bytes());
            true
        }
        None => false,
    }
}

/// The bytes of a slot of `N` little-endian words (what the ring copied out, once).
// (Index loops, not `chunks_exact`: the kernel's objtool does not know the division-by-zero
// panic a runtime chunk size brings, and warns.)
pub fn words_to_bytes<const N: usize, const B: usize>(words: &[u64; N]) -> [u8; B] {
    let mut out = [0u8; B];
    for (i, w) in words.iter().enumerate() {
        let at = i * 8;
        match out.get_mut(at..at + 8) {
            Some(d) => d.copy_from_slice(&w.to_le_bytes()),
            None => break,
        }
    }
    out
}

/// The slot of `N` little-endian words holding `bytes` (missing bytes are zero).
pub fn bytes_to_words<const N: usize>(bytes: &[u8]) -> [u64; N] {
    let mut out = [0u64; N];
    for (i, w) in out.iter_mut().enumerate() {
        let at = i * 8;
        let mut b = [0u8; 8];
        for (k, x) in b.iter_mut().enumerate() {
            *x = bytes.get(at + k).copied().unwrap_or(0);
        }
        *w = u64::from_le_bytes(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_refuse_the_end() {
        let mut b = [0u8; 12];
        assert!(put_u32(&mut b, 0, 0x0403_0201));
        assert!(put_u64(&mut b, 4, 0x0c0b_0a09_0807_0605));
        assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(get_u32(&b, 0), Some(0x0403_0201));
        assert_eq!(get_u64(&b, 4), Some(0x0c0b_0a09_0807_0605));
        assert_eq!(get_u32(&b, 9), None);
        assert_eq!(get_u64(&b, 5), None);
        assert_eq!(get_u64(&b, usize::MAX), None);
        assert!(!put_u32(&mut b, 10, 1) && !put_u64(&mut b, usize::MAX - 2, 1));
        let w: [u64; 2] = bytes_to_words(&b);
        let back: [u8; 16] = words_to_bytes(&w);
        assert_eq!(&back[..12], &b);
        assert_eq!(&back[12..], &[0; 4]);
    }
}
