//! The client side of one `davinci-mockd` connection, shared by the shim's `mock:` backend
//! and the LD_PRELOAD library: HELLO, then tagged requests on one `SOCK_SEQPACKET` socket.
//!
//! Several threads may use one [`Client`] at once (a thread blocked in WAIT_EVENT does not
//! hold up another's request): each request carries a tag, one caller at a time reads the
//! socket and hands every reply to the caller whose tag it carries; a reply nobody waits for
//! any more (its caller timed out or was interrupted) is dropped.
//!
//! Nothing waits for ever on a daemon that stopped answering: [`Client::connect`] gives up
//! after [`CONNECT_TIMEOUT`], every call but a WAIT_EVENT (bounded by its own timeout, or
//! meant to last) after the reply timeout, read once when the client is made
//! ([`reply_timeout`]: `$DAVINCI_SOCKET_TIMEOUT` seconds, default [`REPLY_TIMEOUT`]). A
//! WAIT_EVENT whose read a signal handler (installed without `SA_RESTART`) interrupts is
//! cancelled (a CANCEL frame) and fails with [`CallError::Interrupted`]; other calls read on.
//!
//! Errors are typed ([`CallError`]); each user words them for its own users.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use davinci_uapi::{
    WaitEventArgs, Wire, ABI_VERSION_MAJOR, ABI_VERSION_MINOR, DRIVER_CMD_WAIT_EVENT,
};
use nix::libc;

use crate::sockio::{Received, SeqPacket};
use crate::trust::Trust;
use crate::wire::{Hello, HelloReply, Kind, Reply, Request, WireRole, MAX_REPLY};

/// How long connecting to a daemon may take (its listen backlog full: it stopped accepting).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How far past its deadline a call's blocking read may end (see `Client::recv_reply`).
const LATE: Duration = Duration::from_millis(10);

/// The reply timeout when `$DAVINCI_SOCKET_TIMEOUT` does not say.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The environment variable that sets the reply timeout, in seconds (`2.5`, `30`).
pub const SOCKET_TIMEOUT_ENV: &str = "DAVINCI_SOCKET_TIMEOUT";

/// How long a call (WAIT_EVENT aside) waits for the daemon's reply: `$DAVINCI_SOCKET_TIMEOUT`
/// seconds when it is a positive number (at most a day), else [`REPLY_TIMEOUT`].
pub fn reply_timeout() -> Duration {
    std::env::var(SOCKET_TIMEOUT_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
        .map_or(REPLY_TIMEOUT, Duration::from_secs_f64)
}

/// How long a caller looks for its reply without sleeping (non-blocking reads) before it
/// blocks in `recvmsg`: a daemon answers most control calls within it, and a reply found so
/// saves the caller's sleep and wake-up (and the daemon's wake of it). Cut short when the
/// thread is preempted (the machine has no core to spare for spinning).
pub const REPLY_SPIN: Duration = Duration::from_micros(50);

/// A reply and the descriptors that came with it.
#[derive(Debug)]
pub struct Incoming {
    /// The reply frame.
    pub reply: Reply,
    /// Its descriptors (an MMAP reply's memfd).
    pub fds: Vec<OwnedFd>,
}

/// Why a call got no (usable) reply. Messages of the variants that carry one begin with the
/// client's label (the socket, as its user names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The request does not fit in a frame (`E2BIG`), and why.
    TooBig(String),
    /// The request could not be sent (`ENODEV`), and why.
    SendFailed(String),
    /// The daemon refused the HELLO: its errno and message.
    Refused {
        /// The reply's errno (`EBUSY`: the device is in exclusive use, `EPROTO`: another ABI).
        errno: i32,
        /// The daemon's message.
        msg: String,
    },
    /// The HELLO reply could not be decoded (`EPROTO`).
    MalformedHello,
    /// A signal handler interrupted a blocking WAIT_EVENT (`EINTR`); it was cancelled.
    Interrupted,
    /// The daemon did not answer within the reply timeout, which this is (`ETIMEDOUT`).
    TimedOut(Duration),
    /// The connection is unusable (`ENODEV`), and why.
    Dead(String),
}

impl CallError {
    /// The errno this error stands for.
    pub fn errno(&self) -> i32 {
        match self {
            CallError::TooBig(_) => libc::E2BIG,
            CallError::SendFailed(_) | CallError::Dead(_) => libc::ENODEV,
            CallError::Refused { errno, .. } => *errno,
            CallError::MalformedHello => libc::EPROTO,
            CallError::Interrupted => libc::EINTR,
            CallError::TimedOut(_) => libc::ETIMEDOUT,
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::TooBig(m) | CallError::SendFailed(m) | CallError::Dead(m) => f.write_str(m),
            CallError::Refused { msg, .. } => write!(f, "the daemon refused the open: {msg}"),
            CallError::MalformedHello => f.write_str("malformed HELLO reply"),
            CallError::Interrupted => f.write_str("WAIT_EVENT interrupted by a signal handler"),
            CallError::TimedOut(t) => write!(
                f,
                "davinci-mockd did not answer within {:.1} s (${SOCKET_TIMEOUT_ENV} sets the limit)",
                t.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for CallError {}

/// Why no reply was read.
enum Recv {
    /// A signal handler interrupted the read (nothing was read).
    Interrupted,
    /// The reply deadline passed (nothing was read).
    TimedOut,
    /// The connection is unusable, and why.
    Dead(String),
}

#[derive(Default)]
struct Rx {
    /// Someone is blocked reading the socket.
    reading: bool,
    /// Tags sent and not yet answered.
    pending: HashSet<u32>,
    /// Replies read for callers that have not picked them up yet (bounded by the callers).
    done: HashMap<u32, Incoming>,
    /// Why the connection is unusable, once it is.
    dead: Option<String>,
    /// Callers asleep on the condition variable (waiting for the reader): only then does a
    /// change need a `notify_all`, which is a system call (`FUTEX_WAKE`) even with nobody
    /// asleep.
    sleepers: usize,
}

impl Rx {
    /// Wakes the callers asleep on `cv`, if any (call with the lock held).
    fn wake(&self, cv: &Condvar) {
        if self.sleepers > 0 {
            cv.notify_all();
        }
    }
}

/// One connection to `davinci-mockd`, usable from several threads at once.
pub struct Client {
    sock: SeqPacket,
    /// How messages name the socket (`mock:/run/davinci/davinci0.sock`).
    label: String,
    /// The reply timeout, read once when the client was made.
    timeout: Duration,
    /// The socket's receive timeout (`SO_RCVTIMEO`) is `timeout` (else none): a blocking
    /// read needs no `poll` first to be bounded. Only the reader (one at a time) reads or
    /// changes it: a WAIT_EVENT reads without it, so that the kernel restarts its read after
    /// a signal handler installed with `SA_RESTART` (a read with a timeout would fail with
    /// `EINTR` instead).
    rcvtimeo: AtomicBool,
    next_tag: AtomicU32,
    rx: Mutex<Rx>,
    cv: Condvar,
    buf: Mutex<Vec<u8>>,
    /// Tests: the next read reports a signal instead of reading.
    #[cfg(test)]
    interrupt_next: std::sync::atomic::AtomicBool,
}

fn relock<T>(r: std::sync::LockResult<T>) -> T {
    // Nothing here panics while holding a lock; if something did, the state is still whole.
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Client {
    /// Connects to the socket at `path` within [`CONNECT_TIMEOUT`], if this process trusts
    /// it ([`crate::trust::connect_trusted`] with [`Trust::from_env`]); `label` names it in
    /// messages. Say [`hello`](Client::hello) next.
    ///
    /// # Errors
    /// A refusal ([`io::ErrorKind::PermissionDenied`], without an OS error: the socket, its
    /// directory or its daemon is not one this process trusts, said with the path and
    /// why), the `connect(2)` error (`ENOENT`: no such socket, `ECONNREFUSED`: nobody
    /// listens, `EACCES`: the socket's permissions refuse this user), or
    /// [`io::ErrorKind::TimedOut`].
    pub fn connect(path: &Path, label: String) -> io::Result<Client> {
        let trust = Trust::from_env();
        Ok(Client::new(
            crate::trust::connect_trusted(path, &trust, CONNECT_TIMEOUT)?,
            label,
        ))
    }

    /// A client on a connected socket, with the reply timeout [`reply_timeout`] says now.
    pub fn new(sock: SeqPacket, label: String) -> Client {
        Client::with_timeout(sock, label, reply_timeout())
    }

    /// A client on a connected socket with the reply timeout `timeout`.
    pub fn with_timeout(sock: SeqPacket, label: String, timeout: Duration) -> Client {
        let rcvtimeo = AtomicBool::new(sock.set_recv_timeout(Some(timeout)).is_ok());
        Client {
            sock,
            label,
            timeout,
            rcvtimeo,
            next_tag: AtomicU32::new(1),
            rx: Mutex::new(Rx::default()),
            cv: Condvar::new(),
            buf: Mutex::new(vec![0u8; MAX_REPLY + 1]),
            #[cfg(test)]
            interrupt_next: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The socket (to check its descriptor, or shut it down).
    pub fn socket(&self) -> &SeqPacket {
        &self.sock
    }

    /// The reply timeout of this client.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Opens the device as `role`: the HELLO exchange.
    ///
    /// # Errors
    /// [`CallError::Refused`] with the daemon's errno (`EBUSY`: exclusive use elsewhere,
    /// `EPROTO`: another ABI major), [`CallError::MalformedHello`], or what [`call`]
    /// returns.
    ///
    /// [`call`]: Client::call
    pub fn hello(&self, role: WireRole) -> Result<HelloReply, CallError> {
        let h = Hello {
            abi_major: ABI_VERSION_MAJOR,
            abi_minor: ABI_VERSION_MINOR,
            role: role as u32,
            reserved: 0,
        };
        let got = self.call(Kind::Hello, 0, h.encode())?;
        if got.reply.errno != 0 {
            return Err(CallError::Refused {
                errno: got.reply.errno,
                msg: got.reply.msg,
            });
        }
        HelloReply::decode(&got.reply.arg).ok_or(CallError::MalformedHello)
    }

    /// Marks the connection unusable (every waiter and every later call fails with
    /// [`CallError::Dead`]); the first reason stays.
    pub fn mark_dead(&self, why: impl FnOnce() -> String) {
        relock(self.rx.lock()).dead.get_or_insert_with(why);
        self.cv.notify_all();
    }

    /// Whether the connection is usable and nobody waits on it (a CLOSE would be answered
    /// at once).
    pub fn idle(&self) -> bool {
        let g = relock(self.rx.lock());
        g.dead.is_none() && !g.reading && g.pending.is_empty()
    }

    /// Sends one request and waits for its reply (a WAIT_EVENT ioctl as long as it takes,
    /// every other request up to the reply timeout).
    ///
    /// # Errors
    /// See [`CallError`]; a reply carrying an errno is `Ok` (the caller reads it).
    pub fn call(&self, kind: Kind, request: u32, arg: Vec<u8>) -> Result<Incoming, CallError> {
        // WAIT_EVENT is bounded by its own timeout (or meant to wait); every other call, and
        // a WAIT_EVENT that polls (timeout 0: answered at once), by the reply timeout.
        let waits = kind == Kind::Ioctl && request == DRIVER_CMD_WAIT_EVENT && !polls(&arg);
        let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        let frame = Request {
            kind,
            tag,
            request,
            arg,
        }
        .encode()
        .map_err(|e| CallError::TooBig(e.to_string()))?;
        {
            let mut g = relock(self.rx.lock());
            if let Some(why) = &g.dead {
                return Err(CallError::Dead(why.clone()));
            }
            g.pending.insert(tag);
        }
        if let Err(e) = self.sock.send(&frame, &[]) {
            let mut g = relock(self.rx.lock());
            g.pending.remove(&tag);
            return Err(CallError::SendFailed(format!(
                "{}: cannot send to davinci-mockd: {e}",
                self.label
            )));
        }
        let deadline = (!waits).then(|| Instant::now() + self.timeout);
        let mut g = relock(self.rx.lock());
        loop {
            if let Some(inc) = g.done.remove(&tag) {
                return Ok(inc);
            }
            if let Some(why) = &g.dead {
                let why = why.clone();
                g.pending.remove(&tag);
                return Err(CallError::Dead(why));
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                // A reply that comes later is dropped: the tag is no longer pending.
                g.pending.remove(&tag);
                g.wake(&self.cv);
                return Err(CallError::TimedOut(self.timeout));
            }
            if g.reading {
                g.sleepers += 1;
                g = match left {
                    Some(left) => relock(self.cv.wait_timeout(g, left)).0,
                    None => relock(self.cv.wait(g)),
                };
                g.sleepers -= 1;
                continue;
            }
            g.reading = true;
            drop(g);
            let got = self.recv_reply(left, !waits);
            g = relock(self.rx.lock());
            g.reading = false;
            match got {
                Ok(inc) => {
                    // Only replies someone waits for are kept (bounded by the callers).
                    if g.pending.remove(&inc.reply.tag) {
                        g.done.insert(inc.reply.tag, inc);
                    }
                }
                // A signal handler without SA_RESTART ran on this thread during a blocking
                // WAIT_EVENT: as the kernel driver's would, the wait returns EINTR (its
                // reply, when it comes, is dropped: the tag is no longer pending), and it is
                // cancelled so the daemon does not keep it until its timeout. Other calls
                // (which the daemon carries out anyway) read on, as the kernel's do not
                // return EINTR either.
                Err(Recv::Interrupted) if waits && !g.done.contains_key(&tag) => {
                    g.pending.remove(&tag);
                    g.wake(&self.cv);
                    drop(g);
                    self.cancel(tag);
                    return Err(CallError::Interrupted);
                }
                Err(Recv::Interrupted) | Err(Recv::TimedOut) => {}
                Err(Recv::Dead(why)) => g.dead = Some(why),
            }
            g.wake(&self.cv);
        }
    }

    /// Sends CANCEL for the wait `tag` (no wait for its reply: it is dropped as unasked).
    fn cancel(&self, tag: u32) {
        let frame = Request {
            kind: Kind::Cancel,
            tag: self.next_tag.fetch_add(1, Ordering::Relaxed),
            request: 0,
            arg: tag.to_le_bytes().to_vec(),
        }
        .encode();
        if let Ok(frame) = frame {
            let _ = self.sock.send(&frame, &[]);
        }
    }

    /// Reads one reply frame if one comes within `left` (`None`: however long it takes; the
    /// caller holds the reader role). With `spin`, looks without blocking for up to
    /// [`REPLY_SPIN`] first. A signal handler does not end it (as a read under `SA_RESTART`
    /// would go on): it returns [`Recv::Interrupted`] and the caller looks again.
    fn recv_reply(&self, left: Option<Duration>, spin: bool) -> Result<Incoming, Recv> {
        #[cfg(test)]
        if self.interrupt_next.swap(false, Ordering::Relaxed) {
            return Err(Recv::Interrupted);
        }
        if spin {
            let mut buf = relock(self.buf.lock());
            if let Some(r) = self.sock.recv_soon(&mut buf, true, REPLY_SPIN) {
                return self.decode(&buf, r);
            }
        }
        match left {
            // With the socket's receive timeout the reply timeout, a read that starts with
            // (almost) all of it left overshoots the deadline by at most `LATE`.
            Some(left) if left + LATE >= self.timeout && self.recv_timeout(true) => self.recv_one(),
            Some(left) => self.recv_within(left),
            // Without the timeout if it can be cleared (else a read that times out is looked
            // at again by the caller).
            None => {
                self.recv_timeout(false);
                self.recv_one()
            }
        }
    }

    /// Sets the socket's receive timeout to the reply timeout (`on`) or none, unless it is
    /// so already: whether it is now as asked.
    fn recv_timeout(&self, on: bool) -> bool {
        if self.rcvtimeo.load(Ordering::Relaxed) == on {
            return true;
        }
        let ok = self
            .sock
            .set_recv_timeout(on.then_some(self.timeout))
            .is_ok();
        if ok {
            self.rcvtimeo.store(on, Ordering::Relaxed);
        }
        ok
    }

    /// Reads one reply frame if one comes within `left` (`poll` first: the socket's receive
    /// timeout would wait longer).
    fn recv_within(&self, left: Duration) -> Result<Incoming, Recv> {
        match self.sock.wait_readable(left) {
            Ok(true) => self.recv_one(),
            Ok(false) => Err(Recv::TimedOut),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(Recv::Interrupted),
            Err(e) => Err(Recv::Dead(format!(
                "{}: connection to davinci-mockd failed: {e}",
                self.label
            ))),
        }
    }

    /// Reads one reply frame (the caller holds the reader role), for at most the socket's
    /// receive timeout if it has one: [`Recv::TimedOut`] when none came.
    fn recv_one(&self) -> Result<Incoming, Recv> {
        let mut buf = relock(self.buf.lock());
        let r = self.sock.recv_interruptible(&mut buf, true);
        self.decode(&buf, r)
    }

    /// What one read of a reply frame into `buf` got.
    fn decode(&self, buf: &[u8], r: io::Result<Received>) -> Result<Incoming, Recv> {
        let p = &self.label;
        let r = r.map_err(|e| {
            if e.kind() == io::ErrorKind::Interrupted {
                return Recv::Interrupted;
            }
            if e.kind() == io::ErrorKind::WouldBlock {
                return Recv::TimedOut;
            }
            Recv::Dead(format!("{p}: connection to davinci-mockd failed: {e}"))
        })?;
        if r.len == 0 {
            return Err(Recv::Dead(format!(
                "{p}: davinci-mockd closed the connection (daemon stopped?)"
            )));
        }
        if r.truncated || r.fds_dropped {
            return Err(Recv::Dead(format!(
                "{p}: oversized reply from davinci-mockd"
            )));
        }
        let reply =
            Reply::decode(&buf[..r.len]).map_err(|e| Recv::Dead(format!("{p}: bad reply: {e}")))?;
        if reply.nfds as usize != r.fds.len() {
            return Err(Recv::Dead(format!(
                "{p}: reply announced {} descriptors, {} arrived",
                reply.nfds,
                r.fds.len()
            )));
        }
        Ok(Incoming { reply, fds: r.fds })
    }
}

/// Whether a WAIT_EVENT argument polls (`timeout_ns` 0): the daemon answers it at once, so
/// it is a call like any other (bounded by the reply timeout, read on through signals).
fn polls(arg: &[u8]) -> bool {
    WaitEventArgs::from_bytes(arg).is_some_and(|w| w.timeout_ns == 0)
}

#[cfg(test)]
mod tests;
