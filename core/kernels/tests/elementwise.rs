//! Elementwise ops against the reference (exact for arithmetic, max, min, relu, cast and every
//! integer op; the crate docs' bound for exp, gelu, silu), the units property, refusals.

mod common;

use common::{check_close, random_cut, s, u, Buf, Rng, ALL};
use davinci_kernels::elementwise::{elementwise, takes, units, ElementwiseOp, Input, Output};
use davinci_kernels::layout::{Shape, Strides};
use davinci_kernels::{reference, DType, Operand, Problem};
use proptest::prelude::*;

const OPS: [ElementwiseOp; 11] = [
    ElementwiseOp::Add,
    ElementwiseOp::Sub,
    ElementwiseOp::Mul,
    ElementwiseOp::Div,
    ElementwiseOp::Max,
    ElementwiseOp::Min,
    ElementwiseOp::Relu,
    ElementwiseOp::Gelu,
    ElementwiseOp::Silu,
    ElementwiseOp::Exp,
    ElementwiseOp::Cast,
];

fn transcendental(op: ElementwiseOp) -> bool {
    matches!(
        op,
        ElementwiseOp::Exp | ElementwiseOp::Gelu | ElementwiseOp::Silu
    )
}

/// Strides of an operand over `shape`: row-major with padding (or column-major), each input
/// dimension broadcast (stride 0) one time in four; with the slice length they need.
fn strides(shape: &Shape, rng: &mut Rng, input: bool) -> (Strides, usize) {
    let mut st = [0; 4];
    let mut extent = 1;
    let order: [usize; 4] = if rng.below(4) == 0 {
        [0, 1, 2, 3]
    } else {
        [3, 2, 1, 0]
    };
    for d in order {
        if input && rng.below(4) == 0 {
            continue;
        }
        st[d] = extent + rng.below(2) * extent / 2;
        extent = st[d] * shape[d].max(1) + rng.below(3);
    }
    let len = if shape.contains(&0) {
        rng.below(3)
    } else {
        1 + (0..4).map(|d| (shape[d] - 1) * st[d]).sum::<usize>() + rng.below(3)
    };
    (st, len)
}

#[derive(Debug)]
struct Case {
    op: ElementwiseOp,
    shape: Shape,
    dst: (Buf, Strides),
    a: (Buf, Strides),
    b: Option<(Buf, Strides)>,
}

fn case(op: ElementwiseOp, shape: Shape, (da, dd): (DType, DType), seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let dd = if op == ElementwiseOp::Cast { dd } else { da };
    let (mag, specials) = if transcendental(op) {
        (20.0, false)
    } else {
        (100.0, true)
    };
    let mut operand = |d: DType, input: bool| {
        let (st, len) = strides(&shape, &mut rng, input);
        (Buf::random(d, len, &mut rng, mag, specials), st)
    };
    let a = operand(da, true);
    let b = op.is_binary().then(|| operand(da, true));
    let dst = operand(dd, false);
    Case {
        op,
        shape,
        dst,
        a,
        b,
    }
}

fn run(cs: &Case, dst: &mut Buf, unit: std::ops::Range<usize>) -> davinci_kernels::Result {
    let a = Input {
        data: cs.a.0.s(),
        strides: cs.a.1,
    };
    let b = cs.b.as_ref().map(|b| Input {
        data: b.0.s(),
        strides: b.1,
    });
    let out = Output {
        data: dst.m(),
        strides: cs.dst.1,
    };
    elementwise(cs.op, &cs.shape, out, a, b, unit)
}

fn shape() -> impl Strategy<Value = Shape> {
    [0usize..4, 0usize..4, 0usize..5, 0usize..7].prop_map(|s| s)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn matches_reference(op in 0..OPS.len(), shape in shape(), da in 0..5usize, dd in 0..5usize, seed in any::<u64>()) {
        let (op, da, dd) = (OPS[op], ALL[da], ALL[dd]);
        let cs = case(op, shape, (da, dd), seed);
        let mut got = cs.dst.0.clone();
        let total = units(&shape).unwrap();
        if !takes(op, da) {
            let e = run(&cs, &mut got, 0..total).unwrap_err();
            prop_assert_eq!(e.problem, Problem::Dtype(da));
            return Ok(());
        }
        run(&cs, &mut got, 0..total).unwrap();
        let mut want = cs.dst.0.clone();
        let a = Input { data: cs.a.0.s(), strides: cs.a.1 };
        let b = cs.b.as_ref().map(|b| Input { data: b.0.s(), strides: b.1 });
        reference::elementwise(op, &shape, Output { data: want.m(), strides: cs.dst.1 }, a, b).unwrap();
        let d = want.s().dtype();
        let tol: Vec<f64> = (0..want.len()).map(|i| {
            if transcendental(op) {
                let half = if d == DType::F32 { 0.0 } else { 2.0 * u(d) };
                (2f64.powi(-14) + half) * want.get(i).abs() + 32.0 * s(d)
            } else {
                0.0
            }
        }).collect();
        if let Err(e) = check_close(&got, &want, &tol) {
            prop_assert!(false, "{:?} {:?}→{:?} {:?}: {}", op, da, d, shape, e);
        }
    }

    #[test]
    fn any_cut_equals_one_call(op in 0..OPS.len(), shape in shape(), da in 0..3usize, dd in 0..5usize, seed in any::<u64>()) {
        let cs = case(OPS[op], shape, (ALL[da], ALL[dd]), seed);
        let total = units(&shape).unwrap();
        let mut whole = cs.dst.0.clone();
        run(&cs, &mut whole, 0..total).unwrap();
        let mut cut = cs.dst.0.clone();
        for unit in random_cut(total, &mut Rng::new(seed ^ 1)) {
            run(&cs, &mut cut, unit).unwrap();
        }
        prop_assert_eq!(whole.bits(), cut.bits());
    }
}

fn f32s(n: usize) -> Buf {
    Buf::F32((0..n).map(|i| i as f32).collect())
}

#[test]
fn refusals() {
    let shape = [1, 1, 2, 3];
    let row = [0, 0, 3, 1];
    let (a, b) = (f32s(6), f32s(6));
    let mut d = f32s(6);
    fn inp(x: &Buf) -> Input<'_> {
        Input {
            data: x.s(),
            strides: [0, 0, 3, 1],
        }
    }
    let add = ElementwiseOp::Add;
    let go = |d: &mut Buf, op, a: Input<'_>, b: Option<Input<'_>>, st: Strides, unit| {
        elementwise(
            op,
            &shape,
            Output {
                data: d.m(),
                strides: st,
            },
            a,
            b,
            unit,
        )
        .unwrap_err()
    };
    let e = go(&mut d, add, inp(&a), None, row, 0..2);
    assert_eq!((e.operand, e.problem), (Operand::B, Problem::Arity));
    let e = go(
        &mut d,
        ElementwiseOp::Relu,
        inp(&a),
        Some(inp(&b)),
        row,
        0..2,
    );
    assert_eq!((e.operand, e.problem), (Operand::B, Problem::Arity));
    let i8s = Buf::I8(vec![0; 6]);
    let e = go(&mut d, add, inp(&a), Some(inp(&i8s)), row, 0..2);
    assert_eq!(
        (e.operand, e.problem),
        (Operand::B, Problem::Dtype(DType::I8))
    );
    let mut d8 = Buf::I8(vec![0; 6]);
    let e = go(&mut d8, ElementwiseOp::Exp, inp(&i8s), None, row, 0..2);
    assert_eq!(
        (e.operand, e.problem),
        (Operand::A, Problem::Dtype(DType::I8))
    );
    // A broadcast output: two elements in one place.
    let e = go(&mut d, add, inp(&a), Some(inp(&b)), [0, 0, 0, 1], 0..2);
    assert_eq!((e.operand, e.problem), (Operand::C, Problem::Overlapping));
    let e = go(&mut d, add, inp(&a), Some(inp(&b)), [0, 0, 4, 1], 0..2);
    assert_eq!(
        (e.operand, e.problem),
        (Operand::C, Problem::TooShort { needed: 7, len: 6 })
    );
    let short = f32s(5);
    let e = go(&mut d, add, inp(&short), Some(inp(&b)), row, 0..2);
    assert_eq!(
        (e.operand, e.problem),
        (Operand::A, Problem::TooShort { needed: 6, len: 5 })
    );
    let e = go(&mut d, add, inp(&a), Some(inp(&b)), row, 1..3);
    assert_eq!(
        (e.operand, e.problem),
        (
            Operand::Unit,
            Problem::Unit {
                unit: 1..3,
                total: 2
            }
        )
    );
    assert_eq!(d.bits(), f32s(6).bits(), "nothing written on a refusal");
    // Shapes whose element count overflows.
    let huge = [usize::MAX, 2, 1, 1];
    let e = elementwise(
        add,
        &huge,
        Output {
            data: d.m(),
            strides: row,
        },
        inp(&a),
        Some(inp(&b)),
        0..0,
    )
    .unwrap_err();
    assert_eq!((e.operand, e.problem), (Operand::Shape, Problem::Overflow));
    let big = [1, 1, 1, usize::MAX];
    let e = elementwise(
        add,
        &big,
        Output {
            data: d.m(),
            strides: row,
        },
        inp(&a),
        Some(inp(&b)),
        0..0,
    )
    .unwrap_err();
    assert_eq!(e.operand, Operand::A);
}

#[test]
fn integer_edges() {
    let a = Buf::I32(vec![i32::MIN, 7, -7, i32::MAX]);
    let b = Buf::I32(vec![-1, 0, 2, 1]);
    let st = [0, 0, 0, 1];
    let shape = [1, 1, 1, 4];
    let mut d = Buf::I32(vec![0; 4]);
    let div = ElementwiseOp::Div;
    let (ia, ib) = (
        Input {
            data: a.s(),
            strides: st,
        },
        Input {
            data: b.s(),
            strides: st,
        },
    );
    elementwise(
        div,
        &shape,
        Output {
            data: d.m(),
            strides: st,
        },
        ia,
        Some(ib),
        0..1,
    )
    .unwrap();
    assert_eq!(d.bits(), Buf::I32(vec![i32::MIN, 0, -3, i32::MAX]).bits());
    let add = ElementwiseOp::Add;
    elementwise(
        add,
        &shape,
        Output {
            data: d.m(),
            strides: st,
        },
        ia,
        Some(ib),
        0..1,
    )
    .unwrap();
    assert_eq!(d.bits(), Buf::I32(vec![i32::MAX, 7, -5, i32::MIN]).bits());
    // Float → int truncates and saturates, NaN to 0; int → int wraps.
    let f = Buf::F32(vec![-1.7, 300.0, f32::NAN, 2.5]);
    let mut d8 = Buf::I8(vec![0; 4]);
    let cast = ElementwiseOp::Cast;
    let fi = Input {
        data: f.s(),
        strides: st,
    };
    elementwise(
        cast,
        &shape,
        Output {
            data: d8.m(),
            strides: st,
        },
        fi,
        None,
        0..1,
    )
    .unwrap();
    assert_eq!(d8.bits(), Buf::I8(vec![-1, 127, 0, 2]).bits());
    elementwise(
        cast,
        &shape,
        Output {
            data: d8.m(),
            strides: st,
        },
        ia,
        None,
        0..1,
    )
    .unwrap();
    assert_eq!(d8.bits(), Buf::I8(vec![0, 7, -7, -1]).bits());
}
