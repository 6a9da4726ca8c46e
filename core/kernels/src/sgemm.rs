//! The one `unsafe` call of the crate: `matrixmultiply::sgemm`, which takes raw pointers and
//! strides. [`sgemm`] checks every element the call reaches against its slice first, and that
//! C's elements are distinct, so the call reads and writes only inside the borrows it is given
//! (C, a `&mut`, cannot alias A or B).
#![allow(unsafe_code)]

use crate::error::{Error, Operand, Problem, Result};
use crate::layout::{check_distinct, check_fits};

/// A strided f32 matrix view: element `(i, j)` is `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

fn isize_of(v: usize, operand: Operand) -> Result<isize> {
    isize::try_from(v).map_err(|_| Error::new(operand, Problem::Overflow))
}

/// `C ← alpha·A·B + beta·C` for an `m×k` A, a `k×n` B and an `m×n` C (`c[i * rsc + j * csc]`),
/// accumulating in f32. With `beta == 0` C is not read.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm(
    (m, k, n): (usize, usize, usize),
    alpha: f32,
    a: Mat<'_>,
    b: Mat<'_>,
    beta: f32,
    c: &mut [f32],
    (rsc, csc): (usize, usize),
) -> Result {
    check_fits(&[m, k], &[a.rs, a.cs], a.data.len(), Operand::A)?;
    check_fits(&[k, n], &[b.rs, b.cs], b.data.len(), Operand::B)?;
    check_fits(&[m, n], &[rsc, csc], c.len(), Operand::C)?;
    check_distinct(&[m, n], &[rsc, csc], Operand::C)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let (rsa, csa) = (isize_of(a.rs, Operand::A)?, isize_of(a.cs, Operand::A)?);
    let (rsb, csb) = (isize_of(b.rs, Operand::B)?, isize_of(b.cs, Operand::B)?);
    let (rsc, csc) = (isize_of(rsc, Operand::C)?, isize_of(csc, Operand::C)?);
    // SAFETY: the checks above: every `(i, p)` with `i < m`, `p < k` has
    // `i * rsa + p * csa < a.data.len()` (the footprint of A fits its slice; when `k == 0`
    // nothing of A or B is read), likewise B for `(p, j)` and C for `(i, j)`, all strides
    // fit `isize`, and C's `m×n` elements are pairwise distinct, as `sgemm` requires. C is a
    // `&mut` borrow, so it overlaps neither A nor B. `sgemm` keeps no pointer after it
    // returns, and with `beta == 0` it does not read C (documented), so C's contents never
    // matter for soundness.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.data.as_ptr(),
            rsa,
            csa,
            b.data.as_ptr(),
            rsb,
            csb,
            beta,
            c.as_mut_ptr(),
            rsc,
            csc,
        );
    }
    Ok(())
}
