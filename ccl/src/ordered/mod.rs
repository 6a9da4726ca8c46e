//! Stream-ordered calls (NCCL's model: enqueue and return). [`Comm::into_stream_ordered`]
//! gives the communicator to a proxy thread; each call records an event on the caller's
//! stream (its inputs are ready there), makes the stream wait on the device for a second
//! event's next value (its result is ready), queues the call and returns. The proxy waits on
//! the host for the first record, runs the call (blocking, as [`Comm`]'s are), and records
//! the second event's value from a stream of its own, which lets the caller's stream go on.
//! A call that fails still records it (the caller's stream never hangs on it): its error is
//! kept and returned by the next call and by [`StreamComm::synchronize`] (NCCL's
//! asynchronous error).

use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use davinci_shim::{Context, Errno, Error, Event, Recorded, Result, Stream};

mod proxy;

use proxy::{proxy, View};

use crate::comm::{need, Bytes, Comm};
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
    /// The job's `group`.
    Group,
}

/// One send or receive of a stream-ordered group.
struct P2p {
    send: bool,
    buf: View,
    count: usize,
    ty: DataType,
    peer: usize,
}

struct Job {
    kind: Kind,
    group: Vec<P2p>,
    send: Option<View>,
    recv: Option<View>,
    count: usize,
    /// The caller's stream reached the call here.
    ready: Recorded,
    /// The value of the done event this call's end records.
    value: u64,
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

    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &mut self,
        kind: Kind,
        group: Vec<P2p>,
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
            group,
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
        self.enqueue(
            Kind::AllReduce(ty, op),
            Vec::new(),
            Some(s),
            Some(r),
            count,
            stream,
        )
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
        self.enqueue(
            Kind::AllGather(ty),
            Vec::new(),
            Some(s),
            Some(r),
            count,
            stream,
        )
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
        self.enqueue(
            Kind::ReduceScatter(ty, op),
            Vec::new(),
            Some(s),
            Some(r),
            count,
            stream,
        )
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
        self.enqueue(
            Kind::Broadcast(ty, root),
            Vec::new(),
            Some(s),
            Some(r),
            count,
            stream,
        )
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
        self.enqueue(
            Kind::Reduce(ty, op, root),
            Vec::new(),
            Some(s),
            Some(r),
            count,
            stream,
        )
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
        self.enqueue(
            Kind::Send(ty, peer),
            Vec::new(),
            Some(b),
            None,
            count,
            stream,
        )
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
        self.enqueue(
            Kind::Recv(ty, peer),
            Vec::new(),
            None,
            Some(b),
            count,
            stream,
        )
    }

    /// A group of sends and receives on `stream` (as [`Comm::group`], stream-ordered: they
    /// all make progress together once the stream reaches them, and the stream goes on
    /// when every one is complete). `ops` adds them: `(buffer, count, type, peer, send)`,
    /// `send` true for a send, false for a receive.
    ///
    /// # Errors
    /// As [`send`](Self::send), for each; `E2BIG` more than
    /// [`MAX_GROUP_OPS`](crate::MAX_GROUP_OPS).
    pub fn group(
        &mut self,
        ops: &[(&dyn Bytes, usize, DataType, usize, bool)],
        stream: &mut Stream,
    ) -> Result<()> {
        const OP: &str = "ccl group";
        if ops.len() > crate::MAX_GROUP_OPS {
            return Err(Error::new(
                Errno::E2BIG,
                OP,
                format!("a group holds at most {} operations", crate::MAX_GROUP_OPS),
            ));
        }
        let mut group = Vec::with_capacity(ops.len());
        for &(buf, count, ty, peer, send) in ops {
            self.check_rank(OP, "peer", peer)?;
            need(OP, "buffer", count, ty, buf.len())?;
            group.push(P2p {
                send,
                buf: view(OP, "buffer", buf)?,
                count,
                ty,
                peer,
            });
        }
        self.enqueue(Kind::Group, group, None, None, 0, stream)
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
