//! Tasks: `Task` (a descriptor checked on the host, holding the buffers it names) and the
//! builders of `davinci.task` (`fill`, `copy`, `add`, `nop`) over `Buffer`s and `Region`s.
#![forbid(unsafe_code)]

use std::sync::Arc;

use crate::base::{type_error, type_name, OrRaise};
use crate::dtype::Dtype;
use crate::memory::{Buffer, Mem};
use crate::region::Region;
use davinci_shim::{self as shim, task};
use pyo3::prelude::*;

/// A task checked on the host, holding the buffers it names until it has run.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Task {
    pub(crate) inner: shim::Task,
}

#[pymethods]
impl Task {
    #[getter]
    fn user_data(&self) -> u64 {
        self.inner.user_data()
    }

    /// The same task with this `user_data` (completions carry it).
    fn with_user_data(&self, user_data: u64) -> Task {
        Task {
            inner: self.inner.clone().with_user_data(user_data),
        }
    }

    /// The opcode's name (`"ADD"`).
    #[getter]
    fn opcode(&self) -> String {
        opcode_name(self.inner.desc().opcode)
    }

    fn __repr__(&self) -> String {
        format!(
            "<davinci.Task {} user_data={:#x}>",
            self.opcode(),
            self.inner.user_data()
        )
    }
}

/// An opcode's name as docs/abi.md spells it (`"EVENT_WAIT"`), or its number.
pub(crate) fn opcode_name(code: u8) -> String {
    let Some(op) = shim::Opcode::from_u8(code) else {
        return code.to_string();
    };
    let mut out = String::new();
    for (i, ch) in format!("{op:?}").chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

/// A task operand: a `Buffer` or a `Region`.
pub(crate) struct Operand {
    mem: Arc<Mem>,
    range: Option<(usize, usize)>,
}

impl Operand {
    pub(crate) fn from_py(op: &'static str, name: &str, v: &Bound<'_, PyAny>) -> PyResult<Operand> {
        if let Ok(b) = v.cast::<Buffer>() {
            return Ok(Operand {
                mem: b.get().get(op)?,
                range: None,
            });
        }
        if let Ok(r) = v.cast::<Region>() {
            let r = r.get();
            return Ok(Operand {
                mem: r.mem.clone(),
                range: Some((r.start, r.stop)),
            });
        }
        Err(type_error(
            op,
            name,
            format!(
                "must be a davinci.Buffer or a Buffer.region(...), not {}",
                type_name(v)
            ),
        ))
    }

    pub(crate) fn region(&self) -> shim::Result<shim::Region<'_>> {
        self.mem.region(self.range)
    }
}

/// FILL: every 4-byte word of `dst` set to `value` as `dtype` (a string, a numpy dtype or
/// scalar type). Without `dtype` the value implies it: a numpy scalar its own type
/// (`np.float32(0.5)`: f32, `np.int32(-1)`: i32), a float f32, a negative int i32, another
/// int u32.
#[pyfunction]
#[pyo3(signature = (dst, value, dtype = None, user_data = 0))]
pub fn task_fill(
    dst: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    user_data: u64,
) -> PyResult<Task> {
    const OP: &str = "task.fill";
    let d = match Dtype::from_opt(OP, dtype)? {
        Some(d) => d,
        None => Dtype::implied_by(OP, value)?,
    };
    let pattern = d.bits(OP, "value", value)?;
    let dst = Operand::from_py(OP, "dst", dst)?;
    let t = task::fill(dst.region().or_raise()?, pattern).or_raise()?;
    Ok(Task {
        inner: t.with_user_data(user_data),
    })
}

/// COPY: `src`'s bytes into `dst` (the same length).
#[pyfunction]
#[pyo3(signature = (dst, src, user_data = 0))]
pub fn task_copy(dst: &Bound<'_, PyAny>, src: &Bound<'_, PyAny>, user_data: u64) -> PyResult<Task> {
    const OP: &str = "task.copy";
    let (dst, src) = (
        Operand::from_py(OP, "dst", dst)?,
        Operand::from_py(OP, "src", src)?,
    );
    let t = task::copy(dst.region().or_raise()?, src.region().or_raise()?).or_raise()?;
    Ok(Task {
        inner: t.with_user_data(user_data),
    })
}

/// ADD: `dst = a + b` elementwise, as `dtype` ("f32", "i32", "u32", numpy's names, dtypes
/// and scalar types).
#[pyfunction]
#[pyo3(signature = (dst, a, b, dtype = None, user_data = 0))]
pub fn task_add(
    dst: &Bound<'_, PyAny>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    user_data: u64,
) -> PyResult<Task> {
    const OP: &str = "task.add";
    let d = Dtype::from_opt(OP, dtype)?.unwrap_or(Dtype::F32);
    let (dst, a, b) = (
        Operand::from_py(OP, "dst", dst)?,
        Operand::from_py(OP, "a", a)?,
        Operand::from_py(OP, "b", b)?,
    );
    let (rd, ra, rb) = (
        dst.region().or_raise()?,
        a.region().or_raise()?,
        b.region().or_raise()?,
    );
    let t = match d {
        Dtype::F32 => task::add::<f32>(rd, ra, rb),
        Dtype::I32 => task::add::<i32>(rd, ra, rb),
        Dtype::U32 => task::add::<u32>(rd, ra, rb),
    }
    .or_raise()?;
    Ok(Task {
        inner: t.with_user_data(user_data),
    })
}

/// NOP: a task that does nothing (a marker in the stream).
#[pyfunction]
#[pyo3(signature = (user_data = 0))]
pub fn task_nop(user_data: u64) -> Task {
    Task {
        inner: task::nop().with_user_data(user_data),
    }
}
