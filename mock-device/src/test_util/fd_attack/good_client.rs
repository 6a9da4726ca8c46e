//! The well-behaved client ([`Good`]): one stream it submits to with SUBMIT_TASK and waits
//! on, a work buffer it fills and reads back each round, and a canary buffer filled once and
//! checked ever after. Its every task must complete cleanly whatever the attacker does.
#![forbid(unsafe_code)]

use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, DevAddr, EventRecord, SubmitTaskArgs, TaskDesc,
    WaitEventArgs, WaitKind, Wire, DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_SUBMIT_TASK,
    DRIVER_CMD_WAIT_EVENT,
};

use super::device_io::{
    alloc, call, create_stream, map, pread_u32, pwrite, Held, HEADER_FIELDS, RING_HEADER,
};
use crate::{local_open_params, MockDevice, Role};

const GOOD_ALLOC: u64 = 16384;
const CANARY: u32 = 0xc0ff_ee00;
const LONG_NS: u64 = 20_000_000_000;

/// The well-behaved client: a stream whose event ring it reaps, a work buffer and a canary
/// buffer it never touches after filling it once.
pub(super) struct Good {
    pub(super) client: u32,
    stream: u32,
    events: Held,
    pub(super) work: AllocMemoryArgs,
    canary: AllocMemoryArgs,
    /// The work and canary buffers' own descriptors (each allocation is its own memfd).
    work_mem: Held,
    canary_mem: Held,
    submitted: u64,
}

impl Good {
    /// Opens the client, creates its stream and buffers and fills the canary.
    pub(super) fn new(dev: &MockDevice) -> Good {
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
        let work_mem = map(dev, client, work.mmap_offset, work.alloc_size);
        let canary_mem = map(dev, client, canary.mmap_offset, canary.alloc_size);
        let mut g = Good {
            client,
            stream: s.handle,
            events,
            work,
            canary,
            work_mem,
            canary_mem,
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
        // A signal handler that runs on this thread (libFuzzer's SIGALRM, installed without
        // SA_RESTART) ends the wait with EINTR, as it would the kernel driver's: wait again.
        let mut r = call(dev, self.client, DRIVER_CMD_WAIT_EVENT, &mut w);
        while r == Err(libc::EINTR) {
            r = call(dev, self.client, DRIVER_CMD_WAIT_EVENT, &mut w);
        }
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
    pub(super) fn round(&mut self, dev: &MockDevice) {
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
        for off in (0..GOOD_ALLOC).step_by(1021 * 4) {
            let at = self.work_mem.offset + off;
            assert_eq!(
                pread_u32(&self.work_mem.fd, at),
                pattern,
                "good work @{off}"
            );
        }
        for off in (0..4096).step_by(4 * 97) {
            assert_eq!(
                pread_u32(&self.canary_mem.fd, self.canary_mem.offset + off),
                CANARY,
                "good canary @{off}"
            );
        }
    }
}
