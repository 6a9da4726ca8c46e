//! davinci-mockd's own faults in the device event log (issue 46, ABI 1.5 READ_EVENTS), read
//! over the socket by a client and a control open: `--inject hang-at=N` logs INJECTED_FAULT
//! (detail 2) and HUNG_TASK at the hung task's command-ring index, `--inject error-at=N:EIO`
//! INJECTED_FAULT (detail 1, the errno) and STREAM_STOPPED with that errno and index,
//! `--inject stop-at=N` INJECTED_FAULT (detail 3); a reset (SIGUSR1, `--reset-after`) a
//! DEVICE_RESET of the device with the streams it stopped. Each daemon's devices are fresh:
//! their logs begin with DEVICE_STARTED. The conformance suite provokes the codes a client
//! can cause (conformance/device_events.rs); the embedded device's host faults are there too.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_shim::{Control, Device, DeviceEvent, Errno, EventBatch, Stream};
use davinci_tests::mockd::Mockd;
use davinci_uapi::{
    DEVICE_EVENT_DEVICE_RESET, DEVICE_EVENT_DEVICE_STARTED, DEVICE_EVENT_HUNG_TASK,
    DEVICE_EVENT_INJECTED_FAULT, DEVICE_EVENT_STREAM_STOPPED,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(300);

/// A batch as every read must give it: nothing lost (a fresh device), in `seq` order from 0,
/// the first event DEVICE_STARTED, none later than the device clock at the read.
fn checked(b: EventBatch) -> Vec<DeviceEvent> {
    assert_eq!(b.lost, 0, "{b:?}");
    assert!(
        b.events.iter().enumerate().all(|(i, e)| e.seq == i as u64),
        "{b:?}"
    );
    let first = b
        .events
        .first()
        .expect("the log begins with the device's start");
    assert_eq!(
        (first.code, first.client_id, first.stream, first.detail),
        (DEVICE_EVENT_DEVICE_STARTED, 0, 0, 0),
        "{b:?}"
    );
    assert!(b.events.iter().all(|e| e.time_ns <= b.now_ns), "{b:?}");
    b.events
}

/// The device's events as the client and as a control open of `path` read them (the same).
fn both(dev: &Device, path: &str) -> Vec<DeviceEvent> {
    let mine = checked(dev.read_events(0).expect("READ_EVENTS"));
    let ctl = Control::open(path).expect("control open");
    let all = checked(ctl.read_events(0).expect("READ_EVENTS"));
    assert_eq!(mine, all, "one user: the client sees what the admin sees");
    all
}

/// The one event of `code` on `stream`, of `dev`'s client (this process, this user).
fn one(evs: &[DeviceEvent], code: u32, stream: &Stream, dev: &Device) -> DeviceEvent {
    let hits: Vec<_> = evs
        .iter()
        .filter(|e| e.code == code && e.stream == stream.handle())
        .collect();
    assert_eq!(hits.len(), 1, "one event {code}: {evs:?}");
    let e = *hits[0];
    assert_eq!(
        (e.client_id, e.pid, e.uid),
        (
            dev.client_id().unwrap(),
            std::process::id(),
            nix::unistd::getuid().as_raw()
        ),
        "{e:?}"
    );
    e
}

/// A daemon armed with `fault` (`--inject`), its device 0 opened, a stream given three NOPs:
/// the daemon, the path, the client, the stream, the NOPs' command-ring indices and how the
/// stream's synchronize ended.
fn armed(fault: &str) -> (Mockd, String, Device, Stream, Vec<u32>, Errno) {
    let d = Mockd::start(&["--inject", fault]).expect("start davinci-mockd");
    let path = d.path(0);
    let dev = Device::open(&path).expect("open");
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    // One batch: the device may run the first tasks (and the fault) before a later submit.
    let first = s
        .submit_batch(&[1, 2, 3].map(|i| davinci_shim::task::nop().with_user_data(i)))
        .unwrap();
    let ids = (0..3).map(|k| first.offset(k).ring_index()).collect();
    let timeout = if fault.starts_with("error") {
        LONG
    } else {
        SHORT
    };
    let e = s.synchronize(timeout).expect_err("the fault fires");
    let errno = e.errno().expect("an errno");
    (d, path, dev, s, ids, errno)
}

#[test]
fn an_injected_hang_logs_injected_fault_and_hung_task() {
    let (_d, path, dev, s, ids, errno) = armed("hang-at=2");
    assert_eq!(errno, Errno::ETIMEDOUT);
    let evs = both(&dev, &path);
    let e = one(&evs, DEVICE_EVENT_INJECTED_FAULT, &s, &dev);
    assert_eq!((e.detail, e.value), (2, 0), "{e:?}");
    let h = one(&evs, DEVICE_EVENT_HUNG_TASK, &s, &dev);
    assert_eq!(
        (h.detail, h.value),
        (0, u64::from(ids[1])),
        "the second task hung: {h:?}"
    );
    assert!(e.seq < h.seq);
    assert!(
        !evs.iter().any(|e| e.code == DEVICE_EVENT_STREAM_STOPPED),
        "{evs:?}"
    );
}

#[test]
fn an_injected_error_logs_injected_fault_and_stream_stopped() {
    let (_d, path, dev, s, ids, errno) = armed("error-at=2:EIO");
    assert_eq!(errno, Errno::EIO);
    assert_eq!(s.error_state().map(|e| e.index()), Some(ids[1]));
    let evs = both(&dev, &path);
    let e = one(&evs, DEVICE_EVENT_INJECTED_FAULT, &s, &dev);
    assert_eq!((e.detail, e.value), (1, Errno::EIO.code() as u64), "{e:?}");
    let st = one(&evs, DEVICE_EVENT_STREAM_STOPPED, &s, &dev);
    // An injected error is a device fault: no fault kind, the failed task's index.
    assert_eq!(
        (st.detail, st.value),
        (Errno::EIO.code() as u32, u64::from(ids[1])),
        "{st:?}"
    );
    assert!(e.seq < st.seq);
}

#[test]
fn an_injected_stop_logs_injected_fault() {
    let (_d, path, dev, s, _ids, errno) = armed("stop-at=2");
    assert_eq!(errno, Errno::ETIMEDOUT);
    let evs = both(&dev, &path);
    let e = one(&evs, DEVICE_EVENT_INJECTED_FAULT, &s, &dev);
    assert_eq!((e.detail, e.value), (3, 0), "{e:?}");
    assert_eq!(evs.len(), 2, "the start and the fault: {evs:?}");
}

/// Polls `dev`'s log until an event of `code` is there (at most `LONG`).
fn wait_for(dev: &Device, code: u32) -> Vec<DeviceEvent> {
    let t0 = Instant::now();
    loop {
        let evs = dev.read_events(0).expect("READ_EVENTS").events;
        if evs.iter().any(|e| e.code == code) {
            return evs;
        }
        assert!(
            t0.elapsed() < LONG,
            "no event {code} after {LONG:?}: {evs:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGUSR1 resets every device: DEVICE_RESET, the device's own, with the streams it stopped
/// (this client's two running streams on device 0; none on device 1).
#[test]
fn a_reset_by_sigusr1_logs_device_reset_with_the_streams_stopped() {
    let d = Mockd::start(&["--devices", "2"]).expect("start davinci-mockd");
    let dev = Device::open(&d.path(0)).expect("open");
    let other = Device::open(&d.path(1)).expect("open device 1");
    let ctx = dev.create_context().unwrap();
    let mut streams = [ctx.create_stream().unwrap(), ctx.create_stream().unwrap()];
    for s in &mut streams {
        s.submit(&davinci_shim::task::nop().with_user_data(1))
            .unwrap();
        s.synchronize(LONG).unwrap();
    }
    kill(Pid::from_raw(d.pid() as i32), Signal::SIGUSR1).expect("SIGUSR1");
    wait_for(&dev, DEVICE_EVENT_DEVICE_RESET);
    let evs = both(&dev, &d.path(0));
    let reset: Vec<_> = evs
        .iter()
        .filter(|e| e.code == DEVICE_EVENT_DEVICE_RESET)
        .collect();
    assert_eq!(reset.len(), 1, "{evs:?}");
    let r = reset[0];
    assert_eq!((r.client_id, r.pid, r.uid, r.stream), (0, 0, 0, 0), "{r:?}");
    assert_eq!((r.detail, r.value), (2, 0), "two streams stopped: {r:?}");
    for s in &streams {
        let e = s.error_state().expect("stopped by the reset");
        assert_eq!(e.errno(), Some(Errno::ECANCELED), "{e}");
    }
    // The other device was reset too, with nothing running.
    let evs = both(&other, &d.path(1));
    let r = evs
        .iter()
        .find(|e| e.code == DEVICE_EVENT_DEVICE_RESET)
        .expect("device 1's reset");
    assert_eq!((r.client_id, r.detail), (0, 0), "{r:?}");
}

/// `--reset-after` resets the devices once, that long after start-up: the log shows the
/// reset after the start, with the streams it stopped.
#[test]
fn reset_after_logs_one_device_reset() {
    let d = Mockd::start(&["--reset-after", "500ms"]).expect("start davinci-mockd");
    let dev = Device::open(&d.path(0)).expect("open");
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    s.submit(&davinci_shim::task::nop().with_user_data(1))
        .unwrap();
    s.synchronize(LONG).unwrap();
    let evs = wait_for(&dev, DEVICE_EVENT_DEVICE_RESET);
    let r = evs
        .iter()
        .find(|e| e.code == DEVICE_EVENT_DEVICE_RESET)
        .unwrap();
    assert_eq!((r.client_id, r.stream), (0, 0), "{r:?}");
    // The stream existed when the reset came (if it came after it was made) and was stopped.
    let stopped = s.error_state().map(|e| e.errno());
    match r.detail {
        1 => assert_eq!(stopped, Some(Some(Errno::ECANCELED))),
        0 => assert_eq!(stopped, None, "the reset came before the stream: {r:?}"),
        n => panic!("{n} streams stopped, this client had one: {r:?}"),
    }
    std::thread::sleep(Duration::from_millis(700));
    let evs = both(&dev, &d.path(0));
    assert_eq!(
        evs.iter()
            .filter(|e| e.code == DEVICE_EVENT_DEVICE_RESET)
            .count(),
        1,
        "once: {evs:?}"
    );
}
