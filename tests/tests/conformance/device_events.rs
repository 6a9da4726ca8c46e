//! The device's event log (issue 46, ABI 1.5 READ_EVENTS), on every backend: each coded
//! event a client can cause is provoked here and read back, from the client and from an
//! admin's control open, with the fields docs/abi.md's "Device events" table gives it
//! (`stream_stopped`, `import_revoked` for memory and for an event, `quota_storm`,
//! `device_started`), and on the embedded device the host's own (an injected `hang-at`,
//! `error-at` and `stop-at`, a reset: `injected_fault`, `hung_task`, `device_reset`), which
//! `mockd_events.rs` (davinci-mockd's `--inject` and SIGUSR1) and `kernel/events.rs` (the
//! module's `inject` parameter) provoke on the other backends. Who sees what: another user
//! (embedded) sees the device's events and its own clients', not this user's.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_shim::{
    Completion, Control, Device, DeviceEvent, DeviceMem, Errno, EventBatch, ExportTo, Features,
    Inject, Stream, TaskDesc,
};
use davinci_tests::descs::SubmitDescs;
use davinci_tests::{backend_name, control_of, other_tenant};
use davinci_uapi::{
    DEVICE_EVENT_DEVICE_RESET, DEVICE_EVENT_DEVICE_STARTED, DEVICE_EVENT_HUNG_TASK,
    DEVICE_EVENT_IMPORT_REVOKED, DEVICE_EVENT_INJECTED_FAULT, DEVICE_EVENT_QUOTA_STORM,
    DEVICE_EVENT_STREAM_STOPPED, QUOTA_KIND_CONTEXTS, QUOTA_STORM_REFUSALS,
};

use super::isolation::shared_pair;
use super::{dev, poll_all, T};

/// The cursor of the next event: where a test's own events begin.
fn cursor_now(ctl: &Control) -> u64 {
    ctl.read_events(0).expect("READ_EVENTS").cursor
}

/// The events from `cursor` as `read` sees them, checked as every batch must be: in `seq`
/// order, none lost (a test provokes a few), none later than the device clock at the read.
fn since(read: impl Fn(u64) -> davinci_shim::Result<EventBatch>, cursor: u64) -> Vec<DeviceEvent> {
    let b = read(cursor).expect("READ_EVENTS");
    assert_eq!(b.lost, 0, "a test's few events are all held: {b:?}");
    assert!(b.events.windows(2).all(|w| w[0].seq < w[1].seq), "{b:?}");
    assert!(
        b.events.iter().all(|e| e.seq >= cursor && e.seq < b.cursor),
        "{b:?}"
    );
    assert!(b.events.iter().all(|e| e.time_ns <= b.now_ns), "{b:?}");
    b.events
}

/// The one event of `code` on `stream` among `evs`.
fn one(evs: &[DeviceEvent], code: u32, stream: u32) -> DeviceEvent {
    let hits: Vec<_> = evs
        .iter()
        .filter(|e| e.code == code && e.stream == stream)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "one event {code} on stream {stream:#x}: {evs:?}"
    );
    *hits[0]
}

/// The event is `dev`'s: its client id, this process, this user.
fn assert_of(e: &DeviceEvent, dev: &Device) {
    assert_eq!(
        (e.client_id, e.pid, e.uid),
        (
            dev.client_id().expect("ABI 1.1 client ids"),
            std::process::id(),
            nix::unistd::getuid().as_raw()
        ),
        "{e:?}"
    );
}

/// The event is the device's own: no client.
fn assert_device(e: &DeviceEvent) {
    assert_eq!((e.client_id, e.pid, e.uid, e.stream), (0, 0, 0, 0), "{e:?}");
}

/// Waits until `s` is stopped; its failed completion (polled), and the stream's error.
fn failure(s: &mut Stream) -> (Completion, davinci_shim::StreamError) {
    let _ = s.synchronize(T);
    let until = Instant::now() + T;
    let err = loop {
        if let Some(e) = s.error_state() {
            break e;
        }
        assert!(Instant::now() < until, "the stream never stopped");
        std::thread::sleep(Duration::from_millis(1));
    };
    let failed = poll_all(s)
        .into_iter()
        .find(|c| !c.is_ok())
        .expect("the failed task's completion");
    (failed, err)
}

/// The first event of a device that came up is DEVICE_STARTED, seq 0, the device's own. On
/// the kernel module's long-lived devices the log may have moved past it (256 events since
/// the module was loaded): said, and the rest checked.
#[test]
fn the_log_of_a_device_begins_with_device_started() {
    let dev = dev();
    let ctl = control_of(&dev).expect("control open");
    assert!(ctl
        .info()
        .unwrap()
        .features
        .contains(Features::DEVICE_EVENTS));
    let b = ctl.read_events(0).expect("READ_EVENTS");
    if b.lost > 0 && backend_name().starts_with("/dev/") {
        eprintln!(
            "{}: the log holds events from seq {} on ({} since the module was loaded): \
             DEVICE_STARTED is checked on a fresh device (embedded, mockd; kernel/events.rs \
             reads davinci1's)",
            backend_name(),
            b.lost,
            b.cursor
        );
        return;
    }
    assert_eq!(b.lost, 0, "{b:?}");
    let first = b.events.first().expect("the log has its first event");
    assert_eq!(
        (first.seq, first.code),
        (0, DEVICE_EVENT_DEVICE_STARTED),
        "{b:?}"
    );
    assert_device(first);
    assert_eq!((first.detail, first.value), (0, 0));
    assert!(first.time_ns <= b.now_ns);
    // The client sees the device's own events too.
    let mine = dev.read_events(0).unwrap();
    assert_eq!(mine.events.first().map(|e| (e.seq, e.code)), Some((0, 4)));
}

/// A faulting COPY stops its stream: STREAM_STOPPED names the stream, the errno, the failed
/// descriptor's command-ring index and its fault kind; the client and the control open read
/// the same event.
#[test]
fn a_faulting_task_logs_stream_stopped_with_its_index_and_fault() {
    let dev = dev();
    let ctl = control_of(&dev).expect("control open");
    let from = cursor_now(&ctl);
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    let small = dev.alloc(4096).unwrap();
    let big = dev.alloc(8192).unwrap();
    s.submit_descs(&[
        TaskDesc::nop(1),
        TaskDesc::copy(2, small.dev_addr(), big.dev_addr(), 8192),
        TaskDesc::nop(3),
    ])
    .unwrap();
    let (failed, err) = failure(&mut s);
    assert_eq!(failed.user_data, 2);
    let kind = failed.fault().expect("a COPY past its end says why").kind as u64;
    assert_ne!(kind, 0);
    for (who, evs) in [
        ("client", since(|c| dev.read_events(c), from)),
        ("control", since(|c| ctl.read_events(c), from)),
    ] {
        let e = one(&evs, DEVICE_EVENT_STREAM_STOPPED, s.handle());
        assert_of(&e, &dev);
        assert_eq!(
            (e.detail, e.value),
            (
                failed.errno().unwrap().code() as u32,
                (kind << 32) | u64::from(err.index())
            ),
            "{who}: {e:?}"
        );
        assert_eq!(err.index(), err.task().ring_index());
    }
}

/// An import revoked by its exporter's free (memory) or destroy (event) is an IMPORT_REVOKED
/// of the importer: detail 1 or 2, the import's handle.
#[test]
fn revoked_imports_log_an_event_for_the_importer() {
    let (shared, a, b) = shared_pair();
    let from = cursor_now(&shared.ctl);
    let theirs = a.alloc(8192).unwrap();
    let mine = b
        .import(theirs.export(ExportTo::SameUser).unwrap())
        .unwrap();
    let (actx, bctx) = (a.create_context().unwrap(), b.create_context().unwrap());
    let ready = actx.create_event().unwrap();
    let imp = bctx
        .import_event(ready.export(ExportTo::SameUser).unwrap())
        .unwrap();
    drop(theirs);
    drop(ready);
    for evs in [
        since(|c| shared.ctl.read_events(c), from),
        since(|c| b.read_events(c), from),
    ] {
        let revoked: Vec<_> = evs
            .iter()
            .filter(|e| e.code == DEVICE_EVENT_IMPORT_REVOKED)
            .collect();
        assert_eq!(revoked.len(), 2, "{evs:?}");
        for (e, detail, handle) in [
            (revoked[0], 1, mine.handle()),
            (revoked[1], 2, imp.handle()),
        ] {
            assert_of(e, &b);
            assert_eq!(
                (e.stream, e.detail, e.value),
                (0, detail, u64::from(handle))
            );
        }
    }
    drop((mine, imp));
}

/// Sixteen quota refusals of one client within a second are a QUOTA_STORM (one a second): the
/// kind of the last refusal and the refusals counted.
#[test]
fn a_storm_of_quota_refusals_logs_quota_storm() {
    let (shared, a, _b) = shared_pair();
    let from = cursor_now(&shared.ctl);
    let info = shared.ctl.info().unwrap();
    assert!(info.quota_contexts < info.max_contexts, "{info:?}");
    // Up to the tenant's quota, then past it.
    let mut held = Vec::new();
    while let Ok(c) = a.create_context() {
        held.push(c);
        assert!(
            held.len() <= info.max_contexts as usize,
            "no quota refused {held:?}"
        );
    }
    let t0 = Instant::now();
    for _ in 0..2 * QUOTA_STORM_REFUSALS {
        let e = a.create_context().expect_err("one past the quota");
        assert_eq!(e.errno(), Some(Errno::ENOSPC), "{e}");
    }
    let took = t0.elapsed();
    let evs = since(|c| a.read_events(c), from);
    let storms: Vec<_> = evs
        .iter()
        .filter(|e| e.code == DEVICE_EVENT_QUOTA_STORM)
        .collect();
    // Within one window: one. Refusals spread over more (a slow guest): at most one a second.
    assert!(
        !storms.is_empty() && storms.len() as u64 <= took.as_secs() + 1,
        "{} refusals in {took:?}: {evs:?}",
        2 * QUOTA_STORM_REFUSALS
    );
    for e in storms {
        assert_of(e, &a);
        assert_eq!((e.stream, e.detail), (0, QUOTA_KIND_CONTEXTS), "{e:?}");
        assert!(e.value >= u64::from(QUOTA_STORM_REFUSALS), "{e:?}");
    }
}

/// The host's faults on the embedded device (`MockDevice::inject`, its reset): `hang-at` is an
/// INJECTED_FAULT (detail 2) and a HUNG_TASK at the hung task's index; `error-at` an
/// INJECTED_FAULT (detail 1, the errno) and a STREAM_STOPPED with that errno and index;
/// `stop-at` an INJECTED_FAULT (detail 3); a reset a DEVICE_RESET of the device with the
/// streams it stopped. davinci-mockd and the kernel module: `mockd_events.rs`,
/// `kernel/events.rs`.
#[test]
fn injected_faults_and_a_reset_log_their_events() {
    let dev = dev();
    let Some(mock) = dev.mock_device().cloned() else {
        eprintln!(
            "{}: the host's faults come from davinci-mockd's options (mockd_events.rs) and the \
             module's inject parameter (kernel/events.rs)",
            backend_name()
        );
        return;
    };
    let ctl = control_of(&dev).expect("control open");
    let from = cursor_now(&ctl);
    let ctx = dev.create_context().unwrap();
    // One batch: the device may run the first tasks (and the fault) before a later submit.
    let nops = |s: &mut Stream, n: u64| -> Vec<u32> {
        let descs: Vec<TaskDesc> = (1..=n).map(TaskDesc::nop).collect();
        let first = s.submit_descs(&descs).unwrap();
        (0..n).map(|k| first.offset(k).ring_index()).collect()
    };
    let short = Duration::from_millis(200);
    let mut hang = ctx.create_stream().unwrap();
    mock.inject(Some(hang.handle()), Some(Inject::HangAt { nth: 2 }))
        .unwrap();
    let hung = nops(&mut hang, 3)[1];
    assert!(hang.synchronize(short).unwrap_err().is(Errno::ETIMEDOUT));
    let mut error = ctx.create_stream().unwrap();
    error
        .inject_fault(Some(Inject::ErrorAt {
            nth: 2,
            errno: Errno::EIO,
        }))
        .unwrap();
    let failed = nops(&mut error, 3)[1];
    assert!(error.synchronize(T).unwrap_err().is(Errno::EIO));
    let mut stop = ctx.create_stream().unwrap();
    stop.inject_fault(Some(Inject::StopAt { nth: 2 })).unwrap();
    nops(&mut stop, 3);
    assert!(stop.synchronize(short).unwrap_err().is(Errno::ETIMEDOUT));
    let stopped = mock.reset();
    assert!(
        stopped >= 2,
        "the hung and the stopped streams were running: {stopped}"
    );

    for evs in [
        since(|c| dev.read_events(c), from),
        since(|c| ctl.read_events(c), from),
    ] {
        let e = one(&evs, DEVICE_EVENT_INJECTED_FAULT, hang.handle());
        assert_of(&e, &dev);
        assert_eq!((e.detail, e.value), (2, 0), "{e:?}");
        let e = one(&evs, DEVICE_EVENT_HUNG_TASK, hang.handle());
        assert_of(&e, &dev);
        assert_eq!((e.detail, e.value), (0, u64::from(hung)), "{e:?}");
        let e = one(&evs, DEVICE_EVENT_INJECTED_FAULT, error.handle());
        assert_eq!((e.detail, e.value), (1, Errno::EIO.code() as u64), "{e:?}");
        let e = one(&evs, DEVICE_EVENT_STREAM_STOPPED, error.handle());
        assert_of(&e, &dev);
        assert_eq!(
            (e.detail, e.value),
            (Errno::EIO.code() as u32, u64::from(failed))
        );
        let e = one(&evs, DEVICE_EVENT_INJECTED_FAULT, stop.handle());
        assert_eq!((e.detail, e.value), (3, 0), "{e:?}");
        let e = one(&evs, DEVICE_EVENT_DEVICE_RESET, 0);
        assert_device(&e);
        assert_eq!((e.detail, e.value), (stopped, 0), "{e:?}");
        // The reset came last.
        assert_eq!(evs.last().map(|e| e.code), Some(DEVICE_EVENT_DEVICE_RESET));
    }
}

/// Another user (a client of uid 4242 on the embedded device, not an admin) sees the device's
/// own events and its own clients', not this user's; an admin sees all. Elsewhere another
/// user takes another process: the noisy-neighbour suite's clients.
#[test]
fn another_user_sees_the_devices_events_and_its_own_only() {
    let (shared, a, _b) = shared_pair();
    let Some(other) = other_tenant(&a, 4242) else {
        return;
    };
    let mock = a.mock_device().cloned().expect("embedded");
    let from = cursor_now(&shared.ctl);
    let stop = |dev: &Device| {
        let mut s = dev.create_context().unwrap().create_stream().unwrap();
        s.submit_desc(&super::poison_pill(9)).unwrap();
        failure(&mut s);
        s
    };
    let (mine, theirs) = (stop(&a), stop(&other));
    mock.reset();
    let all = since(|c| shared.ctl.read_events(c), from);
    let seen = since(|c| other.read_events(c), from);
    let a_event = one(&all, DEVICE_EVENT_STREAM_STOPPED, mine.handle());
    let other_event = one(&all, DEVICE_EVENT_STREAM_STOPPED, theirs.handle());
    assert_eq!(other_event.uid, 4242);
    let reset = one(&all, DEVICE_EVENT_DEVICE_RESET, 0);
    let seqs = |v: &[DeviceEvent]| v.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(&seen),
        [other_event.seq, reset.seq],
        "its own and the device's, not {a_event:?}: {seen:?}"
    );
    // The first user (an admin here) sees the other's too.
    assert_eq!(seqs(&since(|c| a.read_events(c), from)), seqs(&all));
}
