//! How a launch is cut into units, each a launch of its own over a part of the output, and
//! what unit `u` is: a function of the launch's shape alone, so a launch gives the same bits
//! every time. Every division is `checked_div` (the kernel build has no panic path).

use davinci_uapi::kernels::{ReduceParams, GEMM_TRANS_A, GEMM_TRANS_B};
use davinci_uapi::Dtype;

use super::{gemm_strides, Params, GEMM_UNIT_WORK, UNIT_WORK};

/// `a / b` rounded up, 0 for `b` 0.
fn div_ceil(a: u64, b: u64) -> u64 {
    a.checked_add(b.saturating_sub(1))
        .and_then(|x| x.checked_div(b))
        .unwrap_or(0)
}

fn div(a: u64, b: u64) -> u64 {
    a.checked_div(b).unwrap_or(0)
}

fn rem(a: u64, b: u64) -> u64 {
    a.checked_rem(b).unwrap_or(0)
}

/// `addr` moved `elements` of `size` bytes on (wrapping: a unit's operands lie inside the
/// launch's, which were checked, so this never wraps for a valid launch; a unit whose
/// address did wrap fails its range check).
fn at(addr: u64, elements: u64, size: u64) -> u64 {
    addr.wrapping_add(elements.wrapping_mul(size))
}

/// Offset, in elements, of index `idx` with `strides`.
fn offset(idx: &[u64; 4], strides: &[u64; 4]) -> u64 {
    let mut o = 0u64;
    for i in 0..4 {
        o = o.wrapping_add(idx[i].wrapping_mul(strides[i]));
    }
    o
}

/// The cut of a 4-d index space into units of about `work` when each element costs `cost`:
/// a unit is a piece of one row (the last dimension) when a row costs more, else rows of
/// dimension 2 under one index of dimensions 0 and 1. Returns (units, rows per unit or 0,
/// elements per piece or 0).
fn cut_rows(dims: &[u64; 4], cost: u64) -> (u64, u64, u64) {
    let cost = cost.max(1);
    let row_cost = dims[3].saturating_mul(cost);
    if row_cost > UNIT_WORK && dims[3] > 1 {
        let piece = div(UNIT_WORK, cost).max(1);
        let per_row = div_ceil(dims[3], piece);
        let units = dims[0]
            .saturating_mul(dims[1])
            .saturating_mul(dims[2])
            .saturating_mul(per_row);
        (units, 0, piece)
    } else {
        let rows = div(UNIT_WORK, row_cost.max(1)).clamp(1, dims[2].max(1));
        let units = dims[0]
            .saturating_mul(dims[1])
            .saturating_mul(div_ceil(dims[2], rows));
        (units, rows, 0)
    }
}

/// Unit `u` of [`cut_rows`]: the index where it starts and its dimensions.
fn row_unit(dims: &[u64; 4], (_, rows, piece): (u64, u64, u64), u: u64) -> ([u64; 4], [u64; 4]) {
    if rows == 0 {
        let per_row = div_ceil(dims[3], piece);
        let (row, p) = (div(u, per_row), rem(u, per_row));
        let i2 = rem(row, dims[2]);
        let i01 = div(row, dims[2]);
        let j0 = p.saturating_mul(piece);
        let idx = [div(i01, dims[1]), rem(i01, dims[1]), i2, j0];
        (idx, [1, 1, 1, piece.min(dims[3].saturating_sub(j0))])
    } else {
        let per = div_ceil(dims[2], rows);
        let (i01, k) = (div(u, per), rem(u, per));
        let i2 = k.saturating_mul(rows);
        let idx = [div(i01, dims[1]), rem(i01, dims[1]), i2, 0];
        (idx, [1, 1, rows.min(dims[2].saturating_sub(i2)), dims[3]])
    }
}

/// GEMM's cut: whole rows of C when `n·k` fits a unit (a multiple of 64 rows where there are
/// that many, and in user space at least 64), else up to 64 rows by a range of columns.
/// Returns (rows, columns) per unit.
fn cut_gemm(m: u64, n: u64, k: u64) -> (u64, u64) {
    let k = k.max(1);
    let row = n.saturating_mul(k);
    if row <= GEMM_UNIT_WORK {
        // At least 64 rows (or all of them) where the build packs B per unit (`std`).
        let least = if cfg!(feature = "std") { 16 } else { 1 };
        let mut r = div(GEMM_UNIT_WORK, row.max(1))
            .max(least)
            .clamp(1, m.max(1));
        if r >= 64 {
            r -= r % 64;
        }
        (r, n)
    } else {
        let r = div(GEMM_UNIT_WORK, k).clamp(1, 64).min(m.max(1));
        let c = div(GEMM_UNIT_WORK, r.saturating_mul(k)).clamp(1, n.max(1));
        (r, c)
    }
}

impl Params {
    /// How many units the launch is cut into (it has something to compute).
    pub fn units(&self) -> u64 {
        match self {
            Params::Gemm(p) => {
                let (r, c) = cut_gemm(p.m, p.n, p.k);
                p.batch
                    .saturating_mul(div_ceil(p.m, r))
                    .saturating_mul(div_ceil(p.n, c))
            }
            Params::Elementwise(p) => cut_rows(&p.shape, 4).0,
            Params::Reduce(p) => {
                let (out, len) = reduce_out(p);
                cut_rows(&out, len.saturating_mul(2).max(1)).0
            }
            Params::Softmax(p) => div_ceil(p.rows, rows_per(p.cols)),
            Params::Norm(p) => div_ceil(p.rows, rows_per(p.cols)),
        }
    }

    /// Unit `u` (below [`units`](Self::units)) as a launch of its own: the same kernel over
    /// the unit's part, with its operands' addresses moved to where that part starts.
    pub fn unit(&self, u: u64) -> Params {
        match *self {
            Params::Gemm(mut p) => {
                let (r, c) = cut_gemm(p.m, p.n, p.k);
                let (rb, cb) = (div_ceil(p.m, r), div_ceil(p.n, c));
                let per_batch = rb.saturating_mul(cb);
                let (bi, k) = (div(u, per_batch), rem(u, per_batch));
                let (r0, c0) = (div(k, cb).saturating_mul(r), rem(k, cb).saturating_mul(c));
                let (ar, _) = gemm_strides(p.lda, p.flags & GEMM_TRANS_A != 0);
                let (_, bc) = gemm_strides(p.ldb, p.flags & GEMM_TRANS_B != 0);
                let size = |d: u8| Dtype::from_u8(d).map_or(1, Dtype::size);
                p.a = at(
                    p.a,
                    bi.wrapping_mul(p.stride_a)
                        .wrapping_add(r0.wrapping_mul(ar)),
                    size(p.dtype_a),
                );
                p.b = at(
                    p.b,
                    bi.wrapping_mul(p.stride_b)
                        .wrapping_add(c0.wrapping_mul(bc)),
                    size(p.dtype_b),
                );
                let oc = bi
                    .wrapping_mul(p.stride_c)
                    .wrapping_add(r0.wrapping_mul(p.ldc))
                    .wrapping_add(c0);
                p.c = at(p.c, oc, size(p.dtype_c));
                p.m = r.min(p.m.saturating_sub(r0));
                p.n = c.min(p.n.saturating_sub(c0));
                p.batch = 1;
                Params::Gemm(p)
            }
            Params::Elementwise(mut p) => {
                let cut = cut_rows(&p.shape, 4);
                let (idx, dims) = row_unit(&p.shape, cut, u);
                let size = |d: u8| Dtype::from_u8(d).map_or(1, Dtype::size);
                p.a = at(p.a, offset(&idx, &p.stride_a), size(p.dtype_a));
                if p.b != 0 {
                    p.b = at(p.b, offset(&idx, &p.stride_b), size(p.dtype_b));
                }
                p.dst = at(p.dst, offset(&idx, &p.stride_dst), size(p.dtype_dst));
                p.shape = dims;
                Params::Elementwise(p)
            }
            Params::Reduce(mut p) => {
                let (out, len) = reduce_out(&p);
                let cut = cut_rows(&out, len.saturating_mul(2).max(1));
                let (idx, mut dims) = row_unit(&out, cut, u);
                let size = |d: u8| Dtype::from_u8(d).map_or(1, Dtype::size);
                p.src = at(p.src, offset(&idx, &p.stride_src), size(p.dtype_src));
                p.dst = at(p.dst, offset(&idx, &p.stride_dst), size(p.dtype_dst));
                if let Some(d) = dims.get_mut(p.axis as usize) {
                    *d = len;
                }
                p.shape = dims;
                Params::Reduce(p)
            }
            Params::Softmax(mut p) => {
                let rows = rows_per(p.cols);
                let r0 = u.saturating_mul(rows);
                let size = |d: u8| Dtype::from_u8(d).map_or(1, Dtype::size);
                p.src = at(p.src, r0.wrapping_mul(p.ld_src), size(p.dtype_src));
                p.dst = at(p.dst, r0.wrapping_mul(p.ld_dst), size(p.dtype_dst));
                p.rows = rows.min(p.rows.saturating_sub(r0));
                Params::Softmax(p)
            }
            Params::Norm(mut p) => {
                let rows = rows_per(p.cols);
                let r0 = u.saturating_mul(rows);
                let size = |d: u8| Dtype::from_u8(d).map_or(1, Dtype::size);
                p.src = at(p.src, r0.wrapping_mul(p.ld_src), size(p.dtype_src));
                p.dst = at(p.dst, r0.wrapping_mul(p.ld_dst), size(p.dtype_dst));
                p.rows = rows.min(p.rows.saturating_sub(r0));
                Params::Norm(p)
            }
        }
    }
}

/// Rows of a softmax or norm per unit (each element costs about 8).
fn rows_per(cols: u64) -> u64 {
    div(UNIT_WORK, cols.saturating_mul(8).max(1)).max(1)
}

/// A reduction's output shape (the axis 1) and the axis's length.
fn reduce_out(p: &ReduceParams) -> ([u64; 4], u64) {
    let mut out = p.shape;
    let i = (p.axis as usize).min(3);
    let len = out[i];
    out[i] = 1;
    (out, len)
}
