//! mmap offset cookies.
//!
//! Every mappable object has an offset cookie the driver returns (`CREATE_STREAM`,
//! `ALLOC_MEMORY`); a client passes it unchanged as `mmap`'s `offset` and maps the returned
//! length (or less) from the cookie. Cookies are opaque to clients; for debugging they are
//! `kind << 48 | handle << 12` (page aligned, unique per object). The driver maps an object
//! only for the client that owns the handle, only at its exact cookie, and never longer than
//! the object.

/// Shift of the kind field.
pub const MMAP_KIND_SHIFT: u32 = 48;
/// Shift of the handle field.
pub const MMAP_HANDLE_SHIFT: u32 = 12;

/// What a cookie maps.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MmapKind {
    /// A stream's command ring (read/write).
    CmdRing = 1,
    /// A stream's event ring (read/write: the host writes `head`).
    EventRing = 2,
    /// A stream's doorbell page (write).
    Doorbell = 3,
    /// The host view of an allocation (read/write).
    Memory = 4,
}

/// The cookie for `(kind, handle)`.
pub const fn mmap_offset(kind: MmapKind, handle: u32) -> u64 {
    ((kind as u64) << MMAP_KIND_SHIFT) | ((handle as u64) << MMAP_HANDLE_SHIFT)
}

/// Decodes a cookie; `None` if it is not one this ABI produces.
pub const fn decode_mmap_offset(offset: u64) -> Option<(MmapKind, u32)> {
    let kind = match offset >> MMAP_KIND_SHIFT {
        1 => MmapKind::CmdRing,
        2 => MmapKind::EventRing,
        3 => MmapKind::Doorbell,
        4 => MmapKind::Memory,
        _ => return None,
    };
    let low = offset & ((1u64 << MMAP_KIND_SHIFT) - 1);
    if low & ((1u64 << MMAP_HANDLE_SHIFT) - 1) != 0 {
        return None;
    }
    let handle = low >> MMAP_HANDLE_SHIFT;
    if handle > u32::MAX as u64 {
        return None;
    }
    Some((kind, handle as u32))
}

/// Size of the doorbell mapping.
pub const DOORBELL_SIZE: u64 = 4096;
/// Offset of the software doorbell word (`DAVINCI_FEAT_DOORBELL_FUTEX`) in its page. A
/// `DAVINCI_FEAT_DOORBELL_MMIO` device's register is where GET_INFO's `doorbell_offset` says
/// (ABI 1.4), not here.
pub const DOORBELL_REG_OFFSET: u64 = 0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for kind in [
            MmapKind::CmdRing,
            MmapKind::EventRing,
            MmapKind::Doorbell,
            MmapKind::Memory,
        ] {
            for h in [0u32, 1, 0xffff, u32::MAX] {
                let off = mmap_offset(kind, h);
                assert_eq!(off % 4096, 0);
                assert_eq!(decode_mmap_offset(off), Some((kind, h)));
            }
        }
        assert_eq!(decode_mmap_offset(0), None);
        assert_eq!(
            decode_mmap_offset(mmap_offset(MmapKind::Memory, 3) + 8),
            None
        );
        assert_eq!(decode_mmap_offset(5 << 48), None);
    }
}
