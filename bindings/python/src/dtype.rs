//! Element types (`Dtype`: f32, i32, u32) as Python spells them: strings (`"f32"`,
//! `"float32"`, numpy's `"<f4"`), numpy dtype objects (`np.dtype("float32")`, `x.dtype`) and
//! numpy scalar types (`np.float32`); and values of them: Python numbers and numpy scalars,
//! checked (`TypeError` for a value of the wrong kind, `ValueError` for one out of range).
#![forbid(unsafe_code)]

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyString};

use crate::base::{invalid, type_error, type_name};

/// Element types of typed reads, writes, fills and adds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dtype {
    F32,
    I32,
    U32,
}

/// What the accepted dtypes are, for messages.
const ACCEPTED: &str = "\"f32\", \"i32\" or \"u32\" (numpy's names and dtypes too: \
                        \"float32\", np.int32, x.dtype)";

impl Dtype {
    /// The short names and numpy's names of the three types.
    fn named(s: &str) -> Option<Dtype> {
        match s {
            "f32" | "float32" | "f" => Some(Dtype::F32),
            "i32" | "int32" | "i" => Some(Dtype::I32),
            "u32" | "uint32" | "I" => Some(Dtype::U32),
            _ => None,
        }
    }

    /// The short name (`"f32"`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::I32 => "i32",
            Dtype::U32 => "u32",
        }
    }

    /// The `dtype` argument of `op`: a string, a numpy dtype or a numpy scalar type.
    /// `TypeError` for anything else, `ValueError` for a type that is not one of the three.
    pub(crate) fn from_py(op: &'static str, v: &Bound<'_, PyAny>) -> PyResult<Dtype> {
        if let Ok(s) = v.cast::<PyString>() {
            let s = s.to_cow()?;
            if let Some(d) = Self::named(&s) {
                return Ok(d);
            }
            // numpy's other spellings of the same types ("<f4", "single", "uint32").
            return match numpy_name(v) {
                Some(n) if Self::named(&n).is_some() => Ok(Self::named(&n).unwrap_or(Dtype::F32)),
                Some(n) => Err(invalid(
                    op,
                    format!("dtype {s:?} is numpy's {n}, which is not supported: use {ACCEPTED}"),
                )),
                None => Err(invalid(
                    op,
                    format!("dtype {s:?} is not a dtype: use {ACCEPTED}"),
                )),
            };
        }
        if v.is_instance_of::<PyFloat>() || v.cast::<PyBytes>().is_ok() || v.is_none() {
            return Err(not_a_dtype(op, v));
        }
        match numpy_name(v) {
            Some(n) => Self::named(&n)
                .ok_or_else(|| invalid(op, format!("dtype {n} is not supported: use {ACCEPTED}"))),
            None => Err(not_a_dtype(op, v)),
        }
    }

    /// `from_py` for an optional argument.
    pub(crate) fn from_opt(
        op: &'static str,
        v: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Dtype>> {
        match v {
            Some(v) if !v.is_none() => Self::from_py(op, v).map(Some),
            _ => Ok(None),
        }
    }

    /// The dtype a fill value implies when none is given: a numpy scalar's own type if it is
    /// one of the three; else f32 for a float (Python's or numpy's), i32 for a negative int,
    /// u32 for another int.
    pub(crate) fn implied_by(op: &'static str, value: &Bound<'_, PyAny>) -> PyResult<Dtype> {
        if let Ok(dt) = value.getattr("dtype") {
            if let Some(d) = numpy_name(&dt).and_then(|n| Self::named(&n)) {
                return Ok(d);
            }
        }
        if value.cast::<PyString>().is_ok() || value.cast::<PyBytes>().is_ok() {
            return Err(not_a_number(op, "value", value));
        }
        match value.call_method0("__index__") {
            Ok(i) => Ok(if i.lt(0).unwrap_or(false) {
                Dtype::I32
            } else {
                Dtype::U32
            }),
            Err(_) if value.is_instance_of::<PyFloat>() || value.hasattr("__float__")? => {
                Ok(Dtype::F32)
            }
            Err(_) => Err(not_a_number(op, "value", value)),
        }
    }

    /// The Python number `v` (argument `name` of `op`) as this type's 4 bytes: a float or an
    /// int for f32 (numpy's too), an int (anything with `__index__`) for i32 and u32.
    pub(crate) fn bits(self, op: &'static str, name: &str, v: &Bound<'_, PyAny>) -> PyResult<u32> {
        if v.cast::<PyString>().is_ok() || v.cast::<PyBytes>().is_ok() {
            return Err(not_a_number(op, name, v));
        }
        match self {
            Dtype::F32 => {
                let x: f64 = v.extract().map_err(|_| not_a_number(op, name, v))?;
                let f = x as f32;
                if x.is_finite() && !f.is_finite() {
                    return Err(invalid(
                        op,
                        format!(
                            "{name} {x} is out of float32's range (largest {:e})",
                            f32::MAX
                        ),
                    ));
                }
                Ok(f.to_bits())
            }
            Dtype::I32 | Dtype::U32 => {
                let Ok(i) = v.call_method0("__index__") else {
                    return Err(type_error(
                        op,
                        name,
                        format!(
                            "{} is a {}: dtype {} takes an int",
                            v.repr().map_or_else(|_| "?".into(), |r| r.to_string()),
                            type_name(v),
                            self.name()
                        ),
                    ));
                };
                let (lo, hi) = match self {
                    Dtype::I32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
                    _ => (0, i64::from(u32::MAX)),
                };
                match i.extract::<i64>() {
                    // Two's complement: an i32's bits as the u32 the device stores.
                    Ok(x) if (lo..=hi).contains(&x) => Ok(x as u32),
                    _ => Err(invalid(
                        op,
                        format!("{name} {i} is out of {}'s range [{lo}, {hi}]", self.name()),
                    )),
                }
            }
        }
    }

    /// 4 bytes as a Python number of this type.
    pub(crate) fn value<'py>(self, py: Python<'py>, b: [u8; 4]) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self {
            Dtype::F32 => f32::from_ne_bytes(b).into_pyobject(py)?.into_any(),
            Dtype::I32 => i32::from_ne_bytes(b).into_pyobject(py)?.into_any(),
            Dtype::U32 => u32::from_ne_bytes(b).into_pyobject(py)?.into_any(),
        })
    }

    /// The struct/memoryview format character.
    pub(crate) fn format(self) -> &'static str {
        match self {
            Dtype::F32 => "f",
            Dtype::I32 => "i",
            Dtype::U32 => "I",
        }
    }
}

/// numpy's name for `v` as a dtype (`np.dtype(v).name`), if numpy is installed and takes it.
pub(crate) fn numpy_name(v: &Bound<'_, PyAny>) -> Option<String> {
    let np = v.py().import("numpy").ok()?;
    let dt = np.getattr("dtype").ok()?.call1((v,)).ok()?;
    dt.getattr("name").ok()?.extract().ok()
}

fn not_a_dtype(op: &str, v: &Bound<'_, PyAny>) -> PyErr {
    type_error(
        op,
        "dtype",
        format!("must be {ACCEPTED}, not {}", type_name(v)),
    )
}

fn not_a_number(op: &str, name: &str, v: &Bound<'_, PyAny>) -> PyErr {
    type_error(
        op,
        name,
        format!(
            "must be a number (an int, a float or a numpy scalar), not {} {}",
            type_name(v),
            v.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ),
    )
}
