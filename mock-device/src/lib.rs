//! The device without hardware: runs the driver-core engine on threads of this process, for
//! the shim's `Device::embedded()` and for the `davinci-mockd` daemon (crate `davinci-mockd`),
//! which serves it on sockets.
//!
//! * [`MockPlatform`]: driver-core's `Platform` over memfds: device memory (one sealed memfd
//!   per allocation, punched empty when freed), one memfd per stream (rings and doorbell), a futex
//!   word for WAIT_EVENT sleepers, `FUTEX_WAKE` for stream kicks.
//! * [`MockDevice`]: the device behind a reader-writer lock (control path exclusive,
//!   pollers shared), a bounded set of poller threads serving all its streams (run, spin,
//!   arm NEED_WAKEUP, `futex_waitv` on the doorbells), the blocking half of WAIT_EVENT
//!   (in the caller's thread, or handed back as a [`PendingWait`] for one thread to serve
//!   many: [`MockDevice::ioctl_start`], [`MockDevice::check_waits`]),
//!   [`MockDevice::map`] which resolves mmap cookies to memfd descriptors, and fault
//!   injection ([`Inject`], [`MockDevice::inject`], [`MockDevice::reset`]).
//! * [`MockConfig`] and [`local_open_params`]: what a device is made with and how the calling
//!   process opens it.
//! * `test_util` (feature `test-util`): the fd-attack harness its tests and the fuzz target
//!   `mock_fd_ops` share.
//!
//! The modules, by role: `mock_device` (the handle and its control path), `state` (what the
//! handles and the pollers share, behind which locks), `pollers` (the poller threads and
//! their set), `waits` (WAIT_EVENT sleepers), `config`, `platform`, `memfd`, `stream_mem`, `pool` (memfds made
//! ahead of time and released memory let go of after the reply, [`MockDevice::tidy`]),
//! `tidier` (a thread doing that tidying for a host with no moment after its replies, the
//! embedded device: [`MockDevice::tidy_in_background`]).
//!
//! Shared memory is `davinci_shm::SharedMapping` over sealed memfds (`memfd`). The only
//! `unsafe` left here builds the device's ring views and doorbell watch over a stream's
//! mappings (the private `stream_mem` module); every other module is
//! `#![forbid(unsafe_code)]`.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod config;
mod memfd;
mod mock_device;
mod platform;
mod pollers;
mod pool;
mod state;
mod stream_mem;
#[cfg(feature = "test-util")]
pub mod test_util;
mod tidier;
mod waits;

pub use config::{derived_uuid, local_open_params, uuid_from_seed, MockConfig, Presented};
pub use davinci_driver_core::{
    Error as CoreError, Inject, InjectRule, InjectTarget, NoUserMem, OpenError, OpenParams, Quota,
    Result as CoreResult, Role, Tenant, UserMem, MAX_CLIENT_OPENS,
};
pub use memfd::MemFd;
pub use mock_device::{MapSource, MockDevice, SharedMapSource};
pub use platform::MockPlatform;
/// Most memfds a device keeps made (and mapped) ahead of time ([`MockDevice::tidy_after_replies`]).
pub const POOLED_MEMFDS: usize = pool::MAX_READY;
pub use stream_mem::StreamMem;
pub use waits::{PendingWait, Started, WaitCheck};
