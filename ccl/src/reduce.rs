//! The arithmetic of reductions: element types, operators, and `acc = acc op x` over
//! little-endian bytes (the device's byte order). f16 and bf16 are converted to f32 and back
//! for each step (the `half` crate's conversions), as a device without half arithmetic does.

use half::{bf16, f16};

/// An element type of a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// Two's complement 32-bit integer (sums and products wrap).
    I32,
}

impl DataType {
    /// Bytes of one element.
    pub fn size(self) -> usize {
        match self {
            DataType::F32 | DataType::I32 => 4,
            DataType::F16 | DataType::Bf16 => 2,
        }
    }

    /// Its name, as NCCL spells it without the prefix (`float32`, `float16`, `bfloat16`,
    /// `int32`).
    pub fn name(self) -> &'static str {
        match self {
            DataType::F32 => "float32",
            DataType::F16 => "float16",
            DataType::Bf16 => "bfloat16",
            DataType::I32 => "int32",
        }
    }

    /// Every type, in the order above.
    pub const ALL: [DataType; 4] = [DataType::F32, DataType::F16, DataType::Bf16, DataType::I32];
}

/// A reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RedOp {
    /// The sum.
    Sum,
    /// The product.
    Prod,
    /// The largest (for floats: NaN if either is NaN).
    Max,
    /// The smallest (for floats: NaN if either is NaN).
    Min,
}

impl RedOp {
    /// Its name (`sum`, `prod`, `max`, `min`).
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Max => "max",
            RedOp::Min => "min",
        }
    }

    /// Every operator, in the order above.
    pub const ALL: [RedOp; 4] = [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min];

    fn f32(self, a: f32, b: f32) -> f32 {
        match self {
            RedOp::Sum => a + b,
            RedOp::Prod => a * b,
            // NaN wins either way (f32::max would drop it).
            RedOp::Max if a.is_nan() || b.is_nan() => f32::NAN,
            RedOp::Min if a.is_nan() || b.is_nan() => f32::NAN,
            RedOp::Max => a.max(b),
            RedOp::Min => a.min(b),
        }
    }

    fn i32(self, a: i32, b: i32) -> i32 {
        match self {
            RedOp::Sum => a.wrapping_add(b),
            RedOp::Prod => a.wrapping_mul(b),
            RedOp::Max => a.max(b),
            RedOp::Min => a.min(b),
        }
    }
}

/// `acc[i] = acc[i] op x[i]` for every element of `acc` (whole elements of `ty`; `x` at
/// least as long).
pub fn reduce_into(ty: DataType, op: RedOp, acc: &mut [u8], x: &[u8]) {
    let n = acc.len().min(x.len());
    let (acc, x) = (&mut acc[..n], &x[..n]);
    if typed(ty, op, acc, x) {
        return;
    }
    match ty {
        DataType::F32 => {
            for (a, b) in acc.chunks_exact_mut(4).zip(x.chunks_exact(4)) {
                let v = op.f32(f32::from_le_bytes(word(a)), f32::from_le_bytes(word(b)));
                a.copy_from_slice(&v.to_le_bytes());
            }
        }
        DataType::I32 => {
            for (a, b) in acc.chunks_exact_mut(4).zip(x.chunks_exact(4)) {
                let v = op.i32(i32::from_le_bytes(word(a)), i32::from_le_bytes(word(b)));
                a.copy_from_slice(&v.to_le_bytes());
            }
        }
        DataType::F16 => {
            for (a, b) in acc.chunks_exact_mut(2).zip(x.chunks_exact(2)) {
                let (p, q) = (
                    f16::from_le_bytes(half_word(a)),
                    f16::from_le_bytes(half_word(b)),
                );
                let v = f16::from_f32(op.f32(p.to_f32(), q.to_f32()));
                a.copy_from_slice(&v.to_le_bytes());
            }
        }
        DataType::Bf16 => {
            for (a, b) in acc.chunks_exact_mut(2).zip(x.chunks_exact(2)) {
                let (p, q) = (
                    bf16::from_le_bytes(half_word(a)),
                    bf16::from_le_bytes(half_word(b)),
                );
                let v = bf16::from_f32(op.f32(p.to_f32(), q.to_f32()));
                a.copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}

/// The f32 and i32 reductions on typed slices, where both byte slices are aligned for them
/// (on a little-endian host, whose order is the device's): whether it ran.
fn typed(ty: DataType, op: RedOp, acc: &mut [u8], x: &[u8]) -> bool {
    use zerocopy::FromBytes;
    if cfg!(target_endian = "big") {
        return false;
    }
    let whole = acc.len() - acc.len() % 4;
    match ty {
        DataType::F32 => {
            let (Ok(a), Ok(b)) = (
                <[f32]>::mut_from_bytes(&mut acc[..whole]),
                <[f32]>::ref_from_bytes(&x[..whole]),
            ) else {
                return false;
            };
            match op {
                RedOp::Sum => a.iter_mut().zip(b).for_each(|(p, q)| *p += *q),
                RedOp::Prod => a.iter_mut().zip(b).for_each(|(p, q)| *p *= *q),
                _ => a.iter_mut().zip(b).for_each(|(p, q)| *p = op.f32(*p, *q)),
            }
            true
        }
        DataType::I32 => {
            let (Ok(a), Ok(b)) = (
                <[i32]>::mut_from_bytes(&mut acc[..whole]),
                <[i32]>::ref_from_bytes(&x[..whole]),
            ) else {
                return false;
            };
            a.iter_mut().zip(b).for_each(|(p, q)| *p = op.i32(*p, *q));
            true
        }
        _ => false,
    }
}

fn word(b: &[u8]) -> [u8; 4] {
    [b[0], b[1], b[2], b[3]]
}

fn half_word(b: &[u8]) -> [u8; 2] {
    [b[0], b[1]]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn each_operator_on_each_type() {
        let mut a = f32s(&[1.0, -2.0, 3.0, f32::NAN]);
        reduce_into(
            DataType::F32,
            RedOp::Max,
            &mut a,
            &f32s(&[0.5, -1.0, 7.0, 1.0]),
        );
        let got: Vec<f32> = a.chunks(4).map(|c| f32::from_le_bytes(word(c))).collect();
        assert_eq!(&got[..3], &[1.0, -1.0, 7.0]);
        assert!(got[3].is_nan(), "NaN wins a max");

        let mut a: Vec<u8> = [i32::MAX, 3].iter().flat_map(|x| x.to_le_bytes()).collect();
        let b: Vec<u8> = [1i32, -4].iter().flat_map(|x| x.to_le_bytes()).collect();
        reduce_into(DataType::I32, RedOp::Sum, &mut a, &b);
        assert_eq!(i32::from_le_bytes(word(&a[..4])), i32::MIN, "wraps");
        assert_eq!(i32::from_le_bytes(word(&a[4..])), -1);

        let h = |v: f32| f16::from_f32(v).to_le_bytes();
        let mut a = [h(1.5), h(2.0)].concat();
        reduce_into(
            DataType::F16,
            RedOp::Prod,
            &mut a,
            &[h(2.0), h(-0.5)].concat(),
        );
        assert_eq!(f16::from_le_bytes(half_word(&a)).to_f32(), 3.0);
        assert_eq!(f16::from_le_bytes(half_word(&a[2..])).to_f32(), -1.0);

        let b = |v: f32| bf16::from_f32(v).to_le_bytes();
        let mut a = [b(1.0)].concat();
        reduce_into(DataType::Bf16, RedOp::Min, &mut a, &b(-3.0));
        assert_eq!(bf16::from_le_bytes(half_word(&a)).to_f32(), -3.0);
    }
}
