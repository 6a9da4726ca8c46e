//! Reductions, softmax and the norms against the reference (exact for integers and max; the
//! crate docs' bounds for floats), the units property, refusals.

mod common;

use common::{check_close, random_cut, s, u, Buf, Rng, ALL, FLOATS};
use davinci_kernels::elementwise::{Input, Output};
use davinci_kernels::layout::Shape;
use davinci_kernels::reduce::{self, reduce, ReduceOp};
use davinci_kernels::rows::{norm, softmax, NormKind, NormParams, RowsIn, RowsOut};
use davinci_kernels::{reference, DType, Operand, Problem};
use proptest::prelude::*;

struct ReduceCase {
    op: ReduceOp,
    shape: Shape,
    axis: usize,
    src: (Buf, [usize; 4]),
    dst: (Buf, [usize; 4]),
}

fn row_major(shape: &Shape, rng: &mut Rng, bcast: bool) -> ([usize; 4], usize) {
    let mut st = [0; 4];
    let mut extent = 1;
    for d in (0..4).rev() {
        if bcast && rng.below(5) == 0 {
            continue;
        }
        st[d] = extent;
        extent = extent * shape[d].max(1) + rng.below(2);
    }
    let len = 1
        + (0..4)
            .map(|d| shape[d].saturating_sub(1) * st[d])
            .sum::<usize>();
    (st, len)
}

fn reduce_case(
    op: ReduceOp,
    shape: Shape,
    axis: usize,
    (ds, dd): (DType, DType),
    seed: u64,
) -> ReduceCase {
    let mut rng = Rng::new(seed);
    let (sst, slen) = row_major(&shape, &mut rng, true);
    let mut out = shape;
    out[axis] = 1;
    let (dst_st, dlen) = row_major(&out, &mut rng, false);
    ReduceCase {
        op,
        shape,
        axis,
        src: (
            Buf::random(ds, slen, &mut rng, 100.0, op == ReduceOp::Max),
            sst,
        ),
        dst: (Buf::random(dd, dlen, &mut rng, 1.0, false), dst_st),
    }
}

fn run_reduce(
    c: &ReduceCase,
    dst: &mut Buf,
    unit: std::ops::Range<usize>,
) -> davinci_kernels::Result {
    let src = Input {
        data: c.src.0.s(),
        strides: c.src.1,
    };
    reduce(
        c.op,
        &c.shape,
        c.axis,
        src,
        Output {
            data: dst.m(),
            strides: c.dst.1,
        },
        unit,
    )
}

fn dtypes() -> impl Strategy<Value = (DType, DType)> {
    prop_oneof![4 => (0..5usize).prop_map(|i| (ALL[i], ALL[i])), 1 => Just((DType::I8, DType::I32))]
}

struct RowsCase {
    shape: (usize, usize),
    src: (Buf, usize),
    dst: (Buf, usize),
    gamma: Option<Buf>,
    beta: Option<Buf>,
}

fn rows_case(shape: (usize, usize), (ds, dd): (DType, DType), seed: u64, mag: f64) -> RowsCase {
    let mut rng = Rng::new(seed);
    let (sld, dld) = (shape.1 + rng.below(3), shape.1 + rng.below(3));
    let len = |ld: usize| {
        if shape.0 == 0 {
            0
        } else {
            (shape.0 - 1) * ld + shape.1
        }
    };
    let vec = |d: Option<DType>, rng: &mut Rng| d.map(|d| Buf::random(d, shape.1, rng, 2.0, false));
    let gd = (rng.below(3) > 0).then(|| FLOATS[rng.below(3)]);
    let bd = (rng.below(3) > 0).then(|| FLOATS[rng.below(3)]);
    RowsCase {
        shape,
        src: (Buf::random(ds, len(sld), &mut rng, mag, false), sld),
        dst: (Buf::random(dd, len(dld), &mut rng, 1.0, false), dld),
        gamma: vec(gd, &mut rng),
        beta: vec(bd, &mut rng),
    }
}

const EPS: [f32; 3] = [0.0, 1e-5, 1.0];

fn params(c: &RowsCase, kind: NormKind, eps: f32) -> NormParams<'_> {
    NormParams {
        kind,
        eps,
        gamma: c.gamma.as_ref().map(Buf::s),
        beta: c.beta.as_ref().map(Buf::s),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn reduce_matches_reference(max in any::<bool>(), shape in [0usize..4, 0usize..5, 0usize..6, 0usize..9], axis in 0usize..4, d in dtypes(), seed in any::<u64>()) {
        let op = if max { ReduceOp::Max } else { ReduceOp::Sum };
        let d = if max { (d.0, d.0) } else { d };
        let c = reduce_case(op, shape, axis, d, seed);
        let total = reduce::validate(op, &shape, axis, &Input { data: c.src.0.s(), strides: c.src.1 }, &Output { data: c.dst.0.clone().m(), strides: c.dst.1 }).unwrap();
        let mut got = c.dst.0.clone();
        run_reduce(&c, &mut got, 0..total).unwrap();
        let mut want = c.dst.0.clone();
        let src = Input { data: c.src.0.s(), strides: c.src.1 };
        reference::reduce(op, &shape, axis, src, Output { data: want.m(), strides: c.dst.1 }).unwrap();
        let n = shape[axis] as f64;
        let tol: Vec<f64> = (0..want.len()).map(|i| match (op, d.1.is_float()) {
            (ReduceOp::Sum, true) => 2.0 * u(d.1) * want.get(i).abs() + n * n * 100.0 * 2f64.powi(-52) + s(d.1),
            _ => 0.0,
        }).collect();
        if let Err(e) = check_close(&got, &want, &tol) {
            prop_assert!(false, "{:?} {:?} axis {} {:?}: {}", op, shape, axis, d, e);
        }
        let mut cut = c.dst.0.clone();
        for unit in random_cut(total, &mut Rng::new(seed ^ 1)) {
            run_reduce(&c, &mut cut, unit).unwrap();
        }
        prop_assert_eq!(got.bits(), cut.bits());
    }

    #[test]
    fn softmax_matches_reference(rows in 0usize..6, cols in 0usize..40, ds in 0..3usize, dd in 0..3usize, seed in any::<u64>()) {
        let (ds, dd) = (FLOATS[ds], FLOATS[dd]);
        let c = rows_case((rows, cols), (ds, dd), seed, 20.0);
        let src = RowsIn { data: c.src.0.s(), ld: c.src.1 };
        let total = if cols == 0 { 0 } else { rows };
        let mut got = c.dst.0.clone();
        softmax(c.shape, src, RowsOut { data: got.m(), ld: c.dst.1 }, 0..total).unwrap();
        let mut want = c.dst.0.clone();
        reference::softmax(c.shape, src, RowsOut { data: want.m(), ld: c.dst.1 }).unwrap();
        let tol: Vec<f64> = (0..want.len()).map(|i| (2f64.powi(-16) + 2.0 * u(dd)) * want.get(i).abs() + s(dd)).collect();
        if let Err(e) = check_close(&got, &want, &tol) {
            prop_assert!(false, "{:?} {:?}→{:?}: {}", c.shape, ds, dd, e);
        }
        let mut cut = c.dst.0.clone();
        for unit in random_cut(total, &mut Rng::new(seed ^ 1)) {
            softmax(c.shape, src, RowsOut { data: cut.m(), ld: c.dst.1 }, unit).unwrap();
        }
        prop_assert_eq!(got.bits(), cut.bits());
    }

    #[test]
    fn norm_matches_reference(rms in any::<bool>(), eps in 0..3usize, rows in 0usize..6, cols in 0usize..40, ds in 0..3usize, dd in 0..3usize, seed in any::<u64>()) {
        let kind = if rms { NormKind::RmsNorm } else { NormKind::LayerNorm };
        let (ds, dd) = (FLOATS[ds], FLOATS[dd]);
        let c = rows_case((rows, cols), (ds, dd), seed, 4.0);
        let p = params(&c, kind, EPS[eps]);
        let src = RowsIn { data: c.src.0.s(), ld: c.src.1 };
        let total = if cols == 0 { 0 } else { rows };
        let mut got = c.dst.0.clone();
        norm(c.shape, &p, src, RowsOut { data: got.m(), ld: c.dst.1 }, 0..total).unwrap();
        let mut want = c.dst.0.clone();
        reference::norm(c.shape, &p, src, RowsOut { data: want.m(), ld: c.dst.1 }).unwrap();
        // |x − mean|·rstd ≤ √cols; |gamma|, |beta| ≤ 2.
        let scale = 2.0 * (cols as f64).sqrt() + 2.0;
        let tol: Vec<f64> = (0..want.len()).map(|i| 2.0 * u(dd) * want.get(i).abs() + 2f64.powi(-40) * scale + s(dd)).collect();
        if let Err(e) = check_close(&got, &want, &tol) {
            prop_assert!(false, "{:?} eps {} {:?} {:?}→{:?}: {}", kind, EPS[eps], c.shape, ds, dd, e);
        }
        let mut cut = c.dst.0.clone();
        for unit in random_cut(total, &mut Rng::new(seed ^ 1)) {
            norm(c.shape, &p, src, RowsOut { data: cut.m(), ld: c.dst.1 }, unit).unwrap();
        }
        prop_assert_eq!(got.bits(), cut.bits());
    }
}

#[test]
fn reduce_refusals() {
    let shape = [1, 1, 2, 3];
    let src = Buf::F32(vec![1.0; 6]);
    let inp = Input {
        data: src.s(),
        strides: [0, 0, 3, 1],
    };
    let mut d = Buf::F32(vec![0.0; 3]);
    fn out(d: &mut Buf) -> Output<'_> {
        Output {
            data: d.m(),
            strides: [0, 0, 0, 1],
        }
    }
    let e = reduce(ReduceOp::Sum, &shape, 4, inp, out(&mut d), 0..0).unwrap_err();
    assert_eq!((e.operand, e.problem), (Operand::Shape, Problem::Axis(4)));
    let mut d16 = Buf::F16(vec![davinci_kernels::f16::ZERO; 3]);
    let e = reduce(ReduceOp::Sum, &shape, 2, inp, out(&mut d16), 0..3).unwrap_err();
    assert_eq!(
        (e.operand, e.problem),
        (Operand::C, Problem::Dtype(DType::F16))
    );
    let e = reduce(ReduceOp::Sum, &shape, 2, inp, out(&mut d), 0..4).unwrap_err();
    assert_eq!(e.operand, Operand::Unit);
    let e = reduce(ReduceOp::Sum, &shape, 3, inp, out(&mut d), 0..1).unwrap_err();
    assert_eq!((e.operand, e.problem), (Operand::C, Problem::Overlapping));
    // A 0-stride axis far longer than the slice: no scratch of that size, a result.
    let long = [1, 1, 1, 1 << 20];
    let one = Input {
        data: src.s(),
        strides: [0; 4],
    };
    reduce(ReduceOp::Sum, &long, 3, one, out(&mut d), 0..1).unwrap();
    assert_eq!(d.get(0), f64::from(1u32 << 20));
    // Empty axis: 0 and −∞.
    let empty = [1, 1, 1, 0];
    reduce(ReduceOp::Max, &empty, 3, inp, out(&mut d), 0..1).unwrap();
    assert_eq!(d.get(0), f64::NEG_INFINITY);
}

#[test]
fn rows_refusals() {
    let src = Buf::F32(vec![1.0; 6]);
    let mut d = Buf::F32(vec![0.0; 6]);
    let sin = RowsIn {
        data: src.s(),
        ld: 3,
    };
    let e = softmax((2, 3), sin, RowsOut { data: d.m(), ld: 2 }, 0..2).unwrap_err();
    assert_eq!(
        (e.operand, e.problem),
        (Operand::C, Problem::LeadingDim { ld: 2, min: 3 })
    );
    let ints = Buf::I32(vec![0; 6]);
    let e = softmax(
        (2, 3),
        RowsIn {
            data: ints.s(),
            ld: 3,
        },
        RowsOut { data: d.m(), ld: 3 },
        0..2,
    )
    .unwrap_err();
    assert_eq!(
        (e.operand, e.problem),
        (Operand::A, Problem::Dtype(DType::I32))
    );
    let e = softmax(
        (2, 3),
        RowsIn {
            data: src.s(),
            ld: 4,
        },
        RowsOut { data: d.m(), ld: 3 },
        0..2,
    )
    .unwrap_err();
    assert_eq!(
        (e.operand, e.problem),
        (Operand::A, Problem::TooShort { needed: 7, len: 6 })
    );
    let short = Buf::F32(vec![1.0; 2]);
    for (eps, gamma, beta, want) in [
        (-1.0, None, None, (Operand::Params, Problem::Invalid)),
        (f32::NAN, None, None, (Operand::Params, Problem::Invalid)),
        (
            0.0,
            Some(short.s()),
            None,
            (Operand::Gamma, Problem::TooShort { needed: 3, len: 2 }),
        ),
        (
            0.0,
            None,
            Some(ints.s()),
            (Operand::Beta, Problem::Dtype(DType::I32)),
        ),
    ] {
        let p = NormParams {
            kind: NormKind::LayerNorm,
            eps,
            gamma,
            beta,
        };
        let e = norm((2, 3), &p, sin, RowsOut { data: d.m(), ld: 3 }, 0..2).unwrap_err();
        assert_eq!((e.operand, e.problem), want);
    }
    let p = NormParams {
        kind: NormKind::RmsNorm,
        eps: 0.0,
        gamma: None,
        beta: None,
    };
    let e = norm(
        (usize::MAX, 3),
        &p,
        sin,
        RowsOut { data: d.m(), ld: 3 },
        0..2,
    )
    .unwrap_err();
    assert_eq!(e.problem, Problem::Overflow);
    assert!(
        d.bits().iter().all(|b| *b == 0),
        "nothing written on a refusal"
    );
}
