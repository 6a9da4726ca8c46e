//! Streams: CREATE_STREAM (the rings in platform memory), DESTROY_STREAM, their state, the
//! faults armed on them, a device reset (every stream stops), and what an mmap cookie names
//! (a stream's rings and doorbell, or an allocation's host view).

use davinci_ring::{DeviceConsumer, DeviceProducer};
use davinci_uapi::rings::{page_round, ring_bytes, RING_MIN_ENTRIES};
use davinci_uapi::task::{EVENT_RECORD_SIZE, TASK_DESC_SIZE};
use davinci_uapi::{
    mmap_offset, CreateStreamArgs, Errno, MmapKind, RingMapping, RingOffsets, DOORBELL_SIZE,
};

use super::clients::Holding;
use super::entries::{poison_queued_records, StreamEngine, StreamEntry, StreamState};
use super::DeviceCore;
use crate::error::{ensure, fail, Error, Result};
use crate::inject::{HostFault, Inject, InjectRule, InjectTarget};
use crate::limits::{MAX_CMD_ENTRIES, MAX_EVENT_ENTRIES};
use crate::platform::{locked, Lock, Platform, StreamRegions};

/// What an mmap cookie resolves to for its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmapTarget {
    /// A stream's command ring.
    CmdRing {
        /// Stream handle.
        stream: u32,
    },
    /// A stream's event ring.
    EventRing {
        /// Stream handle.
        stream: u32,
    },
    /// A stream's doorbell page.
    Doorbell {
        /// Stream handle.
        stream: u32,
    },
    /// The host view of an allocation: device-memory `offset` and `len` (page multiples),
    /// backed for `owner` (the caller, or the exporter of memory the caller imported).
    Memory {
        /// The client whose allocation it is (the platform's key for its backing).
        owner: u32,
        /// Device-memory offset.
        offset: u64,
        /// Length of the allocation.
        len: u64,
        /// Where the view starts in it: 0 but for an import of a range (EXPORT_RANGE), whose
        /// view maps `len` bytes (the range's) from this far into the exporter's allocation
        /// (`offset` still names the allocation, the platform's key). Whole pages.
        skip: u64,
    },
}

impl<P: Platform> DeviceCore<P> {
    /// CREATE_STREAM: validates depths, has the platform create the shared memory, initialises
    /// both ring headers and fills the mapping description.
    pub fn create_stream(&mut self, client: u32, args: &mut CreateStreamArgs) -> Result<()> {
        self.require_client(client)?;
        ensure!(args.flags == 0, EINVAL, "stream flags must be 0");
        ensure!(
            args.pad == 0 && args.reserved == [0; 2],
            EINVAL,
            "reserved stream fields must be 0"
        );
        self.own_context(client, args.ctx)?;
        let (ce, ee) = (args.cmd_entries, args.event_entries);
        ensure!(
            ce.is_power_of_two() && (RING_MIN_ENTRIES..=MAX_CMD_ENTRIES).contains(&ce),
            EINVAL,
            "cmd_entries must be a power of two within the device limits"
        );
        ensure!(
            ee.is_power_of_two() && (RING_MIN_ENTRIES..=MAX_EVENT_ENTRIES).contains(&ee),
            EINVAL,
            "event_entries must be a power of two within the device limits"
        );
        ensure!(ee >= ce, EINVAL, "event_entries must be >= cmd_entries");
        let page = self.config.page_size as usize;
        let (Some(cmd_bytes), Some(event_bytes)) = (
            ring_bytes(ce, TASK_DESC_SIZE as u32).and_then(|b| page_round(b, page)),
            ring_bytes(ee, EVENT_RECORD_SIZE as u32).and_then(|b| page_round(b, page)),
        ) else {
            fail!(EOVERFLOW, "ring size overflows");
        };
        ensure!(
            self.streams.len() < self.streams.capacity(),
            ENOSPC,
            "stream table is full"
        );
        self.within_quota(client, Holding::Streams)?;
        let StreamRegions { mem, cmd, event } =
            self.platform
                .create_stream(client, ce, cmd_bytes, ee, event_bytes)?;
        cmd.init();
        event.init();
        // The platform built the regions; a wrong slot size is its bug, reported, not a panic.
        let views = (DeviceConsumer::try_new(cmd), DeviceProducer::try_new(event));
        let (Ok(cmd), Ok(evt)) = views else {
            // Ring views go first: they point into `mem`.
            drop(views);
            self.platform.release_stream(client, 0, mem);
            fail!(EINVAL, "platform created rings with the wrong slot size");
        };
        let stream = StreamEntry {
            owner: client,
            ctx: args.ctx,
            run: P::Lock::new(StreamEngine {
                cmd,
                evt,
                state: StreamState::Running,
                pending: None,
                partial: None,
                submitted: 0,
                completed: 0,
                errors: 0,
                doorbells: 0,
                busy_ns: 0,
                inject: self.take_inject(client),
                inject_base: 0,
                halted: false,
                fault_kind: 0,
            }),
            cmd_bytes: cmd_bytes as u64,
            event_bytes: event_bytes as u64,
            mem: Some(mem),
        };
        // Cannot fail: capacity was checked above and nothing ran in between.
        let handle = self.streams.insert(stream, "stream table is full")?;
        self.client_mut(client)?.streams += 1;
        args.handle = handle;
        args.cmd_ring = RingMapping {
            mmap_offset: mmap_offset(MmapKind::CmdRing, handle),
            mmap_size: cmd_bytes as u64,
            entries: ce,
            pad: 0,
            offsets: RingOffsets::standard(TASK_DESC_SIZE as u32),
        };
        args.event_ring = RingMapping {
            mmap_offset: mmap_offset(MmapKind::EventRing, handle),
            mmap_size: event_bytes as u64,
            entries: ee,
            pad: 0,
            offsets: RingOffsets::standard(EVENT_RECORD_SIZE as u32),
        };
        args.doorbell_offset = mmap_offset(MmapKind::Doorbell, handle);
        args.doorbell_size = DOORBELL_SIZE;
        Ok(())
    }

    /// DESTROY_STREAM: the stream stops; its memory goes back to the platform.
    pub fn destroy_stream(&mut self, client: u32, stream: u32) -> Result<()> {
        match self.streams.get(stream) {
            Some(s) if s.owner == client => {}
            _ => fail!(ENOENT, "no such stream for this client"),
        }
        let mut counts = (0, 0, 0, 0);
        if let Some(s) = self.streams.remove(stream) {
            let StreamEntry {
                owner,
                ctx,
                mut run,
                mem,
                cmd_bytes,
                event_bytes,
                ..
            } = s;
            let e = run.get_mut();
            counts = (e.submitted, e.completed, e.busy_ns, e.errors);
            self.retired.busy_ns += e.busy_ns;
            self.retired.submitted += e.submitted;
            self.retired.completed += e.completed;
            self.retired.errors += e.errors;
            self.retired.doorbells += e.doorbells;
            // What it had queued will never run.
            if e.state == StreamState::Running {
                poison_queued_records(&self.events, (owner, ctx), e, None, Errno::ECANCELED);
            }
            // Ring views go first: they point into `mem`.
            drop(run);
            if let Some(mem) = mem {
                for (kind, len) in [
                    (MmapKind::CmdRing, cmd_bytes),
                    (MmapKind::EventRing, event_bytes),
                    (MmapKind::Doorbell, DOORBELL_SIZE),
                ] {
                    self.platform
                        .revoke_mappings(client, mmap_offset(kind, stream), len);
                }
                self.platform.release_stream(client, stream, mem);
            }
        }
        let c = self.client_mut(client)?;
        c.streams -= 1;
        c.submitted += counts.0;
        c.completed += counts.1;
        c.busy_ns += counts.2;
        c.stream_errors += counts.3;
        self.platform.notify_waiters(client);
        Ok(())
    }

    /// The fault a new stream of `client` is armed with under the device-wide rule, if it
    /// matches (counting it against the rule's `streams`).
    fn take_inject(&mut self, client: u32) -> Option<Inject> {
        let rule = self.inject?;
        let p = self.clients.get(client)?.params;
        if !rule.matches(p.pid, p.uid, &p.comm) {
            return None;
        }
        if let Some(n) = rule.target.streams {
            self.inject = (n > 1).then_some(InjectRule {
                target: crate::inject::InjectTarget {
                    streams: Some(n - 1),
                    ..rule.target
                },
                ..rule
            });
        }
        Some(rule.fault)
    }

    /// Arms a device-wide rule (or disarms, `None`): the streams created from now on that it
    /// selects get its fault (the streams that exist keep theirs). A host's test hook
    /// (`davinci-mockd --inject FAULT@SELECTORS`, the kernel module's `inject` parameter),
    /// not an ioctl: no client can reach it.
    pub fn inject_rule(&mut self, rule: Option<InjectRule>) {
        self.inject = rule;
    }

    /// Arms `fault` (or disarms, `None`) on `stream`, or, with `stream` `None`, on every
    /// stream and every stream created from now on. A host's test hook (the mock device's
    /// `--inject`), not an ioctl: no client can reach it. `ENOENT` if the stream does not
    /// exist.
    pub fn inject(&mut self, stream: Option<u32>, fault: Option<Inject>) -> Result<()> {
        let arm = |s: &mut StreamEntry<P>| {
            let e = s.run.get_mut();
            e.inject = fault;
            e.inject_base = e.submitted;
        };
        match stream {
            Some(h) => match self.streams.get_mut(h) {
                Some(s) => arm(s),
                None => fail!(ENOENT, "no such stream"),
            },
            None => {
                self.inject = fault.map(InjectRule::from);
                for (_, s) in self.streams.iter_mut() {
                    arm(s);
                }
            }
        }
        Ok(())
    }

    /// Applies a host's test hook ([`HostFault`]): a rule with selectors arms the new streams
    /// it selects; a rule without, or `none`, arms (disarms) every stream and every new one;
    /// `reset` resets the device. Returns the streams a reset stopped (0 otherwise).
    pub fn apply_host_fault(&mut self, fault: &HostFault) -> u32 {
        match fault {
            HostFault::Arm(Some(rule)) if rule.target != InjectTarget::default() => {
                self.inject_rule(Some(*rule));
                0
            }
            HostFault::Arm(f) => {
                // `None` (every stream) cannot fail.
                let _ = self.inject(None, f.map(|r| r.fault));
                0
            }
            HostFault::Reset => self.reset(),
        }
    }

    /// A device reset: every running stream stops in the error state with `ECANCELED`
    /// (no record: what it had taken but not completed, a pending EVENT_WAIT or a hung task,
    /// is lost with it; the records it had already published stay in its event ring), the
    /// EVENT_RECORDs it had queued can no longer be reached (section 8 of docs/abi.md), and
    /// waiters wake. Clients, contexts, events, memory and the streams' handles stay: a
    /// client sees the reset at its next call on a stream (`EIO`, status `ECANCELED`) and
    /// recovers as from any stream error (destroy, create). Returns the streams stopped.
    pub fn reset(&mut self) -> u32 {
        let DeviceCore {
            streams,
            events,
            platform,
            clients,
            ..
        } = self;
        let mut stopped = 0;
        for (_, s) in streams.iter_mut() {
            let (owner, ctx) = (s.owner, s.ctx);
            let e = s.run.get_mut();
            if e.state != StreamState::Running {
                continue;
            }
            let head = e.cmd.head();
            e.enter_error(Errno::ECANCELED, head);
            e.pending = None;
            e.halted = false;
            poison_queued_records(events, (owner, ctx), e, None, Errno::ECANCELED);
            stopped += 1;
        }
        // Every open's waiters: a reset concerns them all.
        for (client, _) in clients.iter() {
            platform.notify_waiters(client);
        }
        self.log_event(
            0,
            crate::observe::Event {
                code: davinci_uapi::DEVICE_EVENT_DEVICE_RESET,
                detail: stopped,
                ..Default::default()
            },
        );
        stopped
    }

    /// The platform memory of `client`'s stream (to serve its mmap), if it owns it.
    pub fn stream_mem(&self, client: u32, stream: u32) -> Option<&P::StreamMem> {
        match self.streams.get(stream) {
            Some(s) if s.owner == client => s.mem.as_ref(),
            _ => None,
        }
    }

    /// Every live stream handle (for platforms that start one worker per stream).
    pub fn stream_handles(&self) -> impl Iterator<Item = u32> + '_ {
        self.streams.iter().map(|(h, _)| h)
    }

    /// The state of `client`'s stream.
    pub fn stream_state(&self, client: u32, stream: u32) -> Result<StreamState> {
        match self.streams.get(stream) {
            Some(s) if s.owner == client => locked(&s.run, |e| e.state),
            _ => Err(Error::new(Errno::ENOENT, "no such stream for this client")),
        }
    }

    /// Resolves an mmap request: `cookie` must name an object `client` owns and `len` must
    /// not exceed it.
    pub fn mmap_target(&self, client: u32, cookie: u64, len: u64) -> Result<MmapTarget> {
        let Some((kind, handle)) = davinci_uapi::decode_mmap_offset(cookie) else {
            fail!(EINVAL, "not an mmap offset this driver handed out");
        };
        ensure!(len > 0, EINVAL, "mmap length is 0");
        let (target, size) = match kind {
            MmapKind::Memory => match self.allocations.get(handle) {
                Some(a) if a.owner == client && !a.released => {
                    // An import maps its exporter's memory: the range it imported.
                    let (owner, offset) = match a.origin {
                        0 => (client, a.offset),
                        o => match self.allocations.get(o) {
                            Some(x) => (x.owner, x.offset),
                            None => fail!(ENOENT, "the imported allocation is gone"),
                        },
                    };
                    let skip = a.offset.saturating_sub(offset);
                    (
                        MmapTarget::Memory {
                            owner,
                            offset,
                            len: a.size,
                            skip,
                        },
                        a.size,
                    )
                }
                _ => fail!(ENOENT, "no such allocation for this client"),
            },
            _ => {
                let s = match self.streams.get(handle) {
                    Some(s) if s.owner == client => s,
                    _ => fail!(ENOENT, "no such stream for this client"),
                };
                match kind {
                    MmapKind::CmdRing => (MmapTarget::CmdRing { stream: handle }, s.cmd_bytes),
                    MmapKind::EventRing => {
                        (MmapTarget::EventRing { stream: handle }, s.event_bytes)
                    }
                    _ => (MmapTarget::Doorbell { stream: handle }, DOORBELL_SIZE),
                }
            }
        };
        ensure!(len <= size, EINVAL, "mmap length exceeds the object");
        Ok(target)
    }
}
