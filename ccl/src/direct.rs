//! The direct path, for a communicator whose ranks are all in one process (the threads of
//! [`Comm::init_all`](crate::Comm::init_all), or of several `init_rank` calls in one
//! process): every rank's buffers have host views in the same address space, so a rank
//! reads its peers' `send` and writes their `recv` itself, memory to memory, with no staging
//! copy (NCCL's peer-to-peer path between the GPUs of one process). Each call: every rank
//! posts its two views, a barrier, the work split over the ranks, a barrier. If any rank's
//! buffer has no host view the ranks all take the staged path instead (they all see the
//! same posts, so they agree).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use davinci_shim::{HostMapping, Result};

use crate::reduce::{reduce_into, DataType, RedOp};
use crate::UniqueId;

/// Bytes a rank reduces at a time: its accumulator and one peer's block stay in its core's
/// cache while it reads every peer's block and writes every peer's result.
pub(crate) const BLOCK: usize = 256 << 10;

/// One rank's buffers for the call under way.
#[derive(Clone)]
pub(crate) struct Post {
    pub send: Option<HostMapping>,
    pub recv: Option<HostMapping>,
}

/// The ranks of one communicator that live in this process.
pub(crate) struct Peers {
    posts: Vec<Mutex<Option<Post>>>,
}

/// Communicators of this process by unique id: how ranks joining from separate threads find
/// each other (whether every rank is in this process, the segment tells).
fn registry() -> &'static Mutex<HashMap<UniqueId, Weak<Peers>>> {
    static R: OnceLock<Mutex<HashMap<UniqueId, Weak<Peers>>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Peers {
    /// The posts of communicator `id` (of `nranks`) in this process, shared by its ranks
    /// here.
    pub(crate) fn register(id: &UniqueId, nranks: usize) -> Arc<Peers> {
        let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
        reg.retain(|_, w| w.strong_count() > 0);
        match reg.get(id).and_then(Weak::upgrade) {
            Some(p) if p.posts.len() == nranks => p,
            _ => {
                let p = Arc::new(Peers {
                    posts: (0..nranks).map(|_| Mutex::new(None)).collect(),
                });
                reg.insert(*id, Arc::downgrade(&p));
                p
            }
        }
    }

    /// Posts `rank`'s buffers for this call.
    pub(crate) fn post(&self, rank: usize, post: Option<Post>) {
        *self.posts[rank].lock().unwrap_or_else(|e| e.into_inner()) = post;
    }

    /// Every rank's posted buffers (after the barrier that follows the posts).
    pub(crate) fn all(&self) -> Vec<Post> {
        self.posts
            .iter()
            .map(|p| {
                p.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
                    .unwrap_or(Post {
                        send: None,
                        recv: None,
                    })
            })
            .collect()
    }
}

/// `views[p]` for every rank, or `None` if one is missing.
pub(crate) fn every(views: impl Iterator<Item = Option<HostMapping>>) -> Option<Vec<HostMapping>> {
    views.collect()
}

/// Reduces bytes `[lo, hi)` of every rank's `send` (in rank order, so every rank's bits are
/// the same), a block at a time, writing each block's result to every `recv` given.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_range(
    sends: &[HostMapping],
    send_at: usize,
    recvs: &[&HostMapping],
    recv_at: usize,
    len: usize,
    ty: DataType,
    op: RedOp,
    acc: &mut [u8],
    tmp: &mut [u8],
) -> Result<()> {
    let block = BLOCK.min(acc.len()).min(tmp.len());
    let mut off = 0;
    while off < len {
        let k = block.min(len - off);
        sends[0].read(send_at + off, &mut acc[..k])?;
        for s in &sends[1..] {
            s.read(send_at + off, &mut tmp[..k])?;
            reduce_into(ty, op, &mut acc[..k], &tmp[..k]);
        }
        for r in recvs {
            r.write_streaming(recv_at + off, &acc[..k])?;
        }
        off += k;
    }
    Ok(())
}

/// This rank's `recv` view, if every rank has one (so that every rank decides alike).
fn own_recv(posts: &[Post], rank: usize) -> Option<HostMapping> {
    every(posts.iter().map(|p| p.recv.clone())).map(|mut all| all.swap_remove(rank))
}

/// Rank `r`'s elements `[lo, hi)` of `elems` split over `n` ranks, in bytes of `ty`.
fn part_bytes(elems: usize, n: usize, r: usize, ty: DataType) -> (usize, usize) {
    let (lo, hi) = crate::comm::part(elems, n, r);
    (lo * ty.size(), hi * ty.size())
}

impl crate::Comm {
    /// Posts this rank's views, and after the barrier returns every rank's, if every rank is
    /// in this process (`None`: the staged path, and no barrier was taken).
    fn exchange(
        &mut self,
        send: &dyn crate::Bytes,
        recv: &dyn crate::Bytes,
    ) -> Result<Option<Vec<Post>>> {
        let Some(peers) = self.peers.clone() else {
            return Ok(None);
        };
        peers.post(
            self.rank,
            Some(Post {
                send: send.host_view(),
                recv: recv.host_view(),
            }),
        );
        self.seg.barrier()?;
        Ok(Some(peers.all()))
    }

    /// Ends a direct call: the barrier after which no rank touches the posted buffers any
    /// more (taken whatever this rank's work returned, so no rank is left waiting), and this
    /// rank's post dropped (its holds on the buffers).
    fn finish(&mut self, work: Result<()>) -> Result<()> {
        let done = self.seg.barrier();
        if let Some(p) = &self.peers {
            p.post(self.rank, None);
        }
        work.and(done)
    }

    /// All-reduce on the direct path: `Ok(false)` if some rank has no host view (the caller
    /// takes the staged path; every rank decides the same).
    pub(crate) fn direct_all_reduce(
        &mut self,
        send: &dyn crate::Bytes,
        recv: &dyn crate::Bytes,
        bytes: usize,
        ty: DataType,
        op: RedOp,
        root: Option<usize>,
    ) -> Result<bool> {
        let Some(posts) = self.exchange(send, recv)? else {
            return Ok(false);
        };
        let sends = every(posts.iter().map(|p| p.send.clone()));
        let recvs: Option<Vec<HostMapping>> = match root {
            None => every(posts.iter().map(|p| p.recv.clone())),
            Some(r) => posts[r].recv.clone().map(|v| vec![v]),
        };
        let (Some(sends), Some(recvs)) = (sends, recvs) else {
            self.finish(Ok(()))?;
            return Ok(false);
        };
        let (lo, hi) = part_bytes(bytes / ty.size(), self.nranks, self.rank, ty);
        let targets: Vec<&HostMapping> = recvs.iter().collect();
        let work = reduce_range(
            &sends,
            lo,
            &targets,
            lo,
            hi - lo,
            ty,
            op,
            &mut self.buf,
            &mut self.tmp,
        );
        self.finish(work).map(|()| true)
    }

    /// The exchange, then every rank's `send` and this rank's `recv`; `None` (the exchange
    /// finished, if it was made) when one is missing: the staged path, for every rank alike.
    fn every_send_and_own_recv(
        &mut self,
        send: &dyn crate::Bytes,
        recv: &dyn crate::Bytes,
    ) -> Result<Option<(Vec<HostMapping>, HostMapping)>> {
        let Some(posts) = self.exchange(send, recv)? else {
            return Ok(None);
        };
        let sends = every(posts.iter().map(|p| p.send.clone()));
        match (sends, own_recv(&posts, self.rank)) {
            (Some(sends), Some(mine)) => Ok(Some((sends, mine))),
            _ => self.finish(Ok(())).map(|()| None),
        }
    }

    /// Reduce-scatter on the direct path: this rank reduces its block of every `send` into
    /// its own `recv`.
    pub(crate) fn direct_reduce_scatter(
        &mut self,
        send: &dyn crate::Bytes,
        recv: &dyn crate::Bytes,
        bytes: usize,
        ty: DataType,
        op: RedOp,
    ) -> Result<bool> {
        let Some((sends, mine)) = self.every_send_and_own_recv(send, recv)? else {
            return Ok(false);
        };
        let work = reduce_range(
            &sends,
            self.rank * bytes,
            &[&mine],
            0,
            bytes,
            ty,
            op,
            &mut self.buf,
            &mut self.tmp,
        );
        self.finish(work).map(|()| true)
    }

    /// All-gather on the direct path: this rank copies every rank's `send` into its own
    /// `recv`, memory to memory.
    pub(crate) fn direct_all_gather(
        &mut self,
        send: &dyn crate::Bytes,
        recv: &dyn crate::Bytes,
        bytes: usize,
    ) -> Result<bool> {
        let Some((sends, mine)) = self.every_send_and_own_recv(send, recv)? else {
            return Ok(false);
        };
        let work = sends
            .iter()
            .enumerate()
            .try_for_each(|(r, s)| s.copy_to(0, &mine, r * bytes, bytes));
        self.finish(work).map(|()| true)
    }

    /// Broadcast on the direct path: this rank copies `root`'s `send` into its own `recv`
    /// (the root too, unless they are one buffer).
    pub(crate) fn direct_broadcast(
        &mut self,
        send: &dyn crate::Bytes,
        recv: &dyn crate::Bytes,
        bytes: usize,
        root: usize,
    ) -> Result<bool> {
        let Some(posts) = self.exchange(send, recv)? else {
            return Ok(false);
        };
        let (Some(from), Some(mine)) = (posts[root].send.clone(), own_recv(&posts, self.rank))
        else {
            self.finish(Ok(()))?;
            return Ok(false);
        };
        let work = if from.addr() == mine.addr() {
            Ok(())
        } else {
            from.copy_to(0, &mine, 0, bytes)
        };
        self.finish(work).map(|()| true)
    }
}
