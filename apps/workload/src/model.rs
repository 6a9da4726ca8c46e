//! The CPU reference: deterministic pseudo-random data and what each task must produce.
#![forbid(unsafe_code)]

use davinci_shim::Dtype;

/// xorshift64*: small, fast, deterministic (no external crate, same stream everywhere).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is remapped).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A finite f32 in about [-4096, 4096) with a fractional part, as raw bits (any bits are
    /// valid u32/i32, and these are also sane floats: no NaN or infinity in f32 adds).
    pub fn float_bits(&mut self) -> u32 {
        float_bits(self.next_u32())
    }
}

/// A finite f32 (|x| < 4096, multiples of 1/256) derived from `x`, as raw bits.
pub fn float_bits(x: u32) -> u32 {
    (((x % (1 << 21)) as i32 - (1 << 20)) as f32 / 256.0).to_bits()
}

/// A 64-bit mix of `(a, b)` (for fill patterns that depend on stream and round).
pub fn mix(a: u64, b: u64) -> u64 {
    let mut r = Rng::new(a.wrapping_mul(0x1000_0000_01b3) ^ b.rotate_left(29));
    r.next_u64()
}

/// `a + b` elementwise as `dtype` (u32/i32 wrapping, f32 IEEE), on raw 32-bit words: the
/// workload adds the 32-bit dtypes only ([`DTYPES`]); a narrower one is added as u32 words.
pub fn add(dtype: Dtype, a: &[u32], b: &[u32]) -> Vec<u32> {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| match dtype {
            Dtype::I32 => (x as i32).wrapping_add(y as i32) as u32,
            Dtype::F32 => (f32::from_bits(x) + f32::from_bits(y)).to_bits(),
            _ => x.wrapping_add(y),
        })
        .collect()
}

/// The dtypes in a fixed rotation.
pub const DTYPES: [Dtype; 3] = [Dtype::U32, Dtype::I32, Dtype::F32];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_matches_each_dtype() {
        assert_eq!(add(Dtype::U32, &[u32::MAX], &[2]), vec![1]);
        assert_eq!(
            add(Dtype::I32, &[(-5i32) as u32], &[3]),
            vec![(-2i32) as u32]
        );
        assert_eq!(
            add(Dtype::F32, &[1.5f32.to_bits()], &[2.25f32.to_bits()]),
            vec![3.75f32.to_bits()]
        );
    }

    #[test]
    fn float_bits_are_finite() {
        let mut r = Rng::new(7);
        for _ in 0..10_000 {
            let f = f32::from_bits(r.float_bits());
            assert!(f.is_finite() && f.abs() <= 4096.0);
        }
    }
}
