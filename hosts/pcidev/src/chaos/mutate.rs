//! Applying one mutation class to an encoded completion (or queueing it for the pass).
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_hwif::admin::{
    ADMIN_ENTRY_SIZE, ARG_CAPACITY, ARG_OFFSET, MAX_REVOKES, MSG_CAPACITY, MSG_OFFSET,
};
use davinci_hwif::layout::{HEADER_FIELDS, NOTIFY_WORDS, PAGE_SIZE};
use davinci_hwif::AdminKind;

use super::{Chaos, Class, Extra, PassAct, REVOKE_OFFSET, REVOKE_SIZE};

/// `[u8]` slot helpers: bounds-checked, never panicking.
pub(super) fn get_u32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

pub(super) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

pub(super) fn get_u64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

pub(super) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    if let Some(s) = b.get_mut(at..at + 8) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

fn zero(b: &mut [u8], from: usize, to: usize) {
    if let Some(s) = b.get_mut(from..to.min(b.len())) {
        s.fill(0);
    }
}

impl Chaos {
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
}
