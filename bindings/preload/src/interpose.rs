//! The C functions the library exports in place of glibc's: `open` and its variants,
//! `close`, `close_range`, `ioctl`, `mmap`/`mmap64`, `read`, `write`, `dup`, `dup2`, `dup3`,
//! `fcntl`/`fcntl64`. Each asks the lock-free [`table::maybe`] first and calls the next
//! definition (`dlsym(RTLD_NEXT)`) for everything that is not a davinci descriptor, and for
//! every call made from inside the library ([`crate::inside`]); only davinci descriptors take
//! the slow path, which runs under [`crate::shielded`] (no panic crosses into C).
//!
//! `poll`, `select`, `epoll_ctl`, `munmap` need no interposition: the program's descriptor is
//! a memfd, which like the module's file has no `poll` operation (always ready; `epoll_ctl`
//! fails with `EPERM`, as on the module), and a mapping is an ordinary shared mapping of the
//! daemon's memfd.
//!
//! Variadic C functions (`open`, `openat`, `ioctl`, `fcntl`) are defined here with a fixed
//! last argument. On x86_64 and aarch64 Linux (the only targets this file is built for) a
//! variadic integer or pointer argument is passed exactly where a fixed one would be (the
//! next integer register, or the same stack slot), so the definition reads what the caller
//! passed, and an argument the caller did not pass (`open` without `O_CREAT`) is an unused
//! register value that is never interpreted. glibc's own wrappers read them the same way.
// `unsafe` here: the exported functions take the program's raw pointers, and the next
// definitions are called through pointers from `dlsym`.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};
use std::os::fd::AsRawFd;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

use libc::{mode_t, off_t, size_t, ssize_t};

use crate::sys::set_errno;
use crate::{inside, ops, shielded, table, Failure};

/// The next definition of the C function `name` (normally glibc's), resolved once; null if
/// there is none.
fn next(slot: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    // SAFETY: `name` is a NUL-terminated symbol name; RTLD_NEXT asks for the definition after
    // this library's in the search order. dlsym has no other precondition.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    slot.store(p, Ordering::Release);
    p
}

/// `real!(name: Type)`: the next definition of `name` as a function pointer of `Type`, or
/// `None`.
macro_rules! real {
    ($name:literal: $ty:ty) => {{
        static SLOT: AtomicPtr<c_void> = AtomicPtr::new(null_mut());
        let p = next(&SLOT, $name);
        if p.is_null() {
            None
        } else {
            // SAFETY: `p` is the address dlsym gave for the C function of this name, whose C
            // prototype `$ty` spells (glibc's <fcntl.h>, <unistd.h>, <sys/mman.h>,
            // <sys/ioctl.h>); a data pointer and a function pointer have one size here.
            Some(unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
        }
    }};
}

/// `call_next!(name: Type, args...)`: `Some` result of the next definition of `name` called
/// with `args`, or `None` when there is none.
macro_rules! call_next {
    ($name:literal: $ty:ty, $($arg:expr),*) => {{
        match real!($name: $ty) {
            // SAFETY: the next definition of the C function this one stands in for (its
            // prototype is `$ty`), called with arguments that meet its contract: the ones the
            // program passed here under that same contract, or descriptors the library owns
            // (the memfd an MMAP reply just brought, a duplicate just made).
            Some(f) => Some(unsafe { f($($arg),*) }),
            None => None,
        }
    }};
}

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;
type Open2Fn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type Openat2Fn = unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;
type CloseFn = unsafe extern "C" fn(c_int) -> c_int;
type CloseRangeFn = unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int;
type IoctlFn = unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int;
type MmapFn = unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
type WriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
type DupFn = unsafe extern "C" fn(c_int) -> c_int;
type Dup2Fn = unsafe extern "C" fn(c_int, c_int) -> c_int;
type Dup3Fn = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
type FcntlFn = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;

/// `-1` with `errno` `e` (a missing next definition: `ENOSYS`).
fn fail(e: i32) -> c_int {
    set_errno(e);
    -1
}

/// Runs `f` inside the library, no panic escaping (for drops that may talk to the daemon).
fn quietly(f: impl FnOnce()) {
    let _ = shielded(|| {
        f();
        Ok(())
    });
}

/// The result of a davinci call as C returns it.
fn ret(r: Result<c_int, Failure>) -> c_int {
    r.unwrap_or_else(|f| fail(f.errno))
}

// ---- open ------------------------------------------------------------------------------

/// Which entry point an open came through (to pass it on unchanged).
#[derive(Clone, Copy)]
enum Via {
    Open,
    Open64,
    Openat,
    Openat64,
    Open2,
    Open64_2,
    Openat2,
    Openat64_2,
}

/// Every open: a device path (absolute, so `dirfd` does not matter) goes to the daemon,
/// anything else to the next definition.
///
/// # Safety
/// `path` is what the program passed to `open(2)`: null or a NUL-terminated string.
unsafe fn any_open(
    via: Via,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    if !inside() && !path.is_null() {
        // SAFETY: the caller's contract: `path` is a NUL-terminated string.
        let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
        if let Some(n) = ops::device_number(bytes) {
            return ret(shielded(|| ops::open_device(n, flags)));
        }
    }
    let m = mode as c_uint;
    let fd = match via {
        Via::Open => call_next!(c"open": OpenFn, path, flags, m),
        Via::Open64 => call_next!(c"open64": OpenFn, path, flags, m),
        Via::Openat => call_next!(c"openat": OpenatFn, dirfd, path, flags, m),
        Via::Openat64 => call_next!(c"openat64": OpenatFn, dirfd, path, flags, m),
        Via::Open2 => call_next!(c"__open_2": Open2Fn, path, flags),
        Via::Open64_2 => call_next!(c"__open64_2": Open2Fn, path, flags),
        Via::Openat2 => call_next!(c"__openat_2": Openat2Fn, dirfd, path, flags),
        Via::Openat64_2 => call_next!(c"__openat64_2": Openat2Fn, dirfd, path, flags),
    };
    let Some(fd) = fd else {
        return fail(libc::ENOSYS);
    };
    forget_reused(fd);
    fd
}

/// A descriptor the kernel just handed out cannot be a davinci open any more: an entry with
/// its number is stale (closed behind the library's back) and goes.
fn forget_reused(fd: c_int) {
    if fd >= 0 && !inside() && table::maybe(fd) {
        let errno = crate::sys::errno();
        let stale = shielded(|| Ok(table::remove(fd)));
        quietly(|| drop(stale));
        set_errno(errno);
    }
}

/// `open(2)`.
///
/// # Safety
/// As `open(2)`: `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { any_open(Via::Open, libc::AT_FDCWD, path, flags, mode) }
}

/// `open64(2)`.
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { any_open(Via::Open64, libc::AT_FDCWD, path, flags, mode) }
}

/// `openat(2)`.
///
/// # Safety
/// As `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { any_open(Via::Openat, dirfd, path, flags, mode) }
}

/// `openat64(2)`.
///
/// # Safety
/// As `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { any_open(Via::Openat64, dirfd, path, flags, mode) }
}

/// glibc's `__open_2` (`open` under `_FORTIFY_SOURCE`).
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { any_open(Via::Open2, libc::AT_FDCWD, path, flags, 0) }
}

/// glibc's `__open64_2`.
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { any_open(Via::Open64_2, libc::AT_FDCWD, path, flags, 0) }
}

/// glibc's `__openat_2`.
///
/// # Safety
/// As `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { any_open(Via::Openat2, dirfd, path, flags, 0) }
}

/// glibc's `__openat64_2`.
///
/// # Safety
/// As `openat(2)`.
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { any_open(Via::Openat64_2, dirfd, path, flags, 0) }
}

// ---- close -----------------------------------------------------------------------------

/// `close(2)`: a davinci descriptor's open ends when its last descriptor closes (CLOSE, then
/// the connection goes), as the module's file is released.
///
/// # Safety
/// None beyond `close(2)`'s.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let conn = if !inside() && table::maybe(fd) {
        shielded(|| Ok(table::remove(fd))).ok().flatten()
    } else {
        None
    };
    let r = call_next!(c"close": CloseFn, fd).unwrap_or_else(|| fail(libc::ENOSYS));
    if conn.is_some() {
        let errno = crate::sys::errno();
        quietly(|| drop(conn));
        set_errno(errno);
    }
    r
}

/// `close_range(2)`: davinci descriptors in the range are forgotten once it succeeded.
///
/// # Safety
/// None beyond `close_range(2)`'s.
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let r = call_next!(c"close_range": CloseRangeFn, first, last, flags)
        .unwrap_or_else(|| fail(libc::ENOSYS));
    let closes = flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0;
    if r == 0 && closes && !inside() && table::any() {
        quietly(|| drop(table::remove_range(first, last)));
    }
    r
}

// ---- ioctl, mmap -----------------------------------------------------------------------

/// The ioctls the VFS handles before a driver sees them (close-on-exec, non-blocking,
/// async): applied to the program's descriptor, as on the module's file.
const VFS_IOCTLS: [c_ulong; 4] = [
    libc::FIOCLEX as c_ulong,
    libc::FIONCLEX as c_ulong,
    libc::FIONBIO as c_ulong,
    libc::FIOASYNC as c_ulong,
];

/// `ioctl(2)`: on a davinci descriptor, one IOCTL round trip.
///
/// # Safety
/// As `ioctl(2)`: `arg` is what the request's argument is (for a davinci request, a pointer
/// to `_IOC_SIZE(request)` bytes; a bad one fails with `EFAULT`).
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    // The kernel takes the request as an `unsigned int`.
    let req = request as u32;
    if !inside() && table::maybe(fd) && !VFS_IOCTLS.contains(&c_ulong::from(req)) {
        if let Ok(Some((conn, _))) = shielded(|| Ok(table::lookup(fd))) {
            return ret(shielded(|| {
                ops::ioctl(&conn, req, arg as usize).map(|()| 0)
            }));
        }
    }
    call_next!(c"ioctl": IoctlFn, fd, request, arg).unwrap_or_else(|| fail(libc::ENOSYS))
}

/// `mmap` on a davinci descriptor: the MMAP round trip, then the daemon's memfd mapped shared
/// at its offset, not inherited by a child (the module's `VM_DONTCOPY`).
fn map_device(
    conn: &crate::conn::Conn,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off_t,
) -> Result<*mut c_void, Failure> {
    let einval = |m: &str| Failure::new(libc::EINVAL, m.to_string());
    // A private mapping would copy on write: the device would never see the copy.
    let kind = flags & 0x0f;
    if kind != libc::MAP_SHARED && kind != libc::MAP_SHARED_VALIDATE {
        return Err(einval("a davinci mapping must be MAP_SHARED"));
    }
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    if len == 0 || off < 0 || !(off as u64).is_multiple_of(page as u64) {
        return Err(einval("bad length or offset"));
    }
    let rounded = len
        .checked_next_multiple_of(page)
        .ok_or_else(|| Failure::new(libc::ENOMEM, "length too large".into()))?;
    let (memfd, at) = ops::resolve_mmap(conn, off as u64, rounded as u64)?;
    let at = off_t::try_from(at).map_err(|_| einval("offset out of range"))?;
    // The program's address hint, length, protection and flags, on the daemon's memfd at
    // the object's offset.
    let p = call_next!(c"mmap": MmapFn, addr, len, prot, flags, memfd.as_raw_fd(), at)
        .ok_or_else(|| Failure::new(libc::ENOSYS, "no mmap".into()))?;
    if p == libc::MAP_FAILED {
        let e = crate::sys::errno();
        return Err(Failure::new(e, "mmap of the daemon's memfd failed".into()));
    }
    // SAFETY: `p..p + rounded` is the mapping just made; MADV_DONTFORK changes only whether
    // a child inherits it.
    let _ = unsafe { libc::madvise(p, rounded, libc::MADV_DONTFORK) };
    // The memfd closes here; the mapping keeps its memory.
    drop(memfd);
    Ok(p)
}

/// Every mmap entry point.
///
/// # Safety
/// As `mmap(2)`.
unsafe fn any_mmap(
    name64: bool,
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    if !inside() && table::maybe(fd) {
        if let Ok(Some((conn, _))) = shielded(|| Ok(table::lookup(fd))) {
            return match shielded(|| map_device(&conn, addr, len, prot, flags, off)) {
                Ok(p) => p,
                Err(f) => {
                    set_errno(f.errno);
                    libc::MAP_FAILED
                }
            };
        }
    }
    let p = if name64 {
        call_next!(c"mmap64": MmapFn, addr, len, prot, flags, fd, off)
    } else {
        call_next!(c"mmap": MmapFn, addr, len, prot, flags, fd, off)
    };
    p.unwrap_or_else(|| {
        set_errno(libc::ENOSYS);
        libc::MAP_FAILED
    })
}

/// `mmap(2)`.
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: forwarded with the caller's contract.
    unsafe { any_mmap(false, addr, len, prot, flags, fd, off) }
}

/// `mmap64(2)` (the same as `mmap` on 64-bit targets).
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: forwarded with the caller's contract.
    unsafe { any_mmap(true, addr, len, prot, flags, fd, off) }
}

// ---- read, write ---------------------------------------------------------------------------

/// Whether `fd` is a davinci descriptor (the slow check; for calls the module refuses).
fn is_davinci(fd: c_int) -> bool {
    !inside() && table::maybe(fd) && shielded(|| Ok(table::lookup(fd).is_some())).unwrap_or(false)
}

/// `read(2)`: `EINVAL` on a davinci descriptor (the module has no `read`).
///
/// # Safety
/// As `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    if is_davinci(fd) {
        set_errno(libc::EINVAL);
        return -1;
    }
    call_next!(c"read": ReadFn, fd, buf, n).unwrap_or_else(|| fail(libc::ENOSYS) as ssize_t)
}

/// `write(2)`: `EINVAL` on a davinci descriptor (the module has no `write`).
///
/// # Safety
/// As `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    if is_davinci(fd) {
        set_errno(libc::EINVAL);
        return -1;
    }
    call_next!(c"write": WriteFn, fd, buf, n).unwrap_or_else(|| fail(libc::ENOSYS) as ssize_t)
}

// ---- dup -------------------------------------------------------------------------------

/// After a successful duplication of `old` onto `new`: `new` shares `old`'s open (as a
/// duplicate of the module's file does) if `old` is a davinci descriptor; an entry `new` had
/// is gone (the kernel closed that file). `-1`/`EMFILE` (and `new` closed) if the table is
/// full.
fn after_dup(
    old_conn: Option<(std::sync::Arc<crate::conn::Conn>, crate::sys::FileId)>,
    new: c_int,
) -> c_int {
    let r = shielded(|| {
        let stale = table::remove(new);
        drop(stale);
        if let Some((conn, id)) = old_conn {
            if table::insert(new, id, conn).is_err() {
                return Err(Failure::new(
                    libc::EMFILE,
                    format!("more than {} davinci descriptors open", table::MAX_OPENS),
                ));
            }
        }
        Ok(new)
    });
    match r {
        Ok(fd) => fd,
        Err(f) => {
            // `new` is the duplicate just made, which the program has not seen.
            let _ = call_next!(c"close": CloseFn, new);
            fail(f.errno)
        }
    }
}

/// The open behind `fd`, if it is a davinci descriptor (outside the library).
fn davinci_of(fd: c_int) -> Option<(std::sync::Arc<crate::conn::Conn>, crate::sys::FileId)> {
    if inside() || !table::maybe(fd) {
        return None;
    }
    shielded(|| Ok(table::lookup(fd))).ok().flatten()
}

/// `dup(2)`: a duplicate of a davinci descriptor shares its open.
///
/// # Safety
/// None beyond `dup(2)`'s.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let conn = davinci_of(fd);
    let r = call_next!(c"dup": DupFn, fd).unwrap_or_else(|| fail(libc::ENOSYS));
    if r < 0 || inside() || (conn.is_none() && !table::maybe(r)) {
        return r;
    }
    after_dup(conn, r)
}

/// `dup2(2)`.
///
/// # Safety
/// None beyond `dup2(2)`'s.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let conn = davinci_of(old);
    let r = call_next!(c"dup2": Dup2Fn, old, new).unwrap_or_else(|| fail(libc::ENOSYS));
    if r < 0 || old == new || inside() || (conn.is_none() && !table::maybe(r)) {
        return r;
    }
    after_dup(conn, r)
}

/// `dup3(2)`.
///
/// # Safety
/// None beyond `dup3(2)`'s.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let conn = davinci_of(old);
    let r = call_next!(c"dup3": Dup3Fn, old, new, flags).unwrap_or_else(|| fail(libc::ENOSYS));
    if r < 0 || inside() || (conn.is_none() && !table::maybe(r)) {
        return r;
    }
    after_dup(conn, r)
}

/// Every fcntl entry point: `F_DUPFD`/`F_DUPFD_CLOEXEC` of a davinci descriptor share its
/// open; every other command goes to the program's descriptor unchanged.
///
/// # Safety
/// As `fcntl(2)`: `arg` is what `cmd` takes.
unsafe fn any_fcntl(name64: bool, fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    let dups = cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC;
    let conn = if dups { davinci_of(fd) } else { None };
    let r = if name64 {
        call_next!(c"fcntl64": FcntlFn, fd, cmd, arg)
    } else {
        call_next!(c"fcntl": FcntlFn, fd, cmd, arg)
    };
    let r = r.unwrap_or_else(|| fail(libc::ENOSYS));
    if !dups || r < 0 || inside() || (conn.is_none() && !table::maybe(r)) {
        return r;
    }
    after_dup(conn, r)
}

/// `fcntl(2)`.
///
/// # Safety
/// As `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { any_fcntl(false, fd, cmd, arg) }
}

/// glibc's `fcntl64` (what programs built against glibc 2.28 and later may call).
///
/// # Safety
/// As `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { any_fcntl(true, fd, cmd, arg) }
}
