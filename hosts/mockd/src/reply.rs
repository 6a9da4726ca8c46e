//! The replies of `davinci-mockd`: a reply's bytes (one that does not encode becomes
//! `EPROTO`), sending one (with its descriptors), the `EPROTO` reply to a malformed
//! frame and the reply to a dispatched ioctl. Used by the connections (`conn`), the wait
//! thread (`waits`) and the acceptor's refusals (`daemon`).
#![forbid(unsafe_code)]

use davinci_driver_core::Error;
use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{Kind, ProtoError, Reply, Request};
use davinci_uapi::Errno;
use tracing::{debug, warn};

/// A reply's bytes; one that does not encode becomes an `EPROTO` reply.
pub(crate) fn encode_reply(r: &Reply) -> Option<Vec<u8>> {
    match r.encode() {
        Ok(b) => Some(b),
        Err(e) => {
            warn!(error = %e, "reply does not encode; sending EPROTO instead");
            Reply::err(r.kind, r.tag, Errno::EPROTO, "reply too large")
                .encode()
                .ok()
        }
    }
}

/// Sends a reply (with at most one descriptor); a peer that went away is not an error here.
pub(crate) fn send_reply(conn: &SeqPacket, r: &Reply, fd: Option<std::os::fd::BorrowedFd<'_>>) {
    let fds: Vec<std::os::fd::BorrowedFd<'_>> = fd.into_iter().collect();
    send_reply_fds(conn, r, &fds);
}

/// Sends a reply with `fds` (`r.nfds` of them); a peer that went away is not an error here.
pub(crate) fn send_reply_fds(conn: &SeqPacket, r: &Reply, fds: &[std::os::fd::BorrowedFd<'_>]) {
    let Some(bytes) = encode_reply(r) else {
        return;
    };
    if let Err(e) = conn.send(&bytes, fds) {
        debug!(error = %e, "reply not delivered (peer gone)");
    }
}

pub(crate) fn proto_reply(frame: &[u8], e: ProtoError) -> Reply {
    let kind = Request::peek_kind(frame).map_or(0, |k| k as u16);
    Reply::err(kind, Request::peek_tag(frame), Errno::EPROTO, e.0)
}

pub(crate) fn driver_reply(kind: Kind, tag: u32, arg: Vec<u8>, r: Result<(), Error>) -> Reply {
    match r {
        Ok(()) => Reply::ok(kind, tag, arg),
        Err(e) => Reply {
            arg,
            ..Reply::err(kind as u16, tag, e.errno, e.message().as_str())
        },
    }
}
