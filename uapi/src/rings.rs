//! Shared ring layout: one mapping per ring = a 192-byte header followed by `entries` slots.
//!
//! ```text
//! offset   0  tail     producer-owned line (64 bytes): only the producer writes it
//! offset  64  head     consumer-owned line (64 bytes): only the consumer writes it
//! offset 128  entries, mask, flags, dropped, error, ...   (device-written line)
//! offset 192  slot[0], slot[1], ... slot[entries - 1]
//! ```
//!
//! Indices are free-running `u32`s; slot `i` lives at `slots + (i & mask) * slot_size`.
//! `tail - head` (wrapping) is the number of filled slots and never exceeds `entries`.
//! On the command ring the host produces and the device consumes; on the event (completion)
//! ring the device produces and the host consumes. `entries`, `mask`, `flags`, `dropped` and
//! `error` are written only by the device side; the host must treat them as read-only.

use crate::layout::{abi_flags, abi_struct};

/// Size of the ring header; the first slot starts here.
pub const RING_HEADER_SIZE: usize = 192;
/// Cache-line size the header is laid out for (explicit, not `CachePadded`).
pub const RING_LINE: usize = 64;
/// Smallest ring depth.
pub const RING_MIN_ENTRIES: u32 = 2;
/// Hard ABI bound on ring depth (a driver may advertise a lower one in `GET_INFO`).
pub const RING_MAX_ENTRIES: u32 = 1 << 15;

abi_struct! {
    /// The ring header as laid out in shared memory. Never copy it as a struct: access each
    /// field with one aligned 32-bit atomic load or store (`__atomic_*`, in the kernel
    /// `READ_ONCE`/`WRITE_ONCE`) at its offset (which `CREATE_STREAM` also returns, as
    /// `io_uring_params` does).
    #[c_name = "davinci_ring_header"]
    pub struct RingHeader {
        /// Producer index (free-running). Written by the producer with a Release store after
        /// the slots it publishes; read by the consumer with an Acquire load.
        pub tail: u32,
        /// Padding to keep `tail` alone on its cache line. Nobody writes it; ignore it.
        pub pad_tail: [u8; 60],
        /// Consumer index (free-running). Written by the consumer with a Release store after it
        /// has copied the slots out; read by the producer with an Acquire load.
        pub head: u32,
        /// Padding to keep `head` alone on its cache line. Nobody writes it; ignore it.
        pub pad_head: [u8; 60],
        /// Number of slots, a power of two. Device-written at creation, constant.
        pub entries: u32,
        /// `entries - 1`. Device-written at creation, constant.
        pub mask: u32,
        /// `DAVINCI_RING_F_*` bits (NEED_WAKEUP, ERROR). Device-written.
        pub flags: RingFlags,
        /// Descriptors the device discarded (counter; device-written).
        pub dropped: u32,
        /// Errno (positive) that put the stream in the error state, 0 while healthy. Device-written.
        pub error: u32,
        /// Free-running index of the descriptor that caused `error`. Device-written.
        pub error_index: u32,
        /// Reserved: the host never writes it and ignores it (a later minor may use it).
        pub reserved: [u8; 40],
    }
}

const _: () = {
    assert!(core::mem::size_of::<RingHeader>() == RING_HEADER_SIZE);
    assert!(core::mem::offset_of!(RingHeader, tail) == 0);
    assert!(core::mem::offset_of!(RingHeader, head) == RING_LINE);
    assert!(core::mem::offset_of!(RingHeader, entries) == 2 * RING_LINE);
    assert!(core::mem::offset_of!(RingHeader, mask) == 2 * RING_LINE + 4);
    assert!(core::mem::offset_of!(RingHeader, flags) == 2 * RING_LINE + 8);
    assert!(core::mem::offset_of!(RingHeader, dropped) == 2 * RING_LINE + 12);
    assert!(core::mem::offset_of!(RingHeader, error) == 2 * RING_LINE + 16);
    assert!(core::mem::offset_of!(RingHeader, error_index) == 2 * RING_LINE + 20);
};

abi_flags! {
    /// Ring status bits in `davinci_ring_header.flags`, written by the device side only.
    #[c_prefix = "DAVINCI_RING_F_"]
    pub struct RingFlags: u32 {
        /// The device is about to sleep, or sleeps, for either reason: its command ring is
        /// empty, or descriptors wait and the event ring is full. The host loads `flags`
        /// after a full fence (`__atomic_thread_fence(__ATOMIC_SEQ_CST)`) both after
        /// publishing descriptors (storing the command ring's `tail`) and after releasing
        /// event slots (storing the event ring's `head`), and whenever the bit is set it
        /// rings the doorbell: as `DAVINCI_FEAT_DOORBELL_MMIO` or
        /// `DAVINCI_FEAT_DOORBELL_FUTEX` says, or with neither, `DAVINCI_IOCTL_NOTIFY`. A new
        /// stream may have it set already.
        const NEED_WAKEUP = 1 << 0;
        /// The stream is in the error state; `error` and `error_index` say why. Nothing more
        /// is consumed from this ring.
        const ERROR = 1 << 1;
    }
}

abi_struct! {
    /// Byte offsets of each ring field within its mapping (returned by `CREATE_STREAM`).
    #[c_name = "davinci_ring_offsets"]
    pub struct RingOffsets {
        /// Offset of `tail` (from driver).
        pub tail: u32,
        /// Offset of `head` (from driver).
        pub head: u32,
        /// Offset of `entries` (from driver).
        pub entries: u32,
        /// Offset of `mask` (from driver).
        pub mask: u32,
        /// Offset of `flags` (from driver).
        pub flags: u32,
        /// Offset of `dropped` (from driver).
        pub dropped: u32,
        /// Offset of `error` (from driver).
        pub error: u32,
        /// Offset of `error_index` (from driver).
        pub error_index: u32,
        /// Offset of slot 0 (from driver).
        pub slots: u32,
        /// Size of one slot in bytes (64 for commands, 32 for events) (from driver).
        pub slot_size: u32,
    }
}

impl RingOffsets {
    /// The offsets of this ABI version's header, for a ring of `slot_size`-byte slots.
    pub const fn standard(slot_size: u32) -> Self {
        Self {
            tail: core::mem::offset_of!(RingHeader, tail) as u32,
            head: core::mem::offset_of!(RingHeader, head) as u32,
            entries: core::mem::offset_of!(RingHeader, entries) as u32,
            mask: core::mem::offset_of!(RingHeader, mask) as u32,
            flags: core::mem::offset_of!(RingHeader, flags) as u32,
            dropped: core::mem::offset_of!(RingHeader, dropped) as u32,
            error: core::mem::offset_of!(RingHeader, error) as u32,
            error_index: core::mem::offset_of!(RingHeader, error_index) as u32,
            slots: RING_HEADER_SIZE as u32,
            slot_size,
        }
    }
}

abi_struct! {
    /// Where one ring lives: its mmap offset cookie, the length to map, and its field offsets.
    #[c_name = "davinci_ring_mapping"]
    pub struct RingMapping {
        /// Pass as the `offset` argument of `mmap` (from driver).
        pub mmap_offset: u64,
        /// Length to map in bytes, a multiple of the page size (from driver).
        pub mmap_size: u64,
        /// Number of slots, a power of two (from driver).
        pub entries: u32,
        /// Reserved: ignore it, a later minor may use it (from driver).
        pub pad: u32,
        /// Field offsets within the mapping (from driver).
        pub offsets: RingOffsets,
    }
}

/// Bytes a ring of `entries` slots of `slot_size` bytes needs, before page rounding;
/// `None` on overflow or a non-power-of-two / out-of-range depth.
pub const fn ring_bytes(entries: u32, slot_size: u32) -> Option<usize> {
    if entries < RING_MIN_ENTRIES || entries > RING_MAX_ENTRIES || !entries.is_power_of_two() {
        return None;
    }
    match (entries as usize).checked_mul(slot_size as usize) {
        Some(slots) => slots.checked_add(RING_HEADER_SIZE),
        None => None,
    }
}

/// `len` rounded up to a multiple of `page` (a power of two); `None` on overflow.
pub const fn page_round(len: usize, page: usize) -> Option<usize> {
    match len.checked_add(page - 1) {
        Some(v) => Some(v & !(page - 1)),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes() {
        assert_eq!(ring_bytes(64, 64), Some(192 + 64 * 64));
        assert_eq!(ring_bytes(3, 64), None);
        assert_eq!(ring_bytes(1, 64), None);
        assert_eq!(ring_bytes(RING_MAX_ENTRIES * 2, 64), None);
        assert_eq!(page_round(4097, 4096), Some(8192));
        assert_eq!(page_round(usize::MAX, 4096), None);
    }

    #[test]
    fn standard_offsets_match_header() {
        let o = RingOffsets::standard(64);
        assert_eq!(
            (o.tail, o.head, o.entries, o.flags, o.slots),
            (0, 64, 128, 136, 192)
        );
    }
}
