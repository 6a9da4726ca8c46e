//! [`SharedMapping`]: a shared read/write mapping of a file (a memfd, a device node) with
//! bounds-checked relaxed-atomic access, and the futex calls on its words.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};

use crate::copy::{copy_from_shared, copy_to_shared, fill_shared};

/// Bytes moved per step of a bounce-buffered copy or fill.
const CHUNK: usize = 4096;

/// Reads and writes of at least this many bytes move with the string instructions
/// (`bulk.rs`: memory speed, as opaque to the compiler as the atomics); shorter ones keep
/// the relaxed atomics, 8 aligned bytes at a time, which small records rely on.
const BULK_BYTES: usize = 4096;

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
        Self::map_with(fd, offset, len, false)
    }

    /// Like [`map`](Self::map), with every page of the file's range allocated and mapped
    /// before it returns (`MAP_POPULATE`): the first touch of each page then takes no fault.
    /// For memory made ahead of the call that uses it.
    ///
    /// # Errors
    /// As [`map`](Self::map).
    pub fn map_populated(fd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<SharedMapping> {
        Self::map_with(fd, offset, len, true)
    }

    fn map_with(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        populate: bool,
    ) -> io::Result<SharedMapping> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut opts = MmapOptions::new();
        opts.len(len).offset(offset);
        if populate {
            opts.populate();
        }
        let map = opts.map_raw(fd.as_raw_fd())?;
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
    pub(crate) fn range(&self, offset: u64, len: usize) -> Result<*mut u8, OutOfBounds> {
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
        if buf.len() >= BULK_BYTES {
            // SAFETY: as below; the string instructions are opaque to the compiler, so a
            // racing writer makes bytes wrong, never the copy undefined.
            unsafe { crate::bulk::read(src, buf) };
            return Ok(());
        }
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
        if data.len() >= BULK_BYTES {
            // SAFETY: as below, with the string instructions (see `read`).
            unsafe { crate::bulk::write(dst, data) };
            return Ok(());
        }
        // SAFETY: `range` checked that `[dst, dst + data.len())` lies in the live, writable
        // mapping; `data` is ordinary memory, not inside the mapping.
        unsafe { copy_to_shared(dst, data) };
        Ok(())
    }

    /// As [`write`](Self::write), with non-temporal stores for whole cache lines (x86-64):
    /// for data written once and not read back by this core soon (a collective's results),
    /// about twice as fast for large writes. Every store is done and ordered before later
    /// stores when it returns.
    ///
    /// # Errors
    /// `OutOfBounds` unless the range lies inside the mapping.
    pub fn write_streaming(&self, offset: u64, data: &[u8]) -> Result<(), OutOfBounds> {
        let dst = self.range(offset, data.len())?;
        if data.len() < BULK_BYTES {
            return self.write(offset, data);
        }
        // SAFETY: `range` checked `[dst, dst + data.len())` against the live, writable
        // mapping; `data` is ordinary memory outside it.
        unsafe { crate::bulk::write_streaming(dst, data) };
        Ok(())
    }

    /// Copies `len` bytes of this mapping at `offset` into `dst` (another mapping, or this
    /// one) at `dst_offset`, with the string instructions: memory to memory, no bounce
    /// buffer. Overlapping ranges of one mapping are moved as `memmove` would.
    ///
    /// # Errors
    /// `OutOfBounds` unless both ranges lie inside their mappings.
    pub fn copy_to(
        &self,
        offset: u64,
        dst: &SharedMapping,
        dst_offset: u64,
        len: usize,
    ) -> Result<(), OutOfBounds> {
        let s = self.range(offset, len)?;
        let d = dst.range(dst_offset, len)?;
        if std::ptr::eq(self, dst) {
            return self.copy_within(dst_offset, offset, len as u64);
        }
        // SAFETY: `range` checked both spans against their live, read/write mappings. Two
        // mappings are two address ranges, so the spans do not overlap (the same file
        // mapped twice aliases, which makes bytes wrong, never the copy undefined: the
        // string instructions are opaque to the compiler).
        unsafe { crate::bulk::copy_forward(d, s, len) };
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
        // SAFETY: `[d, d + len)` was checked by `range`: it lies in the live read/write
        // mapping, which this process only ever accesses atomically (this type's rule).
        unsafe { fill_shared(d, len, pattern) };
        Ok(())
    }

    /// Writes `len` bytes of the mapping at `offset` to the file `fd` at `file_offset`
    /// (one `pwrite(2)`, the mapping its buffer), returning how many it wrote (fewer than
    /// `len`: call again from there). The kernel reads the mapping, never this process: a
    /// mapped page that cannot be read (its file was truncated under the mapping) ends the
    /// write with `EFAULT` or a short count, never a `SIGBUS` here. For memory whose file a
    /// peer may shrink, which this process must then never load from itself.
    ///
    /// # Errors
    /// `InvalidInput` unless the range lies inside the mapping and `file_offset` fits an
    /// `off_t`; the `pwrite(2)` error otherwise.
    pub fn pwrite_into(
        &self,
        offset: u64,
        len: usize,
        fd: BorrowedFd<'_>,
        file_offset: u64,
    ) -> io::Result<usize> {
        let (p, at) = self.kernel_range(offset, len, file_offset)?;
        // SAFETY: `[p, p + len)` lies in the live mapping (`kernel_range`), which stays
        // mapped while `&self` is borrowed. Only the kernel reads it, with its fault-checked
        // user copy (a page past the end of a truncated file is `EFAULT`, no signal); no Rust
        // reference to the bytes is made, so a peer's concurrent stores race with nothing
        // this process does.
        let n = unsafe { libc::pwrite(fd.as_raw_fd(), p.cast_const().cast(), len, at) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    /// Reads up to `len` bytes of the file `fd` at `file_offset` into the mapping at
    /// `offset` (one `pread(2)`, the mapping its buffer), returning how many it read (0 at
    /// the end of the file). The kernel writes the mapping, never this process: a page that
    /// cannot be written (its file was truncated under the mapping) ends the read with
    /// `EFAULT` or a short count, never a `SIGBUS` here.
    ///
    /// # Errors
    /// As [`pwrite_into`](Self::pwrite_into), with `pread(2)`'s.
    pub fn pread_from(
        &self,
        offset: u64,
        len: usize,
        fd: BorrowedFd<'_>,
        file_offset: u64,
    ) -> io::Result<usize> {
        let (p, at) = self.kernel_range(offset, len, file_offset)?;
        // SAFETY: as in `pwrite_into`: `[p, p + len)` lies in the live, writable mapping and
        // only the kernel writes it, with its fault-checked user copy; no Rust reference to
        // the bytes is made.
        let n = unsafe { libc::pread(fd.as_raw_fd(), p.cast(), len, at) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    /// `range`, and `file_offset` as an `off_t`, for the kernel copies.
    fn kernel_range(
        &self,
        offset: u64,
        len: usize,
        file_offset: u64,
    ) -> io::Result<(*mut u8, libc::off_t)> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_owned());
        let p = self
            .range(offset, len)
            .map_err(|_| bad("range outside the shared mapping"))?;
        let at = libc::off_t::try_from(file_offset).map_err(|_| bad("file offset too large"))?;
        Ok((p, at))
    }

    /// The 4-byte word at `offset` as an atomic (a doorbell, a ring index), for as long as the
    /// mapping is borrowed.
    ///
    /// # Errors
    /// `OutOfBounds` unless the word lies inside the mapping and `offset` is a multiple of 4.
    pub fn word(&self, offset: u64) -> Result<&AtomicU32, OutOfBounds> {
        if !offset.is_multiple_of(4) {
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
///
/// Returns `true` when the sleep ended because a signal handler ran on this thread (`EINTR`:
/// a timed futex wait is never restarted, whatever the handler's `SA_RESTART`), for callers
/// whose waits a signal should end; others ignore it.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT reads the 4-byte aligned word behind `word`, a live reference for
    // the whole call; the timeout points at a local timespec. The result (woken, EAGAIN
    // because the value changed, ETIMEDOUT) needs no handling: callers re-check; EINTR is
    // reported.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
}

/// One word for [`futex_waitv`] to sleep on: while it holds `expected`.
#[derive(Debug, Clone, Copy)]
pub struct FutexWaiter<'a> {
    /// The word.
    pub word: &'a AtomicU32,
    /// The value to sleep on.
    pub expected: u32,
    /// `FUTEX2_PRIVATE`: must match the waker, since the kernel keys private and shared
    /// futexes differently and a wake of one kind never reaches a waiter of the other.
    /// [`futex_wake`] (and a doorbell ring from another process) is a shared wake, so words
    /// it wakes take `false`; `true` only for a word woken with `FUTEX_WAKE_PRIVATE`.
    pub private: bool,
}

/// How often the calling thread was preempted so far (`getrusage(RUSAGE_THREAD)`'s
/// `ru_nivcsw`), or 0 if unknown. A spin-wait that sees it grow knows another runnable thread
/// wanted its core (the machine is oversubscribed), so it should sleep instead.
pub fn involuntary_switches() -> u64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one `struct rusage` to the pointer, which points at a local of
    // that type (zeroed, so it is initialised whatever the call does).
    let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, u.as_mut_ptr()) };
    if r != 0 {
        return 0;
    }
    // SAFETY: zeroed above and possibly filled in by the kernel: initialised either way.
    let u = unsafe { u.assume_init() };
    u64::try_from(u.ru_nivcsw).unwrap_or(0)
}

/// Whether two descriptors are open on the same file (`fstat(2)`: the same device and inode;
/// `false` if either cannot be examined). For mapping objects that one file holds at once.
pub fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
    if a.as_raw_fd() == b.as_raw_fd() {
        return true;
    }
    let id = |fd: BorrowedFd<'_>| {
        let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
        // SAFETY: fstat writes one `struct stat` to the pointer, which points at a local of
        // that type (zeroed, so initialised whatever the call does); `fd` is open for the
        // call (a borrowed descriptor).
        let r = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
        // SAFETY: zeroed above and possibly filled in by the kernel: initialised either way.
        let st = unsafe { st.assume_init() };
        (r == 0).then_some((st.st_dev, st.st_ino))
    };
    matches!((id(a), id(b)), (Some(x), Some(y)) if x == y)
}

/// Most words one [`futex_waitv`] call takes (the kernel's `FUTEX_WAITV_MAX`).
pub const FUTEX_WAITV_MAX: usize = 128;

/// Sleeps until any of `waiters` no longer holds its expected value or is woken
/// ([`futex_wake`] / a `FUTEX_WAKE` from another process), or `timeout` passes: one thread
/// waiting for many doorbells (`futex_waitv(2)`, Linux 5.16). Returns at once if a word
/// already differs; spurious returns are possible (callers re-check).
///
/// # Errors
/// `EINVAL` for more than [`FUTEX_WAITV_MAX`] or no words; `ENOSYS` on kernels before 5.16
/// (the caller falls back to a bounded sleep). Woken, timed out, interrupted and "a value
/// differed" are all `Ok`.
pub fn futex_waitv(waiters: &[FutexWaiter<'_>], timeout: Duration) -> io::Result<()> {
    if waiters.is_empty() || waiters.len() > FUTEX_WAITV_MAX {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    /// `struct futex_waitv` of the kernel's uapi (`linux/futex.h`).
    #[repr(C)]
    struct RawWaitv {
        val: u64,
        uaddr: u64,
        flags: u32,
        reserved: u32,
    }
    const FUTEX2_SIZE_U32: u32 = 0x02;
    const FUTEX2_PRIVATE: u32 = 128;
    let mut raw: [RawWaitv; FUTEX_WAITV_MAX] = std::array::from_fn(|_| RawWaitv {
        val: 0,
        uaddr: 0,
        flags: 0,
        reserved: 0,
    });
    for (r, w) in raw.iter_mut().zip(waiters) {
        r.val = u64::from(w.expected);
        r.uaddr = w.word.as_ptr() as u64;
        r.flags = FUTEX2_SIZE_U32 | if w.private { FUTEX2_PRIVATE } else { 0 };
    }
    // The timeout is absolute, on CLOCK_MONOTONIC.
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the local timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let nanos = (now.tv_nsec as u64).saturating_add(u64::from(timeout.subsec_nanos()));
    let deadline = libc::timespec {
        tv_sec: (now.tv_sec as u64)
            .saturating_add(timeout.as_secs())
            .saturating_add(nanos / 1_000_000_000)
            .min(i64::MAX as u64) as libc::time_t,
        tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `raw` holds `waiters.len()` initialised entries whose `uaddr`s are the 4-byte
    // aligned words of live references borrowed for the whole call (the kernel only reads
    // them); the timeout points at a local timespec; the clock id is valid.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            raw.as_ptr(),
            waiters.len() as libc::c_uint,
            0u32,
            &deadline as *const libc::timespec,
            libc::CLOCK_MONOTONIC,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ETIMEDOUT) | Some(libc::EINTR) => Ok(()),
            _ => Err(e),
        };
    }
    Ok(())
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

    /// The kernel copies move bytes between a mapping and a file, and a mapping whose file
    /// was truncated under it is an error for them (`EFAULT`), not a signal in this process.
    #[test]
    fn kernel_copies_through_a_truncated_mapping_fail_without_a_signal() {
        let (f, g) = (memfd(2 * 4096), memfd(2 * 4096));
        let r = SharedMapping::map(f.as_fd(), 0, 2 * 4096).unwrap();
        r.write(0, &[7; 4096]).unwrap();
        assert_eq!(r.pwrite_into(0, 4096, g.as_fd(), 4096).unwrap(), 4096);
        let mut back = [0u8; 4096];
        nix::sys::uio::pread(&g, &mut back, 4096).unwrap();
        assert_eq!(back, [7; 4096]);
        assert_eq!(r.pread_from(4096, 4096, g.as_fd(), 0).unwrap(), 4096);
        r.read(4096, &mut back).unwrap();
        assert_eq!(back, [0; 4096]);
        assert_eq!(
            r.pwrite_into(4096, 4097, g.as_fd(), 0).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        f.set_len(0).unwrap();
        // From here on, a load of `r` in this process would raise SIGBUS; the kernel's don't.
        let efault = Some(libc::EFAULT);
        let e = r.pwrite_into(0, 4096, g.as_fd(), 0).unwrap_err();
        assert_eq!(e.raw_os_error(), efault);
        let e = r.pread_from(0, 4096, g.as_fd(), 0).unwrap_err();
        assert_eq!(e.raw_os_error(), efault);
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

    #[test]
    fn same_file_tells_one_file_from_another() {
        let f = memfd(4096);
        let g = memfd(4096);
        let dup = f.try_clone().unwrap();
        assert!(same_file(f.as_fd(), f.as_fd()));
        assert!(
            same_file(f.as_fd(), dup.as_fd()),
            "another descriptor, same file"
        );
        assert!(!same_file(f.as_fd(), g.as_fd()), "two memfds");
    }

    #[test]
    fn involuntary_switches_reads_this_threads_count() {
        // The kernel's count for this thread, as /proc shows it, brackets ours.
        let proc = || {
            std::fs::read_to_string("/proc/thread-self/status")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))
                .unwrap()
                .trim()
                .parse::<u64>()
                .unwrap()
        };
        for _ in 0..100 {
            let before = proc();
            let ours = involuntary_switches();
            let after = proc();
            assert!(
                before <= ours && ours <= after,
                "{before} <= {ours} <= {after}"
            );
        }
    }

    #[test]
    fn waitv_returns_on_a_changed_word_a_wake_or_the_timeout() {
        use std::sync::Arc;
        let a = Arc::new(AtomicU32::new(1));
        let b = Arc::new(AtomicU32::new(7));
        // A word that already differs: at once (no timeout is long enough to matter).
        let w = [
            FutexWaiter {
                word: &a,
                expected: 1,
                private: true,
            },
            FutexWaiter {
                word: &b,
                expected: 6,
                private: false,
            },
        ];
        futex_waitv(&w, Duration::from_secs(60)).unwrap();
        // Nothing changes: the timeout.
        let w = [FutexWaiter {
            word: &a,
            expected: 1,
            private: true,
        }];
        futex_waitv(&w, Duration::from_millis(1)).unwrap();
        // The second word is changed and woken from another thread.
        let b2 = b.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            b2.store(8, Ordering::Release);
            futex_wake(&b2);
        });
        let w = [
            FutexWaiter {
                word: &a,
                expected: 1,
                private: true,
            },
            FutexWaiter {
                word: &b,
                expected: 7,
                private: false,
            },
        ];
        // Spurious returns are allowed: wait until the change is seen (a lost wake-up would
        // hang here until the long timeout, not pass).
        while b.load(Ordering::Acquire) == 7 {
            futex_waitv(&w, Duration::from_secs(60)).unwrap();
        }
        t.join().unwrap();
        assert_eq!(
            futex_waitv(&[], Duration::ZERO).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
    }
}
