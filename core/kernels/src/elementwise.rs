//! Elementwise ops over up to 4-d shapes, each operand with its own element strides (0
//! broadcasts an input along that dimension).
//!
//! Dtypes: the output and the inputs have one dtype, except [`ElementwiseOp::Cast`] (any to
//! any). Floats compute in f32 and round once to the dtype: add, sub, mul, div, max, min and
//! relu are then correctly rounded for f32, f16 and bf16 (f32 has more than twice the bits of
//! f16 and bf16, so rounding twice is harmless for these). GELU is the **tanh approximation**,
//! `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, computed as `x·σ(2z)`; SiLU is `x·σ(x)`.
//! Integers compute exactly and wrap to the dtype (two's complement); `x / 0` is 0 and
//! `MIN / -1` wraps to `MIN`; max, min and relu are exact; exp, gelu and silu take no integers.
//! Max and min return NaN when either input is NaN.
//!
//! Cast: float → float rounds once to nearest even; integer → float rounds to nearest;
//! float → integer truncates toward zero, saturating, NaN to 0 (Rust's `as`, what frameworks'
//! `.astype`/`.to` do for in-range values); integer → integer wraps.
//!
//! A unit is a range of rows: the shape's first three dimensions flattened, each row the last
//! dimension's elements.

use std::ops::Range;

use crate::dtype::{DType, Slice, SliceMut};
use crate::error::{Error, Operand, Problem, Result};
use crate::layout::{
    check_distinct, check_fits, check_unit, elements, offset, unflatten, Shape, Strides,
};

/// An elementwise op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementwiseOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// The larger of `a` and `b`.
    Max,
    /// The smaller of `a` and `b`.
    Min,
    /// `max(a, 0)`.
    Relu,
    /// GELU, tanh approximation.
    Gelu,
    /// SiLU (swish): `a·σ(a)`.
    Silu,
    /// `eᵃ`.
    Exp,
    /// `a` converted to the output's dtype.
    Cast,
}

impl ElementwiseOp {
    /// Takes a second input.
    pub fn is_binary(self) -> bool {
        use ElementwiseOp::*;
        matches!(self, Add | Sub | Mul | Div | Max | Min)
    }
}

/// An input operand: its slice and its strides.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    /// The elements.
    pub data: Slice<'a>,
    /// Element strides per dimension (0 broadcasts).
    pub strides: Strides,
}

/// The output operand: its slice and its strides (no two elements may share memory).
#[derive(Debug)]
pub struct Output<'a> {
    /// The elements.
    pub data: SliceMut<'a>,
    /// Element strides per dimension.
    pub strides: Strides,
}

/// The launch's units: rows of `shape`'s first three dimensions.
pub fn units(shape: &Shape) -> Result<usize> {
    // A zero-length row has nothing to do: the launch has no units.
    elements(&shape[..3], Operand::Shape).map(|n| if shape[3] == 0 { 0 } else { n })
}

/// Every check of an elementwise launch; returns the number of units.
pub fn validate(
    op: ElementwiseOp,
    shape: &Shape,
    dst: &Output<'_>,
    a: &Input<'_>,
    b: Option<&Input<'_>>,
) -> Result<usize> {
    let total = units(shape)?;
    elements(shape, Operand::Shape)?;
    if op.is_binary() != b.is_some() {
        return Err(Error::new(Operand::B, Problem::Arity));
    }
    let dd = dst.data.dtype();
    if op != ElementwiseOp::Cast {
        let mut inputs = vec![(a.data.dtype(), Operand::A)];
        inputs.extend(b.map(|b| (b.data.dtype(), Operand::B)));
        for (d, operand) in inputs {
            if d != dd {
                return Err(Error::new(operand, Problem::Dtype(d)));
            }
        }
        let transcendental = matches!(
            op,
            ElementwiseOp::Exp | ElementwiseOp::Gelu | ElementwiseOp::Silu
        );
        if transcendental && !dd.is_float() {
            return Err(Error::new(Operand::A, Problem::Dtype(dd)));
        }
    }
    check_fits(shape, &a.strides, a.data.len(), Operand::A)?;
    if let Some(b) = b {
        check_fits(shape, &b.strides, b.data.len(), Operand::B)?;
    }
    check_fits(shape, &dst.strides, dst.data.len(), Operand::C)?;
    check_distinct(shape, &dst.strides, Operand::C)?;
    Ok(total)
}

/// `1 / (1 + e^(−x))`, through `e^x / (1 + e^x)` below 0, so that a very negative `x` fades
/// through the subnormals instead of `e^(−x)` overflowing to a hard 0.
fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// GELU, tanh approximation: `0.5·x·(1 + tanh(z)) = x·σ(2z)`, `z = √(2/π)·(x + 0.044715·x³)`.
pub fn gelu_f32(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // √(2/π)
    let z = C * (x + 0.044_715 * x * x * x);
    x * sigmoid(2.0 * z)
}

fn float_op(op: ElementwiseOp, a: f32, b: f32) -> f32 {
    use ElementwiseOp::*;
    match op {
        Add => a + b,
        Sub => a - b,
        Mul => a * b,
        Div => a / b,
        Max | Min if a.is_nan() || b.is_nan() => f32::NAN,
        // Explicit comparisons: `f32::max` may answer either zero for `max(-0, +0)`.
        Max => {
            if a < b {
                b
            } else {
                a
            }
        }
        Min => {
            if b < a {
                b
            } else {
                a
            }
        }
        Relu => {
            if a > 0.0 || a.is_nan() {
                a
            } else {
                0.0
            }
        }
        Gelu => gelu_f32(a),
        Silu => a * sigmoid(a),
        Exp => a.exp(),
        Cast => a,
    }
}

fn int_op(op: ElementwiseOp, a: i64, b: i64) -> i64 {
    use ElementwiseOp::*;
    match op {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        Div if b == 0 => 0,
        Div => a.wrapping_div(b),
        Max => a.max(b),
        Min => a.min(b),
        Relu => a.max(0),
        Gelu | Silu | Exp | Cast => a,
    }
}

/// Runs rows `unit` (of [`units`]) of the launch: `dst = op(a[, b])` elementwise. Cutting
/// `0..units` into consecutive units and running each gives exactly one whole call's result.
pub fn elementwise(
    op: ElementwiseOp,
    shape: &Shape,
    mut dst: Output<'_>,
    a: Input<'_>,
    b: Option<Input<'_>>,
    unit: Range<usize>,
) -> Result {
    let total = validate(op, shape, &dst, &a, b.as_ref())?;
    check_unit(&unit, total)?;
    let rows3 = [shape[0], shape[1], shape[2]];
    let n = shape[3];
    let (sa, sb, sd) = (a.strides[3], b.map_or(0, |b| b.strides[3]), dst.strides[3]);
    let (src, dd) = (a.data.dtype(), dst.data.dtype());
    let int = !dd.is_float() && (op != ElementwiseOp::Cast || !src.is_float());
    let exact_cast = op == ElementwiseOp::Cast && !int;
    let (mut fa, mut fb) = (Vec::new(), Vec::new());
    let (mut ia, mut ib) = (Vec::new(), Vec::new());
    let mut xa = Vec::new();
    for r in unit {
        let idx = unflatten(r, &rows3);
        let row = |st: &Strides| offset(&idx, &st[..3]);
        let (oa, od) = (row(&a.strides), row(&dst.strides));
        let ob = b.map_or(0, |b| row(&b.strides));
        if exact_cast {
            // Through f64, exact for every dtype: one rounding to the output.
            a.data.load_f64(oa, sa, n, &mut xa);
            dst.data.store_f64(od, sd, &xa);
        } else if int {
            a.data.load_i64(oa, sa, n, &mut ia);
            match b {
                Some(b) => {
                    b.data.load_i64(ob, sb, n, &mut ib);
                    ia.iter_mut()
                        .zip(&ib)
                        .for_each(|(x, y)| *x = int_op(op, *x, *y));
                }
                None => ia.iter_mut().for_each(|x| *x = int_op(op, *x, 0)),
            }
            dst.data.store_i64(od, sd, &ia);
        } else {
            a.data.load_f32(oa, sa, n, &mut fa);
            match b {
                Some(b) => {
                    b.data.load_f32(ob, sb, n, &mut fb);
                    fa.iter_mut()
                        .zip(&fb)
                        .for_each(|(x, y)| *x = float_op(op, *x, *y));
                }
                None => fa.iter_mut().for_each(|x| *x = float_op(op, *x, 0.0)),
            }
            dst.data.store_f32(od, sd, &fa);
        }
    }
    Ok(())
}

/// The dtypes [`elementwise`] takes for `op` (all, for the ops that are not transcendental).
pub fn takes(op: ElementwiseOp, dtype: DType) -> bool {
    !matches!(
        op,
        ElementwiseOp::Exp | ElementwiseOp::Gelu | ElementwiseOp::Silu
    ) || dtype.is_float()
}
