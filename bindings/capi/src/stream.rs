//! Streams for C: `davinci_stream` (the shim's `Stream` behind a lock, since C callers may
//! share one between threads), its options, submitting, polling completions, synchronize,
//! host callbacks.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use davinci_shim::{Completion, Stream, StreamOptions, Task, TaskDesc};

use crate::device::davinci_context;
use crate::ffi::{self, get, guard, put, Fail, Out, Res};
use crate::task::davinci_task;

thread_local! {
    /// The streams this thread is inside a call on (holding the stream's lock, or destroying
    /// it), by address. A host callback (`davinci_stream_launch_host_func`) runs there: a
    /// call it makes on the same stream is refused (`EDEADLK`) before the handle is even read,
    /// instead of waiting for the lock its own thread holds, or reading a stream being freed.
    static INSIDE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Marks this thread as inside a call on the stream at `addr` until dropped.
pub(crate) struct Inside(usize);

impl Inside {
    pub(crate) fn enter(addr: usize) -> Inside {
        // During thread teardown the list may be gone: then nothing can call back anyway.
        let _ = INSIDE.try_with(|v| v.borrow_mut().push(addr));
        Inside(addr)
    }

    fn contains(addr: usize) -> bool {
        INSIDE
            .try_with(|v| v.borrow().contains(&addr))
            .unwrap_or(false)
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|v| {
            let mut v = v.borrow_mut();
            if let Some(i) = v.iter().rposition(|&a| a == self.0) {
                v.remove(i);
            }
        });
    }
}

/// `EDEADLK` if this thread is inside a call on the stream at `addr` (a host callback of
/// it calling back into it).
pub(crate) fn check_not_inside(addr: usize) -> Res {
    if Inside::contains(addr) {
        return Err(Fail::new(
            libc::EDEADLK,
            "called on a stream from inside a call on that same stream (a host callback of it, \
             davinci_stream_launch_host_func, runs inside the call that reaped it): nothing was \
             done; use the stream after that call returns, or another stream",
        ));
    }
    Ok(())
}

/// The stream `p` points to; `EINVAL` for NULL, `EDEADLK` from inside a call on it (see
/// [`check_not_inside`]), checked before `p` is read.
///
/// # Safety
/// `p` is NULL, a stream this thread is inside a call on, or a live stream handle.
pub(crate) unsafe fn stream_ref<'a>(p: *const davinci_stream) -> Res<&'a davinci_stream> {
    check_not_inside(p as usize)?;
    // SAFETY: the caller's contract; a stream being destroyed by this thread was refused above.
    unsafe { get(p, "stream") }
}

/// A stream locked for one call, this thread marked inside it.
pub(crate) struct Locked<'a> {
    state: MutexGuard<'a, StreamState>,
    _inside: Inside,
}

impl Deref for Locked<'_> {
    type Target = StreamState;
    fn deref(&self) -> &StreamState {
        &self.state
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut StreamState {
        &mut self.state
    }
}

/// An in-order queue of tasks on the device (`aclrtStream`, `cudaStream_t`). Made by
/// `davinci_stream_create`, destroyed by `davinci_stream_destroy`.
///
/// Threads: every function on a stream takes its lock, so threads may share one; calls
/// on it then run one at a time, and a blocking one (`davinci_stream_synchronize`, a submit
/// waiting for room) holds the lock while it waits. For throughput give each thread its own
/// stream.
pub struct davinci_stream {
    state: Mutex<StreamState>,
    /// The driver's handle, read without the lock.
    handle: u32,
}

pub(crate) struct StreamState {
    pub(crate) stream: Stream,
    /// Completions polled from the shim that did not fit the caller's array.
    overflow: VecDeque<Completion>,
}

impl davinci_stream {
    /// The stream, locked for this call (`EDEADLK` if this thread holds it already: a host
    /// callback calling back). A stream whose lock a caught panic poisoned is refused
    /// (`EIO`): its state is unknown.
    pub(crate) fn lock(&self) -> Res<Locked<'_>> {
        let addr = std::ptr::from_ref(self) as usize;
        check_not_inside(addr)?;
        let state = self.state.lock().map_err(|_| {
            Fail::new(
                libc::EIO,
                "an earlier call on this stream failed inside libdavinci (a caught panic): \
                 destroy the stream and create a new one",
            )
        })?;
        Ok(Locked {
            state,
            _inside: Inside::enter(addr),
        })
    }
}

/// A stream's ring depths and behaviour (`davinci_stream_options_default` fills the
/// defaults: 256 command slots, 512 event slots, completions kept, 10 s submit timeout).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct davinci_stream_options {
    /// Command-ring slots (a power of two within the device's limits).
    pub cmd_entries: u32,
    /// Event-ring slots (a power of two, at least `cmd_entries`).
    pub event_entries: u32,
    /// Keep the completions a submit (ring full) or a synchronize takes off the ring so
    /// that `davinci_stream_poll` still returns them (true), or drop them after noting errors
    /// (false: for callers that never poll).
    pub keep_completions: bool,
    /// Most completions kept that way: beyond it the oldest unpolled ones are let go of
    /// (a stream nobody polls never stops for them).
    pub backlog_limit: usize,
    /// Longest a submit waits for room in a full command ring before -ETIMEDOUT (ns).
    pub submit_timeout_ns: u64,
}

/// One task's completion (`davinci_stream_poll`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct davinci_completion {
    /// The task's user data.
    pub user_data: u64,
    /// The task's id in its stream (what the submit returned for it).
    pub task: u64,
    /// Opcode-specific result (bytes, elements, event value; for a failure the fault's
    /// detail, as `davinci_event_record.result`).
    pub result: u64,
    /// Device time of completion (ns).
    pub timestamp_ns: u64,
    /// 0 on success, else a negative errno.
    pub status: i32,
    /// The descriptor's opcode (`DAVINCI_OP_*`).
    pub opcode: u8,
    /// Ignore it.
    pub reserved: [u8; 3],
}

impl From<Completion> for davinci_completion {
    fn from(c: Completion) -> Self {
        davinci_completion {
            user_data: c.user_data,
            task: c.task.get(),
            result: c.result,
            timestamp_ns: c.timestamp_ns,
            status: c.status,
            opcode: c.opcode,
            reserved: [0; 3],
        }
    }
}

/// The default stream options into `*out`.
///
/// # Safety
/// Threads: any. `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_options_default(out: *mut davinci_stream_options) -> c_int {
    guard("davinci_stream_options_default", || {
        let d = StreamOptions::default();
        let o = davinci_stream_options {
            cmd_entries: d.cmd_entries,
            event_entries: d.event_entries,
            keep_completions: d.keep_completions,
            backlog_limit: d.backlog_limit,
            submit_timeout_ns: u64::try_from(d.submit_timeout.as_nanos()).unwrap_or(u64::MAX),
        };
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", o) }
    })
}

/// Creates a stream in `ctx` with `opts` (NULL: the defaults) into `*out`
/// (`aclrtCreateStream`, `cudaStreamCreate`). -EINVAL for depths the device refuses.
///
/// # Safety
/// Threads: any. `ctx` a live handle; `opts` NULL or readable; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_create(
    ctx: *const davinci_context,
    opts: *const davinci_stream_options,
    out: *mut *mut davinci_stream,
) -> c_int {
    guard("davinci_stream_create", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let c = unsafe { get(ctx, "ctx") }?;
        // SAFETY: the caller's contract: NULL or readable.
        let options = match unsafe { opts.as_ref() } {
            None => StreamOptions::default(),
            Some(o) => StreamOptions::depths(o.cmd_entries, o.event_entries)
                .keep_completions(o.keep_completions)
                .backlog_limit(o.backlog_limit)
                .submit_timeout(Duration::from_nanos(o.submit_timeout_ns)),
        };
        let stream = c.ctx.create_stream_with(options)?;
        let s = davinci_stream {
            handle: stream.handle(),
            state: Mutex::new(StreamState {
                stream,
                overflow: VecDeque::new(),
            }),
        };
        // SAFETY: checked by Out::new; writable by the caller's contract.
        unsafe { out.set(s) };
        Ok(())
    })
}

/// Destroys the stream: tasks not yet run are discarded (a running one stops at its next
/// chunk), then the buffers its queued tasks held are released. Returns within one chunk of
/// device work. NULL does nothing.
///
/// # Safety
/// Threads: not while another thread uses `stream`. `stream` is NULL or a handle not yet
/// destroyed.
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_destroy(stream: *mut davinci_stream) {
    let _ = guard("davinci_stream_destroy", || {
        // A host callback destroying its own stream: refused (the call that runs it is using
        // the stream).
        check_not_inside(stream as usize).map_err(|f| f.context("the stream is left alive"))?;
        // Host callbacks not reached run now with -ECANCELED; this thread is marked inside
        // the stream meanwhile, so that they cannot call back into what is being freed.
        let _inside = Inside::enter(stream as usize);
        // SAFETY: the caller's contract: NULL or a live handle, no longer used; calls back
        // into it from its callbacks are refused before reading it (stream_ref).
        unsafe { ffi::free(stream) };
        Ok(())
    });
}

/// Submits a task: written into the mapped command ring (no system call unless the device
/// sleeps). It first reaps what has completed (no system call), and waits for room, at most
/// the submit timeout, if the command ring is full or the stream already has as many tasks
/// unreaped as its event ring holds: so a stream nobody synchronizes or polls never stalls
/// on its own completions. The stream holds the task's buffers until its completion is
/// reaped. Its id in the stream goes to `*task_id` (NULL: not wanted).
///
/// Returns 0; -EINVAL (a buffer of another device open), -EIO (the device stopped the
/// stream: the message says which task failed and why; destroy it and create another),
/// -ETIMEDOUT (no room in time: the tasks ahead made no progress).
///
/// # Safety
/// Threads: any (the stream's lock). `stream`, `task` live handles; `task_id` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_submit(
    stream: *const davinci_stream,
    task: *const davinci_task,
    task_id: *mut u64,
) -> c_int {
    guard("davinci_stream_submit", || {
        // SAFETY: the caller's contract.
        let (s, t) = unsafe { (stream_ref(stream)?, get(task, "task")?) };
        let id = s.lock()?.stream.submit(&t.task)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::put_opt(task_id, id.get()) };
        Ok(())
    })
}

/// Submits `n` tasks in order with one publish per ring-full; the first one's id goes to
/// `*first_id` (the others follow it by one each). If the wait for room fails midway, the
/// tasks submitted stay submitted and the message says how many.
///
/// # Safety
/// Threads: any (the stream's lock). `tasks` readable for `n` live task handles (NULL only
/// with `n` 0); `first_id` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_submit_batch(
    stream: *const davinci_stream,
    tasks: *const *const davinci_task,
    n: usize,
    first_id: *mut u64,
) -> c_int {
    guard("davinci_stream_submit_batch", || {
        // SAFETY: the caller's contract.
        let s = unsafe { stream_ref(stream) }?;
        // SAFETY: the caller's contract: n readable pointers.
        let ptrs = unsafe { ffi::slice(tasks, n, "tasks") }?;
        // Grown as the handles are read: a wrong `n` must not become a huge allocation.
        let mut batch: Vec<Task> = Vec::with_capacity(n.min(1024));
        for (i, &p) in ptrs.iter().enumerate() {
            // SAFETY: the caller's contract: each a live task handle.
            let t = unsafe { get(p, &format!("tasks[{i}]")) }?;
            batch.push(t.task.clone());
        }
        let id = s.lock()?.stream.submit_batch(&batch)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::put_opt(first_id, id.get()) };
        Ok(())
    })
}

/// Submits a raw descriptor (`struct davinci_task_desc` of `<davinci/uapi.h>`) whose
/// addresses nothing holds: the caller keeps every buffer it names allocated until its
/// completion is reaped or the stream is destroyed (else the task may write into memory
/// handed out again). For runtimes that manage lifetimes themselves, and for showing what
/// the device does with a bad descriptor. Its id goes to `*task_id` (NULL: not wanted).
///
/// # Safety
/// Threads: any (the stream's lock). `desc` readable; `task_id` NULL or writable; the
/// memory rule above (the Rust `unsafe` contract of `Stream::submit_raw`).
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_submit_raw(
    stream: *const davinci_stream,
    desc: *const TaskDesc,
    task_id: *mut u64,
) -> c_int {
    guard("davinci_stream_submit_raw", || {
        // SAFETY: the caller's contract.
        let (s, d) = unsafe { (stream_ref(stream)?, get(desc, "desc")?) };
        let mut st = s.lock()?;
        // SAFETY: this function's contract passes Stream::submit_raw's on to the C caller:
        // the memory the descriptor names stays allocated until the task is reaped.
        let id = unsafe { st.stream.submit_raw(d) }?;
        // SAFETY: the caller's contract.
        unsafe { ffi::put_opt(task_id, id.get()) };
        Ok(())
    })
}

/// Copies up to `cap` available completions into `out`, in stream order, without a system
/// call; how many into `*n`. Completions that did not fit are returned by the next call.
/// Reaping releases the buffers those tasks held.
///
/// # Safety
/// Threads: any (the stream's lock). `out` writable for `cap` completions (NULL only with
/// `cap` 0); `n` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_poll(
    stream: *const davinci_stream,
    out: *mut davinci_completion,
    cap: usize,
    n: *mut usize,
) -> c_int {
    guard("davinci_stream_poll", || {
        // SAFETY: the caller's contract.
        let s = unsafe { stream_ref(stream) }?;
        if n.is_null() {
            return Err(Fail::inval("n (out-parameter) is NULL"));
        }
        if out.is_null() && cap > 0 {
            return Err(Fail::inval(format!("out is NULL with cap {cap}")));
        }
        let mut guard = s.lock()?;
        let st = &mut *guard;
        let mut got: Vec<davinci_completion> = Vec::new();
        while got.len() < cap {
            let Some(c) = st.overflow.pop_front() else {
                break;
            };
            got.push(c.into());
        }
        if got.len() < cap {
            let overflow = &mut st.overflow;
            st.stream.poll_each(|c| {
                if got.len() < cap {
                    got.push(c.into());
                } else {
                    overflow.push_back(c);
                }
            });
        }
        for (i, c) in got.iter().enumerate() {
            // SAFETY: i < cap, and `out` is writable for cap completions (caller's contract).
            unsafe { out.add(i).write(*c) };
        }
        // SAFETY: checked not NULL; writable by the caller's contract.
        unsafe { n.write(got.len()) };
        Ok(())
    })
}

/// Blocks until everything submitted so far has completed (`aclrtSynchronizeStream`,
/// `cudaStreamSynchronize`), at most `timeout_ns` (`DAVINCI_WAIT_FOREVER`: no limit);
/// reaps the completions (kept for `davinci_stream_poll` unless the stream drops them).
///
/// Returns 0; -ETIMEDOUT; -EINTR (a signal handler installed without `SA_RESTART` ran:
/// call again to go on waiting); the first failed task's errno since the last synchronize;
/// -EIO if the device stopped the stream (the message says which task and why).
///
/// # Safety
/// Threads: any (holds the stream's lock while it waits). `stream` a live handle.
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_synchronize(
    stream: *const davinci_stream,
    timeout_ns: u64,
) -> c_int {
    guard("davinci_stream_synchronize", || {
        // SAFETY: the caller's contract.
        let s = unsafe { stream_ref(stream) }?;
        s.lock()?
            .stream
            .synchronize(Duration::from_nanos(timeout_ns))?;
        Ok(())
    })
}

/// The driver's handle of the stream (as `davinci-smi` and messages show it) into `*out`.
///
/// # Safety
/// Threads: any (without the stream's lock: it does not wait for a blocking call). `stream`
/// a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_handle(
    stream: *const davinci_stream,
    out: *mut u32,
) -> c_int {
    guard("davinci_stream_handle", || {
        // SAFETY: the caller's contract.
        let s = unsafe { stream_ref(stream) }?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", s.handle) }
    })
}

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
        unsafe { ffi::put_opt(task_id, id.get()) };
        Ok(())
    })
}
