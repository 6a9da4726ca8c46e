//! The runtime author's library for davinci devices: open a device, create contexts and
//! streams, submit tasks without system calls, poll or wait for completions, record and wait
//! for events, and manage device memory. Shaped so ACL/CUDA users feel at home:
//!
//! | davinci-shim                         | ACL                         | CUDA                    |
//! |--------------------------------------|-----------------------------|-------------------------|
//! | [`Device::embedded`], [`Device::open`] | `aclrtSetDevice`          | `cudaSetDevice`         |
//! | [`Device::create_context`]           | `aclrtCreateContext`        | `cuCtxCreate`           |
//! | [`Context::create_stream`]           | `aclrtCreateStream`         | `cudaStreamCreate`      |
//! | [`Stream::submit`] / [`Stream::submit_batch`] | (task launch)      | (kernel launch)         |
//! | [`Stream::synchronize`]              | `aclrtSynchronizeStream`    | `cudaStreamSynchronize` |
//! | [`Context::create_event`], [`Event::record`] | `aclrtRecordEvent`  | `cudaEventRecord`       |
//! | [`Stream::wait_event`]               | `aclrtStreamWaitEvent`      | `cudaStreamWaitEvent`   |
//! | [`Device::alloc`] / [`MemPool`]      | `aclrtMalloc` / mem pools   | `cudaMalloc` / caching allocators |
//! | drop of a buffer with work queued    | (stream-ordered free)       | `cudaFreeAsync`         |
//! | [`Recorded::synchronize`], [`Stream::wait_recorded`] | (wait on a record) | (wait on a record) |
//! | [`Recorded::elapsed`]                | `aclrtEventElapsedTime`     | `cudaEventElapsedTime`  |
//! | [`Stream::launch_host_func`]         | `aclrtLaunchCallback`       | `cudaLaunchHostFunc`    |
//! | [`DeviceBuffer::export`] / [`Device::import`] | `aclrtIpcMemGetExportKey` / `aclrtIpcMemImportByKey` | `cudaIpcGetMemHandle` / `cudaIpcOpenMemHandle` |
//!
//! # Quick start
//!
//! ```
//! # fn main() -> davinci_shim::Result<()> {
//! # #[cfg(feature = "embedded")] {
//! use davinci_shim::{task, Device, DeviceMem};
//! use std::time::Duration;
//!
//! // The embedded mock device; Device::open("/dev/davinci0") for the kernel driver,
//! // Device::open("mock:/run/davinci/davinci0.sock") for a davinci-mockd device.
//! let dev = Device::embedded()?;
//! let (a, b, sum) = (dev.alloc(4096)?, dev.alloc(4096)?, dev.alloc(4096)?);
//! a.write_slice(0, &[1.0f32; 1024])?;
//!
//! let ctx = dev.create_context()?;
//! let (mut producer, mut consumer) = (ctx.create_stream()?, ctx.create_stream()?);
//! let filled = ctx.create_event()?;
//! producer.submit(&task::fill(&b, 2.0f32.to_bits())?)?;
//! filled.record(&mut producer)?;
//! consumer.wait_event(&filled)?; // on the device: the add runs after the fill
//! consumer.submit(&task::add::<f32>(&sum, &a, &b)?.with_user_data(7))?;
//! consumer.synchronize(Duration::from_secs(5))?;
//! assert_eq!(sum.read_vec::<f32>(0, 1024)?, vec![3.0; 1024]);
//!
//! // Errors carry an errno, what failed and why; nothing panics.
//! let e = task::add::<f32>(&sum, &a, &dev.alloc(64)?).unwrap_err();
//! assert_eq!(e.errno(), Some(davinci_shim::Errno::EINVAL));
//! # }
//! # Ok(()) }
//! ```
//!
//! # Safe by construction
//!
//! * **Buffer lifetimes.** A [`Task`] (built by the [`task`] builders from buffers) holds a
//!   lease of every buffer it names; its stream keeps the leases until the task's completion
//!   is reaped. Dropping a [`DeviceBuffer`] or [`PoolBuffer`] with work queued on it therefore
//!   frees it in stream order: no queued task ever writes into memory handed out again. Raw
//!   [`TaskDesc`]s go through the `unsafe` [`Stream::submit_raw`].
//! * **Event lifetimes.** Likewise for events (`cudaEventDestroy`'s rule): a queued
//!   EVENT_RECORD or EVENT_WAIT ([`Event::record`], [`Stream::wait_event`],
//!   [`Stream::wait_recorded`]) holds its event until the task's completion is reaped, and a
//!   [`Recorded`] token holds it while it lives. The driver's handle is destroyed only when
//!   the [`Event`], its tokens and those tasks are all gone, so a temporary event
//!   (`s.wait_recorded(&ctx.create_event()?.record(&mut p)?)`) works and no queued wait ever
//!   names a destroyed event.
//! * **Drops.** Dropping a [`Stream`] discards what it had queued and returns within one
//!   chunk of device work (docs/abi.md, DESTROY_STREAM); then its leases and event holds go.
//! * **Signals.** A blocking wait ([`Stream::synchronize`], [`Event::synchronize`],
//!   [`Recorded::synchronize`]) returns `EINTR` when a signal handler installed without
//!   `SA_RESTART` runs on its thread; nothing is lost. Submits are not interrupted.
//! * **Threads.** [`Stream`] is `Send` (one user at a time: `&mut self`); [`Device`],
//!   [`Context`], [`Event`], [`Recorded`], [`DeviceBuffer`], [`MemPool`], [`PoolBuffer`],
//!   [`Task`], [`Control`] and [`Error`] are `Send + Sync`.
//! * **Task ids.** [`Stream::submit`] returns a [`TaskId`], the task's place in its stream;
//!   [`Completion::task`] and [`StreamError::task`] name the same ids, the shim's own
//!   EVENT_RECORD/EVENT_WAIT/NOP descriptors included.
//!
//! A complete program with error handling: `shim/examples/quickstart.rs`
//! (`cargo run -p davinci-shim --example quickstart [-- DEVICE]`). The [`task`] builders take
//! device buffers and check them on the host; [`TaskDesc`]'s raw constructors remain.
//!
//! Submitting writes descriptors into the stream's mapped command ring and publishes them
//! with one release store; the doorbell is written only while the device is asleep
//! (NEED_WAKEUP), and completions are read from the mapped event ring ([`Stream::poll`]).
//! Everything is released on drop (streams and events before their context, buffers before
//! the open). Errors are one type, [`Error`]: the errno, what failed, and the driver's message.
//!
//! Backends, one API: `/dev/davinciN` (the kernel driver), `mock:SOCKET` (a `davinci-mockd`
//! device, over the same shared memory, passed as memfds) and, with the `embedded` cargo
//! feature (on by default), the embedded mock device (the device engine on threads of this
//! process: [`Device::embedded`]). [`Device::from_env`] reads `DAVINCI_DEVICE`. [`Control`]
//! is the operators' (control) open behind `davinci-smi`. Without the `embedded` feature the
//! library links neither the mock device nor its engine.
//!
//! `unsafe` is confined to the private `rings` module (the ring ends and the doorbell over a
//! stream's mappings) and the `ioctl(2)` call of the kernel backend; the mappings themselves
//! are `davinci_shm::SharedMapping`. Every other module is `#![forbid(unsafe_code)]`.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod backend;
mod completion;
mod context;
mod control;
mod device;
mod error;
mod event;
mod event_handle;
mod export_fd;
mod export_lease;
mod hostmap;
mod kernels;
mod memory;
mod observe;
mod path;
mod pool;
mod rings;
mod shared_event;
mod stats;
mod stream;
pub mod task;
pub mod trace;
mod usage;
pub mod visible;

pub use completion::{Completion, StreamError};
pub use context::Context;
pub use control::{Control, ShareState};
/// A device fault to inject on the embedded mock device ([`Stream::inject_fault`],
/// [`MockConfig::inject`], [`MockDevice::inject`]), to test a runtime's error handling. A
/// `davinci-mockd` device takes the same faults from its command line, and can target one
/// client's streams there: `--inject 'error-at=3:EFAULT@pid=4242,streams=1'` (the kernel
/// module's `inject` parameter takes the same text).
///
/// ```
/// # fn main() -> davinci_shim::Result<()> {
/// use davinci_shim::{task, Device, Errno, Inject};
/// use std::time::Duration;
/// let dev = Device::embedded()?;
/// let ctx = dev.create_context()?;
/// let (mut faulty, mut healthy) = (ctx.create_stream()?, ctx.create_stream()?);
/// // The second task this stream takes fails as a hardware error would.
/// faulty.inject_fault(Some(Inject::ErrorAt { nth: 2, errno: Errno::EIO }))?;
/// let buf = dev.alloc(64)?;
/// for s in [&mut faulty, &mut healthy] {
///     s.submit(&task::fill(&buf, 1)?)?;
///     s.submit(&task::fill(&buf, 2)?)?;
/// }
/// let e = faulty.synchronize(Duration::from_secs(5)).unwrap_err();
/// assert!(e.is(Errno::EIO));
/// healthy.synchronize(Duration::from_secs(5))?; // only the targeted stream
/// # Ok(()) }
/// ```
#[cfg(feature = "embedded")]
#[doc(inline)]
pub use davinci_mock_device::Inject;
#[cfg(feature = "embedded")]
pub use davinci_mock_device::{InjectRule, InjectTarget, MockConfig, MockDevice};
/// Where `davinci-mockd` puts its sockets when not told otherwise.
pub use davinci_mockd_proto::default_socket_dir;
/// The kernels' parameter values (ABI 1.5): elementwise ops, reductions, norms.
pub use davinci_uapi::kernels::{EwOp, NormKind, ReduceOp};
pub use davinci_uapi::{
    ClientUsage, DevAddr, DeviceEvent, DeviceInfo, DeviceSensors, Dtype, Errno, Fault, FaultKind,
    FaultOperand, Features, KernelId, KernelInfo, Opcode, ShareMode, TaskDesc, TenantShareArgs,
    TraceRecord, THROTTLE_POWER, THROTTLE_THERMAL,
};
pub use device::Device;
pub use error::{Error, Result};
pub use event::{Event, Recorded};
pub use export_lease::Lifetime;
pub use hostmap::HostMapping;
pub use memory::{DeviceBuffer, DeviceMem, ExportTo, ExportToken};
pub use observe::{EventBatch, TraceBatch, TraceScope};
pub use path::{
    device_path_from_env, node_device, DevicePath, DeviceSource, DEFAULT_DEVICE, DEVICE_ENV,
};
pub use pool::{MemPool, PoolBuffer, PoolOptions, PoolStats};
pub use shared_event::ImportedEvent;
pub use stats::DeviceStats;
pub use stream::wait::{SpinWait, SPIN_LIMIT};
pub use stream::{Stream, StreamOptions, TaskId};
pub use task::{Element, Region, Task};
pub use trace::{Trace, TraceSession, WeakDevice};
pub use usage::{Held, Own, TenantKind, Usage};
pub use visible::{visible_devices, ASCEND_VISIBLE_ENV, VISIBLE_ENV};
