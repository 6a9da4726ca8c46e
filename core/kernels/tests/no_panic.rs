//! Arbitrary parameters (sizes and strides from 0 to `usize::MAX`, short slices, any dtype,
//! any unit) never panic: every kernel answers `Ok` or an `Error`. A launch that validates is
//! run only when its work is small (a 0 stride lets a tiny slice stand for a huge operand).

mod common;

use common::{Buf, Rng, ALL};
use davinci_kernels::elementwise::{self, ElementwiseOp, Input, Output};
use davinci_kernels::gemm::{self, GemmInput, GemmOutput, GemmParams};
use davinci_kernels::reduce::{self, ReduceOp};
use davinci_kernels::rows::{self, NormKind, NormParams, RowsIn, RowsOut};
use proptest::prelude::*;

const SIZES: [usize; 10] = [
    0,
    1,
    2,
    3,
    5,
    8,
    1 << 20,
    usize::MAX / 3,
    usize::MAX - 1,
    usize::MAX,
];

fn size() -> impl Strategy<Value = usize> {
    (0..SIZES.len()).prop_map(|i| SIZES[i])
}

fn buf(d: usize, len: usize, seed: u64) -> Buf {
    Buf::random(ALL[d % ALL.len()], len, &mut Rng::new(seed), 4.0, true)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn gemm_never_panics(dims in [size(), size(), size(), size()], lds in [size(), size(), size()], bss in [size(), size(), size()], t in any::<(bool, bool)>(), d in [0..5usize, 0..5usize, 0..5usize], lens in [0..40usize, 0..40usize, 0..40usize], unit in (size(), size()), seed in any::<u64>()) {
        let p = GemmParams {
            m: dims[0], n: dims[1], k: dims[2], batch: dims[3],
            a: GemmInput { ld: lds[0], batch_stride: bss[0], trans: t.0 },
            b: GemmInput { ld: lds[1], batch_stride: bss[1], trans: t.1 },
            c: GemmOutput { ld: lds[2], batch_stride: bss[2] },
            alpha: if t.0 { 0.0 } else { 1.0 }, beta: 0.0,
        };
        let (a, b, mut c) = (buf(d[0], lens[0], seed), buf(d[1], lens[1], seed ^ 1), buf(d[2], lens[2], seed ^ 2));
        let valid = gemm::validate(&p, &a.s(), &b.s(), &c.m()).is_ok();
        if !valid || p.k.saturating_mul(p.n) < 1 << 16 {
            let _ = gemm::gemm(&p, a.s(), b.s(), c.m(), unit.0..unit.1);
        }
    }

    #[test]
    fn elementwise_never_panics(op in 0..11usize, shape in [size(), size(), size(), size()], st in [[size(), size(), size(), size()], [size(), size(), size(), size()], [size(), size(), size(), size()]], d in [0..5usize, 0..5usize, 0..5usize], lens in [0..40usize, 0..40usize, 0..40usize], binary in any::<bool>(), unit in (size(), size()), seed in any::<u64>()) {
        use ElementwiseOp::*;
        let op = [Add, Sub, Mul, Div, Max, Min, Relu, Gelu, Silu, Exp, Cast][op];
        let (a, b, mut dst) = (buf(d[0], lens[0], seed), buf(d[1], lens[1], seed ^ 1), buf(d[2], lens[2], seed ^ 2));
        let ia = Input { data: a.s(), strides: st[0] };
        let ib = binary.then_some(Input { data: b.s(), strides: st[1] });
        let _ = elementwise::elementwise(op, &shape, Output { data: dst.m(), strides: st[2] }, ia, ib, unit.0..unit.1);
    }

    #[test]
    fn reduce_never_panics(max in any::<bool>(), shape in [size(), size(), size(), size()], axis in 0..6usize, st in [[size(), size(), size(), size()], [size(), size(), size(), size()]], d in [0..5usize, 0..5usize], lens in [0..40usize, 0..40usize], unit in (size(), size()), seed in any::<u64>()) {
        let op = if max { ReduceOp::Max } else { ReduceOp::Sum };
        let (src, mut dst) = (buf(d[0], lens[0], seed), buf(d[1], lens[1], seed ^ 1));
        let i = Input { data: src.s(), strides: st[0] };
        let valid = reduce::validate(op, &shape, axis, &i, &Output { data: dst.m(), strides: st[1] }).is_ok();
        if !valid || shape[axis.min(3)] < 1 << 16 {
            let _ = reduce::reduce(op, &shape, axis, i, Output { data: dst.m(), strides: st[1] }, unit.0..unit.1);
        }
    }

    #[test]
    fn rows_never_panic(shape in (size(), size()), lds in (size(), size()), d in [0..5usize, 0..5usize, 0..5usize], lens in [0..40usize, 0..40usize, 0..40usize], eps in prop_oneof![Just(0.0f32), Just(-1.0), Just(f32::NAN), Just(1e-5)], unit in (size(), size()), seed in any::<u64>()) {
        let (src, mut dst, g) = (buf(d[0], lens[0], seed), buf(d[1], lens[1], seed ^ 1), buf(d[2], lens[2], seed ^ 2));
        let sin = RowsIn { data: src.s(), ld: lds.0 };
        let _ = rows::softmax(shape, sin, RowsOut { data: dst.m(), ld: lds.1 }, unit.0..unit.1);
        let p = NormParams { kind: NormKind::LayerNorm, eps, gamma: Some(g.s()), beta: Some(g.s()) };
        let _ = rows::norm(shape, &p, sin, RowsOut { data: dst.m(), ld: lds.1 }, unit.0..unit.1);
    }
}
