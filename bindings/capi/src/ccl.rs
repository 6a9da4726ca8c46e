//! Collectives for C (davinci-ccl), shaped like NCCL's API: a unique id, communicators
//! (`davinci_ccl_comm_init_rank` in each rank's process, `davinci_ccl_comm_init_all` for
//! the threads of one), and in `ccl_calls.rs` all-reduce, all-gather, reduce-scatter,
//! broadcast, reduce, send and recv between buffers of each rank's device, and groups
//! (`davinci_ccl_group_start` ... `_end`). Calls are blocking: each waits for the work
//! queued on `stream`, runs, and returns with the result in place; after
//! `davinci_ccl_comm_stream_ordered` they queue and return instead. Inside a group they are
//! queued and run at `davinci_ccl_group_end` (a communicator's in order, several
//! communicators at once: how one thread drives the ranks of `davinci_ccl_comm_init_all`).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};
use std::sync::Mutex;

use davinci_ccl::{Comm, DataType, RedOp, UniqueId};

use crate::ffi::{get, guard, guard_void, put, Fail, Out, Res};

/// `davinci_ccl_datatype`: 32-bit floats.
pub const DAVINCI_CCL_FLOAT32: u32 = 0;
/// 16-bit IEEE floats.
pub const DAVINCI_CCL_FLOAT16: u32 = 1;
/// bfloat16.
pub const DAVINCI_CCL_BFLOAT16: u32 = 2;
/// 32-bit two's complement integers (sums and products wrap).
pub const DAVINCI_CCL_INT32: u32 = 3;

/// `davinci_ccl_redop`: the sum.
pub const DAVINCI_CCL_SUM: u32 = 0;
/// The product.
pub const DAVINCI_CCL_PROD: u32 = 1;
/// The largest (NaN if either is).
pub const DAVINCI_CCL_MAX: u32 = 2;
/// The smallest (NaN if either is).
pub const DAVINCI_CCL_MIN: u32 = 3;

/// What names a communicator to its ranks (`ncclUniqueId`): made once by
/// `davinci_ccl_get_unique_id`, sent to every rank by any channel (as bytes, or as text with
/// `davinci_ccl_unique_id_to_string` / `_parse`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct davinci_ccl_unique_id {
    /// Its bytes.
    pub bytes: [u8; 16],
}

/// One rank's end of a communicator. Used by one thread at a time.
pub struct davinci_ccl_comm {
    /// `None` only after a failed `davinci_ccl_comm_stream_ordered` (the communicator went
    /// with it).
    pub(crate) comm: Mutex<Option<Kind>>,
}

/// A communicator's calls: blocking, or stream-ordered after
/// `davinci_ccl_comm_stream_ordered`.
pub(crate) enum Kind {
    Blocking(Comm),
    Ordered(davinci_ccl::StreamComm),
}

impl Kind {
    fn rank(&self) -> usize {
        match self {
            Kind::Blocking(c) => c.rank(),
            Kind::Ordered(o) => o.rank(),
        }
    }

    fn nranks(&self) -> usize {
        match self {
            Kind::Blocking(c) => c.nranks(),
            Kind::Ordered(o) => o.nranks(),
        }
    }
}

pub(crate) fn closed() -> Fail {
    Fail::inval("the communicator is closed (a failed davinci_ccl_comm_stream_ordered took it)")
}

pub(crate) fn data_type(v: u32) -> Res<DataType> {
    Ok(match v {
        DAVINCI_CCL_FLOAT32 => DataType::F32,
        DAVINCI_CCL_FLOAT16 => DataType::F16,
        DAVINCI_CCL_BFLOAT16 => DataType::Bf16,
        DAVINCI_CCL_INT32 => DataType::I32,
        _ => {
            return Err(Fail::inval(format!(
                "datatype {v}: DAVINCI_CCL_FLOAT32, _FLOAT16, _BFLOAT16 or _INT32"
            )))
        }
    })
}

pub(crate) fn red_op(v: u32) -> Res<RedOp> {
    Ok(match v {
        DAVINCI_CCL_SUM => RedOp::Sum,
        DAVINCI_CCL_PROD => RedOp::Prod,
        DAVINCI_CCL_MAX => RedOp::Max,
        DAVINCI_CCL_MIN => RedOp::Min,
        _ => {
            return Err(Fail::inval(format!(
                "op {v}: DAVINCI_CCL_SUM, _PROD, _MAX or _MIN"
            )))
        }
    })
}

pub(crate) fn count_arg(v: c_int, what: &str) -> Res<usize> {
    usize::try_from(v).map_err(|_| Fail::inval(format!("{what} {v} is negative")))
}

/// A new unique id, from the system's random source (`ncclGetUniqueId`).
///
/// Returns 0; -EIO (no random source); -EINVAL (`out` NULL).
///
/// # Safety
/// Threads: any. `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_get_unique_id(out: *mut davinci_ccl_unique_id) -> c_int {
    guard("davinci_ccl_get_unique_id", || {
        let id = UniqueId::new()?;
        // SAFETY: the caller's contract.
        unsafe {
            put(
                out,
                "out",
                davinci_ccl_unique_id {
                    bytes: id.to_bytes(),
                },
            )
        }
    })
}

/// Writes `id` as 32 hex digits and a NUL into `buf` (33 bytes at least).
///
/// Returns 0; -EINVAL (NULL); -ERANGE (`len` below 33).
///
/// # Safety
/// Threads: any. `id` readable; `buf` writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_unique_id_to_string(
    id: *const davinci_ccl_unique_id,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    guard("davinci_ccl_unique_id_to_string", || {
        // SAFETY: the caller's contract.
        let id = unsafe { get(id, "id") }?;
        if buf.is_null() {
            return Err(Fail::inval("buf is NULL"));
        }
        if len < 33 {
            return Err(Fail::new(
                libc::ERANGE,
                format!("buf holds {len} bytes, the id needs 33"),
            ));
        }
        let text = UniqueId::from_bytes(id.bytes).to_string();
        for (i, b) in text.bytes().chain(std::iter::once(0)).enumerate() {
            // SAFETY: i < 33 <= len: inside the caller's buffer.
            unsafe { buf.add(i).write(b as c_char) };
        }
        Ok(())
    })
}

/// Parses the text of `davinci_ccl_unique_id_to_string` into `out`.
///
/// Returns 0; -EINVAL (NULL, or not 32 hex digits).
///
/// # Safety
/// Threads: any. `text` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_unique_id_parse(
    text: *const c_char,
    out: *mut davinci_ccl_unique_id,
) -> c_int {
    guard("davinci_ccl_unique_id_parse", || {
        if text.is_null() {
            return Err(Fail::inval("text is NULL"));
        }
        // SAFETY: the caller's contract: a NUL-terminated string.
        let s = unsafe { std::ffi::CStr::from_ptr(text) };
        let s = s
            .to_str()
            .map_err(|_| Fail::inval("text is not UTF-8 (32 hex digits expected)"))?;
        let id: UniqueId = s.parse()?;
        // SAFETY: the caller's contract.
        unsafe {
            put(
                out,
                "out",
                davinci_ccl_unique_id {
                    bytes: id.to_bytes(),
                },
            )
        }
    })
}

/// Joins communicator `id` as `rank` of `nranks` (`ncclCommInitRank`): every rank calls it
/// with the same id and `nranks`; it returns once all joined (60 s at most, then
/// -ETIMEDOUT).
///
/// Returns 0; -EINVAL (a rank out of range, an id used with another `nranks`); -EBUSY (the
/// rank joined already); -ETIMEDOUT; -EPERM (the id's segment belongs to another user).
///
/// # Safety
/// Threads: any. `out` writable; `id` readable.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_comm_init_rank(
    out: *mut *mut davinci_ccl_comm,
    nranks: c_int,
    id: *const davinci_ccl_unique_id,
    rank: c_int,
) -> c_int {
    guard("davinci_ccl_comm_init_rank", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let id = unsafe { get(id, "id") }?;
        let (n, r) = (count_arg(nranks, "nranks")?, count_arg(rank, "rank")?);
        let comm = Comm::init_rank(&UniqueId::from_bytes(id.bytes), n, r)?;
        // SAFETY: checked by Out::new; the caller's contract.
        unsafe {
            out.set(davinci_ccl_comm {
                comm: Mutex::new(Some(Kind::Blocking(comm))),
            })
        };
        Ok(())
    })
}

/// `n` communicators of this process, ranks 0..n, into `comms[0..n]` (`ncclCommInitAll`):
/// drive each from its own thread, or all from one thread with groups.
///
/// Returns 0; -EINVAL (`n` out of 1..=64, `comms` NULL).
///
/// # Safety
/// Threads: any. `comms` writable for `n` pointers.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_comm_init_all(
    comms: *mut *mut davinci_ccl_comm,
    n: c_int,
) -> c_int {
    guard("davinci_ccl_comm_init_all", || {
        let n = count_arg(n, "n")?;
        if comms.is_null() {
            return Err(Fail::inval("comms (out-parameter) is NULL"));
        }
        let all = Comm::init_all(n)?;
        for (i, c) in all.into_iter().enumerate() {
            let p = Box::into_raw(Box::new(davinci_ccl_comm {
                comm: Mutex::new(Some(Kind::Blocking(c))),
            }));
            // SAFETY: comms is writable for n pointers (the caller's contract), i < n.
            unsafe { comms.add(i).write(p) };
        }
        Ok(())
    })
}

/// Leaves the communicator and frees the handle; NULL does nothing.
///
/// # Safety
/// Threads: any. `comm` NULL or a live handle no one else uses.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_comm_destroy(comm: *mut davinci_ccl_comm) {
    guard_void("davinci_ccl_comm_destroy", || {
        // SAFETY: the caller's contract.
        unsafe { crate::ffi::free(comm) }
    })
}

/// This rank (`ncclCommUserRank`) into `rank`, and the ranks of the communicator
/// (`ncclCommCount`) into `nranks` (either may be NULL).
///
/// Returns 0; -EINVAL (`comm` NULL).
///
/// # Safety
/// Threads: any. `comm` a live handle; `rank` and `nranks` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_comm_rank(
    comm: *const davinci_ccl_comm,
    rank: *mut c_int,
    nranks: *mut c_int,
) -> c_int {
    guard("davinci_ccl_comm_rank", || {
        // SAFETY: the caller's contract.
        let c = unsafe { get(comm, "comm") }?;
        let g = c.comm.lock().unwrap_or_else(|e| e.into_inner());
        let k = g.as_ref().ok_or_else(closed)?;
        // SAFETY: the caller's contract (NULL or writable).
        unsafe {
            crate::ffi::put_opt(rank, k.rank() as c_int);
            crate::ffi::put_opt(nranks, k.nranks() as c_int);
        }
        Ok(())
    })
}

/// Makes the communicator's calls stream-ordered from now on (NCCL's model): each queues
/// and returns at once; work submitted to the stream before a call is its input, work
/// submitted after it sees its result (the stream waits on the device for an event a proxy
/// thread of the communicator records when the call is done). `ctx`: the context of the
/// streams the calls are given. A failed call lets its stream go on; its error is returned by
/// the next call and by `davinci_ccl_comm_synchronize`. Buffers must stay live until their
/// call ran (the stream's synchronize says so). Not reversible.
///
/// Returns 0; -EINVAL (stream-ordered already, NULL); the device's errors (the communicator
/// is then closed).
///
/// # Safety
/// Threads: one per communicator at a time. `comm` and `ctx` live handles.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_comm_stream_ordered(
    comm: *const davinci_ccl_comm,
    ctx: *const crate::device::davinci_context,
) -> c_int {
    guard("davinci_ccl_comm_stream_ordered", || {
        // SAFETY: the caller's contract.
        let (c, x) = unsafe { (get(comm, "comm")?, get(ctx, "ctx")?) };
        let mut g = c.comm.lock().unwrap_or_else(|e| e.into_inner());
        match g.take() {
            Some(Kind::Blocking(b)) => {
                *g = Some(Kind::Ordered(b.into_stream_ordered(&x.ctx)?));
                Ok(())
            }
            Some(o @ Kind::Ordered(_)) => {
                *g = Some(o);
                Err(Fail::inval("the communicator is stream-ordered already"))
            }
            None => Err(closed()),
        }
    })
}

/// Waits until every call queued on a stream-ordered communicator ran (at most `timeout_ns`)
/// and returns the first failed one's error (`ncclCommGetAsyncError`); 0 at once for a
/// blocking communicator.
///
/// Returns 0; -ETIMEDOUT (calls still running); a failed call's error.
///
/// # Safety
/// Threads: one per communicator at a time. `comm` a live handle.
#[no_mangle]
pub unsafe extern "C" fn davinci_ccl_comm_synchronize(
    comm: *const davinci_ccl_comm,
    timeout_ns: u64,
) -> c_int {
    guard("davinci_ccl_comm_synchronize", || {
        // SAFETY: the caller's contract.
        let c = unsafe { get(comm, "comm") }?;
        let g = c.comm.lock().unwrap_or_else(|e| e.into_inner());
        match g.as_ref().ok_or_else(closed)? {
            Kind::Blocking(_) => Ok(()),
            Kind::Ordered(o) => Ok(o.synchronize(std::time::Duration::from_nanos(timeout_ns))?),
        }
    })
}
