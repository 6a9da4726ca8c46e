//! What every class of the native module shares: shim errors as Python exceptions (the
//! classes of `davinci/_errors.py`, their texts in Python's words: [`pythonize`]), argument
//! checks (`TypeError` for a wrong type, `ValueError` for a wrong value, each naming the
//! argument), checked timeouts, the wait loop that releases the GIL and handles signals
//! between slices, and [`Slot`], the closable cell of every class.
#![forbid(unsafe_code)]

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use davinci_shim::{Errno, Error};
use pyo3::prelude::*;

/// Longest a blocking call waits with the GIL released before it looks for signals.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// A shim error as the Python exception `davinci._errors` makes of it (a `DavinciError`
/// subclass chosen by the errno, carrying `errno`, `op`, `message`).
pub(crate) fn err(e: Error) -> PyErr {
    raise(
        e.errno().map(Errno::code),
        &pythonize(e.op()),
        &pythonize(e.message()),
        &pythonize(&e.to_string()),
    )
}

/// A shim text in the words a Python caller reads: Rust paths as the Python API spells them
/// (`Context::create_stream` -> `Context.create_stream`, `task::add` -> `task.add`,
/// `PoolBuffer::write` -> `Buffer.write`, `Region::range` -> `Buffer.region`), Rust's range
/// Debug as a half-open range (`Included(0)..Excluded(8)` -> `[0, 8)`), and no
/// `" (os error N)"` suffixes (the errno is the exception's `errno` and its name is in the
/// text already).
pub(crate) fn pythonize(text: &str) -> String {
    let mut s = text.replace("davinci_shim::", "");
    for (rust, py) in [
        ("PoolBuffer::", "Buffer::"),
        ("DeviceBuffer::", "Buffer::"),
        ("Region::range", "Buffer::region"),
        ("Device::open_path", "Device"),
        ("Device::open", "Device"),
        ("Device::from_env", "Device"),
        ("MemPool::with_options", "MemPool"),
        ("Device::import", "Device::import_buffer"),
        ("Context::create_stream_with", "Context::create_stream"),
    ] {
        s = s.replace(rust, py);
    }
    let s = ranges(&strip_os_error(&s));
    // `Type::method` and `module::function` -> `Type.method`, `module.function`.
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(i) = rest.find("::") {
        let before = rest[..i].chars().next_back();
        let after = rest[i + 2..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        out.push_str(&rest[..i]);
        out.push_str(if ident(before) && ident(after) {
            "."
        } else {
            "::"
        });
        rest = &rest[i + 2..];
    }
    out.push_str(rest);
    out
}

/// `text` without `" (os error N)"` (std::io::Error's Display suffix).
fn strip_os_error(text: &str) -> String {
    const MARK: &str = " (os error ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(MARK) {
        let tail = &rest[i + MARK.len()..];
        let digits = tail
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(tail.len());
        out.push_str(&rest[..i]);
        if digits > 0 && tail[digits..].starts_with(')') {
            rest = &tail[digits + 1..];
        } else {
            out.push_str(MARK);
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// Rust's Debug of a range's bounds (`Included(a)..Excluded(b)`, `Unbounded`) as a range
/// in the usual notation: `[a, b)`, `[a, b]`, `[a, end)`.
fn ranges(text: &str) -> String {
    // One bound at the start of `s`: (its number or None for Unbounded, inclusive, length).
    fn bound(s: &str) -> Option<(Option<&str>, bool, usize)> {
        if s.starts_with("Unbounded") {
            return Some((None, false, "Unbounded".len()));
        }
        let (inclusive, open) = if s.starts_with("Included(") {
            (true, "Included(".len())
        } else if s.starts_with("Excluded(") {
            (false, "Excluded(".len())
        } else {
            return None;
        };
        let close = s[open..].find(')')?;
        let n = &s[open..open + close];
        n.chars()
            .all(|c| c.is_ascii_digit())
            .then_some((Some(n), inclusive, open + close + 1))
    }
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        if let Some((a, a_in, la)) = bound(rest) {
            if let Some((b, b_in, lb)) = rest[la..].strip_prefix("..").and_then(bound) {
                let open = if a.is_some() && !a_in { '(' } else { '[' };
                let close = if b_in { ']' } else { ')' };
                out.push(open);
                out.push_str(a.unwrap_or("0"));
                out.push_str(", ");
                out.push_str(b.unwrap_or("end"));
                out.push(close);
                i += la + 2 + lb;
                continue;
            }
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The `davinci._errors` exception for an errno (any, not only the ABI's), what failed, what
/// was wrong, and the whole text.
fn raise(errno: Option<i32>, op: &str, message: &str, text: &str) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("davinci._errors")
            .and_then(|m| m.getattr("_from_shim")?.call1((errno, op, message, text)));
        match made {
            Ok(exc) => PyErr::from_value(exc),
            Err(_) => pyo3::exceptions::PyOSError::new_err((errno, text.to_string())),
        }
    })
}

/// `err` for a `Result`.
pub(crate) trait OrRaise<T> {
    /// The value, or the error as a Python exception.
    fn or_raise(self) -> PyResult<T>;
}

impl<T> OrRaise<T> for davinci_shim::Result<T> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(err)
    }
}

/// `EINVAL` naming the operation, as an exception.
pub(crate) fn invalid(op: &'static str, msg: impl Into<String>) -> PyErr {
    err(Error::new(Errno::EINVAL, op, msg))
}

/// `TypeError`: argument `name` of `op` has the wrong type.
pub(crate) fn type_error(op: &str, name: &str, msg: impl std::fmt::Display) -> PyErr {
    pyo3::exceptions::PyTypeError::new_err(format!("{op}: {name}: {msg}"))
}

/// A size, offset or index argument: an `int` (anything with `__index__`) from 0 up;
/// `TypeError` for another type, `InvalidArgumentError` (a `ValueError`) for a negative or
/// too large one, naming the argument.
pub(crate) fn size(op: &'static str, name: &str, v: &Bound<'_, PyAny>) -> PyResult<usize> {
    let Ok(n) = v.call_method0("__index__") else {
        return Err(type_error(
            op,
            name,
            format!("must be an int, not {}", type_name(v)),
        ));
    };
    if let Ok(n) = n.extract::<usize>() {
        return Ok(n);
    }
    let negative = n.lt(0).unwrap_or(false);
    Err(invalid(
        op,
        if negative {
            format!("{name} is {n}: it must be 0 or more")
        } else {
            format!("{name} is {n}: it must be less than 2**{}", usize::BITS)
        },
    ))
}

/// `size` for an optional argument (None stays None).
pub(crate) fn opt_size(
    op: &'static str,
    name: &str,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<usize>> {
    match v {
        Some(v) if !v.is_none() => size(op, name, v).map(Some),
        _ => Ok(None),
    }
}

/// The name of `v`'s type, for messages.
pub(crate) fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string())
}

/// `EBADF` (`davinci.ClosedError`): the object was closed.
pub(crate) fn closed(op: &'static str, what: &str) -> PyErr {
    const EBADF: i32 = 9;
    let msg = format!("the {what} is closed");
    raise(Some(EBADF), op, &msg, &format!("{op} failed: EBADF: {msg}"))
}

/// A timeout in seconds (`None`: no limit), checked.
pub(crate) fn timeout(op: &'static str, secs: Option<f64>) -> PyResult<Option<Duration>> {
    match secs {
        None => Ok(None),
        Some(s) => Duration::try_from_secs_f64(s).map(Some).map_err(|_| {
            invalid(
                op,
                format!("timeout {s} is not a number of seconds >= 0 (None: wait forever)"),
            )
        }),
    }
}

/// Runs the wait `f(slice)` in slices of at most [`SLICE`], the GIL released, until it
/// succeeds, fails otherwise than by timing out or being interrupted, or `total` has passed
/// (`ETIMEDOUT`). Between slices pending signals are handled: Ctrl-C raises
/// `KeyboardInterrupt` (the wait can be resumed; nothing is lost).
pub(crate) fn wait_sliced<F>(
    py: Python<'_>,
    op: &'static str,
    total: Option<Duration>,
    mut f: F,
) -> PyResult<()>
where
    F: FnMut(Duration) -> davinci_shim::Result<()> + Send,
{
    let start = Instant::now();
    loop {
        let left = total.map(|t| t.saturating_sub(start.elapsed()));
        let slice = left.map_or(SLICE, |l| l.min(SLICE));
        match py.detach(|| f(slice)) {
            Ok(()) => return Ok(()),
            Err(e) if e.is(Errno::ETIMEDOUT) || e.is(Errno::EINTR) => {
                py.check_signals()?;
                if let (Some(t), Some(l)) = (total, left) {
                    if l <= SLICE && e.is(Errno::ETIMEDOUT) {
                        return Err(err(Error::new(
                            Errno::ETIMEDOUT,
                            op,
                            format!(
                                "not done within the {} s timeout: {}",
                                t.as_secs_f64(),
                                without_slice_time(e.message())
                            ),
                        )));
                    }
                }
            }
            Err(e) => return Err(err(e)),
        }
    }
}

/// What the shim said when the last slice of a wait timed out, without the slice's own
/// length (the caller's timeout is what the Python text states): "N of stream S's tasks had
/// not completed when the 48.9ms timeout ran out" loses " when the ... timeout ran out",
/// "event E did not reach value V within 48.9ms: ..." loses " within 48.9ms". Another text
/// is quoted as what the last slice said.
fn without_slice_time(msg: &str) -> String {
    const RAN_OUT: &str = " timeout ran out";
    if let (Some(a), Some(b)) = (msg.find(" when the "), msg.find(RAN_OUT)) {
        if a < b {
            return format!("{}{}", &msg[..a], &msg[b + RAN_OUT.len()..]);
        }
    }
    if let Some(a) = msg.find(" within ") {
        if let Some(len) = msg[a + " within ".len()..].find(':') {
            return format!("{}{}", &msg[..a], &msg[a + " within ".len() + len..]);
        }
    }
    format!(
        "(the last of its {} ms waits said: {msg})",
        SLICE.as_millis()
    )
}

/// A value that `close()` takes away: what every closable class holds.
pub(crate) struct Slot<T>(Mutex<Option<T>>);

impl<T> Slot<T> {
    pub(crate) fn new(v: T) -> Slot<T> {
        Slot(Mutex::new(Some(v)))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<T>> {
        // Nothing panics while it is locked; a poisoned lock holds a consistent value.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops the value (closing it, unless something else still holds it).
    pub(crate) fn close(&self) {
        let v = self.lock().take();
        drop(v);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().is_none()
    }
}

impl<T: Clone> Slot<T> {
    /// A clone of the value, or `EBADF` naming `what` once closed.
    pub(crate) fn get(&self, op: &'static str, what: &str) -> PyResult<T> {
        self.lock().clone().ok_or_else(|| closed(op, what))
    }
}
