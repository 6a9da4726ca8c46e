//! [`Device`] (one open of a davinci device) and [`Context`].
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::os::fd::AsFd;

use davinci_shm::SharedMapping;
use davinci_uapi::*;

use crate::backend::{self, Backend, Role};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::memory::DeviceBuffer;
use crate::path::DevicePath;
use crate::stream::{Stream, StreamOptions};

/// Counters of the data path of one [`Stream`], written only by that stream (on its own cache
/// lines, so streams on different threads never write a shared line per task) and summed over
/// the live streams and the retired totals by [`Device::stats`].
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Stats {
    pub(crate) tasks: AtomicU64,
    pub(crate) doorbells: AtomicU64,
    pub(crate) futex_wakes: AtomicU64,
    pub(crate) notifies: AtomicU64,
    pub(crate) slow_submits: AtomicU64,
    pub(crate) full_waits: AtomicU64,
}

impl Stats {
    /// Adds `n` to a counter that only its stream's `&mut self` paths write: a plain load and
    /// store (no locked read-modify-write on the hot path). Readers may see the old value.
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64, n: u64) {
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    pub(crate) fn snapshot(&self) -> DeviceStats {
        DeviceStats {
            tasks_submitted: self.tasks.load(Ordering::Relaxed),
            doorbells: self.doorbells.load(Ordering::Relaxed),
            futex_wakes: self.futex_wakes.load(Ordering::Relaxed),
            notify_ioctls: self.notifies.load(Ordering::Relaxed),
            slow_submits: self.slow_submits.load(Ordering::Relaxed),
            ring_full_waits: self.full_waits.load(Ordering::Relaxed),
        }
    }
}

/// The per-stream counters of one open: those of its live streams, and the totals of the
/// streams already dropped. Locked only when a stream is created or dropped and on reads.
#[derive(Debug, Default)]
pub(crate) struct StatsRegistry {
    live: Vec<Arc<Stats>>,
    retired: DeviceStats,
}

/// A snapshot of the data-path counters of a [`Device`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Descriptors published through stream rings (fast path) and SUBMIT_TASK.
    pub tasks_submitted: u64,
    /// Wake-ups of a sleeping device (one per publish or reap that found NEED_WAKEUP set): a
    /// doorbell write, or a NOTIFY on a device without a doorbell the host can write (the
    /// kernel module's software engine).
    pub doorbells: u64,
    /// `FUTEX_WAKE`s after a doorbell write (software devices).
    pub futex_wakes: u64,
    /// NOTIFY ioctls: the wake-ups of a device with neither an MMIO nor a futex doorbell
    /// (also counted in `doorbells`), and explicit `Stream::notify` calls.
    pub notify_ioctls: u64,
    /// SUBMIT_TASK ioctls (the slow path).
    pub slow_submits: u64,
    /// Times a submit found the command ring full and had to wait for the device.
    pub ring_full_waits: u64,
}

impl DeviceStats {
    /// Doorbell writes per 1000 tasks submitted (0 if none were).
    pub fn doorbells_per_1000_tasks(&self) -> f64 {
        if self.tasks_submitted == 0 {
            0.0
        } else {
            self.doorbells as f64 * 1000.0 / self.tasks_submitted as f64
        }
    }

    /// The counters accumulated since `earlier`.
    pub fn since(&self, earlier: &DeviceStats) -> DeviceStats {
        self.zip(earlier, u64::wrapping_sub)
    }

    fn zip(&self, o: &DeviceStats, f: impl Fn(u64, u64) -> u64) -> DeviceStats {
        DeviceStats {
            tasks_submitted: f(self.tasks_submitted, o.tasks_submitted),
            doorbells: f(self.doorbells, o.doorbells),
            futex_wakes: f(self.futex_wakes, o.futex_wakes),
            notify_ioctls: f(self.notify_ioctls, o.notify_ioctls),
            slow_submits: f(self.slow_submits, o.slow_submits),
            ring_full_waits: f(self.ring_full_waits, o.ring_full_waits),
        }
    }
}

pub(crate) struct DeviceInner {
    backend: Box<dyn Backend>,
    info: DeviceInfo,
    stats: Mutex<StatsRegistry>,
}

impl DeviceInner {
    fn registry(&self) -> std::sync::MutexGuard<'_, StatsRegistry> {
        // A panic elsewhere while holding it leaves only counters behind: still usable.
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counters for a new stream, summed into [`Device::stats`] from now on.
    pub(crate) fn register_stream(&self) -> Arc<Stats> {
        let s = Arc::new(Stats::default());
        self.registry().live.push(Arc::clone(&s));
        s
    }

    /// A dropped stream's counters move into the retired totals.
    pub(crate) fn retire_stream(&self, s: &Arc<Stats>) {
        let mut r = self.registry();
        if let Some(i) = r.live.iter().position(|x| Arc::ptr_eq(x, s)) {
            r.live.swap_remove(i);
            r.retired = r.retired.zip(&s.snapshot(), u64::wrapping_add);
        }
    }
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
/// stream.submit(&davinci_shim::TaskDesc::fill(1, buf.dev_addr(), 4096, 7))?;
/// stream.synchronize(Duration::from_secs(5))?;
/// assert_eq!(buf.read_vec::<u32>(0, 4)?, vec![7; 4]);
/// # }
/// # Ok(()) }
/// ```
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
            Some(id) => write!(f, " (client {id})"),
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
        Self::attach(&crate::MockDevice::new(config))
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

    /// Opens the device named by `DAVINCI_DEVICE` (any [`open`](Self::open) path), or
    /// `/dev/davinci0` when it is not set.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn from_env() -> Result<Device> {
        Self::open_path(&DevicePath::from_env()?)
    }

    fn from_backend(backend: Box<dyn Backend>, info: DeviceInfo) -> Device {
        Device {
            inner: Arc::new(DeviceInner {
                backend,
                info,
                stats: Mutex::new(StatsRegistry::default()),
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

    /// A command whose argument is a single handle (destroy, free, notify).
    pub(crate) fn call_handle(&self, op: &'static str, request: u32, handle: u32) -> Result<()> {
        self.call(op, request, &mut HandleArgs { handle, pad: 0 })
    }

    /// Maps `len` bytes of the object behind `cookie`.
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

    /// Device memory allocated by all clients now (GET_INFO).
    pub fn memory_used(&self) -> Result<u64> {
        Ok(self.query_info()?.memory_used)
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

    /// Creates a context (`aclrtCreateContext` / `cuCtxCreate`).
    pub fn create_context(&self) -> Result<Context> {
        let mut a = CreateContextArgs::default();
        self.call("CREATE_CONTEXT", DRIVER_CMD_CREATE_CONTEXT, &mut a)?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                dev: self.clone(),
                handle: a.handle,
            }),
        })
    }

    /// Allocates `len` bytes of device memory (`aclrtMalloc` / `cudaMalloc`), zeroed, with a
    /// host view. Each call is a driver round trip; for many small buffers use a
    /// [`MemPool`](crate::MemPool).
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer> {
        DeviceBuffer::new(self, len)
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
    /// [`Stream::stats`]), so the data path writes nothing shared between streams.
    pub fn stats(&self) -> DeviceStats {
        let r = self.inner.registry();
        r.live.iter().fold(r.retired, |acc, s| {
            acc.zip(&s.snapshot(), u64::wrapping_add)
        })
    }
}

pub(crate) struct ContextInner {
    pub(crate) dev: Device,
    pub(crate) handle: u32,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // Nothing to do on failure: the open's close releases it anyway.
        let _ = self
            .dev
            .call_handle("DESTROY_CONTEXT", DRIVER_CMD_DESTROY_CONTEXT, self.handle);
    }
}

/// A context: groups streams and events (events are visible to the streams of their own
/// context only). Streams and events keep their context alive: it is destroyed when the
/// context value and all of them are gone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("handle", &self.inner.handle)
            .finish()
    }
}

impl Context {
    /// The driver's handle of this context.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// Creates a stream with the default ring depths (`aclrtCreateStream` /
    /// `cudaStreamCreate`).
    pub fn create_stream(&self) -> Result<Stream> {
        self.create_stream_with(StreamOptions::default())
    }

    /// Creates a stream with explicit ring depths and options.
    pub fn create_stream_with(&self, options: StreamOptions) -> Result<Stream> {
        Stream::new(self.inner.clone(), options)
    }

    /// Creates an event (`aclrtCreateEvent` / `cudaEventCreate`).
    pub fn create_event(&self) -> Result<Event> {
        Event::new(self.inner.clone())
    }

    /// Allocates device memory (memory belongs to the open, not the context; same as
    /// [`Device::alloc`]).
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer> {
        self.inner.dev.alloc(len)
    }
}
