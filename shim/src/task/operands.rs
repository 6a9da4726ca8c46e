//! The kernels' operands: [`Matrix`] (rows, columns, leading dimension, batches, transposed)
//! and [`Tensor`] (up to 4 dimensions with element strides, broadcast numpy's way), over
//! [`Region`]s, and the host's check that an operand's footprint lies in its region.

use davinci_uapi::{Dtype, Errno};

use super::{aligned_to, invalid, Region};
use crate::error::{Error, Result};

/// A matrix operand: `rows × cols` elements of `dtype` stored row-major in a region, `ld`
/// elements between rows (the number of columns unless [`ld`](Self::ld) says more), batches
/// `batch_stride` elements apart; [`t`](Self::t) uses it transposed (a column-major matrix is
/// a transposed row-major one, as in BLAS).
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    pub(super) region: Region<'a>,
    pub(super) dtype: Dtype,
    rows: u64,
    cols: u64,
    pub(super) ld: u64,
    pub(super) batch: u64,
    pub(super) batch_stride: u64,
    pub(super) trans: bool,
}

impl<'a> Matrix<'a> {
    /// `rows × cols` elements of `dtype` at the start of `region`, packed.
    pub fn new(region: impl Into<Region<'a>>, dtype: Dtype, rows: u64, cols: u64) -> Matrix<'a> {
        Matrix {
            region: region.into(),
            dtype,
            rows,
            cols,
            ld: cols,
            batch: 1,
            batch_stride: rows.saturating_mul(cols),
            trans: false,
        }
    }

    /// Elements between the starts of two rows (padding, or a sub-matrix of a wider one).
    pub fn ld(mut self, ld: u64) -> Self {
        self.ld = ld;
        self.batch_stride = self.rows.saturating_mul(ld);
        self
    }

    /// `batch` matrices, `stride` elements apart (0: the same matrix for every batch).
    pub fn batched(mut self, batch: u64, stride: u64) -> Self {
        self.batch = batch;
        self.batch_stride = stride;
        self
    }

    /// Used transposed: `op(X) = Xᵀ`, `cols × rows`.
    pub fn t(mut self) -> Self {
        self.trans = !self.trans;
        self
    }

    /// (rows, cols) of the matrix as used.
    pub(super) fn shape(&self) -> (u64, u64) {
        if self.trans {
            (self.cols, self.rows)
        } else {
            (self.rows, self.cols)
        }
    }

    pub(super) fn as_tensor(&self, batch: u64) -> Tensor<'a> {
        let stride = if self.batch == 1 && batch > 1 {
            0
        } else {
            self.batch_stride
        };
        Tensor {
            region: self.region,
            dtype: self.dtype,
            shape: [1, batch, self.rows, self.cols],
            strides: [0, stride, self.ld, 1],
        }
    }
}

/// A tensor operand: up to 4 dimensions (outermost first) of `dtype` elements in a region,
/// with element strides (packed row-major unless [`strides`](Self::strides) says otherwise).
/// As an input of an elementwise op it broadcasts numpy's way: a dimension of 1 (or a missing
/// leading one) is repeated along the output's.
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    pub(super) region: Region<'a>,
    pub(super) dtype: Dtype,
    pub(super) shape: [u64; 4],
    pub(super) strides: [u64; 4],
}

impl<'a> Tensor<'a> {
    /// A packed row-major tensor of `shape` (1 to 4 dimensions) at the start of `region`.
    /// `EINVAL` for no dimension or more than 4.
    pub fn new(region: impl Into<Region<'a>>, dtype: Dtype, shape: &[u64]) -> Result<Tensor<'a>> {
        let dims = pad(shape, 1, "Tensor::new", "shape")?;
        let mut strides = [0u64; 4];
        let mut s = 1u64;
        for i in (0..4).rev() {
            strides[i] = s;
            s = s.saturating_mul(dims[i]);
        }
        Ok(Tensor {
            region: region.into(),
            dtype,
            shape: dims,
            strides,
        })
    }

    /// The same elements with these element strides (as many as the shape has dimensions).
    pub fn strides(mut self, strides: &[u64]) -> Result<Tensor<'a>> {
        let rank = 4 - self.shape.iter().take_while(|d| **d == 1).count().min(3);
        if strides.len() != rank && strides.len() != 4 {
            return Err(invalid(
                "Tensor::strides",
                format!(
                    "{} strides for a tensor of {rank} dimensions",
                    strides.len()
                ),
            ));
        }
        self.strides = pad(strides, 0, "Tensor::strides", "strides")?;
        Ok(self)
    }

    /// This tensor's strides seen with the output's `shape` (broadcast dimensions stride 0).
    pub(super) fn broadcast(
        &self,
        op: &'static str,
        name: &str,
        shape: &[u64; 4],
    ) -> Result<[u64; 4]> {
        let mut s = self.strides;
        for i in 0..4 {
            if self.shape[i] == shape[i] {
                continue;
            }
            if self.shape[i] != 1 {
                return Err(invalid(
                    op,
                    format!(
                        "{name}'s shape {:?} does not broadcast to {shape:?}",
                        self.shape
                    ),
                ));
            }
            s[i] = 0;
        }
        Ok(s)
    }
}

/// `v` right-aligned in 4 slots, the rest `fill`.
fn pad(v: &[u64], fill: u64, op: &'static str, what: &str) -> Result<[u64; 4]> {
    if v.is_empty() || v.len() > 4 {
        return Err(invalid(
            op,
            format!("{what} has {} dimensions: 1 to 4", v.len()),
        ));
    }
    let mut out = [fill; 4];
    out[4 - v.len()..].copy_from_slice(v);
    Ok(out)
}

/// Elements reached from the start: `1 + Σ (dim − 1)·stride` (0 with a zero dimension).
fn footprint(shape: &[u64; 4], strides: &[u64; 4]) -> Option<u64> {
    if shape.contains(&0) {
        return Some(0);
    }
    (0..4).try_fold(1u64, |acc, i| {
        (shape[i] - 1).checked_mul(strides[i])?.checked_add(acc)
    })
}

/// The operand's footprint lies in its region, which is aligned to its element.
pub(super) fn fits(
    op: &'static str,
    name: &str,
    r: &Region,
    dtype: Dtype,
    shape: &[u64; 4],
    strides: &[u64; 4],
) -> Result<()> {
    let size = dtype.size();
    let bytes = footprint(shape, strides).and_then(|n| n.checked_mul(size));
    match bytes {
        None => Err(Error::new(
            Errno::ERANGE,
            op,
            format!("{name}'s shape and strides reach past 2^64 bytes"),
        )),
        Some(b) if b > r.len() as u64 => Err(Error::new(
            Errno::ERANGE,
            op,
            format!(
                "{name} reaches {b} bytes ({shape:?} of {dtype:?}, strides {strides:?}) but its region has {}",
                r.len()
            ),
        )),
        Some(_) => aligned_to(op, name, r, size),
    }
}
