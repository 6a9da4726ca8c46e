//! What every class of the native module shares: shim errors as Python exceptions (the
//! classes of `davinci/_errors.py`), checked timeouts, the wait loop that releases the GIL
//! and handles signals between slices, and [`Slot`], the closable cell of every class.
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
        e.op(),
        e.message(),
        &e.to_string(),
    )
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
                            format!("not done within {t:?}: {}", e.message()),
                        )));
                    }
                }
            }
            Err(e) => return Err(err(e)),
        }
    }
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
