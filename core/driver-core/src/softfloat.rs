//! IEEE 754 binary32 addition in integer arithmetic, and binary16 (f16) and bfloat16 to and
//! from it (ABI 1.5's ADD of F16 and BF16).
//!
//! The software engine's `ADD` with `DTYPE_F32` must give the same bits in every host. The
//! Linux kernel builds Rust soft-float and has no `__addsf3`, so the engine cannot use `f32 +`
//! there; it uses this function everywhere instead, so the mock device and the kernel module
//! agree bit for bit. Round to nearest, ties to even (the IEEE default and what SSE, NEON and
//! every mainstream FPU use with default control registers); subnormals are kept (no
//! flush-to-zero); overflow gives a signed infinity; `inf + -inf` gives the default quiet NaN;
//! a NaN operand is returned quieted (the first one if both are NaN), as x86 SSE does.
//!
//! The algorithm is the classic one (three guard bits: guard, round, sticky), as in
//! compiler-rt's and compiler-builtins' `__addsf3`. Tested against the host FPU on every pair
//! of a set of edge values and on millions of random pairs.

const SIG_BITS: u32 = 23;
const IMPLICIT: u32 = 1 << SIG_BITS;
const SIG_MASK: u32 = IMPLICIT - 1;
const SIGN: u32 = 1 << 31;
const ABS_MASK: u32 = SIGN - 1;
const INF: u32 = ABS_MASK & !SIG_MASK;
const QUIET: u32 = IMPLICIT >> 1;
const DEFAULT_NAN: u32 = INF | QUIET;
const MAX_EXP: i32 = 0xff;

/// Shifts `sig` right by `shift`, or-ing every bit shifted out into bit 0 (the sticky bit).
fn shift_right_sticky(sig: u32, shift: u32) -> u32 {
    match shift {
        0 => sig,
        1..=31 => (sig >> shift) | u32::from(sig << (32 - shift) != 0),
        _ => u32::from(sig != 0),
    }
}

/// Exponent and significand (implicit bit included) of a finite non-zero magnitude; a
/// subnormal is normalised, giving an exponent below 1.
fn unpack(abs: u32) -> (i32, u32) {
    let exp = (abs >> SIG_BITS) as i32;
    let sig = abs & SIG_MASK;
    if exp == 0 {
        // Subnormal (sig != 0 here): shift the leading one up to the implicit position.
        let shift = sig.leading_zeros() - IMPLICIT.leading_zeros();
        (1 - shift as i32, sig << shift)
    } else {
        (exp, sig | IMPLICIT)
    }
}

/// `a + b` on the bit patterns of two `f32`s, as an IEEE 754 FPU in its default mode computes it.
pub fn f32_add(a: u32, b: u32) -> u32 {
    let (a_abs, b_abs) = (a & ABS_MASK, b & ABS_MASK);

    // NaN, infinity and zero operands.
    if a_abs > INF {
        return a | QUIET;
    }
    if b_abs > INF {
        return b | QUIET;
    }
    if a_abs == INF {
        return if b_abs == INF && (a ^ b) == SIGN {
            DEFAULT_NAN
        } else {
            a
        };
    }
    if b_abs == INF {
        return b;
    }
    if a_abs == 0 {
        // +0 + -0 is +0 when rounding to nearest; -0 + -0 is -0.
        return if b_abs == 0 { a & b } else { b };
    }
    if b_abs == 0 {
        return a;
    }

    // Both finite and non-zero; make `a` the larger magnitude.
    let (big, small) = if b_abs > a_abs { (b, a) } else { (a, b) };
    let (mut exp, big_sig) = unpack(big & ABS_MASK);
    let (small_exp, small_sig) = unpack(small & ABS_MASK);
    let sign = big & SIGN;

    // Three extra low bits for guard, round and sticky.
    let mut sig = big_sig << 3;
    let small_sig = shift_right_sticky(small_sig << 3, (exp - small_exp) as u32);

    if (big ^ small) & SIGN != 0 {
        sig -= small_sig;
        if sig == 0 {
            // Exact cancellation gives +0 when rounding to nearest.
            return 0;
        }
        // Renormalise after cancellation (the implicit bit sits at bit 26 now).
        let shift = sig
            .leading_zeros()
            .saturating_sub((IMPLICIT << 3).leading_zeros());
        sig <<= shift;
        exp -= shift as i32;
    } else {
        sig += small_sig;
        if sig & (IMPLICIT << 4) != 0 {
            // Carry out: one more bit of exponent, keep the dropped bit sticky.
            sig = shift_right_sticky(sig, 1);
            exp += 1;
        }
    }

    if exp >= MAX_EXP {
        return INF | sign;
    }
    if exp <= 0 {
        // Subnormal result: denormalise to exponent field 0.
        sig = shift_right_sticky(sig, (1 - exp) as u32);
        exp = 0;
    }

    let guard_round_sticky = sig & 0x7;
    // The implicit bit is masked off; a subnormal that rounds up into the normal range
    // carries into the exponent field by itself below.
    let mut result = sign | ((exp as u32) << SIG_BITS) | ((sig >> 3) & SIG_MASK);
    if guard_round_sticky > 4 || (guard_round_sticky == 4 && result & 1 == 1) {
        // Rounding up may carry into the exponent, and from the largest finite value into
        // infinity: both are the right answer.
        result += 1;
    }
    result
}

/// The `f32` an IEEE binary16 stands for, exactly (a NaN keeps its payload and quiet bit).
pub fn f16_to_f32(h: u16) -> u32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let exp = (h >> 10) & 0x1f;
    let man = h & 0x3ff;
    match exp {
        0x1f => sign | INF | (man << 13),
        0 if man == 0 => sign,
        0 => {
            // Subnormal: man · 2⁻²⁴, with its top bit at position `top` (0..=9).
            let top = 31 - man.leading_zeros();
            let e = top + 127 - 24;
            sign | (e << SIG_BITS) | ((man << (SIG_BITS - top)) & SIG_MASK)
        }
        _ => sign | ((exp + 112) << SIG_BITS) | (man << 13),
    }
}

/// `f` (`f32` bits) rounded to the nearest binary16, ties to even; past the largest finite
/// value an infinity; a NaN stays a NaN, quieted, with the top of its payload.
pub fn f32_to_f16(f: u32) -> u16 {
    let sign = ((f >> 16) & 0x8000) as u16;
    let abs = f & ABS_MASK;
    if abs > INF {
        return sign | 0x7e00 | ((abs >> 13) & 0x3ff) as u16;
    }
    if abs >= 0x477f_f000 {
        // 65520 and up (65504 is the largest finite f16; 65520 ties to the even infinity).
        return sign | 0x7c00;
    }
    let exp = (abs >> SIG_BITS) as i32 - 127 + 15;
    if exp >= 1 {
        let man = abs & SIG_MASK;
        let mut h = ((exp as u32) << 10) | (man >> 13);
        let rest = man & 0x1fff;
        if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
            h += 1;
        }
        return sign | h as u16;
    }
    // Subnormal or zero: the significand (implicit bit included) in units of 2⁻²⁴.
    let sig = if abs >> SIG_BITS == 0 {
        return sign; // an f32 subnormal is far below half the smallest f16 subnormal
    } else {
        (abs & SIG_MASK) | IMPLICIT
    };
    let shift = (14 - exp) as u32;
    if shift >= 32 {
        return sign;
    }
    let mut k = sig >> shift;
    let rest = sig & ((1u32 << shift) - 1);
    let half = 1u32 << (shift - 1);
    if rest > half || (rest == half && k & 1 == 1) {
        k += 1;
    }
    sign | k as u16
}

/// The `f32` a bfloat16 stands for, exactly.
pub fn bf16_to_f32(h: u16) -> u32 {
    u32::from(h) << 16
}

/// `f` (`f32` bits) rounded to the nearest bfloat16, ties to even; a NaN stays a NaN, quieted.
pub fn f32_to_bf16(f: u32) -> u16 {
    if f & ABS_MASK > INF {
        return ((f >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((f >> 16) & 1);
    (f.wrapping_add(round) >> 16) as u16
}

/// `a + b` of two binary16s, rounded once to nearest even: the exact sum rounded to `f32`
/// first, which is harmless (24 ≥ 2·11 + 2 bits: double rounding through f32 gives the
/// correctly rounded f16 sum).
pub fn f16_add(a: u16, b: u16) -> u16 {
    f32_to_f16(f32_add(f16_to_f32(a), f16_to_f32(b)))
}

/// `a + b` of two bfloat16s, rounded once to nearest even (as [`f16_add`]: 24 ≥ 2·8 + 2).
pub fn bf16_add(a: u16, b: u16) -> u16 {
    f32_to_bf16(f32_add(bf16_to_f32(a), bf16_to_f32(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(a: u32, b: u32) {
        let got = f32_add(a, b);
        let want = (f32::from_bits(a) + f32::from_bits(b)).to_bits();
        if f32::from_bits(want).is_nan() {
            assert!(
                f32::from_bits(got).is_nan(),
                "{a:#010x} + {b:#010x}: got {got:#010x}, want a NaN"
            );
            // The quiet bit is always set in what we return.
            assert_ne!(got & QUIET, 0, "{a:#010x} + {b:#010x}: {got:#010x}");
        } else {
            assert_eq!(
                got,
                want,
                "{a:#010x} + {b:#010x} ({:e} + {:e}): got {:e}, want {:e}",
                f32::from_bits(a),
                f32::from_bits(b),
                f32::from_bits(got),
                f32::from_bits(want)
            );
        }
    }

    const EDGES: [u32; 30] = [
        0x0000_0000, // +0
        0x0000_0001, // smallest subnormal
        0x0000_0002,
        0x0000_0003,
        0x003f_ffff,
        0x0040_0000,
        0x007f_ffff, // largest subnormal
        0x0080_0000, // smallest normal
        0x0080_0001,
        0x00ff_ffff,
        0x0100_0000,
        0x3400_0000, // 2^-23
        0x3380_0000, // 2^-24: half an ulp of 1.0
        0x3380_0001,
        0x3f7f_ffff, // just below 1.0
        0x3f80_0000, // 1.0
        0x3f80_0001,
        0x3fc0_0000, // 1.5
        0x4000_0000, // 2.0
        0x4b00_0000, // 2^23
        0x4b7f_ffff,
        0x4b80_0000, // 2^24
        0x7e80_0000,
        0x7f00_0000,
        0x7f7f_fffe,
        0x7f7f_ffff, // largest finite
        0x7f80_0000, // infinity
        0x7f80_0001, // signalling NaN
        0x7fc0_0000, // quiet NaN
        0x7fff_ffff,
    ];

    #[test]
    fn every_pair_of_edge_values_and_their_negations_matches_the_fpu() {
        for &x in &EDGES {
            for &y in &EDGES {
                for (sx, sy) in [(0, 0), (SIGN, 0), (0, SIGN), (SIGN, SIGN)] {
                    check(x | sx, y | sy);
                }
            }
        }
    }

    #[test]
    fn near_neighbours_and_near_cancellations_match_the_fpu() {
        // Operands within a few ulps or a few binades of each other: where the guard, round
        // and sticky bits and the renormalisation after cancellation all matter.
        for &base in &EDGES {
            for d in 0..64u32 {
                for e in [0u32, 1, 2, 3, 23, 24, 25, 26, 27] {
                    let a = base.wrapping_add(d) & ABS_MASK;
                    let b = base.wrapping_sub(e << SIG_BITS).wrapping_sub(d) & ABS_MASK;
                    check(a, b);
                    check(a, b | SIGN);
                    check(a | SIGN, b);
                }
            }
        }
    }

    #[test]
    fn random_pairs_match_the_fpu() {
        // xorshift64*: deterministic, so a failure reproduces.
        let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
        };
        for _ in 0..2_000_000 {
            let a = next();
            let b = next();
            check(a, b);
            // Same binade, so the subtraction path with heavy cancellation is common.
            check(a, (b & (SIGN | SIG_MASK)) | (a & INF));
        }
    }

    #[test]
    fn documented_special_cases() {
        assert_eq!(f32_add(0x8000_0000, 0x0000_0000), 0); // -0 + +0 = +0
        assert_eq!(f32_add(0x8000_0000, 0x8000_0000), SIGN); // -0 + -0 = -0
        assert_eq!(f32_add(INF, INF | SIGN), DEFAULT_NAN);
        assert_eq!(f32_add(0x7f80_0001, 0x3f80_0000), 0x7fc0_0001); // sNaN quieted
        assert_eq!(f32_add(0x7fc0_0002, 0x7fc0_0003), 0x7fc0_0002); // first NaN wins
        assert_eq!(f32_add(0x7f7f_ffff, 0x7f7f_ffff), INF); // overflow
        assert_eq!(f32_add(0x3f80_0000, 0x3380_0000), 0x3f80_0000); // tie to even (down)
        assert_eq!(f32_add(0x3f80_0001, 0x3380_0000), 0x3f80_0002); // tie to even (up)
    }

    #[test]
    fn f16_and_bf16_conversions_match_the_half_crate() {
        use half::{bf16, f16};
        for h in 0..=u16::MAX {
            let want = f16::from_bits(h).to_f32().to_bits();
            let got = f16_to_f32(h);
            if f32::from_bits(want).is_nan() {
                assert!(f32::from_bits(got).is_nan(), "{h:#06x}");
                assert_eq!(f32_to_f16(got), h | 0x0200, "a NaN round-trips quieted");
            } else {
                assert_eq!(got, want, "f16 {h:#06x} to f32");
                assert_eq!(f32_to_f16(got), h, "f16 {h:#06x} round-trips");
            }
            let want = bf16::from_bits(h).to_f32();
            if want.is_nan() {
                // half quiets a NaN on the way; the conversion here keeps its bits.
                assert!(f32::from_bits(bf16_to_f32(h)).is_nan());
            } else {
                assert_eq!(bf16_to_f32(h), want.to_bits(), "bf16 {h:#06x} to f32");
            }
        }
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..2_000_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = (x >> 16) as u32;
            let v = f32::from_bits(f);
            if v.is_nan() {
                continue;
            }
            assert_eq!(
                f32_to_f16(f),
                f16::from_f32(v).to_bits(),
                "f32 {f:#010x} to f16"
            );
            assert_eq!(
                f32_to_bf16(f),
                bf16::from_f32(v).to_bits(),
                "f32 {f:#010x} to bf16"
            );
        }
    }

    #[test]
    fn f16_and_bf16_sums_are_correctly_rounded() {
        use half::{bf16, f16};
        let mut x = 0x0bad_cafe_dead_beefu64;
        for i in 0..1_000_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (a, b) = ((x >> 8) as u16, (x >> 40) as u16);
            // Half the pairs of nearby magnitudes, where cancellation and ties happen.
            let b = if i % 2 == 0 {
                b
            } else {
                (a & 0xfc00) | (b & 0x83ff)
            };
            // The sum of two f16s (or bf16s) is exact in f64; half rounds it once.
            let want = f16::from_f64(f16::from_bits(a).to_f64() + f16::from_bits(b).to_f64());
            let got = f16::from_bits(f16_add(a, b));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "f16 {a:#06x} + {b:#06x}: got {:#06x}, want {:#06x}",
                got.to_bits(),
                want.to_bits()
            );
            let want = bf16::from_f64(bf16::from_bits(a).to_f64() + bf16::from_bits(b).to_f64());
            let got = bf16::from_bits(bf16_add(a, b));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "bf16 {a:#06x} + {b:#06x}: got {:#06x}, want {:#06x}",
                got.to_bits(),
                want.to_bits()
            );
        }
    }
}
