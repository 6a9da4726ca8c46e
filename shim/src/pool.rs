//! [`MemPool`]: a caching sub-allocator over big device allocations, so that small buffers
//! cost no driver round trip each (the design of the Ascend backends' memory pools: reserve
//! big chunks, carve 64-byte aligned blocks, reuse freed blocks, lock around it all).
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use davinci_uapi::{DevAddr, Errno};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{range_error, sealed, BufferInner, DeviceMem, Held, Lease};

mod leased;
use leased::Parked;

/// Sizes and bounds of a [`MemPool`].
///
/// How a pool takes them ([`MemPool::with_options`], [`MemPool::try_with_options`]):
/// `align` is raised to a power of two of at least 64, `chunk_size` to at least `align`, and
/// a `chunk_size` whose chunk would not fit in `max_bytes` is **lowered to the largest chunk
/// that does** (`max_bytes` is the bound the pool promises; the chunk size is only how much
/// it reserves at a time, so a pool capped below one chunk means chunks of the whole cap:
/// `PoolOptions::default().max_bytes(1 << 20)` reserves 1 MiB chunks, not 4 MiB ones that
/// could never be reserved). [`MemPool::options`] says what is in force. Options no chunk
/// can honour, a `max_bytes` below the smallest chunk the pool can reserve for one block
/// (one device allocation unit, GET_INFO `mem_align`, 4096 bytes on the mock device; for
/// an `align` above it, `2 * align - mem_align`), are refused with `EINVAL` by
/// [`MemPool::try_with_options`]; [`MemPool::with_options`] cannot fail, and its every
/// `alloc` then fails with `ENOMEM` saying so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolOptions {
    /// Bytes reserved per driver allocation (larger requests get a chunk of their own size);
    /// lowered to fit `max_bytes` (see above).
    pub chunk_size: usize,
    /// Most device memory the pool holds at once; beyond it `alloc` fails with `ENOMEM`.
    pub max_bytes: u64,
    /// Block alignment (of the device address) and granularity: a power of two, at least 64;
    /// above the device's allocation unit (`mem_align`), chunks are reserved larger to make
    /// room.
    pub align: usize,
}

/// Options as a pool on a device with allocation unit `unit` takes them (see
/// [`PoolOptions`]): the options in force, and why no allocation can ever succeed, if so.
fn settle(asked: PoolOptions, unit: usize) -> (PoolOptions, Option<String>) {
    let mut o = asked;
    let Some(align) = o.align.max(64).checked_next_power_of_two() else {
        let why = format!(
            "pool options can never allocate: align {} has no power of two at or above it; \
             give a power of two of at least 64 (the default, 64, serves every operand)",
            o.align
        );
        // A power of two all the same, so `options()` stays one a pool could have.
        o.align = 1 << (usize::BITS - 1);
        o.chunk_size = o.chunk_size.max(o.align);
        return (o, Some(why));
    };
    o.align = align;
    o.chunk_size = o.chunk_size.max(o.align);
    let pad = o.align.saturating_sub(unit);
    // The smallest chunk: one block of `align` bytes, its alignment padding, in whole units.
    let smallest = o.align.checked_add(pad).and_then(|n| round_up(n, unit));
    let fits = smallest.is_some_and(|n| n as u64 <= o.max_bytes);
    if !fits {
        let align_note = if pad > 0 {
            format!(
                " (blocks aligned to {} bytes, above the device's {unit}-byte allocation unit, \
                 need chunks of at least 2 * align - {unit}; or lower align)",
                o.align
            )
        } else {
            format!(" (the device allocates in units of {unit} bytes)")
        };
        let smallest = smallest.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string());
        let why = format!(
            "pool options can never allocate: max_bytes {} is below the smallest chunk the \
             pool can reserve, {smallest} bytes{align_note}; raise max_bytes to at least \
             {smallest}",
            o.max_bytes
        );
        return (o, Some(why));
    }
    // A chunk too large for `max_bytes` (padding included, in whole units) becomes the
    // largest that fits: at least `align`, since `smallest` fits (and exceeds `pad`).
    let cap = usize::try_from(o.max_bytes).unwrap_or(usize::MAX);
    if o.chunk_size
        .checked_add(pad)
        .and_then(|n| round_up(n, unit))
        .is_none_or(|n| n > cap)
    {
        o.chunk_size = (cap - pad) & !(unit - 1);
    }
    (o, None)
}

impl PoolOptions {
    /// These options with `chunk_size` set (see the field).
    pub fn chunk_size(mut self, bytes: usize) -> Self {
        self.chunk_size = bytes;
        self
    }

    /// These options with `max_bytes` set (see the field).
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// These options with `align` set (see the field).
    pub fn align(mut self, bytes: usize) -> Self {
        self.align = bytes;
        self
    }
}

impl Default for PoolOptions {
    fn default() -> Self {
        Self {
            chunk_size: 4 << 20,
            max_bytes: 256 << 20,
            align: 64,
        }
    }
}

/// What a [`MemPool`] holds and has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Chunks reserved from the driver now.
    pub chunks: usize,
    /// Bytes reserved from the driver now.
    pub reserved_bytes: u64,
    /// Bytes handed out in live blocks (rounded to the alignment).
    pub in_use_bytes: u64,
    /// Live blocks.
    pub blocks: usize,
    /// Blocks handed out so far.
    pub allocs: u64,
    /// ALLOC_MEMORY calls made so far (one per chunk).
    pub driver_allocs: u64,
    /// Chunks given back to the driver so far (`trim`).
    pub driver_frees: u64,
    /// Blocks dropped while another client still imports them under a lease
    /// ([`PoolBuffer::export`] with [`Lifetime::Lease`](crate::Lifetime::Lease)): held out of reuse until the last
    /// import goes (looked at again when the pool needs room, and by `trim`).
    pub leased_blocks: usize,
}

struct Chunk {
    id: u64,
    buf: Arc<BufferInner>,
    /// Free ranges `(offset, len)`, sorted by offset, never adjacent (coalesced).
    free: Vec<(usize, usize)>,
    used: usize,
}

impl Chunk {
    /// The first free range that holds `size` bytes starting at a device address aligned to
    /// `align`: its offset. (Chunks are only page-aligned, so above the page size a block may
    /// start past the beginning of its free range; the bytes before it stay free.)
    fn take(&mut self, size: usize, align: usize) -> Option<usize> {
        let base = self.buf.dev_addr().0;
        let mask = align as u64 - 1;
        let pad_of = |off: usize| -> usize {
            let addr = base.wrapping_add(off as u64);
            (addr.wrapping_neg() & mask) as usize
        };
        let i = self
            .free
            .iter()
            .position(|&(off, l)| pad_of(off).checked_add(size).is_some_and(|need| need <= l))?;
        let (off, l) = self.free[i];
        let pad = pad_of(off);
        let start = off + pad;
        let rest = l - pad - size;
        match (pad, rest) {
            (0, 0) => {
                self.free.remove(i);
            }
            (0, _) => self.free[i] = (start + size, rest),
            (_, 0) => self.free[i] = (off, pad),
            _ => {
                self.free[i] = (off, pad);
                self.free.insert(i + 1, (start + size, rest));
            }
        }
        self.used += size;
        Some(start)
    }

    fn give(&mut self, off: usize, size: usize) {
        let i = self.free.partition_point(|&(o, _)| o < off);
        self.free.insert(i, (off, size));
        // Merge with the next range, then with the previous one.
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
        self.used -= size;
    }
}

struct State {
    chunks: Vec<Chunk>,
    parked: Vec<Parked>,
    next_id: u64,
    stats: PoolStats,
}

struct PoolInner {
    dev: Device,
    opts: PoolOptions,
    /// The device's allocation unit (GET_INFO `mem_align`): chunks are whole units.
    unit: usize,
    /// Why no allocation can succeed with these options (said by every `alloc`).
    never: Option<String>,
    state: Mutex<State>,
}

impl PoolInner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements that can panic (none do): keep going.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A thread-safe caching allocator of device memory. Cheap to clone (clones share the pool).
///
/// Blocks are carved from chunks reserved with ALLOC_MEMORY; a freed block goes back to its
/// chunk's free list and is reused by later allocations (first fit, neighbours merged). A
/// block is freed when its [`PoolBuffer`] is dropped and no queued task built from it by the
/// [`task`](crate::task) builders is left unreaped: a block with work queued on it returns to
/// the pool only after that work completed (stream-ordered, like `cudaFreeAsync`), so a
/// queued task never writes into the block's next owner. Chunks stay reserved until [`trim`](Self::trim) or until
/// the pool and all its blocks are gone. The pool never holds more than `max_bytes`.
/// `Send + Sync`: one pool serves every thread.
#[derive(Clone)]
pub struct MemPool {
    inner: Arc<PoolInner>,
}

impl fmt::Debug for MemPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemPool")
            .field("options", &self.inner.opts)
            .field("stats", &self.stats())
            .finish()
    }
}

fn round_up(n: usize, align: usize) -> Option<usize> {
    Some(n.checked_add(align - 1)? & !(align - 1))
}

/// The device's allocation unit: GET_INFO `mem_align` (a power of two of at least 64 from
/// every driver; 4096 if a driver said otherwise).
fn allocation_unit(dev: &Device) -> usize {
    let a = dev.info().mem_align as usize;
    if a.is_power_of_two() && a >= 64 {
        a
    } else {
        4096
    }
}

impl MemPool {
    /// A pool on `dev` with default options (4 MiB chunks, at most 256 MiB, 64-byte blocks).
    pub fn new(dev: &Device) -> MemPool {
        Self::with_options(dev, PoolOptions::default())
    }

    /// A pool with explicit options, taken as [`PoolOptions`] says: the alignment raised to
    /// a power of two of at least 64, the chunk to at least the alignment and lowered to fit
    /// `max_bytes`. Options that can never allocate (`max_bytes` below the smallest chunk)
    /// still make a pool, whose every `alloc` fails with `ENOMEM` saying why;
    /// [`try_with_options`](Self::try_with_options) refuses them instead.
    pub fn with_options(dev: &Device, opts: PoolOptions) -> MemPool {
        let unit = allocation_unit(dev);
        let (opts, never) = settle(opts, unit);
        Self::make(dev, opts, unit, never)
    }

    /// [`with_options`](Self::with_options), refusing options that can never allocate.
    ///
    /// # Errors
    /// `EINVAL` when `max_bytes` is below the smallest chunk the pool can reserve (one
    /// device allocation unit, or `2 * align - unit` for an alignment above it); the message
    /// names both numbers and the `max_bytes` that would do.
    pub fn try_with_options(dev: &Device, opts: PoolOptions) -> Result<MemPool> {
        let unit = allocation_unit(dev);
        match settle(opts, unit) {
            (_, Some(why)) => Err(Error::new(Errno::EINVAL, "MemPool::with_options", why)),
            (opts, None) => Ok(Self::make(dev, opts, unit, None)),
        }
    }

    fn make(dev: &Device, opts: PoolOptions, unit: usize, never: Option<String>) -> MemPool {
        MemPool {
            inner: Arc::new(PoolInner {
                dev: dev.clone(),
                opts,
                unit,
                never,
                state: Mutex::new(State {
                    chunks: Vec::new(),
                    parked: Vec::new(),
                    next_id: 1,
                    stats: PoolStats::default(),
                }),
            }),
        }
    }

    /// The options in force.
    pub fn options(&self) -> PoolOptions {
        self.inner.opts
    }

    /// Counters and sizes.
    pub fn stats(&self) -> PoolStats {
        let s = self.inner.lock();
        PoolStats {
            chunks: s.chunks.len(),
            ..s.stats
        }
    }

    /// A block of at least `len` bytes (64-byte aligned device address, zeroed only if never
    /// used before: reused blocks keep old contents, as with any caching allocator).
    pub fn alloc(&self, len: usize) -> Result<PoolBuffer> {
        const OP: &str = "MemPool::alloc";
        let _span = crate::trace::pool(&self.inner.dev, "pool alloc", len);
        let opts = self.inner.opts;
        if len == 0 {
            return Err(Error::new(Errno::EINVAL, OP, "allocation of 0 bytes"));
        }
        let size = round_up(len, opts.align)
            .ok_or_else(|| Error::new(Errno::EOVERFLOW, OP, "size overflows"))?;
        let mut s = self.inner.lock();
        let found = s.chunks.iter_mut().find_map(|c| {
            c.take(size, opts.align)
                .map(|off| (c.id, c.buf.clone(), off))
        });
        let (chunk_id, buf, offset) = match found {
            Some(v) => v,
            None => {
                // Room to align the block inside a chunk aligned to the allocation unit when
                // the alignment is larger than the unit.
                let unit = self.inner.unit;
                let pad = opts.align.saturating_sub(unit);
                let chunk_len = size
                    .max(opts.chunk_size)
                    .checked_add(pad)
                    .and_then(|n| round_up(n, unit))
                    .ok_or_else(|| Error::new(Errno::EOVERFLOW, OP, "size overflows"))?;
                let too_much = |s: &State| {
                    s.stats
                        .reserved_bytes
                        .checked_add(chunk_len as u64)
                        .is_none_or(|total| total > opts.max_bytes)
                };
                if leased::reclaim(&mut s) > 0 {
                    drop(s);
                    return self.alloc(len);
                }
                if too_much(&s) {
                    Self::release_empty(&mut s);
                }
                if let Some(why) = &self.inner.never {
                    return Err(Error::new(Errno::ENOMEM, OP, why.clone()));
                }
                if too_much(&s) {
                    return Err(Error::new(
                        Errno::ENOMEM,
                        OP,
                        format!(
                            "a {len}-byte block needs a new {chunk_len}-byte chunk, but the pool \
                             already holds {} of its {} bytes",
                            s.stats.reserved_bytes, opts.max_bytes
                        ),
                    ));
                }
                let buf = self.inner.dev.alloc(chunk_len)?.inner().clone();
                let id = s.next_id;
                s.next_id += 1;
                s.stats.driver_allocs += 1;
                s.stats.reserved_bytes += chunk_len as u64;
                let mut chunk = Chunk {
                    id,
                    buf: buf.clone(),
                    free: vec![(0, chunk_len)],
                    used: 0,
                };
                // The chunk is empty and holds `size` plus any alignment padding.
                let Some(off) = chunk.take(size, opts.align) else {
                    s.chunks.push(chunk);
                    return Err(Error::other(
                        OP,
                        format!(
                            "a new {chunk_len}-byte chunk cannot hold a {size}-byte block aligned \
                             to {}",
                            opts.align
                        ),
                    ));
                };
                s.chunks.push(chunk);
                (id, buf, off)
            }
        };
        s.stats.allocs += 1;
        s.stats.blocks += 1;
        s.stats.in_use_bytes += size as u64;
        Ok(PoolBuffer {
            inner: Arc::new(BlockInner {
                pool: self.inner.clone(),
                chunk: buf,
                chunk_id,
                offset,
                len,
                size,
                exported: AtomicBool::new(false),
            }),
        })
    }

    fn release_empty(s: &mut State) -> usize {
        let before = s.chunks.len();
        let mut freed = 0u64;
        s.chunks.retain(|c| {
            let empty = c.used == 0;
            if empty {
                freed += c.buf.capacity();
            }
            !empty
        });
        let n = before - s.chunks.len();
        s.stats.reserved_bytes = s.stats.reserved_bytes.saturating_sub(freed);
        s.stats.driver_frees += n as u64;
        n
    }

    /// Gives chunks with no live block back to the driver (blocks held for leases first
    /// looked at again); returns how many.
    pub fn trim(&self) -> usize {
        let mut s = self.inner.lock();
        leased::reclaim(&mut s);
        Self::release_empty(&mut s)
    }
}

/// A block of a [`MemPool`]. Returns to the pool when dropped, or, with tasks built from it
/// still queued, once the last of them has completed and been reaped (see [`MemPool`]).
/// `Send + Sync`.
pub struct PoolBuffer {
    inner: Arc<BlockInner>,
}

/// A block itself, shared by its [`PoolBuffer`] and the leases of queued tasks; back to the
/// pool when the last is gone.
pub struct BlockInner {
    pool: Arc<PoolInner>,
    chunk: Arc<BufferInner>,
    chunk_id: u64,
    offset: usize,
    len: usize,
    size: usize,
    /// Exported ([`PoolBuffer::export`]): its return to the pool ends the exports first.
    exported: AtomicBool,
}

impl fmt::Debug for PoolBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuffer")
            .field("dev_addr", &format_args!("{:#x}", self.dev_addr()))
            .field("len", &self.inner.len)
            .finish()
    }
}

impl PoolBuffer {
    /// Bytes reserved for this block (the length rounded up to the pool's alignment).
    pub fn capacity(&self) -> usize {
        self.inner.size
    }

    /// Queued tasks that name this block and have not been reaped yet (its return to the
    /// pool waits for them).
    pub fn pending_uses(&self) -> usize {
        Arc::strong_count(&self.inner) - 1
    }
}

impl Held for BlockInner {
    fn device(&self) -> &Device {
        self.chunk.device()
    }
    fn view(&self) -> Option<(&davinci_shm::SharedMapping, usize)> {
        Some((self.chunk.shared(), self.offset))
    }
}

impl sealed::Leased for PoolBuffer {
    fn lease(&self) -> Lease {
        self.inner.clone()
    }
}

impl DeviceMem for PoolBuffer {
    fn dev_addr(&self) -> DevAddr {
        self.inner.chunk.dev_addr() + self.inner.offset as u64
    }

    fn len(&self) -> usize {
        self.inner.len
    }

    fn host_mapping(&self) -> crate::HostMapping {
        let b = &self.inner;
        crate::HostMapping::new(b.clone(), b.chunk.host_addr() + b.offset, b.len)
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let b = &self.inner;
        if offset.checked_add(data.len()).is_none_or(|e| e > b.len) {
            return Err(range_error("PoolBuffer::write", offset, data.len(), b.len));
        }
        b.chunk.write(b.offset + offset, data)
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let b = &self.inner;
        if offset.checked_add(out.len()).is_none_or(|e| e > b.len) {
            return Err(range_error("PoolBuffer::read", offset, out.len(), b.len));
        }
        b.chunk.read(b.offset + offset, out)
    }
}

impl Drop for BlockInner {
    fn drop(&mut self) {
        let _span = crate::trace::pool(&self.pool.dev, "pool free", self.size);
        let leased = self.end_exports();
        let mut s = self.pool.lock();
        if leased {
            self.hold_for_lease(&mut s);
        } else if let Some(c) = s.chunks.iter_mut().find(|c| c.id == self.chunk_id) {
            c.give(self.offset, self.size);
        }
        s.stats.blocks = s.stats.blocks.saturating_sub(1);
        s.stats.in_use_bytes = s.stats.in_use_bytes.saturating_sub(self.size as u64);
    }
}

#[cfg(test)]
#[cfg(feature = "embedded")]
mod tests {
    use super::*;

    fn opts(chunk: usize, max: u64, align: usize) -> PoolOptions {
        PoolOptions::default()
            .chunk_size(chunk)
            .max_bytes(max)
            .align(align)
    }

    #[test]
    fn a_chunk_larger_than_max_bytes_is_lowered_to_the_largest_that_fits() {
        const MIB: usize = 1 << 20;
        let chunk = |asked: PoolOptions| {
            let (o, never) = settle(asked, 4096);
            assert_eq!(never, None, "{asked:?}");
            o.chunk_size
        };
        // The trap: the default 4 MiB chunk under a 1 MiB cap.
        assert_eq!(chunk(PoolOptions::default().max_bytes(MIB as u64)), MIB);
        assert_eq!(chunk(opts(8 * MIB, 6 * MIB as u64, 64)), 6 * MIB);
        // Whole allocation units only.
        assert_eq!(chunk(opts(4 * MIB, MIB as u64 + 1000, 64)), MIB);
        assert_eq!(chunk(opts(4 * MIB, 4095 + 4096, 64)), 4096);
        // A chunk that fits is left alone, and so is one that fits only once rounded down.
        assert_eq!(chunk(opts(MIB, 4 * MIB as u64, 64)), MIB);
        assert_eq!(chunk(opts(10_000, 12_288, 64)), 10_000);
        assert_eq!(chunk(opts(10_000, 12_287, 64)), 8192);
        // Above the unit, a chunk keeps room for the alignment's padding.
        assert_eq!(chunk(opts(4 * MIB, 12_288, 8192)), 8192);
        assert_eq!(chunk(opts(4 * MIB, 64 << 10, 16384)), (64 << 10) - 12_288);
        // The alignment is raised as before, the chunk to at least the alignment.
        let (o, _) = settle(opts(0, 1 << 30, 100), 4096);
        assert_eq!((o.align, o.chunk_size), (128, 128));
    }

    #[test]
    fn options_that_can_never_allocate_say_why_with_the_numbers() {
        for (asked, smallest) in [
            (opts(4096, 4095, 64), "4096"),
            (opts(4096, 0, 64), "4096"),
            (opts(4096, 100, 4096), "4096"),
            (opts(4096, 12_287, 8192), "12288"),
        ] {
            let (o, never) = settle(asked, 4096);
            let why = never.unwrap_or_else(|| panic!("{asked:?} was taken"));
            assert!(
                why.contains(&format!("max_bytes {} ", asked.max_bytes))
                    && why.contains(&format!("smallest chunk the pool can reserve, {smallest}"))
                    && why.contains("raise max_bytes"),
                "{why}"
            );
            // Nothing is lowered for options no chunk can honour.
            assert_eq!(o.chunk_size, asked.chunk_size.max(o.align), "{asked:?}");
        }
        let (_, never) = settle(opts(4096, 12_287, 8192), 4096);
        assert!(never.is_some_and(|w| w.contains("or lower align")));
        // An alignment with no power of two above it (it used to become 64 silently).
        let huge = (1usize << (usize::BITS - 1)) + 1;
        let (o, never) = settle(opts(4096, u64::MAX, huge), 4096);
        assert!(
            never.is_some_and(|w| w.contains(&format!("align {huge} has no power of two"))),
            "{huge}"
        );
        assert!(o.align.is_power_of_two() && o.chunk_size >= o.align);
        // The largest power of two is taken: only a chunk of 2^64 - 4096 bytes holds a block.
        let (o, never) = settle(opts(4096, u64::MAX, 1 << (usize::BITS - 1)), 4096);
        assert_eq!((o.align, never), (1 << (usize::BITS - 1), None));
        let (_, never) = settle(opts(4096, u64::MAX - 4096, 1 << (usize::BITS - 1)), 4096);
        assert!(never.is_some());
    }

    #[test]
    fn a_pool_capped_below_its_chunk_allocates_and_impossible_options_are_refused() {
        let dev = Device::embedded().unwrap();
        // Capped at 1 MiB with the default 4 MiB chunk: every allocation failed before.
        let pool = MemPool::with_options(&dev, PoolOptions::default().max_bytes(1 << 20));
        assert_eq!(pool.options().chunk_size, 1 << 20);
        let small = pool.alloc(4096).expect("a 4 KiB block under a 1 MiB cap");
        assert_eq!(pool.stats().reserved_bytes, 1 << 20);
        let rest = pool.alloc((1 << 20) - 4096).expect("the rest of the chunk");
        assert_eq!(pool.stats().driver_allocs, 1);
        assert_eq!(
            pool.alloc(64).unwrap_err().errno(),
            Some(Errno::ENOMEM),
            "the cap holds"
        );
        drop((small, rest));
        let same = MemPool::try_with_options(&dev, PoolOptions::default().max_bytes(1 << 20))
            .expect("the same options, checked");
        assert_eq!(same.options(), pool.options());

        // A cap below one allocation unit: refused at creation, or said by every alloc.
        let tiny = PoolOptions::default().max_bytes(100);
        let e = MemPool::try_with_options(&dev, tiny).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EINVAL));
        assert!(
            e.message().contains("max_bytes 100 is below") && e.message().contains("4096"),
            "{e}"
        );
        let pool = MemPool::with_options(&dev, tiny);
        let e = pool.alloc(64).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::ENOMEM));
        assert!(e.message().contains("can never allocate"), "{e}");
        assert_eq!(pool.stats().driver_allocs, 0);
        // So is an alignment no pool can give, however large the cap.
        let odd = PoolOptions::default().align(usize::MAX).max_bytes(u64::MAX);
        let e = MemPool::try_with_options(&dev, odd).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EINVAL));
        let e = MemPool::with_options(&dev, odd).alloc(64).unwrap_err();
        assert!(e.message().contains("has no power of two"), "{e}");
    }

    #[test]
    fn chunk_free_list_splits_and_merges() {
        let dev = Device::embedded().unwrap();
        let buf = dev.alloc(4096).unwrap().inner().clone();
        let mut c = Chunk {
            id: 1,
            buf,
            free: vec![(0, 4096)],
            used: 0,
        };
        let a = c.take(64, 64).unwrap();
        let b = c.take(128, 64).unwrap();
        let d = c.take(64, 64).unwrap();
        assert_eq!((a, b, d), (0, 64, 192));
        c.give(b, 128);
        assert_eq!(c.free, vec![(64, 128), (256, 3840)]);
        // First fit reuses the hole.
        assert_eq!(c.take(64, 64), Some(64));
        c.give(64, 64);
        c.give(a, 64);
        assert_eq!(c.free, vec![(0, 192), (256, 3840)]);
        c.give(d, 64);
        assert_eq!(c.free, vec![(0, 4096)], "everything merged back");
        assert_eq!(c.used, 0);
        assert_eq!(c.take(8192, 64), None);
    }

    #[test]
    fn blocks_start_at_device_addresses_aligned_beyond_the_chunk() {
        let dev = Device::embedded().unwrap();
        let buf = dev.alloc(3 * 4096).unwrap().inner().clone();
        let base = buf.dev_addr().0;
        let mut c = Chunk {
            id: 1,
            buf,
            free: vec![(0, 3 * 4096)],
            used: 0,
        };
        let pad = (base.wrapping_neg() & 8191) as usize;
        let off = c.take(4096, 8192).unwrap();
        assert_eq!(off, pad);
        assert_eq!((base + off as u64) % 8192, 0);
        // The padding before the block stays free, and so does the rest.
        let mut want = Vec::new();
        if pad > 0 {
            want.push((0, pad));
        }
        if pad + 4096 < 3 * 4096 {
            want.push((pad + 4096, 3 * 4096 - pad - 4096));
        }
        assert_eq!(c.free, want);
        c.give(off, 4096);
        assert_eq!(c.free, vec![(0, 3 * 4096)]);
        assert_eq!(c.used, 0);
    }
}
