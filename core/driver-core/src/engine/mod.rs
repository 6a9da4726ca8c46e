//! The software engine: takes descriptors from a stream's command ring, validates each copy,
//! executes it against the submitting client's device memory, and writes one event record per
//! descriptor, in order. Like `null_blk` for block devices: the hardware we do not have. The
//! kernel module and the mock device run this same code.
//!
//! Flow control: a descriptor is taken only while an event slot is free, so the event ring
//! never overflows and nothing is buffered. An invalid descriptor gets an error completion and
//! puts the stream in the error state; a corrupt ring (indices the protocol cannot produce)
//! puts it in the error state with `EPROTO`. Other streams and clients are unaffected.

use crate::device::entries::wait_state;
use davinci_ring::RingError;
use davinci_uapi::{Errno, EventRecord, FaultKind, FaultOperand, Opcode, TaskDesc};

use crate::device::entries::{poison_queued_records, Pending, StreamEngine, StreamState};
use crate::device::DeviceCore;
use crate::error::Error;
use crate::inject::Inject;
use crate::limits::{MIN_PASS_WORK, PASS_WORK};
use crate::observe::{trace_chunk, trace_done, trace_nops, TaskTrace, Tracer};
use crate::platform::{Lock, Platform};
use davinci_uapi::{
    DEVICE_EVENT_HUNG_TASK, DEVICE_EVENT_INJECTED_FAULT, DEVICE_EVENT_STREAM_STOPPED,
    TRACE_KIND_TASK,
};

#[cfg(feature = "kernels")]
mod compute;
mod exec;
pub mod launch;

use exec::{plain_nop, Done, Exec};
pub use launch::Launch;

/// This build runs the built-in kernels (feature `kernels`: user-space hosts; the kernel
/// module builds without it, so its devices list none and refuse launches).
pub const KERNELS: bool = cfg!(feature = "kernels");

/// What one `run_stream` call achieved, and what the worker should wait for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// This many descriptors were completed (more may be waiting: call again).
    Progress(u32),
    /// A long task ran a chunk and is not done: call again, after letting the other streams
    /// and the control path run (the engine holds nothing between two calls).
    Continuing,
    /// The command ring is empty: spin briefly, then sleep until the doorbell.
    Idle,
    /// The event ring is full: the host has not consumed completions yet.
    Stalled,
    /// Waiting for `event` to reach `value` (an EVENT_WAIT): sleep until an event is recorded.
    Blocked {
        /// Event handle.
        event: u32,
        /// Value awaited.
        value: u64,
    },
    /// The stream is in the error state.
    Failed(Errno),
    /// An injected fault halted the stream without an error ([`Inject::HangAt`],
    /// [`Inject::StopAt`]): it takes nothing more until it is destroyed or the device is
    /// reset, so there is nothing to wait for.
    Halted,
    /// The stream no longer exists.
    Gone,
}

/// The event record of one descriptor: its result, or its negative errno with the fault (which
/// operand, what was wrong) packed into `result` (abi.md 7).
fn record(
    user_data: u64,
    opcode: u8,
    status: core::result::Result<u64, Error>,
    now: u64,
) -> EventRecord {
    let (status, result) = match status {
        Ok(r) => (0, r),
        Err(e) => (-e.errno.code(), e.fault.map_or(0, |f| f.encode())),
    };
    EventRecord {
        user_data,
        status,
        opcode,
        pad: [0; 3],
        result,
        timestamp_ns: now,
    }
}

/// The record of a NOP that completed (at `now`): [`record`]'s, built without its match.
#[inline(always)]
fn nop_record(user_data: u64, now: u64) -> EventRecord {
    EventRecord {
        user_data,
        status: 0,
        opcode: Opcode::Nop as u8,
        pad: [0; 3],
        result: 0,
        timestamp_ns: now,
    }
}

/// The clock reading of a pass that found descriptors to take: the stamp of its instant
/// tasks (NOP, EVENT_RECORD) and the start of its busy time. Never inlined: called once per
/// pass that takes descriptors and by no other, so its calls count those passes
/// (`scripts/bench-callgrind.sh` tells them from the idle passes by it).
#[inline(never)]
fn busy_pass_clock<P: Platform>(platform: &P) -> u64 {
    platform.now_ns()
}

/// What one stream may do in one pass: its descriptors, and its client's long-task work
/// divided among the client's streams.
#[derive(Debug, Clone, Copy)]
struct Share {
    descriptors: u32,
    work: u64,
}

impl<P: Platform> DeviceCore<P> {
    /// Runs `stream` for up to `budget` descriptors and [`PASS_WORK`] of long tasks divided
    /// among the streams of its client (a client's long-task work per pass is the same
    /// however many streams it has); a long task runs over several calls
    /// ([`Run::Continuing`]). The data path: takes `&self` and the
    /// stream's lock (and an event's, for EVENT_RECORD/WAIT), so a host may run different
    /// streams on several threads at once; the control path (`&mut self`) excludes it. The
    /// worker sleeps according to the result.
    ///
    /// Never inlined: one call per stream per pass costs nothing measurable, and it keeps the
    /// device's work one function that callgrind can count alone (`scripts/bench-callgrind.sh`).
    #[inline(never)]
    pub fn run_stream(&self, stream: u32, budget: u32) -> Run {
        let Some(s) = self.streams.get(stream) else {
            return Run::Gone;
        };
        // `None`: this thread holds the lock already, which only a host bug can cause;
        // nothing ran, so report nothing to do.
        // A client's long-task work in a pass is the same however many streams it has: each
        // of its streams gets that work divided by their number (at least `MIN_PASS_WORK`).
        // Descriptors are not divided: the short ones cost next to nothing, and dividing them
        // cost a client with 16 streams half its throughput.
        let streams = self.clients.get(s.owner).map_or(1, |c| c.streams.max(1));
        let share = Share {
            descriptors: budget,
            work: PASS_WORK
                .checked_div(u64::from(streams))
                .unwrap_or(PASS_WORK)
                .max(MIN_PASS_WORK),
        };
        s.run
            .with(|e| {
                // Busy time (GET_COUNTERS, LIST_CLIENTS `busy_ns`): a pass that took,
                // completed or advanced anything counts from the clock reading taken when it
                // found work (`started`) to its end; an idle pass counts nothing and reads no
                // clock.
                let mut started = None;
                let before = (e.submitted, e.completed);
                let tr = self.tracer(s.owner, stream);
                let r = self.run_locked(e, (s.owner, s.ctx), share, &mut started, tr);
                if let Some(start) = started {
                    if (e.submitted, e.completed) != before || r == Run::Continuing {
                        let spent = self.platform.now_ns().saturating_sub(start);
                        e.busy_ns = e.busy_ns.saturating_add(spent);
                    }
                }
                r
            })
            .unwrap_or(Run::Idle)
    }

    /// One pass over stream `s`. `started`: set to the pass's first clock reading, taken when
    /// it finds work (before any of it runs); left `None` by a pass that found none.
    fn run_locked(
        &self,
        s: &mut StreamEngine,
        (owner, ctx): (u32, u32),
        share: Share,
        started: &mut Option<u64>,
        tr: Tracer<'_>,
    ) -> Run {
        let Share {
            descriptors: budget,
            mut work,
        } = share;
        let DeviceCore {
            platform,
            events,
            allocations,
            exports,
            event_exports,
            memory,
            ..
        } = self;
        if let StreamState::Error(e) = s.state {
            return Run::Failed(e);
        }
        if s.halted {
            return Run::Halted;
        }
        // Stops the stream at `index` (the descriptor `failed`, if one failed): the error
        // state, and the events its queued records can no longer reach (their waiters wake).
        let fail_stream =
            |s: &mut StreamEngine, errno: Errno, index: u32, failed: Option<&TaskDesc>| {
                s.enter_error(errno, index);
                let kind = failed.map_or(0, |_| u64::from(s.fault_kind));
                tr.event(
                    platform.now_ns(),
                    DEVICE_EVENT_STREAM_STOPPED,
                    errno.code() as u32,
                    (kind << 32) | u64::from(index),
                );
                if poison_queued_records(events, (owner, ctx), s, failed, errno) {
                    platform.notify_waiters(owner);
                }
                Run::Failed(errno)
            };

        let mut exec = Exec {
            platform,
            allocations,
            exports,
            event_exports,
            memory,
            events,
            owner,
            ctx,
            recorded: false,
        };
        let mut free = match s.evt.free() {
            Ok(f) => f,
            Err(_) => {
                let head = s.cmd.head();
                return fail_stream(s, Errno::EPROTO, head, None);
            }
        };
        let mut completed = 0u32;
        let mut taken = 0u32;

        // A pending EVENT_WAIT completes first (its event slot was reserved when taken).
        if let Some(p) = s.pending {
            let event = events
                .get(p.event)
                .and_then(|e| wait_state(events, e))
                .and_then(|st| st.with(|v| (v.value, v.unreachable(p.value))));
            let value = event.map(|(v, _)| v);
            let unreachable = event.and_then(|(_, u)| u);
            match value {
                Some(v) if v < p.value && unreachable.is_none() => {
                    return Run::Blocked {
                        event: p.event,
                        value: p.value,
                    }
                }
                _ => {}
            }
            if free == 0 {
                return Run::Stalled;
            }
            let now = platform.now_ns();
            *started = Some(now);
            let status = match (value, unreachable) {
                // The stream that was to record the value stopped: this one fails too.
                (_, Some(_)) => Err(Error::at(
                    Errno::EIO,
                    "the event will not reach this value",
                    FaultOperand::Imm,
                    FaultKind::Unreachable,
                )),
                (Some(v), None) => Ok(v),
                // The event was destroyed (or, imported, its exporter's): the wait is
                // cancelled, the stream goes on.
                (None, None) => Err(Error::new(Errno::ECANCELED, "the event was destroyed")),
            };
            let rec = record(p.user_data, Opcode::EventWait as u8, status, now);
            let _ = s.evt.push(&rec);
            s.pending = None;
            if tr.on() {
                tr.task(TaskTrace {
                    user_data: p.user_data,
                    start_ns: p.taken_ns,
                    end_ns: now,
                    index: s.cmd.head().wrapping_sub(1),
                    status: rec.status,
                    opcode: Opcode::EventWait as u8,
                    kind: TRACE_KIND_TASK,
                    chunk: 0,
                    tasks: 1,
                });
            }
            if unreachable.is_some() {
                s.evt.publish();
                let index = s.cmd.head().wrapping_sub(1);
                s.completed += 1;
                platform.notify_waiters(owner);
                return fail_stream(s, Errno::EIO, index, None);
            }
            free -= 1;
            completed += 1;
        }

        // A long task part-way done goes on first (its event slot is free: nothing else was
        // recorded since it was taken, and the host only frees slots).
        if let Some(mut p) = s.partial.take() {
            if free == 0 {
                s.partial = Some(p);
                return Run::Stalled;
            }
            let chunk_start = *started.get_or_insert_with(|| platform.now_ns());
            let status = match exec.advance(&mut p, &mut work) {
                Ok(None) => {
                    if tr.on() {
                        trace_chunk(&tr, &mut p, chunk_start, platform.now_ns());
                    }
                    s.partial = Some(p);
                    return Run::Continuing;
                }
                Ok(Some(r)) => Ok(r),
                Err(e) => Err(e),
            };
            let end = platform.now_ns();
            let rec = record(p.d.user_data, p.d.opcode, status, end);
            let _ = s.evt.push(&rec);
            if tr.on() {
                trace_chunk(&tr, &mut p, chunk_start, end);
                trace_done(&tr, &p.d, p.index, p.taken_ns, end, rec.status);
            }
            if let Err(e) = status {
                s.fault_kind = e.fault.map_or(0, |f| f.kind as u32);
                s.completed += 1;
                s.evt.publish();
                platform.notify_waiters(owner);
                return fail_stream(s, e.errno, p.index, Some(&p.d));
            }
            free -= 1;
            completed += 1;
        }

        let avail = match s.cmd.available() {
            Ok(a) => a,
            Err(_) => {
                s.evt.publish();
                let head = s.cmd.head();
                return fail_stream(s, Errno::EPROTO, head, None);
            }
        };
        let n = avail.min(free).min(budget);
        // An armed fault that falls in this run fires at that position (tasks before it run).
        let fault = s.inject.and_then(|f| {
            let done = s.submitted.wrapping_sub(s.inject_base);
            let before = f.nth().checked_sub(1)?.checked_sub(done)?;
            u32::try_from(before)
                .ok()
                .filter(|&k| k < n)
                .map(|k| (k, f))
        });
        let mut failed = None;
        let mut blocked = None;
        // The clock is read once per pass for tasks that take no time (NOP, EVENT_RECORD):
        // they share the reading taken when the pass found them (also the start of its busy
        // time), or that of the data task before them (read when it finished). A clock read
        // per NOP was a tenth of the device's time.
        let mut stamp = 0;
        if n > 0 {
            stamp = busy_pass_clock(platform);
            started.get_or_insert(stamp);
        }
        let mut continuing = false;
        let mut next: Option<TaskDesc> = None;
        while taken < n {
            if let Some((at, f)) = fault {
                if at == taken {
                    s.inject = None;
                    if let Inject::StopAt { .. } = f {
                        s.halted = true;
                        tr.event(exec.platform.now_ns(), DEVICE_EVENT_INJECTED_FAULT, 3, 0);
                        break;
                    }
                }
            }
            // Copied out of shared memory once (by the fast path below, which hands on the
            // copy it does not take); everything below looks only at the copy.
            let Some(d) = next.take().or_else(|| s.cmd.peek(taken)) else {
                break;
            };
            // The fast path: a run of NOPs with every other field zero (what `execute`
            // accepts as a NOP, each checked with one test), up to the next descriptor that is
            // not one or where an injected fault fires. Their records are what the general
            // path below would write. The pass's work spent (by a long task before), it takes
            // one, as the general path does.
            if plain_nop(&d) && fault.is_none_or(|(at, _)| at != taken) {
                // An armed fault here lies ahead (it fires when reached, and the pass ends).
                let stop = match fault {
                    _ if work == 0 => taken + 1,
                    Some((at, _)) => at,
                    None => n,
                };
                let first = s.cmd.head().wrapping_add(taken);
                taken += 1;
                let _ = s.evt.push(&nop_record(d.user_data, stamp));
                completed += 1;
                let mut run = 1;
                if taken < stop {
                    let (k, refused) = s.cmd.take_run(taken, stop, &mut s.evt, |c| {
                        plain_nop(c).then(|| nop_record(c.user_data, stamp))
                    });
                    taken += k;
                    completed += k;
                    run += k;
                    next = refused;
                }
                if tr.on() {
                    trace_nops(&tr, d.user_data, first, run, stamp);
                }
                if work == 0 {
                    break;
                }
                continue;
            }
            let index = s.cmd.head().wrapping_add(taken);
            taken += 1;
            match fault {
                Some((at, Inject::HangAt { .. })) if at + 1 == taken => {
                    s.halted = true;
                    let now = exec.platform.now_ns();
                    tr.event(now, DEVICE_EVENT_INJECTED_FAULT, 2, 0);
                    tr.event(now, DEVICE_EVENT_HUNG_TASK, 0, u64::from(index));
                    break;
                }
                Some((at, Inject::ErrorAt { errno, .. })) if at + 1 == taken => {
                    let now = exec.platform.now_ns();
                    tr.event(now, DEVICE_EVENT_INJECTED_FAULT, 1, errno.code() as u64);
                    s.fault_kind = 0;
                    let e = Error::new(errno, "injected device fault");
                    let rec = record(d.user_data, d.opcode, Err(e), now);
                    let _ = s.evt.push(&rec);
                    if tr.on() {
                        trace_done(&tr, &d, index, stamp, now, rec.status);
                    }
                    completed += 1;
                    failed = Some((errno, index, d));
                    break;
                }
                _ => {}
            }
            // What the descriptor came to: a result, or an error (a long task runs its first
            // chunk now; one that is not done stays with the stream for the next pass).
            let taken_at = stamp;
            let outcome = match exec.execute(&d) {
                Ok(Done::Complete(r)) => Ok(r),
                Ok(Done::Wait(p)) => {
                    s.pending = Some(Pending {
                        taken_ns: taken_at,
                        ..p
                    });
                    blocked = Some(Run::Blocked {
                        event: p.event,
                        value: p.value,
                    });
                    break;
                }
                Ok(Done::Long(mut p)) => {
                    p.index = index;
                    p.taken_ns = taken_at;
                    match exec.advance(&mut p, &mut work) {
                        Ok(Some(r)) => Ok(r),
                        Ok(None) => {
                            if tr.on() {
                                trace_chunk(&tr, &mut p, taken_at, exec.platform.now_ns());
                            }
                            s.partial = Some(p);
                            continuing = true;
                            break;
                        }
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok(r) => {
                    let instant =
                        d.opcode == Opcode::Nop as u8 || d.opcode == Opcode::EventRecord as u8;
                    if !instant {
                        stamp = exec.platform.now_ns();
                    }
                    let rec = record(d.user_data, d.opcode, Ok(r), stamp);
                    let _ = s.evt.push(&rec);
                    if tr.on() {
                        trace_done(&tr, &d, index, taken_at, stamp, 0);
                    }
                    completed += 1;
                    // The pass's work is spent (by long tasks): the rest waits for the next.
                    if work == 0 {
                        break;
                    }
                }
                Err(e) => {
                    let end = exec.platform.now_ns();
                    let rec = record(d.user_data, d.opcode, Err(e), end);
                    let _ = s.evt.push(&rec);
                    if tr.on() {
                        trace_done(&tr, &d, index, taken_at, end, rec.status);
                    }
                    s.fault_kind = e.fault.map_or(0, |f| f.kind as u32);
                    completed += 1;
                    failed = Some((e.errno, index, d));
                    break;
                }
            }
        }
        let recorded = exec.recorded;
        if taken > 0 {
            s.cmd.advance(taken);
        }
        if completed > 0 {
            s.evt.publish();
        }
        s.submitted += u64::from(taken);
        s.completed += u64::from(completed);
        if completed > 0 || recorded {
            platform.notify_waiters(owner);
        }
        if let Some((errno, index, d)) = failed {
            return fail_stream(s, errno, index, Some(&d));
        }
        if let Some(b) = blocked {
            if completed > 0 {
                return Run::Progress(completed);
            }
            return b;
        }
        if completed > 0 {
            Run::Progress(completed)
        } else if continuing {
            Run::Continuing
        } else if s.halted {
            Run::Halted
        } else if avail > 0 && free == 0 {
            Run::Stalled
        } else {
            Run::Idle
        }
    }

    /// Before the worker sleeps on the doorbell: arms NEED_WAKEUP and re-checks the ring.
    /// `true` = nothing arrived, sleep until the doorbell changes; `false` = run again.
    /// The data path, like [`run_stream`](Self::run_stream).
    pub fn stream_prepare_sleep(&self, stream: u32) -> bool {
        self.streams
            .get(stream)
            .and_then(|s| {
                s.run.with(|e| {
                    e.state == StreamState::Running
                        && e.pending.is_none()
                        && e.partial.is_none()
                        && e.cmd.prepare_sleep()
                })
            })
            .unwrap_or(false)
    }

    /// Before the worker of a **stalled** stream (`Run::Stalled`: descriptors waiting, event
    /// ring full) sleeps on the doorbell: arms NEED_WAKEUP and re-reads the host's event-ring
    /// head. `true` = still full, sleep until the doorbell changes (the host rings after
    /// reaping, docs/abi.md 5.4); `false` = a slot was freed (or the stream changed), run
    /// again.
    pub fn stream_prepare_stall_sleep(&self, stream: u32) -> bool {
        self.streams
            .get(stream)
            .and_then(|s| {
                s.run.with(|e| {
                    e.state == StreamState::Running && e.cmd.prepare_stall_sleep(&mut e.evt)
                })
            })
            .unwrap_or(false)
    }

    /// After the worker woke up (or decided not to sleep): disarms NEED_WAKEUP (the producer
    /// stops ringing). `rung`: the stream's doorbell woke it (the host saw the doorbell word
    /// change while the worker slept), counted in GET_COUNTERS `doorbells`.
    pub fn stream_woke(&self, stream: u32, rung: bool) {
        if let Some(s) = self.streams.get(stream) {
            let _ = s.run.with(|e| {
                e.cmd.clear_need_wakeup();
                e.doorbells += u64::from(rung);
            });
        }
    }
}

impl From<RingError> for Error {
    fn from(_: RingError) -> Self {
        Error::new(Errno::EPROTO, "ring indices are corrupt")
    }
}
