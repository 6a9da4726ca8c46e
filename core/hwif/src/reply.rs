//! The admin queue's completions (one per request) and MMAP_TARGET's reply, encoded into
//! and decoded from [`ADMIN_ENTRY_SIZE`]-byte slots; the layout is in [`crate::admin`]'s
//! module documentation.

use crate::admin::{
    tag_of, zero_from, ArgBuf, DecodeError, ADMIN_ENTRY_SIZE, ARG_CAPACITY, ARG_OFFSET,
    MAX_REVOKES, MSG_CAPACITY, MSG_OFFSET, REVOKE_OFFSET, REVOKE_SIZE,
};
use crate::bytes::{get_u32, get_u64, put_u32, put_u64};

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    /// Done; the arg bytes hold the reply (an ioctl's written-back argument, MMAP_TARGET's
    /// [`MmapReply`]).
    Done,
    /// A WAIT_EVENT that must block: the transport sleeps (woken by vector 1) and asks again.
    /// The arg bytes are the ioctl's as the device left them.
    WaitNeeded,
    /// Failed with the errno; the arg bytes hold what the call wrote back (WAIT_EVENT's
    /// status, for instance) and the message says what was wrong.
    Failed,
}

impl ReplyKind {
    /// Its word.
    pub const fn word(self) -> u32 {
        match self {
            ReplyKind::Done => 1,
            ReplyKind::WaitNeeded => 2,
            ReplyKind::Failed => 3,
        }
    }

    const fn from_word(w: u32) -> Option<Self> {
        match w {
            1 => Some(ReplyKind::Done),
            2 => Some(ReplyKind::WaitNeeded),
            3 => Some(ReplyKind::Failed),
            _ => None,
        }
    }
}

/// Pages a request freed that a client may still map: the guest unmaps what `client` maps
/// of `[cookie, cookie + len)` before its next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Revoke {
    /// The client whose mappings go.
    pub client: u32,
    /// The mmap cookie of the object.
    pub cookie: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// One completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The request's tag (of a garbage request: its first 8 bytes).
    pub tag: u64,
    /// How it ended.
    pub reply: ReplyKind,
    /// 0, or the positive errno of [`ReplyKind::Failed`].
    pub errno: u32,
    /// The open's `client`, its handle in the device's client table (OPEN: the new open's).
    pub client: u32,
    /// Reply arg bytes.
    pub arg: ArgBuf,
    msg_len: usize,
    msg: [u8; MSG_CAPACITY],
    revoke_count: u32,
    revokes: [Revoke; MAX_REVOKES],
}

impl Completion {
    /// A completion; `msg` is cut to [`MSG_CAPACITY`] bytes at a character boundary.
    pub fn new(
        tag: u64,
        reply: ReplyKind,
        errno: u32,
        client: u32,
        arg: ArgBuf,
        msg: &str,
    ) -> Self {
        let mut cut = msg.len().min(MSG_CAPACITY);
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut m = [0u8; MSG_CAPACITY];
        m[..cut].copy_from_slice(&msg.as_bytes()[..cut]);
        Completion {
            tag,
            reply,
            errno,
            client,
            arg,
            msg_len: cut,
            msg: m,
            revoke_count: 0,
            revokes: [Revoke::default(); MAX_REVOKES],
        }
    }

    /// Adds a revocation (counted beyond [`MAX_REVOKES`], listed up to it).
    pub fn revoke(&mut self, r: Revoke) {
        if let Some(slot) = self.revokes.get_mut(self.revoke_count as usize) {
            *slot = r;
        }
        self.revoke_count = self.revoke_count.saturating_add(1);
    }

    /// The revocations listed.
    pub fn revokes(&self) -> &[Revoke] {
        &self.revokes[..(self.revoke_count as usize).min(MAX_REVOKES)]
    }

    /// More revocations were made than listed: the guest unmaps every client's mappings.
    pub fn revokes_overflowed(&self) -> bool {
        self.revoke_count as usize > MAX_REVOKES
    }

    /// The message.
    pub fn message(&self) -> &str {
        core::str::from_utf8(&self.msg[..self.msg_len]).unwrap_or("")
    }

    /// Encodes into `slot` (overwritten whole).
    pub fn encode(&self, slot: &mut [u8; ADMIN_ENTRY_SIZE]) {
        slot.fill(0);
        put_u64(slot, 0, self.tag);
        put_u32(slot, 8, self.errno);
        put_u32(slot, 12, self.reply.word());
        put_u32(slot, 16, self.client);
        put_u32(slot, 20, self.arg.as_slice().len() as u32);
        put_u32(slot, 24, self.msg_len as u32);
        put_u32(slot, 28, self.revoke_count);
        slot[ARG_OFFSET..ARG_OFFSET + self.arg.as_slice().len()]
            .copy_from_slice(self.arg.as_slice());
        for (i, r) in self.revokes().iter().enumerate() {
            let at = REVOKE_OFFSET + i * REVOKE_SIZE;
            put_u32(slot, at, r.client);
            put_u64(slot, at + 8, r.cookie);
            put_u64(slot, at + 16, r.len);
        }
        slot[MSG_OFFSET..MSG_OFFSET + self.msg_len].copy_from_slice(&self.msg[..self.msg_len]);
    }

    /// Decodes and validates a copy of a slot.
    ///
    /// # Errors
    /// The first field at fault.
    pub fn decode(slot: &[u8]) -> Result<Completion, DecodeError> {
        if slot.len() != ADMIN_ENTRY_SIZE {
            return Err(DecodeError::Length(slot.len()));
        }
        let w = |at| get_u32(slot, at).ok_or(DecodeError::Length(slot.len()));
        let tag = tag_of(slot);
        let errno = w(8)?;
        let rw = w(12)?;
        let reply = ReplyKind::from_word(rw).ok_or(DecodeError::Reply(rw))?;
        if (reply == ReplyKind::Failed) != (errno != 0) {
            return Err(DecodeError::Errno(errno));
        }
        let client = w(16)?;
        let arg_len = w(20)?;
        let msg_len = w(24)?;
        let revoke_count = w(28)?;
        let len = arg_len as usize;
        if len > ARG_CAPACITY {
            return Err(DecodeError::ArgLen(arg_len));
        }
        let mlen = msg_len as usize;
        if mlen > MSG_CAPACITY {
            return Err(DecodeError::MsgLen(msg_len));
        }
        let listed = (revoke_count as usize).min(MAX_REVOKES);
        zero_from(slot, ARG_OFFSET + len, REVOKE_OFFSET)?;
        zero_from(slot, REVOKE_OFFSET + listed * REVOKE_SIZE, MSG_OFFSET)?;
        zero_from(slot, MSG_OFFSET + mlen, ADMIN_ENTRY_SIZE)?;
        let msg = &slot[MSG_OFFSET..MSG_OFFSET + mlen];
        let text = core::str::from_utf8(msg).map_err(|_| DecodeError::MsgUtf8)?;
        let arg = ArgBuf::from_slice(&slot[ARG_OFFSET..ARG_OFFSET + len])
            .ok_or(DecodeError::ArgLen(arg_len))?;
        let mut c = Completion::new(tag, reply, errno, client, arg, text);
        for i in 0..listed {
            let at = REVOKE_OFFSET + i * REVOKE_SIZE;
            let bad = DecodeError::Revoke(i);
            if get_u32(slot, at + 4) != Some(0) {
                return Err(bad);
            }
            c.revokes[i] = Revoke {
                client: get_u32(slot, at).ok_or(bad)?,
                cookie: get_u64(slot, at + 8).ok_or(bad)?,
                len: get_u64(slot, at + 16).ok_or(bad)?,
            };
        }
        c.revoke_count = revoke_count;
        Ok(c)
    }
}

/// What an mmap cookie maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapKind {
    /// A stream's command ring.
    CmdRing,
    /// A stream's event ring.
    EventRing,
    /// A stream's doorbell page (in BAR2: the guest maps BAR0's Doorbell for the wake-up).
    Doorbell,
    /// Device memory (an allocation's host view).
    Memory,
}

impl MapKind {
    const fn word(self) -> u32 {
        match self {
            MapKind::CmdRing => 1,
            MapKind::EventRing => 2,
            MapKind::Doorbell => 3,
            MapKind::Memory => 4,
        }
    }

    const fn from_word(w: u32) -> Option<Self> {
        match w {
            1 => Some(MapKind::CmdRing),
            2 => Some(MapKind::EventRing),
            3 => Some(MapKind::Doorbell),
            4 => Some(MapKind::Memory),
            _ => None,
        }
    }
}

/// MMAP_TARGET's reply: kind `u32` @0, reserved `u32` @4, BAR2 offset `u64` @8, length
/// `u64` @16 (both page multiples).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmapReply {
    /// What it is.
    pub kind: MapKind,
    /// Where in BAR2.
    pub offset: u64,
    /// How many bytes (page-rounded: what the guest may map).
    pub len: u64,
}

impl MmapReply {
    /// Encoded size.
    pub const SIZE: usize = 24;

    /// As completion arg bytes.
    pub fn to_arg(&self) -> ArgBuf {
        let mut a = ArgBuf::zeroed(Self::SIZE).unwrap_or(ArgBuf::EMPTY);
        let b = a.as_mut_slice();
        put_u32(b, 0, self.kind.word());
        put_u64(b, 8, self.offset);
        put_u64(b, 16, self.len);
        a
    }

    /// From completion arg bytes, validated.
    ///
    /// # Errors
    /// The field at fault.
    pub fn from_arg(b: &[u8]) -> Result<MmapReply, DecodeError> {
        if b.len() != Self::SIZE {
            return Err(DecodeError::ArgLen(b.len() as u32));
        }
        let kw = get_u32(b, 0).unwrap_or(0);
        let kind = MapKind::from_word(kw).ok_or(DecodeError::MapKind(kw))?;
        zero_from(b, 4, 8)?;
        let offset = get_u64(b, 8).unwrap_or(1);
        let len = get_u64(b, 16).unwrap_or(0);
        let page = crate::layout::PAGE_SIZE;
        if len == 0 || !offset.is_multiple_of(page) || !len.is_multiple_of(page) {
            return Err(DecodeError::MapRange);
        }
        Ok(MmapReply { kind, offset, len })
    }
}
