//! Host callbacks for C (`davinci_stream_launch_host_func`): the shim's
//! `Stream::launch_host_func` with a C function and its user pointer.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};

use crate::ffi::{guard, put_opt, Fail};
use crate::stream::{davinci_stream, stream_ref};

/// A host callback: `user` as given to `davinci_stream_launch_host_func`, `status` 0 when the
/// stream reached it, else a negative errno (-ECANCELED: the stream was destroyed first).
pub type davinci_host_fn = Option<extern "C" fn(user: *mut c_void, status: c_int)>;

/// The C function and its pointer, carried to the thread that reaps the stream.
struct HostFn {
    f: extern "C" fn(*mut c_void, c_int),
    user: *mut c_void,
}

// SAFETY: davinci_stream_launch_host_func's contract: the caller accepts that `f` runs with
// `user` on whichever thread reaps the stream; the pointer is only handed back to `f`.
unsafe impl Send for HostFn {}

impl HostFn {
    fn call(self, status: c_int) {
        (self.f)(self.user, status);
    }
}

/// Runs `func(user, status)` on the host once `stream` reaches this point (`cudaLaunchHostFunc`,
/// `aclrtLaunchCallback`): a NOP task is queued (its completion, `user_data` 0, is returned by
/// `davinci_stream_poll` like any other; its id goes to `*task_id`, NULL: not wanted), and
/// `func` runs when that completion is reaped, after every earlier task of the stream
/// completed. It runs exactly once: `status` 0 when reached, else a negative errno: the NOP's
/// own failure (-EIO when the device stopped the stream first), or -ECANCELED when the stream
/// is destroyed first.
///
/// The thread it runs on: the one making the call on this stream that reaps its NOP
/// (`davinci_stream_synchronize`, `davinci_stream_poll`, or a submit, record or wait on the
/// stream that takes completions off its event ring), inside that call, before it returns;
/// with -ECANCELED, the thread calling `davinci_stream_destroy`. There is no thread of the library's own: a
/// stream nobody calls runs no callback.
///
/// Inside `func`: calls on **this** stream (or on an event record or wait naming it) fail at
/// once with -EDEADLK and do nothing (the call that runs `func` is using the stream), and
/// `davinci_stream_destroy` of it does nothing; everything else may be called: buffers,
/// events, records, other streams. Keep it short: the stream's other callers wait for it.
/// Unlike `cudaLaunchHostFunc` the device does not wait for `func`: later tasks run meanwhile.
///
/// Returns 0; -EINVAL (`func` NULL); the errors of `davinci_stream_submit`.
///
/// # Safety
/// Threads: any (the stream's lock). `stream` a live handle; `task_id` NULL or writable;
/// `func` may be called with `user` on any thread, once.
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_launch_host_func(
    stream: *const davinci_stream,
    func: davinci_host_fn,
    user: *mut c_void,
    task_id: *mut u64,
) -> c_int {
    guard("davinci_stream_launch_host_func", || {
        // SAFETY: the caller's contract.
        let s = unsafe { stream_ref(stream) }?;
        let f = func.ok_or_else(|| Fail::inval("func is NULL"))?;
        let host = HostFn { f, user };
        let id = s.lock()?.stream.launch_host_func(move |reached| {
            let status = match reached {
                Ok(()) => 0,
                Err(e) => -e.errno().map_or(libc::EIO, |x| x.code()),
            };
            host.call(status);
        })?;
        // SAFETY: the caller's contract: NULL or writable.
        unsafe { put_opt(task_id, id.get()) };
        Ok(())
    })
}
