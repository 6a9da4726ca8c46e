//! [`SharedMapping`]: a shared read/write mapping of a file (a memfd, a device node) with
//! bounds-checked relaxed-atomic access, and the futex calls on its words.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};

use crate::copy::{copy_from_shared, copy_to_shared};

/// Bytes moved per step of a bounce-buffered copy or fill.
const CHUNK: usize = 4096;

/// A range outside the mapping (or an offset that does not fit the address space, or a word
/// that is not 4-byte aligned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBounds;

impl std::fmt::Display for OutOfBounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("range outside the shared mapping")
    }
}

impl std::error::Error for OutOfBounds {}

/// One shared, read/write mapping of `len` bytes of a file, unmapped on drop.
///
/// Another party may write the mapped bytes at any time; every access from this side is a
/// relaxed atomic load or store, bounds-checked here (see the crate docs).
#[derive(Debug)]
pub struct SharedMapping {
    map: MmapRaw,
    len: usize,
}

impl SharedMapping {
    /// Maps `len` bytes of `fd` from file offset `offset`, shared, read/write. The length is
    /// always the caller's (a device node's `fstat` size is 0); the descriptor may be closed
    /// afterwards.
    ///
    /// # Errors
    /// `EINVAL` for a length of 0; the `mmap(2)` error otherwise.
    pub fn map(fd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<SharedMapping> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let map = MmapOptions::new()
            .len(len)
            .offset(offset)
            .map_raw(fd.as_raw_fd())?;
        if map.len() != len {
            return Err(io::Error::other("mapping length differs from the request"));
        }
        Ok(SharedMapping { map, len })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is 0 (never: [`map`](Self::map) refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte, page aligned. For building views over the mapping (ring regions, a
    /// doorbell register); dereferencing it is the caller's `unsafe`, valid while `self`
    /// lives and only with atomic or volatile accesses.
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// `[offset, offset + len)` as a pointer into the mapping, if it lies inside it.
    fn range(&self, offset: u64, len: usize) -> Result<*mut u8, OutOfBounds> {
        let start = usize::try_from(offset).map_err(|_| OutOfBounds)?;
        let end = start.checked_add(len).ok_or(OutOfBounds)?;
        if end > self.len {
            return Err(OutOfBounds);
        }
        // SAFETY: `start <= end <= self.len`, the length of the live mapping, so the
        // resulting pointer is within (or one past the end of) the same mapping.
        Ok(unsafe { self.map.as_mut_ptr().add(start) })
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`.
    ///
    /// # Errors
    /// `OutOfBounds` unless the range lies inside the mapping.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), OutOfBounds> {
        let src = self.range(offset, buf.len())?;
        // SAFETY: `range` checked that `[src, src + buf.len())` lies in the live mapping,
        // which is readable and writable (atomic loads need writable memory); `buf` is
        // ordinary memory outside it.
        unsafe { copy_from_shared(src, buf) };
        Ok(())
    }

    /// Copies `data` to `offset`.
    ///
    /// # Errors
    /// `OutOfBounds` unless the range lies inside the mapping.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), OutOfBounds> {
        let dst = self.range(offset, data.len())?;
        // SAFETY: `range` checked that `[dst, dst + data.len())` lies in the live, writable
        // mapping; `data` is ordinary memory, not inside the mapping.
        unsafe { copy_to_shared(dst, data) };
        Ok(())
    }

    /// `memmove` of `len` bytes from `src` to `dst` within the mapping.
    ///
    /// # Errors
    /// `OutOfBounds` unless both ranges lie inside the mapping.
    pub fn copy_within(&self, dst: u64, src: u64, len: u64) -> Result<(), OutOfBounds> {
        let len = usize::try_from(len).map_err(|_| OutOfBounds)?;
        let d = self.range(dst, len)?;
        let s = self.range(src, len)?;
        let mut buf = [0u8; CHUNK];
        let step = |off: usize, n: usize, buf: &mut [u8; CHUNK]| {
            // SAFETY: `off + n <= len` (callers below), and both `[s, s + len)` and
            // `[d, d + len)` were checked by `range`; the bounce buffer makes each step a
            // complete read before its write, so overlap is handled by the step order.
            unsafe {
                copy_from_shared(s.add(off), &mut buf[..n]);
                copy_to_shared(d.add(off), &buf[..n]);
            }
        };
        if (d as usize) <= (s as usize) || (d as usize) >= (s as usize).wrapping_add(len) {
            // Forward: a step never overwrites source bytes a later step still needs.
            let mut off = 0;
            while off < len {
                let n = (len - off).min(CHUNK);
                step(off, n, &mut buf);
                off += n;
            }
        } else {
            // Destination above an overlapping source: backwards.
            let mut end = len;
            while end > 0 {
                let n = end.min(CHUNK);
                step(end - n, n, &mut buf);
                end -= n;
            }
        }
        Ok(())
    }

    /// Fills `len` bytes at `dst` with the native-endian bytes of `pattern`, repeated from
    /// `dst` on (a trailing partial pattern is written as its first bytes).
    ///
    /// # Errors
    /// `OutOfBounds` unless the range lies inside the mapping.
    pub fn fill(&self, dst: u64, len: u64, pattern: u32) -> Result<(), OutOfBounds> {
        let len = usize::try_from(len).map_err(|_| OutOfBounds)?;
        let d = self.range(dst, len)?;
        let bytes = pattern.to_ne_bytes();
        let mut buf = [0u8; CHUNK];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = bytes[i % 4];
        }
        let mut off = 0;
        while off < len {
            let n = (len - off).min(CHUNK);
            // SAFETY: `off + n <= len` and `[d, d + len)` was checked by `range`. CHUNK is a
            // multiple of 4, so every step starts at pattern phase 0.
            unsafe { copy_to_shared(d.add(off), &buf[..n]) };
            off += n;
        }
        Ok(())
    }

    /// The 4-byte word at `offset` as an atomic (a doorbell, a ring index), for as long as the
    /// mapping is borrowed.
    ///
    /// # Errors
    /// `OutOfBounds` unless the word lies inside the mapping and `offset` is a multiple of 4.
    pub fn word(&self, offset: u64) -> Result<&AtomicU32, OutOfBounds> {
        if offset % 4 != 0 {
            return Err(OutOfBounds);
        }
        let p = self.range(offset, 4)?;
        // SAFETY: `[p, p + 4)` lies in the live read/write mapping (`range`) and is 4-byte
        // aligned (the mapping is page aligned, the offset a multiple of 4); the reference
        // cannot outlive `&self`, hence the mapping. Every access this process makes to
        // mapped memory is atomic (this type's rule), so the atomic view aliases no
        // non-atomic access.
        Ok(unsafe { AtomicU32::from_ptr(p.cast::<u32>()) })
    }
}

/// Sleeps while `word` holds `expected`, until a [`futex_wake`] on it, or `timeout`.
/// Returns at once if the word already differs. Spurious returns are possible: callers
/// re-check what they wait for. Shared (not `FUTEX_PRIVATE`): the waker may be another
/// process mapping the same memory.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT reads the 4-byte aligned word behind `word`, a live reference for
    // the whole call; the timeout points at a local timespec. The result (woken, EAGAIN
    // because the value changed, ETIMEDOUT, EINTR) needs no handling: callers re-check.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every thread (of any process) sleeping in [`futex_wait`] on `word`.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key (the kernel does not access the
    // word); `word` is a live reference for the call. A failure only means nobody was woken.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::sync::atomic::Ordering;

    fn memfd(len: u64) -> std::fs::File {
        let fd = nix::sys::memfd::memfd_create(c"shm-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .unwrap();
        let f = std::fs::File::from(fd);
        f.set_len(len).unwrap();
        f
    }

    #[test]
    fn read_write_copy_fill_and_bounds() {
        let f = memfd(3 * 4096);
        let r = SharedMapping::map(f.as_fd(), 0, 3 * 4096).unwrap();
        assert_eq!(r.len(), 3 * 4096);
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        r.write(3, &data).unwrap();
        let mut back = vec![0u8; 5000];
        r.read(3, &mut back).unwrap();
        assert_eq!(back, data);
        // Overlapping moves, both directions, with chunks larger than the bounce buffer.
        r.copy_within(7, 3, 5000).unwrap();
        r.read(7, &mut back).unwrap();
        assert_eq!(back, data);
        r.copy_within(1, 7, 5000).unwrap();
        r.read(1, &mut back).unwrap();
        assert_eq!(back, data);
        r.fill(8, 4100, 0xa1b2_c3d4).unwrap();
        let mut f4 = vec![0u8; 4100];
        r.read(8, &mut f4).unwrap();
        for c in f4.chunks(4) {
            assert_eq!(c, &0xa1b2_c3d4u32.to_ne_bytes()[..c.len()]);
        }
        // Bounds.
        assert_eq!(r.write(3 * 4096 - 1, &[1, 2]), Err(OutOfBounds));
        assert_eq!(r.read(u64::MAX, &mut [0u8; 1]), Err(OutOfBounds));
        assert_eq!(r.copy_within(0, 4096 * 2, 4097), Err(OutOfBounds));
        assert_eq!(r.fill(4096 * 3, 4, 0), Err(OutOfBounds));
        assert_eq!(r.fill(0, u64::MAX, 0), Err(OutOfBounds));
        assert!(r.read(3 * 4096, &mut []).is_ok());
        assert!(SharedMapping::map(f.as_fd(), 0, 0).is_err());
    }

    #[test]
    fn words_are_shared_through_the_file_and_futexes_return() {
        let f = memfd(4096);
        let a = SharedMapping::map(f.as_fd(), 0, 4096).unwrap();
        let b = SharedMapping::map(f.as_fd(), 0, 4096).unwrap();
        a.word(8).unwrap().store(77, Ordering::Release);
        assert_eq!(b.word(8).unwrap().load(Ordering::Acquire), 77);
        let mut raw = [0u8; 4];
        b.read(8, &mut raw).unwrap();
        assert_eq!(u32::from_ne_bytes(raw), 77);
        assert_eq!(a.word(2).unwrap_err(), OutOfBounds, "misaligned");
        assert_eq!(a.word(4096).unwrap_err(), OutOfBounds, "past the end");
        // A wait on a value the word no longer holds returns at once; a wake with nobody
        // waiting is harmless; a wait that nobody ends returns at its timeout.
        let t = std::time::Instant::now();
        futex_wait(a.word(8).unwrap(), 1, Duration::from_secs(10));
        futex_wake(b.word(8).unwrap());
        futex_wait(a.word(8).unwrap(), 77, Duration::from_millis(20));
        assert!(t.elapsed() < Duration::from_secs(5));
        // A waiter on one mapping is woken through the other.
        std::thread::scope(|s| {
            let h = s.spawn(|| futex_wait(a.word(0).unwrap(), 0, Duration::from_secs(30)));
            std::thread::sleep(Duration::from_millis(20));
            b.word(0).unwrap().store(1, Ordering::Release);
            futex_wake(b.word(0).unwrap());
            h.join().unwrap();
        });
        assert!(t.elapsed() < Duration::from_secs(20));
    }
}
