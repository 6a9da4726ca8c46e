//! `davinci._davinci`: the native module of the Python package `davinci` (python/davinci/),
//! the safe runtime API of `davinci-shim` for Python, built by maturin as an abi3 extension
//! (CPython 3.9 and later). The classes here are what the package exports; the pure-Python
//! part adds the exception classes (`davinci/_errors.py`, built from [`err`]), the
//! buffer-protocol view of a buffer (`davinci/_view.py`, over [`memory::HostHold`]) and the
//! `davinci.task` module.
//!
//! Every call that can block (submit waiting for room, synchronize, event waits, opening a
//! daemon's device) releases the GIL; waits run in slices of [`SLICE`] with
//! `Python::check_signals` between them, so Ctrl-C raises `KeyboardInterrupt` within a slice.
//! No `unsafe` here: the shim's API is safe, and the view's address is a plain integer that
//! only `ctypes` (in `_view.py`) dereferences.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_shim::{Errno, Error};
use pyo3::prelude::*;

mod device;
mod memory;
mod stream;

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

/// The native module.
#[pymodule]
fn _davinci(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("SLICE_SECONDS", SLICE.as_secs_f64())?;
    m.add_class::<device::Device>()?;
    m.add_class::<device::Context>()?;
    m.add_class::<device::Event>()?;
    m.add_class::<device::Recorded>()?;
    m.add_class::<stream::Stream>()?;
    m.add_class::<stream::Completion>()?;
    m.add_class::<memory::Buffer>()?;
    m.add_class::<memory::Region>()?;
    m.add_class::<memory::MemPool>()?;
    m.add_class::<memory::HostHold>()?;
    m.add_class::<memory::Task>()?;
    m.add_function(wrap_pyfunction!(memory::task_fill, m)?)?;
    m.add_function(wrap_pyfunction!(memory::task_copy, m)?)?;
    m.add_function(wrap_pyfunction!(memory::task_add, m)?)?;
    m.add_function(wrap_pyfunction!(memory::task_nop, m)?)?;
    m.add_function(wrap_pyfunction!(device::errno_name, m)?)?;
    Ok(())
}
