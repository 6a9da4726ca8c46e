//! Arbitrary KERNEL_LAUNCH parameter blocks (ABI 1.5, docs/abi.md 6.1) run by the engine with
//! the built-in kernels, for a client that owns two allocations, next to a second client with
//! its own. The first input byte picks the kernel, the next `params_size` bytes are its block;
//! in each 8-byte field a selector byte (from the rest of the input) may rebase an address onto
//! an allocation (inside, around its end or start) and shapes are kept small (each dimension
//! below 65, `k` and a row below 257), so the interesting cases (edges, overlaps, zero and
//! huge strides, every dtype) are common and a run stays short; the remaining bytes are the
//! allocations' contents.
//!
//! Asserts: no panic (the platform panics if the engine touches memory outside the submitting
//! client's backed ranges; the kernels panic on nothing); exactly one completion, with the
//! launch's `user_data`; a success only when every operand's footprint lies inside one of the
//! client's allocations, with the result the output's element count (or a launch with nothing
//! to compute, result 0, whose operands the device does not look at); a failure carries a
//! fault naming a descriptor field or a kernel operand; the other client's memory never
//! changes.

use davinci_driver_core::engine::launch::Params;
use davinci_driver_core::test_util::{device, params, RingMem};
use davinci_driver_core::{dva_offset, Platform, Role, Run};
use davinci_uapi::kernels::KernelId;
use davinci_uapi::*;

/// Inside exactly one of `allocs`?
fn inside(addr: u64, len: u64, allocs: &[(u64, u64)]) -> bool {
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    allocs.iter().any(|&(a, s)| addr >= a && end <= a + s)
}

/// The field of `block` at byte `at` (8 bytes, little-endian), rebased or shrunk by `sel`.
fn steer(block: &mut [u8], at: usize, sel: u8, allocs: &[(u64, u64)], is_dim: bool) {
    let Some(f) = block.get_mut(at..at + 8) else {
        return;
    };
    let v = u64::from_le_bytes(f.try_into().unwrap_or([0; 8]));
    let out = if is_dim {
        match sel & 3 {
            3 => v % 257,
            _ => v % 65,
        }
    } else {
        let (addr, size) = allocs[(sel as usize >> 3) % allocs.len()];
        match sel & 7 {
            0 | 1 => v,                               // raw
            2 | 3 => addr + (v % size) / 8 * 8,       // inside, aligned
            4 => addr + v % (size + 64),              // inside or just past
            5 => (addr + size).wrapping_sub(v % 512), // around the end
            6 => v % 4096,                            // a small stride or ld
            _ => addr.wrapping_sub(v % 64),           // around the start
        }
    };
    f.copy_from_slice(&out.to_le_bytes());
}

/// Byte offsets of a block's dimensions (shrunk) and of its other 8-byte fields (addresses,
/// strides, leading dimensions: steered) for kernel `k`.
fn fields(k: KernelId) -> (&'static [usize], &'static [usize]) {
    match k {
        // m n k batch | a b c lda ldb ldc stride_a stride_b stride_c
        KernelId::Gemm => (&[0, 8, 16, 24], &[32, 40, 48, 56, 64, 72, 80, 88, 96]),
        // shape[4] | dst a b stride_dst[4] stride_a[4] stride_b[4]
        KernelId::Elementwise => (
            &[8, 16, 24, 32],
            &[
                40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152,
            ],
        ),
        // shape[4] | src dst stride_src[4] stride_dst[4]
        KernelId::Reduce => (
            &[16, 24, 32, 40],
            &[48, 56, 64, 72, 80, 88, 96, 104, 112, 120],
        ),
        // rows cols | src dst ld_src ld_dst
        KernelId::Softmax => (&[0, 8], &[16, 24, 32, 40]),
        // rows cols | src dst ld_src ld_dst gamma beta
        KernelId::Norm => (&[8, 16], &[24, 32, 40, 48, 56, 64]),
    }
}

/// One input.
pub fn run(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let k = KernelId::ALL[pick as usize % KernelId::ALL.len()];
    let size = k.params_size();
    let mut block = vec![0u8; size];
    let n = rest.len().min(size);
    block[..n].copy_from_slice(&rest[..n]);
    let rest = &rest[n..];
    let sel = |i: usize| rest.get(i).copied().unwrap_or(0);

    let mut dev = device();
    let c = dev.open(params(1, Role::Client, true)).expect("first open");
    dev.set_share_mode(c, ShareMode::Shared).expect("shared");
    let other = dev
        .open(params(2, Role::Client, false))
        .expect("second open");
    let ctx = dev.create_context(c).expect("context");
    let mut allocs = Vec::new();
    for bytes in [65536u64, 16384] {
        let mut a = AllocMemoryArgs {
            size: bytes,
            ..Default::default()
        };
        dev.alloc_memory(c, &mut a).expect("alloc");
        allocs.push((a.dev_addr, a.alloc_size));
    }
    let mut oa = AllocMemoryArgs {
        size: 4096,
        ..Default::default()
    };
    dev.alloc_memory(other, &mut oa).expect("other alloc");
    dev.platform_mut()
        .mem_write(other, dva_offset(oa.dev_addr).expect("dva"), &[0x5A; 4096])
        .expect("other's bytes");
    let other_before = dev.platform().arena_copy(other);

    let (dims, addrs) = fields(k);
    for (i, at) in dims.iter().enumerate() {
        steer(&mut block, *at, sel(i), &allocs, true);
    }
    for (i, at) in addrs.iter().enumerate() {
        steer(&mut block, *at, sel(8 + i), &allocs, false);
    }
    // The allocations' contents: the rest of the input, repeated.
    let fill: Vec<u8> = rest.iter().skip(32).copied().collect();
    if !fill.is_empty() {
        for &(addr, len) in &allocs {
            let bytes: Vec<u8> = fill.iter().copied().cycle().take(len as usize).collect();
            dev.platform_mut()
                .mem_write(c, dva_offset(addr).expect("dva"), &bytes)
                .expect("contents");
        }
    }
    // The block at the end of the second allocation (where operands may overlap it too).
    let (b_addr, b_len) = allocs[1];
    let at = b_addr + b_len - 256;
    dev.platform_mut()
        .mem_write(c, dva_offset(at).expect("dva"), &block)
        .expect("block");

    let mut sa = CreateStreamArgs {
        ctx,
        cmd_entries: 4,
        event_entries: 4,
        ..Default::default()
    };
    dev.create_stream(c, &mut sa).expect("stream");
    let m = RingMem::of(&dev, c, sa.handle).expect("stream memory");
    let (mut prod, mut cons) = (m.host_producer(), m.host_consumer());
    let imm = u64::from(sel(40) & 1);
    let desc = TaskDesc::kernel_launch(77, k as u32, imm, DevAddr(at), size as u64);
    prod.push(&desc).expect("room");
    prod.publish();
    let mut passes = 0;
    while dev.run_stream(sa.handle, 4) == Run::Continuing {
        passes += 1;
        assert!(passes < 100_000, "a launch of small shapes never ended");
    }
    let mut got = Vec::new();
    cons.consume(usize::MAX, |e| got.push(e));
    assert_eq!(got.len(), 1, "one completion per launch");
    let e = got[0];
    assert_eq!(e.user_data, 77);
    let p = Params::decode(k, &block);
    if e.status == 0 && e.result == 0 {
        // Nothing to compute (a dimension 0): the block was checked, its operands are not
        // (abi.md 6.1 step 4), and nothing was written.
        assert_eq!(p.check(), Ok(0), "a launch with no output elements");
    } else if e.status == 0 {
        let (ops, n) = p.operands();
        for o in &ops[..n] {
            let bytes = o.bytes().expect("a success has computable footprints");
            assert!(
                bytes == 0 || inside(o.addr, bytes, &allocs),
                "a launch succeeded with {:?} outside the client's memory: {p:?}",
                o.op
            );
        }
        assert_eq!(
            Ok(e.result),
            p.check(),
            "the result is the output's elements"
        );
    } else {
        assert!(Errno::from_code(-e.status).is_some(), "status {}", e.status);
        assert!(
            Fault::decode(e.result).is_some(),
            "a failed launch says why"
        );
    }
    assert_eq!(
        dev.platform().arena_copy(other),
        other_before,
        "the other client's memory changed"
    );
}
