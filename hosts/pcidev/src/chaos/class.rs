//! The chaos device's mutation classes.
#![forbid(unsafe_code)]

use std::fmt;

/// What a mutation does. The first group changes one completion; the second acts at the end of
/// the device's pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// The arg length grown (up to the slot's 256 bytes, zero-filled): more than `_IOC_SIZE`.
    ArgLenLong,
    /// The arg length cut (the rest zeroed).
    ArgLenShort,
    /// The arg length 0.
    ArgLenZero,
    /// The arg length beyond the slot (a malformed completion).
    ArgLenHuge,
    /// Another valid reply kind (the errno made to agree).
    WrongKind,
    /// A reply kind word that is no kind (malformed).
    BadKindWord,
    /// A failure with an errno no call may return (kernel-internal, out of range, negative).
    BadErrno,
    /// Another client id (OPEN: the new open's id is another open's, or random).
    WrongClient,
    /// MMAP_TARGET: another map kind (or none).
    MapKind,
    /// MMAP_TARGET: an offset outside BAR2 (or wrapping).
    MapOffsetOutside,
    /// MMAP_TARGET: an offset inside another object of the heap.
    MapOffsetOther,
    /// MMAP_TARGET: an offset in BAR2's header, admin rings or list area.
    MapOffsetHeader,
    /// MMAP_TARGET: a length shorter than asked (one page).
    MapLenShort,
    /// MMAP_TARGET: a length longer than the object (to BAR2's end, or beyond).
    MapLenLong,
    /// MMAP_TARGET: length 0 or not page aligned.
    MapLenBad,
    /// LIST_CLIENTS: a count beyond the capacity asked (and garbage in the list area's reply).
    ListCount,
    /// Revocations of random clients, cookies and lengths.
    Revokes,
    /// A revocation count beyond the slot's 26 ("unmap everything").
    RevokeOverflow,
    /// The message: not UTF-8, or control characters and escapes.
    Message,
    /// 1 to 8 random bit flips anywhere in the slot.
    ByteFlip,
    /// Another tag (the request's completion never comes).
    WrongTag,
    /// A completion with an old tag pushed before the real one.
    StaleTag,
    /// The completion pushed twice.
    Duplicate,
    /// Vector 0 raised many times.
    FloodAdmin,
    /// Vector 1 raised many times.
    FloodData,
    /// Notification words rewound or set to garbage, then vector 1.
    NotifyStale,
    /// Every notification word bumped, then vector 1.
    NotifyBump,
    /// The heartbeat stands still for a while (sometimes past the guest's 3 s).
    HeartbeatStall,
    /// The heartbeat goes backwards.
    HeartbeatRewind,
    /// Garbage in BAR2's header fields for a while, then the header back.
    HeaderGarbage,
    /// A completion no request asked for.
    Unsolicited,
}

impl Class {
    /// Every class.
    pub const ALL: [Class; 31] = [
        Class::ArgLenLong,
        Class::ArgLenShort,
        Class::ArgLenZero,
        Class::ArgLenHuge,
        Class::WrongKind,
        Class::BadKindWord,
        Class::BadErrno,
        Class::WrongClient,
        Class::MapKind,
        Class::MapOffsetOutside,
        Class::MapOffsetOther,
        Class::MapOffsetHeader,
        Class::MapLenShort,
        Class::MapLenLong,
        Class::MapLenBad,
        Class::ListCount,
        Class::Revokes,
        Class::RevokeOverflow,
        Class::Message,
        Class::ByteFlip,
        Class::WrongTag,
        Class::StaleTag,
        Class::Duplicate,
        Class::FloodAdmin,
        Class::FloodData,
        Class::NotifyStale,
        Class::NotifyBump,
        Class::HeartbeatStall,
        Class::HeartbeatRewind,
        Class::HeaderGarbage,
        Class::Unsolicited,
    ];

    /// Classes that apply to any request.
    pub(super) const ANY: [Class; 22] = [
        Class::ArgLenLong,
        Class::ArgLenShort,
        Class::ArgLenZero,
        Class::ArgLenHuge,
        Class::WrongKind,
        Class::BadKindWord,
        Class::BadErrno,
        Class::WrongClient,
        Class::Revokes,
        Class::RevokeOverflow,
        Class::Message,
        Class::ByteFlip,
        Class::WrongTag,
        Class::StaleTag,
        Class::Duplicate,
        Class::FloodAdmin,
        Class::FloodData,
        Class::NotifyStale,
        Class::NotifyBump,
        Class::HeartbeatStall,
        Class::HeartbeatRewind,
        Class::HeaderGarbage,
    ];

    pub(super) const MMAP: [Class; 7] = [
        Class::MapKind,
        Class::MapOffsetOutside,
        Class::MapOffsetOther,
        Class::MapOffsetHeader,
        Class::MapLenShort,
        Class::MapLenLong,
        Class::MapLenBad,
    ];

    /// Its name in the log.
    pub fn name(self) -> &'static str {
        match self {
            Class::ArgLenLong => "arg-len-long",
            Class::ArgLenShort => "arg-len-short",
            Class::ArgLenZero => "arg-len-zero",
            Class::ArgLenHuge => "arg-len-huge",
            Class::WrongKind => "wrong-kind",
            Class::BadKindWord => "bad-kind-word",
            Class::BadErrno => "bad-errno",
            Class::WrongClient => "wrong-client",
            Class::MapKind => "map-kind",
            Class::MapOffsetOutside => "map-offset-outside",
            Class::MapOffsetOther => "map-offset-other",
            Class::MapOffsetHeader => "map-offset-header",
            Class::MapLenShort => "map-len-short",
            Class::MapLenLong => "map-len-long",
            Class::MapLenBad => "map-len-bad",
            Class::ListCount => "list-count",
            Class::Revokes => "revokes",
            Class::RevokeOverflow => "revoke-overflow",
            Class::Message => "message",
            Class::ByteFlip => "byte-flip",
            Class::WrongTag => "wrong-tag",
            Class::StaleTag => "stale-tag",
            Class::Duplicate => "duplicate",
            Class::FloodAdmin => "flood-admin",
            Class::FloodData => "flood-data",
            Class::NotifyStale => "notify-stale",
            Class::NotifyBump => "notify-bump",
            Class::HeartbeatStall => "heartbeat-stall",
            Class::HeartbeatRewind => "heartbeat-rewind",
            Class::HeaderGarbage => "header-garbage",
            Class::Unsolicited => "unsolicited",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
