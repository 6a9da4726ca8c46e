//! [`Device`]: one open of a davinci device as a client (the backend, the GET_INFO read at
//! open, the ioctl and mmap calls everything above goes through, share mode, counters).
//! The objects made from an open add their constructors where they live:
//! [`Device::create_context`] in `context.rs`, [`Device::alloc`] in `memory.rs`, so this
//! module needs none of them.
#![forbid(unsafe_code)]

use std::fmt;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use davinci_shm::SharedMapping;
use davinci_uapi::*;

use crate::backend::{self, Backend, MapFd, Role};
use crate::error::{Error, Result};
use crate::path::DevicePath;
use crate::rings::Part;
use crate::stats::{DeviceStats, StatsRegistry};

/// The open itself, shared by every clone of its [`Device`] and by everything made from it.
pub(crate) struct DeviceInner {
    pub(crate) backend: Box<dyn Backend>,
    info: DeviceInfo,
    /// Its streams' data-path counters ([`Device::stats`]).
    pub(crate) stats: StatsRegistry,
    /// Slots for kernel launches' parameter blocks (`task/params.rs`).
    params: crate::task::params::ParamArena,
    /// The trace session of this open, if one runs ([`Device::trace`]).
    pub(crate) trace: crate::trace::Hook,
}

/// One open of a davinci device, as a client: the handle everything else hangs from.
///
/// Cheap to clone (clones share the open). Contexts, streams, events and buffers keep the
/// open alive; when the last of them and the last clone are gone, the open is closed and the
/// driver releases whatever is left.
///
/// ```
/// # fn main() -> davinci_shim::Result<()> {
/// # #[cfg(feature = "embedded")] {
/// use davinci_shim::{Device, DeviceMem};
/// use std::time::Duration;
/// let dev = Device::embedded()?;
/// let ctx = dev.create_context()?;
/// let mut stream = ctx.create_stream()?;
/// let buf = dev.alloc(4096)?;
/// stream.submit(&davinci_shim::task::fill(&buf, 7)?)?;
/// stream.synchronize(Duration::from_secs(5))?;
/// assert_eq!(buf.read_vec::<u32>(0, 4)?, vec![7; 4]);
/// # }
/// # Ok(()) }
/// ```
///
/// `Send + Sync`: share it (or clones of it) between threads.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("backend", &self.inner.backend.to_string())
            .field("device_id", &self.inner.info.device_id)
            .finish_non_exhaustive()
    }
}

fn encode<T: Wire>(v: &T) -> Vec<u8> {
    let mut b = vec![0u8; T::SIZE];
    v.encode(&mut b);
    b
}

/// Which device and which client, for messages: `davinci-mockd device 0 at
/// mock:/run/davinci/davinci0.sock (client 3)`. The client id is the one `davinci-smi info -t
/// usage` and [`Control::clients`](crate::Control::clients) show (GET_INFO's `caller_id`;
/// `(client open)` on a driver older than ABI 1.1).
impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.backend.fmt(f)?;
        match self.client_id() {
            Some(client_id) => write!(f, " (client {client_id})"),
            None => f.write_str(" (client open)"),
        }
    }
}

impl Device {
    /// A new mock device running in this process (default configuration), opened as a
    /// client. No hardware, no daemon: the device engine runs on threads of this process
    /// over the same shared memory a daemon would use. (Cargo feature `embedded`, on by
    /// default.)
    ///
    /// # Errors
    /// Only if the process is out of resources (memfds, threads).
    #[cfg(feature = "embedded")]
    pub fn embedded() -> Result<Device> {
        Self::embedded_with(crate::MockConfig::default())
    }

    /// Like [`embedded`](Self::embedded), with a configuration (memory size, limits, ...).
    ///
    /// # Errors
    /// As [`embedded`](Self::embedded).
    #[cfg(feature = "embedded")]
    pub fn embedded_with(config: crate::MockConfig) -> Result<Device> {
        let mock = crate::MockDevice::new(config);
        // A thread of the device makes memfds ahead of time and lets go of freed memory after
        // each control call; without it (no thread to spare) every call does that work itself.
        let _ = mock.tidy_in_background();
        Self::attach(&mock)
    }

    /// Opens another client on an existing in-process mock device (e.g. to exercise device
    /// sharing: the device must be in shared mode for a second client, else `EBUSY`).
    ///
    /// # Errors
    /// `EBUSY` naming the holder in exclusive mode; `ENODEV` after the device shut down.
    #[cfg(feature = "embedded")]
    pub fn attach(mock: &crate::MockDevice) -> Result<Device> {
        let b = backend::embedded::Embedded::open(mock.clone(), Role::Client)?;
        let info = backend::check_abi(&b)?;
        Ok(Self::from_backend(Box::new(b), info))
    }

    /// Another client of the in-process device `mock`, as if opened by user `uid`: not an
    /// admin and its own tenant, held to its own share of a shared device (docs/security.md,
    /// "Tenants"). For tests of multi-tenant code on the embedded device; a real device
    /// takes the user from the opener.
    ///
    /// # Errors
    /// As [`attach`](Self::attach).
    #[cfg(feature = "embedded")]
    pub fn attach_as_user(mock: &crate::MockDevice, uid: u32) -> Result<Device> {
        let b = backend::embedded::Embedded::open_as_user(mock.clone(), uid)?;
        let info = backend::check_abi(&b)?;
        Ok(Self::from_backend(Box::new(b), info))
    }

    /// Opens the device at `path` as a client: `"/dev/davinciN"` (the kernel driver),
    /// `"mock:SOCKET"` (a `davinci-mockd` device) or `"embedded"` (a new in-process mock
    /// device). In exclusive mode a second client gets `EBUSY` naming the holder (pid,
    /// container).
    ///
    /// # Errors
    /// `EINVAL` for a malformed path; `ENODEV` when nothing answers there (no node, no
    /// daemon); `EPERM` (permissions); `EBUSY` (exclusive mode); `EPROTO` (another ABI major).
    pub fn open(path: &str) -> Result<Device> {
        Self::open_path(&DevicePath::parse(path)?)
    }

    /// [`open`](Self::open) of a parsed path.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_path(path: &DevicePath) -> Result<Device> {
        let (b, info) = backend::open(path, Role::Client)?;
        Ok(Self::from_backend(b, info))
    }

    /// Opens the device a program that names none gets, by the one rule of every language
    /// ([`DevicePath::default_device`]): `DAVINCI_DEVICE` (any [`open`](Self::open) path) if
    /// it is set, else this node's device (`/dev/davinci0`, else `davinci0.sock` in
    /// `davinci-mockd`'s default socket directory), else the embedded mock device. Which one
    /// it opened: [`Display`](#impl-Display-for-Device) (`dev.to_string()`).
    ///
    /// # Errors
    /// As [`open`](Self::open); the message says where the path came from.
    pub fn from_env() -> Result<Device> {
        Self::open_default().map(|(dev, _, _)| dev)
    }

    /// [`from_env`](Self::from_env), also saying which path it opened and where that came
    /// from (for a program, or a binding, that reports it).
    ///
    /// # Errors
    /// As [`open`](Self::open); the message says where the path came from.
    pub fn open_default() -> Result<(Device, DevicePath, crate::DeviceSource)> {
        let (path, from) = DevicePath::default_device()?;
        match Self::open_path(&path) {
            Ok(dev) => Ok((dev, path, from)),
            Err(e) => Err(Error::with_errno(
                e.errno(),
                e.op(),
                format!("{} (device {path}, from {from})", e.message()),
            )),
        }
    }

    /// Opens device `index` of this process's numbering: the `index`th entry of the
    /// visible-device list (`DAVINCI_VISIBLE_DEVICES`, else `ASCEND_VISIBLE_DEVICES`), or,
    /// with none, of the node's devices by index ([`crate::visible`]); `cudaSetDevice(index)`.
    ///
    /// # Errors
    /// `ENODEV` past the last visible device; `EINVAL` for a malformed list; as
    /// [`open`](Self::open), the message naming the device and its index.
    pub fn open_index(index: usize) -> Result<Device> {
        let path = crate::visible::visible_device(index)?;
        Self::open_path(&path).map_err(|e| {
            Error::with_errno(
                e.errno(),
                e.op(),
                format!("{} (device {index}: {path})", e.message()),
            )
        })
    }

    /// How many devices this process sees ([`open_index`](Self::open_index)'s range;
    /// `cudaGetDeviceCount`). Counts names, without opening them.
    ///
    /// # Errors
    /// `EINVAL` for a malformed visible-device list or `DAVINCI_DEVICE`.
    pub fn count() -> Result<usize> {
        crate::visible::visible_devices().map(|v| v.len())
    }

    /// LIST_KERNELS through this open's backend.
    pub(crate) fn list_kernels(&self) -> Result<Vec<davinci_uapi::KernelInfo>> {
        self.inner.backend.list_kernels()
    }

    /// Ownership of the export fd `fd` this open's EXPORT_MEMORY just returned.
    pub(crate) fn adopt_export_fd(&self, fd: u64) -> Result<std::os::fd::OwnedFd> {
        self.inner.backend.adopt_export_fd(fd)
    }

    fn from_backend(backend: Box<dyn Backend>, info: DeviceInfo) -> Device {
        Device {
            inner: Arc::new(DeviceInner {
                backend,
                info,
                stats: StatsRegistry::default(),
                params: Default::default(),
                trace: Default::default(),
            }),
        }
    }

    /// One ioctl with a typed argument; the reply fields are decoded back into `args` (also
    /// when the call fails).
    pub(crate) fn call<T: Wire>(&self, op: &'static str, request: u32, args: &mut T) -> Result<()> {
        let mut arg = encode(args);
        let r = self.inner.backend.ioctl(op, request, &mut arg);
        *args = T::decode(&arg);
        r
    }

    /// WAIT_EVENT, riding out `EBUSY` (a `davinci-mockd` open that has as many blocking
    /// waits in flight as it may: docs/abi.md 9): tried again every millisecond until the
    /// wait's own timeout has passed, then `ETIMEDOUT`.
    pub(crate) fn call_wait(&self, op: &'static str, a: &mut WaitEventArgs) -> Result<()> {
        let start = std::time::Instant::now();
        let total = a.timeout_ns;
        loop {
            let mut attempt = *a;
            match self.call(op, DRIVER_CMD_WAIT_EVENT, &mut attempt) {
                Err(e) if e.is(Errno::EBUSY) && total != 0 => {
                    let spent = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    if total != WAIT_FOREVER && spent >= total {
                        *a = attempt;
                        return Err(Error::new(
                            Errno::ETIMEDOUT,
                            op,
                            format!("the device had no room for the wait within {total} ns ({e})"),
                        ));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    if total != WAIT_FOREVER {
                        a.timeout_ns = total - spent;
                    }
                }
                r => {
                    *a = attempt;
                    return r;
                }
            }
        }
    }

    /// A command whose argument is a single handle (destroy, free, notify).
    pub(crate) fn call_handle(&self, op: &'static str, request: u32, handle: u32) -> Result<()> {
        self.call(op, request, &mut HandleArgs { handle, pad: 0 })
    }

    /// Maps `len` bytes of the object behind `cookie`.
    /// The open's slots for kernel launches' parameter blocks.
    pub(crate) fn params(&self) -> &crate::task::params::ParamArena {
        &self.inner.params
    }

    pub(crate) fn map(&self, op: &'static str, cookie: u64, len: u64) -> Result<SharedMapping> {
        let src = self
            .inner
            .backend
            .map(cookie, len)
            .map_err(|e| e.in_op(op))?;
        let ulen = usize::try_from(len).map_err(|_| {
            Error::new(
                Errno::EOVERFLOW,
                op,
                "mapping larger than the address space",
            )
        })?;
        SharedMapping::map(src.fd.as_fd(), src.offset, ulen).map_err(|e| Error::io(op, "mmap", &e))
    }

    /// Maps the parts of one stream (`(cookie, len)` of its command ring, event ring and
    /// doorbell page): with one `mmap` when the backend's cookies name files (the mock
    /// device's) and the three lie back to back in one file, as the mock device lays a
    /// stream out; else with one `mmap` each (a kernel driver's cookies are offsets of the
    /// device node, each its own object).
    pub(crate) fn map_stream(&self, op: &'static str, parts: [(u64, u64); 3]) -> Result<[Part; 3]> {
        let backend = &self.inner.backend;
        let io = |e: std::io::Error| Error::io(op, "mmap", &e);
        let srcs = [
            backend
                .map(parts[0].0, parts[0].1)
                .map_err(|e| e.in_op(op))?,
            backend
                .map(parts[1].0, parts[1].1)
                .map_err(|e| e.in_op(op))?,
            backend
                .map(parts[2].0, parts[2].1)
                .map_err(|e| e.in_op(op))?,
        ];
        let lens = parts.map(|(_, len)| len);
        if backend.maps_files() {
            if let Some((lo, span)) = one_span(&srcs, &lens) {
                let span = usize::try_from(span).map_err(|_| {
                    Error::new(
                        Errno::EOVERFLOW,
                        op,
                        "mapping larger than the address space",
                    )
                })?;
                let map = Arc::new(SharedMapping::map(srcs[0].fd.as_fd(), lo, span).map_err(io)?);
                let part = |i: usize| {
                    let at = usize::try_from(srcs[i].offset - lo).ok();
                    let len = usize::try_from(lens[i]).ok();
                    at.zip(len)
                        .and_then(|(at, len)| Part::within(&map, at, len))
                        .ok_or_else(|| {
                            Error::new(Errno::EPROTO, op, "stream part outside its mapping")
                        })
                };
                return Ok([part(0)?, part(1)?, part(2)?]);
            }
        }
        let one = |i: usize| {
            let len = usize::try_from(lens[i]).map_err(|_| {
                Error::new(
                    Errno::EOVERFLOW,
                    op,
                    "mapping larger than the address space",
                )
            })?;
            SharedMapping::map(srcs[i].fd.as_fd(), srcs[i].offset, len)
                .map(Part::whole)
                .map_err(io)
        };
        Ok([one(0)?, one(1)?, one(2)?])
    }

    /// Issues any ioctl with raw argument bytes (`arg.len()` must be `_IOC_SIZE(request)`,
    /// else `ENOTTY`); the reply fields come back in `arg`. An escape hatch for commands the
    /// shim does not wrap (and for conformance tests): handles and addresses are checked by
    /// the driver like any others.
    pub fn raw_ioctl(&self, request: u32, arg: &mut [u8]) -> Result<()> {
        self.inner.backend.ioctl("ioctl", request, arg)
    }

    /// The GET_INFO reply read when the device was opened (limits, features, ABI version).
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// This open's client id: the `client_id` LIST_CLIENTS (`davinci-smi info -t usage`,
    /// [`Control::clients`](crate::Control::clients)) reports for it. `None` from a driver
    /// older than ABI 1.1 (no `Features::CALLER_ID`).
    pub fn client_id(&self) -> Option<u32> {
        let info = &self.inner.info;
        (info.features.contains(Features::CALLER_ID) && info.caller_id != 0)
            .then_some(info.caller_id)
    }

    /// A fresh GET_INFO (memory in use, clients attached, share mode now).
    pub fn query_info(&self) -> Result<DeviceInfo> {
        let mut info = DeviceInfo::default();
        self.call("GET_INFO", DRIVER_CMD_GET_INFO, &mut info)?;
        Ok(info)
    }

    /// Device memory allocated by all clients of the device now, every tenant's included
    /// (GET_INFO's `memory_used`, device-wide). This open's own memory, against the limit
    /// its next allocation meets, is [`usage`](Self::usage)`().memory`.
    pub fn memory_used(&self) -> Result<u64> {
        Ok(self.query_info()?.memory_used)
    }

    /// Blocks until every task submitted so far on every stream of this open has completed
    /// (`cudaDeviceSynchronize` / `aclrtSynchronizeDevice`), at most `timeout` in all
    /// (`ETIMEDOUT`). Callable from any thread while other threads own the streams: it
    /// waits in the driver for each stream's completion count (WAIT_EVENT), and needs no
    /// stream's `&mut`, so completions stay on their streams for `poll` and
    /// `Stream::synchronize` (which still reports a failed task's errno). Tasks submitted while
    /// it waits are not waited for. A stream dropped meanwhile is skipped; one the device
    /// stopped is `EIO` naming it (its `synchronize` says which task failed and why).
    pub fn synchronize(&self, timeout: Duration) -> Result<()> {
        const OP: &str = "Device::synchronize";
        let _span = crate::trace::span(self, "device synchronize").read_after();
        let until = crate::stream::wait::deadline(timeout);
        for (handle, value) in self.inner.stats.published() {
            let mut a = WaitEventArgs {
                kind: WaitKind::Stream as u32,
                handle,
                value: u64::from(value),
                timeout_ns: u64::try_from(
                    until
                        .saturating_duration_since(std::time::Instant::now())
                        .as_nanos(),
                )
                .unwrap_or(u64::MAX),
                ..Default::default()
            };
            match self.call_wait(OP, &mut a) {
                Ok(()) => {}
                // Dropped while we waited (or before we looked): nothing of it runs any more.
                Err(e) if e.is(Errno::ENOENT) || e.is(Errno::ECANCELED) => {}
                Err(e) if e.is(Errno::ETIMEDOUT) || e.is(Errno::EAGAIN) => {
                    return Err(Error::new(
                        Errno::ETIMEDOUT,
                        OP,
                        format!(
                            "stream {handle:#x} still had {} task(s) running when the {} \
                             timeout ran out",
                            value.wrapping_sub(a.current as u32),
                            crate::stream::wait::Secs(timeout)
                        ),
                    ))
                }
                Err(e) if e.is(Errno::EIO) => {
                    let why = Errno::from_code(a.status as i32)
                        .map(|s| s.name().to_string())
                        .unwrap_or_else(|| format!("status {}", a.status));
                    return Err(Error::new(
                        Errno::EIO,
                        OP,
                        format!(
                            "stream {handle:#x} was stopped by the device ({why}); synchronize \
                             that stream to learn which task failed"
                        ),
                    ));
                }
                Err(e) => return Err(e.in_op(OP)),
            }
        }
        Ok(())
    }

    /// The device's feature bits.
    pub fn features(&self) -> Features {
        self.inner.info.features
    }

    /// The in-process mock device behind an embedded open (to [`attach`](Self::attach) more
    /// clients to it); `None` for other backends.
    #[cfg(feature = "embedded")]
    pub fn mock_device(&self) -> Option<&crate::MockDevice> {
        self.inner.backend.mock_device()
    }

    /// SET_DEVICE_SHARE: exclusive (one client) or shared (many isolated clients). Admin only.
    pub fn set_share_mode(&self, mode: ShareMode) -> Result<()> {
        let mut a = DeviceShareArgs {
            mode: mode as u32,
            ..Default::default()
        };
        self.call("SET_DEVICE_SHARE", DRIVER_CMD_SET_DEVICE_SHARE, &mut a)
    }

    /// QUERY_DEVICE_SHARE: the sharing mode and the clients attached.
    pub fn share_mode(&self) -> Result<(ShareMode, u32)> {
        let mut a = DeviceShareArgs::default();
        self.call("QUERY_DEVICE_SHARE", DRIVER_CMD_QUERY_DEVICE_SHARE, &mut a)?;
        let mode = ShareMode::from_u32(a.mode).ok_or_else(|| {
            Error::new(
                Errno::EPROTO,
                "QUERY_DEVICE_SHARE",
                format!("driver reported unknown share mode {}", a.mode),
            )
        })?;
        Ok((mode, a.clients))
    }

    /// The data-path counters (doorbells, tasks, ...) of this open so far.
    /// Summed over its streams (live and dropped) on each call; each stream keeps its own (see
    /// [`Stream::stats`](crate::Stream::stats)), so the data path writes nothing shared between streams.
    pub fn stats(&self) -> DeviceStats {
        self.inner.stats.total()
    }
}

/// Where three parts of one file lie when they are back to back (in any order, none empty):
/// the lowest offset and the total length; `None` if they are in different files, overlap or
/// leave gaps.
fn one_span(srcs: &[MapFd; 3], lens: &[u64; 3]) -> Option<(u64, u64)> {
    let same = |a: &MapFd, b: &MapFd| davinci_shm::same_file(a.fd.as_fd(), b.fd.as_fd());
    if !(same(&srcs[0], &srcs[1]) && same(&srcs[0], &srcs[2])) {
        return None;
    }
    let mut spans = [0, 1, 2].map(|i| (srcs[i].offset, lens[i]));
    spans.sort_unstable();
    let mut end = spans[0].0;
    for (at, len) in spans {
        if len == 0 || at != end {
            return None;
        }
        end = at.checked_add(len)?;
    }
    Some((spans[0].0, end - spans[0].0))
}

#[cfg(all(test, feature = "embedded"))]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    fn src(file: &std::fs::File, offset: u64) -> MapFd {
        MapFd {
            fd: backend::MapFile::Owned(file.as_fd().try_clone_to_owned().unwrap()),
            offset,
        }
    }

    #[test]
    fn one_span_needs_one_file_and_parts_back_to_back() {
        let a = tempfile();
        let b = tempfile();
        let p = 4096;
        // Back to back, in any order.
        let same = [src(&a, 2 * p), src(&a, 0), src(&a, 3 * p)];
        assert_eq!(one_span(&same, &[p, 2 * p, p]), Some((0, 4 * p)));
        // A gap, an overlap, an empty part, another file.
        assert_eq!(one_span(&same, &[p, p, p]), None);
        assert_eq!(one_span(&same, &[2 * p, 2 * p, p]), None);
        assert_eq!(one_span(&same, &[p, 2 * p, 0]), None);
        let mixed = [src(&a, 2 * p), src(&b, 0), src(&a, 3 * p)];
        assert_eq!(one_span(&mixed, &[p, 2 * p, p]), None);
    }

    fn tempfile() -> std::fs::File {
        let dir = std::env::temp_dir();
        let path = dir.join(format!(
            "davinci-shim-span-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let f = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }
}
