//! The kernel builders of `task` (issue 43) on the embedded device: each computes what it
//! says, broadcasting and batching work, refusals happen on the host with the reason, and a
//! task keeps its operands and parameter block alive after the caller dropped them.
#![cfg(feature = "embedded")]

use std::time::Duration;

use davinci_shim::task::{self, Matrix, Tensor};
use davinci_shim::{Device, DeviceMem, Dtype, Errno};
use davinci_uapi::kernels::{EwOp, ReduceOp};
use half::{bf16, f16};

const T: Duration = Duration::from_secs(10);

#[test]
fn a_batched_gemm_with_a_shared_transposed_b_and_a_padded_c() {
    let dev = Device::embedded().unwrap();
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    // Two batches of A (2×3), one B stored transposed (2×3: op(B) is 3×2), C 2×2 in rows of 4.
    let a = dev.alloc(2 * 6 * 4).unwrap();
    let b = dev.alloc(6 * 4).unwrap();
    let c = dev.alloc(2 * 8 * 4).unwrap();
    a.write_slice(0, &[1f32, 2., 3., 4., 5., 6., 1., 1., 1., 0., 0., 0.])
        .unwrap();
    b.write_slice(0, &[1f32, 0., 1., 0., 1., 1.]).unwrap();
    c.write_slice(0, &[9f32; 16]).unwrap();
    let t = task::gemm(
        Matrix::new(&a, Dtype::F32, 2, 3).batched(2, 6),
        Matrix::new(&b, Dtype::F32, 2, 3).t(),
        Matrix::new(&c, Dtype::F32, 2, 2).ld(4).batched(2, 8),
        1.0,
        0.0,
    )
    .unwrap();
    s.submit(&t).unwrap();
    s.synchronize(T).unwrap();
    let got = c.read_vec::<f32>(0, 16).unwrap();
    // Batch 0: [1 2 3; 4 5 6] · [1 0; 0 1; 1 1] = [4 5; 10 11]; batch 1: [2 2; 0 0].
    assert_eq!(
        got,
        [4., 5., 9., 9., 10., 11., 9., 9., 2., 2., 9., 9., 0., 0., 9., 9.]
    );
}

#[test]
fn elementwise_reduce_softmax_norms_and_byte_fills() {
    let dev = Device::embedded().unwrap();
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    // f16 x [2, 3] * a row [3] broadcast.
    let x = dev.alloc(12).unwrap();
    let r = dev.alloc(6).unwrap();
    let y = dev.alloc(12).unwrap();
    let h = |v: &[f32]| v.iter().map(|x| f16::from_f32(*x)).collect::<Vec<_>>();
    x.write_slice(0, &h(&[1., 2., 3., 4., 5., 6.])).unwrap();
    r.write_slice(0, &h(&[10., 100., 0.5])).unwrap();
    let mul = task::elementwise(
        EwOp::Mul,
        Tensor::new(&y, Dtype::F16, &[2, 3]).unwrap(),
        Tensor::new(&x, Dtype::F16, &[2, 3]).unwrap(),
        Some(Tensor::new(&r, Dtype::F16, &[3]).unwrap()),
    )
    .unwrap();
    s.submit(&mul).unwrap();
    // Sum of y along axis 1 into f16 [2].
    let sums = dev.alloc(4).unwrap();
    let red = task::reduce(
        ReduceOp::Sum,
        Tensor::new(&sums, Dtype::F16, &[2]).unwrap(),
        Tensor::new(&y, Dtype::F16, &[2, 3]).unwrap(),
        1,
    )
    .unwrap();
    s.submit(&red).unwrap();
    // Softmax of [0, ln 3] rows into bf16; RMS norm in place; a memset of 5 odd bytes.
    let sm_in = dev.alloc(8).unwrap();
    let sm_out = dev.alloc(4).unwrap();
    sm_in.write_slice(0, &[0f32, 3f32.ln()]).unwrap();
    s.submit(
        &task::softmax(
            Matrix::new(&sm_out, Dtype::Bf16, 1, 2),
            Matrix::new(&sm_in, Dtype::F32, 1, 2),
        )
        .unwrap(),
    )
    .unwrap();
    let n = dev.alloc(16).unwrap();
    n.write_slice(0, &[2f32, -2., 2., -2.]).unwrap();
    let g = dev.alloc(16).unwrap();
    g.write_slice(0, &[1f32, 2., 3., 4.]).unwrap();
    let nm = task::rms_norm(
        Matrix::new(&n, Dtype::F32, 1, 4),
        Matrix::new(&n, Dtype::F32, 1, 4),
        Some((&g).into()),
        None,
        Dtype::F32,
        0.0,
    )
    .unwrap();
    s.submit(&nm).unwrap();
    let bytes = dev.alloc(16).unwrap();
    bytes.write(0, &[0u8; 16]).unwrap();
    s.submit(&task::fill_bytes(davinci_shim::Region::range(&bytes, 3..8).unwrap(), 0xEE).unwrap())
        .unwrap();
    s.synchronize(T).unwrap();
    let yv: Vec<f32> = y
        .read_vec::<f16>(0, 6)
        .unwrap()
        .iter()
        .map(|v| v.to_f32())
        .collect();
    assert_eq!(yv, [10., 200., 1.5, 40., 500., 3.]);
    let sv: Vec<f32> = sums
        .read_vec::<f16>(0, 2)
        .unwrap()
        .iter()
        .map(|v| v.to_f32())
        .collect();
    assert_eq!(sv, [211.5, 543.]);
    let p: Vec<f32> = sm_out
        .read_vec::<bf16>(0, 2)
        .unwrap()
        .iter()
        .map(|v| v.to_f32())
        .collect();
    assert_eq!(p, [0.25, 0.75]);
    assert_eq!(n.read_vec::<f32>(0, 4).unwrap(), [1., -2., 3., -4.]);
    let mut got = [0u8; 16];
    bytes.read(0, &mut got).unwrap();
    assert_eq!(
        got,
        [0, 0, 0, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0, 0, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn the_host_refuses_what_does_not_agree_and_says_why() {
    let dev = Device::embedded().unwrap();
    let (a, b, c) = (
        dev.alloc(64).unwrap(),
        dev.alloc(64).unwrap(),
        dev.alloc(64).unwrap(),
    );
    let e = task::gemm(
        Matrix::new(&a, Dtype::F32, 2, 3),
        Matrix::new(&b, Dtype::F32, 4, 2),
        Matrix::new(&c, Dtype::F32, 2, 2),
        1.0,
        0.0,
    )
    .unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL));
    assert!(e.message().contains("op(B) 4×2"), "{e}");
    let e = task::gemm(
        Matrix::new(&a, Dtype::F32, 4, 4),
        Matrix::new(&b, Dtype::F32, 4, 4),
        Matrix::new(&c, Dtype::F32, 4, 8),
        1.0,
        0.0,
    )
    .unwrap_err();
    assert!(e.message().contains("C must be 4×4"), "{e}");
    let e = task::gemm(
        Matrix::new(&a, Dtype::I8, 2, 2),
        Matrix::new(&b, Dtype::I8, 2, 2),
        Matrix::new(&c, Dtype::I32, 2, 2),
        0.5,
        0.0,
    )
    .unwrap_err();
    assert!(e.message().contains("alpha must be 1"), "{e}");
    let e = task::gemm(
        Matrix::new(&a, Dtype::F32, 8, 8),
        Matrix::new(&b, Dtype::F32, 8, 2),
        Matrix::new(&c, Dtype::F32, 8, 2),
        1.0,
        0.0,
    )
    .unwrap_err();
    assert_eq!(e.errno(), Some(Errno::ERANGE));
    assert!(e.message().contains("A reaches 256 bytes"), "{e}");
    let e = task::elementwise(
        EwOp::Add,
        Tensor::new(&c, Dtype::F32, &[4]).unwrap(),
        Tensor::new(&a, Dtype::F32, &[3]).unwrap(),
        Some(Tensor::new(&b, Dtype::F32, &[4]).unwrap()),
    )
    .unwrap_err();
    assert!(e.message().contains("does not broadcast"), "{e}");
    let e = task::elementwise(
        EwOp::Relu,
        Tensor::new(&c, Dtype::F32, &[4]).unwrap(),
        Tensor::new(&a, Dtype::F32, &[4]).unwrap(),
        Some(Tensor::new(&b, Dtype::F32, &[4]).unwrap()),
    )
    .unwrap_err();
    assert!(e.message().contains("takes no second input"), "{e}");
    assert!(Tensor::new(&a, Dtype::F32, &[1, 2, 3, 4, 5]).is_err());
}

#[test]
fn a_launch_keeps_its_operands_and_block_after_the_caller_dropped_them() {
    let dev = Device::embedded().unwrap();
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    let out = dev.alloc(4 * 64).unwrap();
    {
        let a = dev.alloc(4 * 64).unwrap();
        a.write_slice(0, &[-1f32; 64]).unwrap();
        let t = task::elementwise(
            EwOp::Relu,
            Tensor::new(&out, Dtype::F32, &[64]).unwrap(),
            Tensor::new(&a, Dtype::F32, &[64]).unwrap(),
            None,
        )
        .unwrap();
        s.submit(&t).unwrap();
        // `a`, the task and its block buffer go out of scope before the launch ran.
    }
    s.synchronize(T).unwrap();
    assert_eq!(out.read_vec::<f32>(0, 64).unwrap(), [0f32; 64]);
}

/// Launches take their parameter blocks from slabs the open keeps: a thousand launches held at
/// once cost a handful of allocations, not one each (a tenant's quota is 256), and once their
/// tasks are gone the same slots serve the next thousand, each computing its own block.
#[test]
fn parameter_blocks_come_from_the_opens_slabs_not_an_allocation_each() {
    let dev = Device::embedded().unwrap();
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    let (x, y) = (dev.alloc(16).unwrap(), dev.alloc(16 * 1000).unwrap());
    x.write_slice(0, &[1f32, 2., 3., 4.]).unwrap();
    let before = dev.usage().unwrap().own.allocations;
    let scale = |i: usize| {
        // y[i] = x + x: a block of its own per launch (its output differs).
        task::elementwise(
            EwOp::Add,
            Tensor::new(
                davinci_shim::Region::range(&y, i * 16..i * 16 + 16).unwrap(),
                Dtype::F32,
                &[4],
            )
            .unwrap(),
            Tensor::new(&x, Dtype::F32, &[4]).unwrap(),
            Some(Tensor::new(&x, Dtype::F32, &[4]).unwrap()),
        )
        .unwrap()
    };
    for round in 0..2 {
        let tasks: Vec<_> = (0..1000).map(scale).collect();
        let held = dev.usage().unwrap().own.allocations - before;
        assert!(
            held <= 4,
            "round {round}: 1000 launches held {held} allocations (slabs of 256 blocks: 4)"
        );
        for chunk in tasks.chunks(50) {
            s.submit_batch(chunk).unwrap();
            s.synchronize(T).unwrap();
        }
        drop(tasks);
        let got = y.read_vec::<f32>(0, 4000).unwrap();
        for i in 0..1000 {
            assert_eq!(
                got[i * 4..i * 4 + 4],
                [2., 4., 6., 8.],
                "launch {i}, round {round}"
            );
        }
        y.write_slice(0, &vec![0f32; 4000]).unwrap();
    }
    // The slabs stay with the open: the second thousand took no more.
    assert!(dev.usage().unwrap().own.allocations - before <= 4);
}

/// Past its 16 slabs (4096 blocks held at once) a launch allocates its block alone, and
/// still runs.
#[test]
fn past_the_slabs_a_launch_allocates_its_block_alone() {
    let dev = Device::embedded().unwrap();
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    let x = dev.alloc(16).unwrap();
    x.write_slice(0, &[1f32, 2., 3., 4.]).unwrap();
    let t = |x: &davinci_shim::DeviceBuffer| {
        let v = Tensor::new(x, Dtype::F32, &[4]).unwrap();
        task::elementwise(EwOp::Add, v, v, Some(v)).unwrap()
    };
    let before = dev.usage().unwrap().own.allocations;
    let held: Vec<_> = (0..4096).map(|_| t(&x)).collect();
    assert_eq!(
        dev.usage().unwrap().own.allocations - before,
        16,
        "16 slabs"
    );
    let more: Vec<_> = (0..3).map(|_| t(&x)).collect();
    assert_eq!(
        dev.usage().unwrap().own.allocations - before,
        19,
        "3 blocks alone"
    );
    s.submit(&more[2]).unwrap();
    s.synchronize(T).unwrap();
    assert_eq!(x.read_vec::<f32>(0, 4).unwrap(), [2., 4., 6., 8.]);
    drop(more);
    s.poll(&mut Vec::new());
    assert_eq!(
        dev.usage().unwrap().own.allocations - before,
        16,
        "the lone blocks freed"
    );
    drop(held);
}
