//! Arbitrary bytes into every decoder of the `davinci-mockd` wire protocol
//! (`hosts/mockd-proto/src/wire.rs`): request frames (the daemon side), reply frames (the client
//! side), HELLO / HELLO reply / MMAP / MMAP reply arguments, the EBUSY holder payload.
//!
//! Asserts: no panic; whatever decodes re-encodes to the very same bytes (the decoders accept
//! exactly one encoding) and decodes again to the same value; a valid frame built from the
//! input round-trips through encode/decode.

use davinci_mockd_proto::*;

/// One input.
pub fn run(data: &[u8]) {
    // The raw bytes as each kind of frame.
    let _ = Request::peek_tag(data);
    let _ = Request::peek_kind(data);
    if let Ok(r) = Request::decode(data) {
        let enc = r.encode().expect("a decoded request re-encodes");
        assert_eq!(enc, data, "request decode/encode is not the identity");
        assert_eq!(Request::decode(&enc).as_ref(), Ok(&r));
        assert_eq!(Request::peek_kind(data), Some(r.kind));
        assert_eq!(Request::peek_tag(data), r.tag);
        assert!(data.len() <= MAX_REQUEST);
    }
    if let Ok(r) = Reply::decode(data) {
        let enc = r.encode().expect("a decoded reply re-encodes");
        assert_eq!(enc, data, "reply decode/encode is not the identity");
        assert_eq!(Reply::decode(&enc).as_ref(), Ok(&r));
        assert!(r.errno >= 0 && r.nfds as usize <= MAX_FDS);
    }
    if let Some(h) = Hello::decode(data) {
        assert_eq!(h.encode(), data);
    }
    if let Some(h) = HelloReply::decode(data) {
        assert_eq!(h.encode(), data);
    }
    if let Some(m) = MmapArgs::decode(data) {
        assert_eq!(m.encode(), data);
    }
    if let Some(m) = MmapReply::decode(data) {
        assert_eq!(m.encode(), data);
    }
    if let Some(u) = holder_from_payload(data) {
        let _ = u.to_string();
        let _ = u.container_id();
    }

    // A valid frame built from the input: header fields from the first bytes, the rest as
    // the argument / payload / message.
    if data.len() < 12 {
        return;
    }
    let kind_raw = u16::from_le_bytes([data[0], data[1]]);
    let tag = u32::from_le_bytes([data[2], data[3], data[4], data[5]]);
    let request = u32::from_le_bytes([data[6], data[7], data[8], data[9]]);
    let split = u16::from_le_bytes([data[10], data[11]]) as usize;
    let rest = &data[12..];
    if let Some(kind) = Kind::from_u16(kind_raw % 8) {
        let arg = match kind {
            Kind::Hello => rest
                .iter()
                .copied()
                .chain([0u8; 16])
                .take(Hello::SIZE)
                .collect(),
            Kind::Mmap => rest
                .iter()
                .copied()
                .chain([0u8; 16])
                .take(MmapArgs::SIZE)
                .collect(),
            Kind::Close => Vec::new(),
            Kind::Cancel => rest.iter().copied().chain([0u8; 4]).take(4).collect(),
            Kind::Ioctl => rest[..rest.len().min(MAX_ARG)].to_vec(),
        };
        let req = Request {
            kind,
            tag,
            request: if kind == Kind::Ioctl { request } else { 0 },
            arg,
        };
        let enc = req.encode().expect("a valid request encodes");
        assert_eq!(enc.len(), REQ_HEADER + req.arg.len());
        assert_eq!(Request::decode(&enc), Ok(req));
    }
    let (a, rest2) = rest.split_at(split.min(rest.len()));
    let (p, m) = rest2.split_at(rest2.len() / 2);
    let msg = String::from_utf8_lossy(m).into_owned();
    let reply = Reply {
        kind: kind_raw,
        tag,
        errno: (request & 0x7fff_ffff) as i32,
        arg: a[..a.len().min(MAX_ARG)].to_vec(),
        payload: p[..p.len().min(MAX_PAYLOAD)].to_vec(),
        msg: msg.clone(),
        nfds: request % (MAX_FDS as u32 + 1),
    };
    let enc = reply.encode().expect("a valid reply encodes");
    let back = Reply::decode(&enc).expect("an encoded reply decodes");
    // The message may have been cut at MAX_MSG (on a character boundary); all else is exact.
    assert!(msg.starts_with(&back.msg) && back.msg.len() <= MAX_MSG);
    assert_eq!(
        Reply {
            msg: back.msg.clone(),
            ..reply
        },
        back
    );

    let h = Hello {
        abi_major: kind_raw,
        abi_minor: split as u16,
        role: request,
        reserved: tag as u64,
    };
    assert_eq!(Hello::decode(&h.encode()), Some(h));
    let m = MmapArgs {
        cookie: tag as u64,
        len: request as u64,
    };
    assert_eq!(MmapArgs::decode(&m.encode()), Some(m));
}
