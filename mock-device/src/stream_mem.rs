//! [`StreamMem`]: one stream's shared memory (command ring, event ring and doorbell page at
//! offsets of one sealed [`SharedRegion`]), the device-side ring views over it and the
//! doorbell watch. The one module of this crate with `unsafe`: building those views, whose
//! soundness rests on this type owning the mapping they point into.
#![allow(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

use davinci_ring::{DoorbellWatch, RingError, RingRegion};
use davinci_shm::futex_wake;
use davinci_uapi::mmap::DOORBELL_REG_OFFSET;
use davinci_uapi::task::{EVENT_RECORD_SIZE, TASK_DESC_SIZE};
use davinci_uapi::DOORBELL_SIZE;

use crate::memfd::{MemFd, Sealing, SharedRegion};
use crate::pool::RegionPool;

/// Which part of a stream's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamPart {
    /// The command ring.
    Cmd,
    /// The event ring.
    Event,
    /// The doorbell page.
    Doorbell,
}

/// Where the parts of a stream lie in its memfd: each starts on a page of this machine (so
/// the host can map it at its offset whatever the kernel's page size), in the order command
/// ring, event ring, doorbell page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Offset and length of the command ring.
    pub(crate) cmd: (usize, usize),
    /// Offset and length of the event ring.
    pub(crate) event: (usize, usize),
    /// Offset and length of the doorbell page.
    pub(crate) doorbell: (usize, usize),
    /// The file's length.
    pub(crate) len: usize,
}

/// This machine's page size (at least 4096).
fn host_page() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096).max(4096)
}

impl Layout {
    /// The layout of rings of `cmd_bytes` and `event_bytes` (`None` if it overflows).
    pub(crate) fn new(cmd_bytes: usize, event_bytes: usize) -> Option<Self> {
        let page = host_page();
        let up = |n: usize| n.checked_next_multiple_of(page);
        let event_at = up(cmd_bytes)?;
        let bell_at = up(event_at.checked_add(event_bytes)?)?;
        let bell = DOORBELL_SIZE as usize;
        let len = up(bell_at.checked_add(bell)?)?;
        Some(Self {
            cmd: (0, cmd_bytes),
            event: (event_at, event_bytes),
            doorbell: (bell_at, bell),
            len,
        })
    }

    /// Offset and length of `part`.
    pub(crate) fn part(&self, part: StreamPart) -> (usize, usize) {
        match part {
            StreamPart::Cmd => self.cmd,
            StreamPart::Event => self.event,
            StreamPart::Doorbell => self.doorbell,
        }
    }
}

/// The shared memory of one stream: command ring, event ring and doorbell page at the offsets
/// of [`Layout`] in one memfd (one `memfd_create`, one seal, one device mapping, one punch;
/// the host maps each part's cookie at its offset), plus the device's watch of the doorbell
/// word. Shared (`Arc`) between the device table and the stream's poller, which keeps the
/// doorbell mapped while it sleeps on it.
#[derive(Debug)]
pub struct StreamMem {
    // Field order = drop order: the watch (a raw pointer into `region`) goes first.
    watch: DoorbellWatch,
    region: SharedRegion,
    layout: Layout,
    cmd_entries: u32,
    event_entries: u32,
}

impl StreamMem {
    /// Creates the stream's memfd (zeroed) and maps it.
    pub(crate) fn new(
        pool: &RegionPool,
        cmd_entries: u32,
        cmd_bytes: usize,
        event_entries: u32,
        event_bytes: usize,
    ) -> io::Result<Self> {
        let layout = Layout::new(cmd_bytes, event_bytes)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "stream size overflows"))?;
        let region = pool.take("davinci-stream", layout.len, Sealing::Fixed)?;
        let bell = region
            .map()
            .word(layout.doorbell.0 as u64 + DOORBELL_REG_OFFSET)
            .map_err(|_| io::Error::other("doorbell outside the stream's mapping"))?
            .as_ptr();
        // SAFETY: the doorbell register is a word of the doorbell page inside `region`'s
        // mapping (`word` checked the bounds and the 4-byte alignment), readable and writable
        // for as long as `region` is mapped. The watch is a field of the same struct declared
        // before `region`, so it is dropped first and never outlives the mapping. Every access
        // to the word from this process is atomic (the watch, `kick`), or the host's single
        // aligned volatile store (`Doorbell::ring`), as the watch's contract requires.
        let watch = unsafe { DoorbellWatch::new(bell) };
        Ok(Self {
            watch,
            region,
            layout,
            cmd_entries,
            event_entries,
        })
    }

    /// Device-side views of the two rings.
    ///
    /// The views point into this `StreamMem`'s mapping: they must not outlive it. The device
    /// core keeps the views in its stream entry next to the `Arc<StreamMem>` it was given, and
    /// drops the views before handing the `Arc` back (`Platform::release_stream`); the `Arc`
    /// keeps the mapping alive for as long as any holder (e.g. a sleeping poller) has one.
    pub(crate) fn ring_regions(&self) -> Result<(RingRegion, RingRegion), RingError> {
        let base = self.region.map().as_ptr();
        let (cmd_at, cmd_len) = self.layout.cmd;
        let (event_at, event_len) = self.layout.event;
        // `Layout::new` put both rings inside the file, page aligned, without overlap; the
        // region maps the whole file (`layout.len` bytes).
        debug_assert!(cmd_at + cmd_len <= event_at && event_at + event_len <= self.layout.len);
        // SAFETY: `[base + cmd_at, + cmd_len)` lies inside the live read/write mapping of
        // `layout.len` bytes (the layout puts it there), page (so 64-byte) aligned, and does
        // not overlap the event ring or the doorbell. Its lifetime: see the doc comment (the
        // core drops ring views before the `Arc<StreamMem>` that owns the mapping). Within
        // this process nothing else touches it except the host's ring ends (one producer)
        // over its own mapping of the same memfd.
        let cmd = unsafe {
            RingRegion::new(base.add(cmd_at), cmd_len, self.cmd_entries, TASK_DESC_SIZE)
        }?;
        // SAFETY: as above, for the event ring at its own offset (the host holds one
        // consumer end).
        let event = unsafe {
            RingRegion::new(
                base.add(event_at),
                event_len,
                self.event_entries,
                EVENT_RECORD_SIZE,
            )
        }?;
        Ok((cmd, event))
    }

    /// The stream's memfd (shared, no `dup`), for the host's mmap of `part`, and the offset
    /// of `part` in it.
    pub(crate) fn fd(&self, part: StreamPart) -> (MemFd, u64) {
        (self.region.fd(), self.layout.part(part).0 as u64)
    }

    /// The doorbell word's current value (Acquire).
    pub(crate) fn doorbell_value(&self) -> u32 {
        self.watch.value()
    }

    /// The doorbell word (the register of the doorbell page), for a poller's `futex_waitv`.
    pub(crate) fn doorbell_word(&self) -> Option<&AtomicU32> {
        self.region
            .map()
            .word(self.layout.doorbell.0 as u64 + DOORBELL_REG_OFFSET)
            .ok()
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

    /// [`kick`](Self::kick) without the wake: changes the doorbell word only, so a poller
    /// about to sleep on the old value does not (one asleep is woken another way).
    pub(crate) fn bump(&self) {
        if let Some(w) = self.doorbell_word() {
            w.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Releases the pages of the stream's memfd now (one punch of the whole file): a
    /// destroyed stream pins no memory through a client's leftover mappings, which read as
    /// zeros from then on (docs/abi.md 4, as the kernel driver revokes them). The device no
    /// longer runs the stream (driver-core dropped its ring views), and a poller still
    /// holding it was kicked first.
    pub(crate) fn discard(&self) {
        let _ = self.region.discard(0, self.layout.len as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use davinci_shm::SharedMapping;
    use std::os::fd::AsFd;

    #[test]
    fn kick_changes_the_doorbell() {
        let m = StreamMem::new(&RegionPool::default(), 8, 4096, 8, 4096).unwrap();
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

    #[test]
    fn the_parts_lie_page_aligned_in_order_without_overlap() {
        let page = host_page();
        for (c, e) in [
            (4096, 4096),
            (8192, 4096),
            (4096, 65536),
            (1 << 20, 1 << 21),
        ] {
            let l = Layout::new(c, e).unwrap();
            assert_eq!(l.cmd, (0, c));
            assert!(l.event.0 >= c && l.event.0.is_multiple_of(page));
            assert!(l.doorbell.0 >= l.event.0 + e && l.doorbell.0.is_multiple_of(page));
            assert_eq!(l.doorbell.1, DOORBELL_SIZE as usize);
            assert!(l.len >= l.doorbell.0 + l.doorbell.1 && l.len.is_multiple_of(page));
            assert!(l.len < l.doorbell.0 + l.doorbell.1 + page);
        }
        assert_eq!(Layout::new(usize::MAX - 4096, 4096), None);
    }

    /// What the host maps at each part's offset is that part and nothing else: the device's
    /// ring headers show through the command and event ring mappings at their own offsets,
    /// a doorbell rung through the host's doorbell mapping is the word the device watches,
    /// and it changes no byte of either ring.
    #[test]
    fn each_part_maps_at_its_offset_and_nowhere_else() {
        let m = StreamMem::new(&RegionPool::default(), 32, 4096, 128, 8192).unwrap();
        let (cmd, event) = m.ring_regions().unwrap();
        cmd.init();
        event.init();
        let map = |part| {
            let (fd, off) = m.fd(part);
            let (at, len) = m.layout.part(part);
            assert_eq!(off, at as u64);
            SharedMapping::map(fd.as_fd(), off, len).unwrap()
        };
        let (c, e, d) = (
            map(StreamPart::Cmd),
            map(StreamPart::Event),
            map(StreamPart::Doorbell),
        );
        let snapshot = |s: &SharedMapping| {
            let mut b = vec![0u8; s.len()];
            s.read(0, &mut b).unwrap();
            b
        };
        // The ring headers the device initialised (entries, mask) at each ring's own offset.
        let header = davinci_uapi::RingOffsets::standard(TASK_DESC_SIZE as u32);
        let entries =
            |s: &SharedMapping, off: u32| s.word(u64::from(off)).unwrap().load(Ordering::Relaxed);
        assert_eq!(entries(&c, header.entries), 32);
        assert_eq!(entries(&e, header.entries), 128);
        let (c0, e0) = (snapshot(&c), snapshot(&e));
        let d0 = m.doorbell_value();
        d.word(DOORBELL_REG_OFFSET)
            .unwrap()
            .store(d0.wrapping_add(7), Ordering::Release);
        assert_eq!(m.doorbell_value(), d0.wrapping_add(7));
        assert_eq!((snapshot(&c), snapshot(&e)), (c0, e0));
        // One punch empties all three parts.
        m.discard();
        assert!(snapshot(&c)
            .iter()
            .chain(&snapshot(&e))
            .chain(&snapshot(&d))
            .all(|&b| b == 0));
    }
}
