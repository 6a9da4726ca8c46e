//! Reductions along one axis of an up-to-4-d shape: sum and max.
//!
//! Floats accumulate in f64 and round once to the output (the sum of `n` values is then within
//! `n·2⁻⁵³·Σ|x|` of exact before that rounding); max is exact, NaN if any input is NaN.
//! Integers sum exactly and wrap to the output's dtype. Output and input have one dtype,
//! except that an i8 input may sum into i32. An empty axis gives 0 (sum) or the dtype's
//! lowest value, −∞ for floats (max).
//!
//! The output has the input's shape with the axis's dimension 1 (its stride there is not
//! used). A unit is a range of output elements, the other dimensions flattened in order.

use std::ops::Range;

use crate::dtype::DType;
use crate::elementwise::{Input, Output};
use crate::error::{Error, Operand, Problem, Result};
use crate::layout::{check_distinct, check_fits, check_unit, elements, offset, unflatten, Shape};

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The largest element.
    Max,
}

fn out_shape(shape: &Shape, axis: usize) -> Result<Shape> {
    if axis >= 4 {
        return Err(Error::new(Operand::Shape, Problem::Axis(axis)));
    }
    let mut out = *shape;
    out[axis] = 1;
    Ok(out)
}

/// Every check of a reduction; returns the number of units (output elements).
pub fn validate(
    op: ReduceOp,
    shape: &Shape,
    axis: usize,
    src: &Input<'_>,
    dst: &Output<'_>,
) -> Result<usize> {
    let out = out_shape(shape, axis)?;
    let (ds, dd) = (src.data.dtype(), dst.data.dtype());
    if dd != ds && !(op == ReduceOp::Sum && ds == DType::I8 && dd == DType::I32) {
        return Err(Error::new(Operand::C, Problem::Dtype(dd)));
    }
    elements(shape, Operand::Shape)?;
    check_fits(shape, &src.strides, src.data.len(), Operand::A)?;
    check_fits(&out, &dst.strides, dst.data.len(), Operand::C)?;
    check_distinct(&out, &dst.strides, Operand::C)?;
    elements(&out, Operand::Shape)
}

/// Runs output elements `unit` of the reduction of `src` along `axis` into `dst`. Cutting
/// `0..units` into consecutive units and running each gives exactly one whole call's result.
pub fn reduce(
    op: ReduceOp,
    shape: &Shape,
    axis: usize,
    src: Input<'_>,
    mut dst: Output<'_>,
    unit: Range<usize>,
) -> Result {
    let total = validate(op, shape, axis, &src, &dst)?;
    check_unit(&unit, total)?;
    let out = out_shape(shape, axis)?;
    let (len, step) = (shape[axis], src.strides[axis]);
    let float = src.data.dtype().is_float();
    let (mut xf, mut xi) = (Vec::new(), Vec::new());
    for e in unit {
        let idx = unflatten(e, &out);
        let (os, od) = (offset(&idx, &src.strides), offset(&idx, &dst.strides));
        // In chunks: the axis may be far longer than the slice (a 0 stride).
        if float {
            let mut v = match op {
                ReduceOp::Sum => 0.0,
                ReduceOp::Max => f64::NEG_INFINITY,
            };
            for (start, n) in chunks(len) {
                src.data.load_f64(os + start * step, step, n, &mut xf);
                v = xf.iter().fold(v, |acc, x| match op {
                    ReduceOp::Sum => acc + x,
                    ReduceOp::Max if acc.is_nan() || x.is_nan() => f64::NAN,
                    ReduceOp::Max if *x > acc => *x,
                    ReduceOp::Max => acc,
                });
            }
            dst.data.store_f64(od, 0, &[v]);
        } else {
            let mut v = match (op, src.data.dtype()) {
                (ReduceOp::Sum, _) => 0,
                (ReduceOp::Max, DType::I8) => i64::from(i8::MIN),
                (ReduceOp::Max, _) => i64::from(i32::MIN),
            };
            for (start, n) in chunks(len) {
                src.data.load_i64(os + start * step, step, n, &mut xi);
                v = xi.iter().fold(v, |acc, x| match op {
                    ReduceOp::Sum => acc.wrapping_add(*x),
                    ReduceOp::Max => acc.max(*x),
                });
            }
            dst.data.store_i64(od, 0, &[v]);
        }
    }
    Ok(())
}

/// `0..len` in pieces of at most 4096: (start, length).
fn chunks(len: usize) -> impl Iterator<Item = (usize, usize)> {
    const CHUNK: usize = 4096;
    (0..len.div_ceil(CHUNK)).map(move |i| (i * CHUNK, CHUNK.min(len - i * CHUNK)))
}
