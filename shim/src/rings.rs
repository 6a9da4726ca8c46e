//! The host's ends of one stream (the command-ring producer, the event-ring consumer, the
//! doorbell) over the stream's three mappings, and how the stream wakes the device, decided
//! once when the stream is created. The shim's one module with `unsafe` besides the kernel
//! backend's `ioctl(2)`: building the ring views, whose soundness rests on this type owning
//! the mappings they point into. The mappings themselves are `davinci_shm::SharedMapping`.
#![allow(unsafe_code)]

use davinci_ring::{Consumer, Doorbell, Producer, RingRegion};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use davinci_shm::{futex_wake, OutOfBounds, SharedMapping};
use davinci_uapi::mmap::DOORBELL_REG_OFFSET;
use davinci_uapi::task::{EVENT_RECORD_SIZE, TASK_DESC_SIZE};
use davinci_uapi::{DeviceInfo, EventRecord, Features, RingFlags, TaskDesc};

/// How a publish that finds NEED_WAKEUP wakes the device: read once from the device's
/// features when the stream is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Write `value` to the doorbell register at byte `offset` of the doorbell page
    /// (hardware: GET_INFO's `doorbell_value` and `doorbell_offset`, ABI 1.4).
    Mmio {
        /// Where the register is in the doorbell page.
        offset: u32,
        /// What rings it (the device's value, never the tail).
        value: u32,
    },
    /// Write the doorbell word, then `FUTEX_WAKE` it (a software device watching the word).
    Futex,
    /// The NOTIFY ioctl (a device with no doorbell the host can write).
    Notify,
}

impl Wake {
    /// The method for the device GET_INFO described as `info`.
    pub(crate) fn for_info(info: &DeviceInfo) -> Wake {
        let features = info.features;
        if features.contains(Features::DOORBELL_MMIO) {
            Wake::Mmio {
                offset: info.doorbell_offset,
                value: info.doorbell_value,
            }
        } else if features.contains(Features::DOORBELL_FUTEX) {
            Wake::Futex
        } else {
            Wake::Notify
        }
    }
}

/// One part of a stream's memory (its command ring, event ring or doorbell page): `len`
/// bytes at `at` in a mapping, the part's own or the stream's whole memory mapped once and
/// shared by its parts ([`Device::map_stream`](crate::Device)). Never empty, and page aligned
/// when the mapping's offsets are (`at` is a multiple of 4096: [`Part::within`]).
#[derive(Debug, Clone)]
pub(crate) struct Part {
    map: Arc<SharedMapping>,
    at: usize,
    len: usize,
}

impl Part {
    /// All of `map`.
    pub(crate) fn whole(map: SharedMapping) -> Part {
        let len = map.len();
        Part {
            map: Arc::new(map),
            at: 0,
            len,
        }
    }

    /// `len` bytes at `at` of `map`: `None` unless they lie inside it, `at` is page aligned
    /// (as a mapping's start is) and `len` is not 0.
    pub(crate) fn within(map: &Arc<SharedMapping>, at: usize, len: usize) -> Option<Part> {
        let end = at.checked_add(len)?;
        (len != 0 && end <= map.len() && at.is_multiple_of(4096)).then(|| Part {
            map: map.clone(),
            at,
            len,
        })
    }

    /// The part's first byte (inside the mapping: checked when the part was made).
    fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr().wrapping_add(self.at)
    }

    /// Its length.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The `u32` at `offset` of the part, as an atomic (`OutOfBounds` outside it).
    fn word(&self, offset: u64) -> Result<&AtomicU32, OutOfBounds> {
        let end = offset.checked_add(4).ok_or(OutOfBounds)?;
        if end > self.len as u64 {
            return Err(OutOfBounds);
        }
        self.map.word(self.at as u64 + offset)
    }
}

/// The host's ends of one stream: the command-ring producer, the event-ring consumer and the
/// doorbell, together with the mappings they point into (so they cannot outlive them).
pub(crate) struct StreamRings {
    // Field order = drop order: the ends (raw pointers into the maps) go before the maps.
    producer: Producer<TaskDesc>,
    consumer: Consumer<EventRecord>,
    doorbell: Doorbell,
    wake: Wake,
    /// Test hook: submit as a raw ABI client does, without the event ring's credit.
    #[cfg(feature = "test-util")]
    raw_credit: bool,
    // Owned for the ring ends; read only by the `test-util` hook.
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
    cmd: Part,
    _event: Part,
    bell: Part,
}

impl std::fmt::Debug for StreamRings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamRings")
            .field("tail", &self.producer.tail())
            .field("head", &self.consumer.head())
            .finish_non_exhaustive()
    }
}

impl StreamRings {
    /// Builds the ring ends over the three mappings; `wake` is how publishes wake the device.
    pub(crate) fn new(
        cmd: Part,
        cmd_entries: u32,
        event: Part,
        event_entries: u32,
        bell: Part,
        wake: Wake,
    ) -> Result<Self, String> {
        // Where the word the doorbell writes is: the register GET_INFO named (hardware), the
        // futex word (software). Checked against the mapping here, so ringing never leaves it.
        let reg_offset = match wake {
            Wake::Mmio { offset, .. } => u64::from(offset),
            Wake::Futex | Wake::Notify => DOORBELL_REG_OFFSET,
        };
        // Arithmetic only: no reference is made to what may be a device register.
        let inside = reg_offset
            .checked_add(4)
            .is_some_and(|end| end <= bell.len() as u64);
        if !reg_offset.is_multiple_of(4) || !inside {
            return Err(format!(
                "the doorbell register at byte {reg_offset} does not fit in the {}-byte doorbell mapping as an aligned u32",
                bell.len()
            ));
        }
        // SAFETY: `cmd` is `cmd.len()` bytes inside a live shared read/write mapping, at a
        // page-aligned offset of it (`Part`'s invariant), so 64-byte aligned. The part holds
        // the mapping (an `Arc`) and is a field of the returned value declared after the
        // region and the producer built on it, so they are dropped before it; they are private
        // and never moved out. Within this process the only other accesses to the ring are the
        // device's ring ends (embedded mode), over its own mapping, and the other parts of a
        // shared mapping never overlap this one (`Device::map_stream` checks).
        let cmd_region =
            unsafe { RingRegion::new(cmd.as_ptr(), cmd.len(), cmd_entries, TASK_DESC_SIZE) }
                .map_err(|e| format!("command ring: {e}"))?;
        // SAFETY: as above, for the event ring and its consumer.
        let event_region = unsafe {
            RingRegion::new(
                event.as_ptr(),
                event.len(),
                event_entries,
                EVENT_RECORD_SIZE,
            )
        }
        .map_err(|e| format!("event ring: {e}"))?;
        let producer = Producer::try_new(cmd_region).map_err(|e| format!("command ring: {e}"))?;
        let consumer = Consumer::try_new(event_region).map_err(|e| format!("event ring: {e}"))?;
        // SAFETY: `reg_offset` is a multiple of 4 and `reg_offset + 4 <= bell.len()` (checked
        // above), so the pointer is the 4-byte aligned word at that offset of the doorbell
        // part (whose start is page aligned), inside the writable shared mapping; it stays
        // mapped for as long as `bell` (which holds the mapping) lives, and the doorbell is a
        // field declared before `bell` and never moved out. Nothing else in this process
        // writes the word non-atomically (the embedded device only uses atomics).
        let doorbell = unsafe {
            Doorbell::new(
                bell.as_ptr()
                    .wrapping_add(reg_offset as usize)
                    .cast::<u32>(),
            )
        };
        Ok(Self {
            producer,
            consumer,
            doorbell,
            wake,
            #[cfg(feature = "test-util")]
            raw_credit: false,
            cmd,
            _event: event,
            bell,
        })
    }

    /// Command-ring slots.
    pub(crate) fn cmd_entries(&self) -> u32 {
        self.producer.capacity()
    }

    /// Event-ring slots.
    pub(crate) fn event_entries(&self) -> u32 {
        self.consumer.region().entries()
    }

    /// Copies as many descriptors as fit into free slots, within the event ring's credit;
    /// returns how many (not published).
    pub(crate) fn push_slice(&mut self, descs: &[TaskDesc]) -> usize {
        self.push_with(descs, |d| d)
    }

    /// [`push_slice`](Self::push_slice) of the descriptor `desc` finds in each of `items`,
    /// copied straight from there into its slot.
    #[inline]
    pub(crate) fn push_with<S>(&mut self, items: &[S], desc: impl Fn(&S) -> &TaskDesc) -> usize {
        let items = &items[..items.len().min(self.event_credit() as usize)];
        self.producer.push_with(items, desc)
    }

    /// Tasks pushed whose completions were not yet taken off the event ring (0 to
    /// `event_entries`, unless the driver placed tasks itself: SUBMIT_TASK).
    pub(crate) fn unreaped(&self) -> u32 {
        self.producer.tail().wrapping_sub(self.consumer.head())
    }

    /// How many more tasks may be pushed before the event ring could fill up with completions
    /// nobody took off it: `event_entries - unreaped`. The library never pushes more, so
    /// every task the device takes has its event slot already (docs/runtimes.md, "No stream
    /// stalls on completions nobody reaped"): the device never sleeps on a full event ring
    /// of a stream the library drives, whoever polls it or not.
    pub(crate) fn event_credit(&self) -> u32 {
        #[cfg(feature = "test-util")]
        if self.raw_credit {
            return u32::MAX;
        }
        self.event_entries().saturating_sub(self.unreaped())
    }

    /// Test hook: from now on push as a raw ABI client that ignores the event ring's credit
    /// (the device then stalls on a full event ring, docs/abi.md 5.4).
    #[cfg(feature = "test-util")]
    pub(crate) fn ignore_event_credit(&mut self) {
        self.raw_credit = true;
    }

    /// Room for tasks now: free command slots (from the cached head until that says full),
    /// within the event ring's credit.
    pub(crate) fn free(&mut self) -> u32 {
        self.producer.free().min(self.event_credit())
    }

    /// Room for tasks as the device left it (re-reads the command ring's head), within the
    /// credit that taking the completions already published would give.
    pub(crate) fn free_now(&mut self) -> u32 {
        let credit = self
            .event_credit()
            .saturating_add(self.consumer.available());
        self.producer.free_now().min(credit)
    }

    /// Publishes pushed descriptors; `true` if the device asked for a doorbell.
    pub(crate) fn publish(&mut self) -> bool {
        self.producer.publish()
    }

    /// The command ring's tail (every descriptor pushed).
    pub(crate) fn tail(&self) -> u32 {
        self.producer.tail()
    }

    /// Re-reads the shared tail after a SUBMIT_TASK.
    pub(crate) fn resync_tail(&mut self) {
        self.producer.resync_tail();
    }

    /// How publishes wake the device.
    pub(crate) fn wake(&self) -> Wake {
        self.wake
    }

    /// Rings the doorbell: hardware (`Wake::Mmio`) gets the device's doorbell value written
    /// to its register (one volatile `u32` store after `fence(Release)`: ABI 1.4, docs/abi.md
    /// 5.3); a software device (`Wake::Futex`) gets the word incremented (so its value always
    /// changes: ABI 1.1) and a `FUTEX_WAKE`. Returns whether a futex wake was issued. With
    /// [`Wake::Notify`] it does nothing: the caller issues the ioctl instead.
    pub(crate) fn ring_doorbell(&self) -> bool {
        match self.wake {
            Wake::Mmio { value, .. } => {
                self.doorbell.ring(value);
                return false;
            }
            Wake::Notify => return false,
            Wake::Futex => {}
        }
        self.doorbell.ring_counter();
        // The register word lies inside `bell` (checked at construction), so it resolves.
        match self.bell.word(DOORBELL_REG_OFFSET) {
            Ok(word) => {
                futex_wake(word);
                true
            }
            Err(_) => false,
        }
    }

    /// Copies out up to `max` completions, in order (one Release store of the head). Returns
    /// how many, and whether the device must be woken: when completions were taken, the reap
    /// half of the Dekker pair (`fence(SeqCst)`, then NEED_WAKEUP) tells whether a device
    /// stalled on the full event ring may be asleep (docs/abi.md 5.4), unless the device has
    /// taken every descriptor pushed: a stalled device has descriptors waiting (its head
    /// behind the tail), and its head only grows, so a head read at the tail means the flag is
    /// an empty ring's, which a reap does not change (the next publish checks it again). A
    /// round trip to a sleeping device thus wakes it once, at the publish, not again at the
    /// reap.
    pub(crate) fn consume(&mut self, max: usize, f: impl FnMut(EventRecord)) -> (usize, bool) {
        let n = self.consumer.consume(max, f);
        let wake = n > 0
            && self.producer.wake_needed_after_reap()
            && self.producer.free_now() < self.producer.capacity();
        (n, wake)
    }

    /// Completions published and not consumed.
    pub(crate) fn available(&mut self) -> u32 {
        self.consumer.available()
    }

    /// The event ring's head (every completion consumed).
    pub(crate) fn head(&self) -> u32 {
        self.consumer.head()
    }

    /// Where the command ring is mapped (tests).
    #[cfg(all(test, feature = "embedded"))]
    pub(crate) fn cmd_addr(&self) -> usize {
        self.cmd.as_ptr() as usize
    }

    /// The command ring's flags.
    pub(crate) fn cmd_flags(&self) -> RingFlags {
        self.producer.region().flags()
    }

    /// `(errno, index)` once the device put the stream in the error state.
    pub(crate) fn cmd_error(&self) -> Option<(u32, u32)> {
        self.producer.region().error()
    }

    /// Test hook: stores `tail` into the shared command-ring tail, as a broken or hostile
    /// producer would (Release, like a real publish). The local producer is not told.
    #[cfg(feature = "test-util")]
    pub(crate) fn store_raw_cmd_tail(&self, tail: u32) {
        let offset = core::mem::offset_of!(davinci_uapi::RingHeader, tail) as u64;
        // The header lies inside the mapping (checked by `RingRegion::new`).
        if let Ok(word) = self.cmd.word(offset) {
            word.store(tail, std::sync::atomic::Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests;
