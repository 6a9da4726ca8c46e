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
mod memory;
mod path;
mod pool;
mod rings;
mod stats;
mod stream;
pub mod task;

pub use completion::{Completion, StreamError};
pub use context::Context;
pub use control::{Control, ShareState};
#[cfg(feature = "embedded")]
pub use davinci_mock_device::{Inject, MockConfig, MockDevice};
/// Where `davinci-mockd` puts its sockets when not told otherwise.
pub use davinci_mockd_proto::default_socket_dir;
pub use davinci_uapi::{
    ClientUsage, DevAddr, DeviceInfo, Dtype, Errno, Fault, FaultKind, FaultOperand, Features,
    Opcode, ShareMode, TaskDesc,
};
pub use device::Device;
pub use error::{Error, Result};
pub use event::Event;
pub use memory::{DeviceBuffer, DeviceMem};
pub use path::{device_path_from_env, DevicePath, DEFAULT_DEVICE, DEVICE_ENV};
pub use pool::{MemPool, PoolBuffer, PoolOptions, PoolStats};
pub use stats::DeviceStats;
pub use stream::wait::{SpinWait, SPIN_LIMIT};
pub use stream::{Stream, StreamOptions};
pub use task::{Element, Region};
