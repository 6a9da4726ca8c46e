//! Errors and versions (`davinci_last_error`, `davinci_runtime_version`), devices
//! (`davinci_device`: open, info) and contexts (`davinci_context`).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};

use davinci_shim::{Context, Device, DeviceInfo, ShareMode};

use crate::ffi::{self, c_str, get, guard, guard_value, put, Fail, Out};

/// This thread's message about the latest call that failed on it: the function, the errno's
/// name, what was wrong (the driver's message when it gave one). Empty before any failure;
/// a successful call leaves it unchanged.
///
/// Threads: any (each thread has its own message). The string stays valid until the next
/// failing libdavinci call on this thread; copy it to keep it.
#[no_mangle]
pub extern "C" fn davinci_last_error() -> *const c_char {
    ffi::last_error_ptr()
}

/// The version of the library linked (`MAJOR << 16 | MINOR << 8 | PATCH`), to compare with
/// the header's `DAVINCI_RUNTIME_VERSION`: a program refuses a library of another major.
///
/// Threads: any.
#[no_mangle]
pub extern "C" fn davinci_runtime_version() -> u32 {
    crate::DAVINCI_RUNTIME_VERSION
}

/// An open device (`aclrtSetDevice`, `cudaSetDevice`): made by `davinci_device_open`, freed
/// by `davinci_device_destroy`. Everything made from it keeps the open alive.
pub struct davinci_device {
    pub(crate) dev: Device,
}

/// A context: groups streams and events (events work between the streams of their own
/// context). Made by `davinci_context_create`, freed by `davinci_context_destroy`.
pub struct davinci_context {
    pub(crate) ctx: Context,
}

/// Opens a device as a client: `path` is `"/dev/davinciN"` (the kernel driver),
/// `"mock:SOCKET"` (a `davinci-mockd` device) or `"embedded"` (a new mock device inside this
/// process); NULL opens what the environment variable `DAVINCI_DEVICE` names (any of those),
/// else `/dev/davinci0`. The new handle goes to `*out`.
///
/// Returns 0; -EINVAL (a malformed path, `out` NULL), -ENODEV (nothing answers there), -EPERM,
/// -EBUSY (the device is exclusive and held by another client: the message names it),
/// -EPROTO (a driver of another ABI major). The message names the path.
///
/// # Safety
/// Threads: any. `path` is NULL or a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_open(
    path: *const c_char,
    out: *mut *mut davinci_device,
) -> c_int {
    guard("davinci_device_open", || {
        let out = Out::new(out, "out")?;
        let dev = if path.is_null() {
            Device::from_env().map_err(|e| {
                Fail::from(e).context(format_args!(
                    "device {:?} (DAVINCI_DEVICE, or the default)",
                    davinci_shim::device_path_from_env()
                        .unwrap_or_else(|| davinci_shim::DEFAULT_DEVICE.into())
                ))
            })?
        } else {
            // SAFETY: the caller's contract: a NUL-terminated string.
            let path = unsafe { c_str(path, "path") }?;
            Device::open(path)
                .map_err(|e| Fail::from(e).context(format_args!("device {path:?}")))?
        };
        // SAFETY: `out` was checked by Out::new; the caller's contract makes it writable.
        unsafe { out.set(davinci_device { dev }) };
        Ok(())
    })
}

/// Closes this handle of the device. Contexts, streams, events and buffers made from it keep
/// the open alive until they are destroyed too. NULL does nothing.
///
/// # Safety
/// Threads: not while another thread uses `dev`. `dev` is NULL or a handle not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_destroy(dev: *mut davinci_device) {
    // SAFETY: the caller's contract: NULL or a live handle, no longer used.
    ffi::guard_void("davinci_device_destroy", || unsafe { ffi::free(dev) });
}

/// The device's GET_INFO as read at open (ABI version, features, limits, memory) into
/// `*out` (`struct davinci_device_info` of `<davinci/uapi.h>`).
///
/// # Safety
/// Threads: any. `dev` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_get_info(
    dev: *const davinci_device,
    out: *mut DeviceInfo,
) -> c_int {
    guard("davinci_device_get_info", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", *d.dev.info()) }
    })
}

/// A fresh GET_INFO (memory in use, clients attached, share mode now) into `*out`.
///
/// # Safety
/// Threads: any. `dev` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_query_info(
    dev: *const davinci_device,
    out: *mut DeviceInfo,
) -> c_int {
    guard("davinci_device_query_info", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let info = d.dev.query_info()?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", info) }
    })
}

/// Which device and which client, in words (`davinci-mockd device 0 at mock:/run/...
/// (client 3)`), for messages: written into `buf` as `snprintf` does (truncated to
/// `len - 1` bytes and NUL-terminated; `buf` may be NULL when `len` is 0).
///
/// Returns the length of the whole text (without the NUL: a value `>= len` means it was
/// truncated), or a negative errno.
///
/// # Safety
/// Threads: any. `dev` a live handle; `buf` NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_describe(
    dev: *const davinci_device,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    guard_value("davinci_device_describe", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let text = d.dev.to_string();
        // SAFETY: the caller's contract: writable for len bytes.
        let out = unsafe { ffi::bytes_mut(buf.cast::<u8>(), len, "buf") }?;
        if let Some(room) = out.len().checked_sub(1) {
            let n = text.len().min(room);
            out[..n].copy_from_slice(&text.as_bytes()[..n]);
            out[n] = 0;
        }
        c_int::try_from(text.len()).map_err(|_| Fail::new(libc::EOVERFLOW, "text too long"))
    })
}

/// This open's client id (what `davinci-smi info -t usage` shows for it), into `*out`;
/// -ENOTSUP from a driver older than ABI 1.1.
///
/// # Safety
/// Threads: any. `dev` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_client_id(
    dev: *const davinci_device,
    out: *mut u32,
) -> c_int {
    guard("davinci_device_client_id", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let id = d.dev.client_id().ok_or_else(|| {
            Fail::new(
                libc::ENOTSUP,
                "the driver does not report client ids (ABI < 1.1)",
            )
        })?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", id) }
    })
}

/// SET_DEVICE_SHARE: `DAVINCI_SHARE_EXCLUSIVE` (one client) or `DAVINCI_SHARE_SHARED`
/// (many isolated clients: what exporting memory to another process needs). Admins only:
/// -EPERM otherwise; -EINVAL for another mode.
///
/// # Safety
/// Threads: any. `dev` a live handle.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_set_share_mode(
    dev: *const davinci_device,
    mode: u32,
) -> c_int {
    guard("davinci_device_set_share_mode", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let m = ShareMode::from_u32(mode).ok_or_else(|| {
            Fail::inval(format!(
                "mode {mode} is neither DAVINCI_SHARE_EXCLUSIVE nor DAVINCI_SHARE_SHARED"
            ))
        })?;
        d.dev.set_share_mode(m)?;
        Ok(())
    })
}

/// Another client of the same embedded mock device (`dev` opened as `"embedded"`) into
/// `*out`, as a second process would be on a real device; the device must be shared for it
/// (-EBUSY naming the holder otherwise). -ENODEV for another backend: open its path again.
///
/// # Safety
/// Threads: any. `dev` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_attach(
    dev: *const davinci_device,
    out: *mut *mut davinci_device,
) -> c_int {
    guard("davinci_device_attach", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let mock = d.dev.mock_device().ok_or_else(|| {
            Fail::new(
                libc::ENODEV,
                format!(
                    "{} is not the embedded mock device: open its path again",
                    d.dev
                ),
            )
        })?;
        let dev = Device::attach(mock)?;
        // SAFETY: checked by Out::new; writable by the caller's contract.
        unsafe { out.set(davinci_device { dev }) };
        Ok(())
    })
}

/// Creates a context on `dev` (`aclrtCreateContext`, `cuCtxCreate`) into `*out`.
///
/// # Safety
/// Threads: any. `dev` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_context_create(
    dev: *const davinci_device,
    out: *mut *mut davinci_context,
) -> c_int {
    guard("davinci_context_create", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let ctx = d.dev.create_context()?;
        // SAFETY: checked by Out::new; writable by the caller's contract.
        unsafe { out.set(davinci_context { ctx }) };
        Ok(())
    })
}

/// Frees this handle of the context; the driver destroys the context once its streams and
/// events are destroyed too. NULL does nothing.
///
/// # Safety
/// Threads: not while another thread uses `ctx`. `ctx` is NULL or a handle not yet destroyed.
#[no_mangle]
pub unsafe extern "C" fn davinci_context_destroy(ctx: *mut davinci_context) {
    // SAFETY: the caller's contract: NULL or a live handle, no longer used.
    ffi::guard_void("davinci_context_destroy", || unsafe { ffi::free(ctx) });
}
