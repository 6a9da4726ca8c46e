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
//! Submitting writes descriptors into the stream's mapped command ring and publishes them
//! with one release store; the doorbell is written only while the device is asleep
//! (NEED_WAKEUP), and completions are read from the mapped event ring ([`Stream::poll`]).
//! Everything is released on drop (streams and events before their context, buffers before
//! the open). Errors are one type, [`Error`]: the errno, what failed, and the driver's message.
//!
//! Backends, one API: the embedded mock device (the device engine on threads of this
//! process), `mock:SOCKET` (a `davinci-mockd` device, over the same shared memory, passed as
//! memfds) and `/dev/davinciN` (the kernel driver). [`Device::from_env`] reads
//! `DAVINCI_DEVICE`. [`Control`] is the operators' (control) open behind `davinci-smi`.
//!
//! `unsafe` is confined to the private `mapping` module (the mappings, the ring ends over
//! them, the doorbell) and the `ioctl(2)` call of the kernel backend; every other module is
//! `#![forbid(unsafe_code)]`.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod backend;
mod backend_kernel;
mod backend_socket;
mod control;
mod device;
mod error;
mod event;
mod mapping;
mod memory;
mod pool;
mod stream;

pub use control::{device_path_from_env, Control, DevicePath, ShareState, DEVICE_ENV};
pub use davinci_mock_device::{MockConfig, MockDevice};
pub use davinci_mockd_proto::default_socket_dir;
pub use davinci_uapi::{DeviceInfo, Dtype, Errno, Features, Opcode, ShareMode, TaskDesc};
pub use device::{Context, Device, DeviceStats};
pub use error::{Error, Result};
pub use event::Event;
pub use memory::{DeviceBuffer, DeviceMem};
pub use pool::{MemPool, PoolBuffer, PoolOptions, PoolStats};
pub use stream::{Completion, Stream, StreamError, StreamOptions};
