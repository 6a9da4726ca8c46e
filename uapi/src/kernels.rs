//! Built-in kernels (ABI 1.5, `DAVINCI_FEAT_KERNELS`; docs/abi.md 7.3): the ids KERNEL_LAUNCH
//! names in `handle`, LIST_KERNELS' table entry, and one parameter block per kernel.
//!
//! A launch is one descriptor: `opcode` KERNEL_LAUNCH, `handle` the kernel's id, `src0` the
//! device address of its parameter block, `len` the block's size (exactly the kernel's
//! `params_size`), `imm` the block count (0 or 1 for a built-in kernel: the device cuts the
//! work itself), `dtype` 0 (the block says). The device copies the block **once**, when it
//! takes the descriptor: a later write to it does not change the launch.
//!
//! Every operand in a block is a device address inside one of the caller's own allocations
//! (or one it imported), with sizes and strides in **elements** of the operand's dtype; every
//! reserved field is 0. Floats are passed as their IEEE-754 binary32 bits (`alpha`, `beta`,
//! `eps`), so the structs hold integers only.

use crate::layout::{abi_struct, ConstGroup};

/// Length of `davinci_kernel_info.name`, the NUL included.
pub const KERNEL_NAME_LEN: usize = 32;

/// Handles from this value up name kernels a loader made (LOAD_KERNEL, reserved for hardware:
/// no device here has one). The built-in ids are below it.
pub const KERNEL_LOADED_BASE: u32 = 0x1000;

/// The built-in kernels' ids (`handle` of a KERNEL_LAUNCH). Fixed by the ABI: a runtime may
/// hard-code them and check LIST_KERNELS once.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelId {
    /// `C = alpha·op(A)·op(B) + beta·C`, batched ([`GemmParams`]).
    Gemm = 1,
    /// An elementwise op over a 4-d shape ([`ElementwiseParams`]).
    Elementwise = 2,
    /// Sum or max along one axis of a 4-d shape ([`ReduceParams`]).
    Reduce = 3,
    /// Softmax along each row of a 2-d view ([`SoftmaxParams`]).
    Softmax = 4,
    /// Layer norm or RMS norm of each row of a 2-d view ([`NormParams`]).
    Norm = 5,
}

impl KernelId {
    /// Every built-in kernel, in id order.
    pub const ALL: [KernelId; 5] = [
        KernelId::Gemm,
        KernelId::Elementwise,
        KernelId::Reduce,
        KernelId::Softmax,
        KernelId::Norm,
    ];

    /// Decodes a handle.
    pub const fn from_u32(v: u32) -> Option<KernelId> {
        Some(match v {
            1 => KernelId::Gemm,
            2 => KernelId::Elementwise,
            3 => KernelId::Reduce,
            4 => KernelId::Softmax,
            5 => KernelId::Norm,
            _ => return None,
        })
    }

    /// The name LIST_KERNELS reports.
    pub const fn name(self) -> &'static str {
        match self {
            KernelId::Gemm => "gemm",
            KernelId::Elementwise => "elementwise",
            KernelId::Reduce => "reduce",
            KernelId::Softmax => "softmax",
            KernelId::Norm => "norm",
        }
    }

    /// Bytes of the kernel's parameter block: a launch's `len`.
    pub const fn params_size(self) -> usize {
        match self {
            KernelId::Gemm => core::mem::size_of::<GemmParams>(),
            KernelId::Elementwise => core::mem::size_of::<ElementwiseParams>(),
            KernelId::Reduce => core::mem::size_of::<ReduceParams>(),
            KernelId::Softmax => core::mem::size_of::<SoftmaxParams>(),
            KernelId::Norm => core::mem::size_of::<NormParams>(),
        }
    }
}

/// The layout version of every built-in kernel's parameter block in this ABI
/// (`davinci_kernel_info.params_version`).
pub const PARAMS_VERSION: u32 = 1;

abi_struct! {
    /// One kernel, as LIST_KERNELS reports it (all fields from driver).
    #[c_name = "davinci_kernel_info"]
    pub struct KernelInfo {
        /// The kernel's handle, what KERNEL_LAUNCH names (`DAVINCI_KERNEL_*`) (from driver).
        pub id: u32,
        /// Version of the kernel's semantics; 1 in ABI 1.5 (from driver).
        pub version: u32,
        /// Layout version of its parameter block (`DAVINCI_KERNEL_PARAMS_VERSION`): a runtime
        /// refuses a kernel whose block it was not built for (from driver).
        pub params_version: u32,
        /// Bytes of its parameter block: a launch's `len` (from driver).
        pub params_size: u32,
        /// The dtypes it takes, a mask of `1 << DAVINCI_DTYPE_*` (from driver).
        pub dtypes: u64,
        /// Its name, NUL-terminated (`"gemm"`) (from driver).
        pub name: [u8; 32],
        /// Reserved: ignore it, a later minor may use it (from driver).
        pub reserved: [u64; 2],
    }
}

abi_struct! {
    /// LIST_KERNELS argument (ABI 1.5): the device's kernels into a user buffer, as
    /// LIST_CLIENTS lists clients.
    #[c_name = "davinci_list_kernels_args"]
    pub struct ListKernelsArgs {
        /// User pointer to an array of `capacity` `davinci_kernel_info` (to driver).
        pub buf: u64,
        /// Entries the buffer holds (to driver).
        pub capacity: u32,
        /// Kernels the device has; entries written = min(count, capacity) (from driver).
        pub count: u32,
        /// Stride of the caller's entries, normally `sizeof(struct davinci_kernel_info)`: a
        /// multiple of 8 from 8 to 4096. The driver writes the first `min(entry_size, its own
        /// size)` bytes of each entry and zeroes the rest (to driver).
        pub entry_size: u32,
        /// Reserved, must be 0 (to driver).
        pub pad: u32,
    }
}

impl KernelInfo {
    /// The name up to its NUL, if it is UTF-8.
    pub fn name_str(&self) -> Option<&str> {
        let n = self.name.iter().position(|b| *b == 0).unwrap_or(32);
        core::str::from_utf8(&self.name[..n]).ok()
    }

    /// `name` as the NUL-padded field (cut to 31 bytes).
    pub fn name_field(name: &str) -> [u8; KERNEL_NAME_LEN] {
        let mut f = [0u8; KERNEL_NAME_LEN];
        let b = name.as_bytes();
        let n = b.len().min(KERNEL_NAME_LEN - 1);
        f[..n].copy_from_slice(&b[..n]);
        f
    }
}

/// `GemmParams::flags`: A is stored transposed (`op(A) = Aᵀ`, stored `k × m`).
pub const GEMM_TRANS_A: u8 = 1 << 0;
/// `GemmParams::flags`: B is stored transposed (`op(B) = Bᵀ`, stored `n × k`).
pub const GEMM_TRANS_B: u8 = 1 << 1;

abi_struct! {
    /// DAVINCI_KERNEL_GEMM's parameter block: `C = alpha·op(A)·op(B) + beta·C` for `batch`
    /// matrices, row-major with leading dimensions (a column-major operand is a transposed
    /// row-major one). `op(A)` is `m × k`, `op(B)` `k × n`, C `m × n`. Floats: A and B each
    /// F32, F16 or BF16, C F32, F16 or BF16, f32 accumulation, C rounded once to its dtype;
    /// with `beta` 0, C is not read. Integers: A and B I8, C I32, `C = op(A)·op(B)` wrapping,
    /// `alpha` and `beta` then 0. C may not overlap A or B, nor two of its elements each other.
    #[c_name = "davinci_gemm_params"]
    pub struct GemmParams {
        /// Rows of op(A) and C (to device).
        pub m: u64,
        /// Columns of op(B) and C (to device).
        pub n: u64,
        /// Columns of op(A), rows of op(B); at most `DAVINCI_KERNEL_MAX_K` (to device).
        pub k: u64,
        /// Matrices in the batch (to device).
        pub batch: u64,
        /// A's device address (to device).
        pub a: u64,
        /// B's device address (to device).
        pub b: u64,
        /// C's device address (to device).
        pub c: u64,
        /// Elements between rows of A as stored (to device).
        pub lda: u64,
        /// Elements between rows of B as stored (to device).
        pub ldb: u64,
        /// Elements between rows of C; at least `n` when `m` > 1 (to device).
        pub ldc: u64,
        /// Elements between A's batches (0: one A for every batch) (to device).
        pub stride_a: u64,
        /// Elements between B's batches (0: one B for every batch) (to device).
        pub stride_b: u64,
        /// Elements between C's batches (to device).
        pub stride_c: u64,
        /// A's `DAVINCI_DTYPE_*` (to device).
        pub dtype_a: u8,
        /// B's `DAVINCI_DTYPE_*` (to device).
        pub dtype_b: u8,
        /// C's `DAVINCI_DTYPE_*` (to device).
        pub dtype_c: u8,
        /// `DAVINCI_GEMM_TRANS_A`, `DAVINCI_GEMM_TRANS_B`; other bits 0 (to device).
        pub flags: u8,
        /// The product's scale, f32 bits; 0 for I8 (to device).
        pub alpha: u32,
        /// C's scale, f32 bits; 0 for I8 (to device).
        pub beta: u32,
        /// Reserved, must be 0 (to device).
        pub reserved0: u32,
        /// Reserved, must be 0 (to device).
        pub reserved1: u64,
    }
}

/// An elementwise op (`ElementwiseParams::op`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EwOp {
    /// `dst = a + b`.
    Add = 1,
    /// `dst = a - b`.
    Sub = 2,
    /// `dst = a * b`.
    Mul = 3,
    /// `dst = a / b` (integers: `x / 0` is 0, `MIN / -1` wraps).
    Div = 4,
    /// The larger of `a` and `b` (NaN if either is).
    Max = 5,
    /// The smaller of `a` and `b` (NaN if either is).
    Min = 6,
    /// `max(a, 0)`.
    Relu = 7,
    /// GELU, tanh approximation (floats).
    Gelu = 8,
    /// SiLU, `a·σ(a)` (floats).
    Silu = 9,
    /// `eᵃ` (floats).
    Exp = 10,
    /// `a` converted to `dtype_dst` (the one op whose dtypes may differ).
    Cast = 11,
}

impl EwOp {
    /// Decodes a wire value.
    pub const fn from_u32(v: u32) -> Option<EwOp> {
        Some(match v {
            1 => EwOp::Add,
            2 => EwOp::Sub,
            3 => EwOp::Mul,
            4 => EwOp::Div,
            5 => EwOp::Max,
            6 => EwOp::Min,
            7 => EwOp::Relu,
            8 => EwOp::Gelu,
            9 => EwOp::Silu,
            10 => EwOp::Exp,
            11 => EwOp::Cast,
            _ => return None,
        })
    }

    /// Takes a second input `b`.
    pub const fn is_binary(self) -> bool {
        matches!(
            self,
            EwOp::Add | EwOp::Sub | EwOp::Mul | EwOp::Div | EwOp::Max | EwOp::Min
        )
    }
}

abi_struct! {
    /// DAVINCI_KERNEL_ELEMENTWISE's parameter block: `dst[i] = op(a[i], b[i])` for every index
    /// `i` of a 4-d `shape` (outermost first; a lower rank pads with leading 1s). Each operand
    /// has its own element strides per dimension; an input's stride of 0 broadcasts it along
    /// that dimension; no two elements of `dst` may share memory. `dst` may be `a` or `b`
    /// (in place) with the same strides. One dtype for all three, except CAST. A unary op's
    /// `b`, `dtype_b` and `stride_b` are 0.
    #[c_name = "davinci_elementwise_params"]
    pub struct ElementwiseParams {
        /// `DAVINCI_EW_*` (to device).
        pub op: u32,
        /// dst's `DAVINCI_DTYPE_*` (to device).
        pub dtype_dst: u8,
        /// a's `DAVINCI_DTYPE_*` (to device).
        pub dtype_a: u8,
        /// b's `DAVINCI_DTYPE_*`, 0 for a unary op (to device).
        pub dtype_b: u8,
        /// Reserved, must be 0 (to device).
        pub reserved0: u8,
        /// Dimensions, outermost first (to device).
        pub shape: [u64; 4],
        /// dst's device address (to device).
        pub dst: u64,
        /// a's device address (to device).
        pub a: u64,
        /// b's device address, 0 for a unary op (to device).
        pub b: u64,
        /// dst's element strides per dimension (to device).
        pub stride_dst: [u64; 4],
        /// a's element strides per dimension (0 broadcasts) (to device).
        pub stride_a: [u64; 4],
        /// b's element strides per dimension (0 broadcasts) (to device).
        pub stride_b: [u64; 4],
        /// Reserved, must be 0 (to device).
        pub reserved: [u64; 2],
    }
}

/// A reduction (`ReduceParams::op`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum (floats in f64, rounded once; integers wrap).
    Sum = 1,
    /// The largest element (NaN if any is).
    Max = 2,
}

impl ReduceOp {
    /// Decodes a wire value.
    pub const fn from_u32(v: u32) -> Option<ReduceOp> {
        match v {
            1 => Some(ReduceOp::Sum),
            2 => Some(ReduceOp::Max),
            _ => None,
        }
    }
}

abi_struct! {
    /// DAVINCI_KERNEL_REDUCE's parameter block: `dst` has `src`'s shape with dimension `axis`
    /// 1 (its stride there unused), each element the sum or max of `src` along `axis`, which
    /// holds at most `DAVINCI_KERNEL_MAX_ROW` elements. One dtype, except an I8 sum into I32.
    #[c_name = "davinci_reduce_params"]
    pub struct ReduceParams {
        /// `DAVINCI_REDUCE_*` (to device).
        pub op: u32,
        /// The axis reduced, 0..=3 (to device).
        pub axis: u32,
        /// src's `DAVINCI_DTYPE_*` (to device).
        pub dtype_src: u8,
        /// dst's `DAVINCI_DTYPE_*` (to device).
        pub dtype_dst: u8,
        /// Reserved, must be 0 (to device).
        pub reserved0: u16,
        /// Reserved, must be 0 (to device).
        pub reserved1: u32,
        /// src's dimensions, outermost first (to device).
        pub shape: [u64; 4],
        /// src's device address (to device).
        pub src: u64,
        /// dst's device address (to device).
        pub dst: u64,
        /// src's element strides (to device).
        pub stride_src: [u64; 4],
        /// dst's element strides (the axis's unused) (to device).
        pub stride_dst: [u64; 4],
        /// Reserved, must be 0 (to device).
        pub reserved: [u64; 2],
    }
}

abi_struct! {
    /// DAVINCI_KERNEL_SOFTMAX's parameter block: softmax along each row of a `rows × cols`
    /// view (row `i`, column `j` at element `i·ld + j`), numerically stable; floats only;
    /// `cols` at most `DAVINCI_KERNEL_MAX_ROW`. `dst` may be `src` (in place, one `ld`).
    #[c_name = "davinci_softmax_params"]
    pub struct SoftmaxParams {
        /// Rows (to device).
        pub rows: u64,
        /// Columns: the softmax's length (to device).
        pub cols: u64,
        /// src's device address (to device).
        pub src: u64,
        /// dst's device address (to device).
        pub dst: u64,
        /// Elements between src's rows (to device).
        pub ld_src: u64,
        /// Elements between dst's rows, at least `cols` when `rows` > 1 (to device).
        pub ld_dst: u64,
        /// src's `DAVINCI_DTYPE_*` (F32, F16, BF16) (to device).
        pub dtype_src: u8,
        /// dst's `DAVINCI_DTYPE_*` (F32, F16, BF16) (to device).
        pub dtype_dst: u8,
        /// Reserved, must be 0 (to device).
        pub reserved0: u16,
        /// Reserved, must be 0 (to device).
        pub reserved1: u32,
        /// Reserved, must be 0 (to device).
        pub reserved: u64,
    }
}

/// A norm (`NormParams::kind`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NormKind {
    /// `(x − mean)·rsqrt(var + eps)·gamma + beta`.
    LayerNorm = 1,
    /// `x·rsqrt(mean(x²) + eps)·gamma + beta`.
    RmsNorm = 2,
}

impl NormKind {
    /// Decodes a wire value.
    pub const fn from_u32(v: u32) -> Option<NormKind> {
        match v {
            1 => Some(NormKind::LayerNorm),
            2 => Some(NormKind::RmsNorm),
            _ => None,
        }
    }
}

abi_struct! {
    /// DAVINCI_KERNEL_NORM's parameter block: a layer or RMS norm of each row of a
    /// `rows × cols` view, computed in f64; floats only; `cols` at most
    /// `DAVINCI_KERNEL_MAX_ROW`. `gamma` and `beta` are `cols` contiguous elements each, or
    /// address 0 for none (1 and 0), their dtype then 0.
    #[c_name = "davinci_norm_params"]
    pub struct NormParams {
        /// `DAVINCI_NORM_*` (to device).
        pub kind: u32,
        /// Added to the variance (mean square) before the square root: f32 bits, finite and
        /// not negative (to device).
        pub eps: u32,
        /// Rows (to device).
        pub rows: u64,
        /// Columns (to device).
        pub cols: u64,
        /// src's device address (to device).
        pub src: u64,
        /// dst's device address (to device).
        pub dst: u64,
        /// Elements between src's rows (to device).
        pub ld_src: u64,
        /// Elements between dst's rows, at least `cols` when `rows` > 1 (to device).
        pub ld_dst: u64,
        /// gamma's device address, or 0 (to device).
        pub gamma: u64,
        /// beta's device address, or 0 (to device).
        pub beta: u64,
        /// src's `DAVINCI_DTYPE_*` (to device).
        pub dtype_src: u8,
        /// dst's `DAVINCI_DTYPE_*` (to device).
        pub dtype_dst: u8,
        /// gamma's `DAVINCI_DTYPE_*`, 0 without gamma (to device).
        pub dtype_gamma: u8,
        /// beta's `DAVINCI_DTYPE_*`, 0 without beta (to device).
        pub dtype_beta: u8,
        /// Reserved, must be 0 (to device).
        pub reserved0: u32,
        /// Reserved, must be 0 (to device).
        pub reserved: [u64; 2],
    }
}

/// Most `k` a GEMM takes.
pub const KERNEL_MAX_K: u64 = 1 << 20;
/// Most elements along a reduced axis, a softmax's or a norm's row.
pub const KERNEL_MAX_ROW: u64 = 1 << 20;

/// Wire constants of this module, for the C header.
pub const CONSTS: &[ConstGroup] = &[
    ConstGroup {
        title: "Built-in kernels (KERNEL_LAUNCH handle, davinci_kernel_info.id; ABI 1.5)",
        c_prefix: "DAVINCI_KERNEL_",
        items: &[
            ("GEMM", KernelId::Gemm as u64, "davinci_gemm_params"),
            (
                "ELEMENTWISE",
                KernelId::Elementwise as u64,
                "davinci_elementwise_params",
            ),
            ("REDUCE", KernelId::Reduce as u64, "davinci_reduce_params"),
            (
                "SOFTMAX",
                KernelId::Softmax as u64,
                "davinci_softmax_params",
            ),
            ("NORM", KernelId::Norm as u64, "davinci_norm_params"),
        ],
    },
    ConstGroup {
        title: "GEMM flags (davinci_gemm_params.flags)",
        c_prefix: "DAVINCI_GEMM_",
        items: &[
            (
                "TRANS_A",
                GEMM_TRANS_A as u64,
                "A stored transposed (k x m)",
            ),
            (
                "TRANS_B",
                GEMM_TRANS_B as u64,
                "B stored transposed (n x k)",
            ),
        ],
    },
    ConstGroup {
        title: "Elementwise ops (davinci_elementwise_params.op)",
        c_prefix: "DAVINCI_EW_",
        items: &[
            ("ADD", EwOp::Add as u64, "a + b"),
            ("SUB", EwOp::Sub as u64, "a - b"),
            ("MUL", EwOp::Mul as u64, "a * b"),
            ("DIV", EwOp::Div as u64, "a / b"),
            ("MAX", EwOp::Max as u64, "larger of a and b"),
            ("MIN", EwOp::Min as u64, "smaller of a and b"),
            ("RELU", EwOp::Relu as u64, "max(a, 0)"),
            ("GELU", EwOp::Gelu as u64, "GELU, tanh approximation"),
            ("SILU", EwOp::Silu as u64, "a * sigmoid(a)"),
            ("EXP", EwOp::Exp as u64, "e to the a"),
            ("CAST", EwOp::Cast as u64, "a converted to dtype_dst"),
        ],
    },
    ConstGroup {
        title: "Reductions (davinci_reduce_params.op)",
        c_prefix: "DAVINCI_REDUCE_",
        items: &[
            ("SUM", ReduceOp::Sum as u64, "the sum"),
            ("MAX", ReduceOp::Max as u64, "the largest element"),
        ],
    },
    ConstGroup {
        title: "Norms (davinci_norm_params.kind)",
        c_prefix: "DAVINCI_NORM_",
        items: &[
            ("LAYERNORM", NormKind::LayerNorm as u64, "layer norm"),
            ("RMSNORM", NormKind::RmsNorm as u64, "RMS norm"),
        ],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_ops_and_kinds_round_trip_and_zero_is_none() {
        for k in KernelId::ALL {
            assert_eq!(KernelId::from_u32(k as u32), Some(k));
            assert!(k.params_size() % 8 == 0);
        }
        assert_eq!(KernelId::from_u32(0), None);
        assert_eq!(KernelId::from_u32(KERNEL_LOADED_BASE), None);
        for v in 1..=11 {
            assert_eq!(EwOp::from_u32(v).map(|o| o as u32), Some(v));
        }
        assert_eq!(EwOp::from_u32(0), None);
        assert_eq!(EwOp::from_u32(12), None);
        assert_eq!(ReduceOp::from_u32(0), None);
        assert_eq!(NormKind::from_u32(3), None);
    }

    #[test]
    fn names_fit_their_field() {
        for k in KernelId::ALL {
            let info = KernelInfo {
                name: KernelInfo::name_field(k.name()),
                ..Default::default()
            };
            assert_eq!(info.name_str(), Some(k.name()));
        }
    }
}
