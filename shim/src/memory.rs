//! Device memory: [`DeviceBuffer`] (one ALLOC_MEMORY allocation with its host view,
//! made by [`Device::alloc`]) and the [`DeviceMem`] trait shared with pool blocks.
//!
//! An allocation is freed when the last of its holders is gone: the [`DeviceBuffer`] and
//! every queued task that names it (a [`Task`](crate::task::Task) carries a [`Lease`] of each
//! buffer it names, which its stream keeps until the task's completion is reaped). So
//! dropping a buffer with work queued on it frees it in stream order, like `cudaFreeAsync`.
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::Arc;

use davinci_uapi::*;
use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::device::Device;
use crate::error::{Error, Result};
use davinci_shm::SharedMapping;

pub(crate) mod sealed {
    /// What device memory is behind a lease: something whose drop gives the memory back (an
    /// allocation's or a pool block's shared state), of one open.
    pub trait Held: Send + Sync {
        /// The open the memory belongs to.
        fn device(&self) -> &crate::Device;
        /// The host view: the mapping, and where in it the memory starts (`None`: memory
        /// with no view a [`HostMapping`](crate::HostMapping) copies through).
        fn view(&self) -> Option<(&davinci_shm::SharedMapping, usize)> {
            None
        }
    }

    /// What keeps device memory alive while a queued task names it: a reference to the
    /// allocation's or pool block's shared state. Not nameable outside the crate.
    pub type Lease = std::sync::Arc<dyn Held>;

    /// Memory the shim handed out, and only that: [`DeviceMem`](super::DeviceMem) is sealed,
    /// so a safe [`Task`](crate::task::Task) names nothing but live memory of this library.
    pub trait Leased {
        /// A new lease of this memory.
        fn lease(&self) -> Lease;
    }
}

pub(crate) use sealed::{Held, Lease};

impl Held for BufferInner {
    fn device(&self) -> &Device {
        &self.dev
    }
    fn view(&self) -> Option<(&SharedMapping, usize)> {
        Some((&self.map, 0))
    }
}

/// Device memory with a host view: a device address for descriptors, and copies in and out.
///
/// The host view is shared with the device, which may write it at any time; reads and writes
/// copy (the shim never hands out references into it). Offsets are in bytes.
///
/// Implemented by [`DeviceBuffer`] and [`PoolBuffer`](crate::PoolBuffer) only (the trait is
/// sealed): what the [`task`](crate::task) builders accept is memory this library handed out,
/// which they keep alive until the task has run.
pub trait DeviceMem: sealed::Leased {
    /// Device address of the first byte (what descriptors name).
    fn dev_addr(&self) -> DevAddr;

    /// Length in bytes.
    fn len(&self) -> usize;

    /// Whether the length is 0 (never, for memory the shim hands out).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the host view is mapped in this process, with a hold that keeps this memory
    /// (and its mapping) alive while it lives: for code that lends the view out without
    /// copying (see [`HostMapping`](crate::HostMapping) for the rules of such access).
    fn host_mapping(&self) -> crate::HostMapping;

    /// Copies `data` to `offset`. `ERANGE` if it does not fit.
    fn write(&self, offset: usize, data: &[u8]) -> Result<()>;

    /// Copies `out.len()` bytes from `offset`. `ERANGE` if out of bounds.
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()>;

    /// Device address of byte `offset` (may equal `len`); `ERANGE` beyond.
    fn addr(&self, offset: usize) -> Result<DevAddr> {
        if offset > self.len() {
            return Err(Error::new(
                Errno::ERANGE,
                "DeviceMem::addr",
                format!("offset {offset} beyond the {}-byte buffer", self.len()),
            ));
        }
        Ok(self.dev_addr() + offset as u64)
    }

    /// Copies a slice of plain values (`u32`, `i32`, `f32`, ...) to byte `offset`.
    fn write_slice<T: IntoBytes + Immutable>(&self, offset: usize, data: &[T]) -> Result<()> {
        self.write(offset, data.as_bytes())
    }

    /// Reads `count` plain values from byte `offset`.
    fn read_vec<T: FromBytes + IntoBytes + Copy>(
        &self,
        offset: usize,
        count: usize,
    ) -> Result<Vec<T>> {
        let mut v = vec![T::new_zeroed(); count];
        self.read(offset, v.as_mut_bytes())?;
        Ok(v)
    }
}

pub(crate) fn range_error(op: &'static str, offset: usize, n: usize, len: usize) -> Error {
    Error::new(
        Errno::ERANGE,
        op,
        format!("bytes [{offset}, {offset} + {n}) are outside the {len}-byte buffer"),
    )
}

/// One device allocation (`aclrtMalloc` / `cudaMalloc`) and its host view.
///
/// Freed when dropped, or, if tasks built from it by the [`task`](crate::task) builders are
/// still queued, once the last of them has completed and been reaped from its stream (or its
/// stream is dropped): the free is stream-ordered, as with `cudaFreeAsync`, and a queued
/// task can never write into memory handed out again. `Send + Sync`.
///
/// ```
/// # fn main() -> davinci_shim::Result<()> {
/// # #[cfg(feature = "embedded")] {
/// use davinci_shim::{task, DeviceMem, Device};
/// use std::time::Duration;
/// let dev = Device::embedded()?;
/// let (a, b, sum) = (dev.alloc(16)?, dev.alloc(16)?, dev.alloc(16)?);
/// a.write_slice(0, &[1u32, 2, 3, 4])?;
/// b.write_slice(0, &[10u32, 20, 30, 40])?;
/// let mut s = dev.create_context()?.create_stream()?;
/// s.submit(&task::add::<u32>(&sum, &a, &b)?)?;
/// // Dropping an input with the add still queued is fine: its free waits for the add.
/// drop(a);
/// s.synchronize(Duration::from_secs(5))?;
/// assert_eq!(sum.read_vec::<u32>(0, 4)?, [11, 22, 33, 44]);
/// // Out of bounds is an error, not a crash.
/// assert!(sum.read_vec::<u32>(12, 2).is_err());
/// # }
/// # Ok(()) }
/// ```
pub struct DeviceBuffer {
    inner: Arc<BufferInner>,
}

/// The allocation itself, shared by its [`DeviceBuffer`] and the leases of queued tasks;
/// FREE_MEMORY when the last is gone.
pub struct BufferInner {
    map: SharedMapping,
    dev: Device,
    handle: u32,
    dev_addr: DevAddr,
    len: usize,
    alloc_size: u64,
    /// Imported from another client (IMPORT_MEMORY), with what named the export: freeing it
    /// drops the import only.
    imported: Option<Imported>,
}

/// What an import named its export by (asked again by [`DeviceBuffer::is_revoked`]).
#[derive(Debug)]
pub(crate) enum Imported {
    /// A token.
    Token(u64),
    /// An export fd (the import keeps its own duplicate).
    Fd(std::os::fd::OwnedFd),
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("handle", &self.inner.handle)
            .field("dev_addr", &format_args!("{:#x}", self.inner.dev_addr))
            .field("len", &self.inner.len)
            .field("imported", &self.inner.imported.is_some())
            .finish()
    }
}

impl Device {
    /// Allocates `len` bytes of device memory (`aclrtMalloc` / `cudaMalloc`), zeroed, with a
    /// host view. Each call is a driver round trip; for many small buffers use a
    /// [`MemPool`](crate::MemPool).
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer> {
        DeviceBuffer::new(self, len)
    }
}

impl DeviceBuffer {
    fn new(dev: &Device, len: usize) -> Result<DeviceBuffer> {
        const OP: &str = "ALLOC_MEMORY";
        if len == 0 {
            return Err(Error::new(Errno::EINVAL, OP, "allocation of 0 bytes"));
        }
        let mut a = AllocMemoryArgs {
            size: len as u64,
            ..Default::default()
        };
        dev.call(OP, DRIVER_CMD_ALLOC_MEMORY, &mut a)?;
        let free = |e: Error| {
            let _ = dev.call_handle("FREE_MEMORY", DRIVER_CMD_FREE_MEMORY, a.handle);
            e
        };
        if a.alloc_size < len as u64 {
            return Err(free(Error::new(
                Errno::EPROTO,
                OP,
                format!(
                    "driver reserved {} bytes for a {len}-byte request",
                    a.alloc_size
                ),
            )));
        }
        let map = dev.map(OP, a.mmap_offset, a.alloc_size).map_err(free)?;
        Ok(DeviceBuffer {
            inner: Arc::new(BufferInner {
                map,
                dev: dev.clone(),
                handle: a.handle,
                dev_addr: DevAddr(a.dev_addr),
                len,
                alloc_size: a.alloc_size,
                imported: None,
            }),
        })
    }

    /// Whether this buffer was imported from another client ([`Device::import`]).
    pub fn is_imported(&self) -> bool {
        self.inner.imported.is_some()
    }

    /// Whether the exporter freed this imported buffer (or closed), revoking the import
    /// (docs/abi.md, EXPORT_MEMORY): its descriptors then fail with `EACCES`, and its host
    /// view no longer reaches the memory: an access raises `SIGBUS`, on the kernel driver and
    /// on the mock device alike (docs/abi.md section 4). Always `false` for this client's own allocations, which live
    /// as long as this buffer does. One driver round trip (an IMPORT_MEMORY of the same
    /// token, which answers `EBUSY` while the import stands and `ENOENT` once the export is
    /// gone).
    ///
    /// # Errors
    /// The driver's, for any other answer (`ENODEV` for a lost device).
    pub fn is_revoked(&self) -> Result<bool> {
        const OP: &str = "DeviceBuffer::is_revoked";
        let (token, flags) = match &self.inner.imported {
            None => return Ok(false),
            Some(Imported::Token(t)) => (*t, 0),
            Some(Imported::Fd(fd)) => {
                use std::os::fd::AsRawFd;
                (fd.as_raw_fd() as u64, IMPORT_FLAG_FD)
            }
        };
        let dev = &self.inner.dev;
        let mut a = ImportMemoryArgs {
            token,
            flags,
            ..Default::default()
        };
        match dev.call(OP, DRIVER_CMD_IMPORT_MEMORY, &mut a) {
            Err(e) if e.is(Errno::EBUSY) => Ok(false),
            Err(e) if e.is(Errno::ENOENT) => Ok(true),
            Err(e) => Err(e),
            // The driver forgot this import but the export stands (nothing should do that):
            // not revoked; give the second import back.
            Ok(()) => {
                let _ = dev.call_handle("FREE_MEMORY", DRIVER_CMD_FREE_MEMORY, a.handle);
                Ok(false)
            }
        }
    }

    /// Shares this allocation with another client of the same device (`cudaIpcGetMemHandle`,
    /// `aclrtIpcMemGetExportKey`): the returned token, handed over through a channel of your
    /// own (a Unix socket, a pipe, a Ray object), lets the clients `to` names import it with
    /// [`Device::import`]. Exporting again to the same grantee returns the same token;
    /// another grant is another export (ABI 1.5; a 1.4 driver answers `EBUSY`).
    ///
    /// The memory stays this buffer's: when it is freed (dropped, once no queued task of this
    /// client names it), every import is revoked: the importers' host views stop reaching it
    /// (a `SIGBUS`) and their tasks that name it fail with `EACCES`. So the exporter keeps
    /// the buffer until the importers are done (say so over the same channel), or exports
    /// it under a lease ([`export_lease`](Self::export_lease)), which keeps the memory for
    /// them. `ENOSPC` when the device has 256 exports (or, shared, when this client's tenant
    /// holds its share: 64 with 4 slots); `EINVAL` for an imported buffer.
    ///
    /// ```
    /// # fn main() -> davinci_shim::Result<()> {
    /// # #[cfg(feature = "embedded")] {
    /// use davinci_shim::{task, Device, DeviceMem, ExportTo, ShareMode};
    /// use std::time::Duration;
    /// let a = Device::embedded()?;
    /// a.set_share_mode(ShareMode::Shared)?; // two clients on one device
    /// let b = Device::attach(a.mock_device().unwrap())?; // another process, in real life
    /// let buf = a.alloc(4096)?;
    /// let token = buf.export(ExportTo::SameUser)?;
    /// // ... the token travels to the other process (token.to_string() and back) ...
    /// let theirs = b.import(token.to_string().parse()?)?;
    /// let mut s = b.create_context()?.create_stream()?;
    /// s.submit(&task::fill(&theirs, 7)?)?;
    /// s.synchronize(Duration::from_secs(5))?;
    /// assert_eq!(buf.read_vec::<u32>(0, 2)?, [7, 7]); // the exporter sees it
    /// # }
    /// # Ok(()) }
    /// ```
    pub fn export(&self, to: ExportTo) -> Result<ExportToken> {
        self.export_with(to, 0).map(ExportToken)
    }

    /// EXPORT_MEMORY with `flags`: the reply's `token` (an fd's number with
    /// `EXPORT_FLAG_FD`).
    pub(crate) fn export_with(&self, to: ExportTo, flags: u32) -> Result<u64> {
        let (uid, client_id) = to.grant();
        let mut a = ExportMemoryArgs {
            handle: self.inner.handle,
            flags,
            uid,
            client: client_id,
            ..Default::default()
        };
        self.inner
            .dev
            .call("EXPORT_MEMORY", DRIVER_CMD_EXPORT_MEMORY, &mut a)?;
        Ok(a.token)
    }
}

/// Who may import an export ([`DeviceBuffer::export`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportTo {
    /// Any client of the exporter's own user (the usual case: two processes of one job).
    SameUser,
    /// Any client of this user.
    User(u32),
    /// Only the client with this client id ([`Device::client_id`] in the importer), of
    /// this user (`None`: the exporter's own).
    Client {
        /// The importer's user; `None`: the exporter's.
        uid: Option<u32>,
        /// The importer's client id.
        client_id: u32,
    },
}

impl ExportTo {
    /// The grant as EXPORT_MEMORY and EXPORT_EVENT take it: `(uid, client_id)`.
    pub(crate) fn grant(self) -> (u32, u32) {
        match self {
            ExportTo::SameUser => (EXPORT_OWN_UID, 0),
            ExportTo::User(uid) => (uid, 0),
            ExportTo::Client { uid, client_id } => (uid.unwrap_or(EXPORT_OWN_UID), client_id),
        }
    }
}

/// The token of an export: a plain value to hand to another process, as 16 hex digits
/// (`Display` / `FromStr`) or 8 bytes ([`to_bytes`](Self::to_bytes)). Not a secret: the
/// driver lets only the clients the export names import it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExportToken(pub u64);

impl ExportToken {
    /// Its 8 bytes (little-endian), for a binary channel.
    pub fn to_bytes(self) -> [u8; 8] {
        self.0.to_le_bytes()
    }

    /// From [`to_bytes`](Self::to_bytes).
    pub fn from_bytes(b: [u8; 8]) -> ExportToken {
        ExportToken(u64::from_le_bytes(b))
    }
}

impl fmt::Display for ExportToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl std::str::FromStr for ExportToken {
    type Err = Error;

    fn from_str(s: &str) -> Result<ExportToken> {
        u64::from_str_radix(s.trim(), 16)
            .map(ExportToken)
            .map_err(|e| {
                Error::new(
                    Errno::EINVAL,
                    "ExportToken::from_str",
                    format!("{s:?} is not an export token (16 hex digits): {e}"),
                )
            })
    }
}

impl Device {
    /// Imports memory another client exported ([`DeviceBuffer::export`]; `cudaIpcOpenMemHandle`,
    /// `aclrtIpcMemImportByKey`): a buffer of this client for the same device memory, at the
    /// same device address. Tasks of this client may name it and its host view sees the
    /// same bytes. Dropping it drops the import (the memory stays the exporter's); the
    /// exporter's free revokes it (see [`DeviceBuffer::export`]).
    ///
    /// `ENOENT` for a token that is unknown, freed, or not granted to this client (one
    /// answer for all three); `EBUSY` if this client imported it already; `ENOSPC` when the
    /// export has 8 imports; `EINVAL` for a token of this client's own memory.
    pub fn import(&self, token: ExportToken) -> Result<DeviceBuffer> {
        self.import_by(Imported::Token(token.0))
    }

    /// IMPORT_MEMORY of what `by` names, mapped.
    pub(crate) fn import_by(&self, by: Imported) -> Result<DeviceBuffer> {
        const OP: &str = "IMPORT_MEMORY";
        let (token, flags) = match &by {
            Imported::Token(t) => (*t, 0),
            Imported::Fd(fd) => {
                use std::os::fd::AsRawFd;
                (fd.as_raw_fd() as u64, IMPORT_FLAG_FD)
            }
        };
        let mut a = ImportMemoryArgs {
            token,
            flags,
            ..Default::default()
        };
        self.call(OP, DRIVER_CMD_IMPORT_MEMORY, &mut a)?;
        let free = |e: Error| {
            let _ = self.call_handle("FREE_MEMORY", DRIVER_CMD_FREE_MEMORY, a.handle);
            e
        };
        let len = usize::try_from(a.size).map_err(|_| {
            free(Error::new(
                Errno::EOVERFLOW,
                OP,
                "import larger than memory",
            ))
        })?;
        let map = self.map(OP, a.mmap_offset, a.size).map_err(free)?;
        Ok(DeviceBuffer {
            inner: Arc::new(BufferInner {
                map,
                dev: self.clone(),
                handle: a.handle,
                dev_addr: DevAddr(a.dev_addr),
                len,
                alloc_size: a.size,
                imported: Some(by),
            }),
        })
    }
}

impl DeviceBuffer {
    /// The driver's handle of this allocation.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// Bytes the driver reserved (the length rounded up to the device's alignment).
    pub fn capacity(&self) -> u64 {
        self.inner.alloc_size
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// Queued tasks that name this buffer and have not been reaped yet (its free waits for
    /// them).
    pub fn pending_uses(&self) -> usize {
        Arc::strong_count(&self.inner) - 1
    }

    /// The allocation's shared state (pool chunks hold it).
    pub(crate) fn inner(&self) -> &Arc<BufferInner> {
        &self.inner
    }
}

impl sealed::Leased for DeviceBuffer {
    fn lease(&self) -> Lease {
        self.inner.clone()
    }
}

impl DeviceMem for DeviceBuffer {
    fn dev_addr(&self) -> DevAddr {
        self.inner.dev_addr
    }

    fn len(&self) -> usize {
        self.inner.len
    }

    fn host_mapping(&self) -> crate::HostMapping {
        crate::HostMapping::new(self.inner.clone(), self.inner.host_addr(), self.inner.len)
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.inner.write(offset, data)
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.inner.read(offset, out)
    }
}

impl BufferInner {
    /// Device address of the first byte.
    pub(crate) fn dev_addr(&self) -> DevAddr {
        self.dev_addr
    }

    /// The address of the host view's first byte in this process.
    pub(crate) fn host_addr(&self) -> usize {
        self.map.as_ptr() as usize
    }

    /// The host view's mapping.
    pub(crate) fn shared(&self) -> &SharedMapping {
        &self.map
    }

    /// Bytes the driver reserved.
    pub(crate) fn capacity(&self) -> u64 {
        self.alloc_size
    }

    /// The allocation's handle.
    pub(crate) fn handle(&self) -> u32 {
        self.handle
    }

    /// The device.
    pub(crate) fn device(&self) -> &Device {
        &self.dev
    }

    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        const OP: &str = "DeviceBuffer::write";
        if offset.checked_add(data.len()).is_none_or(|e| e > self.len) {
            return Err(range_error(OP, offset, data.len(), self.len));
        }
        self.map
            .write(offset as u64, data)
            .map_err(|_| range_error(OP, offset, data.len(), self.map.len()))
    }

    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        const OP: &str = "DeviceBuffer::read";
        if offset.checked_add(out.len()).is_none_or(|e| e > self.len) {
            return Err(range_error(OP, offset, out.len(), self.len));
        }
        self.map
            .read(offset as u64, out)
            .map_err(|_| range_error(OP, offset, out.len(), self.map.len()))
    }
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        // The last holder: no queued task names it any more. On failure the open's close
        // frees it anyway. The host view is unmapped right after (field drop).
        let _ = self
            .dev
            .call_handle("FREE_MEMORY", DRIVER_CMD_FREE_MEMORY, self.handle);
    }
}
