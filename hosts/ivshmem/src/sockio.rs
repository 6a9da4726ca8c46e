//! One protocol message on a Unix stream socket: an 8-byte little-endian signed number,
//! with at most one descriptor in `SCM_RIGHTS`. Sends never block (a peer that does not read
//! is the caller's problem to drop, never a server stuck in `sendmsg`).
// The only `unsafe` here adopts descriptors the kernel just installed (SCM_RIGHTS).
#![allow(unsafe_code)]

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    recv, recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr,
};

/// Bytes in one message.
pub const MSG_LEN: usize = 8;

/// Sends `value` (little-endian) with `fd` attached, if any, without blocking.
///
/// # Errors
/// `sendmsg(2)`'s errno (`EAGAIN`: the peer's receive buffer is full; `EPIPE`: it closed);
/// `EMSGSIZE` for a short send (the message would arrive split from its descriptor).
pub fn send_msg(sock: BorrowedFd<'_>, value: i64, fd: Option<BorrowedFd<'_>>) -> nix::Result<()> {
    let bytes = value.to_le_bytes();
    let iov = [IoSlice::new(&bytes)];
    let raw: [RawFd; 1] = [fd.map_or(-1, |f| f.as_raw_fd())];
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if fd.is_some() { &cmsg } else { &[] };
    let sent = sendmsg::<UnixAddr>(
        sock.as_raw_fd(),
        &iov,
        cmsgs,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    if sent != MSG_LEN {
        return Err(Errno::EMSGSIZE);
    }
    Ok(())
}

/// Waits up to `timeout` for `fd` to be readable (or hung up). `Ok(false)` on timeout.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> nix::Result<bool> {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let t = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
    loop {
        match poll(&mut fds, t) {
            Ok(n) => return Ok(n > 0),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// What [`recv_msg`] read.
#[derive(Debug)]
pub enum Received {
    /// A whole message, with the first descriptor that came with it (any others were
    /// closed).
    Msg(i64, Option<OwnedFd>),
    /// The other side closed the connection (possibly in the middle of a message).
    Eof,
    /// Nothing within the timeout.
    Timeout,
}

/// Reads one whole message (its 8 bytes may arrive in pieces), waiting at most `timeout`
/// in all.
///
/// # Errors
/// `poll(2)`'s or `recvmsg(2)`'s errno.
pub fn recv_msg(sock: BorrowedFd<'_>, timeout: Duration) -> nix::Result<Received> {
    let deadline = Instant::now() + timeout;
    let mut bytes = [0u8; MSG_LEN];
    let mut got = 0;
    let mut fd: Option<OwnedFd> = None;
    while got < MSG_LEN {
        let left = deadline.saturating_duration_since(Instant::now());
        if !wait_readable(sock, left)? {
            return Ok(Received::Timeout);
        }
        // Room for a few descriptors: a misbehaving sender's extras are adopted and closed
        // rather than left installed in this process.
        let mut cmsg = nix::cmsg_space!([RawFd; 4]);
        let (n, fds) = {
            let mut iov = [IoSliceMut::new(&mut bytes[got..])];
            let msg = match recvmsg::<UnixAddr>(
                sock.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(m) => m,
                Err(Errno::EAGAIN | Errno::EINTR) => continue,
                Err(e) => return Err(e),
            };
            let mut fds = Vec::new();
            for c in msg.cmsgs()? {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    for r in raw {
                        // SAFETY: the kernel installed `r` in this process's table for this
                        // SCM_RIGHTS message just now; nothing else owns it.
                        fds.push(unsafe { OwnedFd::from_raw_fd(r) });
                    }
                }
            }
            (msg.bytes, fds)
        };
        if n == 0 {
            return Ok(Received::Eof);
        }
        got += n;
        for f in fds {
            if fd.is_none() {
                fd = Some(f);
            } // else: dropped, closed
        }
    }
    Ok(Received::Msg(i64::from_le_bytes(bytes), fd))
}

/// What a peer that should never send anything did, seen by [`drain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// Nothing to read.
    Nothing,
    /// The peer closed its end.
    Eof,
    /// The peer sent bytes (any descriptors with them were closed unread).
    Data(usize),
}

/// Reads what is pending on `sock` without blocking.
///
/// # Errors
/// `recv(2)`'s errno (`ECONNRESET` and the like: the peer is gone too).
pub fn drain(sock: impl AsFd) -> nix::Result<Input> {
    let mut buf = [0u8; 64];
    loop {
        match recv(sock.as_fd().as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => return Ok(Input::Eof),
            Ok(n) => return Ok(Input::Data(n)),
            Err(Errno::EAGAIN) => return Ok(Input::Nothing),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}
