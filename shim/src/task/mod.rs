//! Tasks: descriptors over device buffers, checked on the host before they are submitted,
//! that keep the buffers they name alive until they have run.
//!
//! [`TaskDesc`]'s own constructors take raw device addresses and counts whose unit depends on
//! the opcode (FILL and COPY count bytes, ADD counts elements). These builders take
//! [`Region`]s of device memory instead (a whole [`DeviceMem`] or a byte range of one), derive
//! the count in the right unit, and refuse on the host what the device would refuse, naming
//! the operand: lengths that differ, misaligned addresses or lengths, empty or out-of-bounds
//! ranges. The result is a [`Task`]: the descriptor plus a lease of every buffer it names.
//! Set its `user_data` with [`Task::with_user_data`].
//!
//! # Buffer lifetimes
//!
//! A submitted [`Task`] keeps the memory it names: its stream holds the leases until the
//! task's completion is taken off the event ring (by `poll`, `synchronize`, or a submit
//! waiting for room), or until the stream is dropped (after the driver destroyed it, so
//! nothing of it runs any more). Dropping a [`DeviceBuffer`](crate::DeviceBuffer) or
//! [`PoolBuffer`](crate::PoolBuffer) while tasks on it are queued therefore frees it in
//! stream order (`cudaFreeAsync`), not at once: a queued FILL can never write into memory
//! that was handed out again. The design keeps tasks `'static` (no borrow of the buffers),
//! so a runtime can queue work and drop its buffers early, as CUDA and ACL programs do.
//!
//! Raw [`TaskDesc`]s name bare addresses that nothing keeps alive: they are submitted through
//! the `unsafe` [`Stream::submit_raw`](crate::Stream::submit_raw), for runtimes that manage
//! lifetimes themselves.
//!
//! ```
//! # fn main() -> davinci_shim::Result<()> {
//! # #[cfg(feature = "embedded")] {
//! use davinci_shim::{task, Device, DeviceMem, Region};
//! use std::time::Duration;
//! let dev = Device::embedded()?;
//! let (a, b, sum) = (dev.alloc(16)?, dev.alloc(16)?, dev.alloc(16)?);
//! a.write_slice(0, &[1.5f32, 2.0, 3.0, 4.0])?;
//! b.write_slice(0, &[0.5f32; 4])?;
//! let mut s = dev.create_context()?.create_stream()?;
//! s.submit(&task::add::<f32>(&sum, &a, &b)?.with_user_data(7))?;
//! // Half of `sum` to zero, by byte range:
//! s.submit(&task::fill(Region::range(&sum, 8..16)?, 0)?)?;
//! // Dropping a buffer with work queued on it is safe: it is freed once the work ran.
//! let scratch = dev.alloc(1 << 20)?;
//! s.submit(&task::fill(&scratch, 0xbad)?)?;
//! drop(scratch);
//! s.synchronize(Duration::from_secs(5))?;
//! assert_eq!(sum.read_vec::<f32>(0, 4)?, [2.0, 2.5, 0.0, 0.0]);
//! // Checked on the host: a 16-byte buffer does not receive a 12-byte sum.
//! let short = Region::range(&a, 0..12)?;
//! assert!(task::add::<f32>(&sum, short, &b).is_err());
//! # }
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod kernels;
mod operands;
pub(crate) mod params;

pub use kernels::{
    elementwise, fill_bytes, fill_u16, gemm, kernel, layer_norm, reduce, rms_norm, softmax,
};
pub use operands::{Matrix, Tensor};

use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Bound, RangeBounds};

use davinci_uapi::{DevAddr, Dtype, Errno, TaskDesc};

use crate::error::{Error, Result};
use crate::memory::sealed::Leased;
use crate::memory::{DeviceMem, Lease};

/// A byte range of device memory: a whole buffer (`&buf` converts) or part of one
/// ([`Region::range`]). Borrows the buffer; a task built from it leases it.
#[derive(Clone, Copy)]
pub struct Region<'a> {
    mem: &'a dyn Leased,
    addr: DevAddr,
    len: usize,
}

impl fmt::Debug for Region<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish()
    }
}

/// Regions are equal when they cover the same bytes.
impl PartialEq for Region<'_> {
    fn eq(&self, other: &Self) -> bool {
        (self.addr, self.len) == (other.addr, other.len)
    }
}

impl Eq for Region<'_> {}

impl<'a, T: DeviceMem> From<&'a T> for Region<'a> {
    fn from(mem: &'a T) -> Region<'a> {
        Region {
            mem,
            addr: mem.dev_addr(),
            len: mem.len(),
        }
    }
}

impl<'a> Region<'a> {
    /// Bytes `range` of `mem` (`..` for all of it). `ERANGE` if the range does not lie in it
    /// or runs backwards.
    pub fn range(mem: &'a impl DeviceMem, range: impl RangeBounds<usize>) -> Result<Region<'a>> {
        let len = mem.len();
        let start = match range.start_bound() {
            Bound::Included(&s) => Some(s),
            Bound::Excluded(&s) => s.checked_add(1),
            Bound::Unbounded => Some(0),
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.checked_add(1),
            Bound::Excluded(&e) => Some(e),
            Bound::Unbounded => Some(len),
        };
        match (start, end) {
            (Some(s), Some(e)) if s <= e && e <= len => Ok(Region {
                mem,
                addr: mem.dev_addr() + s as u64,
                len: e - s,
            }),
            (s, e) => {
                // As people write ranges: `[start, end)`, whatever bounds the caller used.
                let show = |b: Option<usize>| b.map_or("(overflow)".to_string(), |v| v.to_string());
                let what = match (s, e) {
                    (Some(s), Some(e)) if s > e => "runs backwards (its start is past its end)",
                    _ => "does not lie in the buffer",
                };
                Err(Error::new(
                    Errno::ERANGE,
                    "Region::range",
                    format!(
                        "byte range [{}, {}) {what}: the buffer has {len} bytes",
                        show(s),
                        show(e)
                    ),
                ))
            }
        }
    }

    /// Device address of the first byte.
    pub fn addr(&self) -> DevAddr {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn lease(&self) -> Lease {
        self.mem.lease()
    }
}

/// A task: a [`TaskDesc`] and a lease of every buffer it names, which keeps them alive until
/// the task has run (see the [module](self) docs). Made by the builders of this module
/// ([`fill`], [`copy`], [`add`], [`nop`]) and submitted with
/// [`Stream::submit`](crate::Stream::submit). Cloning one clones the leases (cheap: reference
/// counts). `Send + Sync`. A task that names no memory (NOP, events) holds nothing: building,
/// moving and dropping it is the descriptor's copy and nothing else.
#[derive(Clone)]
pub struct Task {
    desc: TaskDesc,
    /// Dropped by `Task`'s `Drop` (never leaked).
    leases: ManuallyDrop<Option<Leases>>,
}

/// The leases of a task, one per buffer operand (up to three: ADD; a launch more). A task that names no
/// memory has `None` of these: one tag to test, nothing to drop (the drop of the leases
/// themselves stays out of line).
#[derive(Clone)]
pub(crate) enum Leases {
    One([Lease; 1]),
    Two([Lease; 2]),
    Three([Lease; 3]),
    /// A kernel launch's: its operands' and its parameter block's.
    Many(Box<[Lease]>),
}

impl Leases {
    /// The leases held, in operand order.
    pub(crate) fn as_slice(&self) -> &[Lease] {
        match self {
            Leases::One(l) => l,
            Leases::Two(l) => l,
            Leases::Three(l) => l,
            Leases::Many(l) => l,
        }
    }
}

/// Dropping a task that holds no lease is one test of the tag, inlined where the task dies
/// (e.g. a `Vec<Task>` cleared per batch); the leases' own drop, with its reference counts,
/// is out of line. (`ManuallyDrop` keeps the compiler from adding the leases' drop glue,
/// too big to inline, after this.)
impl Drop for Task {
    #[inline]
    fn drop(&mut self) {
        if self.leases.is_some() {
            release(&mut self.leases);
        }
    }
}

/// Drops the leases of a task that is being dropped.
#[inline(never)]
fn release(leases: &mut ManuallyDrop<Option<Leases>>) {
    drop(ManuallyDrop::into_inner(std::mem::replace(
        leases,
        ManuallyDrop::new(None),
    )));
}

impl fmt::Debug for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Task").field("desc", &self.desc).finish()
    }
}

impl Task {
    fn new(desc: TaskDesc, leases: Option<Leases>) -> Task {
        Task {
            desc,
            leases: ManuallyDrop::new(leases),
        }
    }

    /// A task that names no memory (events, NOP).
    #[inline]
    pub(crate) fn bare(desc: TaskDesc) -> Task {
        Task::new(desc, None)
    }

    /// The descriptor.
    #[inline]
    pub fn desc(&self) -> &TaskDesc {
        &self.desc
    }

    /// This task with its `user_data` (echoed in its completion) set.
    #[inline]
    pub fn with_user_data(mut self, user_data: u64) -> Task {
        self.desc.user_data = user_data;
        self
    }

    /// Its `user_data`.
    #[inline]
    pub fn user_data(&self) -> u64 {
        self.desc.user_data
    }

    /// The leases it holds (one per buffer operand).
    pub(crate) fn leases(&self) -> &[Lease] {
        self.leases.as_ref().map_or(&[], Leases::as_slice)
    }

    /// Its leases, cloned.
    pub(crate) fn clone_leases(&self) -> Option<Leases> {
        Option::clone(&self.leases)
    }

    /// Whether it holds any lease.
    #[inline]
    pub(crate) fn has_leases(&self) -> bool {
        self.leases.is_some()
    }
}

impl Task {
    /// A task from a raw descriptor that names no device memory: NOP, EVENT_RECORD,
    /// EVENT_WAIT, and opcodes this ABI does not define (the device refuses those). `EINVAL`
    /// for FILL, COPY, ADD and KERNEL_LAUNCH, whose addresses nothing would keep alive: build
    /// them with [`fill`], [`copy`], [`add`], or submit them with the `unsafe`
    /// [`Stream::submit_raw`](crate::Stream::submit_raw). (For events, prefer
    /// [`Event::record`](crate::Event::record) and
    /// [`Stream::wait_event`](crate::Stream::wait_event), which check the context on the host
    /// and keep the event alive until the task ran; a raw EVENT_WAIT on an event destroyed
    /// meanwhile fails on the device with `ENOENT`, or completes with `ECANCELED` without
    /// waiting.)
    pub fn from_desc(desc: TaskDesc) -> Result<Task> {
        use davinci_uapi::Opcode;
        match Opcode::from_u8(desc.opcode) {
            Some(op @ (Opcode::Fill | Opcode::Copy | Opcode::Add | Opcode::KernelLaunch)) => {
                Err(invalid(
                    "Task::from_desc",
                    format!(
                        "a {op:?} descriptor names device memory that nothing would keep alive: \
                         build it with task::fill/copy/add, or submit it with the unsafe \
                         Stream::submit_raw"
                    ),
                ))
            }
            _ => Ok(Task::bare(desc)),
        }
    }
}

/// NOP: does nothing and completes (a marker in a stream, e.g. for its `user_data`).
#[inline]
pub fn nop() -> Task {
    Task::bare(TaskDesc::nop(0))
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for i32 {}
    impl Sealed for f32 {}
    impl Sealed for u16 {}
    impl Sealed for u8 {}
    impl Sealed for i8 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element type of ADD: `u32`, `i32`, `u16`, `u8`, `i8` (wrapping), `f32` (IEEE 754, round
/// to nearest), and since ABI 1.5 `half::f16` and `half::bf16` (rounded once to nearest
/// even). The narrower ones need a device with `Features::DTYPES`.
pub trait Element: sealed::Sealed {
    /// The descriptor's `dtype`.
    const DTYPE: Dtype;
}

impl Element for u16 {
    const DTYPE: Dtype = Dtype::U16;
}

impl Element for u8 {
    const DTYPE: Dtype = Dtype::U8;
}

impl Element for i8 {
    const DTYPE: Dtype = Dtype::I8;
}

impl Element for half::f16 {
    const DTYPE: Dtype = Dtype::F16;
}

impl Element for half::bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
}

impl Element for u32 {
    const DTYPE: Dtype = Dtype::U32;
}

impl Element for i32 {
    const DTYPE: Dtype = Dtype::I32;
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
}

fn invalid(op: &'static str, msg: String) -> Error {
    Error::new(Errno::EINVAL, op, msg)
}

/// Every device operand must be 4-byte aligned (start and length), as the device requires.
fn aligned(op: &'static str, name: &str, r: &Region) -> Result<()> {
    aligned_to(op, name, r, 4)
}

/// A non-empty operand aligned to `align` bytes in start and length.
fn aligned_to(op: &'static str, name: &str, r: &Region, align: u64) -> Result<()> {
    if r.is_empty() {
        return Err(invalid(op, format!("{name} is empty")));
    }
    if !r.addr.get().is_multiple_of(align) {
        return Err(invalid(
            op,
            format!(
                "{name} starts at {:#x}: must be a multiple of {align} bytes",
                r.addr.get()
            ),
        ));
    }
    if !(r.len as u64).is_multiple_of(align) {
        return Err(invalid(
            op,
            format!(
                "{name} is {} bytes long: must be a multiple of {align} bytes",
                r.len
            ),
        ));
    }
    Ok(())
}

fn same_len(op: &'static str, dst: &Region, name: &str, other: &Region) -> Result<()> {
    if dst.len != other.len {
        return Err(invalid(
            op,
            format!(
                "dst is {} bytes and {name} {} bytes: they must be the same length",
                dst.len, other.len
            ),
        ));
    }
    Ok(())
}

/// FILL: every 32-bit word of `dst` becomes `pattern`. `dst` must be non-empty and 4-byte
/// aligned in start and length.
pub fn fill<'a>(dst: impl Into<Region<'a>>, pattern: u32) -> Result<Task> {
    const OP: &str = "task::fill";
    let dst = dst.into();
    aligned(OP, "dst", &dst)?;
    Ok(Task::new(
        TaskDesc::fill(0, dst.addr, dst.len as u64, pattern),
        Some(Leases::One([dst.lease()])),
    ))
}

/// COPY: `src` to `dst`, which must be the same (non-zero) length. Overlapping regions are
/// copied as `memmove` would.
pub fn copy<'a>(dst: impl Into<Region<'a>>, src: impl Into<Region<'a>>) -> Result<Task> {
    const OP: &str = "task::copy";
    let (dst, src) = (dst.into(), src.into());
    if dst.is_empty() {
        return Err(invalid(OP, "dst is empty".into()));
    }
    same_len(OP, &dst, "src", &src)?;
    Ok(Task::new(
        TaskDesc::copy(0, dst.addr, src.addr, dst.len as u64),
        Some(Leases::Two([dst.lease(), src.lease()])),
    ))
}

/// ADD of `E` elements: `dst[i] = a[i] + b[i]` over the whole regions, which must be the same
/// length, a whole number of elements, and aligned to the element. The element count is
/// derived.
pub fn add<'a, E: Element>(
    dst: impl Into<Region<'a>>,
    a: impl Into<Region<'a>>,
    b: impl Into<Region<'a>>,
) -> Result<Task> {
    const OP: &str = "task::add";
    let (dst, a, b) = (dst.into(), a.into(), b.into());
    let size = E::DTYPE.size();
    aligned_to(OP, "dst", &dst, size)?;
    aligned_to(OP, "a (src0)", &a, size)?;
    aligned_to(OP, "b (src1)", &b, size)?;
    same_len(OP, &dst, "a (src0)", &a)?;
    same_len(OP, &dst, "b (src1)", &b)?;
    let elements = dst.len as u64 / E::DTYPE.size();
    Ok(Task::new(
        TaskDesc::add(0, E::DTYPE, dst.addr, a.addr, b.addr, elements),
        Some(Leases::Three([dst.lease(), a.lease(), b.lease()])),
    ))
}

#[cfg(all(test, feature = "embedded"))]
mod tests {
    use super::*;
    use crate::{Device, DeviceBuffer};
    use davinci_uapi::Opcode;

    fn msg(r: Result<Task>) -> (Option<Errno>, String) {
        let e = r.unwrap_err();
        (e.errno(), e.message().to_string())
    }

    fn three(dev: &Device) -> (DeviceBuffer, DeviceBuffer, DeviceBuffer) {
        (
            dev.alloc(64).unwrap(),
            dev.alloc(64).unwrap(),
            dev.alloc(64).unwrap(),
        )
    }

    #[test]
    fn builders_derive_units_and_addresses() {
        let dev = Device::embedded().unwrap();
        let (a, b, c) = three(&dev);
        let (aa, ba, ca) = (a.dev_addr().0, b.dev_addr().0, c.dev_addr().0);
        let t = add::<f32>(&c, &a, &b).unwrap().with_user_data(9);
        let d = *t.desc();
        assert_eq!(
            (d.opcode, d.dtype, d.dst, d.src0, d.src1, d.len, d.user_data),
            (Opcode::Add as u8, Dtype::F32 as u8, ca, aa, ba, 16, 9),
            "ADD counts elements"
        );
        assert_eq!(t.leases().len(), 3, "one lease per operand");
        let d = *fill(Region::range(&a, 8..24).unwrap(), 7).unwrap().desc();
        assert_eq!((d.dst, d.len, d.imm), (aa + 8, 16, 7), "FILL counts bytes");
        let d = *copy(&b, &a).unwrap().desc();
        assert_eq!((d.dst, d.src0, d.len), (ba, aa, 64), "COPY counts bytes");
        let d = *copy(
            Region::range(&b, ..=3).unwrap(),
            Region::range(&a, 60..).unwrap(),
        )
        .unwrap()
        .desc();
        assert_eq!((d.dst, d.src0, d.len), (ba, aa + 60, 4));
    }

    #[test]
    fn a_task_keeps_what_it_names_alive() {
        let dev = Device::embedded().unwrap();
        let (a, b, _c) = three(&dev);
        assert_eq!(a.pending_uses(), 0);
        let t = copy(&a, &b).unwrap();
        assert_eq!((a.pending_uses(), b.pending_uses()), (1, 1));
        let t2 = t.clone();
        assert_eq!(a.pending_uses(), 2);
        drop((t, t2));
        assert_eq!((a.pending_uses(), b.pending_uses()), (0, 0));
        assert!(!nop().has_leases());
    }

    #[test]
    fn what_the_device_would_refuse_is_refused_on_the_host_naming_the_operand() {
        let dev = Device::embedded().unwrap();
        let (a, b, c) = three(&dev);
        let short = Region::range(&a, 0..60).unwrap();
        let (errno, m) = msg(add::<u32>(&c, short, &b));
        assert_eq!(errno, Some(Errno::EINVAL));
        assert!(m.contains("dst is 64 bytes and a (src0) 60 bytes"), "{m}");
        let odd = Region::range(&b, 2..66 - 4).unwrap();
        let (_, m) = msg(add::<i32>(&c, &a, odd));
        assert!(
            m.contains(&format!(
                "b (src1) starts at {:#x}: must be a multiple of 4",
                b.dev_addr().0 + 2
            )),
            "{m}"
        );
        let (_, m) = msg(fill(Region::range(&a, 0..6).unwrap(), 0));
        assert!(
            m.contains("dst is 6 bytes long: must be a multiple of 4"),
            "{m}"
        );
        let (_, m) = msg(copy(&a, Region::range(&b, 0..32).unwrap()));
        assert!(m.contains("dst is 64 bytes and src 32 bytes"), "{m}");
        let (_, m) = msg(fill(Region::range(&a, 4..4).unwrap(), 0));
        assert!(m.contains("dst is empty"), "{m}");
    }

    #[test]
    fn ranges_outside_the_buffer_are_erange() {
        let dev = Device::embedded().unwrap();
        let a = dev.alloc(64).unwrap();
        for r in [
            Region::range(&a, 0..65),
            Region::range(&a, 65..),
            Region::range(&a, ..=64),
            Region::range(&a, usize::MAX..),
        ] {
            assert_eq!(r.unwrap_err().errno(), Some(Errno::ERANGE));
        }
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = Region::range(&a, 8..4).unwrap_err();
        assert_eq!(backwards.errno(), Some(Errno::ERANGE));
        assert!(
            backwards
                .message()
                .starts_with("byte range [8, 4) runs backwards"),
            "{backwards}"
        );
        let past = Region::range(&a, 0..=64).unwrap_err();
        assert_eq!(
            past.message(),
            "byte range [0, 65) does not lie in the buffer: the buffer has 64 bytes"
        );
        assert_eq!(Region::range(&a, ..).unwrap(), Region::from(&a));
    }
}
