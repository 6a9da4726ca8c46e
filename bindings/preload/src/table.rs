//! Which descriptors of the program are davinci opens: a fixed table of [`MAX_OPENS`]
//! entries under one lock, each a descriptor number, the identity of the file it had when
//! the library filled it in, and the open (shared by `dup`s of one descriptor).
//!
//! Every interposed call asks [`maybe`] first, which takes no lock: one atomic load while no
//! davinci descriptor is open, one bit of a bitmap for descriptors below 4096 (one count
//! for those above). Only then is
//! the table searched ([`lookup`]), and the entry is trusted only if the descriptor still is
//! the same file (`fstat`): a number the program closed behind the library's back (a raw
//! `close` system call, `close_range` in a child) and the kernel gave to another file is
//! forgotten, never taken for the device.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::conn::Conn;
use crate::sys::{self, FileId};

/// Most davinci descriptors open at once in one process (`dup`s count too).
pub const MAX_OPENS: usize = 256;

/// Descriptors below this have a bit in [`BITS`].
const BITMAP_FDS: usize = 4096;

struct Entry {
    fd: RawFd,
    id: FileId,
    conn: Arc<Conn>,
}

static SLOTS: Mutex<[Option<Entry>; MAX_OPENS]> = Mutex::new([const { None }; MAX_OPENS]);
/// Entries in [`SLOTS`].
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Bit `fd` set while `fd` (below [`BITMAP_FDS`]) has an entry.
static BITS: [AtomicU64; BITMAP_FDS / 64] = [const { AtomicU64::new(0) }; BITMAP_FDS / 64];
/// Entries of descriptors at or above [`BITMAP_FDS`] (which have no bit).
static HIGH: AtomicUsize = AtomicUsize::new(0);

fn slots() -> MutexGuard<'static, [Option<Entry>; MAX_OPENS]> {
    // Nothing panics while holding it; if something did, the table is still whole.
    SLOTS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Marks `fd` as having an entry (`on`) or not any more; called once each way per entry.
fn set_bit(fd: RawFd, on: bool) {
    match usize::try_from(fd) {
        Ok(i) if i < BITMAP_FDS => {
            let m = 1u64 << (i % 64);
            if on {
                BITS[i / 64].fetch_or(m, Ordering::Release);
            } else {
                BITS[i / 64].fetch_and(!m, Ordering::Release);
            }
        }
        _ if on => {
            HIGH.fetch_add(1, Ordering::AcqRel);
        }
        _ => {
            HIGH.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Whether `fd` may be a davinci descriptor (false: certainly not). Lock-free, no system call.
pub fn maybe(fd: RawFd) -> bool {
    if fd < 0 || COUNT.load(Ordering::Acquire) == 0 {
        return false;
    }
    match usize::try_from(fd) {
        Ok(i) if i < BITMAP_FDS => BITS[i / 64].load(Ordering::Acquire) & (1u64 << (i % 64)) != 0,
        _ => HIGH.load(Ordering::Acquire) != 0,
    }
}

/// Whether any davinci descriptor is open.
pub fn any() -> bool {
    COUNT.load(Ordering::Acquire) != 0
}

/// The open behind `fd` and the identity of its file, if `fd` is a davinci descriptor (a
/// stale entry is dropped on the way).
pub fn lookup(fd: RawFd) -> Option<(Arc<Conn>, FileId)> {
    let (conn, id) = {
        let g = slots();
        let e = g.iter().flatten().find(|e| e.fd == fd)?;
        (e.conn.clone(), e.id)
    };
    if sys::file_id(fd) == Some(id) {
        return Some((conn, id));
    }
    drop(conn);
    // Closed and reused behind the library's back: forget it (its open ends when the last
    // reference goes, as the module's file is released on its last close).
    let stale = take_if(fd, Some(id));
    drop(stale);
    None
}

/// Records `fd` (whose file is `id`) as a descriptor of `conn`, replacing a stale entry of
/// the same number.
///
/// # Errors
/// The table is full ([`MAX_OPENS`]); `conn` is handed back.
pub fn insert(fd: RawFd, id: FileId, conn: Arc<Conn>) -> Result<(), Arc<Conn>> {
    let old;
    {
        let mut g = slots();
        let at = g
            .iter()
            .position(|e| e.as_ref().is_some_and(|e| e.fd == fd))
            .or_else(|| g.iter().position(Option::is_none));
        let Some(at) = at else {
            return Err(conn);
        };
        old = g[at].replace(Entry { fd, id, conn });
        if old.is_none() {
            COUNT.fetch_add(1, Ordering::AcqRel);
            set_bit(fd, true);
        }
    }
    // A stale entry's open goes outside the lock (its drop may talk to the daemon).
    drop(old);
    Ok(())
}

fn take_if(fd: RawFd, id: Option<FileId>) -> Option<Arc<Conn>> {
    let mut g = slots();
    let at = g.iter().position(|e| {
        e.as_ref()
            .is_some_and(|e| e.fd == fd && id.is_none_or(|id| e.id == id))
    })?;
    let e = g[at].take()?;
    COUNT.fetch_sub(1, Ordering::AcqRel);
    set_bit(fd, false);
    Some(e.conn)
}

/// Forgets `fd` (the program closes it); its open, for the caller to drop outside any lock.
pub fn remove(fd: RawFd) -> Option<Arc<Conn>> {
    take_if(fd, None)
}

/// Forgets every descriptor in `first..=last` (`close_range`).
pub fn remove_range(first: u32, last: u32) -> Vec<Arc<Conn>> {
    let mut out = Vec::new();
    let mut g = slots();
    for slot in g.iter_mut() {
        let hit = slot
            .as_ref()
            .is_some_and(|e| u32::try_from(e.fd).is_ok_and(|fd| fd >= first && fd <= last));
        if hit {
            if let Some(e) = slot.take() {
                COUNT.fetch_sub(1, Ordering::AcqRel);
                set_bit(e.fd, false);
                out.push(e.conn);
            }
        }
    }
    out
}
