//! The row kernels, on rows of a 2-d view (`rows × cols`, columns contiguous, `ld` elements
//! between rows): softmax along the last axis, layer norm and RMS norm. Floats only.
//!
//! Softmax is the numerically stable one: `e_j = exp(x_j − max)` in f32, their sum in f64,
//! each `e_j / sum` rounded once to the output. A row with a NaN is NaN; a row of −∞ is NaN.
//! The norms compute in f64 (two passes: the mean, then the variance), `y = (x − mean) ·
//! rsqrt(var + eps) · gamma + beta` (layer norm) or `y = x · rsqrt(mean(x²) + eps) · gamma +
//! beta` (RMS norm), gamma and beta optional (1 and 0), each of at least `cols` elements of any
//! float dtype; eps must be finite and not negative.
//!
//! A unit is a range of rows.

use std::ops::Range;

use crate::dtype::{Slice, SliceMut};
use crate::error::{Error, Operand, Problem, Result};
use crate::layout::{check_distinct, check_fits, check_unit};

/// An input view: row `i`, column `j` is `data[i * ld + j]`.
#[derive(Clone, Copy, Debug)]
pub struct RowsIn<'a> {
    /// The elements.
    pub data: Slice<'a>,
    /// Elements between rows.
    pub ld: usize,
}

/// An output view: row `i`, column `j` is `data[i * ld + j]`, `ld ≥ cols`.
#[derive(Debug)]
pub struct RowsOut<'a> {
    /// The elements.
    pub data: SliceMut<'a>,
    /// Elements between rows.
    pub ld: usize,
}

/// A norm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormKind {
    /// Layer norm: centred by the row's mean, scaled by its standard deviation.
    LayerNorm,
    /// RMS norm: scaled by the row's root mean square, not centred.
    RmsNorm,
}

/// A norm's parameters beside the rows.
#[derive(Clone, Copy, Debug)]
pub struct NormParams<'a> {
    /// Which norm.
    pub kind: NormKind,
    /// Added to the variance (or mean square) before the square root.
    pub eps: f32,
    /// Per-column scale, or none (1).
    pub gamma: Option<Slice<'a>>,
    /// Per-column shift, or none (0).
    pub beta: Option<Slice<'a>>,
}

/// The checks every row kernel shares; returns the number of units (rows).
pub fn validate_rows(
    (rows, cols): (usize, usize),
    src: &RowsIn<'_>,
    dst: &RowsOut<'_>,
) -> Result<usize> {
    for (d, op) in [
        (src.data.dtype(), Operand::A),
        (dst.data.dtype(), Operand::C),
    ] {
        if !d.is_float() {
            return Err(Error::new(op, Problem::Dtype(d)));
        }
    }
    check_fits(&[rows, cols], &[src.ld, 1], src.data.len(), Operand::A)?;
    check_fits(&[rows, cols], &[dst.ld, 1], dst.data.len(), Operand::C)?;
    if rows > 1 && cols > 0 && dst.ld < cols {
        let (ld, min) = (dst.ld, cols);
        return Err(Error::new(Operand::C, Problem::LeadingDim { ld, min }));
    }
    check_distinct(&[rows, cols], &[dst.ld, 1], Operand::C)?;
    Ok(if cols == 0 { 0 } else { rows })
}

/// Runs rows `unit` of a softmax along each row of `src` into `dst`.
pub fn softmax(
    shape: (usize, usize),
    src: RowsIn<'_>,
    mut dst: RowsOut<'_>,
    unit: Range<usize>,
) -> Result {
    let total = validate_rows(shape, &src, &dst)?;
    check_unit(&unit, total)?;
    let cols = shape.1;
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for r in unit {
        src.data.load_f32(r * src.ld, 1, cols, &mut x);
        let max = x.iter().fold(
            f32::NEG_INFINITY,
            |m, v| if *v > m || v.is_nan() { *v } else { m },
        );
        x.iter_mut().for_each(|v| *v = (*v - max).exp());
        let sum: f64 = x.iter().map(|v| f64::from(*v)).sum();
        y.clear();
        y.extend(x.iter().map(|v| f64::from(*v) / sum));
        dst.data.store_f64(r * dst.ld, 1, &y);
    }
    Ok(())
}

/// Every check of a norm launch; returns the number of units (rows).
pub fn validate_norm(
    shape: (usize, usize),
    p: &NormParams<'_>,
    src: &RowsIn<'_>,
    dst: &RowsOut<'_>,
) -> Result<usize> {
    if !p.eps.is_finite() || p.eps < 0.0 {
        return Err(Error::new(Operand::Params, Problem::Invalid));
    }
    for (v, op) in [(p.gamma, Operand::Gamma), (p.beta, Operand::Beta)] {
        if let Some(v) = v {
            if !v.dtype().is_float() {
                return Err(Error::new(op, Problem::Dtype(v.dtype())));
            }
            check_fits(&[shape.1], &[1], v.len(), op)?;
        }
    }
    validate_rows(shape, src, dst)
}

/// Runs rows `unit` of a layer or RMS norm of each row of `src` into `dst`.
pub fn norm(
    shape: (usize, usize),
    p: &NormParams<'_>,
    src: RowsIn<'_>,
    mut dst: RowsOut<'_>,
    unit: Range<usize>,
) -> Result {
    let total = validate_norm(shape, p, &src, &dst)?;
    check_unit(&unit, total)?;
    let cols = shape.1;
    let (mut g, mut b, mut x) = (Vec::new(), Vec::new(), Vec::new());
    match p.gamma {
        Some(s) => s.load_f64(0, 1, cols, &mut g),
        None => g.resize(cols, 1.0),
    }
    match p.beta {
        Some(s) => s.load_f64(0, 1, cols, &mut b),
        None => b.resize(cols, 0.0),
    }
    let n = cols as f64;
    for r in unit {
        src.data.load_f64(r * src.ld, 1, cols, &mut x);
        let (mean, ms) = match p.kind {
            NormKind::LayerNorm => {
                let mean = x.iter().sum::<f64>() / n;
                (
                    mean,
                    x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n,
                )
            }
            NormKind::RmsNorm => (0.0, x.iter().map(|v| v * v).sum::<f64>() / n),
        };
        let rstd = 1.0 / (ms + f64::from(p.eps)).sqrt();
        for (j, v) in x.iter_mut().enumerate() {
            *v = (*v - mean) * rstd * g[j] + b[j];
        }
        dst.data.store_f64(r * dst.ld, 1, &x);
    }
    Ok(())
}
