//! Collectives for C (davinci-ccl), shaped like NCCL's API: a unique id, communicators
//! (`davinci_ccl_comm_init_rank` in each rank's process, `davinci_ccl_comm_init_all` for
//! the threads of one), and in `ccl_calls.rs` all-reduce, all-gather, reduce-scatter,
//! broadcast, reduce, send and recv between buffers of each rank's device, and groups
//! (`davinci_ccl_group_start` ... `_end`). Calls are blocking: each waits for the work queued on `stream`, runs, and
//! returns with the result in place; inside a group they are queued and run at
//! `davinci_ccl_group_end` (a communicator's in order, several communicators at once: how
//! one thread drives the ranks of `davinci_ccl_comm_init_all`).
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
    pub(crate) comm: Mutex<Comm>,
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
                comm: Mutex::new(comm),
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
                comm: Mutex::new(c),
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
        // SAFETY: the caller's contract (NULL or writable).
        unsafe {
            crate::ffi::put_opt(rank, g.rank() as c_int);
            crate::ffi::put_opt(nranks, g.nranks() as c_int);
        }
        Ok(())
    })
}
