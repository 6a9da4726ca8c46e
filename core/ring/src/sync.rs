//! Synchronisation facade: `core` atomics normally, loom's under `cfg(loom)`, and the named
//! ordering sites.
//!
//! Every acquire, release or fence in this crate is written as [`ord`]`(Site::X, Ordering::Y)`
//! or [`fence_at`]`(Site::X, Ordering::Y)`. In ordinary builds both are the identity (inlined
//! to the plain ordering). Under `cfg(loom)` the environment variable `DAVINCI_RING_MUTANT=<Site>`
//! weakens that one site to `Relaxed` (or removes that fence), which is how
//! `scripts/ring-mutation-check.sh` shows that each of these orderings is needed by at least
//! one loom model. The one exception is [`doorbell_hardware_fence`] (a CPU barrier before MMIO,
//! not a Rust-model ordering). `Relaxed` accesses are written plainly, each with a comment
//! saying why it may be relaxed.
#![forbid(unsafe_code)]

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{fence, AtomicU32, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, Ordering};

macro_rules! sites {
    ($( $(#[doc = $doc:literal])* $name:ident, )*) => {
        /// A place in the ring code where an ordering stronger than `Relaxed` is used.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Site {
            $( $(#[doc = $doc])* $name, )*
        }

        impl Site {
            /// Every site, in source order.
            #[cfg_attr(not(loom), allow(dead_code))]
            pub(crate) const ALL: &'static [Site] = &[$(Site::$name),*];

            /// The site's name (the value `DAVINCI_RING_MUTANT` takes).
            #[cfg_attr(not(loom), allow(dead_code))]
            pub(crate) const fn name(self) -> &'static str {
                match self {
                    $( Site::$name => stringify!($name), )*
                }
            }
        }
    };
}

sites! {
    /// `Producer::free`: Acquire load of the shared head before overwriting slots.
    ProducerHeadAcquire,
    /// `Producer::publish`: Release store of the tail after the slot writes.
    ProducerTailRelease,
    /// `Producer::publish`: `fence(SeqCst)` between the tail store and the NEED_WAKEUP load.
    ProducerDekkerFence,
    /// `Consumer::available`: Acquire load of the tail (a completion count makes results visible).
    ConsumerAvailableAcquire,
    /// `Consumer::consume`: Acquire load of the tail before the slot reads.
    ConsumerTailAcquire,
    /// `Consumer::consume`: Release store of the head after the slot reads.
    ConsumerHeadRelease,
    /// `DeviceConsumer::available`: Acquire load of the tail before `peek` reads slots.
    DeviceConsumerTailAcquire,
    /// `DeviceConsumer::advance`: Release store of the head after the slot reads.
    DeviceConsumerHeadRelease,
    /// `DeviceConsumer::prepare_sleep`: `fence(SeqCst)` between setting NEED_WAKEUP and re-loading the tail.
    DeviceConsumerDekkerFence,
    /// `DeviceConsumer::set_error`: Release RMW of the ERROR flag after the error fields.
    DeviceErrorRelease,
    /// `RingRegion::error`: Acquire load of the flags before reading the error fields.
    RegionErrorAcquire,
    /// `DeviceProducer::free`: Acquire load of the (untrusted) head before overwriting slots.
    DeviceProducerHeadAcquire,
    /// `DeviceProducer::publish`: Release store of the tail after the slot writes.
    DeviceProducerTailRelease,
    /// `DeviceConsumer::prepare_stall_sleep`: `fence(SeqCst)` between setting NEED_WAKEUP and re-loading the event-ring head.
    DeviceStallDekkerFence,
    /// `Producer::wake_needed_after_reap`: `fence(SeqCst)` between the host's event-ring head store and its NEED_WAKEUP load.
    HostReapDekkerFence,
}

/// The ordering to use at `site`: `o`, or `Relaxed` when loom runs with this site mutated.
#[inline(always)]
pub(crate) fn ord(site: Site, o: Ordering) -> Ordering {
    #[cfg(loom)]
    if mutation::active(site) {
        return Ordering::Relaxed;
    }
    let _ = site;
    o
}

/// `fence(o)` at `site`; under loom with this site mutated, no fence at all.
#[inline(always)]
pub(crate) fn fence_at(site: Site, o: Ordering) {
    #[cfg(loom)]
    if mutation::active(site) {
        return;
    }
    let _ = site;
    fence(o);
}

/// The `fence(Release)` before the doorbell's MMIO write (`Doorbell::ring`, ordinary builds).
///
/// Not an ordering of the Rust memory model: a Release fence orders nothing before a
/// *non-atomic* (volatile) write, and the ring protocol does not rely on it (loom's doorbell is
/// a Relaxed store and `need_wakeup_handshake` passes). It is kept for real devices, which
/// learn of work from the doorbell and read the ring by DMA: it keeps the slot and tail stores
/// ahead of the doorbell store in the CPU (`dmb ish` on aarch64, a compiler barrier on x86).
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn doorbell_hardware_fence() {
    fence(Ordering::Release);
}

#[cfg(loom)]
mod mutation {
    extern crate std;

    use super::Site;
    use std::sync::OnceLock;

    static MUTANT: OnceLock<Option<Site>> = OnceLock::new();

    /// Whether `DAVINCI_RING_MUTANT` names `site`. An unknown name panics, so a typo in the mutation
    /// script cannot pass for a mutation that no model catches.
    pub(super) fn active(site: Site) -> bool {
        let mutant = MUTANT.get_or_init(|| {
            let name = std::env::var("DAVINCI_RING_MUTANT")
                .ok()
                .filter(|n| !n.is_empty())?;
            match Site::ALL.iter().find(|s| s.name() == name) {
                Some(s) => Some(*s),
                None => {
                    panic!("DAVINCI_RING_MUTANT={name} is not an ordering site of davinci-ring")
                }
            }
        });
        *mutant == Some(site)
    }
}
