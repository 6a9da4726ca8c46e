//! Fault injection: a device fault armed on a stream (or on every stream), so a runtime's error
//! handling can be tested against the mock device. The engine fires it
//! ([`DeviceCore::run_stream`](crate::DeviceCore::run_stream)); the host arms it
//! ([`DeviceCore::inject`](crate::DeviceCore::inject)). No client can reach it.

use davinci_uapi::Errno;

/// A device fault to inject, so a runtime's error handling can be tested against the mock
/// device (`MockConfig::inject`, `MockDevice::inject`, `davinci-mockd --inject`). Counted per
/// stream, in tasks the stream takes from the moment the fault is armed (the first is 1);
/// each fires once. docs/abi.md 5.6 says what a host sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inject {
    /// The `nth` task completes with `-errno` (no fault detail: a device error, not a bad
    /// descriptor) and the stream enters the error state with `errno`.
    ErrorAt {
        /// Which task (1 = the next one).
        nth: u64,
        /// The status it completes with (positive; `EIO` for a hardware error).
        errno: Errno,
    },
    /// The `nth` task is taken (the command ring's head moves past it) but never completes,
    /// and nothing after it is taken: waits for it time out.
    HangAt {
        /// Which task.
        nth: u64,
    },
    /// The stream stops consuming before the `nth` task: its command ring fills up.
    StopAt {
        /// Which task.
        nth: u64,
    },
}

impl Inject {
    /// The task it fires on (at least 1).
    pub fn nth(&self) -> u64 {
        match *self {
            Inject::ErrorAt { nth, .. } | Inject::HangAt { nth } | Inject::StopAt { nth } => {
                nth.max(1)
            }
        }
    }
}
