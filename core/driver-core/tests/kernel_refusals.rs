//! Every refusal of a KERNEL_LAUNCH's parameter block (docs/abi.md 6.1), in the documented
//! order, each with its errno and the fault that names the operand.

mod support;

use davinci_driver_core::Role;
use davinci_driver_core::Run;
use davinci_uapi::kernels::*;
use davinci_uapi::*;
use support::kernels::*;
use support::*;

#[test]
fn every_refusal_of_a_block_names_its_operand_in_the_documented_order() {
    use FaultKind as K;
    use FaultOperand as O;
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let a = alloc(&mut dev, c, 1 << 16);
    let base = a.dev_addr;
    let blk = base + 0xf000;
    let good = gemm_block(4, 4, 4, (base, base + 0x100, base + 0x200));
    let f = |op, kind| Fault::new(op, kind);
    let cases: Vec<(&str, GemmParams, Errno, Fault)> = vec![
        (
            "reserved first",
            GemmParams {
                reserved1: 1,
                dtype_a: 99,
                ..good
            },
            Errno::EBADMSG,
            f(O::Params, K::NotZero),
        ),
        (
            "flags",
            GemmParams { flags: 4, ..good },
            Errno::EBADMSG,
            f(O::Params, K::NotZero),
        ),
        (
            "a dtype no kernel takes",
            GemmParams {
                dtype_b: Dtype::U16 as u8,
                ..good
            },
            Errno::EBADMSG,
            f(O::B, K::Unknown),
        ),
        (
            "int8 with a float",
            GemmParams {
                dtype_a: Dtype::I8 as u8,
                ..good
            },
            Errno::EINVAL,
            f(O::B, K::Invalid),
        ),
        (
            "int32 A",
            GemmParams {
                dtype_a: Dtype::I32 as u8,
                ..good
            },
            Errno::EINVAL,
            f(O::A, K::Invalid),
        ),
        (
            "int8 alpha",
            GemmParams {
                dtype_a: 5,
                dtype_b: 5,
                dtype_c: 1,
                ..good
            },
            Errno::EBADMSG,
            f(O::Params, K::NotZero),
        ),
        (
            "k past its bound",
            GemmParams {
                k: KERNEL_MAX_K + 1,
                ..good
            },
            Errno::E2BIG,
            Fault::with_value(O::Shape, K::TooLarge, 1 << 20),
        ),
        (
            "overflowing shape",
            GemmParams {
                m: u64::MAX,
                n: 3,
                ..good
            },
            Errno::ERANGE,
            f(O::Shape, K::Overflow),
        ),
        (
            "misaligned A",
            GemmParams {
                a: base + 2,
                ..good
            },
            Errno::EINVAL,
            Fault::with_value(O::A, K::Misaligned, 4),
        ),
        (
            "B not the caller's",
            GemmParams { b: 0x1234, ..good },
            Errno::EACCES,
            f(O::B, K::NotOwned),
        ),
        (
            "C past its end",
            GemmParams {
                c: base + (1 << 16) - 32,
                ..good
            },
            Errno::ERANGE,
            Fault::with_value(O::C, K::PastEnd, 32),
        ),
        (
            "an overflowing footprint",
            GemmParams {
                lda: u64::MAX / 2,
                ..good
            },
            Errno::ERANGE,
            f(O::A, K::Overflow),
        ),
        (
            "ldc shorter than a row",
            GemmParams { ldc: 3, ..good },
            Errno::EINVAL,
            f(O::C, K::Invalid),
        ),
        (
            "C overlapping A",
            GemmParams {
                c: base + 0x20,
                ..good
            },
            Errno::EINVAL,
            f(O::C, K::Overlap),
        ),
        (
            "C's batches overlapping",
            GemmParams {
                batch: 2,
                stride_c: 8,
                c: base + 0x300,
                ..good
            },
            Errno::EINVAL,
            f(O::C, K::Overlap),
        ),
    ];
    for (what, p, errno, fault) in cases {
        let mut s = stream(&mut dev, c, k, 4, 4);
        let mut raw = vec![0u8; GemmParams::SIZE];
        p.encode(&mut raw);
        put(&mut dev, c, blk, &raw);
        s.prod
            .push(&TaskDesc::kernel_launch(1, 1, 1, DevAddr(blk), 128))
            .unwrap();
        s.prod.publish();
        assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(errno), "{what}");
        let rec = drain(&mut s)[0];
        assert_eq!(Fault::decode(rec.result), Some(fault), "{what}");
    }
    // Nothing to compute: the block is checked, the operands are not.
    let mut s = stream(&mut dev, c, k, 4, 4);
    let (rec, _) = launch(
        &mut dev,
        c,
        &mut s,
        KernelId::Gemm,
        &GemmParams {
            m: 0,
            a: 3,
            c: 9,
            ..good
        },
        blk,
    );
    assert_eq!((rec.status, rec.result), (0, 0));
    // Elementwise: an unknown op, a unary op given b, a partial overlap, EXP of integers.
    let e = ElementwiseParams {
        op: EwOp::Relu as u32,
        dtype_dst: Dtype::I32 as u8,
        dtype_a: Dtype::I32 as u8,
        shape: [1, 1, 1, 8],
        dst: base + 0x400,
        a: base,
        stride_dst: [0, 0, 0, 1],
        stride_a: [0, 0, 0, 1],
        ..Default::default()
    };
    let bad: Vec<(&str, ElementwiseParams, Errno, Fault)> = vec![
        (
            "op 0",
            ElementwiseParams { op: 0, ..e },
            Errno::EBADMSG,
            f(O::Params, K::Unknown),
        ),
        (
            "unary with b",
            ElementwiseParams { b: base, ..e },
            Errno::EBADMSG,
            f(O::B, K::NotZero),
        ),
        (
            "exp of ints",
            ElementwiseParams {
                op: EwOp::Exp as u32,
                ..e
            },
            Errno::EINVAL,
            f(O::A, K::Invalid),
        ),
        (
            "shifted in place",
            ElementwiseParams { dst: base + 4, ..e },
            Errno::EINVAL,
            f(O::C, K::Overlap),
        ),
        (
            "dst stride 0",
            ElementwiseParams {
                stride_dst: [0; 4],
                ..e
            },
            Errno::EINVAL,
            f(O::C, K::Overlap),
        ),
    ];
    for (what, p, errno, fault) in bad {
        let mut s = stream(&mut dev, c, k, 4, 4);
        let mut raw = vec![0u8; ElementwiseParams::SIZE];
        p.encode(&mut raw);
        put(&mut dev, c, blk, &raw);
        s.prod
            .push(&TaskDesc::kernel_launch(1, 2, 1, DevAddr(blk), 176))
            .unwrap();
        s.prod.publish();
        assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(errno), "{what}");
        assert_eq!(
            Fault::decode(drain(&mut s)[0].result),
            Some(fault),
            "{what}"
        );
    }
    let mut s = stream(&mut dev, c, k, 4, 4);
    let in_place = ElementwiseParams { dst: base, ..e };
    let (rec, _) = launch(&mut dev, c, &mut s, KernelId::Elementwise, &in_place, blk);
    assert_eq!(rec.status, 0, "exactly in place is allowed");
}
