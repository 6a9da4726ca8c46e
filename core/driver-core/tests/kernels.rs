//! KERNEL_LAUNCH and the 1.5 dtypes against driver-core's checking fake platform (built with
//! feature `kernels`): LIST_KERNELS' table, each kernel's result against a plain reference,
//! launches cut into units with the control path between them, the block copied once, memory
//! freed mid-launch, every refusal of docs/abi.md 6.1 with its fault, byte FILLs and ADD of the
//! new dtypes.

mod support;

use davinci_driver_core::{Role, Run, UserMem};
use davinci_uapi::kernels::*;
use davinci_uapi::*;
use support::kernels::*;
use support::*;

struct Captured(Vec<(u64, Vec<u8>)>);

impl UserMem for Captured {
    fn write(&mut self, addr: u64, data: &[u8]) -> davinci_driver_core::Result<()> {
        self.0.push((addr, data.to_vec()));
        Ok(())
    }
}

#[test]
fn list_kernels_names_every_built_in_kernel_with_its_block() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let mut info = DeviceInfo::default();
    call(&mut dev, c, DRIVER_CMD_GET_INFO, &mut info).unwrap();
    assert!(info.features.contains(Features::KERNELS | Features::DTYPES));
    let mut a = ListKernelsArgs {
        buf: 0x1000,
        capacity: 8,
        entry_size: 80,
        ..Default::default()
    };
    let mut raw = vec![0u8; ListKernelsArgs::SIZE];
    a.encode(&mut raw);
    let mut user = Captured(Vec::new());
    dev.ioctl(c, DRIVER_CMD_LIST_KERNELS, &mut raw, &mut user)
        .unwrap();
    a = ListKernelsArgs::decode(&raw);
    assert_eq!(a.count, 5);
    // Each entry: its 72 bytes at 0x1000 + 80 i, then 8 zero bytes.
    let entries: Vec<KernelInfo> = user
        .0
        .iter()
        .filter(|(_, d)| d.len() == KernelInfo::SIZE)
        .map(|(at, d)| {
            assert_eq!((at - 0x1000) % 80, 0);
            KernelInfo::decode(d)
        })
        .collect();
    let got: Vec<(u32, &str, u32)> = entries
        .iter()
        .map(|e| (e.id, e.name_str().unwrap(), e.params_size))
        .collect();
    assert_eq!(
        got,
        [
            (1, "gemm", 128),
            (2, "elementwise", 176),
            (3, "reduce", 144),
            (4, "softmax", 64),
            (5, "norm", 96)
        ]
    );
    assert!(entries
        .iter()
        .all(|e| e.params_version == 1 && e.version == 1));
    assert_eq!(
        entries[3].dtypes,
        Dtype::F32.bit() | Dtype::F16.bit() | Dtype::Bf16.bit()
    );
    assert!(user
        .0
        .iter()
        .any(|(at, d)| *at == 0x1000 + 72 && d == &[0u8; 8]));
    // The count alone; a bad entry size.
    a = ListKernelsArgs {
        entry_size: 72,
        ..Default::default()
    };
    call(&mut dev, c, DRIVER_CMD_LIST_KERNELS, &mut a).unwrap();
    assert_eq!(a.count, 5);
    a.entry_size = 12;
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_LIST_KERNELS, &mut a),
        Err(Errno::EINVAL)
    );
}

/// C (m×n, ldc) = alpha·op(A)·op(B) + beta·C in f64, per batch.
#[allow(clippy::too_many_arguments)]
fn gemm_ref(p: &GemmParams, a: &[f32], b: &[f32], c: &mut [f32]) {
    let ta = p.flags & GEMM_TRANS_A != 0;
    let tb = p.flags & GEMM_TRANS_B != 0;
    let (alpha, beta) = (
        f32::from_bits(p.alpha) as f64,
        f32::from_bits(p.beta) as f64,
    );
    for bi in 0..p.batch as usize {
        for i in 0..p.m as usize {
            for j in 0..p.n as usize {
                let mut acc = 0f64;
                for q in 0..p.k as usize {
                    let ai = bi * p.stride_a as usize
                        + if ta {
                            q * p.lda as usize + i
                        } else {
                            i * p.lda as usize + q
                        };
                    let bj = bi * p.stride_b as usize
                        + if tb {
                            j * p.ldb as usize + q
                        } else {
                            q * p.ldb as usize + j
                        };
                    acc += a[ai] as f64 * b[bj] as f64;
                }
                let ci = bi * p.stride_c as usize + i * p.ldc as usize + j;
                let old = if beta == 0.0 {
                    0.0
                } else {
                    beta * c[ci] as f64
                };
                c[ci] = (alpha * acc + old) as f32;
            }
        }
    }
}

#[test]
fn a_batched_transposed_gemm_with_padded_c_matches_the_reference_and_leaves_the_gaps() {
    let mut dev = device();
    let (c, mut s, base) = setup(&mut dev, 1 << 20);
    let (pa, pb, pc, blk) = (base, base + 0x1000, base + 0x2000, base + 0x8000);
    let mut p = gemm_block(5, 7, 3, (pa, pb, pc));
    p.batch = 2;
    p.flags = GEMM_TRANS_B; // B stored n×k
    p.ldb = 3;
    p.ldc = 9;
    p.stride_a = 15;
    p.stride_b = 21;
    p.stride_c = 5 * 9;
    p.alpha = 1.5f32.to_bits();
    p.beta = 0.5f32.to_bits();
    let a: Vec<f32> = (0..30).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..42).map(|i| (i % 5) as f32 - 2.0).collect();
    let c0: Vec<f32> = (0..90).map(|i| i as f32).collect();
    put(&mut dev, c, pa, &f32s(&a));
    put(&mut dev, c, pb, &f32s(&b));
    put(&mut dev, c, pc, &f32s(&c0));
    let (rec, _) = launch(&mut dev, c, &mut s, KernelId::Gemm, &p, blk);
    assert_eq!((rec.status, rec.result, rec.opcode), (0, 2 * 5 * 7, 6));
    let mut want = c0.clone();
    gemm_ref(&p, &a, &b, &mut want);
    let got = as_f32(&get(&mut dev, c, pc, 90 * 4));
    assert_eq!(
        got, want,
        "small integers: exact; columns 7 and 8 of each row untouched"
    );
}

#[test]
fn a_launch_of_several_units_lets_the_control_path_in_and_uses_the_block_it_took() {
    use davinci_driver_core::engine::launch::GEMM_UNIT_WORK;
    // n·k multiply-adds a row: GEMM_UNIT_WORK / (n·k) rows a unit (a multiple of 64), and
    // m two units and a bit: 3 units.
    let (n, k) = (64u64, 64u64);
    let rows = GEMM_UNIT_WORK / (n * k);
    let m = 2 * rows + 5;
    let (sa, sc) = (m * k * 4, m * n * 4);
    let mut dev = davinci_driver_core::test_util::device_with(4 * (sa + sc), 4 * (sa + sc));
    let (c, mut s, base) = setup(&mut dev, sa + sc + (1 << 20));
    let (pa, pb, pc) = (base, base + sa, base + sa + (1 << 19));
    let blk = pb + (1 << 18);
    let p = gemm_block(m, n, k, (pa, pb, pc));
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 11) as f32 * 0.25).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 13) as f32 - 6.0).collect();
    put(&mut dev, c, pa, &f32s(&a));
    put(&mut dev, c, pb, &f32s(&b));
    let mut raw = vec![0u8; GemmParams::SIZE];
    p.encode(&mut raw);
    put(&mut dev, c, blk, &raw);
    s.prod
        .push(&TaskDesc::kernel_launch(7, 1, 1, DevAddr(blk), 128))
        .unwrap();
    s.prod.publish();
    assert_eq!(
        dev.run_stream(s.handle, 64),
        Run::Continuing,
        "one unit a pass"
    );
    // The block is the device's copy now: a host that rewrites it changes nothing.
    let mut zeroed = p;
    zeroed.alpha = 0;
    zeroed.m = 1;
    zeroed.encode(&mut raw);
    put(&mut dev, c, blk, &raw);
    // The control path goes between two units.
    let mut info = DeviceInfo::default();
    call(&mut dev, c, DRIVER_CMD_GET_INFO, &mut info).unwrap();
    let mut passes = 1;
    loop {
        passes += 1;
        if dev.run_stream(s.handle, 64) != Run::Continuing {
            break;
        }
    }
    assert_eq!(passes, 3, "cut into units of {rows} rows");
    let rec = drain(&mut s)[0];
    assert_eq!((rec.status, rec.result), (0, m * n));
    let mut want = vec![0f32; (m * n) as usize];
    gemm_ref(&p, &a, &b, &mut want);
    let got = as_f32(&get(&mut dev, c, pc, (m * n * 4) as usize));
    // Sums of at most 64 products of multiples of 0.25 below 2^11: exact in f32.
    assert_eq!(got, want);
}

#[test]
fn memory_freed_between_two_units_fails_the_launch_naming_the_operand() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let ab = alloc(&mut dev, c, 2 << 20);
    let cm = alloc(&mut dev, c, 1 << 20);
    let mut s = stream(&mut dev, c, k, 16, 16);
    let p = gemm_block(
        300,
        256,
        128,
        (ab.dev_addr, ab.dev_addr + (1 << 19), cm.dev_addr),
    );
    let mut raw = vec![0u8; GemmParams::SIZE];
    p.encode(&mut raw);
    let blk = ab.dev_addr + (1 << 20);
    put(&mut dev, c, blk, &raw);
    s.prod
        .push(&TaskDesc::kernel_launch(7, 1, 0, DevAddr(blk), 128))
        .unwrap();
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Continuing);
    let mut f = HandleArgs {
        handle: cm.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_FREE_MEMORY, &mut f).unwrap();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(Errno::EACCES));
    let rec = drain(&mut s)[0];
    assert_eq!(
        Fault::decode(rec.result),
        Some(Fault::new(FaultOperand::C, FaultKind::NotOwned))
    );
}

#[test]
fn int8_gemm_elementwise_reduce_softmax_and_norm_compute_what_they_say() {
    let mut dev = device();
    let (c, mut s, base) = setup(&mut dev, 1 << 20);
    let blk = base + 0xf000;
    // int8 × int8 → int32, exact.
    let a: Vec<i8> = (0..12).map(|i| (i * 37 % 255 - 127) as i8).collect();
    let b: Vec<i8> = (0..8).map(|i| (i * 53 % 255 - 127) as i8).collect();
    put(
        &mut dev,
        c,
        base,
        &a.iter().map(|x| *x as u8).collect::<Vec<_>>(),
    );
    put(
        &mut dev,
        c,
        base + 64,
        &b.iter().map(|x| *x as u8).collect::<Vec<_>>(),
    );
    let mut p = gemm_block(3, 2, 4, (base, base + 64, base + 128));
    p.dtype_a = Dtype::I8 as u8;
    p.dtype_b = Dtype::I8 as u8;
    p.dtype_c = Dtype::I32 as u8;
    p.alpha = 0;
    let (rec, _) = launch(&mut dev, c, &mut s, KernelId::Gemm, &p, blk);
    assert_eq!(rec.status, 0);
    let got: Vec<i32> = get(&mut dev, c, base + 128, 24)
        .chunks_exact(4)
        .map(|x| i32::from_ne_bytes([x[0], x[1], x[2], x[3]]))
        .collect();
    let want: Vec<i32> = (0..6)
        .map(|e| {
            (0..4)
                .map(|q| a[(e / 2) * 4 + q] as i32 * b[q * 2 + e % 2] as i32)
                .sum()
        })
        .collect();
    assert_eq!(got, want);

    // Elementwise ADD with b broadcast along rows (stride 0), in place on a.
    let x: Vec<f32> = (0..6).map(|i| i as f32).collect();
    put(&mut dev, c, base + 0x200, &f32s(&x));
    put(&mut dev, c, base + 0x300, &f32s(&[10.0, 20.0, 30.0]));
    let e = ElementwiseParams {
        op: EwOp::Add as u32,
        dtype_dst: Dtype::F32 as u8,
        dtype_a: Dtype::F32 as u8,
        dtype_b: Dtype::F32 as u8,
        shape: [1, 1, 2, 3],
        dst: base + 0x200,
        a: base + 0x200,
        b: base + 0x300,
        stride_dst: [0, 0, 3, 1],
        stride_a: [0, 0, 3, 1],
        stride_b: [0, 0, 0, 1],
        ..Default::default()
    };
    let (rec, _) = launch(&mut dev, c, &mut s, KernelId::Elementwise, &e, blk);
    assert_eq!((rec.status, rec.result), (0, 6));
    assert_eq!(
        as_f32(&get(&mut dev, c, base + 0x200, 24)),
        [10.0, 21.0, 32.0, 13.0, 24.0, 35.0]
    );

    // Sum along axis 3 of int8 into int32; max along axis 2 of f32.
    let r = ReduceParams {
        op: ReduceOp::Sum as u32,
        axis: 3,
        dtype_src: Dtype::I8 as u8,
        dtype_dst: Dtype::I32 as u8,
        shape: [1, 1, 3, 4],
        src: base,
        dst: base + 0x400,
        stride_src: [0, 0, 4, 1],
        stride_dst: [0, 0, 1, 0],
        ..Default::default()
    };
    let (rec, _) = launch(&mut dev, c, &mut s, KernelId::Reduce, &r, blk);
    assert_eq!((rec.status, rec.result), (0, 3));
    let sums: Vec<i32> = get(&mut dev, c, base + 0x400, 12)
        .chunks_exact(4)
        .map(|x| i32::from_ne_bytes([x[0], x[1], x[2], x[3]]))
        .collect();
    let want: Vec<i32> = (0..3)
        .map(|row| (0..4).map(|q| a[row * 4 + q] as i32).sum())
        .collect();
    assert_eq!(sums, want);

    // Softmax of rows: each sums to 1 and keeps the order; RMS norm of a row of 3s is 1.
    put(
        &mut dev,
        c,
        base + 0x500,
        &f32s(&[1.0, 2.0, 3.0, 0.0, 0.0, 0.0]),
    );
    let sm = SoftmaxParams {
        rows: 2,
        cols: 3,
        src: base + 0x500,
        dst: base + 0x600,
        ld_src: 3,
        ld_dst: 3,
        dtype_src: Dtype::F32 as u8,
        dtype_dst: Dtype::F32 as u8,
        ..Default::default()
    };
    let (rec, _) = launch(&mut dev, c, &mut s, KernelId::Softmax, &sm, blk);
    assert_eq!(rec.status, 0);
    let y = as_f32(&get(&mut dev, c, base + 0x600, 24));
    assert!((y[0] + y[1] + y[2] - 1.0).abs() < 1e-6 && y[0] < y[1] && y[1] < y[2]);
    assert!(y[3..].iter().all(|v| (v - 1.0 / 3.0).abs() < 1e-6));
    put(&mut dev, c, base + 0x700, &f32s(&[3.0, -3.0, 3.0, 3.0]));
    let nm = NormParams {
        kind: NormKind::RmsNorm as u32,
        rows: 1,
        cols: 4,
        src: base + 0x700,
        dst: base + 0x700,
        ld_src: 4,
        ld_dst: 4,
        dtype_src: Dtype::F32 as u8,
        dtype_dst: Dtype::F32 as u8,
        ..Default::default()
    };
    let (rec, _) = launch(&mut dev, c, &mut s, KernelId::Norm, &nm, blk);
    assert_eq!(rec.status, 0, "in place");
    assert_eq!(
        as_f32(&get(&mut dev, c, base + 0x700, 16)),
        [1.0, -1.0, 1.0, 1.0]
    );
}

#[test]
fn byte_fills_and_adds_of_the_new_dtypes() {
    let mut dev = device();
    let (c, mut s, base) = setup(&mut dev, 1 << 16);
    put(&mut dev, c, base, &[0u8; 64]);
    s.prod
        .push(&TaskDesc::fill_as(1, Dtype::U8, DevAddr(base + 3), 9, 0xAB))
        .unwrap();
    s.prod
        .push(&TaskDesc::fill_as(
            2,
            Dtype::U16,
            DevAddr(base + 18),
            10,
            0x1234,
        ))
        .unwrap();
    s.prod.publish();
    dev.run_stream(s.handle, 64);
    let recs = drain(&mut s);
    assert!(recs.iter().all(|r| r.status == 0), "{recs:?}");
    let m = get(&mut dev, c, base, 32);
    let mut want = [0u8; 32];
    want[3..12].fill(0xAB);
    for i in 0..5 {
        want[18 + 2 * i..20 + 2 * i].copy_from_slice(&0x1234u16.to_ne_bytes());
    }
    assert_eq!(m, want);

    // f16 1.5 + 2.25 = 3.75, bf16 1 + 2^-9 rounds to even 1, i8 wraps.
    let h = |v: u16| v.to_ne_bytes();
    put(
        &mut dev,
        c,
        base + 0x100,
        &[h(0x3e00), h(0x3f80), h(0x3c00)].concat(),
    );
    put(
        &mut dev,
        c,
        base + 0x200,
        &[h(0x4080), h(0x3b00), h(0x0000)].concat(),
    );
    put(&mut dev, c, base + 0x300, &[100u8, 200]);
    put(&mut dev, c, base + 0x310, &[100u8, 100]);
    let add = |u, d, dst: u64, a: u64, b: u64, n| {
        TaskDesc::add(u, d, DevAddr(dst), DevAddr(a), DevAddr(b), n)
    };
    s.prod
        .push(&add(
            3,
            Dtype::F16,
            base + 0x400,
            base + 0x100,
            base + 0x200,
            1,
        ))
        .unwrap();
    s.prod
        .push(&add(
            4,
            Dtype::Bf16,
            base + 0x402,
            base + 0x102,
            base + 0x202,
            1,
        ))
        .unwrap();
    s.prod
        .push(&add(
            5,
            Dtype::I8,
            base + 0x410,
            base + 0x300,
            base + 0x310,
            2,
        ))
        .unwrap();
    s.prod.publish();
    dev.run_stream(s.handle, 64);
    assert!(drain(&mut s).iter().all(|r| r.status == 0));
    let m = get(&mut dev, c, base + 0x400, 4);
    assert_eq!(u16::from_ne_bytes([m[0], m[1]]), 0x4380, "f16 3.75");
    // bf16 0x3f80 is 1.0, 0x3b00 is 2^-9, a quarter of the ulp at 1: the sum rounds to 1.
    assert_eq!(u16::from_ne_bytes([m[2], m[3]]), 0x3f80);
    assert_eq!(get(&mut dev, c, base + 0x410, 2), [200, 44]);
}
