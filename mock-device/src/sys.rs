//! The only module of this crate with `unsafe`: memfd-backed shared regions mapped with
//! memmap2 [`MmapRaw`], bounds-checked copies through raw pointers, ring and doorbell views
//! over the stream mappings, and the futex syscalls of the doorbell.
//!
//! Rules kept here:
//! * No `&`/`&mut` is ever formed to mapped bytes. The same pages are mapped by the host
//!   (another thread in embedded mode, another process with the daemon), which writes them
//!   whenever it likes; every access from this side is therefore an atomic load or store
//!   (`Relaxed`: the ring protocol's acquire/release orders the data, this only keeps
//!   concurrent access defined). A host racing with the device sees torn *values*, never
//!   undefined behaviour on this side.
//! * Every copy is bounds-checked against the mapping here, whatever the caller validated.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use davinci_ring::shared::{copy_from_shared, copy_to_shared};
use davinci_ring::{DoorbellWatch, RingError, RingRegion};
use davinci_uapi::task::{EVENT_RECORD_SIZE, TASK_DESC_SIZE};
use davinci_uapi::DOORBELL_SIZE;
use memmap2::{MmapOptions, MmapRaw};
use nix::fcntl::{fallocate, fcntl, FallocateFlags, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};

/// Bytes moved per step of a bounce-buffered copy or fill.
const CHUNK: usize = 4096;

/// A memfd of a fixed length, mapped shared (read/write) in this process.
#[derive(Debug)]
pub(crate) struct SharedRegion {
    map: MmapRaw,
    file: File,
    len: usize,
}

/// The seals every shared region carries from before its first descriptor is handed out:
/// its size can neither shrink nor grow, and no seal can be added or removed.
pub(crate) const REQUIRED_SEALS: SealFlag = SealFlag::F_SEAL_SHRINK
    .union(SealFlag::F_SEAL_GROW)
    .union(SealFlag::F_SEAL_SEAL);

/// `MFD_NOEXEC_SEAL` (Linux 6.3): the memfd is not executable and cannot be made so. Not in
/// nix's flags yet; libc has the value.
const MFD_NOEXEC_SEAL: MFdFlags = MFdFlags::from_bits_retain(libc::MFD_NOEXEC_SEAL);

/// A new close-on-exec memfd that accepts seals: not executable where the kernel knows
/// `MFD_NOEXEC_SEAL` (6.3+, and required where `vm.memfd_noexec` is 2), plain before.
fn sealable_memfd(name: &str) -> io::Result<OwnedFd> {
    let base = MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING;
    match memfd_create(name, base | MFD_NOEXEC_SEAL) {
        Ok(fd) => Ok(fd),
        // Kernels before 6.3 reject the unknown flag.
        Err(nix::Error::EINVAL) => memfd_create(name, base).map_err(io::Error::from),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Adds [`REQUIRED_SEALS`] to `file` and checks they are all in place.
fn seal(file: &File) -> io::Result<()> {
    fcntl(file, FcntlArg::F_ADD_SEALS(REQUIRED_SEALS)).map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("cannot seal the shared memory (F_ADD_SEALS): {e}"),
        )
    })?;
    let now = seals(file)?;
    if !now.contains(REQUIRED_SEALS) {
        return Err(io::Error::other(format!(
            "shared memory seals are {now:?} after F_ADD_SEALS, need {REQUIRED_SEALS:?}"
        )));
    }
    Ok(())
}

/// The seals of a memfd (`F_GET_SEALS`).
pub(crate) fn seals(fd: impl AsFd) -> io::Result<SealFlag> {
    let raw = fcntl(fd, FcntlArg::F_GET_SEALS).map_err(io::Error::from)?;
    Ok(SealFlag::from_bits_retain(raw))
}

/// A range outside the mapping (or an offset that does not fit the address space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutOfBounds;

impl SharedRegion {
    /// A zero-filled (sparse) memfd of `len` bytes named `name`, sealed at that size, mapped
    /// shared.
    ///
    /// The memfd's descriptors are handed to clients, which may do anything a file allows to
    /// them. Had a client been able to shrink the file, this process's mapping would reach past
    /// its end and the next access would raise SIGBUS here (the whole daemon, every tenant);
    /// grown, it would cost memory nobody accounts. So the size is sealed before the first
    /// descriptor leaves: [`REQUIRED_SEALS`] (no shrinking, no growing, no further seals, so
    /// a client can neither undo them nor add a write seal that would fail the device's
    /// stores). What a client can still do, punch holes or write anywhere in the file, changes
    /// only bytes, which the device reads as untrusted anyway (docs/abi.md §9).
    ///
    /// # Errors
    /// `len` is 0, the memfd cannot be created or sized, or the seals cannot be applied (or
    /// are not all in place afterwards): never an unsealed region.
    pub(crate) fn new(name: &str, len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared region of 0 bytes",
            ));
        }
        let file = File::from(sealable_memfd(name)?);
        file.set_len(len as u64)?;
        seal(&file)?;
        // The length is given explicitly (never taken from fstat), as for a device node.
        let map = MmapOptions::new().len(len).map_raw(&file)?;
        if map.len() != len {
            return Err(io::Error::other("mapping length differs from the request"));
        }
        Ok(Self { map, file, len })
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// A new descriptor of the memfd (for the host's mmap).
    pub(crate) fn dup_fd(&self) -> io::Result<OwnedFd> {
        Ok(OwnedFd::from(self.file.try_clone()?))
    }

    /// `[offset, offset + len)` as a pointer into the mapping, if it lies inside it.
    fn range(&self, offset: u64, len: usize) -> Result<*mut u8, OutOfBounds> {
        let start = usize::try_from(offset).map_err(|_| OutOfBounds)?;
        let end = start.checked_add(len).ok_or(OutOfBounds)?;
        if end > self.len {
            return Err(OutOfBounds);
        }
        // SAFETY: `start <= end <= self.len`, the length of the live mapping, so the
        // resulting pointer is within (or one past the end of) the same allocation.
        Ok(unsafe { self.map.as_mut_ptr().add(start) })
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`.
    pub(crate) fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), OutOfBounds> {
        let src = self.range(offset, buf.len())?;
        // SAFETY: `range` checked that `[src, src + buf.len())` lies in the live mapping,
        // which is readable and writable (atomic loads need writable memory).
        unsafe { copy_from_shared(src, buf) };
        Ok(())
    }

    /// Copies `data` to `offset`.
    pub(crate) fn write(&self, offset: u64, data: &[u8]) -> Result<(), OutOfBounds> {
        let dst = self.range(offset, data.len())?;
        // SAFETY: `range` checked that `[dst, dst + data.len())` lies in the live, writable
        // mapping; `data` is ordinary memory, not inside the mapping.
        unsafe { copy_to_shared(dst, data) };
        Ok(())
    }

    /// `memmove` of `len` bytes from `src` to `dst` within the region.
    pub(crate) fn copy_within(&self, dst: u64, src: u64, len: u64) -> Result<(), OutOfBounds> {
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
    pub(crate) fn fill(&self, dst: u64, len: u64, pattern: u32) -> Result<(), OutOfBounds> {
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

    /// Releases the pages of `[offset, offset + len)`: afterwards they read as zero. Punches
    /// a hole (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`); if the kernel refuses, writes
    /// zeros instead, so the contents are gone either way.
    pub(crate) fn discard(&self, offset: u64, len: u64) -> Result<(), OutOfBounds> {
        let ulen = usize::try_from(len).map_err(|_| OutOfBounds)?;
        self.range(offset, ulen)?;
        let (Ok(o), Ok(l)) = (i64::try_from(offset), i64::try_from(len)) else {
            return Err(OutOfBounds);
        };
        let punched = fallocate(
            &self.file,
            FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
            o,
            l,
        );
        if punched.is_err() {
            self.fill(offset, len, 0)?;
        }
        Ok(())
    }

    /// The base of the mapping (64-byte aligned: mappings are page aligned).
    fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
}

/// Which memfd of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamPart {
    /// The command ring.
    Cmd,
    /// The event ring.
    Event,
    /// The doorbell page.
    Doorbell,
}

/// The shared memory of one stream: command ring, event ring and doorbell page, each its own
/// memfd (so the host maps exactly what the cookie names), plus the device's watch of the
/// doorbell word. Shared (`Arc`) between the device table and the stream's worker, which keeps
/// the doorbell mapped while it sleeps on it.
#[derive(Debug)]
pub struct StreamMem {
    // Field order = drop order: the watch (a raw pointer into `doorbell`) goes first.
    watch: DoorbellWatch,
    cmd: SharedRegion,
    event: SharedRegion,
    doorbell: SharedRegion,
    cmd_entries: u32,
    event_entries: u32,
}

impl StreamMem {
    /// Creates the three memfds (zeroed) and maps them.
    pub(crate) fn new(
        cmd_entries: u32,
        cmd_bytes: usize,
        event_entries: u32,
        event_bytes: usize,
    ) -> io::Result<Self> {
        let cmd = SharedRegion::new("davinci-cmd-ring", cmd_bytes)?;
        let event = SharedRegion::new("davinci-event-ring", event_bytes)?;
        let doorbell = SharedRegion::new("davinci-doorbell", DOORBELL_SIZE as usize)?;
        // SAFETY: the doorbell register is the first word of the doorbell page (offset
        // DOORBELL_REG_OFFSET = 0), 4-byte aligned (page aligned) and readable/writable for as
        // long as `doorbell` is mapped. The watch is a field of the same struct declared before
        // `doorbell`, so it is dropped first and never outlives the mapping. Every access to
        // the word from this process is atomic (the watch, `kick`), or the host's single
        // aligned volatile store (`Doorbell::ring`), as the watch's contract requires.
        let watch = unsafe { DoorbellWatch::new(doorbell.base().cast::<u32>()) };
        Ok(Self {
            watch,
            cmd,
            event,
            doorbell,
            cmd_entries,
            event_entries,
        })
    }

    /// Device-side views of the two rings.
    ///
    /// The views point into this `StreamMem`'s mappings: they must not outlive it. The device
    /// core keeps the views in its stream entry next to the `Arc<StreamMem>` it was given, and
    /// drops the views before handing the `Arc` back (`Platform::release_stream`); the `Arc`
    /// keeps the mappings alive for as long as any holder (e.g. a sleeping worker) has one.
    pub(crate) fn ring_regions(&self) -> Result<(RingRegion, RingRegion), RingError> {
        // SAFETY: `cmd` is a live read/write mapping of `cmd.len()` bytes, page (so 64-byte)
        // aligned. Its lifetime: see the doc comment (the core drops ring views before the
        // `Arc<StreamMem>` that owns the mapping). Within this process nothing else touches it
        // except the host's ring ends (one producer) over its own mapping of the same memfd.
        let cmd = unsafe {
            RingRegion::new(
                self.cmd.base(),
                self.cmd.len(),
                self.cmd_entries,
                TASK_DESC_SIZE,
            )
        }?;
        // SAFETY: as above, for the event ring (the host holds one consumer end).
        let event = unsafe {
            RingRegion::new(
                self.event.base(),
                self.event.len(),
                self.event_entries,
                EVENT_RECORD_SIZE,
            )
        }?;
        Ok((cmd, event))
    }

    /// A new descriptor of one part's memfd, for the host's mmap.
    pub(crate) fn dup_fd(&self, part: StreamPart) -> io::Result<OwnedFd> {
        match part {
            StreamPart::Cmd => self.cmd.dup_fd(),
            StreamPart::Event => self.event.dup_fd(),
            StreamPart::Doorbell => self.doorbell.dup_fd(),
        }
    }

    /// The doorbell word's current value (Acquire).
    pub(crate) fn doorbell_value(&self) -> u32 {
        self.watch.value()
    }

    /// Sleeps until the doorbell word differs from `expected`, a `FUTEX_WAKE` arrives, or
    /// `timeout` passes (a safety net: the ring protocol does not rely on it). Returns at once
    /// if the word already differs.
    pub(crate) fn wait_doorbell(&self, expected: u32, timeout: Duration) {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT reads the 4-byte aligned word at `as_ptr()`, which lies in the
        // doorbell mapping owned by `self` (alive for the call). The timeout points at a local
        // timespec. Not FUTEX_PRIVATE: the host may be another process sharing the memfd. The
        // result (woken, EAGAIN because the value changed, ETIMEDOUT, EINTR) needs no handling:
        // the caller re-checks the ring either way.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.watch.as_ptr(),
                libc::FUTEX_WAIT,
                expected,
                &ts as *const libc::timespec,
                std::ptr::null::<u32>(),
                0u32,
            );
        }
    }

    /// Wakes the stream's worker from the device side (SUBMIT_TASK, NOTIFY, teardown): changes
    /// the doorbell word, so a worker about to wait on the old value does not sleep, then
    /// `FUTEX_WAKE`s it.
    pub(crate) fn kick(&self) {
        // SAFETY: the doorbell word is 4-byte aligned and readable/writable while `self` lives
        // (it is the first word of the `doorbell` mapping). All accesses to it from this
        // process are atomic or the host's single aligned volatile store.
        let word = unsafe { AtomicU32::from_ptr(self.watch.as_ptr().cast_mut()) };
        word.fetch_add(1, Ordering::AcqRel);
        futex_wake(self.watch.as_ptr());
    }
}

/// `FUTEX_WAKE` (shared) of every waiter on the word at `word`.
fn futex_wake(word: *const u32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key (the kernel does not access the
    // word); callers pass the address of a word inside a mapping they keep alive.
    unsafe {
        libc::syscall(libc::SYS_futex, word, libc::FUTEX_WAKE, i32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_copy_fill_and_discard() {
        let r = SharedRegion::new("test", 3 * 4096).unwrap();
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
        let mut f = vec![0u8; 4100];
        r.read(8, &mut f).unwrap();
        for c in f.chunks(4) {
            assert_eq!(c, &0xa1b2_c3d4u32.to_ne_bytes()[..c.len()]);
        }
        r.discard(0, 8192).unwrap();
        r.read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0));
        // Bounds.
        assert_eq!(r.write(3 * 4096 - 1, &[1, 2]), Err(OutOfBounds));
        assert_eq!(r.read(u64::MAX, &mut [0u8; 1]), Err(OutOfBounds));
        assert_eq!(r.copy_within(0, 4096 * 2, 4097), Err(OutOfBounds));
        assert_eq!(r.fill(4096 * 3, 4, 0), Err(OutOfBounds));
        assert_eq!(r.discard(4096, u64::MAX), Err(OutOfBounds));
        assert!(r.read(3 * 4096, &mut []).is_ok());
    }

    #[test]
    fn regions_are_sealed_before_anyone_sees_them_and_holes_read_zero() {
        let r = SharedRegion::new("test-sealed", 2 * 4096).unwrap();
        for fd in [
            r.dup_fd().unwrap(),
            OwnedFd::from(r.file.try_clone().unwrap()),
        ] {
            assert!(seals(&fd).unwrap().contains(REQUIRED_SEALS));
            for len in [0, 4096, 3 * 4096] {
                assert_eq!(nix::unistd::ftruncate(&fd, len), Err(nix::Error::EPERM));
            }
            assert_eq!(
                fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_WRITE)),
                Err(nix::Error::EPERM)
            );
        }
        // What a client may still do: punch a hole. This side's mapping then reads zeros (and
        // can be written again); it never faults.
        r.fill(0, 8192, 0xdead_beef).unwrap();
        let fd = r.dup_fd().unwrap();
        fallocate(
            &fd,
            FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
            0,
            8192,
        )
        .unwrap();
        let mut back = [0xffu8; 8192];
        r.read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0));
        r.write(4, &[1, 2, 3]).unwrap();
        r.read(4, &mut back[..3]).unwrap();
        assert_eq!(&back[..3], &[1, 2, 3]);
    }

    #[test]
    fn kick_changes_the_doorbell_and_ends_a_wait() {
        let m = StreamMem::new(8, 4096, 8, 4096).unwrap();
        let d0 = m.doorbell_value();
        m.kick();
        assert_ne!(m.doorbell_value(), d0);
        // The value differs: FUTEX_WAIT returns at once instead of sleeping 10 s.
        let t = std::time::Instant::now();
        m.wait_doorbell(d0, Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
