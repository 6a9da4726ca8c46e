//! Arbitrary task descriptors (the input cut into 64-byte chunks) executed by the engine for
//! a client that owns two allocations and an event, next to a second client with its own
//! allocation. Addresses in a descriptor are optionally rebased onto the allocations (first
//! input byte of each chunk's `reserved0`-free header selects how) so that in-range, edge
//! and just-out-of-range addresses are all common.
//!
//! Asserts: no panic (the platform panics if the engine touches memory outside the
//! submitting client's backed ranges); one completion per descriptor taken, in order, with
//! the descriptor's `user_data`; a FILL/COPY/ADD whose ranges are not each inside one
//! allocation of the submitting client completes with an error (never success), and a
//! successful one reports its length; the other client's memory never changes; after an
//! error completion the stream is in the error state and takes nothing more.

use davinci_driver_core::test_util::{device, params, RingMem};
use davinci_driver_core::{Role, Run, StreamState};
use davinci_uapi::*;

/// A few bytes of input choose how each descriptor's addresses are formed.
fn rebase(mode: u8, v: u64, allocs: &[(u64, u64)]) -> u64 {
    let (addr, size) = allocs[(mode as usize >> 2) % allocs.len()];
    let small = v % (size + 256);
    match mode & 3 {
        0 => v,                                   // raw
        1 => addr + small,                        // inside or just past
        2 => (addr + size).wrapping_sub(v % 512), // around the end
        _ => addr.wrapping_sub(v % 64),           // around the start
    }
}

fn len_for(mode: u8, v: u64) -> u64 {
    match mode >> 6 {
        0 => v,
        1 => v % 16384,
        2 => (v % 4096) & !3,
        _ => (v % 64) * 4,
    }
}

/// Inside exactly one of `allocs`?
fn inside(addr: u64, len: u64, allocs: &[(u64, u64)]) -> bool {
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    allocs.iter().any(|&(a, s)| addr >= a && end <= a + s)
}

/// One input.
pub fn run(data: &[u8]) {
    let mut dev = device();
    let c = dev.open(params(1, Role::Client, true)).expect("first open");
    dev.set_share_mode(c, ShareMode::Shared).expect("shared");
    let other = dev
        .open(params(2, Role::Client, false))
        .expect("second open");
    let ctx = dev.create_context(c).expect("context");
    let ev = dev.create_event(c, ctx, 0).expect("event");
    let mut allocs = Vec::new();
    for size in [8192u64, 4096] {
        let mut a = AllocMemoryArgs {
            size,
            ..Default::default()
        };
        dev.alloc_memory(c, &mut a).expect("alloc");
        allocs.push((a.dev_addr, a.alloc_size));
    }
    let mut oa = AllocMemoryArgs {
        size: 4096,
        ..Default::default()
    };
    dev.alloc_memory(other, &mut oa).expect("other alloc");
    // Something recognisable in the other client's memory.
    let octx = dev.create_context(other).expect("other context");
    let mut os = CreateStreamArgs {
        ctx: octx,
        cmd_entries: 2,
        event_entries: 2,
        ..Default::default()
    };
    dev.create_stream(other, &mut os).expect("other stream");
    {
        let om = RingMem::of(&dev, other, os.handle).expect("other memory");
        let mut p = om.host_producer();
        let fill = TaskDesc {
            opcode: Opcode::Fill as u8,
            dst: oa.dev_addr,
            len: 4096,
            imm: 0xA5A5_5A5A,
            ..Default::default()
        };
        p.push(&fill).expect("room");
        p.publish();
        assert_eq!(dev.run_stream(os.handle, 8), Run::Progress(1));
    }
    let other_before = dev.platform().arena_copy(other);

    let mut sa = CreateStreamArgs {
        ctx,
        cmd_entries: 64,
        event_entries: 64,
        ..Default::default()
    };
    dev.create_stream(c, &mut sa).expect("stream");
    let s = sa.handle;
    let m = RingMem::of(&dev, c, s).expect("stream memory");
    let mut prod = m.host_producer();
    let mut cons = m.host_consumer();

    let mut descs = Vec::new();
    for chunk in data.chunks_exact(64).take(256) {
        let mut d = TaskDesc::decode(chunk);
        // reserved0 is a u32 the engine requires to be 0; its bytes steer the rebasing and
        // are then cleared (unless the top bit asks to keep the raw value).
        let r = d.reserved0.to_le_bytes();
        if r[3] & 0x80 == 0 {
            d.opcode %= 8;
            d.dst = rebase(r[0], d.dst, &allocs);
            d.src0 = rebase(r[1], d.src0, &allocs);
            d.src1 = rebase(r[2], d.src1, &allocs);
            d.len = len_for(r[3], d.len);
            if r[3] & 0x20 != 0 {
                d.handle = ev;
            }
            if r[3] & 0x10 == 0 {
                d.flags = 0;
                d.reserved1 = 0;
            }
            d.reserved0 = 0;
        }
        descs.push(d);
    }

    let mut next = 0usize;
    let mut done = 0usize;
    let mut failed = false;
    let mut rounds = 0;
    while done < descs.len() && rounds < 1024 {
        rounds += 1;
        while next < descs.len() && prod.push(&descs[next]).is_ok() {
            next += 1;
        }
        prod.publish();
        let r = dev.run_stream(s, 1 + (rounds % 7) as u32);
        let mut got = Vec::new();
        cons.consume(usize::MAX, |e| got.push(e));
        for e in got {
            assert!(!failed, "a completion after the error completion");
            let d = &descs[done];
            done += 1;
            assert_eq!(e.user_data, d.user_data, "completions out of order");
            assert_eq!(e.opcode, d.opcode);
            if e.status != 0 {
                assert!(
                    e.status < 0 && Errno::from_code(-e.status).is_some(),
                    "bad status {}",
                    e.status
                );
                failed = true;
                continue;
            }
            let op = Opcode::from_u8(d.opcode).expect("a success has a known opcode");
            let ok = |a: u64, l: u64| inside(a, l, &allocs);
            match op {
                Opcode::Fill => {
                    assert!(
                        ok(d.dst, d.len),
                        "FILL outside the client's memory succeeded: {d:?}"
                    );
                    assert_eq!(e.result, d.len);
                }
                Opcode::Copy => {
                    assert!(
                        ok(d.dst, d.len) && ok(d.src0, d.len),
                        "COPY outside succeeded: {d:?}"
                    );
                    assert_eq!(e.result, d.len);
                }
                Opcode::Add => {
                    let size = Dtype::from_u8(d.dtype).expect("ADD of an unknown dtype succeeded");
                    let bytes = d
                        .len
                        .checked_mul(size.size())
                        .expect("ADD bytes overflow succeeded");
                    assert!(
                        ok(d.dst, bytes) && ok(d.src0, bytes) && ok(d.src1, bytes),
                        "ADD outside succeeded: {d:?}"
                    );
                    assert_eq!(e.result, d.len);
                }
                // A launch's operands are checked against the allocations by the engine
                // (the kernel-block target fuzzes them); its block must have been inside.
                Opcode::KernelLaunch => assert!(
                    ok(d.src0, d.len),
                    "a launch whose parameter block is outside succeeded: {d:?}"
                ),
                Opcode::Nop | Opcode::EventRecord | Opcode::EventWait => {}
            }
        }
        match r {
            Run::Failed(errno) => {
                assert!(
                    failed,
                    "stream failed ({errno:?}) without an error completion"
                );
                assert_eq!(dev.stream_state(c, s), Ok(StreamState::Error(errno)));
                break;
            }
            Run::Blocked { .. } => break, // an EVENT_WAIT nobody will record
            Run::Gone => panic!("stream vanished"),
            _ => {}
        }
    }
    assert_eq!(
        dev.platform().arena_copy(other),
        other_before,
        "another client's memory changed"
    );
    let _ = (prod, cons);
    dev.close(c);
    dev.close(other);
    assert_eq!(dev.info().memory_used, 0);
    assert_eq!(dev.platform().live_streams, 0);
}
