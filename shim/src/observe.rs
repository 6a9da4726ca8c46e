//! Seeing what the device did (ABI 1.5): the device's event log (READ_EVENTS) and per-task
//! traces (TRACE), for [`Device`](crate::Device) (its own streams, its user's events) and
//! [`Control`](crate::Control) (an admin: the whole device).
//!
//! Both logs are read by cursor and never consumed: keep the `cursor` of a batch and pass it
//! to the next read; `lost` says how many records the bounded log dropped before they were
//! read.

use davinci_uapi::{
    DeviceEvent, Errno, ReadEventsArgs, TraceArgs, TraceRecord, Wire, DRIVER_CMD_READ_EVENTS,
    DRIVER_CMD_TRACE, TRACE_OP_READ, TRACE_OP_START, TRACE_OP_STOP, TRACE_RECORDS_MAX,
    TRACE_SCOPE_CLIENT, TRACE_SCOPE_DEVICE,
};

use crate::backend::Backend;
use crate::error::{Error, Result};

/// Records read per call (the whole of a trace buffer; a daemon reply holds them).
const TRACE_BATCH: u32 = TRACE_RECORDS_MAX;
/// Events read per call.
const EVENT_BATCH: u32 = 256;

/// Events read from the device's log.
#[derive(Debug, Clone, Default)]
pub struct EventBatch {
    /// Oldest first.
    pub events: Vec<DeviceEvent>,
    /// Pass it to the next read.
    pub cursor: u64,
    /// Events the log dropped between the cursor passed and the first one held.
    pub lost: u64,
    /// The device clock at the read.
    pub now_ns: u64,
}

/// Trace records read from a trace buffer.
#[derive(Debug, Clone, Default)]
pub struct TraceBatch {
    /// Oldest first.
    pub records: Vec<TraceRecord>,
    /// Pass it to the next read.
    pub cursor: u64,
    /// Records the buffer dropped (overwritten before they were read).
    pub lost: u64,
    /// The device clock at the read.
    pub now_ns: u64,
}

/// Whose streams a trace records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceScope {
    /// The open's own streams (a client).
    Own,
    /// Every client's streams (an admin's open).
    Device,
}

impl TraceScope {
    fn wire(self) -> u32 {
        match self {
            TraceScope::Own => TRACE_SCOPE_CLIENT,
            TraceScope::Device => TRACE_SCOPE_DEVICE,
        }
    }
}

fn bytes<T: Wire>(v: &T) -> Vec<u8> {
    let mut b = vec![0u8; T::SIZE];
    v.encode(&mut b);
    b
}

/// What one read of a log answered: entries written, the next cursor, lost, the clock.
struct Answer {
    count: u32,
    cursor: u64,
    lost: u64,
    now_ns: u64,
}

/// Reads a log (READ_EVENTS, TRACE READ) from `cursor` in batches of `capacity` entries of
/// `E` until it is drained: `arg(cursor)` makes the argument, `answer` reads the reply.
/// Bounded: 16 rounds (a log holds at most 1,024 entries; a few more rounds for ones written
/// while reading). Returns the entries, the next cursor, lost and the device clock.
fn read_log<E: Wire>(
    b: &dyn Backend,
    op: &'static str,
    request: u32,
    capacity: u32,
    mut cursor: u64,
    arg: impl Fn(u64) -> Vec<u8>,
    answer: impl Fn(&[u8]) -> Answer,
) -> Result<(Vec<E>, u64, u64, u64)> {
    let (mut entries, mut lost, mut now_ns) = (Vec::new(), 0, 0);
    let mut buf = vec![0u8; capacity as usize * E::SIZE];
    for _ in 0..16 {
        let mut a = arg(cursor);
        b.ioctl_into(op, request, &mut a, &mut buf)?;
        let r = answer(&a);
        let n = r.count.min(capacity) as usize;
        entries.extend(buf.chunks_exact(E::SIZE).take(n).map(E::decode));
        lost += r.lost;
        now_ns = r.now_ns;
        if r.cursor < cursor {
            return Err(Error::new(
                Errno::EPROTO,
                op,
                "the driver moved the cursor back",
            ));
        }
        let more = r.count == capacity && r.cursor > cursor;
        cursor = r.cursor;
        if !more {
            break;
        }
    }
    Ok((entries, cursor, lost, now_ns))
}

/// READ_EVENTS from `cursor`: every event held from there, in batches.
pub(crate) fn read_events(b: &dyn Backend, cursor: u64) -> Result<EventBatch> {
    let (events, cursor, lost, now_ns) = read_log(
        b,
        "READ_EVENTS",
        DRIVER_CMD_READ_EVENTS,
        EVENT_BATCH,
        cursor,
        |cursor| {
            bytes(&ReadEventsArgs {
                capacity: EVENT_BATCH,
                entry_size: DeviceEvent::SIZE as u32,
                cursor,
                ..ReadEventsArgs::default()
            })
        },
        |a| {
            let a = ReadEventsArgs::decode(a);
            Answer {
                count: a.count,
                cursor: a.cursor,
                lost: a.lost,
                now_ns: a.now_ns,
            }
        },
    )?;
    Ok(EventBatch {
        events,
        cursor,
        lost,
        now_ns,
    })
}

/// TRACE START or STOP; returns the cursor (START: the first record's).
pub(crate) fn trace_op(b: &dyn Backend, scope: TraceScope, start: bool) -> Result<u64> {
    let mut arg = bytes(&TraceArgs {
        op: if start { TRACE_OP_START } else { TRACE_OP_STOP },
        scope: scope.wire(),
        ..TraceArgs::default()
    });
    b.ioctl(
        if start { "TRACE START" } else { "TRACE STOP" },
        DRIVER_CMD_TRACE,
        &mut arg,
    )?;
    Ok(TraceArgs::decode(&arg).cursor)
}

/// TRACE READ from `cursor`: every record held from there.
pub(crate) fn trace_read(b: &dyn Backend, scope: TraceScope, cursor: u64) -> Result<TraceBatch> {
    let (records, cursor, lost, now_ns) = read_log(
        b,
        "TRACE READ",
        DRIVER_CMD_TRACE,
        TRACE_BATCH,
        cursor,
        |cursor| {
            bytes(&TraceArgs {
                op: TRACE_OP_READ,
                scope: scope.wire(),
                capacity: TRACE_BATCH,
                entry_size: TraceRecord::SIZE as u32,
                cursor,
                ..TraceArgs::default()
            })
        },
        |a| {
            let a = TraceArgs::decode(a);
            Answer {
                count: a.count,
                cursor: a.cursor,
                lost: a.lost,
                now_ns: a.now_ns,
            }
        },
    )?;
    Ok(TraceBatch {
        records,
        cursor,
        lost,
        now_ns,
    })
}

impl crate::Control {
    /// READ_EVENTS: the device's events from `cursor` (0: from the oldest held). An admin
    /// sees every event; anyone else the device's own and their user's clients'.
    ///
    /// # Errors
    /// `ENOTTY` from a driver without `Features::DEVICE_EVENTS`; `ENODEV` if the device went
    /// away.
    pub fn read_events(&self, cursor: u64) -> Result<EventBatch> {
        read_events(&*self.backend, cursor)
    }

    /// TRACE START for the whole device (every client's streams): admin only. Returns the
    /// cursor of the first record.
    ///
    /// # Errors
    /// `EPERM` for a non-admin; `ENOTTY` from a driver without `Features::TRACE`.
    pub fn trace_start(&self) -> Result<u64> {
        trace_op(&*self.backend, TraceScope::Device, true)
    }

    /// TRACE STOP of this open's device trace (the records stay readable).
    ///
    /// # Errors
    /// As [`trace_start`](Self::trace_start).
    pub fn trace_stop(&self) -> Result<u64> {
        trace_op(&*self.backend, TraceScope::Device, false)
    }

    /// TRACE READ of the device trace from `cursor`.
    ///
    /// # Errors
    /// As [`trace_start`](Self::trace_start).
    pub fn trace_read(&self, cursor: u64) -> Result<TraceBatch> {
        trace_read(&*self.backend, TraceScope::Device, cursor)
    }
}

impl crate::Device {
    /// READ_EVENTS as this client sees them: the device's own events and its user's
    /// clients' (see [`Control::read_events`](crate::Control::read_events)).
    ///
    /// # Errors
    /// `ENOTTY` from a driver without `Features::DEVICE_EVENTS`.
    pub fn read_events(&self, cursor: u64) -> Result<EventBatch> {
        read_events(&*self.inner.backend, cursor)
    }

    /// TRACE START of this open's streams; returns the cursor of the first record. At most
    /// one open per tenant traces at a time (`EBUSY`), and the device has
    /// `DAVINCI_TRACE_BUFFERS_MAX` buffers (`ENOSPC`).
    ///
    /// # Errors
    /// As above; `ENOTTY` from a driver without `Features::TRACE`.
    pub fn trace_start(&self) -> Result<u64> {
        trace_op(&*self.inner.backend, TraceScope::Own, true)
    }

    /// TRACE STOP (the records stay readable until the open closes).
    ///
    /// # Errors
    /// `ENOTTY` from a driver without `Features::TRACE`.
    pub fn trace_stop(&self) -> Result<u64> {
        trace_op(&*self.inner.backend, TraceScope::Own, false)
    }

    /// TRACE READ of this open's trace from `cursor`.
    ///
    /// # Errors
    /// `ENOENT` if this open never started a trace.
    pub fn trace_read(&self, cursor: u64) -> Result<TraceBatch> {
        trace_read(&*self.inner.backend, TraceScope::Own, cursor)
    }
}
