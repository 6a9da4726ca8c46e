//! Host callbacks of `Stream.launch_host_func`: the shim calls a stream's callback when its
//! NOP is reaped, inside the reaping call (`synchronize`, `poll`, a submit waiting for room,
//! or the stream's drop), on a thread that holds the stream's lock and, here, not the GIL.
//! Running Python there could deadlock (a thread holding the GIL waiting for the stream's
//! lock; a callback using its own stream), so the shim's callback only queues the Python
//! function with its result, and [`run`] calls the queued functions, with the GIL, once the
//! reaping call has let go of the stream: before that call returns to Python.
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex, PoisonError};

use davinci_shim as shim;
use pyo3::prelude::*;

use crate::base::err;

/// The callbacks of one stream whose time has come, in the order the shim called them.
pub(crate) type Ready = Arc<Mutex<Vec<(Py<PyAny>, shim::Result<()>)>>>;

/// The shim's callback for the Python function `f`: it queues `f` on `ready`.
pub(crate) fn queue_on(ready: &Ready, f: Py<PyAny>) -> impl FnOnce(shim::Result<()>) + Send {
    let ready = Arc::clone(ready);
    move |r| {
        ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((f, r));
    }
}

/// Calls the queued functions (the GIL held), each with None when its point was reached or
/// the `DavinciError` saying why it never will be (`TaskError`, ECANCELED: the stream was
/// closed first). An exception a callback raises goes to `sys.unraisablehook` (as an
/// exception in `__del__` does) and the next callback runs.
pub(crate) fn run(py: Python<'_>, ready: &Ready) {
    loop {
        let batch = std::mem::take(&mut *ready.lock().unwrap_or_else(PoisonError::into_inner));
        if batch.is_empty() {
            return;
        }
        for (f, r) in batch {
            let arg: Py<PyAny> = match r {
                Ok(()) => py.None(),
                Err(e) => err(e).into_value(py).into_any(),
            };
            if let Err(e) = f.call1(py, (arg,)) {
                e.write_unraisable(py, Some(f.bind(py)));
            }
        }
    }
}
