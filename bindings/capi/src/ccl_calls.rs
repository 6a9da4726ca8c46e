//! The collective, send and receive calls for C, and groups (`davinci_ccl_group_start` ...
//! `_end`): a call made outside a group runs at once; inside one it is queued with its
//! handles and run at the outermost end, each communicator's calls in order on a thread of
//! its own.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::c_int;

use davinci_ccl::{DataType, RedOp};

use crate::ccl::{closed, count_arg, data_type, davinci_ccl_comm, red_op, Kind};
use crate::ffi::{get, guard, Fail, Res};
use crate::memory::{davinci_buffer, Mem};
use crate::stream::davinci_stream;

/// One call, queued in a group or run at once.
#[derive(Clone, Copy)]
enum Call {
    AllReduce(DataType, RedOp),
    AllGather(DataType),
    ReduceScatter(DataType, RedOp),
    Broadcast(DataType, usize),
    Reduce(DataType, RedOp, usize),
    Send(DataType, usize),
    Recv(DataType, usize),
}

/// A call's handles: raw, as the caller gave them (the contract: live until it completes).
#[derive(Clone, Copy)]
struct Queued {
    comm: *const davinci_ccl_comm,
    send: *const davinci_buffer,
    recv: *const davinci_buffer,
    count: usize,
    call: Call,
    stream: *const davinci_stream,
}

// SAFETY: the handles are thread-safe types (their state behind locks); a group's calls
// move to the thread that runs their communicator, and the caller's contract keeps every
// handle alive until `davinci_ccl_group_end` returns.
unsafe impl Send for Queued {}

thread_local! {
    /// The calls of this thread's open group (`None`: no group).
    static GROUP: RefCell<Option<(u32, Vec<Queued>)>> = const { RefCell::new(None) };
}

/// Most calls one group queues.
const MAX_GROUP_CALLS: usize = 4096;

impl Mem {
    fn bytes(&self) -> &dyn davinci_ccl::Bytes {
        match self {
            Mem::Alloc(b) => b,
            Mem::Pool(b) => b,
        }
    }
}

/// Runs calls of one communicator, in order: consecutive sends and receives together, as
/// one group.
///
/// # Safety
/// Every handle in `calls` is live (the callers' contract).
unsafe fn run(calls: &[Queued]) -> Res {
    let mut i = 0;
    while i < calls.len() {
        let q = calls[i];
        // SAFETY: the contract of this function.
        let c = unsafe { get(q.comm, "comm") }?;
        // SAFETY: as above.
        let st = unsafe { get(q.stream, "stream") }?;
        let mut guard = c.comm.lock().unwrap_or_else(|e| e.into_inner());
        let comm = guard.as_mut().ok_or_else(closed)?;
        let mut locked = st.lock()?;
        let stream = &mut locked.stream;
        let p2p = |q: &Queued| matches!(q.call, Call::Send(..) | Call::Recv(..));
        if p2p(&q) {
            let mut end = i;
            while end < calls.len() && p2p(&calls[end]) && calls[end].stream == q.stream {
                end += 1;
            }
            let mut bufs = Vec::new();
            for c in &calls[i..end] {
                let p = if matches!(c.call, Call::Send(..)) {
                    c.send
                } else {
                    c.recv
                };
                // SAFETY: the contract of this function.
                bufs.push(unsafe { get(p, "buf") }?);
            }
            match comm {
                Kind::Blocking(comm) => comm.group(stream, |g| {
                    for (c, b) in calls[i..end].iter().zip(&bufs) {
                        match c.call {
                            Call::Send(ty, peer) => g.send(b.mem.bytes(), c.count, ty, peer)?,
                            Call::Recv(ty, peer) => g.recv(b.mem.bytes(), c.count, ty, peer)?,
                            _ => {}
                        }
                    }
                    Ok(())
                })?,
                Kind::Ordered(o) => {
                    let list: Vec<_> = calls[i..end]
                        .iter()
                        .zip(&bufs)
                        .filter_map(|(c, b)| match c.call {
                            Call::Send(ty, peer) => Some((b.mem.bytes(), c.count, ty, peer, true)),
                            Call::Recv(ty, peer) => Some((b.mem.bytes(), c.count, ty, peer, false)),
                            _ => None,
                        })
                        .collect();
                    o.group(&list, stream)?
                }
            }
            i = end;
            continue;
        }
        // SAFETY: the contract of this function.
        let (s, r) = unsafe { (get(q.send, "sendbuf")?, get(q.recv, "recvbuf")?) };
        let (s, r) = (s.mem.bytes(), r.mem.bytes());
        // The two kinds' calls have one shape.
        macro_rules! call {
            ($c:ident) => {
                match q.call {
                    Call::AllReduce(ty, op) => $c.all_reduce(s, r, q.count, ty, op, stream)?,
                    Call::AllGather(ty) => $c.all_gather(s, r, q.count, ty, stream)?,
                    Call::ReduceScatter(ty, op) => {
                        $c.reduce_scatter(s, r, q.count, ty, op, stream)?
                    }
                    Call::Broadcast(ty, root) => $c.broadcast(s, r, q.count, ty, root, stream)?,
                    Call::Reduce(ty, op, root) => $c.reduce(s, r, q.count, ty, op, root, stream)?,
                    Call::Send(..) | Call::Recv(..) => {}
                }
            };
        }
        match comm {
            Kind::Blocking(c) => call!(c),
            Kind::Ordered(o) => call!(o),
        }
        i += 1;
    }
    Ok(())
}

/// Runs `q` now, or queues it in this thread's open group.
///
/// # Safety
/// `q`'s handles are live until it completes (now, or at the group's end).
unsafe fn submit(q: Queued) -> Res {
    // Checked now, so a bad call fails where it is made, also inside a group.
    // SAFETY: the caller's contract.
    unsafe { get(q.comm, "comm") }?;
    // SAFETY: as above.
    unsafe { get(q.stream, "stream") }?;
    let (needs_send, needs_recv) = match q.call {
        Call::Send(..) => (true, false),
        Call::Recv(..) => (false, true),
        _ => (true, true),
    };
    if (needs_send && q.send.is_null()) || (needs_recv && q.recv.is_null()) {
        return Err(Fail::inval("a buffer is NULL"));
    }
    let queued = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        match g.as_mut() {
            Some((_, calls)) if calls.len() >= MAX_GROUP_CALLS => Err(Fail::new(
                libc::E2BIG,
                format!("a group queues at most {MAX_GROUP_CALLS} calls"),
            )),
            Some((_, calls)) => {
                calls.push(q);
                Ok(true)
            }
            None => Ok(false),
        }
    })?;
    if queued {
        return Ok(());
    }
    // SAFETY: the caller's contract.
    unsafe { run(&[q]) }
}

/// Opens a group on this thread (`ncclGroupStart`): the collective, send and recv calls that
/// follow are queued, not run, until the matching `davinci_ccl_group_end`. Groups nest (the
/// outermost end runs them).
///
/// Returns 0.
#[no_mangle]
pub extern "C" fn davinci_ccl_group_start() -> c_int {
    guard("davinci_ccl_group_start", || {
        GROUP.with(|g| {
            let mut g = g.borrow_mut();
            match g.as_mut() {
                Some((depth, _)) => *depth += 1,
                None => *g = Some((1, Vec::new())),
            }
        });
        Ok(())
    })
}

/// Closes this thread's group (`ncclGroupEnd`); the outermost one runs the queued calls:
/// each communicator's in order (its sends and receives together), several communicators
/// at once, each on a thread of its own. Returns when every call is complete.
///
/// Returns 0; -EINVAL (no group open); the first failed call's error (the other
/// communicators' calls still ran).
///
/// # Safety
/// Threads: the one that opened the group. Every handle the queued calls named is still
/// live.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_group_end() -> c_int {
    guard("davinci_ccl_group_end", || {
        let calls = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            match g.as_mut() {
                None => Err(Fail::inval("no group is open on this thread")),
                Some((depth, _)) if *depth > 1 => {
                    *depth -= 1;
                    Ok(None)
                }
                Some(_) => Ok(g.take().map(|(_, calls)| calls)),
            }
        })?;
        let Some(calls) = calls else {
            return Ok(());
        };
        let mut comms: Vec<*const davinci_ccl_comm> = Vec::new();
        for q in &calls {
            if !comms.contains(&q.comm) {
                comms.push(q.comm);
            }
        }
        // A communicator's calls hold its stream while they wait for the other ranks: two
        // communicators of one group on one stream would wait for each other.
        for (i, c) in comms.iter().enumerate() {
            let stream = |c: *const davinci_ccl_comm| {
                calls.iter().filter(move |q| q.comm == c).map(|q| q.stream)
            };
            for other in &comms[i + 1..] {
                if stream(*c).any(|s| stream(*other).any(|t| t == s)) {
                    return Err(Fail::inval(
                        "two communicators of the group use one stream: give each rank's \
                         calls its own device's stream",
                    ));
                }
            }
        }
        let per: Vec<Vec<Queued>> = comms
            .iter()
            .map(|c| calls.iter().filter(|q| q.comm == *c).copied().collect())
            .collect();
        if per.len() == 1 {
            // SAFETY: the caller's contract.
            return unsafe { run(&per[0]) };
        }
        let results: Vec<Res> = std::thread::scope(|s| {
            let joins: Vec<_> = per
                .into_iter()
                // SAFETY: the caller's contract.
                .map(|calls| s.spawn(move || unsafe { run(&calls) }))
                .collect();
            joins
                .into_iter()
                .map(|j| {
                    j.join().unwrap_or_else(|_| {
                        Err(Fail::new(libc::EIO, "a communicator's thread panicked"))
                    })
                })
                .collect()
        });
        results.into_iter().collect()
    })
}

/// The common part of the calls below.
///
/// # Safety
/// The handles are live until the call completes.
#[allow(clippy::too_many_arguments)]
unsafe fn call(
    comm: *const davinci_ccl_comm,
    send: *const davinci_buffer,
    recv: *const davinci_buffer,
    count: usize,
    call: Call,
    stream: *const davinci_stream,
) -> Res {
    // SAFETY: the caller's contract.
    unsafe {
        submit(Queued {
            comm,
            send,
            recv,
            count,
            call,
            stream,
        })
    }
}

/// All-reduce (`ncclAllReduce`): `recvbuf = sendbuf op ...` over every rank, `count`
/// elements of `datatype`, every rank the same bits. `sendbuf` may be `recvbuf`. After the
/// work queued on `stream`; the result is in place when it returns (or at the group's end).
///
/// Returns 0; -EINVAL (a bad datatype or op, a buffer shorter than `count` elements, NULL);
/// -ETIMEDOUT (a rank did not come: the communicator is aborted); -ECANCELED (another rank
/// aborted it); the device's errors.
///
/// # Safety
/// Threads: one per communicator at a time. The handles live until the call completes.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_all_reduce(
    sendbuf: *const davinci_buffer,
    recvbuf: *const davinci_buffer,
    count: usize,
    datatype: u32,
    op: u32,
    comm: *const davinci_ccl_comm,
    stream: *const davinci_stream,
) -> c_int {
    guard("davinci_ccl_all_reduce", || {
        let c = Call::AllReduce(data_type(datatype)?, red_op(op)?);
        // SAFETY: the caller's contract.
        unsafe { call(comm, sendbuf, recvbuf, count, c, stream) }
    })
}

/// All-gather (`ncclAllGather`): rank r's `sendcount` elements land at
/// `recvbuf[r * sendcount]` on every rank.
///
/// Returns as `davinci_ccl_all_reduce`.
///
/// # Safety
/// As `davinci_ccl_all_reduce`.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_all_gather(
    sendbuf: *const davinci_buffer,
    recvbuf: *const davinci_buffer,
    sendcount: usize,
    datatype: u32,
    comm: *const davinci_ccl_comm,
    stream: *const davinci_stream,
) -> c_int {
    guard("davinci_ccl_all_gather", || {
        let c = Call::AllGather(data_type(datatype)?);
        // SAFETY: the caller's contract.
        unsafe { call(comm, sendbuf, recvbuf, sendcount, c, stream) }
    })
}

/// Reduce-scatter (`ncclReduceScatter`): `sendbuf` holds nranks blocks of `recvcount`;
/// rank r gets block r reduced over every rank.
///
/// Returns as `davinci_ccl_all_reduce`.
///
/// # Safety
/// As `davinci_ccl_all_reduce`.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_reduce_scatter(
    sendbuf: *const davinci_buffer,
    recvbuf: *const davinci_buffer,
    recvcount: usize,
    datatype: u32,
    op: u32,
    comm: *const davinci_ccl_comm,
    stream: *const davinci_stream,
) -> c_int {
    guard("davinci_ccl_reduce_scatter", || {
        let c = Call::ReduceScatter(data_type(datatype)?, red_op(op)?);
        // SAFETY: the caller's contract.
        unsafe { call(comm, sendbuf, recvbuf, recvcount, c, stream) }
    })
}

/// Broadcast (`ncclBroadcast`): `root`'s `count` elements of `sendbuf` land in every
/// rank's `recvbuf` (only the root reads `sendbuf`; other ranks may pass `recvbuf`).
///
/// Returns as `davinci_ccl_all_reduce`; -EINVAL a root out of range.
///
/// # Safety
/// As `davinci_ccl_all_reduce`.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_broadcast(
    sendbuf: *const davinci_buffer,
    recvbuf: *const davinci_buffer,
    count: usize,
    datatype: u32,
    root: c_int,
    comm: *const davinci_ccl_comm,
    stream: *const davinci_stream,
) -> c_int {
    guard("davinci_ccl_broadcast", || {
        let c = Call::Broadcast(data_type(datatype)?, count_arg(root, "root")?);
        // SAFETY: the caller's contract.
        unsafe { call(comm, sendbuf, recvbuf, count, c, stream) }
    })
}

/// Reduce (`ncclReduce`): as `davinci_ccl_all_reduce`, the result in `root`'s `recvbuf`
/// only (other ranks may pass `sendbuf` as `recvbuf`; it is not written).
///
/// Returns as `davinci_ccl_broadcast`.
///
/// # Safety
/// As `davinci_ccl_all_reduce`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn davinci_ccl_reduce(
    sendbuf: *const davinci_buffer,
    recvbuf: *const davinci_buffer,
    count: usize,
    datatype: u32,
    op: u32,
    root: c_int,
    comm: *const davinci_ccl_comm,
    stream: *const davinci_stream,
) -> c_int {
    guard("davinci_ccl_reduce", || {
        let c = Call::Reduce(data_type(datatype)?, red_op(op)?, count_arg(root, "root")?);
        // SAFETY: the caller's contract.
        unsafe { call(comm, sendbuf, recvbuf, count, c, stream) }
    })
}

/// Sends `count` elements of `buf` to rank `peer` (`ncclSend`), which receives them with
/// `davinci_ccl_recv`; returns once it has (outside a group). Sends to one peer arrive in
/// order; inside a group every send and receive makes progress together.
///
/// Returns as `davinci_ccl_all_reduce`; -EINVAL a peer out of range, or (on the receiver)
/// a count that is not what the peer sent (the communicator is then aborted).
///
/// # Safety
/// As `davinci_ccl_all_reduce`.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_send(
    buf: *const davinci_buffer,
    count: usize,
    datatype: u32,
    peer: c_int,
    comm: *const davinci_ccl_comm,
    stream: *const davinci_stream,
) -> c_int {
    guard("davinci_ccl_send", || {
        let c = Call::Send(data_type(datatype)?, count_arg(peer, "peer")?);
        // SAFETY: the caller's contract.
        unsafe { call(comm, buf, std::ptr::null(), count, c, stream) }
    })
}

/// Receives `count` elements from rank `peer` into `buf` (`ncclRecv`).
///
/// Returns as `davinci_ccl_send`.
///
/// # Safety
/// As `davinci_ccl_all_reduce`.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_recv(
    buf: *const davinci_buffer,
    count: usize,
    datatype: u32,
    peer: c_int,
    comm: *const davinci_ccl_comm,
    stream: *const davinci_stream,
) -> c_int {
    guard("davinci_ccl_recv", || {
        let c = Call::Recv(data_type(datatype)?, count_arg(peer, "peer")?);
        // SAFETY: the caller's contract.
        unsafe { call(comm, std::ptr::null(), buf, count, c, stream) }
    })
}
