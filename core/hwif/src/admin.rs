//! The admin queue's entries: a request per client control call the guest's transport
//! forwards (OPEN, CLOSE, IOCTL, MMAP_TARGET, WAIT_AGAIN, UNDO), the host's test hook (INJECT),
//! and a completion per request, each one
//! [`ADMIN_ENTRY_SIZE`]-byte slot of a `davinci-ring` ring (like NVMe's admin SQ/CQ).
//!
//! Request (little-endian): tag `u64` @0, kind `u32` @8, client `u32` @12, ioctl request
//! number `u32` @16 (IOCTL, UNDO; WAIT_AGAIN: whether the wait's deadline passed, 0 or 1;
//! zero for the others), arg length
//! `u32` @20, reserved `u64` @24 (zero), arg bytes @32 ([`ARG_CAPACITY`]; past the length
//! zero), reserved to the end (zero).
//!
//! Completion: tag `u64` @0, errno `u32` @8 (0, or the positive errno of a failure), reply
//! kind `u32` @12, client `u32` @16, arg length `u32` @20, message length `u32` @24,
//! revocations `u32` @28, arg bytes @32 ([`ARG_CAPACITY`]; past the length zero), the
//! revocation entries @[`REVOKE_OFFSET`] (at most [`MAX_REVOKES`] of 24 bytes: client `u32`,
//! zero `u32`, cookie `u64`, length `u64`; past the count zero), the message
//! @[`MSG_OFFSET`] ([`MSG_CAPACITY`] bytes of UTF-8; past its length zero). A revocation
//! says the guest must unmap what the client maps of `[cookie, cookie + length)` before it
//! sends another request: the device freed those pages (they are zeroed and may go to
//! another client). A count above [`MAX_REVOKES`] says more were made than the slot lists:
//! the guest unmaps everything every client maps.
//!
//! Completions and MMAP_TARGET's reply are in [`crate::reply`].
//!
//! Decoding is a pure function of a copy of the slot (the ring copies each slot out once):
//! every field is checked, and a bad one is a [`DecodeError`] naming it. The tag is readable
//! from any slot ([`tag_of`]), so the device answers even a garbage request with an error
//! completion carrying its tag.

use core::fmt;

use davinci_uapi::args::commands::COMMANDS;

use crate::bytes::{get_u32, get_u64, put_u32, put_u64};

/// Bytes per admin slot.
pub const ADMIN_ENTRY_SIZE: usize = 1024;
/// Slots per admin ring.
pub const ADMIN_DEPTH: u32 = 16;
/// One admin slot as the ring copies it: 128 little-endian words.
pub type AdminSlot = [u64; ADMIN_ENTRY_SIZE / 8];
/// Where the arg bytes start (request and completion).
pub const ARG_OFFSET: usize = 32;
/// Arg bytes a slot holds.
pub const ARG_CAPACITY: usize = 256;
/// Where a completion's revocation entries start.
pub const REVOKE_OFFSET: usize = ARG_OFFSET + ARG_CAPACITY;
/// Bytes of one revocation entry.
pub const REVOKE_SIZE: usize = 24;
/// Revocation entries a completion lists.
pub const MAX_REVOKES: usize = 26;
/// Where a completion's message starts.
pub const MSG_OFFSET: usize = 928;
const _: () = assert!(REVOKE_OFFSET + MAX_REVOKES * REVOKE_SIZE <= MSG_OFFSET);
/// Message bytes a completion holds.
pub const MSG_CAPACITY: usize = ADMIN_ENTRY_SIZE - MSG_OFFSET;

/// The largest `_IOC_SIZE` of the ABI's commands.
pub const MAX_IOCTL_ARG: usize = {
    let mut m = 0;
    let mut i = 0;
    while i < COMMANDS.len() {
        if COMMANDS[i].size > m {
            m = COMMANDS[i].size;
        }
        i += 1;
    }
    m
};
const _: () = assert!(MAX_IOCTL_ARG <= ARG_CAPACITY && OpenArgs::SIZE <= ARG_CAPACITY);

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminKind {
    /// Attach a client ([`OpenArgs`] in the arg bytes); the completion's client is its id.
    Open,
    /// Detach a client and release everything it holds.
    Close,
    /// One ioctl of a client: the request number and its `_IOC_SIZE` arg bytes.
    Ioctl,
    /// Where a client's mmap cookie lies in BAR2 (arg: cookie `u64`, length `u64`); the
    /// completion's arg is a [`MmapReply`].
    MmapTarget,
    /// A WAIT_EVENT that completed [`WaitNeeded`](crate::ReplyKind::WaitNeeded), asked again
    /// (after vector 1, a signal, or its deadline): its arg bytes as the first completion left
    /// them; whether the deadline passed.
    WaitAgain,
    /// Undo what an IOCTL created (the request number and the reply's arg bytes): the guest
    /// could not hand the reply to its caller, who so cannot know the handle.
    Undo,
    /// The host's fault injection for tests (the module's `inject` parameter, root only): the
    /// arg is its text (UTF-8, at most [`INJECT_TEXT_MAX`] bytes: a rule, `none` or `reset`);
    /// client 0. No client can send it: the guest's transport alone writes the admin queue.
    Inject,
}

/// The longest INJECT text (the kernel parameter's buffer holds 63 bytes and a NUL).
pub const INJECT_TEXT_MAX: usize = 63;

impl AdminKind {
    /// Its word.
    pub const fn word(self) -> u32 {
        match self {
            AdminKind::Open => 1,
            AdminKind::Close => 2,
            AdminKind::Ioctl => 3,
            AdminKind::MmapTarget => 4,
            AdminKind::WaitAgain => 5,
            AdminKind::Undo => 6,
            AdminKind::Inject => 7,
        }
    }

    const fn from_word(w: u32) -> Option<Self> {
        match w {
            1 => Some(AdminKind::Open),
            2 => Some(AdminKind::Close),
            3 => Some(AdminKind::Ioctl),
            4 => Some(AdminKind::MmapTarget),
            5 => Some(AdminKind::WaitAgain),
            6 => Some(AdminKind::Undo),
            7 => Some(AdminKind::Inject),
            _ => None,
        }
    }
}

/// Why an admin slot was refused: the field at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The slot is not [`ADMIN_ENTRY_SIZE`] bytes (or an arg not its kind's size): the length.
    Length(usize),
    /// The kind word.
    Kind(u32),
    /// A request field that must be zero for its kind (`"client"`, `"request"`).
    NotZero(&'static str, u32),
    /// The arg length: beyond [`ARG_CAPACITY`], or not what the kind carries.
    ArgLen(u32),
    /// A non-zero byte past the arg, the message, or in a reserved field: its offset.
    Reserved(usize),
    /// OPEN's role word (0 client, 1 control).
    Role(u32),
    /// OPEN's admin word (0 or 1).
    Admin(u32),
    /// The reply kind word.
    Reply(u32),
    /// The errno does not match the reply kind (a failure without one, a success with one).
    Errno(u32),
    /// The message length.
    MsgLen(u32),
    /// The message is not UTF-8.
    MsgUtf8,
    /// WAIT_AGAIN's deadline word (0 or 1).
    Deadline(u32),
    /// A revocation entry: its index.
    Revoke(usize),
    /// MMAP_TARGET's reply: its map kind word.
    MapKind(u32),
    /// MMAP_TARGET's reply: offset or length not page aligned, or zero length.
    MapRange,
    /// INJECT's text is not UTF-8.
    InjectUtf8,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Length(n) => write!(f, "admin entry of {n} bytes"),
            DecodeError::Kind(k) => write!(f, "admin request kind {k} is no kind (1..=7)"),
            DecodeError::NotZero(name, v) => {
                write!(
                    f,
                    "admin request field {name} is {v}: must be 0 for this kind"
                )
            }
            DecodeError::ArgLen(n) => {
                write!(
                    f,
                    "admin arg length {n}: beyond {ARG_CAPACITY} or wrong for its kind"
                )
            }
            DecodeError::Reserved(at) => write!(f, "admin entry byte {at} is reserved: must be 0"),
            DecodeError::Role(r) => write!(f, "OPEN role {r}: 0 (client) or 1 (control)"),
            DecodeError::Admin(a) => write!(f, "OPEN admin flag {a}: 0 or 1"),
            DecodeError::Reply(k) => write!(f, "admin reply kind {k} is no kind (1..=3)"),
            DecodeError::Errno(e) => write!(f, "admin errno {e} does not match the reply kind"),
            DecodeError::MsgLen(n) => write!(f, "admin message length {n} beyond {MSG_CAPACITY}"),
            DecodeError::MsgUtf8 => f.write_str("admin message is not UTF-8"),
            DecodeError::Deadline(d) => write!(f, "WAIT_AGAIN deadline word {d}: 0 or 1"),
            DecodeError::Revoke(i) => {
                write!(
                    f,
                    "admin completion revocation {i}: its reserved word is not 0"
                )
            }
            DecodeError::MapKind(k) => write!(f, "MMAP_TARGET map kind {k} is no kind (1..=4)"),
            DecodeError::MapRange => f.write_str("MMAP_TARGET range is empty or not page aligned"),
            DecodeError::InjectUtf8 => f.write_str("INJECT text is not UTF-8"),
        }
    }
}

/// Arg bytes: at most [`ARG_CAPACITY`], inline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ArgBuf {
    len: usize,
    bytes: [u8; ARG_CAPACITY],
}

impl fmt::Debug for ArgBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ArgBuf").field(&self.as_slice()).finish()
    }
}

impl ArgBuf {
    /// No bytes.
    pub const EMPTY: ArgBuf = ArgBuf {
        len: 0,
        bytes: [0; ARG_CAPACITY],
    };

    /// `len` zero bytes; `None` beyond [`ARG_CAPACITY`].
    pub fn zeroed(len: usize) -> Option<ArgBuf> {
        (len <= ARG_CAPACITY).then_some(ArgBuf {
            len,
            bytes: [0; ARG_CAPACITY],
        })
    }

    /// A copy of `b`; `None` beyond [`ARG_CAPACITY`].
    pub fn from_slice(b: &[u8]) -> Option<ArgBuf> {
        let mut a = ArgBuf::zeroed(b.len())?;
        a.as_mut_slice().copy_from_slice(b);
        Some(a)
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// The bytes, to write the reply into.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len]
    }
}

/// OPEN's arguments: who the guest says opened the device (its transport established it).
/// Encoded: role `u32` @0, pid `u32` @4, uid `u32` @8, admin `u32` @12, comm @16 (16 bytes),
/// container @32 (64 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenArgs {
    /// `false` for a client, `true` for a control (operator) open.
    pub control: bool,
    /// Process id.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// May change device sharing.
    pub admin: bool,
    /// Process name, NUL-padded.
    pub comm: [u8; 16],
    /// Container id, NUL-padded.
    pub container: [u8; 64],
}

impl OpenArgs {
    /// Encoded size.
    pub const SIZE: usize = 96;

    fn encode(&self, b: &mut [u8]) {
        put_u32(b, 0, u32::from(self.control));
        put_u32(b, 4, self.pid);
        put_u32(b, 8, self.uid);
        put_u32(b, 12, u32::from(self.admin));
        b[16..32].copy_from_slice(&self.comm);
        b[32..96].copy_from_slice(&self.container);
    }

    fn decode(b: &[u8]) -> Result<OpenArgs, DecodeError> {
        if b.len() != Self::SIZE {
            return Err(DecodeError::ArgLen(b.len() as u32));
        }
        let w = |at| get_u32(b, at).ok_or(DecodeError::Length(b.len()));
        let control = match w(0)? {
            0 => false,
            1 => true,
            r => return Err(DecodeError::Role(r)),
        };
        let admin = match w(12)? {
            0 => false,
            1 => true,
            a => return Err(DecodeError::Admin(a)),
        };
        let mut comm = [0u8; 16];
        comm.copy_from_slice(&b[16..32]);
        let mut container = [0u8; 64];
        container.copy_from_slice(&b[32..96]);
        Ok(OpenArgs {
            control,
            pid: w(4)?,
            uid: w(8)?,
            admin,
            comm,
            container,
        })
    }
}

/// What a request asks, with its arguments.
// Inline arg bytes (no heap): the IOCTL variant is the big one, and every request is.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminOp {
    /// [`AdminKind::Open`].
    Open(OpenArgs),
    /// [`AdminKind::Close`].
    Close,
    /// [`AdminKind::Ioctl`]: the request number and its arg bytes.
    Ioctl {
        /// The ioctl request number (checked by the device's dispatch, `ENOTTY`).
        request: u32,
        /// Its arg bytes.
        arg: ArgBuf,
    },
    /// [`AdminKind::MmapTarget`].
    MmapTarget {
        /// The mmap cookie (offset) the client passed.
        cookie: u64,
        /// The length it maps.
        len: u64,
    },
    /// [`AdminKind::WaitAgain`].
    WaitAgain {
        /// The WAIT_EVENT's arg bytes, as the last completion returned them.
        arg: ArgBuf,
        /// The wait's deadline passed: not reached now is `ETIMEDOUT`.
        timed_out: bool,
    },
    /// [`AdminKind::Undo`].
    Undo {
        /// The ioctl request number that created something.
        request: u32,
        /// Its reply's arg bytes (naming the handle).
        arg: ArgBuf,
    },
    /// [`AdminKind::Inject`]: the text (UTF-8, at most [`INJECT_TEXT_MAX`] bytes, checked by
    /// [`AdminRequest::decode`]; [`AdminOp::inject_text`] reads it).
    Inject {
        /// Its bytes.
        text: ArgBuf,
    },
}

impl AdminOp {
    /// An INJECT request for `text`, or `None` if it is longer than [`INJECT_TEXT_MAX`].
    pub fn inject(text: &str) -> Option<AdminOp> {
        if text.len() > INJECT_TEXT_MAX {
            return None;
        }
        ArgBuf::from_slice(text.as_bytes()).map(|text| AdminOp::Inject { text })
    }

    /// An INJECT's text (empty for the other kinds, or if not UTF-8, which decoding refuses).
    pub fn inject_text(&self) -> &str {
        match self {
            AdminOp::Inject { text } => core::str::from_utf8(text.as_slice()).unwrap_or(""),
            _ => "",
        }
    }
}

/// One decoded request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminRequest {
    /// The guest's tag, echoed in the completion.
    pub tag: u64,
    /// The open's `client`, its handle in the device's client table (0 for OPEN).
    pub client: u32,
    /// What it asks.
    pub op: AdminOp,
}

/// The tag of any slot (its first 8 bytes), so garbage gets an answer the guest can match.
pub fn tag_of(slot: &[u8]) -> u64 {
    get_u64(slot, 0).unwrap_or(0)
}

pub(crate) fn zero_from(b: &[u8], from: usize, to: usize) -> Result<(), DecodeError> {
    match b.get(from..to).and_then(|s| s.iter().position(|&x| x != 0)) {
        Some(at) => Err(DecodeError::Reserved(from + at)),
        None => Ok(()),
    }
}

impl AdminRequest {
    /// Encodes the request into `slot` ([`ADMIN_ENTRY_SIZE`] bytes, overwritten whole).
    pub fn encode(&self, slot: &mut [u8; ADMIN_ENTRY_SIZE]) {
        slot.fill(0);
        let (kind, request, arg_len) = match &self.op {
            AdminOp::Open(_) => (AdminKind::Open, 0, OpenArgs::SIZE),
            AdminOp::Close => (AdminKind::Close, 0, 0),
            AdminOp::Ioctl { request, arg } => (AdminKind::Ioctl, *request, arg.len),
            AdminOp::MmapTarget { .. } => (AdminKind::MmapTarget, 0, 16),
            AdminOp::WaitAgain { arg, timed_out } => {
                (AdminKind::WaitAgain, u32::from(*timed_out), arg.len)
            }
            AdminOp::Undo { request, arg } => (AdminKind::Undo, *request, arg.len),
            AdminOp::Inject { text } => (AdminKind::Inject, 0, text.len),
        };
        put_u64(slot, 0, self.tag);
        put_u32(slot, 8, kind.word());
        put_u32(slot, 12, self.client);
        put_u32(slot, 16, request);
        put_u32(slot, 20, arg_len as u32);
        let arg = &mut slot[ARG_OFFSET..ARG_OFFSET + arg_len];
        match &self.op {
            AdminOp::Open(o) => o.encode(arg),
            AdminOp::Close => {}
            AdminOp::Ioctl { arg: a, .. }
            | AdminOp::WaitAgain { arg: a, .. }
            | AdminOp::Undo { arg: a, .. }
            | AdminOp::Inject { text: a } => arg.copy_from_slice(a.as_slice()),
            AdminOp::MmapTarget { cookie, len } => {
                put_u64(arg, 0, *cookie);
                put_u64(arg, 8, *len);
            }
        }
    }

    /// Decodes and validates a copy of a slot.
    ///
    /// # Errors
    /// The first field at fault.
    pub fn decode(slot: &[u8]) -> Result<AdminRequest, DecodeError> {
        if slot.len() != ADMIN_ENTRY_SIZE {
            return Err(DecodeError::Length(slot.len()));
        }
        let w = |at| get_u32(slot, at).ok_or(DecodeError::Length(slot.len()));
        let tag = tag_of(slot);
        let kw = w(8)?;
        let kind = AdminKind::from_word(kw).ok_or(DecodeError::Kind(kw))?;
        let client = w(12)?;
        let request = w(16)?;
        let arg_len = w(20)?;
        zero_from(slot, 24, ARG_OFFSET)?;
        let len = arg_len as usize;
        if len > ARG_CAPACITY {
            return Err(DecodeError::ArgLen(arg_len));
        }
        zero_from(slot, ARG_OFFSET + len, ADMIN_ENTRY_SIZE)?;
        let arg = &slot[ARG_OFFSET..ARG_OFFSET + len];
        let need_zero = |name, v: u32| {
            if v == 0 {
                Ok(())
            } else {
                Err(DecodeError::NotZero(name, v))
            }
        };
        if !matches!(
            kind,
            AdminKind::Ioctl | AdminKind::WaitAgain | AdminKind::Undo
        ) {
            need_zero("request", request)?;
        }
        let op = match kind {
            AdminKind::Inject => {
                need_zero("client", client)?;
                if len > INJECT_TEXT_MAX {
                    return Err(DecodeError::ArgLen(arg_len));
                }
                core::str::from_utf8(arg).map_err(|_| DecodeError::InjectUtf8)?;
                AdminOp::Inject {
                    text: ArgBuf::from_slice(arg).ok_or(DecodeError::ArgLen(arg_len))?,
                }
            }
            AdminKind::Open => {
                need_zero("client", client)?;
                AdminOp::Open(OpenArgs::decode(arg)?)
            }
            AdminKind::Close => {
                if len != 0 {
                    return Err(DecodeError::ArgLen(arg_len));
                }
                AdminOp::Close
            }
            AdminKind::Ioctl => AdminOp::Ioctl {
                request,
                arg: ArgBuf::from_slice(arg).ok_or(DecodeError::ArgLen(arg_len))?,
            },
            AdminKind::MmapTarget => {
                if len != 16 {
                    return Err(DecodeError::ArgLen(arg_len));
                }
                let g = |at| get_u64(arg, at).ok_or(DecodeError::ArgLen(arg_len));
                AdminOp::MmapTarget {
                    cookie: g(0)?,
                    len: g(8)?,
                }
            }
            AdminKind::WaitAgain => AdminOp::WaitAgain {
                arg: ArgBuf::from_slice(arg).ok_or(DecodeError::ArgLen(arg_len))?,
                timed_out: match request {
                    0 => false,
                    1 => true,
                    d => return Err(DecodeError::Deadline(d)),
                },
            },
            AdminKind::Undo => AdminOp::Undo {
                request,
                arg: ArgBuf::from_slice(arg).ok_or(DecodeError::ArgLen(arg_len))?,
            },
        };
        Ok(AdminRequest { tag, client, op })
    }
}

#[cfg(test)]
mod tests;
