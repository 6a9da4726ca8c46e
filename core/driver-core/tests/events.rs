//! driver-core against its checking fake platform: Events and waits when what they wait for goes away: a WAIT_EVENT on a destroyed stream is
//! cancelled, and values a stopped stream will never record fail their waiters (abi.md 8).

mod support;

use davinci_driver_core::{Reply, Role, Run, DVA_BASE};
use davinci_uapi::*;
use support::*;

#[test]
fn wait_on_a_destroyed_stream_is_cancelled() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let s = stream(&mut dev, c, k, 4, 4);
    let mut w = WaitEventArgs {
        kind: 1,
        handle: s.handle,
        value: 1,
        timeout_ns: 1_000_000,
        ..Default::default()
    };
    let spec = match call(&mut dev, c, DRIVER_CMD_WAIT_EVENT, &mut w) {
        Ok(Reply::Wait(spec)) => spec,
        other => panic!("expected a blocking wait, got {other:?}"),
    };
    let mut raw = vec![0u8; WaitEventArgs::SIZE];
    w.encode(&mut raw);
    assert_eq!(dev.finish_wait(c, &spec, &mut raw, false), Ok(None));
    let mut h = HandleArgs {
        handle: s.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
    assert_eq!(
        dev.finish_wait(c, &spec, &mut raw, false)
            .unwrap_err()
            .errno,
        Errno::ECANCELED
    );
}

/// abi.md 8: a record a stopped stream will never run makes its value unreachable: waits
/// for it fail with EIO (status: the stream's errno), whether the stream stopped on a bad
/// descriptor, on corrupt indices (every slot is looked at) or was destroyed; a value another
/// record reaches, or one above every queued record, is unaffected.
#[test]
fn records_a_stopped_stream_will_never_run_fail_their_waiters() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let (e1, e2) = (event(&mut dev, c, k), event(&mut dev, c, k));

    // A bad descriptor, then records of e1 (value 3) and e2 (value 1).
    let mut s = stream(&mut dev, c, k, 8, 8);
    s.prod
        .push(&TaskDesc::fill(1, DevAddr(DVA_BASE + (1 << 30)), 64, 0))
        .unwrap();
    s.prod.push(&TaskDesc::event_record(2, e1, 3)).unwrap();
    s.prod.push(&TaskDesc::event_record(3, e2, 1)).unwrap();
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(Errno::EACCES));
    for (ev, v) in [(e1, 1), (e1, 3), (e2, 1)] {
        assert_eq!(
            wait_event_now(&mut dev, c, ev, v),
            (Err(Errno::EIO), Errno::EACCES.code() as u32),
            "event {ev:#x} value {v}"
        );
    }
    // Above what was queued: just not reached yet.
    assert_eq!(wait_event_now(&mut dev, c, e1, 4).0, Err(Errno::EAGAIN));

    // Another stream records e1 = 3: reached, so the poison no longer matters.
    let mut t = stream(&mut dev, c, k, 8, 8);
    t.prod.push(&TaskDesc::event_record(4, e1, 3)).unwrap();
    t.prod.publish();
    assert_eq!(dev.run_stream(t.handle, 64), Run::Progress(1));
    assert_eq!(wait_event_now(&mut dev, c, e1, 3).0, Ok(Reply::Done));

    // Corrupt indices: the queued slots are still looked at.
    let e3 = event(&mut dev, c, k);
    let mut u = stream(&mut dev, c, k, 8, 8);
    u.prod.push(&TaskDesc::event_record(5, e3, 1)).unwrap();
    // SAFETY: `cmd_ptr` points at the live command ring; offset 0 is the u32 tail.
    unsafe { u.cmd_ptr.cast::<u32>().write_volatile(1000) };
    assert_eq!(dev.run_stream(u.handle, 64), Run::Failed(Errno::EPROTO));
    assert_eq!(
        wait_event_now(&mut dev, c, e3, 1),
        (Err(Errno::EIO), Errno::EPROTO.code() as u32)
    );

    // A destroyed stream: its queued record of e4 is cancelled.
    let e4 = event(&mut dev, c, k);
    let mut v = stream(&mut dev, c, k, 8, 8);
    v.prod.push(&TaskDesc::event_wait(6, e2, 9)).unwrap();
    v.prod.push(&TaskDesc::event_record(7, e4, 1)).unwrap();
    v.prod.publish();
    assert!(matches!(dev.run_stream(v.handle, 64), Run::Blocked { .. }));
    let mut h = HandleArgs {
        handle: v.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
    assert_eq!(
        wait_event_now(&mut dev, c, e4, 1),
        (Err(Errno::EIO), Errno::ECANCELED.code() as u32)
    );

    // Another stream's EVENT_WAIT for an unreachable value fails that stream with EIO.
    let mut w = stream(&mut dev, c, k, 8, 8);
    w.prod.push(&TaskDesc::event_wait(8, e2, 1)).unwrap();
    w.prod.push(&TaskDesc::nop(9)).unwrap();
    w.prod.publish();
    assert_eq!(dev.run_stream(w.handle, 64), Run::Failed(Errno::EIO));
    let recs = drain(&mut w);
    assert_eq!(recs.len(), 1, "the NOP after it does not run: {recs:?}");
    assert_eq!(recs[0].status, -Errno::EIO.code());

    // ... also when it was already blocked before the recording stream stopped.
    let e5 = event(&mut dev, c, k);
    let mut blocked = stream(&mut dev, c, k, 8, 8);
    blocked.prod.push(&TaskDesc::event_wait(10, e5, 1)).unwrap();
    blocked.prod.publish();
    assert!(matches!(
        dev.run_stream(blocked.handle, 64),
        Run::Blocked { .. }
    ));
    let mut x = stream(&mut dev, c, k, 8, 8);
    x.prod
        .push(&TaskDesc {
            flags: 1,
            ..TaskDesc::nop(0x77)
        })
        .unwrap();
    x.prod.push(&TaskDesc::event_record(11, e5, 1)).unwrap();
    x.prod.publish();
    assert_eq!(dev.run_stream(x.handle, 64), Run::Failed(Errno::EBADMSG));
    assert_eq!(dev.run_stream(blocked.handle, 64), Run::Failed(Errno::EIO));
    let recs = drain(&mut blocked);
    assert_eq!(recs.len(), 1);
    assert_eq!(
        (recs[0].opcode, recs[0].status),
        (Opcode::EventWait as u8, -Errno::EIO.code())
    );
}

/// abi.md 8, "Recording again after a stop": a value a stopped stream had queued stays
/// unreachable until a record actually reaches it. Re-recording the same value on a working
/// stream does not lift that while the record waits in its ring (the device reads a ring's
/// descriptors only when it takes them), so a wait checked in between fails with EIO, on the
/// host and on the device; once the record ran, the value is reached. A value above
/// everything the stopped stream had queued is never unreachable: that is how to record again.
#[test]
fn re_recording_a_value_a_stopped_stream_had_queued_reaches_it_only_when_it_runs() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let ev = event(&mut dev, c, k);

    // A stops on a bad descriptor with records of 1 and 2 queued behind it.
    let mut a = stream(&mut dev, c, k, 8, 8);
    a.prod
        .push(&TaskDesc::fill(1, DevAddr(DVA_BASE + (1 << 30)), 64, 0))
        .unwrap();
    a.prod.push(&TaskDesc::event_record(2, ev, 1)).unwrap();
    a.prod.push(&TaskDesc::event_record(3, ev, 2)).unwrap();
    a.prod.publish();
    assert_eq!(dev.run_stream(a.handle, 64), Run::Failed(Errno::EACCES));
    let mut h = HandleArgs {
        handle: a.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();

    // The client re-submits on B what A never ran: the same values, 1 then 2.
    let mut b = stream(&mut dev, c, k, 8, 8);
    b.prod.push(&TaskDesc::event_record(4, ev, 1)).unwrap();
    b.prod.publish();
    // Waited for at once, before the device has taken B's record: EIO, A's errno.
    let unreachable = (Err(Errno::EIO), Errno::EACCES.code() as u32);
    assert_eq!(wait_event_now(&mut dev, c, ev, 1), unreachable);
    // A stream whose EVENT_WAIT the device reaches first fails too.
    let mut w = stream(&mut dev, c, k, 8, 8);
    w.prod.push(&TaskDesc::event_wait(5, ev, 1)).unwrap();
    w.prod.publish();
    assert_eq!(dev.run_stream(w.handle, 64), Run::Failed(Errno::EIO));
    // Once B's record ran, 1 is reached; 2, queued by A and not re-recorded yet, is not.
    assert_eq!(dev.run_stream(b.handle, 64), Run::Progress(1));
    assert_eq!(wait_event_now(&mut dev, c, ev, 1).0, Ok(Reply::Done));
    assert_eq!(wait_event_now(&mut dev, c, ev, 2), unreachable);

    // A value above everything A had queued is an ordinary value: not reached yet.
    b.prod.push(&TaskDesc::event_record(6, ev, 3)).unwrap();
    b.prod.publish();
    assert_eq!(wait_event_now(&mut dev, c, ev, 3).0, Err(Errno::EAGAIN));
    assert_eq!(dev.run_stream(b.handle, 64), Run::Progress(1));
    // Reaching 3 reaches 2 as well.
    assert_eq!(wait_event_now(&mut dev, c, ev, 2).0, Ok(Reply::Done));
    assert_eq!(wait_event_now(&mut dev, c, ev, 3).0, Ok(Reply::Done));
}
