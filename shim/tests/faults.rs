//! Injected device faults as a runtime sees them through the shim (docs/abi.md 5.6), on the
//! embedded mock device: an error completion, a hung task, a stream that stops consuming, a
//! device reset, and recovery by re-creating the stream. Needs the embedded mock (the
//! default `embedded` feature).
#![cfg(feature = "embedded")]
#![forbid(unsafe_code)]

use std::time::Duration;

use davinci_shim::{task, Device, DeviceMem, Errno, Inject, MockConfig, StreamOptions};

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(20);

fn device(inject: Option<Inject>) -> Device {
    Device::embedded_with(MockConfig {
        inject: inject.map(Into::into),
        ..MockConfig::default()
    })
    .expect("embedded device")
}

#[test]
fn an_injected_error_fails_synchronize_naming_the_task_and_a_new_stream_recovers() {
    let dev = device(Some(Inject::ErrorAt {
        nth: 3,
        errno: Errno::EIO,
    }));
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    for i in 1..=5 {
        // The stream may already be stopped when the later ones are submitted.
        let _ = s.submit(&task::nop().with_user_data(i));
    }
    let e = s.synchronize(LONG).unwrap_err();
    assert!(e.is(Errno::EIO), "{e}");
    assert!(
        e.message().contains("user_data=0x3") && e.message().contains("EIO"),
        "the error names the failed task: {e}"
    );
    let mut done = Vec::new();
    s.poll(&mut done);
    assert_eq!(
        done.iter()
            .map(|c| (c.user_data, c.status))
            .collect::<Vec<_>>(),
        [(1, 0), (2, 0), (3, -Errno::EIO.code())]
    );
    assert!(s
        .submit(&task::nop().with_user_data(6))
        .unwrap_err()
        .is(Errno::EIO));

    // Recovery: a new stream (armed like every stream: its third task fails too, so
    // disarm the device first, as a test of recovery would).
    dev.mock_device().unwrap().inject(None, None).unwrap();
    drop(s);
    let mut again = ctx.create_stream().unwrap();
    let buf = dev.alloc(4096).unwrap();
    for _ in 0..4 {
        again.submit(&task::fill(&buf, 7).unwrap()).unwrap();
    }
    again.synchronize(LONG).unwrap();
    assert_eq!(buf.read_vec::<u32>(0, 1024).unwrap(), vec![7u32; 1024]);
}

#[test]
fn a_hung_task_and_a_stopped_stream_time_out_and_leave_other_streams_running() {
    let dev = device(None);
    let mock = dev.mock_device().unwrap().clone();
    let ctx = dev.create_context().unwrap();
    let mut hung = ctx.create_stream().unwrap();
    let mut ok = ctx.create_stream().unwrap();
    mock.inject(Some(hung.handle()), Some(Inject::HangAt { nth: 2 }))
        .unwrap();
    for i in 1..=3 {
        hung.submit(&task::nop().with_user_data(i)).unwrap();
    }
    let e = hung.synchronize(SHORT).unwrap_err();
    assert!(e.is(Errno::ETIMEDOUT), "{e}");
    let mut done = Vec::new();
    hung.poll(&mut done);
    assert_eq!(done.iter().map(|c| c.user_data).collect::<Vec<_>>(), [1]);
    for i in 0..100 {
        ok.submit(&task::nop().with_user_data(i)).unwrap();
    }
    ok.synchronize(LONG).unwrap();

    // A stream that stops consuming: once its ring is full, a submit with a timeout fails
    // with a clear error instead of blocking forever.
    let mut stop = ctx
        .create_stream_with(StreamOptions::depths(8, 8).submit_timeout(SHORT))
        .unwrap();
    mock.inject(Some(stop.handle()), Some(Inject::StopAt { nth: 1 }))
        .unwrap();
    let mut refused = None;
    for i in 0..9 {
        if let Err(e) = stop.submit(&task::nop().with_user_data(i)) {
            refused = Some((i, e));
            break;
        }
    }
    let (i, e) = refused.expect("the ninth submit finds the ring full");
    assert_eq!(i, 8, "eight slots fill, nothing is taken");
    assert!(e.is(Errno::ETIMEDOUT) || e.is(Errno::EAGAIN), "{e}");
}

#[test]
fn a_device_reset_stops_every_stream_with_a_clear_error_and_new_streams_run() {
    let dev = device(None);
    let ctx = dev.create_context().unwrap();
    let mut a = ctx.create_stream().unwrap();
    let mut b = ctx.create_stream().unwrap();
    a.submit(&task::nop().with_user_data(1)).unwrap();
    a.synchronize(LONG).unwrap();
    assert_eq!(dev.mock_device().unwrap().reset(), 2);
    let e = a.submit(&task::nop().with_user_data(2)).unwrap_err();
    assert!(e.is(Errno::EIO), "{e}");
    assert!(e.message().contains("device was reset"), "{e}");
    let e = b.synchronize(SHORT).unwrap_err();
    assert!(e.is(Errno::EIO), "{e}");
    assert_eq!(
        b.error_state().and_then(|st| st.errno()),
        Some(Errno::ECANCELED)
    );
    // Completions taken before the reset are not lost; memory and the context stay.
    let mut c = ctx.create_stream().unwrap();
    c.submit(&task::nop().with_user_data(3)).unwrap();
    c.synchronize(LONG).unwrap();
}
