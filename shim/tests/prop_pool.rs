//! Property tests of [`MemPool`] against a model: random sequences of `alloc`, dropped blocks,
//! `trim`, and dropping the pool itself, on an embedded mock device.
//!
//! The model keeps the chunks (in reservation order, with their device address once the pool
//! reserved them) and the live blocks in each; the free space of a chunk is derived from its
//! live blocks. `MemPool` documents first fit with merged neighbours, chunks kept until
//! `trim` (or until a new chunk would exceed `max_bytes`, when empty chunks are released
//! first), and `max_bytes` as a hard bound; so the model predicts every placement, every
//! driver round trip and every counter of `PoolStats` exactly.
#![cfg(feature = "embedded")]

use std::collections::BTreeMap;

use davinci_shim::{Device, DeviceMem, Errno, MemPool, MockConfig, PoolBuffer, PoolOptions};
use proptest::prelude::*;
use proptest::test_runner::Config;

/// Device memory of the test device: far above any pool bound used here, so the device
/// itself never runs out (first-fit fragmentation of chunks included) and every pool
/// `ENOMEM` is the pool's own bound.
const DEVICE_MEM: u64 = 64 << 20;
const PAGE: u64 = 4096;

fn device() -> Device {
    Device::embedded_with(MockConfig {
        memory_size: DEVICE_MEM,
        ..MockConfig::default()
    })
    .unwrap()
}

fn round_up(n: u64, a: u64) -> Option<u64> {
    Some(n.checked_add(a - 1)? & !(a - 1))
}

#[derive(Debug, Clone)]
struct ModelChunk {
    base: u64,
    len: u64,
    /// offset -> size of live blocks.
    live: BTreeMap<u64, u64>,
}

impl ModelChunk {
    fn first_fit(&self, size: u64) -> Option<u64> {
        let mut at = 0;
        for (&o, &s) in &self.live {
            if o - at >= size {
                return Some(at);
            }
            at = o + s;
        }
        (self.len - at >= size).then_some(at)
    }
}

#[derive(Debug, Default)]
struct Model {
    chunks: Vec<ModelChunk>,
    allocs: u64,
    driver_allocs: u64,
    driver_frees: u64,
}

impl Model {
    fn reserved(&self) -> u64 {
        self.chunks.iter().map(|c| c.len).sum()
    }

    fn in_use(&self) -> u64 {
        self.chunks.iter().flat_map(|c| c.live.values()).sum()
    }

    fn blocks(&self) -> usize {
        self.chunks.iter().map(|c| c.live.len()).sum()
    }

    /// Releases chunks without live blocks; how many.
    fn release_empty(&mut self) -> usize {
        let before = self.chunks.len();
        self.chunks.retain(|c| !c.live.is_empty());
        let n = before - self.chunks.len();
        self.driver_frees += n as u64;
        n
    }

    fn remove_block(&mut self, addr: u64, size: u64) {
        let c = self
            .chunks
            .iter_mut()
            .find(|c| addr >= c.base && addr < c.base + c.len)
            .expect("a live block lies in a chunk of the model");
        assert_eq!(c.live.remove(&(addr - c.base)), Some(size));
    }
}

struct Live {
    buf: PoolBuffer,
    tag: u64,
}

/// The tag written at both ends of a block (ends overlap for blocks under 16 bytes, so the
/// tag is written once there).
fn write_tag(b: &PoolBuffer, tag: u64) {
    let t = tag.to_ne_bytes();
    let n = b.len().min(8);
    b.write(0, &t[..n]).unwrap();
    if b.len() >= 16 {
        b.write(b.len() - 8, &t).unwrap();
    }
}

fn check_tag(b: &PoolBuffer, tag: u64) {
    let t = tag.to_ne_bytes();
    let n = b.len().min(8);
    let mut got = [0u8; 8];
    b.read(0, &mut got[..n]).unwrap();
    assert_eq!(
        got[..n],
        t[..n],
        "block {:#x} clobbered (head)",
        b.dev_addr().0
    );
    if b.len() >= 16 {
        b.read(b.len() - 8, &mut got).unwrap();
        assert_eq!(got, t, "block {:#x} clobbered (tail)", b.dev_addr().0);
    }
}

#[derive(Debug, Clone)]
enum Len {
    Zero,
    Small(usize),
    /// `k` sixteenths of a chunk (up to three chunks: requests above a chunk get their own).
    Chunks(usize),
    /// `usize::MAX - d`: the size, or the chunk size, overflows when rounded, or the request
    /// is beyond any bound.
    Huge(usize),
}

#[derive(Debug, Clone)]
enum Op {
    Alloc(Len),
    /// Drop the `i`-th live block (modulo).
    Free(usize),
    Trim,
    /// Clone the pool handle and drop the old one (clones share the pool).
    Reclone,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let len = prop_oneof![
        1 => Just(Len::Zero),
        8 => (1usize..=600).prop_map(Len::Small),
        4 => (1usize..=48).prop_map(Len::Chunks),
        1 => (0usize..=20_000).prop_map(Len::Huge),
    ];
    prop_oneof![
        10 => len.prop_map(Op::Alloc),
        7 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::Trim),
        1 => Just(Op::Reclone),
    ]
}

/// Pool options as asked: `chunk_size`, `max_bytes` as a number of (page-rounded) chunks
/// plus a tail that is not a page multiple, and `align`. The pool raises the alignment to a
/// power of two of at least 64 and the chunk to at least the alignment.
#[derive(Debug, Clone, Copy)]
struct Opts {
    chunk: usize,
    max_chunks: u64,
    max_tail: u64,
    align: usize,
}

fn options_strategy() -> impl Strategy<Value = Opts> {
    (
        prop_oneof![
            Just(4096usize),
            Just(10_000),
            Just(16384),
            Just(64 << 10),
            Just(100)
        ],
        0u64..=6,
        prop_oneof![Just(0u64), Just(1000), Just(4095)],
        prop_oneof![Just(64usize), Just(0), Just(100), Just(256), Just(4096)],
    )
        .prop_map(|(chunk, max_chunks, max_tail, align)| Opts {
            chunk,
            max_chunks,
            max_tail,
            align,
        })
}

fn check(pool: &MemPool, dev: &Device, baseline: u64, m: &Model, max: u64) {
    let s = pool.stats();
    assert_eq!(s.chunks, m.chunks.len(), "chunks");
    assert_eq!(s.reserved_bytes, m.reserved(), "reserved bytes");
    assert_eq!(s.in_use_bytes, m.in_use(), "bytes in use");
    assert_eq!(s.blocks, m.blocks(), "live blocks");
    assert_eq!(s.allocs, m.allocs, "blocks handed out");
    assert_eq!(
        s.driver_allocs, m.driver_allocs,
        "driver allocations (misses)"
    );
    assert_eq!(s.driver_frees, m.driver_frees, "driver frees");
    assert!(
        s.reserved_bytes <= max,
        "the pool holds more than max_bytes"
    );
    let used = dev.memory_used().unwrap();
    assert_eq!(used, baseline + m.reserved(), "device memory used");
}

fn run(opts: Opts, ops: &[Op], drop_pool_first: bool) {
    let dev = device();
    let baseline = dev.memory_used().unwrap();
    let align = opts.align.max(64).next_power_of_two();
    let chunk_pages = round_up(opts.chunk.max(align) as u64, PAGE).unwrap();
    let mut pool = MemPool::with_options(
        &dev,
        PoolOptions::default()
            .chunk_size(opts.chunk)
            .max_bytes(opts.max_chunks * chunk_pages + opts.max_tail)
            .align(opts.align),
    );
    let o = pool.options();
    assert_eq!(o.align, align, "alignment raised to a power of two >= 64");
    assert_eq!(o.chunk_size, opts.chunk.max(align));
    let (chunk, max, align) = (o.chunk_size as u64, o.max_bytes, align as u64);
    let mut m = Model::default();
    let mut live: Vec<Live> = Vec::new();
    let mut next_tag = 1u64;
    check(&pool, &dev, baseline, &m, max);

    for op in ops {
        match op {
            Op::Alloc(len) => {
                let len = match *len {
                    Len::Zero => 0,
                    Len::Small(n) => n,
                    Len::Chunks(k) => (chunk as usize * k).div_ceil(16),
                    Len::Huge(d) => usize::MAX - d,
                };
                // Prediction: Ok(Some((chunk index, offset))) for a cached block,
                // Ok(None) for a new chunk of `chunk_len`, or the errno.
                let size = round_up(len as u64, align);
                let mut expect_new_len = 0;
                let expect: Result<Option<(usize, u64)>, Errno> = match size {
                    _ if len == 0 => Err(Errno::EINVAL),
                    None => Err(Errno::EOVERFLOW),
                    Some(size) => {
                        let hit = m
                            .chunks
                            .iter()
                            .enumerate()
                            .find_map(|(i, c)| c.first_fit(size).map(|o| (i, o)));
                        match hit {
                            Some(h) => Ok(Some(h)),
                            None => match round_up(size.max(chunk), PAGE) {
                                None => Err(Errno::EOVERFLOW),
                                Some(cl) if m.reserved().checked_add(cl).is_none() => {
                                    // The pool's bound check overflows here (a known bug:
                                    // see `huge_request_with_a_chunk_held_is_enomem`): skip.
                                    continue;
                                }
                                Some(cl) => {
                                    let fits = |m: &Model| {
                                        m.reserved().checked_add(cl).is_some_and(|t| t <= max)
                                    };
                                    if !fits(&m) {
                                        m.release_empty();
                                    }
                                    if fits(&m) {
                                        expect_new_len = cl;
                                        Ok(None)
                                    } else {
                                        Err(Errno::ENOMEM)
                                    }
                                }
                            },
                        }
                    }
                };
                let got = pool.alloc(len);
                match (expect, got) {
                    (Err(e), Err(g)) => assert_eq!(g.errno(), Some(e), "alloc({len}): {g}"),
                    (Err(e), Ok(b)) => panic!("alloc({len}) gave {b:?}, expected {e:?}"),
                    (Ok(_), Err(g)) => panic!("alloc({len}) failed: {g}"),
                    (Ok(where_), Ok(b)) => {
                        let size = size.unwrap();
                        let addr = b.dev_addr().0;
                        assert_eq!(b.len(), len, "length");
                        assert_eq!(b.capacity() as u64, size, "capacity: length rounded");
                        assert!(b.capacity() >= len);
                        assert_eq!(addr % align, 0, "block alignment");
                        match where_ {
                            Some((i, off)) => {
                                let c = &mut m.chunks[i];
                                assert_eq!(
                                    addr,
                                    c.base + off,
                                    "first fit in the first chunk with room"
                                );
                                c.live.insert(off, size);
                            }
                            None => {
                                // A new chunk: the block at its start; its address range
                                // must not overlap any chunk the pool still holds.
                                for c in &m.chunks {
                                    assert!(
                                        addr + expect_new_len <= c.base || c.base + c.len <= addr,
                                        "new chunk overlaps a held one"
                                    );
                                }
                                m.chunks.push(ModelChunk {
                                    base: addr,
                                    len: expect_new_len,
                                    live: BTreeMap::from([(0, size)]),
                                });
                                m.driver_allocs += 1;
                            }
                        }
                        // No two live blocks overlap (checked on addresses, independently of
                        // the model's bookkeeping).
                        for l in &live {
                            let (a2, s2) = (l.buf.dev_addr().0, l.buf.capacity() as u64);
                            assert!(addr + size <= a2 || a2 + s2 <= addr, "blocks overlap");
                        }
                        m.allocs += 1;
                        write_tag(&b, next_tag);
                        live.push(Live {
                            buf: b,
                            tag: next_tag,
                        });
                        next_tag += 1;
                    }
                }
            }
            Op::Free(i) => {
                if live.is_empty() {
                    continue;
                }
                let l = live.swap_remove(i % live.len());
                check_tag(&l.buf, l.tag);
                m.remove_block(l.buf.dev_addr().0, l.buf.capacity() as u64);
                drop(l);
            }
            Op::Trim => {
                let n = m.release_empty();
                assert_eq!(pool.trim(), n, "chunks trimmed");
            }
            Op::Reclone => {
                let p2 = pool.clone();
                drop(std::mem::replace(&mut pool, p2));
            }
        }
        check(&pool, &dev, baseline, &m, max);
    }

    for l in &live {
        check_tag(&l.buf, l.tag);
    }
    let reserved = m.reserved();
    if drop_pool_first {
        // The blocks keep their chunks: memory stays reserved until the last block goes.
        drop(pool);
        let held = if live.is_empty() { 0 } else { reserved };
        assert_eq!(dev.memory_used().unwrap(), baseline + held);
        let n = live.len();
        for (k, l) in live.into_iter().enumerate() {
            drop(l);
            if k + 1 < n {
                assert_eq!(dev.memory_used().unwrap(), baseline + reserved);
            }
        }
    } else {
        // Blocks first: every chunk empty, still cached; trim gives all of them back.
        drop(live);
        let s = pool.stats();
        assert_eq!((s.blocks, s.in_use_bytes), (0, 0));
        assert_eq!(s.reserved_bytes, reserved, "chunks stay cached until trim");
        assert_eq!(dev.memory_used().unwrap(), baseline + reserved);
        assert_eq!(pool.trim(), m.chunks.len());
        assert_eq!(pool.stats().reserved_bytes, 0);
        assert_eq!(dev.memory_used().unwrap(), baseline);
        drop(pool);
    }
    assert_eq!(
        dev.memory_used().unwrap(),
        baseline,
        "all device memory back"
    );
}

proptest! {
    #![proptest_config(Config {
        cases: 128,
        // Nothing written to disk: a failure prints its minimal input (kept as a plain test).
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn pool_matches_model(
        opts in options_strategy(),
        ops in proptest::collection::vec(op_strategy(), 0..80),
        drop_pool_first in any::<bool>(),
    ) {
        run(opts, &ops, drop_pool_first);
    }
}

/// Regression (found by `pool_matches_model`, fixed: the bound check is overflow-checked).
/// Minimal input: 4096-byte chunks, `max_bytes` 4 chunks,
/// `alloc(8448)` then `alloc(usize::MAX - 4095)`). With a chunk held, a request whose new
/// chunk length is near `usize::MAX` makes `MemPool::alloc`'s bound check
/// `s.stats.reserved_bytes + chunk_len as u64 > opts.max_bytes` (shim/src/pool.rs) overflow:
/// a debug build panics ("attempt to add with overflow", with the pool's lock held), a release
/// build wraps, passes the `max_bytes` check and asks the driver for the chunk (which happens
/// to refuse it). Expected: the pool's own `ENOMEM` (a request beyond `max_bytes`), no driver
/// round trip, nothing changed.
#[test]
fn huge_request_with_a_chunk_held_is_enomem() {
    let dev = device();
    let pool = MemPool::with_options(
        &dev,
        PoolOptions::default().chunk_size(4096).max_bytes(4 * 4096),
    );
    let _held = pool.alloc(1).unwrap();
    let before = pool.stats();
    let e = pool.alloc(usize::MAX - 4095).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::ENOMEM));
    assert_eq!(
        e.op(),
        "MemPool::alloc",
        "refused by the pool, not by the driver"
    );
    assert_eq!(pool.stats(), before);
}

/// Regression (found while writing these properties, fixed: `Chunk::take` aligns the device
/// address and chunks get room for the padding), `PoolOptions::align` beyond the page size:
/// `PoolOptions::align` is documented as the "block alignment", but blocks are only aligned
/// to it relative to their chunk, and chunks are aligned only to the device's `mem_align`
/// (4096): with `align(8192)`, a chunk that lands at an odd page gives a block whose device
/// address is 4096 mod 8192. (The property above keeps to alignments up to 4096.)
#[test]
fn blocks_honour_an_alignment_above_the_page_size() {
    let dev = device();
    // One page taken directly, so the pool's first chunk starts at an odd page.
    let _page = dev.alloc(4096).unwrap();
    let pool = MemPool::with_options(&dev, PoolOptions::default().chunk_size(8192).align(8192));
    assert_eq!(pool.options().align, 8192);
    let b = pool.alloc(1).unwrap();
    assert_eq!(b.dev_addr().0 % 8192, 0, "block at {:#x}", b.dev_addr().0);
}
