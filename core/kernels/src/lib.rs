//! The device's built-in kernels as pure computation on host slices (issue 43,
//! `docs/compute.md`): GEMM ([`gemm::gemm`]), elementwise ops ([`elementwise::elementwise`]),
//! reductions ([`reduce::reduce`]), softmax ([`rows::softmax`]), layer and RMS norm
//! ([`rows::norm`]), over f32, f16, bf16 (the `half` crate), i8 and i32. No ABI and no device
//! memory: a host copies operands out of device memory into slices, runs a kernel, and copies
//! the output back. A [`reference`](mod@reference) implementation (naive loops, f64) sits beside them.
//!
//! # Units
//!
//! Every kernel takes a **unit**: a range of its launch's units of work (GEMM: output rows of
//! the flattened `batch × m`; elementwise: rows of the first three dimensions; reductions:
//! output elements; softmax and norms: rows). Each kernel's `units`/`validate` says how many a
//! launch has; [`layout::units`] cuts them into bounded pieces. Running consecutive units that
//! cover `0..units`, in any cut, writes exactly what one whole call writes (bit for bit: a unit
//! computes each output element the same way whatever the cut). An empty unit does nothing;
//! a launch with a zero dimension has nothing to do.
//!
//! ```
//! use davinci_kernels::gemm::{gemm, GemmInput, GemmOutput, GemmParams};
//! use davinci_kernels::{layout, Slice, SliceMut};
//!
//! // C (2×2) = A (2×3) · B (3×2), f32, in units of one row.
//! let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
//! let b = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
//! let mut c = [0.0f32; 4];
//! let p = GemmParams {
//!     m: 2, n: 2, k: 3, batch: 1,
//!     a: GemmInput { ld: 3, batch_stride: 0, trans: false },
//!     b: GemmInput { ld: 2, batch_stride: 0, trans: false },
//!     c: GemmOutput { ld: 2, batch_stride: 0 },
//!     alpha: 1.0, beta: 0.0,
//! };
//! for unit in layout::units(p.units()?, 1) {
//!     gemm(&p, Slice::F32(&a), Slice::F32(&b), SliceMut::F32(&mut c), unit)?;
//! }
//! assert_eq!(c, [4.0, 5.0, 10.0, 11.0]);
//! # Ok::<(), davinci_kernels::Error>(())
//! ```
//!
//! # Validation
//!
//! Every call validates everything before it writes: dtypes, every operand's footprint
//! (`1 + sum((dim_i − 1)·stride_i)` elements, in checked `usize` arithmetic) against its slice,
//! an output's elements pairwise distinct, the unit inside the launch. A refusal is an
//! [`Error`] naming the [`Operand`] and the [`Problem`]; nothing here panics on any argument.
//!
//! # Accuracy (what the tests check against [`reference`](mod@reference))
//!
//! `u` is the unit roundoff of the output dtype: 2⁻²⁴ (f32), 2⁻¹¹ (f16), 2⁻⁸ (bf16); `s` its
//! smallest positive subnormal: 2⁻¹⁴⁹, 2⁻²⁴, 2⁻¹³³; `r` the reference's value. A bound of
//! `2u·|r|` is "one rounding away": both sides round once to the dtype from values that differ
//! by less than that rounding.
//!
//! * Integers (every kernel that takes them): **exact**. Wrapping is part of the result:
//!   int8 GEMM accumulates in i32 wrapping (exact modulo 2³²), elementwise ops and sums wrap
//!   to the output's dtype.
//! * Elementwise add, sub, mul, div, max, min, relu and cast: **exact** (correctly rounded,
//!   equal to the reference) for every dtype, NaN for NaN.
//! * Elementwise exp, silu and gelu, computed in f32, for inputs of magnitude at most 20:
//!   `|y − r| ≤ 2⁻¹⁴·|r| + 32s` for f32 (gelu's `exp(2z)` amplifies the rounding of `z`, up to
//!   `|2z| ≈ 88` times, where the result is still a normal f32; the `32s` is a subnormal
//!   `e^x` times `|x| ≤ 20`), and `|y − r| ≤ (2⁻¹⁴ + 2u)·|r| + 32s` for f16 and bf16.
//! * GEMM (f32 accumulation): `|c − r| ≤ (k + 2)·2⁻²⁴·(|alpha|·Σ_p |a_ip·b_pj| + |beta·c_ij|)
//!   + 2u·|r| + s` (the `2u` term for an f16 or bf16 C's final rounding).
//! * Sum (f64 accumulation): `|y − r| ≤ 2u·|r| + n·2⁻⁵²·Σ|x| + s`; max: exact.
//! * Softmax (exp in f32, the sum in f64), inputs of magnitude at most 20:
//!   `|y − r| ≤ (2⁻¹⁶ + 2u)·|r| + s` (`x − max` rounds in f32, and `exp` turns that absolute
//!   error, at most 40·2⁻²⁴, into a relative one).
//! * Layer and RMS norm (f64 throughout): `|y − r| ≤ 2u·|r| + 2⁻⁴⁰·(|gamma_j|·|x_j − mean|·rstd
//!   + |beta_j|) + s`.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod dtype;
pub mod elementwise;
pub mod error;
pub mod gemm;
pub mod layout;
pub mod reduce;
pub mod reference;
pub mod rows;
mod sgemm;

pub use dtype::{DType, Slice, SliceMut};
pub use error::{Error, Operand, Problem, Result};
pub use half::{bf16, f16};
