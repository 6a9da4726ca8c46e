//! The chaos device (issue 42, item 2): `davinci-pcidev --chaos SEED[,RATE]` answers a fraction
//! `RATE` of admin requests wrongly, on purpose, so that the guest's module can be shown to
//! survive a hostile device: a wrong reply makes calls fail (or loses the device), never the
//! kernel.
//!
//! Each answered request draws from a PRNG seeded with `SEED` (`fastrand`'s wyrand, which is a
//! pure function of the seed): with probability `RATE` one mutation [`Class`] is picked among
//! those that apply to the request's kind and applied to the encoded completion, or scheduled
//! for the end of the device's pass (interrupt floods, notification words, the heartbeat,
//! BAR2's header). The same seed and the same sequence of requests give the same mutations
//! ([`Chaos::on_reply`] is a function of its state and its input); under a real guest the
//! sequence depends on timing, so a failing run is reproduced from its seed *and* the log: every
//! mutation is logged with the request's number, kind and what was changed (the first
//! [`LOG_FULL`] in full, then one in [`LOG_EVERY`]), with a count per class every
//! [`SUMMARY_EVERY`] requests and at exit.
//!
//! Nothing here may panic on anything the guest sends: every offset is checked, every range is
//! drawn through [`Chaos::pick`], which tolerates empty ranges.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use davinci_hwif::admin::{
    ADMIN_ENTRY_SIZE, ARG_CAPACITY, ARG_OFFSET, MAX_REVOKES, MSG_CAPACITY, MSG_OFFSET,
};
use davinci_hwif::layout::{Bar2Layout, HEADER_FIELDS, NOTIFY_WORDS, PAGE_SIZE};
use davinci_hwif::AdminKind;
use davinci_uapi::DRIVER_CMD_LIST_CLIENTS;

/// Mutations logged in full before the log thins out.
pub const LOG_FULL: u64 = 300;
/// After [`LOG_FULL`], one mutation in this many is logged.
pub const LOG_EVERY: u64 = 50;
/// A summary line every this many requests answered.
pub const SUMMARY_EVERY: u64 = 2000;
/// The default fraction of replies mutated.
pub const DEFAULT_RATE: f64 = 0.05;

const REVOKE_OFFSET: usize = ARG_OFFSET + ARG_CAPACITY;
const REVOKE_SIZE: usize = 24;

/// `--chaos SEED[,RATE]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChaosConfig {
    /// The PRNG's seed.
    pub seed: u64,
    /// The fraction of replies mutated, 0 to 1.
    pub rate: f64,
}

impl ChaosConfig {
    /// Parses `SEED[,RATE]` (SEED decimal or 0x-hex; RATE a fraction in 0..=1).
    ///
    /// # Errors
    /// What is wrong.
    pub fn parse(s: &str) -> Result<ChaosConfig, String> {
        let (seed, rate) = match s.split_once(',') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let seed = seed.trim();
        let seed = match seed.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => seed.parse(),
        }
        .map_err(|_| format!("--chaos '{s}': SEED must be a number (decimal or 0x-hex)"))?;
        let rate = match rate {
            None => DEFAULT_RATE,
            Some(r) => r
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| format!("--chaos '{s}': RATE must be a fraction from 0 to 1"))?,
        };
        Ok(ChaosConfig { seed, rate })
    }
}

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
    const ANY: [Class; 22] = [
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

    const MMAP: [Class; 7] = [
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

/// Something the device does at the end of its pass (it owns the server and BAR2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassAct {
    /// Raise `vector` `times` times.
    Flood {
        /// The vector.
        vector: u16,
        /// How many times.
        times: u32,
    },
    /// Store these `(word index, value)` into the notification words, then raise vector 1.
    Notify(Vec<(u32, u32)>),
    /// Add 1 to every notification word, then raise vector 1.
    NotifyBumpAll,
    /// Subtract this from the heartbeat word.
    HeartbeatRewind(u32),
    /// Write these `(offset, byte)` into BAR2's header (the device restores the header after
    /// [`Chaos::header_restore_due`]).
    HeaderGarbage(Vec<(u64, u8)>),
    /// Push this completion with no request behind it, then raise vector 0.
    Unsolicited(Box<[u8; ADMIN_ENTRY_SIZE]>),
}

/// Extra completions around a mutated one.
#[derive(Debug, Default)]
pub struct Extra {
    /// Pushed before the request's completion.
    pub before: Option<Box<[u8; ADMIN_ENTRY_SIZE]>>,
    /// Pushed after it.
    pub after: Option<Box<[u8; ADMIN_ENTRY_SIZE]>>,
}

/// The chaos layer's state.
pub struct Chaos {
    config: ChaosConfig,
    rng: fastrand::Rng,
    layout: Bar2Layout,
    /// Requests answered.
    requests: u64,
    /// Mutations made.
    mutations: u64,
    counts: BTreeMap<Class, u64>,
    /// Recent tags (for stale completions).
    tags: [u64; 8],
    /// Client ids seen in completions (for wrong ones).
    clients: [u32; 8],
    pending: Vec<PassAct>,
    stall_until: Option<Instant>,
    restore_header_at: Option<Instant>,
    logged: u64,
}

/// `[u8]` slot helpers: bounds-checked, never panicking.
fn get_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    if let Some(s) = b.get_mut(at..at + 8) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

fn zero(b: &mut [u8], from: usize, to: usize) {
    if let Some(s) = b.get_mut(from..to.min(b.len())) {
        s.fill(0);
    }
}

/// The admin kind a request is, for [`Chaos::on_reply`].
pub fn kind_of(op: &davinci_hwif::AdminOp) -> (AdminKind, u32) {
    use davinci_hwif::AdminOp;
    match op {
        AdminOp::Open(_) => (AdminKind::Open, 0),
        AdminOp::Close => (AdminKind::Close, 0),
        AdminOp::Ioctl { request, .. } => (AdminKind::Ioctl, *request),
        AdminOp::MmapTarget { .. } => (AdminKind::MmapTarget, 0),
        AdminOp::WaitAgain { .. } => (AdminKind::WaitAgain, 0),
        AdminOp::Undo { request, .. } => (AdminKind::Undo, *request),
        AdminOp::Inject { .. } => (AdminKind::Inject, 0),
    }
}

fn kind_name(kind: Option<AdminKind>) -> &'static str {
    match kind {
        Some(AdminKind::Open) => "OPEN",
        Some(AdminKind::Close) => "CLOSE",
        Some(AdminKind::Ioctl) => "IOCTL",
        Some(AdminKind::MmapTarget) => "MMAP_TARGET",
        Some(AdminKind::WaitAgain) => "WAIT_AGAIN",
        Some(AdminKind::Undo) => "UNDO",
        Some(AdminKind::Inject) => "INJECT",
        None => "malformed",
    }
}

impl Chaos {
    /// A chaos layer for a BAR2 of `layout`.
    pub fn new(config: ChaosConfig, layout: Bar2Layout) -> Chaos {
        Chaos {
            config,
            rng: fastrand::Rng::with_seed(config.seed),
            layout,
            requests: 0,
            mutations: 0,
            counts: BTreeMap::new(),
            tags: [0; 8],
            clients: [0; 8],
            pending: Vec::new(),
            stall_until: None,
            restore_header_at: None,
            logged: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> ChaosConfig {
        self.config
    }

    /// A number in `lo..=hi` (`lo` when the range is empty).
    fn pick(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            self.rng.u64(lo..=hi)
        }
    }

    fn pick_usize(&mut self, lo: usize, hi: usize) -> usize {
        self.pick(lo as u64, hi as u64) as usize
    }

    fn one_of<T: Copy>(&mut self, xs: &[T]) -> Option<T> {
        if xs.is_empty() {
            None
        } else {
            xs.get(self.rng.usize(..xs.len())).copied()
        }
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Mutations made so far, per class.
    pub fn counts(&self) -> &BTreeMap<Class, u64> {
        &self.counts
    }

    /// The classes that apply to a request of `kind` (`None`: malformed).
    pub fn classes_for(kind: Option<AdminKind>, request: u32) -> Vec<Class> {
        let mut v: Vec<Class> = Class::ANY.to_vec();
        if kind == Some(AdminKind::MmapTarget) {
            v.extend_from_slice(&Class::MMAP);
            // Its reply is what the fault path sizes PTEs from: weigh it up.
            v.extend_from_slice(&Class::MMAP);
        }
        if kind == Some(AdminKind::Ioctl) && request == DRIVER_CMD_LIST_CLIENTS {
            v.push(Class::ListCount);
            v.push(Class::ListCount);
        }
        v.push(Class::Unsolicited);
        v
    }

    /// Called for every completion the device is about to post: draws whether to mutate it
    /// (the rate) and, if so, mutates `slot` in place and/or returns extra completions; a
    /// pass-level mutation is queued for [`take_pass_acts`](Self::take_pass_acts).
    pub fn on_reply(
        &mut self,
        kind: Option<AdminKind>,
        request: u32,
        slot: &mut [u8; ADMIN_ENTRY_SIZE],
    ) -> Extra {
        self.requests += 1;
        let tag = get_u64(slot, 0);
        let client = get_u32(slot, 16);
        let i = (self.requests % 8) as usize;
        if let Some(t) = self.tags.get_mut(i) {
            *t = tag;
        }
        if client != 0 {
            if let Some(c) = self.clients.get_mut(i) {
                *c = client;
            }
        }
        let mut extra = Extra::default();
        if self.rng.f64() < self.config.rate {
            let classes = Self::classes_for(kind, request);
            if let Some(class) = self.one_of(&classes) {
                let what = self.apply(class, kind, slot, &mut extra);
                self.note(class, kind, request, tag, &what);
            }
        }
        if self.requests.is_multiple_of(SUMMARY_EVERY) {
            eprintln!("{}", self.summary());
        }
        extra
    }

    /// Applies `class` (exposed for the tests: every class on every kind).
    pub fn apply(
        &mut self,
        class: Class,
        kind: Option<AdminKind>,
        slot: &mut [u8; ADMIN_ENTRY_SIZE],
        extra: &mut Extra,
    ) -> String {
        let s = &mut slot[..];
        let arg_len = get_u32(s, 20) as usize;
        match class {
            Class::ArgLenLong => {
                let n = self.pick_usize(arg_len.min(ARG_CAPACITY) + 1, ARG_CAPACITY);
                put_u32(s, 20, n as u32);
                format!("arg length {arg_len} -> {n}")
            }
            Class::ArgLenShort => {
                let n = self.pick_usize(0, arg_len.saturating_sub(1));
                zero(s, ARG_OFFSET + n, ARG_OFFSET + ARG_CAPACITY);
                put_u32(s, 20, n as u32);
                format!("arg length {arg_len} -> {n}")
            }
            Class::ArgLenZero => {
                zero(s, ARG_OFFSET, ARG_OFFSET + ARG_CAPACITY);
                put_u32(s, 20, 0);
                format!("arg length {arg_len} -> 0")
            }
            Class::ArgLenHuge => {
                let n = self.pick(ARG_CAPACITY as u64 + 1, u64::from(u32::MAX)) as u32;
                put_u32(s, 20, n);
                format!("arg length {arg_len} -> {n}")
            }
            Class::WrongKind => {
                let old = get_u32(s, 12);
                let new = self
                    .one_of(
                        &[1u32, 2, 3]
                            .into_iter()
                            .filter(|k| *k != old)
                            .collect::<Vec<_>>(),
                    )
                    .unwrap_or(2);
                put_u32(s, 12, new);
                if new == 3 {
                    if get_u32(s, 8) == 0 {
                        let e = self.one_of(&[5u32, 22, 19, 2, 12, 16]).unwrap_or(5);
                        put_u32(s, 8, e);
                    }
                } else {
                    put_u32(s, 8, 0);
                }
                format!("reply kind {old} -> {new}, errno {}", get_u32(s, 8))
            }
            Class::BadKindWord => {
                let w = self
                    .one_of(&[0u32, 4, 5, 0x8000_0000, u32::MAX])
                    .unwrap_or(0);
                put_u32(s, 12, w);
                format!("reply kind word -> {w:#x}")
            }
            Class::BadErrno => {
                let e = self
                    .one_of(&[
                        512u32,
                        513,
                        514,
                        515,
                        516,
                        517,
                        518,
                        521,
                        4095,
                        4096,
                        0x7fff_ffff,
                        0xffff_ffff,
                        0xffff_fff2,
                        11,
                        4,
                        14,
                        133,
                        134,
                    ])
                    .unwrap_or(512);
                put_u32(s, 12, 3);
                put_u32(s, 8, e);
                format!("failed with errno {e} ({})", e as i32)
            }
            Class::WrongClient => {
                let old = get_u32(s, 16);
                let others: Vec<u32> = self
                    .clients
                    .iter()
                    .copied()
                    .filter(|c| *c != 0 && *c != old)
                    .collect();
                let new = match self.rng.u8(..3) {
                    0 => self.one_of(&others).unwrap_or(0),
                    1 => 0,
                    _ => self.rng.u32(..),
                };
                put_u32(s, 16, new);
                format!("client {old:#x} -> {new:#x}")
            }
            Class::MapKind => {
                let old = get_u32(s, ARG_OFFSET);
                let new = self.one_of(&[1u32, 2, 3, 4, 0, 5, u32::MAX]).unwrap_or(0);
                put_u32(s, ARG_OFFSET, new);
                self.ensure_mmap_reply(s);
                format!("map kind {old} -> {new}")
            }
            Class::MapOffsetOutside => {
                let old = get_u64(s, ARG_OFFSET + 8);
                let r = self.layout.region_size;
                let new = match self.rng.u8(..4) {
                    0 => r,
                    1 => r + PAGE_SIZE * self.pick(1, 1 << 20),
                    2 => !(PAGE_SIZE - 1),
                    _ => r - PAGE_SIZE,
                };
                put_u64(s, ARG_OFFSET + 8, new);
                self.ensure_mmap_reply(s);
                format!("map offset {old:#x} -> {new:#x}")
            }
            Class::MapOffsetOther => {
                let old = get_u64(s, ARG_OFFSET + 8);
                let len = get_u64(s, ARG_OFFSET + 16).max(PAGE_SIZE);
                let l = self.layout;
                let last = l.region_size.saturating_sub(len).max(l.heap_offset);
                let page = self.pick(l.heap_offset / PAGE_SIZE, last / PAGE_SIZE);
                let new = page * PAGE_SIZE;
                put_u64(s, ARG_OFFSET + 8, new);
                self.ensure_mmap_reply(s);
                format!("map offset {old:#x} -> {new:#x} (another object's)")
            }
            Class::MapOffsetHeader => {
                let old = get_u64(s, ARG_OFFSET + 8);
                let l = self.layout;
                let new = self
                    .one_of(&[0, l.sq_offset, l.cq_offset, l.list_offset])
                    .unwrap_or(0);
                put_u64(s, ARG_OFFSET + 8, new);
                self.ensure_mmap_reply(s);
                format!("map offset {old:#x} -> {new:#x} (before the heap)")
            }
            Class::MapLenShort => {
                let old = get_u64(s, ARG_OFFSET + 16);
                put_u64(s, ARG_OFFSET + 16, PAGE_SIZE);
                self.ensure_mmap_reply(s);
                format!("map length {old:#x} -> {PAGE_SIZE:#x}")
            }
            Class::MapLenLong => {
                let old = get_u64(s, ARG_OFFSET + 16);
                let off = get_u64(s, ARG_OFFSET + 8);
                let new = match self.rng.u8(..3) {
                    0 => self.layout.region_size.saturating_sub(off).max(PAGE_SIZE),
                    1 => old.saturating_mul(2).max(PAGE_SIZE) & !(PAGE_SIZE - 1),
                    _ => !(PAGE_SIZE - 1),
                };
                put_u64(s, ARG_OFFSET + 16, new);
                self.ensure_mmap_reply(s);
                format!("map length {old:#x} -> {new:#x}")
            }
            Class::MapLenBad => {
                let old = get_u64(s, ARG_OFFSET + 16);
                let new = self.one_of(&[0u64, 1, 4095, old | 1]).unwrap_or(0);
                put_u64(s, ARG_OFFSET + 16, new);
                self.ensure_mmap_reply(s);
                format!("map length {old:#x} -> {new:#x}")
            }
            Class::ListCount => {
                // ListClientsArgs: count u32 @12 of the arg.
                let old = get_u32(s, ARG_OFFSET + 12);
                let new = self
                    .one_of(&[u32::MAX, 321, 1 << 20, old.saturating_add(1), 0x8000_0000])
                    .unwrap_or(u32::MAX);
                if arg_len >= 16 {
                    put_u32(s, ARG_OFFSET + 12, new);
                }
                format!("list count {old} -> {new}")
            }
            Class::Revokes => {
                let n = self.pick_usize(1, MAX_REVOKES);
                let old = get_u32(s, 28) as usize;
                for i in old.min(MAX_REVOKES)..n.max(old.min(MAX_REVOKES)) {
                    let at = REVOKE_OFFSET + i * REVOKE_SIZE;
                    let client = match self.rng.u8(..3) {
                        0 => self.one_of(&self.clients.clone()).unwrap_or(0),
                        1 => get_u32(s, 16),
                        _ => self.rng.u32(..),
                    };
                    let cookie = match self.rng.u8(..3) {
                        0 => 0,
                        1 => self.rng.u64(..) & !(PAGE_SIZE - 1),
                        _ => self.rng.u64(..),
                    };
                    let len = match self.rng.u8(..3) {
                        0 => u64::MAX,
                        1 => self.pick(0, 1 << 30),
                        _ => PAGE_SIZE,
                    };
                    put_u32(s, at, client);
                    put_u32(s, at + 4, 0);
                    put_u64(s, at + 8, cookie);
                    put_u64(s, at + 16, len);
                }
                let total = n.max(old.min(MAX_REVOKES));
                put_u32(s, 28, total as u32);
                format!("revocations {old} -> {total} (random clients, cookies, lengths)")
            }
            Class::RevokeOverflow => {
                let n = self.pick(MAX_REVOKES as u64 + 1, u64::from(u32::MAX)) as u32;
                let old = get_u32(s, 28);
                // The listed entries stay as they are (zero past the old count: valid).
                put_u32(s, 28, n);
                format!("revocation count {old} -> {n}")
            }
            Class::Message => {
                zero(s, MSG_OFFSET, ADMIN_ENTRY_SIZE);
                let what;
                let n = if self.rng.bool() {
                    let n = self.pick_usize(1, MSG_CAPACITY);
                    for i in 0..n {
                        let b = self.rng.u8(0x80..=0xff);
                        if let Some(x) = s.get_mut(MSG_OFFSET + i) {
                            *x = b;
                        }
                    }
                    what = "not UTF-8";
                    n
                } else {
                    let text = b"\x1b[2J\x1b[31mdevice says\r\n\x07\x00%s%n%p\xe2\x80\xaeevil\t";
                    let n = text.len().min(MSG_CAPACITY);
                    if let Some(d) = s.get_mut(MSG_OFFSET..MSG_OFFSET + n) {
                        d.copy_from_slice(&text[..n]);
                    }
                    what = "escapes and control characters";
                    n
                };
                put_u32(s, 24, n as u32);
                format!("message of {n} bytes, {what}")
            }
            Class::ByteFlip => {
                let n = self.pick_usize(1, 8);
                let mut at = Vec::with_capacity(n);
                for _ in 0..n {
                    let i = self.rng.usize(..ADMIN_ENTRY_SIZE);
                    let bit = self.rng.u8(..8);
                    if let Some(b) = s.get_mut(i) {
                        *b ^= 1 << bit;
                    }
                    at.push(format!("{i}.{bit}"));
                }
                format!("bits flipped at {}", at.join(","))
            }
            Class::WrongTag => {
                let old = get_u64(s, 0);
                let new = match self.rng.u8(..3) {
                    0 => old.wrapping_add(1),
                    1 => old.wrapping_sub(1),
                    _ => self.rng.u64(..),
                };
                put_u64(s, 0, new);
                format!("tag {old} -> {new}")
            }
            Class::StaleTag => {
                let mut stale = Box::new(*slot);
                let t = self.one_of(&self.tags.clone()).unwrap_or(0);
                let old = get_u64(&slot[..], 0);
                let t = if t == old { old.wrapping_sub(1) } else { t };
                put_u64(&mut stale[..], 0, t);
                extra.before = Some(stale);
                format!("a completion for old tag {t} before tag {old}'s")
            }
            Class::Duplicate => {
                extra.after = Some(Box::new(*slot));
                format!("completion of tag {} posted twice", get_u64(&slot[..], 0))
            }
            Class::FloodAdmin | Class::FloodData => {
                let times = self.pick(2, 2000) as u32;
                let vector = if class == Class::FloodAdmin { 0 } else { 1 };
                self.pending.push(PassAct::Flood { vector, times });
                format!("vector {vector} raised {times} times")
            }
            Class::NotifyStale => {
                let n = self.pick(1, u64::from(NOTIFY_WORDS)) as u32;
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let w = self.rng.u32(..NOTIFY_WORDS);
                    let val = match self.rng.u8(..3) {
                        0 => 0,
                        1 => self.rng.u32(..),
                        _ => u32::MAX,
                    };
                    v.push((w, val));
                }
                self.pending.push(PassAct::Notify(v));
                format!("{n} notification words rewound or garbage")
            }
            Class::NotifyBump => {
                self.pending.push(PassAct::NotifyBumpAll);
                "every notification word bumped".into()
            }
            Class::HeartbeatStall => {
                // Mostly below the guest's 3 s, sometimes beyond it.
                let ms = if self.rng.u8(..3) == 0 {
                    self.pick(3_200, 6_000)
                } else {
                    self.pick(100, 2_500)
                };
                let until = Instant::now() + Duration::from_millis(ms);
                self.stall_until = Some(self.stall_until.map_or(until, |u| u.max(until)));
                format!("heartbeat stalls for {ms} ms")
            }
            Class::HeartbeatRewind => {
                let by = self.pick(1, 1 << 20) as u32;
                self.pending.push(PassAct::HeartbeatRewind(by));
                format!("heartbeat rewound by {by}")
            }
            Class::HeaderGarbage => {
                let n = self.pick_usize(1, 24);
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let at = self.rng.u64(..HEADER_FIELDS as u64);
                    v.push((at, self.rng.u8(..)));
                }
                let ms = self.pick(50, 1_500);
                self.pending.push(PassAct::HeaderGarbage(v));
                let until = Instant::now() + Duration::from_millis(ms);
                self.restore_header_at = Some(until);
                format!("{n} header bytes garbage for {ms} ms")
            }
            Class::Unsolicited => {
                let mut c = Box::new(*slot);
                let t = match self.rng.u8(..3) {
                    0 => get_u64(&slot[..], 0).wrapping_add(1),
                    1 => self.one_of(&self.tags.clone()).unwrap_or(0),
                    _ => self.rng.u64(..),
                };
                put_u64(&mut c[..], 0, t);
                self.pending.push(PassAct::Unsolicited(c));
                format!("an unsolicited completion (tag {t}) after the pass")
            }
        }
        .replace('\n', " ")
            + match kind {
                Some(_) => "",
                None => " (reply to a malformed request)",
            }
    }

    /// An MMAP_TARGET reply mutated from an error (no arg) still gets the reply's shape.
    fn ensure_mmap_reply(&mut self, s: &mut [u8]) {
        if (get_u32(s, 20) as usize) < 24 {
            put_u32(s, 20, 24);
            put_u32(s, 12, 1);
            put_u32(s, 8, 0);
            if get_u64(s, ARG_OFFSET + 16) == 0 {
                put_u64(s, ARG_OFFSET + 16, PAGE_SIZE);
            }
            if get_u32(s, ARG_OFFSET) == 0 {
                put_u32(s, ARG_OFFSET, 4);
            }
        }
    }

    fn note(&mut self, class: Class, kind: Option<AdminKind>, request: u32, tag: u64, what: &str) {
        self.mutations += 1;
        *self.counts.entry(class).or_insert(0) += 1;
        let n = self.mutations;
        if n <= LOG_FULL || n.is_multiple_of(LOG_EVERY) {
            self.logged += 1;
            let req = if request != 0 {
                format!(" {request:#010x}")
            } else {
                String::new()
            };
            eprintln!(
                "davinci-pcidev: chaos seed {} mutation {n} at request {} ({}{req}, tag {tag}): {class}: {what}",
                self.config.seed,
                self.requests,
                kind_name(kind),
            );
            if n == LOG_FULL {
                eprintln!(
                    "davinci-pcidev: chaos: {LOG_FULL} mutations logged; from now on one in {LOG_EVERY} (counts every {SUMMARY_EVERY} requests and at exit)"
                );
            }
        }
    }

    /// The pass-level mutations due now (taken).
    pub fn take_pass_acts(&mut self) -> Vec<PassAct> {
        std::mem::take(&mut self.pending)
    }

    /// Whether the heartbeat stands still now.
    pub fn heartbeat_stalled(&mut self, now: Instant) -> bool {
        match self.stall_until {
            Some(u) if now < u => true,
            Some(_) => {
                self.stall_until = None;
                false
            }
            None => false,
        }
    }

    /// Whether BAR2's header garbage is due to be restored now (once).
    pub fn header_restore_due(&mut self, now: Instant) -> bool {
        match self.restore_header_at {
            Some(u) if now >= u => {
                self.restore_header_at = None;
                true
            }
            _ => false,
        }
    }

    /// A line with the counts so far.
    pub fn summary(&self) -> String {
        let per: Vec<String> = self
            .counts
            .iter()
            .map(|(c, n)| format!("{c}={n}"))
            .collect();
        format!(
            "davinci-pcidev: chaos seed {} rate {}: {} requests answered, {} mutated: {}",
            self.config.seed,
            self.config.rate,
            self.requests,
            self.mutations,
            if per.is_empty() {
                "none".to_string()
            } else {
                per.join(" ")
            }
        )
    }
}

#[cfg(test)]
mod tests;
