//! Export leases, ranges and unexport (ABI 1.5, `DAVINCI_FEAT_EXPORT_LEASE`): memory that
//! outlives its owner's free while another client still imports it (dma-buf's rule, what a
//! framework's transport expects: the sender drops its tensor, the receiver keeps reading),
//! exports of whole pages of an allocation (a [`MemPool`](crate::MemPool) block, not its
//! chunk), and ending exports without freeing (a pool taking a block back).
#![forbid(unsafe_code)]

use davinci_uapi::{
    Errno, ExportRangeArgs, Features, UnexportMemoryArgs, DRIVER_CMD_EXPORT_RANGE,
    DRIVER_CMD_UNEXPORT_MEMORY, EXPORT_FLAG_LEASE,
};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{BufferInner, DeviceBuffer, ExportTo, ExportToken};

/// What an export's imports keep when the exporter frees the memory (or a pool takes the
/// block back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lifetime {
    /// The exporter's free revokes every import: their tasks on it fail with `EACCES` and
    /// their host views stop reaching it (the 1.4 rule, [`DeviceBuffer::export`]).
    #[default]
    Revoke,
    /// A lease: the memory stays, still charged to the exporter (its usage and
    /// `davinci-smi`'s memory column count it), until the last import is freed; the
    /// exporter's handle names nothing meanwhile and the token takes no new import. The
    /// exporter's close (its process's death) still revokes every import.
    Lease,
}

impl Lifetime {
    fn flags(self) -> u32 {
        match self {
            Lifetime::Revoke => 0,
            Lifetime::Lease => EXPORT_FLAG_LEASE,
        }
    }
}

/// `EINVAL`, saying why, for a device without leases.
pub(crate) fn need_leases(dev: &Device, op: &'static str) -> Result<()> {
    if dev.features().contains(Features::EXPORT_LEASE) {
        return Ok(());
    }
    Err(Error::new(
        Errno::EINVAL,
        op,
        "this device has no export leases or ranges (GET_INFO has no \
         DAVINCI_FEAT_EXPORT_LEASE: a driver older than ABI 1.5)",
    ))
}

/// EXPORT_RANGE of `[offset, offset + len)` of `buf` (whole pages).
pub(crate) fn export_range(
    buf: &BufferInner,
    (offset, len): (u64, u64),
    to: ExportTo,
    lifetime: Lifetime,
) -> Result<ExportToken> {
    const OP: &str = "EXPORT_RANGE";
    need_leases(buf.device(), OP)?;
    let (uid, client_id) = to.grant();
    let mut a = ExportRangeArgs {
        handle: buf.handle(),
        flags: lifetime.flags(),
        uid,
        client: client_id,
        offset,
        len,
        token: 0,
    };
    buf.device().call(OP, DRIVER_CMD_EXPORT_RANGE, &mut a)?;
    Ok(ExportToken(a.token))
}

/// UNEXPORT_MEMORY of `[offset, offset + len)` of `buf` (`(0, 0)`: the whole): the imports
/// of leases still standing.
pub(crate) fn unexport(buf: &BufferInner, (offset, len): (u64, u64)) -> Result<u32> {
    const OP: &str = "UNEXPORT_MEMORY";
    need_leases(buf.device(), OP)?;
    let mut a = UnexportMemoryArgs {
        handle: buf.handle(),
        offset,
        len,
        ..Default::default()
    };
    buf.device().call(OP, DRIVER_CMD_UNEXPORT_MEMORY, &mut a)?;
    Ok(a.imports)
}

impl DeviceBuffer {
    /// Shares this allocation under a lease ([`Lifetime::Lease`]): as
    /// [`export`](Self::export), but dropping this buffer leaves the memory to the importers
    /// until the last of them frees its import (`cudaIpcGetMemHandle`'s memory, which lives
    /// while mapped). For a sender that lets go of a buffer once the receiver has it.
    ///
    /// # Errors
    /// `EINVAL` on a device without leases (ABI < 1.5) or for an imported buffer; `ENOSPC`
    /// the tenant's export quota or the device's 256 exports.
    pub fn export_lease(&self, to: ExportTo) -> Result<ExportToken> {
        need_leases(self.device(), "EXPORT_MEMORY")?;
        self.export_with(to, EXPORT_FLAG_LEASE).map(ExportToken)
    }

    /// Shares whole pages of this allocation, `[offset, offset + len)` (multiples of
    /// GET_INFO's `page_size`): an importer reaches those pages alone (its tasks fault
    /// outside them, its host view maps them alone). Several ranges, grants and lifetimes of
    /// one allocation are several exports; the same one again returns the same token.
    ///
    /// # Errors
    /// `EINVAL` not whole pages, empty, an imported buffer, or no leases on this device;
    /// `ERANGE` past the allocation's end; `ENOSPC` as for [`export`](Self::export).
    pub fn export_range(
        &self,
        offset: usize,
        len: usize,
        to: ExportTo,
        lifetime: Lifetime,
    ) -> Result<ExportToken> {
        export_range(self.inner(), (offset as u64, len as u64), to, lifetime)
    }

    /// Ends this allocation's exports of the whole of it ([`export`](Self::export),
    /// [`export_lease`](Self::export_lease)), keeping the allocation: imports without a
    /// lease are revoked now; a lease takes no new import and ends with its last import.
    /// Returns how many imports of leases still stand (0: the memory is this client's alone
    /// again); ask again to learn when they are gone.
    pub fn unexport(&self) -> Result<u32> {
        unexport(self.inner(), (0, 0))
    }

    /// As [`unexport`](Self::unexport), for the exports of one range
    /// ([`export_range`](Self::export_range)).
    pub fn unexport_range(&self, offset: usize, len: usize) -> Result<u32> {
        unexport(self.inner(), (offset as u64, len as u64))
    }
}

/// The whole-page test of a pool block: `EINVAL` saying how to get one.
pub(crate) fn whole_pages(dev: &Device, offset: usize, size: usize) -> Result<()> {
    let page = dev.info().page_size.max(1) as usize;
    if offset.is_multiple_of(page) && size.is_multiple_of(page) {
        return Ok(());
    }
    Err(Error::new(
        Errno::EINVAL,
        "PoolBuffer::export",
        format!(
            "a block is exported as whole pages, and this one is not ({size} bytes at offset \
             {offset} of its chunk; pages of {page} bytes): make the pool with \
             PoolOptions::align({page}) or more, so every block is whole pages"
        ),
    ))
}
