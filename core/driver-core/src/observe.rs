//! Seeing what the device did (ABI 1.5): per-task traces (TRACE) and the coded device event
//! log (READ_EVENTS), in fixed storage.
//!
//! Both are [`SeqLog`]s: bounded logs of fixed-size records written by the data path (several
//! streams at once, under their own stream locks only) and read by the control path. A slot
//! is a seqlock of atomics: no lock, no `unsafe`, no heap. The kernel builds the device in
//! static storage, so the sizes here are part of the device's size (docs/abi.md "Seeing what
//! the device did": an event log of 256 records, 12 KiB). The trace buffers (4 of 1,024
//! records of 56 bytes, 224 KiB) are the host's ([`Platform::trace_logs`](crate::Platform::trace_logs)):
//! the device would otherwise be too big to build on a thread's stack in a debug build.
//!
//! Tracing costs nothing while off: the data path looks at one flag per pass
//! (`Tracer::on`). Events are rare by nature (a stream stops, a reset, a storm of refusals
//! coalesced to one a second).

use core::sync::atomic::{fence, AtomicU64, Ordering};

use davinci_uapi::{
    DeviceEvent, TaskDesc, TraceRecord, DEVICE_EVENTS_MAX, TRACE_BUFFERS_MAX, TRACE_KIND_CHUNK,
    TRACE_KIND_TASK, TRACE_RECORDS_MAX,
};

use crate::device::entries::Partial;

pub(crate) mod control;

/// Records of one trace buffer (a power of two).
pub const TRACE_RECORDS: usize = TRACE_RECORDS_MAX as usize;
/// Trace buffers of a device.
pub const TRACE_BUFFERS: usize = TRACE_BUFFERS_MAX as usize;
/// Events of the device's log (a power of two).
pub const EVENT_RECORDS: usize = DEVICE_EVENTS_MAX as usize;

const _: () = assert!(TRACE_RECORDS.is_power_of_two() && EVENT_RECORDS.is_power_of_two());

/// One slot: `commit` is `seq + 1` once the words hold record `seq`, 0 while written.
struct Slot<const W: usize> {
    commit: AtomicU64,
    words: [AtomicU64; W],
}

impl<const W: usize> Slot<W> {
    const fn new() -> Self {
        Slot {
            commit: AtomicU64::new(0),
            words: [const { AtomicU64::new(0) }; W],
        }
    }
}

/// A bounded log of `N` records of `W` words, numbered from 0. Writers reserve a number and
/// fill its slot (overwriting the record `N` before); readers copy a slot and check that it
/// still holds the number they wanted (a seqlock), so a record overwritten during the copy is
/// reported lost rather than torn. Only records from `base` on are readable: a buffer handed
/// to a new owner shows nothing of the previous one's.
pub struct SeqLog<const W: usize, const N: usize> {
    next: AtomicU64,
    /// Written by the control path only (Relaxed: it runs with the device held exclusively).
    base: AtomicU64,
    slots: [Slot<W>; N],
}

impl<const W: usize, const N: usize> core::fmt::Debug for SeqLog<W, N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SeqLog")
            .field("next", &self.next())
            .field("capacity", &N)
            .finish_non_exhaustive()
    }
}

impl<const W: usize, const N: usize> Default for SeqLog<W, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize, const N: usize> SeqLog<W, N> {
    /// An empty log.
    pub const fn new() -> Self {
        SeqLog {
            next: AtomicU64::new(0),
            base: AtomicU64::new(0),
            slots: [const { Slot::new() }; N],
        }
    }

    /// Appends a record; returns its number.
    pub(crate) fn push(&self, words: [u64; W]) -> u64 {
        // Relaxed: the number only has to be unique; the slot's commit publishes the record.
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = &self.slots[(seq as usize) & (N - 1)];
        // The seqlock writer: invalidate, then (Release fence) the words, then commit with
        // Release. A reader that sees the commit (Acquire) sees the words; one that copied
        // while they changed sees the commit change (its fence(Acquire) after the copy).
        slot.commit.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        for (w, v) in slot.words.iter().zip(words) {
            w.store(v, Ordering::Relaxed);
        }
        slot.commit.store(seq + 1, Ordering::Release);
        seq
    }

    /// The number the next record will have.
    pub(crate) fn next(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// The oldest number still held.
    pub(crate) fn oldest(&self) -> u64 {
        self.next()
            .saturating_sub(N as u64)
            .max(self.base.load(Ordering::Relaxed))
    }

    /// Record `seq`, if its slot still holds it whole.
    pub(crate) fn get(&self, seq: u64) -> Option<[u64; W]> {
        if seq < self.base.load(Ordering::Relaxed) {
            return None;
        }
        let slot = &self.slots[(seq as usize) & (N - 1)];
        if slot.commit.load(Ordering::Acquire) != seq + 1 {
            return None;
        }
        let mut out = [0u64; W];
        for (o, w) in out.iter_mut().zip(&slot.words) {
            *o = w.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        (slot.commit.load(Ordering::Relaxed) == seq + 1).then_some(out)
    }

    /// Forgets every record (a buffer given to a new owner): later reads start at `next`.
    pub(crate) fn restart(&self) {
        self.base.store(self.next(), Ordering::Relaxed);
    }
}

/// A trace record in storage: user_data, start, end, client_id << 32 | stream,
/// index << 32 | status, tasks << 32 | opcode << 24 | kind << 16 | chunk.
/// One trace buffer (56 KiB), kept by the host: [`Platform::trace_logs`](crate::Platform::trace_logs).
pub type TraceLog = SeqLog<6, TRACE_RECORDS>;
/// A device event in storage: time, code << 32 | client_id, pid << 32 | uid,
/// stream << 32 | detail, value.
pub(crate) type EventLog = SeqLog<5, EVENT_RECORDS>;

/// A trace record before storage.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskTrace {
    pub(crate) user_data: u64,
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) index: u32,
    pub(crate) status: i32,
    pub(crate) opcode: u8,
    pub(crate) kind: u8,
    pub(crate) chunk: u16,
    pub(crate) tasks: u32,
}

pub(crate) fn decode_trace(seq: u64, w: [u64; 6]) -> TraceRecord {
    TraceRecord {
        seq,
        user_data: w[0],
        start_ns: w[1],
        end_ns: w[2],
        client_id: (w[3] >> 32) as u32,
        stream: w[3] as u32,
        index: (w[4] >> 32) as u32,
        status: w[4] as u32 as i32,
        opcode: (w[5] >> 24) as u8,
        kind: (w[5] >> 16) as u8,
        chunk: w[5] as u16,
        tasks: (w[5] >> 32) as u32,
    }
}

/// An event before storage.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Event {
    pub(crate) code: u32,
    pub(crate) stream: u32,
    pub(crate) detail: u32,
    pub(crate) value: u64,
}

/// Who an event concerns: a client (its id, pid, uid), or the device (all 0).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Who {
    pub(crate) client_id: u32,
    pub(crate) pid: u32,
    pub(crate) uid: u32,
}

pub(crate) fn encode_event(time: u64, who: Who, e: Event) -> [u64; 5] {
    [
        time,
        (u64::from(e.code) << 32) | u64::from(who.client_id),
        (u64::from(who.pid) << 32) | u64::from(who.uid),
        (u64::from(e.stream) << 32) | u64::from(e.detail),
        e.value,
    ]
}

pub(crate) fn decode_event(seq: u64, w: [u64; 5]) -> DeviceEvent {
    DeviceEvent {
        seq,
        time_ns: w[0],
        code: (w[1] >> 32) as u32,
        client_id: w[1] as u32,
        pid: (w[2] >> 32) as u32,
        uid: w[2] as u32,
        stream: (w[3] >> 32) as u32,
        detail: w[3] as u32,
        value: w[4],
    }
}

/// What the data path records a pass of one stream into: the owner's trace buffer and the
/// device-wide one, each when recording; the event log; and who the stream is.
#[derive(Clone, Copy)]
pub(crate) struct Tracer<'a> {
    pub(crate) own: Option<&'a TraceLog>,
    pub(crate) device: Option<&'a TraceLog>,
    pub(crate) log: &'a EventLog,
    pub(crate) who: Who,
    pub(crate) stream: u32,
}

impl Tracer<'_> {
    /// Whether anything traces this stream (the one branch tracing costs while off).
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.own.is_some() || self.device.is_some()
    }

    /// Records one task (or chunk) of the stream.
    pub(crate) fn task(&self, t: TaskTrace) {
        let words = [
            t.user_data,
            t.start_ns,
            t.end_ns,
            (u64::from(self.who.client_id) << 32) | u64::from(self.stream),
            (u64::from(t.index) << 32) | u64::from(t.status as u32),
            (u64::from(t.tasks) << 32)
                | (u64::from(t.opcode) << 24)
                | (u64::from(t.kind) << 16)
                | u64::from(t.chunk),
        ];
        for log in [self.own, self.device].into_iter().flatten() {
            log.push(words);
        }
    }

    /// Logs an event about this stream at device time `now`.
    pub(crate) fn event(&self, now: u64, code: u32, detail: u32, value: u64) {
        self.log.push(encode_event(
            now,
            self.who,
            Event {
                code,
                stream: self.stream,
                detail,
                value,
            },
        ));
    }
}

/// Records a chunk of long task `p` that ran from `start` to `end`.
pub(crate) fn trace_chunk(tr: &Tracer<'_>, p: &mut Partial, start: u64, end: u64) {
    tr.task(TaskTrace {
        user_data: p.d.user_data,
        start_ns: start,
        end_ns: end,
        index: p.index,
        status: 0,
        opcode: p.d.opcode,
        kind: TRACE_KIND_CHUNK,
        chunk: p.chunks,
        tasks: 1,
    });
    p.chunks = p.chunks.saturating_add(1);
}

/// Records a run of `tasks` plain NOPs from command-ring `index` (the first's `user_data`),
/// taken and completed together at `stamp`.
pub(crate) fn trace_nops(tr: &Tracer<'_>, user_data: u64, index: u32, tasks: u32, stamp: u64) {
    tr.task(TaskTrace {
        user_data,
        start_ns: stamp,
        end_ns: stamp,
        index,
        status: 0,
        opcode: davinci_uapi::Opcode::Nop as u8,
        kind: TRACE_KIND_TASK,
        chunk: 0,
        tasks,
    });
}

/// Records task `d` (command-ring `index`), taken at `start`, completed at `end` with
/// `status`.
pub(crate) fn trace_done(
    tr: &Tracer<'_>,
    d: &TaskDesc,
    index: u32,
    start: u64,
    end: u64,
    status: i32,
) {
    tr.task(TaskTrace {
        user_data: d.user_data,
        start_ns: start,
        end_ns: end,
        index,
        status,
        opcode: d.opcode,
        kind: TRACE_KIND_TASK,
        chunk: 0,
        tasks: 1,
    });
}

#[cfg(test)]
mod tests;
