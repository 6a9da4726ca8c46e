//! Bulk moves and fills of shared memory at memory speed (issue 43). On x86-64 the string
//! instructions (`rep movsb`, `rep stosq`) in inline assembly: the same instructions the C
//! library's `memcpy`/`memset` use for large sizes on this hardware, and opaque to the
//! compiler, so a peer's racing stores make bytes wrong, never the copy undefined (as with
//! the relaxed atomics of `copy.rs`, which the other architectures use, 8 bytes at a time).
#![allow(unsafe_code)]

use crate::copy::fill_shared;
#[cfg(not(target_arch = "x86_64"))]
use crate::copy::{copy_from_shared, copy_to_shared};

/// Copies `n` bytes from `src` to `dst`, forwards.
///
/// # Safety
/// `[src, src + n)` is readable and `[dst, dst + n)` writable for the whole copy, and they do
/// not overlap unless `dst <= src`. Either may be shared memory that others write.
pub(crate) unsafe fn copy_forward(dst: *mut u8, src: *const u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the ranges are valid per the contract; `rep movsb` moves `rcx` bytes from
        // `[rsi]` to `[rdi]` upwards (the direction flag is clear at every function
        // boundary, as the ABI requires), byte by byte as far as overlap is concerned, so
        // `dst <= src` overlap is a correct memmove.
        unsafe {
            core::arch::asm!(
                "rep movsb",
                inout("rcx") n => _,
                inout("rdi") dst => _,
                inout("rsi") src => _,
                options(nostack, preserves_flags)
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut buf = [0u8; 4096];
        let mut off = 0;
        while off < n {
            let k = (n - off).min(buf.len());
            // SAFETY: in bounds per the contract; a step reads its source before it writes,
            // and steps go upwards, so `dst <= src` overlap is a correct memmove.
            unsafe {
                copy_from_shared(src.add(off), &mut buf[..k]);
                copy_to_shared(dst.add(off), &buf[..k]);
            }
            off += k;
        }
    }
}

/// Fills `n` bytes at `dst` with the native-endian bytes of `pattern`, repeated from `dst`
/// on.
///
/// # Safety
/// `[dst, dst + n)` is writable for the whole fill (it may be shared memory others write).
pub(crate) unsafe fn fill(dst: *mut u8, n: usize, pattern: u32) {
    #[cfg(target_arch = "x86_64")]
    {
        let bytes = pattern.to_ne_bytes();
        // Bytes up to an 8-byte boundary, then 8 at a time, then the rest.
        let head = dst.align_offset(8).min(n);
        let words = (n - head) / 8;
        let tail = head + words * 8;
        // SAFETY: `[dst, dst + head)` is inside the range.
        unsafe { fill_shared(dst, head, pattern) };
        let mut q = [0u8; 8];
        for (k, b) in q.iter_mut().enumerate() {
            *b = bytes[(head + k) % 4];
        }
        // SAFETY: `rep stosq` stores `rcx` 8-byte words of `rax` from `[rdi]` upwards:
        // `[dst + head, dst + tail)`, inside the range, 8-byte aligned.
        unsafe {
            core::arch::asm!(
                "rep stosq",
                inout("rcx") words => _,
                inout("rdi") dst.add(head) => _,
                in("rax") u64::from_ne_bytes(q),
                options(nostack, preserves_flags)
            );
        }
        // The tail starts at phase `tail % 4 == head % 4`.
        let r = |k: usize| bytes[(head + k) % 4];
        let rotated = u32::from_ne_bytes([r(0), r(1), r(2), r(3)]);
        // SAFETY: `[dst + tail, dst + n)` is inside the range.
        unsafe { fill_shared(dst.add(tail), n - tail, rotated) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: the range is writable per the contract.
        unsafe { fill_shared(dst, n, pattern) };
    }
}

/// Copies `n` bytes of shared memory at `src` into `buf`.
///
/// # Safety
/// `[src, src + buf.len())` is readable for the whole copy and not inside `buf`.
pub(crate) unsafe fn read(src: *const u8, buf: &mut [u8]) {
    // SAFETY: per the contract; `buf` is ordinary memory of its length.
    unsafe { copy_forward(buf.as_mut_ptr(), src, buf.len()) }
}

/// Copies `data` into shared memory at `dst`.
///
/// # Safety
/// `[dst, dst + data.len())` is writable for the whole copy and not inside `data`.
pub(crate) unsafe fn write(dst: *mut u8, data: &[u8]) {
    // SAFETY: per the contract.
    unsafe { copy_forward(dst, data.as_ptr(), data.len()) }
}

/// Copies `data` into shared memory at `dst` with non-temporal stores where it can (whole
/// 64-byte lines on x86-64: `movntdq`, then `sfence`), so the destination's lines are
/// neither read first nor left in this core's cache: for results written once to memory
/// the writer will not read again (about twice the speed of `write` for large copies).
/// The stores are complete and ordered before any later store when it returns.
///
/// # Safety
/// As [`write`].
pub(crate) unsafe fn write_streaming(dst: *mut u8, data: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        let n = data.len();
        let head = dst.align_offset(64).min(n);
        let lines = (n - head) / 64;
        // SAFETY: `[dst, dst + head)` is inside the range, `data[..head]` outside it.
        unsafe { copy_forward(dst, data.as_ptr(), head) };
        if lines > 0 {
            // SAFETY: `[dst + head, dst + head + 64 * lines)` lies in the range and is
            // 64-byte aligned (`movntdq` needs 16); the loads read `data` (unaligned loads,
            // ordinary memory); `sfence` orders the weakly ordered stores before anything
            // this thread stores afterwards (a barrier's release), as the contract says.
            unsafe {
                core::arch::asm!(
                    "2:",
                    "movdqu xmm0, [{src}]",
                    "movdqu xmm1, [{src} + 16]",
                    "movdqu xmm2, [{src} + 32]",
                    "movdqu xmm3, [{src} + 48]",
                    "movntdq [{dst}], xmm0",
                    "movntdq [{dst} + 16], xmm1",
                    "movntdq [{dst} + 32], xmm2",
                    "movntdq [{dst} + 48], xmm3",
                    "add {src}, 64",
                    "add {dst}, 64",
                    "dec {lines}",
                    "jnz 2b",
                    "sfence",
                    src = inout(reg) data.as_ptr().add(head) => _,
                    dst = inout(reg) dst.add(head) => _,
                    lines = inout(reg) lines => _,
                    out("xmm0") _,
                    out("xmm1") _,
                    out("xmm2") _,
                    out("xmm3") _,
                    options(nostack)
                );
            }
        }
        let done = head + 64 * lines;
        // SAFETY: the rest of the range.
        unsafe { copy_forward(dst.add(done), data.as_ptr().add(done), n - done) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: per the contract.
        unsafe { write(dst, data) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_writes_copy_every_byte_at_any_alignment_and_length() {
        for start in 0..70 {
            for n in [0, 1, 63, 64, 65, 127, 128, 200, 4096 + 17] {
                let data: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
                let mut v = vec![0xeeu8; start + n + 9];
                // SAFETY: `[start, start + n)` lies in `v`, `data` is another allocation.
                unsafe { write_streaming(v.as_mut_ptr().add(start), &data) };
                assert_eq!(&v[start..start + n], &data[..], "start {start} n {n}");
                assert!(v[..start].iter().chain(&v[start + n..]).all(|&b| b == 0xee));
            }
        }
    }

    #[test]
    fn fills_repeat_the_pattern_from_the_first_byte_at_any_alignment_and_length() {
        let pattern = 0x4433_2211u32;
        let p = pattern.to_ne_bytes();
        for start in 0..9 {
            for n in [0, 1, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000] {
                let mut v = vec![0xeeu8; start + n + 9];
                // SAFETY: `[start, start + n)` lies in `v`.
                unsafe { fill(v.as_mut_ptr().add(start), n, pattern) };
                for (i, b) in v.iter().enumerate() {
                    let want = if (start..start + n).contains(&i) {
                        p[(i - start) % 4]
                    } else {
                        0xee
                    };
                    assert_eq!(*b, want, "start {start} len {n}: byte {i}");
                }
            }
        }
    }

    #[test]
    fn copies_move_exactly_their_bytes_and_overlap_downwards_as_memmove() {
        for (s, d, n) in [
            (0, 100, 50),
            (3, 200, 77),
            (40, 0, 90),
            (9, 1, 300),
            (0, 0, 10),
        ] {
            let mut v: Vec<u8> = (0..512u32).map(|i| (i * 7 + 1) as u8).collect();
            let mut want = v.clone();
            want.copy_within(s..s + n, d);
            let base = v.as_mut_ptr();
            // SAFETY: both ranges lie in `v`; overlapping ones have `d <= s`.
            unsafe { copy_forward(base.add(d), base.add(s), n) };
            assert_eq!(v, want, "copy {n} bytes from {s} to {d}");
        }
    }
}
