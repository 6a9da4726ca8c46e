//! `davinci._davinci`: the native module of the Python package `davinci` (bindings/python/davinci/),
//! the safe runtime API of `davinci-shim` for Python, built by maturin for the CPython (3.9
//! or later) it is installed into. The classes here are what the package exports; the
//! pure-Python part adds the exception classes (`davinci/_errors.py`, built from
//! [`base::err`]) and the `davinci.task` module.
//!
//! Every call that can block (submit waiting for room, synchronize, event waits, opening a
//! daemon's device) releases the GIL; waits run in slices of [`base::SLICE`] with
//! `Python::check_signals` between them, so Ctrl-C raises `KeyboardInterrupt` within a slice.
//! `unsafe` is in one place: `Buffer`'s buffer protocol (`memory.rs`, FFI with CPython's
//! `Py_buffer`); every other module forbids it.
#![deny(unsafe_code)]

use pyo3::prelude::*;

mod base;
mod callback;
mod ccl;
mod device;
mod dtype;
mod kernels;
mod memory;
mod pool;
mod region;
mod shared_event;
mod stream;
mod task;
mod trace;

/// The native module.
#[pymodule]
fn _davinci(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("SLICE_SECONDS", base::SLICE.as_secs_f64())?;
    m.add_class::<device::Device>()?;
    m.add_class::<device::Context>()?;
    m.add_class::<stream::Event>()?;
    m.add_class::<shared_event::ImportedEvent>()?;
    m.add_class::<stream::Recorded>()?;
    m.add_class::<stream::Stream>()?;
    m.add_class::<stream::Completion>()?;
    m.add_class::<memory::Buffer>()?;
    m.add_class::<region::Region>()?;
    m.add_class::<pool::MemPool>()?;
    m.add_class::<region::HostHold>()?;
    m.add_class::<task::Task>()?;
    m.add_class::<ccl::Comm>()?;
    m.add_class::<ccl::Group>()?;
    m.add_function(wrap_pyfunction!(task::task_fill, m)?)?;
    m.add_function(wrap_pyfunction!(task::task_copy, m)?)?;
    m.add_function(wrap_pyfunction!(task::task_add, m)?)?;
    m.add_function(wrap_pyfunction!(task::task_nop, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::task_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::task_elementwise, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::task_reduce, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::task_softmax, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::task_norm, m)?)?;
    m.add_function(wrap_pyfunction!(kernels::task_fill_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(device::errno_name, m)?)?;
    m.add_function(wrap_pyfunction!(trace::_trace_begin, m)?)?;
    m.add_function(wrap_pyfunction!(trace::_trace_end, m)?)?;
    m.add_function(wrap_pyfunction!(device::device_count, m)?)?;
    m.add_function(wrap_pyfunction!(device::visible_devices, m)?)?;
    Ok(())
}
