//! `davinci-mockd`: N mock devices, each served on its own Unix socket, one connection per
//! open file (see [`crate::proto`] for the frames).
//!
//! Threads: one acceptor per device, one reader per connection, and one short-lived thread
//! per blocking WAIT_EVENT (so a client's other threads keep being served while one waits,
//! as with concurrent `ioctl`s on one kernel file; at most [`MAX_WAITS_PER_CONN`] at a time,
//! further waits are served inline). Nothing a peer sends can panic the daemon or disturb
//! another connection: malformed frames get an `EPROTO` reply (or, before `HELLO`, the
//! connection is closed), and a connection's end, however it comes, closes its open, which
//! releases every context, stream and allocation it held.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use davinci_driver_core::{Error, OpenParams, Role, UserMem};
use davinci_uapi::{
    ClientUsage, Errno, ListClientsArgs, WaitEventArgs, Wire, ABI_VERSION_MAJOR, ABI_VERSION_MINOR,
    DRIVER_CMD_LIST_CLIENTS, DRIVER_CMD_WAIT_EVENT,
};
use tracing::{debug, info, warn};

use crate::peer::{container_of_pid, AdminPolicy};
use crate::proto::{
    describe_client, Hello, HelloReply, Kind, MmapArgs, MmapReply, ProtoError, Reply, Request,
    WireRole, MAX_PAYLOAD, MAX_REQUEST,
};
use crate::sockio::{PeerCred, SeqListener, SeqPacket};
use crate::{MockConfig, MockDevice};

/// Blocking waits served on their own threads per connection; more are served inline.
pub const MAX_WAITS_PER_CONN: usize = 32;
/// Connections (including ones that have not sent HELLO yet) per device.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a new connection may take to send HELLO (default of `DaemonConfig::hello_timeout`).
pub const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// File name of device `n`'s socket.
pub fn socket_name(n: u32) -> String {
    format!("davinci{n}.sock")
}

/// The socket directory used when none is given: `$DAVINCI_SOCKET_DIR`, else
/// `/run/davinci` for root, else `$XDG_RUNTIME_DIR/davinci`, else `/tmp/davinci-$UID`.
pub fn default_socket_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("DAVINCI_SOCKET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let uid = nix::unistd::getuid().as_raw();
    if uid == 0 {
        return PathBuf::from("/run/davinci");
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("davinci");
    }
    PathBuf::from(format!("/tmp/davinci-{uid}"))
}

/// Daemon configuration.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Devices to host (davinci0 .. davinci{N-1}).
    pub devices: u32,
    /// Memory of each device in bytes.
    pub memory: u64,
    /// Per-client memory limit in bytes (0 = none beyond the device).
    pub client_memory_limit: u64,
    /// Where the sockets go.
    pub socket_dir: PathBuf,
    /// Permission bits of each socket (connecting needs write permission).
    pub socket_mode: u32,
    /// Group of each socket (so its members may connect with mode 0660); `None` keeps the
    /// daemon's group.
    pub socket_group: Option<u32>,
    /// Who may change device sharing.
    pub admin: AdminPolicy,
    /// How long a new connection may take to send HELLO before it is closed.
    pub hello_timeout: std::time::Duration,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        Self {
            devices: 1,
            memory: 256 << 20,
            client_memory_limit: 0,
            socket_dir: default_socket_dir(),
            socket_mode: 0o660,
            socket_group: None,
            admin: AdminPolicy::default(),
            hello_timeout: HELLO_TIMEOUT,
        }
    }
}

struct Shared {
    dev: MockDevice,
    name: String,
    admin: AdminPolicy,
    hello_timeout: std::time::Duration,
    stopping: AtomicBool,
    conns: Mutex<HashMap<u64, Arc<SeqPacket>>>,
    next_conn: AtomicU64,
    live: AtomicUsize,
}

impl Shared {
    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<SeqPacket>>> {
        self.conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct Served {
    shared: Arc<Shared>,
    listener: Arc<SeqListener>,
    acceptor: Option<JoinHandle<()>>,
}

/// A running daemon: its devices, sockets and threads.
pub struct Daemon {
    served: Vec<Served>,
    dir: PathBuf,
    /// The directory did not exist before: removed again at stop (if empty).
    created_dir: bool,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("dir", &self.dir)
            .field("devices", &self.served.len())
            .finish()
    }
}

impl Daemon {
    /// Creates the devices, binds every socket and starts accepting.
    ///
    /// # Errors
    /// The socket directory cannot be created, or a socket cannot be bound (another daemon
    /// listens there, or a non-socket file is in the way).
    pub fn start(cfg: &DaemonConfig) -> io::Result<Daemon> {
        if cfg.devices == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--devices must be at least 1",
            ));
        }
        let created_dir = !cfg.socket_dir.exists();
        std::fs::create_dir_all(&cfg.socket_dir).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create {}: {e}", cfg.socket_dir.display()),
            )
        })?;
        let mut served = Vec::new();
        for n in 0..cfg.devices {
            let path = cfg.socket_dir.join(socket_name(n));
            let listener = Arc::new(SeqListener::bind(&path, cfg.socket_mode).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot listen on {}: {e}", path.display()),
                )
            })?);
            if let Some(gid) = cfg.socket_group {
                nix::unistd::chown(&path, None, Some(nix::unistd::Gid::from_raw(gid))).map_err(
                    |e| {
                        io::Error::new(
                            io::ErrorKind::PermissionDenied,
                            format!("cannot give {} to group {gid}: {e}", path.display()),
                        )
                    },
                )?;
            }
            let dev = MockDevice::new(MockConfig {
                device_id: n,
                memory_size: cfg.memory,
                client_memory_limit: cfg.client_memory_limit,
                ..MockConfig::default()
            });
            let shared = Arc::new(Shared {
                dev,
                name: format!("davinci{n}"),
                admin: cfg.admin.clone(),
                hello_timeout: cfg.hello_timeout,
                stopping: AtomicBool::new(false),
                conns: Mutex::new(HashMap::new()),
                next_conn: AtomicU64::new(1),
                live: AtomicUsize::new(0),
            });
            let (s, l) = (shared.clone(), listener.clone());
            let acceptor = std::thread::Builder::new()
                .name(format!("davinci{n}-accept"))
                .spawn(move || accept_loop(&s, &l))?;
            info!(device = n, socket = %path.display(), memory = cfg.memory, "device ready");
            served.push(Served {
                shared,
                listener,
                acceptor: Some(acceptor),
            });
        }
        Ok(Daemon {
            served,
            dir: cfg.socket_dir.clone(),
            created_dir,
        })
    }

    /// The socket directory.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// Socket paths, by device index.
    pub fn sockets(&self) -> Vec<PathBuf> {
        self.served
            .iter()
            .map(|s| s.listener.path().to_path_buf())
            .collect()
    }

    /// The devices (to inspect state in-process).
    pub fn devices(&self) -> Vec<MockDevice> {
        self.served.iter().map(|s| s.shared.dev.clone()).collect()
    }

    /// Stops accepting, removes the sockets, disconnects every client (closing their opens)
    /// and stops the devices.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        for s in &self.served {
            s.shared.stopping.store(true, Ordering::Release);
            s.listener.shutdown();
        }
        for s in &mut self.served {
            if let Some(a) = s.acceptor.take() {
                let _ = a.join();
            }
            let _ = std::fs::remove_file(s.listener.path());
            let conns: Vec<Arc<SeqPacket>> = s.shared.conns().values().cloned().collect();
            for c in conns {
                c.shutdown();
            }
            s.shared.dev.shutdown();
        }
        if self.created_dir && !self.served.is_empty() {
            // Only if empty: never removes anything but what the daemon created.
            let _ = std::fs::remove_dir(&self.dir);
        }
        self.served.clear();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &SeqListener) {
    loop {
        let conn = match listener.accept() {
            Ok(c) => c,
            Err(e) => {
                if !shared.stopping.load(Ordering::Acquire) {
                    warn!(device = %shared.name, error = %e, "accept failed; no longer accepting");
                }
                return;
            }
        };
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        if shared.live.load(Ordering::Acquire) >= MAX_CONNECTIONS {
            let r = Reply::err(
                Kind::Hello as u16,
                0,
                Errno::ENOSPC,
                "too many connections to this device",
            );
            send_reply(&conn, &r, None);
            continue;
        }
        let conn = Arc::new(conn);
        let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        shared.live.fetch_add(1, Ordering::AcqRel);
        shared.conns().insert(id, conn.clone());
        let s = shared.clone();
        let c = conn.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("{}-conn{id}", shared.name))
            .spawn(move || {
                serve(&s, &c);
                s.conns().remove(&id);
                s.live.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            warn!(device = %shared.name, "cannot start a connection thread; dropping it");
            shared.conns().remove(&id);
            shared.live.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Sends a reply (with at most one descriptor); a peer that went away is not an error here.
fn send_reply(conn: &SeqPacket, r: &Reply, fd: Option<std::os::fd::BorrowedFd<'_>>) {
    let bytes = match r.encode() {
        Ok(b) => b,
        Err(e) => {
            warn!(error = %e, "reply does not encode; sending EPROTO instead");
            match Reply::err(r.kind, r.tag, Errno::EPROTO, "reply too large").encode() {
                Ok(b) => b,
                Err(_) => return,
            }
        }
    };
    let fds: Vec<std::os::fd::BorrowedFd<'_>> = fd.into_iter().collect();
    if let Err(e) = conn.send(&bytes, &fds) {
        debug!(error = %e, "reply not delivered (peer gone)");
    }
}

fn proto_reply(frame: &[u8], e: ProtoError) -> Reply {
    let kind = Request::peek_kind(frame).map_or(0, |k| k as u16);
    Reply::err(kind, Request::peek_tag(frame), Errno::EPROTO, e.0)
}

fn driver_reply(kind: Kind, tag: u32, arg: Vec<u8>, r: Result<(), Error>) -> Reply {
    match r {
        Ok(()) => Reply::ok(kind, tag, arg),
        Err(e) => Reply {
            arg,
            ..Reply::err(kind as u16, tag, e.errno, e.msg)
        },
    }
}

/// Receives one frame. `Ok(None)` = the peer closed (or shut down).
fn recv_frame(conn: &SeqPacket, buf: &mut [u8]) -> Option<Result<usize, ProtoError>> {
    match conn.recv(buf, false) {
        Ok(r) if r.len == 0 && !r.truncated => None,
        Ok(r) if r.truncated => Some(Err(ProtoError("frame longer than the largest request"))),
        Ok(r) if r.fds_dropped => Some(Err(ProtoError(
            "file descriptors are not accepted from clients",
        ))),
        Ok(r) => Some(Ok(r.len)),
        Err(e) => {
            debug!(error = %e, "recv failed; closing the connection");
            None
        }
    }
}

/// Serves one connection: HELLO, then requests until CLOSE or the end of the connection.
fn serve(shared: &Arc<Shared>, conn: &Arc<SeqPacket>) {
    let cred = match conn.peer_cred() {
        Ok(c) => c,
        Err(e) => {
            warn!(device = %shared.name, error = %e, "no peer credentials; dropping connection");
            return;
        }
    };
    let mut buf = vec![0u8; MAX_REQUEST + 1];
    // A connection that never says HELLO does not keep its thread (and connection slot).
    if let Err(e) = conn.set_recv_timeout(Some(shared.hello_timeout)) {
        debug!(error = %e, "cannot bound the wait for HELLO");
    }
    let Some(frame) = recv_frame(conn, &mut buf) else {
        debug!(device = %shared.name, pid = cred.pid, "closed (or silent) before HELLO");
        return;
    };
    if let Err(e) = conn.set_recv_timeout(None) {
        debug!(error = %e, "cannot clear the HELLO timeout; closing");
        return;
    }
    let len = frame.as_ref().map_or(buf.len(), |&n| n);
    let (client, role) = match frame
        .and_then(|n| Request::decode(&buf[..n]))
        .and_then(|req| hello(shared, conn, &cred, &req))
    {
        Ok(Some(opened)) => opened,
        Ok(None) => return,
        Err(e) => {
            // Before HELLO: one EPROTO reply, then the connection is closed.
            debug!(device = %shared.name, pid = cred.pid, error = %e, "bad first frame");
            send_reply(conn, &proto_reply(&buf[..len], e), None);
            return;
        }
    };
    let waits = Arc::new(AtomicUsize::new(0));
    loop {
        let n = match recv_frame(conn, &mut buf) {
            None => break,
            Some(Err(e)) => {
                send_reply(conn, &proto_reply(&buf, e), None);
                continue;
            }
            Some(Ok(n)) => n,
        };
        let req = match Request::decode(&buf[..n]) {
            Ok(r) => r,
            Err(e) => {
                debug!(device = %shared.name, pid = cred.pid, error = %e, "malformed frame");
                send_reply(conn, &proto_reply(&buf[..n], e), None);
                continue;
            }
        };
        match req.kind {
            Kind::Hello => send_reply(
                conn,
                &Reply::err(
                    Kind::Hello as u16,
                    req.tag,
                    Errno::EPROTO,
                    "HELLO on an open connection (one connection is one open)",
                ),
                None,
            ),
            Kind::Close => {
                // Released before the reply: a client that saw it knows its resources are gone.
                shared.dev.close(client);
                log_closed(shared, &cred, client, role);
                send_reply(conn, &Reply::ok(Kind::Close, req.tag, Vec::new()), None);
                return;
            }
            Kind::Mmap => mmap(shared, conn, client, &req),
            Kind::Ioctl => {
                if is_blocking_wait(&req) && waits.load(Ordering::Acquire) < MAX_WAITS_PER_CONN {
                    waits.fetch_add(1, Ordering::AcqRel);
                    let (s, c, w) = (shared.clone(), conn.clone(), waits.clone());
                    let moved = req.clone();
                    let spawned = std::thread::Builder::new()
                        .name(format!("{}-wait", shared.name))
                        .spawn(move || {
                            ioctl(&s, &c, client, moved);
                            w.fetch_sub(1, Ordering::AcqRel);
                        });
                    if let Err(e) = spawned {
                        waits.fetch_sub(1, Ordering::AcqRel);
                        debug!(error = %e, "cannot start a wait thread; waiting inline");
                        ioctl(shared, conn, client, req);
                    }
                } else {
                    ioctl(shared, conn, client, req);
                }
            }
        }
    }
    shared.dev.close(client);
    log_closed(shared, &cred, client, role);
}

/// Client opens and closes are logged at `info`, control opens (davinci-smi) at `debug`.
fn log_closed(shared: &Shared, cred: &PeerCred, client: u32, role: Role) {
    if role == Role::Client {
        info!(device = %shared.name, pid = cred.pid, handle = client, "client closed");
    } else {
        debug!(device = %shared.name, pid = cred.pid, handle = client, "control closed");
    }
}

fn is_blocking_wait(req: &Request) -> bool {
    req.request == DRIVER_CMD_WAIT_EVENT
        && WaitEventArgs::from_bytes(&req.arg).is_some_and(|a| a.timeout_ns != 0)
}

/// Handles HELLO: `Ok(Some((client, role)))` when the open succeeded (reply sent), `Ok(None)`
/// when it was refused (reply sent, connection to be closed).
fn hello(
    shared: &Shared,
    conn: &SeqPacket,
    cred: &PeerCred,
    req: &Request,
) -> Result<Option<(u32, Role)>, ProtoError> {
    if req.kind != Kind::Hello {
        return Err(ProtoError("the first frame must be HELLO"));
    }
    let Some(h) = Hello::decode(&req.arg) else {
        return Err(ProtoError("HELLO argument has the wrong size"));
    };
    if h.reserved != 0 {
        return Err(ProtoError("HELLO reserved field is not 0"));
    }
    if h.abi_major != ABI_VERSION_MAJOR {
        let msg = format!(
            "client speaks ABI major {}, this device speaks {}",
            h.abi_major, ABI_VERSION_MAJOR
        );
        send_reply(
            conn,
            &Reply::err(Kind::Hello as u16, req.tag, Errno::EPROTO, &msg),
            None,
        );
        return Ok(None);
    }
    let role = match WireRole::from_u32(h.role) {
        Some(WireRole::Client) => Role::Client,
        Some(WireRole::Control) => Role::Control,
        None => return Err(ProtoError("HELLO role must be 0 (client) or 1 (control)")),
    };
    let params = OpenParams {
        role,
        pid: cred.pid,
        uid: cred.uid,
        admin: shared.admin.is_admin(cred),
        container: container_of_pid(cred.pid),
    };
    match shared.dev.open(params) {
        Ok(client) => {
            let r = HelloReply {
                abi_major: ABI_VERSION_MAJOR,
                abi_minor: ABI_VERSION_MINOR,
                device_id: shared.dev.config().device_id,
                pid: cred.pid,
                uid: cred.uid,
            };
            send_reply(conn, &Reply::ok(Kind::Hello, req.tag, r.encode()), None);
            let container = crate::proto::container_of(&davinci_uapi::ClientUsage {
                container: params.container,
                ..davinci_uapi::ClientUsage::default()
            });
            if role == Role::Client {
                info!(
                    device = %shared.name, pid = cred.pid, uid = cred.uid, admin = params.admin,
                    container = %container, handle = client, "client opened"
                );
            } else {
                debug!(
                    device = %shared.name, pid = cred.pid, uid = cred.uid, admin = params.admin,
                    container = %container, handle = client, "control opened"
                );
            }
            Ok(Some((client, role)))
        }
        Err(e) => {
            let mut r = Reply::err(Kind::Hello as u16, req.tag, e.error.errno, e.error.msg);
            if let Some(holder) = e.holder {
                r.msg = format!(
                    "{} is in exclusive mode and held by {}",
                    shared.name,
                    describe_client(&holder)
                );
                let mut p = vec![0u8; ClientUsage::SIZE];
                holder.encode(&mut p);
                r.payload = p;
            }
            info!(device = %shared.name, pid = cred.pid, error = %r.msg, "open refused");
            send_reply(conn, &r, None);
            Ok(None)
        }
    }
}

fn mmap(shared: &Shared, conn: &SeqPacket, client: u32, req: &Request) {
    let Some(a) = MmapArgs::decode(&req.arg) else {
        // Request::decode checked the size already; be safe anyway.
        send_reply(
            conn,
            &Reply::err(Kind::Mmap as u16, req.tag, Errno::EPROTO, "bad MMAP size"),
            None,
        );
        return;
    };
    match shared.dev.map(client, a.cookie, a.len) {
        Ok(src) => {
            let mut r = Reply::ok(
                Kind::Mmap,
                req.tag,
                MmapReply {
                    offset: src.offset,
                    len: a.len,
                }
                .encode(),
            );
            r.nfds = 1;
            send_reply(conn, &r, Some(src.fd.as_fd()));
        }
        Err(e) => send_reply(
            conn,
            &Reply::err(Kind::Mmap as u16, req.tag, e.errno, e.msg),
            None,
        ),
    }
}

/// LIST_CLIENTS output: what the driver writes at `buf + k` becomes payload byte `k`.
struct PayloadMem {
    base: u64,
    limit: usize,
    out: Vec<u8>,
}

impl UserMem for PayloadMem {
    fn write(&mut self, addr: u64, data: &[u8]) -> davinci_driver_core::Result<()> {
        let fault = Error::new(Errno::EFAULT, "write outside the caller's buffer");
        let off = addr.checked_sub(self.base).ok_or(fault)?;
        let off = usize::try_from(off).map_err(|_| fault)?;
        let end = off.checked_add(data.len()).ok_or(fault)?;
        if end > self.limit {
            return Err(fault);
        }
        if self.out.len() < end {
            self.out.resize(end, 0);
        }
        self.out[off..end].copy_from_slice(data);
        Ok(())
    }
}

fn ioctl(shared: &Shared, conn: &SeqPacket, client: u32, req: Request) {
    let Request {
        tag,
        request,
        mut arg,
        ..
    } = req;
    let mut mem = PayloadMem {
        base: 0,
        limit: 0,
        out: Vec::new(),
    };
    if request == DRIVER_CMD_LIST_CLIENTS {
        if let Some(a) = ListClientsArgs::from_bytes(&arg) {
            mem.base = a.buf;
            mem.limit = (a.capacity as usize)
                .saturating_mul(a.entry_size as usize)
                .min(MAX_PAYLOAD);
        }
    }
    let r = shared.dev.ioctl(client, request, &mut arg, &mut mem);
    let mut reply = driver_reply(Kind::Ioctl, tag, arg, r);
    if reply.errno == 0 {
        reply.payload = mem.out;
    }
    send_reply(conn, &reply, None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_mem_is_bounded() {
        let mut m = PayloadMem {
            base: 0x1000,
            limit: 256,
            out: Vec::new(),
        };
        m.write(0x1000 + 128, &[1; 128]).unwrap();
        assert_eq!(m.out.len(), 256);
        assert_eq!(m.out[0], 0);
        assert_eq!(m.out[200], 1);
        assert_eq!(
            m.write(0x1000 + 129, &[1; 128]).unwrap_err().errno,
            Errno::EFAULT
        );
        assert_eq!(m.write(0xfff, &[1]).unwrap_err().errno, Errno::EFAULT);
        assert_eq!(m.write(u64::MAX, &[1; 2]).unwrap_err().errno, Errno::EFAULT);
    }

    use davinci_uapi::{
        AllocMemoryArgs, DeviceInfo, DeviceShareArgs, DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_GET_INFO,
        DRIVER_CMD_SET_DEVICE_SHARE,
    };

    fn start(tag: &str, admin: AdminPolicy) -> Daemon {
        let dir = std::env::temp_dir().join(format!("davinci-d-{}-{tag}", std::process::id()));
        Daemon::start(&DaemonConfig {
            devices: 2,
            memory: 16 << 20,
            socket_dir: dir,
            admin,
            ..DaemonConfig::default()
        })
        .unwrap()
    }

    struct Raw {
        c: SeqPacket,
        tag: u32,
    }

    impl Raw {
        fn call(&mut self, kind: Kind, request: u32, arg: Vec<u8>) -> (Reply, usize) {
            self.tag += 1;
            let f = Request {
                kind,
                tag: self.tag,
                request,
                arg,
            };
            self.c.send(&f.encode().unwrap(), &[]).unwrap();
            self.recv()
        }

        fn recv(&mut self) -> (Reply, usize) {
            let mut buf = vec![0u8; crate::proto::MAX_REPLY];
            let r = self.c.recv(&mut buf, true).unwrap();
            assert!(r.len > 0, "daemon closed the connection");
            let rep = Reply::decode(&buf[..r.len]).unwrap();
            assert_eq!(rep.nfds as usize, r.fds.len());
            (rep, r.fds.len())
        }

        fn open(path: &Path, role: WireRole) -> (Raw, Reply) {
            let mut raw = Raw {
                c: SeqPacket::connect(path).unwrap(),
                tag: 0,
            };
            let h = Hello {
                abi_major: ABI_VERSION_MAJOR,
                abi_minor: ABI_VERSION_MINOR,
                role: role as u32,
                reserved: 0,
            };
            let (r, _) = raw.call(Kind::Hello, 0, h.encode());
            (raw, r)
        }
    }

    #[test]
    fn serves_opens_ioctls_mmaps_and_exclusive_mode() {
        let d = start("basic", AdminPolicy::default());
        let socks = d.sockets();
        let (mut a, r) = Raw::open(&socks[1], WireRole::Client);
        assert_eq!(r.errno, 0, "{}", r.msg);
        let h = HelloReply::decode(&r.arg).unwrap();
        assert_eq!((h.device_id, h.pid), (1, std::process::id()));

        let (r, _) = a.call(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; DeviceInfo::SIZE]);
        let info = DeviceInfo::from_bytes(&r.arg).unwrap();
        assert_eq!(
            (r.errno, info.device_id, info.memory_size),
            (0, 1, 16 << 20)
        );
        assert_eq!(info.clients, 1);

        // A second client in exclusive mode: EBUSY naming the holder, payload = holder.
        let (_b, r) = Raw::open(&socks[1], WireRole::Client);
        assert_eq!(r.errno, Errno::EBUSY.code());
        assert!(
            r.msg
                .contains(&format!("held by pid {}", std::process::id())),
            "{}",
            r.msg
        );
        let holder = crate::proto::holder_from_payload(&r.payload).unwrap();
        assert_eq!(holder.pid, std::process::id());
        // The other device is free.
        let (_c, r) = Raw::open(&socks[0], WireRole::Client);
        assert_eq!(r.errno, 0);

        // Allocation and its mapping: one memfd arrives.
        let alloc = AllocMemoryArgs {
            size: 10000,
            ..AllocMemoryArgs::default()
        };
        let mut arg = vec![0; AllocMemoryArgs::SIZE];
        alloc.encode(&mut arg);
        let (r, _) = a.call(Kind::Ioctl, DRIVER_CMD_ALLOC_MEMORY, arg);
        assert_eq!(r.errno, 0, "{}", r.msg);
        let got = AllocMemoryArgs::from_bytes(&r.arg).unwrap();
        assert_eq!(got.alloc_size, 12288);
        let m = MmapArgs {
            cookie: got.mmap_offset,
            len: got.alloc_size,
        };
        let (r, nfds) = a.call(Kind::Mmap, 0, m.encode());
        assert_eq!((r.errno, nfds), (0, 1), "{}", r.msg);
        // A cookie it does not own: ENOENT, no fd.
        let m = MmapArgs {
            cookie: davinci_uapi::mmap_offset(davinci_uapi::MmapKind::Memory, 0x7777),
            len: 4096,
        };
        let (r, nfds) = a.call(Kind::Mmap, 0, m.encode());
        assert_eq!((r.errno, nfds), (Errno::ENOENT.code(), 0));
        assert_eq!(d.devices()[1].info().memory_used, 12288);

        // Closing the connection releases the allocation.
        drop(a);
        let dev = d.devices()[1].clone();
        let t0 = std::time::Instant::now();
        while dev.info().memory_used != 0 || dev.info().clients != 0 {
            assert!(t0.elapsed().as_secs() < 5, "close did not release");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let paths = d.sockets();
        let dir = d.socket_dir().to_path_buf();
        d.stop();
        assert!(paths.iter().all(|p| !p.exists()), "sockets removed on stop");
        assert!(!dir.exists(), "the directory it created is removed too");
    }

    #[test]
    fn malformed_frames_get_eproto_and_disturb_nobody() {
        let d = start("malformed", AdminPolicy::default());
        let socks = d.sockets();
        let (mut good, r) = Raw::open(&socks[0], WireRole::Control);
        assert_eq!(r.errno, 0);
        let (mut bad, r) = Raw::open(&socks[0], WireRole::Control);
        assert_eq!(r.errno, 0);
        // Garbage, a wrong version, a second HELLO, a wrong ioctl size, an unknown request.
        bad.c.send(b"garbage", &[]).unwrap();
        assert_eq!(bad.recv().0.errno, Errno::EPROTO.code());
        let mut f = Request {
            kind: Kind::Ioctl,
            tag: 5,
            request: DRIVER_CMD_GET_INFO,
            arg: vec![0; DeviceInfo::SIZE],
        }
        .encode()
        .unwrap();
        f[4] = 9;
        bad.c.send(&f, &[]).unwrap();
        let (r, _) = bad.recv();
        assert_eq!((r.errno, r.tag), (Errno::EPROTO.code(), 5));
        assert!(r.msg.contains("version"), "{}", r.msg);
        let (r, _) = bad.call(Kind::Hello, 0, Hello::default().encode());
        assert_eq!(r.errno, Errno::EPROTO.code());
        let (r, _) = bad.call(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; 3]);
        assert_eq!(r.errno, Errno::ENOTTY.code());
        let (r, _) = bad.call(Kind::Ioctl, 0xdead_beef, vec![]);
        assert_eq!(r.errno, Errno::ENOTTY.code());
        // An oversized frame, and descriptors sent to the daemon.
        bad.c.send(&vec![0u8; MAX_REQUEST + 100], &[]).unwrap();
        assert!(bad.recv().0.msg.contains("longer"));
        let f = Request {
            kind: Kind::Ioctl,
            tag: 9,
            request: DRIVER_CMD_GET_INFO,
            arg: vec![0; DeviceInfo::SIZE],
        }
        .encode()
        .unwrap();
        bad.c.send(&f, &[good.c.as_fd()]).unwrap();
        assert!(bad.recv().0.msg.contains("descriptors"));
        // A control open cannot own resources.
        let mut arg = vec![0; AllocMemoryArgs::SIZE];
        AllocMemoryArgs {
            size: 1,
            ..AllocMemoryArgs::default()
        }
        .encode(&mut arg);
        assert_eq!(
            bad.call(Kind::Ioctl, DRIVER_CMD_ALLOC_MEMORY, arg).0.errno,
            Errno::EPERM.code()
        );
        // The well-behaved connection never noticed.
        let (r, _) = good.call(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; DeviceInfo::SIZE]);
        assert_eq!(r.errno, 0);
        // The first frame not being HELLO closes the connection after one EPROTO reply.
        let mut x = Raw {
            c: SeqPacket::connect(&socks[0]).unwrap(),
            tag: 0,
        };
        let (r, _) = x.call(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; DeviceInfo::SIZE]);
        assert_eq!(r.errno, Errno::EPROTO.code());
        let mut buf = [0u8; 64];
        assert_eq!(x.c.recv(&mut buf, false).unwrap().len, 0);
        // A wrong ABI major is refused with EPROTO and a message naming both.
        let mut y = Raw {
            c: SeqPacket::connect(&socks[0]).unwrap(),
            tag: 0,
        };
        let h = Hello {
            abi_major: ABI_VERSION_MAJOR + 1,
            ..Hello::default()
        };
        let (r, _) = y.call(Kind::Hello, 0, h.encode());
        assert_eq!(r.errno, Errno::EPROTO.code());
        assert!(r.msg.contains("ABI major"), "{}", r.msg);
    }

    #[test]
    fn admin_policy_applies_to_set_device_share() {
        let d = start(
            "admin",
            AdminPolicy {
                root: false,
                uids: vec![],
                gids: vec![],
            },
        );
        let socks = d.sockets();
        let (mut c, _) = Raw::open(&socks[0], WireRole::Control);
        let mut arg = vec![0; DeviceShareArgs::SIZE];
        DeviceShareArgs {
            mode: 1,
            ..DeviceShareArgs::default()
        }
        .encode(&mut arg);
        let (r, _) = c.call(Kind::Ioctl, DRIVER_CMD_SET_DEVICE_SHARE, arg.clone());
        assert_eq!(r.errno, Errno::EPERM.code(), "{}", r.msg);
        drop(d);
        let d = start("admin2", AdminPolicy::default());
        let (mut c, _) = Raw::open(&d.sockets()[0], WireRole::Control);
        let (r, _) = c.call(Kind::Ioctl, DRIVER_CMD_SET_DEVICE_SHARE, arg);
        // This test runs as whoever runs it: uid 0 is admin under the default policy.
        let expect = if nix::unistd::getuid().is_root() {
            0
        } else {
            Errno::EPERM.code()
        };
        assert_eq!(r.errno, expect, "{}", r.msg);
    }

    #[test]
    fn sockets_get_the_requested_group() {
        use std::os::unix::fs::MetadataExt;
        // Only root may give a file to a group it is not in.
        if !nix::unistd::getuid().is_root() {
            return;
        }
        let dir = std::env::temp_dir().join(format!("davinci-d-{}-group", std::process::id()));
        let d = Daemon::start(&DaemonConfig {
            devices: 1,
            memory: 1 << 20,
            socket_dir: dir,
            socket_group: Some(4242),
            ..DaemonConfig::default()
        })
        .unwrap();
        let meta = std::fs::metadata(&d.sockets()[0]).unwrap();
        assert_eq!((meta.gid(), meta.mode() & 0o777), (4242, 0o660));
    }

    #[test]
    fn a_silent_connection_is_closed_after_the_hello_timeout() {
        let dir = std::env::temp_dir().join(format!("davinci-d-{}-silent", std::process::id()));
        let d = Daemon::start(&DaemonConfig {
            devices: 1,
            memory: 1 << 20,
            socket_dir: dir,
            hello_timeout: std::time::Duration::from_millis(100),
            ..DaemonConfig::default()
        })
        .unwrap();
        let silent = SeqPacket::connect(&d.sockets()[0]).unwrap();
        let t0 = std::time::Instant::now();
        let mut buf = [0u8; 64];
        assert_eq!(
            silent.recv(&mut buf, false).unwrap().len,
            0,
            "closed by the daemon"
        );
        assert!(t0.elapsed() >= std::time::Duration::from_millis(90));
        // A prompt HELLO is unaffected, and the open does not time out afterwards.
        let (mut ok, r) = Raw::open(&d.sockets()[0], WireRole::Control);
        assert_eq!(r.errno, 0);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let (r, _) = ok.call(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; DeviceInfo::SIZE]);
        assert_eq!(r.errno, 0);
    }

    #[test]
    fn default_dir_honours_the_override() {
        // Only the override is deterministic here; the rest depends on uid and environment.
        let d = default_socket_dir();
        assert!(d.is_absolute() || std::env::var_os("DAVINCI_SOCKET_DIR").is_some());
        assert_eq!(socket_name(3), "davinci3.sock");
    }
}
