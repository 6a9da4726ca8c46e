//! Arbitrary sequences of (open, ioctl, close, run) against `driver_core::DeviceCore` over the
//! checking heap platform, with several client and control opens.
//!
//! Asserts: no panic (the platform panics if the core touches memory it did not back);
//! unknown requests and wrong sizes are `ENOTTY`; control opens never own resources; after
//! every step `memory_used <= memory_size`, the per-client memory adds up to `memory_used`
//! and to what the platform has backed, no client exceeds its limit, an exclusive device has
//! at most one client, GET_INFO through the ioctl path equals `DeviceCore::info_for` the caller; LIST_CLIENTS
//! writes only inside `[buf, buf + capacity * entry_size)`; closing every open returns
//! `memory_used` to 0 and releases every stream.

use arbitrary::Arbitrary;

use davinci_driver_core::test_util::{device, params, HeapPlatform};
use davinci_driver_core::{DeviceCore, Error, Reply, Result, Role, UserMem};
use davinci_uapi::ioctl::ioc_size;
use davinci_uapi::*;

#[derive(Arbitrary, Debug)]
enum Op {
    Open {
        control: bool,
        admin: bool,
    },
    Close {
        who: u8,
    },
    CreateContext {
        who: u8,
        flags: u32,
        reserved: u64,
    },
    DestroyContext {
        who: u8,
        h: Pick,
    },
    CreateStream {
        who: u8,
        ctx: Pick,
        ce_log: u8,
        ee_log: u8,
        flags: u32,
        pad: u32,
    },
    DestroyStream {
        who: u8,
        h: Pick,
    },
    Alloc {
        who: u8,
        size: u32,
        big: bool,
        flags: u32,
    },
    Free {
        who: u8,
        h: Pick,
    },
    CreateEvent {
        who: u8,
        ctx: Pick,
        flags: u32,
    },
    DestroyEvent {
        who: u8,
        h: Pick,
    },
    Wait {
        who: u8,
        kind: u8,
        h: Pick,
        value: u64,
        timeout_ns: u64,
        pad: u32,
    },
    Submit {
        who: u8,
        stream: Pick,
        desc: [u8; 64],
        flags: u32,
    },
    Notify {
        who: u8,
        h: Pick,
    },
    GetInfo {
        who: u8,
    },
    QueryShare {
        who: u8,
    },
    SetShare {
        who: u8,
        mode: u32,
        clients: u32,
    },
    List {
        who: u8,
        capacity: u8,
        entry_size: u16,
        buf_off: u32,
        null: bool,
    },
    Run {
        h: Pick,
        budget: u8,
    },
    Mmap {
        who: u8,
        kind: u8,
        h: Pick,
        len: u64,
    },
    /// Any command number (from the table or not) with any bytes (right size or not).
    Raw {
        who: u8,
        cmd: u8,
        request: u32,
        arg: Vec<u8>,
        exact: bool,
    },
}

/// Which handle: one seen before (of the right kind, any owner) or a raw value.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Pick {
    Seen(u8),
    Raw(u32),
}

#[derive(Default)]
struct Seen {
    ctx: Vec<u32>,
    stream: Vec<u32>,
    alloc: Vec<u32>,
    event: Vec<u32>,
}

fn pick(p: Pick, pool: &[u32]) -> u32 {
    match p {
        Pick::Seen(i) if !pool.is_empty() => pool[i as usize % pool.len()],
        Pick::Seen(i) => i as u32,
        Pick::Raw(v) => v,
    }
}

const USER_BASE: u64 = 0x1_0000;
const USER_LEN: u64 = 64 << 10;

/// The caller's address space as a kernel sees it: `USER_LEN` bytes mapped at `USER_BASE`
/// and nothing else. A write anywhere else fails with `EFAULT` (what `copy_to_user` returns
/// for a bad pointer), never a panic: a raw LIST_CLIENTS may carry any `buf`.
///
/// Only LIST_CLIENTS writes user memory, and only inside `[buf, buf + capacity *
/// entry_size)` of the very arguments it was called with: [`State::ioctl`] sets `window`
/// from every LIST_CLIENTS argument (structured or raw) for the length of that call, and
/// every write, mapped or not, is checked against it.
struct User {
    mem: Vec<u8>,
    /// The window of the call in progress (`None`: no call may write user memory).
    window: Option<(u64, u64)>,
    /// Writes of the call in progress that faulted.
    faults: u32,
}

impl UserMem for User {
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        let Some((lo, hi)) = self.window else {
            panic!(
                "a user-memory write [{addr:#x}, +{}) outside LIST_CLIENTS",
                data.len()
            );
        };
        let end = addr.checked_add(data.len() as u64);
        assert!(
            addr >= lo && end.is_some_and(|e| e <= hi),
            "LIST_CLIENTS wrote [{addr:#x}, +{}) outside [{lo:#x}, {hi:#x})",
            data.len(),
        );
        match addr.checked_sub(USER_BASE) {
            Some(o)
                if o.checked_add(data.len() as u64)
                    .is_some_and(|e| e <= USER_LEN) =>
            {
                self.mem[o as usize..o as usize + data.len()].copy_from_slice(data);
                Ok(())
            }
            _ => {
                self.faults += 1;
                Err(Error::new(
                    Errno::EFAULT,
                    "outside the caller's mapped memory",
                ))
            }
        }
    }
}

struct Open {
    handle: u32,
    role: Role,
}

struct State {
    dev: DeviceCore<HeapPlatform>,
    opens: Vec<Open>,
    seen: Seen,
    user: User,
    next_pid: u32,
}

impl State {
    fn who(&self, w: u8) -> Option<&Open> {
        if self.opens.is_empty() {
            None
        } else {
            Some(&self.opens[w as usize % self.opens.len()])
        }
    }

    /// One ioctl through the real dispatch path, with the platform's half of `Reply`.
    fn ioctl(&mut self, client: u32, request: u32, arg: &mut [u8]) -> Result<Reply> {
        let role = self
            .opens
            .iter()
            .find(|o| o.handle == client)
            .map(|o| o.role);
        // LIST_CLIENTS may write [buf, buf + capacity * entry_size) of its own arguments.
        self.user.window = (request == DRIVER_CMD_LIST_CLIENTS)
            .then(|| ListClientsArgs::from_bytes(arg))
            .flatten()
            .map(|a| {
                let len = u64::from(a.capacity) * u64::from(a.entry_size);
                (a.buf, a.buf.saturating_add(len))
            });
        self.user.faults = 0;
        let before = (
            self.dev.info(),
            self.dev.clients().collect::<Vec<_>>(),
            arg.to_vec(),
        );
        let r = self.dev.ioctl(client, request, arg, &mut self.user);
        self.user.window = None;
        if self.user.faults > 0 {
            // A fault in copy_to_user: the ioctl fails with EFAULT and changes nothing (the
            // device, its clients, the argument; bytes already copied out may stay, as with
            // a kernel).
            assert_eq!(
                r.as_ref().map(|_| ()).map_err(|e| e.errno),
                Err(Errno::EFAULT),
                "a faulting user-memory write did not fail the ioctl with EFAULT"
            );
            let after = (
                self.dev.info(),
                self.dev.clients().collect::<Vec<_>>(),
                arg.to_vec(),
            );
            assert!(before == after, "a faulting LIST_CLIENTS changed something");
        }
        let cmd = command_by_request(request);
        match (&r, cmd) {
            (Err(e), _) => {
                assert_ne!(e.errno.code(), 0, "an error with errno 0");
                assert!(!e.msg.is_empty(), "an error without a message");
            }
            (Ok(_), None) => panic!("unknown request {request:#x} succeeded"),
            (Ok(_), Some(_)) => assert_eq!(arg.len(), ioc_size(request)),
        }
        if cmd.is_none() || arg.len() != ioc_size(request) {
            assert_eq!(r.map(|_| ()).unwrap_err().errno, Errno::ENOTTY);
        }
        if let (Some(c), Some(Role::Control)) = (cmd, role) {
            if c.caller == Caller::Client {
                assert!(r.is_err(), "control open ran {}", c.name);
            }
        }
        match r {
            Ok(Reply::Wait(spec)) => {
                // The platform would sleep; here the wait times out at once.
                let f = self.dev.finish_wait(client, &spec, arg, true);
                if let Err(e) = f {
                    assert!(!e.msg.is_empty());
                }
            }
            Ok(Reply::StreamCreated(s)) => {
                assert!(self.dev.stream_state(client, s).is_ok());
            }
            _ => {}
        }
        r
    }

    fn call<T: Wire>(&mut self, who: u8, request: u32, a: &T) -> Option<(Result<Reply>, T)> {
        let client = self.who(who)?.handle;
        let mut arg = vec![0u8; T::SIZE];
        a.encode(&mut arg);
        let r = self.ioctl(client, request, &mut arg);
        Some((r, T::decode(&arg)))
    }

    fn check(&self) {
        let info = self.dev.info();
        assert!(info.memory_used <= info.memory_size);
        let clients: Vec<ClientUsage> = self.dev.clients().collect();
        let sum: u64 = clients.iter().map(|c| c.memory_bytes).sum();
        assert_eq!(sum, info.memory_used, "client memory does not add up");
        assert_eq!(self.dev.platform().backed_bytes(), info.memory_used);
        for c in &clients {
            assert!(c.memory_bytes <= info.client_memory_limit);
        }
        let n = self.opens.iter().filter(|o| o.role == Role::Client).count();
        assert_eq!(clients.len(), n);
        assert_eq!(info.clients as usize, n);
        if self.dev.share_mode() == ShareMode::Exclusive {
            assert!(n <= 1, "{n} clients on an exclusive device");
        }
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Open { control, admin } => {
                let role = if control { Role::Control } else { Role::Client };
                self.next_pid += 1;
                match self.dev.open(params(self.next_pid, role, admin)) {
                    Ok(handle) => {
                        assert!(self.opens.iter().all(|o| o.handle != handle));
                        self.opens.push(Open { handle, role });
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
                    self.dev.close(o.handle);
                    assert!(self.dev.client_usage(o.handle).is_none());
                    assert!(self.dev.platform().backed_of(o.handle) == 0);
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
                let (client, role) = (o.handle, o.role);
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
                    assert_eq!(out.count, self.dev.client_count());
                }
            }
            Op::Run { h, budget } => {
                let s = pick(h, &self.seen.stream);
                let _ = self.dev.run_stream(s, budget as u32);
            }
            Op::Mmap { who, kind, h, len } => {
                let Some(o) = self.who(who) else { return };
                let client = o.handle;
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
                if let Ok(davinci_driver_core::MmapTarget::Memory { offset, len: l }) =
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
                let client = o.handle;
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

/// One input (decoded with `arbitrary` exactly as `fuzz_target!` does).
pub fn run(data: &[u8]) {
    let Ok(ops) = <Vec<Op>>::arbitrary_take_rest(arbitrary::Unstructured::new(data)) else {
        return;
    };
    let mut st = State {
        dev: device(),
        opens: Vec::new(),
        seen: Seen::default(),
        user: User {
            mem: vec![0; USER_LEN as usize],
            window: None,
            faults: 0,
        },
        next_pid: 0,
    };
    for op in ops.into_iter().take(256) {
        st.step(op);
        st.check();
    }
    for o in std::mem::take(&mut st.opens) {
        st.dev.close(o.handle);
    }
    let info = st.dev.info();
    assert_eq!(info.memory_used, 0, "memory left after every open closed");
    assert_eq!(info.clients, 0);
    assert_eq!(st.dev.platform().backed_bytes(), 0);
    assert_eq!(
        st.dev.platform().live_streams,
        0,
        "streams left after every open closed"
    );
    assert_eq!(st.dev.stream_handles().count(), 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The finding of issue 13: a raw LIST_CLIENTS whose `buf` is not mapped. The input
    /// (fuzz/regressions/ioctl_dispatch/list-clients-unmapped-buf) decodes to an open and that
    /// call; the ioctl fails with EFAULT and changes nothing (checked in `State::ioctl`).
    #[test]
    fn list_clients_unmapped_buf() {
        let data = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fuzz/regressions/ioctl_dispatch/list-clients-unmapped-buf"
        ))
        .expect("the regression input");
        let ops =
            <Vec<Op>>::arbitrary_take_rest(arbitrary::Unstructured::new(&data)).expect("decodes");
        assert!(matches!(ops[0], Op::Open { control: false, .. }));
        let Op::Raw {
            cmd,
            ref arg,
            exact,
            ..
        } = ops[1]
        else {
            panic!("{ops:?}");
        };
        assert_eq!(COMMANDS[cmd as usize].request, DRIVER_CMD_LIST_CLIENTS);
        assert!(exact);
        let a = ListClientsArgs::from_bytes(arg).expect("a LIST_CLIENTS argument");
        assert_eq!(
            (a.buf, a.capacity, a.entry_size),
            (0xadad_ad93_adad_adad, 1, 16)
        );

        let mut st = State {
            dev: device(),
            opens: Vec::new(),
            seen: Seen::default(),
            user: User {
                mem: vec![0; USER_LEN as usize],
                window: None,
                faults: 0,
            },
            next_pid: 0,
        };
        st.step(Op::Open {
            control: false,
            admin: false,
        });
        let client = st.opens[0].handle;
        let mut bytes = arg.clone();
        let r = st.ioctl(client, DRIVER_CMD_LIST_CLIENTS, &mut bytes);
        assert_eq!(r.map(|_| ()).unwrap_err().errno, Errno::EFAULT);
        assert_eq!(st.user.faults, 1);
        run(&data);
    }
}
