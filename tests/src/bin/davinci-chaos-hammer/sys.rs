//! The system calls of `davinci-chaos-hammer` (the one module with `unsafe`): opening the
//! node, ioctls in guarded buffers, mappings and touching them (through a pipe, or directly),
//! the alarm that bounds a blocking call.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::libc;

/// Guard bytes past every ioctl argument.
pub(crate) const GUARD: usize = 512;
pub(crate) const GUARD_BYTE: u8 = 0xa5;
pub(crate) const PAGE: usize = 4096;

pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

extern "C" fn on_alarm(_: libc::c_int) {}

/// SIGALRM interrupts a blocked call (no SA_RESTART): the call ends with EINTR.
pub(crate) fn arm_alarm_handler() {
    let sa = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(on_alarm),
        nix::sys::signal::SaFlags::empty(),
        nix::sys::signal::SigSet::empty(),
    );
    // SAFETY: the handler does nothing (async-signal-safe); it replaces no handler this
    // program relies on.
    let _ = unsafe { nix::sys::signal::sigaction(nix::sys::signal::Signal::SIGALRM, &sa) };
}

/// Runs `f` with an alarm of `secs` armed (so a blocking call in it ends with EINTR).
pub(crate) fn bounded<T>(secs: u32, f: impl FnOnce() -> T) -> T {
    // SAFETY: alarm has no memory-safety preconditions.
    unsafe { libc::alarm(secs) };
    let r = f();
    // SAFETY: as above.
    unsafe { libc::alarm(0) };
    r
}

/// An open of the node.
pub(crate) struct Node {
    fd: OwnedFd,
}

pub(crate) fn open_node(path: &str, write: bool) -> Result<Node, i32> {
    let c = CString::new(path).map_err(|_| libc::EINVAL)?;
    let flags = if write { libc::O_RDWR } else { libc::O_RDONLY } | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path; the descriptor returned is owned below.
    let fd = bounded(20, || unsafe { libc::open(c.as_ptr(), flags) });
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: a fresh descriptor this process owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(Node { fd })
}

impl Node {
    /// `ioctl(fd, request, buf)` with `buf` holding the argument followed by [`GUARD`] bytes:
    /// the errno (0 on success) and whether the guard was written.
    pub(crate) fn ioctl_guarded(&self, request: u32, arg: &mut [u8]) -> (i32, bool) {
        let mut buf = vec![GUARD_BYTE; arg.len() + GUARD];
        buf[..arg.len()].copy_from_slice(arg);
        // SAFETY: the buffer holds `_IOC_SIZE(request)` bytes (`arg.len()`) and more; the
        // kernel writes at most that (a write past it is what the guard catches).
        let rc = bounded(30, || unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                request as _,
                buf.as_mut_ptr().cast::<libc::c_void>(),
            )
        });
        let e = if rc < 0 { last_errno() } else { 0 };
        let overrun = buf[arg.len()..].iter().any(|b| *b != GUARD_BYTE);
        arg.copy_from_slice(&buf[..arg.len()]);
        (e, overrun)
    }

    pub(crate) fn mmap(&self, len: usize, cookie: u64) -> Result<Map, i32> {
        // SAFETY: a new mapping chosen by the kernel (no MAP_FIXED), owned by the `Map`.
        let p = bounded(30, || unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd.as_raw_fd(),
                cookie as libc::off_t,
            )
        });
        if p == libc::MAP_FAILED {
            Err(last_errno())
        } else {
            Ok(Map { ptr: p, len })
        }
    }
}

pub(crate) struct Map {
    ptr: *mut libc::c_void,
    pub(crate) len: usize,
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the mapping this value owns.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

impl Map {
    /// `write(fd, map + at, k)`: the kernel reads the mapping (a read fault in its copy; a
    /// refused fault is EFAULT). The errno, or 0 and the bytes written.
    pub(crate) fn copy_to_pipe(&self, fd: &OwnedFd, at: usize, k: usize) -> (i32, usize) {
        if at.checked_add(k).is_none_or(|end| end > self.len) {
            return (libc::EINVAL, 0);
        }
        // SAFETY: `[at, at + k)` lies in the live mapping this value owns (checked above); the
        // kernel only reads it (copy_from_user).
        let w = bounded(30, || unsafe {
            libc::write(fd.as_raw_fd(), self.ptr.cast::<u8>().add(at).cast(), k)
        });
        if w < 0 {
            (last_errno(), 0)
        } else {
            (0, w as usize)
        }
    }

    /// `read(fd, map + at, k)`: the kernel writes the mapping (a write fault). The errno.
    pub(crate) fn fill_from_pipe(&self, fd: &OwnedFd, at: usize, k: usize) -> i32 {
        if at.checked_add(k).is_none_or(|end| end > self.len) {
            return libc::EINVAL;
        }
        // SAFETY: `[at, at + k)` lies in the live mapping this value owns (checked above),
        // which no Rust reference covers: the kernel writes it (copy_to_user).
        let r = bounded(30, || unsafe {
            libc::read(fd.as_raw_fd(), self.ptr.cast::<u8>().add(at).cast(), k)
        });
        if r < 0 {
            last_errno()
        } else {
            0
        }
    }

    /// A volatile read and write of the word at `at` (a refused fault is SIGBUS).
    pub(crate) fn touch_direct(&self, at: usize) {
        if at.checked_add(8).is_none_or(|end| end > self.len) || !at.is_multiple_of(8) {
            return;
        }
        bounded(30, || {
            // SAFETY: `[at, at + 8)` lies in the live mapping (checked above), 8-aligned (the
            // mapping is page aligned); no Rust reference covers it.
            unsafe {
                let q = self.ptr.cast::<u8>().add(at).cast::<u64>();
                let v = q.read_volatile();
                q.write_volatile(v);
            }
        });
    }
}

/// Reads and drops up to 8 bytes from `fd` (a non-blocking pipe).
pub(crate) fn drain(fd: &OwnedFd) {
    let mut sink = [0u8; 8];
    // SAFETY: reads into a local buffer of 8 bytes.
    unsafe { libc::read(fd.as_raw_fd(), sink.as_mut_ptr().cast(), 8) };
}

pub(crate) fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` holds two ints; the descriptors are owned below.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if rc != 0 {
        eprintln!("pipe2: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    // SAFETY: fresh descriptors this process owns.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}
