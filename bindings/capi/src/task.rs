//! Tasks for C: `davinci_region` (bytes of a buffer) and `davinci_task`, built by the shim's
//! checked builders (`fill`, `copy`, `add`, `nop`), holding a lease of every buffer it names.
#![allow(unsafe_code)]

use std::ffi::c_int;

use davinci_shim::{task, Dtype, Task, TaskDesc};

use crate::ffi::{self, get, get_mut, guard, put, Fail, Out, Res};
use crate::memory::davinci_buffer;

/// `davinci_region.length` for "from `offset` to the end of the buffer" (the header
/// defines it as `SIZE_MAX`).
pub const DAVINCI_WHOLE: usize = usize::MAX;

/// Bytes `[offset, offset + length)` of a buffer (`length` `DAVINCI_WHOLE`: to its end);
/// `davinci_whole(buf)` makes one for a whole buffer. A task built from it holds the buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct davinci_region {
    /// The buffer.
    pub buffer: *const davinci_buffer,
    /// First byte.
    pub offset: usize,
    /// Bytes, or `DAVINCI_WHOLE`.
    pub length: usize,
}

/// A task: a descriptor checked on the host and a hold on every buffer it names, until it
/// has run. Built by `davinci_task_fill`/`_copy`/`_add`/`_nop`, submitted (any number of
/// times) by `davinci_stream_submit`, freed by `davinci_task_destroy` (which never waits:
/// submitted copies keep their holds).
pub struct davinci_task {
    pub(crate) task: Task,
}

/// The region's buffer, resolved.
///
/// # Safety
/// `r.buffer` is NULL or a live buffer handle during `'a`.
pub(crate) unsafe fn region<'a>(r: &davinci_region, what: &str) -> Res<davinci_shim::Region<'a>> {
    // SAFETY: the caller's contract.
    let b: &'a davinci_buffer = unsafe { get(r.buffer, &format!("{what}.buffer")) }?;
    b.region(r.offset, r.length).map_err(|f| f.context(what))
}

/// Stores a built task.
///
/// # Safety
/// `out` is writable (checked not NULL by `Out::new`).
pub(crate) unsafe fn store(out: Out<davinci_task>, built: davinci_shim::Result<Task>) -> Res {
    let task = built?;
    // SAFETY: the caller's contract.
    unsafe { out.set(davinci_task { task }) };
    Ok(())
}

/// FILL: every 32-bit word of `dst` becomes `pattern` (for a float, its bits). `dst` must be
/// non-empty and 4-byte aligned in start and length (-EINVAL naming it), and lie in its
/// buffer (-ERANGE).
///
/// # Safety
/// Threads: any. `dst.buffer` a live buffer; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_task_fill(
    dst: davinci_region,
    pattern: u32,
    out: *mut *mut davinci_task,
) -> c_int {
    guard("davinci_task_fill", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let d = unsafe { region(&dst, "dst") }?;
        // SAFETY: out checked; writable by the caller's contract.
        unsafe { store(out, task::fill(d, pattern)) }
    })
}

/// COPY: `src` to `dst`, the same non-zero length (overlap copies as `memmove`).
///
/// # Safety
/// Threads: any. The regions' buffers live; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_task_copy(
    dst: davinci_region,
    src: davinci_region,
    out: *mut *mut davinci_task,
) -> c_int {
    guard("davinci_task_copy", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let (d, s) = unsafe { (region(&dst, "dst")?, region(&src, "src")?) };
        // SAFETY: out checked; writable by the caller's contract.
        unsafe { store(out, task::copy(d, s)) }
    })
}

/// ADD: `dst[i] = a[i] + b[i]` of elements of `dtype` (`DAVINCI_DTYPE_U32`, `_I32`:
/// wrapping; `_F32`: IEEE 754) over the whole regions, which must be the same length, a whole
/// number of elements and 4-byte aligned (-EINVAL naming the operand).
///
/// # Safety
/// Threads: any. The regions' buffers live; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_task_add(
    dtype: u32,
    dst: davinci_region,
    a: davinci_region,
    b: davinci_region,
    out: *mut *mut davinci_task,
) -> c_int {
    guard("davinci_task_add", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let (d, x, y) = unsafe { (region(&dst, "dst")?, region(&a, "a")?, region(&b, "b")?) };
        let built = match u8::try_from(dtype).ok().and_then(Dtype::from_u8) {
            Some(Dtype::U32) => task::add::<u32>(d, x, y),
            Some(Dtype::I32) => task::add::<i32>(d, x, y),
            Some(Dtype::F32) => task::add::<f32>(d, x, y),
            _ => {
                return Err(Fail::inval(format!(
                    "dtype {dtype} is none of DAVINCI_DTYPE_U32, _I32, _F32 (the dtypes this builder takes)"
                )))
            }
        };
        // SAFETY: out checked; writable by the caller's contract.
        unsafe { store(out, built) }
    })
}

/// NOP: does nothing and completes (a marker, e.g. for its user data).
///
/// # Safety
/// Threads: any. `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_task_nop(out: *mut *mut davinci_task) -> c_int {
    guard("davinci_task_nop", || {
        let out = Out::new(out, "out")?;
        // SAFETY: out checked; writable by the caller's contract.
        unsafe { store(out, Ok(task::nop())) }
    })
}

/// A task from a raw descriptor that names no device memory (NOP, EVENT_RECORD, EVENT_WAIT,
/// opcodes this ABI does not define). -EINVAL for FILL, COPY, ADD and KERNEL_LAUNCH, whose
/// memory nothing would hold: build them with the functions above, or submit the descriptor
/// with `davinci_stream_submit_raw`.
///
/// # Safety
/// Threads: any. `desc` readable; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_task_from_desc(
    desc: *const TaskDesc,
    out: *mut *mut davinci_task,
) -> c_int {
    guard("davinci_task_from_desc", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let d = unsafe { get(desc, "desc") }?;
        // SAFETY: out checked; writable by the caller's contract.
        unsafe { store(out, Task::from_desc(*d)) }
    })
}

/// Sets the task's user data, echoed in its completion (`davinci_completion.user_data`).
///
/// # Safety
/// Threads: not while another thread uses `task`. `task` a live handle.
#[no_mangle]
pub unsafe extern "C" fn davinci_task_set_user_data(
    task: *mut davinci_task,
    user_data: u64,
) -> c_int {
    guard("davinci_task_set_user_data", || {
        // SAFETY: the caller's contract: used by this thread only.
        let t = unsafe { get_mut(task, "task") }?;
        t.task = t.task.clone().with_user_data(user_data);
        Ok(())
    })
}

/// The task's descriptor (opcode, addresses, the derived length) into `*out`.
///
/// # Safety
/// Threads: any. `task` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_task_get_desc(
    task: *const davinci_task,
    out: *mut TaskDesc,
) -> c_int {
    guard("davinci_task_get_desc", || {
        // SAFETY: the caller's contract.
        let t = unsafe { get(task, "task") }?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", *t.task.desc()) }
    })
}

/// Frees the task handle. What was submitted from it keeps its holds until it has run.
/// NULL does nothing.
///
/// # Safety
/// Threads: not while another thread uses `task`. `task` is NULL or a handle not yet
/// destroyed.
#[no_mangle]
pub unsafe extern "C" fn davinci_task_destroy(task: *mut davinci_task) {
    // SAFETY: the caller's contract: NULL or a live handle, no longer used.
    ffi::guard_void("davinci_task_destroy", || unsafe { ffi::free(task) });
}
