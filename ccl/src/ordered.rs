//! Stream-ordered calls (NCCL's model: enqueue and return). [`Comm::into_stream_ordered`]
//! gives the communicator to a proxy thread; each call records an event on the caller's
//! stream (its inputs are ready there), makes the stream wait on the device for a second
//! event's next value (its result is ready), queues the call and returns. The proxy waits on
//! the host for the first record, runs the call (blocking, as [`Comm`]'s are), and records
//! the second event's value from a stream of its own, which lets the caller's stream go on.
//! A call that fails still records it (the caller's stream never hangs on it): its error is
//! kept and returned by the next call and by [`StreamComm::synchronize`] (NCCL's
//! asynchronous error).

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use davinci_shim::{Context, Errno, Error, Event, HostMapping, Recorded, Result, Stream};

use crate::comm::{need, Bytes, Comm, DEFAULT_TIMEOUT};
use crate::reduce::{DataType, RedOp};

/// Calls queued to the proxy at most; one more waits (up to the communicator's timeout) for
/// the oldest to finish.
pub const MAX_QUEUED: usize = 64;

#[derive(Debug, Clone, Copy)]
enum Kind {
    AllReduce(DataType, RedOp),
    AllGather(DataType),
    ReduceScatter(DataType, RedOp),
    Broadcast(DataType, usize),
    Reduce(DataType, RedOp, usize),
    Send(DataType, usize),
    Recv(DataType, usize),
}

struct Job {
    kind: Kind,
    send: Option<View>,
    recv: Option<View>,
    count: usize,
    /// The caller's stream reached the call here.
    ready: Recorded,
    /// The value of the done event this call's end records.
    value: u64,
}

/// A host view lent to the proxy: its bytes, through the view's mapping.
struct View(HostMapping);

impl Bytes for View {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.0.read(offset, out)
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.0.write(offset, data)
    }
    fn host_view(&self) -> Option<HostMapping> {
        Some(self.0.clone())
    }
}

#[derive(Default)]
struct State {
    /// The last done value recorded.
    done: u64,
    /// The first failed call's error (kept: every later call returns it).
    error: Option<Error>,
    /// The proxy ended (its thread returned).
    gone: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// A communicator whose calls are stream-ordered (made by [`Comm::into_stream_ordered`]):
/// each returns once queued, and the caller's stream runs the call in its place: tasks
/// submitted before it are its inputs, tasks submitted after it see its result. Buffers
/// must have host views (allocations, pool blocks, imports); they are held until the call
/// ran. Streams must be of the context given at creation.
pub struct StreamComm {
    tx: Option<SyncSender<Job>>,
    proxy: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    ready: Event,
    done: Arc<Event>,
    next: u64,
    rank: usize,
    nranks: usize,
}

impl std::fmt::Debug for StreamComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamComm")
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .field("queued", &self.next)
            .finish()
    }
}

impl Comm {
    /// This communicator, stream-ordered: its calls enqueue and return (`ncclAllReduce` on a
    /// stream). `ctx` is the context of the streams the calls are given (on the rank's
    /// device); a stream and two events of it are the proxy's.
    ///
    /// # Errors
    /// The device's (creating the stream and the events); `EAGAIN` no thread could start.
    pub fn into_stream_ordered(self, ctx: &Context) -> Result<StreamComm> {
        let (rank, nranks) = (self.rank(), self.nranks());
        let mut stream = ctx.create_stream()?;
        let ready = ctx.create_event()?;
        let done = Arc::new(ctx.create_event()?);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let (tx, rx) = sync_channel::<Job>(MAX_QUEUED);
        let (s2, d2) = (shared.clone(), done.clone());
        let proxy = std::thread::Builder::new()
            .name(format!("ccl-proxy-{rank}"))
            .spawn(move || proxy(self, &mut stream, &d2, &s2, rx))
            .map_err(|e| {
                Error::new(
                    Errno::EAGAIN,
                    "ccl into_stream_ordered",
                    format!("cannot start the proxy thread: {e}"),
                )
            })?;
        Ok(StreamComm {
            tx: Some(tx),
            proxy: Some(proxy),
            shared,
            ready,
            done,
            next: 0,
            rank,
            nranks,
        })
    }
}

/// The proxy: each call once its inputs are ready, then its done value, in order.
fn proxy(mut comm: Comm, stream: &mut Stream, done: &Event, shared: &Shared, rx: Receiver<Job>) {
    for job in rx {
        let failed = shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .error
            .is_some();
        // After a failure the communicator's ranks no longer agree: later calls are skipped
        // (their streams still go on), the first error stands.
        let r = if failed {
            Ok(())
        } else {
            job.ready
                .synchronize(DEFAULT_TIMEOUT)
                .and_then(|()| run(&mut comm, stream, &job))
        };
        let recorded = done.record(stream).map(|rec| rec.value());
        if failed {
            // A skipped call did not synchronize the proxy's stream: reap its records here.
            let _ = stream.synchronize(DEFAULT_TIMEOUT);
        }
        let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = r {
            st.error.get_or_insert(e);
        }
        match recorded {
            Ok(v) if v == job.value => {}
            Ok(v) => {
                st.error.get_or_insert(Error::new(
                    Errno::EIO,
                    "ccl stream-ordered",
                    format!(
                        "the done event recorded {v}, the call expected {}",
                        job.value
                    ),
                ));
            }
            Err(e) => {
                st.error.get_or_insert(e);
            }
        }
        st.done = job.value;
        shared.changed.notify_all();
    }
    let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    st.gone = true;
    shared.changed.notify_all();
}

fn run(comm: &mut Comm, stream: &mut Stream, job: &Job) -> Result<()> {
    let none = || Error::new(Errno::EINVAL, "ccl stream-ordered", "a buffer is missing");
    let s = job.send.as_ref().map(|v| v as &dyn Bytes);
    let r = job.recv.as_ref().map(|v| v as &dyn Bytes);
    let c = job.count;
    match job.kind {
        Kind::AllReduce(ty, op) => {
            comm.all_reduce(s.ok_or_else(none)?, r.ok_or_else(none)?, c, ty, op, stream)
        }
        Kind::AllGather(ty) => {
            comm.all_gather(s.ok_or_else(none)?, r.ok_or_else(none)?, c, ty, stream)
        }
        Kind::ReduceScatter(ty, op) => {
            comm.reduce_scatter(s.ok_or_else(none)?, r.ok_or_else(none)?, c, ty, op, stream)
        }
        Kind::Broadcast(ty, root) => comm.broadcast(
            s.ok_or_else(none)?,
            r.ok_or_else(none)?,
            c,
            ty,
            root,
            stream,
        ),
        Kind::Reduce(ty, op, root) => comm.reduce(
            s.ok_or_else(none)?,
            r.ok_or_else(none)?,
            c,
            ty,
            op,
            root,
            stream,
        ),
        Kind::Send(ty, peer) => comm.send(s.ok_or_else(none)?, c, ty, peer, stream),
        Kind::Recv(ty, peer) => comm.recv(r.ok_or_else(none)?, c, ty, peer, stream),
    }
}

fn view(op: &'static str, what: &str, b: &dyn Bytes) -> Result<View> {
    b.host_view().map(View).ok_or_else(|| {
        Error::new(
            Errno::EINVAL,
            op,
            format!("{what}: a stream-ordered call needs device memory with a host view"),
        )
    })
}

fn checked(op: &'static str, count: usize, by: usize) -> Result<usize> {
    count.checked_mul(by).ok_or_else(|| {
        Error::new(
            Errno::EINVAL,
            op,
            format!("{count} x {by} elements overflow"),
        )
    })
}

impl StreamComm {
    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the communicator.
    pub fn nranks(&self) -> usize {
        self.nranks
    }

    fn sticky(&self) -> Result<()> {
        let st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        match &st.error {
            Some(e) => Err(e.clone()),
            None if st.gone => Err(Error::new(
                Errno::EIO,
                "ccl stream-ordered",
                "the proxy thread ended",
            )),
            None => Ok(()),
        }
    }

    fn enqueue(
        &mut self,
        kind: Kind,
        send: Option<View>,
        recv: Option<View>,
        count: usize,
        stream: &mut Stream,
    ) -> Result<()> {
        self.sticky()?;
        let ready = self.ready.record(stream)?;
        let value = self.next + 1;
        stream.wait_value(&self.done, value)?;
        let job = Job {
            kind,
            send,
            recv,
            count,
            ready,
            value,
        };
        let tx = self.tx.as_ref().ok_or_else(|| {
            Error::new(Errno::EIO, "ccl stream-ordered", "the proxy thread ended")
        })?;
        tx.send(job)
            .map_err(|_| Error::new(Errno::EIO, "ccl stream-ordered", "the proxy thread ended"))?;
        self.next = value;
        Ok(())
    }

    /// All-reduce on `stream` (as [`Comm::all_reduce`], stream-ordered).
    ///
    /// # Errors
    /// `EINVAL` a buffer without a host view or shorter than `count` elements; an earlier
    /// call's error; the stream's.
    pub fn all_reduce(
        &mut self,
        send: &dyn Bytes,
        recv: &dyn Bytes,
        count: usize,
        ty: DataType,
        op: RedOp,
        stream: &mut Stream,
    ) -> Result<()> {
        const OP: &str = "ccl all_reduce";
        need(OP, "send", count, ty, send.len())?;
        need(OP, "recv", count, ty, recv.len())?;
        let (s, r) = (view(OP, "send", send)?, view(OP, "recv", recv)?);
        self.enqueue(Kind::AllReduce(ty, op), Some(s), Some(r), count, stream)
    }

    /// All-gather on `stream` (as [`Comm::all_gather`], stream-ordered).
    ///
    /// # Errors
    /// As [`all_reduce`](Self::all_reduce).
    pub fn all_gather(
        &mut self,
        send: &dyn Bytes,
        recv: &dyn Bytes,
        count: usize,
        ty: DataType,
        stream: &mut Stream,
    ) -> Result<()> {
        const OP: &str = "ccl all_gather";
        need(OP, "send", count, ty, send.len())?;
        need(OP, "recv", checked(OP, count, self.nranks)?, ty, recv.len())?;
        let (s, r) = (view(OP, "send", send)?, view(OP, "recv", recv)?);
        self.enqueue(Kind::AllGather(ty), Some(s), Some(r), count, stream)
    }

    /// Reduce-scatter on `stream` (as [`Comm::reduce_scatter`], stream-ordered).
    ///
    /// # Errors
    /// As [`all_reduce`](Self::all_reduce).
    pub fn reduce_scatter(
        &mut self,
        send: &dyn Bytes,
        recv: &dyn Bytes,
        count: usize,
        ty: DataType,
        op: RedOp,
        stream: &mut Stream,
    ) -> Result<()> {
        const OP: &str = "ccl reduce_scatter";
        need(OP, "send", checked(OP, count, self.nranks)?, ty, send.len())?;
        need(OP, "recv", count, ty, recv.len())?;
        let (s, r) = (view(OP, "send", send)?, view(OP, "recv", recv)?);
        self.enqueue(Kind::ReduceScatter(ty, op), Some(s), Some(r), count, stream)
    }

    /// Broadcast on `stream` (as [`Comm::broadcast`], stream-ordered).
    ///
    /// # Errors
    /// As [`all_reduce`](Self::all_reduce); `EINVAL` a root out of range.
    pub fn broadcast(
        &mut self,
        send: &dyn Bytes,
        recv: &dyn Bytes,
        count: usize,
        ty: DataType,
        root: usize,
        stream: &mut Stream,
    ) -> Result<()> {
        const OP: &str = "ccl broadcast";
        self.check_rank(OP, "root", root)?;
        need(OP, "recv", count, ty, recv.len())?;
        let (s, r) = (view(OP, "send", send)?, view(OP, "recv", recv)?);
        self.enqueue(Kind::Broadcast(ty, root), Some(s), Some(r), count, stream)
    }

    /// Reduce on `stream` (as [`Comm::reduce`], stream-ordered).
    ///
    /// # Errors
    /// As [`broadcast`](Self::broadcast).
    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &mut self,
        send: &dyn Bytes,
        recv: &dyn Bytes,
        count: usize,
        ty: DataType,
        op: RedOp,
        root: usize,
        stream: &mut Stream,
    ) -> Result<()> {
        const OP: &str = "ccl reduce";
        self.check_rank(OP, "root", root)?;
        need(OP, "send", count, ty, send.len())?;
        let (s, r) = (view(OP, "send", send)?, view(OP, "recv", recv)?);
        self.enqueue(Kind::Reduce(ty, op, root), Some(s), Some(r), count, stream)
    }

    /// Send on `stream` (as [`Comm::send`], stream-ordered: the stream goes on once the
    /// peer received).
    ///
    /// # Errors
    /// As [`all_reduce`](Self::all_reduce); `EINVAL` a peer out of range.
    pub fn send(
        &mut self,
        buf: &dyn Bytes,
        count: usize,
        ty: DataType,
        peer: usize,
        stream: &mut Stream,
    ) -> Result<()> {
        const OP: &str = "ccl send";
        self.check_rank(OP, "peer", peer)?;
        need(OP, "buffer", count, ty, buf.len())?;
        let b = view(OP, "buffer", buf)?;
        self.enqueue(Kind::Send(ty, peer), Some(b), None, count, stream)
    }

    /// Receive on `stream` (as [`Comm::recv`], stream-ordered).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn recv(
        &mut self,
        buf: &dyn Bytes,
        count: usize,
        ty: DataType,
        peer: usize,
        stream: &mut Stream,
    ) -> Result<()> {
        const OP: &str = "ccl recv";
        self.check_rank(OP, "peer", peer)?;
        need(OP, "buffer", count, ty, buf.len())?;
        let b = view(OP, "buffer", buf)?;
        self.enqueue(Kind::Recv(ty, peer), None, Some(b), count, stream)
    }

    fn check_rank(&self, op: &'static str, what: &str, r: usize) -> Result<()> {
        if r >= self.nranks {
            return Err(Error::new(
                Errno::EINVAL,
                op,
                format!("{what} {r} of a {}-rank communicator", self.nranks),
            ));
        }
        Ok(())
    }

    /// Waits until every call queued so far ran (at most `timeout`), and returns the first
    /// failed call's error, if one failed (`ncclCommGetAsyncError`).
    ///
    /// # Errors
    /// `ETIMEDOUT` calls still running after `timeout`; a failed call's error.
    pub fn synchronize(&self, timeout: Duration) -> Result<()> {
        let end = Instant::now() + timeout;
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.done < self.next && !st.gone {
            let now = Instant::now();
            if now >= end {
                return Err(Error::new(
                    Errno::ETIMEDOUT,
                    "ccl StreamComm::synchronize",
                    format!(
                        "{} of {} queued calls ran within {timeout:?}",
                        st.done, self.next
                    ),
                ));
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, end - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(st);
        self.sticky()
    }
}

impl Drop for StreamComm {
    fn drop(&mut self) {
        // The queued calls run first (their streams wait for them), then the proxy ends.
        self.tx.take();
        if let Some(p) = self.proxy.take() {
            let _ = p.join();
        }
    }
}
