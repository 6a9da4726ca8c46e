//! KERNEL_LAUNCH (ABI 1.5, docs/abi.md 6.1): the parameter block decoded from its one copy,
//! checked field by field in the order the ABI states, and cut into bounded **units** (a
//! sub-launch of the same kernel over a part of the output), each of which the engine runs
//! in a pass of its own, re-checking every operand first. No arithmetic here (the kernel
//! module compiles this file, where there is no floating point): a host with feature
//! `kernels` runs a unit (`compute.rs`); without it the device lists no kernels and a launch
//! is refused as before.
//!
//! Sizes and strides are elements; every product and sum is checked, so no block can make the
//! engine overflow, and every division is `checked_div` (the kernel build has no panic path).

use davinci_uapi::kernels::{
    ElementwiseParams, EwOp, GemmParams, KernelId, NormParams, ReduceParams, SoftmaxParams,
    GEMM_TRANS_A, GEMM_TRANS_B,
};
use davinci_uapi::{Dtype, FaultOperand as O, Wire};

mod check;
mod units;

pub use check::distinct;

/// Work one unit does, in multiply-adds (GEMM) or element operations: what a pass of the
/// engine may spend on a launch before the other streams and the control path go on.
pub const UNIT_WORK: u64 = 1 << 22;

/// A GEMM unit's multiply-adds in user space (feature `std`): more than [`UNIT_WORK`], and
/// at least 64 rows of C whatever that costs (each unit is a call of the GEMM core that packs
/// its whole B again: fewer rows than that would pack B more often than it computes with it;
/// 64 rows of a 1024³ GEMM are 64 Mi multiply-adds, about a millisecond here).
#[cfg(feature = "std")]
pub const GEMM_UNIT_WORK: u64 = 1 << 22;
/// A GEMM unit's multiply-adds (a build without `std` runs none).
#[cfg(not(feature = "std"))]
pub const GEMM_UNIT_WORK: u64 = UNIT_WORK;

/// Largest parameter block (`davinci_elementwise_params`).
pub const MAX_PARAMS: usize = 176;

/// The dtypes every built-in kernel but softmax and norm takes.
const NUMERIC: u64 =
    Dtype::F32.bit() | Dtype::F16.bit() | Dtype::Bf16.bit() | Dtype::I8.bit() | Dtype::I32.bit();
/// Floats.
const FLOATS: u64 = Dtype::F32.bit() | Dtype::F16.bit() | Dtype::Bf16.bit();

/// The dtypes kernel `k` takes (LIST_KERNELS' `dtypes`).
pub const fn dtypes_of(k: KernelId) -> u64 {
    match k {
        KernelId::Softmax | KernelId::Norm => FLOATS,
        _ => NUMERIC,
    }
}

/// The kernels this build runs, as LIST_KERNELS lists them (none without feature `kernels`).
pub fn kernel_table() -> impl Iterator<Item = davinci_uapi::KernelInfo> {
    let kernels: &[KernelId] = if super::KERNELS { &KernelId::ALL } else { &[] };
    kernels.iter().map(|k| davinci_uapi::KernelInfo {
        id: *k as u32,
        version: 1,
        params_version: davinci_uapi::kernels::PARAMS_VERSION,
        params_size: k.params_size() as u32,
        dtypes: dtypes_of(*k),
        name: davinci_uapi::KernelInfo::name_field(k.name()),
        reserved: [0; 2],
    })
}

/// A decoded parameter block: the whole launch, or one unit of it.
#[derive(Debug, Clone, Copy)]
pub enum Params {
    /// `davinci_gemm_params`.
    Gemm(GemmParams),
    /// `davinci_elementwise_params`.
    Elementwise(ElementwiseParams),
    /// `davinci_reduce_params`.
    Reduce(ReduceParams),
    /// `davinci_softmax_params`.
    Softmax(SoftmaxParams),
    /// `davinci_norm_params`.
    Norm(NormParams),
}

/// One operand as the device reaches it: which fault names it, where it starts, its element
/// dtype, and its dimensions and element strides, outermost first (fewer than 4: leading 1s).
#[derive(Debug, Clone, Copy)]
pub struct Operand {
    /// The fault operand (`A`, `B`, `C`, `GAMMA`, `BETA`).
    pub op: O,
    /// Device address of its first element.
    pub addr: u64,
    /// Its dtype.
    pub dtype: Dtype,
    /// Dimensions.
    pub dims: [u64; 4],
    /// Element strides.
    pub strides: [u64; 4],
    /// The output (written), not an input.
    pub output: bool,
}

/// Elements `dims` and `strides` reach: `1 + Σ (dim_i − 1)·stride_i`, 0 if a dimension is 0;
/// `None` on overflow.
pub fn footprint(dims: &[u64; 4], strides: &[u64; 4]) -> Option<u64> {
    if dims.contains(&0) {
        return Some(0);
    }
    let mut acc = 1u64;
    for i in 0..4 {
        acc = (dims[i] - 1).checked_mul(strides[i])?.checked_add(acc)?;
    }
    Some(acc)
}

impl Operand {
    /// Bytes from its address to the end of its last element (`None` on overflow).
    pub fn bytes(&self) -> Option<u64> {
        footprint(&self.dims, &self.strides)?.checked_mul(self.dtype.size())
    }

    /// Its elements.
    pub fn elements(&self) -> u64 {
        self.dims
            .iter()
            .try_fold(1u64, |a, d| a.checked_mul(*d))
            .unwrap_or(0)
    }
}

/// A launch taken from a command ring: its block, and the next unit to run.
#[derive(Debug, Clone, Copy)]
pub struct Launch {
    /// The whole launch, checked.
    pub params: Params,
    /// Units it has.
    pub units: u64,
    /// Units run.
    pub next: u64,
    /// Output elements it writes (the descriptor's result).
    pub elements: u64,
    /// This launch among all the device's (from 1; what a host's cache of its operands is
    /// keyed by: two launches never share one).
    pub serial: u64,
}

/// The next launch's serial (one counter for every device of the process: serials only need
/// to differ).
pub fn next_serial() -> u64 {
    use core::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn gemm_strides(ld: u64, trans: bool) -> (u64, u64) {
    if trans {
        (1, ld)
    } else {
        (ld, 1)
    }
}

impl Params {
    /// Decodes kernel `k`'s block from its bytes (exactly `params_size` of them).
    pub fn decode(k: KernelId, b: &[u8]) -> Params {
        match k {
            KernelId::Gemm => Params::Gemm(GemmParams::decode(b)),
            KernelId::Elementwise => Params::Elementwise(ElementwiseParams::decode(b)),
            KernelId::Reduce => Params::Reduce(ReduceParams::decode(b)),
            KernelId::Softmax => Params::Softmax(SoftmaxParams::decode(b)),
            KernelId::Norm => Params::Norm(NormParams::decode(b)),
        }
    }

    /// Its operands, in the order A, B, C, gamma, beta (those it has), and how many.
    pub fn operands(&self) -> ([Operand; 5], usize) {
        let none = Operand {
            op: O::None,
            addr: 0,
            dtype: Dtype::U32,
            dims: [0; 4],
            strides: [0; 4],
            output: false,
        };
        let mut v = [none; 5];
        let dt = |d: u8| Dtype::from_u8(d).unwrap_or(Dtype::U32);
        let opd = |op, addr, d, dims, strides, output| Operand {
            op,
            addr,
            dtype: dt(d),
            dims,
            strides,
            output,
        };
        let n = match self {
            Params::Gemm(p) => {
                let (ar, ac) = gemm_strides(p.lda, p.flags & GEMM_TRANS_A != 0);
                let (br, bc) = gemm_strides(p.ldb, p.flags & GEMM_TRANS_B != 0);
                v[0] = opd(
                    O::A,
                    p.a,
                    p.dtype_a,
                    [1, p.batch, p.m, p.k],
                    [0, p.stride_a, ar, ac],
                    false,
                );
                v[1] = opd(
                    O::B,
                    p.b,
                    p.dtype_b,
                    [1, p.batch, p.k, p.n],
                    [0, p.stride_b, br, bc],
                    false,
                );
                v[2] = opd(
                    O::C,
                    p.c,
                    p.dtype_c,
                    [1, p.batch, p.m, p.n],
                    [0, p.stride_c, p.ldc, 1],
                    true,
                );
                3
            }
            Params::Elementwise(p) => {
                v[0] = opd(O::A, p.a, p.dtype_a, p.shape, p.stride_a, false);
                let binary = EwOp::from_u32(p.op).is_some_and(EwOp::is_binary);
                if binary {
                    v[1] = opd(O::B, p.b, p.dtype_b, p.shape, p.stride_b, false);
                    v[2] = opd(O::C, p.dst, p.dtype_dst, p.shape, p.stride_dst, true);
                    3
                } else {
                    v[1] = opd(O::C, p.dst, p.dtype_dst, p.shape, p.stride_dst, true);
                    2
                }
            }
            Params::Reduce(p) => {
                let mut out = p.shape;
                if let Some(d) = out.get_mut(p.axis as usize) {
                    *d = 1;
                }
                v[0] = opd(O::A, p.src, p.dtype_src, p.shape, p.stride_src, false);
                v[1] = opd(O::C, p.dst, p.dtype_dst, out, p.stride_dst, true);
                2
            }
            Params::Softmax(p) => {
                v[0] = opd(
                    O::A,
                    p.src,
                    p.dtype_src,
                    [1, 1, p.rows, p.cols],
                    [0, 0, p.ld_src, 1],
                    false,
                );
                v[1] = opd(
                    O::C,
                    p.dst,
                    p.dtype_dst,
                    [1, 1, p.rows, p.cols],
                    [0, 0, p.ld_dst, 1],
                    true,
                );
                2
            }
            Params::Norm(p) => {
                v[0] = opd(
                    O::A,
                    p.src,
                    p.dtype_src,
                    [1, 1, p.rows, p.cols],
                    [0, 0, p.ld_src, 1],
                    false,
                );
                v[1] = opd(
                    O::C,
                    p.dst,
                    p.dtype_dst,
                    [1, 1, p.rows, p.cols],
                    [0, 0, p.ld_dst, 1],
                    true,
                );
                let mut n = 2;
                for (addr, d, op) in [
                    (p.gamma, p.dtype_gamma, O::Gamma),
                    (p.beta, p.dtype_beta, O::Beta),
                ] {
                    if addr != 0 {
                        v[n] = opd(op, addr, d, [1, 1, 1, p.cols], [0, 0, 0, 1], false);
                        n += 1;
                    }
                }
                n
            }
        };
        (v, n)
    }
}
