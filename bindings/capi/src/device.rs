//! Errors and versions (`davinci_last_error`, `davinci_runtime_version`), devices
//! (`davinci_device`: open, info) and contexts (`davinci_context`).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};
use std::time::Duration;

use davinci_shim::{Context, Device, DevicePath, DeviceSource, ShareMode};

use crate::ffi::{self, c_str, get, guard, guard_value, put, Fail, Out};
use crate::info::davinci_device_props;

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
    /// The timeline `davinci_trace_start` began, until `davinci_trace_stop`.
    pub(crate) trace: std::sync::Mutex<Option<davinci_shim::TraceSession>>,
}

/// A context: groups streams and events (events work between the streams of their own
/// context). Made by `davinci_context_create`, freed by `davinci_context_destroy`.
pub struct davinci_context {
    pub(crate) ctx: Context,
}

/// Opens a device as a client: `path` is `"/dev/davinciN"` (the kernel driver),
/// `"mock:SOCKET"` (a `davinci-mockd` device) or `"embedded"` (a new mock device inside this
/// process). NULL opens the device a program that names none gets, by the rule Rust and
/// Python follow too (`davinci_default_device` says which it is): what the environment
/// variable `DAVINCI_DEVICE` names (any of those), else this node's device (`/dev/davinci0`,
/// else `davinci0.sock` in davinci-mockd's default socket directory), else a new embedded
/// mock device. The new handle goes to `*out`; `davinci_device_describe` says which device
/// it is.
///
/// Returns 0; -EINVAL (a malformed path, `out` NULL), -ENODEV (nothing answers there), -EPERM,
/// -EBUSY (the device is exclusive and held by another client: the message names it),
/// -EPROTO (a driver of another ABI major). The message names the path, and for NULL where
/// it came from.
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
            // The shim's message names the path and where it came from.
            Device::from_env()?
        } else {
            // SAFETY: the caller's contract: a NUL-terminated string.
            let path = unsafe { c_str(path, "path") }?;
            Device::open(path)
                .map_err(|e| Fail::from(e).context(format_args!("device {path:?}")))?
        };
        // SAFETY: `out` was checked by Out::new; the caller's contract makes it writable.
        unsafe {
            out.set(davinci_device {
                dev,
                trace: Default::default(),
            })
        };
        Ok(())
    })
}

/// Opens device `index` of this process's numbering (`cudaSetDevice(index)`,
/// `aclrtSetDevice(index)`): the `index`th entry of the visible-device list
/// (`DAVINCI_VISIBLE_DEVICES`, else `ASCEND_VISIBLE_DEVICES`: indices of the node's
/// `davinciN` or device paths, comma-separated), or, with no list, of the node's devices in
/// index order. Into `*out`.
///
/// Returns 0, -ENODEV past the last visible device, -EINVAL for a malformed list (the
/// message names the entry), or the open's errors.
///
/// # Safety
/// Threads: any (not while another thread changes the environment). `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_open_index(
    index: u32,
    out: *mut *mut davinci_device,
) -> c_int {
    guard("davinci_device_open_index", || {
        let out = Out::new(out, "out")?;
        let dev = Device::open_index(index as usize)?;
        // SAFETY: `out` was checked by Out::new; the caller's contract makes it writable.
        unsafe {
            out.set(davinci_device {
                dev,
                trace: Default::default(),
            })
        };
        Ok(())
    })
}

/// How many devices this process sees (`cudaGetDeviceCount`, `aclrtGetDeviceCount`): the
/// visible-device list's entries, or the node's devices; into `*count`. Opens none.
///
/// Returns 0 or -EINVAL for a malformed list or `DAVINCI_DEVICE`.
///
/// # Safety
/// Threads: any (not while another thread changes the environment). `count` is writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_count(count: *mut u32) -> c_int {
    guard("davinci_device_count", || {
        let n = Device::count()?;
        // SAFETY: the caller's contract: writable (NULL is refused).
        unsafe { ffi::put(count, "count", u32::try_from(n).unwrap_or(u32::MAX)) }
    })
}

/// `davinci_default_device`'s `*source`: `DAVINCI_DEVICE` named the device.
pub const DAVINCI_DEVICE_FROM_ENV: u32 = 1;
/// `davinci_default_device`'s `*source`: this node's device (`/dev/davinci0`, else
/// davinci-mockd's `davinci0.sock` in its default socket directory).
pub const DAVINCI_DEVICE_FROM_NODE: u32 = 2;
/// `davinci_default_device`'s `*source`: nothing named a device and the node has none: a new
/// embedded mock device.
pub const DAVINCI_DEVICE_FROM_NOTHING: u32 = 3;
/// `davinci_default_device`'s `*source`: the first entry of the visible-device list
/// (`DAVINCI_VISIBLE_DEVICES`, else `ASCEND_VISIBLE_DEVICES`).
pub const DAVINCI_DEVICE_FROM_VISIBLE: u32 = 4;

/// The device `davinci_device_open(NULL, ...)` opens now, without opening it: its path
/// (`"embedded"`, `"/dev/davinci0"`, `"mock:SOCKET"`) into `buf` as `snprintf` does
/// (truncated to `len - 1` bytes and NUL-terminated; `buf` may be NULL when `len` is 0),
/// and where the rule found it into `*source` (`DAVINCI_DEVICE_FROM_*`; NULL: not wanted).
///
/// Returns the length of the whole path (a value `>= len` means it was truncated); -EINVAL
/// for a malformed `DAVINCI_DEVICE` (the message quotes it).
///
/// # Safety
/// Threads: any (not while another thread changes the environment). `buf` NULL or writable
/// for `len` bytes; `source` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_default_device(
    buf: *mut c_char,
    len: usize,
    source: *mut u32,
) -> c_int {
    guard_value("davinci_default_device", || {
        let (path, from) = DevicePath::default_device()?;
        let code = match from {
            DeviceSource::Env => DAVINCI_DEVICE_FROM_ENV,
            DeviceSource::Node => DAVINCI_DEVICE_FROM_NODE,
            DeviceSource::Embedded => DAVINCI_DEVICE_FROM_NOTHING,
            DeviceSource::Visible => DAVINCI_DEVICE_FROM_VISIBLE,
        };
        // SAFETY: the caller's contract: writable for len bytes.
        let n = unsafe { ffi::write_text(buf, len, &path.to_string()) }?;
        // SAFETY: the caller's contract: NULL or writable.
        unsafe { ffi::put_opt(source, code) };
        Ok(n)
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

/// Blocks until every task submitted so far on every stream made from this device handle's
/// open has completed (`cudaDeviceSynchronize`, `aclrtSynchronizeDevice`), at most
/// `timeout_ns` in all (`DAVINCI_WAIT_FOREVER`: no limit). It takes no stream's lock and reaps
/// nothing: completions stay on their streams for `davinci_stream_poll`, and a failed task's
/// errno is still reported by its stream's `davinci_stream_synchronize`. Tasks submitted
/// meanwhile are not waited for.
///
/// Returns 0; -ETIMEDOUT; -EIO naming a stream the device stopped; -EINTR for a signal.
///
/// # Safety
/// Threads: any, while other threads use the streams. `dev` a live handle.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_synchronize(
    dev: *const davinci_device,
    timeout_ns: u64,
) -> c_int {
    guard("davinci_device_synchronize", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        d.dev.synchronize(Duration::from_nanos(timeout_ns))?;
        Ok(())
    })
}

/// The device's GET_INFO as read at open (ABI version, features, limits, memory) into
/// `*out`.
///
/// # Safety
/// Threads: any. `dev` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_get_info(
    dev: *const davinci_device,
    out: *mut davinci_device_props,
) -> c_int {
    guard("davinci_device_get_info", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", d.dev.info().into()) }
    })
}

/// A fresh GET_INFO (memory in use, clients attached, share mode now) into `*out`.
///
/// # Safety
/// Threads: any. `dev` a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_query_info(
    dev: *const davinci_device,
    out: *mut davinci_device_props,
) -> c_int {
    guard("davinci_device_query_info", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let info = d.dev.query_info()?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", (&info).into()) }
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
        // SAFETY: the caller's contract: writable for len bytes.
        unsafe { ffi::write_text(buf, len, &d.dev.to_string()) }
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
        let client_id = d.dev.client_id().ok_or_else(|| {
            Fail::new(
                libc::ENOTSUP,
                "the driver does not report client ids (ABI < 1.1)",
            )
        })?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", client_id) }
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
        unsafe {
            out.set(davinci_device {
                dev,
                trace: Default::default(),
            })
        };
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
