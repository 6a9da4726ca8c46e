//! The system calls the library makes on raw numbers and addresses: which file a descriptor
//! is (`fstat`), `errno`, and copies from and to the program's memory that fail with `EFAULT`
//! on a bad address as the kernel's `copy_from_user` does (`process_vm_readv`/`writev` on
//! this process).
//
// `unsafe` here: libc calls on raw descriptors, `errno`'s thread-local slot, and copies
// through the program's pointers.
#![allow(unsafe_code)]

use std::os::fd::RawFd;

/// Which file a descriptor refers to: a descriptor number taken over by another file (closed
/// and reused behind the library's back) has another identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

/// The identity of the file behind `fd`, `None` if `fd` is not open.
pub fn file_id(fd: RawFd) -> Option<FileId> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is writable memory of a `struct stat`; fstat writes it only on success,
    // and any descriptor number is a valid argument (EBADF when it is not open).
    let r = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: fstat returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Some(FileId {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// An address the kernel would refuse with `EFAULT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault;

/// This thread's `errno`.
pub fn errno() -> i32 {
    // SAFETY: glibc's `__errno_location` returns this thread's errno slot, valid for the
    // thread's life.
    unsafe { *libc::__errno_location() }
}

/// Sets this thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: as in `errno`: the slot is this thread's and writable.
    unsafe { *libc::__errno_location() = e }
}

/// Copies `out.len()` bytes of the program's memory at `addr` into `out`; `Err(Fault)` where
/// the kernel would fail with `EFAULT` (unmapped or unreadable memory, or `addr` 0).
///
/// With `process_vm_readv` refused (a seccomp filter, `ENOSYS`/`EPERM`), it copies directly,
/// trusting the ioctl's contract that `addr` points at the argument's bytes: a bad pointer
/// then faults in the program instead of failing with `EFAULT` (README: limits).
pub fn read_user(addr: usize, out: &mut [u8]) -> Result<(), Fault> {
    if out.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Fault);
    }
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: out.len(),
    };
    // SAFETY: `local` describes `out`, writable for its length; the remote range is only
    // read by the kernel, which checks it (EFAULT) in this process's address space.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == out.len() as isize {
        return Ok(());
    }
    if n < 0 && matches!(errno(), libc::ENOSYS | libc::EPERM) {
        // SAFETY: the program passed `addr` as the argument of an ioctl whose size field says
        // it points at `out.len()` readable bytes (ioctl(2)'s contract); the ranges cannot
        // overlap (`out` is the library's own buffer).
        unsafe {
            std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len());
        }
        return Ok(());
    }
    Err(Fault)
}

/// Copies `data` into the program's memory at `addr`; `Err(Fault)` where the kernel would fail
/// with `EFAULT` (the fallback as in [`read_user`]).
pub fn write_user(addr: usize, data: &[u8]) -> Result<(), Fault> {
    if data.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Fault);
    }
    let local = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: `local` describes `data`, which the kernel only reads; the remote range is
    // written by the kernel after checking it (EFAULT) in this process's address space.
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == data.len() as isize {
        return Ok(());
    }
    if n < 0 && matches!(errno(), libc::ENOSYS | libc::EPERM) {
        // SAFETY: the program passed `addr` (the ioctl's argument, or LIST_CLIENTS' `buf`)
        // as memory the driver writes `data.len()` bytes to (ioctl(2)'s and the ABI's
        // contract); `data` is the library's own buffer, so they do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len());
        }
        return Ok(());
    }
    Err(Fault)
}
