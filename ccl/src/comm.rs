//! A communicator and its collectives. Data moves through the host. Ranks all in one
//! process take the direct path (`direct.rs`: each rank reads the others' buffers and
//! writes their results itself). Otherwise (the staged path, here): each rank copies its
//! part of a chunk from its device buffer's host view into its slot of the shared segment;
//! after a barrier each rank reduces its 1/n of the chunk reading every slot, in rank order
//! (so every rank gets the same bits), and writes it back into its own slot; after another
//! barrier every rank copies the reduced chunk out into its device buffer. Messages up to
//! [`ONE_SHOT_BYTES`] take the latency path instead: one write, one barrier, every rank
//! reduces the whole message itself. docs/architecture.md ("Collectives") says why the host
//! and not a device-side peer copy.

use std::sync::Arc;
use std::time::Duration;

use davinci_shim::{DeviceMem, Errno, Error, HostMapping, Result, Stream};

use crate::direct::Peers;

use crate::reduce::{reduce_into, DataType, RedOp};
use crate::segment::Segment;
use crate::UniqueId;

/// Device memory a collective reads or writes: any [`DeviceMem`] (allocations, pool blocks,
/// imports), or another type that copies bytes in and out (a binding's buffer).
pub trait Bytes {
    /// Its length in bytes.
    fn len(&self) -> usize;
    /// Whether it has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `out.len()` bytes at `offset` into `out`.
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()>;
    /// Copies `data` to `offset`.
    fn write(&self, offset: usize, data: &[u8]) -> Result<()>;
    /// Its host view in this process, if it has one: ranks of one process then move data
    /// between their buffers directly, and other ranks copy memory to segment without a
    /// bounce buffer.
    fn host_view(&self) -> Option<HostMapping> {
        None
    }
}

impl<T: DeviceMem> Bytes for T {
    fn len(&self) -> usize {
        DeviceMem::len(self)
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        DeviceMem::read(self, offset, out)
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        DeviceMem::write(self, offset, data)
    }
    fn host_view(&self) -> Option<HostMapping> {
        Some(self.host_mapping())
    }
}

/// Bytes of each rank's staging slot (one chunk of a message at a time).
pub const SLOT_BYTES: usize = 4 << 20;
/// Largest all-reduce that takes the one-shot path (every rank reduces the whole message).
pub const ONE_SHOT_BYTES: usize = 64 << 10;
/// How long a rank waits for the others at a barrier by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// One rank's end of a communicator: `nranks` ranks, in one process or several, each with
/// its own device (or the same one). Collectives are called by every rank with matching
/// arguments, in the same order. `Send`: a rank may move to another thread, and one thread
/// may drive several ranks only if the calls cannot block each other (use a thread per rank).
pub struct Comm {
    pub(crate) seg: Segment,
    pub(crate) rank: usize,
    pub(crate) nranks: usize,
    /// Staging on this side: one chunk, and one slot's segment to reduce with.
    pub(crate) buf: Vec<u8>,
    pub(crate) tmp: Vec<u8>,
    /// Every rank is in this process: the direct path (`direct.rs`).
    pub(crate) peers: Option<Arc<Peers>>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .finish()
    }
}

fn invalid(op: &'static str, msg: String) -> Error {
    Error::new(Errno::EINVAL, op, msg)
}

/// `count` elements of `ty` in bytes, checked against a buffer of `len` bytes.
pub(crate) fn need(
    op: &'static str,
    what: &str,
    count: usize,
    ty: DataType,
    len: usize,
) -> Result<usize> {
    let bytes = count
        .checked_mul(ty.size())
        .ok_or_else(|| invalid(op, format!("{count} elements overflow")))?;
    if bytes > len {
        return Err(invalid(
            op,
            format!(
                "{what}: {count} {} elements are {bytes} bytes, the buffer has {len}",
                ty.name()
            ),
        ));
    }
    Ok(bytes)
}

impl Comm {
    /// Joins communicator `id` as `rank` of `nranks` (`ncclCommInitRank`): every rank calls
    /// it, in its own process or thread, with the same id (made once by
    /// [`UniqueId::new`] and sent to the others) and `nranks`; it returns once all joined.
    ///
    /// # Errors
    /// `EINVAL` a rank out of range, or an id used with another `nranks`; `EBUSY` the rank
    /// joined already; `ETIMEDOUT` the others did not join within [`DEFAULT_TIMEOUT`].
    pub fn init_rank(id: &UniqueId, nranks: usize, rank: usize) -> Result<Comm> {
        Self::init_rank_timeout(id, nranks, rank, DEFAULT_TIMEOUT)
    }

    /// As [`init_rank`](Self::init_rank), waiting at most `timeout` at every barrier.
    pub fn init_rank_timeout(
        id: &UniqueId,
        nranks: usize,
        rank: usize,
        timeout: Duration,
    ) -> Result<Comm> {
        let peers = Peers::register(id, nranks);
        let seg = Segment::join(&id.to_string(), nranks, rank, SLOT_BYTES, timeout)?;
        let direct = seg.one_process();
        Ok(Comm {
            seg,
            rank,
            nranks,
            buf: vec![0; SLOT_BYTES],
            tmp: vec![0; SLOT_BYTES],
            peers: direct.then_some(peers),
        })
    }

    /// `n` communicators of one process, ranks 0..n (`ncclCommInitAll`): give each to its
    /// own thread.
    ///
    /// # Errors
    /// As [`init_rank`](Self::init_rank).
    pub fn init_all(n: usize) -> Result<Vec<Comm>> {
        let id = UniqueId::new()?;
        std::thread::scope(|s| {
            let joins: Vec<_> = (0..n)
                .map(|r| {
                    let id = &id;
                    s.spawn(move || Comm::init_rank(id, n, r))
                })
                .collect();
            joins
                .into_iter()
                .map(|j| {
                    j.join()
                        .unwrap_or_else(|_| Err(Error::other("ccl init", "a rank panicked")))
                })
                .collect()
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the communicator.
    pub fn nranks(&self) -> usize {
        self.nranks
    }

    /// Whether every rank is in this process, so that collectives move data between the
    /// ranks' buffers directly (one copy, no staging) when their host views allow: the
    /// threads of [`init_all`](Self::init_all), or `init_rank` calls of one process.
    pub fn is_direct(&self) -> bool {
        self.peers.is_some()
    }

    /// Waits for every rank (`ETIMEDOUT` if one does not come).
    pub fn barrier(&mut self) -> Result<()> {
        self.seg.barrier()
    }

    /// The bytes of the slot a chunk of `per` rank-parts may use: whole elements, the same
    /// on every rank.
    fn chunk(&self, ty: DataType, parts: usize) -> usize {
        let per = self.seg.slot() / parts.max(1);
        per - per % ty.size()
    }

    /// All-reduce (`ncclAllReduce`): `recv[i] = send[i] op ... ` over every rank, `count`
    /// elements of `ty`, for every rank the same bits. `send` and `recv` may be the same
    /// buffer. `stream`: the device work queued on these buffers before the call; it is
    /// waited for first, and the result is in `recv` when the call returns.
    ///
    /// # Errors
    /// `EINVAL` a buffer shorter than `count` elements; `ETIMEDOUT` a rank did not come;
    /// the device's errors (a stream that failed, a lost device).
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
        let bytes = need(OP, "send", count, ty, send.len())?;
        need(OP, "recv", count, ty, recv.len())?;
        stream.synchronize(DEFAULT_TIMEOUT)?;
        if self.direct_all_reduce(send, recv, bytes, ty, op, None)? {
            return Ok(());
        }
        if bytes <= ONE_SHOT_BYTES.min(self.seg.slot()) {
            return self.reduce_one_shot(send, recv, bytes, ty, op, None);
        }
        let n = self.nranks;
        let chunk = self.chunk(ty, 1);
        let mut at = 0;
        while at < bytes {
            let len = chunk.min(bytes - at);
            self.stage_in(send, at, 0, len)?;
            self.seg.barrier()?;
            // My part of the chunk: whole elements, the last rank takes the rest.
            let elems = len / ty.size();
            let (lo, hi) = part(elems, n, self.rank);
            let (lo, hi) = (lo * ty.size(), hi * ty.size());
            if hi > lo {
                self.reduce_slots(lo, hi - lo, ty, op);
                self.seg.write(self.rank, lo, &self.buf[..hi - lo]);
            }
            self.seg.barrier()?;
            for r in 0..n {
                let (lo, hi) = part(elems, n, r);
                let (lo, hi) = (lo * ty.size(), hi * ty.size());
                self.stage_out(r, lo, recv, at + lo, hi - lo)?;
            }
            self.seg.barrier()?;
            at += len;
        }
        Ok(())
    }

    /// Reduce (`ncclReduce`): as [`all_reduce`](Self::all_reduce), the result in `root`'s
    /// `recv` only (other ranks' `recv` is not touched and may be any buffer).
    ///
    /// # Errors
    /// As [`all_reduce`](Self::all_reduce); `EINVAL` a root out of range.
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
        self.check_root(OP, root)?;
        let bytes = need(OP, "send", count, ty, send.len())?;
        if self.rank == root {
            need(OP, "recv", count, ty, recv.len())?;
        }
        stream.synchronize(DEFAULT_TIMEOUT)?;
        if self.direct_all_reduce(send, recv, bytes, ty, op, Some(root))? {
            return Ok(());
        }
        let chunk = self.chunk(ty, 1);
        let mut at = 0;
        while at < bytes {
            let len = chunk.min(bytes - at);
            self.reduce_one_shot_at(send, recv, at, len, ty, op, Some(root))?;
            at += len;
        }
        Ok(())
    }

    /// The latency path: every rank writes the whole message, then reduces it itself (all
    /// of it, in rank order), or only `root` does.
    fn reduce_one_shot(
        &mut self,
        send: &dyn Bytes,
        recv: &dyn Bytes,
        bytes: usize,
        ty: DataType,
        op: RedOp,
        root: Option<usize>,
    ) -> Result<()> {
        self.reduce_one_shot_at(send, recv, 0, bytes, ty, op, root)
    }

    #[allow(clippy::too_many_arguments)]
    fn reduce_one_shot_at(
        &mut self,
        send: &dyn Bytes,
        recv: &dyn Bytes,
        at: usize,
        len: usize,
        ty: DataType,
        op: RedOp,
        root: Option<usize>,
    ) -> Result<()> {
        self.stage_in(send, at, 0, len)?;
        self.seg.barrier()?;
        if root.is_none_or(|r| r == self.rank) {
            self.reduce_slots(0, len, ty, op);
            recv.write(at, &self.buf[..len])?;
        }
        self.seg.barrier()
    }

    /// All-gather (`ncclAllGather`): rank r's `count` elements of `send` land at
    /// `recv[r * count ..]` on every rank (`recv` holds `nranks * count`).
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
        let bytes = need(OP, "send", count, ty, send.len())?;
        let total = count
            .checked_mul(self.nranks)
            .ok_or_else(|| invalid(OP, format!("{count} x {} elements overflow", self.nranks)))?;
        need(OP, "recv (nranks x count)", total, ty, recv.len())?;
        stream.synchronize(DEFAULT_TIMEOUT)?;
        if self.direct_all_gather(send, recv, bytes)? {
            return Ok(());
        }
        let chunk = self.chunk(ty, 1);
        let mut at = 0;
        while at < bytes {
            let len = chunk.min(bytes - at);
            self.stage_in(send, at, 0, len)?;
            self.seg.barrier()?;
            for r in 0..self.nranks {
                self.stage_out(r, 0, recv, r * bytes + at, len)?;
            }
            self.seg.barrier()?;
            at += len;
        }
        Ok(())
    }

    /// Reduce-scatter (`ncclReduceScatter`): `send` holds `nranks * count` elements; rank r
    /// gets in `recv` the reduction over every rank of block r (`send[r * count ..]`).
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
        let n = self.nranks;
        let total = count
            .checked_mul(n)
            .ok_or_else(|| invalid(OP, format!("{count} x {n} elements overflow")))?;
        need(OP, "send (nranks x count)", total, ty, send.len())?;
        let bytes = need(OP, "recv", count, ty, recv.len())?;
        stream.synchronize(DEFAULT_TIMEOUT)?;
        if self.direct_reduce_scatter(send, recv, bytes, ty, op)? {
            return Ok(());
        }
        // Each round, `len` bytes of every block: block b at b * len in the slot.
        let chunk = self.chunk(ty, n);
        let mut at = 0;
        while at < bytes {
            let len = chunk.min(bytes - at);
            for b in 0..n {
                self.stage_in(send, b * bytes + at, b * len, len)?;
            }
            self.seg.barrier()?;
            let mine = self.rank * len;
            self.reduce_slots(mine, len, ty, op);
            recv.write(at, &self.buf[..len])?;
            self.seg.barrier()?;
            at += len;
        }
        Ok(())
    }

    /// Broadcast (`ncclBroadcast`): `root`'s `count` elements of `send` land in every rank's
    /// `recv` (only the root reads `send`; it may be `recv`).
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
        self.check_root(OP, root)?;
        let bytes = need(OP, "recv", count, ty, recv.len())?;
        if self.rank == root {
            need(OP, "send", count, ty, send.len())?;
        }
        stream.synchronize(DEFAULT_TIMEOUT)?;
        if self.direct_broadcast(send, recv, bytes, root)? {
            return Ok(());
        }
        let chunk = self.chunk(ty, 1);
        let mut at = 0;
        while at < bytes {
            let len = chunk.min(bytes - at);
            if self.rank == root {
                self.stage_in(send, at, 0, len)?;
            }
            self.seg.barrier()?;
            self.stage_out(root, 0, recv, at, len)?;
            self.seg.barrier()?;
            at += len;
        }
        Ok(())
    }

    /// Copies `len` bytes of `src` at `at` into this rank's slot at `off`: memory to memory
    /// through its host view if it has one, else through `buf`.
    pub(crate) fn stage_in(
        &mut self,
        src: &dyn Bytes,
        at: usize,
        off: usize,
        len: usize,
    ) -> Result<()> {
        match src.host_view() {
            Some(v) => v.copy_to_shared(at, self.seg.map(), self.seg.at(self.rank, off), len),
            None => {
                src.read(at, &mut self.buf[..len])?;
                self.seg.write(self.rank, off, &self.buf[..len]);
                Ok(())
            }
        }
    }

    /// Copies `len` bytes of rank `from`'s slot at `off` into `dst` at `at` (as
    /// [`stage_in`](Self::stage_in), the other way).
    pub(crate) fn stage_out(
        &mut self,
        from: usize,
        off: usize,
        dst: &dyn Bytes,
        at: usize,
        len: usize,
    ) -> Result<()> {
        match dst.host_view() {
            Some(v) => v.copy_from_shared(at, self.seg.map(), self.seg.at(from, off), len),
            None => {
                self.seg.read(from, off, &mut self.tmp[..len]);
                dst.write(at, &self.tmp[..len])
            }
        }
    }

    /// `buf[..len]` = every slot's `[at, at + len)` reduced in rank order (so every rank
    /// that reduces the same bytes gets the same bits).
    fn reduce_slots(&mut self, at: usize, len: usize, ty: DataType, op: RedOp) {
        self.seg.read(0, at, &mut self.buf[..len]);
        for r in 1..self.nranks {
            self.seg.read(r, at, &mut self.tmp[..len]);
            reduce_into(ty, op, &mut self.buf[..len], &self.tmp[..len]);
        }
    }

    fn check_root(&self, op: &'static str, root: usize) -> Result<()> {
        if root >= self.nranks {
            return Err(invalid(
                op,
                format!("root {root} of a {}-rank communicator", self.nranks),
            ));
        }
        Ok(())
    }
}

/// Rank `r`'s elements `[lo, hi)` of `elems` split over `n` ranks (the last takes the rest).
pub(crate) fn part(elems: usize, n: usize, r: usize) -> (usize, usize) {
    let each = elems / n;
    let lo = r * each;
    let hi = if r + 1 == n { elems } else { lo + each };
    (lo, hi)
}
