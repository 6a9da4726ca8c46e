// SPDX-License-Identifier: GPL-2.0

//! TRACE's READ and READ_EVENTS on a PCI device (ABI 1.5): the device writes the records into
//! BAR2's list area (as it writes LIST_CLIENTS' entries), this side copies them to the
//! caller's buffer at the caller's stride, zero-padded, with the device's mutex released. A
//! trace buffer's 1,024 records are more than the list area holds at once, so a read the
//! area cannot hold whole is asked again from the cursor the device returned, in at most
//! [`ROUNDS`] rounds, until the caller's capacity is filled or the device has no more: the
//! caller sees one read (its `count`, the `lost` of every round, the last `cursor` and
//! `now_ns`). The arguments are checked here as driver-core checks them, and the device's
//! count bounds nothing: at most what was asked of it is read and copied.

use kernel::ffi::c_long;
use kernel::prelude::*;
use kernel::uaccess::UserSlice;

use super::fops::{entry_size_ok, failed, PciOpen};
use crate::davinci_hwif::layout::{LIST_BUF, LIST_ENTRIES, LIST_ENTRY_SIZE};
use crate::davinci_hwif::{AdminOp, ArgBuf, ReplyKind};
use crate::davinci_uapi::{
    DeviceEvent, Errno, ReadEventsArgs, TraceArgs, TraceRecord, Wire, DEVICE_EVENTS_MAX,
    DRIVER_CMD_READ_EVENTS, DRIVER_CMD_TRACE, TRACE_OP_READ, TRACE_RECORDS_MAX,
};
use crate::device::errno;

/// Most rounds one read takes: a trace buffer's records in list areas, and one more for
/// records written meanwhile.
const ROUNDS: usize = 4;

/// Bytes of BAR2's list area the device may write (every LIST_CLIENTS entry).
const AREA: usize = (LIST_ENTRIES * LIST_ENTRY_SIZE) as usize;

// A round holds at least a quarter of a trace buffer and the whole event log, so `ROUNDS`
// rounds read a whole trace buffer.
const _: () = {
    assert!(AREA / TraceRecord::SIZE * (ROUNDS - 1) >= TRACE_RECORDS_MAX as usize);
    assert!(AREA / DeviceEvent::SIZE >= DEVICE_EVENTS_MAX as usize);
};

/// The argument of one of the two reads.
#[derive(Clone, Copy)]
enum Read {
    Trace(TraceArgs),
    Events(ReadEventsArgs),
}

/// What the two reads' arguments share.
#[derive(Clone, Copy)]
struct Fields {
    buf: u64,
    capacity: u32,
    count: u32,
    entry_size: u32,
    cursor: u64,
    lost: u64,
    now_ns: u64,
}

macro_rules! fields_of {
    ($a:expr) => {
        Fields {
            buf: $a.buf,
            capacity: $a.capacity,
            count: $a.count,
            entry_size: $a.entry_size,
            cursor: $a.cursor,
            lost: $a.lost,
            now_ns: $a.now_ns,
        }
    };
}

impl Read {
    /// The read `cmd` with argument `a` asks for, if it writes entries: a TRACE `READ` or a
    /// READ_EVENTS with a buffer, a capacity and an entry size driver-core accepts. Anything
    /// else goes to the device as it is (which refuses it, or writes nothing).
    fn of(cmd: u32, a: &[u8]) -> Option<Read> {
        let r = match cmd {
            DRIVER_CMD_TRACE => {
                Read::Trace(TraceArgs::from_bytes(a).filter(|t| t.op == TRACE_OP_READ)?)
            }
            DRIVER_CMD_READ_EVENTS => Read::Events(ReadEventsArgs::from_bytes(a)?),
            _ => return None,
        };
        let f = r.fields();
        (f.buf != 0 && f.capacity != 0 && entry_size_ok(f.entry_size)).then_some(r)
    }

    fn fields(&self) -> Fields {
        match self {
            Read::Trace(t) => fields_of!(t),
            Read::Events(e) => fields_of!(e),
        }
    }

    /// This read with `f`'s fields in place of its own.
    fn with(self, f: Fields) -> Read {
        let Fields {
            buf,
            capacity,
            count,
            entry_size,
            cursor,
            lost,
            now_ns,
        } = f;
        match self {
            Read::Trace(t) => Read::Trace(TraceArgs {
                buf,
                capacity,
                count,
                entry_size,
                cursor,
                lost,
                now_ns,
                ..t
            }),
            Read::Events(e) => Read::Events(ReadEventsArgs {
                buf,
                capacity,
                count,
                entry_size,
                cursor,
                lost,
                now_ns,
                ..e
            }),
        }
    }

    /// The size of one of its entries as this driver writes them.
    fn record_size(&self) -> usize {
        match self {
            Read::Trace(_) => TraceRecord::SIZE,
            Read::Events(_) => DeviceEvent::SIZE,
        }
    }

    fn encode(&self, out: &mut ArgBuf) {
        match self {
            Read::Trace(t) => t.encode(out.as_mut_slice()),
            Read::Events(e) => e.encode(out.as_mut_slice()),
        }
    }

    fn decode(&self, a: &ArgBuf) -> Option<Read> {
        match self {
            Read::Trace(_) => TraceArgs::from_bytes(a.as_slice()).map(Read::Trace),
            Read::Events(_) => ReadEventsArgs::from_bytes(a.as_slice()).map(Read::Events),
        }
    }
}

/// TRACE (its READ) and READ_EVENTS: `Some(result)` when this path served the call, `None`
/// when it is not a read of entries (the caller forwards it as any other ioctl).
pub(super) fn read_entries(
    o: &PciOpen,
    cmd: u32,
    a: ArgBuf,
    copy_back: &dyn Fn(&ArgBuf) -> c_long,
) -> Option<c_long> {
    let asked = Read::of(cmd, a.as_slice())?;
    Some(serve(o, cmd, a, asked, copy_back))
}

fn serve(
    o: &PciOpen,
    cmd: u32,
    a: ArgBuf,
    asked: Read,
    copy_back: &dyn Fn(&ArgBuf) -> c_long,
) -> c_long {
    let fail = |e: Errno| errno(e) as c_long;
    let Fields {
        buf,
        capacity,
        entry_size: stride,
        mut cursor,
        ..
    } = asked.fields();
    // The caller's whole buffer must be addressable (as the software device checks it).
    if buf
        .checked_add(u64::from(capacity) * u64::from(stride))
        .is_none()
    {
        return fail(Errno::EFAULT);
    }
    let have = (stride as usize).min(asked.record_size());
    let per_round = (AREA / have) as u32;
    let (mut count, mut lost, mut now_ns) = (0u32, 0u64, 0u64);
    let mut last = a;
    for _ in 0..ROUNDS {
        let mut entries = KVVec::<u8>::new();
        let want = (capacity - count).min(per_round);
        let fwd = asked.with(Fields {
            buf: LIST_BUF,
            capacity: want,
            count: 0,
            entry_size: have as u32,
            cursor,
            lost: 0,
            now_ns: 0,
        });
        let mut fa = a;
        fwd.encode(&mut fa);
        let got = {
            let Ok(mut d) = o.dev.lock() else {
                return fail(Errno::EINTR);
            };
            let c = match d.call(
                o.client,
                AdminOp::Ioctl {
                    request: cmd,
                    arg: fa,
                },
            ) {
                Ok(c) => c,
                Err(e) => return fail(e),
            };
            if c.reply != ReplyKind::Done {
                // A refusal on the first round is the caller's; on a later one (the device
                // changed its mind) it is the caller's too: nothing more is copied.
                return fail(failed(&c));
            }
            let Some(got) = fwd.decode(&c.arg) else {
                return fail(d.violation("its read reply has another size"));
            };
            let n = got.fields().count;
            if n > want {
                return fail(d.violation("it read more entries than asked"));
            }
            let bytes = n as usize * have;
            if bytes > 0 {
                if entries.extend_with(bytes, 0, GFP_KERNEL).is_err() {
                    return fail(Errno::ENOMEM);
                }
                if d.read_list(&mut entries).is_err() {
                    return fail(Errno::ENODEV);
                }
            }
            last = c.arg;
            got
        };
        let Fields {
            count: n,
            cursor: next,
            lost: round_lost,
            now_ns: now,
            ..
        } = got.fields();
        for i in 0..n as usize {
            let at = buf + ((count as usize + i) * stride as usize) as u64;
            let Some(e) = entries.get(i * have..(i + 1) * have) else {
                return fail(Errno::EFAULT);
            };
            if write_padded(at, e, stride as usize).is_err() {
                return fail(Errno::EFAULT);
            }
        }
        // Process context, no lock held.
        crate::sys::cond_resched();
        count += n;
        lost = lost.saturating_add(round_lost);
        now_ns = now;
        cursor = next;
        if n < want || count == capacity {
            break;
        }
    }
    let reply = asked.with(Fields {
        buf,
        capacity,
        count,
        entry_size: stride,
        cursor,
        lost,
        now_ns,
    });
    reply.encode(&mut last);
    copy_back(&last)
}

/// Writes `entry` at user address `at` and zeroes after it up to `stride` bytes.
fn write_padded(at: u64, entry: &[u8], stride: usize) -> Result {
    static ZEROS: [u8; 256] = [0; 256];
    let mut w = UserSlice::new(at as usize, stride).writer();
    w.write_slice(entry)?;
    let mut left = stride - entry.len();
    while left > 0 {
        let k = left.min(ZEROS.len());
        w.write_slice(&ZEROS[..k])?;
        left -= k;
    }
    Ok(())
}
