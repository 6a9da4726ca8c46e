//! Containment: a corrupted command ring or garbage descriptors stop only their stream, with
//! errors that name the operand and what was wrong; an event behind a failed stream fails its
//! waiters; polling keeps the last error; device paths and open errors are clear.
#![deny(unsafe_code)]

use davinci_tests::descs::SubmitDescs;
use std::time::Duration;

use davinci_shim::{
    task, DevAddr, Device, DeviceMem, Dtype, Errno, Opcode, StreamOptions, TaskDesc,
};
use davinci_uapi::{
    LastError, WaitEventArgs, WaitKind, Wire, DRIVER_CMD_DESTROY_CONTEXT,
    DRIVER_CMD_GET_LAST_ERROR, DRIVER_CMD_WAIT_EVENT,
};

use super::{assert_works, dev, poison_pill, poll_all, raw_handle, wait_for_error, T};

#[test]
fn corrupted_command_ring_stops_only_its_stream() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let other_ctx = dev.create_context().unwrap();
    let mut bad = ctx.create_stream().unwrap();
    let mut same_ctx = ctx.create_stream().unwrap();
    let mut other = other_ctx.create_stream().unwrap();
    let buf = dev.alloc(4096).unwrap();

    bad.submit_descs(&[TaskDesc::nop(1), TaskDesc::fill(2, buf.dev_addr(), 64, 5)])
        .unwrap();
    bad.synchronize(T).unwrap();
    // A tail no correct producer writes: far more than `entries` past the device's head.
    bad.debug_store_cmd_tail(0x4000_0000).unwrap();
    let e = wait_for_error(&bad);
    assert_eq!(e.errno(), Some(Errno::EPROTO), "{e}");
    assert_eq!(
        e.index(),
        2,
        "the device's head when it found the corruption"
    );
    let err = bad.synchronize(T).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EIO), "{err}");
    assert!(
        err.message().contains("EPROTO"),
        "message names the cause: {err}"
    );
    // ... says what to do, once.
    assert!(
        err.message().contains("create a new one"),
        "message says how to recover: {err}"
    );
    assert_eq!(
        err.message().matches("stopped by the device").count(),
        1,
        "no repeated wording: {err}"
    );
    let err = bad.submit(&task::nop().with_user_data(3)).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EIO), "{err}");
    assert!(err.message().contains("create a new one"), "{err}");
    // Nothing of the corrupt range was executed or completed.
    assert_eq!(poll_all(&mut bad).len(), 2);

    assert_works(&dev, &mut same_ctx, 1);
    assert_works(&dev, &mut other, 2);
    // A new stream of the same context works too.
    let mut fresh = ctx.create_stream().unwrap();
    assert_works(&dev, &mut fresh, 3);
}

#[test]
fn garbage_descriptors_fail_clearly_and_stop_their_stream() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let other_ctx = dev.create_context().unwrap();
    let mut healthy = ctx.create_stream().unwrap();
    let mut other = other_ctx.create_stream().unwrap();
    let mine = dev.alloc(8192).unwrap();
    let neighbour = dev.alloc(4096).unwrap();
    let foreign_event = other_ctx.create_event().unwrap();
    let base = mine.dev_addr();

    let mut unknown_opcode = TaskDesc::nop(0);
    unknown_opcode.opcode = 200;
    let mut reserved_flags = TaskDesc::nop(0);
    reserved_flags.flags = 1;
    let mut reserved_word = TaskDesc::fill(0, base, 64, 1);
    reserved_word.reserved1 = 7;
    let mut bad_dtype = TaskDesc::add(0, Dtype::U32, base, base, base, 4);
    bad_dtype.dtype = 9;
    let mut nop_operand = TaskDesc::nop(0);
    nop_operand.dst = base.get();
    let cases: Vec<(&str, TaskDesc, Errno)> = vec![
        ("unknown opcode", unknown_opcode, Errno::EBADMSG),
        ("reserved flags", reserved_flags, Errno::EBADMSG),
        ("reserved word", reserved_word, Errno::EBADMSG),
        ("unknown ADD dtype", bad_dtype, Errno::EBADMSG),
        ("operand a NOP does not use", nop_operand, Errno::EBADMSG),
        (
            "a launch of a kernel no device runs",
            TaskDesc::kernel_launch(0, 99, 1, base, 64),
            Errno::EBADMSG,
        ),
        // Owned at the start, but running past the allocation's end: ERANGE (ABI 1.2; the
        // fault says by how much), not EACCES, which means "not this client's memory".
        (
            "fill beyond the allocation",
            TaskDesc::fill(0, base + (8192 - 64), 128, 1),
            Errno::ERANGE,
        ),
        (
            "copy from one allocation on into the next",
            TaskDesc::copy(0, neighbour.dev_addr(), base + (8192 - 64), 128),
            Errno::ERANGE,
        ),
        (
            "address below device memory",
            TaskDesc::fill(0, DevAddr(0x1000), 64, 1),
            Errno::EACCES,
        ),
        (
            "address far beyond device memory",
            TaskDesc::fill(0, base + (1 << 40), 64, 1),
            Errno::EACCES,
        ),
        (
            "unaligned fill length",
            TaskDesc::fill(0, base, 6, 1),
            Errno::EINVAL,
        ),
        (
            "event of another context",
            TaskDesc::event_wait(0, foreign_event.handle(), 1),
            Errno::ENOENT,
        ),
        (
            "no such event",
            TaskDesc::event_record(0, 0xdead, 1),
            Errno::ENOENT,
        ),
    ];
    for (i, (what, mut garbage, errno)) in cases.into_iter().enumerate() {
        garbage.user_data = 0xbad;
        let mut s = ctx.create_stream().unwrap();
        let marker = (i as u32 + 1) * 0x0101_0101;
        s.submit_descs(&[
            TaskDesc::fill(1, base, 64, marker),
            garbage,
            TaskDesc::fill(3, base + 64, 64, marker),
        ])
        .unwrap();
        let err = s.synchronize(T).unwrap_err();
        assert_eq!(err.errno(), Some(Errno::EIO), "{what}: {err}");
        assert!(err.message().contains(errno.name()), "{what}: {err}");
        let done = poll_all(&mut s);
        assert_eq!(
            done.len(),
            2,
            "{what}: nothing after the bad descriptor runs"
        );
        assert!(
            done[0].is_ok() && done[0].user_data == 1,
            "{what}: {:?}",
            done[0]
        );
        assert_eq!(done[1].user_data, 0xbad, "{what}");
        assert_eq!(done[1].status, -errno.code(), "{what}: {:?}", done[1]);
        assert_eq!(done[1].errno(), Some(errno), "{what}");
        let state = s.error_state().expect("error state");
        assert_eq!((state.errno(), state.index()), (Some(errno), 1), "{what}");
        assert_eq!(
            mine.read_vec::<u32>(0, 16).unwrap(),
            vec![marker; 16],
            "{what}"
        );
        assert_eq!(
            mine.read_vec::<u32>(64, 16).unwrap(),
            vec![if i == 0 { 0 } else { i as u32 * 0x0101_0101 }; 16],
            "{what}: the FILL after the bad descriptor must not run"
        );
        // Later submissions are refused with the stream's error.
        assert_eq!(
            s.submit(&task::nop().with_user_data(4))
                .unwrap_err()
                .errno(),
            Some(Errno::EIO)
        );
        // Keep the previous marker at +64 for the next case's check.
        mine.write_slice(64, &[marker; 16]).unwrap();
        // Another stream of the same context and a stream of another context still work.
        if i % 4 == 0 {
            assert_works(&dev, &mut healthy, 10 + i as u64);
            assert_works(&dev, &mut other, 20 + i as u64);
        }
    }
    assert_eq!(
        neighbour.read_vec::<u32>(0, 1024).unwrap(),
        vec![0; 1024],
        "no bad descriptor touched the neighbouring allocation"
    );
}

/// Device errors say which operand was wrong and how: a range that runs past its allocation
/// is ERANGE with the bytes past the end (not "not owned"), a foreign address is EACCES, a
/// misaligned one EINVAL with the alignment needed; the messages carry it.
#[test]
fn device_errors_name_the_operand_and_what_was_wrong() {
    use davinci_shim::{Fault, FaultKind, FaultOperand};
    let dev = dev();
    assert!(dev
        .features()
        .contains(davinci_shim::Features::FAULT_DETAIL));
    let ctx = dev.create_context().unwrap();
    let (a, b) = (dev.alloc(4096).unwrap(), dev.alloc(4096).unwrap());
    let cases = [
        (
            // 1024 elements from 4 bytes into b: 4 bytes too many.
            TaskDesc::add(
                1,
                Dtype::U32,
                a.dev_addr(),
                a.dev_addr(),
                b.dev_addr() + 4,
                1024,
            ),
            Errno::ERANGE,
            Fault::with_value(FaultOperand::Src1, FaultKind::PastEnd, 4),
            "src1: the range runs 4 bytes past the end of its allocation",
        ),
        (
            TaskDesc::copy(2, a.dev_addr(), DevAddr(0x10), 64),
            Errno::EACCES,
            Fault::new(FaultOperand::Src0, FaultKind::NotOwned),
            "src0: the address is not in any of this client's allocations",
        ),
        (
            TaskDesc::fill(3, a.dev_addr() + 2, 64, 0),
            Errno::EINVAL,
            Fault::with_value(FaultOperand::Dst, FaultKind::Misaligned, 4),
            "dst: must be a multiple of 4 bytes",
        ),
    ];
    for (desc, errno, fault, text) in cases {
        let mut s = ctx.create_stream().unwrap();
        s.submit_desc(&desc).unwrap();
        let e = s.synchronize(T).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EIO), "{e}");
        assert!(e.message().contains(errno.name()), "{e}");
        assert!(e.message().contains(text), "{e}");
        let c = poll_all(&mut s);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].errno(), c[0].fault()), (Some(errno), Some(fault)));
        assert_eq!(s.error_state().and_then(|st| st.errno()), Some(errno));
    }
}

/// An event whose record sits behind a failing descriptor will never be reached: waiting for
/// it fails at once with the stream's error, on the host (`synchronize`, `query`, a waiter
/// already asleep) and on the device (another stream's EVENT_WAIT fails that stream instead
/// of hanging it); a destroyed stream's queued record does the same with `ECANCELED`.
#[test]
fn an_event_behind_a_failed_stream_fails_its_waiters() {
    let long = Duration::from_secs(60);
    let dev = dev();
    let ctx = dev.create_context().unwrap();

    // Recorded after a descriptor that fails: synchronize and query fail, naming the cause;
    // a long timeout shows the error comes at once (a timeout would be ETIMEDOUT). The stream
    // first waits for a gate, so the record is queued before the bad descriptor runs (a fast
    // device would otherwise stop the stream before the record is submitted, and the record
    // itself would be refused, as checked below).
    let gate0 = ctx.create_event().unwrap();
    let mut opener0 = ctx.create_stream().unwrap();
    let mut a = ctx.create_stream().unwrap();
    let ev = ctx.create_event().unwrap();
    a.submit_desc(&TaskDesc::event_wait(0, gate0.handle(), 1))
        .unwrap();
    a.submit_desc(&poison_pill(1)).unwrap();
    ev.record(&mut a).unwrap();
    gate0.record(&mut opener0).unwrap();
    let e = ev.synchronize(long).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EIO), "{e}");
    assert!(
        e.message().contains("EACCES"),
        "names the stream's errno: {e}"
    );
    let e = ev.query().unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EIO), "{e}");
    // Recording on the stopped stream is refused with its error.
    let e = ev.record(&mut a).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EIO), "{e}");

    // A waiter already asleep when the stream stops wakes with the error; a stream waiting
    // on the event on the device fails (EIO) instead of hanging, and says so.
    let gate = ctx.create_event().unwrap();
    let ev2 = ctx.create_event().unwrap();
    let mut b = ctx.create_stream().unwrap();
    let mut c = ctx.create_stream().unwrap();
    let mut opener = ctx.create_stream().unwrap();
    // b waits for the gate's first record, which the test submits later.
    b.submit_desc(&TaskDesc::event_wait(0, gate.handle(), 1))
        .unwrap();
    b.submit_desc(&poison_pill(2)).unwrap();
    ev2.record(&mut b).unwrap();
    c.wait_event(&ev2).unwrap();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| ev2.synchronize(long));
        // Let the waiter go to sleep (no assertion depends on it having done so).
        std::thread::sleep(Duration::from_millis(50));
        gate.record(&mut opener).unwrap();
        let e = waiter.join().unwrap().unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EIO), "{e}");
        assert!(e.message().contains("EACCES"), "{e}");
    });
    let e = c.synchronize(long).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EIO), "{e}");
    assert_eq!(
        c.error_state().map(|s| s.errno()),
        Some(Some(Errno::EIO)),
        "the waiting stream is stopped"
    );
    let waits = poll_all(&mut c);
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0].opcode(), Some(Opcode::EventWait));
    assert_eq!(waits[0].errno(), Some(Errno::EIO));

    // A stream destroyed with a record queued: its waiters fail with ECANCELED as the cause.
    let gate2 = ctx.create_event().unwrap();
    let ev3 = ctx.create_event().unwrap();
    let mut d = ctx.create_stream().unwrap();
    d.submit_desc(&TaskDesc::event_wait(0, gate2.handle(), 1))
        .unwrap();
    ev3.record(&mut d).unwrap();
    drop(d);
    let e = ev3.synchronize(long).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EIO), "{e}");
    assert!(e.message().contains("ECANCELED"), "{e}");

    // The context is fine: a new stream records and waits normally.
    let mut fresh = ctx.create_stream().unwrap();
    let ok = ctx.create_event().unwrap();
    ok.record(&mut fresh).unwrap();
    ok.synchronize(long).unwrap();
}

/// GET_LAST_ERROR (ABI 1.2) through a real open of every backend: what polling answers
/// (EAGAIN from WAIT_EVENT with timeout 0, ETIMEDOUT from a wait whose timeout passed) does
/// not replace the record of the last real failure, nor count as one (issue 22: a client that
/// polled lost the message of the failure it was about to report).
#[test]
fn polling_does_not_replace_the_last_error() {
    let dev = dev();
    assert!(dev.features().contains(davinci_shim::Features::LAST_ERROR));
    let last = || {
        let mut arg = vec![0u8; LastError::SIZE];
        dev.raw_ioctl(DRIVER_CMD_GET_LAST_ERROR, &mut arg)
            .expect("GET_LAST_ERROR");
        LastError::decode(&arg)
    };
    let err = raw_handle(&dev, DRIVER_CMD_DESTROY_CONTEXT, 0x7fff_0001).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT), "{err}");
    let real = last();
    assert_eq!(
        (real.request, real.error),
        (DRIVER_CMD_DESTROY_CONTEXT, Errno::ENOENT.code() as u32),
        "{:?}",
        real.message_str()
    );

    let ctx = dev.create_context().unwrap();
    let s = ctx.create_stream().unwrap();
    let ev = ctx.create_event().unwrap();
    let wait = |kind: WaitKind, handle: u32, timeout_ns: u64| {
        let mut arg = vec![0u8; WaitEventArgs::SIZE];
        WaitEventArgs {
            kind: kind as u32,
            handle,
            value: 1,
            timeout_ns,
            ..Default::default()
        }
        .encode(&mut arg);
        dev.raw_ioctl(DRIVER_CMD_WAIT_EVENT, &mut arg)
            .unwrap_err()
            .errno()
    };
    assert_eq!(wait(WaitKind::Stream, s.handle(), 0), Some(Errno::EAGAIN));
    assert_eq!(wait(WaitKind::Event, ev.handle(), 0), Some(Errno::EAGAIN));
    assert_eq!(
        wait(WaitKind::Event, ev.handle(), 1_000_000),
        Some(Errno::ETIMEDOUT)
    );
    let after = last();
    assert_eq!(
        (after.request, after.error, after.count),
        (real.request, real.error, real.count),
        "polling replaced the last error: {:?}",
        after.message_str()
    );
    assert_eq!(after.message_str(), real.message_str());
}

#[test]
fn device_paths_and_errors_are_clear() {
    let dev = dev();
    let info = dev.info();
    assert_eq!(info.abi_major, davinci_uapi::ABI_VERSION_MAJOR);
    // Paths that name nothing fail with an errno and a message naming the path (whether or
    // not this build has the backend for them).
    for path in [
        "/dev/davinci-test-no-such-node",
        "mock:/nonexistent-dir/davinci-test.sock",
    ] {
        let e = Device::open(path).unwrap_err();
        assert!(e.errno().is_some(), "{e}");
        assert!(
            e.message().contains(path.trim_start_matches("mock:")),
            "{e}"
        );
    }
    let e = Device::open("davinci0").unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
    // Memory errors carry the errno, the operation and the driver's message.
    let e = dev.alloc(0).unwrap_err();
    assert_eq!((e.errno(), e.op()), (Some(Errno::EINVAL), "ALLOC_MEMORY"));
    let e = dev.alloc(1 << 40).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::ENOMEM), "{e}");
    assert!(
        e.to_string().starts_with("ALLOC_MEMORY failed: ENOMEM: "),
        "{e}"
    );
    let b = dev.alloc(100).unwrap();
    assert_eq!(b.len(), 100);
    assert_eq!(
        b.write(90, &[0; 11]).unwrap_err().errno(),
        Some(Errno::ERANGE)
    );
    assert_eq!(
        b.read(usize::MAX, &mut [0; 2]).unwrap_err().errno(),
        Some(Errno::ERANGE)
    );
    assert_eq!(b.addr(100).unwrap(), b.dev_addr() + 100);
    assert!(b.addr(101).is_err());
    // Ring depths are validated by the driver.
    let ctx = dev.create_context().unwrap();
    let e = ctx
        .create_stream_with(StreamOptions::depths(3, 8))
        .unwrap_err();
    assert_eq!((e.errno(), e.op()), (Some(Errno::EINVAL), "CREATE_STREAM"));
    let e = ctx
        .create_stream_with(StreamOptions::depths(16, 8))
        .unwrap_err();
    assert!(e.message().contains("event_entries"), "{e}");
}
