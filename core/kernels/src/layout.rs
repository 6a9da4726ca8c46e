//! Shapes, strides and units, checked: every size in `usize` with checked arithmetic, so a
//! kernel knows before it reads or writes that each index it forms is inside its slice.

use std::ops::Range;

use crate::error::{Error, Operand, Problem, Result};

/// Up to four dimensions, outermost first; a lower-rank shape pads with leading 1s.
pub type Shape = [usize; 4];

/// Per-dimension element strides of an operand (0 broadcasts an input along that dimension).
pub type Strides = [usize; 4];

/// The number of elements of `shape` (checked).
pub fn elements(shape: &[usize], operand: Operand) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, d| {
        acc.checked_mul(*d)
            .ok_or(Error::new(operand, Problem::Overflow))
    })
}

/// Elements an operand of `dims` and `strides` reaches: `1 + sum((dim_i - 1) * stride_i)`,
/// or 0 when any dimension is 0.
pub fn footprint(dims: &[usize], strides: &[usize], operand: Operand) -> Result<usize> {
    if dims.contains(&0) {
        return Ok(0);
    }
    let over = || Error::new(operand, Problem::Overflow);
    dims.iter().zip(strides).try_fold(1usize, |acc, (d, s)| {
        (d - 1)
            .checked_mul(*s)
            .and_then(|x| x.checked_add(acc))
            .ok_or_else(over)
    })
}

/// The footprint fits in a slice of `len` elements.
pub fn check_fits(dims: &[usize], strides: &[usize], len: usize, operand: Operand) -> Result {
    let needed = footprint(dims, strides, operand)?;
    if needed > len {
        return Err(Error::new(operand, Problem::TooShort { needed, len }));
    }
    Ok(())
}

/// No two elements of an output share memory: with the dimensions longer than 1 ordered by
/// stride, each stride is at least the extent of the ones inside it (a sufficient condition,
/// which every row-major or column-major layout with padding meets).
pub fn check_distinct(dims: &[usize], strides: &[usize], operand: Operand) -> Result {
    if dims.contains(&0) {
        return Ok(());
    }
    let mut v: Vec<(usize, usize)> = dims
        .iter()
        .zip(strides)
        .filter(|(d, _)| **d > 1)
        .map(|(d, s)| (*s, *d))
        .collect();
    v.sort_unstable();
    let mut extent = 1usize;
    for (s, d) in v {
        if s < extent {
            return Err(Error::new(operand, Problem::Overlapping));
        }
        extent = (d - 1)
            .checked_mul(s)
            .and_then(|x| x.checked_add(extent))
            .ok_or(Error::new(operand, Problem::Overflow))?;
    }
    Ok(())
}

/// `unit` lies inside `0..total`.
pub fn check_unit(unit: &Range<usize>, total: usize) -> Result {
    if unit.start > unit.end || unit.end > total {
        return Err(Error::new(
            Operand::Unit,
            Problem::Unit {
                unit: unit.clone(),
                total,
            },
        ));
    }
    Ok(())
}

/// `total` cut into consecutive units of at most `max` each (`max` 0 is taken as 1): what a
/// caller that bounds each piece of a launch runs, in order.
pub fn units(total: usize, max: usize) -> impl Iterator<Item = Range<usize>> {
    let max = max.max(1);
    (0..total.div_ceil(max)).map(move |i| {
        let s = i * max;
        s..s.saturating_add(max).min(total)
    })
}

/// The offset of element `idx` (checked by the caller's footprint check first).
pub(crate) fn offset(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

/// The index of flat position `flat` in `dims` (row-major), outermost first.
pub(crate) fn unflatten<const N: usize>(mut flat: usize, dims: &[usize; N]) -> [usize; N] {
    let mut idx = [0; N];
    for i in (0..N).rev() {
        if dims[i] > 0 {
            idx[i] = flat % dims[i];
            flat /= dims[i];
        }
    }
    idx
}
