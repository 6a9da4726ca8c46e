//! The shared memory: a sealed memfd of a power-of-two size (QEMU maps it as BAR2, and a PCI
//! BAR is a power of two: QEMU 7.2 asserts it in `pci_register_bar`), mapped here through
//! `davinci-shm`'s audited [`SharedMapping`].

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use davinci_shm::SharedMapping;
use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::unistd::ftruncate;

use crate::error::{Error, Result};

/// The smallest shared memory served: one page (the guest maps BAR2 in pages).
pub const MIN_SHM_SIZE: u64 = 4096;
/// The largest shared memory served (a bound, not QEMU's: the guest's PCI window must hold
/// it too).
pub const MAX_SHM_SIZE: u64 = 1 << 30;

/// The shared memory the server creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmSpec {
    /// Bytes: a power of two in [`MIN_SHM_SIZE`]`..=`[`MAX_SHM_SIZE`].
    pub size: u64,
}

impl ShmSpec {
    /// Checks the size.
    ///
    /// # Errors
    /// [`Error::BadSpec`] saying which rule the size breaks.
    pub fn check(&self) -> Result<()> {
        let size = self.size;
        if !size.is_power_of_two() {
            return Err(Error::BadSpec(format!(
                "shared memory size {size} is not a power of two (QEMU maps it as a PCI BAR)"
            )));
        }
        if !(MIN_SHM_SIZE..=MAX_SHM_SIZE).contains(&size) {
            return Err(Error::BadSpec(format!(
                "shared memory size {size} outside {MIN_SHM_SIZE}..={MAX_SHM_SIZE}"
            )));
        }
        Ok(())
    }
}

/// The memfd and this process's mapping of it.
#[derive(Debug)]
pub struct SharedMemory {
    fd: OwnedFd,
    map: SharedMapping,
}

impl SharedMemory {
    /// A zeroed memfd of `spec.size` bytes, sealed against shrinking, growing and further
    /// seals (a peer holding the descriptor can neither truncate the memory under the other
    /// mappings, which would turn their accesses into `SIGBUS`, nor grow it), and mapped.
    ///
    /// # Errors
    /// [`Error::BadSpec`] for a size [`ShmSpec::check`] refuses; the failed call otherwise.
    pub fn create(spec: ShmSpec) -> Result<SharedMemory> {
        spec.check()?;
        let fd = memfd_create(
            "davinci-ivshmem",
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )
        .map_err(|e| Error::sys("memfd_create for the shared memory", e))?;
        let len = i64::try_from(spec.size).map_err(|_| Error::BadSpec("size".into()))?;
        ftruncate(&fd, len)
            .map_err(|e| Error::sys(format!("ftruncate of the shared memory to {len}"), e))?;
        let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(seals))
            .map_err(|e| Error::sys("F_ADD_SEALS on the shared memory", e))?;
        let size = usize::try_from(spec.size).map_err(|_| Error::BadSpec("size".into()))?;
        let map = SharedMapping::map(fd.as_fd(), 0, size).map_err(|e| {
            Error::sys(
                "mmap of the shared memory",
                Errno::from_raw(e.raw_os_error().unwrap_or(libc_eio())),
            )
        })?;
        Ok(SharedMemory { fd, map })
    }

    /// The memfd (what peers receive).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// This process's mapping.
    pub fn mapping(&self) -> &SharedMapping {
        &self.map
    }
}

/// `EIO`, for an I/O error without an errno.
pub(crate) fn libc_eio() -> i32 {
    Errno::EIO as i32
}
