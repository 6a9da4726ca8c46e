//! The software engine: takes descriptors from a stream's command ring, validates each copy,
//! executes it against the submitting client's device memory, and writes one event record per
//! descriptor, in order. Like `null_blk` for block devices: the hardware we do not have. The
//! kernel module and the mock device run this same code.
//!
//! Flow control: a descriptor is taken only while an event slot is free, so the event ring
//! never overflows and nothing is buffered. An invalid descriptor gets an error completion and
//! puts the stream in the error state; a corrupt ring (indices the protocol cannot produce)
//! puts it in the error state with `EPROTO`. Other streams and clients are unaffected.

use davinci_ring::RingError;
use davinci_uapi::{Dtype, Errno, EventRecord, FaultKind, FaultOperand, Opcode, TaskDesc};

use crate::device::{
    poison_queued_records, Allocation, DeviceCore, Engine, Event, Pending, StreamState,
};
use crate::error::{fail_at, Error, Result};
use crate::memory::{Allocator, DVA_BASE};
use crate::platform::{locked, Lock, Platform};
use crate::softfloat;
use crate::table::Table;

/// What one `run_stream` call achieved, and what the worker should wait for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// This many descriptors were completed (more may be waiting: call again).
    Progress(u32),
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

/// A device fault to inject, so a runtime's error handling can be tested against the mock
/// device (`MockConfig::inject`, `MockDevice::inject`, `davinci-mockd --inject`). Counted per
/// stream, in tasks the stream takes from the moment the fault is armed (the first is 1);
/// each fires once. docs/abi.md 5.6 says what a host sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inject {
    /// The `nth` task completes with `-errno` (no fault detail: a device error, not a bad
    /// descriptor) and the stream enters the error state with `errno`.
    ErrorAt {
        /// Which task (1 = the next one).
        nth: u64,
        /// The status it completes with (positive; `EIO` for a hardware error).
        errno: Errno,
    },
    /// The `nth` task is taken (the command ring's head moves past it) but never completes,
    /// and nothing after it is taken: waits for it time out.
    HangAt {
        /// Which task.
        nth: u64,
    },
    /// The stream stops consuming before the `nth` task: its command ring fills up.
    StopAt {
        /// Which task.
        nth: u64,
    },
}

impl Inject {
    /// The task it fires on (at least 1).
    pub fn nth(&self) -> u64 {
        match *self {
            Inject::ErrorAt { nth, .. } | Inject::HangAt { nth } | Inject::StopAt { nth } => {
                nth.max(1)
            }
        }
    }
}

/// Elements per chunk of ADD (stack buffers, no allocation).
const CHUNK: usize = 256;

struct Exec<'a, P: Platform> {
    platform: &'a P,
    allocations: &'a Table<Allocation, { crate::device::MAX_ALLOCATIONS }>,
    memory: &'a Allocator<{ 2 * crate::device::MAX_ALLOCATIONS + 1 }>,
    events: &'a Table<Event<P>, { crate::device::MAX_EVENTS }>,
    owner: u32,
    ctx: u32,
    recorded: bool,
}

/// Outcome of executing one descriptor.
enum Done {
    /// Completed with this result.
    Complete(u64),
    /// EVENT_WAIT not yet satisfied.
    Wait(Pending),
}

/// The first of `fields` that is not zero, if any: a field this opcode does not use.
fn first_nonzero(fields: &[(FaultOperand, u64)]) -> Option<FaultOperand> {
    fields.iter().find(|(_, v)| *v != 0).map(|(op, _)| *op)
}

/// `EBADMSG` about the first used-but-not-allowed field, if any.
fn unused_zero(fields: &[(FaultOperand, u64)], msg: &'static str) -> Result<()> {
    match first_nonzero(fields) {
        Some(op) => Err(Error::at(Errno::EBADMSG, msg, op, FaultKind::NotZero)),
        None => Ok(()),
    }
}

/// `EINVAL` unless `value` is a multiple of 4 (the alignment every element and pattern has).
fn aligned4(value: u64, op: FaultOperand, msg: &'static str) -> Result<()> {
    if value % 4 == 0 {
        Ok(())
    } else {
        Err(Error::at(Errno::EINVAL, msg, op, FaultKind::Misaligned).value(4))
    }
}

impl<P: Platform> Exec<'_, P> {
    /// Device-memory offset of `[addr, addr + len)` (operand `op`) if it lies inside one
    /// allocation of the submitting client. Otherwise: `ERANGE` if the computation overflows
    /// or the range starts in one of the client's allocations and runs past its end (the
    /// fault says by how many bytes), `EACCES` if it does not start in one.
    fn range(&self, addr: u64, len: u64, op: FaultOperand) -> Result<u64> {
        let Some(end) = addr.checked_add(len) else {
            return Err(Error::at(
                Errno::ERANGE,
                "address + length overflows",
                op,
                FaultKind::Overflow,
            ));
        };
        let not_owned = || {
            Error::at(
                Errno::EACCES,
                "the address is not in one of this client's allocations",
                op,
                FaultKind::NotOwned,
            )
        };
        let offset = addr.checked_sub(DVA_BASE).ok_or_else(not_owned)?;
        let a = self
            .memory
            .owner_of(offset, 1)
            .and_then(|h| self.allocations.get(h))
            .filter(|a| a.owner == self.owner)
            .ok_or_else(not_owned)?;
        let alloc_end = DVA_BASE.saturating_add(a.offset).saturating_add(a.size);
        if end > alloc_end {
            let past = u32::try_from(end - alloc_end).unwrap_or(u32::MAX);
            return Err(Error::at(
                Errno::ERANGE,
                "the range runs past the end of its allocation",
                op,
                FaultKind::PastEnd,
            )
            .value(past));
        }
        Ok(offset)
    }

    fn event(&self, handle: u32) -> Result<&'_ Event<P>> {
        let (owner, ctx) = (self.owner, self.ctx);
        match self.events.get(handle) {
            Some(e) if e.owner == owner && e.ctx == ctx => Ok(e),
            _ => Err(Error::at(
                Errno::ENOENT,
                "no such event in this stream's context",
                FaultOperand::Handle,
                FaultKind::NoSuchEvent,
            )),
        }
    }

    fn execute(&mut self, d: &TaskDesc) -> Result<Done> {
        use FaultOperand as F;
        unused_zero(
            &[
                (F::Reserved, u64::from(d.flags)),
                (F::Reserved, u64::from(d.reserved0)),
                (F::Reserved, u64::from(d.reserved1)),
            ],
            "reserved descriptor fields must be 0",
        )?;
        let Some(op) = Opcode::from_u8(d.opcode) else {
            fail_at!(EBADMSG, "unknown opcode", Opcode, Unknown);
        };
        if op != Opcode::Add {
            unused_zero(
                &[(F::Dtype, u64::from(d.dtype))],
                "dtype must be 0 except for ADD",
            )?;
        }
        match op {
            Opcode::Nop => {
                unused_zero(
                    &[
                        (F::Dst, d.dst),
                        (F::Src0, d.src0),
                        (F::Src1, d.src1),
                        (F::Len, d.len),
                        (F::Imm, d.imm),
                        (F::Handle, u64::from(d.handle)),
                    ],
                    "NOP operands must be 0",
                )?;
                Ok(Done::Complete(0))
            }
            Opcode::Fill => {
                unused_zero(
                    &[
                        (F::Src0, d.src0),
                        (F::Src1, d.src1),
                        (F::Handle, u64::from(d.handle)),
                        (F::Imm, d.imm >> 32),
                    ],
                    "FILL uses only dst, len and a 32-bit imm",
                )?;
                aligned4(d.dst, F::Dst, "FILL needs dst 4-byte aligned")?;
                aligned4(d.len, F::Len, "FILL needs len a multiple of 4 bytes")?;
                let dst = self.range(d.dst, d.len, F::Dst)?;
                self.platform
                    .mem_fill(self.owner, dst, d.len, d.imm as u32)?;
                Ok(Done::Complete(d.len))
            }
            Opcode::Copy => {
                unused_zero(
                    &[
                        (F::Src1, d.src1),
                        (F::Imm, d.imm),
                        (F::Handle, u64::from(d.handle)),
                    ],
                    "COPY uses only dst, src0 and len",
                )?;
                let dst = self.range(d.dst, d.len, F::Dst)?;
                let src = self.range(d.src0, d.len, F::Src0)?;
                self.platform.mem_copy(self.owner, dst, src, d.len)?;
                Ok(Done::Complete(d.len))
            }
            Opcode::Add => {
                unused_zero(
                    &[(F::Imm, d.imm), (F::Handle, u64::from(d.handle))],
                    "ADD uses only dtype, dst, src0, src1 and len",
                )?;
                let Some(dtype) = Dtype::from_u8(d.dtype) else {
                    fail_at!(EBADMSG, "unknown ADD dtype", Dtype, Unknown);
                };
                let Some(bytes) = d.len.checked_mul(dtype.size()) else {
                    fail_at!(ERANGE, "ADD element count overflows", Len, Overflow);
                };
                aligned4(d.dst, F::Dst, "ADD needs dst 4-byte aligned")?;
                aligned4(d.src0, F::Src0, "ADD needs src0 4-byte aligned")?;
                aligned4(d.src1, F::Src1, "ADD needs src1 4-byte aligned")?;
                let dst = self.range(d.dst, bytes, F::Dst)?;
                let a = self.range(d.src0, bytes, F::Src0)?;
                let b = self.range(d.src1, bytes, F::Src1)?;
                self.add(dtype, dst, a, b, bytes)?;
                Ok(Done::Complete(d.len))
            }
            Opcode::EventRecord => {
                unused_zero(
                    &[
                        (F::Dst, d.dst),
                        (F::Src0, d.src0),
                        (F::Src1, d.src1),
                        (F::Len, d.len),
                    ],
                    "EVENT_RECORD uses only handle and imm",
                )?;
                let v = locked(&self.event(d.handle)?.state, |e| {
                    e.value = e.value.max(d.imm);
                    e.value
                })?;
                self.recorded = true;
                Ok(Done::Complete(v))
            }
            Opcode::EventWait => {
                unused_zero(
                    &[
                        (F::Dst, d.dst),
                        (F::Src0, d.src0),
                        (F::Src1, d.src1),
                        (F::Len, d.len),
                    ],
                    "EVENT_WAIT uses only handle and imm",
                )?;
                let (value, unreachable) = locked(&self.event(d.handle)?.state, |e| {
                    (e.value, e.unreachable(d.imm))
                })?;
                if value >= d.imm {
                    Ok(Done::Complete(value))
                } else if unreachable.is_some() {
                    fail_at!(
                        EIO,
                        "the event will not reach this value: the stream that was to record it was stopped",
                        Imm,
                        Unreachable
                    )
                } else {
                    Ok(Done::Wait(Pending {
                        event: d.handle,
                        value: d.imm,
                        user_data: d.user_data,
                    }))
                }
            }
            Opcode::KernelLaunch => {
                fail_at!(
                    EBADMSG,
                    "KERNEL_LAUNCH needs hardware; the software engine has no kernels",
                    Opcode,
                    Unknown
                )
            }
        }
    }

    fn add(&mut self, dtype: Dtype, dst: u64, a: u64, b: u64, bytes: u64) -> Result<()> {
        let mut ba = [0u8; CHUNK * 4];
        let mut bb = [0u8; CHUNK * 4];
        let mut done = 0u64;
        while done < bytes {
            let n = (bytes - done).min((CHUNK * 4) as u64) as usize;
            let (xa, xb) = (&mut ba[..n], &mut bb[..n]);
            self.platform.mem_read(self.owner, a + done, xa)?;
            self.platform.mem_read(self.owner, b + done, xb)?;
            // An index loop rather than `chunks_exact(4).zip(..)`: the iterator's length
            // divides by the chunk size, and Linux 6.12's objtool does not know that
            // `panic_const_div_by_zero` never returns (a "falls through" warning per copy).
            let mut i = 0;
            while i + 4 <= n {
                let p = u32::from_ne_bytes([xa[i], xa[i + 1], xa[i + 2], xa[i + 3]]);
                let q = u32::from_ne_bytes([xb[i], xb[i + 1], xb[i + 2], xb[i + 3]]);
                // Two's complement: U32 and I32 wrap to the same bits. F32 in integer
                // arithmetic, so every host (the kernel is soft-float) gives the same bits.
                let r = match dtype {
                    Dtype::U32 | Dtype::I32 => p.wrapping_add(q),
                    Dtype::F32 => softfloat::f32_add(p, q),
                };
                xa[i..i + 4].copy_from_slice(&r.to_ne_bytes());
                i += 4;
            }
            self.platform.mem_write(self.owner, dst + done, xa)?;
            done += n as u64;
        }
        Ok(())
    }
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

impl<P: Platform> DeviceCore<P> {
    /// Runs `stream` for up to `budget` descriptors. The data path: takes `&self` and the
    /// stream's lock (and an event's, for EVENT_RECORD/WAIT), so a host may run different
    /// streams on several threads at once; the control path (`&mut self`) excludes it. The
    /// worker sleeps according to the result.
    pub fn run_stream(&self, stream: u32, budget: u32) -> Run {
        let Some(s) = self.streams.get(stream) else {
            return Run::Gone;
        };
        // `None`: this thread holds the lock already, which only a host bug can cause;
        // nothing ran, so report nothing to do.
        s.run
            .with(|e| self.run_locked(e, (s.owner, s.ctx), budget))
            .unwrap_or(Run::Idle)
    }

    fn run_locked(&self, s: &mut Engine, (owner, ctx): (u32, u32), budget: u32) -> Run {
        let DeviceCore {
            platform,
            events,
            allocations,
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
        let fail_stream = |s: &mut Engine, errno: Errno, index: u32, failed: Option<&TaskDesc>| {
            s.enter_error(errno, index);
            if poison_queued_records(events, (owner, ctx), s, failed, errno) {
                platform.notify_waiters();
            }
            Run::Failed(errno)
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
                .and_then(|e| e.state.with(|v| (v.value, v.unreachable(p.value))));
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
            let status = match (value, unreachable) {
                // The stream that was to record the value stopped: this one fails too.
                (_, Some(_)) => Err(Error::at(
                    Errno::EIO,
                    "the event will not reach this value",
                    FaultOperand::Imm,
                    FaultKind::Unreachable,
                )),
                (Some(v), None) => Ok(v),
                // The event was destroyed: the wait is cancelled, the stream goes on.
                (None, None) => Err(Error::new(Errno::ECANCELED, "the event was destroyed")),
            };
            let rec = record(
                p.user_data,
                Opcode::EventWait as u8,
                status,
                platform.now_ns(),
            );
            let _ = s.evt.push(&rec);
            s.pending = None;
            if unreachable.is_some() {
                s.evt.publish();
                let index = s.cmd.head().wrapping_sub(1);
                s.completed += 1;
                platform.notify_waiters();
                return fail_stream(s, Errno::EIO, index, None);
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
        let mut exec = Exec {
            platform,
            allocations,
            memory,
            events,
            owner,
            ctx,
            recorded: false,
        };
        let mut failed = None;
        let mut blocked = None;
        // The clock is read once per pass for tasks that take no time (NOP, EVENT_RECORD):
        // they share the reading of the first of them, or of the data task before them
        // (read when it finished). A clock read per NOP was a tenth of the device's time.
        let mut stamp: Option<u64> = None;
        while taken < n {
            if let Some((at, f)) = fault {
                if at == taken {
                    s.inject = None;
                    if let Inject::StopAt { .. } = f {
                        s.halted = true;
                        break;
                    }
                }
            }
            // Copied out of shared memory once; everything below looks only at the copy.
            let Some(d) = s.cmd.peek(taken) else {
                break;
            };
            let index = s.cmd.head().wrapping_add(taken);
            taken += 1;
            match fault {
                Some((at, Inject::HangAt { .. })) if at + 1 == taken => {
                    s.halted = true;
                    break;
                }
                Some((at, Inject::ErrorAt { errno, .. })) if at + 1 == taken => {
                    let e = Error::new(errno, "injected device fault");
                    let rec = record(d.user_data, d.opcode, Err(e), exec.platform.now_ns());
                    let _ = s.evt.push(&rec);
                    completed += 1;
                    failed = Some((errno, index, d));
                    break;
                }
                _ => {}
            }
            match exec.execute(&d) {
                Ok(Done::Complete(r)) => {
                    let instant =
                        d.opcode == Opcode::Nop as u8 || d.opcode == Opcode::EventRecord as u8;
                    let now = match stamp {
                        Some(t) if instant => t,
                        _ => {
                            let t = exec.platform.now_ns();
                            stamp = Some(t);
                            t
                        }
                    };
                    let rec = record(d.user_data, d.opcode, Ok(r), now);
                    let _ = s.evt.push(&rec);
                    completed += 1;
                }
                Ok(Done::Wait(p)) => {
                    s.pending = Some(p);
                    blocked = Some(Run::Blocked {
                        event: p.event,
                        value: p.value,
                    });
                    break;
                }
                Err(e) => {
                    let rec = record(d.user_data, d.opcode, Err(e), exec.platform.now_ns());
                    let _ = s.evt.push(&rec);
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
            platform.notify_waiters();
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
                    e.state == StreamState::Running && e.pending.is_none() && e.cmd.prepare_sleep()
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
