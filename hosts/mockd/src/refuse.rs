//! Refusing connections the gate did not admit, off the accept loop. A refused connection's
//! HELLO is read before the `ENOSPC` reply (so the reply carries its tag, and closing leaves
//! nothing unread: closing a Unix socket with unread data resets it, and the client would
//! read `ECONNRESET` instead of why). That read may wait up to [`REFUSE_DRAIN`] for a HELLO
//! that a hostile peer never sends; done on the accept loop, a flood of such peers held every
//! new connection of the device behind 100 ms each. So the acceptor hands refusals to one
//! thread per device, which waits for up to [`MAX_REFUSING`] of them at once (one `poll`)
//! and answers each as its HELLO arrives or its time is up; past that many, a refused
//! connection is closed at once without a reply (its peer sees the end of the connection).
#![forbid(unsafe_code)]

use std::os::fd::AsFd;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::time::{Duration, Instant};

use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{Kind, Reply, Request};
use davinci_uapi::Errno;
use tracing::debug;

use crate::reply::send_reply;

/// How long a refused connection's HELLO is waited for.
pub(crate) const REFUSE_DRAIN: Duration = Duration::from_millis(100);
/// Refused connections waited on at once; more are closed without a reply.
pub(crate) const MAX_REFUSING: usize = 256;

/// The acceptor's end: hands a refused connection to the device's refusing thread.
pub(crate) struct Refuser {
    tx: SyncSender<(SeqPacket, &'static str)>,
}

impl Refuser {
    /// Starts the refusing thread of device `name`; it ends when this is dropped.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub(crate) fn start(name: &str) -> std::io::Result<Refuser> {
        let (tx, rx) = sync_channel(MAX_REFUSING);
        std::thread::Builder::new()
            .name(format!("{name}-refuse"))
            .spawn(move || run(&rx))?;
        Ok(Refuser { tx })
    }

    /// Refuses `conn` for `why` (answered by the refusing thread, or closed now if it has as
    /// many as it takes).
    pub(crate) fn refuse(&self, conn: SeqPacket, why: &'static str) {
        match self.tx.try_send((conn, why)) {
            Ok(()) => {}
            Err(TrySendError::Full((conn, _)) | TrySendError::Disconnected((conn, _))) => {
                debug!(
                    why,
                    "refusing too many connections at once: closed without a reply"
                );
                drop(conn);
            }
        }
    }
}

struct Pending {
    conn: SeqPacket,
    why: &'static str,
    until: Instant,
}

fn run(rx: &Receiver<(SeqPacket, &'static str)>) {
    let mut pending: Vec<Pending> = Vec::new();
    let mut open = true;
    loop {
        if pending.is_empty() {
            if !open {
                return;
            }
            match rx.recv() {
                Ok((conn, why)) => pending.push(Pending {
                    conn,
                    why,
                    until: Instant::now() + REFUSE_DRAIN,
                }),
                Err(_) => return,
            }
        }
        while open {
            match rx.try_recv() {
                Ok((conn, why)) if pending.len() < MAX_REFUSING => pending.push(Pending {
                    conn,
                    why,
                    until: Instant::now() + REFUSE_DRAIN,
                }),
                Ok(_) => {}
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => open = false,
            }
        }
        let readable = wait_readable(&pending);
        let now = Instant::now();
        let done: Vec<usize> = (0..pending.len())
            .filter(|&i| readable.get(i).copied().unwrap_or(false) || pending[i].until <= now)
            .collect();
        // Highest first: what `swap_remove` moves into a slot was looked at already.
        for i in done.into_iter().rev() {
            let p = pending.swap_remove(i);
            answer(&p.conn, p.why);
        }
    }
}

/// Waits until one of `pending` is readable (a HELLO, or the peer's end) or the nearest
/// deadline: which are readable.
fn wait_readable(pending: &[Pending]) -> Vec<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let now = Instant::now();
    let nearest = pending
        .iter()
        .map(|p| p.until.saturating_duration_since(now))
        .min()
        .unwrap_or(Duration::ZERO);
    let mut fds: Vec<PollFd<'_>> = pending
        .iter()
        .map(|p| PollFd::new(p.conn.as_fd(), PollFlags::POLLIN))
        .collect();
    let ms = u16::try_from(nearest.as_millis().saturating_add(1)).unwrap_or(u16::MAX);
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(n) if n > 0 => fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect(),
        _ => vec![false; pending.len()],
    }
}

/// Reads what the peer sent (if anything, without waiting) and answers `ENOSPC` with its tag.
fn answer(conn: &SeqPacket, why: &str) {
    let mut buf = [0u8; 64];
    let tag = match conn.set_recv_timeout(Some(Duration::from_micros(1))) {
        // Truncated or not, the first frame is consumed; its tag is in its first bytes.
        Ok(()) => match conn.recv(&mut buf, false) {
            Ok(r) if r.len > 0 => Request::peek_tag(&buf[..r.len.min(buf.len())]),
            _ => 0,
        },
        Err(_) => 0,
    };
    let r = Reply::err(Kind::Hello as u16, tag, Errno::ENOSPC, why);
    send_reply(conn, &r, None);
}
