//! Raw access to shared memory and to the doorbell (ordinary builds): the only module of the
//! non-loom build with `unsafe` blocks that touch memory.
//!
//! Rules kept here:
//! * no `&`/`&mut` to shared bytes is ever formed; header fields are reached with
//!   [`AtomicU32::from_ptr`] (an atomic view is what the other side's concurrent writes
//!   require), slots are copied whole with one volatile read or write;
//! * every offset is computed from the locally checked [`Geometry`], never from shared fields.
#![allow(unsafe_code)]

use core::mem::{align_of, size_of, MaybeUninit};
use core::ptr::{self, NonNull};

use crate::region::{Field, Geometry};
use crate::slot::Slot;
use crate::sync::{doorbell_hardware_fence, AtomicU32, Ordering};
use crate::RingError;

/// Raw view of one mapped ring: header and slots.
///
/// Not `Clone`: each ring end owns its region, so there is one producer end and one consumer
/// end per region value (build one region per end over the same mapping).
#[derive(Debug)]
pub struct RingRegion {
    base: NonNull<u8>,
    geom: Geometry,
}

// SAFETY: a `RingRegion` is a pointer plus constants. Everything done through it is an atomic
// access to a header field or a whole-slot volatile copy made by the single end that owns the
// region (`&mut self` methods), with the protocol's acquire/release ordering the slot copies.
// The memory stays valid wherever the region is moved, per the contract of `new`.
unsafe impl Send for RingRegion {}
// SAFETY: the only `&self` operations that other threads could run concurrently are atomic
// header accesses (`flags`, `error`, `dropped`, `init`); slot copies need the owning end's
// `&mut` or happen on indices the protocol gives to exactly one side at a time.
unsafe impl Sync for RingRegion {}

impl RingRegion {
    /// A view of the ring mapped at `base`: `len` bytes, `entries` slots of `slot_size` bytes.
    ///
    /// Checks that `entries` is a power of two within uapi's bounds, that `len` holds the
    /// 192-byte header plus `entries * slot_size` (checked arithmetic), and that `base` is
    /// non-null and 64-byte aligned. Nothing is read from the memory.
    ///
    /// # Safety
    /// `base` is valid for reads and writes of `len` bytes for the lifetime of the region (and
    /// of every end built on it), and 64-byte aligned. The memory may be written concurrently
    /// by the other side (another process or the device, possibly hostile); within this
    /// address space, no other code accesses it except through ring ends built on regions over
    /// the same memory, at most one producer end and one consumer end at a time.
    pub unsafe fn new(
        base: *mut u8,
        len: usize,
        entries: u32,
        slot_size: usize,
    ) -> Result<Self, RingError> {
        let geom = Geometry::new(len, entries, slot_size)?;
        let base = NonNull::new(base).ok_or(RingError::Misaligned)?;
        if base.as_ptr().align_offset(64) != 0 {
            return Err(RingError::Misaligned);
        }
        Ok(Self { base, geom })
    }

    pub(crate) fn geometry(&self) -> Geometry {
        self.geom
    }

    /// The header field `f`, as an atomic.
    pub(crate) fn field(&self, f: Field) -> &AtomicU32 {
        // SAFETY: `f.offset() + 4 <= 192 <= len` (const-asserted in `region`, and `Geometry::new`
        // checked `len >= 192 + ...`), so the pointer is in bounds of the mapping; it is 4-byte
        // aligned because `base` is 64-byte aligned and the offset is a multiple of 4. The
        // memory is valid for reads and writes for the region's lifetime (contract of `new`),
        // which bounds the returned reference. Every access to header fields, from this crate
        // and from the other side, is atomic (4-byte aligned word accesses).
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(f.offset()).cast::<u32>()) }
    }

    /// The address of the slot of index `index` (masked with the local mask), for slots of
    /// `T`.
    ///
    /// # Safety
    /// `size_of::<T>() == self.geom.slot_size` (see `slot::Typed`).
    #[inline(always)]
    unsafe fn slot_ptr<T: Slot>(&self, index: u32) -> *mut T {
        // `size_of::<T>()` (a constant) instead of the geometry's slot size, equal to it
        // (caller): a shift instead of a multiplication.
        let offset = self.geom.slot_offset(index, size_of::<T>());
        // SAFETY: `offset + size_of::<T>() <= 192 + entries * slot_size <= len`
        // (Geometry::new, and `size_of::<T>() == slot_size` by the caller), so the result is in
        // bounds of the mapping.
        unsafe { self.base.as_ptr().add(offset).cast::<T>() }
    }

    /// Copies the slot of index `index` (masked with the local mask) out, reading each byte
    /// once: with one volatile read of `T`, or, for a slot made of whole 8-byte words (a
    /// descriptor, an event record), one volatile read of each word. Word by word, the copy
    /// goes straight to registers; a volatile read of the whole struct was stored to the stack
    /// and loaded again field by field.
    ///
    /// # Safety
    /// `size_of::<T>() == self.geom.slot_size` and `align_of::<T>() <= 64` (see `slot::Typed`).
    #[inline(always)]
    pub(crate) unsafe fn read_slot<T: Slot>(&self, index: u32) -> T {
        // SAFETY: the caller's contract is `slot_ptr`'s.
        let src = unsafe { self.slot_ptr::<T>(index) };
        if size_of::<T>().is_multiple_of(8) && align_of::<T>() >= 8 {
            let mut out = MaybeUninit::<T>::uninit();
            let (from, to) = (src.cast::<u64>(), out.as_mut_ptr().cast::<u64>());
            for k in 0..size_of::<T>() / 8 {
                // SAFETY: word `k` lies inside the slot (`k * 8 + 8 <= size_of::<T>()`), which
                // is in bounds of the mapping (`slot_ptr`) and 8-byte aligned (the slot is
                // aligned for `T`, `align_of::<T>() >= 8`: base 64-aligned + 192 +
                // a multiple of `size_of::<T>()`); `to + k` lies inside `out`. Volatile: each
                // word is read exactly once, whatever the other side writes meanwhile; the
                // protocol (acquire of the peer's tail) orders it after the peer's write.
                unsafe { to.add(k).write(ptr::read_volatile(from.add(k))) };
            }
            // SAFETY: every byte of `out` was written above (`size_of::<T>()` is a multiple of
            // 8), and `T: Slot` makes any bytes a valid `T`.
            return unsafe { out.assume_init() };
        }
        // SAFETY: in bounds (`slot_ptr`), aligned for `T` because `align_of::<T>()` divides 64
        // and `size_of::<T>()`; `T: Slot` makes any bytes a valid `T`. Volatile: the copy is
        // made exactly once and never re-read, whatever the other side writes meanwhile. The
        // protocol (acquire of the peer's tail) orders it after the peer's write of this slot.
        unsafe { ptr::read_volatile(src) }
    }

    /// Copies `item` into the slot of index `index` (masked), writing each byte once: with one
    /// volatile write, or word by word as [`read_slot`](Self::read_slot) reads.
    ///
    /// # Safety
    /// As for [`read_slot`](Self::read_slot).
    #[inline(always)]
    pub(crate) unsafe fn write_slot<T: Slot>(&self, index: u32, item: &T) {
        // SAFETY: the caller's contract is `slot_ptr`'s.
        let dst = unsafe { self.slot_ptr::<T>(index) };
        if size_of::<T>().is_multiple_of(8) && align_of::<T>() >= 8 {
            let from = ptr::from_ref(item).cast::<u64>();
            for k in 0..size_of::<T>() / 8 {
                // SAFETY: word `k` of `item` (aligned: `align_of::<T>() >= 8`; `T: Slot` has no
                // padding, so every byte is initialised) and of the slot (in bounds and
                // aligned as in `read_slot`; the memory is writable, contract of `new`). The
                // protocol (acquire of the peer's head) orders this write after the peer's
                // last read of the slot.
                unsafe { ptr::write_volatile(dst.cast::<u64>().add(k), from.add(k).read()) };
            }
            return;
        }
        // SAFETY: in bounds and aligned as in `read_slot`; the memory is writable (contract of
        // `new`). The protocol (acquire of the peer's head) orders this write after the peer's
        // last read of the slot.
        unsafe { ptr::write_volatile(dst, *item) }
    }
}

impl RingRegion {
    /// Copies the `T` that `slot` finds in each of `items` into the slots of indices `index`,
    /// `index + 1`, ... (masked; the slot address computed once, then stepped: a batch's
    /// descriptors cost their copy and little more) with non-temporal stores, four 16-byte
    /// ones per slot, when a slot is one whole cache line (`size_of::<T>() == 64`) and the CPU
    /// has them (x86_64 with SSE2; never in the kernel, whose target has no SSE); otherwise
    /// as [`write_slot`](Self::write_slot). Returns whether the stores were non-temporal: then
    /// [`store_fence`](Self::store_fence) must run before the store that publishes the slots,
    /// because non-temporal stores are not ordered by a Release store (x86: they are weakly
    /// ordered, only `sfence` orders them).
    ///
    /// Why: a plain store to a slot must first take its line back from the device's cache,
    /// where it stayed when the device read the slot one ring ago (a read for ownership, a
    /// cross-core round trip per descriptor); a non-temporal store writes the whole line
    /// without reading it. For batches: a lone descriptor is read by the device at once,
    /// from cache, faster than from memory.
    ///
    /// # Safety
    /// As for [`read_slot`](Self::read_slot), and the run does not wrap:
    /// `(index & mask) as usize + items.len() <= entries`.
    #[inline(always)]
    pub(crate) unsafe fn write_run_streaming<S, T: Slot>(
        &self,
        index: u32,
        items: &[S],
        slot: impl Fn(&S) -> &T,
    ) -> bool {
        debug_assert!(
            (index & self.geom.mask) as usize + items.len() <= self.geom.entries as usize
        );
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if size_of::<T>() == 64 {
            use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
            // SAFETY: the caller's contract is `slot_ptr`'s.
            let mut dst = unsafe { self.slot_ptr::<T>(index) };
            for item in items {
                let (to, from) = (
                    dst.cast::<__m128i>(),
                    ptr::from_ref(slot(item)).cast::<__m128i>(),
                );
                for k in 0..4 {
                    // SAFETY: `dst` is the slot of index
                    // `index + j` for the `j`-th item, in bounds because the run does not
                    // wrap (caller: `(index & mask) + items.len() <= entries`, and the slots
                    // of `0..entries` lie in the mapping, `Geometry::new`), 16-byte aligned
                    // (base 64-aligned + 192 + a multiple of 64); part `k` of the item is
                    // initialised (`T: Slot`, no padding; `loadu` needs no alignment).
                    unsafe { _mm_stream_si128(to.add(k), _mm_loadu_si128(from.add(k))) };
                }
                // SAFETY: one slot further: at most one past the run's last slot, which is
                // at most the end of the slots (in bounds or one past the mapping's slots;
                // never dereferenced past the run).
                dst = unsafe { dst.add(1) };
            }
            return true;
        }
        for (k, item) in items.iter().enumerate() {
            // SAFETY: the caller's contract is `write_slot`'s (each index masked).
            unsafe { self.write_slot(index.wrapping_add(k as u32), slot(item)) };
        }
        false
    }

    /// Orders earlier non-temporal stores ([`write_run_streaming`](Self::write_run_streaming))
    /// before later stores: `sfence` (nothing where there are no such stores).
    #[inline(always)]
    pub(crate) fn store_fence(&self) {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        // SAFETY: `sfence` has no memory operands and no preconditions; SSE2 (hence SSE) is
        // enabled for this target (cfg above).
        unsafe {
            core::arch::x86_64::_mm_sfence()
        };
    }
}

/// The doorbell register: the one audited MMIO write of the host.
///
/// [`ring`](Self::ring) is `fence(Release)` followed by one volatile 32-bit write.
///
/// * **Ordering.** A Release fence followed by a *non-atomic* volatile write orders nothing in
///   Rust's memory model; what publishes the descriptors is the Release store of the tail (and
///   `Producer::publish`'s `fence(SeqCst)` right after it). The fence is kept for the CPU: it
///   keeps the slot and tail stores ahead of the doorbell store on weakly ordered machines
///   (x86: a compiler barrier; aarch64: `dmb ish`).
/// * **aarch64 and real DMA.** A device that reads the ring by DMA needs the stores visible to
///   the *outer-shareable* domain before the doorbell: Linux uses `dma_wmb()` = `dmb oshst`
///   (or `wmb()` = `dsb st`), stronger than the `dmb ish` Rust emits for fences. This crate
///   does not emit `dmb oshst` (inline asm we cannot test here): the kernel module must use
///   its own `writel()` (which has the barrier) instead of this type, and a user-space driver
///   for real hardware must add the barrier. The mock device, and coherent devices on x86,
///   need nothing more.
/// * **`volatile-register` caveat** (feature `mmio`, the default): `WO<u32>` is used through a
///   `&WO<u32>`, i.e. a reference to MMIO. References are `dereferenceable`, so LLVM may insert
///   spurious (non-volatile) reads of the register (rust-embedded/volatile-register#10,
///   japaric/vcell#10). For our doorbell that is harmless (a RAM-backed page in the mock; a
///   read of a write-only register has no side effect), but it is a reason to migrate to a
///   pointer-based volatile API (the `volatile` 0.5+ crate's `VolatilePtr`). Without `mmio`,
///   the write is `core::ptr::write_volatile` on the raw pointer, with no reference.
/// * In the embedded mock the doorbell is ordinary memory that the device thread reads with
///   atomic loads ([`DoorbellWatch`]); the mixed volatile write / atomic read is outside Rust's
///   model like all MMIO, and is a single aligned 32-bit store in practice.
#[derive(Debug)]
pub struct Doorbell {
    reg: *mut u32,
}

// SAFETY: the doorbell is a register address; writing it from another thread is as valid as
// from this one (the contract of `new` covers the whole lifetime). Not `Sync`: two threads
// ringing one doorbell through `&Doorbell` would race; ring ends are single-owner anyway.
unsafe impl Send for Doorbell {}

impl Doorbell {
    /// A doorbell at `reg`.
    ///
    /// # Safety
    /// `reg` points at the mapped doorbell register (4-byte aligned, writable) for the
    /// doorbell's lifetime, and nothing else in this address space writes it non-atomically
    /// concurrently.
    pub unsafe fn new(reg: *mut u32) -> Self {
        Self { reg }
    }

    /// Writes `value` to a hardware doorbell register (`DAVINCI_FEAT_DOORBELL_MMIO`), after
    /// `fence(Release)`: the value the device asks for (GET_INFO's `doorbell_value`, ABI 1.4;
    /// for QEMU's ivshmem-doorbell `peer << 16 | vector`), not the tail. The write itself is
    /// the event. A software device's doorbell is rung with
    /// [`ring_counter`](Self::ring_counter) instead.
    pub fn ring(&self, value: u32) {
        doorbell_hardware_fence();
        #[cfg(feature = "mmio")]
        {
            // SAFETY: `WO<u32>` is `repr(transparent)` over `VolatileCell<u32>`, itself
            // `repr(transparent)` over `UnsafeCell<u32>`, so it has the layout of a `u32`; the
            // pointer is aligned and valid for the doorbell's lifetime (contract of `new`). The
            // reference is `dereferenceable`: see the type docs for why that is tolerable here.
            let reg = unsafe { &*self.reg.cast::<volatile_register::WO<u32>>() };
            // SAFETY: `WO::write` is unsafe only because register writes have side effects;
            // the side effect of this one (waking the device) is the point, and it has no
            // effect on this process's memory.
            unsafe { reg.write(value) };
        }
        #[cfg(not(feature = "mmio"))]
        {
            // SAFETY: aligned and writable for the doorbell's lifetime (contract of `new`).
            unsafe { ptr::write_volatile(self.reg, value) };
        }
    }

    /// Rings a doorbell that is a memory word a software device watches
    /// (`DAVINCI_FEAT_DOORBELL_FUTEX`): increments it atomically, so the value always changes,
    /// whoever else changed it meanwhile (the driver's own kicks increment it too). A device
    /// sleeping "until the doorbell differs from d0" therefore always wakes, even when the
    /// host rings twice with the same command-ring tail (after a publish, then after a reap):
    /// the lost wake-up of ABI 1.0's "write the tail". Relaxed: the doorbell publishes nothing
    /// (the tail and head stores before it did, behind the host's Dekker fence). Follow it with
    /// a `FUTEX_WAKE` on the word.
    pub fn ring_counter(&self) {
        // SAFETY: aligned and valid for reads and writes for the doorbell's lifetime (contract
        // of `new`), which bounds the reference; every access to the word in this address
        // space is atomic on a software device (the contract excludes concurrent non-atomic
        // writes).
        let word = unsafe { AtomicU32::from_ptr(self.reg) };
        word.fetch_add(1, Ordering::Relaxed);
    }

    /// The register's address (for `FUTEX_WAKE` by the shim on futex doorbells).
    pub fn as_ptr(&self) -> *mut u32 {
        self.reg
    }
}

/// The device side of a doorbell that is memory (the mock device's "MMIO register", or a
/// futex word): reads the last value written.
#[derive(Debug)]
pub struct DoorbellWatch {
    reg: *mut u32,
}

// SAFETY: only atomic loads are made through the pointer, valid for the watch's lifetime.
unsafe impl Send for DoorbellWatch {}
// SAFETY: as for `Send`: concurrent atomic loads are fine.
unsafe impl Sync for DoorbellWatch {}

impl DoorbellWatch {
    /// A watch of the doorbell word at `reg`.
    ///
    /// # Safety
    /// `reg` is 4-byte aligned and valid for reads and writes for the watch's lifetime (atomic
    /// loads require writable memory), and every access to it is atomic or a single aligned
    /// 32-bit volatile write (`Doorbell::ring`).
    pub unsafe fn new(reg: *const u32) -> Self {
        Self {
            reg: reg.cast_mut(),
        }
    }

    /// The doorbell's current value.
    ///
    /// Relaxed: the doorbell is a wake-up hint and publishes nothing. After waking, the device
    /// reads the tail with Acquire, and before sleeping again `prepare_sleep`'s fence makes it
    /// see any tail published before the doorbell was rung (loom checks the handshake with a
    /// Relaxed doorbell).
    pub fn value(&self) -> u32 {
        // SAFETY: aligned and valid for reads and writes for `self`'s lifetime (contract of
        // `new`), which bounds the reference; only atomic accesses are made through it.
        let word = unsafe { AtomicU32::from_ptr(self.reg) };
        word.load(Ordering::Relaxed)
    }

    /// The word's address (for `FUTEX_WAIT`).
    pub fn as_ptr(&self) -> *const u32 {
        self.reg
    }
}
