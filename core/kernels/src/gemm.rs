//! GEMM: `C = alpha·op(A)·op(B) + beta·C` on row-major operands given by leading dimensions,
//! batched with batch strides (elements). `op(A)` is `m×k`, `op(B)` `k×n`, C `m×n`.
//!
//! Floats (A and B each f32, f16 or bf16; C f32, f16 or bf16): f32 accumulation by
//! `matrixmultiply`, one call per block of [`ROW_BLOCK`] rows; f16 and bf16 operands are converted
//! to f32 (exactly) per block (B whole: `k·n` elements of scratch), and C is computed in f32
//! scratch and rounded once to its dtype. With `beta == 0` C is not read (as BLAS: a NaN
//! there does not survive). Integers: A and B i8, C i32, `C = op(A)·op(B)` with wrapping i32
//! accumulation (exact modulo 2³²); alpha and beta must be 0.
//!
//! A unit is a range of output rows of the flattened `batch × m` rows: row `r` is row `r % m`
//! of batch `r / m`. Each row costs `n·k` multiply-adds; a unit that starts or ends inside a
//! block computes that whole block (see [`ROW_BLOCK`]).

use std::ops::Range;

use crate::dtype::{DType, Slice, SliceMut};
use crate::error::{Error, Operand, Problem, Result};
use crate::layout::{check_distinct, check_fits, check_unit, elements};
use crate::sgemm::{sgemm, Mat};

/// An input matrix's layout: row-major with `ld` elements between rows of the stored matrix
/// (`m×k` for A, or `k×m` when transposed), `batch_stride` elements between batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GemmInput {
    /// Elements between consecutive rows as stored.
    pub ld: usize,
    /// Elements between consecutive batches (0: one matrix for every batch).
    pub batch_stride: usize,
    /// Stored transposed: `op(X) = Xᵀ`.
    pub trans: bool,
}

/// C's layout: row-major, `ld ≥ n` elements between rows, `batch_stride` between batches;
/// no two elements of C may share memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GemmOutput {
    /// Elements between consecutive rows.
    pub ld: usize,
    /// Elements between consecutive batches.
    pub batch_stride: usize,
}

/// One GEMM launch's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmParams {
    /// Rows of op(A) and C.
    pub m: usize,
    /// Columns of op(B) and C.
    pub n: usize,
    /// Columns of op(A), rows of op(B).
    pub k: usize,
    /// Matrices in the batch.
    pub batch: usize,
    /// A's layout.
    pub a: GemmInput,
    /// B's layout.
    pub b: GemmInput,
    /// C's layout.
    pub c: GemmOutput,
    /// The product's scale (floats; 0 for int8).
    pub alpha: f32,
    /// C's scale (floats; 0 for int8).
    pub beta: f32,
}

impl GemmInput {
    /// (row stride, column stride) of op(X).
    pub(crate) fn strides(&self) -> (usize, usize) {
        if self.trans {
            (1, self.ld)
        } else {
            (self.ld, 1)
        }
    }
}

impl GemmParams {
    /// The launch's units: `batch × m` output rows.
    pub fn units(&self) -> Result<usize> {
        elements(&[self.batch, self.m], Operand::Shape)
    }
}

/// Every check of a GEMM launch (dtypes, footprints, C's distinct elements, alpha and beta);
/// returns the number of units.
pub fn validate(p: &GemmParams, a: &Slice<'_>, b: &Slice<'_>, c: &SliceMut<'_>) -> Result<usize> {
    let (da, db, dc) = (a.dtype(), b.dtype(), c.dtype());
    if da == DType::I8 || db == DType::I8 {
        for (d, op) in [(da, Operand::A), (db, Operand::B)] {
            if d != DType::I8 {
                return Err(Error::new(op, Problem::Dtype(d)));
            }
        }
        if dc != DType::I32 {
            return Err(Error::new(Operand::C, Problem::Dtype(dc)));
        }
        if p.alpha != 0.0 || p.beta != 0.0 {
            return Err(Error::new(Operand::Params, Problem::NotZero));
        }
    } else {
        for (d, op) in [(da, Operand::A), (db, Operand::B), (dc, Operand::C)] {
            if !d.is_float() {
                return Err(Error::new(op, Problem::Dtype(d)));
            }
        }
    }
    let (ars, acs) = p.a.strides();
    let (brs, bcs) = p.b.strides();
    let sa = [p.a.batch_stride, ars, acs];
    check_fits(&[p.batch, p.m, p.k], &sa, a.len(), Operand::A)?;
    let sb = [p.b.batch_stride, brs, bcs];
    check_fits(&[p.batch, p.k, p.n], &sb, b.len(), Operand::B)?;
    let (dims_c, sc) = ([p.batch, p.m, p.n], [p.c.batch_stride, p.c.ld, 1]);
    check_fits(&dims_c, &sc, c.len(), Operand::C)?;
    if p.m > 1 && p.n > 0 && p.c.ld < p.n {
        let (ld, min) = (p.c.ld, p.n);
        return Err(Error::new(Operand::C, Problem::LeadingDim { ld, min }));
    }
    check_distinct(&dims_c, &sc, Operand::C)?;
    p.units()
}

/// Runs rows `unit` (of [`GemmParams::units`]) of the launch. Cutting `0..units` into
/// consecutive units and running each gives exactly one whole call's result.
pub fn gemm(
    p: &GemmParams,
    a: Slice<'_>,
    b: Slice<'_>,
    mut c: SliceMut<'_>,
    unit: Range<usize>,
) -> Result {
    let total = validate(p, &a, &b, &c)?;
    check_unit(&unit, total)?;
    if p.n == 0 {
        // No output elements (C's rows are empty, and their offsets need not be in C).
        return Ok(());
    }
    let mut scratch = Scratch::default();
    let mut r = unit.start;
    while r < unit.end {
        // `m > 0` here: `total == batch * m` and `r < total`.
        let (bi, i0) = (r / p.m, r % p.m);
        let rows = (p.m - i0).min(unit.end - r);
        if let (Slice::I8(a), Slice::I8(b), SliceMut::I32(c)) = (a, b, &mut c) {
            int8_rows(p, a, b, c, bi, i0..i0 + rows);
        } else {
            // Whole blocks of ROW_BLOCK rows, each its own `sgemm` call, whatever the unit.
            let mut i = i0;
            while i < i0 + rows {
                let start = i / ROW_BLOCK * ROW_BLOCK;
                let end = (start + ROW_BLOCK).min(p.m);
                let take = end.min(i0 + rows);
                float_block(p, a, b, &mut c, bi, start..end, i..take, &mut scratch)?;
                i = take;
            }
        }
        r += rows;
    }
    Ok(())
}

/// The rows of one `sgemm` call: a unit that starts or ends inside a block computes the whole
/// block and keeps its rows. `matrixmultiply` rounds an element differently by its row's
/// place in the call's register tiles (a full tile fuses `alpha·AB + beta·C` into one FMA, the
/// last partial one does not; likewise across `k` blocks), so a row's result depends on the
/// call's first row and row count: fixed blocks make it depend on the row alone, and a cut
/// launch then equals one call bit for bit. Units that are multiples of it waste nothing.
pub const ROW_BLOCK: usize = 64;

#[derive(Default)]
struct Scratch {
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
    row: Vec<f32>,
}

/// op(X)'s `rows × cols` block at `base` into `out`, contiguous row-major, as f32. The copy
/// of an input can be far larger than its slice (a 0 stride along `k`), so its allocation is
/// tried, and a failure is an error naming the operand, not an abort.
fn gather(
    (x, operand): (Slice<'_>, Operand),
    base: usize,
    (rows, cols): (usize, usize),
    (rs, cs): (usize, usize),
    out: &mut Vec<f32>,
    row: &mut Vec<f32>,
) -> Result {
    out.clear();
    let too_large = || Error::new(operand, Problem::TooLarge);
    let len = rows.checked_mul(cols).ok_or_else(too_large)?;
    out.try_reserve(len).map_err(|_| too_large())?;
    row.try_reserve(cols).map_err(|_| too_large())?;
    for i in 0..rows {
        x.load_f32(base + i * rs, cs, cols, row);
        out.extend_from_slice(row);
    }
    Ok(())
}

/// Computes rows `block` of batch `bi` in f32 scratch and stores rows `keep` (inside it).
#[allow(clippy::too_many_arguments)]
fn float_block(
    p: &GemmParams,
    a: Slice<'_>,
    b: Slice<'_>,
    c: &mut SliceMut<'_>,
    bi: usize,
    block: Range<usize>,
    keep: Range<usize>,
    s: &mut Scratch,
) -> Result {
    let (ars, acs) = p.a.strides();
    let (brs, bcs) = p.b.strides();
    let rows = block.len();
    if rows == 0 || p.n == 0 {
        return Ok(());
    }
    // Inside the validated footprints: each base is the offset of an element that exists
    // (when its operand has any element to read at all).
    let a_base = bi * p.a.batch_stride + block.start * ars;
    let b_base = bi * p.b.batch_stride;
    let c_base = bi * p.c.batch_stride + block.start * p.c.ld;
    let am = match a {
        Slice::F32(x) if p.k > 0 => Mat {
            data: &x[a_base..],
            rs: ars,
            cs: acs,
        },
        _ => {
            gather(
                (a, Operand::A),
                a_base,
                (rows, p.k),
                (ars, acs),
                &mut s.a,
                &mut s.row,
            )?;
            Mat {
                data: &s.a,
                rs: p.k,
                cs: 1,
            }
        }
    };
    let bm = match b {
        Slice::F32(x) if p.k > 0 => Mat {
            data: &x[b_base..],
            rs: brs,
            cs: bcs,
        },
        _ => {
            gather(
                (b, Operand::B),
                b_base,
                (p.k, p.n),
                (brs, bcs),
                &mut s.b,
                &mut s.row,
            )?;
            Mat {
                data: &s.b,
                rs: p.n,
                cs: 1,
            }
        }
    };
    s.c.clear();
    if p.beta == 0.0 {
        s.c.resize(rows * p.n, 0.0);
    } else {
        let cs = (c.as_slice(), Operand::C);
        gather(cs, c_base, (rows, p.n), (p.c.ld, 1), &mut s.c, &mut s.row)?;
    }
    sgemm(
        (rows, p.k, p.n),
        p.alpha,
        am,
        bm,
        p.beta,
        &mut s.c,
        (p.n, 1),
    )?;
    for i in keep {
        let off = (i - block.start) * p.n;
        c.store_f32(c_base + (i - block.start) * p.c.ld, 1, &s.c[off..off + p.n]);
    }
    Ok(())
}

fn int8_rows(p: &GemmParams, a: &[i8], b: &[i8], c: &mut [i32], bi: usize, rows: Range<usize>) {
    let (ars, acs) = p.a.strides();
    let (brs, bcs) = p.b.strides();
    let b_base = bi * p.b.batch_stride;
    let mut acc = vec![0i32; p.n];
    for i in rows {
        acc.iter_mut().for_each(|v| *v = 0);
        let a_row = bi * p.a.batch_stride + i * ars;
        for q in 0..p.k {
            let x = i32::from(a[a_row + q * acs]);
            let b_row = b_base + q * brs;
            for (j, v) in acc.iter_mut().enumerate() {
                *v = v.wrapping_add(x * i32::from(b[b_row + j * bcs]));
            }
        }
        let c_row = bi * p.c.batch_stride + i * p.c.ld;
        c[c_row..c_row + p.n].copy_from_slice(&acc);
    }
}
