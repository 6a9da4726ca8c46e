//! Byte copies to and from shared memory that another process (or the device) may access
//! concurrently, and pattern fills of it: every access is a relaxed atomic (8 bytes at a time
//! where aligned), so a racing peer can make the bytes meaningless but never makes the copy
//! undefined behaviour.
//! [`SharedMapping`](crate::SharedMapping) copies with these; ring slots use the whole-slot
//! volatile copies of the ring ends (`davinci-ring`).
#![allow(unsafe_code)]

/// Copies `buf.len()` bytes from shared memory at `src` into `buf`, with relaxed atomic loads
/// (8 bytes at a time where aligned).
///
/// # Safety
/// `[src, src + buf.len())` is valid for reads and writes (a live shared mapping) and is not
/// accessed non-atomically by this process while the copy runs.
pub unsafe fn copy_from_shared(src: *const u8, buf: &mut [u8]) {
    let n = buf.len();
    let mut i = 0;
    while i < n && (src as usize).wrapping_add(i) % 8 != 0 {
        // SAFETY: `i < n`: in bounds per the contract; bytes are always aligned.
        buf[i] = unsafe { core::sync::atomic::AtomicU8::from_ptr(src.add(i).cast_mut()) }
            .load(core::sync::atomic::Ordering::Relaxed);
        i += 1;
    }
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n`: in bounds; `src + i` is 8-byte aligned (loop above).
        let w =
            unsafe { core::sync::atomic::AtomicU64::from_ptr(src.add(i).cast_mut().cast::<u64>()) }
                .load(core::sync::atomic::Ordering::Relaxed);
        buf[i..i + 8].copy_from_slice(&w.to_ne_bytes());
        i += 8;
    }
    while i < n {
        // SAFETY: `i < n`: in bounds.
        buf[i] = unsafe { core::sync::atomic::AtomicU8::from_ptr(src.add(i).cast_mut()) }
            .load(core::sync::atomic::Ordering::Relaxed);
        i += 1;
    }
}

/// Copies `data` into shared memory at `dst`, with relaxed atomic stores.
///
/// # Safety
/// `[dst, dst + data.len())` is valid for writes (a live shared mapping), does not overlap
/// `data`, and is not accessed non-atomically by this process while the copy runs.
pub unsafe fn copy_to_shared(dst: *mut u8, data: &[u8]) {
    let n = data.len();
    let mut i = 0;
    while i < n && (dst as usize).wrapping_add(i) % 8 != 0 {
        // SAFETY: `i < n`: in bounds per the contract.
        unsafe { core::sync::atomic::AtomicU8::from_ptr(dst.add(i)) }
            .store(data[i], core::sync::atomic::Ordering::Relaxed);
        i += 1;
    }
    while i + 8 <= n {
        let mut w = [0u8; 8];
        w.copy_from_slice(&data[i..i + 8]);
        // SAFETY: `i + 8 <= n`: in bounds; `dst + i` is 8-byte aligned (loop above).
        unsafe { core::sync::atomic::AtomicU64::from_ptr(dst.add(i).cast::<u64>()) }
            .store(u64::from_ne_bytes(w), core::sync::atomic::Ordering::Relaxed);
        i += 8;
    }
    while i < n {
        // SAFETY: `i < n`: in bounds.
        unsafe { core::sync::atomic::AtomicU8::from_ptr(dst.add(i)) }
            .store(data[i], core::sync::atomic::Ordering::Relaxed);
        i += 1;
    }
}

/// Fills `len` bytes of shared memory at `dst` with the native-endian bytes of `pattern`,
/// repeated from `dst` on (a trailing partial pattern is written as its first bytes), with
/// relaxed atomic stores ([`copy_to_shared`] of a pattern buffer, a chunk at a time).
///
/// # Safety
/// `[dst, dst + len)` is valid for writes (a live shared mapping) and is not accessed
/// non-atomically by this process while the fill runs.
pub unsafe fn fill_shared(dst: *mut u8, len: usize, pattern: u32) {
    const CHUNK: usize = 256;
    let bytes = pattern.to_ne_bytes();
    let mut buf = [0u8; CHUNK];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = bytes[i % 4];
    }
    let mut off = 0;
    while off < len {
        let n = (len - off).min(CHUNK);
        // SAFETY: `off + n <= len`, so `[dst + off, dst + off + n)` lies in the range the
        // caller vouches for, with the same contract; `buf` is this function's own stack
        // memory, so it cannot overlap the shared range. CHUNK is a multiple of 4, so every
        // step starts at pattern phase 0.
        unsafe { copy_to_shared(dst.add(off), &buf[..n]) };
        off += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length_and_alignment() {
        let mut shared = [0u64; 8];
        let base = shared.as_mut_ptr().cast::<u8>();
        for start in 0..9 {
            for len in 0..40 {
                let data: [u8; 40] = core::array::from_fn(|i| (i * 7 + start + len) as u8);
                // SAFETY: `start + len <= 49 < 64`: inside `shared`, which nothing else touches.
                unsafe { copy_to_shared(base.add(start), &data[..len]) };
                let mut out = [0u8; 40];
                // SAFETY: as above.
                unsafe { copy_from_shared(base.add(start), &mut out[..len]) };
                assert_eq!(out[..len], data[..len], "start {start} len {len}");
            }
        }
    }

    #[test]
    fn fills_every_length_and_alignment_from_pattern_phase_0() {
        let pattern = 0x4433_2211u32;
        let bytes = pattern.to_ne_bytes();
        for start in 0..9 {
            for len in [0, 1, 3, 4, 7, 8, 255, 256, 257, 600] {
                let mut shared = [0u64; 128];
                let base = shared.as_mut_ptr().cast::<u8>();
                // SAFETY: `start + len <= 608 < 1024`: inside `shared`, which nothing else
                // touches.
                unsafe { fill_shared(base.add(start), len, pattern) };
                let mut out = [0u8; 1024];
                // SAFETY: the whole of `shared`, as above.
                unsafe { copy_from_shared(base, &mut out) };
                for (i, &b) in out.iter().enumerate() {
                    let want = if (start..start + len).contains(&i) {
                        bytes[(i - start) % 4]
                    } else {
                        0
                    };
                    assert_eq!(b, want, "start {start} len {len} byte {i}");
                }
            }
        }
    }
}
