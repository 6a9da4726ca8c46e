//! The `davinci-mockd` backend (`mock:SOCKET`): one `SOCK_SEQPACKET` connection is one open
//! of the device; ioctls travel as frames (see `davinci_mockd_proto::wire`), mmap cookies
//! come back as memfds.
//!
//! Several threads may use one open at once (a thread blocked in WAIT_EVENT does not hold up
//! another's submit): each request carries a tag, one caller at a time reads the socket and
//! hands every reply to the caller whose tag it carries.
//!
//! A new allocation's or stream's memfds come with the ALLOC_MEMORY / CREATE_STREAM reply
//! (`davinci_mockd_proto::Premapped`): they are kept (at most [`MAX_PREMAPPED`], all
//! dropped by any FREE_MEMORY, DESTROY_STREAM or DESTROY_CONTEXT) until the shim maps them,
//! which then costs no MMAP round trip. A daemon that sends none is asked with MMAP.
//!
//! Nothing waits for ever on a daemon that stopped answering: connecting gives up after
//! [`CONNECT_TIMEOUT`], and every call but WAIT_EVENT (whose wait is bounded by its own
//! timeout, or is meant to last) after the reply timeout ([`reply_timeout`]: 10 s, or
//! `$DAVINCI_SOCKET_TIMEOUT` seconds, read when the device is opened), with `ETIMEDOUT`
//! naming the socket.
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{
    Hello, HelloReply, Kind, MmapArgs, MmapReply, Premapped, Reply, Request, WireRole, MAX_PAYLOAD,
    MAX_REPLY,
};
use davinci_uapi::{
    ClientUsage, Errno, ListClientsArgs, Wire, ABI_VERSION_MAJOR, ABI_VERSION_MINOR,
    DRIVER_CMD_DESTROY_CONTEXT, DRIVER_CMD_DESTROY_STREAM, DRIVER_CMD_FREE_MEMORY,
    DRIVER_CMD_LIST_CLIENTS, DRIVER_CMD_WAIT_EVENT,
};

use super::{list_clients_arg, Backend, MapFd, Role};
use crate::error::{Error, Result};

/// How long connecting to a daemon may take (its listen backlog full: it stopped accepting).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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

/// Memfds of new objects kept for their first map, at most (the oldest go first).
pub const MAX_PREMAPPED: usize = 16;

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
struct Incoming {
    reply: Reply,
    fds: Vec<OwnedFd>,
}

#[derive(Default)]
struct Rx {
    /// Someone is blocked reading the socket.
    reading: bool,
    /// Tags sent and not yet answered.
    pending: HashSet<u32>,
    /// Replies read for callers that have not picked them up yet.
    done: HashMap<u32, Incoming>,
    /// Why the connection is unusable, once it is.
    dead: Option<String>,
    /// Callers asleep on the condition variable (no wake-up system call when none is).
    sleepers: usize,
}

impl Rx {
    /// Wakes the callers asleep on `cv`, if any.
    fn wake(&self, cv: &Condvar) {
        if self.sleepers > 0 {
            cv.notify_all();
        }
    }
}

/// An open of a device served by `davinci-mockd`.
pub(crate) struct SocketBackend {
    conn: SeqPacket,
    path: PathBuf,
    hello: HelloReply,
    next_tag: AtomicU32,
    /// The reply timeout, read when the device was opened ([`reply_timeout`]).
    limit: Duration,
    rx: Mutex<Rx>,
    cv: Condvar,
    buf: Mutex<Vec<u8>>,
    /// Memfds that came with ALLOC_MEMORY / CREATE_STREAM replies, not mapped yet.
    premapped: Mutex<Vec<(Premapped, OwnedFd)>>,
}

fn relock<T>(r: std::sync::LockResult<T>) -> T {
    // Nothing here panics while holding a lock; if something did, the state is still whole.
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn errno_of(code: i32) -> Errno {
    Errno::from_code(code).unwrap_or(Errno::EPROTO)
}

impl SocketBackend {
    /// Connects to the socket at `path` and opens the device as `role`.
    ///
    /// # Errors
    /// `ENODEV` if there is no socket or no daemon behind it, `EPERM` if the socket's
    /// permissions refuse this user, `EBUSY` (naming the holder) if a client open meets a
    /// device in exclusive use, `EPROTO` if the daemon speaks another ABI major.
    pub(crate) fn open(path: &Path, role: Role) -> Result<SocketBackend> {
        let conn = SeqPacket::connect_within(path, CONNECT_TIMEOUT)
            .map_err(|e| connect_error(path, &e))?;
        let mut s = SocketBackend {
            conn,
            path: path.to_path_buf(),
            hello: HelloReply::default(),
            next_tag: AtomicU32::new(1),
            limit: reply_timeout(),
            rx: Mutex::new(Rx::default()),
            cv: Condvar::new(),
            buf: Mutex::new(vec![0u8; MAX_REPLY + 1]),
            premapped: Mutex::new(Vec::new()),
        };
        let h = Hello {
            abi_major: ABI_VERSION_MAJOR,
            abi_minor: ABI_VERSION_MINOR,
            role: match role {
                Role::Client => WireRole::Client as u32,
                Role::Control => WireRole::Control as u32,
            },
            reserved: 0,
        };
        let got = s.call("open", Kind::Hello, 0, h.encode())?;
        if got.reply.errno != 0 {
            return Err(Error::new(
                errno_of(got.reply.errno),
                "open",
                format!("mock:{}: {}", path.display(), got.reply.msg),
            ));
        }
        s.hello = HelloReply::decode(&got.reply.arg).ok_or_else(|| {
            Error::new(
                Errno::EPROTO,
                "open",
                "malformed HELLO reply from the daemon",
            )
        })?;
        Ok(s)
    }

    /// Sends one request and waits for its reply.
    fn call(&self, op: &'static str, kind: Kind, request: u32, arg: Vec<u8>) -> Result<Incoming> {
        let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        let frame = Request {
            kind,
            tag,
            request,
            arg,
        }
        .encode()
        .map_err(|e| Error::new(Errno::E2BIG, op, e.to_string()))?;
        {
            let mut g = relock(self.rx.lock());
            if let Some(why) = &g.dead {
                return Err(Error::new(Errno::ENODEV, op, why.clone()));
            }
            g.pending.insert(tag);
        }
        if let Err(e) = self.conn.send(&frame, &[]) {
            let mut g = relock(self.rx.lock());
            g.pending.remove(&tag);
            return Err(Error::new(
                Errno::ENODEV,
                op,
                format!(
                    "mock:{}: cannot send to davinci-mockd: {e}",
                    self.path.display()
                ),
            ));
        }
        // WAIT_EVENT is bounded by its own timeout (or meant to wait); every other call by
        // the reply timeout.
        let waits = kind == Kind::Ioctl && request == DRIVER_CMD_WAIT_EVENT;
        let limit = self.limit;
        let deadline = (!waits).then(|| Instant::now() + limit);
        let mut g = relock(self.rx.lock());
        loop {
            if let Some(inc) = g.done.remove(&tag) {
                return Ok(inc);
            }
            if let Some(why) = &g.dead {
                let why = why.clone();
                g.pending.remove(&tag);
                return Err(Error::new(Errno::ENODEV, op, why));
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                // A reply that comes later is dropped: the tag is no longer pending.
                g.pending.remove(&tag);
                g.wake(&self.cv);
                return Err(Error::new(
                    Errno::ETIMEDOUT,
                    op,
                    format!(
                        "mock:{}: davinci-mockd did not answer within {:.1} s (is the daemon                          hung, or is this not a davinci-mockd socket? ${SOCKET_TIMEOUT_ENV}                          sets the limit in seconds)",
                        self.path.display(),
                        limit.as_secs_f64()
                    ),
                ));
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
            let got = match left {
                Some(left) => self.recv_within(left),
                None => self.recv_one(),
            };
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
                Err(Recv::Interrupted)
                    if kind == Kind::Ioctl
                        && request == DRIVER_CMD_WAIT_EVENT
                        && !g.done.contains_key(&tag) =>
                {
                    g.pending.remove(&tag);
                    g.wake(&self.cv);
                    drop(g);
                    self.cancel(tag);
                    return Err(Error::new(
                        Errno::EINTR,
                        op,
                        "interrupted by a signal handler on the waiting thread",
                    ));
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
            let _ = self.conn.send(&frame, &[]);
        }
    }

    /// Reads one reply frame if one comes within `left` (the caller holds the reader role).
    /// A signal handler does not end it (as a read under `SA_RESTART` would go on): it
    /// returns [`Recv::Interrupted`] and the caller looks again.
    fn recv_within(&self, left: Duration) -> std::result::Result<Incoming, Recv> {
        match self.conn.wait_readable(left) {
            Ok(true) => self.recv_one(),
            Ok(false) => Err(Recv::TimedOut),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Err(Recv::Interrupted),
            Err(e) => Err(Recv::Dead(format!(
                "mock:{}: connection to davinci-mockd failed: {e}",
                self.path.display()
            ))),
        }
    }

    /// Reads one reply frame (the caller holds the reader role).
    fn recv_one(&self) -> std::result::Result<Incoming, Recv> {
        let mut buf = relock(self.buf.lock());
        let r = self.conn.recv_interruptible(&mut buf, true).map_err(|e| {
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Recv::Interrupted;
            }
            Recv::Dead(format!(
                "mock:{}: connection to davinci-mockd failed: {e}",
                self.path.display()
            ))
        })?;
        if r.len == 0 {
            return Err(Recv::Dead(format!(
                "mock:{}: davinci-mockd closed the connection (daemon stopped?)",
                self.path.display()
            )));
        }
        if r.truncated || r.fds_dropped {
            return Err(Recv::Dead(format!(
                "mock:{}: oversized reply from davinci-mockd",
                self.path.display()
            )));
        }
        let reply = Reply::decode(&buf[..r.len])
            .map_err(|e| Recv::Dead(format!("mock:{}: bad reply: {e}", self.path.display())))?;
        if reply.nfds as usize != r.fds.len() {
            return Err(Recv::Dead(format!(
                "mock:{}: reply announced {} descriptors, {} arrived",
                self.path.display(),
                reply.nfds,
                r.fds.len()
            )));
        }
        Ok(Incoming { reply, fds: r.fds })
    }

    /// LIST_CLIENTS: the usage of every attached client. The daemon returns what it would
    /// write through the user pointer as the reply payload; no pointer is dereferenced here.
    fn list_clients_from_payload(&self) -> Result<Vec<ClientUsage>> {
        let capacity = (MAX_PAYLOAD / ClientUsage::SIZE) as u32;
        // Any non-zero base: the payload is addressed relative to it.
        let arg = list_clients_arg(1 << 12, capacity);
        let got = self.call("LIST_CLIENTS", Kind::Ioctl, DRIVER_CMD_LIST_CLIENTS, arg)?;
        if got.reply.errno != 0 {
            return Err(Error::new(
                errno_of(got.reply.errno),
                "LIST_CLIENTS",
                got.reply.msg,
            ));
        }
        let out = ListClientsArgs::from_bytes(&got.reply.arg)
            .ok_or_else(|| Error::new(Errno::EPROTO, "LIST_CLIENTS", "malformed reply argument"))?;
        let n = out.count.min(capacity) as usize;
        let entries: Vec<ClientUsage> = got
            .reply
            .payload
            .chunks_exact(ClientUsage::SIZE)
            .take(n)
            .map(ClientUsage::decode)
            .collect();
        if entries.len() != n {
            return Err(Error::new(
                Errno::EPROTO,
                "LIST_CLIENTS",
                format!("daemon reported {n} clients but sent {}", entries.len()),
            ));
        }
        Ok(entries)
    }
}

fn connect_error(path: &Path, e: &std::io::Error) -> Error {
    let p = path.display();
    match e.raw_os_error() {
        Some(libc::ENOENT) => Error::new(
            Errno::ENODEV,
            "open",
            format!("mock:{p}: no such socket (is davinci-mockd running with this --socket-dir?)"),
        ),
        Some(libc::ECONNREFUSED) => Error::new(
            Errno::ENODEV,
            "open",
            format!("mock:{p}: nobody listens on this socket (davinci-mockd stopped?)"),
        ),
        Some(libc::EACCES) | Some(libc::EPERM) => Error::new(
            Errno::EPERM,
            "open",
            format!(
                "mock:{p}: permission denied (connecting needs write permission on the socket)"
            ),
        ),
        _ if e.kind() == std::io::ErrorKind::TimedOut => Error::new(
            Errno::ETIMEDOUT,
            "open",
            format!("mock:{p}: cannot connect: {e} (is davinci-mockd hung?)"),
        ),
        _ => Error::new(
            Errno::ENODEV,
            "open",
            format!("mock:{p}: cannot connect: {e}"),
        ),
    }
}

impl fmt::Display for SocketBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "davinci-mockd device {} at mock:{}",
            self.hello.device_id,
            self.path.display()
        )
    }
}

impl Backend for SocketBackend {
    fn ioctl(&self, op: &'static str, request: u32, arg: &mut [u8]) -> Result<()> {
        if matches!(
            request,
            DRIVER_CMD_FREE_MEMORY | DRIVER_CMD_DESTROY_STREAM | DRIVER_CMD_DESTROY_CONTEXT
        ) {
            // A cookie names another object once this one is gone: no kept memfd outlives it.
            relock(self.premapped.lock()).clear();
        }
        let got = self.call(op, Kind::Ioctl, request, arg.to_vec())?;
        let r = got.reply;
        if r.errno == 0 && !got.fds.is_empty() {
            if let Some(records) = Premapped::decode_all(&r.payload, got.fds.len()) {
                let mut kept = relock(self.premapped.lock());
                kept.extend(records.into_iter().zip(got.fds));
                let over = kept.len().saturating_sub(MAX_PREMAPPED);
                kept.drain(..over);
            }
        }
        if r.arg.len() == arg.len() {
            arg.copy_from_slice(&r.arg);
        } else if r.errno == 0 {
            return Err(Error::new(
                Errno::EPROTO,
                op,
                "daemon replied with an argument of another size",
            ));
        }
        if r.errno != 0 {
            return Err(Error::new(errno_of(r.errno), op, r.msg));
        }
        Ok(())
    }

    fn map(&self, cookie: u64, len: u64) -> Result<MapFd> {
        {
            let mut kept = relock(self.premapped.lock());
            // What MMAP would check: the cookie, and a length from 1 to the object's.
            if let Some(i) = kept
                .iter()
                .position(|(p, _)| p.cookie == cookie && len != 0 && len <= p.len)
            {
                let (p, fd) = kept.remove(i);
                return Ok(MapFd {
                    fd,
                    offset: p.offset,
                });
            }
        }
        let got = self.call("mmap", Kind::Mmap, 0, MmapArgs { cookie, len }.encode())?;
        if got.reply.errno != 0 {
            return Err(Error::new(errno_of(got.reply.errno), "mmap", got.reply.msg));
        }
        let reply = MmapReply::decode(&got.reply.arg)
            .ok_or_else(|| Error::new(Errno::EPROTO, "mmap", "malformed MMAP reply"))?;
        let mut fds = got.fds.into_iter();
        match (fds.next(), fds.next()) {
            (Some(fd), None) => Ok(MapFd {
                fd,
                offset: reply.offset,
            }),
            _ => Err(Error::new(
                Errno::EPROTO,
                "mmap",
                "MMAP reply must carry exactly one descriptor",
            )),
        }
    }

    fn list_clients(&self) -> Result<Vec<ClientUsage>> {
        self.list_clients_from_payload()
    }
}

impl Drop for SocketBackend {
    fn drop(&mut self) {
        // Closing the socket closes the open; the daemon releases everything it held. A CLOSE
        // frame first makes that orderly (and synchronous) when the daemon is still there.
        let idle = {
            let g = relock(self.rx.lock());
            g.dead.is_none() && !g.reading && g.pending.is_empty()
        };
        if idle {
            let _ = self.call("close", Kind::Close, 0, Vec::new());
        }
        self.conn.shutdown();
    }
}
