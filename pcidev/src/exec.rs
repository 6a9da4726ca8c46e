//! One admin request run on the device core: OPEN, CLOSE, IOCTL, MMAP_TARGET, each answered
//! with a [`Completion`] (an error is a completion too, never a panic or a dropped request).
#![forbid(unsafe_code)]

use davinci_driver_core::{DeviceCore, Error, MmapTarget, NoUserMem, OpenParams, Reply, Role};
use davinci_hwif::{AdminOp, AdminRequest, ArgBuf, Completion, MapKind, MmapReply, ReplyKind};

use crate::platform::Bar2Platform;

fn failed(tag: u64, client: u32, arg: ArgBuf, e: &Error) -> Completion {
    let errno = u32::try_from(e.errno.code()).unwrap_or(5).max(1);
    Completion::new(tag, ReplyKind::Failed, errno, client, arg, e.msg)
}

/// What the device learns from a request it ran (beyond the completion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Nothing to remember.
    None,
    /// A client was attached (its id).
    Opened(u32),
    /// A client was detached.
    Closed(u32),
}

/// Runs `req` on `core`.
pub fn execute(core: &mut DeviceCore<Bar2Platform>, req: &AdminRequest) -> (Completion, Effect) {
    let (tag, client) = (req.tag, req.client);
    match &req.op {
        AdminOp::Open(o) => {
            let params = OpenParams {
                role: if o.control {
                    Role::Control
                } else {
                    Role::Client
                },
                pid: o.pid,
                uid: o.uid,
                admin: o.admin,
                container: o.container,
                comm: o.comm,
            };
            match core.open(params) {
                Ok(id) => (
                    Completion::new(tag, ReplyKind::Done, 0, id, ArgBuf::EMPTY, ""),
                    Effect::Opened(id),
                ),
                Err(e) => (failed(tag, 0, ArgBuf::EMPTY, &e.error), Effect::None),
            }
        }
        AdminOp::Close => {
            core.close(client);
            core.platform_mut().forget_client(client);
            (
                Completion::new(tag, ReplyKind::Done, 0, client, ArgBuf::EMPTY, ""),
                Effect::Closed(client),
            )
        }
        AdminOp::Ioctl { request, arg } => {
            let mut arg = *arg;
            let r = core.ioctl(client, *request, arg.as_mut_slice(), &mut NoUserMem);
            let c = match r {
                Ok(Reply::Done | Reply::StreamCreated(_) | Reply::Kick(_)) => {
                    Completion::new(tag, ReplyKind::Done, 0, client, arg, "")
                }
                Ok(Reply::Wait(_)) => Completion::new(
                    tag,
                    ReplyKind::WaitNeeded,
                    0,
                    client,
                    arg,
                    "not reached: wait for vector 1 and ask again",
                ),
                Err(e) => failed(tag, client, arg, &e),
            };
            (c, Effect::None)
        }
        AdminOp::MmapTarget { cookie, len } => {
            let c = match map_target(core, client, *cookie, *len) {
                Ok(m) => Completion::new(tag, ReplyKind::Done, 0, client, m.to_arg(), ""),
                Err(e) => failed(tag, client, ArgBuf::EMPTY, &e),
            };
            (c, Effect::None)
        }
    }
}

/// Where `client`'s cookie lies in BAR2.
fn map_target(
    core: &DeviceCore<Bar2Platform>,
    client: u32,
    cookie: u64,
    len: u64,
) -> Result<MmapReply, Error> {
    let gone = || {
        Error::new(
            davinci_uapi::Errno::ENOENT,
            "no such stream for this client",
        )
    };
    let reply = |kind, (offset, len)| MmapReply { kind, offset, len };
    Ok(match core.mmap_target(client, cookie, len)? {
        MmapTarget::Memory { owner, offset, .. } => reply(
            MapKind::Memory,
            core.platform().allocation_range(owner, offset)?,
        ),
        MmapTarget::CmdRing { stream } => {
            let m = core.stream_mem(client, stream).ok_or_else(gone)?;
            reply(MapKind::CmdRing, m.cmd)
        }
        MmapTarget::EventRing { stream } => {
            let m = core.stream_mem(client, stream).ok_or_else(gone)?;
            reply(MapKind::EventRing, m.event)
        }
        MmapTarget::Doorbell { stream } => {
            let m = core.stream_mem(client, stream).ok_or_else(gone)?;
            reply(MapKind::Doorbell, (m.doorbell, davinci_uapi::DOORBELL_SIZE))
        }
    })
}
