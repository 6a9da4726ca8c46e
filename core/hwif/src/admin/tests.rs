use super::*;
use crate::reply::{Completion, MapKind, MmapReply, ReplyKind};
use davinci_uapi::{ioctl::ioc_size, DRIVER_CMD_CREATE_STREAM, DRIVER_CMD_LIST_CLIENTS};
use proptest::prelude::*;
use std::vec::Vec;

fn open_args() -> OpenArgs {
    let mut comm = [0u8; 16];
    comm[..4].copy_from_slice(b"test");
    let mut container = [0u8; 64];
    container[..3].copy_from_slice(b"abc");
    OpenArgs {
        control: false,
        pid: 42,
        uid: 1000,
        admin: true,
        comm,
        container,
    }
}

fn requests() -> Vec<AdminRequest> {
    let mut arg = ArgBuf::zeroed(ioc_size(DRIVER_CMD_CREATE_STREAM)).unwrap();
    arg.as_mut_slice()[0] = 9;
    Vec::from([
        AdminRequest {
            tag: 1,
            client: 0,
            op: AdminOp::Open(open_args()),
        },
        AdminRequest {
            tag: 2,
            client: 5,
            op: AdminOp::Close,
        },
        AdminRequest {
            tag: u64::MAX,
            client: 7,
            op: AdminOp::Ioctl {
                request: DRIVER_CMD_CREATE_STREAM,
                arg,
            },
        },
        AdminRequest {
            tag: 4,
            client: 7,
            op: AdminOp::MmapTarget {
                cookie: 0x1234_5000,
                len: 8192,
            },
        },
        AdminRequest {
            tag: 5,
            client: 7,
            op: AdminOp::WaitAgain {
                arg: ArgBuf::from_slice(&[3; 40]).unwrap(),
                timed_out: true,
            },
        },
        AdminRequest {
            tag: 6,
            client: 7,
            op: AdminOp::Undo {
                request: DRIVER_CMD_CREATE_STREAM,
                arg: ArgBuf::from_slice(&[4; 24]).unwrap(),
            },
        },
        AdminRequest {
            tag: 7,
            client: 0,
            op: AdminOp::inject("error-at=3:EIO@pid=42").unwrap(),
        },
    ])
}

fn encoded(r: &AdminRequest) -> [u8; ADMIN_ENTRY_SIZE] {
    let mut s = [0xffu8; ADMIN_ENTRY_SIZE];
    r.encode(&mut s);
    s
}

#[test]
fn golden_sizes() {
    assert_eq!(core::mem::size_of::<AdminSlot>(), ADMIN_ENTRY_SIZE);
    assert_eq!(
        (ARG_OFFSET, ARG_CAPACITY, MSG_OFFSET, MSG_CAPACITY),
        (32, 256, 928, 96)
    );
    assert_eq!((REVOKE_OFFSET, REVOKE_SIZE, MAX_REVOKES), (288, 24, 26));
    // LIST_CLIENTS is no bigger than the largest command, which fits.
    assert!(ioc_size(DRIVER_CMD_LIST_CLIENTS) <= MAX_IOCTL_ARG);
    assert_eq!(
        MAX_IOCTL_ARG,
        davinci_uapi::args::commands::COMMANDS
            .iter()
            .map(|c| c.size)
            .max()
            .unwrap()
    );
}

#[test]
fn golden_request_bytes() {
    let s = encoded(&requests()[3]);
    assert_eq!(&s[0..8], &4u64.to_le_bytes());
    assert_eq!(&s[8..12], &4u32.to_le_bytes());
    assert_eq!(&s[12..16], &7u32.to_le_bytes());
    assert_eq!(&s[16..20], &0u32.to_le_bytes());
    assert_eq!(&s[20..24], &16u32.to_le_bytes());
    assert_eq!(&s[32..40], &0x1234_5000u64.to_le_bytes());
    assert_eq!(&s[40..48], &8192u64.to_le_bytes());
    assert!(s[48..].iter().all(|&b| b == 0));
    let o = encoded(&requests()[0]);
    assert_eq!(&o[20..24], &96u32.to_le_bytes());
    assert_eq!(&o[32..36], &0u32.to_le_bytes()); // client role
    assert_eq!(&o[36..40], &42u32.to_le_bytes());
    assert_eq!(&o[44..48], &1u32.to_le_bytes()); // admin
    assert_eq!(&o[48..52], b"test");
    assert_eq!(&o[64..67], b"abc");
}

#[test]
fn requests_round_trip() {
    for r in requests() {
        assert_eq!(AdminRequest::decode(&encoded(&r)), Ok(r));
        // Through the ring's word view too.
        let words: AdminSlot = crate::bytes::bytes_to_words(&encoded(&r));
        let back: [u8; ADMIN_ENTRY_SIZE] = crate::bytes::words_to_bytes(&words);
        assert_eq!(AdminRequest::decode(&back), Ok(r));
    }
}

#[test]
fn every_bad_request_field_is_named() {
    let put = |s: &mut [u8; ADMIN_ENTRY_SIZE], at: usize, v: u32| {
        s[at..at + 4].copy_from_slice(&v.to_le_bytes());
    };
    let rs = requests();
    let dec = |s: &[u8]| AdminRequest::decode(s);
    assert_eq!(dec(&[0u8; 100]), Err(DecodeError::Length(100)));
    let mut s = encoded(&rs[1]);
    put(&mut s, 8, 0);
    assert_eq!(dec(&s), Err(DecodeError::Kind(0)));
    put(&mut s, 8, 8);
    assert_eq!(dec(&s), Err(DecodeError::Kind(8)));
    let mut s = encoded(&rs[1]);
    s[24] = 1;
    assert_eq!(dec(&s), Err(DecodeError::Reserved(24)));
    let mut s = encoded(&rs[1]);
    put(&mut s, 20, 257);
    assert_eq!(dec(&s), Err(DecodeError::ArgLen(257)));
    put(&mut s, 20, u32::MAX);
    assert_eq!(dec(&s), Err(DecodeError::ArgLen(u32::MAX)));
    let mut s = encoded(&rs[1]);
    put(&mut s, 20, 4);
    assert_eq!(dec(&s), Err(DecodeError::ArgLen(4)));
    let mut s = encoded(&rs[1]);
    s[1023] = 1;
    assert_eq!(dec(&s), Err(DecodeError::Reserved(1023)));
    let mut s = encoded(&rs[1]);
    put(&mut s, 16, 3);
    assert_eq!(dec(&s), Err(DecodeError::NotZero("request", 3)));
    // OPEN: client must be 0, role and admin words checked, the size exact.
    let mut s = encoded(&rs[0]);
    put(&mut s, 12, 1);
    assert_eq!(dec(&s), Err(DecodeError::NotZero("client", 1)));
    let mut s = encoded(&rs[0]);
    put(&mut s, 32, 2);
    assert_eq!(dec(&s), Err(DecodeError::Role(2)));
    let mut s = encoded(&rs[0]);
    put(&mut s, 44, 2);
    assert_eq!(dec(&s), Err(DecodeError::Admin(2)));
    let mut s = encoded(&rs[0]);
    put(&mut s, 20, 95);
    assert_eq!(dec(&s), Err(DecodeError::ArgLen(95)));
    // IOCTL: bytes past the arg must be zero.
    let mut s = encoded(&rs[2]);
    let past = ARG_OFFSET + ioc_size(DRIVER_CMD_CREATE_STREAM);
    s[past] = 1;
    assert_eq!(dec(&s), Err(DecodeError::Reserved(past)));
    // MMAP_TARGET: exactly 16 arg bytes.
    let mut s = encoded(&rs[3]);
    put(&mut s, 20, 8);
    // (8192's second byte lies past the shortened arg.)
    assert_eq!(dec(&s), Err(DecodeError::Reserved(41)));
    s[41] = 0;
    assert_eq!(dec(&s), Err(DecodeError::ArgLen(8)));
    put(&mut s, 20, 24);
    assert_eq!(dec(&s), Err(DecodeError::ArgLen(24)));
}

fn completion_slot(c: &Completion) -> [u8; ADMIN_ENTRY_SIZE] {
    let mut s = [0x55u8; ADMIN_ENTRY_SIZE];
    c.encode(&mut s);
    s
}

#[test]
fn completions_round_trip_and_bad_fields_are_named() {
    let m = MmapReply {
        kind: MapKind::EventRing,
        offset: 45056,
        len: 8192,
    };
    let cs = [
        Completion::new(1, ReplyKind::Done, 0, 3, m.to_arg(), ""),
        Completion::new(
            2,
            ReplyKind::WaitNeeded,
            0,
            3,
            ArgBuf::from_slice(&[1; 40]).unwrap(),
            "wait",
        ),
        Completion::new(
            3,
            ReplyKind::Failed,
            22,
            3,
            ArgBuf::EMPTY,
            "bad things happened",
        ),
    ];
    for c in cs {
        assert_eq!(Completion::decode(&completion_slot(&c)), Ok(c));
    }
    assert_eq!(MmapReply::from_arg(cs[0].arg.as_slice()), Ok(m));
    let long = "é".repeat(60); // 120 bytes: cut at a character boundary
    let c = Completion::new(4, ReplyKind::Failed, 5, 0, ArgBuf::EMPTY, &long);
    assert_eq!(c.message().len(), 96);
    assert_eq!(Completion::decode(&completion_slot(&c)), Ok(c));

    let put = |s: &mut [u8; ADMIN_ENTRY_SIZE], at: usize, v: u32| {
        s[at..at + 4].copy_from_slice(&v.to_le_bytes());
    };
    let base = completion_slot(&cs[2]);
    let mut s = base;
    put(&mut s, 12, 9);
    assert_eq!(Completion::decode(&s), Err(DecodeError::Reply(9)));
    let mut s = base;
    put(&mut s, 8, 0);
    assert_eq!(Completion::decode(&s), Err(DecodeError::Errno(0)));
    let mut s = completion_slot(&cs[0]);
    put(&mut s, 8, 4);
    assert_eq!(Completion::decode(&s), Err(DecodeError::Errno(4)));
    let mut s = base;
    put(&mut s, 20, 900);
    assert_eq!(Completion::decode(&s), Err(DecodeError::ArgLen(900)));
    let mut s = base;
    put(&mut s, 24, 97);
    assert_eq!(Completion::decode(&s), Err(DecodeError::MsgLen(97)));
    let mut s = base;
    s[28] = 1; // one revocation listed, of client 0: valid
    assert_eq!(Completion::decode(&s).map(|c| c.revokes().len()), Ok(1));
    s[REVOKE_OFFSET + 4] = 1;
    assert_eq!(Completion::decode(&s), Err(DecodeError::Revoke(0)));
    let mut s = base;
    s[REVOKE_OFFSET] = 1; // past the count (0): reserved
    assert_eq!(
        Completion::decode(&s),
        Err(DecodeError::Reserved(REVOKE_OFFSET))
    );
    let mut s = base;
    s[MSG_OFFSET] = 0xff;
    assert_eq!(Completion::decode(&s), Err(DecodeError::MsgUtf8));
    let mut s = base;
    s[ARG_OFFSET] = 1;
    assert_eq!(
        Completion::decode(&s),
        Err(DecodeError::Reserved(ARG_OFFSET))
    );
    let mut s = base;
    s[1023] = b'x';
    assert_eq!(Completion::decode(&s), Err(DecodeError::Reserved(1023)));

    // MMAP_TARGET replies.
    let mut a = [0u8; 24];
    a.copy_from_slice(m.to_arg().as_slice());
    let mut b = a;
    b[0] = 9;
    assert_eq!(MmapReply::from_arg(&b), Err(DecodeError::MapKind(9)));
    let mut b = a;
    b[4] = 1;
    assert_eq!(MmapReply::from_arg(&b), Err(DecodeError::Reserved(4)));
    let mut b = a;
    b[8] = 1;
    assert_eq!(MmapReply::from_arg(&b), Err(DecodeError::MapRange));
    let mut b = a;
    b[16..24].copy_from_slice(&0u64.to_le_bytes());
    assert_eq!(MmapReply::from_arg(&b), Err(DecodeError::MapRange));
    assert_eq!(MmapReply::from_arg(&a[..20]), Err(DecodeError::ArgLen(20)));
}

#[test]
fn revocations_round_trip_and_overflow_is_counted() {
    let mut c = Completion::new(9, ReplyKind::Done, 0, 4, ArgBuf::EMPTY, "");
    assert!(c.revokes().is_empty() && !c.revokes_overflowed());
    let r = |i: u64| crate::Revoke {
        client: 4,
        cookie: 0x1000 * i,
        len: 4096 * (i + 1),
    };
    c.revoke(r(1));
    c.revoke(r(2));
    let s = completion_slot(&c);
    assert_eq!(&s[28..32], &2u32.to_le_bytes());
    assert_eq!(
        &s[REVOKE_OFFSET + 24..REVOKE_OFFSET + 28],
        &4u32.to_le_bytes()
    );
    let back = Completion::decode(&s).unwrap();
    assert_eq!(back, c);
    assert_eq!(back.revokes(), &[r(1), r(2)]);
    for i in 3..=MAX_REVOKES as u64 + 2 {
        c.revoke(r(i));
    }
    assert!(c.revokes_overflowed());
    assert_eq!(c.revokes().len(), MAX_REVOKES);
    let back = Completion::decode(&completion_slot(&c)).unwrap();
    assert!(back.revokes_overflowed());
    assert_eq!(back.revokes(), c.revokes());
}

#[test]
fn wait_again_says_whether_the_deadline_passed() {
    let rs = requests();
    let mut s = encoded(&rs[4]);
    assert_eq!(&s[16..20], &1u32.to_le_bytes());
    s[16] = 2;
    assert_eq!(AdminRequest::decode(&s), Err(DecodeError::Deadline(2)));
    s[16] = 0;
    match AdminRequest::decode(&s).unwrap().op {
        AdminOp::WaitAgain { arg, timed_out } => {
            assert!(!timed_out);
            assert_eq!(arg.as_slice(), &[3; 40]);
        }
        other => panic!("{other:?}"),
    }
}

proptest! {
    #[test]
    fn decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1100), fix in any::<bool>()) {
        let mut b = bytes;
        if fix {
            b.resize(ADMIN_ENTRY_SIZE, 0);
        }
        let _ = AdminRequest::decode(&b);
        let _ = Completion::decode(&b);
        let _ = MmapReply::from_arg(&b);
        let _ = crate::layout::Bar2Header::decode(&b, crate::layout::MIN_REGION);
        let _ = tag_of(&b);
    }

    #[test]
    fn plausible_slots_decode_or_name_a_field(kind in 0u32..8, len in 0u32..1000, client in any::<u32>(), noise in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut s = [0u8; ADMIN_ENTRY_SIZE];
        s[8..12].copy_from_slice(&kind.to_le_bytes());
        s[12..16].copy_from_slice(&client.to_le_bytes());
        s[20..24].copy_from_slice(&len.to_le_bytes());
        for (i, n) in noise.iter().enumerate() {
            s[ARG_OFFSET + i] = *n;
        }
        match AdminRequest::decode(&s) {
            Ok(r) => {
                // A decoded request encodes back to the same bytes.
                let mut again = [0u8; ADMIN_ENTRY_SIZE];
                r.encode(&mut again);
                prop_assert_eq!(&again[..], &s[..]);
            }
            Err(e) => { let text = std::format!("{}", e); prop_assert!(!text.is_empty()); }
        }
    }
}

#[test]
fn inject_carries_a_short_utf8_text_from_client_0() {
    let r = AdminRequest {
        tag: 3,
        client: 0,
        op: AdminOp::inject("reset").unwrap(),
    };
    let back = AdminRequest::decode(&encoded(&r)).unwrap();
    assert_eq!(back.op.inject_text(), "reset");
    assert_eq!(AdminOp::Close.inject_text(), "");
    assert_eq!(
        AdminOp::inject(&"x".repeat(INJECT_TEXT_MAX)).map(|o| o.inject_text().len()),
        Some(INJECT_TEXT_MAX)
    );
    assert_eq!(AdminOp::inject(&"x".repeat(INJECT_TEXT_MAX + 1)), None);
    let mut s = encoded(&r);
    s[12] = 1;
    assert_eq!(
        AdminRequest::decode(&s),
        Err(DecodeError::NotZero("client", 1))
    );
    let mut s = encoded(&r);
    s[32] = 0xff;
    assert_eq!(AdminRequest::decode(&s), Err(DecodeError::InjectUtf8));
    let mut s = encoded(&r);
    s[20..24].copy_from_slice(&64u32.to_le_bytes());
    assert_eq!(AdminRequest::decode(&s), Err(DecodeError::ArgLen(64)));
    let mut s = encoded(&r);
    s[16] = 1;
    assert_eq!(
        AdminRequest::decode(&s),
        Err(DecodeError::NotZero("request", 1))
    );
}
