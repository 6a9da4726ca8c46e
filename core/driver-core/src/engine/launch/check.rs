//! Steps 1 to 3, 5's leading dimension and 6 of docs/abi.md 6.1 on a decoded block: its
//! fields, dtypes and shape, and its output against itself and its inputs.

use davinci_uapi::kernels::{
    EwOp, NormKind, ReduceOp, GEMM_TRANS_A, GEMM_TRANS_B, KERNEL_MAX_K, KERNEL_MAX_ROW,
};
use davinci_uapi::{Dtype, Errno, FaultKind as K, FaultOperand as O};

use super::{Operand, Params, FLOATS, NUMERIC};
use crate::error::{Error, Result};

fn err(errno: Errno, msg: &'static str, op: O, kind: K) -> Error {
    Error::at(errno, msg, op, kind)
}

fn dtype(v: u8, takes: u64, op: O) -> Result<Dtype> {
    match Dtype::from_u8(v) {
        Some(d) if d.bit() & takes != 0 => Ok(d),
        _ => Err(err(
            Errno::EBADMSG,
            "a dtype this kernel does not take",
            op,
            K::Unknown,
        )),
    }
}

fn not_zero(v: u64, op: O, msg: &'static str) -> Result<()> {
    if v == 0 {
        Ok(())
    } else {
        Err(err(Errno::EBADMSG, msg, op, K::NotZero))
    }
}

fn invalid(op: O, msg: &'static str) -> Error {
    err(Errno::EINVAL, msg, op, K::Invalid)
}

fn too_large(bound: u64, msg: &'static str) -> Error {
    err(Errno::E2BIG, msg, O::Shape, K::TooLarge).value(u32::try_from(bound).unwrap_or(u32::MAX))
}

fn product(dims: &[u64]) -> Result<u64> {
    dims.iter()
        .try_fold(1u64, |a, d| a.checked_mul(*d))
        .ok_or(err(
            Errno::ERANGE,
            "the shape's element count overflows",
            O::Shape,
            K::Overflow,
        ))
}

impl Params {
    /// Steps 1 to 3 of abi.md 6.1 (fields, dtypes, shape); returns the launch's output
    /// elements (the descriptor's result; 0: nothing to compute).
    pub fn check(&self) -> Result<u64> {
        match self {
            Params::Gemm(p) => {
                not_zero(
                    u64::from(p.reserved0) | p.reserved1,
                    O::Params,
                    "reserved fields of the GEMM block must be 0",
                )?;
                not_zero(
                    u64::from(p.flags & !(GEMM_TRANS_A | GEMM_TRANS_B)),
                    O::Params,
                    "GEMM flags other than TRANS_A and TRANS_B",
                )?;
                let a = dtype(p.dtype_a, NUMERIC, O::A)?;
                let b = dtype(p.dtype_b, NUMERIC, O::B)?;
                let c = dtype(p.dtype_c, NUMERIC, O::C)?;
                if a == Dtype::I8 || b == Dtype::I8 {
                    if a != Dtype::I8 {
                        return Err(invalid(O::A, "an int8 GEMM needs A int8 too"));
                    }
                    if b != Dtype::I8 {
                        return Err(invalid(O::B, "an int8 GEMM needs B int8 too"));
                    }
                    if c != Dtype::I32 {
                        return Err(invalid(O::C, "an int8 GEMM writes an int32 C"));
                    }
                    not_zero(
                        u64::from(p.alpha | p.beta),
                        O::Params,
                        "an int8 GEMM's alpha and beta must be 0",
                    )?;
                } else {
                    for (d, op) in [(a, O::A), (b, O::B), (c, O::C)] {
                        if !d.is_float() {
                            return Err(invalid(op, "a float GEMM takes F32, F16, BF16 only"));
                        }
                    }
                }
                if p.k > KERNEL_MAX_K {
                    return Err(too_large(KERNEL_MAX_K, "k is past DAVINCI_KERNEL_MAX_K"));
                }
                product(&[p.batch, p.m, p.k])?;
                product(&[p.batch, p.k, p.n])?;
                product(&[p.batch, p.m, p.n])
            }
            Params::Elementwise(p) => {
                not_zero(
                    u64::from(p.reserved0) | p.reserved[0] | p.reserved[1],
                    O::Params,
                    "reserved fields of the elementwise block must be 0",
                )?;
                let Some(op) = EwOp::from_u32(p.op) else {
                    return Err(err(
                        Errno::EBADMSG,
                        "unknown elementwise op",
                        O::Params,
                        K::Unknown,
                    ));
                };
                let d = dtype(p.dtype_dst, NUMERIC, O::C)?;
                let a = dtype(p.dtype_a, NUMERIC, O::A)?;
                if op.is_binary() {
                    let b = dtype(p.dtype_b, NUMERIC, O::B)?;
                    if b != d {
                        return Err(invalid(O::B, "b's dtype must be dst's"));
                    }
                } else {
                    let s = p.stride_b;
                    not_zero(
                        p.b | u64::from(p.dtype_b) | s[0] | s[1] | s[2] | s[3],
                        O::B,
                        "a unary op takes no b: b, dtype_b and stride_b must be 0",
                    )?;
                }
                if op != EwOp::Cast && a != d {
                    return Err(invalid(O::A, "a's dtype must be dst's (but for CAST)"));
                }
                if matches!(op, EwOp::Gelu | EwOp::Silu | EwOp::Exp) && !d.is_float() {
                    return Err(invalid(O::A, "GELU, SILU and EXP take floats only"));
                }
                product(&p.shape)
            }
            Params::Reduce(p) => {
                not_zero(
                    u64::from(p.reserved0) | u64::from(p.reserved1) | p.reserved[0] | p.reserved[1],
                    O::Params,
                    "reserved fields of the reduce block must be 0",
                )?;
                let Some(op) = ReduceOp::from_u32(p.op) else {
                    return Err(err(
                        Errno::EBADMSG,
                        "unknown reduction",
                        O::Params,
                        K::Unknown,
                    ));
                };
                let s = dtype(p.dtype_src, NUMERIC, O::A)?;
                let d = dtype(p.dtype_dst, NUMERIC, O::C)?;
                let widening = op == ReduceOp::Sum && s == Dtype::I8 && d == Dtype::I32;
                if d != s && !widening {
                    return Err(invalid(
                        O::C,
                        "dst's dtype must be src's (or I32 for an I8 sum)",
                    ));
                }
                let Some(len) = p.shape.get(p.axis as usize).copied() else {
                    return Err(invalid(O::Shape, "axis must be 0 to 3"));
                };
                if len > KERNEL_MAX_ROW {
                    return Err(too_large(
                        KERNEL_MAX_ROW,
                        "the axis is past DAVINCI_KERNEL_MAX_ROW",
                    ));
                }
                product(&p.shape)?;
                let mut out = p.shape;
                out[p.axis as usize] = 1;
                // An empty axis still writes every output element (0, or the lowest value).
                product(&out)
            }
            Params::Softmax(p) => {
                not_zero(
                    u64::from(p.reserved0) | u64::from(p.reserved1) | p.reserved,
                    O::Params,
                    "reserved fields of the softmax block must be 0",
                )?;
                dtype(p.dtype_src, FLOATS, O::A)?;
                dtype(p.dtype_dst, FLOATS, O::C)?;
                if p.cols > KERNEL_MAX_ROW {
                    return Err(too_large(
                        KERNEL_MAX_ROW,
                        "cols is past DAVINCI_KERNEL_MAX_ROW",
                    ));
                }
                product(&[p.rows, p.cols])
            }
            Params::Norm(p) => {
                not_zero(
                    u64::from(p.reserved0) | p.reserved[0] | p.reserved[1],
                    O::Params,
                    "reserved fields of the norm block must be 0",
                )?;
                if NormKind::from_u32(p.kind).is_none() {
                    return Err(err(Errno::EBADMSG, "unknown norm", O::Params, K::Unknown));
                }
                dtype(p.dtype_src, FLOATS, O::A)?;
                dtype(p.dtype_dst, FLOATS, O::C)?;
                for (addr, d, op) in [
                    (p.gamma, p.dtype_gamma, O::Gamma),
                    (p.beta, p.dtype_beta, O::Beta),
                ] {
                    if addr == 0 {
                        not_zero(u64::from(d), op, "without the operand its dtype must be 0")?;
                    } else {
                        dtype(d, FLOATS, op)?;
                    }
                }
                let (exp, neg) = (p.eps & 0x7f80_0000, p.eps & 0x8000_0000 != 0);
                if exp == 0x7f80_0000 || (neg && p.eps & 0x7fff_ffff != 0) {
                    return Err(invalid(O::Params, "eps must be finite and not negative"));
                }
                if p.cols > KERNEL_MAX_ROW {
                    return Err(too_large(
                        KERNEL_MAX_ROW,
                        "cols is past DAVINCI_KERNEL_MAX_ROW",
                    ));
                }
                product(&[p.rows, p.cols])
            }
        }
    }

    /// Step 5's leading dimension and step 6 of abi.md 6.1: the output's elements distinct,
    /// its footprint apart from every input's but where the kernel allows it in place.
    pub fn check_output(&self) -> Result<()> {
        let (ops, n) = self.operands();
        let ops = &ops[..n];
        let Some(out) = ops.iter().find(|o| o.output) else {
            return Ok(());
        };
        let (short, ld, min) = match self {
            Params::Gemm(p) => (p.m > 1 && p.n > 0, p.ldc, p.n),
            Params::Softmax(p) => (p.rows > 1 && p.cols > 0, p.ld_dst, p.cols),
            Params::Norm(p) => (p.rows > 1 && p.cols > 0, p.ld_dst, p.cols),
            _ => (false, 0, 0),
        };
        if short && ld < min {
            return Err(invalid(
                O::C,
                "the output's leading dimension is shorter than its row",
            ));
        }
        if !distinct(&out.dims, &out.strides) {
            return Err(err(
                Errno::EINVAL,
                "two elements of the output share memory",
                O::C,
                K::Overlap,
            ));
        }
        let span = |o: &Operand| (o.addr, o.addr.saturating_add(o.bytes().unwrap_or(u64::MAX)));
        let (c0, c1) = span(out);
        for i in ops.iter().filter(|o| !o.output) {
            let (i0, i1) = span(i);
            if i0 >= c1 || c0 >= i1 || i0 == i1 || c0 == c1 {
                continue;
            }
            let in_place = matches!(
                self,
                Params::Elementwise(_) | Params::Softmax(_) | Params::Norm(_)
            ) && matches!(i.op, O::A | O::B)
                && i.addr == out.addr
                && i.strides == out.strides
                && i.dtype.size() == out.dtype.size();
            if !in_place {
                return Err(err(
                    Errno::EINVAL,
                    "the output overlaps an input it may not overlap",
                    O::C,
                    K::Overlap,
                ));
            }
        }
        Ok(())
    }
}

/// No two elements share memory: with the dimensions longer than 1 ordered by stride, each
/// stride at least the extent of the ones inside it (the sufficient condition abi.md 6.1
/// states; every row-major or column-major layout with padding meets it).
pub fn distinct(dims: &[u64; 4], strides: &[u64; 4]) -> bool {
    if dims.contains(&0) {
        return true;
    }
    let mut v = [(0u64, 0u64); 4];
    let mut n = 0;
    for i in 0..4 {
        if dims[i] > 1 {
            v[n] = (strides[i], dims[i]);
            n += 1;
        }
    }
    let v = &mut v[..n];
    v.sort_unstable();
    let mut extent = 1u64;
    for (s, d) in v.iter() {
        if *s < extent {
            return false;
        }
        match (d - 1).checked_mul(*s).and_then(|x| x.checked_add(extent)) {
            Some(e) => extent = e,
            None => return false,
        }
    }
    true
}
