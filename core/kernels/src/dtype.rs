//! The element types and the typed operand slices every kernel takes: a kernel reads a
//! [`Slice`] and writes a [`SliceMut`], whose variant is the operand's dtype. Rows are loaded
//! into `f32` (floats), `f64` (casts, the reference) or `i64` (integers) scratch and stored
//! back with one rounding: `f16` and `bf16` round to nearest, ties to even (`half`).

use half::{bf16, f16};

/// An element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16: binary32's exponent with 8 bits of significand.
    Bf16,
    /// Signed 8-bit integer (GEMM: multiplied into `i32`).
    I8,
    /// Signed 32-bit integer.
    I32,
}

impl DType {
    /// A floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::Bf16)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::I8 => 1,
        }
    }
}

/// An input operand: a host slice of one dtype.
#[derive(Clone, Copy, Debug)]
pub enum Slice<'a> {
    /// `f32` elements.
    F32(&'a [f32]),
    /// `f16` elements.
    F16(&'a [f16]),
    /// `bf16` elements.
    Bf16(&'a [bf16]),
    /// `i8` elements.
    I8(&'a [i8]),
    /// `i32` elements.
    I32(&'a [i32]),
}

/// An output operand: a mutable host slice of one dtype.
#[derive(Debug)]
pub enum SliceMut<'a> {
    /// `f32` elements.
    F32(&'a mut [f32]),
    /// `f16` elements.
    F16(&'a mut [f16]),
    /// `bf16` elements.
    Bf16(&'a mut [bf16]),
    /// `i8` elements.
    I8(&'a mut [i8]),
    /// `i32` elements.
    I32(&'a mut [i32]),
}

macro_rules! each {
    ($s:expr, $v:ident => $body:expr) => {
        match $s {
            Self::F32($v) => $body,
            Self::F16($v) => $body,
            Self::Bf16($v) => $body,
            Self::I8($v) => $body,
            Self::I32($v) => $body,
        }
    };
}

impl Slice<'_> {
    /// The operand's dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Slice::F32(_) => DType::F32,
            Slice::F16(_) => DType::F16,
            Slice::Bf16(_) => DType::Bf16,
            Slice::I8(_) => DType::I8,
            Slice::I32(_) => DType::I32,
        }
    }

    /// Its length in elements.
    pub fn len(&self) -> usize {
        each!(self, s => s.len())
    }

    /// No elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as `f64` (exact for every dtype). `i` must be in bounds (validated).
    pub(crate) fn f64_at(&self, i: usize) -> f64 {
        match self {
            Slice::F32(s) => f64::from(s[i]),
            Slice::F16(s) => s[i].to_f64(),
            Slice::Bf16(s) => s[i].to_f64(),
            Slice::I8(s) => f64::from(s[i]),
            Slice::I32(s) => f64::from(s[i]),
        }
    }

    /// Element `i` as `i64` (integers; a float truncates, saturating, NaN 0).
    pub(crate) fn i64_at(&self, i: usize) -> i64 {
        match self {
            Slice::I8(s) => i64::from(s[i]),
            Slice::I32(s) => i64::from(s[i]),
            _ => self.f64_at(i) as i64,
        }
    }

    /// `n` elements from `start`, `stride` apart, into `out` as `f32` (exact for the float
    /// dtypes and i8; an `i32` rounds to nearest).
    pub(crate) fn load_f32(&self, start: usize, stride: usize, n: usize, out: &mut Vec<f32>) {
        out.clear();
        let idx = (0..n).map(|j| start + j * stride);
        match self {
            Slice::F32(s) => out.extend(idx.map(|i| s[i])),
            Slice::F16(s) => out.extend(idx.map(|i| s[i].to_f32())),
            Slice::Bf16(s) => out.extend(idx.map(|i| s[i].to_f32())),
            Slice::I8(s) => out.extend(idx.map(|i| f32::from(s[i]))),
            Slice::I32(s) => out.extend(idx.map(|i| s[i] as f32)),
        }
    }

    /// As [`Slice::load_f32`], into `f64` (exact).
    pub(crate) fn load_f64(&self, start: usize, stride: usize, n: usize, out: &mut Vec<f64>) {
        out.clear();
        out.extend((0..n).map(|j| self.f64_at(start + j * stride)));
    }

    /// As [`Slice::load_f32`], into `i64` (integers exactly).
    pub(crate) fn load_i64(&self, start: usize, stride: usize, n: usize, out: &mut Vec<i64>) {
        out.clear();
        out.extend((0..n).map(|j| self.i64_at(start + j * stride)));
    }
}

impl SliceMut<'_> {
    /// The operand's dtype.
    pub fn dtype(&self) -> DType {
        match self {
            SliceMut::F32(_) => DType::F32,
            SliceMut::F16(_) => DType::F16,
            SliceMut::Bf16(_) => DType::Bf16,
            SliceMut::I8(_) => DType::I8,
            SliceMut::I32(_) => DType::I32,
        }
    }

    /// Its length in elements.
    pub fn len(&self) -> usize {
        each!(self, s => s.len())
    }

    /// No elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A shared view of the same elements.
    pub fn as_slice(&self) -> Slice<'_> {
        match self {
            SliceMut::F32(s) => Slice::F32(s),
            SliceMut::F16(s) => Slice::F16(s),
            SliceMut::Bf16(s) => Slice::Bf16(s),
            SliceMut::I8(s) => Slice::I8(s),
            SliceMut::I32(s) => Slice::I32(s),
        }
    }

    /// `vals` into `n = vals.len()` elements from `start`, `stride` apart, each rounded once
    /// to the dtype (floats to nearest even; integers truncate toward zero, saturating, NaN 0).
    pub(crate) fn store_f32(&mut self, start: usize, stride: usize, vals: &[f32]) {
        let idx = (0..vals.len()).map(|j| start + j * stride);
        match self {
            SliceMut::F32(s) => idx.zip(vals).for_each(|(i, v)| s[i] = *v),
            SliceMut::F16(s) => idx.zip(vals).for_each(|(i, v)| s[i] = f16::from_f32(*v)),
            SliceMut::Bf16(s) => idx.zip(vals).for_each(|(i, v)| s[i] = bf16::from_f32(*v)),
            SliceMut::I8(s) => idx.zip(vals).for_each(|(i, v)| s[i] = *v as i8),
            SliceMut::I32(s) => idx.zip(vals).for_each(|(i, v)| s[i] = *v as i32),
        }
    }

    /// As [`SliceMut::store_f32`], from `f64` (one rounding to the dtype).
    pub(crate) fn store_f64(&mut self, start: usize, stride: usize, vals: &[f64]) {
        let idx = (0..vals.len()).map(|j| start + j * stride);
        match self {
            SliceMut::F32(s) => idx.zip(vals).for_each(|(i, v)| s[i] = *v as f32),
            SliceMut::F16(s) => idx.zip(vals).for_each(|(i, v)| s[i] = f16::from_f64(*v)),
            SliceMut::Bf16(s) => idx.zip(vals).for_each(|(i, v)| s[i] = bf16::from_f64(*v)),
            SliceMut::I8(s) => idx.zip(vals).for_each(|(i, v)| s[i] = *v as i8),
            SliceMut::I32(s) => idx.zip(vals).for_each(|(i, v)| s[i] = *v as i32),
        }
    }

    /// `vals` as integers, wrapping to the dtype (two's complement, as `as` does); a float
    /// dtype rounds the value to nearest.
    pub(crate) fn store_i64(&mut self, start: usize, stride: usize, vals: &[i64]) {
        let idx = (0..vals.len()).map(|j| start + j * stride);
        match self {
            SliceMut::I8(s) => idx.zip(vals).for_each(|(i, v)| s[i] = *v as i8),
            SliceMut::I32(s) => idx.zip(vals).for_each(|(i, v)| s[i] = *v as i32),
            _ => {
                let f: Vec<f64> = vals.iter().map(|v| *v as f64).collect();
                self.store_f64(start, stride, &f);
            }
        }
    }
}
