//! driver-core against its checking fake platform: ioctl dispatch: requests with a wrong number, size, direction or caller are refused
//! with the right errno, the tables are bounded, and GET_LAST_ERROR says why a command failed.

mod support;

use davinci_driver_core::{DeviceCore, NoUserMem, Role};
use davinci_uapi::*;
use support::*;

#[test]
fn dispatch_rejects_bad_requests() {
    let mut dev = device();
    let c = dev.open(params(100, 1000, Role::Client)).unwrap();
    // Unknown command number and a known number with the wrong size.
    let mut b = [0u8; 16];
    assert_eq!(
        dev.ioctl(
            c,
            ioctl::iowr::<[u8; 16]>(b'd', 0x7f),
            &mut b,
            &mut NoUserMem
        )
        .unwrap_err()
        .errno,
        Errno::ENOTTY
    );
    assert_eq!(
        dev.ioctl(
            c,
            ioctl::iowr::<[u8; 24]>(b'd', 0x01),
            &mut [0u8; 24],
            &mut NoUserMem
        )
        .unwrap_err()
        .errno,
        Errno::ENOTTY
    );
    assert_eq!(
        dev.ioctl(c, DRIVER_CMD_CREATE_CONTEXT, &mut [0u8; 8], &mut NoUserMem)
            .unwrap_err()
            .errno,
        Errno::ENOTTY,
        "arg slice shorter than the command's size"
    );
    // Reserved fields.
    let mut a = CreateContextArgs {
        flags: 1,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut a),
        Err(Errno::EINVAL)
    );
    let k = ctx(&mut dev, c);
    let mut s = CreateStreamArgs {
        ctx: k,
        cmd_entries: 48,
        event_entries: 64,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_CREATE_STREAM, &mut s),
        Err(Errno::EINVAL)
    );
    s.cmd_entries = 128;
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_CREATE_STREAM, &mut s),
        Err(Errno::EINVAL),
        "event ring smaller than command ring"
    );
    s.cmd_entries = 64;
    s.reserved[1] = 1;
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_CREATE_STREAM, &mut s),
        Err(Errno::EINVAL)
    );
    // Unknown handles.
    let mut h = HandleArgs {
        handle: 0x0001_0005,
        pad: 0,
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_FREE_MEMORY, &mut h),
        Err(Errno::ENOENT)
    );
    let mut w = WaitEventArgs {
        kind: 3,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_WAIT_EVENT, &mut w),
        Err(Errno::EINVAL)
    );
    let mut al = AllocMemoryArgs::default();
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut al),
        Err(Errno::EINVAL)
    );
    al.size = 64 << 20;
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut al),
        Err(Errno::ENOMEM),
        "over the per-client limit"
    );
}

#[test]
fn tables_are_bounded() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let mut n = 0;
    loop {
        let mut a = CreateContextArgs::default();
        match call(&mut dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut a) {
            Ok(_) => n += 1,
            Err(e) => {
                assert_eq!(e, Errno::ENOSPC);
                break;
            }
        }
    }
    assert_eq!(n, davinci_driver_core::MAX_CONTEXTS);
}

fn last_error(dev: &mut DeviceCore<HeapPlatform>, c: u32) -> LastError {
    let mut a = LastError::default();
    call(dev, c, DRIVER_CMD_GET_LAST_ERROR, &mut a).unwrap();
    a
}

#[test]
fn get_last_error_says_why_the_last_command_of_this_open_failed() {
    let mut dev = device();
    let a = dev.open(params(100, 1000, Role::Client)).unwrap();
    let ctl = dev.open(params(300, 0, Role::Control)).unwrap();
    // Nothing failed yet.
    let e = last_error(&mut dev, a);
    assert_eq!(
        (e.request, e.error, e.count, e.message_str()),
        (0, 0, 0, "")
    );
    assert!(dev.info_for(a).features.contains(Features::LAST_ERROR));

    let ctx = ctx(&mut dev, a);
    let mut bad = CreateStreamArgs {
        ctx,
        cmd_entries: 16,
        event_entries: 8,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_CREATE_STREAM, &mut bad),
        Err(Errno::EINVAL)
    );
    let e = last_error(&mut dev, a);
    assert_eq!(
        (e.request, e.error, e.count),
        (DRIVER_CMD_CREATE_STREAM, Errno::EINVAL.code() as u32, 1)
    );
    assert!(
        e.message_str().contains("event_entries"),
        "{:?}",
        e.message_str()
    );
    // Reading it changes nothing; a success does not clear it; the next failure replaces it.
    assert_eq!(last_error(&mut dev, a), e);
    let mut h = HandleArgs {
        handle: 0xdead,
        pad: 0,
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_DESTROY_CONTEXT, &mut h),
        Err(Errno::ENOENT)
    );
    let e2 = last_error(&mut dev, a);
    assert_eq!(
        (e2.request, e2.error, e2.count),
        (DRIVER_CMD_DESTROY_CONTEXT, Errno::ENOENT.code() as u32, 2)
    );
    assert!(
        e2.message_str().contains("context"),
        "{:?}",
        e2.message_str()
    );
    // Per open: the control open saw nothing, and its own failure is its own.
    assert_eq!(last_error(&mut dev, ctl).count, 0);
    let mut c = CreateContextArgs::default();
    assert_eq!(
        call(&mut dev, ctl, DRIVER_CMD_CREATE_CONTEXT, &mut c),
        Err(Errno::EPERM)
    );
    assert_eq!(last_error(&mut dev, ctl).request, DRIVER_CMD_CREATE_CONTEXT);
    assert_eq!(last_error(&mut dev, a).count, 2);
}

/// Polling is not failing: EAGAIN (WAIT_EVENT with timeout 0, a full command ring on
/// SUBMIT_TASK) and ETIMEDOUT (a wait's timeout) leave the last real failure's record and
/// count alone (docs/abi.md, GET_LAST_ERROR; issue 22). Under 1.2 and 1.3 each poll replaced
/// it.
#[test]
fn polling_outcomes_do_not_replace_the_last_error() {
    let mut dev = device();
    let a = dev.open(params(100, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, a);
    let mut h = HandleArgs {
        handle: 0xdead,
        pad: 0,
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_DESTROY_CONTEXT, &mut h),
        Err(Errno::ENOENT)
    );
    let real = last_error(&mut dev, a);
    assert_eq!(
        (real.request, real.error, real.count),
        (DRIVER_CMD_DESTROY_CONTEXT, Errno::ENOENT.code() as u32, 1)
    );

    // WAIT_EVENT(STREAM) with timeout 0, not reached: EAGAIN.
    let s = stream(&mut dev, a, k, 2, 2);
    let mut w = WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: s.handle,
        value: 1,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_WAIT_EVENT, &mut w),
        Err(Errno::EAGAIN)
    );
    // The same with a timeout that passes: ETIMEDOUT.
    assert_eq!(
        wait_stream_timed_out(&mut dev, a, s.handle, 1).0,
        Err(Errno::ETIMEDOUT)
    );
    // WAIT_EVENT(EVENT) with timeout 0: EAGAIN too.
    let ev = event(&mut dev, a, k);
    assert_eq!(wait_event_now(&mut dev, a, ev, 1).0, Err(Errno::EAGAIN));
    // SUBMIT_TASK on a full command ring (the device never ran): EAGAIN.
    for i in 0..2 {
        let mut t = SubmitTaskArgs {
            stream: s.handle,
            desc: TaskDesc::nop(i),
            ..Default::default()
        };
        call(&mut dev, a, DRIVER_CMD_SUBMIT_TASK, &mut t).unwrap();
    }
    let mut t = SubmitTaskArgs {
        stream: s.handle,
        desc: TaskDesc::nop(2),
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_SUBMIT_TASK, &mut t),
        Err(Errno::EAGAIN)
    );
    assert_eq!(last_error(&mut dev, a), real, "polling replaced the record");

    // The next real failure still replaces it, and counts.
    w.pad = 1;
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_WAIT_EVENT, &mut w),
        Err(Errno::EINVAL)
    );
    let e = last_error(&mut dev, a);
    assert_eq!(
        (e.request, e.error, e.count),
        (DRIVER_CMD_WAIT_EVENT, Errno::EINVAL.code() as u32, 2)
    );
}

#[test]
fn last_error_messages_are_cut_at_a_character_boundary() {
    let long = "é".repeat(100); // 200 bytes of two-byte characters
    let f = LastError::message_field(&long);
    assert_eq!(f[LAST_ERROR_MESSAGE_LEN - 1], 0, "the NUL always fits");
    let e = LastError {
        message: f,
        ..Default::default()
    };
    assert_eq!(e.message_str(), "é".repeat(55));
}
