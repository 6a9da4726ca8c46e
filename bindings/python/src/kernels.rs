//! The device's built-in kernels from Python (issue 43, ABI 1.5): `davinci.task.gemm`,
//! `elementwise`, `reduce`, `softmax`, `layer_norm`, `rms_norm` and `fill_bytes`, over
//! `Buffer`s and `Region`s, with dtypes in numpy's terms ("f16", np.float16, "bf16", "i8",
//! ...). The shim's builders check on the host and hold the operands until the task ran.
#![forbid(unsafe_code)]

use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::base::{invalid, type_error, type_name, OrRaise};
use crate::dtype::numpy_name;
use crate::task::{Operand, Task};
use davinci_shim::task::{self, Matrix, Tensor};
use davinci_shim::{Dtype, EwOp, ReduceOp};

/// What the kernels' dtype arguments accept, for messages.
const KERNEL_DTYPES: &str = "\"f32\", \"f16\", \"bf16\", \"i8\" or \"i32\" (numpy's \
                             np.float32, np.float16, np.int8, np.int32 too; bf16 by name)";

/// A kernel operand's dtype: a name or anything numpy takes for a dtype.
pub(crate) fn kernel_dtype(op: &'static str, name: &str, v: &Bound<'_, PyAny>) -> PyResult<Dtype> {
    let named = |s: &str| match s {
        "f32" | "float32" => Some(Dtype::F32),
        "f16" | "float16" | "half" => Some(Dtype::F16),
        "bf16" | "bfloat16" => Some(Dtype::Bf16),
        "i8" | "int8" => Some(Dtype::I8),
        "i32" | "int32" => Some(Dtype::I32),
        "u8" | "uint8" => Some(Dtype::U8),
        "u16" | "uint16" => Some(Dtype::U16),
        "u32" | "uint32" => Some(Dtype::U32),
        _ => None,
    };
    if let Ok(s) = v.cast::<PyString>() {
        if let Some(d) = named(&s.to_cow()?) {
            return Ok(d);
        }
    }
    match numpy_name(v).as_deref().and_then(named) {
        Some(d) => Ok(d),
        None => Err(type_error(
            op,
            name,
            format!("must be {KERNEL_DTYPES}, not {}", type_name(v)),
        )),
    }
}

fn operand(op: &'static str, name: &str, v: &Bound<'_, PyAny>) -> PyResult<Operand> {
    Operand::from_py(op, name, v)
}

fn done(t: davinci_shim::Result<davinci_shim::Task>, user_data: u64) -> PyResult<Task> {
    Ok(Task {
        inner: t.or_raise()?.with_user_data(user_data),
    })
}

/// GEMM: `c = alpha·op(a)·op(b) + beta·c`, `op(a)` `m×k`, `op(b)` `k×n`, `c` `m×n`, row-major;
/// `trans_a`/`trans_b` use a stored transposed (a `k×m`, b `n×k`); `lda`, `ldb`, `ldc`
/// elements between stored rows (default: packed); `batch` matrices `stride_*` elements apart
/// (`stride_a`/`stride_b` 0: one matrix for all). Dtypes: a and b each f32, f16 or bf16 and
/// c f32, f16 or bf16; or a and b i8 and c i32 (then `alpha` 1, `beta` 0).
#[pyfunction]
#[pyo3(signature = (a, b, c, m, n, k, *, dtype = None, dtype_a = None, dtype_b = None,
    dtype_c = None, trans_a = false, trans_b = false, lda = None, ldb = None, ldc = None,
    alpha = 1.0, beta = 0.0, batch = 1, stride_a = None, stride_b = None, stride_c = None,
    user_data = 0))]
#[allow(clippy::too_many_arguments)]
pub fn task_gemm(
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    c: &Bound<'_, PyAny>,
    m: u64,
    n: u64,
    k: u64,
    dtype: Option<&Bound<'_, PyAny>>,
    dtype_a: Option<&Bound<'_, PyAny>>,
    dtype_b: Option<&Bound<'_, PyAny>>,
    dtype_c: Option<&Bound<'_, PyAny>>,
    trans_a: bool,
    trans_b: bool,
    lda: Option<u64>,
    ldb: Option<u64>,
    ldc: Option<u64>,
    alpha: f32,
    beta: f32,
    batch: u64,
    stride_a: Option<u64>,
    stride_b: Option<u64>,
    stride_c: Option<u64>,
    user_data: u64,
) -> PyResult<Task> {
    const OP: &str = "task.gemm";
    let base = match dtype {
        Some(d) => kernel_dtype(OP, "dtype", d)?,
        None => Dtype::F32,
    };
    let dt = |v: Option<&Bound<'_, PyAny>>, name| v.map_or(Ok(base), |d| kernel_dtype(OP, name, d));
    let (da, db, dc) = (
        dt(dtype_a, "dtype_a")?,
        dt(dtype_b, "dtype_b")?,
        dt(dtype_c, "dtype_c")?,
    );
    let (oa, ob, oc) = (
        operand(OP, "a", a)?,
        operand(OP, "b", b)?,
        operand(OP, "c", c)?,
    );
    let (ra, rb, rc) = (
        oa.region().or_raise()?,
        ob.region().or_raise()?,
        oc.region().or_raise()?,
    );
    // Stored shapes: a m×k (k×m transposed), b k×n (n×k transposed).
    let stored = |t: bool, r: u64, c: u64| if t { (c, r) } else { (r, c) };
    let mat =
        |region, d, (rows, cols): (u64, u64), ld: Option<u64>, t: bool, stride: Option<u64>| {
            let ld = ld.unwrap_or(cols);
            let mut x = Matrix::new(region, d, rows, cols).ld(ld);
            // A stride of 0 (or one matrix): the same matrix for every batch.
            let s = stride.unwrap_or(rows.saturating_mul(ld));
            if batch != 1 && s != 0 {
                x = x.batched(batch, s);
            }
            if t {
                x = x.t();
            }
            x
        };
    let ma = mat(ra, da, stored(trans_a, m, k), lda, trans_a, stride_a);
    let mb = mat(rb, db, stored(trans_b, k, n), ldb, trans_b, stride_b);
    let mut mc = Matrix::new(rc, dc, m, n).ld(ldc.unwrap_or(n));
    if batch != 1 {
        mc = mc.batched(
            batch,
            stride_c.unwrap_or(m.saturating_mul(ldc.unwrap_or(n))),
        );
    }
    done(task::gemm(ma, mb, mc, alpha, beta), user_data)
}

fn tensor<'a>(
    op: &'static str,
    name: &str,
    r: davinci_shim::Region<'a>,
    d: Dtype,
    shape: &[u64],
    strides: Option<Vec<u64>>,
) -> PyResult<Tensor<'a>> {
    let t = Tensor::new(r, d, shape).or_raise()?;
    match strides {
        Some(s) => t.strides(&s).or_raise(),
        None => {
            let _ = (op, name);
            Ok(t)
        }
    }
}

fn ew_op(op: &'static str, s: &str) -> PyResult<EwOp> {
    Ok(match s {
        "add" => EwOp::Add,
        "sub" => EwOp::Sub,
        "mul" => EwOp::Mul,
        "div" => EwOp::Div,
        "max" | "maximum" => EwOp::Max,
        "min" | "minimum" => EwOp::Min,
        "relu" => EwOp::Relu,
        "gelu" => EwOp::Gelu,
        "silu" => EwOp::Silu,
        "exp" => EwOp::Exp,
        "cast" => EwOp::Cast,
        _ => {
            return Err(invalid(
                op,
                format!(
                    "op {s:?} is none of add, sub, mul, div, max, min, relu, gelu, silu, exp, cast"
                ),
            ))
        }
    })
}

/// An elementwise op (`"add"`, `"sub"`, `"mul"`, `"div"`, `"max"`, `"min"` with `b`;
/// `"relu"`, `"gelu"`, `"silu"`, `"exp"`, `"cast"` without) over `shape`; `a_shape` and
/// `b_shape` broadcast to it numpy's way (default: `shape`); packed operands unless
/// `*_strides` (elements) say otherwise. `dtype` for all (f32); `dtype_dst` differs for cast.
#[pyfunction]
#[pyo3(signature = (op, dst, a, b = None, *, shape, a_shape = None, b_shape = None,
    dtype = None, dtype_dst = None, dst_strides = None, a_strides = None, b_strides = None,
    user_data = 0))]
#[allow(clippy::too_many_arguments)]
pub fn task_elementwise(
    op: &str,
    dst: &Bound<'_, PyAny>,
    a: &Bound<'_, PyAny>,
    b: Option<&Bound<'_, PyAny>>,
    shape: Vec<u64>,
    a_shape: Option<Vec<u64>>,
    b_shape: Option<Vec<u64>>,
    dtype: Option<&Bound<'_, PyAny>>,
    dtype_dst: Option<&Bound<'_, PyAny>>,
    dst_strides: Option<Vec<u64>>,
    a_strides: Option<Vec<u64>>,
    b_strides: Option<Vec<u64>>,
    user_data: u64,
) -> PyResult<Task> {
    const OP: &str = "task.elementwise";
    let kind = ew_op(OP, op)?;
    let d = dtype.map_or(Ok(Dtype::F32), |v| kernel_dtype(OP, "dtype", v))?;
    let dd = dtype_dst.map_or(Ok(d), |v| kernel_dtype(OP, "dtype_dst", v))?;
    let (od, oa) = (operand(OP, "dst", dst)?, operand(OP, "a", a)?);
    let ob = b.map(|b| operand(OP, "b", b)).transpose()?;
    let td = tensor(OP, "dst", od.region().or_raise()?, dd, &shape, dst_strides)?;
    let ta = tensor(
        OP,
        "a",
        oa.region().or_raise()?,
        d,
        a_shape.as_deref().unwrap_or(&shape),
        a_strides,
    )?;
    let tb = match &ob {
        Some(o) => Some(tensor(
            OP,
            "b",
            o.region().or_raise()?,
            d,
            b_shape.as_deref().unwrap_or(&shape),
            b_strides,
        )?),
        None => None,
    };
    done(task::elementwise(kind, td, ta, tb), user_data)
}

/// A reduction (`"sum"` or `"max"`) of `src` (packed, `shape`) along `axis` into `dst`
/// (packed, `shape` without the axis); `dtype_dst` i32 for an i8 sum.
#[pyfunction]
#[pyo3(signature = (op, dst, src, *, shape, axis, dtype = None, dtype_dst = None, user_data = 0))]
#[allow(clippy::too_many_arguments)]
pub fn task_reduce(
    op: &str,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    shape: Vec<u64>,
    axis: usize,
    dtype: Option<&Bound<'_, PyAny>>,
    dtype_dst: Option<&Bound<'_, PyAny>>,
    user_data: u64,
) -> PyResult<Task> {
    const OP: &str = "task.reduce";
    let kind = match op {
        "sum" => ReduceOp::Sum,
        "max" => ReduceOp::Max,
        _ => {
            return Err(invalid(
                OP,
                format!("op {op:?} is neither \"sum\" nor \"max\""),
            ))
        }
    };
    let d = dtype.map_or(Ok(Dtype::F32), |v| kernel_dtype(OP, "dtype", v))?;
    let dd = dtype_dst.map_or(Ok(d), |v| kernel_dtype(OP, "dtype_dst", v))?;
    if axis >= shape.len() {
        return Err(invalid(
            OP,
            format!("axis {axis} of a shape of {} dimensions", shape.len()),
        ));
    }
    let mut out = shape.clone();
    out.remove(axis);
    if out.is_empty() {
        out.push(1);
    }
    let (od, os) = (operand(OP, "dst", dst)?, operand(OP, "src", src)?);
    let td = tensor(OP, "dst", od.region().or_raise()?, dd, &out, None)?;
    let ts = tensor(OP, "src", os.region().or_raise()?, d, &shape, None)?;
    done(task::reduce(kind, td, ts, axis), user_data)
}

/// Softmax along each of `rows` rows of `cols` (packed unless `ld_src`/`ld_dst`).
#[pyfunction]
#[pyo3(signature = (dst, src, rows, cols, *, dtype = None, dtype_dst = None, ld_src = None,
    ld_dst = None, user_data = 0))]
#[allow(clippy::too_many_arguments)]
pub fn task_softmax(
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    rows: u64,
    cols: u64,
    dtype: Option<&Bound<'_, PyAny>>,
    dtype_dst: Option<&Bound<'_, PyAny>>,
    ld_src: Option<u64>,
    ld_dst: Option<u64>,
    user_data: u64,
) -> PyResult<Task> {
    const OP: &str = "task.softmax";
    let d = dtype.map_or(Ok(Dtype::F32), |v| kernel_dtype(OP, "dtype", v))?;
    let dd = dtype_dst.map_or(Ok(d), |v| kernel_dtype(OP, "dtype_dst", v))?;
    let (od, os) = (operand(OP, "dst", dst)?, operand(OP, "src", src)?);
    let md = Matrix::new(od.region().or_raise()?, dd, rows, cols).ld(ld_dst.unwrap_or(cols));
    let ms = Matrix::new(os.region().or_raise()?, d, rows, cols).ld(ld_src.unwrap_or(cols));
    done(task::softmax(md, ms), user_data)
}

/// Layer norm (`kind="layer"`) or RMS norm (`kind="rms"`) of each row, `gamma` and `beta`
/// (buffers of `cols` elements of `dtype_gamma`, default the rows' dtype) optional.
#[pyfunction]
#[pyo3(signature = (dst, src, rows, cols, *, kind = "layer", gamma = None, beta = None,
    eps = 1e-5, dtype = None, dtype_dst = None, dtype_gamma = None, user_data = 0))]
#[allow(clippy::too_many_arguments)]
pub fn task_norm(
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    rows: u64,
    cols: u64,
    kind: &str,
    gamma: Option<&Bound<'_, PyAny>>,
    beta: Option<&Bound<'_, PyAny>>,
    eps: f32,
    dtype: Option<&Bound<'_, PyAny>>,
    dtype_dst: Option<&Bound<'_, PyAny>>,
    dtype_gamma: Option<&Bound<'_, PyAny>>,
    user_data: u64,
) -> PyResult<Task> {
    const OP: &str = "task.norm";
    let d = dtype.map_or(Ok(Dtype::F32), |v| kernel_dtype(OP, "dtype", v))?;
    let dd = dtype_dst.map_or(Ok(d), |v| kernel_dtype(OP, "dtype_dst", v))?;
    let dg = dtype_gamma.map_or(Ok(d), |v| kernel_dtype(OP, "dtype_gamma", v))?;
    let (od, os) = (operand(OP, "dst", dst)?, operand(OP, "src", src)?);
    let og = gamma.map(|v| operand(OP, "gamma", v)).transpose()?;
    let ob = beta.map(|v| operand(OP, "beta", v)).transpose()?;
    let md = Matrix::new(od.region().or_raise()?, dd, rows, cols);
    let ms = Matrix::new(os.region().or_raise()?, d, rows, cols);
    let rg = og.as_ref().map(|o| o.region()).transpose().or_raise()?;
    let rb = ob.as_ref().map(|o| o.region()).transpose().or_raise()?;
    let t = match kind {
        "layer" => task::layer_norm(md, ms, rg, rb, dg, eps),
        "rms" => task::rms_norm(md, ms, rg, rb, dg, eps),
        _ => {
            return Err(invalid(
                OP,
                format!("kind {kind:?} is neither \"layer\" nor \"rms\""),
            ))
        }
    };
    done(t, user_data)
}

/// FILL of every byte of `dst` with `value` (a memset of any offset and length).
#[pyfunction]
#[pyo3(signature = (dst, value, user_data = 0))]
pub fn task_fill_bytes(dst: &Bound<'_, PyAny>, value: u8, user_data: u64) -> PyResult<Task> {
    let od = operand("task.fill_bytes", "dst", dst)?;
    done(task::fill_bytes(od.region().or_raise()?, value), user_data)
}
