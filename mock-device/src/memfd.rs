//! [`SharedRegion`]: device memory and stream memory of the mock device, a memfd sealed at
//! its size and mapped shared. It is the only place the mock device makes memfds, and every
//! one is sealed before a descriptor of it can leave (docs/abi.md §4.1).
#![forbid(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use davinci_shm::{OutOfBounds, SharedMapping};
use nix::fcntl::{fallocate, fcntl, FallocateFlags, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};

/// A memfd of a fixed, sealed length, mapped shared (read/write) in this process.
#[derive(Debug)]
pub(crate) struct SharedRegion {
    map: SharedMapping,
    file: MemFd,
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

/// A new memfd of `len` bytes named `name`, sealed at that size ([`REQUIRED_SEALS`]).
///
/// # Errors
/// `len` is 0, the memfd cannot be created or sized, or the seals cannot be applied (or are
/// not all in place afterwards): never an unsealed memfd.
fn sealed_memfd(name: &str, len: usize) -> io::Result<File> {
    if len == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "shared region of 0 bytes",
        ));
    }
    let file = File::from(sealable_memfd(name)?);
    file.set_len(len as u64)?;
    seal(&file)?;
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
        Self::make(name, len, false)
    }

    /// Like [`new`](Self::new), its pages allocated and mapped already (`MAP_POPULATE`): for
    /// memory made ahead of time, whose first use then takes no page fault.
    pub(crate) fn new_populated(name: &str, len: usize) -> io::Result<Self> {
        Self::make(name, len, true)
    }

    fn make(name: &str, len: usize, populate: bool) -> io::Result<Self> {
        let file = sealed_memfd(name, len)?;
        let map = if populate {
            SharedMapping::map_populated(file.as_fd(), 0, len)?
        } else {
            SharedMapping::map(file.as_fd(), 0, len)?
        };
        Ok(Self {
            map,
            file: MemFd(Arc::new(file)),
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discard_releases_the_pages_within_bounds() {
        let r = SharedRegion::new("test", 3 * 4096).unwrap();
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
        let r = SharedRegion::new("test-sealed", 2 * 4096).unwrap();
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
