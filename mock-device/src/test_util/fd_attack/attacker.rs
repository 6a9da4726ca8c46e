//! The attacker ([`Attacker`]): a client with one context, stream and allocation and the
//! four descriptors it received for them, which applies each [`Op`] and then checks that no
//! descriptor grew or lost a seal, and that only the allocation's shrank (it may: that is how
//! the device revokes it).
#![forbid(unsafe_code)]

use std::os::fd::AsRawFd;

use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateStreamArgs, DevAddr, HandleArgs, SubmitTaskArgs,
    TaskDesc, WaitEventArgs, WaitKind, Wire, DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_DESTROY_STREAM,
    DRIVER_CMD_NOTIFY, DRIVER_CMD_SUBMIT_TASK, DRIVER_CMD_WAIT_EVENT,
};
use nix::errno::Errno as NixErrno;
use nix::fcntl::{fallocate, fcntl, FallocateFlags, FcntlArg, OFlag, SealFlag};
use nix::sys::stat::Mode;

use super::device_io::{
    alloc, call, create_stream, map, pread_u32, pwrite, size_of, Held, HEADER_FIELDS, RING_HEADER,
};
use super::good_client::Good;
use super::ops::{desc, Op, Part, ATTACK_ALLOC, MAX_WRITE, PARTS};
use crate::{local_open_params, MockDevice, Role};

/// Ring depths of the attacker's streams (one page each).
const CMD_ENTRIES: u32 = 16;
const EVENT_ENTRIES: u32 = 32;

/// The seals each descriptor of device memory carries: stream memory cannot change size, an
/// allocation cannot grow (it can shrink: docs/abi.md §4.1).
fn required_seals(part: Part) -> SealFlag {
    let fixed = SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
    match part {
        Part::Memory => fixed,
        _ => fixed | SealFlag::F_SEAL_SHRINK,
    }
}

/// The attacker: a context, a stream, an allocation and the four descriptors.
pub(super) struct Attacker {
    pub(super) client: u32,
    ctx: u32,
    stream: CreateStreamArgs,
    pub(super) mem: AllocMemoryArgs,
    pub(super) held: [Held; 4],
    submitted: u64,
}

impl Attacker {
    /// Opens the attacker and maps its four descriptors.
    pub(super) fn new(dev: &MockDevice) -> Attacker {
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

    /// Every descriptor still has its size (the allocation's at most its size) and its seals.
    fn check(&self, after: &Op) {
        for (p, h) in PARTS.iter().zip(&self.held) {
            if *p == Part::Memory {
                assert!(size_of(&h.fd) <= h.size, "{p:?} grew after {after:?}");
            } else {
                assert_eq!(size_of(&h.fd), h.size, "{p:?} changed size after {after:?}");
            }
            let seals = fcntl(&h.fd, FcntlArg::F_GET_SEALS)
                .map(SealFlag::from_bits_retain)
                .unwrap_or_else(|e| panic!("{p:?}: F_GET_SEALS: {e}"));
            assert!(
                seals.contains(required_seals(*p)),
                "{p:?} lost seals after {after:?}: {seals:?}"
            );
        }
    }

    /// Applies `op` (an [`Op::Good`] runs a round of `good`), then checks every descriptor.
    pub(super) fn apply(&mut self, dev: &MockDevice, good: &mut Good, op: &Op) {
        let theirs = DevAddr(good.work.dev_addr);
        match *op {
            Op::Truncate { part, len } => {
                let h = self.held(part);
                let now = size_of(&h.fd);
                let r = nix::unistd::ftruncate(&h.fd, i64::from(len));
                if i64::from(len) == now {
                    assert_eq!(r, Ok(()), "ftruncate to the same size is no change");
                } else if part == Part::Memory && i64::from(len) < now {
                    // Its own allocation: its mappings and the device's tasks on it fail.
                    assert_eq!(
                        r,
                        Ok(()),
                        "{part:?}: ftruncate({len}) shrinks an allocation"
                    );
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

/// The mmap cookie and length of `part`.
fn cookie(stream: &CreateStreamArgs, mem: &AllocMemoryArgs, part: Part) -> (u64, u64) {
    match part {
        Part::Cmd => (stream.cmd_ring.mmap_offset, stream.cmd_ring.mmap_size),
        Part::Event => (stream.event_ring.mmap_offset, stream.event_ring.mmap_size),
        Part::Doorbell => (stream.doorbell_offset, stream.doorbell_size),
        Part::Memory => (mem.mmap_offset, mem.alloc_size),
    }
}
