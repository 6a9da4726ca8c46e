//! Property tests of device memory: the allocator (`memory::Allocator`) and ALLOC_MEMORY /
//! FREE_MEMORY at the device level, each against a simple model.
//!
//! The model keeps only the live allocations; the free space is derived from them (the gaps
//! between live allocations), so a split or coalescing bug in the allocator's block list shows
//! up as a different placement, a different block count, or a failure to place what fits.
//! Placement is first fit (lowest free offset), as `memory.rs` documents.

use std::collections::BTreeMap;

use davinci_driver_core::memory::Allocator;
use davinci_driver_core::test_util::{self, HeapPlatform};
use davinci_driver_core::{dva_offset, DeviceCore, NoUserMem, Role};
use davinci_uapi::{
    AllocMemoryArgs, Errno, HandleArgs, ShareMode, Wire, DRIVER_CMD_ALLOC_MEMORY,
    DRIVER_CMD_FREE_MEMORY,
};
use proptest::prelude::*;
use proptest::test_runner::Config;

fn config(cases: u32) -> Config {
    Config {
        cases,
        // Nothing written outside the crate (nor inside): a failure prints its minimal input;
        // keep it as a plain #[test] if it is a real bug.
        failure_persistence: None,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------------------
// The model: live allocations by offset; free space = the gaps between them.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Default, Clone)]
struct Space {
    size: u64,
    /// offset -> (len, handle)
    live: BTreeMap<u64, (u64, u32)>,
}

impl Space {
    fn new(size: u64) -> Self {
        Self {
            size,
            live: BTreeMap::new(),
        }
    }

    /// Maximal free ranges `(offset, len)`, by offset.
    fn gaps(&self) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let mut at = 0;
        for (&o, &(l, _)) in &self.live {
            if o > at {
                v.push((at, o - at));
            }
            at = o + l;
        }
        if at < self.size {
            v.push((at, self.size - at));
        }
        v
    }

    /// First fit for `len`: the lowest gap at least that long.
    fn first_fit(&self, len: u64) -> Option<(u64, u64)> {
        self.gaps().into_iter().find(|&(_, l)| l >= len)
    }

    fn used(&self) -> u64 {
        self.live.values().map(|&(l, _)| l).sum()
    }

    /// Blocks of the allocator's table (free and used) the model implies.
    fn blocks(&self) -> usize {
        self.live.len() + self.gaps().len()
    }
}

fn round(len: u64, align: u64) -> Option<u64> {
    Some(len.checked_add(align - 1)? & !(align - 1))
}

// ---------------------------------------------------------------------------------------
// Allocator<N>
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Len {
    Zero,
    /// `pages` whole alignment units plus `extra` bytes (non-multiples included).
    Units {
        pages: u64,
        extra: u64,
    },
    /// Exactly the device (rounded) size, or one byte more.
    Whole {
        plus_one: bool,
    },
    /// Sizes near u64::MAX: rounding overflows, or fits no device.
    Huge(u64),
}

#[derive(Debug, Clone)]
enum AOp {
    /// A fresh handle, or the (invalid) handle 0.
    Alloc { len: Len, zero_handle: bool },
    /// Free the `i`-th live allocation (modulo) with its own offset and handle.
    FreeLive(usize),
    /// Free a previously freed allocation again (its offset and handle).
    FreeStale(usize),
    /// A live allocation's offset with a handle that is not its own (another live one's,
    /// a never-used one, or 0).
    FreeWrongHandle { i: usize, which: u8 },
    /// Any offset, a handle never handed out (or 0).
    FreeNever { offset: u64, handle: u32 },
}

fn len_strategy() -> impl Strategy<Value = Len> {
    prop_oneof![
        1 => Just(Len::Zero),
        8 => (0u64..6, 0u64..5000).prop_map(|(pages, extra)| Len::Units { pages, extra }),
        2 => any::<bool>().prop_map(|plus_one| Len::Whole { plus_one }),
        1 => (0u64..=70_000).prop_map(Len::Huge),
    ]
}

fn aop_strategy() -> impl Strategy<Value = AOp> {
    prop_oneof![
        10 => (len_strategy(), proptest::bool::weighted(0.05))
            .prop_map(|(len, zero_handle)| AOp::Alloc { len, zero_handle }),
        6 => any::<usize>().prop_map(AOp::FreeLive),
        1 => any::<usize>().prop_map(AOp::FreeStale),
        1 => (any::<usize>(), 0u8..3).prop_map(|(i, which)| AOp::FreeWrongHandle { i, which }),
        1 => (
            prop_oneof![any::<u64>(), 0u64..(1 << 18)],
            prop_oneof![Just(0u32), 0x8000_0000u32..=u32::MAX]
        )
            .prop_map(|(offset, handle)| AOp::FreeNever { offset, handle }),
    ]
}

/// Allocator parameters: `pages` alignment units (plus a non-multiple tail that `new` rounds
/// away), and the alignment asked for (0 and 3000 are not powers of two: 4096 is used).
fn alloc_params() -> impl Strategy<Value = (u64, u64, u64)> {
    (
        prop_oneof![Just(4096u64), Just(512), Just(65536), Just(0), Just(3000)],
        0u64..=24,
        0u64..4096,
    )
}

fn effective_align(asked: u64) -> u64 {
    if asked.is_power_of_two() {
        asked
    } else {
        4096
    }
}

/// Checks every observable of `a` against the model.
fn check_allocator<const N: usize>(a: &Allocator<N>, m: &Space) {
    assert_eq!(a.size(), m.size, "size");
    assert_eq!(a.used(), m.used(), "used bytes");
    assert_eq!(
        a.blocks(),
        if m.size == 0 { 0 } else { m.blocks() },
        "block count (splits and merges): live {:?}",
        m.live
    );
    for (&o, &(l, h)) in &m.live {
        assert_eq!(a.owner_of(o, l), Some(h), "live allocation at {o:#x}");
        assert_eq!(a.owner_of(o + l - 1, 1), Some(h), "last byte at {o:#x}");
    }
    for (o, l) in m.gaps() {
        assert_eq!(a.owner_of(o, 1), None, "free space at {o:#x}");
        assert_eq!(a.owner_of(o + l - 1, 1), None, "free space end at {o:#x}");
    }
    assert_eq!(a.owner_of(m.size, 1), None, "past the end");
}

fn run_allocator<const N: usize>(asked_align: u64, pages: u64, tail: u64, ops: &[AOp]) {
    let align = effective_align(asked_align);
    let raw_size = pages * align + tail;
    let mut a: Allocator<N> = Allocator::new(raw_size, asked_align);
    let mut m = Space::new(raw_size & !(align - 1));
    assert_eq!(a.align(), align);
    let mut next_handle = 1u32;
    let mut freed: Vec<(u64, u32)> = Vec::new();
    check_allocator(&a, &m);

    for op in ops {
        match op {
            AOp::Alloc { len, zero_handle } => {
                let len = match *len {
                    Len::Zero => 0,
                    Len::Units { pages, extra } => pages * align + extra,
                    Len::Whole { plus_one } => m.size + u64::from(plus_one),
                    Len::Huge(d) => u64::MAX - d,
                };
                let handle = if *zero_handle { 0 } else { next_handle };
                let expect: Result<(u64, u64), Errno> = if len == 0 || handle == 0 {
                    Err(Errno::EINVAL)
                } else {
                    match round(len, align) {
                        None => Err(Errno::EOVERFLOW),
                        Some(r) => match m.first_fit(r) {
                            None => Err(Errno::ENOMEM),
                            Some((_, gap)) if gap > r && m.blocks() >= N => Err(Errno::ENOSPC),
                            Some((o, _)) => Ok((o, r)),
                        },
                    }
                };
                let got = a.allocate(len, handle).map_err(|e| e.errno);
                assert_eq!(
                    got, expect,
                    "allocate({len}, {handle}) with live {:?}",
                    m.live
                );
                if let Ok((o, r)) = got {
                    assert_eq!(o % align, 0, "aligned");
                    assert!(r >= len && r % align == 0 && r - len < align, "rounded");
                    assert!(o + r <= m.size, "inside the device memory");
                    for (&lo, &(ll, _)) in &m.live {
                        assert!(o + r <= lo || lo + ll <= o, "overlaps [{lo:#x}, +{ll:#x})");
                    }
                    m.live.insert(o, (r, handle));
                    next_handle += 1;
                }
            }
            AOp::FreeLive(i) => {
                if m.live.is_empty() {
                    continue;
                }
                let (&o, &(l, h)) = m.live.iter().nth(i % m.live.len()).unwrap();
                assert_eq!(a.free(o, h).map_err(|e| e.errno), Ok(l), "free live");
                m.live.remove(&o);
                freed.push((o, h));
            }
            AOp::FreeStale(i) => {
                if freed.is_empty() {
                    continue;
                }
                let (o, h) = freed[i % freed.len()];
                assert_eq!(
                    a.free(o, h).map_err(|e| e.errno),
                    Err(Errno::ENOENT),
                    "free stale ({o:#x}, {h})"
                );
            }
            AOp::FreeWrongHandle { i, which } => {
                if m.live.is_empty() {
                    continue;
                }
                let k = i % m.live.len();
                let (&o, &(_, h)) = m.live.iter().nth(k).unwrap();
                let wrong = match which {
                    0 => 0,
                    1 => 0x8000_0000 | h,
                    _ => m
                        .live
                        .values()
                        .map(|&(_, h2)| h2)
                        .find(|&h2| h2 != h)
                        .unwrap_or(0x7fff_ffff),
                };
                assert_eq!(
                    a.free(o, wrong).map_err(|e| e.errno),
                    Err(Errno::ENOENT),
                    "free ({o:#x}) with handle {wrong} instead of {h}"
                );
            }
            AOp::FreeNever { offset, handle } => {
                assert_eq!(
                    a.free(*offset, *handle).map_err(|e| e.errno),
                    Err(Errno::ENOENT),
                    "free never-allocated ({offset:#x}, {handle:#x})"
                );
            }
        }
        check_allocator(&a, &m);
    }

    // Free everything (in offset order, reversed every other allocation to mix merge
    // directions): nothing leaks, everything coalesces back into one block.
    let mut rest: Vec<(u64, (u64, u32))> = m.live.iter().map(|(&o, &v)| (o, v)).collect();
    let (even, odd): (Vec<_>, Vec<_>) = rest.drain(..).enumerate().partition(|(k, _)| k % 2 == 0);
    for (_, (o, (l, h))) in even.into_iter().chain(odd.into_iter().rev()) {
        assert_eq!(a.free(o, h).map_err(|e| e.errno), Ok(l));
        m.live.remove(&o);
        check_allocator(&a, &m);
    }
    assert_eq!(a.used(), 0);
    if m.size > 0 {
        assert_eq!(a.blocks(), 1, "fully coalesced");
        assert_eq!(
            a.allocate(m.size, u32::MAX).map_err(|e| e.errno),
            Ok((0, m.size)),
            "after freeing everything the whole memory is one allocation"
        );
        assert_eq!(a.used(), m.size);
        assert_eq!(a.free(0, u32::MAX).map_err(|e| e.errno), Ok(m.size));
        assert_eq!(a.blocks(), 1);
    }
    assert_eq!(a.used(), 0);
}

proptest! {
    #![proptest_config(config(256))]

    /// A small block table (8): `ENOSPC` when a split needs a block the table lacks.
    #[test]
    fn allocator_small_table_matches_model(
        (asked, pages, tail) in alloc_params(),
        ops in proptest::collection::vec(aop_strategy(), 0..80),
    ) {
        run_allocator::<8>(asked, pages, tail, &ops);
    }

    /// A table large enough for any split of these sizes: only the space decides.
    #[test]
    fn allocator_large_table_matches_model(
        (asked, pages, tail) in alloc_params(),
        ops in proptest::collection::vec(aop_strategy(), 0..120),
    ) {
        run_allocator::<64>(asked, pages, tail, &ops);
    }
}

/// The smallest tables: none (nothing can be allocated), one block (only whole-memory
/// allocations), two blocks.
#[test]
fn allocator_tiny_tables() {
    let mut a: Allocator<0> = Allocator::new(8192, 4096);
    assert_eq!(a.blocks(), 0);
    assert_eq!(a.allocate(1, 1).unwrap_err().errno, Errno::ENOMEM);
    let mut a: Allocator<1> = Allocator::new(8192, 4096);
    assert_eq!(a.allocate(1, 1).unwrap_err().errno, Errno::ENOSPC);
    assert_eq!(a.allocate(8192, 1).unwrap(), (0, 8192));
    assert_eq!(a.free(0, 1).unwrap(), 8192);
    let mut a: Allocator<2> = Allocator::new(8192, 4096);
    assert_eq!(a.allocate(1, 1).unwrap(), (0, 4096));
    assert_eq!(a.allocate(1, 2).unwrap(), (4096, 4096));
    assert_eq!(a.free(0, 1).unwrap(), 4096);
    assert_eq!(a.free(4096, 2).unwrap(), 4096);
    assert_eq!((a.used(), a.blocks()), (0, 1));
}

// ---------------------------------------------------------------------------------------
// Device: ALLOC_MEMORY / FREE_MEMORY from several clients, per-client limit
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum DOp {
    Alloc {
        client: usize,
        size: Len,
        flags: u32,
    },
    /// Free one of the client's own live allocations.
    Free { client: usize, i: usize },
    /// Free another client's allocation (it must survive).
    FreeForeign { client: usize, i: usize },
    /// Free a handle already freed (or closed with its client).
    FreeStale { client: usize, i: usize },
    /// Any handle at all (usually no allocation; if it happens to be one of the client's own,
    /// the model frees it too).
    FreeAny { client: usize, handle: u32 },
    /// A non-zero pad: `EINVAL`, nothing freed.
    FreeBadPad { client: usize, i: usize },
    /// Close the client (its memory goes back) and open a new one in its place.
    Reopen { client: usize },
}

fn dop_strategy() -> impl Strategy<Value = DOp> {
    let c = 0usize..4;
    prop_oneof![
        10 => (c.clone(), len_strategy(), prop_oneof![20 => Just(0u32), 1 => 1u32..=u32::MAX])
            .prop_map(|(client, size, flags)| DOp::Alloc { client, size, flags }),
        6 => (c.clone(), any::<usize>()).prop_map(|(client, i)| DOp::Free { client, i }),
        1 => (c.clone(), any::<usize>()).prop_map(|(client, i)| DOp::FreeForeign { client, i }),
        1 => (c.clone(), any::<usize>()).prop_map(|(client, i)| DOp::FreeStale { client, i }),
        1 => (c.clone(), any::<u32>()).prop_map(|(client, handle)| DOp::FreeAny { client, handle }),
        1 => (c.clone(), any::<usize>()).prop_map(|(client, i)| DOp::FreeBadPad { client, i }),
        1 => c.prop_map(|client| DOp::Reopen { client }),
    ]
}

struct DevModel {
    space: Space,
    limit: u64,
    /// Per open (its `client`): its live allocation handles.
    clients: Vec<(u32, Vec<u32>)>,
    /// allocation handle -> (client, offset, size)
    allocs: BTreeMap<u32, (u32, u64, u64)>,
    /// Handles freed (or released by a close).
    stale: Vec<u32>,
}

impl DevModel {
    fn client_bytes(&self, client: u32) -> u64 {
        self.allocs
            .values()
            .filter(|&&(c, _, _)| c == client)
            .map(|&(_, _, s)| s)
            .sum()
    }

    fn remove(&mut self, handle: u32) {
        let (client, offset, _) = self.allocs.remove(&handle).unwrap();
        self.space.live.remove(&offset);
        for (c, hs) in &mut self.clients {
            if *c == client {
                hs.retain(|&h| h != handle);
            }
        }
        self.stale.push(handle);
    }
}

fn ioctl<T: Wire>(
    dev: &mut DeviceCore<HeapPlatform>,
    client: u32,
    req: u32,
    args: &mut T,
) -> Result<(), Errno> {
    let mut b = vec![0u8; T::SIZE];
    args.encode(&mut b);
    let r = dev.ioctl(client, req, &mut b, &mut NoUserMem);
    *args = T::decode(&b);
    r.map(|_| ()).map_err(|e| e.errno)
}

fn free_ioctl(
    dev: &mut DeviceCore<HeapPlatform>,
    client: u32,
    handle: u32,
    pad: u32,
) -> Result<(), Errno> {
    ioctl(
        dev,
        client,
        DRIVER_CMD_FREE_MEMORY,
        &mut HandleArgs { handle, pad },
    )
}

fn check_device(dev: &DeviceCore<HeapPlatform>, m: &DevModel) {
    let info = dev.info();
    assert_eq!(info.memory_used, m.space.used(), "device memory used");
    assert_eq!(info.memory_size, m.space.size);
    assert_eq!(info.client_memory_limit, m.limit);
    assert_eq!(
        dev.platform().backed_bytes(),
        m.space.used(),
        "backed bytes"
    );
    let mut sum = 0;
    for &(c, ref hs) in &m.clients {
        let u = dev.client_usage(c).expect("open client");
        let want = m.client_bytes(c);
        assert_eq!(u.memory_bytes, want, "client {c} memory");
        assert!(u.memory_bytes <= m.limit, "client {c} over its limit");
        assert_eq!(u.allocations as usize, hs.len(), "client {c} allocations");
        assert_eq!(dev.platform().backed_of(c), want, "client {c} backed");
        sum += u.memory_bytes;
    }
    let listed: u64 = dev.clients().map(|u| u.memory_bytes).sum();
    assert_eq!(listed, sum);
    assert_eq!(
        sum, info.memory_used,
        "clients' memory sums to the device's"
    );
}

fn open_client(dev: &mut DeviceCore<HeapPlatform>, pid: u32) -> u32 {
    dev.open(test_util::params(pid, Role::Client, pid == 1))
        .map_err(|e| e.error)
        .expect("open")
}

fn run_device(mem: u64, limit: u64, nclients: usize, ops: &[DOp]) {
    let mut dev = test_util::device_with(mem, limit);
    let page = u64::from(test_util::PAGE);
    let c0 = open_client(&mut dev, 1);
    dev.set_share_mode(c0, ShareMode::Shared).unwrap();
    let mut pid = 1;
    let mut clients = vec![(c0, Vec::new())];
    for _ in 1..nclients {
        pid += 1;
        clients.push((open_client(&mut dev, pid), Vec::new()));
    }
    let size = mem & !(page - 1);
    let mut m = DevModel {
        space: Space::new(size),
        // Shared, so without a limit each client may hold a quarter (ABI 1.4).
        limit: if limit == 0 {
            size / 4
        } else {
            limit.min(size)
        },
        clients,
        allocs: BTreeMap::new(),
        stale: Vec::new(),
    };
    check_device(&dev, &m);

    for op in ops {
        match op {
            DOp::Alloc {
                client,
                size,
                flags,
            } => {
                let c = m.clients[client % m.clients.len()].0;
                let len = match *size {
                    Len::Zero => 0,
                    Len::Units { pages, extra } => pages * page * 8 + extra,
                    Len::Whole { plus_one } => m.limit + u64::from(plus_one),
                    Len::Huge(d) => u64::MAX - d,
                };
                let held = m.client_bytes(c);
                let expect = if *flags != 0 || len == 0 {
                    Err(Errno::EINVAL)
                } else {
                    match round(len, page) {
                        None => Err(Errno::EOVERFLOW),
                        Some(r) if held.checked_add(r).is_none_or(|t| t > m.limit) => {
                            Err(Errno::ENOMEM)
                        }
                        Some(r) => match m.space.first_fit(r) {
                            None => Err(Errno::ENOMEM),
                            Some((o, _)) => Ok((o, r)),
                        },
                    }
                };
                let mut a = AllocMemoryArgs {
                    size: len,
                    flags: *flags,
                    ..Default::default()
                };
                let got = ioctl(&mut dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a)
                    .map(|()| (dva_offset(a.dev_addr).unwrap(), a.alloc_size));
                assert_eq!(got, expect, "client {c} alloc {len} (flags {flags:#x})");
                if let Ok((o, r)) = got {
                    assert_eq!(a.dev_addr % page, 0);
                    assert!(
                        !m.allocs.contains_key(&a.handle),
                        "handle reused while live"
                    );
                    m.space.live.insert(o, (r, a.handle));
                    m.allocs.insert(a.handle, (c, o, r));
                    m.clients
                        .iter_mut()
                        .find(|(h, _)| *h == c)
                        .unwrap()
                        .1
                        .push(a.handle);
                }
            }
            DOp::Free { client, i } => {
                let (c, hs) = &m.clients[client % m.clients.len()];
                if hs.is_empty() {
                    continue;
                }
                let (c, h) = (*c, hs[i % hs.len()]);
                assert_eq!(free_ioctl(&mut dev, c, h, 0), Ok(()), "free own {h:#x}");
                m.remove(h);
            }
            DOp::FreeForeign { client, i } => {
                let c = m.clients[client % m.clients.len()].0;
                let foreign: Vec<u32> = m
                    .allocs
                    .iter()
                    .filter(|(_, &(o, _, _))| o != c)
                    .map(|(&h, _)| h)
                    .collect();
                if foreign.is_empty() {
                    continue;
                }
                let h = foreign[i % foreign.len()];
                assert_eq!(
                    free_ioctl(&mut dev, c, h, 0),
                    Err(Errno::ENOENT),
                    "foreign {h:#x}"
                );
            }
            DOp::FreeStale { client, i } => {
                if m.stale.is_empty() {
                    continue;
                }
                let c = m.clients[client % m.clients.len()].0;
                let h = m.stale[i % m.stale.len()];
                // A table slot's generation would have to wrap (65536 reuses) for a stale
                // handle to resolve again.
                assert!(!m.allocs.contains_key(&h));
                assert_eq!(
                    free_ioctl(&mut dev, c, h, 0),
                    Err(Errno::ENOENT),
                    "stale {h:#x}"
                );
            }
            DOp::FreeAny { client, handle } => {
                let c = m.clients[client % m.clients.len()].0;
                let own = m.allocs.get(handle).is_some_and(|&(o, _, _)| o == c);
                let got = free_ioctl(&mut dev, c, *handle, 0);
                if own {
                    assert_eq!(got, Ok(()));
                    m.remove(*handle);
                } else {
                    assert_eq!(got, Err(Errno::ENOENT), "handle {handle:#x}");
                }
            }
            DOp::FreeBadPad { client, i } => {
                let (c, hs) = &m.clients[client % m.clients.len()];
                let h = if hs.is_empty() { 1 } else { hs[i % hs.len()] };
                assert_eq!(free_ioctl(&mut dev, *c, h, 1), Err(Errno::EINVAL), "pad");
            }
            DOp::Reopen { client } => {
                let k = client % m.clients.len();
                let (c, hs) = m.clients[k].clone();
                dev.close(c);
                for h in hs {
                    m.remove(h);
                }
                pid += 1;
                m.clients[k] = (open_client(&mut dev, pid), Vec::new());
            }
        }
        check_device(&dev, &m);
    }

    // Closing every client gives all memory back.
    for (c, hs) in std::mem::take(&mut m.clients) {
        dev.close(c);
        for h in hs {
            m.remove(h);
        }
        assert_eq!(dev.info().memory_used, m.space.used());
    }
    assert_eq!(dev.info().memory_used, 0);
    assert_eq!(dev.platform().backed_bytes(), 0);
    assert_eq!(dev.clients().count(), 0);
    // And the space is whole again: one client takes its full limit at offset 0.
    let c = open_client(&mut dev, pid + 1);
    let whole = m.limit & !(page - 1);
    let mut a = AllocMemoryArgs {
        size: whole,
        ..Default::default()
    };
    assert_eq!(ioctl(&mut dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a), Ok(()));
    assert_eq!((dva_offset(a.dev_addr), a.alloc_size), (Some(0), whole));
    dev.close(c);
    assert_eq!(dev.info().memory_used, 0);
}

proptest! {
    #![proptest_config(config(96))]

    /// Random ALLOC/FREE ioctls from up to four clients of `test_util::device()` (1 MiB,
    /// 512 KiB per client), of a device without a limit, and of one with a limit that is not
    /// a page multiple.
    #[test]
    fn device_memory_matches_model(
        (mem, limit) in prop_oneof![
            Just((test_util::MEM, test_util::CLIENT_LIMIT)),
            Just((256u64 << 10, 0u64)),
            Just((test_util::MEM + 100, 100_000u64)),
        ],
        nclients in 1usize..=4,
        ops in proptest::collection::vec(dop_strategy(), 0..100),
    ) {
        run_device(mem, limit, nclients, &ops);
    }
}
