use super::*;

use davinci_hwif::layout::PAGE_SIZE;

use davinci_hwif::{ArgBuf, Completion, MapKind, MmapReply, ReplyKind};

fn layout() -> Bar2Layout {
    Bar2Layout::for_region(64 << 20).unwrap()
}

/// A plausible completion of each kind of request.
fn replies() -> Vec<(Option<AdminKind>, u32, [u8; ADMIN_ENTRY_SIZE])> {
    let enc = |c: Completion| {
        let mut s = [0u8; ADMIN_ENTRY_SIZE];
        c.encode(&mut s);
        s
    };
    let l = layout();
    let map = MmapReply {
        kind: MapKind::Memory,
        offset: l.heap_offset + 16 * PAGE_SIZE,
        len: 16 * PAGE_SIZE,
    };
    vec![
        (
            Some(AdminKind::Open),
            0,
            enc(Completion::new(
                7,
                ReplyKind::Done,
                0,
                0x1234,
                ArgBuf::EMPTY,
                "",
            )),
        ),
        (
            Some(AdminKind::Ioctl),
            davinci_uapi::DRIVER_CMD_GET_INFO,
            enc(Completion::new(
                8,
                ReplyKind::Done,
                0,
                0x1234,
                ArgBuf::zeroed(120).unwrap(),
                "",
            )),
        ),
        (
            Some(AdminKind::Ioctl),
            DRIVER_CMD_LIST_CLIENTS,
            enc(Completion::new(
                9,
                ReplyKind::Done,
                0,
                0x1234,
                ArgBuf::zeroed(24).unwrap(),
                "",
            )),
        ),
        (
            Some(AdminKind::MmapTarget),
            0,
            enc(Completion::new(
                10,
                ReplyKind::Done,
                0,
                0x1234,
                map.to_arg(),
                "",
            )),
        ),
        (
            Some(AdminKind::MmapTarget),
            0,
            enc(Completion::new(
                11,
                ReplyKind::Failed,
                2,
                0x1234,
                ArgBuf::EMPTY,
                "no such object",
            )),
        ),
        (
            Some(AdminKind::WaitAgain),
            0,
            enc(Completion::new(
                12,
                ReplyKind::WaitNeeded,
                0,
                0x1234,
                ArgBuf::zeroed(32).unwrap(),
                "",
            )),
        ),
        (
            None,
            0,
            enc(Completion::new(
                13,
                ReplyKind::Failed,
                22,
                0,
                ArgBuf::EMPTY,
                "bad request",
            )),
        ),
    ]
}

/// What a run of `n` requests (cycling through [`replies`]) produced: every slot, every extra,
/// every pass action, in order.
fn run(seed: u64, rate: f64, n: usize) -> (Vec<u8>, Chaos) {
    let mut c = Chaos::new(
        ChaosConfig {
            seed,
            rate,
            classes: ALL_CLASSES,
        },
        layout(),
    );
    let mut out = Vec::new();
    let rs = replies();
    for i in 0..n {
        let (kind, req, slot) = rs[i % rs.len()];
        let mut s = slot;
        let e = c.on_reply(kind, req, &mut s);
        out.extend_from_slice(&s);
        for x in [e.before, e.after].into_iter().flatten() {
            out.extend_from_slice(&x[..]);
        }
        for a in c.take_pass_acts() {
            out.extend_from_slice(format!("{a:?}").as_bytes());
        }
    }
    (out, c)
}

#[test]
fn the_mutations_are_a_function_of_the_seed() {
    let (a, ca) = run(42, 0.3, 2000);
    let (b, cb) = run(42, 0.3, 2000);
    assert_eq!(a, b, "same seed, same requests: same replies");
    assert_eq!(ca.counts(), cb.counts());
    let (c, _) = run(43, 0.3, 2000);
    assert_ne!(a, c, "another seed mutates otherwise");
    // The rate is the fraction mutated (within a loose bound).
    let m: u64 = ca.counts().values().sum();
    assert!((450..=750).contains(&m), "{m} of 2000 mutated at rate 0.3");
    let (_, none) = run(42, 0.0, 500);
    assert!(none.counts().is_empty(), "rate 0 mutates nothing");
}

#[test]
fn every_class_is_drawn_and_applies_to_every_kind_without_panicking() {
    let (_, c) = run(7, 1.0, 20_000);
    for class in Class::ALL {
        assert!(
            c.counts().get(&class).copied().unwrap_or(0) > 0,
            "class {class} never drawn"
        );
    }
    // Each class forced on each kind of reply, with several seeds: no panic, and the slot
    // or the extras or the pass actions change.
    for seed in 0..20 {
        let mut c = Chaos::new(
            ChaosConfig {
                seed,
                rate: 1.0,
                classes: ALL_CLASSES,
            },
            layout(),
        );
        for (kind, _, slot) in replies() {
            for class in Class::ALL {
                let mut s = slot;
                let mut e = Extra::default();
                let what = c.apply(class, kind, &mut s, &mut e);
                assert!(!what.is_empty());
                let _ = c.take_pass_acts();
            }
        }
    }
}

#[test]
fn malformed_classes_make_completions_the_guest_refuses() {
    let mut c = Chaos::new(
        ChaosConfig {
            seed: 1,
            rate: 1.0,
            classes: ALL_CLASSES,
        },
        layout(),
    );
    for (kind, _, slot) in replies() {
        for class in [Class::ArgLenHuge, Class::BadKindWord] {
            let mut s = slot;
            c.apply(class, kind, &mut s, &mut Extra::default());
            assert!(
                Completion::decode(&s).is_err(),
                "{class} on {kind:?} decodes"
            );
        }
        // The well-formed lies still decode (the guest must check them against the request).
        for class in [
            Class::ArgLenLong,
            Class::ArgLenShort,
            Class::ArgLenZero,
            Class::WrongKind,
            Class::BadErrno,
            Class::WrongClient,
            Class::Revokes,
            Class::RevokeOverflow,
            Class::WrongTag,
        ] {
            let mut s = slot;
            let what = c.apply(class, kind, &mut s, &mut Extra::default());
            let d = Completion::decode(&s);
            assert!(d.is_ok(), "{class} on {kind:?} ({what}): {d:?}");
        }
    }
    // An MMAP_TARGET reply made short still decodes as a reply of one page.
    let (_, _, slot) = replies()[3];
    let mut s = slot;
    c.apply(
        Class::MapLenShort,
        Some(AdminKind::MmapTarget),
        &mut s,
        &mut Extra::default(),
    );
    let d = Completion::decode(&s).unwrap();
    let m = MmapReply::from_arg(d.arg.as_slice()).unwrap();
    assert_eq!(m.len, PAGE_SIZE);
}

#[test]
fn the_command_line_form_is_parsed() {
    assert_eq!(
        ChaosConfig::parse("17").unwrap(),
        ChaosConfig {
            seed: 17,
            rate: DEFAULT_RATE,
            classes: ALL_CLASSES,
        }
    );
    assert_eq!(
        ChaosConfig::parse("0x10,0.5").unwrap(),
        ChaosConfig {
            seed: 16,
            rate: 0.5,
            classes: ALL_CLASSES,
        }
    );
    assert!(ChaosConfig::parse("x").is_err());
    assert!(ChaosConfig::parse("1,2").is_err());
    assert!(ChaosConfig::parse("1,-0.1").is_err());
    assert!(ChaosConfig::parse("1,nan").is_err());
    let c = ChaosConfig::parse("1,1,map-len-short+wrong-tag").unwrap();
    assert_eq!(c.classes.count_ones(), 2);
    assert!(ChaosConfig::parse("1,1,no-such").is_err());
    // Only the named classes are drawn.
    let mut ch = Chaos::new(c, layout());
    for (kind, req, slot) in replies() {
        for _ in 0..50 {
            let mut s = slot;
            let _ = ch.on_reply(kind, req, &mut s);
        }
    }
    assert!(ch
        .counts()
        .keys()
        .all(|k| matches!(k, Class::MapLenShort | Class::WrongTag)));
    assert!(ch.counts().contains_key(&Class::MapLenShort));
}
