//! `davinci-mockd`'s blocking WAIT_EVENTs, in-process, through raw frames: served by one
//! thread per device whatever the number of waits, never on a connection's reader (so a
//! client that dies with waits in flight is released at once, and its reader still answers
//! other requests while they wait), at most `MAX_WAITS_PER_CONN` in flight per open (more
//! get `EBUSY`), and CLOSE answers them before its own reply. The tests run one at a
//! time: one counts the process's threads.
#![forbid(unsafe_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use davinci_mockd::daemon::{Daemon, DaemonConfig, MAX_WAITS_PER_CONN};
use davinci_mockd::peer::AdminPolicy;
use davinci_mockd_proto::{Kind, WireRole};
use davinci_uapi::{
    DeviceInfo, Errno, ShareMode, WaitEventArgs, WaitKind, Wire, DRIVER_CMD_GET_INFO,
    DRIVER_CMD_WAIT_EVENT,
};

mod support;

use support::{ioctl, new_stream, Raw};

/// A client open on `path`; a reply that never comes fails the test instead of hanging it.
fn client(path: &Path) -> Raw {
    let (raw, r) = Raw::open(path, WireRole::Client);
    assert_eq!(r.errno, 0, "{}", r.msg);
    raw.c
        .set_recv_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    raw
}

/// The argument of a WAIT_EVENT on `stream` for a value nothing will reach, for up to
/// `timeout`.
fn wait_arg(stream: u32, timeout: Duration) -> Vec<u8> {
    let mut arg = vec![0; WaitEventArgs::SIZE];
    WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: stream,
        value: 1,
        timeout_ns: timeout.as_nanos() as u64,
        ..Default::default()
    }
    .encode(&mut arg);
    arg
}

/// Sends a WAIT_EVENT on `stream` for a value nothing will reach, for up to `timeout`; its tag.
fn send_wait_for(raw: &mut Raw, stream: u32, timeout: Duration) -> u32 {
    raw.send(
        Kind::Ioctl,
        DRIVER_CMD_WAIT_EVENT,
        wait_arg(stream, timeout),
    )
}

/// [`send_wait_for`] 60 s.
fn send_wait(raw: &mut Raw, stream: u32) -> u32 {
    send_wait_for(raw, stream, Duration::from_secs(60))
}

fn start(tag: &str) -> Daemon {
    let dir = std::env::temp_dir().join(format!("davinci-w-{}-{tag}", std::process::id()));
    Daemon::start(&DaemonConfig {
        devices: 1,
        memory: 16 << 20,
        socket_dir: dir.into(),
        admin: AdminPolicy::default(),
        share_mode: ShareMode::Shared,
        // One tenant (this process's user) may take the device's every wait: these tests
        // are of the device's bounds; tenants' shares are `tenants.rs`'.
        tenant_slots: 1,
        ..DaemonConfig::default()
    })
    .unwrap()
}

/// The tests count the process's threads: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Polls `cond` for up to 5 s.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(5), "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn waits_take_one_thread_and_a_dead_client_with_waits_in_flight_is_released() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = start("ghosts");
    let sock = d.sockets()[0].clone();
    let dev = d.devices()[0].clone();
    let before = threads();

    // Twenty clients, each with a stream and more blocking waits than it may have.
    let mut clients = Vec::new();
    for _ in 0..20 {
        let mut c = client(&sock);
        let s = new_stream(&mut c);
        let tags: Vec<u32> = (0..MAX_WAITS_PER_CONN + 3)
            .map(|_| send_wait(&mut c, s))
            .collect();
        // The three past the limit are refused at once, saying why, with their argument
        // (as every IOCTL reply); the others wait.
        for &t in &tags[MAX_WAITS_PER_CONN..] {
            let (r, _) = c.recv();
            assert_eq!((r.tag, r.errno), (t, Errno::EBUSY.code()), "{}", r.msg);
            assert!(r.msg.contains("in flight on this open"), "{}", r.msg);
            assert_eq!(r.arg, wait_arg(s, Duration::from_secs(60)));
        }
        // The reader is not held by the waits: other requests are answered.
        let (e, info) = ioctl(&mut c, DRIVER_CMD_GET_INFO, &DeviceInfo::default());
        assert_eq!(e, 0);
        assert!(info.clients >= 1);
        clients.push(c);
    }
    assert_eq!(dev.clients().len(), 20);
    // 640 waits: a reader per connection, pollers, and one wait thread; not a thread a wait.
    // Saturating: another test of this binary may end threads meanwhile.
    let grown = threads().saturating_sub(before);
    assert!(
        grown <= 20 + dev.pollers() + 1,
        "{grown} threads for 20 connections with {} waits",
        20 * MAX_WAITS_PER_CONN
    );

    // Every client dies without CLOSE, its waits in flight.
    drop(clients);
    eventually("the dead clients released", || dev.clients().is_empty());
    eventually("the threads back to what they were", || threads() <= before);
    assert_eq!((dev.info().clients, dev.info().memory_used), (0, 0));
    // And the tables are free for the next tenant.
    let mut c = client(&sock);
    new_stream(&mut c);
}

#[test]
fn close_answers_the_waits_in_flight_before_its_own_reply() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = start("close");
    let sock = d.sockets()[0].clone();
    let mut c = client(&sock);
    let s = new_stream(&mut c);
    let mut tags: Vec<u32> = (0..5).map(|_| send_wait(&mut c, s)).collect();
    let close = c.send(Kind::Close, 0, Vec::new());
    for _ in 0..5 {
        let (r, _) = c.recv();
        assert!(r.errno != 0, "a wait for a value never reached succeeded");
        let i = tags
            .iter()
            .position(|&t| t == r.tag)
            .expect("a reply to a wait");
        tags.remove(i);
    }
    let (r, _) = c.recv();
    assert_eq!((r.tag, r.errno), (close, 0));
}

#[test]
fn a_device_serves_a_bounded_number_of_waits() {
    use davinci_mockd::daemon::MAX_WAITS_PER_DEVICE;
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = start("bound");
    let sock = d.sockets()[0].clone();
    let per_conn = MAX_WAITS_PER_CONN;
    let conns = MAX_WAITS_PER_DEVICE / per_conn + 1;
    let mut clients = Vec::new();
    let mut refused = Vec::new();
    for i in 0..conns {
        let mut c = client(&sock);
        let s = new_stream(&mut c);
        let tags: Vec<u32> = (0..per_conn).map(|_| send_wait(&mut c, s)).collect();
        if i + 1 < conns {
            // Its reader has taken every wait before this GET_INFO (one reader per
            // connection, frames in order): queued, before the next connection's.
            let (e, _) = ioctl(&mut c, DRIVER_CMD_GET_INFO, &DeviceInfo::default());
            assert_eq!(e, 0, "connection {i}: a wait was refused before the bound");
        }
        clients.push((c, tags));
    }
    // The device's bound is reached by the last connection's waits: they are refused at
    // once, saying so, with their argument; every earlier one waits.
    let (last, tags) = clients.last_mut().unwrap();
    for &t in tags.iter() {
        let (r, _) = last.recv();
        assert_eq!((r.tag, r.errno), (t, Errno::EBUSY.code()), "{}", r.msg);
        assert!(r.msg.contains("on this device"), "{}", r.msg);
        assert_eq!(r.arg.len(), WaitEventArgs::SIZE);
        let back = WaitEventArgs::decode(&r.arg);
        assert_eq!((back.value, back.timeout_ns), (1, 60_000_000_000));
        refused.push(t);
    }
    assert_eq!(refused.len(), conns * per_conn - MAX_WAITS_PER_DEVICE);
    // Once some end (their client closes), there is room again: a wait is admitted (and
    // times out) instead of refused.
    drop(clients.remove(0));
    let (last, _) = clients.last_mut().unwrap();
    let s = new_stream(last);
    let mut admitted = false;
    for _ in 0..200 {
        let tag = send_wait_for(last, s, Duration::from_millis(20));
        let (r, _) = last.recv();
        assert_eq!(r.tag, tag);
        if r.errno != Errno::EBUSY.code() {
            assert_eq!(r.errno, Errno::ETIMEDOUT.code(), "{}", r.msg);
            admitted = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(admitted, "no room for a wait after 32 ended");
}

/// A CANCEL argument: the tag of the wait to give up.
fn cancel_arg(tag: u32) -> Vec<u8> {
    tag.to_le_bytes().to_vec()
}

#[test]
fn another_tenants_flood_of_unknown_cancels_loses_none_of_a_victims() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = start("cancel-flood");
    let sock = d.sockets()[0].clone();
    let stop = Arc::new(AtomicBool::new(false));
    let mut others = Vec::new();
    // Four tenants send CANCELs for tags that name no wait of theirs, as fast as they are
    // answered; one of them also keeps its waits coming and going (1 ms timeouts), so the
    // wait thread is forever taking batches out to check them.
    for n in 0..4u32 {
        let (sock, stop) = (sock.clone(), stop.clone());
        others.push(std::thread::spawn(move || {
            let mut c = client(&sock);
            let s = new_stream(&mut c);
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if n == 0 {
                    for _ in 0..8 {
                        send_wait_for(&mut c, s, Duration::from_millis(1));
                    }
                    for _ in 0..8 {
                        let (r, _) = c.recv();
                        assert_eq!(r.errno, Errno::ETIMEDOUT.code(), "{}", r.msg);
                    }
                }
                for k in 0..16u32 {
                    c.send(Kind::Cancel, 0, cancel_arg(0xdead_0000 + k));
                }
                for _ in 0..16 {
                    let (r, _) = c.recv();
                    assert_eq!((r.kind, r.errno), (Kind::Cancel as u16, 0), "{}", r.msg);
                }
                sent += 16;
            }
            sent
        }));
    }
    // The victim: 1,000 blocking waits, cancelled eight at a time; each cancel ends its
    // wait at once with EINTR (a lost one would hold its wait for 60 s: the reply timeout,
    // 20 s, fails the test).
    let mut v = client(&sock);
    let s = new_stream(&mut v);
    for round in 0..125 {
        let waits: Vec<u32> = (0..8).map(|_| send_wait(&mut v, s)).collect();
        let cancels: Vec<u32> = waits
            .iter()
            .map(|&w| v.send(Kind::Cancel, 0, cancel_arg(w)))
            .collect();
        let mut interrupted = 0;
        for _ in 0..16 {
            let answered = v.c.wait_readable(Duration::from_secs(10)).unwrap();
            assert!(
                answered,
                "round {round}: a CANCEL was lost, its wait still held"
            );
            let (r, _) = v.recv();
            if cancels.contains(&r.tag) {
                assert_eq!(r.errno, 0, "round {round}: CANCEL refused: {}", r.msg);
            } else {
                assert!(
                    waits.contains(&r.tag),
                    "round {round}: a reply to tag {}",
                    r.tag
                );
                assert_eq!(r.errno, Errno::EINTR.code(), "round {round}: {}", r.msg);
                interrupted += 1;
            }
        }
        assert_eq!(interrupted, 8, "round {round}");
    }
    stop.store(true, Ordering::Relaxed);
    let flood: u64 = others.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(flood > 0);
    // Every cancelled wait gave its slot back: the open's full quota of waits is admitted.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut admitted = Vec::new();
    while admitted.len() < MAX_WAITS_PER_CONN {
        let t = send_wait(&mut v, s);
        let info = v.send(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; DeviceInfo::SIZE]);
        // A refused wait is answered before the GET_INFO; an admitted one is not.
        let (r, _) = v.recv();
        if r.tag == t {
            assert_eq!(r.errno, Errno::EBUSY.code(), "{}", r.msg);
            assert!(
                Instant::now() < deadline,
                "a cancelled wait still holds its slot"
            );
            let (r, _) = v.recv();
            assert_eq!((r.tag, r.errno), (info, 0));
            std::thread::sleep(Duration::from_millis(5));
        } else {
            assert_eq!((r.tag, r.errno), (info, 0));
            admitted.push(t);
        }
    }
}
