//! Wide stores into the two-ring baseline's slots (`spsc.rs`), which are otherwise relaxed
//! atomic words: on x86-64, a whole cache line with non-temporal stores ([`store_line`]:
//! `movntdq` goes out through a write-combining buffer without first reading the line for
//! ownership, the read of the copy the other core left when it consumed the slot one ring
//! ago, which would otherwise cost every descriptor), and a 16-byte slot with one store
//! ([`store_pair`]: one store-buffer entry instead of two, which the device's completion
//! writes are bound by), and a prefetch hint ([`prefetch`]). Elsewhere, relaxed atomic
//! stores and no hint.
//!
//! The only `unsafe` is the intrinsics (they take raw pointers). Non-temporal stores are
//! weakly ordered: [`fence`] must run after them and before the Release store that publishes
//! them.
#![allow(unsafe_code)]

use std::sync::atomic::AtomicU64;

/// Words of a cache line.
pub const LINE_WORDS: usize = 8;

/// One cache line of 64-bit words, 64-byte aligned, only ever accessed through its atomics
/// and [`store_line`].
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct Line(pub [AtomicU64; LINE_WORDS]);

/// Writes `words` into `line` with four 16-byte stores (x86-64), non-temporal ones if `nt`,
/// or relaxed atomic stores. The caller must own the line (no other thread reads or writes
/// it until it is published) and, after non-temporal ones, call [`fence`] before publishing
/// it.
pub fn store_line(line: &Line, words: &[u64; LINE_WORDS], nt: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_set_epi64x, _mm_store_si128, _mm_stream_si128};
        // The whole line, through its `UnsafeCell`s (the atomics): a write through a pointer
        // derived from a shared reference is allowed for interior-mutable memory.
        let p = std::ptr::from_ref(&line.0).cast::<__m128i>().cast_mut();
        for (i, pair) in words.chunks_exact(2).enumerate() {
            // SAFETY: SSE2 is part of the x86-64 baseline (the intrinsics need only it).
            // `p.add(i)` for i < 4 stays inside the 64-byte line, which is 64-byte aligned
            // (`Line`'s repr), so each 16-byte store is aligned as both stores require. The
            // memory is `UnsafeCell`s (atomics), writable through a shared reference, and the
            // caller owns the line: no other thread accesses it until it is published after
            // `fence`, so this plain (non-atomic) write races with nothing.
            unsafe {
                let v = _mm_set_epi64x(pair[1] as i64, pair[0] as i64);
                if nt {
                    _mm_stream_si128(p.add(i), v);
                } else {
                    _mm_store_si128(p.add(i), v);
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = nt;
        for (w, v) in line.0.iter().zip(words) {
            w.store(*v, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Writes `words` into a 16-byte-aligned slot of two words with one 16-byte store (x86-64),
/// or two relaxed atomic stores. The caller must own the slot (no other thread reads or
/// writes it until it is published by a Release store).
pub fn store_pair(slot: &[AtomicU64; 2], words: [u64; 2]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_set_epi64x, _mm_store_si128};
        let p = std::ptr::from_ref(slot).cast::<__m128i>().cast_mut();
        debug_assert!(p.is_aligned(), "a pair slot must be 16-byte aligned");
        // SAFETY: SSE2 is part of the x86-64 baseline. `p` covers exactly the two words of
        // `slot`, `UnsafeCell`s (atomics) writable through a shared reference; the caller
        // guarantees 16-byte alignment (`Line` is 64-byte aligned and pair slots sit at
        // multiples of 16 in it) and owns the slot, so this plain write races with nothing.
        unsafe {
            _mm_store_si128(p, _mm_set_epi64x(words[1] as i64, words[0] as i64));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    for (w, v) in slot.iter().zip(words) {
        w.store(v, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Asks for `line` to be brought into this core's caches (a hint: `prefetcht0` on x86-64,
/// nothing elsewhere).
pub fn prefetch(line: &Line) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = std::ptr::from_ref(line).cast::<i8>();
        // SAFETY: SSE is part of the x86-64 baseline; a prefetch reads nothing visible to the
        // program and cannot fault, and `p` points into a live `Line` anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = line;
}

/// Orders every [`store_line`] before the stores that follow (`sfence` on x86-64): call it
/// before the Release store that publishes the lines.
pub fn fence() {
    // SAFETY: SSE is part of the x86-64 baseline; `sfence` has no other precondition.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_stored_pair_reads_back_through_its_atomics() {
        let line = Line::default();
        for (k, pair) in line.0.chunks_exact(2).enumerate() {
            let pair: &[AtomicU64; 2] = pair.try_into().unwrap();
            store_pair(pair, [k as u64, !(k as u64)]);
        }
        let back: Vec<u64> = line.0.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        assert_eq!(back, [0, !0, 1, !1, 2, !2, 3, !3]);
    }

    #[test]
    fn a_stored_line_reads_back_through_its_atomics() {
        let lines: Vec<Line> = (0..3).map(|_| Line::default()).collect();
        let words = [1, 2, 3, 4, 5, 6, 7, u64::MAX];
        for nt in [true, false] {
            store_line(&lines[1], &[0; LINE_WORDS], !nt);
            store_line(&lines[1], &words, nt);
            fence();
            let back: Vec<u64> = lines[1]
                .0
                .iter()
                .map(|w| w.load(Ordering::Relaxed))
                .collect();
            assert_eq!(back, words);
        }
        for l in [&lines[0], &lines[2]] {
            assert!(l.0.iter().all(|w| w.load(Ordering::Relaxed) == 0));
        }
    }
}
