//! Tasks that launch the device's built-in kernels (ABI 1.5, docs/abi.md 6.1), and byte
//! fills: typed operands ([`Matrix`], [`Tensor`]) over [`Region`]s, checked on the host (shapes
//! that agree, footprints inside their regions, alignment), a parameter block written into a
//! slot of the device's parameter slabs (`params.rs`: no allocation per launch), and a
//! [`Task`] that leases every operand and the block's slot until it has run. The device checks everything again (and what the host cannot
//! see: overlaps between buffers, other clients' memory) and names the operand in its fault.
//!
//! ```
//! # fn main() -> davinci_shim::Result<()> {
//! # #[cfg(feature = "embedded")] {
//! use davinci_shim::task::{self, Matrix};
//! use davinci_shim::{Device, DeviceMem, Dtype};
//! use std::time::Duration;
//! let dev = Device::embedded()?;
//! let (a, b, c) = (dev.alloc(2 * 3 * 4)?, dev.alloc(3 * 2 * 4)?, dev.alloc(2 * 2 * 4)?);
//! a.write_slice(0, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! b.write_slice(0, &[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0])?;
//! let mut s = dev.create_context()?.create_stream()?;
//! // C (2×2) = A (2×3) · B (3×2)
//! let gemm = task::gemm(
//!     Matrix::new(&a, Dtype::F32, 2, 3),
//!     Matrix::new(&b, Dtype::F32, 3, 2),
//!     Matrix::new(&c, Dtype::F32, 2, 2),
//!     1.0,
//!     0.0,
//! )?;
//! s.submit(&gemm)?;
//! s.synchronize(Duration::from_secs(5))?;
//! assert_eq!(c.read_vec::<f32>(0, 4)?, [4.0, 5.0, 10.0, 11.0]);
//! # }
//! # Ok(()) }
//! ```

use davinci_uapi::kernels::{
    ElementwiseParams, EwOp, GemmParams, KernelId, NormKind, NormParams, ReduceOp, ReduceParams,
    SoftmaxParams, GEMM_TRANS_A, GEMM_TRANS_B,
};
use davinci_uapi::{Dtype, TaskDesc, Wire};

use super::operands::{fits, Matrix, Tensor};
use super::{aligned_to, invalid, Leases, Region, Task};
use crate::error::Result;
use crate::memory::DeviceMem;

/// The task of a launch of `kernel` with `block` over `operands` (leased with the block,
/// which is written into a new device buffer of the first operand's device).
fn launch<B: Wire>(
    _op: &'static str,
    k: KernelId,
    block: &B,
    operands: &[&Region],
) -> Result<Task> {
    let mut raw = vec![0u8; B::SIZE];
    block.encode(&mut raw);
    let regions: Vec<Region> = operands.iter().map(|r| **r).collect();
    kernel(k, &raw, &regions)
}

fn addr(r: &Region) -> u64 {
    r.addr().get()
}

/// GEMM: `C = alpha·op(A)·op(B) + beta·C`, `op(A)` `m × k`, `op(B)` `k × n`, C `m × n` (not
/// transposed), batched when C is ([`Matrix::batched`]; an A or B of one matrix serves every
/// batch). Dtypes: A and B each F32, F16 or BF16 and C F32, F16 or BF16 (f32 accumulation);
/// or A and B I8 and C I32, where the device computes `C = op(A)·op(B)` (`alpha` must be 1,
/// `beta` 0). `EINVAL` for shapes that do not agree, a transposed C or a dtype combination
/// the kernel does not take; `ERANGE` for an operand that does not fit its region.
pub fn gemm<'a>(
    a: Matrix<'a>,
    b: Matrix<'a>,
    c: Matrix<'a>,
    alpha: f32,
    beta: f32,
) -> Result<Task> {
    const OP: &str = "task::gemm";
    let ((m, k), (k2, n), (cm, cn)) = (a.shape(), b.shape(), c.shape());
    if k != k2 || (m, n) != (cm, cn) {
        return Err(invalid(
            OP,
            format!("op(A) is {m}×{k}, op(B) {k2}×{n}: C must be {m}×{n} and A's columns B's rows, but C is {cm}×{cn}"),
        ));
    }
    if c.trans {
        return Err(invalid(
            OP,
            "C cannot be transposed (transpose A and B and swap them)".into(),
        ));
    }
    let int = a.dtype == Dtype::I8;
    let floats = |d: Dtype| d.is_float();
    let ok = if int {
        b.dtype == Dtype::I8 && c.dtype == Dtype::I32
    } else {
        floats(a.dtype) && floats(b.dtype) && floats(c.dtype)
    };
    if !ok {
        return Err(invalid(
            OP,
            format!(
                "A {:?}, B {:?}, C {:?}: GEMM takes F32/F16/BF16 in and out, or I8 × I8 into I32",
                a.dtype, b.dtype, c.dtype
            ),
        ));
    }
    if int && (alpha != 1.0 || beta != 0.0) {
        return Err(invalid(
            OP,
            "an int8 GEMM computes C = A·B: alpha must be 1 and beta 0".into(),
        ));
    }
    let batch = c.batch;
    for (x, name) in [(&a, "A"), (&b, "B"), (&c, "C")] {
        if x.batch != 1 && x.batch != batch {
            return Err(invalid(
                OP,
                format!("{name} has {} batches, C {batch}", x.batch),
            ));
        }
        let t = x.as_tensor(batch);
        fits(OP, name, &x.region, x.dtype, &t.shape, &t.strides)?;
    }
    let bs = |x: &Matrix| {
        if x.batch == 1 && batch > 1 {
            0
        } else {
            x.batch_stride
        }
    };
    let flags = if a.trans { GEMM_TRANS_A } else { 0 } | if b.trans { GEMM_TRANS_B } else { 0 };
    let (alpha, beta) = if int {
        (0, 0)
    } else {
        (alpha.to_bits(), beta.to_bits())
    };
    let block = GemmParams {
        m,
        n,
        k,
        batch,
        a: addr(&a.region),
        b: addr(&b.region),
        c: addr(&c.region),
        lda: a.ld,
        ldb: b.ld,
        ldc: c.ld,
        stride_a: bs(&a),
        stride_b: bs(&b),
        stride_c: c.batch_stride,
        dtype_a: a.dtype as u8,
        dtype_b: b.dtype as u8,
        dtype_c: c.dtype as u8,
        flags,
        alpha,
        beta,
        ..Default::default()
    };
    launch(
        OP,
        KernelId::Gemm,
        &block,
        &[&a.region, &b.region, &c.region],
    )
}

/// An elementwise op: `dst = op(a)` (RELU, GELU, SILU, EXP, CAST) or `dst = op(a, b)` (ADD,
/// SUB, MUL, DIV, MAX, MIN), `a` and `b` broadcast to `dst`'s shape. One dtype for all but CAST
/// (`dst`'s is the result's); `dst` may be `a` or `b` itself. `EINVAL` for a missing or
/// extra `b`, shapes that do not broadcast, dtypes that differ; `ERANGE` for an operand that
/// does not fit its region.
pub fn elementwise<'a>(
    op: EwOp,
    dst: Tensor<'a>,
    a: Tensor<'a>,
    b: Option<Tensor<'a>>,
) -> Result<Task> {
    const OP: &str = "task::elementwise";
    if op.is_binary() != b.is_some() {
        let want = if op.is_binary() { "takes" } else { "takes no" };
        return Err(invalid(OP, format!("{op:?} {want} second input b")));
    }
    let shape = dst.shape;
    let sa = a.broadcast(OP, "a", &shape)?;
    let sb = match &b {
        Some(b) => b.broadcast(OP, "b", &shape)?,
        None => [0; 4],
    };
    for (t, name) in [(Some(&a), "a"), (b.as_ref(), "b")] {
        if let Some(t) = t {
            if op != EwOp::Cast && t.dtype != dst.dtype {
                return Err(invalid(
                    OP,
                    format!(
                        "{name} is {:?}, dst {:?}: {op:?} keeps one dtype",
                        t.dtype, dst.dtype
                    ),
                ));
            }
        }
    }
    fits(OP, "dst", &dst.region, dst.dtype, &shape, &dst.strides)?;
    fits(OP, "a", &a.region, a.dtype, &shape, &sa)?;
    if let Some(b) = &b {
        fits(OP, "b", &b.region, b.dtype, &shape, &sb)?;
    }
    let block = ElementwiseParams {
        op: op as u32,
        dtype_dst: dst.dtype as u8,
        dtype_a: a.dtype as u8,
        dtype_b: b.as_ref().map_or(0, |b| b.dtype as u8),
        shape,
        dst: addr(&dst.region),
        a: addr(&a.region),
        b: b.as_ref().map_or(0, |b| addr(&b.region)),
        stride_dst: dst.strides,
        stride_a: sa,
        stride_b: sb,
        ..Default::default()
    };
    let mut ops = vec![&dst.region, &a.region];
    if let Some(b) = &b {
        ops.push(&b.region);
    }
    launch(OP, KernelId::Elementwise, &block, &ops)
}

/// A reduction (sum or max) of `src` along `axis` (0-based over `src`'s dimensions as given,
/// counted from the outermost) into `dst`, which has `src`'s shape without that axis (or
/// with it as 1).
pub fn reduce<'a>(op: ReduceOp, dst: Tensor<'a>, src: Tensor<'a>, axis: usize) -> Result<Task> {
    const OP: &str = "task::reduce";
    let rank = 4 - src.shape.iter().take_while(|d| **d == 1).count().min(3);
    if axis >= rank {
        return Err(invalid(
            OP,
            format!("axis {axis} of a tensor of {rank} dimensions"),
        ));
    }
    let axis = 4 - rank + axis;
    let mut out = src.shape;
    out[axis] = 1;
    let mut ds = dst.strides;
    if dst.shape != out {
        // dst given without the axis: the same elements with a 1 inserted there.
        let mut without = src.shape.to_vec();
        without.remove(axis);
        if dst.shape[1..] != without[..] {
            return Err(invalid(
                OP,
                format!(
                    "dst's shape {:?} is not src's {:?} without axis {axis}",
                    dst.shape, src.shape
                ),
            ));
        }
        ds[..axis].copy_from_slice(&dst.strides[1..axis + 1]);
        ds[axis] = 0;
    }
    fits(OP, "src", &src.region, src.dtype, &src.shape, &src.strides)?;
    fits(OP, "dst", &dst.region, dst.dtype, &out, &ds)?;
    let block = ReduceParams {
        op: op as u32,
        axis: axis as u32,
        dtype_src: src.dtype as u8,
        dtype_dst: dst.dtype as u8,
        shape: src.shape,
        src: addr(&src.region),
        dst: addr(&dst.region),
        stride_src: src.strides,
        stride_dst: ds,
        ..Default::default()
    };
    launch(OP, KernelId::Reduce, &block, &[&dst.region, &src.region])
}

fn rows_of(op: &'static str, dst: &Matrix, src: &Matrix) -> Result<(u64, u64)> {
    if dst.trans || src.trans || dst.shape() != src.shape() {
        return Err(invalid(
            op,
            format!(
                "src is {:?} and dst {:?}: they must be the same shape, not transposed",
                src.shape(),
                dst.shape()
            ),
        ));
    }
    for (x, name) in [(dst, "dst"), (src, "src")] {
        let t = x.as_tensor(1);
        fits(op, name, &x.region, x.dtype, &t.shape, &t.strides)?;
    }
    Ok(dst.shape())
}

/// Softmax along each row of `src` into `dst` (floats; each side its own dtype; in place
/// when `dst` is `src`).
pub fn softmax<'a>(dst: Matrix<'a>, src: Matrix<'a>) -> Result<Task> {
    const OP: &str = "task::softmax";
    let (rows, cols) = rows_of(OP, &dst, &src)?;
    let block = SoftmaxParams {
        rows,
        cols,
        src: addr(&src.region),
        dst: addr(&dst.region),
        ld_src: src.ld,
        ld_dst: dst.ld,
        dtype_src: src.dtype as u8,
        dtype_dst: dst.dtype as u8,
        ..Default::default()
    };
    launch(OP, KernelId::Softmax, &block, &[&dst.region, &src.region])
}

// The two public norms' arguments plus which norm and the caller's name.
#[allow(clippy::too_many_arguments)]
fn norm<'a>(
    op: &'static str,
    kind: NormKind,
    dst: Matrix<'a>,
    src: Matrix<'a>,
    gamma: Option<Region<'a>>,
    beta: Option<Region<'a>>,
    dtype: Dtype,
    eps: f32,
) -> Result<Task> {
    let (rows, cols) = rows_of(op, &dst, &src)?;
    if !eps.is_finite() || eps < 0.0 {
        return Err(invalid(
            op,
            format!("eps {eps}: must be finite and not negative"),
        ));
    }
    let vec = [1, 1, 1, cols];
    for (v, name) in [(&gamma, "gamma"), (&beta, "beta")] {
        if let Some(r) = v {
            fits(op, name, r, dtype, &vec, &[0, 0, 0, 1])?;
        }
    }
    let block = NormParams {
        kind: kind as u32,
        eps: eps.to_bits(),
        rows,
        cols,
        src: addr(&src.region),
        dst: addr(&dst.region),
        ld_src: src.ld,
        ld_dst: dst.ld,
        gamma: gamma.as_ref().map_or(0, addr),
        beta: beta.as_ref().map_or(0, addr),
        dtype_src: src.dtype as u8,
        dtype_dst: dst.dtype as u8,
        dtype_gamma: gamma.as_ref().map_or(0, |_| dtype as u8),
        dtype_beta: beta.as_ref().map_or(0, |_| dtype as u8),
        ..Default::default()
    };
    let mut ops = vec![&dst.region, &src.region];
    ops.extend(gamma.as_ref());
    ops.extend(beta.as_ref());
    launch(op, KernelId::Norm, &block, &ops)
}

/// Layer norm of each row: `(x − mean)·rsqrt(var + eps)·gamma + beta`; `gamma` and `beta`
/// (`cols` contiguous elements of `dtype` each) optional (1 and 0).
pub fn layer_norm<'a>(
    dst: Matrix<'a>,
    src: Matrix<'a>,
    gamma: Option<Region<'a>>,
    beta: Option<Region<'a>>,
    dtype: Dtype,
    eps: f32,
) -> Result<Task> {
    norm(
        "task::layer_norm",
        NormKind::LayerNorm,
        dst,
        src,
        gamma,
        beta,
        dtype,
        eps,
    )
}

/// RMS norm of each row: `x·rsqrt(mean(x²) + eps)·gamma + beta` (as [`layer_norm`]).
pub fn rms_norm<'a>(
    dst: Matrix<'a>,
    src: Matrix<'a>,
    gamma: Option<Region<'a>>,
    beta: Option<Region<'a>>,
    dtype: Dtype,
    eps: f32,
) -> Result<Task> {
    norm(
        "task::rms_norm",
        NormKind::RmsNorm,
        dst,
        src,
        gamma,
        beta,
        dtype,
        eps,
    )
}

/// A launch of `kernel` with a parameter block the caller filled (the ABI's struct as bytes:
/// `davinci_gemm_params`, ...; libdavinci's `davinci_task_kernel`), for runtimes that fill
/// the ABI's blocks themselves. Every operand address the block names must lie in one of
/// `operands`, which the task leases (so nothing it names is freed before it ran); the
/// device checks the rest. `EINVAL` for a block of the wrong size, an unknown kernel, or an
/// operand address outside every region given (naming the field).
pub fn kernel<'a>(kernel: KernelId, block: &[u8], operands: &[Region<'a>]) -> Result<Task> {
    const OP: &str = "task::kernel";
    if block.len() != kernel.params_size() {
        return Err(invalid(
            OP,
            format!(
                "a {} block is {} bytes, not {}",
                kernel.name(),
                kernel.params_size(),
                block.len()
            ),
        ));
    }
    let named: Vec<(&str, u64)> = match kernel {
        KernelId::Gemm => {
            let p = GemmParams::decode(block);
            vec![("a", p.a), ("b", p.b), ("c", p.c)]
        }
        KernelId::Elementwise => {
            let p = ElementwiseParams::decode(block);
            vec![("dst", p.dst), ("a", p.a), ("b", p.b)]
        }
        KernelId::Reduce => {
            let p = ReduceParams::decode(block);
            vec![("src", p.src), ("dst", p.dst)]
        }
        KernelId::Softmax => {
            let p = SoftmaxParams::decode(block);
            vec![("src", p.src), ("dst", p.dst)]
        }
        KernelId::Norm => {
            let p = NormParams::decode(block);
            vec![
                ("src", p.src),
                ("dst", p.dst),
                ("gamma", p.gamma),
                ("beta", p.beta),
            ]
        }
    };
    for (field, at) in named.into_iter().filter(|(_, a)| *a != 0) {
        let held = operands.iter().any(|r| {
            let start = r.addr().get();
            at >= start && at - start < r.len().max(1) as u64
        });
        if !held {
            return Err(invalid(
                OP,
                format!("the block's {field} ({at:#x}) lies in none of the operand regions given"),
            ));
        }
    }
    let Some(first) = operands.first() else {
        return Err(invalid(
            OP,
            "a launch names at least one operand region".into(),
        ));
    };
    let lease = first.lease();
    let dev = lease.device();
    // A slot of the open's parameter slabs; past them, a buffer of its own.
    let (at, held) = match dev.params().place(dev, block)? {
        Some(placed) => placed,
        None => {
            let params = dev.alloc(block.len())?;
            params.write(0, block)?;
            (params.dev_addr(), Region::from(&params).lease())
        }
    };
    let mut leases: Vec<_> = operands.iter().map(|r| r.lease()).collect();
    leases.push(held);
    let desc = TaskDesc::kernel_launch(0, kernel as u32, 1, at, block.len() as u64);
    Ok(Task::new(
        desc,
        Some(Leases::Many(leases.into_boxed_slice())),
    ))
}

/// FILL of every byte of `dst` (any offset and length) with `value`: `memset` (ABI 1.5,
/// `Features::DTYPES`).
pub fn fill_bytes<'a>(dst: impl Into<Region<'a>>, value: u8) -> Result<Task> {
    let dst = dst.into();
    aligned_to("task::fill_bytes", "dst", &dst, 1)?;
    let d = TaskDesc::fill_as(0, Dtype::U8, dst.addr(), dst.len() as u64, u32::from(value));
    Ok(Task::new(d, Some(Leases::One([dst.lease()]))))
}

/// FILL of every 16-bit halfword of `dst` (2-byte aligned) with `value` (ABI 1.5).
pub fn fill_u16<'a>(dst: impl Into<Region<'a>>, value: u16) -> Result<Task> {
    let dst = dst.into();
    aligned_to("task::fill_u16", "dst", &dst, 2)?;
    let d = TaskDesc::fill_as(
        0,
        Dtype::U16,
        dst.addr(),
        dst.len() as u64,
        u32::from(value),
    );
    Ok(Task::new(d, Some(Leases::One([dst.lease()]))))
}
