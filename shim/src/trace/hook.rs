//! What a trace session collects while it runs, and the hooks the stream, event and pool code
//! call: each is one relaxed load of the open's flag while nobody traces. While a session
//! runs they record host spans (bounded), note which event and value each EVENT_RECORD and
//! EVENT_WAIT names (for the flow arrows), and read the device's trace buffer at every
//! synchronize and wait and every [`DRAIN_EVERY`] completions reaped, so that its 1,024
//! records do not overflow.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use davinci_uapi::{Opcode, TaskDesc, TraceRecord};

use crate::error::Result;
use crate::observe::{trace_read, TraceScope};
use crate::Device;

/// Host spans a session keeps; later ones are counted as dropped.
pub const HOST_SPANS_MAX: usize = 1 << 20;
/// Device records a session keeps; later ones are counted as dropped.
pub const DEVICE_RECORDS_MAX: usize = 1 << 20;
/// EVENT_RECORD and EVENT_WAIT tasks noted at submit (for the flow arrows).
pub(crate) const MARKS_MAX: usize = 1 << 20;
/// Clock samples kept for the consistency check (the best one is kept regardless).
const SAMPLES_MAX: usize = 1 << 16;
/// Completions reaped (over the open's streams) between two reads of the device's buffer,
/// a quarter of its `TRACE_RECORDS_MAX`.
pub const DRAIN_EVERY: u64 = 256;

/// `CLOCK_MONOTONIC` now, in ns: the host clock of every span (and of `std::time::Instant`
/// on Linux).
pub(crate) fn now_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| {
            u64::try_from(t.tv_sec())
                .unwrap_or(0)
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::try_from(t.tv_nsec()).unwrap_or(0))
        })
        .unwrap_or(0)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the state consistent (pushes and counters only).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

thread_local! {
    /// This thread's id (`gettid`), read once.
    static TID: u32 = u32::try_from(nix::unistd::gettid().as_raw()).unwrap_or(0);
}

/// What a host span was about (its `args` in the export).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detail {
    None,
    /// Tasks `first..first + count` (command-ring indices) of `stream`.
    Submit {
        stream: u32,
        first: u32,
        count: u32,
    },
    /// A wait for `stream`'s tasks before index `upto`.
    Stream {
        stream: u32,
        upto: u32,
    },
    /// A wait for `event` to reach `value`.
    Event {
        event: u32,
        value: u64,
    },
    /// A pool block of this many bytes.
    Bytes(u64),
    /// A read of the device's trace buffer that brought this many records.
    Read {
        records: u64,
    },
}

/// One host span: `name` on thread `tid`, host clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostSpan {
    pub(crate) name: &'static str,
    pub(crate) tid: u32,
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) detail: Detail,
}

/// An EVENT_RECORD (`record`) or EVENT_WAIT submitted: which event and value it names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    pub(crate) stream: u32,
    pub(crate) index: u32,
    pub(crate) record: bool,
    pub(crate) event: u32,
    pub(crate) value: u64,
}

/// One clock comparison: the host clock just before and just after a TRACE call, and the
/// device clock the call returned (read between the two).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) before: u64,
    pub(crate) after: u64,
    pub(crate) device: u64,
}

impl Sample {
    /// The offsets (host - device) this sample allows.
    pub(crate) fn range(&self) -> (i128, i128) {
        let d = i128::from(self.device);
        (i128::from(self.before) - d, i128::from(self.after) - d)
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) spans: Vec<HostSpan>,
    pub(crate) spans_dropped: u64,
    pub(crate) threads: BTreeMap<u32, String>,
    pub(crate) records: Vec<TraceRecord>,
    pub(crate) records_dropped: u64,
    pub(crate) lost: u64,
    pub(crate) marks: Vec<Mark>,
    pub(crate) marks_dropped: u64,
    /// The sample with the shortest round trip, and up to [`SAMPLES_MAX`] of all.
    pub(crate) best: Option<Sample>,
    pub(crate) samples: Vec<Sample>,
    pub(crate) read_errors: u64,
    pub(crate) last_read_error: Option<String>,
}

impl State {
    fn span(&mut self, s: HostSpan) {
        self.threads.entry(s.tid).or_insert_with(|| {
            std::thread::current()
                .name()
                .map_or_else(|| format!("thread {}", s.tid), str::to_string)
        });
        if self.spans.len() < HOST_SPANS_MAX {
            self.spans.push(s);
        } else {
            self.spans_dropped += 1;
        }
    }

    fn sample(&mut self, s: Sample) {
        if self
            .best
            .is_none_or(|b| s.after - s.before < b.after - b.before)
        {
            self.best = Some(s);
        }
        if self.samples.len() < SAMPLES_MAX {
            self.samples.push(s);
        }
    }
}

/// A session's collection, shared by the [`TraceSession`](super::TraceSession) and the hooks
/// (through the open's [`Hook`]).
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    /// The read cursor; held across a whole read so that records arrive in order.
    pub(crate) cursor: Mutex<u64>,
    /// Completions reaped since the last read.
    reaped: AtomicU64,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn span(&self, name: &'static str, start_ns: u64, end_ns: u64, detail: Detail) {
        // 0 in a thread-local destructor (a buffer dropped there), where TID is gone.
        let tid = TID.try_with(|t| *t).unwrap_or(0);
        self.lock().span(HostSpan {
            name,
            tid,
            start_ns,
            end_ns,
            detail,
        });
    }

    /// TRACE READ of everything new; one clock sample. Returns the records read.
    pub(crate) fn read(&self, dev: &Device) -> Result<u64> {
        self.read_from(&*dev.inner.backend, TraceScope::Own)
    }

    /// [`read`](Self::read) of the buffer of `scope` through `backend` (an admin's control
    /// open reads the device's).
    pub(crate) fn read_from(
        &self,
        backend: &dyn crate::backend::Backend,
        scope: TraceScope,
    ) -> Result<u64> {
        let mut cursor = lock(&self.cursor);
        let before = now_ns();
        let batch = trace_read(backend, scope, *cursor);
        let after = now_ns();
        let batch = batch?;
        *cursor = batch.cursor;
        let n = batch.records.len() as u64;
        let mut st = self.lock();
        st.lost += batch.lost;
        st.sample(Sample {
            before,
            after,
            device: batch.now_ns,
        });
        let room = DEVICE_RECORDS_MAX.saturating_sub(st.records.len());
        st.records_dropped += batch.records.len().saturating_sub(room) as u64;
        st.records.extend(batch.records.into_iter().take(room));
        Ok(n)
    }

    /// [`read`](Self::read) from a hook: shown as a host span of its own (its cost is part
    /// of the timeline); a failure is counted and kept for the export, not returned.
    fn read_logged(&self, dev: &Device) {
        self.reaped.store(0, Ordering::Relaxed);
        let start = now_ns();
        match self.read(dev) {
            Ok(records) => self.span("trace read", start, now_ns(), Detail::Read { records }),
            Err(e) => {
                let mut st = self.lock();
                st.read_errors += 1;
                st.last_read_error = Some(e.to_string());
            }
        }
    }
}

/// The open's trace slot (on `DeviceInner`): the flag every hook reads, and the session.
#[derive(Debug, Default)]
pub(crate) struct Hook {
    on: AtomicBool,
    slot: Mutex<Option<Arc<Shared>>>,
}

impl Hook {
    #[inline]
    fn get(&self) -> Option<Arc<Shared>> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        lock(&self.slot).clone()
    }

    /// Installs `s`; `false` if a session is already installed.
    pub(crate) fn attach(&self, s: &Arc<Shared>) -> bool {
        let mut slot = lock(&self.slot);
        if slot.is_some() {
            return false;
        }
        *slot = Some(s.clone());
        self.on.store(true, Ordering::Release);
        true
    }

    pub(crate) fn detach(&self) {
        let mut slot = lock(&self.slot);
        self.on.store(false, Ordering::Release);
        *slot = None;
    }
}

/// A host span being timed: recorded when dropped (a no-op while nobody traces).
#[must_use = "the span is recorded when this guard is dropped"]
pub(crate) struct Span {
    active: Option<Active>,
}

struct Active {
    dev: Device,
    shared: Arc<Shared>,
    name: &'static str,
    start: u64,
    detail: Detail,
    read_after: bool,
}

/// Starts timing `name` on this thread, if `dev` is being traced.
#[inline]
pub(crate) fn span(dev: &Device, name: &'static str) -> Span {
    Span {
        active: dev.inner.trace.get().map(|shared| Active {
            dev: dev.clone(),
            shared,
            name,
            start: now_ns(),
            detail: Detail::None,
            read_after: false,
        }),
    }
}

impl Span {
    /// With what the span is about.
    #[inline]
    pub(crate) fn with(mut self, detail: Detail) -> Self {
        if let Some(a) = &mut self.active {
            a.detail = detail;
        }
        self
    }

    /// Reads the device's trace buffer when the span ends (a synchronize or a wait: the
    /// tasks it waited for have their records by then).
    #[inline]
    pub(crate) fn read_after(mut self) -> Self {
        if let Some(a) = &mut self.active {
            a.read_after = true;
        }
        self
    }

    /// A submit span (from [`submit`]): the ring's tail is `tail` now, and `descs` are the
    /// descriptors submitted, in order (their EVENT_RECORDs and EVENT_WAITs are noted for the
    /// flow arrows).
    #[inline]
    pub(crate) fn pushed<'d>(&mut self, tail: u32, descs: impl Iterator<Item = &'d TaskDesc>) {
        let Some(a) = &mut self.active else {
            return;
        };
        let Detail::Submit { stream, first, .. } = a.detail else {
            return;
        };
        let count = tail.wrapping_sub(first);
        a.detail = Detail::Submit {
            stream,
            first,
            count,
        };
        let (record, wait) = (Opcode::EventRecord as u8, Opcode::EventWait as u8);
        let mut marks = Vec::new();
        for (i, d) in descs.take(count as usize).enumerate() {
            if d.opcode == record || d.opcode == wait {
                marks.push(Mark {
                    stream,
                    index: first.wrapping_add(i as u32),
                    record: d.opcode == record,
                    event: d.handle,
                    value: d.imm,
                });
            }
        }
        if !marks.is_empty() {
            let mut st = a.shared.lock();
            let room = MARKS_MAX.saturating_sub(st.marks.len());
            st.marks_dropped += marks.len().saturating_sub(room) as u64;
            st.marks.extend(marks.into_iter().take(room));
        }
    }
}

/// A submit on `stream` whose first task goes at command-ring index `first`; then
/// [`Span::pushed`].
#[inline]
pub(crate) fn submit(dev: &Device, stream: u32, first: u32) -> Span {
    let detail = Detail::Submit {
        stream,
        first,
        count: 0,
    };
    span(dev, "submit").with(detail)
}

/// A wait for `stream`'s tasks before index `upto`; reads the device's buffer when it ends.
#[inline]
pub(crate) fn synchronize(dev: &Device, stream: u32, upto: u32) -> Span {
    let detail = Detail::Stream { stream, upto };
    span(dev, "synchronize").with(detail).read_after()
}

/// A host wait for `event` to reach `value`; reads the device's buffer when it ends.
#[inline]
pub(crate) fn wait_event(dev: &Device, event: u32, value: u64) -> Span {
    let detail = Detail::Event { event, value };
    span(dev, "wait event").with(detail).read_after()
}

/// A pool's `name` ("pool alloc", "pool free") of `bytes`.
#[inline]
pub(crate) fn pool(dev: &Device, name: &'static str, bytes: usize) -> Span {
    span(dev, name).with(Detail::Bytes(bytes as u64))
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some(a) = self.active.take() {
            a.shared.span(a.name, a.start, now_ns(), a.detail);
            if a.read_after {
                a.shared.read_logged(&a.dev);
            }
        }
    }
}

/// `n` completions were taken off an event ring of `dev`: every [`DRAIN_EVERY`] of them
/// (over the open's streams) the device's trace buffer is read.
#[inline]
pub(crate) fn reaped(dev: &Device, n: usize) {
    if n == 0 || !dev.inner.trace.on.load(Ordering::Relaxed) {
        return;
    }
    if let Some(s) = dev.inner.trace.get() {
        let n = n as u64;
        if s.reaped.fetch_add(n, Ordering::Relaxed) + n >= DRAIN_EVERY {
            s.read_logged(dev);
        }
    }
}
