//! GEMM against the reference (exact for int8, the crate docs' bound for floats), the units
//! property (any cut equals one call, bit for bit), and refusals.

mod common;

use common::{check_close, random_cut, s, u, Buf, Rng};
use davinci_kernels::gemm::{gemm, GemmInput, GemmOutput, GemmParams, ROW_BLOCK};
use davinci_kernels::{reference, DType, Operand, Problem};
use proptest::prelude::*;

/// (A, B, C) dtypes the tests draw from.
const COMBOS: [(DType, DType, DType); 8] = [
    (DType::F32, DType::F32, DType::F32),
    (DType::F16, DType::F16, DType::F32),
    (DType::F16, DType::F16, DType::F16),
    (DType::Bf16, DType::Bf16, DType::Bf16),
    (DType::Bf16, DType::F32, DType::F32),
    (DType::F32, DType::F32, DType::Bf16),
    (DType::F32, DType::F16, DType::F16),
    (DType::I8, DType::I8, DType::I32),
];

#[derive(Debug, Clone)]
struct Case {
    p: GemmParams,
    a: Buf,
    b: Buf,
    c: Buf,
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    ta: bool,
    tb: bool,
    pads: (usize, usize, usize),
    bpad: usize,
    bcast_a: bool,
    combo: usize,
    alpha: i32,
    beta: i32,
}

fn input(
    rows: usize,
    cols: usize,
    trans: bool,
    pad: usize,
    batch_pad: Option<usize>,
) -> (GemmInput, usize) {
    // Stored `rows × cols`, or `cols × rows` transposed.
    let (sr, sc) = if trans { (cols, rows) } else { (rows, cols) };
    let ld = sc + pad;
    let batch_stride = batch_pad.map_or(0, |p| sr * ld + p);
    (
        GemmInput {
            ld,
            batch_stride,
            trans,
        },
        sr * ld,
    )
}

fn case(sh: Shape, seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let (da, db, dc) = COMBOS[sh.combo % COMBOS.len()];
    let (a, a_one) = input(
        sh.m,
        sh.k,
        sh.ta,
        sh.pads.0,
        (!sh.bcast_a).then_some(sh.bpad),
    );
    let (b, b_one) = input(sh.k, sh.n, sh.tb, sh.pads.1, Some(sh.bpad + 1));
    let ld = sh.n + sh.pads.2;
    let c = GemmOutput {
        ld,
        batch_stride: sh.m * ld + sh.bpad,
    };
    let int = da == DType::I8;
    let (alpha, beta) = if int {
        (0.0, 0.0)
    } else {
        (sh.alpha as f32 / 4.0, sh.beta as f32 / 4.0)
    };
    let p = GemmParams {
        m: sh.m,
        n: sh.n,
        k: sh.k,
        batch: sh.batch,
        a,
        b,
        c,
        alpha,
        beta,
    };
    let len = |one: usize, stride: usize| {
        if sh.batch == 0 {
            0
        } else {
            one + (sh.batch - 1) * stride + 2
        }
    };
    Case {
        a: Buf::random(da, len(a_one, a.batch_stride), &mut rng, 2.0, false),
        b: Buf::random(db, len(b_one, b.batch_stride), &mut rng, 2.0, false),
        c: Buf::random(dc, len(sh.m * ld, c.batch_stride), &mut rng, 2.0, false),
        p,
    }
}

/// Per element of C: the crate docs' bound (0 outside the output and for int8).
fn tolerance(cs: &Case) -> Vec<f64> {
    let p = &cs.p;
    let dc = cs.c.s().dtype();
    let mut tol = vec![0.0; cs.c.len()];
    if dc == DType::I32 {
        return tol;
    }
    let (ars, acs) = if p.a.trans { (1, p.a.ld) } else { (p.a.ld, 1) };
    let (brs, bcs) = if p.b.trans { (1, p.b.ld) } else { (p.b.ld, 1) };
    for bi in 0..p.batch {
        for i in 0..p.m {
            for j in 0..p.n {
                let mag: f64 = (0..p.k)
                    .map(|q| {
                        let x = cs.a.get(bi * p.a.batch_stride + i * ars + q * acs);
                        let y = cs.b.get(bi * p.b.batch_stride + q * brs + j * bcs);
                        (x * y).abs()
                    })
                    .sum();
                let ci = bi * p.c.batch_stride + i * p.c.ld + j;
                let c0 = if p.beta == 0.0 {
                    0.0
                } else {
                    (f64::from(p.beta) * cs.c.get(ci)).abs()
                };
                let f32_part =
                    (p.k as f64 + 2.0) * 2f64.powi(-24) * (f64::from(p.alpha).abs() * mag + c0);
                // `2u·|r|` with |r| at most the magnitude the sum can reach.
                let r = f64::from(p.alpha).abs() * mag + c0;
                tol[ci] = f32_part + 2.0 * u(dc) * r + s(dc);
            }
        }
    }
    tol
}

fn shape_strategy(
    (max_m, max_n): (usize, usize),
    ks: impl Strategy<Value = usize>,
) -> impl Strategy<Value = Shape> {
    (
        (0..=max_m, 0..=max_n, ks, 0usize..4),
        (
            any::<bool>(),
            any::<bool>(),
            (0usize..3, 0usize..3, 0usize..3),
            0usize..4,
        ),
        (any::<bool>(), 0..COMBOS.len(), -8i32..9, -8i32..9),
    )
        .prop_map(
            |((m, n, k, batch), (ta, tb, pads, bpad), (bcast_a, combo, alpha, beta))| Shape {
                m,
                n,
                k,
                batch,
                ta,
                tb,
                pads,
                bpad,
                bcast_a,
                combo,
                alpha,
                beta,
            },
        )
}

fn ks() -> impl Strategy<Value = usize> {
    // Past matrixmultiply's k blocking (256 for f32) now and then.
    prop_oneof![4 => 0usize..20, 1 => 250usize..300]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn matches_reference(sh in shape_strategy((9, 9), ks()), seed in any::<u64>()) {
        let cs = case(sh, seed);
        let units = cs.p.units().unwrap();
        let mut got = cs.c.clone();
        gemm(&cs.p, cs.a.s(), cs.b.s(), got.m(), 0..units).unwrap();
        let mut want = cs.c.clone();
        reference::gemm(&cs.p, cs.a.s(), cs.b.s(), want.m()).unwrap();
        if let Err(e) = check_close(&got, &want, &tolerance(&cs)) {
            prop_assert!(false, "{e} in {:?}", cs.p);
        }
    }

    #[test]
    fn any_cut_equals_one_call(sh in shape_strategy((2 * ROW_BLOCK + 9, 20), prop_oneof![0usize..12, 255usize..270]), seed in any::<u64>()) {
        let cs = case(sh, seed);
        let units = cs.p.units().unwrap();
        let mut whole = cs.c.clone();
        gemm(&cs.p, cs.a.s(), cs.b.s(), whole.m(), 0..units).unwrap();
        let mut cut = cs.c.clone();
        for unit in random_cut(units, &mut Rng::new(seed ^ 1)) {
            gemm(&cs.p, cs.a.s(), cs.b.s(), cut.m(), unit).unwrap();
        }
        prop_assert_eq!(whole.bits(), cut.bits());
    }
}

fn small() -> Case {
    let sh = Shape {
        m: 3,
        n: 4,
        k: 5,
        batch: 2,
        ta: false,
        tb: true,
        pads: (1, 0, 2),
        bpad: 1,
        bcast_a: false,
        combo: 0,
        alpha: 4,
        beta: 2,
    };
    case(sh, 7)
}

#[test]
fn short_operands_are_named() {
    let cs = small();
    let short = |b: &Buf| Buf::F32(vec![0.0; b.len() / 2]);
    let mut c = cs.c.clone();
    let e = gemm(&cs.p, short(&cs.a).s(), cs.b.s(), c.m(), 0..1).unwrap_err();
    assert_eq!(e.operand, Operand::A);
    assert!(matches!(e.problem, Problem::TooShort { .. }), "{e}");
    let e = gemm(&cs.p, cs.a.s(), short(&cs.b).s(), c.m(), 0..1).unwrap_err();
    assert_eq!(e.operand, Operand::B);
    let mut sc = short(&cs.c);
    let e = gemm(&cs.p, cs.a.s(), cs.b.s(), sc.m(), 0..1).unwrap_err();
    assert_eq!(e.operand, Operand::C);
    assert_eq!(
        sc.bits(),
        short(&cs.c).bits(),
        "nothing written on a refusal"
    );
}

#[test]
fn refusals() {
    let cs = small();
    let mut c = cs.c.clone();
    let units = cs.p.units().unwrap();
    let e = gemm(&cs.p, cs.a.s(), cs.b.s(), c.m(), 2..units + 1).unwrap_err();
    assert_eq!(
        (e.operand, e.problem),
        (
            Operand::Unit,
            Problem::Unit {
                unit: 2..units + 1,
                total: units
            }
        )
    );
    #[allow(clippy::reversed_empty_ranges)]
    let e = gemm(&cs.p, cs.a.s(), cs.b.s(), c.m(), 3..2).unwrap_err();
    assert_eq!(e.operand, Operand::Unit);
    // C's rows overlapping.
    let p = GemmParams {
        c: GemmOutput { ld: 2, ..cs.p.c },
        ..cs.p
    };
    let e = gemm(&p, cs.a.s(), cs.b.s(), c.m(), 0..1).unwrap_err();
    assert_eq!(
        (e.operand, e.problem),
        (Operand::C, Problem::LeadingDim { ld: 2, min: 4 })
    );
    // C's batches overlapping.
    let p = GemmParams {
        c: GemmOutput {
            batch_stride: 1,
            ..cs.p.c
        },
        ..cs.p
    };
    let e = gemm(&p, cs.a.s(), cs.b.s(), c.m(), 0..1).unwrap_err();
    assert_eq!((e.operand, e.problem), (Operand::C, Problem::Overlapping));
    // Mixed integer and float.
    let a8 = Buf::I8(vec![0; cs.a.len()]);
    let e = gemm(&cs.p, a8.s(), cs.b.s(), c.m(), 0..1).unwrap_err();
    assert_eq!(
        (e.operand, e.problem),
        (Operand::B, Problem::Dtype(DType::F32))
    );
    let b8 = Buf::I8(vec![0; cs.b.len()]);
    let e = gemm(&cs.p, a8.s(), b8.s(), c.m(), 0..1).unwrap_err();
    assert_eq!(
        (e.operand, e.problem),
        (Operand::C, Problem::Dtype(DType::F32))
    );
    let mut c32 = Buf::I32(vec![0; cs.c.len()]);
    let e = gemm(&cs.p, a8.s(), b8.s(), c32.m(), 0..1).unwrap_err();
    assert_eq!((e.operand, e.problem), (Operand::Params, Problem::NotZero));
    let i32s = Buf::I32(vec![0; cs.a.len()]);
    let e = gemm(&cs.p, i32s.s(), cs.b.s(), c.m(), 0..1).unwrap_err();
    assert_eq!(
        (e.operand, e.problem),
        (Operand::A, Problem::Dtype(DType::I32))
    );
}

#[test]
fn huge_sizes_are_errors_not_panics() {
    let cs = small();
    let mut c = cs.c.clone();
    for (m, n, k, batch) in [
        (usize::MAX, 2, 2, 2),
        (2, usize::MAX, 1, 1),
        (1, 1, usize::MAX, 1),
        (usize::MAX, usize::MAX, usize::MAX, usize::MAX),
    ] {
        let p = GemmParams {
            m,
            n,
            k,
            batch,
            ..cs.p
        };
        let e = gemm(&p, cs.a.s(), cs.b.s(), c.m(), 0..1).unwrap_err();
        assert!(
            matches!(e.problem, Problem::Overflow | Problem::TooShort { .. }),
            "{e}"
        );
    }
    // A broadcast f16 A with an absurd k: its f32 copy cannot be allocated.
    let a = Buf::F16(vec![davinci_kernels::f16::ONE]);
    let b = Buf::F32(vec![1.0]);
    let zero = GemmInput {
        ld: 0,
        batch_stride: 0,
        trans: false,
    };
    let p = GemmParams {
        m: 1,
        n: 1,
        k: usize::MAX / 2,
        batch: 1,
        // A transposed with ld 0: its column stride (along k) is 0; B's row stride is its ld.
        a: GemmInput {
            trans: true,
            ..zero
        },
        b: zero,
        ..cs.p
    };
    let e = gemm(&p, a.s(), b.s(), c.m(), 0..1).unwrap_err();
    assert_eq!((e.operand, e.problem), (Operand::A, Problem::TooLarge));
}

#[test]
fn int8_with_no_columns_writes_nothing() {
    // Rows of C past its (empty) slice: nothing to write, nothing indexed.
    let p = GemmParams {
        m: 2,
        n: 0,
        k: 1,
        batch: 1,
        a: GemmInput {
            ld: 1,
            batch_stride: 0,
            trans: false,
        },
        b: GemmInput {
            ld: 0,
            batch_stride: 0,
            trans: false,
        },
        c: GemmOutput {
            ld: 5,
            batch_stride: 0,
        },
        alpha: 0.0,
        beta: 0.0,
    };
    let (a, b) = (Buf::I8(vec![1, 2]), Buf::I8(vec![]));
    let mut c = Buf::I32(vec![]);
    gemm(&p, a.s(), b.s(), c.m(), 0..2).unwrap();
    reference::gemm(&p, a.s(), b.s(), c.m()).unwrap();
}

#[test]
fn beta_zero_does_not_read_c() {
    let cs = small();
    let p = GemmParams { beta: 0.0, ..cs.p };
    let mut c = Buf::F32(vec![f32::NAN; cs.c.len()]);
    gemm(&p, cs.a.s(), cs.b.s(), c.m(), 0..p.units().unwrap()).unwrap();
    assert!((0..p.n).all(|j| !c.get(j).is_nan()));
}

#[test]
fn int8_wraps_exactly() {
    // 127·127·k overflows i32 at k = 133_144: both wrap alike.
    let k = 140_000;
    let a = Buf::I8(vec![127; k]);
    let b = Buf::I8(vec![127; k]);
    let p = GemmParams {
        m: 1,
        n: 1,
        k,
        batch: 1,
        a: GemmInput {
            ld: k,
            batch_stride: 0,
            trans: false,
        },
        b: GemmInput {
            ld: 1,
            batch_stride: 0,
            trans: false,
        },
        c: GemmOutput {
            ld: 1,
            batch_stride: 0,
        },
        alpha: 0.0,
        beta: 0.0,
    };
    let mut got = Buf::I32(vec![0]);
    gemm(&p, a.s(), b.s(), got.m(), 0..1).unwrap();
    assert_eq!(got.get(0), f64::from((127i64 * 127 * k as i64) as i32));
    let mut want = Buf::I32(vec![0]);
    reference::gemm(&p, a.s(), b.s(), want.m()).unwrap();
    assert_eq!(got.bits(), want.bits());
}
