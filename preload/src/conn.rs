//! One open of a `davinci-mockd` device: a `SOCK_SEQPACKET` connection speaking
//! `davinci_mockd_proto::wire` (HELLO, then IOCTL, MMAP, CANCEL and CLOSE frames).
//!
//! Several threads may use one open at once, as they may use one file of the kernel module
//! (a thread blocked in WAIT_EVENT does not hold up another's CREATE_STREAM): each request
//! carries a tag, one caller at a time reads the socket and hands every reply to the caller
//! whose tag it carries (the scheme of the shim's `mock:` backend). Nothing waits for ever
//! on a daemon that stopped answering: connecting gives up after [`CONNECT_TIMEOUT`], every
//! call but WAIT_EVENT (bounded by its own timeout) after the reply timeout
//! (`$DAVINCI_SOCKET_TIMEOUT` seconds, default 10), with `ETIMEDOUT`.
//!
//! The connection's socket sits on a high descriptor number ([`PRIVATE_FD_MIN`]), away from
//! the numbers the program counts on, and is checked before every use to still be the socket
//! this open connected (a program that closed it behind the library's back, for instance
//! with `close_range`, gets `ENODEV`, and no frame goes to whatever file took the number).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{Hello, HelloReply, Kind, Reply, Request, WireRole, MAX_REPLY};
use davinci_uapi::{ABI_VERSION_MAJOR, ABI_VERSION_MINOR, DRIVER_CMD_WAIT_EVENT};

use crate::sys::{self, FileId};
use crate::Failure;

/// How long connecting to a daemon may take (its listen backlog full: it stopped accepting).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The reply timeout when `$DAVINCI_SOCKET_TIMEOUT` does not say.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection's own descriptor is moved to this number or above (when the descriptor
/// limit allows), so the program's `open` gets the lowest free number as POSIX promises.
pub const PRIVATE_FD_MIN: RawFd = 512;

/// The reply timeout: `$DAVINCI_SOCKET_TIMEOUT` seconds when it is a positive number (at most
/// a day), else [`REPLY_TIMEOUT`] (as the shim's `mock:` backend reads it).
fn reply_timeout() -> Duration {
    std::env::var("DAVINCI_SOCKET_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
        .map_or(REPLY_TIMEOUT, Duration::from_secs_f64)
}

/// Why no reply was read.
enum Recv {
    /// A signal handler interrupted the read (nothing was read).
    Interrupted,
    /// The reply deadline passed (nothing was read).
    TimedOut,
    /// The connection is unusable, and why.
    Dead(String),
}

/// A reply and the descriptors that came with it.
pub struct Incoming {
    /// The reply frame.
    pub reply: Reply,
    /// Its descriptors (an MMAP reply's memfd).
    pub fds: Vec<OwnedFd>,
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
}

/// An open of a device served by `davinci-mockd`.
pub struct Conn {
    sock: SeqPacket,
    /// What the socket's descriptor is (checked before each use).
    sock_id: Option<FileId>,
    path: PathBuf,
    /// The process that opened it: a child after `fork` shares the socket but must not use it.
    pid: u32,
    next_tag: AtomicU32,
    rx: Mutex<Rx>,
    cv: Condvar,
    buf: Mutex<Vec<u8>>,
    timeout: Duration,
    /// HELLO succeeded: there is an open for CLOSE to end.
    opened: bool,
}

fn relock<T>(r: std::sync::LockResult<T>) -> T {
    // Nothing here panics while holding a lock; if something did, the state is still whole.
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Conn {
    /// Connects to the socket at `path` and opens the device as `role`.
    ///
    /// # Errors
    /// The `connect(2)` errno (`ENOENT`: no such socket, `ECONNREFUSED`: no daemon behind it,
    /// `EACCES`: the socket's permissions refuse this user), `ETIMEDOUT`, or the HELLO
    /// reply's errno (`EBUSY` for a device in exclusive use, `EPROTO` for another ABI major).
    pub fn open(path: &Path, role: WireRole) -> Result<Conn, Failure> {
        let p = path.display();
        let sock = SeqPacket::connect_within(path, CONNECT_TIMEOUT).map_err(|e| {
            let errno = if e.kind() == std::io::ErrorKind::TimedOut {
                libc::ETIMEDOUT
            } else {
                e.raw_os_error().unwrap_or(libc::EIO)
            };
            Failure::new(errno, format!("cannot connect to {p}: {e}"))
        })?;
        // Out of the program's way; where the limit is lower, it stays where it is.
        let sock = sock.duplicate_at_least(PRIVATE_FD_MIN).unwrap_or(sock);
        let sock_id = sys::file_id(sock.as_fd().as_raw_fd());
        let mut c = Conn {
            sock,
            sock_id,
            path: path.to_path_buf(),
            pid: std::process::id(),
            next_tag: AtomicU32::new(1),
            rx: Mutex::new(Rx::default()),
            cv: Condvar::new(),
            buf: Mutex::new(vec![0u8; MAX_REPLY + 1]),
            timeout: reply_timeout(),
            opened: false,
        };
        let h = Hello {
            abi_major: ABI_VERSION_MAJOR,
            abi_minor: ABI_VERSION_MINOR,
            role: role as u32,
            reserved: 0,
        };
        let got = c.call(Kind::Hello, 0, h.encode())?;
        if got.reply.errno != 0 {
            return Err(Failure::new(
                got.reply.errno,
                format!("{p}: the daemon refused the open: {}", got.reply.msg),
            ));
        }
        if HelloReply::decode(&got.reply.arg).is_none() {
            return Err(Failure::new(
                libc::EPROTO,
                format!("{p}: malformed HELLO reply"),
            ));
        }
        c.opened = true;
        Ok(c)
    }

    /// Whether this process is a child that inherited the open through `fork` (the socket is
    /// shared with the parent, whose replies it would steal).
    pub fn inherited(&self) -> bool {
        std::process::id() != self.pid
    }

    /// The socket's path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends one request and waits for its reply. A blocking WAIT_EVENT whose wait a signal
    /// handler (installed without `SA_RESTART`) interrupts is cancelled and fails with
    /// `EINTR`, as the kernel module's does; other calls read on through signals, as the
    /// module's do not return `EINTR` either.
    ///
    /// # Errors
    /// `EBADFD` in a child after `fork`; `ENODEV` when the connection is gone; `ETIMEDOUT`
    /// when the daemon does not answer; `EINTR` as above.
    pub fn call(&self, kind: Kind, request: u32, arg: Vec<u8>) -> Result<Incoming, Failure> {
        if self.inherited() {
            return Err(Failure::new(
                libc::EBADFD,
                "this davinci descriptor was opened by the parent process before fork; open the device again in the child".to_string(),
            ));
        }
        if self.sock_id.is_none() || sys::file_id(self.sock.as_fd().as_raw_fd()) != self.sock_id {
            let mut g = relock(self.rx.lock());
            g.dead.get_or_insert_with(|| {
                format!(
                    "{}: the library's connection descriptor was closed behind its back",
                    self.path.display()
                )
            });
        }
        let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        let frame = Request {
            kind,
            tag,
            request,
            arg,
        }
        .encode()
        .map_err(|e| Failure::new(libc::E2BIG, e.to_string()))?;
        {
            let mut g = relock(self.rx.lock());
            if let Some(why) = &g.dead {
                return Err(Failure::new(libc::ENODEV, why.clone()));
            }
            g.pending.insert(tag);
        }
        if let Err(e) = self.sock.send(&frame, &[]) {
            let mut g = relock(self.rx.lock());
            g.pending.remove(&tag);
            return Err(Failure::new(
                libc::ENODEV,
                format!("{}: cannot send to davinci-mockd: {e}", self.path.display()),
            ));
        }
        let waits = kind == Kind::Ioctl && request == DRIVER_CMD_WAIT_EVENT;
        let deadline = (!waits).then(|| Instant::now() + self.timeout);
        let mut g = relock(self.rx.lock());
        loop {
            if let Some(inc) = g.done.remove(&tag) {
                return Ok(inc);
            }
            if let Some(why) = &g.dead {
                let why = why.clone();
                g.pending.remove(&tag);
                return Err(Failure::new(libc::ENODEV, why));
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                // A reply that comes later is dropped: the tag is no longer pending.
                g.pending.remove(&tag);
                self.cv.notify_all();
                return Err(Failure::new(
                    libc::ETIMEDOUT,
                    format!(
                        "{}: davinci-mockd did not answer within {:.1} s ($DAVINCI_SOCKET_TIMEOUT sets the limit)",
                        self.path.display(),
                        self.timeout.as_secs_f64()
                    ),
                ));
            }
            if g.reading {
                g = match left {
                    Some(left) => relock(self.cv.wait_timeout(g, left)).0,
                    None => relock(self.cv.wait(g)),
                };
                continue;
            }
            g.reading = true;
            drop(g);
            let got = match left {
                Some(left) => self.recv_within(left),
                None => self.recv_one(),
            };
            g = relock(self.rx.lock());
            g.reading = false;
            match got {
                Ok(inc) => {
                    if g.pending.remove(&inc.reply.tag) {
                        g.done.insert(inc.reply.tag, inc);
                    }
                }
                Err(Recv::Interrupted) if waits && !g.done.contains_key(&tag) => {
                    g.pending.remove(&tag);
                    self.cv.notify_all();
                    drop(g);
                    self.cancel(tag);
                    return Err(Failure::new(
                        libc::EINTR,
                        "WAIT_EVENT interrupted by a signal handler".to_string(),
                    ));
                }
                Err(Recv::Interrupted) | Err(Recv::TimedOut) => {}
                Err(Recv::Dead(why)) => g.dead = Some(why),
            }
            self.cv.notify_all();
        }
    }

    /// Sends CANCEL for the wait `tag` (its reply is dropped as unasked).
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

    /// Reads one reply frame if one comes within `left` (the caller holds the reader role).
    fn recv_within(&self, left: Duration) -> Result<Incoming, Recv> {
        match self.sock.wait_readable(left) {
            Ok(true) => self.recv_one(),
            Ok(false) => Err(Recv::TimedOut),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Err(Recv::Interrupted),
            Err(e) => Err(Recv::Dead(format!(
                "{}: connection to davinci-mockd failed: {e}",
                self.path.display()
            ))),
        }
    }

    /// Reads one reply frame (the caller holds the reader role).
    fn recv_one(&self) -> Result<Incoming, Recv> {
        let p = self.path.display();
        let mut buf = relock(self.buf.lock());
        let r = self.sock.recv_interruptible(&mut buf, true).map_err(|e| {
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Recv::Interrupted;
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

impl Drop for Conn {
    fn drop(&mut self) {
        // The last descriptor of the open is closed. Closing the socket ends the open; a CLOSE
        // frame first makes that synchronous (as the module's release is: when close returns,
        // everything the open held is gone). Never from a child after fork: the socket is the
        // parent's open too, and only the child's copy of the descriptor goes.
        let idle = {
            let g = relock(self.rx.lock());
            g.dead.is_none() && !g.reading && g.pending.is_empty()
        };
        if self.opened && idle && !self.inherited() {
            let _ = self.call(Kind::Close, 0, Vec::new());
        }
    }
}
