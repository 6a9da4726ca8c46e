//! `SOCK_SEQPACKET` Unix sockets for the `davinci-mockd` protocol: listen, connect, send and
//! receive one frame with its file descriptors (`SCM_RIGHTS`), peer credentials.
//!
//! The daemon receives with no control buffer, so descriptors a client tries to pass are
//! never installed (the kernel drops them and reports `MSG_CTRUNC`).
//
// The only `unsafe` here adopts descriptors the kernel just installed (accept4, SCM_RIGHTS).
#![allow(unsafe_code)]

use std::io;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::sys::socket::{
    accept4, bind, connect, getsockopt, listen, recvmsg, sendmsg, shutdown, socket, sockopt,
    AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, Shutdown, SockFlag,
    SockType, UnixAddr,
};

use crate::wire::MAX_FDS;

fn nix_io(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Credentials of the peer process as the kernel recorded them at `connect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// One received frame.
#[derive(Debug)]
pub struct Received {
    /// Bytes received (the frame is `buf[..len]`); 0 means the peer closed.
    pub len: usize,
    /// Descriptors that came with it (only when receiving with fds allowed).
    pub fds: Vec<OwnedFd>,
    /// The frame was longer than the buffer (the rest is lost).
    pub truncated: bool,
    /// The peer sent descriptors that were not accepted (or did not fit).
    pub fds_dropped: bool,
}

/// A connected `SOCK_SEQPACKET` socket.
#[derive(Debug)]
pub struct SeqPacket {
    fd: OwnedFd,
}

/// A new close-on-exec `SOCK_SEQPACKET` Unix socket and the address of `path`.
fn seqpacket_socket(path: &Path) -> io::Result<(OwnedFd, UnixAddr)> {
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(nix_io)?;
    let addr = UnixAddr::new(path).map_err(nix_io)?;
    Ok((fd, addr))
}

impl SeqPacket {
    /// Connects to the socket at `path`.
    ///
    /// # Errors
    /// The `connect(2)` error (`ENOENT`: no socket there; `ECONNREFUSED`: no daemon).
    pub fn connect(path: &Path) -> io::Result<SeqPacket> {
        let (fd, addr) = seqpacket_socket(path)?;
        loop {
            match connect(fd.as_raw_fd(), &addr) {
                Ok(()) => return Ok(SeqPacket { fd }),
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(nix_io(e)),
            }
        }
    }

    /// Connects to the socket at `path`, giving up after `timeout` (a daemon whose listen
    /// backlog is full because it stopped accepting: a blocking `connect` would wait for
    /// ever).
    ///
    /// # Errors
    /// The `connect(2)` error; [`io::ErrorKind::TimedOut`] when the backlog stayed full.
    pub fn connect_within(path: &Path, timeout: std::time::Duration) -> io::Result<SeqPacket> {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        let (fd, addr) = seqpacket_socket(path)?;
        let flags = OFlag::from_bits_retain(fcntl(&fd, FcntlArg::F_GETFL).map_err(nix_io)?);
        fcntl(&fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).map_err(nix_io)?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match connect(fd.as_raw_fd(), &addr) {
                Ok(()) => break,
                Err(nix::Error::EINTR) => continue,
                // A Unix socket's backlog is full: the daemon is not accepting (now).
                Err(nix::Error::EAGAIN) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(nix::Error::EAGAIN) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the daemon accepted no connection within {} ms (its backlog is full)",
                            timeout.as_millis()
                        ),
                    ))
                }
                Err(e) => return Err(nix_io(e)),
            }
        }
        fcntl(&fd, FcntlArg::F_SETFL(flags)).map_err(nix_io)?;
        Ok(SeqPacket { fd })
    }

    /// Waits until a frame (or the peer's close) can be read, at most `timeout`: `Ok(true)`
    /// when it can, `Ok(false)` when the time ran out.
    ///
    /// # Errors
    /// `poll(2)` errors; `EINTR` ([`io::ErrorKind::Interrupted`]) when a signal handler ran,
    /// whether or not it was installed with `SA_RESTART` (poll is never restarted).
    pub fn wait_readable(&self, timeout: std::time::Duration) -> io::Result<bool> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        let n = poll(&mut fds, PollTimeout::from(ms)).map_err(nix_io)?;
        Ok(n > 0)
    }

    /// A connected pair (for tests).
    ///
    /// # Errors
    /// `socketpair(2)` errors.
    pub fn pair() -> io::Result<(SeqPacket, SeqPacket)> {
        let (a, b) = nix::sys::socket::socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(nix_io)?;
        Ok((SeqPacket { fd: a }, SeqPacket { fd: b }))
    }

    /// Sends one frame with `fds` attached.
    ///
    /// # Errors
    /// `sendmsg(2)` errors (`EPIPE` once the peer is gone; `EMSGSIZE` for an oversized frame).
    pub fn send(&self, frame: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        self.send_flags(frame, fds, MsgFlags::MSG_NOSIGNAL)
    }

    /// Sends one frame without descriptors, never blocking: `WouldBlock` when the peer's
    /// receive queue is full (a peer that does not read its replies), for a sender that
    /// serves many peers.
    ///
    /// # Errors
    /// `sendmsg(2)` errors, `WouldBlock` among them.
    pub fn send_nowait(&self, frame: &[u8]) -> io::Result<()> {
        self.send_flags(frame, &[], MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT)
    }

    fn send_flags(&self, frame: &[u8], fds: &[BorrowedFd<'_>], flags: MsgFlags) -> io::Result<()> {
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let cmsg = [ControlMessage::ScmRights(&raw)];
        let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &cmsg };
        let iov = [IoSlice::new(frame)];
        loop {
            match sendmsg::<UnixAddr>(self.fd.as_raw_fd(), &iov, cmsgs, flags, None) {
                Ok(n) if n == frame.len() => return Ok(()),
                Ok(_) => return Err(io::Error::other("short send of a seqpacket frame")),
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(nix_io(e)),
            }
        }
    }

    /// After a `recv` of 0 bytes: whether the peer closed (or shut down) its end, rather than
    /// sent an empty frame (a `SOCK_SEQPACKET` read gives 0 bytes for both).
    pub fn peer_closed(&self) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        // nix names no POLLRDHUP (Linux: the peer shut down its writing end, or closed).
        let rdhup = PollFlags::from_bits_retain(nix::libc::POLLRDHUP);
        let hup = PollFlags::POLLHUP | PollFlags::POLLERR;
        let mut fds = [PollFd::new(self.fd.as_fd(), rdhup)];
        match poll(&mut fds, PollTimeout::ZERO) {
            // `revents()` is `None` when the kernel set a flag nix does not know, which only
            // POLLRDHUP (asked for above) can be.
            Ok(_) => fds[0].revents().is_none_or(|r| r.intersects(hup)),
            Err(_) => true,
        }
    }

    /// Receives one frame into `buf` (its length is the largest frame accepted). With
    /// `accept_fds`, up to [`MAX_FDS`] descriptors are installed (close-on-exec) and returned;
    /// without, any the peer sent are discarded by the kernel and `fds_dropped` is set.
    ///
    /// # Errors
    /// `recvmsg(2)` errors.
    pub fn recv(&self, buf: &mut [u8], accept_fds: bool) -> io::Result<Received> {
        self.recv_with(buf, accept_fds, true, MsgFlags::empty())
    }

    /// Like [`recv`](Self::recv), but never blocks: [`io::ErrorKind::WouldBlock`] when no
    /// frame is there yet (`MSG_DONTWAIT`), for a caller that looks a few times before it
    /// sleeps.
    ///
    /// # Errors
    /// `recvmsg(2)` errors, `WouldBlock` among them.
    pub fn recv_nowait(&self, buf: &mut [u8], accept_fds: bool) -> io::Result<Received> {
        self.recv_with(buf, accept_fds, true, MsgFlags::MSG_DONTWAIT)
    }

    /// Looks for a frame without blocking, again and again (yielding between looks), for up
    /// to `within`, stopping early once this thread is preempted (an involuntary context switch: the machine has no
    /// core to spare for spinning): `None` if none came, else what [`recv_nowait`] got.
    /// A frame that comes while the peer is still running saves this thread a sleep and a
    /// wake-up (and the peer the wake).
    ///
    /// [`recv_nowait`]: Self::recv_nowait
    pub fn recv_soon(
        &self,
        buf: &mut [u8],
        accept_fds: bool,
        within: std::time::Duration,
    ) -> Option<io::Result<Received>> {
        let switches = || {
            nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)
                .map_or(0, |u| u.involuntary_context_switches())
        };
        let start = std::time::Instant::now();
        let sw0 = switches();
        let mut looks = 0u32;
        loop {
            match self.recv_nowait(buf, accept_fds) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                got => return Some(got),
            }
            looks = looks.wrapping_add(1);
            if looks.is_multiple_of(4) && (start.elapsed() >= within || switches() != sw0) {
                return None;
            }
            // Not a pause but a yield: when the peer waits for this very core (the machine
            // is busy and put both here), it runs now rather than when this spin ends; with
            // nobody else runnable here the yield returns at once.
            std::thread::yield_now();
        }
    }

    /// Like [`recv`](Self::recv), but a signal handler that interrupts the wait (one
    /// installed without `SA_RESTART`: the kernel restarts the call for the others) ends it
    /// with an [`io::ErrorKind::Interrupted`] error, for a caller whose blocking calls a signal
    /// should end.
    ///
    /// # Errors
    /// `recvmsg(2)` errors, `EINTR` among them.
    pub fn recv_interruptible(&self, buf: &mut [u8], accept_fds: bool) -> io::Result<Received> {
        self.recv_with(buf, accept_fds, false, MsgFlags::empty())
    }

    fn recv_with(
        &self,
        buf: &mut [u8],
        accept_fds: bool,
        restart: bool,
        flags: MsgFlags,
    ) -> io::Result<Received> {
        let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
        loop {
            let mut iov = [IoSliceMut::new(buf)];
            let cmsg_buf = if accept_fds {
                Some(&mut space[..])
            } else {
                None
            };
            let msg = match recvmsg::<UnixAddr>(
                self.fd.as_raw_fd(),
                &mut iov,
                cmsg_buf,
                MsgFlags::MSG_CMSG_CLOEXEC | flags,
            ) {
                Ok(m) => m,
                Err(nix::Error::EINTR) if restart => continue,
                Err(e) => return Err(nix_io(e)),
            };
            let mut out = Received {
                len: msg.bytes,
                fds: Vec::new(),
                truncated: msg.flags.contains(MsgFlags::MSG_TRUNC),
                fds_dropped: msg.flags.contains(MsgFlags::MSG_CTRUNC),
            };
            if accept_fds {
                if let Ok(cmsgs) = msg.cmsgs() {
                    for c in cmsgs {
                        if let ControlMessageOwned::ScmRights(fds) = c {
                            for fd in fds {
                                // SAFETY: the kernel just installed `fd` in this process's
                                // descriptor table for this message; nothing else knows it,
                                // so it is open and this is its only owner.
                                out.fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                            }
                        }
                    }
                }
            }
            return Ok(out);
        }
    }

    /// Credentials of the peer (`SO_PEERCRED`).
    ///
    /// # Errors
    /// `getsockopt(2)` errors.
    pub fn peer_cred(&self) -> io::Result<PeerCred> {
        let c = getsockopt(&self.fd, sockopt::PeerCredentials).map_err(nix_io)?;
        Ok(PeerCred {
            pid: c.pid() as u32,
            uid: c.uid(),
            gid: c.gid(),
        })
    }

    /// A pidfd of the process that connected (`SO_PEERPIDFD`, Linux 6.5): it names that
    /// process even after its pid is reused, and polls readable once it has exited.
    ///
    /// # Errors
    /// `getsockopt(2)` errors: `ENOPROTOOPT` before Linux 6.5, `ESRCH` when the process that
    /// connected is already gone.
    pub fn peer_pidfd(&self) -> io::Result<OwnedFd> {
        getsockopt(&self.fd, sockopt::PeerPidfd).map_err(nix_io)
    }

    /// Bounds how long `recv` blocks (`None`: forever). A timed-out `recv` fails with
    /// `WouldBlock`.
    ///
    /// # Errors
    /// `setsockopt(2)` errors.
    pub fn set_recv_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        use nix::sys::time::TimeVal;
        let tv = match t {
            None => TimeVal::new(0, 0),
            // A zero timeval would mean "forever": round a zero duration up to 1 µs.
            Some(d) if d.is_zero() => TimeVal::new(0, 1),
            Some(d) => TimeVal::new(
                d.as_secs().min(i32::MAX as u64) as _,
                d.subsec_micros() as _,
            ),
        };
        nix::sys::socket::setsockopt(&self.fd, sockopt::ReceiveTimeout, &tv).map_err(nix_io)
    }

    /// Shuts both directions down (wakes a thread blocked in `recv` on this socket).
    pub fn shutdown(&self) {
        let _ = shutdown(self.fd.as_raw_fd(), Shutdown::Both);
    }

    /// A duplicate of this socket on a descriptor numbered `min` or above (close-on-exec):
    /// for a library that keeps a connection of its own inside a program and leaves the low
    /// numbers to it (it then drops the original).
    ///
    /// # Errors
    /// `fcntl(F_DUPFD_CLOEXEC)` errors (`EINVAL`: `min` is not below `RLIMIT_NOFILE`;
    /// `EMFILE`).
    pub fn duplicate_at_least(&self, min: RawFd) -> io::Result<SeqPacket> {
        use nix::fcntl::{fcntl, FcntlArg};
        let raw = fcntl(&self.fd, FcntlArg::F_DUPFD_CLOEXEC(min)).map_err(nix_io)?;
        // SAFETY: F_DUPFD_CLOEXEC just installed `raw` as a new descriptor of this socket;
        // nothing else knows the number, so this is its only owner.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(SeqPacket { fd })
    }
}

impl AsFd for SeqPacket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A listening `SOCK_SEQPACKET` socket bound to a path; the path is removed on drop.
#[derive(Debug)]
pub struct SeqListener {
    fd: OwnedFd,
    path: PathBuf,
}

impl SeqListener {
    /// Binds `path` (removing a stale socket file there first) with permissions `mode`.
    ///
    /// # Errors
    /// `EADDRINUSE` if a live daemon already listens there; other `bind`/`listen` errors;
    /// `EEXIST` if `path` exists and is not a socket.
    pub fn bind(path: &Path, mode: u32) -> io::Result<SeqListener> {
        use std::os::unix::fs::FileTypeExt;
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ));
            }
            // A socket file: live if someone accepts connections on it.
            if SeqPacket::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{}: another daemon is listening there", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let (fd, addr) = seqpacket_socket(path)?;
        bind(fd.as_raw_fd(), &addr).map_err(nix_io)?;
        let listener = SeqListener {
            fd,
            path: path.to_path_buf(),
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        let backlog = Backlog::new(128).map_err(nix_io)?;
        listen(&listener.fd, backlog).map_err(nix_io)?;
        Ok(listener)
    }

    /// The bound path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts one connection (retrying on `EINTR` and on transient per-connection errors).
    ///
    /// # Errors
    /// Errors that say the listener itself is broken or shut down (`EINVAL`, `EBADF`).
    pub fn accept(&self) -> io::Result<SeqPacket> {
        loop {
            match accept4(self.fd.as_raw_fd(), SockFlag::SOCK_CLOEXEC) {
                Ok(raw) => {
                    // SAFETY: accept4 returned a new descriptor that this process now owns
                    // and nothing else refers to.
                    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
                    return Ok(SeqPacket { fd });
                }
                Err(
                    nix::Error::EINTR
                    | nix::Error::ECONNABORTED
                    | nix::Error::EPROTO
                    | nix::Error::EMFILE
                    | nix::Error::ENFILE
                    | nix::Error::ENOBUFS
                    | nix::Error::ENOMEM,
                ) => {
                    // Out of descriptors or memory: back off instead of spinning.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
                Err(e) => return Err(nix_io(e)),
            }
        }
    }

    /// Stops accepting: a thread blocked in [`accept`](Self::accept) returns an error.
    pub fn shutdown(&self) {
        let _ = shutdown(self.fd.as_raw_fd(), Shutdown::Both);
    }
}

impl Drop for SeqListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_empty_frame_and_a_hang_up_read_alike_and_peer_closed_tells_them_apart() {
        let (a, b) = SeqPacket::pair().unwrap();
        let mut buf = [0u8; 16];
        b.send(&[], &[]).unwrap();
        assert_eq!(a.recv(&mut buf, false).unwrap().len, 0);
        assert!(!a.peer_closed(), "an empty frame is not a hang-up");
        b.send(b"x", &[]).unwrap();
        drop(b);
        assert_eq!(a.recv(&mut buf, false).unwrap().len, 1);
        assert_eq!(a.recv(&mut buf, false).unwrap().len, 0);
        assert!(a.peer_closed(), "the peer hung up");
        // A peer that only stopped writing has ended the connection too.
        let (a, b) = SeqPacket::pair().unwrap();
        nix::sys::socket::shutdown(b.fd.as_raw_fd(), nix::sys::socket::Shutdown::Write).unwrap();
        assert_eq!(a.recv(&mut buf, false).unwrap().len, 0);
        assert!(a.peer_closed(), "the peer shut down its writing end");
    }

    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::time::{Duration, Instant};

    /// A listener that never accepts: connects succeed until its backlog is full, then
    /// `connect_within` gives up after its timeout instead of blocking for ever; a
    /// connection nobody answers is readable only when the peer writes.
    #[test]
    fn connecting_to_a_full_backlog_times_out_and_silence_is_not_readable() {
        let dir = std::env::temp_dir().join(format!("sockio-backlog-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("d.sock");
        let _ = std::fs::remove_file(&path);
        let listener = SeqListener::bind(&path, 0o600).unwrap();
        let mut held = Vec::new();
        let t = Duration::from_millis(100);
        let timed_out = loop {
            match SeqPacket::connect_within(&path, t) {
                Ok(c) => held.push(c),
                Err(e) => break e,
            }
            assert!(held.len() < 10_000, "the backlog never filled");
        };
        assert_eq!(timed_out.kind(), io::ErrorKind::TimedOut, "{timed_out}");
        assert!(!held.is_empty());
        // A connected socket whose peer says nothing: not readable within the wait.
        let start = Instant::now();
        assert!(!held[0].wait_readable(Duration::from_millis(50)).unwrap());
        assert!(start.elapsed() >= Duration::from_millis(50));
        let (a, b) = SeqPacket::pair().unwrap();
        b.send(b"x", &[]).unwrap();
        assert!(a.wait_readable(Duration::from_secs(5)).unwrap());
        drop(listener);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn frames_and_fds_cross_a_pair() {
        let (a, b) = SeqPacket::pair().unwrap();
        let mut f = tempfile_like();
        f.write_all(b"hello fd").unwrap();
        a.send(b"frame-one", &[f.as_fd()]).unwrap();
        a.send(b"two", &[]).unwrap();
        let mut buf = [0u8; 64];
        let r = b.recv(&mut buf, true).unwrap();
        assert_eq!(&buf[..r.len], b"frame-one");
        assert_eq!(r.fds.len(), 1);
        let mut got = std::fs::File::from(r.fds.into_iter().next().unwrap());
        got.seek(SeekFrom::Start(0)).unwrap();
        let mut s = String::new();
        got.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello fd");
        let r = b.recv(&mut buf, true).unwrap();
        assert_eq!((&buf[..r.len], r.fds.len()), (&b"two"[..], 0));
        let me = b.peer_cred().unwrap();
        assert_eq!(me.pid, std::process::id());
    }

    #[test]
    fn oversized_frames_and_unwanted_fds_are_flagged() {
        let (a, b) = SeqPacket::pair().unwrap();
        let f = tempfile_like();
        a.send(&[7u8; 100], &[f.as_fd()]).unwrap();
        let mut small = [0u8; 10];
        let r = b.recv(&mut small, false).unwrap();
        assert!(r.truncated);
        assert!(r.fds_dropped);
        assert!(r.fds.is_empty());
        drop(a);
        let r = b.recv(&mut small, false).unwrap();
        assert_eq!(r.len, 0, "EOF after the peer closed");
    }

    #[test]
    fn listener_binds_accepts_and_cleans_up() {
        let dir = std::env::temp_dir().join(format!("davinci-sockio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("davinci0.sock");
        let l = SeqListener::bind(&path, 0o660).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        // A second daemon on the same path is refused.
        let e = SeqListener::bind(&path, 0o660).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        // The liveness probe of the refused bind was a connection: it arrives closed.
        let probe = l.accept().unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(probe.recv(&mut buf, false).unwrap().len, 0);
        let c = SeqPacket::connect(&path).unwrap();
        let s = l.accept().unwrap();
        c.send(b"x", &[]).unwrap();
        assert_eq!(s.recv(&mut buf, false).unwrap().len, 1);
        drop(l);
        assert!(!path.exists());
        // A stale socket file (bound, nobody listening: a killed daemon) is replaced.
        let stale = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind(stale.as_raw_fd(), &UnixAddr::new(&path).unwrap()).unwrap();
        drop(stale);
        assert!(path.exists());
        let l = SeqListener::bind(&path, 0o660).unwrap();
        drop(l);
        // A non-socket file is never removed.
        std::fs::write(&path, b"not a socket").unwrap();
        assert_eq!(
            SeqListener::bind(&path, 0o660).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert!(path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_like() -> std::fs::File {
        let fd =
            nix::sys::memfd::memfd_create(c"sockio-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
                .unwrap();
        std::fs::File::from(fd)
    }
}
