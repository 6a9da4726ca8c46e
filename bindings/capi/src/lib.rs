//! `libdavinci`: the safe runtime library (`davinci-shim`) for C programs.
//!
//! Built as `libdavinci.so` and `libdavinci.a`, declared by the generated header
//! `bindings/capi/include/davinci/runtime.h` (`cargo xtask gen-header`; the header's comments are the
//! doc comments below), installed with a pkg-config file by `scripts/capi-install.sh`. A
//! guide: `docs/runtimes.md`; a complete program: `bindings/capi/examples/quickstart.c`.
//!
//! The rules every entry point keeps:
//!
//! * **Errors.** Every fallible function returns `int`: 0 (or a count, where documented) on
//!   success, a negative errno on failure, and then `davinci_last_error()` (thread-local)
//!   says which function failed, the errno's name and the driver's message. NULL pointers
//!   and bad lengths are `-EINVAL`, naming the argument.
//! * **No panic crosses into C.** Each body runs under `catch_unwind`; a caught panic is
//!   `-EIO` with a message saying so.
//! * **Handles** are opaque and owned by the caller: made through an out-parameter, freed
//!   by their `_destroy` (or `davinci_buffer_free`, `davinci_host_view_release`), which
//!   takes NULL. Handles may be freed in any order: what a handle needs (its device, its
//!   context) stays alive while it lives.
//! * **Lifetimes.** A task holds every buffer it names until it has run and its stream
//!   reaped it (or the stream is destroyed): freeing a buffer with work queued on it is safe
//!   and frees it in stream order, as in Rust. A host view (`davinci_buffer_map`) holds its
//!   buffer the same way until it is released.
//! * **Threads.** Devices, contexts, events, records, buffers, host views, pools and built
//!   tasks may be used from any thread at once; a stream serialises its callers with a lock
//!   (its blocking calls hold it while they wait). A handle must not be destroyed while
//!   another thread uses it.
#![deny(unsafe_code)]
// The handle and struct types carry their C names (`davinci_device`), which the header keeps.
#![allow(non_camel_case_types)]

// In the header's order (cbindgen reads the modules as declared).
mod device;

mod info;

mod memory;

mod lease;

mod hostview;

mod task;

mod kernels;

mod stream;

mod event;

mod usage;

mod trace;

mod ccl;

mod ccl_calls;

mod ffi;

mod words;

pub use ccl::*;
pub use ccl_calls::*;
pub use device::*;
pub use event::*;
pub use hostview::*;
pub use info::*;
pub use lease::*;
pub use memory::*;
pub use stream::*;
pub use task::*;
pub use trace::*;
pub use usage::*;

/// Major version of this library (`davinci_runtime_version() >> 16`): changes when a program
/// built against an older header may no longer work.
pub const DAVINCI_RUNTIME_VERSION_MAJOR: u32 = 0;
/// Minor version (`(davinci_runtime_version() >> 8) & 0xff`): additions.
pub const DAVINCI_RUNTIME_VERSION_MINOR: u32 = 1;
/// Patch version (`davinci_runtime_version() & 0xff`).
pub const DAVINCI_RUNTIME_VERSION_PATCH: u32 = 0;
/// The version of the header, `MAJOR << 16 | MINOR << 8 | PATCH`: compare it with
/// `davinci_runtime_version()`, the version of the library linked.
pub const DAVINCI_RUNTIME_VERSION: u32 = 0x0000_0100;
