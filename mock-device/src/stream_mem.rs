//! [`StreamMem`]: one stream's shared memory (command ring, event ring, doorbell page, each a
//! sealed [`SharedRegion`]), the device-side ring views over it and the doorbell watch. The
//! one module of this crate with `unsafe`: building those views, whose soundness rests on
//! this type owning the mappings they point into.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};

use davinci_ring::{DoorbellWatch, RingError, RingRegion};
use davinci_shm::futex_wake;
use davinci_uapi::mmap::DOORBELL_REG_OFFSET;
use davinci_uapi::task::{EVENT_RECORD_SIZE, TASK_DESC_SIZE};
use davinci_uapi::DOORBELL_SIZE;

use crate::memfd::SharedRegion;

/// Which memfd of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamPart {
    /// The command ring.
    Cmd,
    /// The event ring.
    Event,
    /// The doorbell page.
    Doorbell,
}

/// The shared memory of one stream: command ring, event ring and doorbell page, each its own
/// memfd (so the host maps exactly what the cookie names), plus the device's watch of the
/// doorbell word. Shared (`Arc`) between the device table and the stream's poller, which keeps
/// the doorbell mapped while it sleeps on it.
#[derive(Debug)]
pub struct StreamMem {
    // Field order = drop order: the watch (a raw pointer into `doorbell`) goes first.
    watch: DoorbellWatch,
    cmd: SharedRegion,
    event: SharedRegion,
    doorbell: SharedRegion,
    cmd_entries: u32,
    event_entries: u32,
}

impl StreamMem {
    /// Creates the three memfds (zeroed) and maps them.
    pub(crate) fn new(
        cmd_entries: u32,
        cmd_bytes: usize,
        event_entries: u32,
        event_bytes: usize,
    ) -> io::Result<Self> {
        let cmd = SharedRegion::new("davinci-cmd-ring", cmd_bytes)?;
        let event = SharedRegion::new("davinci-event-ring", event_bytes)?;
        let doorbell = SharedRegion::new("davinci-doorbell", DOORBELL_SIZE as usize)?;
        // SAFETY: the doorbell register is the first word of the doorbell page (offset
        // DOORBELL_REG_OFFSET = 0), 4-byte aligned (page aligned) and readable/writable for as
        // long as `doorbell` is mapped. The watch is a field of the same struct declared before
        // `doorbell`, so it is dropped first and never outlives the mapping. Every access to
        // the word from this process is atomic (the watch, `kick`), or the host's single
        // aligned volatile store (`Doorbell::ring`), as the watch's contract requires.
        let watch = unsafe { DoorbellWatch::new(doorbell.map().as_ptr().cast::<u32>()) };
        Ok(Self {
            watch,
            cmd,
            event,
            doorbell,
            cmd_entries,
            event_entries,
        })
    }

    /// Device-side views of the two rings.
    ///
    /// The views point into this `StreamMem`'s mappings: they must not outlive it. The device
    /// core keeps the views in its stream entry next to the `Arc<StreamMem>` it was given, and
    /// drops the views before handing the `Arc` back (`Platform::release_stream`); the `Arc`
    /// keeps the mappings alive for as long as any holder (e.g. a sleeping poller) has one.
    pub(crate) fn ring_regions(&self) -> Result<(RingRegion, RingRegion), RingError> {
        // SAFETY: `cmd` is a live read/write mapping of `cmd.len()` bytes, page (so 64-byte)
        // aligned. Its lifetime: see the doc comment (the core drops ring views before the
        // `Arc<StreamMem>` that owns the mapping). Within this process nothing else touches it
        // except the host's ring ends (one producer) over its own mapping of the same memfd.
        let cmd = unsafe {
            RingRegion::new(
                self.cmd.map().as_ptr(),
                self.cmd.map().len(),
                self.cmd_entries,
                TASK_DESC_SIZE,
            )
        }?;
        // SAFETY: as above, for the event ring (the host holds one consumer end).
        let event = unsafe {
            RingRegion::new(
                self.event.map().as_ptr(),
                self.event.map().len(),
                self.event_entries,
                EVENT_RECORD_SIZE,
            )
        }?;
        Ok((cmd, event))
    }

    /// A new descriptor of one part's memfd, for the host's mmap.
    pub(crate) fn dup_fd(&self, part: StreamPart) -> io::Result<OwnedFd> {
        match part {
            StreamPart::Cmd => self.cmd.dup_fd(),
            StreamPart::Event => self.event.dup_fd(),
            StreamPart::Doorbell => self.doorbell.dup_fd(),
        }
    }

    /// The doorbell word's current value (Acquire).
    pub(crate) fn doorbell_value(&self) -> u32 {
        self.watch.value()
    }

    /// The doorbell word (offset 0 of the doorbell page, which is never shorter), for a
    /// poller's `futex_waitv`.
    pub(crate) fn doorbell_word(&self) -> Option<&AtomicU32> {
        self.doorbell.map().word(DOORBELL_REG_OFFSET).ok()
    }

    /// Wakes the stream's poller from the device side (SUBMIT_TASK, NOTIFY, teardown):
    /// changes the doorbell word, so a poller about to wait on the old value does not sleep,
    /// then `FUTEX_WAKE`s it.
    pub(crate) fn kick(&self) {
        if let Some(w) = self.doorbell_word() {
            w.fetch_add(1, Ordering::AcqRel);
            futex_wake(w);
        }
    }

    /// Releases the pages of the stream's three memfds now: a destroyed stream pins no memory
    /// through a client's leftover mappings, which read as zeros from then on (docs/abi.md 4,
    /// as the kernel driver revokes them). The device no longer runs the stream (driver-core
    /// dropped its ring views), and a poller still holding it was kicked first.
    pub(crate) fn discard(&self) {
        for r in [&self.cmd, &self.event, &self.doorbell] {
            let _ = r.discard(0, r.map().len() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kick_changes_the_doorbell() {
        let m = StreamMem::new(8, 4096, 8, 4096).unwrap();
        let d0 = m.doorbell_value();
        m.kick();
        // A poller that read d0 before arming NEED_WAKEUP and now waits on it returns at once
        // (futex_waitv compares the value; shm's tests show that).
        assert_ne!(m.doorbell_value(), d0);
        assert_eq!(
            m.doorbell_word().map(|w| w.load(Ordering::Acquire)),
            Some(m.doorbell_value())
        );
    }
}
