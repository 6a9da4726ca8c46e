//! Tests of [`Client`] against a fake daemon on the other end of a socket pair.

use super::*;

/// The fake daemon's end: reads requests, writes replies as the test says.
struct Daemon(SeqPacket);

impl Daemon {
    fn request(&self) -> Request {
        let mut buf = vec![0u8; 1 << 16];
        let r = self.0.recv(&mut buf, false).expect("fake daemon: recv");
        assert!(r.len > 0, "fake daemon: the client closed the connection");
        Request::decode(&buf[..r.len]).expect("fake daemon: a well-formed request")
    }

    fn reply(&self, r: &Reply) {
        self.0
            .send(&r.encode().expect("fake daemon: encode"), &[])
            .expect("fake daemon: send");
    }

    /// Answers `req` by echoing its argument.
    fn echo(&self, req: &Request) {
        self.reply(&Reply::ok(req.kind, req.tag, req.arg.clone()));
    }
}

fn pair(timeout: Duration) -> (Client, Daemon) {
    let (a, b) = SeqPacket::pair().expect("socketpair");
    (
        Client::with_timeout(a, "test.sock".to_string(), timeout),
        Daemon(b),
    )
}

/// Long enough never to pass in a test that does not mean it to.
const LONG: Duration = Duration::from_secs(600);

#[test]
fn replies_out_of_order_reach_the_caller_whose_tag_they_carry() {
    let (c, d) = pair(LONG);
    std::thread::scope(|s| {
        let one = s.spawn(|| c.call(Kind::Ioctl, 1, b"one".to_vec()));
        let two = s.spawn(|| c.call(Kind::Ioctl, 2, b"two".to_vec()));
        let a = d.request();
        let b = d.request();
        // Answer the later request first.
        d.echo(&b);
        d.echo(&a);
        let one = one.join().unwrap().expect("first caller's reply");
        let two = two.join().unwrap().expect("second caller's reply");
        assert_eq!(one.reply.arg, b"one");
        assert_eq!(two.reply.arg, b"two");
    });
    assert!(c.idle());
}

#[test]
fn a_reply_after_its_caller_timed_out_is_dropped() {
    let (c, d) = pair(Duration::from_millis(50));
    let e = c.call(Kind::Ioctl, 7, b"old".to_vec()).unwrap_err();
    assert_eq!(e, CallError::TimedOut(Duration::from_millis(50)));
    assert_eq!(e.errno(), libc::ETIMEDOUT);
    assert!(e.to_string().contains("did not answer within 0.1 s"), "{e}");
    let late = d.request();
    assert_eq!(late.request, 7);
    // The late reply arrives before the next request's. The next call is a WAIT_EVENT, which
    // has no reply deadline (so this test does not race the 50 ms).
    d.echo(&late);
    std::thread::scope(|s| {
        let next = s.spawn(|| c.call(Kind::Ioctl, DRIVER_CMD_WAIT_EVENT, b"new".to_vec()));
        let req = d.request();
        assert_eq!(req.request, DRIVER_CMD_WAIT_EVENT);
        d.echo(&req);
        let got = next.join().unwrap().expect("the second call's reply");
        assert_eq!(got.reply.arg, b"new");
        assert_eq!(got.reply.tag, req.tag);
    });
    assert!(c.idle(), "the late reply was not kept");
}

#[test]
fn a_dead_connection_fails_every_waiter_and_every_later_call() {
    let (c, d) = pair(LONG);
    std::thread::scope(|s| {
        let wait = s.spawn(|| c.call(Kind::Ioctl, DRIVER_CMD_WAIT_EVENT, vec![1]));
        let other = s.spawn(|| c.call(Kind::Ioctl, 3, vec![2]));
        d.request();
        d.request();
        drop(d);
        for (name, h) in [("the wait", wait), ("the other call", other)] {
            match h.join().unwrap() {
                Err(CallError::Dead(why)) => {
                    assert!(
                        why.contains("test.sock: davinci-mockd closed the connection"),
                        "{why}"
                    )
                }
                r => panic!("{name}: {r:?}"),
            }
        }
    });
    let e = c.call(Kind::Ioctl, 4, Vec::new()).unwrap_err();
    assert!(matches!(e, CallError::Dead(_)), "{e:?}");
    assert_eq!(e.errno(), libc::ENODEV);
    assert!(!c.idle());
}

#[test]
fn mark_dead_fails_later_calls_with_the_first_reason() {
    let (c, _d) = pair(LONG);
    c.mark_dead(|| "first".to_string());
    c.mark_dead(|| "second".to_string());
    assert_eq!(
        c.call(Kind::Close, 0, Vec::new()).unwrap_err(),
        CallError::Dead("first".to_string())
    );
}

#[test]
fn an_interrupted_wait_is_cancelled_and_its_reply_dropped() {
    let (c, d) = pair(LONG);
    c.interrupt_next.store(true, Ordering::Relaxed);
    let e = c
        .call(Kind::Ioctl, DRIVER_CMD_WAIT_EVENT, vec![9])
        .unwrap_err();
    assert_eq!(e, CallError::Interrupted);
    assert_eq!(e.errno(), libc::EINTR);
    let wait = d.request();
    assert_eq!(wait.request, DRIVER_CMD_WAIT_EVENT);
    let cancel = d.request();
    assert_eq!(cancel.kind, Kind::Cancel);
    assert_eq!(cancel.arg, wait.tag.to_le_bytes());
    // The daemon answers the cancelled wait; nobody takes that reply.
    d.echo(&wait);
    std::thread::scope(|s| {
        // Any other call reads on through a signal.
        c.interrupt_next.store(true, Ordering::Relaxed);
        let next = s.spawn(|| c.call(Kind::Ioctl, 5, b"five".to_vec()));
        let req = d.request();
        d.echo(&req);
        let got = next
            .join()
            .unwrap()
            .expect("a call that is not a wait reads on");
        assert_eq!(got.reply.arg, b"five");
    });
    assert!(c.idle());
}

#[test]
fn a_polling_wait_reads_on_through_a_signal_and_has_the_reply_timeout() {
    let wait = |timeout_ns| {
        let mut a = vec![0u8; WaitEventArgs::SIZE];
        WaitEventArgs {
            kind: 2,
            handle: 7,
            value: 1,
            timeout_ns,
            ..Default::default()
        }
        .encode(&mut a);
        a
    };
    let (c, d) = pair(LONG);
    std::thread::scope(|s| {
        // Timeout 0: answered at once, so a signal does not cancel it.
        c.interrupt_next.store(true, Ordering::Relaxed);
        let poll = s.spawn(|| c.call(Kind::Ioctl, DRIVER_CMD_WAIT_EVENT, wait(0)));
        let req = d.request();
        d.echo(&req);
        let got = poll
            .join()
            .unwrap()
            .expect("a poll reads on through a signal");
        assert_eq!(got.reply.arg, wait(0));
    });
    // And it gives up after the reply timeout, as any call that is answered at once.
    let (c, _d) = pair(Duration::from_millis(50));
    let e = c
        .call(Kind::Ioctl, DRIVER_CMD_WAIT_EVENT, wait(0))
        .unwrap_err();
    assert!(matches!(e, CallError::TimedOut(_)), "{e:?}");
    // A wait with a timeout is still cancelled by a signal.
    let (c, d) = pair(LONG);
    c.interrupt_next.store(true, Ordering::Relaxed);
    let e = c
        .call(Kind::Ioctl, DRIVER_CMD_WAIT_EVENT, wait(1_000_000))
        .unwrap_err();
    assert_eq!(e, CallError::Interrupted);
    assert_eq!(d.request().request, DRIVER_CMD_WAIT_EVENT);
    assert_eq!(d.request().kind, Kind::Cancel);
}

#[test]
fn hello_decodes_the_reply_or_says_what_was_wrong() {
    let (c, d) = pair(LONG);
    std::thread::scope(|s| {
        let h = s.spawn(|| c.hello(WireRole::Client));
        let req = d.request();
        assert_eq!(req.kind, Kind::Hello);
        let hello = Hello::decode(&req.arg).expect("a HELLO argument");
        assert_eq!(hello.abi_major, ABI_VERSION_MAJOR);
        assert_eq!(hello.role, WireRole::Client as u32);
        let mine = HelloReply {
            device_id: 3,
            ..HelloReply::default()
        };
        d.reply(&Reply::ok(Kind::Hello, req.tag, mine.encode()));
        assert_eq!(h.join().unwrap().expect("HELLO").device_id, 3);

        let h = s.spawn(|| c.hello(WireRole::Control));
        let req = d.request();
        d.reply(&Reply {
            errno: libc::EBUSY,
            msg: "in exclusive use".to_string(),
            ..Reply::ok(Kind::Hello, req.tag, Vec::new())
        });
        let e = h.join().unwrap().unwrap_err();
        assert_eq!(e.errno(), libc::EBUSY);
        assert_eq!(
            e,
            CallError::Refused {
                errno: libc::EBUSY,
                msg: "in exclusive use".to_string()
            }
        );

        let h = s.spawn(|| c.hello(WireRole::Client));
        let req = d.request();
        d.reply(&Reply::ok(Kind::Hello, req.tag, vec![1, 2, 3]));
        assert_eq!(h.join().unwrap().unwrap_err(), CallError::MalformedHello);
    });
}

/// The socket's receive timeout bounds ordinary calls without a `poll`, but a WAIT_EVENT
/// reads without it: it outlasts the reply timeout, and the next call is bounded again.
#[test]
fn a_wait_outlasts_the_reply_timeout_and_the_next_call_is_bounded_again() {
    let (c, d) = pair(Duration::from_millis(50));
    assert!(
        c.rcvtimeo.load(Ordering::Relaxed),
        "SO_RCVTIMEO set at creation"
    );
    std::thread::scope(|s| {
        let wait = s.spawn(|| c.call(Kind::Ioctl, DRIVER_CMD_WAIT_EVENT, b"w".to_vec()));
        let req = d.request();
        // Four reply timeouts: a read still bounded by one would have returned (and been
        // read again, but with the timeout still set a signal would end it).
        std::thread::sleep(Duration::from_millis(200));
        d.echo(&req);
        let got = wait.join().unwrap().expect("the wait's reply");
        assert_eq!(got.reply.arg, b"w");
    });
    assert!(
        !c.rcvtimeo.load(Ordering::Relaxed),
        "the wait read without it"
    );
    let e = c.call(Kind::Ioctl, 8, Vec::new()).unwrap_err();
    assert_eq!(e, CallError::TimedOut(Duration::from_millis(50)));
    assert!(
        c.rcvtimeo.load(Ordering::Relaxed),
        "set again for a bounded call"
    );
}

extern "C" fn ignore_signal(_: libc::c_int) {}

/// A signal handler installed with `SA_RESTART` does not end a blocked WAIT_EVENT (its read
/// is restarted, as the kernel driver's wait is), although ordinary calls read with a
/// receive timeout, which the kernel never restarts.
#[test]
#[allow(unsafe_code)] // installing a signal handler and signalling the waiting thread
fn a_wait_reads_on_through_an_sa_restart_handler() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let act = SigAction::new(
        SigHandler::Handler(ignore_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    // SAFETY: the handler does nothing (async-signal-safe); SIGUSR2 is used by no other test
    // of this crate.
    unsafe { sigaction(Signal::SIGUSR2, &act) }.expect("sigaction");
    let (c, d) = pair(Duration::from_millis(50));
    // A bounded call first: the socket has its receive timeout when the wait begins.
    let e = c.call(Kind::Ioctl, 8, Vec::new()).unwrap_err();
    assert_eq!(e, CallError::TimedOut(Duration::from_millis(50)));
    d.request();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let wait = s.spawn(|| {
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() }).unwrap();
            c.call(Kind::Ioctl, DRIVER_CMD_WAIT_EVENT, b"w".to_vec())
        });
        let t = rx.recv().unwrap();
        let req = d.request();
        // Give the waiter time to block in its read (were it not yet, the signal would end
        // nothing and the test would pass without showing anything).
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: `t` is the waiting thread, alive until it is joined below.
        assert_eq!(unsafe { libc::pthread_kill(t, libc::SIGUSR2) }, 0);
        std::thread::sleep(Duration::from_millis(50));
        d.echo(&req);
        let got = wait.join().unwrap().expect("the wait read on");
        assert_eq!(got.reply.arg, b"w");
    });
    assert!(c.idle());
}
