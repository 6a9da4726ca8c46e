//! BAR2's layout: page 0 is the header the device writes at boot; then the admin submission
//! ring and the admin completion ring (each `davinci-ring`'s 192-byte header plus
//! [`ADMIN_DEPTH`] slots of [`ADMIN_ENTRY_SIZE`] bytes, page-rounded); then the list area
//! (LIST_CLIENTS' entries, [`LIST_ENTRIES`] of the ABI's size, written by the device for the
//! one admin request in flight that asks, page-rounded); then the heap: every remaining
//! 4 KiB page, which the device carves into stream rings, doorbell pages and device memory,
//! and names to the guest by BAR2 offset (MMAP_TARGET). Nothing before the heap is ever
//! mapped into a client.
//!
//! The layout is a function of the region's size alone ([`Bar2Layout::for_region`]): the
//! guest recomputes it from its BAR's size and accepts a header only if it says the same.
//!
//! Header fields (little-endian): magic `u64` @0, version `u32` @8, state `u32` @12
//! (atomic word), heartbeat `u32` @16 (atomic word, bumped by the device while it runs),
//! failure errno `u32` @20, region size `u64` @24, entry size `u32` @32, admin depth `u32`
//! @36, submission ring `u64` @40, completion ring `u64` @48, ring bytes `u64` @56, heap
//! `u64` @64, heap pages `u32` @72, zero `u32` @76, list area `u64` @80, list bytes `u64`
//! @88, zero up to [`NOTIFY_OFFSET`]; then the notification words (layout 3; 4 since the list entries grew to 160 bytes):
//! [`NOTIFY_WORDS`] atomic `u32`s to the page's end. The device bumps word
//! `client % NOTIFY_WORDS` ([`notify_offset`]) whenever something a WAIT_EVENT of that client
//! may wait for changed, before it raises vector 1; a guest's sleeper waits for its client's
//! word to change, so one tenant's completions do not send every other tenant's sleepers to
//! the device (two clients sharing a word only wake each other spuriously).

use core::fmt;

use davinci_uapi::rings::RING_HEADER_SIZE;

use crate::admin::{ADMIN_DEPTH, ADMIN_ENTRY_SIZE};
use crate::bytes::{get_u32, get_u64, put_u32, put_u64};
use davinci_uapi::ClientUsage;

/// The page of BAR2's layout (the guest maps in pages; 4 KiB on every host the device runs).
pub const PAGE_SIZE: u64 = 4096;
/// `"DVCIBAR2"`, little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"DVCIBAR2");
/// This layout's version.
pub const LAYOUT_VERSION: u32 = 4;
/// The smallest region served: the header, both admin rings, the list area and
/// [`MIN_HEAP_PAGES`].
pub const MIN_REGION: u64 = 128 << 10;
/// LIST_CLIENTS entries the list area holds (every client a device can have: the device
/// checks its client table is no bigger).
pub const LIST_ENTRIES: u64 = 320;
/// The `buf` the guest's transport passes to LIST_CLIENTS: the list area's first byte (the
/// device writes entry `i` at `LIST_BUF + i * entry_size`, which must fit in the area).
pub const LIST_BUF: u64 = 1 << 40;
/// The size of one entry of the list area: the ABI's `struct davinci_client_usage`.
pub const LIST_ENTRY_SIZE: u64 = core::mem::size_of::<ClientUsage>() as u64;
/// The largest region served (the ivshmem server's bound).
pub const MAX_REGION: u64 = 1 << 30;
/// The fewest heap pages a region has.
pub const MIN_HEAP_PAGES: u64 = 4;

/// Offset of the state word.
pub const STATE_OFFSET: u64 = 12;
/// Offset of the heartbeat word.
pub const HEARTBEAT_OFFSET: u64 = 16;
/// Offset of the failure errno word.
pub const FAILURE_OFFSET: u64 = 20;
/// The header's encoded fields end here; zero up to [`NOTIFY_OFFSET`].
pub const HEADER_FIELDS: usize = 96;
/// Where page 0's notification words start.
pub const NOTIFY_OFFSET: u64 = 2048;
/// How many there are (to the end of page 0).
pub const NOTIFY_WORDS: u32 = ((PAGE_SIZE - NOTIFY_OFFSET) / 4) as u32;

/// The BAR2 offset of `client`'s notification word.
pub const fn notify_offset(client: u32) -> u64 {
    NOTIFY_OFFSET + (client % NOTIFY_WORDS) as u64 * 4
}

const _: () = assert!(HEADER_FIELDS as u64 <= NOTIFY_OFFSET && NOTIFY_OFFSET < PAGE_SIZE);

/// What the device is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceState {
    /// Laying out BAR2: nothing else in it means anything yet.
    Booting,
    /// Serving the admin queue.
    Ready,
    /// Stopped serving (the failure errno says why); streams and the admin queue are dead.
    Failed,
}

impl DeviceState {
    /// Its word.
    pub const fn word(self) -> u32 {
        match self {
            DeviceState::Booting => 0,
            DeviceState::Ready => 1,
            DeviceState::Failed => 2,
        }
    }

    /// The state a word names.
    pub const fn from_word(w: u32) -> Option<Self> {
        match w {
            0 => Some(DeviceState::Booting),
            1 => Some(DeviceState::Ready),
            2 => Some(DeviceState::Failed),
            _ => None,
        }
    }
}

/// Why a region size has no layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutError {
    /// Not a power of two (a PCI BAR is), or outside [`MIN_REGION`]`..=`[`MAX_REGION`].
    RegionSize(u64),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::RegionSize(s) => write!(
                f,
                "BAR2 size {s}: must be a power of two in {MIN_REGION}..={MAX_REGION}"
            ),
        }
    }
}

/// Where everything lies in a region of `region_size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar2Layout {
    /// BAR2's size.
    pub region_size: u64,
    /// The admin submission ring's offset (page aligned).
    pub sq_offset: u64,
    /// The admin completion ring's offset (page aligned).
    pub cq_offset: u64,
    /// Each admin ring's bytes (page-rounded; its ring needs `192 + depth * entry`).
    pub ring_bytes: u64,
    /// The list area's offset (page aligned): LIST_CLIENTS' entries.
    pub list_offset: u64,
    /// The list area's bytes (page-rounded [`LIST_ENTRIES`] x [`LIST_ENTRY_SIZE`]).
    pub list_bytes: u64,
    /// The heap's first page.
    pub heap_offset: u64,
    /// Pages in the heap (to the region's end).
    pub heap_pages: u64,
}

const fn page_up(n: u64) -> u64 {
    n.div_ceil(PAGE_SIZE) * PAGE_SIZE
}

impl Bar2Layout {
    /// The admin rings' size in bytes (before page rounding).
    pub const RING_NEED: u64 =
        RING_HEADER_SIZE as u64 + ADMIN_DEPTH as u64 * ADMIN_ENTRY_SIZE as u64;

    /// The layout of a region of `size` bytes.
    ///
    /// # Errors
    /// [`LayoutError::RegionSize`].
    pub const fn for_region(size: u64) -> Result<Bar2Layout, LayoutError> {
        if !size.is_power_of_two() || size < MIN_REGION || size > MAX_REGION {
            return Err(LayoutError::RegionSize(size));
        }
        let ring_bytes = page_up(Self::RING_NEED);
        let sq_offset = PAGE_SIZE;
        let cq_offset = sq_offset + ring_bytes;
        let list_offset = cq_offset + ring_bytes;
        let list_bytes = page_up(LIST_ENTRIES * LIST_ENTRY_SIZE);
        let heap_offset = list_offset + list_bytes;
        Ok(Bar2Layout {
            region_size: size,
            sq_offset,
            cq_offset,
            ring_bytes,
            list_offset,
            list_bytes,
            heap_offset,
            heap_pages: (size - heap_offset) / PAGE_SIZE,
        })
    }

    /// The BAR2 offset of heap page `page`, if it is one.
    pub const fn page_offset(&self, page: u64) -> Option<u64> {
        if page < self.heap_pages {
            Some(self.heap_offset + page * PAGE_SIZE)
        } else {
            None
        }
    }
}

const _: () = {
    // The smallest region holds the admin rings and the minimum heap.
    match Bar2Layout::for_region(MIN_REGION) {
        Ok(l) => assert!(l.heap_pages >= MIN_HEAP_PAGES),
        Err(_) => panic!("MIN_REGION has no layout"),
    }
};

/// The header as the guest reads it (from a copy of page 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar2Header {
    /// The layout (checked against the region's size).
    pub layout: Bar2Layout,
    /// The device's state.
    pub state: DeviceState,
    /// The heartbeat word when copied.
    pub heartbeat: u32,
    /// The failure errno (0 unless [`DeviceState::Failed`]).
    pub failure: u32,
}

/// Why a header was refused: the field at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer bytes than the header's fields.
    Short(usize),
    /// The magic (a region nobody laid out, or not this device's).
    Magic(u64),
    /// A layout version this side does not speak.
    Version(u32),
    /// The state word.
    State(u32),
    /// The region size differs from the BAR's (`got`, `bar`), or has no layout.
    RegionSize {
        /// The header's.
        got: u64,
        /// The BAR's.
        bar: u64,
    },
    /// The entry size or depth differs from this crate's.
    Geometry {
        /// The header's entry size.
        entry: u32,
        /// The header's depth.
        depth: u32,
    },
    /// A layout field differs from the layout of the region's size: its name.
    Field(&'static str),
    /// A non-zero byte where the header is reserved: its offset.
    Reserved(usize),
    /// A failure errno outside the failed state, or the failed state without one.
    Failure(u32),
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Short(n) => write!(f, "BAR2 header: {n} bytes, {HEADER_FIELDS} needed"),
            HeaderError::Magic(m) => write!(f, "BAR2 header: magic {m:#018x}, expected {MAGIC:#018x}"),
            HeaderError::Version(v) => {
                write!(f, "BAR2 header: layout version {v}, this side speaks {LAYOUT_VERSION}")
            }
            HeaderError::State(s) => write!(f, "BAR2 header: state word {s} is no state"),
            HeaderError::RegionSize { got, bar } => {
                write!(f, "BAR2 header: region size {got}, the BAR has {bar}")
            }
            HeaderError::Geometry { entry, depth } => write!(
                f,
                "BAR2 header: admin entries of {entry} bytes x {depth}, expected {ADMIN_ENTRY_SIZE} x {ADMIN_DEPTH}"
            ),
            HeaderError::Field(name) => {
                write!(f, "BAR2 header: {name} differs from the layout of its size")
            }
            HeaderError::Reserved(at) => write!(f, "BAR2 header: reserved byte {at} is not zero"),
            HeaderError::Failure(e) => {
                write!(f, "BAR2 header: failure errno {e} does not match the state")
            }
        }
    }
}

impl Bar2Header {
    /// Encodes the header into `page` (at least [`HEADER_FIELDS`] bytes; the rest of it, up
    /// to [`NOTIFY_OFFSET`], is zeroed; the notification words are left as they are).
    pub fn encode(&self, page: &mut [u8]) {
        let end = page.len().min(NOTIFY_OFFSET as usize);
        page[..end].fill(0);
        let l = &self.layout;
        put_u64(page, 0, MAGIC);
        put_u32(page, 8, LAYOUT_VERSION);
        put_u32(page, STATE_OFFSET as usize, self.state.word());
        put_u32(page, HEARTBEAT_OFFSET as usize, self.heartbeat);
        put_u32(page, FAILURE_OFFSET as usize, self.failure);
        put_u64(page, 24, l.region_size);
        put_u32(page, 32, ADMIN_ENTRY_SIZE as u32);
        put_u32(page, 36, ADMIN_DEPTH);
        put_u64(page, 40, l.sq_offset);
        put_u64(page, 48, l.cq_offset);
        put_u64(page, 56, l.ring_bytes);
        put_u64(page, 64, l.heap_offset);
        // Fits: at most 2^30 / 2^12 pages.
        put_u32(page, 72, l.heap_pages as u32);
        put_u64(page, 80, l.list_offset);
        put_u64(page, 88, l.list_bytes);
    }

    /// Decodes and validates a copy of page 0 of a BAR of `bar_size` bytes.
    ///
    /// # Errors
    /// The first field at fault, as a [`HeaderError`].
    pub fn decode(page: &[u8], bar_size: u64) -> Result<Bar2Header, HeaderError> {
        let w32 = |at| get_u32(page, at).ok_or(HeaderError::Short(page.len()));
        let w64 = |at| get_u64(page, at).ok_or(HeaderError::Short(page.len()));
        if page.len() < HEADER_FIELDS {
            return Err(HeaderError::Short(page.len()));
        }
        let magic = w64(0)?;
        if magic != MAGIC {
            return Err(HeaderError::Magic(magic));
        }
        let version = w32(8)?;
        if version != LAYOUT_VERSION {
            return Err(HeaderError::Version(version));
        }
        let sw = w32(STATE_OFFSET as usize)?;
        let state = DeviceState::from_word(sw).ok_or(HeaderError::State(sw))?;
        let heartbeat = w32(HEARTBEAT_OFFSET as usize)?;
        let failure = w32(FAILURE_OFFSET as usize)?;
        if (state == DeviceState::Failed) != (failure != 0) {
            return Err(HeaderError::Failure(failure));
        }
        let size = w64(24)?;
        let layout = match Bar2Layout::for_region(size) {
            Ok(l) if size == bar_size => l,
            _ => {
                return Err(HeaderError::RegionSize {
                    got: size,
                    bar: bar_size,
                })
            }
        };
        let (entry, depth) = (w32(32)?, w32(36)?);
        if entry as usize != ADMIN_ENTRY_SIZE || depth != ADMIN_DEPTH {
            return Err(HeaderError::Geometry { entry, depth });
        }
        let fields: [(&'static str, usize, u64); 7] = [
            ("the submission ring's offset", 40, layout.sq_offset),
            ("the completion ring's offset", 48, layout.cq_offset),
            ("the admin rings' size", 56, layout.ring_bytes),
            ("the heap's offset", 64, layout.heap_offset),
            ("the heap's pages", 72, layout.heap_pages),
            ("the list area's offset", 80, layout.list_offset),
            ("the list area's size", 88, layout.list_bytes),
        ];
        for (name, at, want) in fields {
            let got = if at == 72 {
                u64::from(w32(at)?)
            } else {
                w64(at)?
            };
            if got != want {
                return Err(HeaderError::Field(name));
            }
        }
        // The notification words past NOTIFY_OFFSET are the device's counters.
        let reserved_end = page.len().min(NOTIFY_OFFSET as usize);
        for (from, to) in [(76, 80), (HEADER_FIELDS, reserved_end)] {
            if let Some(at) = page[from..to].iter().position(|&b| b != 0) {
                return Err(HeaderError::Reserved(from + at));
            }
        }
        Ok(Bar2Header {
            layout,
            state,
            heartbeat,
            failure,
        })
    }
}

#[cfg(test)]
mod tests;
