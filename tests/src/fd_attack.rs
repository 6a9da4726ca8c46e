//! A stateful attack on a mock device through the files behind its shared memory: a client
//! that interleaves ring operations (descriptors written into its command ring, the tail
//! published, NOTIFY, SUBMIT_TASK, its event ring reaped, WAIT_EVENT) with everything a file
//! descriptor allows (ftruncate, fallocate with any mode, F_ADD_SEALS, writes anywhere,
//! reopening through `/proc`, closing and mapping again, re-creating the stream), while a
//! well-behaved client of the same device runs checked rounds.
//!
//! [`run`] executes one sequence of [`Op`]s on a fresh embedded [`MockDevice`] and panics on
//! the first broken invariant (a SIGBUS kills the process: the harshest failure). It is driven
//! by random sequences in `tests/tests/fd_attack.rs` (stable, in the test command) and by
//! libFuzzer in `fuzz/fuzz_targets/mock_fd_ops.rs`.
//!
//! Invariants, checked after every operation: no descriptor the device handed out changed
//! size or lost a seal; a resize attempt failed with `EPERM`; adding a seal failed with
//! `EPERM`. At every [`Op::Good`] and at the end: the good client's FILL completes with status
//! 0 and reads back exactly, and its canary buffer (filled once) is unchanged. At the end,
//! closing the attacker releases its memory and its worker threads; closing both returns the
//! device to zero.
//!
//! Ring writes go through `pwrite` on the memfd (the same pages the device maps), so this
//! module needs no `unsafe`; the daemon test `mockd_hostile_fds` also writes through mappings.

use std::mem::offset_of;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use arbitrary::Arbitrary;
use davinci_mock_device::{local_open_params, MockConfig, MockDevice, NoUserMem, Role};
use davinci_uapi::rings::RING_HEADER_SIZE;
use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateStreamArgs, DevAddr, DeviceShareArgs, Dtype,
    EventRecord, HandleArgs, RingHeader, ShareMode, SubmitTaskArgs, TaskDesc, WaitEventArgs,
    WaitKind, Wire, DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_STREAM,
    DRIVER_CMD_DESTROY_STREAM, DRIVER_CMD_NOTIFY, DRIVER_CMD_SET_DEVICE_SHARE,
    DRIVER_CMD_SUBMIT_TASK, DRIVER_CMD_WAIT_EVENT,
};
use nix::errno::Errno as NixErrno;
use nix::fcntl::{fallocate, fcntl, FallocateFlags, FcntlArg, OFlag, SealFlag};
use nix::sys::stat::Mode;

/// Most operations [`run`] executes from one sequence.
pub const MAX_OPS: usize = 96;
/// Longest write of one [`Op::Write`].
pub const MAX_WRITE: usize = 256;
/// Ring depths of the attacker's streams (one page each).
const CMD_ENTRIES: u32 = 16;
const EVENT_ENTRIES: u32 = 32;
const RING_HEADER: u64 = RING_HEADER_SIZE as u64;
/// Offsets of the ring header's fields, in `Op::Header`'s numbering.
const HEADER_FIELDS: [usize; 8] = [
    offset_of!(RingHeader, tail),
    offset_of!(RingHeader, head),
    offset_of!(RingHeader, entries),
    offset_of!(RingHeader, mask),
    offset_of!(RingHeader, flags),
    offset_of!(RingHeader, dropped),
    offset_of!(RingHeader, error),
    offset_of!(RingHeader, error_index),
];
const ATTACK_ALLOC: u64 = 8192;
const GOOD_ALLOC: u64 = 16384;
const CANARY: u32 = 0xc0ff_ee00;
const LONG_NS: u64 = 20_000_000_000;

/// The seals every descriptor of device memory carries.
fn required_seals() -> SealFlag {
    SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL
}

/// Which descriptor of the attacker's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum Part {
    /// The command ring.
    Cmd,
    /// The event ring.
    Event,
    /// The doorbell page.
    Doorbell,
    /// The device-memory arena.
    Arena,
}

const PARTS: [Part; 4] = [Part::Cmd, Part::Event, Part::Doorbell, Part::Arena];

/// One step of the attacker (or of the good client).
#[derive(Debug, Clone, Arbitrary)]
pub enum Op {
    /// `ftruncate(len)`: must fail with `EPERM` unless `len` is the size.
    Truncate {
        /// Which descriptor.
        part: Part,
        /// The new length.
        len: u32,
    },
    /// `fallocate` with raw mode bits (punch hole, keep size, anything).
    Fallocate {
        /// Which descriptor.
        part: Part,
        /// Mode bits (`FALLOC_FL_*`), passed as they are.
        mode: u8,
        /// Offset.
        offset: u32,
        /// Length.
        len: u32,
    },
    /// `F_ADD_SEALS` with raw bits: must fail with `EPERM` (the device sealed the seals).
    AddSeals {
        /// Which descriptor.
        part: Part,
        /// `F_SEAL_*` bits.
        seals: u8,
    },
    /// `pwrite` of `bytes` at `offset` (any offset; past the end grows nothing).
    Write {
        /// Which descriptor.
        part: Part,
        /// Offset (taken modulo twice the size, so half the writes land past the end).
        offset: u32,
        /// The bytes (at most [`MAX_WRITE`] are written).
        bytes: Vec<u8>,
    },
    /// Stores `value` in header field `field` (mod 8: tail, head, entries, mask, flags,
    /// dropped, error, error_index) of the command or the event ring.
    Header {
        /// The command ring (else the event ring).
        cmd: bool,
        /// Field index.
        field: u8,
        /// Value.
        value: u32,
    },
    /// Reopens the descriptor through `/proc/self/fd` and closes the original.
    Reopen {
        /// Which descriptor.
        part: Part,
    },
    /// Closes the descriptor and maps the cookie again.
    Remap {
        /// Which descriptor.
        part: Part,
    },
    /// Writes `n` descriptors from the tail it reads, publishes the tail, maybe NOTIFY.
    Push {
        /// How many (mod 20: sometimes more than fit).
        n: u8,
        /// Which descriptors ([`desc`]).
        kind: u8,
        /// NOTIFY afterwards.
        notify: bool,
    },
    /// SUBMIT_TASK (the slow path) of one descriptor.
    Submit {
        /// Which descriptor ([`desc`]).
        kind: u8,
    },
    /// Reaps the event ring: head = the tail it reads.
    Reap,
    /// WAIT_EVENT on the stream for one more completion than submitted so far, `ms % 8` ms.
    Wait {
        /// Timeout in ms (mod 8).
        ms: u8,
    },
    /// DESTROY_STREAM and CREATE_STREAM (new descriptors for the rings and the doorbell).
    Recreate,
    /// The good client runs a checked round.
    Good,
}

/// The descriptor `kind` names, for an attacker whose allocation is at `mine` and whose
/// neighbour's is at `theirs`: NOP, FILL/COPY/ADD on its own memory, runs past its end, a
/// FILL of the other client's memory (refused by the device), an invalid opcode.
pub fn desc(kind: u8, user_data: u64, mine: DevAddr, theirs: DevAddr) -> TaskDesc {
    match kind % 8 {
        0 => TaskDesc::nop(user_data),
        1 => TaskDesc::fill(user_data, mine, ATTACK_ALLOC, u32::from(kind)),
        2 => TaskDesc::copy(user_data, mine, mine + ATTACK_ALLOC / 2, ATTACK_ALLOC / 2),
        3 => TaskDesc::add(
            user_data,
            Dtype::U32,
            mine,
            mine,
            mine + 4096,
            ATTACK_ALLOC / 8,
        ),
        4 => TaskDesc::fill(user_data, mine, ATTACK_ALLOC * 4, 1),
        5 => TaskDesc::fill(user_data, theirs, 4096, 0xbad0_bad0),
        6 => TaskDesc::copy(user_data, mine, theirs, 4096),
        _ => {
            let mut d = TaskDesc::nop(user_data);
            d.opcode = 0xee;
            d
        }
    }
}

fn call<T: Wire>(dev: &MockDevice, client: u32, request: u32, args: &mut T) -> Result<(), i32> {
    let mut arg = vec![0u8; T::SIZE];
    args.encode(&mut arg);
    let r = dev.ioctl(client, request, &mut arg, &mut NoUserMem);
    *args = T::decode(&arg);
    r.map_err(|e| e.errno.code())
}

fn size_of(fd: &OwnedFd) -> i64 {
    nix::sys::stat::fstat(fd).map_or(-1, |s| s.st_size)
}

fn pread_u32(fd: &OwnedFd, offset: u64) -> u32 {
    let mut b = [0u8; 4];
    match nix::sys::uio::pread(fd, &mut b, offset as i64) {
        Ok(4) => u32::from_ne_bytes(b),
        _ => 0,
    }
}

fn pwrite(fd: &OwnedFd, offset: u64, bytes: &[u8]) {
    // The attacker does not care whether its writes land.
    let _ = nix::sys::uio::pwrite(fd, bytes, offset as i64);
}

/// A descriptor, the object's offset in it, and the file's size when it was handed out.
struct Held {
    fd: OwnedFd,
    offset: u64,
    size: i64,
}

fn map(dev: &MockDevice, client: u32, cookie: u64, len: u64) -> Held {
    let src = dev
        .map(client, cookie, len)
        .unwrap_or_else(|e| panic!("map of a live object failed: {e:?}"));
    let size = size_of(&src.fd);
    Held {
        fd: src.fd,
        offset: src.offset,
        size,
    }
}

fn create_stream(dev: &MockDevice, client: u32, ctx: u32, cmd: u32, ev: u32) -> CreateStreamArgs {
    let mut s = CreateStreamArgs {
        ctx,
        cmd_entries: cmd,
        event_entries: ev,
        ..CreateStreamArgs::default()
    };
    call(dev, client, DRIVER_CMD_CREATE_STREAM, &mut s).expect("create a stream");
    s
}

fn alloc(dev: &MockDevice, client: u32, size: u64) -> AllocMemoryArgs {
    let mut a = AllocMemoryArgs {
        size,
        ..AllocMemoryArgs::default()
    };
    call(dev, client, DRIVER_CMD_ALLOC_MEMORY, &mut a).expect("allocate");
    a
}

/// The well-behaved client: a stream whose event ring it reaps, a work buffer and a canary
/// buffer it never touches after filling it once.
struct Good {
    client: u32,
    stream: u32,
    events: Held,
    work: AllocMemoryArgs,
    canary: AllocMemoryArgs,
    arena: Held,
    submitted: u64,
}

impl Good {
    fn new(dev: &MockDevice) -> Good {
        let client = dev
            .open(local_open_params(Role::Client, true))
            .expect("open the good client");
        let mut ctx = CreateContextArgs::default();
        call(dev, client, DRIVER_CMD_CREATE_CONTEXT, &mut ctx).expect("good context");
        let s = create_stream(dev, client, ctx.handle, 8, 8);
        let events = map(
            dev,
            client,
            s.event_ring.mmap_offset,
            s.event_ring.mmap_size,
        );
        let work = alloc(dev, client, GOOD_ALLOC);
        let canary = alloc(dev, client, 4096);
        let arena = map(dev, client, work.mmap_offset, work.alloc_size);
        let mut g = Good {
            client,
            stream: s.handle,
            events,
            work,
            canary,
            arena,
            submitted: 0,
        };
        g.run(
            dev,
            TaskDesc::fill(1 << 40, DevAddr(g.canary.dev_addr), 4096, CANARY),
        );
        g
    }

    fn run(&mut self, dev: &MockDevice, d: TaskDesc) {
        let mut sub = SubmitTaskArgs {
            stream: self.stream,
            desc: d,
            ..SubmitTaskArgs::default()
        };
        call(dev, self.client, DRIVER_CMD_SUBMIT_TASK, &mut sub)
            .unwrap_or_else(|e| panic!("good client: SUBMIT_TASK failed with errno {e}"));
        self.submitted += 1;
        let mut w = WaitEventArgs {
            kind: WaitKind::Stream as u32,
            handle: self.stream,
            value: self.submitted,
            timeout_ns: LONG_NS,
            ..WaitEventArgs::default()
        };
        let r = call(dev, self.client, DRIVER_CMD_WAIT_EVENT, &mut w);
        assert_eq!(
            (r, w.status),
            (Ok(()), 0),
            "good client: its task did not complete cleanly"
        );
        // Its completion record, then reap (head = tail), as a host does.
        let (ev, at) = (&self.events.fd, self.events.offset);
        let tail = pread_u32(ev, at + HEADER_FIELDS[0] as u64);
        assert_eq!(
            u64::from(tail),
            self.submitted,
            "good client: event-ring tail"
        );
        let slot = RING_HEADER + u64::from(tail.wrapping_sub(1) % 8) * EventRecord::SIZE as u64;
        let mut rec = [0u8; EventRecord::SIZE];
        let n = nix::sys::uio::pread(ev, &mut rec, (at + slot) as i64);
        assert_eq!(n, Ok(rec.len()));
        let rec = EventRecord::decode(&rec);
        assert_eq!(
            (rec.user_data, rec.status),
            (d.user_data, 0),
            "good client: completion record"
        );
        pwrite(ev, at + HEADER_FIELDS[1] as u64, &tail.to_ne_bytes());
    }

    /// A FILL of the work buffer with a fresh pattern, read back through its own descriptor,
    /// and the canary checked.
    fn round(&mut self, dev: &MockDevice) {
        let pattern = 0x5eed_0000 | (self.submitted as u32 & 0xffff);
        self.run(
            dev,
            TaskDesc::fill(
                self.submitted,
                DevAddr(self.work.dev_addr),
                GOOD_ALLOC,
                pattern,
            ),
        );
        let base = self.work.dev_addr;
        for off in (0..GOOD_ALLOC).step_by(1021 * 4) {
            let at = self.arena.offset + off;
            assert_eq!(pread_u32(&self.arena.fd, at), pattern, "good work @{off}");
        }
        let canary_at = self.arena.offset
            + self
                .canary
                .dev_addr
                .checked_sub(base)
                .expect("the canary is allocated after the work buffer");
        for off in (0..4096).step_by(4 * 97) {
            assert_eq!(
                pread_u32(&self.arena.fd, canary_at + off),
                CANARY,
                "good canary @{off}"
            );
        }
    }
}

/// The attacker: a context, a stream, an allocation and the four descriptors.
struct Attacker {
    client: u32,
    ctx: u32,
    stream: CreateStreamArgs,
    mem: AllocMemoryArgs,
    held: [Held; 4],
    submitted: u64,
}

impl Attacker {
    fn new(dev: &MockDevice) -> Attacker {
        let client = dev
            .open(local_open_params(Role::Client, true))
            .expect("open the attacker");
        let mut ctx = CreateContextArgs::default();
        call(dev, client, DRIVER_CMD_CREATE_CONTEXT, &mut ctx).expect("attacker context");
        let stream = create_stream(dev, client, ctx.handle, CMD_ENTRIES, EVENT_ENTRIES);
        let mem = alloc(dev, client, ATTACK_ALLOC);
        let held = PARTS.map(|p| {
            let (cookie, len) = cookie(&stream, &mem, p);
            map(dev, client, cookie, len)
        });
        Attacker {
            client,
            ctx: ctx.handle,
            stream,
            mem,
            held,
            submitted: 0,
        }
    }

    fn held(&self, part: Part) -> &Held {
        &self.held[part as usize]
    }

    fn remap(&mut self, dev: &MockDevice, part: Part) {
        let (cookie, len) = cookie(&self.stream, &self.mem, part);
        // Close first: the device must not care.
        let old = std::mem::replace(
            &mut self.held[part as usize],
            map(dev, self.client, cookie, len),
        );
        drop(old);
    }

    /// Every descriptor still has its size and its seals.
    fn check(&self, after: &Op) {
        for (p, h) in PARTS.iter().zip(&self.held) {
            assert_eq!(size_of(&h.fd), h.size, "{p:?} changed size after {after:?}");
            let seals = fcntl(&h.fd, FcntlArg::F_GET_SEALS)
                .map(SealFlag::from_bits_retain)
                .unwrap_or_else(|e| panic!("{p:?}: F_GET_SEALS: {e}"));
            assert!(
                seals.contains(required_seals()),
                "{p:?} lost seals after {after:?}: {seals:?}"
            );
        }
    }

    fn apply(&mut self, dev: &MockDevice, good: &mut Good, op: &Op) {
        let theirs = DevAddr(good.work.dev_addr);
        match *op {
            Op::Truncate { part, len } => {
                let h = self.held(part);
                let r = nix::unistd::ftruncate(&h.fd, i64::from(len));
                if i64::from(len) == h.size {
                    assert_eq!(r, Ok(()), "ftruncate to the same size is no change");
                } else {
                    assert_eq!(r, Err(NixErrno::EPERM), "{part:?}: ftruncate({len})");
                }
            }
            Op::Fallocate {
                part,
                mode,
                offset,
                len,
            } => {
                let h = self.held(part);
                let mode = FallocateFlags::from_bits_retain(i32::from(mode));
                let r = fallocate(&h.fd, mode, i64::from(offset), i64::from(len));
                let grows = !mode.contains(FallocateFlags::FALLOC_FL_KEEP_SIZE)
                    && i64::from(offset) + i64::from(len) > h.size;
                if grows && r.is_ok() {
                    panic!("{part:?}: fallocate({mode:?}, {offset}, {len}) grew a sealed file");
                }
            }
            Op::AddSeals { part, seals } => {
                // Bits the kernel does not know are EINVAL before anything else.
                let known = i32::from(seals) & 0x3f;
                let r = fcntl(
                    &self.held(part).fd,
                    FcntlArg::F_ADD_SEALS(SealFlag::from_bits_retain(known)),
                );
                assert_eq!(r, Err(NixErrno::EPERM), "{part:?}: F_ADD_SEALS({known:#x})");
            }
            Op::Write {
                part,
                offset,
                ref bytes,
            } => {
                let h = self.held(part);
                let off = u64::from(offset) % (2 * h.size.max(1) as u64);
                pwrite(&h.fd, off, &bytes[..bytes.len().min(MAX_WRITE)]);
            }
            Op::Header { cmd, field, value } => {
                let h = self.held(if cmd { Part::Cmd } else { Part::Event });
                let off = HEADER_FIELDS[usize::from(field % 8)] as u64;
                pwrite(&h.fd, h.offset + off, &value.to_ne_bytes());
            }
            Op::Reopen { part } => {
                let path = format!("/proc/self/fd/{}", self.held(part).fd.as_raw_fd());
                let fd = nix::fcntl::open(
                    path.as_str(),
                    OFlag::O_RDWR | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .unwrap_or_else(|e| panic!("{part:?}: reopen: {e}"));
                self.held[part as usize].fd = fd;
            }
            Op::Remap { part } => self.remap(dev, part),
            Op::Push { n, kind, notify } => {
                let h = self.held(Part::Cmd);
                let tail = pread_u32(&h.fd, h.offset + HEADER_FIELDS[0] as u64);
                let n = u32::from(n % 20);
                for i in 0..n {
                    let index = tail.wrapping_add(i);
                    let d = desc(
                        kind.wrapping_add(i as u8),
                        u64::from(index),
                        DevAddr(self.mem.dev_addr),
                        theirs,
                    );
                    let mut b = vec![0u8; TaskDesc::SIZE];
                    d.encode(&mut b);
                    let slot = RING_HEADER + u64::from(index % CMD_ENTRIES) * TaskDesc::SIZE as u64;
                    pwrite(&h.fd, h.offset + slot, &b);
                }
                let tail_at = h.offset + HEADER_FIELDS[0] as u64;
                pwrite(&h.fd, tail_at, &tail.wrapping_add(n).to_ne_bytes());
                self.submitted += u64::from(n);
                if notify {
                    let mut a = HandleArgs {
                        handle: self.stream.handle,
                        ..HandleArgs::default()
                    };
                    let _ = call(dev, self.client, DRIVER_CMD_NOTIFY, &mut a);
                }
            }
            Op::Submit { kind } => {
                let mut sub = SubmitTaskArgs {
                    stream: self.stream.handle,
                    desc: desc(kind, self.submitted, DevAddr(self.mem.dev_addr), theirs),
                    ..SubmitTaskArgs::default()
                };
                if call(dev, self.client, DRIVER_CMD_SUBMIT_TASK, &mut sub).is_ok() {
                    self.submitted += 1;
                }
            }
            Op::Reap => {
                let h = self.held(Part::Event);
                let tail = pread_u32(&h.fd, h.offset + HEADER_FIELDS[0] as u64);
                pwrite(
                    &h.fd,
                    h.offset + HEADER_FIELDS[1] as u64,
                    &tail.to_ne_bytes(),
                );
            }
            Op::Wait { ms } => {
                let mut w = WaitEventArgs {
                    kind: WaitKind::Stream as u32,
                    handle: self.stream.handle,
                    value: self.submitted + 1,
                    timeout_ns: u64::from(ms % 8) * 1_000_000,
                    ..WaitEventArgs::default()
                };
                let _ = call(dev, self.client, DRIVER_CMD_WAIT_EVENT, &mut w);
            }
            Op::Recreate => {
                let mut d = HandleArgs {
                    handle: self.stream.handle,
                    ..HandleArgs::default()
                };
                call(dev, self.client, DRIVER_CMD_DESTROY_STREAM, &mut d)
                    .expect("destroy the attacker's stream");
                self.stream = create_stream(dev, self.client, self.ctx, CMD_ENTRIES, EVENT_ENTRIES);
                self.submitted = 0;
                for p in [Part::Cmd, Part::Event, Part::Doorbell] {
                    self.remap(dev, p);
                }
            }
            Op::Good => good.round(dev),
        }
        self.check(op);
    }
}

fn cookie(stream: &CreateStreamArgs, mem: &AllocMemoryArgs, part: Part) -> (u64, u64) {
    match part {
        Part::Cmd => (stream.cmd_ring.mmap_offset, stream.cmd_ring.mmap_size),
        Part::Event => (stream.event_ring.mmap_offset, stream.event_ring.mmap_size),
        Part::Doorbell => (stream.doorbell_offset, stream.doorbell_size),
        Part::Arena => (mem.mmap_offset, mem.alloc_size),
    }
}

/// The device [`run`] attacks: small, with short sleeps so a sequence runs in milliseconds.
pub fn config() -> MockConfig {
    MockConfig {
        memory_size: 1 << 20,
        idle_spin: Duration::from_micros(50),
        doorbell_timeout: Duration::from_millis(5),
        event_timeout: Duration::from_millis(5),
        ..MockConfig::default()
    }
}

/// Runs (at most [`MAX_OPS`] of) `ops` against a fresh device; panics on a broken invariant.
pub fn run(ops: &[Op]) {
    let dev = MockDevice::new(config());
    let mut good = Good::new(&dev);
    let mut share = DeviceShareArgs {
        mode: ShareMode::Shared as u32,
        ..DeviceShareArgs::default()
    };
    call(&dev, good.client, DRIVER_CMD_SET_DEVICE_SHARE, &mut share).expect("share the device");
    let mut att = Attacker::new(&dev);
    for op in ops.iter().take(MAX_OPS) {
        att.apply(&dev, &mut good, op);
    }
    good.round(&dev);
    // The attacker leaves: its memory and its workers go; the good client works on.
    let (client, used) = (att.client, dev.info().memory_used);
    let attacker_memory = att.mem.alloc_size;
    drop(att.held);
    dev.close(client);
    assert_eq!(
        dev.client_workers(client),
        0,
        "the attacker's workers are gone"
    );
    assert_eq!(
        dev.info().memory_used,
        used - attacker_memory,
        "the attacker's memory is released"
    );
    good.round(&dev);
    let gc = good.client;
    drop(good);
    dev.close(gc);
    let info = dev.info();
    assert_eq!((info.memory_used, info.clients), (0, 0));
    assert_eq!(dev.workers(), 0);
}
