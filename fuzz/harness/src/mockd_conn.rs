//! `davinci-mockd`'s connection handling (`hosts/mockd/src/conn.rs`), fed the frames of one
//! connection: HELLOs (whole, cut short, wrong ABI, any role), IOCTL frames (any command
//! number, any bytes, WAIT_EVENT timeouts capped), MMAP frames, CLOSE (also with requests
//! still unanswered), raw bytes, oversized frames, frames carrying descriptors (SCM_RIGHTS:
//! never accepted from a client), pipelined requests, and the client hanging up at any point.
//!
//! The daemon side is the code an accepted connection runs
//! (`davinci_mockd::daemon::ConnServer::serve`) on one process-wide device and one
//! process-wide serving thread (a `static`): each case hands it one end of a fresh
//! `socketpair` and drives the other.
//!
//! Asserts: no panic (in the daemon's thread too: a panic there fails the next case); every
//! reply is a proper frame answering an outstanding request by its tag, or the daemon closed
//! the connection, which it does only after a refused or malformed first frame or a CLOSE;
//! a frame with descriptors is answered `EPROTO`; before HELLO the connection is answered
//! once and closed; a reply with `nfds` carries exactly that many descriptors; once the
//! client hangs up the daemon finishes the connection (within a deadline) and the device is
//! back to no clients, no memory, no streams served, in the sharing mode it started in; and
//! then a well-behaved client (HELLO, GET_INFO, CLOSE) is served.

use std::os::fd::AsFd;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use davinci_mock_device::{local_open_params, MockConfig, MockDevice, NoUserMem, Role};
use davinci_mockd::daemon::ConnServer;
use davinci_mockd::peer::AdminPolicy;
use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{
    Hello, HelloReply, Kind, MmapArgs, Reply, Request, MAX_FDS, MAX_REPLY, MAX_REQUEST,
};
use davinci_uapi::ioctl::ioc_size;
use davinci_uapi::*;

/// Longest the harness waits for one reply or for the daemon to finish a connection.
const DEADLINE: Duration = Duration::from_secs(10);
/// WAIT_EVENT timeouts are capped to this (a case must stay fast).
const MAX_WAIT_NS: u64 = 1_000_000;
const MAX_STEPS: usize = 48;

/// One step of the client.
#[derive(Arbitrary, Debug)]
pub enum Step {
    /// A HELLO: any minor version and role, the right major unless `bad_major`, reserved 0
    /// unless `reserved`; `cut` (when set) cuts the frame to that many bytes.
    Hello {
        /// A wrong ABI major version.
        bad_major: bool,
        /// Minor version.
        minor: u16,
        /// Role (0 client, 1 control, anything else).
        role: u32,
        /// A non-zero reserved field.
        reserved: bool,
        /// Cut the frame short.
        cut: Option<u8>,
    },
    /// An IOCTL frame: a command from the table (or `request`) with `arg` (resized to the
    /// command's size when `exact`).
    Ioctl {
        /// Index into the command table.
        cmd: u8,
        /// Raw request number (when `cmd` picks none).
        request: u32,
        /// The argument.
        arg: Vec<u8>,
        /// Resize to the command's size.
        exact: bool,
    },
    /// An MMAP frame (any cookie and length).
    Mmap {
        /// Cookie.
        cookie: u64,
        /// Length.
        len: u64,
    },
    /// A CLOSE frame.
    Close,
    /// Any bytes as a frame (its tag bytes, if it has them, set by the harness).
    Raw(Vec<u8>),
    /// A frame longer than the largest request.
    Oversized(u16),
    /// The next frame carries `n % MAX_FDS + 1` descriptors.
    WithFds(u8),
    /// The next frames are sent without waiting for their replies (pipelined), until
    /// [`Step::Drain`].
    Pipeline,
    /// Reads every outstanding reply.
    Drain,
    /// Hangs up now (outstanding requests unanswered).
    HangUp,
}

struct Server {
    conns: Mutex<Sender<SeqPacket>>,
    done: Mutex<Receiver<()>>,
    dev: MockDevice,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let dev = MockDevice::new(MockConfig {
            memory_size: 64 << 20,
            idle_spin: Duration::from_micros(50),
            ..MockConfig::default()
        });
        let uid = nix::unistd::getuid().as_raw();
        let cs = ConnServer::new(dev.clone(), AdminPolicy::owned_by(uid), DEADLINE)
            .expect("start the connection server (its refusing thread)");
        let (tx, rx) = channel::<SeqPacket>();
        let (done_tx, done_rx) = channel::<()>();
        std::thread::Builder::new()
            .name("mockd_conn-server".into())
            .spawn(move || {
                for conn in rx {
                    cs.serve(conn);
                    if done_tx.send(()).is_err() {
                        return;
                    }
                }
            })
            .expect("start the serving thread");
        Server {
            conns: Mutex::new(tx),
            done: Mutex::new(done_rx),
            dev,
        }
    })
}

/// The client end of one connection and what it expects.
struct Client {
    sock: SeqPacket,
    /// Tags of requests sent and not answered yet.
    outstanding: Vec<u32>,
    /// Requests sent so far (the next tag).
    sent: u32,
    /// The first frame has been answered: `Some(true)` opened, `Some(false)` refused.
    opened: Option<bool>,
    /// A CLOSE was sent (the daemon may close the connection after answering it).
    closing: bool,
    /// The daemon closed the connection.
    eof: bool,
    buf: Vec<u8>,
}

impl Client {
    /// May the daemon close the connection now?
    fn may_close(&self) -> bool {
        self.closing || self.opened == Some(false)
    }

    fn send(&mut self, frame: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) {
        if self.eof {
            return;
        }
        match self.sock.send(frame, fds) {
            Ok(()) => {
                // The tag the reply must carry: the frame's own (0 if it is too short to
                // have one).
                self.outstanding.push(Request::peek_tag(frame));
                self.sent += 1;
            }
            Err(e) => {
                // The daemon hung up (EPIPE/ECONNRESET): only allowed once it may.
                assert!(
                    self.may_close(),
                    "send failed ({e}) on a connection the daemon had no reason to close"
                );
                self.eof = true;
            }
        }
    }

    /// Receives one reply (or the end of the connection: `None`) and checks it.
    fn recv_one(&mut self) -> Option<Reply> {
        let r = match self.sock.recv(&mut self.buf, true) {
            Ok(r) => Some(r),
            // The daemon closed its end with frames of ours still unread.
            Err(e) if e.raw_os_error() == Some(nix::libc::ECONNRESET) => None,
            Err(e) => panic!("no reply within {DEADLINE:?}: {e}"),
        };
        if r.as_ref().is_none_or(|r| r.len == 0 && !r.truncated) {
            assert!(
                self.may_close(),
                "the daemon closed the connection with {} requests unanswered",
                self.outstanding.len()
            );
            self.eof = true;
            return None;
        }
        let r = r.expect("checked above");
        assert!(!r.truncated, "a reply longer than MAX_REPLY");
        let reply = Reply::decode(&self.buf[..r.len])
            .unwrap_or_else(|e| panic!("a malformed reply: {e:?}"));
        assert_eq!(
            reply.nfds as usize,
            r.fds.len(),
            "reply announces {} descriptors, carries {}",
            reply.nfds,
            r.fds.len()
        );
        let Some(at) = self.outstanding.iter().position(|&t| t == reply.tag) else {
            panic!("a reply to no outstanding request: {reply:?}");
        };
        self.outstanding.remove(at);
        if self.opened.is_none() {
            let ok = reply.errno == 0 && reply.kind == Kind::Hello as u16;
            if ok {
                let h = HelloReply::decode(&reply.arg).expect("a HELLO reply's argument");
                assert_eq!(h.abi_major, ABI_VERSION_MAJOR);
            }
            self.opened = Some(ok);
        }
        if reply.errno == 0 && reply.kind == Kind::Close as u16 {
            assert!(self.closing, "a CLOSE reply to no CLOSE");
        }
        Some(reply)
    }

    /// Reads until nothing is outstanding (or the daemon closed the connection).
    fn drain(&mut self) {
        while !self.outstanding.is_empty() && !self.eof {
            self.recv_one();
        }
        if self.eof {
            self.outstanding.clear();
        }
    }
}

fn frame(kind: Kind, tag: u32, request: u32, arg: Vec<u8>) -> Vec<u8> {
    Request {
        kind,
        tag,
        request,
        arg,
    }
    .encode()
    .expect("an argument of at most MAX_ARG bytes")
}

/// Caps the timeout of a WAIT_EVENT argument.
fn cap_wait(request: u32, arg: &mut [u8]) {
    if request == DRIVER_CMD_WAIT_EVENT {
        if let Some(mut w) = WaitEventArgs::from_bytes(arg) {
            w.timeout_ns = w.timeout_ns.min(MAX_WAIT_NS);
            w.encode(arg);
        }
    }
}

/// Waits (bounded) until the serving thread finished the connection.
fn finished(srv: &Server) {
    let done = srv.done.lock().unwrap_or_else(|e| e.into_inner());
    match done.recv_timeout(DEADLINE) {
        Ok(()) => {}
        Err(e) => panic!("the daemon did not finish a hung-up connection: {e}"),
    }
}

/// The device is back to nothing (bounded polling: blocking waits may still be answering).
fn device_idle(dev: &MockDevice) {
    let start = Instant::now();
    loop {
        let info = dev.info();
        if info.clients == 0 && info.memory_used == 0 && dev.workers() == 0 {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the device did not return to idle after the connection ended: {} clients, \
             {} bytes, {} streams served",
            info.clients,
            info.memory_used,
            dev.workers()
        );
        std::thread::yield_now();
    }
}

/// Back to exclusive mode (the connection may have changed it, as an admin may).
fn reset_share(dev: &MockDevice) {
    if dev.share_mode() == ShareMode::Exclusive {
        return;
    }
    let ctl = dev
        .open(local_open_params(Role::Control, true))
        .expect("control open");
    let mut arg = vec![0u8; DeviceShareArgs::SIZE];
    DeviceShareArgs::default().encode(&mut arg);
    dev.ioctl(ctl, DRIVER_CMD_SET_DEVICE_SHARE, &mut arg, &mut NoUserMem)
        .expect("back to exclusive");
    dev.close(ctl);
}

fn connect(srv: &Server) -> Client {
    let (ours, theirs) = SeqPacket::pair().expect("socketpair");
    ours.set_recv_timeout(Some(DEADLINE)).expect("recv timeout");
    srv.conns
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send(theirs)
        .expect("the serving thread is gone (it panicked)");
    Client {
        sock: ours,
        outstanding: Vec::new(),
        sent: 0,
        opened: None,
        closing: false,
        eof: false,
        buf: vec![0u8; MAX_REPLY + 1],
    }
}

/// A well-behaved client: HELLO, GET_INFO, CLOSE, each answered properly.
fn good_client(srv: &Server) {
    let mut c = connect(srv);
    let hello = Hello {
        abi_major: ABI_VERSION_MAJOR,
        abi_minor: ABI_VERSION_MINOR,
        role: 0,
        reserved: 0,
    };
    c.send(&frame(Kind::Hello, 0, 0, hello.encode()), &[]);
    c.drain();
    assert_eq!(c.opened, Some(true), "a well-behaved HELLO was refused");
    let mut arg = vec![0u8; DeviceInfo::SIZE];
    DeviceInfo::default().encode(&mut arg);
    c.send(&frame(Kind::Ioctl, 1, DRIVER_CMD_GET_INFO, arg), &[]);
    let r = c
        .sock
        .recv(&mut c.buf, true)
        .expect("a GET_INFO reply in time");
    let reply = Reply::decode(&c.buf[..r.len]).expect("a proper GET_INFO reply");
    assert_eq!(
        (reply.tag, reply.errno),
        (1, 0),
        "GET_INFO failed: {reply:?}"
    );
    let info = DeviceInfo::decode(&reply.arg);
    assert_eq!(info.clients, 1, "the well-behaved client is not alone");
    c.outstanding.retain(|&t| t != 1);
    c.closing = true;
    c.send(&frame(Kind::Close, 2, 0, Vec::new()), &[]);
    c.drain();
    drop(c);
    finished(srv);
}

/// One input.
pub fn run(data: &[u8]) {
    let Ok(steps) = <Vec<Step>>::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let srv = server();
    let mut c = connect(srv);
    let mut pipelined = false;
    let mut fds_next: Option<u8> = None;
    // A descriptor a client might try to pass (never accepted).
    let spare = std::fs::File::open("/dev/null").expect("/dev/null");
    for step in steps.into_iter().take(MAX_STEPS) {
        if c.eof {
            break;
        }
        let tag = c.sent;
        let bytes = match step {
            Step::Hello {
                bad_major,
                minor,
                role,
                reserved,
                cut,
            } => {
                let h = Hello {
                    abi_major: ABI_VERSION_MAJOR ^ u16::from(bad_major),
                    abi_minor: minor,
                    role,
                    reserved: u64::from(reserved),
                };
                let mut f = frame(Kind::Hello, tag, 0, h.encode());
                if let Some(n) = cut {
                    f.truncate(usize::from(n));
                }
                f
            }
            Step::Ioctl {
                cmd,
                request,
                mut arg,
                exact,
            } => {
                let request = COMMANDS.get(cmd as usize).map_or(request, |c| c.request);
                if exact {
                    arg.resize(ioc_size(request), 0);
                }
                arg.truncate(davinci_mockd_proto::MAX_ARG);
                cap_wait(request, &mut arg);
                frame(Kind::Ioctl, tag, request, arg)
            }
            Step::Mmap { cookie, len } => {
                frame(Kind::Mmap, tag, 0, MmapArgs { cookie, len }.encode())
            }
            Step::Close => {
                c.closing = true;
                frame(Kind::Close, tag, 0, Vec::new())
            }
            Step::Raw(mut b) => {
                b.truncate(MAX_REQUEST);
                if b.len() >= 12 {
                    b[8..12].copy_from_slice(&tag.to_le_bytes());
                }
                // A raw frame that decodes as a WAIT_EVENT is capped too; one that decodes
                // as CLOSE closes.
                if let Ok(mut r) = Request::decode(&b) {
                    cap_wait(r.request, &mut r.arg);
                    c.closing |= r.kind == Kind::Close;
                    b = r.encode().expect("re-encodes");
                }
                b
            }
            Step::Oversized(n) => {
                let mut f = frame(Kind::Ioctl, tag, DRIVER_CMD_GET_INFO, Vec::new());
                f.resize(MAX_REQUEST + 1 + usize::from(n), 0);
                f
            }
            Step::WithFds(n) => {
                fds_next = Some(n);
                continue;
            }
            Step::Pipeline => {
                pipelined = true;
                continue;
            }
            Step::Drain => {
                pipelined = false;
                c.drain();
                continue;
            }
            Step::HangUp => break,
        };
        // A zero-length frame is a malformed one (EPROTO, tag 0), not the end of the
        // connection.
        // Before the first reply the daemon reads exactly one frame: pipelining starts after.
        let before_hello = c.opened.is_none();
        match fds_next.take() {
            Some(n) => {
                let k = usize::from(n) % MAX_FDS + 1;
                let fds: Vec<_> = (0..k).map(|_| spare.as_fd()).collect();
                let with_fds = Request::peek_tag(&bytes);
                c.send(&bytes, &fds);
                // Its reply: EPROTO, whatever the frame (descriptors are never accepted).
                while c.outstanding.contains(&with_fds) && !c.eof {
                    if let Some(r) = c.recv_one() {
                        if r.tag == with_fds {
                            assert_eq!(
                                r.errno,
                                Errno::EPROTO.code(),
                                "a frame with descriptors was not refused: {r:?}"
                            );
                        }
                    }
                }
            }
            None => c.send(&bytes, &[]),
        }
        if !pipelined || before_hello {
            c.drain();
        }
    }
    if !c.eof && !c.closing && c.opened == Some(true) && c.outstanding.is_empty() {
        // Still open and idle: a last request is answered.
        let mut arg = vec![0u8; DeviceInfo::SIZE];
        DeviceInfo::default().encode(&mut arg);
        c.send(&frame(Kind::Ioctl, c.sent, DRIVER_CMD_GET_INFO, arg), &[]);
        c.drain();
    }
    // Hang up, perhaps with requests outstanding.
    drop(c);
    finished(srv);
    device_idle(&srv.dev);
    reset_share(&srv.dev);
    good_client(srv);
    device_idle(&srv.dev);
}
