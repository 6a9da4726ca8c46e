//! Signals: a WAIT_EVENT interrupted by one returns EINTR with where the event stood, and
//! restarts under SA_RESTART; a client killed with SIGKILL mid-submission gives everything
//! back.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use davinci_shim::{Control, Device, DeviceMem};
use davinci_tests::descs::SubmitDescs;
use davinci_uapi::{
    CreateEventArgs, WaitEventArgs, WaitKind, DRIVER_CMD_CREATE_EVENT, DRIVER_CMD_WAIT_EVENT,
    WAIT_FOREVER,
};
use nix::libc;

use super::{node_path, Node};

extern "C" fn on_sigusr1(_: libc::c_int) {}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn a_signal_interrupts_wait_event_with_eintr() {
    let path = node_path();
    let n = Arc::new(Node::open(&path, true));
    let ctx = n.create_context();
    let ev = n
        .call(
            DRIVER_CMD_CREATE_EVENT,
            &CreateEventArgs {
                ctx,
                ..Default::default()
            },
        )
        .expect("CREATE_EVENT")
        .handle;

    // A handler without SA_RESTART, so the interrupted ioctl returns EINTR to the caller.
    // SAFETY: the handler does nothing (async-signal-safe); SIGUSR1 is not used otherwise
    // by this test program.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigusr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let (n, done) = (n.clone(), done.clone());
        std::thread::spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() }).unwrap();
            let a = WaitEventArgs {
                kind: WaitKind::Event as u32,
                handle: ev,
                value: 1,
                timeout_ns: WAIT_FOREVER,
                ..Default::default()
            };
            let r = n.call(DRIVER_CMD_WAIT_EVENT, &a).map(|_| ());
            done.store(true, Ordering::Release);
            r
        })
    };
    let thread = rx.recv().unwrap();
    // Signal until the wait returns: a signal that lands before the thread sleeps in the
    // driver only runs the handler, and the next one interrupts the sleep.
    let start = Instant::now();
    while !done.load(Ordering::Acquire) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "WAIT_EVENT did not return on a signal"
        );
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: `thread` is the waiter, alive until it is joined below.
        unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
    }
    assert_eq!(waiter.join().unwrap(), Err(libc::EINTR));
    // The file goes on: a bounded wait now times out as it should.
    let a = WaitEventArgs {
        kind: WaitKind::Event as u32,
        handle: ev,
        value: 1,
        timeout_ns: 10_000_000,
        ..Default::default()
    };
    assert_eq!(
        n.call(DRIVER_CMD_WAIT_EVENT, &a).map(|_| ()),
        Err(libc::ETIMEDOUT)
    );
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn a_wait_interrupted_by_a_signal_reports_where_it_stood_and_restarts_under_sa_restart() {
    let path = node_path();
    let n = Arc::new(Node::open(&path, true));
    let ctx = n.create_context();
    let ev = n
        .call(
            DRIVER_CMD_CREATE_EVENT,
            &CreateEventArgs {
                ctx,
                ..Default::default()
            },
        )
        .expect("CREATE_EVENT")
        .handle;
    let stream = n.create_stream(ctx).handle;
    let wait = WaitEventArgs {
        kind: WaitKind::Event as u32,
        handle: ev,
        value: 2,
        timeout_ns: WAIT_FOREVER,
        current: 0xdead_beef,
        status: 0xdead,
        ..Default::default()
    };
    let record = |value: u64| {
        let a = davinci_uapi::SubmitTaskArgs {
            stream,
            desc: davinci_uapi::TaskDesc::event_record(value, ev, value),
            ..Default::default()
        };
        n.call(davinci_uapi::DRIVER_CMD_SUBMIT_TASK, &a)
            .expect("SUBMIT_TASK event record");
    };
    record(1);
    // Wait until the worker ran the record (value 1), so the interrupted wait reports it.
    let start = Instant::now();
    loop {
        let (r, _) = n.call_keep(
            DRIVER_CMD_WAIT_EVENT,
            &WaitEventArgs {
                value: 1,
                timeout_ns: 1_000_000_000,
                ..wait
            },
        );
        if r.is_ok() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "value 1 never recorded"
        );
    }

    let run = |restart: bool| {
        // SAFETY: the handler does nothing (async-signal-safe); SIGUSR1 is this test's.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigusr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = if restart { libc::SA_RESTART } else { 0 };
            assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
        }
        let done = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let (n, done) = (n.clone(), done.clone());
            std::thread::spawn(move || {
                // SAFETY: no preconditions.
                tx.send(unsafe { libc::pthread_self() }).unwrap();
                let r = n.call_keep(DRIVER_CMD_WAIT_EVENT, &wait);
                done.store(true, Ordering::Release);
                r
            })
        };
        let thread = rx.recv().unwrap();
        let mut signals = 0;
        let start = Instant::now();
        while !done.load(Ordering::Acquire) && (!restart || signals < 10) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no return on a signal"
            );
            std::thread::sleep(Duration::from_millis(30));
            // SAFETY: `thread` is the waiter, alive until joined below.
            unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
            signals += 1;
        }
        (waiter, done)
    };

    // Without SA_RESTART: EINTR, with `current` (1) and `status` filled in.
    let (waiter, _) = run(false);
    let (r, got) = waiter.join().unwrap();
    assert_eq!(r, Err(libc::EINTR));
    assert_eq!(
        (got.current, got.status),
        (1, 0),
        "an interrupted WAIT_EVENT reports where the event stood"
    );
    // With SA_RESTART: ten signals later it is still waiting (restarted each time), and it
    // returns when the value is reached.
    let (waiter, done) = run(true);
    assert!(
        !done.load(Ordering::Acquire),
        "a wait under SA_RESTART returned on a signal"
    );
    record(2);
    let (r, got) = waiter.join().unwrap();
    assert_eq!(r, Ok(()), "the restarted wait sees the value");
    assert_eq!(got.current, 2);
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn a_client_killed_mid_submission_gives_everything_back() {
    let path = node_path();
    let ctl = Control::open(&path).expect("control open");
    let before = ctl.info().expect("GET_INFO");
    assert_eq!(before.clients, 0, "the device is idle before the test");

    let bin = davinci_tests::mockd::bin("davinci-testclient");
    let mut child = Command::new(&bin)
        .args(["work", "--until-eof", "--device", &path, "--elems", "4096"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
    let pid = child.id();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Wait until it is in the middle of its rounds.
    loop {
        let line = lines
            .next()
            .expect("the client reported nothing")
            .expect("read the client's report");
        assert!(!line.contains("\"error\""), "the client failed: {line}");
        if line.contains("\"progress\"") {
            break;
        }
    }
    let held = ctl
        .clients()
        .expect("LIST_CLIENTS")
        .into_iter()
        .find(|c| c.pid == pid)
        .expect("the working client is listed");
    assert!(held.streams >= 1 && held.memory_bytes > 0, "{held:?}");
    assert!(ctl.info().unwrap().memory_used >= held.memory_bytes);

    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(!status.success(), "killed, not exited: {status:?}");

    // Closing the file (the kernel does it for a killed process) frees everything.
    let start = Instant::now();
    loop {
        let clients = ctl.clients().expect("LIST_CLIENTS");
        let info = ctl.info().expect("GET_INFO");
        if clients.iter().all(|c| c.pid != pid) && info.memory_used == before.memory_used {
            assert_eq!(info.clients, before.clients);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the killed client's resources were not reclaimed: {clients:?}, {} bytes in use",
            info.memory_used
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // The exclusive device takes a new client, which gets the memory back and works.
    let dev = Device::open(&path).expect("a new client after the kill");
    let buf = dev.alloc(held.memory_bytes as usize).expect("alloc");
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    s.submit_desc(&davinci_shim::TaskDesc::fill(
        7,
        buf.dev_addr(),
        buf.len() as u64 & !3,
        0x0102_0304,
    ))
    .unwrap();
    s.synchronize(Duration::from_secs(30)).unwrap();
    let mut out = vec![0u8; 16];
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, 0x0102_0304u32.to_ne_bytes().repeat(4));
}
