//! [`Server`]: the ivshmem server that is itself peer 0, the device.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use davinci_shm::SharedMapping;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::error::{Error, Result};
use crate::memory::{libc_eio, SharedMemory, ShmSpec};
use crate::sockio::{drain, send_msg, wait_readable, Input};
use crate::{PeerId, MAX_PEERS, MAX_VECTORS, PROTOCOL_VERSION, SERVER_ID};

/// One connected peer (a QEMU process): its connection and the eventfds that interrupt it,
/// one per vector.
#[derive(Debug)]
struct Peer {
    id: PeerId,
    sock: UnixStream,
    vectors: Vec<EventFd>,
}

/// Why a peer was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// It closed its connection (QEMU exited or dropped the chardev).
    Closed,
    /// It sent bytes: peers never send anything in this protocol.
    SentData,
    /// A message to it could not be sent (its receive buffer was full, or the socket
    /// failed): the errno.
    SendFailed(Errno),
    /// Reading its socket failed: the errno.
    RecvFailed(Errno),
}

/// What [`Server::wait`] saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Activity {
    /// Per vector, the doorbells that arrived for peer 0 since the last read (an eventfd
    /// counts writes; several doorbells may arrive as one count).
    pub doorbells: Vec<u64>,
    /// Peers removed, and why. The others have been told.
    pub gone: Vec<(PeerId, Gone)>,
    /// A client is waiting to connect: [`Server::accept_peer`] takes it without waiting.
    pub connecting: bool,
}

/// The ivshmem server and peer 0: owns the listening socket, the shared memory and peer 0's
/// eventfds (one per vector: the guest's doorbell writes of `0 << 16 | vector` arrive on
/// them), and every connected peer's eventfds (writing one raises that vector in that
/// peer's guest).
#[derive(Debug)]
pub struct Server {
    path: PathBuf,
    listener: UnixListener,
    memory: SharedMemory,
    doorbells: Vec<EventFd>,
    peers: Vec<Peer>,
    /// Peers removed outside [`Server::wait`] (a failed send while another connected),
    /// reported by the next `wait`. Bounded: the oldest are dropped past `MAX_PENDING_GONE`.
    pending_gone: Vec<(PeerId, Gone)>,
    /// Peers connected at once, at most ([`Server::limit_peers`]; [`MAX_PEERS`] unless set).
    max_peers: usize,
}

/// The removals kept for the next [`Server::wait`].
const MAX_PENDING_GONE: usize = 4 * MAX_PEERS;

fn eventfd(what: &str) -> Result<EventFd> {
    EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
        .map_err(|e| Error::sys(format!("eventfd for {what}"), e))
}

fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc_eio()))
}

impl Server {
    /// Creates the shared memory and peer 0's `vectors` eventfds, and listens on `path` (a
    /// Unix socket; the path must not exist).
    ///
    /// # Errors
    /// [`Error::BadSpec`] for a size [`ShmSpec::check`] refuses or a vector count outside
    /// `1..=`[`MAX_VECTORS`]; [`Error::Sys`] for a call that failed (`EADDRINUSE`: the path
    /// exists).
    pub fn bind(path: impl AsRef<Path>, spec: ShmSpec, vectors: u16) -> Result<Server> {
        let path = path.as_ref().to_path_buf();
        if vectors == 0 || vectors > MAX_VECTORS {
            return Err(Error::BadSpec(format!(
                "{vectors} vectors: between 1 and {MAX_VECTORS} are served"
            )));
        }
        let memory = SharedMemory::create(spec)?;
        let doorbells = (0..vectors)
            .map(|v| eventfd(&format!("peer 0 vector {v}")))
            .collect::<Result<Vec<_>>>()?;
        let listener = UnixListener::bind(&path)
            .map_err(|e| Error::sys(format!("bind {}", path.display()), io_errno(&e)))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::sys("O_NONBLOCK on the listening socket", io_errno(&e)))?;
        Ok(Server {
            path,
            listener,
            memory,
            doorbells,
            peers: Vec::new(),
            pending_gone: Vec::new(),
            max_peers: MAX_PEERS,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Vectors per peer.
    pub fn vectors(&self) -> u16 {
        // `bind` took a u16 and made exactly that many.
        u16::try_from(self.doorbells.len()).unwrap_or(MAX_VECTORS)
    }

    /// This process's mapping of the shared memory (the guest's BAR2).
    pub fn shared(&self) -> &SharedMapping {
        self.memory.mapping()
    }

    /// The shared memory's descriptor.
    pub fn shared_fd(&self) -> BorrowedFd<'_> {
        self.memory.fd()
    }

    /// Peer 0's eventfds, one per vector: a guest's write of `0 << 16 | vector` to its
    /// Doorbell register (BAR0 offset 12) signals `doorbells()[vector]`. Nonblocking; read
    /// one to take its count (`EAGAIN`: none), or poll them together with
    /// [`Server::wait`].
    pub fn doorbells(&self) -> &[EventFd] {
        &self.doorbells
    }

    /// Serves at most `max` peers at once (1..=[`MAX_PEERS`]; [`MAX_PEERS`] until set). A
    /// client that connects while `max` are connected is refused by
    /// [`accept_peer`](Self::accept_peer) before anything is sent to it: its connection is
    /// closed unread, so it never receives the shared memory nor any eventfd, and the
    /// connected peers hear nothing of it. A lower limit than the peers connected now removes
    /// none of them; it applies to the next connection.
    ///
    /// # Errors
    /// [`Error::BadSpec`] for a `max` outside `1..=`[`MAX_PEERS`] (the limit is unchanged).
    pub fn limit_peers(&mut self, max: usize) -> Result<()> {
        if max == 0 || max > MAX_PEERS {
            return Err(Error::BadSpec(format!(
                "a limit of {max} peers: between 1 and {MAX_PEERS} are served"
            )));
        }
        self.max_peers = max;
        Ok(())
    }

    /// The most peers served at once ([`Server::limit_peers`]).
    pub fn peer_limit(&self) -> usize {
        self.max_peers
    }

    /// The connected peers, in the order they connected.
    pub fn peers(&self) -> Vec<PeerId> {
        self.peers.iter().map(|p| p.id).collect()
    }

    /// Raises `vector` in `peer`'s guest: writes that peer's eventfd for the vector, which
    /// QEMU turns into MSI-X vector `vector` (if the guest enabled MSI-X; QEMU drops it
    /// otherwise).
    ///
    /// # Errors
    /// [`Error::NoSuchPeer`], [`Error::NoSuchVector`]; the `write(2)` errno otherwise.
    pub fn interrupt(&self, peer: PeerId, vector: u16) -> Result<()> {
        let p = self
            .peers
            .iter()
            .find(|p| p.id == peer)
            .ok_or(Error::NoSuchPeer(peer))?;
        let fd = p
            .vectors
            .get(usize::from(vector))
            .ok_or(Error::NoSuchVector {
                vector,
                vectors: self.vectors(),
            })?;
        match fd.write(1) {
            Ok(_) => Ok(()),
            // The counter is at its maximum: the interrupt is pending anyway.
            Err(Errno::EAGAIN) => Ok(()),
            Err(e) => Err(Error::sys(
                format!("write to peer {peer}'s eventfd for vector {vector}"),
                e,
            )),
        }
    }

    /// Waits up to `timeout` for a client and serves it the protocol's opening: the version,
    /// its id (the lowest free one from 1), the shared memory, every other peer's eventfds
    /// (peer 0's first), and its own; the other peers are told about it. Returns its id.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::TooManyPeers`] when [`peer_limit`](Self::peer_limit)
    /// peers ([`MAX_PEERS`] unless [`limit_peers`](Self::limit_peers) set fewer) are
    /// connected: the client's connection is closed before any message, so it has received
    /// nothing (no shared memory, no eventfd), and no peer is told; [`Error::Sys`] when a
    /// call fails (a client whose opening could not be sent is dropped).
    pub fn accept_peer(&mut self, timeout: Duration) -> Result<PeerId> {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match self.listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // (Also when a connection that made the socket readable went again.)
                    let left = deadline.saturating_duration_since(Instant::now());
                    let ready = wait_readable(self.listener.as_fd(), left)
                        .map_err(|e| Error::sys("poll on the listening socket", e))?;
                    if !ready {
                        return Err(Error::Timeout("a peer to connect"));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::sys("accept", io_errno(&e))),
            }
        };
        if self.peers.len() >= self.max_peers {
            // Nothing was sent on it: closed, it reads EOF and holds no descriptor of ours.
            drop(stream);
            return Err(Error::TooManyPeers {
                max: self.max_peers,
            });
        }
        stream
            .set_nonblocking(true)
            .map_err(|e| Error::sys("O_NONBLOCK on a peer's socket", io_errno(&e)))?;
        let id = self.free_id();
        let vectors = (0..self.doorbells.len())
            .map(|v| eventfd(&format!("peer {id} vector {v}")))
            .collect::<Result<Vec<_>>>()?;
        let peer = Peer {
            id,
            sock: stream,
            vectors,
        };
        self.opening(&peer)?;
        // Tell the others about it; a peer that cannot be told is removed (and the rest
        // told of that).
        let mut failed = Vec::new();
        for other in &self.peers {
            for fd in &peer.vectors {
                if let Err(e) = send_msg(other.sock.as_fd(), id.wire(), Some(fd.as_fd())) {
                    failed.push((other.id, Gone::SendFailed(e)));
                    break;
                }
            }
        }
        self.peers.push(peer);
        let mut gone = Vec::new();
        for (id, why) in failed {
            self.remove(id, why, &mut gone);
        }
        // Those removals are reported by the next `wait`.
        self.note_gone(gone);
        Ok(id)
    }

    /// The new peer's messages, in the order QEMU's own server sends them.
    fn opening(&self, peer: &Peer) -> Result<()> {
        let sock = peer.sock.as_fd();
        let id = peer.id;
        let fail = |what: &str, e: Errno| Error::sys(format!("sending peer {id} {what}"), e);
        send_msg(sock, PROTOCOL_VERSION, None).map_err(|e| fail("the version", e))?;
        send_msg(sock, id.wire(), None).map_err(|e| fail("its id", e))?;
        send_msg(sock, -1, Some(self.memory.fd())).map_err(|e| fail("the shared memory", e))?;
        for fd in &self.doorbells {
            send_msg(sock, SERVER_ID.wire(), Some(fd.as_fd()))
                .map_err(|e| fail("peer 0's eventfds", e))?;
        }
        for other in &self.peers {
            for fd in &other.vectors {
                send_msg(sock, other.id.wire(), Some(fd.as_fd()))
                    .map_err(|e| fail(&format!("peer {}'s eventfds", other.id), e))?;
            }
        }
        for fd in &peer.vectors {
            send_msg(sock, id.wire(), Some(fd.as_fd())).map_err(|e| fail("its eventfds", e))?;
        }
        Ok(())
    }

    /// The lowest id from 1 that no peer has (there are at most `MAX_PEERS` peers, so one
    /// of `1..=MAX_PEERS` is free).
    fn free_id(&self) -> PeerId {
        let mut id = 1u16;
        while self.peers.iter().any(|p| p.id.0 == id) {
            id += 1;
        }
        PeerId(id)
    }

    /// Removes `id` and tells the others (with no descriptor: a disconnect); a peer that
    /// cannot be told is removed in turn. Every removal is appended to `out`.
    fn remove(&mut self, id: PeerId, why: Gone, out: &mut Vec<(PeerId, Gone)>) {
        let mut work = vec![(id, why)];
        while let Some((id, why)) = work.pop() {
            let Some(at) = self.peers.iter().position(|p| p.id == id) else {
                continue;
            };
            self.peers.remove(at);
            out.push((id, why));
            for other in &self.peers {
                if let Err(e) = send_msg(other.sock.as_fd(), id.wire(), None) {
                    if !work.iter().any(|(w, _)| *w == other.id) {
                        work.push((other.id, Gone::SendFailed(e)));
                    }
                }
            }
        }
    }

    /// Drops `peer` as if it had disconnected (the others are told).
    ///
    /// # Errors
    /// [`Error::NoSuchPeer`].
    pub fn disconnect(&mut self, peer: PeerId) -> Result<()> {
        if !self.peers.iter().any(|p| p.id == peer) {
            return Err(Error::NoSuchPeer(peer));
        }
        let mut gone = Vec::new();
        self.remove(peer, Gone::Closed, &mut gone);
        self.note_gone(gone.into_iter().skip(1).collect());
        Ok(())
    }

    fn note_gone(&mut self, gone: Vec<(PeerId, Gone)>) {
        self.pending_gone.extend(gone);
        let excess = self.pending_gone.len().saturating_sub(MAX_PENDING_GONE);
        self.pending_gone.drain(..excess);
    }

    /// Waits up to `timeout` for something to happen: doorbells for peer 0, peers leaving
    /// (removed here, the others told) or misbehaving (sending anything: removed too), a
    /// client connecting (left for [`Server::accept_peer`]). Returns at once when anything
    /// is pending; an empty [`Activity`] on timeout.
    ///
    /// # Errors
    /// `poll(2)`'s errno, or a doorbell eventfd's `read(2)` errno.
    pub fn wait(&mut self, timeout: Duration) -> Result<Activity> {
        let mut act = Activity {
            doorbells: vec![0; self.doorbells.len()],
            gone: std::mem::take(&mut self.pending_gone),
            connecting: false,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        let t = if act.gone.is_empty() {
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
        } else {
            PollTimeout::ZERO
        };
        let (ready, listener_ready, peer_ready) = {
            let mut fds = Vec::with_capacity(1 + self.doorbells.len() + self.peers.len());
            fds.push(PollFd::new(self.listener.as_fd(), PollFlags::POLLIN));
            for d in &self.doorbells {
                fds.push(PollFd::new(d.as_fd(), PollFlags::POLLIN));
            }
            for p in &self.peers {
                fds.push(PollFd::new(p.sock.as_fd(), PollFlags::POLLIN));
            }
            let n = loop {
                match poll(&mut fds, t) {
                    Ok(n) => break n,
                    Err(Errno::EINTR) => continue,
                    Err(e) => return Err(Error::sys("poll on the server's descriptors", e)),
                }
            };
            let hit = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
            let listener_ready = hit(&fds[0]);
            let doorbells: Vec<bool> = fds[1..1 + self.doorbells.len()].iter().map(hit).collect();
            let peers: Vec<PeerId> = fds[1 + self.doorbells.len()..]
                .iter()
                .zip(&self.peers)
                .filter(|(f, _)| hit(f))
                .map(|(_, p)| p.id)
                .collect();
            (
                if n > 0 { doorbells } else { Vec::new() },
                listener_ready,
                peers,
            )
        };
        act.connecting = listener_ready;
        for (v, hit) in ready.iter().enumerate() {
            if !hit {
                continue;
            }
            match self.doorbells[v].read() {
                Ok(n) => act.doorbells[v] = n,
                Err(Errno::EAGAIN) => {}
                Err(e) => return Err(Error::sys(format!("read of peer 0's vector {v}"), e)),
            }
        }
        for id in peer_ready {
            let Some(p) = self.peers.iter().find(|p| p.id == id) else {
                continue; // removed already, as a consequence of another removal
            };
            let why = match drain(&p.sock) {
                Ok(Input::Nothing) => continue,
                Ok(Input::Eof) => Gone::Closed,
                Ok(Input::Data(_)) => Gone::SentData,
                Err(e) => Gone::RecvFailed(e),
            };
            self.remove(id, why, &mut act.gone);
        }
        Ok(act)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Only the path this server bound; a failure (removed already) changes nothing.
        let _ = std::fs::remove_file(&self.path);
    }
}
