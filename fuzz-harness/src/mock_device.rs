//! The whole mock device, stateful: a real [`MockDevice`] (memfds, its poller thread, the
//! reader-writer lock: control path exclusive, pollers shared) in shared mode with up to
//! [`MAX_CLIENTS`] clients at a time, and an arbitrary sequence of what clients do: opens and
//! closes, ioctls (structured, and raw request numbers with any bytes, through a [`UserMem`]
//! that faults outside a small buffer), mmaps of any cookie, streams created and destroyed,
//! descriptors written into a stream's command ring through the client's own mapping (valid
//! ones, hostile ones aimed at another client's memory or anywhere, raw slot bytes), hostile
//! ring-header words, doorbell kicks (the futex word, as the shim rings it) and NOTIFY,
//! SUBMIT_TASK, reaping the event ring, bounded waits.
//!
//! Every client owns a `work` allocation (its descriptors' target) and a `guard` allocation
//! that none of its own descriptors writes: half canary (filled once through its own mapping),
//! half checked by [`Op::Check`] (a FILL through a private stream, awaited with a deadline,
//! read back through its own mapping).
//!
//! Asserts: no panic; after every step the accounting adds up (`memory_used` = the clients'
//! memory, at most the device's; GET_INFO's `clients` = the clients attached), every client's
//! canary reads back unchanged through its own mapping (no other client's descriptor, nor
//! anything else, changed it); a completion record whose descriptor touched another client's
//! memory never reports success; mmaps resolve only for the caller's own objects;
//! [`Op::Check`] completes with status 0 within its deadline and reads back exactly; after
//! every client is closed: memory used 0, no clients, `MockDevice::workers()` 0 (polled with
//! a deadline, never a sleep).

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use davinci_driver_core::Result as DResult;
use davinci_mock_device::{local_open_params, MockConfig, MockDevice, Role, UserMem};
use davinci_shm::{futex_wake, SharedMapping};
use davinci_uapi::ioctl::ioc_size;
use davinci_uapi::mmap::DOORBELL_REG_OFFSET;
use davinci_uapi::*;

/// Clients attached at once (more opens are skipped).
pub const MAX_CLIENTS: usize = 3;
/// Streams per client besides its private checking stream.
const MAX_STREAMS: usize = 2;
const MAX_OPS: usize = 64;
const WORK: u64 = 16 << 10;
const GUARD: u64 = 8 << 10;
const CANARY_LEN: u64 = 4096;
/// Longest a step waits for the device (a correct device takes microseconds).
const DEADLINE: Duration = Duration::from_secs(10);
/// WAIT_EVENT timeouts of [`Op::Wait`] (hostile streams may never complete).
const SHORT_WAIT_NS: u64 = 2_000_000;
/// `user_data` bit 0: the descriptor touches another client's memory (must not succeed).
const FOREIGN: u64 = 1;

/// Where a descriptor's address points.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Target {
    /// Into the client's own work buffer.
    Own(u16),
    /// Into another client's work or guard allocation.
    Other {
        /// Which client (modulo the live ones).
        who: u8,
        /// Its guard allocation (else its work buffer).
        guard: bool,
        /// Offset.
        off: u16,
    },
    /// Any address.
    Raw(u64),
}

/// A descriptor as the fuzzer names it.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Desc {
    /// NOP.
    Nop,
    /// FILL `len` bytes.
    Fill {
        /// Destination.
        dst: Target,
        /// Length.
        len: u16,
        /// Pattern.
        imm: u32,
    },
    /// COPY `len` bytes.
    Copy {
        /// Destination.
        dst: Target,
        /// Source.
        src: Target,
        /// Length.
        len: u16,
    },
    /// ADD `n` elements.
    Add {
        /// Destination.
        dst: Target,
        /// First operand.
        a: Target,
        /// Second operand.
        b: Target,
        /// Elements.
        n: u16,
        /// Element type (raw).
        dtype: u8,
    },
    /// Any 64 bytes.
    Raw([u8; 64]),
}

/// One step.
#[derive(Arbitrary, Debug)]
pub enum Op {
    /// A new client (skipped at [`MAX_CLIENTS`]).
    Open,
    /// Closes a client (its mappings stay mapped until the harness drops them).
    Close {
        /// Which.
        who: u8,
    },
    /// A stream with `2^(1 + ce % 6)` command slots.
    CreateStream {
        /// Which client.
        who: u8,
        /// Command ring depth (log).
        ce: u8,
        /// Event ring depth over the command ring's (log, mod 3).
        ee: u8,
    },
    /// DESTROY_STREAM.
    DestroyStream {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
    },
    /// Descriptors written at the tail the client keeps, published, maybe the doorbell.
    Push {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
        /// The descriptors (at most 16).
        descs: Vec<Desc>,
        /// Ring the doorbell after publishing.
        kick: bool,
    },
    /// Any value into a header word (tail, head, entries, mask, flags, dropped, error,
    /// error_index) of the command or event ring.
    Header {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
        /// The command ring (else the event ring).
        cmd: bool,
        /// Field (mod 8).
        field: u8,
        /// Value.
        value: u32,
    },
    /// The doorbell: the futex word incremented and woken, as the shim rings it.
    Kick {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
    },
    /// NOTIFY.
    Notify {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
    },
    /// SUBMIT_TASK.
    Submit {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
        /// The descriptor.
        desc: Desc,
    },
    /// Reads the event ring's records up to its tail and moves the head there.
    Reap {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
    },
    /// WAIT_EVENT on a stream for everything pushed so far (a short timeout).
    Wait {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
    },
    /// A checked FILL of the client's check area through its private stream.
    Check {
        /// Which client.
        who: u8,
    },
    /// Any command (from the table, or any request number) with any bytes.
    Ioctl {
        /// Which client.
        who: u8,
        /// Index into the command table (else `request`).
        cmd: u8,
        /// Raw request number.
        request: u32,
        /// The argument.
        arg: Vec<u8>,
        /// Resize the argument to the command's size.
        exact: bool,
    },
    /// MMAP of a cookie: one of the client's objects, another client's, or raw.
    Mmap {
        /// Which client.
        who: u8,
        /// Which object.
        what: u8,
        /// Raw cookie (when `what` picks none).
        cookie: u64,
        /// Length.
        len: u32,
    },
}

/// A client's buffer for user pointers: 64 KiB at `USER_BASE`, `EFAULT` elsewhere.
struct User {
    mem: Vec<u8>,
}

const USER_BASE: u64 = 0x10_0000;

impl UserMem for User {
    fn write(&mut self, addr: u64, data: &[u8]) -> DResult<()> {
        match addr.checked_sub(USER_BASE) {
            Some(o) if o.checked_add(data.len() as u64).is_some_and(|e| e <= 65536) => {
                self.mem[o as usize..o as usize + data.len()].copy_from_slice(data);
                Ok(())
            }
            _ => Err(davinci_driver_core::Error::new(
                Errno::EFAULT,
                "outside the caller's mapped memory",
            )),
        }
    }
}

struct Stream {
    handle: u32,
    args: CreateStreamArgs,
    cmd: SharedMapping,
    evt: SharedMapping,
    bell: SharedMapping,
    /// The tail this client keeps (it may also write any value into the header).
    tail: u32,
    pushed: u64,
}

struct Client {
    handle: u32,
    ctx: u32,
    work: AllocMemoryArgs,
    guard: AllocMemoryArgs,
    guard_map: SharedMapping,
    canary: u32,
    check: Stream,
    checks: u32,
    streams: Vec<Stream>,
}

fn call<T: Wire>(dev: &MockDevice, client: u32, request: u32, args: &mut T) -> DResult<()> {
    let mut arg = vec![0u8; T::SIZE];
    args.encode(&mut arg);
    let r = dev.ioctl(
        client,
        request,
        &mut arg,
        &mut davinci_mock_device::NoUserMem,
    );
    *args = T::decode(&arg);
    r
}

fn map(dev: &MockDevice, client: u32, cookie: u64, len: u64) -> SharedMapping {
    let src = dev
        .map(client, cookie, len)
        .unwrap_or_else(|e| panic!("mmap of the client's own object failed: {e:?}"));
    SharedMapping::map(src.fd.as_fd(), src.offset, len as usize)
        .unwrap_or_else(|e| panic!("mapping a descriptor the device handed out failed: {e}"))
}

fn create_stream(dev: &MockDevice, client: u32, ctx: u32, ce: u32, ee: u32) -> Option<Stream> {
    let mut a = CreateStreamArgs {
        ctx,
        cmd_entries: ce,
        event_entries: ee,
        ..Default::default()
    };
    call(dev, client, DRIVER_CMD_CREATE_STREAM, &mut a).ok()?;
    let cmd = map(dev, client, a.cmd_ring.mmap_offset, a.cmd_ring.mmap_size);
    let evt = map(
        dev,
        client,
        a.event_ring.mmap_offset,
        a.event_ring.mmap_size,
    );
    let bell = map(dev, client, a.doorbell_offset, a.doorbell_size);
    Some(Stream {
        handle: a.handle,
        args: a,
        cmd,
        evt,
        bell,
        tail: 0,
        pushed: 0,
    })
}

fn header_offset(r: &RingMapping, field: u8) -> u64 {
    let o = &r.offsets;
    u64::from(
        [
            o.tail,
            o.head,
            o.entries,
            o.mask,
            o.flags,
            o.dropped,
            o.error,
            o.error_index,
        ][field as usize % 8],
    )
}

impl Stream {
    fn word(m: &SharedMapping, off: u64) -> &std::sync::atomic::AtomicU32 {
        m.word(off).expect("a header word inside the ring mapping")
    }

    fn push(&mut self, d: &TaskDesc) {
        let r = &self.args.cmd_ring;
        let slot = u64::from(self.tail & (r.entries - 1));
        let at = u64::from(r.offsets.slots) + slot * u64::from(r.offsets.slot_size);
        let mut b = [0u8; TaskDesc::SIZE];
        d.encode(&mut b);
        self.cmd.write(at, &b).expect("a slot inside the ring");
        self.tail = self.tail.wrapping_add(1);
        self.pushed += 1;
    }

    fn publish(&self) {
        Self::word(&self.cmd, u64::from(self.args.cmd_ring.offsets.tail))
            .store(self.tail, Ordering::Release);
    }

    fn kick(&self) {
        let w = Self::word(&self.bell, DOORBELL_REG_OFFSET);
        w.fetch_add(1, Ordering::Relaxed);
        futex_wake(w);
    }

    /// Records from the head up to the tail (at most `entries`), then head = tail.
    fn reap(&self) -> Vec<EventRecord> {
        let r = &self.args.event_ring;
        let tail = Self::word(&self.evt, u64::from(r.offsets.tail)).load(Ordering::Acquire);
        let head_w = Self::word(&self.evt, u64::from(r.offsets.head));
        let head = head_w.load(Ordering::Relaxed);
        let n = tail.wrapping_sub(head).min(r.entries);
        let mut out = Vec::new();
        for i in 0..n {
            let slot = u64::from(head.wrapping_add(i) & (r.entries - 1));
            let at = u64::from(r.offsets.slots) + slot * u64::from(r.offsets.slot_size);
            let mut b = [0u8; EventRecord::SIZE];
            self.evt.read(at, &mut b).expect("a record inside the ring");
            out.push(EventRecord::decode(&b));
        }
        head_w.store(tail, Ordering::Release);
        out
    }
}

/// Does `[a, a + len)` overlap `[b, b + blen)`?
fn overlaps(a: u64, len: u64, b: u64, blen: u64) -> bool {
    len > 0 && a < b.saturating_add(blen) && a.saturating_add(len) > b
}

struct State {
    dev: MockDevice,
    clients: Vec<Client>,
    opened: u32,
    user: User,
    seq: u64,
}

impl State {
    fn open(&mut self) {
        if self.clients.len() >= MAX_CLIENTS {
            return;
        }
        let handle = self
            .dev
            .open(local_open_params(Role::Client, false))
            .expect("open a client of a shared device");
        let mut c = CreateContextArgs::default();
        call(&self.dev, handle, DRIVER_CMD_CREATE_CONTEXT, &mut c).expect("context");
        let mut work = AllocMemoryArgs {
            size: WORK,
            ..Default::default()
        };

        let mut guard = AllocMemoryArgs {
            size: GUARD,
            ..Default::default()
        };
        let ok = |dev: &MockDevice, a: &mut AllocMemoryArgs| {
            call(dev, handle, DRIVER_CMD_ALLOC_MEMORY, a).is_ok()
        };
        if !ok(&self.dev, &mut work) || !ok(&self.dev, &mut guard) {
            // The device is full (raw ALLOC_MEMORYs of other clients): no new client.
            self.dev.close(handle);
            return;
        }
        let guard_map = map(&self.dev, handle, guard.mmap_offset, guard.alloc_size);
        self.opened += 1;
        let canary = 0xca9a_0000 | self.opened;
        let bytes: Vec<u8> = (0..CANARY_LEN / 4)
            .flat_map(|_| canary.to_ne_bytes())
            .collect();
        guard_map.write(0, &bytes).expect("canary inside the guard");
        let check = create_stream(&self.dev, handle, c.handle, 4, 4).expect("check stream");
        self.clients.push(Client {
            handle,
            ctx: c.handle,
            work,
            guard,
            guard_map,
            canary,
            check,
            checks: 0,
            streams: Vec::new(),
        });
    }

    fn who(&self, w: u8) -> Option<usize> {
        (!self.clients.is_empty()).then(|| w as usize % self.clients.len())
    }

    fn addr(&self, me: usize, t: Target) -> (u64, bool) {
        match t {
            Target::Own(off) => (self.clients[me].work.dev_addr + u64::from(off), false),
            Target::Other { who, guard, off } => {
                let c = &self.clients[who as usize % self.clients.len()];
                let a = if guard { &c.guard } else { &c.work };
                (
                    a.dev_addr + u64::from(off),
                    who as usize % self.clients.len() != me,
                )
            }
            Target::Raw(a) => {
                let foreign = self.clients.iter().enumerate().any(|(i, c)| {
                    i != me
                        && (overlaps(a, 1, c.work.dev_addr, c.work.alloc_size)
                            || overlaps(a, 1, c.guard.dev_addr, c.guard.alloc_size))
                });
                (a, foreign)
            }
        }
    }

    /// The descriptor `d` of client `me`, never writing its own guard allocation (the only
    /// writer of its canary is the harness, once); `user_data` bit 0 says whether it touches
    /// another client's memory.
    fn desc(&mut self, me: usize, d: Desc) -> TaskDesc {
        self.seq += 1;
        let ud = self.seq << 1;
        let (mut t, foreign) = match d {
            Desc::Nop => (TaskDesc::nop(ud), false),
            Desc::Fill { dst, len, imm } => {
                let (a, f) = self.addr(me, dst);
                (TaskDesc::fill(ud, DevAddr(a), u64::from(len), imm), f)
            }
            Desc::Copy { dst, src, len } => {
                let (a, f1) = self.addr(me, dst);
                let (b, f2) = self.addr(me, src);
                (
                    TaskDesc::copy(ud, DevAddr(a), DevAddr(b), u64::from(len)),
                    f1 || f2,
                )
            }
            Desc::Add {
                dst,
                a,
                b,
                n,
                dtype,
            } => {
                let (x, f1) = self.addr(me, dst);
                let (y, f2) = self.addr(me, a);
                let (z, f3) = self.addr(me, b);
                let mut t = TaskDesc::add(
                    ud,
                    Dtype::U32,
                    DevAddr(x),
                    DevAddr(y),
                    DevAddr(z),
                    u64::from(n),
                );
                t.dtype = dtype % 4;
                (t, f1 || f2 || f3)
            }
            Desc::Raw(bytes) => {
                let t = TaskDesc::decode(&bytes);
                // Any address may be another client's: a raw descriptor is "foreign" if any
                // of its ranges (up to 4 bytes per element) reaches another client.
                let len = t.len.saturating_mul(4);
                let foreign = [t.dst, t.src0, t.src1].iter().any(|&a| {
                    self.clients.iter().enumerate().any(|(i, c)| {
                        i != me
                            && (overlaps(a, len.max(1), c.work.dev_addr, c.work.alloc_size)
                                || overlaps(a, len.max(1), c.guard.dev_addr, c.guard.alloc_size))
                    })
                });
                (t.with_user_data(ud), foreign)
            }
        };
        let g = &self.clients[me].guard;
        let writes = matches!(
            Opcode::from_u8(t.opcode),
            Some(Opcode::Fill | Opcode::Copy | Opcode::Add)
        );
        if writes
            && overlaps(
                t.dst,
                t.len.saturating_mul(4).max(1),
                g.dev_addr,
                g.alloc_size,
            )
        {
            t.dst = self.clients[me].work.dev_addr;
        }
        t.user_data |= u64::from(foreign) * FOREIGN;
        t
    }

    fn stream(&mut self, who: u8, s: u8) -> Option<(usize, usize)> {
        let me = self.who(who)?;
        let n = self.clients[me].streams.len();
        (n > 0).then(|| (me, s as usize % n))
    }

    fn check_records(recs: &[EventRecord]) {
        for r in recs {
            if r.user_data & FOREIGN != 0 {
                assert_ne!(
                    r.status, 0,
                    "a descriptor touching another client's memory succeeded: {r:?}"
                );
            }
        }
    }

    fn check(&mut self, me: usize) {
        let c = &mut self.clients[me];
        c.checks += 1;
        let pattern = 0x5eed_0000 | c.checks;
        let area = c.guard.dev_addr + CANARY_LEN;
        let d = TaskDesc::fill(
            u64::from(c.checks) << 1,
            DevAddr(area),
            GUARD - CANARY_LEN,
            pattern,
        );
        let mut sub = SubmitTaskArgs {
            stream: c.check.handle,
            desc: d,
            ..Default::default()
        };
        call(&self.dev, c.handle, DRIVER_CMD_SUBMIT_TASK, &mut sub)
            .unwrap_or_else(|e| panic!("check: SUBMIT_TASK failed: {e:?}"));
        c.check.pushed += 1;
        c.check.tail = c.check.tail.wrapping_add(1);
        let start = Instant::now();
        let mut recs = Vec::new();
        while recs.is_empty() {
            assert!(
                start.elapsed() < DEADLINE,
                "check: no completion within {DEADLINE:?}"
            );
            let mut w = WaitEventArgs {
                kind: WaitKind::Stream as u32,
                handle: c.check.handle,
                value: c.check.pushed,
                timeout_ns: 100_000_000,
                ..Default::default()
            };
            let _ = call(&self.dev, c.handle, DRIVER_CMD_WAIT_EVENT, &mut w);
            recs = c.check.reap();
        }
        assert_eq!(recs.len(), 1, "check: one completion per descriptor");
        assert_eq!(
            (recs[0].user_data, recs[0].status, recs[0].result),
            (d.user_data, 0, GUARD - CANARY_LEN),
            "check: the FILL did not complete cleanly"
        );
        let mut b = vec![0u8; (GUARD - CANARY_LEN) as usize];
        c.guard_map.read(CANARY_LEN, &mut b).expect("check area");
        assert!(
            b.chunks_exact(4)
                .all(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) == pattern),
            "check: the FILL did not read back"
        );
    }

    /// The invariants that hold after every step.
    fn invariants(&self) {
        let info = self.dev.info();
        let clients = self.dev.clients();
        assert!(info.memory_used <= info.memory_size);
        let sum: u64 = clients.iter().map(|c| c.memory_bytes).sum();
        assert_eq!(sum, info.memory_used, "client memory does not add up");
        assert_eq!(info.clients as usize, self.clients.len());
        assert_eq!(clients.len(), self.clients.len());
        for c in &self.clients {
            let mut b = vec![0u8; CANARY_LEN as usize];
            c.guard_map.read(0, &mut b).expect("canary");
            assert!(
                b.chunks_exact(4)
                    .all(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) == c.canary),
                "client {}'s canary changed",
                c.handle
            );
        }
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Open => self.open(),
            Op::Close { who } => {
                if let Some(me) = self.who(who) {
                    let c = self.clients.remove(me);
                    self.dev.close(c.handle);
                    assert_eq!(
                        self.dev.client_workers(c.handle),
                        0,
                        "a closed client's streams are still served"
                    );
                    // Its mappings stay valid after the close (no SIGBUS).
                    let mut b = vec![0u8; GUARD as usize];
                    c.guard_map
                        .read(0, &mut b)
                        .expect("a mapping after its client closed");
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
                if let Some(s) = create_stream(&self.dev, c.handle, c.ctx, ce, ee) {
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
                    self.clients[me].handle,
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
                let _ = call(&self.dev, c.handle, DRIVER_CMD_NOTIFY, &mut h);
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
                if call(&self.dev, c.handle, DRIVER_CMD_SUBMIT_TASK, &mut a).is_ok() {
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
                let _ = call(&self.dev, c.handle, DRIVER_CMD_WAIT_EVENT, &mut w);
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
                let _ = self.dev.ioctl(c.handle, request, &mut arg, &mut self.user);
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
                match self.dev.map(c.handle, cookie, len) {
                    Ok(src) => {
                        if owner < self.clients.len() {
                            // A memory cookie resolves to the caller's own arena, whoever's
                            // cookie it was (handles may coincide), never to another's.
                            let mine_fd = self
                                .dev
                                .map(c.handle, c.work.mmap_offset, 4096)
                                .expect("own arena");
                            let ino = |fd: &std::os::fd::OwnedFd| {
                                nix::sys::stat::fstat(fd).expect("fstat").st_ino
                            };
                            assert_eq!(
                                ino(&src.fd),
                                ino(&mine_fd.fd),
                                "client {} mapped another client's memory (mine: {mine})",
                                c.handle
                            );
                        }
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

/// One input.
pub fn run(data: &[u8]) {
    let Ok(ops) = <Vec<Op>>::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let dev = MockDevice::new(MockConfig {
        memory_size: 16 << 20,
        pollers: 1,
        // An idle poller sleeps soon (the host side of the harness is single-threaded).
        idle_spin: Duration::from_micros(50),
        ..MockConfig::default()
    });
    // Shared, so several clients attach (through an admin control open, as davinci-smi does).
    let ctl = dev
        .open(local_open_params(Role::Control, true))
        .expect("control open");
    let mut share = DeviceShareArgs {
        mode: ShareMode::Shared as u32,
        ..Default::default()
    };
    call(&dev, ctl, DRIVER_CMD_SET_DEVICE_SHARE, &mut share).expect("shared mode");
    dev.close(ctl);
    let mut st = State {
        dev,
        clients: Vec::new(),
        opened: 0,
        user: User {
            mem: vec![0; 65536],
        },
        seq: 0,
    };
    st.open();
    for op in ops.into_iter().take(MAX_OPS) {
        st.step(op);
        st.invariants();
    }
    // Every client's check runs once more (the device still serves everyone), then all close.
    for me in 0..st.clients.len() {
        st.check(me);
    }
    st.invariants();
    let handles: Vec<u32> = st.clients.iter().map(|c| c.handle).collect();
    for h in handles {
        st.dev.close(h);
    }
    let info = st.dev.info();
    assert_eq!(info.memory_used, 0, "memory left after every client closed");
    assert_eq!(info.clients, 0);
    let start = Instant::now();
    while st.dev.workers() != 0 {
        assert!(
            start.elapsed() < DEADLINE,
            "{} streams still served after every client closed",
            st.dev.workers()
        );
        std::thread::yield_now();
    }
    // Mappings that outlive their clients still read (no SIGBUS; the released memory may
    // read as zeros: the mock punches freed ranges out).
    for c in &st.clients {
        let mut b = vec![0u8; GUARD as usize];
        c.guard_map
            .read(0, &mut b)
            .expect("a mapping after its client closed");
    }
}
