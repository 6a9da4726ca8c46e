//! What each [`Op`] does ([`State::step`]): the structured ioctls with their fields from the
//! input and handles picked from those seen, each with the assertions of its own outcome
//! (a created object's shape, memory accounting, GET_INFO against `info_for`, counts), raw
//! requests, stream runs and mmap lookups.
#![forbid(unsafe_code)]

use davinci_driver_core::test_util::params;
use davinci_driver_core::Role;
use davinci_uapi::ioctl::ioc_size;
use davinci_uapi::*;

use super::input::{pick, Op};
use super::state::{Open, State};
use super::user_mem::{USER_BASE, USER_LEN};

impl State {
    pub(super) fn step(&mut self, op: Op) {
        match op {
            Op::Open { control, admin } => {
                let role = if control { Role::Control } else { Role::Client };
                self.next_pid += 1;
                let p = params(self.next_pid, role, admin);
                match self.dev.open(p) {
                    Ok(client) => {
                        assert!(self.opens.iter().all(|o| o.client != client));
                        self.opens.push(Open {
                            client,
                            role,
                            uid: p.uid,
                            admin,
                        });
                    }
                    Err(e) => {
                        assert!(matches!(e.error.errno, Errno::EBUSY | Errno::ENOSPC));
                        if e.error.errno == Errno::EBUSY {
                            assert!(e.holder.is_some());
                        }
                    }
                }
            }
            Op::Close { who } => {
                if !self.opens.is_empty() {
                    let o = self.opens.remove(who as usize % self.opens.len());
                    self.dev.close(o.client);
                    assert!(self.dev.client_usage(o.client).is_none());
                    assert!(self.dev.platform().backed_of(o.client) == 0);
                }
            }
            Op::CreateContext {
                who,
                flags,
                reserved,
            } => {
                let a = CreateContextArgs {
                    flags,
                    reserved,
                    ..Default::default()
                };
                if let Some((Ok(_), out)) = self.call(who, DRIVER_CMD_CREATE_CONTEXT, &a) {
                    assert!(flags == 0 && reserved == 0);
                    self.seen.ctx.push(out.handle);
                }
            }
            Op::DestroyContext { who, h } => {
                let a = HandleArgs {
                    handle: pick(h, &self.seen.ctx),
                    pad: 0,
                };
                self.call(who, DRIVER_CMD_DESTROY_CONTEXT, &a);
            }
            Op::CreateStream {
                who,
                ctx,
                ce_log,
                ee_log,
                flags,
                pad,
            } => {
                let a = CreateStreamArgs {
                    ctx: pick(ctx, &self.seen.ctx),
                    flags,
                    pad,
                    cmd_entries: 1u32.checked_shl(ce_log as u32 % 40).unwrap_or(3),
                    event_entries: 1u32.checked_shl(ee_log as u32 % 40).unwrap_or(5),
                    ..Default::default()
                };
                if let Some((Ok(_), out)) = self.call(who, DRIVER_CMD_CREATE_STREAM, &a) {
                    assert!(out.cmd_ring.entries.is_power_of_two());
                    assert!(out.event_ring.entries >= out.cmd_ring.entries);
                    self.seen.stream.push(out.handle);
                }
            }
            Op::DestroyStream { who, h } => {
                let a = HandleArgs {
                    handle: pick(h, &self.seen.stream),
                    pad: 0,
                };
                self.call(who, DRIVER_CMD_DESTROY_STREAM, &a);
            }
            Op::Alloc {
                who,
                size,
                big,
                flags,
            } => {
                let size = if big {
                    (size as u64) << 32 | size as u64
                } else {
                    size as u64 % (600 << 10)
                };
                let a = AllocMemoryArgs {
                    size,
                    flags,
                    ..Default::default()
                };
                let used = self.dev.info().memory_used;
                if let Some((Ok(_), out)) = self.call(who, DRIVER_CMD_ALLOC_MEMORY, &a) {
                    assert!(out.alloc_size >= size && out.alloc_size % 4096 == 0);
                    assert_eq!(self.dev.info().memory_used, used + out.alloc_size);
                    assert!(out.dev_addr >= davinci_driver_core::DVA_BASE);
                    self.seen.alloc.push(out.handle);
                }
            }
            Op::Free { who, h } => {
                let a = HandleArgs {
                    handle: pick(h, &self.seen.alloc),
                    pad: 0,
                };
                self.call(who, DRIVER_CMD_FREE_MEMORY, &a);
            }
            Op::CreateEvent { who, ctx, flags } => {
                let a = CreateEventArgs {
                    ctx: pick(ctx, &self.seen.ctx),
                    flags,
                    ..Default::default()
                };
                if let Some((Ok(_), out)) = self.call(who, DRIVER_CMD_CREATE_EVENT, &a) {
                    self.seen.event.push(out.handle);
                }
            }
            Op::DestroyEvent { who, h } => {
                let a = HandleArgs {
                    handle: pick(h, &self.seen.event),
                    pad: 0,
                };
                self.call(who, DRIVER_CMD_DESTROY_EVENT, &a);
            }
            Op::Wait {
                who,
                kind,
                h,
                value,
                timeout_ns,
                pad,
            } => {
                let pool = if kind % 2 == 0 {
                    &self.seen.stream
                } else {
                    &self.seen.event
                };
                let a = WaitEventArgs {
                    kind: kind as u32 % 4,
                    handle: pick(h, pool),
                    value,
                    timeout_ns,
                    pad,
                    ..Default::default()
                };
                self.call(who, DRIVER_CMD_WAIT_EVENT, &a);
            }
            Op::Submit {
                who,
                stream,
                desc,
                flags,
            } => {
                let a = SubmitTaskArgs {
                    stream: pick(stream, &self.seen.stream),
                    flags,
                    desc: TaskDesc::decode(&desc),
                    ..Default::default()
                };
                self.call(who, DRIVER_CMD_SUBMIT_TASK, &a);
            }
            Op::Notify { who, h } => {
                let a = HandleArgs {
                    handle: pick(h, &self.seen.stream),
                    pad: 0,
                };
                self.call(who, DRIVER_CMD_NOTIFY, &a);
            }
            Op::GetInfo { who } => {
                let Some(o) = self.who(who) else { return };
                let (client, role) = (o.client, o.role);
                if let Some((r, out)) = self.call(who, DRIVER_CMD_GET_INFO, &DeviceInfo::default())
                {
                    assert!(r.is_ok(), "GET_INFO failed: {r:?}");
                    // ABI 1.1: the caller's own client id (0 for a control open).
                    assert_eq!(out, self.dev.info_for(client));
                    assert_eq!(
                        DeviceInfo {
                            caller_id: 0,
                            ..out
                        },
                        self.dev.info()
                    );
                    assert_eq!(out.caller_id == 0, role == Role::Control);
                    assert!(out.memory_used <= out.memory_size);
                }
            }
            Op::QueryShare { who } => {
                if let Some((r, out)) = self.call(
                    who,
                    DRIVER_CMD_QUERY_DEVICE_SHARE,
                    &DeviceShareArgs::default(),
                ) {
                    assert!(r.is_ok());
                    assert_eq!(out.clients, self.dev.client_count());
                }
            }
            Op::SetShare { who, mode, clients } => {
                let a = DeviceShareArgs {
                    mode: mode % 3,
                    clients: clients % 2,
                    reserved: 0,
                };
                self.call(who, DRIVER_CMD_SET_DEVICE_SHARE, &a);
            }
            Op::List {
                who,
                capacity,
                entry_size,
                buf_off,
                null,
            } => {
                let buf = if null {
                    0
                } else {
                    USER_BASE + buf_off as u64 % (USER_LEN + 4096)
                };
                let stride = entry_size as u64 % 4200;
                let cap = capacity as u64 % 80;
                let a = ListClientsArgs {
                    buf,
                    capacity: cap as u32,
                    entry_size: stride as u32,
                    ..Default::default()
                };
                if let Some((Ok(_), out)) = self.call(who, DRIVER_CMD_LIST_CLIENTS, &a) {
                    // An admin sees every client, anyone else its own user's (ABI 1.4).
                    let o = self.who(who).expect("the call found this open");
                    let seen = self
                        .opens
                        .iter()
                        .filter(|c| c.role == Role::Client && (o.admin || c.uid == o.uid))
                        .count();
                    assert_eq!(out.count as usize, seen);
                }
            }
            Op::Run { h, budget } => {
                let s = pick(h, &self.seen.stream);
                let _ = self.dev.run_stream(s, budget as u32);
            }
            Op::Mmap { who, kind, h, len } => {
                let Some(o) = self.who(who) else { return };
                let client = o.client;
                let (k, pool) = match kind % 4 {
                    0 => (MmapKind::CmdRing, &self.seen.stream),
                    1 => (MmapKind::EventRing, &self.seen.stream),
                    2 => (MmapKind::Doorbell, &self.seen.stream),
                    _ => (MmapKind::Memory, &self.seen.alloc),
                };
                let cookie = if kind >= 128 {
                    pick(h, pool) as u64 * 4096
                } else {
                    mmap_offset(k, pick(h, pool))
                };
                if let Ok(davinci_driver_core::MmapTarget::Memory { offset, len: l, .. }) =
                    self.dev.mmap_target(client, cookie, len)
                {
                    assert!(len <= l && offset + l <= self.dev.info().memory_size);
                    assert!(self
                        .dev
                        .platform()
                        .backed
                        .get(&client)
                        .is_some_and(|v| v.contains(&(offset, l))));
                }
            }
            Op::Raw {
                who,
                cmd,
                request,
                mut arg,
                exact,
            } => {
                let Some(o) = self.who(who) else { return };
                let client = o.client;
                let request = match COMMANDS.get(cmd as usize) {
                    Some(c) => c.request,
                    None => request,
                };
                if exact {
                    arg.resize(ioc_size(request).min(8192), 0);
                }
                let _ = self.ioctl(client, request, &mut arg);
            }
        }
    }
}
