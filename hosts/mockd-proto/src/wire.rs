//! The `davinci-mockd` wire protocol: the bytes a kernel would copy in and out of an ioctl,
//! carried over a Unix `SOCK_SEQPACKET` socket (one datagram = one frame, so a frame is never
//! split or merged and its file descriptors arrive with it).
//!
//! One connection is one open file of `/dev/davinciN`. The first frame must be `HELLO`; after
//! it, `IOCTL` frames carry a request number and its argument bytes exactly as `ioctl(2)` would,
//! `MMAP` frames resolve an mmap cookie to a memfd (passed with `SCM_RIGHTS`) and `CLOSE` ends
//! the open (as does closing the socket, including the client's death).
//!
//! ```text
//! request (24-byte header, then arg)        reply (32-byte header, then arg, payload, msg)
//!   0  magic    u32  "DVMD"                   0  magic       u32  "DVMD"
//!   4  version  u16  1                        4  version     u16  1
//!   6  kind     u16  HELLO|IOCTL|MMAP|CLOSE   6  kind        u16  the request's kind
//!                    |CANCEL
//!   8  tag      u32  echoed in the reply      8  tag         u32  the request's tag
//!  12  request  u32  ioctl number (IOCTL)    12  errno       i32  0, or a positive errno
//!  16  arg_len  u32  <= MAX_ARG              16  arg_len     u32  <= MAX_ARG
//!  20  reserved u32  0                       20  payload_len u32  <= MAX_PAYLOAD
//!  24  arg bytes                             24  msg_len     u32  <= MAX_MSG
//!                                            28  nfds        u32  fds attached (<= MAX_FDS)
//!                                            32  arg, payload, msg (UTF-8) bytes
//! ```
//! Header fields are little-endian; argument bytes are the ABI structs in native byte order
//! (client and daemon share a host, as user space and kernel do).
//!
//! * `HELLO`: arg [`Hello`] (ABI version and role); reply arg [`HelloReply`]. On `EBUSY` the
//!   payload is the holder's `davinci_client_usage` and the message names its pid and container.
//! * `IOCTL`: arg = the ioctl's argument bytes (`_IOC_SIZE(request)` of them); the reply arg is
//!   the argument after the call (also on failure: WAIT_EVENT reports `current`/`status`).
//!   LIST_CLIENTS and LIST_KERNELS (1.5) write through the user pointer `buf`: the daemon
//!   returns what it would have written at `buf + k` as payload byte `k`, and the client
//!   copies it to its buffer.
//! * `MMAP`: arg [`MmapArgs`] (cookie, length); reply arg [`MmapReply`] (offset into the fd)
//!   and one memfd. The client maps `[offset, offset + len)` of that fd, shared.
//! * `CLOSE`: no arg; reply errno 0, then the daemon closes the connection.
//! * `CANCEL` (since ABI 1.4's daemon): arg = the tag (u32, little-endian) of a blocking
//!   WAIT_EVENT in flight that the client gave up (a signal interrupted it); the daemon
//!   answers that wait at once with `EINTR`, then replies errno 0 to the CANCEL (also for a
//!   tag it does not know: the wait ended already). An older daemon replies `EPROTO`, which
//!   loses nothing: the wait ends at its timeout.
//!
//! The protocol as a documented interface (framing, every kind, errno rules, fd passing,
//! versioning, limits, sockets, a worked exchange): `docs/mockd-protocol.md`.
//!
//! A frame that breaks any rule gets an `EPROTO` reply with a message saying what was wrong
//! (and, before a successful `HELLO`, the connection is closed). Decoding never panics.

use davinci_uapi::ioctl::IOC_SIZE_MAX;
use davinci_uapi::{ClientUsage, Errno, Wire};

/// `"DVMD"` little-endian.
pub const MAGIC: u32 = u32::from_le_bytes(*b"DVMD");
/// Protocol version; a peer speaking another version gets `EPROTO`.
pub const VERSION: u16 = 1;
/// Bytes of a request header.
pub const REQ_HEADER: usize = 24;
/// Bytes of a reply header.
pub const REPLY_HEADER: usize = 32;
/// Largest argument (the ioctl size field's maximum).
pub const MAX_ARG: usize = IOC_SIZE_MAX;
/// Largest reply payload (LIST_CLIENTS output; bounded by the client table).
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// Longest message.
pub const MAX_MSG: usize = 1024;
/// Most file descriptors on one reply.
pub const MAX_FDS: usize = 4;
/// Largest request frame.
pub const MAX_REQUEST: usize = REQ_HEADER + MAX_ARG;
/// Largest reply frame.
pub const MAX_REPLY: usize = REPLY_HEADER + MAX_ARG + MAX_PAYLOAD + MAX_MSG;

/// What a frame asks for.
#[repr(u16)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Opens the device (first frame of a connection).
    Hello = 1,
    /// An ioctl.
    Ioctl = 2,
    /// Resolve an mmap cookie to a memfd.
    Mmap = 3,
    /// Close the open file.
    Close = 4,
    /// Give up a blocking WAIT_EVENT still in flight: `arg` is the 4-byte tag (little
    /// endian) of that request. The daemon answers the wait at once with `EINTR` (which the
    /// client, having given up, discards), then replies to the CANCEL itself (errno 0, even
    /// for an unknown or already answered tag: there is nothing left to cancel). A client whose wait was interrupted by a signal
    /// sends it, so the wait does not hold a slot of the daemon until it times out.
    Cancel = 5,
}

impl Kind {
    /// Decodes a wire value.
    pub const fn from_u16(v: u16) -> Option<Kind> {
        match v {
            1 => Some(Kind::Hello),
            2 => Some(Kind::Ioctl),
            3 => Some(Kind::Mmap),
            4 => Some(Kind::Close),
            5 => Some(Kind::Cancel),
            _ => None,
        }
    }

    /// Name for logs and messages.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Hello => "HELLO",
            Kind::Ioctl => "IOCTL",
            Kind::Mmap => "MMAP",
            Kind::Close => "CLOSE",
            Kind::Cancel => "CANCEL",
        }
    }
}

/// The role of an open, as HELLO states it.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireRole {
    /// A client: may own resources (`open(O_RDWR)` of the kernel node).
    Client = 0,
    /// A control open for operators (`open(O_RDONLY)`).
    Control = 1,
}

impl WireRole {
    /// Decodes a wire value.
    pub const fn from_u32(v: u32) -> Option<WireRole> {
        match v {
            0 => Some(WireRole::Client),
            1 => Some(WireRole::Control),
            _ => None,
        }
    }
}

/// A protocol violation: what was wrong, for the `EPROTO` reply or the client's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtoError(pub &'static str);

impl core::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtoError {}

fn u16_at(b: &[u8], off: usize) -> u16 {
    let mut raw = [0u8; 2];
    if let Some(s) = b.get(off..off + 2) {
        raw.copy_from_slice(s);
    }
    u16::from_le_bytes(raw)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut raw = [0u8; 4];
    if let Some(s) = b.get(off..off + 4) {
        raw.copy_from_slice(s);
    }
    u32::from_le_bytes(raw)
}

/// A request frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// What it asks.
    pub kind: Kind,
    /// Chosen by the client, echoed in the reply (lets several threads share a connection).
    pub tag: u32,
    /// ioctl request number (IOCTL), else 0.
    pub request: u32,
    /// Argument bytes.
    pub arg: Vec<u8>,
}

impl Request {
    /// Encodes the frame. Fails if the argument exceeds [`MAX_ARG`].
    pub fn encode(&self) -> Result<Vec<u8>, ProtoError> {
        if self.arg.len() > MAX_ARG {
            return Err(ProtoError("argument longer than MAX_ARG"));
        }
        let mut out = Vec::with_capacity(REQ_HEADER + self.arg.len());
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.kind as u16).to_le_bytes());
        out.extend_from_slice(&self.tag.to_le_bytes());
        out.extend_from_slice(&self.request.to_le_bytes());
        out.extend_from_slice(&(self.arg.len() as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.arg);
        Ok(out)
    }

    /// The tag of a frame, if its header is long enough to have one (to address an error
    /// reply to a frame that failed to decode).
    pub fn peek_tag(frame: &[u8]) -> u32 {
        u32_at(frame, 8)
    }

    /// The kind of a frame, if it names a valid one (for error replies).
    pub fn peek_kind(frame: &[u8]) -> Option<Kind> {
        Kind::from_u16(u16_at(frame, 6))
    }

    /// Decodes one whole frame. Every inconsistency is an error, never a panic.
    pub fn decode(frame: &[u8]) -> Result<Request, ProtoError> {
        if frame.len() < REQ_HEADER {
            return Err(ProtoError("frame shorter than the request header"));
        }
        if frame.len() > MAX_REQUEST {
            return Err(ProtoError("frame longer than the largest request"));
        }
        if u32_at(frame, 0) != MAGIC {
            return Err(ProtoError("bad magic (not a davinci-mockd frame)"));
        }
        if u16_at(frame, 4) != VERSION {
            return Err(ProtoError("unsupported protocol version"));
        }
        let Some(kind) = Kind::from_u16(u16_at(frame, 6)) else {
            return Err(ProtoError("unknown frame kind"));
        };
        let tag = u32_at(frame, 8);
        let request = u32_at(frame, 12);
        let arg_len = u32_at(frame, 16) as usize;
        if u32_at(frame, 20) != 0 {
            return Err(ProtoError("reserved header field is not 0"));
        }
        if arg_len > MAX_ARG {
            return Err(ProtoError("arg_len larger than MAX_ARG"));
        }
        if frame.len() != REQ_HEADER + arg_len {
            return Err(ProtoError("frame length does not match arg_len"));
        }
        let arg = frame[REQ_HEADER..].to_vec();
        let expect = match kind {
            Kind::Hello => Some(Hello::SIZE),
            Kind::Mmap => Some(MmapArgs::SIZE),
            Kind::Close => Some(0),
            Kind::Cancel => Some(4),
            Kind::Ioctl => None,
        };
        if let Some(n) = expect {
            if arg.len() != n {
                return Err(ProtoError("argument size does not match the frame kind"));
            }
        }
        if kind != Kind::Ioctl && request != 0 {
            return Err(ProtoError("request number must be 0 outside IOCTL frames"));
        }
        Ok(Request {
            kind,
            tag,
            request,
            arg,
        })
    }
}

/// A reply frame (the file descriptors travel beside it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reply {
    /// The request's kind (raw, so replies to undecodable frames can echo what was sent).
    pub kind: u16,
    /// The request's tag.
    pub tag: u32,
    /// 0 on success, else a positive errno.
    pub errno: i32,
    /// Argument bytes after the call.
    pub arg: Vec<u8>,
    /// Extra output (LIST_CLIENTS entries, the EBUSY holder).
    pub payload: Vec<u8>,
    /// What was wrong (empty on success).
    pub msg: String,
    /// Number of file descriptors attached.
    pub nfds: u32,
}

impl Reply {
    /// A success reply with these argument bytes.
    pub fn ok(kind: Kind, tag: u32, arg: Vec<u8>) -> Reply {
        Reply {
            kind: kind as u16,
            tag,
            arg,
            ..Reply::default()
        }
    }

    /// An error reply.
    pub fn err(kind: u16, tag: u32, errno: Errno, msg: &str) -> Reply {
        Reply {
            kind,
            tag,
            errno: errno.code(),
            msg: msg.to_string(),
            ..Reply::default()
        }
    }

    /// Encodes the frame. Over-long sections are an error (a daemon bug, not client input);
    /// an over-long message is cut at a character boundary instead.
    pub fn encode(&self) -> Result<Vec<u8>, ProtoError> {
        if self.arg.len() > MAX_ARG {
            return Err(ProtoError("reply argument longer than MAX_ARG"));
        }
        if self.payload.len() > MAX_PAYLOAD {
            return Err(ProtoError("reply payload longer than MAX_PAYLOAD"));
        }
        if self.nfds as usize > MAX_FDS {
            return Err(ProtoError("more than MAX_FDS descriptors"));
        }
        let mut end = self.msg.len().min(MAX_MSG);
        while !self.msg.is_char_boundary(end) {
            end -= 1;
        }
        let msg = &self.msg.as_bytes()[..end];
        let mut out =
            Vec::with_capacity(REPLY_HEADER + self.arg.len() + self.payload.len() + msg.len());
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.kind.to_le_bytes());
        out.extend_from_slice(&self.tag.to_le_bytes());
        out.extend_from_slice(&self.errno.to_le_bytes());
        out.extend_from_slice(&(self.arg.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&(msg.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.nfds.to_le_bytes());
        out.extend_from_slice(&self.arg);
        out.extend_from_slice(&self.payload);
        out.extend_from_slice(msg);
        Ok(out)
    }

    /// Decodes one whole frame (the client side: the daemon is trusted less than fully, so
    /// this checks everything too and never panics).
    pub fn decode(frame: &[u8]) -> Result<Reply, ProtoError> {
        if frame.len() < REPLY_HEADER {
            return Err(ProtoError("reply shorter than the reply header"));
        }
        if frame.len() > MAX_REPLY {
            return Err(ProtoError("reply longer than the largest reply"));
        }
        if u32_at(frame, 0) != MAGIC {
            return Err(ProtoError("bad magic in reply"));
        }
        if u16_at(frame, 4) != VERSION {
            return Err(ProtoError("unsupported protocol version in reply"));
        }
        let kind = u16_at(frame, 6);
        let tag = u32_at(frame, 8);
        let errno = u32_at(frame, 12) as i32;
        let arg_len = u32_at(frame, 16) as usize;
        let payload_len = u32_at(frame, 20) as usize;
        let msg_len = u32_at(frame, 24) as usize;
        let nfds = u32_at(frame, 28);
        if errno < 0 {
            return Err(ProtoError("negative errno in reply"));
        }
        if arg_len > MAX_ARG || payload_len > MAX_PAYLOAD || msg_len > MAX_MSG {
            return Err(ProtoError("reply section longer than its bound"));
        }
        if nfds as usize > MAX_FDS {
            return Err(ProtoError("reply announces too many descriptors"));
        }
        // Bounded above, so the sum cannot overflow.
        if frame.len() != REPLY_HEADER + arg_len + payload_len + msg_len {
            return Err(ProtoError("reply length does not match its sections"));
        }
        let a = REPLY_HEADER;
        let p = a + arg_len;
        let m = p + payload_len;
        let Ok(msg) = std::str::from_utf8(&frame[m..]) else {
            return Err(ProtoError("reply message is not UTF-8"));
        };
        Ok(Reply {
            kind,
            tag,
            errno,
            arg: frame[a..p].to_vec(),
            payload: frame[p..m].to_vec(),
            msg: msg.to_string(),
            nfds,
        })
    }
}

/// HELLO argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hello {
    /// ABI major the client was built against.
    pub abi_major: u16,
    /// ABI minor the client was built against.
    pub abi_minor: u16,
    /// [`WireRole`] as u32.
    pub role: u32,
    /// Reserved, must be 0.
    pub reserved: u64,
}

impl Hello {
    /// Encoded size.
    pub const SIZE: usize = 16;

    /// Encodes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::SIZE);
        v.extend_from_slice(&self.abi_major.to_le_bytes());
        v.extend_from_slice(&self.abi_minor.to_le_bytes());
        v.extend_from_slice(&self.role.to_le_bytes());
        v.extend_from_slice(&self.reserved.to_le_bytes());
        v
    }

    /// Decodes exactly [`Self::SIZE`] bytes.
    pub fn decode(b: &[u8]) -> Option<Hello> {
        if b.len() != Self::SIZE {
            return None;
        }
        let mut r = [0u8; 8];
        r.copy_from_slice(&b[8..16]);
        Some(Hello {
            abi_major: u16_at(b, 0),
            abi_minor: u16_at(b, 2),
            role: u32_at(b, 4),
            reserved: u64::from_le_bytes(r),
        })
    }
}

/// HELLO reply argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HelloReply {
    /// ABI major of the daemon's driver.
    pub abi_major: u16,
    /// ABI minor of the daemon's driver.
    pub abi_minor: u16,
    /// N of davinciN.
    pub device_id: u32,
    /// The pid the daemon saw (SO_PEERCRED): the one LIST_CLIENTS reports.
    pub pid: u32,
    /// The uid the daemon saw (SO_PEERCRED).
    pub uid: u32,
}

impl HelloReply {
    /// Encoded size.
    pub const SIZE: usize = 16;

    /// Encodes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::SIZE);
        v.extend_from_slice(&self.abi_major.to_le_bytes());
        v.extend_from_slice(&self.abi_minor.to_le_bytes());
        v.extend_from_slice(&self.device_id.to_le_bytes());
        v.extend_from_slice(&self.pid.to_le_bytes());
        v.extend_from_slice(&self.uid.to_le_bytes());
        v
    }

    /// Decodes exactly [`Self::SIZE`] bytes.
    pub fn decode(b: &[u8]) -> Option<HelloReply> {
        if b.len() != Self::SIZE {
            return None;
        }
        Some(HelloReply {
            abi_major: u16_at(b, 0),
            abi_minor: u16_at(b, 2),
            device_id: u32_at(b, 4),
            pid: u32_at(b, 8),
            uid: u32_at(b, 12),
        })
    }
}

/// MMAP argument: the cookie and length the client would pass to `mmap(2)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MmapArgs {
    /// The mmap offset cookie the driver returned.
    pub cookie: u64,
    /// Bytes to map.
    pub len: u64,
}

impl MmapArgs {
    /// Encoded size.
    pub const SIZE: usize = 16;

    /// Encodes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::SIZE);
        v.extend_from_slice(&self.cookie.to_le_bytes());
        v.extend_from_slice(&self.len.to_le_bytes());
        v
    }

    /// Decodes exactly [`Self::SIZE`] bytes.
    pub fn decode(b: &[u8]) -> Option<MmapArgs> {
        if b.len() != Self::SIZE {
            return None;
        }
        let (mut c, mut l) = ([0u8; 8], [0u8; 8]);
        c.copy_from_slice(&b[0..8]);
        l.copy_from_slice(&b[8..16]);
        Some(MmapArgs {
            cookie: u64::from_le_bytes(c),
            len: u64::from_le_bytes(l),
        })
    }
}

/// MMAP reply argument: where in the passed memfd the object starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MmapReply {
    /// Offset into the memfd (page aligned).
    pub offset: u64,
    /// Length of the object (the client may map up to this).
    pub len: u64,
}

impl MmapReply {
    /// Encoded size.
    pub const SIZE: usize = 16;

    /// Encodes.
    pub fn encode(&self) -> Vec<u8> {
        MmapArgs {
            cookie: self.offset,
            len: self.len,
        }
        .encode()
    }

    /// Decodes exactly [`Self::SIZE`] bytes.
    pub fn decode(b: &[u8]) -> Option<MmapReply> {
        MmapArgs::decode(b).map(|a| MmapReply {
            offset: a.cookie,
            len: a.len,
        })
    }
}

/// The exclusive holder from an EBUSY HELLO reply's payload, if it carries one.
pub fn holder_from_payload(payload: &[u8]) -> Option<ClientUsage> {
    ClientUsage::from_bytes(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(kind: Kind, request: u32, arg: Vec<u8>) -> Request {
        Request {
            kind,
            tag: 77,
            request,
            arg,
        }
    }

    #[test]
    fn request_round_trip() {
        let hello = Hello {
            abi_major: 1,
            abi_minor: 0,
            role: WireRole::Control as u32,
            reserved: 0,
        };
        for r in [
            req(Kind::Hello, 0, hello.encode()),
            req(Kind::Ioctl, davinci_uapi::DRIVER_CMD_GET_INFO, vec![0; 128]),
            req(
                Kind::Mmap,
                0,
                MmapArgs {
                    cookie: 1 << 48,
                    len: 4096,
                }
                .encode(),
            ),
            req(Kind::Close, 0, vec![]),
            req(Kind::Ioctl, 5, vec![0xaa; MAX_ARG]),
        ] {
            let bytes = r.encode().unwrap();
            assert_eq!(Request::decode(&bytes), Ok(r.clone()));
            assert_eq!(Request::peek_tag(&bytes), 77);
            assert_eq!(Request::peek_kind(&bytes), Some(r.kind));
        }
        assert_eq!(Hello::decode(&hello.encode()), Some(hello));
    }

    #[test]
    fn request_rejects_every_malformation() {
        let good = req(Kind::Ioctl, 9, vec![1, 2, 3, 4]).encode().unwrap();
        let bad = |f: &dyn Fn(&mut Vec<u8>), why: &str| {
            let mut b = good.clone();
            f(&mut b);
            let e = Request::decode(&b).unwrap_err();
            assert!(e.0.contains(why), "{why}: got {e}");
        };
        bad(&|b| b.truncate(10), "shorter");
        bad(&|b| b[0] ^= 1, "magic");
        bad(&|b| b[4] = 2, "version");
        bad(&|b| b[6] = 9, "kind");
        bad(&|b| b[20] = 1, "reserved");
        bad(&|b| b.push(0), "arg_len");
        bad(&|b| b.truncate(REQ_HEADER + 2), "arg_len");
        bad(
            &|b| b[16..20].copy_from_slice(&u32::MAX.to_le_bytes()),
            "MAX_ARG",
        );
        bad(&|b| b.resize(MAX_REQUEST + 1, 0), "longer");
        // Kind-specific sizes and request numbers.
        let mut h = req(Kind::Hello, 0, vec![0; 3]).encode().unwrap();
        assert!(Request::decode(&h).unwrap_err().0.contains("kind"));
        h = req(Kind::Close, 1, vec![]).encode().unwrap();
        assert!(Request::decode(&h)
            .unwrap_err()
            .0
            .contains("request number"));
        assert!(req(Kind::Ioctl, 1, vec![0; MAX_ARG + 1]).encode().is_err());
    }

    #[test]
    fn reply_round_trip_and_bounds() {
        let r = Reply {
            kind: Kind::Ioctl as u16,
            tag: 3,
            errno: Errno::EBUSY.code(),
            arg: vec![1; 24],
            payload: vec![2; 128],
            msg: "held by pid 7".into(),
            nfds: 1,
        };
        let b = r.encode().unwrap();
        assert_eq!(Reply::decode(&b), Ok(r.clone()));
        // A message longer than MAX_MSG is cut at a char boundary and still decodes.
        let long = Reply {
            msg: "é".repeat(MAX_MSG),
            ..r.clone()
        };
        let d = Reply::decode(&long.encode().unwrap()).unwrap();
        assert!(d.msg.len() <= MAX_MSG && d.msg.chars().all(|c| c == 'é'));
        // Corruptions.
        let mut x = b.clone();
        x.pop();
        assert!(Reply::decode(&x).is_err());
        let mut x = b.clone();
        x[12..16].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(Reply::decode(&x).is_err());
        let mut x = b.clone();
        x[28] = 9;
        assert!(Reply::decode(&x).is_err());
        let mut x = b.clone();
        let n = x.len();
        x[n - 1] = 0xff;
        assert!(Reply::decode(&x).unwrap_err().0.contains("UTF-8"));
        assert!(Reply {
            payload: vec![0; MAX_PAYLOAD + 1],
            ..r
        }
        .encode()
        .is_err());
    }

    #[test]
    fn small_structs_round_trip() {
        let h = HelloReply {
            abi_major: 1,
            abi_minor: 2,
            device_id: 3,
            pid: 99,
            uid: 1000,
        };
        assert_eq!(HelloReply::decode(&h.encode()), Some(h));
        let m = MmapReply {
            offset: 8192,
            len: 4096,
        };
        assert_eq!(MmapReply::decode(&m.encode()), Some(m));
        assert_eq!(MmapArgs::decode(&[0; 15]), None);
        assert_eq!(Hello::decode(&[0; 17]), None);
    }

    #[test]
    fn the_holder_travels_as_payload() {
        let mut u = ClientUsage {
            pid: 42,
            uid: 1000,
            ..ClientUsage::default()
        };
        u.container[..4].copy_from_slice(b"abcd");
        let mut bytes = vec![0u8; ClientUsage::SIZE];
        u.encode(&mut bytes);
        assert_eq!(holder_from_payload(&bytes), Some(u));
        assert_eq!(holder_from_payload(&bytes[1..]), None);
    }

    /// A cheap deterministic fuzz: random and mutated frames never panic either decoder.
    #[test]
    fn decoders_never_panic_on_garbage() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let base_req = req(Kind::Ioctl, 9, vec![0; 64]).encode().unwrap();
        let base_rep = Reply::ok(Kind::Ioctl, 1, vec![0; 64]).encode().unwrap();
        for i in 0..20_000 {
            let mut b = if i % 2 == 0 {
                base_req.clone()
            } else {
                base_rep.clone()
            };
            let flips = (next() % 6) as usize;
            for _ in 0..flips {
                let at = (next() as usize) % b.len();
                b[at] = next() as u8;
            }
            b.truncate((next() as usize) % (b.len() + 8));
            let _ = Request::decode(&b);
            let _ = Reply::decode(&b);
            let _ = Request::peek_tag(&b);
            let _ = Request::peek_kind(&b);
        }
    }
}
