//! [`SharedRegion`]: device memory and stream memory of the mock device, a memfd sealed
//! and mapped shared, and [`AllocRegion`], an allocation's, whose file any holder may shrink:
//! this process reaches it with guarded loads and stores (`davinci_shm::Direct`) or through
//! the kernel. It is the only place the mock device makes memfds, and every
//! one is sealed before a descriptor of it can leave (docs/abi.md §4.1).
#![forbid(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use davinci_shm::{Direct, OutOfBounds, SharedMapping};
use nix::fcntl::{fallocate, fcntl, FallocateFlags, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};

/// A memfd of a fixed, sealed length, mapped shared (read/write) in this process.
#[derive(Debug)]
pub(crate) struct SharedRegion {
    map: SharedMapping,
    file: MemFd,
    sealing: Sealing,
}

/// Which seals a memfd carries, by what it backs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sealing {
    /// Stream memory: [`REQUIRED_SEALS`], its length fixed for good (the device loads and
    /// stores the rings in its own mapping).
    Fixed,
    /// An allocation: [`ALLOC_SEALS`], so that the device can truncate it when it is freed
    /// ([`AllocRegion`]).
    Revocable,
}

impl Sealing {
    fn flags(self) -> SealFlag {
        match self {
            Sealing::Fixed => REQUIRED_SEALS,
            Sealing::Revocable => ALLOC_SEALS,
        }
    }
}

/// The seals every shared region carries from before its first descriptor is handed out:
/// its size can neither shrink nor grow, and no seal can be added or removed.
pub(crate) const REQUIRED_SEALS: SealFlag = SealFlag::F_SEAL_SHRINK
    .union(SealFlag::F_SEAL_GROW)
    .union(SealFlag::F_SEAL_SEAL);

/// The seals of an allocation's memfd ([`AllocRegion`]): it can neither grow nor take
/// another seal, but it can shrink, so that freeing it can truncate it to 0, and every
/// mapping of it, anyone's, faults from then on.
pub(crate) const ALLOC_SEALS: SealFlag = SealFlag::F_SEAL_GROW.union(SealFlag::F_SEAL_SEAL);

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

/// Adds `want` to `file` and checks they are all in place.
fn seal(file: &File, want: SealFlag) -> io::Result<()> {
    fcntl(file, FcntlArg::F_ADD_SEALS(want)).map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("cannot seal the shared memory (F_ADD_SEALS): {e}"),
        )
    })?;
    let now = seals(file)?;
    if !now.contains(want) {
        return Err(io::Error::other(format!(
            "shared memory seals are {now:?} after F_ADD_SEALS, need {want:?}"
        )));
    }
    Ok(())
}

/// The seals of a memfd (`F_GET_SEALS`).
pub(crate) fn seals(fd: impl AsFd) -> io::Result<SealFlag> {
    let raw = fcntl(fd, FcntlArg::F_GET_SEALS).map_err(io::Error::from)?;
    Ok(SealFlag::from_bits_retain(raw))
}

/// A new memfd of `len` bytes named `name`, sealed with `sealing`'s seals.
///
/// # Errors
/// `len` is 0, the memfd cannot be created or sized, or the seals cannot be applied (or are
/// not all in place afterwards): never an unsealed memfd.
fn sealed_memfd(name: &str, len: usize, sealing: Sealing) -> io::Result<File> {
    if len == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "shared region of 0 bytes",
        ));
    }
    let file = File::from(sealable_memfd(name)?);
    file.set_len(len as u64)?;
    seal(&file, sealing.flags())?;
    Ok(file)
}

/// A descriptor of a shared region's memfd that stays open while anyone holds it (the region
/// itself, or a reply on its way out): lent to `sendmsg` or `mmap` without a `dup` of its own.
#[derive(Debug, Clone)]
pub struct MemFd(Arc<File>);

impl AsFd for MemFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl MemFd {
    /// A new descriptor of the same memfd, the caller's own (`F_DUPFD_CLOEXEC`).
    ///
    /// # Errors
    /// The `fcntl(2)` error (`EMFILE`).
    pub fn dup(&self) -> io::Result<OwnedFd> {
        Ok(OwnedFd::from(self.0.try_clone()?))
    }
}

impl SharedRegion {
    /// A zero-filled (sparse) memfd of `len` bytes named `name`, sealed (`sealing`), mapped
    /// shared.
    ///
    /// The memfd's descriptors are handed to clients, which may do anything a file allows to
    /// them. Had a client been able to shrink a stream's file, this process's mapping would
    /// reach past its end and the next access would raise SIGBUS here (the whole daemon, every
    /// tenant); grown, any memfd would cost memory nobody accounts. So the seals are in place
    /// before the first descriptor leaves: [`REQUIRED_SEALS`] for stream memory (no
    /// shrinking, no growing, no further seals, so a client can neither undo them nor add a
    /// write seal that would fail the device's stores); [`ALLOC_SEALS`] for an allocation,
    /// which may shrink (that is how freeing it revokes every mapping of it) and so is
    /// wrapped in an [`AllocRegion`] before anything uses it, whose loads and stores of its
    /// mapping are guarded against a shrunk file. What a client can still do to a stream's memory, punch holes or write
    /// anywhere in the file, changes only bytes, which the device reads as untrusted anyway
    /// (docs/abi.md §9).
    ///
    /// # Errors
    /// `len` is 0, the memfd cannot be created or sized, or the seals cannot be applied (or
    /// are not all in place afterwards): never an unsealed region.
    pub(crate) fn new(name: &str, len: usize, sealing: Sealing) -> io::Result<Self> {
        Self::make(name, len, sealing, false)
    }

    /// Like [`new`](Self::new), its pages allocated and mapped already (`MAP_POPULATE`): for
    /// memory made ahead of time, whose first use then takes no page fault.
    pub(crate) fn new_populated(name: &str, len: usize, sealing: Sealing) -> io::Result<Self> {
        Self::make(name, len, sealing, true)
    }

    fn make(name: &str, len: usize, sealing: Sealing, populate: bool) -> io::Result<Self> {
        let file = sealed_memfd(name, len, sealing)?;
        let map = if populate {
            SharedMapping::map_populated(file.as_fd(), 0, len)?
        } else {
            SharedMapping::map(file.as_fd(), 0, len)?
        };
        Ok(Self {
            map,
            file: MemFd(Arc::new(file)),
            sealing,
        })
    }

    /// Its seals' kind.
    pub(crate) fn sealing(&self) -> Sealing {
        self.sealing
    }

    /// Its length (the memfd's, all of it mapped).
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The mapping (reads, writes, copies, fills, words: `davinci_shm`).
    pub(crate) fn map(&self) -> &SharedMapping {
        &self.map
    }

    /// A new descriptor of the memfd (tests).
    #[cfg(test)]
    pub(crate) fn dup_fd(&self) -> io::Result<OwnedFd> {
        self.file.dup()
    }

    /// The memfd's descriptor, shared (for the host's mmap, with no `dup`).
    pub(crate) fn fd(&self) -> MemFd {
        self.file.clone()
    }

    /// Releases the pages of `[offset, offset + len)`: afterwards they read as zero. Punches
    /// a hole (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`); if the kernel refuses, writes
    /// zeros instead, so the contents are gone either way.
    pub(crate) fn discard(&self, offset: u64, len: u64) -> Result<(), OutOfBounds> {
        let end = offset.checked_add(len).ok_or(OutOfBounds)?;
        if end > self.map.len() as u64 {
            return Err(OutOfBounds);
        }
        let (Ok(o), Ok(l)) = (i64::try_from(offset), i64::try_from(len)) else {
            return Err(OutOfBounds);
        };
        let punched = fallocate(
            self.file.as_fd(),
            FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
            o,
            l,
        );
        if punched.is_err() {
            self.map.fill(offset, len, 0)?;
        }
        Ok(())
    }
}

/// Device memory of one allocation: a memfd sealed [`ALLOC_SEALS`] (any holder may shrink
/// it, none grow it), mapped in this process. Bytes move by this process's own loads and
/// stores, guarded (`davinci_shm::Direct`): a fault past the end of a file a holder shrank is
/// [`Shrunk`] here, never a `SIGBUS` that would end the daemon; the first such fault sets
/// `shrunk`, and from then on (the mapping's pages there are not the file's any more) every
/// access goes through `pread(2)`/`pwrite(2)` on the file, as they all do where the guard is
/// not in place. [`revoke`](Self::revoke) truncates it to 0 and, growing being sealed, it
/// stays empty: every mapping of it, the owner's and each importer's, faults from then on,
/// as on the kernel.
#[derive(Debug)]
pub(crate) struct AllocRegion {
    region: SharedRegion,
    /// A direct access faulted: the file was shrunk, and the mapping is not used again.
    shrunk: AtomicBool,
}

/// The allocation's memfd is shorter than the range asked for: a holder shrank it (or it
/// was revoked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shrunk;

/// Bytes a fill writes per system call (a multiple of 4: every step starts at pattern
/// phase 0), and the bounce buffer of a copy within one allocation whose ranges overlap.
const STEP: usize = 64 << 10;

/// A long fill writes this much of the pattern (a multiple of 4), then copies it on.
const PATTERN_LEN: usize = 1 << 20;
/// Fills this long or longer copy their pattern on rather than write it all.
const PATTERN_FILL_MIN: u64 = 2 * PATTERN_LEN as u64;

/// A direct access's outcome: `Some` if it ran (done, or the file was shrunk), `None` to go
/// through the kernel instead.
fn direct(r: Result<Direct, OutOfBounds>) -> Option<Result<(), Shrunk>> {
    match r {
        Ok(Direct::Done) => Some(Ok(())),
        Ok(Direct::Shrunk) => Some(Err(Shrunk)),
        // Out of the mapping's bounds: the caller checked the range against the allocation,
        // which is the mapping's length; the kernel's path says what is wrong.
        Ok(Direct::Unavailable) | Err(OutOfBounds) => None,
    }
}

/// A system call's count of bytes moved: at least 1, or the file ended ([`Shrunk`]).
fn moved(r: io::Result<usize>) -> Result<usize, Shrunk> {
    match r {
        Ok(0) | Err(_) => Err(Shrunk),
        Ok(n) => Ok(n),
    }
}

impl AllocRegion {
    /// An allocation's region (its memfd sealed [`ALLOC_SEALS`]); `None` for stream memory.
    pub(crate) fn new(region: SharedRegion) -> Option<Self> {
        (region.sealing == Sealing::Revocable).then_some(Self {
            region,
            shrunk: AtomicBool::new(false),
        })
    }

    /// The region, to be dropped (unmapped and closed) after the reply.
    pub(crate) fn into_inner(self) -> SharedRegion {
        self.region
    }

    /// Its length when made (the file may be shorter since).
    pub(crate) fn len(&self) -> u64 {
        self.region.map.len() as u64
    }

    /// The memfd's descriptor, shared (for the host's mmap, with no `dup`).
    pub(crate) fn fd(&self) -> MemFd {
        self.region.fd()
    }

    fn file(&self) -> &File {
        &self.region.file.0
    }

    fn map(&self) -> &SharedMapping {
        &self.region.map
    }

    /// Whether a direct access found the file shrunk (the mapping is not used since).
    fn is_shrunk(&self) -> bool {
        self.shrunk.load(Ordering::SeqCst)
    }

    /// Reads `buf.len()` bytes at `at` (inside the allocation: the caller checked).
    pub(crate) fn read(&self, at: u64, buf: &mut [u8]) -> Result<(), Shrunk> {
        if let Some(r) = direct(self.map().direct_read(at, buf, &self.shrunk)) {
            return r;
        }
        let mut done = 0;
        while let Some(rest) = buf.get_mut(done..).filter(|r| !r.is_empty()) {
            done += moved(self.file().read_at(rest, at + done as u64))?;
        }
        Ok(())
    }

    /// Writes `data` at `at` (inside the allocation: the caller checked).
    pub(crate) fn write(&self, at: u64, data: &[u8]) -> Result<(), Shrunk> {
        if let Some(r) = direct(self.map().direct_write(at, data, &self.shrunk)) {
            return r;
        }
        let mut done = 0;
        while let Some(rest) = data.get(done..).filter(|r| !r.is_empty()) {
            done += moved(self.file().write_at(rest, at + done as u64))?;
        }
        Ok(())
    }

    /// Copies `len` bytes from `from` at `s` to this allocation at `d` (both ranges inside
    /// their allocations: the caller checked), as `memmove` when they are one allocation's
    /// overlapping ranges.
    pub(crate) fn copy_from(
        &self,
        d: u64,
        from: &AllocRegion,
        s: u64,
        len: u64,
    ) -> Result<(), Shrunk> {
        let flags = [&self.shrunk, &from.shrunk];
        if let Some(r) = direct(self.map().direct_copy(d, from.map(), s, len, flags)) {
            return r;
        }
        let same = std::ptr::eq(self, from);
        if (same && d.abs_diff(s) < len) || from.is_shrunk() {
            return self.bounce_from(d, from, s, len);
        }
        // One system call a step, the source's mapping its buffer: the kernel copies once.
        let mut done = 0u64;
        while done < len {
            let n = usize::try_from(len - done).unwrap_or(usize::MAX);
            let r = from
                .map()
                .pwrite_into(s + done, n, self.file().as_fd(), d + done);
            done += moved(r)? as u64;
        }
        Ok(())
    }

    /// `memmove` from `from` (this allocation's overlapping ranges, or a source whose mapping
    /// is not used any more) through a bounce buffer and the files: forwards, or backwards
    /// when the destination is above the source.
    fn bounce_from(&self, d: u64, from: &AllocRegion, s: u64, len: u64) -> Result<(), Shrunk> {
        let mut buf = vec![0u8; usize::try_from(len).map_or(STEP, |l| l.min(STEP))];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(buf.len() as u64);
            let off = if d > s { len - done - n } else { done };
            let chunk = buf.get_mut(..n as usize).ok_or(Shrunk)?;
            from.read(s + off, chunk)?;
            self.write(d + off, chunk)?;
            done += n;
        }
        Ok(())
    }

    /// Fills `len` bytes at `at` (inside the allocation: the caller checked) with the
    /// native-endian bytes of `pattern`, repeated from `at` on. A long fill writes the
    /// pattern's first megabyte, then reads it from the file into the mapping further on (the
    /// kernel copies from cached pages into mapped ones, several times faster than writing
    /// the memfd; a holder's racing writes can only change bytes of its own fill).
    pub(crate) fn fill(&self, at: u64, len: u64, pattern: u32) -> Result<(), Shrunk> {
        if let Some(r) = direct(self.map().direct_fill(at, len, pattern, &self.shrunk)) {
            return r;
        }
        let bytes = pattern.to_ne_bytes();
        let block: Vec<u8> = (0..usize::try_from(len).map_or(STEP, |l| l.min(STEP)))
            .map(|i| bytes[i % 4])
            .collect();
        // (A mapping no longer the file's cannot be the kernel's buffer: all written then.)
        let head = if len >= PATTERN_FILL_MIN && !self.is_shrunk() {
            PATTERN_LEN as u64
        } else {
            len
        };
        let mut done = 0u64;
        while done < head {
            let n = (head - done).min(block.len() as u64);
            self.write(at + done, block.get(..n as usize).ok_or(Shrunk)?)?;
            done += n;
        }
        while done < len {
            // `[at, at + n)` holds the pattern from phase 0, and `done` is a multiple of 4.
            let n = usize::try_from(len - done).map_or(PATTERN_LEN, |l| l.min(PATTERN_LEN));
            let r = self.map().pread_from(at + done, n, self.file().as_fd(), at);
            done += moved(r)? as u64;
        }
        Ok(())
    }

    /// Truncates the memfd to 0: its pages go, and every mapping of it, anyone's, faults
    /// (`SIGBUS`) from then on. This process's own mapping is never touched again but by
    /// `munmap`.
    pub(crate) fn revoke(&self) {
        // Truncating a memfd sealed without F_SEAL_SHRINK, open for writing, does not fail.
        let _ = self.file().set_len(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An allocation's region: fills of any length (long ones copied on from their first
    /// megabyte) and copies read back exactly; once revoked (or shrunk by a holder) every
    /// access is `Shrunk`, and the file stays empty.
    #[test]
    fn alloc_regions_move_bytes_through_the_kernel_and_revoke_to_nothing() {
        let len = 3 << 20;
        let r = AllocRegion::new(SharedRegion::new("t", len, Sealing::Revocable).unwrap()).unwrap();
        assert!(AllocRegion::new(SharedRegion::new("t", 4096, Sealing::Fixed).unwrap()).is_none());
        let (at, n) = (6u64, (len - 9) as u64);
        r.fill(at, n, 0x0a0b_0c0d).unwrap();
        let mut back = vec![0u8; len];
        r.read(0, &mut back).unwrap();
        let p = 0x0a0b_0c0du32.to_ne_bytes();
        for (i, &b) in back.iter().enumerate() {
            let want = if (at..at + n).contains(&(i as u64)) {
                p[(i - at as usize) % 4]
            } else {
                0
            };
            assert_eq!(b, want, "byte {i}");
        }
        // An overlapping copy within one allocation is a memmove.
        r.write(0, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]).unwrap();
        r.copy_from(2, &r, 0, 8).unwrap();
        let mut w = [0u8; 12];
        r.read(0, &mut w).unwrap();
        assert_eq!(w, [1, 2, 1, 2, 3, 4, 5, 6, 7, 8, p[0], p[1]]);
        r.revoke();
        assert_eq!(r.read(0, &mut w), Err(Shrunk));
        assert_eq!(r.write(0, &w), Err(Shrunk));
        assert_eq!(r.fill(0, 4 << 20, 1), Err(Shrunk));
        assert_eq!(
            r.file().metadata().unwrap().len(),
            0,
            "nothing grew it back"
        );
    }

    /// A holder shrinks an allocation while the device's threads fill and copy it at full
    /// speed: every move either completes or is `Shrunk`, none raises a signal here, the
    /// region stays flagged, and what the kernel path then says agrees (the file is gone).
    #[test]
    fn a_shrink_racing_direct_moves_is_an_error_never_a_signal() {
        let len = 8 << 20;
        for round in 0..4 {
            let r =
                AllocRegion::new(SharedRegion::new("t", len, Sealing::Revocable).unwrap()).unwrap();
            let src =
                AllocRegion::new(SharedRegion::new("s", len, Sealing::Revocable).unwrap()).unwrap();
            let outcomes = std::thread::scope(|sc| {
                let movers: Vec<_> = (0..2)
                    .map(|k| {
                        let (r, src) = (&r, &src);
                        sc.spawn(move || {
                            // Until a few moves after the first that saw the shrink.
                            let mut seen = (0u32, 0u32);
                            while seen.1 < 4 && seen.0 < 1_000_000 {
                                let res = if k == 0 {
                                    r.fill(0, len as u64, 0x1234_5678)
                                } else {
                                    r.copy_from(0, src, 0, len as u64)
                                };
                                match res {
                                    Ok(()) => seen.0 += 1,
                                    Err(Shrunk) => seen.1 += 1,
                                }
                            }
                            seen
                        })
                    })
                    .collect();
                std::thread::sleep(std::time::Duration::from_millis(2 + round));
                // A holder's shrink (not the device's revoke): to a page, then to nothing.
                r.file().set_len(4096).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(1));
                r.file().set_len(0).unwrap();
                movers
                    .into_iter()
                    .map(|m| m.join().unwrap())
                    .collect::<Vec<_>>()
            });
            for (k, (_, shrunk)) in outcomes.iter().enumerate() {
                assert_eq!(*shrunk, 4, "round {round}, mover {k}: never saw the shrink");
            }
            assert!(r.is_shrunk(), "round {round}: the region is flagged");
            assert_eq!(
                r.fill(0, 4096, 1),
                Err(Shrunk),
                "round {round}: through the kernel"
            );
        }
    }

    #[test]
    fn discard_releases_the_pages_within_bounds() {
        let r = SharedRegion::new("test", 3 * 4096, Sealing::Fixed).unwrap();
        r.map().fill(0, 3 * 4096, 0x0101_0101).unwrap();
        r.discard(0, 8192).unwrap();
        let mut back = vec![0xffu8; 3 * 4096];
        r.map().read(0, &mut back).unwrap();
        assert!(back[..8192].iter().all(|&b| b == 0));
        assert!(back[8192..].iter().all(|&b| b == 1));
        assert_eq!(r.discard(4096, u64::MAX), Err(OutOfBounds));
        assert_eq!(r.discard(8192, 8192), Err(OutOfBounds));
    }

    #[test]
    fn regions_are_sealed_before_anyone_sees_them_and_holes_read_zero() {
        let r = SharedRegion::new("test-sealed", 2 * 4096, Sealing::Fixed).unwrap();
        for fd in [
            r.dup_fd().unwrap(),
            OwnedFd::from(r.file.0.try_clone().unwrap()),
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
        r.map().fill(0, 8192, 0xdead_beef).unwrap();
        let fd = r.dup_fd().unwrap();
        fallocate(
            &fd,
            FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
            0,
            8192,
        )
        .unwrap();
        let mut back = [0xffu8; 8192];
        r.map().read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0));
        r.map().write(4, &[1, 2, 3]).unwrap();
        r.map().read(4, &mut back[..3]).unwrap();
        assert_eq!(&back[..3], &[1, 2, 3]);
    }
}
