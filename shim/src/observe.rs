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

/// READ_EVENTS from `cursor`: every event held from there, in batches.
pub(crate) fn read_events(b: &dyn Backend, mut cursor: u64) -> Result<EventBatch> {
    const OP: &str = "READ_EVENTS";
    let mut out = EventBatch {
        cursor,
        ..EventBatch::default()
    };
    let mut buf = vec![0u8; EVENT_BATCH as usize * DeviceEvent::SIZE];
    // Bounded: the log holds DEVICE_EVENTS_MAX events; a few more rounds for ones logged
    // while reading.
    for _ in 0..16 {
        let mut arg = bytes(&ReadEventsArgs {
            capacity: EVENT_BATCH,
            entry_size: DeviceEvent::SIZE as u32,
            cursor,
            ..ReadEventsArgs::default()
        });
        b.ioctl_into(OP, DRIVER_CMD_READ_EVENTS, &mut arg, &mut buf)?;
        let a = ReadEventsArgs::decode(&arg);
        let n = a.count.min(EVENT_BATCH) as usize;
        out.events.extend(
            buf.chunks_exact(DeviceEvent::SIZE)
                .take(n)
                .map(DeviceEvent::decode),
        );
        out.lost += a.lost;
        out.now_ns = a.now_ns;
        if a.cursor < cursor {
            return Err(Error::new(
                Errno::EPROTO,
                OP,
                "the driver moved the cursor back",
            ));
        }
        let more = a.count == EVENT_BATCH && a.cursor > cursor;
        cursor = a.cursor;
        out.cursor = cursor;
        if !more {
            break;
        }
    }
    Ok(out)
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
pub(crate) fn trace_read(
    b: &dyn Backend,
    scope: TraceScope,
    mut cursor: u64,
) -> Result<TraceBatch> {
    const OP: &str = "TRACE READ";
    let mut out = TraceBatch {
        cursor,
        ..TraceBatch::default()
    };
    let mut buf = vec![0u8; TRACE_BATCH as usize * TraceRecord::SIZE];
    for _ in 0..16 {
        let mut arg = bytes(&TraceArgs {
            op: TRACE_OP_READ,
            scope: scope.wire(),
            capacity: TRACE_BATCH,
            entry_size: TraceRecord::SIZE as u32,
            cursor,
            ..TraceArgs::default()
        });
        b.ioctl_into(OP, DRIVER_CMD_TRACE, &mut arg, &mut buf)?;
        let a = TraceArgs::decode(&arg);
        let n = a.count.min(TRACE_BATCH) as usize;
        out.records.extend(
            buf.chunks_exact(TraceRecord::SIZE)
                .take(n)
                .map(TraceRecord::decode),
        );
        out.lost += a.lost;
        out.now_ns = a.now_ns;
        if a.cursor < cursor {
            return Err(Error::new(
                Errno::EPROTO,
                OP,
                "the driver moved the cursor back",
            ));
        }
        let more = a.count == TRACE_BATCH && a.cursor > cursor;
        cursor = a.cursor;
        out.cursor = cursor;
        if !more {
            break;
        }
    }
    Ok(out)
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
