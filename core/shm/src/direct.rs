//! A mapping's bytes moved by this process's own loads and stores at memory speed, where the
//! mapped file may be shrunk under it by a peer (`guard.rs`): each access announces its
//! ranges, and a fault in one ends the access as [`Direct::Shrunk`] instead of a `SIGBUS`.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};

use crate::bulk;
use crate::guard::{guarded, Span};
use crate::mapping::{OutOfBounds, SharedMapping};

/// What a direct access did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direct {
    /// Done: the bytes moved.
    Done,
    /// The file behind a range ended before it (a peer shrank it), now or earlier: the
    /// access's result is meaningless, and that mapping's `shrunk` flag is set for good.
    Shrunk,
    /// Not attempted: the guard is not in place (`SIGBUS` belongs to someone else), a
    /// mapping's flag was set already (its pages there are not the file's any more), or a
    /// copy's ranges overlap with the destination above the source. Use the kernel's copies.
    Unavailable,
}

fn outcome(faulted: bool, flags: &[&AtomicBool]) -> Direct {
    if faulted || flags.iter().any(|f| f.load(Ordering::SeqCst)) {
        Direct::Shrunk
    } else {
        Direct::Done
    }
}

impl SharedMapping {
    /// Runs `f` on `[start, start + len)` of this mapping (checked by `range`) under the
    /// guard, with the mapping's flag `shrunk`.
    fn one_span(
        &self,
        offset: u64,
        len: usize,
        shrunk: &AtomicBool,
        f: impl FnOnce(*mut u8),
    ) -> Result<Direct, OutOfBounds> {
        let start = self.range(offset, len)?;
        if shrunk.load(Ordering::SeqCst) {
            return Ok(Direct::Unavailable);
        }
        let span = Span { start, len, shrunk };
        let r = guarded(&[span], || f(start));
        Ok(r.map_or(Direct::Unavailable, |((), faulted)| {
            outcome(faulted, &[shrunk])
        }))
    }

    /// Copies `buf.len()` bytes at `offset` into `buf` with this process's loads (`shrunk`:
    /// the mapping's flag, see [`Direct`]).
    ///
    /// # Errors
    /// `OutOfBounds` unless the range lies inside the mapping.
    pub fn direct_read(
        &self,
        offset: u64,
        buf: &mut [u8],
        shrunk: &AtomicBool,
    ) -> Result<Direct, OutOfBounds> {
        // SAFETY: `one_span` checked that `[src, src + len)` lies in the live mapping (kept
        // by `&self`), readable; a fault there is absorbed by the guard; `buf` is ordinary
        // memory outside it.
        self.one_span(offset, buf.len(), shrunk, |src| unsafe {
            bulk::read(src, buf)
        })
    }

    /// Copies `data` to `offset` with this process's stores.
    ///
    /// # Errors
    /// `OutOfBounds` unless the range lies inside the mapping.
    pub fn direct_write(
        &self,
        offset: u64,
        data: &[u8],
        shrunk: &AtomicBool,
    ) -> Result<Direct, OutOfBounds> {
        // SAFETY: as in `direct_read`, the range writable; `data` is ordinary memory.
        self.one_span(offset, data.len(), shrunk, |dst| unsafe {
            bulk::write(dst, data)
        })
    }

    /// Fills `len` bytes at `offset` with the native-endian bytes of `pattern`, repeated
    /// from `offset` on.
    ///
    /// # Errors
    /// `OutOfBounds` unless the range lies inside the mapping.
    pub fn direct_fill(
        &self,
        offset: u64,
        len: u64,
        pattern: u32,
        shrunk: &AtomicBool,
    ) -> Result<Direct, OutOfBounds> {
        let len = usize::try_from(len).map_err(|_| OutOfBounds)?;
        // SAFETY: as in `direct_write`.
        self.one_span(offset, len, shrunk, |dst| unsafe {
            bulk::fill(dst, len, pattern)
        })
    }

    /// Copies `len` bytes of `src` at `src_offset` to this mapping at `offset` (`src` may be
    /// this mapping; overlapping ranges only with the destination below the source).
    /// `shrunk`: this mapping's flag and `src`'s.
    ///
    /// # Errors
    /// `OutOfBounds` unless both ranges lie inside their mappings.
    pub fn direct_copy(
        &self,
        offset: u64,
        src: &SharedMapping,
        src_offset: u64,
        len: u64,
        shrunk: [&AtomicBool; 2],
    ) -> Result<Direct, OutOfBounds> {
        let len = usize::try_from(len).map_err(|_| OutOfBounds)?;
        let d = self.range(offset, len)?;
        let s = src.range(src_offset, len)?;
        let (du, su) = (d as usize, s as usize);
        if shrunk.iter().any(|f| f.load(Ordering::SeqCst)) || (du > su && du - su < len) {
            return Ok(Direct::Unavailable);
        }
        let spans = [
            Span {
                start: d,
                len,
                shrunk: shrunk[0],
            },
            Span {
                start: s,
                len,
                shrunk: shrunk[1],
            },
        ];
        // SAFETY: both ranges lie in live mappings (`range`, kept by the borrows), the
        // destination writable; they overlap only with the destination below the source,
        // which a forward copy handles; faults in either are absorbed by the guard.
        let r = guarded(&spans, || unsafe { bulk::copy_forward(d, s, len) });
        Ok(r.map_or(Direct::Unavailable, |((), f)| outcome(f, &shrunk)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn memfd(len: u64) -> std::fs::File {
        let fd = nix::sys::memfd::memfd_create(c"direct-test", nix::sys::memfd::MFdFlags::empty())
            .unwrap();
        let f = std::fs::File::from(fd);
        f.set_len(len).unwrap();
        f
    }

    /// Bytes move at full speed while the file is whole; once a peer shrinks it, every access
    /// past the new end is `Shrunk` (no signal), the mapping's flag stays set, and later
    /// accesses are refused so the caller goes through the kernel.
    #[test]
    fn direct_accesses_move_bytes_and_a_shrunk_file_is_an_error_not_a_signal() {
        const LEN: u64 = 64 << 10;
        let (fa, fb) = (memfd(LEN), memfd(LEN));
        let a = SharedMapping::map(fa.as_fd(), 0, LEN as usize).unwrap();
        let b = SharedMapping::map(fb.as_fd(), 0, LEN as usize).unwrap();
        let (sa, sb) = (AtomicBool::new(false), AtomicBool::new(false));
        let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        assert_eq!(a.direct_write(0, &data, &sa), Ok(Direct::Done));
        assert_eq!(b.direct_copy(0, &a, 0, LEN, [&sb, &sa]), Ok(Direct::Done));
        let mut back = vec![0u8; LEN as usize];
        assert_eq!(b.direct_read(0, &mut back, &sb), Ok(Direct::Done));
        assert_eq!(back, data);
        assert_eq!(b.direct_fill(5, 11, 0x0403_0201, &sb), Ok(Direct::Done));
        let mut few = [0u8; 12];
        b.read(4, &mut few).unwrap();
        assert_eq!(few, [4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3]);
        assert_eq!(
            a.direct_copy(1, &a, 0, 100, [&sa, &sa]),
            Ok(Direct::Unavailable),
            "overlap upwards"
        );
        // The peer shrinks the source to one page: a copy of it all faults, absorbed.
        fa.set_len(4096).unwrap();
        assert_eq!(b.direct_copy(0, &a, 0, LEN, [&sb, &sa]), Ok(Direct::Shrunk));
        assert!(sa.load(Ordering::SeqCst) && !sb.load(Ordering::SeqCst));
        // The flag holds: even the first page (still the file's) is left to the kernel now.
        assert_eq!(a.direct_read(0, &mut few, &sa), Ok(Direct::Unavailable));
        // The destination shrunk to nothing: fills and writes fault, absorbed.
        fb.set_len(0).unwrap();
        assert_eq!(b.direct_fill(0, LEN, 7, &sb), Ok(Direct::Shrunk));
        let sb2 = AtomicBool::new(false);
        let c = SharedMapping::map(fb.as_fd(), 0, 4096);
        // (A fresh mapping of the empty file, its own flag: a write faults too.)
        if let Ok(c) = c {
            assert_eq!(c.direct_write(0, &data[..4096], &sb2), Ok(Direct::Shrunk));
        }
        assert!(
            a.direct_read(0, &mut few, &AtomicBool::new(false))
                .is_ok_and(|d| d == Direct::Done),
            "the first page of the shrunk file is still readable (a fresh flag)"
        );
    }

    /// A fault the guard does not own (no access announced, or outside the announced
    /// ranges) is not swallowed: the process still dies of `SIGBUS`, as without the guard.
    /// The test binary runs itself again for this test, as the child that faults.
    #[test]
    fn a_fault_outside_a_guarded_access_still_kills_the_process() {
        const CHILD: &str = "DAVINCI_SHM_STRAY_FAULT";
        if std::env::var_os(CHILD).is_some() {
            let f = memfd(8192);
            let m = SharedMapping::map(f.as_fd(), 0, 8192).unwrap();
            let flag = AtomicBool::new(false);
            // The guard is in place (a guarded access ran) ...
            assert_eq!(m.direct_fill(0, 8192, 1, &flag), Ok(Direct::Done));
            f.set_len(0).unwrap();
            // ... and a plain load of the truncated mapping faults with nothing announced.
            let mut b = [0u8; 4];
            m.read(0, &mut b).unwrap();
            unreachable!("read a truncated mapping: {b:?}");
        }
        use std::os::unix::process::ExitStatusExt;
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "direct::tests::a_fault_outside_a_guarded_access_still_kills_the_process",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGBUS),
            "the child: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
