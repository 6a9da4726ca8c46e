//! Events for C: `davinci_event` (a point in a stream others wait for) and `davinci_record`
//! (one record of it: its value, its device time).
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::time::Duration;

use davinci_shim::{Event, Recorded};

use crate::device::davinci_context;
use crate::ffi::{self, get, guard, put, Out};
use crate::stream::{davinci_stream, stream_ref};

/// An event (`aclrtEvent`, `cudaEvent_t`): on the device a 64-bit value that each record
/// raises by one. Made by `davinci_event_create`, released by `davinci_event_destroy`: the
/// device's event is destroyed once this handle, every `davinci_record` of it and every queued
/// record or wait naming it are gone (`cudaEventDestroy`'s rule), so destroying it right after
/// recording it or queueing a wait on it is safe.
pub struct davinci_event {
    ev: Event,
}

/// One record of an event (`davinci_event_record`): the value it sets, and once its stream
/// reaped it, the device time it happened. Waits on it wait for exactly this record, however
/// often the event was recorded since. It keeps its event alive: its waits and times work
/// after `davinci_event_destroy`. Freed by `davinci_record_destroy`.
pub struct davinci_record {
    rec: Recorded,
}

/// Creates an event in `ctx` (`aclrtCreateEvent`, `cudaEventCreate`) into `*out`.
///
/// # Safety
/// Threads: any. `ctx` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_event_create(
    ctx: *const davinci_context,
    out: *mut *mut davinci_event,
) -> c_int {
    guard("davinci_event_create", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let c = unsafe { get(ctx, "ctx") }?;
        let ev = c.ctx.create_event()?;
        // SAFETY: checked by Out::new; writable by the caller's contract.
        unsafe { out.set(davinci_event { ev }) };
        Ok(())
    })
}

/// Releases the event handle. The device's event goes once no `davinci_record` of it and no
/// queued record or wait naming it is left (tasks are reaped by `davinci_stream_synchronize`,
/// `davinci_stream_poll`, or destroying their stream). NULL does nothing.
///
/// # Safety
/// Threads: not while another thread uses `event`. `event` is NULL or a handle not yet
/// destroyed.
#[no_mangle]
pub unsafe extern "C" fn davinci_event_destroy(event: *mut davinci_event) {
    // SAFETY: the caller's contract: NULL or a live handle, no longer used.
    ffi::guard_void("davinci_event_destroy", || unsafe { ffi::free(event) });
}

/// The driver's handle of the event (what a raw `DAVINCI_OP_EVENT_WAIT` or
/// `DAVINCI_OP_EVENT_RECORD` descriptor names in `handle`, for `davinci_task_from_desc`)
/// into `*out`.
///
/// # Safety
/// Threads: any. `event` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_event_handle(event: *const davinci_event, out: *mut u32) -> c_int {
    guard("davinci_event_handle", || {
        // SAFETY: the caller's contract.
        let e = unsafe { get(event, "event") }?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", e.ev.handle()) }
    })
}

/// Records the event on `stream` (`aclrtRecordEvent`, `cudaEventRecord`): once the stream
/// reaches this point the event's value becomes the record's. The record goes to `*out`
/// (NULL: not wanted; the event's own waits still see it). -EINVAL if the stream is of
/// another context.
///
/// # Safety
/// Threads: any (the stream's lock). `event`, `stream` live handles; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_event_record(
    event: *const davinci_event,
    stream: *const davinci_stream,
    out: *mut *mut davinci_record,
) -> c_int {
    guard("davinci_event_record", || {
        // SAFETY: the caller's contract.
        let (e, s) = unsafe { (get(event, "event")?, stream_ref(stream)?) };
        let rec = e.ev.record(&mut s.lock()?.stream)?;
        if !out.is_null() {
            let out = Out::new(out, "out")?;
            // SAFETY: not NULL; writable by the caller's contract.
            unsafe { out.set(davinci_record { rec }) };
        }
        Ok(())
    })
}

/// Makes `stream` wait on the device until `event` reaches the value of its latest record
/// (`aclrtStreamWaitEvent`, `cudaStreamWaitEvent`); nothing is waited for if it was never
/// recorded. -EINVAL if they are of different contexts.
///
/// # Safety
/// Threads: any (the stream's lock). `stream`, `event` live handles.
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_wait_event(
    stream: *const davinci_stream,
    event: *const davinci_event,
) -> c_int {
    guard("davinci_stream_wait_event", || {
        // SAFETY: the caller's contract.
        let (s, e) = unsafe { (stream_ref(stream)?, get(event, "event")?) };
        s.lock()?.stream.wait_event(&e.ev)?;
        Ok(())
    })
}

/// Blocks until the event's latest record has happened on the device
/// (`aclrtSynchronizeEvent`), at most `timeout_ns` (`DAVINCI_WAIT_FOREVER`: no limit).
/// -ETIMEDOUT saying the value waited for and the one reached; -EIO at once if the stream
/// that was to record it was stopped by the device; -EINTR for a signal.
///
/// # Safety
/// Threads: any. `event` a live handle.
#[no_mangle]
pub unsafe extern "C" fn davinci_event_synchronize(
    event: *const davinci_event,
    timeout_ns: u64,
) -> c_int {
    guard("davinci_event_synchronize", || {
        // SAFETY: the caller's contract.
        let e = unsafe { get(event, "event") }?;
        e.ev.synchronize(Duration::from_nanos(timeout_ns))?;
        Ok(())
    })
}

/// Whether the latest record has happened, without blocking (`cudaEventQuery`), into
/// `*done`.
///
/// # Safety
/// Threads: any. `event` a live handle; `done` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_event_query(
    event: *const davinci_event,
    done: *mut bool,
) -> c_int {
    guard("davinci_event_query", || {
        // SAFETY: the caller's contract.
        let e = unsafe { get(event, "event") }?;
        let v = e.ev.query()?;
        // SAFETY: the caller's contract.
        unsafe { put(done, "done", v) }
    })
}

/// The value of the latest record handed to a stream (0: never recorded) into `*out`.
///
/// # Safety
/// Threads: any. `event` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_event_recorded(
    event: *const davinci_event,
    out: *mut u64,
) -> c_int {
    guard("davinci_event_recorded", || {
        // SAFETY: the caller's contract.
        let e = unsafe { get(event, "event") }?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", e.ev.recorded()) }
    })
}

/// Frees the record: its event goes with it if its handle was destroyed and no other record
/// or queued task holds it. NULL does nothing.
///
/// # Safety
/// Threads: not while another thread uses `record`. `record` is NULL or a handle not yet
/// destroyed.
#[no_mangle]
pub unsafe extern "C" fn davinci_record_destroy(record: *mut davinci_record) {
    // SAFETY: the caller's contract: NULL or a live handle, no longer used.
    ffi::guard_void("davinci_record_destroy", || unsafe { ffi::free(record) });
}

/// The value this record sets its event to into `*out`.
///
/// # Safety
/// Threads: any. `record` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_record_value(
    record: *const davinci_record,
    out: *mut u64,
) -> c_int {
    guard("davinci_record_value", || {
        // SAFETY: the caller's contract.
        let r = unsafe { get(record, "record") }?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", r.rec.value()) }
    })
}

/// Makes `stream` wait on the device for exactly this record (a later record of the same
/// event does not make it wait longer). -EINVAL for a stream of another context.
///
/// # Safety
/// Threads: any (the stream's lock). `stream`, `record` live handles.
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_wait_record(
    stream: *const davinci_stream,
    record: *const davinci_record,
) -> c_int {
    guard("davinci_stream_wait_record", || {
        // SAFETY: the caller's contract.
        let (s, r) = unsafe { (stream_ref(stream)?, get(record, "record")?) };
        s.lock()?.stream.wait_recorded(&r.rec)?;
        Ok(())
    })
}

/// Blocks until the event reached this record's value, at most `timeout_ns`. Errors as
/// `davinci_event_synchronize`.
///
/// # Safety
/// Threads: any. `record` a live handle.
#[no_mangle]
pub unsafe extern "C" fn davinci_record_synchronize(
    record: *const davinci_record,
    timeout_ns: u64,
) -> c_int {
    guard("davinci_record_synchronize", || {
        // SAFETY: the caller's contract.
        let r = unsafe { get(record, "record") }?;
        r.rec.synchronize(Duration::from_nanos(timeout_ns))?;
        Ok(())
    })
}

/// Whether the event reached this record's value, without blocking, into `*done`.
///
/// # Safety
/// Threads: any. `record` a live handle; `done` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_record_query(
    record: *const davinci_record,
    done: *mut bool,
) -> c_int {
    guard("davinci_record_query", || {
        // SAFETY: the caller's contract.
        let r = unsafe { get(record, "record") }?;
        let v = r.rec.query()?;
        // SAFETY: the caller's contract.
        unsafe { put(done, "done", v) }
    })
}

/// Device time from `start` to `end` in ns (`cudaEventElapsedTime`) into `*ns`: the
/// difference of their completions' timestamps. Both must have completed and been reaped by
/// their streams (`davinci_stream_synchronize` or `_poll`): else -EAGAIN naming the one
/// that was not. -EINVAL if `end` happened first or they are of different device opens.
///
/// # Safety
/// Threads: any. `start`, `end` live handles; `ns` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_record_elapsed_ns(
    start: *const davinci_record,
    end: *const davinci_record,
    ns: *mut u64,
) -> c_int {
    guard("davinci_record_elapsed_ns", || {
        // SAFETY: the caller's contract.
        let (a, b) = unsafe { (get(start, "start")?, get(end, "end")?) };
        let d = Recorded::elapsed(&a.rec, &b.rec)?;
        let v = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the caller's contract.
        unsafe { put(ns, "ns", v) }
    })
}

/// Another client's event, imported into a context of this one (`davinci_event_import`,
/// ABI 1.5): its waits are for the exporter's values (`davinci_stream_wait_imported`,
/// `davinci_imported_event_synchronize`); only the exporter records it. When the exporter
/// destroys the event (or its process ends), every wait on it fails with -ECANCELED. Freed by
/// `davinci_imported_event_destroy` (the import goes once no queued wait names it).
pub struct davinci_imported_event {
    imp: davinci_shim::ImportedEvent,
}

/// Shares an event with other clients of the same device, across processes
/// (`cudaIpcGetEventHandle`, HCCL's notify; ABI 1.5, `DAVINCI_FEAT_SHARED_EVENTS`): the token
/// written to `*token` lets them `davinci_event_import` it. `uid` and `client_id` as
/// `davinci_buffer_export`'s. Exporting again with the same grant gives the same token.
///
/// Returns 0; -EBUSY (exported already to someone else); -ENOTTY (a driver before 1.5).
///
/// # Safety
/// Threads: any. `event` a live handle; `token` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_event_export(
    event: *const davinci_event,
    uid: u32,
    client_id: u32,
    token: *mut u64,
) -> c_int {
    guard("davinci_event_export", || {
        // SAFETY: the caller's contract.
        let e = unsafe { get(event, "event") }?;
        let t = e.ev.export(crate::memory::export_to(uid, client_id))?;
        // SAFETY: the caller's contract.
        unsafe { put(token, "token", t.0) }
    })
}

/// Imports the event `token` names (`davinci_event_export` in another process) into `ctx`,
/// into `*out` (`cudaIpcOpenEventHandle`).
///
/// Returns 0; -ENOENT (no event export this client may import: unknown, destroyed, granted
/// to another user or client); -EBUSY (imported already by this client); -ENOSPC.
///
/// # Safety
/// Threads: any. `ctx` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_event_import(
    ctx: *const davinci_context,
    token: u64,
    out: *mut *mut davinci_imported_event,
) -> c_int {
    guard("davinci_event_import", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let c = unsafe { get(ctx, "ctx") }?;
        let imp = c.ctx.import_event(davinci_shim::ExportToken(token))?;
        // SAFETY: checked by Out::new; writable by the caller's contract.
        unsafe { out.set(davinci_imported_event { imp }) };
        Ok(())
    })
}

/// Releases the import handle (the import goes once no queued wait names it). NULL does
/// nothing.
///
/// # Safety
/// Threads: not while another thread uses `imp`. `imp` NULL or a handle not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn davinci_imported_event_destroy(imp: *mut davinci_imported_event) {
    // SAFETY: the caller's contract: NULL or a live handle, no longer used.
    ffi::guard_void("davinci_imported_event_destroy", || unsafe {
        ffi::free(imp)
    });
}

/// Makes `stream` wait on the device until the imported event reaches `value` (the
/// consumer's side of a hand-off between processes). If the exporter destroys the event
/// first, the wait completes with -ECANCELED and the stream goes on. -EINVAL if the import
/// is of another context.
///
/// # Safety
/// Threads: any (the stream's lock). `stream`, `imp` live handles.
#[no_mangle]
pub unsafe extern "C" fn davinci_stream_wait_imported(
    stream: *const davinci_stream,
    imp: *const davinci_imported_event,
    value: u64,
) -> c_int {
    guard("davinci_stream_wait_imported", || {
        // SAFETY: the caller's contract.
        let (s, i) = unsafe { (stream_ref(stream)?, get(imp, "imp")?) };
        s.lock()?.stream.wait_imported(&i.imp, value)?;
        Ok(())
    })
}

/// Blocks until the imported event reaches `value`, at most `timeout_ns`
/// (`DAVINCI_WAIT_FOREVER`: no limit). -ETIMEDOUT; -ECANCELED once the exporter destroyed the
/// event; -EIO if its stream that was to record the value was stopped.
///
/// # Safety
/// Threads: any. `imp` a live handle.
#[no_mangle]
pub unsafe extern "C" fn davinci_imported_event_synchronize(
    imp: *const davinci_imported_event,
    value: u64,
    timeout_ns: u64,
) -> c_int {
    guard("davinci_imported_event_synchronize", || {
        // SAFETY: the caller's contract.
        let i = unsafe { get(imp, "imp") }?;
        i.imp
            .synchronize_value(value, Duration::from_nanos(timeout_ns))?;
        Ok(())
    })
}

/// The exporter's value now, into `*out`. -ECANCELED once the exporter destroyed the event.
///
/// # Safety
/// Threads: any. `imp` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_imported_event_value(
    imp: *const davinci_imported_event,
    out: *mut u64,
) -> c_int {
    guard("davinci_imported_event_value", || {
        // SAFETY: the caller's contract.
        let i = unsafe { get(imp, "imp") }?;
        let v = i.imp.value()?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", v) }
    })
}
