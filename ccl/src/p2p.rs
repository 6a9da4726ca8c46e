//! Point-to-point: `send` and `recv` (`ncclSend`/`ncclRecv`), alone or in a group
//! (`ncclGroupStart`/`ncclGroupEnd`: every operation of the group makes progress together,
//! so ranks that send to each other and receive from each other do not wait on one another).
//!
//! Each rank's staging slot is its outbox: a sender writes a chunk of its message there,
//! names the receiver and posts it; the receiver copies it out and marks it taken, which
//! frees the slot for the next chunk. Messages between two ranks arrive in the order they
//! were sent, and a send is complete once its last chunk was taken (a rendezvous, as NCCL's
//! for large messages). Waits sleep on the rank's doorbell word (a futex), which whoever
//! changes what it waits for rings.

use std::sync::atomic::Ordering;
use std::time::Instant;

use davinci_shim::{Errno, Error, Result, Stream};
use davinci_shm::futex_wait;

use crate::comm::{Bytes, Comm, DEFAULT_TIMEOUT};
use crate::reduce::DataType;
use crate::segment::Outbox;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    Recv,
}

struct Op<'a> {
    kind: Kind,
    buf: &'a dyn Bytes,
    bytes: usize,
    peer: usize,
    /// Bytes moved so far.
    done: usize,
}

/// The operations of a group (`Comm::group`): sends and receives, started together when
/// the group's closure returns and all complete when `group` returns.
pub struct Group<'a> {
    rank: usize,
    nranks: usize,
    ops: Vec<Op<'a>>,
}

impl std::fmt::Debug for Group<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("rank", &self.rank)
            .field("ops", &self.ops.len())
            .finish()
    }
}

/// Most operations in one group.
pub const MAX_GROUP_OPS: usize = 1024;

impl<'a> Group<'a> {
    fn add(
        &mut self,
        kind: Kind,
        buf: &'a dyn Bytes,
        count: usize,
        ty: DataType,
        peer: usize,
    ) -> Result<()> {
        let op = if kind == Kind::Send {
            "ccl send"
        } else {
            "ccl recv"
        };
        if peer >= self.nranks {
            return Err(Error::new(
                Errno::EINVAL,
                op,
                format!("peer {peer} of a {}-rank communicator", self.nranks),
            ));
        }
        if self.ops.len() >= MAX_GROUP_OPS {
            return Err(Error::new(
                Errno::E2BIG,
                op,
                format!("a group holds at most {MAX_GROUP_OPS} operations"),
            ));
        }
        let bytes = crate::comm::need(op, "buffer", count, ty, buf.len())?;
        if bytes > u32::MAX as usize {
            return Err(Error::new(
                Errno::EINVAL,
                op,
                format!("{bytes} bytes: a message is at most 4 GiB - 1"),
            ));
        }
        self.ops.push(Op {
            kind,
            buf,
            bytes,
            peer,
            done: 0,
        });
        Ok(())
    }

    /// Sends `count` elements of `ty` from `buf` to rank `peer` (which receives them with a
    /// matching [`recv`](Self::recv)); sends to one peer arrive in order.
    ///
    /// # Errors
    /// `EINVAL` a peer out of range or a buffer shorter than `count` elements; `E2BIG` more
    /// than [`MAX_GROUP_OPS`] operations.
    pub fn send(
        &mut self,
        buf: &'a dyn Bytes,
        count: usize,
        ty: DataType,
        peer: usize,
    ) -> Result<()> {
        self.add(Kind::Send, buf, count, ty, peer)
    }

    /// Receives `count` elements of `ty` from rank `peer` into `buf`.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn recv(
        &mut self,
        buf: &'a dyn Bytes,
        count: usize,
        ty: DataType,
        peer: usize,
    ) -> Result<()> {
        self.add(Kind::Recv, buf, count, ty, peer)
    }
}

impl Comm {
    /// Sends `count` elements of `ty` from `buf` to rank `peer` (`ncclSend`), after the
    /// work queued on `stream`; returns once `peer` received them (a group of one: see
    /// [`group`](Self::group)).
    ///
    /// # Errors
    /// As [`group`](Self::group).
    pub fn send(
        &mut self,
        buf: &dyn Bytes,
        count: usize,
        ty: DataType,
        peer: usize,
        stream: &mut Stream,
    ) -> Result<()> {
        self.group(stream, |g| g.send(buf, count, ty, peer))
    }

    /// Receives `count` elements of `ty` from rank `peer` into `buf` (`ncclRecv`).
    ///
    /// # Errors
    /// As [`group`](Self::group).
    pub fn recv(
        &mut self,
        buf: &dyn Bytes,
        count: usize,
        ty: DataType,
        peer: usize,
        stream: &mut Stream,
    ) -> Result<()> {
        self.group(stream, |g| g.recv(buf, count, ty, peer))
    }

    /// A group of sends and receives (`ncclGroupStart` ... `ncclGroupEnd`): `ops` adds them,
    /// then they all run together after the work queued on `stream`, and `group` returns
    /// when every one is complete. A rank's sends leave in the order given (one outbox);
    /// receives from different peers complete in any order, from one peer in order. A
    /// send to itself is received by a recv from itself in the same group. Zero-element
    /// operations complete at once.
    ///
    /// ```
    /// # use davinci_ccl::{Comm, DataType};
    /// # use davinci_shim::{Device, DeviceMem};
    /// # let comms = Comm::init_all(2).unwrap();
    /// # std::thread::scope(|s| for mut comm in comms { s.spawn(move || {
    /// # let dev = Device::embedded().unwrap();
    /// # let mut stream = dev.create_context().unwrap().create_stream().unwrap();
    /// let (r, n) = (comm.rank(), comm.nranks());
    /// let (mine, theirs) = (dev.alloc(4096).unwrap(), dev.alloc(4096).unwrap());
    /// mine.write_slice(0, &[r as u32; 1024]).unwrap();
    /// // A ring shift: send to the next rank, receive from the previous one.
    /// comm.group(&mut stream, |g| {
    ///     g.send(&mine, 1024, DataType::I32, (r + 1) % n)?;
    ///     g.recv(&theirs, 1024, DataType::I32, (r + n - 1) % n)
    /// }).unwrap();
    /// assert_eq!(theirs.read_vec::<u32>(0, 1).unwrap(), [((r + n - 1) % n) as u32]);
    /// # }); });
    /// ```
    ///
    /// # Errors
    /// `ops`' errors (nothing runs); `ETIMEDOUT` a peer did not take part within the
    /// communicator's timeout (the communicator is then aborted); `EINVAL` a receive whose
    /// count is not what its peer sent (the communicator is aborted: the ranks' calls no
    /// longer match); `ECANCELED` another rank aborted; the device's errors.
    pub fn group<'a>(
        &mut self,
        stream: &mut Stream,
        ops: impl FnOnce(&mut Group<'a>) -> Result<()>,
    ) -> Result<()> {
        let mut g = Group {
            rank: self.rank,
            nranks: self.nranks,
            ops: Vec::new(),
        };
        ops(&mut g)?;
        stream.synchronize(DEFAULT_TIMEOUT)?;
        self.run_group(&mut g.ops)
    }

    fn run_group(&mut self, ops: &mut [Op<'_>]) -> Result<()> {
        const OP: &str = "ccl group";
        let me = self.rank;
        let slot = self.seg.slot();
        let start = Instant::now();
        let timeout = self.seg.timeout();
        // The send whose chunk is in the outbox, and its length.
        let mut in_flight: Option<(usize, usize)> = None;
        loop {
            if ops.iter().all(|o| o.done == o.bytes) && in_flight.is_none() {
                return Ok(());
            }
            if self.seg.aborted() {
                return Err(Error::new(
                    Errno::ECANCELED,
                    OP,
                    "the communicator was aborted (another rank timed out or its calls did not \
                     match)",
                ));
            }
            let bell = self.seg.outbox(me, Outbox::Bell).load(Ordering::Acquire);
            let mut progressed = false;
            // My outbox: a taken chunk completes its bytes; a free outbox takes the next.
            let posted = self.seg.outbox(me, Outbox::Posted).load(Ordering::Acquire);
            let taken = self.seg.outbox(me, Outbox::Taken).load(Ordering::Acquire);
            if let Some((i, len)) = in_flight {
                if taken == posted {
                    ops[i].done += len;
                    in_flight = None;
                    progressed = true;
                }
            }
            if in_flight.is_none() {
                if let Some(i) = ops
                    .iter()
                    .position(|o| o.kind == Kind::Send && o.done < o.bytes)
                {
                    let (at, bytes, peer) = (ops[i].done, ops[i].bytes, ops[i].peer);
                    let len = slot.min(bytes - at);
                    self.stage_in(ops[i].buf, at, 0, len)?;
                    let ob = |w| self.seg.outbox(me, w);
                    ob(Outbox::Dest).store(peer as u32, Ordering::Relaxed);
                    ob(Outbox::Len).store(len as u32, Ordering::Relaxed);
                    ob(Outbox::Total).store(bytes as u32, Ordering::Relaxed);
                    ob(Outbox::Posted).store(posted.wrapping_add(1), Ordering::Release);
                    self.seg.ring(peer);
                    in_flight = Some((i, len));
                    progressed = true;
                }
            }
            // Receives: the first unfinished one from each peer (a peer's messages arrive in
            // order) whose outbox holds a chunk for me. Peers are below MAX_RANKS (64).
            let mut seen = 0u64;
            for op in ops.iter_mut() {
                let (kind, peer, done, bytes) = (op.kind, op.peer, op.done, op.bytes);
                if kind != Kind::Recv || done == bytes || seen & (1 << peer) != 0 {
                    continue;
                }
                seen |= 1 << peer;
                let word = |w| self.seg.outbox(peer, w).load(Ordering::Acquire);
                let posted = word(Outbox::Posted);
                if posted == word(Outbox::Taken) || word(Outbox::Dest) != me as u32 {
                    continue;
                }
                let total = word(Outbox::Total) as usize;
                let len = word(Outbox::Len) as usize;
                if total != bytes || len > bytes - done || len > slot {
                    self.seg.abort();
                    return Err(Error::new(
                        Errno::EINVAL,
                        OP,
                        format!(
                            "rank {peer} sends {total} bytes, this rank's recv from it expects \
                             {bytes}: the communicator is aborted"
                        ),
                    ));
                }
                self.stage_out(peer, 0, op.buf, done, len)?;
                op.done += len;
                self.seg
                    .outbox(peer, Outbox::Taken)
                    .store(posted, Ordering::Release);
                self.seg.ring(peer);
                progressed = true;
            }
            if progressed {
                continue;
            }
            let waited = start.elapsed();
            if waited >= timeout {
                self.seg.abort();
                let left: Vec<String> = ops
                    .iter()
                    .filter(|o| o.done < o.bytes)
                    .map(|o| {
                        format!(
                            "{} rank {} ({} of {} bytes left)",
                            if o.kind == Kind::Send {
                                "send to"
                            } else {
                                "recv from"
                            },
                            o.peer,
                            o.bytes - o.done,
                            o.bytes
                        )
                    })
                    .collect();
                return Err(Error::new(
                    Errno::ETIMEDOUT,
                    OP,
                    format!(
                        "waited {timeout:?} for the peers, still to do: {}; a peer died or its \
                         calls do not match (the communicator is aborted)",
                        left.join(", ")
                    ),
                ));
            }
            futex_wait(
                self.seg.outbox(me, Outbox::Bell),
                bell,
                (timeout - waited).min(std::time::Duration::from_millis(100)),
            );
        }
    }
}
