//! The reference: every kernel again as naive loops over the whole index space, in f64 (floats)
//! or exact i64 (integers), rounded once to the output. Slow and obviously right, for the
//! property tests here and the conformance tests of the hosts. The same validation as the
//! kernels (the `validate` functions), so both refuse alike; no units.
//!
//! GELU here is written as `0.5·x·(1 + tanh(z))` where `z ≥ 0` (the kernels compute `x·σ(2z)`
//! everywhere), so the two forms check each other; where `z < 0`, `1 + tanh(z)` cancels, and
//! the reference uses the identity `x / (1 + e^(−2z))` in f64 too.

use crate::dtype::{DType, Slice, SliceMut};
use crate::elementwise::{self, ElementwiseOp, Input, Output};
use crate::error::Result;
use crate::gemm::{self, GemmParams};
use crate::layout::{offset, unflatten, Shape};
use crate::reduce::{self, ReduceOp};
use crate::rows::{self, NormKind, NormParams, RowsIn, RowsOut};

fn set_f64(dst: &mut SliceMut<'_>, i: usize, v: f64) {
    dst.store_f64(i, 0, &[v]);
}

fn set_i64(dst: &mut SliceMut<'_>, i: usize, v: i64) {
    dst.store_i64(i, 0, &[v]);
}

/// GEMM: `c = alpha·Σ a·b + beta·c` per element, the sum in f64 (exact i64 for int8, wrapped
/// to i32). With `beta == 0` C is not read.
pub fn gemm(p: &GemmParams, a: Slice<'_>, b: Slice<'_>, mut c: SliceMut<'_>) -> Result {
    gemm::validate(p, &a, &b, &c)?;
    let (ars, acs) = p.a.strides();
    let (brs, bcs) = p.b.strides();
    let int = a.dtype() == DType::I8;
    for bi in 0..p.batch {
        for i in 0..p.m {
            for j in 0..p.n {
                let ai = |q: usize| bi * p.a.batch_stride + i * ars + q * acs;
                let bj = |q: usize| bi * p.b.batch_stride + q * brs + j * bcs;
                let ci = bi * p.c.batch_stride + i * p.c.ld + j;
                if int {
                    let s: i64 = (0..p.k).map(|q| a.i64_at(ai(q)) * b.i64_at(bj(q))).sum();
                    set_i64(&mut c, ci, s);
                } else {
                    let s: f64 = (0..p.k).map(|q| a.f64_at(ai(q)) * b.f64_at(bj(q))).sum();
                    let mut v = f64::from(p.alpha) * s;
                    if p.beta != 0.0 {
                        v += f64::from(p.beta) * c.as_slice().f64_at(ci);
                    }
                    set_f64(&mut c, ci, v);
                }
            }
        }
    }
    Ok(())
}

/// GELU, tanh approximation, in f64: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub fn gelu_f64(x: f64) -> f64 {
    let z = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    if z >= 0.0 {
        0.5 * x * (1.0 + z.tanh())
    } else {
        x / (1.0 + (-2.0 * z).exp())
    }
}

fn float_op(op: ElementwiseOp, a: f64, b: f64) -> f64 {
    use ElementwiseOp::*;
    match op {
        Add => a + b,
        Sub => a - b,
        Mul => a * b,
        Div => a / b,
        Max | Min if a.is_nan() || b.is_nan() => f64::NAN,
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
        Gelu => gelu_f64(a),
        Silu => a / (1.0 + (-a).exp()),
        Exp => a.exp(),
        Cast => a,
    }
}

fn int_op(op: ElementwiseOp, a: i64, b: i64) -> i64 {
    use ElementwiseOp::*;
    match op {
        Add => a + b,
        Sub => a - b,
        Mul => a * b,
        Div if b == 0 => 0,
        Div => a / b,
        Max => a.max(b),
        Min => a.min(b),
        Relu => a.max(0),
        Gelu | Silu | Exp | Cast => a,
    }
}

/// Elementwise: each element on its own, f64 or exact i64 (inputs are at most 32 bits, so no
/// i64 operation here overflows), rounded or wrapped once to the output.
pub fn elementwise(
    op: ElementwiseOp,
    shape: &Shape,
    mut dst: Output<'_>,
    a: Input<'_>,
    b: Option<Input<'_>>,
) -> Result {
    elementwise::validate(op, shape, &dst, &a, b.as_ref())?;
    let total = shape.iter().product::<usize>();
    let float_out = dst.data.dtype().is_float();
    let float_in = a.data.dtype().is_float();
    for flat in 0..total {
        let idx = unflatten(flat, shape);
        let (oa, od) = (offset(&idx, &a.strides), offset(&idx, &dst.strides));
        let ob = b.map(|b| offset(&idx, &b.strides));
        if float_out || (op == ElementwiseOp::Cast && float_in) {
            let x = a.data.f64_at(oa);
            let y = b.zip(ob).map_or(0.0, |(b, o)| b.data.f64_at(o));
            set_f64(&mut dst.data, od, float_op(op, x, y));
        } else {
            let x = a.data.i64_at(oa);
            let y = b.zip(ob).map_or(0, |(b, o)| b.data.i64_at(o));
            set_i64(&mut dst.data, od, int_op(op, x, y));
        }
    }
    Ok(())
}

/// A reduction: every output element's sum (f64, or exact i64) or max over the axis.
pub fn reduce(
    op: ReduceOp,
    shape: &Shape,
    axis: usize,
    src: Input<'_>,
    mut dst: Output<'_>,
) -> Result {
    let outputs = reduce::validate(op, shape, axis, &src, &dst)?;
    let mut out = *shape;
    out[axis] = 1;
    let float = src.data.dtype().is_float();
    for e in 0..outputs {
        let mut idx = unflatten(e, &out);
        let od = offset(&idx, &dst.strides);
        let (mut sf, mut si) = (None::<f64>, None::<i64>);
        for q in 0..shape[axis] {
            idx[axis] = q;
            let o = offset(&idx, &src.strides);
            if float {
                let x = src.data.f64_at(o);
                sf = Some(match (op, sf) {
                    (_, None) => x,
                    (ReduceOp::Sum, Some(s)) => s + x,
                    (ReduceOp::Max, Some(m)) if m.is_nan() || x.is_nan() => f64::NAN,
                    (ReduceOp::Max, Some(m)) => {
                        if x > m {
                            x
                        } else {
                            m
                        }
                    }
                });
            } else {
                let x = src.data.i64_at(o);
                si = Some(match (op, si) {
                    (_, None) => x,
                    (ReduceOp::Sum, Some(s)) => s + x,
                    (ReduceOp::Max, Some(m)) => m.max(x),
                });
            }
        }
        if float {
            let empty = if op == ReduceOp::Sum {
                0.0
            } else {
                f64::NEG_INFINITY
            };
            set_f64(&mut dst.data, od, sf.unwrap_or(empty));
        } else {
            let lowest = if src.data.dtype() == DType::I8 {
                -128
            } else {
                i64::from(i32::MIN)
            };
            let empty = if op == ReduceOp::Sum { 0 } else { lowest };
            set_i64(&mut dst.data, od, si.unwrap_or(empty));
        }
    }
    Ok(())
}

/// Softmax of each row, in f64: `exp(x − max) / Σ exp(x − max)`.
pub fn softmax(shape: (usize, usize), src: RowsIn<'_>, mut dst: RowsOut<'_>) -> Result {
    let rows = rows::validate_rows(shape, &src, &dst)?;
    for r in 0..rows {
        let x: Vec<f64> = (0..shape.1)
            .map(|j| src.data.f64_at(r * src.ld + j))
            .collect();
        let max = x.iter().fold(
            f64::NEG_INFINITY,
            |m, v| if *v > m || v.is_nan() { *v } else { m },
        );
        let sum: f64 = x.iter().map(|v| (v - max).exp()).sum();
        for (j, v) in x.iter().enumerate() {
            set_f64(&mut dst.data, r * dst.ld + j, (v - max).exp() / sum);
        }
    }
    Ok(())
}

/// Layer or RMS norm of each row, in f64.
pub fn norm(
    shape: (usize, usize),
    p: &NormParams<'_>,
    src: RowsIn<'_>,
    mut dst: RowsOut<'_>,
) -> Result {
    let rows = rows::validate_norm(shape, p, &src, &dst)?;
    let cols = shape.1;
    for r in 0..rows {
        let x: Vec<f64> = (0..cols).map(|j| src.data.f64_at(r * src.ld + j)).collect();
        let n = cols as f64;
        let mean = match p.kind {
            NormKind::LayerNorm => x.iter().sum::<f64>() / n,
            NormKind::RmsNorm => 0.0,
        };
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        let rstd = 1.0 / (var + f64::from(p.eps)).sqrt();
        for (j, v) in x.iter().enumerate() {
            let g = p.gamma.map_or(1.0, |s| s.f64_at(j));
            let b = p.beta.map_or(0.0, |s| s.f64_at(j));
            set_f64(&mut dst.data, r * dst.ld + j, (v - mean) * rstd * g + b);
        }
    }
    Ok(())
}
