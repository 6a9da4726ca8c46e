//! Typed task builders: descriptors over device buffers, checked on the host before they
//! are submitted.
//!
//! [`TaskDesc`]'s own constructors take raw device addresses and counts whose unit depends on
//! the opcode (FILL and COPY count bytes, ADD counts elements). These take [`Region`]s of
//! device memory instead (a whole [`DeviceMem`] or a byte range of one), derive the count in
//! the right unit, and refuse on the host what the device would refuse, naming the operand:
//! lengths that differ, misaligned addresses or lengths, empty or out-of-bounds ranges. The
//! result is an ordinary [`TaskDesc`]; set its `user_data` with
//! [`TaskDesc::with_user_data`].
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
//! s.synchronize(Duration::from_secs(5))?;
//! assert_eq!(sum.read_vec::<f32>(0, 4)?, [2.0, 2.5, 0.0, 0.0]);
//! // Checked on the host: a 16-byte buffer does not receive a 12-byte sum.
//! let short = Region::range(&a, 0..12)?;
//! assert!(task::add::<f32>(&sum, short, &b).is_err());
//! # }
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

use std::ops::{Bound, RangeBounds};

use davinci_uapi::{DevAddr, Dtype, Errno, TaskDesc};

use crate::error::{Error, Result};
use crate::memory::DeviceMem;

/// A byte range of device memory: a whole buffer (`&buf` converts) or part of one
/// ([`Region::range`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    addr: DevAddr,
    len: usize,
}

impl<T: DeviceMem + ?Sized> From<&T> for Region {
    fn from(mem: &T) -> Region {
        Region {
            addr: mem.dev_addr(),
            len: mem.len(),
        }
    }
}

impl Region {
    /// Bytes `range` of `mem` (`..` for all of it). `ERANGE` if the range does not lie in it
    /// or runs backwards.
    pub fn range(
        mem: &(impl DeviceMem + ?Sized),
        range: impl RangeBounds<usize>,
    ) -> Result<Region> {
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
                addr: mem.dev_addr() + s as u64,
                len: e - s,
            }),
            _ => Err(Error::new(
                Errno::ERANGE,
                "Region::range",
                format!(
                    "byte range {:?}..{:?} does not lie in the {len}-byte buffer",
                    range.start_bound(),
                    range.end_bound()
                ),
            )),
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
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for i32 {}
    impl Sealed for f32 {}
}

/// An element type of ADD: `u32`, `i32` (wrapping) or `f32` (IEEE 754, round to nearest).
pub trait Element: sealed::Sealed {
    /// The descriptor's `dtype`.
    const DTYPE: Dtype;
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
    if r.is_empty() {
        return Err(invalid(op, format!("{name} is empty")));
    }
    if !r.addr.get().is_multiple_of(4) {
        return Err(invalid(
            op,
            format!(
                "{name} starts at {:#x}: must be a multiple of 4 bytes",
                r.addr.get()
            ),
        ));
    }
    if !r.len.is_multiple_of(4) {
        return Err(invalid(
            op,
            format!(
                "{name} is {} bytes long: must be a multiple of 4 bytes",
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
pub fn fill(dst: impl Into<Region>, pattern: u32) -> Result<TaskDesc> {
    const OP: &str = "task::fill";
    let dst = dst.into();
    aligned(OP, "dst", &dst)?;
    Ok(TaskDesc::fill(0, dst.addr, dst.len as u64, pattern))
}

/// COPY: `src` to `dst`, which must be the same (non-zero) length. Overlapping regions are
/// copied as `memmove` would.
pub fn copy(dst: impl Into<Region>, src: impl Into<Region>) -> Result<TaskDesc> {
    const OP: &str = "task::copy";
    let (dst, src) = (dst.into(), src.into());
    if dst.is_empty() {
        return Err(invalid(OP, "dst is empty".into()));
    }
    same_len(OP, &dst, "src", &src)?;
    Ok(TaskDesc::copy(0, dst.addr, src.addr, dst.len as u64))
}

/// ADD of `E` elements: `dst[i] = a[i] + b[i]` over the whole regions, which must be the same
/// length, a whole number of elements, and 4-byte aligned. The element count is derived.
pub fn add<E: Element>(
    dst: impl Into<Region>,
    a: impl Into<Region>,
    b: impl Into<Region>,
) -> Result<TaskDesc> {
    const OP: &str = "task::add";
    let (dst, a, b) = (dst.into(), a.into(), b.into());
    aligned(OP, "dst", &dst)?;
    aligned(OP, "a (src0)", &a)?;
    aligned(OP, "b (src1)", &b)?;
    same_len(OP, &dst, "a (src0)", &a)?;
    same_len(OP, &dst, "b (src1)", &b)?;
    let elements = dst.len as u64 / E::DTYPE.size();
    Ok(TaskDesc::add(
        0,
        E::DTYPE,
        dst.addr,
        a.addr,
        b.addr,
        elements,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use davinci_uapi::Opcode;

    /// Device memory that exists only as an address and a length.
    struct Fake(u64, usize);

    impl DeviceMem for Fake {
        fn dev_addr(&self) -> DevAddr {
            DevAddr(self.0)
        }
        fn len(&self) -> usize {
            self.1
        }
        fn write(&self, _: usize, _: &[u8]) -> Result<()> {
            Ok(())
        }
        fn read(&self, _: usize, _: &mut [u8]) -> Result<()> {
            Ok(())
        }
    }

    fn msg(r: Result<TaskDesc>) -> (Option<Errno>, String) {
        let e = r.unwrap_err();
        (e.errno(), e.message().to_string())
    }

    #[test]
    fn builders_derive_units_and_addresses() {
        let (a, b, c) = (Fake(0x1000, 64), Fake(0x2000, 64), Fake(0x3000, 64));
        let d = add::<f32>(&c, &a, &b).unwrap().with_user_data(9);
        assert_eq!(
            (d.opcode, d.dtype, d.dst, d.src0, d.src1, d.len, d.user_data),
            (
                Opcode::Add as u8,
                Dtype::F32 as u8,
                0x3000,
                0x1000,
                0x2000,
                16,
                9
            ),
            "ADD counts elements"
        );
        let d = fill(Region::range(&a, 8..24).unwrap(), 7).unwrap();
        assert_eq!((d.dst, d.len, d.imm), (0x1008, 16, 7), "FILL counts bytes");
        let d = copy(&b, &a).unwrap();
        assert_eq!(
            (d.dst, d.src0, d.len),
            (0x2000, 0x1000, 64),
            "COPY counts bytes"
        );
        let d = copy(
            Region::range(&b, ..=3).unwrap(),
            Region::range(&a, 60..).unwrap(),
        )
        .unwrap();
        assert_eq!((d.dst, d.src0, d.len), (0x2000, 0x103c, 4));
    }

    #[test]
    fn what_the_device_would_refuse_is_refused_on_the_host_naming_the_operand() {
        let (a, b, c) = (Fake(0x1000, 64), Fake(0x2000, 64), Fake(0x3000, 64));
        let short = Region::range(&a, 0..60).unwrap();
        let (errno, m) = msg(add::<u32>(&c, short, &b));
        assert_eq!(errno, Some(Errno::EINVAL));
        assert!(m.contains("dst is 64 bytes and a (src0) 60 bytes"), "{m}");
        let odd = Region::range(&b, 2..66 - 4).unwrap();
        let (_, m) = msg(add::<i32>(&c, &a, odd));
        assert!(
            m.contains("b (src1) starts at 0x2002: must be a multiple of 4"),
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
        let a = Fake(0x1000, 64);
        for r in [
            Region::range(&a, 0..65),
            Region::range(&a, 65..),
            Region::range(&a, ..=64),
            Region::range(&a, usize::MAX..),
        ] {
            assert_eq!(r.unwrap_err().errno(), Some(Errno::ERANGE));
        }
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = Region::range(&a, 8..4);
        assert_eq!(backwards.unwrap_err().errno(), Some(Errno::ERANGE));
        assert_eq!(Region::range(&a, ..).unwrap(), Region::from(&a));
    }
}
