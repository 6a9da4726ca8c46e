//! One connection of `davinci-mockd`, which is one open file of a device: HELLO (the open,
//! with the peer's credentials and container), then IOCTL, MMAP and CLOSE frames until the
//! connection ends, which closes the open whatever the cause.
#![forbid(unsafe_code)]

use std::os::fd::AsFd;
use std::sync::Arc;

use davinci_driver_core::{Error, OpenParams, Role, UserMem};
use davinci_mockd_proto::sockio::{PeerCred, SeqPacket};
use davinci_mockd_proto::{
    Hello, HelloReply, Kind, MmapArgs, MmapReply, Premapped, ProtoError, Reply, Request, WireRole,
    MAX_PAYLOAD, MAX_REQUEST,
};
use davinci_uapi::{
    ClientUsage, Errno, ListClientsArgs, ListKernelsArgs, ReadEventsArgs, TraceArgs, WaitEventArgs,
    Wire, ABI_VERSION_MAJOR, ABI_VERSION_MINOR, DRIVER_CMD_LIST_CLIENTS, DRIVER_CMD_LIST_KERNELS,
    DRIVER_CMD_READ_EVENTS, DRIVER_CMD_SET_DEVICE_SHARE, DRIVER_CMD_TENANT_SHARE, DRIVER_CMD_TRACE,
    DRIVER_CMD_WAIT_EVENT,
};
use tracing::{debug, info, warn};

use crate::admin;
use crate::audit::Record;
use crate::gate::Ticket;
use crate::peer::Identity;
use crate::premap;
use crate::reply::{driver_reply, proto_reply, send_reply, send_reply_fds};
use crate::shared::{Shared, MAX_WAITS_PER_CONN};
use crate::waits::{ConnWaits, QueueError, Waiting, MAX_WAITS_PER_DEVICE};
use davinci_mock_device::Started;

/// How long a connection's thread looks for the next request without sleeping after it
/// answered one (cut short once preempted): a client making control calls back to back
/// finds the thread awake, and neither side sleeps and wakes between them.
const NEXT_REQUEST_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Receives one frame (looking for it without sleeping first for [`NEXT_REQUEST_SPIN`] with
/// `spin`): its length, or why it is refused with the length of what arrived (the bytes an
/// error reply takes the frame's kind and tag from: never a longer, earlier frame's).
/// `None` = the peer closed (or shut down).
fn recv_frame(
    conn: &SeqPacket,
    buf: &mut [u8],
    spin: bool,
) -> Option<Result<usize, (ProtoError, usize)>> {
    let soon = if spin {
        conn.recv_soon(buf, false, NEXT_REQUEST_SPIN)
    } else {
        None
    };
    match soon.unwrap_or_else(|| conn.recv(buf, false)) {
        // Zero bytes: the end of the connection, or an empty frame (refused like any other
        // malformed one).
        Ok(r) if r.len == 0 && !r.truncated => {
            if conn.peer_closed() {
                None
            } else {
                Some(Err((ProtoError("empty frame"), 0)))
            }
        }
        Ok(r) if r.truncated => Some(Err((
            ProtoError("frame longer than the largest request"),
            buf.len(),
        ))),
        Ok(r) if r.fds_dropped => Some(Err((
            ProtoError("file descriptors are not accepted from clients"),
            r.len.min(buf.len()),
        ))),
        Ok(r) => Some(Ok(r.len)),
        Err(e) => {
            debug!(error = %e, "recv failed; closing the connection");
            None
        }
    }
}

/// Serves one connection: HELLO, then requests until CLOSE or the end of the connection.
/// `who` is the peer, taken when it connected ([`crate::peer::identify`]); `ticket` its room
/// on the device (`crate::gate`), given back when this returns.
pub(crate) fn serve(
    shared: &Arc<Shared>,
    conn: &Arc<SeqPacket>,
    who: Identity,
    mut ticket: Ticket,
) {
    let cred = who.cred;
    let mut buf = vec![0u8; MAX_REQUEST + 1];
    // A connection that never says HELLO does not keep its thread (and connection slot).
    if let Err(e) = conn.set_recv_timeout(Some(shared.hello_timeout)) {
        debug!(error = %e, "cannot bound the wait for HELLO");
    }
    let first = recv_frame(conn, &mut buf, false);
    if !ticket.hello_done() {
        debug!(device = %shared.name, pid = cred.pid, "displaced before HELLO (crate::gate)");
        return;
    }
    let Some(frame) = first else {
        debug!(device = %shared.name, pid = cred.pid, "closed (or silent) before HELLO");
        return;
    };
    if let Err(e) = conn.set_recv_timeout(None) {
        debug!(error = %e, "cannot clear the HELLO timeout; closing");
        return;
    }
    let len = match &frame {
        Ok(n) | Err((_, n)) => *n,
    };
    let (client, role, peer) = match frame
        .map_err(|(e, _)| e)
        .and_then(|n| Request::decode(&buf[..n]))
        .and_then(|req| hello(shared, conn, &who, &req))
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
    // Blocking waits in flight, answered by the device's wait thread (`crate::waits`).
    let in_flight = Arc::new(ConnWaits::default());
    loop {
        let n = match recv_frame(conn, &mut buf, true) {
            None => break,
            Some(Err((e, n))) => {
                send_reply(conn, &proto_reply(&buf[..n], e), None);
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
                // Released before the reply: a client that saw it knows its resources are
                // gone, and its waits were answered before it.
                shared.dev.close(client);
                log_closed(shared, &peer, role);
                drain_waits(&in_flight);
                send_reply(conn, &Reply::ok(Kind::Close, req.tag, Vec::new()), None);
                return;
            }
            Kind::Mmap => mmap(shared, conn, client, &req),
            Kind::Cancel => {
                if let Some(tag) = req.arg.get(..4).and_then(|b| b.try_into().ok()) {
                    shared.waits.cancel(&in_flight, u32::from_le_bytes(tag));
                }
                send_reply(conn, &Reply::ok(Kind::Cancel, req.tag, Vec::new()), None);
            }
            Kind::Ioctl if is_blocking_wait(&req) => {
                start_wait(shared, conn, (client, who.tenant), req, &in_flight)
            }
            Kind::Ioctl => {
                ioctl(shared, conn, &peer, client, req);
                // After the reply: what it left to do (unmapping freed memory, making the
                // memfds the next ALLOC_MEMORY or CREATE_STREAM will take).
                shared.dev.tidy();
            }
        }
    }
    // The end of the connection, however it came: the open is closed, which ends its waits
    // (their replies go nowhere).
    shared.dev.close(client);
    log_closed(shared, &peer, role);
}

/// How long CLOSE waits for the open's waits to be answered (the close ended them: the
/// wait thread answers at its next look).
const DRAIN_WAITS: std::time::Duration = std::time::Duration::from_secs(2);

fn drain_waits(in_flight: &ConnWaits) {
    let start = std::time::Instant::now();
    while in_flight.in_flight() > 0 && start.elapsed() < DRAIN_WAITS {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// A blocking WAIT_EVENT: answered now if it need not wait, else queued for the device's
/// wait thread; never waited for on this thread, so the connection's end is always seen.
/// At most [`MAX_WAITS_PER_CONN`] in flight per connection; more fail with `EBUSY`.
fn start_wait(
    shared: &Arc<Shared>,
    conn: &Arc<SeqPacket>,
    (client, tenant): (u32, davinci_driver_core::Tenant),
    req: Request,
    in_flight: &Arc<ConnWaits>,
) {
    let Request {
        tag,
        request,
        mut arg,
        ..
    } = req;
    if in_flight.in_flight() >= MAX_WAITS_PER_CONN {
        let msg = format!(
            "{MAX_WAITS_PER_CONN} blocking WAIT_EVENTs are in flight on this open already \
             (the most one open may have); wait for one to end, or use another open"
        );
        send_reply(conn, &busy(tag, arg, &msg), None);
        return;
    }
    let r = shared.dev.ioctl_start(
        client,
        request,
        &mut arg,
        &mut davinci_driver_core::NoUserMem,
    );
    match r {
        Ok(Started::Waiting(wait)) => {
            let id = in_flight.add(tag);
            let w = Waiting {
                wait,
                conn: conn.clone(),
                tag,
                arg: arg.clone(),
                owner: in_flight.clone(),
                id,
                tenant,
            };
            if let Err(e) = shared.waits.queue(w) {
                in_flight.remove(id);
                let msg = match e {
                    QueueError::TenantFull(share, slots) => format!(
                        "{share} blocking WAIT_EVENTs of this tenant (its container, else its \
                         user) are in flight on this device already: its share, the device's \
                         {MAX_WAITS_PER_DEVICE} over its {slots} tenant slots; wait for one to end"
                    ),
                    QueueError::Full => format!(
                        "{MAX_WAITS_PER_DEVICE} blocking WAIT_EVENTs are in flight on this \
                         device already (the most it serves); wait for one to end"
                    ),
                    QueueError::NoThread(e) => {
                        warn!(device = %shared.name, error = %e, "cannot start the wait thread");
                        "the daemon could not start its wait thread; try again".to_string()
                    }
                };
                send_reply(conn, &busy(tag, arg, &msg), None);
            }
        }
        Ok(Started::Done) => send_reply(conn, &driver_reply(Kind::Ioctl, tag, arg, Ok(())), None),
        Err(e) => send_reply(conn, &driver_reply(Kind::Ioctl, tag, arg, Err(e)), None),
    }
}

/// The `EBUSY` reply to a blocking wait refused for want of room: like every IOCTL reply, it
/// carries the argument (as sent: the wait never began; docs/mockd-protocol.md).
fn busy(tag: u32, arg: Vec<u8>, msg: &str) -> Reply {
    Reply {
        arg,
        ..Reply::err(Kind::Ioctl as u16, tag, Errno::EBUSY, msg)
    }
}

/// Client opens and closes are logged at `info` (rate-limited per uid: `crate::audit`) with
/// the client's `client_id`, the id LIST_CLIENTS reports (`davinci-smi info -t usage`);
/// control opens (davinci-smi), which are not clients, at `debug`.
fn log_closed(shared: &Shared, peer: &Peer, role: Role) {
    let cred = &peer.cred;
    if role == Role::Client {
        shared.audit.record(Record::ClientClosed, cred.uid, || {
            info!(
                device = %shared.name, pid = cred.pid, client_id = peer.client_id,
                "client closed"
            );
        });
    } else {
        debug!(device = %shared.name, pid = cred.pid, "control closed");
    }
}

fn is_blocking_wait(req: &Request) -> bool {
    req.request == DRIVER_CMD_WAIT_EVENT
        && WaitEventArgs::from_bytes(&req.arg).is_some_and(|a| a.timeout_ns != 0)
}

/// Who holds an open, for the audit log and messages.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) cred: PeerCred,
    /// Container id ("" on the host).
    pub(crate) container: String,
    pub(crate) admin: bool,
    /// The id the device reports for the open (LIST_CLIENTS' `client_id`); 0 for a control
    /// open, which is not a client.
    pub(crate) client_id: u32,
}

/// Handles HELLO: `Ok(Some((client, role, peer)))` when the open succeeded (reply sent),
/// `Ok(None)` when it was refused (reply sent, connection to be closed).
fn hello(
    shared: &Shared,
    conn: &SeqPacket,
    who: &Identity,
    req: &Request,
) -> Result<Option<(u32, Role, Peer)>, ProtoError> {
    let cred = &who.cred;
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
        admin: who.admin,
        container: who.container,
        comm: who.comm,
        tenant: who.tenant,
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
            let usage = ClientUsage {
                container: params.container,
                ..ClientUsage::default()
            };
            let container = usage.container_id().unwrap_or_default();
            let client_id = shared.dev.client_id(client).unwrap_or(0);
            if role == Role::Client {
                shared.audit.record(Record::ClientOpened, cred.uid, || {
                    info!(
                        device = %shared.name, pid = cred.pid, uid = cred.uid,
                        admin = params.admin, container = %container, client_id,
                        "client opened"
                    );
                });
            } else {
                debug!(
                    device = %shared.name, pid = cred.pid, uid = cred.uid, admin = params.admin,
                    container = %container, "control opened"
                );
            }
            let peer = Peer {
                cred: *cred,
                container: container.to_string(),
                admin: params.admin,
                client_id,
            };
            Ok(Some((client, role, peer)))
        }
        Err(e) => {
            let mut r = Reply::err(
                Kind::Hello as u16,
                req.tag,
                e.error.errno,
                e.error.message().as_str(),
            );
            if let Some(holder) = e.holder {
                r.msg = format!(
                    "{} is in exclusive mode and held by {}",
                    shared.name, holder
                );
                let mut p = vec![0u8; ClientUsage::SIZE];
                holder.encode(&mut p);
                r.payload = p;
            }
            shared.audit.record(Record::OpenRefused, cred.uid, || {
                info!(device = %shared.name, pid = cred.pid, error = %r.msg, "open refused");
            });
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
    match shared.dev.map_shared(client, a.cookie, a.len) {
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
            &Reply::err(Kind::Mmap as u16, req.tag, e.errno, e.message().as_str()),
            None,
        ),
    }
}

/// LIST_CLIENTS' and LIST_KERNELS' output: what the driver writes at `buf + k` becomes payload
/// byte `k`.
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

fn ioctl(shared: &Shared, conn: &SeqPacket, peer: &Peer, client: u32, req: Request) {
    let Request {
        tag,
        request,
        mut arg,
        ..
    } = req;
    if request == DRIVER_CMD_SET_DEVICE_SHARE || request == DRIVER_CMD_TENANT_SHARE {
        let r = if request == DRIVER_CMD_TENANT_SHARE {
            admin::tenant_share(shared, client, peer, &mut arg)
        } else {
            admin::set_share(shared, client, peer, &mut arg)
        };
        let mut reply = driver_reply(Kind::Ioctl, tag, arg, r);
        if reply.errno == Errno::EPERM.code() && !peer.admin {
            reply.msg = format!("{}; {}", reply.msg, shared.admin.eperm_hint(&peer.cred));
        }
        send_reply(conn, &reply, None);
        return;
    }
    let mut mem = PayloadMem {
        base: 0,
        limit: 0,
        out: Vec::new(),
    };
    // The LIST commands' entries come back as the payload (their `buf` is the caller's).
    let list = match request {
        DRIVER_CMD_LIST_CLIENTS => {
            ListClientsArgs::from_bytes(&arg).map(|a| (a.buf, a.capacity, a.entry_size))
        }
        DRIVER_CMD_LIST_KERNELS => {
            ListKernelsArgs::from_bytes(&arg).map(|a| (a.buf, a.capacity, a.entry_size))
        }
        DRIVER_CMD_TRACE => TraceArgs::from_bytes(&arg).map(|a| (a.buf, a.capacity, a.entry_size)),
        DRIVER_CMD_READ_EVENTS => {
            ReadEventsArgs::from_bytes(&arg).map(|a| (a.buf, a.capacity, a.entry_size))
        }
        _ => None,
    };
    if let Some((buf, capacity, entry_size)) = list {
        mem.base = buf;
        mem.limit = (capacity as usize)
            .saturating_mul(entry_size as usize)
            .min(MAX_PAYLOAD);
    }
    let r = shared.dev.ioctl(client, request, &mut arg, &mut mem);
    let mut reply = driver_reply(Kind::Ioctl, tag, arg, r);
    if reply.errno == 0 {
        reply.payload = mem.out;
        // A new allocation's or stream's memfds come with the reply (`crate::premap`).
        if let Some((records, fds)) = premap::objects(&shared.dev, client, request, &reply.arg) {
            reply.payload = Premapped::encode_all(&records);
            reply.nfds = fds.len() as u32;
            let borrowed: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
            send_reply_fds(conn, &reply, &borrowed);
            return;
        }
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
}
