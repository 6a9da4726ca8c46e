//! The boundary itself: every entry point runs its body through [`guard`] (no panic crosses
//! into C: a caught panic becomes `-EIO` with a message), failures become a negative errno
//! plus the thread-local message `davinci_last_error()` returns, and raw pointers from C are
//! turned into references only here, each NULL checked first.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use davinci_shim::Error;

use crate::words::c_words;

/// A failed call: a positive errno and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fail {
    pub(crate) errno: c_int,
    pub(crate) msg: String,
}

impl Fail {
    pub(crate) fn new(errno: c_int, msg: impl Into<String>) -> Fail {
        Fail {
            errno,
            msg: msg.into(),
        }
    }

    /// `EINVAL` with a message.
    pub(crate) fn inval(msg: impl Into<String>) -> Fail {
        Fail::new(libc::EINVAL, msg)
    }

    /// The same failure, its message prefixed with `what` (`device "/dev/x": ...`).
    pub(crate) fn context(mut self, what: impl std::fmt::Display) -> Fail {
        self.msg = format!("{what}: {}", self.msg);
        self
    }
}

/// A shim error keeps its errno (`EIO` when it has none) and its text: the errno's name and
/// the driver's message, with what failed when that is a driver command (`ALLOC_MEMORY
/// failed: ENOMEM: ...`); a Rust method's name is left out (the C function that failed heads
/// the message), and the rest is put in C's words ([`c_words`]).
impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let text = if e.op().contains("::") {
            match e.errno() {
                Some(x) => format!("{}: {}", x.name(), e.message()),
                None => e.message().to_string(),
            }
        } else {
            e.to_string()
        };
        Fail {
            errno: e.errno().map_or(libc::EIO, |x| x.code()),
            msg: c_words(&text),
        }
    }
}

pub(crate) type Res<T = ()> = Result<T, Fail>;

thread_local! {
    /// The message of this thread's latest failed call.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Notes `msg` as this thread's latest error.
pub(crate) fn set_last_error(msg: &str) {
    // A NUL inside a message would cut it short in C: shown as a space instead.
    let text = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // During thread teardown the slot may be gone; the errno still reaches the caller.
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = text);
}

/// This thread's latest error message (empty before any failure).
pub(crate) fn last_error_ptr() -> *const c_char {
    static EMPTY: &CStr = c"";
    LAST_ERROR
        .try_with(|l| l.borrow().as_ptr())
        .unwrap_or(EMPTY.as_ptr())
}

/// A panic's message, if it carried one.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// Runs the body of entry point `func`: 0 on success; on failure the negative errno, with
/// `func: message` as this thread's last error. A panic is caught here (it must not unwind
/// into C) and reported as `-EIO`.
pub(crate) fn guard(func: &str, body: impl FnOnce() -> Res) -> c_int {
    guard_value(func, || body().map(|()| 0))
}

/// [`guard`] for a body that returns a non-negative count on success.
pub(crate) fn guard_value(func: &str, body: impl FnOnce() -> Res<c_int>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => {
            set_last_error(&format!("{func}: {}", c_words(&f.msg)));
            -f.errno.abs().max(1)
        }
        Err(payload) => {
            set_last_error(&format!(
                "{func}: internal error in libdavinci (a Rust panic, caught: {}); the handles \
                 it used may be inconsistent: destroy them",
                panic_text(payload.as_ref())
            ));
            -libc::EIO
        }
    }
}

/// Runs a destructor body; a panic is swallowed (a destructor returns nothing), its message
/// kept as the last error.
pub(crate) fn guard_void(func: &str, body: impl FnOnce()) {
    let _ = guard(func, || {
        body();
        Ok(())
    });
}

/// The handle `p` points to; `EINVAL` naming `what` for NULL.
///
/// # Safety
/// `p` is NULL or points to a live value of `T` that no one mutates during `'a`.
pub(crate) unsafe fn get<'a, T>(p: *const T, what: &str) -> Res<&'a T> {
    // SAFETY: the caller's contract: NULL (checked by as_ref) or a live, unaliased-for-writes T.
    unsafe { p.as_ref() }.ok_or_else(|| Fail::inval(format!("{what} is NULL")))
}

/// The handle `p` points to, for exclusive use; `EINVAL` naming `what` for NULL.
///
/// # Safety
/// `p` is NULL or points to a live value of `T` that nothing else uses during `'a`.
pub(crate) unsafe fn get_mut<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    // SAFETY: the caller's contract: NULL (checked by as_mut) or a live T used by nobody else.
    unsafe { p.as_mut() }.ok_or_else(|| Fail::inval(format!("{what} is NULL")))
}

/// Writes `v` to the out-parameter `p`; `EINVAL` naming `what` for NULL.
///
/// # Safety
/// `p` is NULL or valid for a write of `T` (it need not be initialised).
pub(crate) unsafe fn put<T>(p: *mut T, what: &str, v: T) -> Res {
    if p.is_null() {
        return Err(Fail::inval(format!("{what} (out-parameter) is NULL")));
    }
    // SAFETY: not NULL; the caller's contract makes it valid for a write of T.
    unsafe { p.write(v) };
    Ok(())
}

/// Writes `v` to `p` unless `p` is NULL (an optional out-parameter).
///
/// # Safety
/// As [`put`].
pub(crate) unsafe fn put_opt<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: not NULL; the caller's contract makes it valid for a write of T.
        unsafe { p.write(v) };
    }
}

/// Checks the out-parameter `p` of a constructor before the work is done (so that nothing
/// is created only to be leaked), then writes the new handle there.
pub(crate) struct Out<T>(*mut *mut T);

impl<T> Out<T> {
    pub(crate) fn new(p: *mut *mut T, what: &str) -> Res<Out<T>> {
        if p.is_null() {
            return Err(Fail::inval(format!("{what} (out-parameter) is NULL")));
        }
        Ok(Out(p))
    }

    /// Boxes `v` and stores the pointer: the caller owns it (its `_destroy` frees it).
    ///
    /// # Safety
    /// The pointer given to [`new`](Self::new) is valid for a write of a pointer.
    pub(crate) unsafe fn set(self, v: T) {
        // SAFETY: checked not NULL in `new`; the caller's contract makes it writable.
        unsafe { self.0.write(Box::into_raw(Box::new(v))) };
    }
}

/// Takes back a handle made by [`Out::set`] and drops it; NULL does nothing.
///
/// # Safety
/// `p` is NULL or a pointer [`Out::set`] stored, not freed before, and no longer in use.
pub(crate) unsafe fn free<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: the caller's contract: it came from Box::into_raw and is freed only here.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// A C string argument; `EINVAL` naming `what` for NULL or text that is not UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string alive during `'a`.
pub(crate) unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Res<&'a str> {
    if p.is_null() {
        return Err(Fail::inval(format!("{what} is NULL")));
    }
    // SAFETY: not NULL; the caller's contract makes it a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| Fail::inval(format!("{what} {s:?} is not UTF-8")))
}

/// `len` bytes at `p` as a slice (NULL allowed only with `len` 0).
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes during `'a`.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Res<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::inval(format!("{what} is NULL with {len} bytes")));
    }
    check_len(len, what)?;
    // SAFETY: not NULL, len checked against isize::MAX; the caller's contract covers the rest.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// `len` bytes at `p` as a mutable slice (NULL allowed only with `len` 0).
///
/// # Safety
/// `p` is NULL or valid for writes of `len` bytes during `'a`, used by nothing else.
pub(crate) unsafe fn bytes_mut<'a>(p: *mut u8, len: usize, what: &str) -> Res<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Fail::inval(format!("{what} is NULL with {len} bytes")));
    }
    check_len(len, what)?;
    // SAFETY: not NULL, len checked against isize::MAX; the caller's contract covers the rest.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// `n` elements at `p` (NULL allowed only with `n` 0).
///
/// # Safety
/// `p` is NULL or valid for reads of `n` elements during `'a`.
pub(crate) unsafe fn slice<'a, T>(p: *const T, n: usize, what: &str) -> Res<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::inval(format!("{what} is NULL with {n} elements")));
    }
    if n.checked_mul(size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(Fail::inval(format!("{what}: {n} elements is no array")));
    }
    // SAFETY: not NULL, size checked; the caller's contract covers validity.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Writes `text` into `buf` as `snprintf` does (at most `len - 1` bytes, then a NUL; nothing
/// for `len` 0) and returns its whole length.
///
/// # Safety
/// `buf` is NULL (then `len` must be 0) or writable for `len` bytes.
pub(crate) unsafe fn write_text(buf: *mut c_char, len: usize, text: &str) -> Res<c_int> {
    // SAFETY: the caller's contract: writable for len bytes.
    let out = unsafe { bytes_mut(buf.cast::<u8>(), len, "buf") }?;
    if let Some(room) = out.len().checked_sub(1) {
        let n = text.len().min(room);
        out[..n].copy_from_slice(&text.as_bytes()[..n]);
        out[n] = 0;
    }
    c_int::try_from(text.len()).map_err(|_| Fail::new(libc::EOVERFLOW, "text too long"))
}

fn check_len(len: usize, what: &str) -> Res {
    if len > isize::MAX as usize {
        return Err(Fail::inval(format!(
            "{what}: {len} bytes is larger than any object"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: last_error_ptr returns a NUL-terminated string owned by this thread.
        unsafe { CStr::from_ptr(last_error_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_failure_is_a_negative_errno_and_a_message() {
        assert_eq!(guard("f", || Ok(())), 0);
        assert_eq!(
            guard("davinci_x", || Err(Fail::new(libc::ENOSPC, "full"))),
            -libc::ENOSPC
        );
        assert_eq!(last(), "davinci_x: full");
        // A success leaves the message alone.
        assert_eq!(guard("g", || Ok(())), 0);
        assert_eq!(last(), "davinci_x: full");
    }

    #[test]
    fn a_panic_is_caught_and_becomes_eio() {
        let r = guard("davinci_boom", || panic!("the test's panic"));
        assert_eq!(r, -libc::EIO);
        let m = last();
        assert!(
            m.starts_with("davinci_boom: internal error") && m.contains("the test's panic"),
            "{m}"
        );
        let r = guard_value("davinci_boom2", || panic!("{}", String::from("owned")));
        assert_eq!(r, -libc::EIO);
        assert!(last().contains("owned"));
        guard_void("davinci_boom3", || panic!("in a destructor"));
        assert!(last().contains("in a destructor"));
    }

    #[test]
    fn null_pointers_are_einval_naming_the_argument() {
        // SAFETY: NULL is allowed by every helper's contract.
        unsafe {
            assert_eq!(
                get::<u32>(std::ptr::null(), "dev").unwrap_err().msg,
                "dev is NULL"
            );
            assert!(put::<u32>(std::ptr::null_mut(), "out", 1).is_err());
            assert!(c_str(std::ptr::null(), "path").is_err());
            assert!(bytes(std::ptr::null(), 4, "src").is_err());
            assert_eq!(bytes(std::ptr::null(), 0, "src").unwrap(), &[] as &[u8]);
            let e = bytes(std::ptr::dangling::<u8>(), usize::MAX, "src").unwrap_err();
            assert_eq!(e.errno, libc::EINVAL);
            assert!(Out::<u32>::new(std::ptr::null_mut(), "out").is_err());
            free::<u32>(std::ptr::null_mut());
        }
    }

    #[test]
    fn messages_keep_the_shims_errno_and_text() {
        let e = Error::new(davinci_shim::Errno::ENODEV, "open", "nothing there");
        let f = Fail::from(e).context("device \"/dev/x\"");
        assert_eq!(f.errno, libc::ENODEV);
        assert_eq!(
            f.msg,
            "device \"/dev/x\": open failed: ENODEV: nothing there"
        );
        // A Rust method's name is left out; the C function heads the message.
        let e = Error::new(
            davinci_shim::Errno::ERANGE,
            "PoolBuffer::write",
            "out (Stream::poll)",
        );
        assert_eq!(Fail::from(e).msg, "ERANGE: out (davinci_stream_poll)");
        assert_eq!(Fail::from(Error::other("x", "y")).errno, libc::EIO);
    }
}
