//! One admin request run on the device core: OPEN, CLOSE, IOCTL, MMAP_TARGET, WAIT_AGAIN, UNDO,
//! INJECT, each answered with a [`Completion`] (an error is a completion too, never a panic or a
//! dropped request) that lists the mappings the request revoked.
#![forbid(unsafe_code)]

use davinci_driver_core::{
    DeviceCore, Error, HostFault, MmapTarget, OpenParams, Reply, Role, Tenant, WaitSpec,
    MAX_CLIENTS,
};
use davinci_hwif::layout::LIST_ENTRIES;
use davinci_hwif::{AdminOp, AdminRequest, ArgBuf, Completion, MapKind, MmapReply, ReplyKind};
use davinci_uapi::{Errno, WaitEventArgs, WaitKind, Wire};

// The list area holds an entry for every client a device can have.
const _: () = assert!(MAX_CLIENTS as u64 <= LIST_ENTRIES);

use crate::platform::Bar2Platform;

fn failed(tag: u64, client: u32, arg: ArgBuf, e: &Error) -> Completion {
    let errno = u32::try_from(e.errno.code()).unwrap_or(5).max(1);
    // The completion holds MSG_CAPACITY bytes: the short form of a quota refusal.
    let msg = e.message_within(davinci_hwif::MSG_CAPACITY);
    Completion::new(tag, ReplyKind::Failed, errno, client, arg, msg.as_str())
}

/// An IOCTL's or WAIT_AGAIN's completion: done (`Ok(true)`), a wait not reached yet
/// (`Ok(false)`: the guest sleeps until vector 1 and asks again), or the failure; `arg` as the
/// call left it in every case.
fn answer(tag: u64, client: u32, arg: ArgBuf, r: Result<bool, Error>) -> Completion {
    match r {
        Ok(true) => Completion::new(tag, ReplyKind::Done, 0, client, arg, ""),
        Ok(false) => Completion::new(
            tag,
            ReplyKind::WaitNeeded,
            0,
            client,
            arg,
            "not reached: wait for vector 1 and ask again",
        ),
        Err(e) => failed(tag, client, arg, &e),
    }
}

/// What the device learns from a request it ran (beyond the completion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Nothing to remember.
    None,
    /// An open was attached (its `client`).
    Opened(u32),
    /// An open was detached (its `client`).
    Closed(u32),
}

/// Runs `req` on `core`; the completion lists what the request revoked.
pub fn execute(core: &mut DeviceCore<Bar2Platform>, req: &AdminRequest) -> (Completion, Effect) {
    // Anything recorded outside a request (none today) is not this request's.
    let _ = core.platform_mut().take_revokes();
    let (mut c, effect) = run(core, req);
    let (revokes, dropped) = core.platform_mut().take_revokes();
    for r in revokes {
        c.revoke(r);
    }
    for _ in 0..dropped {
        c.revoke(davinci_hwif::Revoke::default());
    }
    (c, effect)
}

/// A WAIT_EVENT's arguments as the wait they ask for.
fn wait_spec(arg: &[u8]) -> Result<WaitSpec, Error> {
    if arg.len() != WaitEventArgs::SIZE {
        return Err(Error::new(
            Errno::EINVAL,
            "WAIT_AGAIN: not a WAIT_EVENT argument",
        ));
    }
    let a = WaitEventArgs::decode(arg);
    let kind = WaitKind::from_u32(a.kind).ok_or(Error::new(
        Errno::EINVAL,
        "wait kind must be 1 (stream) or 2 (event)",
    ))?;
    Ok(WaitSpec {
        kind,
        handle: a.handle,
        value: a.value,
        timeout_ns: a.timeout_ns,
    })
}

fn run(core: &mut DeviceCore<Bar2Platform>, req: &AdminRequest) -> (Completion, Effect) {
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
                // The module's rule: the opener's container, else its user.
                tenant: Tenant::of(o.uid, &o.container),
            };
            match core.open(params) {
                Ok(client) => (
                    Completion::new(tag, ReplyKind::Done, 0, client, ArgBuf::EMPTY, ""),
                    Effect::Opened(client),
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
            let mut list = core.platform().list_area();
            let r = core.ioctl(client, *request, arg.as_mut_slice(), &mut list);
            let done = r.map(|reply| !matches!(reply, Reply::Wait(_)));
            (answer(tag, client, arg, done), Effect::None)
        }
        AdminOp::WaitAgain { arg, timed_out } => {
            let mut arg = *arg;
            let r = wait_spec(arg.as_slice())
                .and_then(|spec| core.finish_wait(client, &spec, arg.as_mut_slice(), *timed_out));
            (
                answer(tag, client, arg, r.map(|v| v.is_some())),
                Effect::None,
            )
        }
        AdminOp::Undo { request, arg } => {
            let c = match core.undo_create(client, *request, arg.as_slice()) {
                Ok(()) => Completion::new(tag, ReplyKind::Done, 0, client, ArgBuf::EMPTY, ""),
                Err(e) => failed(tag, client, ArgBuf::EMPTY, &e),
            };
            (c, Effect::None)
        }
        AdminOp::Inject { .. } => {
            // The guest's module checked the text (its parameter refuses a bad one); the
            // device checks again: the admin queue is input like any other.
            let c = match HostFault::parse(req.op.inject_text()) {
                Ok(fault) => {
                    core.apply_host_fault(&fault);
                    Completion::new(tag, ReplyKind::Done, 0, 0, ArgBuf::EMPTY, "")
                }
                Err(_) => failed(
                    tag,
                    0,
                    ArgBuf::EMPTY,
                    &Error::new(
                        Errno::EINVAL,
                        "INJECT: expected error-at=N[:ERRNO], hang-at=N or stop-at=N \
                         (optionally @pid=N,uid=N,comm=NAME,streams=N), none or reset",
                    ),
                ),
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
        MmapTarget::Memory {
            owner,
            offset,
            len,
            skip,
        } => {
            // An import of a range maps it alone: whole pages from `skip` into the run.
            let (at, run) = core.platform().allocation_range(owner, offset)?;
            if skip.checked_add(len).is_none_or(|end| end > run) {
                return Err(Error::new(
                    davinci_uapi::Errno::EFAULT,
                    "the imported range lies outside its allocation",
                ));
            }
            if skip == 0 {
                reply(MapKind::Memory, (at, run))
            } else {
                reply(MapKind::Memory, (at + skip, len))
            }
        }
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
