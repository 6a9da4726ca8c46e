//! Single-producer/single-consumer ring protocol over shared memory, both ends, and the
//! doorbell wake-up handshake: the one place memory ordering lives.
//!
//! `no_std`, and with `--no-default-features` nothing but `core`: the kernel module compiles
//! this crate. The layout is [`davinci_uapi::rings`]: a 192-byte header (`tail` @0, `head`
//! @64, `entries` @128, `mask` @132, `flags` @136, `dropped` @140, `error` @144,
//! `error_index` @148) followed by `entries` slots from byte 192.
//!
//! | ring    | producer (writes slots, stores tail) | consumer (reads slots, stores head) |
//! |---------|--------------------------------------|-------------------------------------|
//! | command | host: [`Producer`]`<TaskDesc>`       | device: [`DeviceConsumer`]`<TaskDesc>` |
//! | event   | device: [`DeviceProducer`]`<EventRecord>` | host: [`Consumer`]`<EventRecord>` |
//!
//! `SUBMIT_TASK` (the slow path) is [`DeviceConsumer::submit_on_behalf`]: the driver places a
//! descriptor as the client's producer would; the client then calls [`Producer::resync_tail`].
//!
//! # Shared-memory discipline
//! * No `&`/`&mut` to shared bytes: header fields are atomics made from raw pointers
//!   (`AtomicU32::from_ptr`), slots are copied whole, once, with a volatile read or write.
//!   All of it lives in `raw.rs` (`loom_mem.rs` under loom); the protocol modules have
//!   `#![forbid(unsafe_code)]`.
//! * Indices are free-running `u32`s, compared and subtracted with `wrapping_sub`, masked with
//!   the *locally known* mask (never the shared `mask` field).
//! * The device trusts nothing it reads: `tail - head > entries` is [`RingError::Corrupt`],
//!   reported and not followed. The device keeps its own command-ring head and never reads the
//!   shared one back; it reads the event-ring head but checks it against its own bookkeeping.
//!
//! # Orderings (what pairs with what)
//! | writer                                | reader                                | why |
//! |---------------------------------------|---------------------------------------|-----|
//! | `Producer::publish`: tail Release     | `DeviceConsumer::available`: tail Acquire | descriptor writes visible before `peek` |
//! | `DeviceConsumer::advance`: head Release | `Producer::free`: head Acquire      | the device's slot reads finish before the host overwrites |
//! | `DeviceProducer::publish`: tail Release | `Consumer::consume` / `available`: tail Acquire | records (and the device's work before them) visible |
//! | `Consumer::consume`: head Release     | `DeviceProducer::free`: head Acquire  | the host's record reads finish before the device overwrites |
//! | `DeviceConsumer::set_error`: ERROR flag Release | `RingRegion::error`: flags Acquire | `error`/`error_index` visible |
//! | `Doorbell::ring`: fence(Release) + volatile write | `DoorbellWatch::value`: Relaxed | a wake-up hint only: publishes nothing (see below) |
//!
//! Everything else is `Relaxed`, each with its reason in a comment: own-index loads at
//! construction, `init`, `flags()`, `dropped`, clearing NEED_WAKEUP, the error fields.
//! `docs/ordering.md` lists every site and the loom model that fails when it is weakened.
//!
//! # Doorbell suppression: the Dekker pair
//! ```text
//! host (Producer::publish)                 device (DeviceConsumer::prepare_sleep)
//!   write slots                              d0 = doorbell.value()        (caller, before)
//!   tail.store(t, Release)                   flags.fetch_or(NEED_WAKEUP, Relaxed)
//!   fence(SeqCst)                            fence(SeqCst)
//!   flags.load(Relaxed) & NEED_WAKEUP ?      tail.load(Relaxed) != head ?
//!     -> doorbell.ring(t)                      -> yes: clear NEED_WAKEUP, keep running
//!                                              -> no: sleep until doorbell != d0,
//!                                                     then clear_need_wakeup()
//! ```
//! Each side stores, fences, then loads what the other stored. The two `SeqCst` fences are
//! totally ordered, so at least one side sees the other's store: the host sees NEED_WAKEUP
//! and rings, or the device sees the new tail and does not sleep. Without either fence both
//! loads may return old values (store buffering): the device sleeps on published work and the
//! host rings nothing (the lost wake-up of liburing#541). `d0` is read *before* NEED_WAKEUP
//! is set, so a doorbell rung at any point after that changes the value and ends the sleep.
//! The device worker's loop:
//! ```text
//! loop {
//!     let n = cons.available()?;          // Acquire
//!     if n > 0 { /* peek, validate, execute, advance */ continue; }
//!     let d0 = watch.value();
//!     if cons.prepare_sleep() {
//!         futex_wait(watch.as_ptr(), d0);   // returns when the word != d0 (or spuriously)
//!         cons.clear_need_wakeup();
//!     }
//! }
//! ```
//! While the device is awake (flag clear) the host writes no doorbell at all.
//!
//! The doorbell itself publishes nothing: the device always re-reads the tail with Acquire.
//! See [`Doorbell`] for the `fence(Release)` before the MMIO write, the aarch64 `dmb oshst`
//! caveat and the `volatile-register` reference caveat.
//!
//! # Loom
//! Under `RUSTFLAGS="--cfg loom"` the same code runs over a model buffer (`loom_mem.rs`:
//! header fields are loom atomics, slots loom `UnsafeCell`s, the doorbell a loom atomic) and
//! `core/ring/tests/loom.rs` checks it:
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p davinci-ring --release --test loom`.
//! `scripts/ring-mutation-check.sh` weakens each ordering in turn and shows a model fails.
#![no_std]
#![deny(unsafe_code)]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;

mod device_end;
mod host_end;
#[cfg(loom)]
mod loom_mem;
#[cfg(not(loom))]
mod raw;
mod region;
mod slot;
mod sync;
#[cfg(all(any(test, feature = "test-util"), not(loom)))]
pub mod test_util;
#[cfg(all(test, not(loom)))]
mod tests;

pub use device_end::{DeviceConsumer, DeviceProducer, SubmitError};
pub use host_end::{Consumer, Producer, STREAM_MIN};
#[cfg(loom)]
pub use loom_mem::{doorbell_pair, Doorbell, DoorbellWatch, RingRegion, LOOM_MAX_SLOT};
#[cfg(not(loom))]
pub use raw::{Doorbell, DoorbellWatch, RingRegion};
pub use region::RingError;
pub use slot::Slot;
