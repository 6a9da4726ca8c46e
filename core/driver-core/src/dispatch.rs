//! ioctl dispatch: (request number, argument bytes) -> (errno, argument bytes). Every field is
//! validated: unknown command or wrong size -> `ENOTTY`, reserved fields/bits -> `EINVAL`,
//! a foreign or stale handle -> `ENOENT`, a control open using resources -> `EPERM`.

use crate::device::entries::wait_state;
use davinci_uapi::ioctl::ioc_size;
use davinci_uapi::*;

use crate::device::entries::{poison_queued_records, StreamState};
use crate::device::DeviceCore;
use crate::error::{ensure, fail, Error, Result};
use crate::message::Message;
use crate::platform::{locked, Lock, Platform};

mod list;
pub(crate) use list::List;

/// Writes into the caller's memory at a user pointer (`copy_to_user` in the kernel; the reply
/// payload in the mock daemon).
pub trait UserMem {
    /// Writes `data` at user address `addr`; `EFAULT` if it cannot.
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<()>;
}

/// A `UserMem` that refuses every write (for callers with no user pointers to serve).
pub struct NoUserMem;

impl UserMem for NoUserMem {
    fn write(&mut self, _addr: u64, _data: &[u8]) -> Result<()> {
        Err(Error::new(Errno::EFAULT, "no user memory on this path"))
    }
}

/// A blocking WAIT_EVENT the platform must finish: sleep (with the device unlocked) until
/// [`DeviceCore::check_wait`] says ready, or until `timeout_ns` passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitSpec {
    /// Stream or event.
    pub kind: WaitKind,
    /// Its handle.
    pub handle: u32,
    /// The value awaited.
    pub value: u64,
    /// How long to wait.
    pub timeout_ns: u64,
}

/// Result of a successful dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Done; the argument bytes hold the reply.
    Done,
    /// WAIT_EVENT must block: wait per the spec, then re-run [`DeviceCore::check_wait`] and write
    /// its result with [`DeviceCore::finish_wait`].
    Wait(WaitSpec),
    /// A stream was created (argument bytes hold its description); start its worker.
    StreamCreated(u32),
    /// The stream needs a kick (SUBMIT_TASK, NOTIFY).
    Kick(u32),
}

/// Where a wait stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitState {
    /// Reached; the current value.
    Ready(u64),
    /// Not yet; the current value.
    NotYet(u64),
}

/// The tenant TENANT_SHARE's argument names: a user (`uid`, no container) or a container
/// (an id, `uid` 0).
fn tenant_of_args(a: &TenantShareArgs) -> Result<crate::Tenant> {
    let empty = a.container.iter().all(|&b| b == 0);
    match a.tenant_kind {
        TENANT_USER => {
            ensure!(
                empty,
                EINVAL,
                "a user tenant names no container (container must be all NULs)"
            );
            Ok(crate::Tenant::User(a.uid))
        }
        TENANT_CONTAINER => {
            ensure!(
                a.uid == 0,
                EINVAL,
                "a container tenant names no user (uid must be 0)"
            );
            ensure!(!empty, EINVAL, "a container tenant needs its container id");
            let len = a
                .container
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(a.container.len());
            ensure!(
                a.container.iter().skip(len).all(|&b| b == 0),
                EINVAL,
                "container must be NUL-padded (no bytes after the first NUL)"
            );
            Ok(crate::Tenant::Container(a.container))
        }
        _ => fail!(
            EINVAL,
            "tenant_kind must be DAVINCI_TENANT_USER (1) or DAVINCI_TENANT_CONTAINER (2)"
        ),
    }
}

/// A command whose argument goes in and comes back out: decoded, handled by `f`, encoded.
fn in_out<T: Wire>(arg: &mut [u8], f: impl FnOnce(&mut T) -> Result<()>) -> Result<Reply> {
    let mut a: T = decode(arg)?;
    f(&mut a)?;
    a.encode(arg);
    Ok(Reply::Done)
}

fn decode<T: Wire>(arg: &[u8]) -> Result<T> {
    match T::from_bytes(arg) {
        Some(v) => Ok(v),
        None => Err(Error::new(
            Errno::ENOTTY,
            "argument size does not match the command",
        )),
    }
}

impl<P: Platform> DeviceCore<P> {
    /// Dispatches one ioctl for `client`. `arg` holds exactly the bytes the caller passed
    /// (`_IOC_SIZE(request)` of them); reply fields are written back into it. A failure is
    /// also kept for the client's next GET_LAST_ERROR.
    pub fn ioctl(
        &mut self,
        client: u32,
        request: u32,
        arg: &mut [u8],
        user: &mut dyn UserMem,
    ) -> Result<Reply> {
        let r = self.dispatch(client, request, arg, user);
        if let Err(e) = &r {
            self.note_failure(client, request, e);
        }
        r
    }

    /// Keeps `e` as the last failure of `client` (GET_LAST_ERROR), unless it is what polling
    /// answers: `EAGAIN` (a full command ring, a WAIT_EVENT with timeout 0 not reached) and
    /// `ETIMEDOUT` (a wait's timeout passed) say "not yet", not "wrong", and a client that
    /// polls would otherwise replace the record of its last real failure at every look
    /// (docs/abi.md, GET_LAST_ERROR). They are not counted either.
    /// A failure the host decided for `client`'s call `request` (the bound on blocked waits,
    /// [`BlockedWaits`](crate::BlockedWaits)), recorded as the device's own are: GET_LAST_ERROR
    /// then says why.
    pub fn note_host_failure(&mut self, client: u32, request: u32, e: &Error) {
        self.note_failure(client, request, e);
    }

    fn note_failure(&mut self, client: u32, request: u32, e: &Error) {
        if matches!(e.errno, Errno::EAGAIN | Errno::ETIMEDOUT) {
            return;
        }
        if let Some(c) = self.clients.get_mut(client) {
            c.last_error = Some((request, *e));
            c.failures = c.failures.wrapping_add(1);
        }
        if let Some(q) = e.quota {
            self.note_refusal(client, q.kind);
        }
    }

    fn dispatch(
        &mut self,
        client: u32,
        request: u32,
        arg: &mut [u8],
        user: &mut dyn UserMem,
    ) -> Result<Reply> {
        let Some(cmd) = command_by_request(request) else {
            fail!(ENOTTY, "unknown ioctl command");
        };
        ensure!(
            arg.len() == ioc_size(request),
            ENOTTY,
            "argument size does not match the command"
        );
        let Some(c) = self.clients.get(client) else {
            fail!(ENODEV, "client is not attached");
        };
        match cmd.caller {
            Caller::Client => self.require_client(client)?,
            Caller::Admin => ensure!(
                c.params.admin,
                EPERM,
                "changing device sharing or a tenant's share needs an admin (the kernel driver: CAP_SYS_ADMIN; davinci-mockd: root, the daemon's own user, --admin-uid or an --admin-group member)"
            ),
            Caller::Any => {}
        }
        match request {
            DRIVER_CMD_CREATE_CONTEXT => {
                let mut a: CreateContextArgs = decode(arg)?;
                ensure!(
                    a.flags == 0 && a.reserved == 0,
                    EINVAL,
                    "context flags and reserved must be 0"
                );
                a.handle = self.create_context(client)?;
                a.encode(arg);
                Ok(Reply::Done)
            }
            DRIVER_CMD_DESTROY_CONTEXT => {
                let a: HandleArgs = decode(arg)?;
                ensure!(a.pad == 0, EINVAL, "pad must be 0");
                self.destroy_context(client, a.handle)?;
                Ok(Reply::Done)
            }
            DRIVER_CMD_SUBMIT_TASK => {
                let mut a: SubmitTaskArgs = decode(arg)?;
                ensure!(
                    a.flags == 0 && a.pad == 0,
                    EINVAL,
                    "submit flags and pad must be 0"
                );
                a.index = self.submit_slow(client, a.stream, &a.desc)?;
                a.encode(arg);
                Ok(Reply::Kick(a.stream))
            }
            DRIVER_CMD_ALLOC_MEMORY => in_out(arg, |a| self.alloc_memory(client, a)),
            DRIVER_CMD_EXPORT_MEMORY => in_out(arg, |a| self.export_memory(client, a)),
            DRIVER_CMD_EXPORT_RANGE => in_out(arg, |a| self.export_range(client, a)),
            DRIVER_CMD_UNEXPORT_MEMORY => in_out(arg, |a| self.unexport_memory(client, a)),
            DRIVER_CMD_IMPORT_MEMORY => in_out(arg, |a| self.import_memory(client, a)),
            DRIVER_CMD_EXPORT_EVENT => in_out(arg, |a| self.export_event(client, a)),
            DRIVER_CMD_IMPORT_EVENT => in_out(arg, |a| self.import_event(client, a)),
            DRIVER_CMD_FREE_MEMORY => {
                let a: HandleArgs = decode(arg)?;
                ensure!(a.pad == 0, EINVAL, "pad must be 0");
                self.free_memory(client, a.handle)?;
                Ok(Reply::Done)
            }
            DRIVER_CMD_WAIT_EVENT => {
                let mut a: WaitEventArgs = decode(arg)?;
                ensure!(a.pad == 0, EINVAL, "pad must be 0");
                let Some(kind) = WaitKind::from_u32(a.kind) else {
                    fail!(EINVAL, "wait kind must be 1 (stream) or 2 (event)");
                };
                ensure!(
                    kind != WaitKind::Stream || a.value <= u64::from(u32::MAX),
                    EINVAL,
                    "a stream's completion count is 32 bits: the high half of value must be 0"
                );
                let spec = WaitSpec {
                    kind,
                    handle: a.handle,
                    value: a.value,
                    timeout_ns: a.timeout_ns,
                };
                let state = self.check_wait(client, &spec, &mut a);
                a.encode(arg);
                match state? {
                    WaitState::Ready(_) => Ok(Reply::Done),
                    WaitState::NotYet(_) if a.timeout_ns == 0 => {
                        fail!(EAGAIN, "not reached yet (timeout 0 polls)")
                    }
                    WaitState::NotYet(_) => Ok(Reply::Wait(spec)),
                }
            }
            DRIVER_CMD_CREATE_STREAM => {
                let mut a: CreateStreamArgs = decode(arg)?;
                self.create_stream(client, &mut a)?;
                a.encode(arg);
                Ok(Reply::StreamCreated(a.handle))
            }
            DRIVER_CMD_DESTROY_STREAM => {
                let a: HandleArgs = decode(arg)?;
                ensure!(a.pad == 0, EINVAL, "pad must be 0");
                self.destroy_stream(client, a.handle)?;
                Ok(Reply::Done)
            }
            DRIVER_CMD_GET_INFO => {
                self.info_for(client).encode(arg);
                Ok(Reply::Done)
            }
            DRIVER_CMD_GET_LAST_ERROR => {
                let (request, e) = c.last_error.map_or((0, None), |(r, e)| (r, Some(e)));
                LastError {
                    request,
                    error: e.map_or(0, |e| e.errno.code() as u32),
                    count: c.failures,
                    message: LastError::message_field(
                        e.map_or(Message::with_capacity(0), |e| {
                            e.message_within(LAST_ERROR_MESSAGE_LEN - 1)
                        })
                        .as_str(),
                    ),
                }
                .encode(arg);
                Ok(Reply::Done)
            }
            DRIVER_CMD_GET_USAGE => {
                self.own_usage(client)?.encode(arg);
                Ok(Reply::Done)
            }
            DRIVER_CMD_TRACE | DRIVER_CMD_READ_EVENTS => self.observe(client, request, arg, user),
            DRIVER_CMD_GET_COUNTERS | DRIVER_CMD_GET_IDENTITY | DRIVER_CMD_GET_SENSORS => {
                self.report(request, arg);
                Ok(Reply::Done)
            }
            DRIVER_CMD_QUERY_DEVICE_SHARE => {
                DeviceShareArgs {
                    mode: self.share as u32,
                    clients: self.client_count(),
                    reserved: 0,
                }
                .encode(arg);
                Ok(Reply::Done)
            }
            DRIVER_CMD_SET_DEVICE_SHARE => {
                let a: DeviceShareArgs = decode(arg)?;
                ensure!(
                    a.clients == 0 && a.reserved == 0,
                    EINVAL,
                    "only mode may be set; clients and reserved must be 0"
                );
                let Some(mode) = ShareMode::from_u32(a.mode) else {
                    fail!(EINVAL, "share mode must be 0 (exclusive) or 1 (shared)");
                };
                self.set_share_mode(client, mode)?;
                Ok(Reply::Done)
            }
            DRIVER_CMD_TENANT_SHARE => {
                let mut a: TenantShareArgs = decode(arg)?;
                let key = tenant_of_args(&a)?;
                ensure!(a.reserved == 0, EINVAL, "reserved must be 0");
                let set = match a.set {
                    0 => {
                        ensure!(a.shares == 0, EINVAL, "shares must be 0 unless set is 1");
                        None
                    }
                    1 => Some(a.shares),
                    _ => fail!(EINVAL, "set must be 0 (read) or 1 (set shares)"),
                };
                let now = self.tenant_share(client, key, set)?;
                a.shares = now.shares;
                a.slots = now.slots;
                a.free_slots = now.free_slots;
                a.tenant_flags = now.tenant_flags;
                a.encode(arg);
                Ok(Reply::Done)
            }
            DRIVER_CMD_LIST_CLIENTS => {
                let mut a: ListClientsArgs = decode(arg)?;
                ensure!(a.pad == 0, EINVAL, "pad must be 0");
                let list = List::new(a.buf, a.capacity, a.entry_size)?;
                a.count = list.write(user, self.clients_seen_by(client))?;
                a.encode(arg);
                Ok(Reply::Done)
            }
            DRIVER_CMD_LIST_KERNELS => {
                let mut a: ListKernelsArgs = decode(arg)?;
                ensure!(a.pad == 0, EINVAL, "pad must be 0");
                let list = List::new(a.buf, a.capacity, a.entry_size)?;
                a.count = list.write(user, crate::engine::launch::kernel_table())?;
                a.encode(arg);
                Ok(Reply::Done)
            }
            DRIVER_CMD_CREATE_EVENT => {
                let mut a: CreateEventArgs = decode(arg)?;
                ensure!(a.pad == 0, EINVAL, "pad must be 0");
                a.handle = self.create_event(client, a.ctx, a.flags)?;
                a.encode(arg);
                Ok(Reply::Done)
            }
            DRIVER_CMD_DESTROY_EVENT => {
                let a: HandleArgs = decode(arg)?;
                ensure!(a.pad == 0, EINVAL, "pad must be 0");
                self.destroy_event(client, a.handle)?;
                Ok(Reply::Done)
            }
            DRIVER_CMD_NOTIFY => {
                let a: HandleArgs = decode(arg)?;
                ensure!(a.pad == 0, EINVAL, "pad must be 0");
                self.stream_state(client, a.handle)?;
                // Without a doorbell word, NOTIFY is the doorbell (GET_COUNTERS counts it);
                // with one, the host counts the word's changes (`stream_woke`).
                if !self
                    .config
                    .platform_features
                    .contains(Features::DOORBELL_FUTEX)
                {
                    if let Some(s) = self.streams.get_mut(a.handle) {
                        s.run.get_mut().doorbells += 1;
                    }
                }
                Ok(Reply::Kick(a.handle))
            }
            _ => fail!(ENOTTY, "unknown ioctl command"),
        }
    }

    /// Where `spec` stands for `client`; fills `current` and `status` of `out`.
    pub fn check_wait(
        &self,
        client: u32,
        spec: &WaitSpec,
        out: &mut WaitEventArgs,
    ) -> Result<WaitState> {
        match spec.kind {
            WaitKind::Stream => {
                let s = match self.streams.get(spec.handle) {
                    Some(s) if s.owner == client => s,
                    _ => fail!(ENOENT, "no such stream for this client"),
                };
                let (cur, state) = locked(&s.run, |e| (e.evt.tail(), e.state))?;
                out.current = cur as u64;
                if let StreamState::Error(e) = state {
                    out.status = e.code() as u32;
                    fail!(
                        EIO,
                        "the stream is in the error state (status holds the errno)"
                    );
                }
                out.status = 0;
                let reached = (cur.wrapping_sub(spec.value as u32) as i32) >= 0;
                Ok(if reached {
                    WaitState::Ready(cur as u64)
                } else {
                    WaitState::NotYet(cur as u64)
                })
            }
            WaitKind::Event => {
                let e = match self.events.get(spec.handle) {
                    Some(e) if e.owner == client => e,
                    _ => fail!(ENOENT, "no such event for this client"),
                };
                let Some(state) = wait_state(&self.events, e) else {
                    fail!(
                        ECANCELED,
                        "the imported event's exporter destroyed it (destroy the import)"
                    );
                };
                let (value, unreachable) = locked(state, |v| (v.value, v.unreachable(spec.value)))?;
                out.current = value;
                out.status = 0;
                if let Some(errno) = unreachable {
                    out.status = errno.code() as u32;
                    fail!(
                        EIO,
                        "the event will not reach this value: the stream that was to record it was stopped (status holds its errno)"
                    );
                }
                Ok(if value >= spec.value {
                    WaitState::Ready(value)
                } else {
                    WaitState::NotYet(value)
                })
            }
        }
    }

    /// Completes a blocking WAIT_EVENT after the platform slept: writes the reply into `arg`;
    /// `ETIMEDOUT` if `timed_out` and still not reached.
    pub fn finish_wait(
        &mut self,
        client: u32,
        spec: &WaitSpec,
        arg: &mut [u8],
        timed_out: bool,
    ) -> Result<Option<()>> {
        let r = self.finish_wait_inner(client, spec, arg, timed_out);
        if let Err(e) = &r {
            self.note_failure(client, DRIVER_CMD_WAIT_EVENT, e);
        }
        r
    }

    fn finish_wait_inner(
        &self,
        client: u32,
        spec: &WaitSpec,
        arg: &mut [u8],
        timed_out: bool,
    ) -> Result<Option<()>> {
        let mut a: WaitEventArgs = decode(arg)?;
        let state = match self.check_wait(client, spec, &mut a) {
            // It existed when the wait began: it was destroyed meanwhile.
            Err(e) if e.errno == Errno::ENOENT => Err(Error::new(
                Errno::ECANCELED,
                "the stream or event was destroyed while waiting",
            )),
            other => other,
        };
        a.encode(arg);
        match state? {
            WaitState::Ready(_) => Ok(Some(())),
            WaitState::NotYet(_) if timed_out => fail!(ETIMEDOUT, "wait timed out"),
            WaitState::NotYet(_) => Ok(None),
        }
    }

    /// SUBMIT_TASK: places `desc` into the stream's command ring as the client's producer
    /// would, reading the shared tail once. Returns the ring index used.
    ///
    /// Corrupt indices found here put the stream in the error state (`EPROTO`, docs/abi.md
    /// §5.5) at once, exactly as the engine does when it finds them: the failure does not
    /// depend on whether the device's worker looked at the ring first.
    fn submit_slow(&mut self, client: u32, stream: u32, desc: &TaskDesc) -> Result<u32> {
        let who = self.who(client);
        let DeviceCore {
            streams,
            events,
            platform,
            event_log,
            ..
        } = self;
        let (owner, ctx, s) = match streams.get_mut(stream) {
            Some(s) if s.owner == client => (s.owner, s.ctx, s.run.get_mut()),
            _ => fail!(ENOENT, "no such stream for this client"),
        };
        if let StreamState::Error(_) = s.state {
            fail!(EIO, "the stream is in the error state");
        }
        match s.cmd.submit_on_behalf(desc) {
            Ok(index) => Ok(index),
            Err(davinci_ring::SubmitError::Full) => fail!(EAGAIN, "command ring is full"),
            Err(davinci_ring::SubmitError::Corrupt) => {
                let head = s.cmd.head();
                s.enter_error(Errno::EPROTO, head);
                let e = crate::observe::Event {
                    code: DEVICE_EVENT_STREAM_STOPPED,
                    stream,
                    detail: Errno::EPROTO.code() as u32,
                    value: u64::from(head),
                };
                event_log.push(crate::observe::encode_event(platform.now_ns(), who, e));
                poison_queued_records(events, (owner, ctx), s, None, Errno::EPROTO);
                // WAIT_EVENT callers on this stream now fail with EIO.
                platform.notify_waiters(owner);
                fail!(
                    EIO,
                    "command ring indices are corrupt: the stream is now in the error state (EPROTO)"
                )
            }
        }
    }
}
