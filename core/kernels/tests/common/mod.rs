//! What the kernel tests share: owned operands of every dtype, a seeded generator for their
//! contents, the accuracy constants of the crate's docs, random cuts of a launch into units.
#![allow(dead_code)]

use std::ops::Range;

use davinci_kernels::{bf16, f16, DType, Slice, SliceMut};

/// SplitMix64: operands' contents from one seed (proptest picks the seed and the shapes).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in `[-mag, mag]`.
    pub fn sym(&mut self, mag: f64) -> f64 {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * mag
    }
}

pub const ALL: [DType; 5] = [DType::F32, DType::F16, DType::Bf16, DType::I8, DType::I32];
pub const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::Bf16];

/// An owned operand.
#[derive(Clone, Debug)]
pub enum Buf {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    I8(Vec<i8>),
    I32(Vec<i32>),
}

const SPECIALS: [f64; 6] = [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-41];

impl Buf {
    /// `len` elements: floats uniform in `[-mag, mag]` (with `specials`, one in eight a zero,
    /// an infinity, NaN or a tiny value), integers over their whole range.
    pub fn random(d: DType, len: usize, rng: &mut Rng, mag: f64, specials: bool) -> Buf {
        let f = |rng: &mut Rng| {
            if specials && rng.below(8) == 0 {
                SPECIALS[rng.below(SPECIALS.len())]
            } else {
                rng.sym(mag)
            }
        };
        match d {
            DType::F32 => Buf::F32((0..len).map(|_| f(rng) as f32).collect()),
            DType::F16 => Buf::F16((0..len).map(|_| f16::from_f64(f(rng))).collect()),
            DType::Bf16 => Buf::Bf16((0..len).map(|_| bf16::from_f64(f(rng))).collect()),
            DType::I8 => Buf::I8((0..len).map(|_| rng.next() as i8).collect()),
            DType::I32 => Buf::I32((0..len).map(|_| rng.next() as i32).collect()),
        }
    }

    pub fn s(&self) -> Slice<'_> {
        match self {
            Buf::F32(v) => Slice::F32(v),
            Buf::F16(v) => Slice::F16(v),
            Buf::Bf16(v) => Slice::Bf16(v),
            Buf::I8(v) => Slice::I8(v),
            Buf::I32(v) => Slice::I32(v),
        }
    }

    pub fn m(&mut self) -> SliceMut<'_> {
        match self {
            Buf::F32(v) => SliceMut::F32(v),
            Buf::F16(v) => SliceMut::F16(v),
            Buf::Bf16(v) => SliceMut::Bf16(v),
            Buf::I8(v) => SliceMut::I8(v),
            Buf::I32(v) => SliceMut::I32(v),
        }
    }

    pub fn len(&self) -> usize {
        self.s().len()
    }

    pub fn get(&self, i: usize) -> f64 {
        match self {
            Buf::F32(v) => f64::from(v[i]),
            Buf::F16(v) => v[i].to_f64(),
            Buf::Bf16(v) => v[i].to_f64(),
            Buf::I8(v) => f64::from(v[i]),
            Buf::I32(v) => f64::from(v[i]),
        }
    }

    /// The same bits, element for element.
    pub fn bits(&self) -> Vec<u64> {
        match self {
            Buf::F32(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
            Buf::F16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
            Buf::Bf16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
            Buf::I8(v) => v.iter().map(|x| *x as u8 as u64).collect(),
            Buf::I32(v) => v.iter().map(|x| *x as u32 as u64).collect(),
        }
    }
}

/// The unit roundoff `u` of the crate docs.
pub fn u(d: DType) -> f64 {
    match d {
        DType::F32 => 2f64.powi(-24),
        DType::F16 => 2f64.powi(-11),
        DType::Bf16 => 2f64.powi(-8),
        DType::I8 | DType::I32 => 0.0,
    }
}

/// The smallest positive subnormal `s` of the crate docs.
pub fn s(d: DType) -> f64 {
    match d {
        DType::F32 => 2f64.powi(-149),
        DType::F16 => 2f64.powi(-24),
        DType::Bf16 => 2f64.powi(-133),
        DType::I8 | DType::I32 => 0.0,
    }
}

/// `y` within `tol` of `r` (equal infinities, both NaN).
pub fn close(y: f64, r: f64, tol: f64) -> bool {
    (y.is_nan() && r.is_nan()) || y == r || (y - r).abs() <= tol
}

/// Every element of `got` within `tol[i]` of `want`; the first that is not, as a message.
pub fn check_close(got: &Buf, want: &Buf, tol: &[f64]) -> Result<(), String> {
    assert_eq!(got.len(), want.len());
    assert_eq!(got.len(), tol.len());
    for (i, t) in tol.iter().enumerate() {
        let (y, r) = (got.get(i), want.get(i));
        if !close(y, r, *t) {
            return Err(format!(
                "element {i}: got {y:e}, reference {r:e}, tolerance {t:e}"
            ));
        }
    }
    Ok(())
}

/// `0..total` cut at random into consecutive units (empty ones among them).
pub fn random_cut(total: usize, rng: &mut Rng) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let len = match rng.below(4) {
            0 => 0,
            1 => 1,
            2 => rng.below(total.max(1) + 1),
            _ => rng.below(80) + 1,
        };
        let end = (at + len).min(total);
        out.push(at..end);
        at = end;
        if at == total {
            return out;
        }
    }
}
