//! Host views for C: `davinci_host_view`, a buffer's host mapping lent out as a pointer and a
//! length, with a hold that keeps the buffer allocated and mapped until it is released (the
//! shim's `HostMapping`; the Python package's `Buffer.view()` is the same thing).
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};

use davinci_shim::{DeviceMem, HostMapping};

use crate::ffi::{self, get, guard, Out};
use crate::memory::{davinci_buffer, Mem};

/// A direct view of a buffer's bytes in this process (`davinci_buffer_map`): a pointer
/// (`davinci_host_view_data`) and a length (`davinci_host_view_size`) into the memory the
/// device reads and writes, with no copy, like CUDA's mapped pinned memory. Released by
/// `davinci_host_view_release`.
///
/// The rules:
/// * **The view keeps the buffer.** While it lives, the memory stays allocated and mapped,
///   even after `davinci_buffer_free` (which then frees it, or returns the pool block, at
///   the view's release); `davinci_buffer_pending_uses` counts it. So the pointer is valid
///   exactly until `davinci_host_view_release`.
/// * **Device writes race host accesses until synchronize.** The device reads and writes
///   the bytes while tasks that name the buffer run: read a result only after
///   `davinci_stream_synchronize` (or `davinci_event_synchronize` on a record after it) has
///   returned, and write an input before submitting the task that reads it. Bytes read
///   meanwhile may be old or new; the mapping itself stays valid.
/// * **A revoked import faults.** An imported buffer (`davinci_device_import`) whose exporter
///   freed its buffer is revoked: on the kernel driver, touching its view then raises
///   `SIGBUS`. The exporter keeps its buffer until the importers are done (and a view the
///   exporter holds keeps the exporter's buffer, so its imports stay too).
pub struct davinci_host_view {
    map: HostMapping,
}

/// A view of all of `buf`'s bytes where they are mapped in this process (every buffer is:
/// nothing is copied, no driver call is made) into `*out`, holding the buffer until
/// `davinci_host_view_release`. Any number of views of one buffer may live at once; they
/// all point to the same bytes. The pointer is page-aligned for a `davinci_buffer_alloc` or
/// an import, and aligned to the pool's `align` (at least 64 bytes) for a pool block.
///
/// Returns 0; -EINVAL (`buf` or `out` NULL).
///
/// # Safety
/// Threads: any. `buf` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_buffer_map(
    buf: *const davinci_buffer,
    out: *mut *mut davinci_host_view,
) -> c_int {
    guard("davinci_buffer_map", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let b = unsafe { get(buf, "buf") }?;
        let map = match &b.mem {
            Mem::Alloc(m) => m.host_mapping(),
            Mem::Pool(m) => m.host_mapping(),
        };
        // SAFETY: checked by Out::new; writable by the caller's contract.
        unsafe { out.set(davinci_host_view { map }) };
        Ok(())
    })
}

/// The address of the view's first byte in this process, readable and writable for
/// `davinci_host_view_size(view)` bytes until the view is released (see `davinci_host_view`
/// for when the device's accesses race yours). NULL when `view` is NULL (and
/// `davinci_last_error()` says so).
///
/// # Safety
/// Threads: any. `view` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn davinci_host_view_data(view: *const davinci_host_view) -> *mut c_void {
    let mut addr = 0;
    guard("davinci_host_view_data", || {
        // SAFETY: the caller's contract: NULL (an error) or a live handle.
        addr = unsafe { get(view, "view") }?.map.addr();
        Ok(())
    });
    // The address came from the mapping's pointer (exposed by its cast to usize in the shim).
    std::ptr::with_exposed_provenance_mut(addr)
}

/// The view's length in bytes: the whole buffer's (`davinci_buffer_size`). 0 when `view` is
/// NULL (and `davinci_last_error()` says so); never 0 for a view.
///
/// # Safety
/// Threads: any. `view` NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn davinci_host_view_size(view: *const davinci_host_view) -> usize {
    let mut len = 0;
    guard("davinci_host_view_size", || {
        // SAFETY: the caller's contract: NULL (an error) or a live handle.
        len = unsafe { get(view, "view") }?.map.len();
        Ok(())
    });
    len
}

/// Releases the view: its pointer must not be used any more. When it was the buffer's last
/// hold (the buffer freed, no task queued on it, no other view), the memory is freed, or the
/// pool block returned, now. NULL does nothing.
///
/// # Safety
/// Threads: not while another thread uses `view`. `view` is NULL or a handle not yet
/// released.
#[no_mangle]
pub unsafe extern "C" fn davinci_host_view_release(view: *mut davinci_host_view) {
    // SAFETY: the caller's contract: NULL or a live handle, no longer used.
    ffi::guard_void("davinci_host_view_release", || unsafe { ffi::free(view) });
}
