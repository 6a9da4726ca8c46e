//! Device memory: the pool reuses blocks without driver round trips, is thread-safe and
//! bounded, and dropping everything gives all device memory back.
#![deny(unsafe_code)]

use davinci_tests::descs::SubmitDescs;

use davinci_shim::{DevAddr, DeviceMem, Errno, MemPool, PoolOptions, TaskDesc};
use davinci_tests::model::Rng;

use super::{dev, T};

#[test]
fn pool_reuses_blocks_without_driver_round_trips() {
    let dev = dev();
    let pool = MemPool::new(&dev);
    let a = pool.alloc(100).unwrap();
    let b = pool.alloc(1000).unwrap();
    assert_eq!(pool.stats().driver_allocs, 1);
    assert_eq!(a.dev_addr().get() % 64, 0);
    assert_eq!(b.dev_addr().get() % 64, 0);
    assert_eq!(
        b.dev_addr().get() - a.dev_addr().get(),
        128,
        "blocks rounded to 64 bytes, packed"
    );
    let freed = a.dev_addr();
    drop(a);
    let c = pool.alloc(64).unwrap();
    assert_eq!(c.dev_addr(), freed, "a freed block is reused");
    // A thousand small buffers: no driver round trip each.
    let used_before = dev.memory_used().unwrap();
    let many: Vec<_> = (0..1000)
        .map(|i| pool.alloc(64 + i % 200).unwrap())
        .collect();
    assert_eq!(pool.stats().driver_allocs, 1);
    assert_eq!(dev.memory_used().unwrap(), used_before);
    let mut addrs: Vec<(DevAddr, DevAddr)> = many
        .iter()
        .map(|m| (m.dev_addr(), m.dev_addr() + m.capacity() as u64))
        .collect();
    addrs.sort_unstable();
    assert!(addrs.windows(2).all(|w| w[0].1 <= w[1].0), "blocks overlap");

    // Blocks are device memory like any other: tasks on them, neighbours untouched.
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    let target = &many[500];
    s.submit_desc(&TaskDesc::fill(1, target.dev_addr(), 64, 0xabcd_0123))
        .unwrap();
    s.synchronize(T).unwrap();
    assert_eq!(
        target.read_vec::<u32>(0, 16).unwrap(),
        vec![0xabcd_0123; 16]
    );
    assert!(many[499]
        .read_vec::<u32>(0, 16)
        .unwrap()
        .iter()
        .all(|&v| v == 0));
    assert!(many[501]
        .read_vec::<u32>(0, 16)
        .unwrap()
        .iter()
        .all(|&v| v == 0));
    // Host-view bounds are the block's, not the chunk's.
    assert_eq!(
        target
            .write(target.len() - 4, &[0u8; 8])
            .unwrap_err()
            .errno(),
        Some(Errno::ERANGE)
    );

    drop(many);
    drop((b, c));
    let st = pool.stats();
    assert_eq!((st.blocks, st.in_use_bytes), (0, 0));
    assert_eq!(pool.trim(), 1);
    assert_eq!(dev.memory_used().unwrap(), used_before - (4 << 20));
}

#[test]
fn pool_is_thread_safe_and_bounded() {
    let dev = dev();
    let pool = MemPool::with_options(
        &dev,
        PoolOptions::default()
            .chunk_size(64 << 10)
            .max_bytes(256 << 10)
            .align(64),
    );
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            let pool = pool.clone();
            sc.spawn(move || {
                let mut rng = Rng::new(t);
                let mut live = Vec::new();
                for i in 0..2000 {
                    if live.len() > 20 || (rng.next_u32().is_multiple_of(3) && !live.is_empty()) {
                        let k = rng.next_u32() as usize % live.len();
                        let (b, tag): (davinci_shim::PoolBuffer, u32) = live.swap_remove(k);
                        assert_eq!(b.read_vec::<u32>(0, 1).unwrap(), vec![tag], "clobbered");
                    } else {
                        let b = pool.alloc(4 + rng.next_u32() as usize % 700).unwrap();
                        let tag = (t as u32) << 24 | i;
                        b.write_slice(0, &[tag]).unwrap();
                        live.push((b, tag));
                    }
                }
            });
        }
    });
    let st = pool.stats();
    assert_eq!(st.blocks, 0);
    assert!(st.reserved_bytes <= 256 << 10);
    // The bound is an error, not growth.
    let mut hold = Vec::new();
    let err = loop {
        match pool.alloc(60 << 10) {
            Ok(b) => hold.push(b),
            Err(e) => break e,
        }
    };
    assert_eq!(err.errno(), Some(Errno::ENOMEM), "{err}");
    assert_eq!(hold.len(), 4);
    assert_eq!(pool.alloc(0).unwrap_err().errno(), Some(Errno::EINVAL));
}

#[test]
fn dropping_everything_releases_all_device_memory() {
    let dev = dev();
    let mock = dev.mock_device().cloned();
    assert_eq!(dev.memory_used().unwrap(), 0);
    {
        let ctx = dev.create_context().unwrap();
        let mut s = ctx.create_stream().unwrap();
        let ev = ctx.create_event().unwrap();
        let bufs: Vec<_> = (1..=5).map(|i| dev.alloc(i * 5000).unwrap()).collect();
        let pool = MemPool::new(&dev);
        let blocks: Vec<_> = (0..10).map(|_| pool.alloc(300).unwrap()).collect();
        for b in &bufs {
            s.submit_desc(&TaskDesc::fill(0, b.dev_addr(), 4096, 9))
                .unwrap();
        }
        s.submit_desc(&TaskDesc::fill(0, blocks[3].dev_addr(), 64, 9))
            .unwrap();
        ev.record(&mut s).unwrap();
        s.synchronize(T).unwrap();
        let used = dev.memory_used().unwrap();
        assert_eq!(used, (8192 + 12288 + 16384 + 20480 + 28672) + (4 << 20));
        // Buffers dropped while the stream and pool still live give their memory back.
        drop(bufs);
        assert_eq!(dev.memory_used().unwrap(), 4 << 20);
        drop(blocks);
    }
    assert_eq!(
        dev.memory_used().unwrap(),
        0,
        "pool chunks are freed with the pool"
    );
    // Freed memory reads as zero for the next owner.
    let b = dev.alloc(8192).unwrap();
    assert_eq!(b.read_vec::<u32>(0, 2048).unwrap(), vec![0; 2048]);
    drop(b);
    if let Some(mock) = mock {
        assert_eq!(mock.clients().len(), 1);
        drop(dev);
        let info = mock.info();
        assert_eq!((info.memory_used, info.clients), (0, 0));
        assert!(mock.clients().is_empty());
        assert_eq!(mock.workers(), 0, "every stream worker stopped and joined");
    }
}
