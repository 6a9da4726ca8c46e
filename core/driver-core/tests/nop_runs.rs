//! driver-core against its checking fake platform: the engine's fast path for runs of NOPs
//! checks exactly what the general path does. A NOP with any other field set, in the middle
//! of a run, fails at its own index with the fault the general path names; an EVENT_RECORD
//! or a data task inside a run still runs; an injected fault inside a run fires at its task;
//! a run stops at the budget, the available descriptors and the free event slots.

mod support;

use davinci_driver_core::{Inject, Role, Run, StreamState};
use davinci_uapi::*;
use support::*;

/// Every field but `opcode` and `user_data` of a NOP, one at a time, made non-zero in the
/// middle of a run of NOPs: the run before it completes, it fails with EBADMSG naming the
/// field (the general path's check order), at its ring index, and nothing after it runs.
#[test]
fn one_stray_field_in_a_nop_run_fails_that_descriptor_at_its_index() {
    use FaultKind as K;
    use FaultOperand as O;
    type Set = fn(&mut TaskDesc);
    let cases: [(Set, FaultOperand); 11] = [
        (|d| d.dtype = 1, O::Dtype),
        (|d| d.flags = 0x8000, O::Reserved),
        (|d| d.reserved0 = 1 << 31, O::Reserved),
        (|d| d.dst = 1 << 63, O::Dst),
        (|d| d.src0 = 1, O::Src0),
        (|d| d.src1 = 2, O::Src1),
        (|d| d.len = 1 << 40, O::Len),
        (|d| d.imm = 7, O::Imm),
        (|d| d.handle = 1, O::Handle),
        (|d| d.reserved1 = 1, O::Reserved),
        // Two at once: the first in the documented order is named.
        (
            |d| {
                d.imm = 1;
                d.src1 = 1;
            },
            O::Src1,
        ),
    ];
    for (i, (set, operand)) in cases.into_iter().enumerate() {
        let mut dev = device();
        let c = dev.open(params(1, 1000, Role::Client)).unwrap();
        let k = ctx(&mut dev, c);
        let mut s = stream(&mut dev, c, k, 64, 64);
        // Two NOPs in an earlier pass, so the failing index is not the run's position.
        nops(&mut s, 0, 2);
        assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(2));
        drain(&mut s);
        nops(&mut s, 10, 20);
        let mut bad = TaskDesc::nop(30);
        set(&mut bad);
        s.prod.push(&bad).unwrap();
        nops(&mut s, 31, 10);
        assert_eq!(
            dev.run_stream(s.handle, 64),
            Run::Failed(Errno::EBADMSG),
            "case {i}"
        );
        let r = drain(&mut s);
        assert_eq!(user_data(&r), (10..=30).collect::<Vec<_>>(), "case {i}");
        assert!(r[..20].iter().all(|r| r.status == 0 && r.result == 0));
        assert_eq!(r[20].status, -Errno::EBADMSG.code(), "case {i}");
        assert_eq!(
            r[20].result,
            Fault::new(operand, K::NotZero).encode(),
            "case {i}"
        );
        assert_eq!(
            s.prod.region().error(),
            Some((Errno::EBADMSG.code() as u32, 22)),
            "case {i}: the index of the failed descriptor"
        );
        assert_eq!(
            dev.stream_state(c, s.handle),
            Ok(StreamState::Error(Errno::EBADMSG))
        );
    }
}

/// An unknown opcode inside a run fails there, like any descriptor the general path rejects.
#[test]
fn an_unknown_opcode_in_a_nop_run_fails_at_its_index() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut s = stream(&mut dev, c, k, 16, 16);
    nops(&mut s, 0, 3);
    s.prod
        .push(&TaskDesc {
            opcode: 0x7f,
            ..TaskDesc::nop(3)
        })
        .unwrap();
    nops(&mut s, 4, 3);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(Errno::EBADMSG));
    let r = drain(&mut s);
    assert_eq!(user_data(&r), [0, 1, 2, 3]);
    assert_eq!(
        r[3].result,
        Fault::new(FaultOperand::Opcode, FaultKind::Unknown).encode()
    );
    assert_eq!(
        s.prod.region().error(),
        Some((Errno::EBADMSG.code() as u32, 3))
    );
}

/// EVENT_RECORD and FILL between NOPs run (the event's value set, memory filled), in order,
/// and the NOPs around them complete, in one pass.
#[test]
fn event_records_and_data_tasks_inside_a_nop_run_still_run() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let a = alloc(&mut dev, c, 4096);
    let ev = event(&mut dev, c, k);
    let mut s = stream(&mut dev, c, k, 64, 64);
    nops(&mut s, 0, 5);
    s.prod.push(&TaskDesc::event_record(5, ev, 42)).unwrap();
    nops(&mut s, 6, 5);
    s.prod
        .push(&TaskDesc::fill(11, DevAddr(a.dev_addr), 64, 0xabab_abab))
        .unwrap();
    nops(&mut s, 12, 5);
    s.prod.push(&TaskDesc::event_record(17, ev, 43)).unwrap();
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(18));
    let r = drain(&mut s);
    assert_eq!(user_data(&r), (0..18).collect::<Vec<_>>());
    assert!(r.iter().all(|r| r.status == 0));
    let opcodes: Vec<u8> = r.iter().map(|r| r.opcode).collect();
    assert_eq!(opcodes[5], Opcode::EventRecord as u8);
    assert_eq!(opcodes[11], Opcode::Fill as u8);
    assert_eq!((r[5].result, r[17].result), (42, 43));
    assert_eq!(r[11].result, 64);
    assert!(r[..5]
        .iter()
        .chain(&r[6..11])
        .all(|r| r.result == 0 && r.opcode == Opcode::Nop as u8));
    assert_eq!(mem(&mut dev, c, &a, 64), [0xab; 64]);
    assert!(
        wait_event_now(&mut dev, c, ev, 43).0.is_ok(),
        "the event reached 43"
    );
    // Time never goes backwards through the run.
    assert!(r.windows(2).all(|w| w[0].timestamp_ns <= w[1].timestamp_ns));
}

/// An injected error on the Nth task fires on that task even when it is a NOP in the middle
/// of a run: the NOPs before it complete, it fails with the injected errno, nothing after runs.
#[test]
fn an_injected_fault_inside_a_nop_run_fires_at_its_task() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut s = stream(&mut dev, c, k, 64, 64);
    dev.inject(
        Some(s.handle),
        Some(Inject::ErrorAt {
            nth: 7,
            errno: Errno::EIO,
        }),
    )
    .unwrap();
    nops(&mut s, 0, 20);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(Errno::EIO));
    let r = drain(&mut s);
    assert_eq!(user_data(&r), (0..7).collect::<Vec<_>>());
    assert_eq!(r[6].status, -Errno::EIO.code());
    assert_eq!(s.prod.region().error(), Some((Errno::EIO.code() as u32, 6)));
}

/// A run takes no more than the budget, the published descriptors and the free event slots,
/// and the next pass goes on where it stopped.
#[test]
fn a_nop_run_stops_at_the_budget_and_the_free_event_slots() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut s = stream(&mut dev, c, k, 16, 16);
    nops(&mut s, 0, 16);
    assert_eq!(dev.run_stream(s.handle, 10), Run::Progress(10));
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(6));
    assert_eq!(user_data(&drain(&mut s)), (0..16).collect::<Vec<_>>());
    nops(&mut s, 16, 16);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(16));
    // The event ring is full until the host reaps.
    nops(&mut s, 32, 8);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Stalled);
    assert_eq!(user_data(&drain(&mut s)), (16..32).collect::<Vec<_>>());
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(8));
    assert_eq!(user_data(&drain(&mut s)), (32..40).collect::<Vec<_>>());
    assert_eq!(dev.run_stream(s.handle, 64), Run::Idle);
}
