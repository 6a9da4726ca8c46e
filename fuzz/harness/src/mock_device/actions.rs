//! What each [`Op`] does ([`State::step`]): opens and closes, streams created and
//! destroyed, descriptors pushed through the client's own ring mapping, hostile header words,
//! doorbells, NOTIFY, SUBMIT_TASK, reaping, bounded waits, checked FILLs, raw ioctls (never
//! against the harness's own objects) and mmaps of any cookie, each with the assertions of
//! its own outcome.
#![forbid(unsafe_code)]

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use davinci_shm::SharedMapping;
use davinci_uapi::ioctl::ioc_size;
use davinci_uapi::*;

use super::clients::{call, create_stream, header_offset, Client, Stream};
use super::input::Op;
use super::state::State;

/// Streams per client besides its private checking stream.
const MAX_STREAMS: usize = 2;
/// WAIT_EVENT timeouts of [`Op::Wait`] (hostile streams may never complete).
const SHORT_WAIT_NS: u64 = 2_000_000;

impl State {
    pub(super) fn step(&mut self, op: Op) {
        match op {
            Op::Open => self.open(),
            Op::Close { who } => {
                if let Some(me) = self.who(who) {
                    let c = self.clients.remove(me);
                    self.dev.close(c.client);
                    assert_eq!(
                        self.dev.client_workers(c.client),
                        0,
                        "a closed client's streams are still served"
                    );
                    // Its mappings of its memory outlive it, but the close truncated that
                    // memory to nothing (a stale mapping dies of SIGBUS, as on the kernel:
                    // issue 41), so they are not read here.
                    drop(c.guard_map);
                }
            }
            Op::CreateStream { who, ce, ee } => {
                let Some(me) = self.who(who) else { return };
                if self.clients[me].streams.len() >= MAX_STREAMS {
                    return;
                }
                let ce = 1u32 << (1 + ce % 6);
                let ee = ce << (ee % 3);
                let c = &self.clients[me];
                if let Some(s) = create_stream(&self.dev, c.client, c.ctx, ce, ee) {
                    self.clients[me].streams.push(s);
                }
            }
            Op::DestroyStream { who, s } => {
                let Some((me, i)) = self.stream(who, s) else {
                    return;
                };
                let st = self.clients[me].streams.remove(i);
                let mut h = HandleArgs {
                    handle: st.handle,
                    pad: 0,
                };
                call(
                    &self.dev,
                    self.clients[me].client,
                    DRIVER_CMD_DESTROY_STREAM,
                    &mut h,
                )
                .expect("destroy a live stream");
            }
            Op::Push {
                who,
                s,
                descs,
                kick,
            } => {
                let Some((me, i)) = self.stream(who, s) else {
                    return;
                };
                let ds: Vec<TaskDesc> = descs
                    .into_iter()
                    .take(16)
                    .map(|d| self.desc(me, d))
                    .collect();
                let st = &mut self.clients[me].streams[i];
                for d in &ds {
                    st.push(d);
                }
                st.publish();
                if kick {
                    st.kick();
                }
            }
            Op::Header {
                who,
                s,
                cmd,
                field,
                value,
            } => {
                let Some((me, i)) = self.stream(who, s) else {
                    return;
                };
                let st = &self.clients[me].streams[i];
                let (m, r) = if cmd {
                    (&st.cmd, &st.args.cmd_ring)
                } else {
                    (&st.evt, &st.args.event_ring)
                };
                Stream::word(m, header_offset(r, field)).store(value, Ordering::Release);
            }
            Op::Kick { who, s } => {
                if let Some((me, i)) = self.stream(who, s) {
                    self.clients[me].streams[i].kick();
                }
            }
            Op::Notify { who, s } => {
                let Some((me, i)) = self.stream(who, s) else {
                    return;
                };
                let c = &self.clients[me];
                let mut h = HandleArgs {
                    handle: c.streams[i].handle,
                    pad: 0,
                };
                let _ = call(&self.dev, c.client, DRIVER_CMD_NOTIFY, &mut h);
            }
            Op::Submit { who, s, desc } => {
                let Some((me, i)) = self.stream(who, s) else {
                    return;
                };
                let d = self.desc(me, desc);
                let c = &self.clients[me];
                let mut a = SubmitTaskArgs {
                    stream: c.streams[i].handle,
                    desc: d,
                    ..Default::default()
                };
                if call(&self.dev, c.client, DRIVER_CMD_SUBMIT_TASK, &mut a).is_ok() {
                    let st = &mut self.clients[me].streams[i];
                    st.pushed += 1;
                    st.tail = st.tail.wrapping_add(1);
                }
            }
            Op::Reap { who, s } => {
                if let Some((me, i)) = self.stream(who, s) {
                    Self::check_records(&self.clients[me].streams[i].reap());
                }
            }
            Op::Wait { who, s } => {
                let Some((me, i)) = self.stream(who, s) else {
                    return;
                };
                let c = &self.clients[me];
                let mut w = WaitEventArgs {
                    kind: WaitKind::Stream as u32,
                    handle: c.streams[i].handle,
                    value: c.streams[i].pushed,
                    timeout_ns: SHORT_WAIT_NS,
                    ..Default::default()
                };
                let _ = call(&self.dev, c.client, DRIVER_CMD_WAIT_EVENT, &mut w);
                Self::check_records(&self.clients[me].streams[i].reap());
            }
            Op::Check { who } => {
                if let Some(me) = self.who(who) {
                    self.check(me);
                }
            }
            Op::Ioctl {
                who,
                cmd,
                request,
                mut arg,
                exact,
            } => {
                let Some(me) = self.who(who) else { return };
                let request = COMMANDS.get(cmd as usize).map_or(request, |c| c.request);
                if exact {
                    arg.resize(ioc_size(request).min(4096), 0);
                }
                // Bounded: a WAIT_EVENT never blocks the step for long.
                if request == DRIVER_CMD_WAIT_EVENT {
                    if let Some(mut w) = WaitEventArgs::from_bytes(&arg) {
                        w.timeout_ns = w.timeout_ns.min(SHORT_WAIT_NS);
                        w.encode(&mut arg);
                    }
                }
                // The harness's own objects stay as the harness knows them: no destroying
                // its streams, allocations or context behind its back, no switching the
                // device to exclusive mode.
                let own = |h: u32, c: &Client| {
                    h == c.ctx
                        || h == c.work.handle
                        || h == c.guard.handle
                        || h == c.check.handle
                        || c.streams.iter().any(|s| s.handle == h)
                };
                let c = &self.clients[me];
                let destroys = [
                    DRIVER_CMD_DESTROY_CONTEXT,
                    DRIVER_CMD_DESTROY_STREAM,
                    DRIVER_CMD_FREE_MEMORY,
                ];
                if destroys.contains(&request) {
                    if let Some(h) = HandleArgs::from_bytes(&arg) {
                        if self.clients.iter().any(|c| own(h.handle, c)) {
                            return;
                        }
                    }
                }
                // Nor a descriptor outside the harness's rules (Op::Submit covers SUBMIT_TASK).
                if request == DRIVER_CMD_SET_DEVICE_SHARE || request == DRIVER_CMD_SUBMIT_TASK {
                    return;
                }
                let _ = self.dev.ioctl(c.client, request, &mut arg, &mut self.user);
            }
            Op::Mmap {
                who,
                what,
                cookie,
                len,
            } => {
                let Some(me) = self.who(who) else { return };
                let owner = what as usize % (self.clients.len() + 1);
                let (cookie, mine) = match self.clients.get(owner) {
                    Some(c) => {
                        let a = if what & 0x80 == 0 { &c.work } else { &c.guard };
                        (a.mmap_offset, owner == me)
                    }
                    None => (cookie, false),
                };
                let len = u64::from(len % (64 << 10));
                let c = &self.clients[me];
                match self.dev.map(c.client, cookie, len) {
                    Ok(src) => {
                        // A memory cookie resolves only to the caller's own allocation
                        // with that cookie (its own memfd), never to another's.
                        let own = [&c.work, &c.guard]
                            .into_iter()
                            .find(|a| a.mmap_offset == cookie)
                            .unwrap_or_else(|| {
                                panic!(
                                    "client {} mapped cookie {cookie:#x}, not one of its own",
                                    c.client
                                )
                            });
                        let own_fd = self
                            .dev
                            .map(c.client, own.mmap_offset, 4096)
                            .expect("own allocation");
                        let ino = |fd: &std::os::fd::OwnedFd| {
                            nix::sys::stat::fstat(fd).expect("fstat").st_ino
                        };
                        assert_eq!(
                            ino(&src.fd),
                            ino(&own_fd.fd),
                            "client {} mapped memory other than its allocation (owner: {mine})",
                            c.client
                        );
                        assert_eq!(src.offset, 0, "an allocation is its own memfd");
                        if len > 0 {
                            let m = SharedMapping::map(src.fd.as_fd(), src.offset, len as usize)
                                .expect("map what the device resolved");
                            let mut b = vec![0u8; (len as usize).min(4)];
                            m.read(0, &mut b).expect("the first bytes of the mapping");
                        }
                    }
                    Err(e) => {
                        if mine && len > 0 {
                            let a = if what & 0x80 == 0 { &c.work } else { &c.guard };
                            assert!(len > a.alloc_size, "own mmap failed: {e:?}");
                        }
                    }
                }
            }
        }
    }
}
