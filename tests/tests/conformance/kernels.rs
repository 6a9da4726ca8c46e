//! Device compute (issue 43, ABI 1.5) on every backend: LIST_KERNELS agrees with the feature
//! bit; where the device runs kernels, GEMM of every dtype combination (batched, transposed,
//! padded), elementwise ops with broadcasting and casts, reductions, softmax and norms agree
//! with `davinci-kernels`' f64 reference within docs/abi.md 6.1's bounds, and a bad block is
//! refused naming its operand; where it does not (the kernel module's software device), a
//! launch is refused as before. Byte FILLs and ADD of the new dtypes run everywhere.

use davinci_tests::descs::SubmitDescs;
use half::{bf16, f16};

use davinci_shim::{
    Completion, Device, DeviceBuffer, DeviceMem, Dtype, Errno, FaultKind, FaultOperand, Features,
    KernelId, Stream, TaskDesc,
};
use davinci_uapi::kernels::*;
use davinci_uapi::Wire;

use super::{dev, poll_all, T};

/// One device for every test of this file (each on its own context and streams): the mockd
/// backend hands each test process at most 64 fresh devices, and the suite uses nearly all.
fn kdev() -> Device {
    static DEV: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEV.get_or_init(dev).clone()
}

fn runs_kernels(dev: &Device) -> bool {
    dev.features().contains(Features::KERNELS)
}

/// Writes `block` into a fresh buffer, launches it on `s` and returns its completion (the
/// stream synchronized, or failed).
fn launch<B: Wire>(dev: &Device, s: &mut Stream, k: KernelId, block: &B) -> Completion {
    let p = dev.alloc(4096).unwrap();
    let mut raw = vec![0u8; B::SIZE];
    block.encode(&mut raw);
    p.write(0, &raw).unwrap();
    s.submit_desc(&TaskDesc::kernel_launch(
        42,
        k as u32,
        1,
        p.dev_addr(),
        B::SIZE as u64,
    ))
    .unwrap();
    let _ = s.synchronize(T);
    let done = poll_all(s);
    assert_eq!(done.len(), 1, "{done:?}");
    done[0]
}

/// Random values of `dt`, as bytes, and as f64 (exactly what the device holds).
fn random(dt: Dtype, n: usize, seed: u64) -> (Vec<u8>, Vec<f64>) {
    let mut rng = davinci_tests::model::Rng::new(seed);
    let mut bytes = Vec::new();
    let mut vals = Vec::new();
    for _ in 0..n {
        let x = (rng.next_u64() % 2001) as f64 / 500.0 - 2.0; // [-2, 2]
        match dt {
            Dtype::F32 => {
                bytes.extend((x as f32).to_ne_bytes());
                vals.push(x as f32 as f64);
            }
            Dtype::F16 => {
                let h = f16::from_f64(x);
                bytes.extend(h.to_bits().to_ne_bytes());
                vals.push(h.to_f64());
            }
            Dtype::Bf16 => {
                let h = bf16::from_f64(x);
                bytes.extend(h.to_bits().to_ne_bytes());
                vals.push(h.to_f64());
            }
            Dtype::I8 => {
                let v = (rng.next_u64() % 256) as u8;
                bytes.push(v);
                vals.push(v as i8 as f64);
            }
            _ => {
                let v = (rng.next_u64() % 2001) as i32 - 1000;
                bytes.extend(v.to_ne_bytes());
                vals.push(v as f64);
            }
        }
    }
    (bytes, vals)
}

/// The values of `dt` in `b`.
fn values(dt: Dtype, b: &[u8]) -> Vec<f64> {
    match dt {
        Dtype::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_ne_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        Dtype::F16 => b
            .chunks_exact(2)
            .map(|c| f16::from_bits(u16::from_ne_bytes([c[0], c[1]])).to_f64())
            .collect(),
        Dtype::Bf16 => b
            .chunks_exact(2)
            .map(|c| bf16::from_bits(u16::from_ne_bytes([c[0], c[1]])).to_f64())
            .collect(),
        Dtype::I8 => b.iter().map(|v| *v as i8 as f64).collect(),
        _ => b
            .chunks_exact(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()) as f64)
            .collect(),
    }
}

/// (unit roundoff, smallest subnormal) of a float dtype; exact for integers.
fn ulp(dt: Dtype) -> (f64, f64) {
    match dt {
        Dtype::F32 => (2f64.powi(-24), 2f64.powi(-149)),
        Dtype::F16 => (2f64.powi(-11), 2f64.powi(-24)),
        Dtype::Bf16 => (2f64.powi(-8), 2f64.powi(-133)),
        _ => (0.0, 0.0),
    }
}

fn buffer(dev: &Device, bytes: &[u8]) -> DeviceBuffer {
    let b = dev.alloc(bytes.len().max(64)).unwrap();
    b.write(0, bytes).unwrap();
    b
}

#[test]
fn list_kernels_agrees_with_the_feature_bit() {
    let dev = kdev();
    let list = dev.kernels().unwrap();
    if !runs_kernels(&dev) {
        assert!(list.is_empty());
        let mut s = dev.create_context().unwrap().create_stream().unwrap();
        let c = launch(&dev, &mut s, KernelId::Gemm, &GemmParams::default());
        assert_eq!(c.errno(), Some(Errno::EBADMSG));
        let f = c.fault().unwrap();
        assert_eq!(
            (f.operand, f.kind),
            (FaultOperand::Handle, FaultKind::Unknown)
        );
        return;
    }
    let got: Vec<(u32, String, u32)> = list
        .iter()
        .map(|k| (k.id, k.name_str().unwrap().to_owned(), k.params_size))
        .collect();
    let want: Vec<(u32, String, u32)> = KernelId::ALL
        .iter()
        .map(|k| (*k as u32, k.name().to_owned(), k.params_size() as u32))
        .collect();
    assert_eq!(got, want);
    assert!(
        dev.info().opcodes & (1 << 6) != 0,
        "KERNEL_LAUNCH in the opcode mask"
    );
}

#[test]
fn gemm_of_every_dtype_combination_matches_the_reference() {
    let dev = kdev();
    if !runs_kernels(&dev) {
        return;
    }
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    let (m, n, k, batch) = (37u64, 29u64, 53u64, 2u64);
    let combos = [
        (Dtype::F32, Dtype::F32, Dtype::F32, 0u8),
        (Dtype::F16, Dtype::F16, Dtype::F32, GEMM_TRANS_A),
        (Dtype::Bf16, Dtype::Bf16, Dtype::Bf16, GEMM_TRANS_B),
        (
            Dtype::F16,
            Dtype::Bf16,
            Dtype::F16,
            GEMM_TRANS_A | GEMM_TRANS_B,
        ),
        (Dtype::I8, Dtype::I8, Dtype::I32, 0),
    ];
    for (i, (da, db, dc, flags)) in combos.into_iter().enumerate() {
        let int = da == Dtype::I8;
        let (lda, ldb, ldc) = (
            if flags & GEMM_TRANS_A != 0 { m } else { k },
            if flags & GEMM_TRANS_B != 0 { k } else { n },
            n + 3,
        );
        let (sa, sb, sc) = (m * k, k * n, m * ldc);
        let (ab, av) = random(da, (batch * sa) as usize, 10 + i as u64);
        let (bb, bv) = random(db, (batch * sb) as usize, 20 + i as u64);
        let (cb, cv) = random(dc, (batch * sc) as usize, 30 + i as u64);
        let (a, b, c) = (buffer(&dev, &ab), buffer(&dev, &bb), buffer(&dev, &cb));
        let (alpha, beta) = if int { (0.0f32, 0.0f32) } else { (0.75, 0.5) };
        let p = GemmParams {
            m,
            n,
            k,
            batch,
            a: a.dev_addr().get(),
            b: b.dev_addr().get(),
            c: c.dev_addr().get(),
            lda,
            ldb,
            ldc,
            stride_a: sa,
            stride_b: sb,
            stride_c: sc,
            dtype_a: da as u8,
            dtype_b: db as u8,
            dtype_c: dc as u8,
            flags,
            alpha: alpha.to_bits(),
            beta: beta.to_bits(),
            ..Default::default()
        };
        let done = launch(&dev, &mut s, KernelId::Gemm, &p);
        assert_eq!(
            done.result().unwrap(),
            batch * m * n,
            "{da:?}x{db:?}->{dc:?}"
        );
        let mut got = vec![0u8; cb.len()];
        c.read(0, &mut got).unwrap();
        let got = values(dc, &got);
        let (u, sub) = ulp(dc);
        for bi in 0..batch as usize {
            for r in 0..m as usize {
                for j in 0..ldc as usize {
                    let ci = bi * sc as usize + r * ldc as usize + j;
                    if j >= n as usize {
                        assert_eq!(got[ci], cv[ci], "padding of C untouched");
                        continue;
                    }
                    let (mut acc, mut mag) = (0f64, 0f64);
                    for q in 0..k as usize {
                        let ai = bi * sa as usize
                            + if flags & GEMM_TRANS_A != 0 {
                                q * lda as usize + r
                            } else {
                                r * lda as usize + q
                            };
                        let bj = bi * sb as usize
                            + if flags & GEMM_TRANS_B != 0 {
                                j * ldb as usize + q
                            } else {
                                q * ldb as usize + j
                            };
                        acc += av[ai] * bv[bj];
                        mag += (av[ai] * bv[bj]).abs();
                    }
                    if int {
                        assert_eq!(got[ci], acc, "int8 GEMM is exact at {bi},{r},{j}");
                        continue;
                    }
                    let want = alpha as f64 * acc + beta as f64 * cv[ci];
                    let bound = (k as f64 + 2.0)
                        * 2f64.powi(-24)
                        * (alpha as f64 * mag + (beta as f64 * cv[ci]).abs())
                        + 2.0 * u * want.abs()
                        + sub;
                    assert!(
                        (got[ci] - want).abs() <= bound,
                        "{da:?}x{db:?}->{dc:?} at {bi},{r},{j}: {} vs {want} (bound {bound})",
                        got[ci]
                    );
                }
            }
        }
    }
}

#[test]
fn elementwise_reduce_softmax_and_norm_match_the_reference() {
    let dev = kdev();
    if !runs_kernels(&dev) {
        return;
    }
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    // bf16 a + f16-free broadcast: a [3, 40] + b [40] (stride 0 along rows), in bf16.
    let (ab, av) = random(Dtype::Bf16, 120, 1);
    let (bb, bv) = random(Dtype::Bf16, 40, 2);
    let (a, b, d) = (
        buffer(&dev, &ab),
        buffer(&dev, &bb),
        dev.alloc(240).unwrap(),
    );
    let e = ElementwiseParams {
        op: EwOp::Add as u32,
        dtype_dst: Dtype::Bf16 as u8,
        dtype_a: Dtype::Bf16 as u8,
        dtype_b: Dtype::Bf16 as u8,
        shape: [1, 1, 3, 40],
        dst: d.dev_addr().get(),
        a: a.dev_addr().get(),
        b: b.dev_addr().get(),
        stride_dst: [0, 0, 40, 1],
        stride_a: [0, 0, 40, 1],
        stride_b: [0, 0, 0, 1],
        ..Default::default()
    };
    assert_eq!(
        launch(&dev, &mut s, KernelId::Elementwise, &e)
            .result()
            .unwrap(),
        120
    );
    let mut raw = vec![0u8; 240];
    d.read(0, &mut raw).unwrap();
    let got = values(Dtype::Bf16, &raw);
    for i in 0..120 {
        assert_eq!(
            got[i],
            bf16::from_f64(av[i] + bv[i % 40]).to_f64(),
            "add is correctly rounded"
        );
    }
    // GELU of f16, in place.
    let (xb, xv) = random(Dtype::F16, 64, 3);
    let x = buffer(&dev, &xb);
    let g = ElementwiseParams {
        op: EwOp::Gelu as u32,
        dtype_dst: Dtype::F16 as u8,
        dtype_a: Dtype::F16 as u8,
        shape: [1, 1, 1, 64],
        dst: x.dev_addr().get(),
        a: x.dev_addr().get(),
        stride_dst: [0, 0, 0, 1],
        stride_a: [0, 0, 0, 1],
        ..Default::default()
    };
    assert!(launch(&dev, &mut s, KernelId::Elementwise, &g).is_ok());
    let mut raw = vec![0u8; 128];
    x.read(0, &mut raw).unwrap();
    for (y, v) in values(Dtype::F16, &raw).iter().zip(&xv) {
        let z = (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v);
        let r = 0.5 * v * (1.0 + z.tanh());
        assert!(
            (y - r).abs()
                <= (2f64.powi(-14) + 2.0 * 2f64.powi(-11)) * r.abs() + 32.0 * 2f64.powi(-24),
            "gelu({v}) = {y}, want {r}"
        );
    }
    // Max along axis 2 of f32 [2, 5, 7] and an int8 sum into int32 along axis 3.
    let (sb, sv) = random(Dtype::F32, 70, 4);
    let (src, out) = (buffer(&dev, &sb), dev.alloc(64).unwrap());
    let r = ReduceParams {
        op: ReduceOp::Max as u32,
        axis: 2,
        dtype_src: Dtype::F32 as u8,
        dtype_dst: Dtype::F32 as u8,
        shape: [1, 2, 5, 7],
        src: src.dev_addr().get(),
        dst: out.dev_addr().get(),
        stride_src: [0, 35, 7, 1],
        stride_dst: [0, 7, 0, 1],
        ..Default::default()
    };
    assert_eq!(
        launch(&dev, &mut s, KernelId::Reduce, &r).result().unwrap(),
        14
    );
    let got = out.read_vec::<f32>(0, 14).unwrap();
    for bi in 0..2 {
        for j in 0..7 {
            let want = (0..5)
                .map(|q| sv[bi * 35 + q * 7 + j])
                .fold(f64::MIN, f64::max);
            assert_eq!(got[bi * 7 + j] as f64, want);
        }
    }
    // Softmax of f16 rows into f32; layer norm of f32 rows with bf16 gamma and beta.
    let (rb, rv) = random(Dtype::F16, 4 * 33, 5);
    let (rows, sm) = (buffer(&dev, &rb), dev.alloc(4 * 33 * 4).unwrap());
    let p = SoftmaxParams {
        rows: 4,
        cols: 33,
        src: rows.dev_addr().get(),
        dst: sm.dev_addr().get(),
        ld_src: 33,
        ld_dst: 33,
        dtype_src: Dtype::F16 as u8,
        dtype_dst: Dtype::F32 as u8,
        ..Default::default()
    };
    assert!(launch(&dev, &mut s, KernelId::Softmax, &p).is_ok());
    let got = sm.read_vec::<f32>(0, 132).unwrap();
    for r in 0..4 {
        let row = &rv[r * 33..(r + 1) * 33];
        let max = row.iter().cloned().fold(f64::MIN, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        for j in 0..33 {
            let want = (row[j] - max).exp() / sum;
            let bound = (2f64.powi(-16) + 2.0 * 2f64.powi(-24)) * want + 2f64.powi(-149);
            assert!(
                (got[r * 33 + j] as f64 - want).abs() <= bound,
                "softmax row {r} col {j}"
            );
        }
    }
    let (nb, nv) = random(Dtype::F32, 2 * 16, 6);
    let (gb, gv) = random(Dtype::Bf16, 16, 7);
    let (bb2, bv2) = random(Dtype::Bf16, 16, 8);
    let (src, gamma, beta) = (buffer(&dev, &nb), buffer(&dev, &gb), buffer(&dev, &bb2));
    let np = NormParams {
        kind: NormKind::LayerNorm as u32,
        eps: 1e-5f32.to_bits(),
        rows: 2,
        cols: 16,
        src: src.dev_addr().get(),
        dst: src.dev_addr().get(),
        ld_src: 16,
        ld_dst: 16,
        gamma: gamma.dev_addr().get(),
        beta: beta.dev_addr().get(),
        dtype_src: Dtype::F32 as u8,
        dtype_dst: Dtype::F32 as u8,
        dtype_gamma: Dtype::Bf16 as u8,
        dtype_beta: Dtype::Bf16 as u8,
        ..Default::default()
    };
    assert!(launch(&dev, &mut s, KernelId::Norm, &np).is_ok());
    let got = src.read_vec::<f32>(0, 32).unwrap();
    for r in 0..2 {
        let row = &nv[r * 16..(r + 1) * 16];
        let mean = row.iter().sum::<f64>() / 16.0;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 16.0;
        let rstd = 1.0 / (var + 1e-5f32 as f64).sqrt();
        for j in 0..16 {
            let want = (row[j] - mean) * rstd * gv[j] + bv2[j];
            assert!(
                (got[r * 16 + j] as f64 - want).abs() <= 2.0 * 2f64.powi(-24) * want.abs() + 1e-9,
                "layer norm {r},{j}"
            );
        }
    }
}

#[test]
fn a_bad_block_is_refused_naming_its_operand_and_a_big_launch_runs_in_units() {
    let dev = kdev();
    if !runs_kernels(&dev) {
        return;
    }
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    let a = dev.alloc(1 << 20).unwrap();
    let (n, at) = (256u64, a.dev_addr().get());
    let good = GemmParams {
        m: n,
        n,
        k: n,
        batch: 1,
        a: at,
        b: at + n * n * 4,
        c: at + 2 * n * n * 4,
        lda: n,
        ldb: n,
        ldc: n,
        dtype_a: Dtype::F32 as u8,
        dtype_b: Dtype::F32 as u8,
        dtype_c: Dtype::F32 as u8,
        alpha: 1f32.to_bits(),
        ..Default::default()
    };
    let overlap = GemmParams { c: at + 64, ..good };
    let c = launch(&dev, &mut s, KernelId::Gemm, &overlap);
    assert_eq!(c.errno(), Some(Errno::EINVAL));
    let f = c.fault().unwrap();
    assert_eq!((f.operand, f.kind), (FaultOperand::C, FaultKind::Overlap));
    let mut s = ctx.create_stream().unwrap();
    let foreign = GemmParams {
        b: 0x10_0000,
        ..good
    };
    let c = launch(&dev, &mut s, KernelId::Gemm, &foreign);
    assert_eq!(c.errno(), Some(Errno::EACCES));
    assert_eq!(c.fault().unwrap().operand, FaultOperand::B);
    // 256³ is 16 Mi multiply-adds: several units, one result. A = identity, so C = B.
    let mut s = ctx.create_stream().unwrap();
    let ident: Vec<f32> = (0..n * n)
        .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
        .collect();
    let bvals: Vec<f32> = (0..n * n).map(|i| (i % 1000) as f32 - 500.0).collect();
    a.write_slice(0, &ident).unwrap();
    a.write_slice((n * n * 4) as usize, &bvals).unwrap();
    assert_eq!(
        launch(&dev, &mut s, KernelId::Gemm, &good)
            .result()
            .unwrap(),
        n * n
    );
    assert_eq!(
        a.read_vec::<f32>((2 * n * n * 4) as usize, (n * n) as usize)
            .unwrap(),
        bvals
    );
}

#[test]
fn byte_fills_and_adds_of_the_new_dtypes_run_on_every_device() {
    let dev = kdev();
    if !dev.features().contains(Features::DTYPES) {
        return;
    }
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    let m = dev.alloc(4096).unwrap();
    let base = m.dev_addr();
    m.write(0, &[0u8; 128]).unwrap();
    let (x, y, z) = (
        dev.alloc(64).unwrap(),
        dev.alloc(64).unwrap(),
        dev.alloc(64).unwrap(),
    );
    let h = |v: f64| f16::from_f64(v).to_bits().to_ne_bytes();
    x.write(0, &[h(1.5), h(-0.25), h(65504.0)].concat())
        .unwrap();
    y.write(0, &[h(2.25), h(0.25), h(32.0)].concat()).unwrap();
    s.submit_descs(&[
        TaskDesc::fill_as(1, Dtype::U8, base + 5, 11, 0x5A),
        TaskDesc::fill_as(2, Dtype::U16, base + 34, 6, 0xBEEF),
        TaskDesc::add(3, Dtype::F16, z.dev_addr(), x.dev_addr(), y.dev_addr(), 3),
    ])
    .unwrap();
    s.synchronize(T).unwrap();
    assert!(poll_all(&mut s).iter().all(Completion::is_ok));
    let mut got = [0u8; 48];
    m.read(0, &mut got).unwrap();
    let mut want = [0u8; 48];
    want[5..16].fill(0x5A);
    for i in 0..3 {
        want[34 + 2 * i..36 + 2 * i].copy_from_slice(&0xBEEFu16.to_ne_bytes());
    }
    assert_eq!(got, want);
    let mut sum = [0u8; 6];
    z.read(0, &mut sum).unwrap();
    let v: Vec<f64> = sum
        .chunks_exact(2)
        .map(|c| f16::from_bits(u16::from_ne_bytes([c[0], c[1]])).to_f64())
        .collect();
    assert_eq!(
        v,
        [3.75, 0.0, f64::INFINITY],
        "65504 + 32 rounds to infinity"
    );
}
