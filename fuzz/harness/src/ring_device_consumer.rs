//! The device side of a stream over hostile shared memory: the host writes any tail into the
//! command ring, any head into the event ring, any bytes into command and event slots and
//! into the header words the device owns but never trusts (entries, mask, flags, error...),
//! between calls of `DeviceCore::run_stream` (which drives `DeviceConsumer` and
//! `DeviceProducer`), SUBMIT_TASK (`DeviceConsumer::submit_on_behalf`) and the sleep
//! handshake.
//!
//! Asserts: no panic; one call takes at most `min(budget, cmd entries, tail - head)`
//! descriptors and publishes at most one record per descriptor (at most `event entries`);
//! a tail more than `entries` ahead of the device's head takes nothing and puts the stream in
//! the error state with `EPROTO`, visible in the header (ERROR flag, `error`); the device
//! never has more than `event entries` records outstanding past a head it accepted; a failed
//! stream stays failed and moves no index.

use arbitrary::Arbitrary;

use davinci_driver_core::test_util::{device, hdr, params, RingMem};
use davinci_driver_core::{Role, Run, StreamState};
use davinci_uapi::*;

#[derive(Arbitrary, Debug)]
struct Input {
    ce_log: u8,
    ee_extra: u8,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// Any tail.
    CmdTail(u32),
    /// Tail = device head + delta (mostly plausible values).
    CmdTailRel(i16),
    /// Any event head.
    EventHead(u32),
    /// Event head = published tail - delta (a host that consumed some records, or lies).
    EventHeadRel(i16),
    /// Raw bytes into a command slot.
    Slot {
        index: u32,
        bytes: [u8; 64],
    },
    /// A valid NOP into a command slot.
    Nop {
        index: u32,
        user_data: u64,
    },
    /// Any value into a header word the device owns (never an index it keeps itself).
    Header {
        which: u8,
        value: u32,
    },
    /// Garbage over the event slots.
    EventScribble {
        at: u16,
        bytes: Vec<u8>,
    },
    Run {
        budget: u8,
    },
    Submit {
        desc: [u8; 64],
    },
    Sleep,
    Woke,
}

/// One input (decoded with `arbitrary` exactly as `fuzz_target!` does).
pub fn run(data: &[u8]) {
    let Ok(input) = <Input>::arbitrary_take_rest(arbitrary::Unstructured::new(data)) else {
        return;
    };
    let mut dev = device();
    let c = dev
        .open(params(1, Role::Client, false))
        .expect("first open");
    let ctx = dev.create_context(c).expect("context");
    let ce = 1u32 << (1 + input.ce_log as u32 % 8);
    let ee = ce << (input.ee_extra as u32 % 3);
    let mut args = CreateStreamArgs {
        ctx,
        cmd_entries: ce,
        event_entries: ee,
        ..Default::default()
    };
    dev.create_stream(c, &mut args).expect("stream");
    let s = args.handle;
    let ev = dev.create_event(c, ctx, 0).expect("event");
    let mut a = AllocMemoryArgs {
        size: 8192,
        ..Default::default()
    };
    dev.alloc_memory(c, &mut a).expect("alloc");
    let _ = ev;
    let m = RingMem::of(&dev, c, s).expect("stream memory");

    let mut failed: Option<Errno> = None;
    for op in input.ops.into_iter().take(512) {
        match op {
            Op::CmdTail(t) => m.set_cmd_hdr(hdr::TAIL, t),
            Op::CmdTailRel(d) => {
                let head = m.cmd_hdr(hdr::HEAD);
                m.set_cmd_hdr(hdr::TAIL, head.wrapping_add(d as i32 as u32));
            }
            Op::EventHead(h) => m.set_event_hdr(hdr::HEAD, h),
            Op::EventHeadRel(d) => {
                let tail = m.event_hdr(hdr::TAIL);
                m.set_event_hdr(hdr::HEAD, tail.wrapping_sub(d as i32 as u32));
            }
            Op::Slot { index, bytes } => m.write_cmd_slot(index, &bytes),
            Op::Nop { index, user_data } => {
                let d = TaskDesc {
                    opcode: Opcode::Nop as u8,
                    user_data,
                    ..Default::default()
                };
                let mut b = [0u8; 64];
                d.encode(&mut b);
                m.write_cmd_slot(index, &b);
            }
            Op::Header { which, value } => {
                let offs = [
                    hdr::ENTRIES,
                    hdr::MASK,
                    hdr::FLAGS,
                    hdr::DROPPED,
                    hdr::ERROR,
                    hdr::ERROR_INDEX,
                ];
                let off = offs[which as usize % offs.len()];
                if which & 0x80 == 0 {
                    m.set_cmd_hdr(off, value);
                } else {
                    m.set_event_hdr(off, value);
                }
            }
            Op::EventScribble { at, bytes } => m.scribble_event_slots(at as usize, &bytes),
            Op::Submit { desc } => {
                let mut sa = SubmitTaskArgs {
                    stream: s,
                    desc: TaskDesc::decode(&desc),
                    ..Default::default()
                };
                let tail_before = m.cmd_hdr(hdr::TAIL);
                let head = m.cmd_hdr(hdr::HEAD);
                let mut arg = vec![0u8; SubmitTaskArgs::SIZE];
                sa.encode(&mut arg);
                let r = dev.ioctl(
                    c,
                    DRIVER_CMD_SUBMIT_TASK,
                    &mut arg,
                    &mut davinci_driver_core::NoUserMem,
                );
                let used = tail_before.wrapping_sub(head);
                match r {
                    Ok(_) => {
                        assert!(failed.is_none() && used < ce);
                        sa = SubmitTaskArgs::decode(&arg);
                        assert_eq!(sa.index, tail_before);
                        assert_eq!(m.cmd_hdr(hdr::TAIL), tail_before.wrapping_add(1));
                    }
                    Err(e) => {
                        assert_eq!(
                            m.cmd_hdr(hdr::TAIL),
                            tail_before,
                            "a failed submit moved the tail"
                        );
                        if failed.is_none() {
                            let want = if used == ce {
                                Errno::EAGAIN
                            } else {
                                Errno::EIO
                            };
                            assert!(used >= ce, "submit failed with room: {e:?}");
                            assert_eq!(e.errno, want);
                            // A corrupt tail (more than `entries` published) puts the stream
                            // in the error state, as `run_stream` would.
                            if let Ok(StreamState::Error(errno)) = dev.stream_state(c, s) {
                                assert!(used > ce, "a full ring failed the stream");
                                failed = Some(errno);
                            }
                        }
                    }
                }
            }
            Op::Sleep => {
                let _ = dev.stream_prepare_sleep(s);
            }
            Op::Woke => dev.stream_woke(s, true),
            Op::Run { budget } => {
                let budget = budget as u32;
                let cmd_head = m.cmd_hdr(hdr::HEAD);
                let cmd_tail = m.cmd_hdr(hdr::TAIL);
                let ev_tail = m.event_hdr(hdr::TAIL);
                let ev_head = m.event_hdr(hdr::HEAD);
                let r = dev.run_stream(s, budget);
                let taken = m.cmd_hdr(hdr::HEAD).wrapping_sub(cmd_head);
                let published = m.event_hdr(hdr::TAIL).wrapping_sub(ev_tail);
                if let Some(e) = failed {
                    assert_eq!(r, Run::Failed(e), "a failed stream ran again");
                    assert_eq!(taken, 0);
                    assert_eq!(published, 0);
                    continue;
                }
                let ahead = cmd_tail.wrapping_sub(cmd_head);
                assert!(
                    taken <= ce && taken <= budget,
                    "took {taken} (budget {budget}, entries {ce})"
                );
                assert!(
                    published <= ee && published <= taken + 1,
                    "published {published} for {taken} taken"
                );
                if ahead > ce {
                    assert_eq!(taken, 0, "followed a corrupt tail");
                } else {
                    assert!(taken <= ahead, "took {taken} with {ahead} published");
                }
                match r {
                    Run::Failed(e) => {
                        assert_eq!(dev.stream_state(c, s), Ok(StreamState::Error(e)));
                        assert_eq!(m.cmd_hdr(hdr::ERROR), e.code() as u32);
                        assert!(m.cmd_hdr(hdr::FLAGS) & RingFlags::ERROR.bits() != 0);
                        failed = Some(e);
                    }
                    Run::Progress(n) => {
                        assert!(
                            n >= 1 && n == published,
                            "progress {n}, published {published}"
                        );
                        // The head the device accepted: the one in memory; nothing it
                        // published may be more than `ee` past it.
                        let outstanding = m.event_hdr(hdr::TAIL).wrapping_sub(ev_head);
                        assert!(
                            outstanding <= ee,
                            "{outstanding} records outstanding in {ee} slots"
                        );
                    }
                    Run::Idle | Run::Stalled | Run::Blocked { .. } | Run::Continuing => {
                        assert_eq!(published, 0)
                    }
                    Run::Gone => panic!("stream vanished"),
                    Run::Halted => panic!("stream halted with no fault injected"),
                }
                if ahead > ce {
                    assert_eq!(r, Run::Failed(Errno::EPROTO), "corrupt tail not reported");
                }
            }
        }
    }
    dev.close(c);
    assert_eq!(dev.info().memory_used, 0);
    assert_eq!(dev.platform().live_streams, 0);
}
