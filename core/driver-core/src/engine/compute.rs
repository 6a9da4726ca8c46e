//! One unit of a kernel launch, computed (feature `kernels`, user-space hosts only): each
//! operand's footprint is read out of device memory through the platform, typed, handed to
//! `davinci-kernels`, and the output's elements (only they: a gap between rows may be another
//! stream's) are written back. The unit was cut and its operands checked by `launch.rs`.

extern crate std;

use std::rc::Rc;
use std::vec::Vec;

use davinci_kernels::{
    bf16, elementwise as ew, f16, gemm, reduce as red, rows, Operand as KOp, Problem, Slice,
    SliceMut,
};
use davinci_uapi::kernels::{EwOp, NormKind, ReduceOp, GEMM_TRANS_A, GEMM_TRANS_B};
use davinci_uapi::{Dtype, Errno, FaultKind, FaultOperand as O};

use super::exec::Exec;
use super::launch::{footprint, Operand, Params};
use crate::error::{Error, Result};
use crate::platform::Platform;

/// An operand's elements on the host.
enum Buf {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    I8(Vec<i8>),
    I32(Vec<i32>),
}

fn no_memory() -> Error {
    Error::new(Errno::ENOMEM, "no host memory for a kernel's operands")
}

fn vec_of<T: Clone>(n: usize, zero: T) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| no_memory())?;
    v.resize(n, zero);
    Ok(v)
}

fn usize_of(v: u64) -> Result<usize> {
    usize::try_from(v).map_err(|_| no_memory())
}

impl Buf {
    /// `n` zeros of `dt`.
    fn zeros(dt: Dtype, n: usize) -> Result<Buf> {
        Ok(match dt {
            Dtype::F16 => Buf::F16(vec_of(n, f16::ZERO)?),
            Dtype::Bf16 => Buf::Bf16(vec_of(n, bf16::ZERO)?),
            Dtype::I8 => Buf::I8(vec_of(n, 0)?),
            Dtype::I32 => Buf::I32(vec_of(n, 0)?),
            _ => Buf::F32(vec_of(n, 0.0)?),
        })
    }

    /// Whether it holds `n` elements of `dt`.
    fn same_shape(&self, dt: Dtype, n: usize) -> bool {
        let (kind, len) = match self {
            Buf::F32(v) => (Dtype::F32, v.len()),
            Buf::F16(v) => (Dtype::F16, v.len()),
            Buf::Bf16(v) => (Dtype::Bf16, v.len()),
            Buf::I8(v) => (Dtype::I8, v.len()),
            Buf::I32(v) => (Dtype::I32, v.len()),
        };
        len == n && (kind == dt || (kind == Dtype::F32 && !Buf::typed(dt)))
    }

    /// Whether `dt` has its own kind of buffer (the others are held as f32).
    fn typed(dt: Dtype) -> bool {
        matches!(
            dt,
            Dtype::F32 | Dtype::F16 | Dtype::Bf16 | Dtype::I8 | Dtype::I32
        )
    }

    /// Every element 0.
    fn zero(&mut self) {
        match self {
            Buf::F32(v) => v.fill(0.0),
            Buf::F16(v) => v.fill(f16::ZERO),
            Buf::Bf16(v) => v.fill(bf16::ZERO),
            Buf::I8(v) => v.fill(0),
            Buf::I32(v) => v.fill(0),
        }
    }

    /// The elements of `b` (native byte order, as device memory holds them).
    fn load(&mut self, b: &[u8]) {
        match self {
            Buf::F32(v) => b.chunks_exact(4).zip(v.iter_mut()).for_each(|(c, x)| {
                *x = f32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
            }),
            Buf::F16(v) => b.chunks_exact(2).zip(v.iter_mut()).for_each(|(c, x)| {
                *x = f16::from_bits(u16::from_ne_bytes([c[0], c[1]]));
            }),
            Buf::Bf16(v) => b.chunks_exact(2).zip(v.iter_mut()).for_each(|(c, x)| {
                *x = bf16::from_bits(u16::from_ne_bytes([c[0], c[1]]));
            }),
            Buf::I8(v) => b.iter().zip(v.iter_mut()).for_each(|(c, x)| *x = *c as i8),
            Buf::I32(v) => b.chunks_exact(4).zip(v.iter_mut()).for_each(|(c, x)| {
                *x = i32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
            }),
        }
    }

    /// Its bytes into `b`.
    fn store(&self, b: &mut [u8]) {
        match self {
            Buf::F32(v) => b
                .chunks_exact_mut(4)
                .zip(v)
                .for_each(|(c, x)| c.copy_from_slice(&x.to_ne_bytes())),
            Buf::F16(v) => b
                .chunks_exact_mut(2)
                .zip(v)
                .for_each(|(c, x)| c.copy_from_slice(&x.to_bits().to_ne_bytes())),
            Buf::Bf16(v) => b
                .chunks_exact_mut(2)
                .zip(v)
                .for_each(|(c, x)| c.copy_from_slice(&x.to_bits().to_ne_bytes())),
            Buf::I8(v) => b.iter_mut().zip(v).for_each(|(c, x)| *c = *x as u8),
            Buf::I32(v) => b
                .chunks_exact_mut(4)
                .zip(v)
                .for_each(|(c, x)| c.copy_from_slice(&x.to_ne_bytes())),
        }
    }

    fn slice(&self) -> Slice<'_> {
        match self {
            Buf::F32(v) => Slice::F32(v),
            Buf::F16(v) => Slice::F16(v),
            Buf::Bf16(v) => Slice::Bf16(v),
            Buf::I8(v) => Slice::I8(v),
            Buf::I32(v) => Slice::I32(v),
        }
    }

    fn slice_mut(&mut self) -> SliceMut<'_> {
        match self {
            Buf::F32(v) => SliceMut::F32(v),
            Buf::F16(v) => SliceMut::F16(v),
            Buf::Bf16(v) => SliceMut::Bf16(v),
            Buf::I8(v) => SliceMut::I8(v),
            Buf::I32(v) => SliceMut::I32(v),
        }
    }
}

/// An operand read in (or, for an output that is not read, zeros), with its place.
struct Held {
    o: Operand,
    owner: u32,
    at: u64,
    /// Shared with the cache for a cached input; the output's is its own.
    buf: Rc<Buf>,
}

/// The large inputs units read on this thread, kept for the next units of the same launches:
/// a GEMM cut into row blocks reads the whole of B in every unit, the same bytes each time (a
/// launch reads its operands at some time while it runs, as a real device does: a host that
/// writes them meanwhile races the launch). A poller serves several streams in turn, a unit
/// each, so it keeps one entry for each of up to [`CACHE_ENTRIES`] launches (with one, two
/// streams of GEMMs read and converted B again in every unit, and a tenant beside them waited
/// for that twice a pass). Keyed by the launch's serial, so no other launch ever sees an
/// entry, and zeroed when the launch ends ([`forget`]); at most [`CACHE_MAX`] bytes of
/// elements a thread in all.
struct Cached {
    /// 0 once the launch ended: the buffer is zeros, kept for a next input of its size.
    serial: u64,
    owner: u32,
    at: u64,
    bytes: u64,
    /// When it was last used (the thread's count of lookups): the least recent goes first.
    used: u64,
    buf: Rc<Buf>,
}

/// A thread's entries and its count of lookups.
struct Cache {
    entries: Vec<Cached>,
    clock: u64,
}

std::thread_local! {
    static CACHE: core::cell::RefCell<Cache> =
        const { core::cell::RefCell::new(Cache { entries: Vec::new(), clock: 0 }) };
}

/// Inputs kept between units: from 64 KiB (below, reading again costs little) to 64 MiB, in
/// all, a thread.
const CACHE_MIN: u64 = 64 << 10;
const CACHE_MAX: u64 = 64 << 20;
/// Launches a thread keeps an input of at once.
const CACHE_ENTRIES: usize = 4;

/// Launch `serial` ended (done or failed): zeroes what this thread kept of its operands, so
/// no client's bytes outlive its launch here. (A launch whose stream is destroyed mid-way
/// leaves its entry until this thread's later launches push it out: bounded by
/// [`CACHE_MAX`].)
pub(super) fn forget(serial: u64) {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let Some(i) = c.entries.iter().position(|k| k.serial == serial) else {
            return;
        };
        // Zeroed and kept, not freed: freed, the allocator hands a buffer this large back to
        // the system, and the next launch's first unit pays its page faults again (a 1024³
        // GEMM ran at 0.56x the reference instead of 0.71x). Serials start at 1: no launch
        // matches 0.
        let k = &mut c.entries[i];
        match Rc::get_mut(&mut k.buf) {
            Some(b) => {
                b.zero();
                (k.serial, k.owner, k.at) = (0, 0, 0);
            }
            None => {
                c.entries.swap_remove(i);
            }
        }
    });
}

/// The cached elements of launch `serial`'s input at (`owner`, `at`), `bytes` long.
fn cached(serial: u64, owner: u32, at: u64, bytes: u64) -> Option<Rc<Buf>> {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.clock += 1;
        let now = c.clock;
        let k = c
            .entries
            .iter_mut()
            .find(|k| (k.serial, k.owner, k.at, k.bytes) == (serial, owner, at, bytes))?;
        k.used = now;
        Some(k.buf.clone())
    })
}

/// A zeroed buffer of `n` elements of `dt` for a new entry: a kept one of that shape (its
/// pages already faulted in) if the thread has one, else a new one.
fn fresh(dt: Dtype, n: usize, bytes: u64) -> Result<Buf> {
    let kept = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let i = c.entries.iter().position(|k| {
            k.serial == 0
                && k.bytes == bytes
                && Rc::strong_count(&k.buf) == 1
                && k.buf.same_shape(dt, n)
        })?;
        Rc::try_unwrap(c.entries.swap_remove(i).buf).ok()
    });
    match kept {
        Some(b) => Ok(b),
        None => Buf::zeros(dt, n),
    }
}

/// Keeps `buf` (`bytes` of elements) for launch `serial`: the least recently used entries
/// (those of ended launches first) make room, in number and in bytes.
fn keep(serial: u64, owner: u32, at: u64, bytes: u64, buf: Rc<Buf>) {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.clock += 1;
        let used = c.clock;
        loop {
            let total: u64 = c.entries.iter().map(|k| k.bytes).sum();
            if c.entries.len() < CACHE_ENTRIES && total.saturating_add(bytes) <= CACHE_MAX {
                break;
            }
            let Some(i) = (0..c.entries.len()).min_by_key(|&i| {
                let k = &c.entries[i];
                (k.serial != 0, k.used)
            }) else {
                break;
            };
            c.entries.swap_remove(i);
        }
        c.entries.push(Cached {
            serial,
            owner,
            at,
            bytes,
            used,
            buf,
        });
    });
}

fn hold<P: Platform>(
    exec: &Exec<'_, P>,
    o: &Operand,
    read: bool,
    cache: Option<u64>,
) -> Result<Held> {
    let elements = footprint(&o.dims, &o.strides).ok_or(Error::at(
        Errno::ERANGE,
        "the operand's footprint overflows",
        o.op,
        FaultKind::Overflow,
    ))?;
    let bytes = elements.saturating_mul(o.dtype.size());
    let (owner, at) = if bytes == 0 {
        (0, 0)
    } else {
        exec.place(o.addr, bytes, o.op)?
    };
    let cacheable = cache.filter(|_| read && (CACHE_MIN..=CACHE_MAX).contains(&bytes));
    if let Some(buf) = cacheable.and_then(|serial| cached(serial, owner, at, bytes)) {
        return Ok(Held {
            o: *o,
            owner,
            at,
            buf,
        });
    }
    let n = usize_of(elements)?;
    let mut buf = match cacheable {
        Some(_) => fresh(o.dtype, n, bytes)?,
        None => Buf::zeros(o.dtype, n)?,
    };
    if read && bytes > 0 {
        let mut raw = vec_of(usize_of(bytes)?, 0u8)?;
        exec.platform.mem_read(owner, at, &mut raw)?;
        buf.load(&raw);
    }
    let buf = Rc::new(buf);
    if let Some(serial) = cacheable {
        keep(serial, owner, at, bytes, buf.clone());
    }
    Ok(Held {
        o: *o,
        owner,
        at,
        buf,
    })
}

/// Writes the output's elements back, a contiguous run at a time (its dimensions merged where
/// they are contiguous), never the bytes between them.
fn write_back<P: Platform>(exec: &Exec<'_, P>, h: &Held) -> Result<()> {
    let size = h.o.dtype.size();
    let total = footprint(&h.o.dims, &h.o.strides).unwrap_or(0);
    if total == 0 {
        return Ok(());
    }
    let mut raw = vec_of(usize_of(total.saturating_mul(size))?, 0u8)?;
    h.buf.store(&mut raw);
    // The dimensions longer than 1, outermost first, merged where contiguous.
    let mut dims = [(0u64, 0u64); 4];
    let mut n = 0;
    for i in 0..4 {
        if h.o.dims[i] > 1 {
            let (d, s) = (h.o.dims[i], h.o.strides[i]);
            if n > 0 && dims[n - 1].1 == s.saturating_mul(d) {
                dims[n - 1] = (dims[n - 1].0.saturating_mul(d), s);
            } else {
                dims[n] = (d, s);
                n += 1;
            }
        }
    }
    let dims = &dims[..n];
    let (run, outer) = match dims.last() {
        Some((d, 1)) => (*d, &dims[..n - 1]),
        _ => (1, dims),
    };
    let count: u64 = outer.iter().map(|(d, _)| *d).product();
    let run_bytes = usize_of(run.saturating_mul(size))?;
    for mut k in 0..count {
        let mut off = 0u64;
        for (d, s) in outer.iter().rev() {
            off += (k % d) * s;
            k /= d;
        }
        let b = usize_of(off.saturating_mul(size))?;
        let bytes = raw.get(b..b + run_bytes).ok_or(no_memory())?;
        exec.platform.mem_write(h.owner, h.at + b as u64, bytes)?;
    }
    Ok(())
}

/// A refusal of the kernel library (launch.rs checked everything it checks, so this is a
/// host bug or host memory): `EINVAL` naming the operand, `ENOMEM` for memory.
fn refused(e: davinci_kernels::Error) -> Error {
    let op = match e.operand {
        KOp::A => O::A,
        KOp::B => O::B,
        KOp::C => O::C,
        KOp::Gamma => O::Gamma,
        KOp::Beta => O::Beta,
        KOp::Shape | KOp::Unit => O::Shape,
        KOp::Params => O::Params,
    };
    if e.problem == Problem::TooLarge {
        return no_memory();
    }
    Error::at(
        Errno::EINVAL,
        "the kernel refused its operands",
        op,
        FaultKind::Invalid,
    )
}

fn shape4(d: &[u64; 4]) -> Result<[usize; 4]> {
    Ok([
        usize_of(d[0])?,
        usize_of(d[1])?,
        usize_of(d[2])?,
        usize_of(d[3])?,
    ])
}

/// Runs `unit` (a launch of its own, checked) of launch `serial` against the device memory
/// `exec` reaches.
pub(super) fn run<P: Platform>(exec: &Exec<'_, P>, unit: &Params, serial: u64) -> Result<()> {
    let (ops, n) = unit.operands();
    let ops = &ops[..n];
    // An output is read only where the kernel reads it (GEMM with beta), so its other
    // elements are the kernel's alone; inputs are read whole.
    let reads_c = matches!(unit, Params::Gemm(p) if p.beta != 0);
    let mut held = Vec::new();
    held.try_reserve_exact(n).map_err(|_| no_memory())?;
    // GEMM's B: the same bytes in every unit of a launch cut into row blocks.
    let gemm = matches!(unit, Params::Gemm(_));
    for o in ops {
        let cache = (gemm && o.op == O::B).then_some(serial);
        held.push(hold(exec, o, !o.output || reads_c, cache)?);
    }
    let Some(oi) = held.iter().position(|h| h.o.output) else {
        return Ok(());
    };
    let mut out = held.remove(oi);
    let Some(out_buf) = Rc::get_mut(&mut out.buf) else {
        return Err(Error::new(
            Errno::EIO,
            "a kernel's output is shared (a host bug)",
        ));
    };
    let inputs = &held;
    let r = match unit {
        Params::Gemm(p) => {
            let gp = gemm::GemmParams {
                m: usize_of(p.m)?,
                n: usize_of(p.n)?,
                k: usize_of(p.k)?,
                batch: usize_of(p.batch)?,
                a: gemm::GemmInput {
                    ld: usize_of(p.lda)?,
                    batch_stride: usize_of(p.stride_a)?,
                    trans: p.flags & GEMM_TRANS_A != 0,
                },
                b: gemm::GemmInput {
                    ld: usize_of(p.ldb)?,
                    batch_stride: usize_of(p.stride_b)?,
                    trans: p.flags & GEMM_TRANS_B != 0,
                },
                c: gemm::GemmOutput {
                    ld: usize_of(p.ldc)?,
                    batch_stride: usize_of(p.stride_c)?,
                },
                alpha: f32::from_bits(p.alpha),
                beta: f32::from_bits(p.beta),
            };
            let total = gp.units().map_err(refused)?;
            let (a, b) = (inputs[0].buf.slice(), inputs[1].buf.slice());
            gemm::gemm(&gp, a, b, out_buf.slice_mut(), 0..total)
        }
        Params::Elementwise(p) => {
            let op = match EwOp::from_u32(p.op) {
                Some(EwOp::Add) => ew::ElementwiseOp::Add,
                Some(EwOp::Sub) => ew::ElementwiseOp::Sub,
                Some(EwOp::Mul) => ew::ElementwiseOp::Mul,
                Some(EwOp::Div) => ew::ElementwiseOp::Div,
                Some(EwOp::Max) => ew::ElementwiseOp::Max,
                Some(EwOp::Min) => ew::ElementwiseOp::Min,
                Some(EwOp::Relu) => ew::ElementwiseOp::Relu,
                Some(EwOp::Gelu) => ew::ElementwiseOp::Gelu,
                Some(EwOp::Silu) => ew::ElementwiseOp::Silu,
                Some(EwOp::Exp) => ew::ElementwiseOp::Exp,
                Some(EwOp::Cast) | None => ew::ElementwiseOp::Cast,
            };
            let shape = shape4(&p.shape)?;
            let a = ew::Input {
                data: inputs[0].buf.slice(),
                strides: shape4(&p.stride_a)?,
            };
            let b = match inputs.get(1) {
                Some(h) => Some(ew::Input {
                    data: h.buf.slice(),
                    strides: shape4(&p.stride_b)?,
                }),
                None => None,
            };
            let total = ew::units(&shape).map_err(refused)?;
            let dst = ew::Output {
                data: out_buf.slice_mut(),
                strides: shape4(&p.stride_dst)?,
            };
            ew::elementwise(op, &shape, dst, a, b, 0..total)
        }
        Params::Reduce(p) => {
            let op = match ReduceOp::from_u32(p.op) {
                Some(ReduceOp::Max) => red::ReduceOp::Max,
                _ => red::ReduceOp::Sum,
            };
            let shape = shape4(&p.shape)?;
            let axis = p.axis as usize;
            let src = ew::Input {
                data: inputs[0].buf.slice(),
                strides: shape4(&p.stride_src)?,
            };
            let dst = ew::Output {
                data: out_buf.slice_mut(),
                strides: shape4(&p.stride_dst)?,
            };
            let total = red::validate(op, &shape, axis, &src, &dst).map_err(refused)?;
            red::reduce(op, &shape, axis, src, dst, 0..total)
        }
        Params::Softmax(p) => {
            let shape = (usize_of(p.rows)?, usize_of(p.cols)?);
            let src = rows::RowsIn {
                data: inputs[0].buf.slice(),
                ld: usize_of(p.ld_src)?,
            };
            let dst = rows::RowsOut {
                data: out_buf.slice_mut(),
                ld: usize_of(p.ld_dst)?,
            };
            rows::softmax(shape, src, dst, 0..shape.0)
        }
        Params::Norm(p) => {
            let shape = (usize_of(p.rows)?, usize_of(p.cols)?);
            let kind = match NormKind::from_u32(p.kind) {
                Some(NormKind::RmsNorm) => rows::NormKind::RmsNorm,
                _ => rows::NormKind::LayerNorm,
            };
            let extra = |op: O| inputs.iter().find(|h| h.o.op == op).map(|h| h.buf.slice());
            let np = rows::NormParams {
                kind,
                eps: f32::from_bits(p.eps),
                gamma: extra(O::Gamma),
                beta: extra(O::Beta),
            };
            let src = rows::RowsIn {
                data: inputs[0].buf.slice(),
                ld: usize_of(p.ld_src)?,
            };
            let dst = rows::RowsOut {
                data: out_buf.slice_mut(),
                ld: usize_of(p.ld_dst)?,
            };
            rows::norm(shape, &np, src, dst, 0..shape.0)
        }
    };
    r.map_err(refused)?;
    write_back(exec, &out)
}

#[cfg(test)]
mod tests;
