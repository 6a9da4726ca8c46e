//! Direct loads and stores on mappings of files a peer may shrink.
//!
//! A shared mapping of a memfd that another process may `ftruncate` faults (`SIGBUS`,
//! `BUS_ADRERR`) on any access past the file's new end: one client shrinking its own
//! allocation would kill the daemon that serves every tenant. The kernel's own copies
//! (`pread`/`pwrite` with the mapping as the buffer) turn that into `EFAULT`, at a fraction
//! of memory speed. This module makes the process's loads and stores safe instead:
//!
//! * One process-wide `SIGBUS` handler ([`install`], once, chaining to the one before it).
//! * A thread announces the ranges it is about to access and a flag for each ([`guarded`]).
//! * A fault inside an announced range (and only such a fault: `BUS_ADRERR` at an address
//!   in one of the current thread's ranges) sets that range's flag and maps private zero
//!   pages (`MAP_FIXED`, anonymous) from the faulting page to the end of the range, over
//!   the mapping; the faulting instruction then runs again and completes on those pages. No
//!   `longjmp` crosses Rust frames: the access finishes on zeros and the caller, seeing the
//!   flag, throws its result away (the file shrank: an error, never data).
//! * Any other `SIGBUS` goes to the handler that was installed before (Rust's own, or the
//!   default action: the process dies of it as it would have).
//!
//! The flag is the mapping's for good: its pages there are no longer the file's, so its
//! owner must never load or store it directly again (the file cannot grow back: growing is
//! sealed where this is used). Where the handler cannot be installed, or another handler
//! replaced it since, [`guarded`] refuses and the caller uses the kernel's copies.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

/// Ranges one guarded access may announce.
const RANGES: usize = 2;

/// One range a guarded access touches, and the flag a fault in it sets.
#[derive(Debug, Clone, Copy)]
pub struct Span<'a> {
    /// The range's first byte (inside a shared mapping).
    pub start: *const u8,
    /// Its length.
    pub len: usize,
    /// Set (for good) when an access in the range faulted.
    pub shrunk: &'a AtomicBool,
}

/// The current thread's announced ranges. Signal handlers run on the faulting thread, so the
/// handler reads the very thread's copy; a `const`-initialised thread-local of a type
/// without destructor is a plain TLS slot (no lazy initialisation, no destructor to register),
/// which the thread touches before it announces anything.
struct Announced {
    active: Cell<bool>,
    lo: [Cell<usize>; RANGES],
    hi: [Cell<usize>; RANGES],
    flag: [Cell<*const AtomicBool>; RANGES],
    faulted: Cell<bool>,
}

thread_local! {
    static ANNOUNCED: Announced = const {
        Announced {
            active: Cell::new(false),
            lo: [Cell::new(0), Cell::new(0)],
            hi: [Cell::new(0), Cell::new(0)],
            flag: [Cell::new(std::ptr::null()), Cell::new(std::ptr::null())],
            faulted: Cell::new(false),
        }
    };
}

/// The `SIGBUS` action before ours (what other faults go to).
static PREVIOUS: OnceLock<Previous> = OnceLock::new();
static INSTALL: Once = Once::new();
static PAGE: AtomicUsize = AtomicUsize::new(0);
/// Guarded accesses in progress, in every thread: while there are none, the handler passes a
/// fault on without looking at the faulting thread's slot (whose first touch, in a thread
/// that never announced anything, could allocate inside a library loaded at run time).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// `libc::sigaction` is plain data; kept to chain to it.
struct Previous(libc::sigaction);
// SAFETY: the action is plain data (a handler address, a mask, flags), read only.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}

fn our_handler() -> usize {
    on_sigbus as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize
}

/// Installs the handler (once per process); whether it is in place now (not replaced since
/// by someone else's `sigaction`).
pub fn install() -> bool {
    INSTALL.call_once(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let Ok(page) = usize::try_from(page) else {
            return;
        };
        if !page.is_power_of_two() {
            return;
        }
        PAGE.store(page, Ordering::Relaxed);
        // SAFETY: an all-zero `sigaction` is a valid value (SIG_DFL, empty mask).
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reads the current action into a local.
        if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) } != 0 {
            return;
        }
        if PREVIOUS.set(Previous(old)).is_err() {
            return;
        }
        // SAFETY: as above.
        let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
        ours.sa_sigaction = our_handler();
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: `sa_mask` is a local `sigset_t`.
        unsafe { libc::sigemptyset(&mut ours.sa_mask) };
        // SAFETY: installs a handler that is async-signal-safe (it touches atomics, this
        // thread's TLS slot and calls mmap and sigaction only) and chains to `old`, stored
        // above before the handler can run.
        unsafe { libc::sigaction(libc::SIGBUS, &ours, std::ptr::null_mut()) };
    });
    in_place()
}

/// Whether our handler is the process's `SIGBUS` action right now.
fn in_place() -> bool {
    if PREVIOUS.get().is_none() {
        return false;
    }
    // SAFETY: as in `install`.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reads the current action into a local.
    let r = unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut cur) };
    r == 0 && cur.sa_sigaction == our_handler()
}

/// Runs `f`, which loads and stores only inside `spans` (and ordinary memory), with faults
/// inside the spans made harmless (see the module docs). `None` (and `f` not run) when the
/// handler is not in place, more than two spans are given, or this thread is inside another
/// guarded access; else `f`'s result and whether an access faulted.
pub fn guarded<R>(spans: &[Span<'_>], f: impl FnOnce() -> R) -> Option<(R, bool)> {
    if spans.len() > RANGES || !install() {
        return None;
    }
    ANNOUNCED.with(|a| {
        if a.active.get() {
            return None;
        }
        for i in 0..RANGES {
            let (lo, hi, flag) = match spans.get(i) {
                Some(s) => (
                    s.start as usize,
                    (s.start as usize).saturating_add(s.len),
                    std::ptr::from_ref(s.shrunk),
                ),
                None => (0, 0, std::ptr::null()),
            };
            a.lo[i].set(lo);
            a.hi[i].set(hi);
            a.flag[i].set(flag);
        }
        a.faulted.set(false);
        a.active.set(true);
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        // The handler, on this thread, must see the ranges before the first access.
        compiler_fence(Ordering::SeqCst);
        let r = f();
        compiler_fence(Ordering::SeqCst);
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
        a.active.set(false);
        let faulted = a.faulted.get();
        Some((r, faulted))
    })
}

/// The `SIGBUS` handler (async-signal-safe: atomics, this thread's TLS slot, `mmap`,
/// `sigaction`).
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code == libc::BUS_ADRERR && absorb(addr) {
        return;
    }
    chain(sig, info, ctx);
}

/// A fault at `addr` inside one of this thread's announced ranges: zero pages mapped from
/// its page to the range's end, the range's flag set. `false` if it is not ours.
fn absorb(addr: usize) -> bool {
    let page = PAGE.load(Ordering::Relaxed);
    if page == 0 || ACTIVE.load(Ordering::SeqCst) == 0 {
        return false;
    }
    ANNOUNCED.with(|a| {
        if !a.active.get() {
            return false;
        }
        for i in 0..RANGES {
            let (lo, hi) = (a.lo[i].get(), a.hi[i].get());
            if !(lo..hi).contains(&addr) {
                continue;
            }
            let flag = a.flag[i].get();
            if !flag.is_null() {
                // SAFETY: the flag outlives the guarded access (`Span`'s borrow), which is
                // what this fault interrupted.
                unsafe { (*flag).store(true, Ordering::SeqCst) };
            }
            let start = addr & !(page - 1);
            let end = hi.saturating_add(page - 1) & !(page - 1);
            // SAFETY: `[start, end)` lies in the shared mapping the range is inside (a
            // mapping starts and ends on page boundaries, and `lo <= addr < hi` lie in it):
            // replacing its pages with private zero pages changes only memory this process
            // maps for that file, which the caller never accesses directly again (the flag).
            let p = unsafe {
                libc::mmap(
                    start as *mut libc::c_void,
                    end - start,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return false;
            }
            a.faulted.set(true);
            return true;
        }
        false
    })
}

/// Hands a fault that is not ours to the action before ours; with none (the default, or
/// ignored), restores the default and returns: the access faults again and the process dies
/// of it, as it would have without this module.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let prev = PREVIOUS.get().map(|p| p.0);
    match prev {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: an SA_SIGINFO action's address is a three-argument handler.
                let h: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(p.sa_sigaction) };
                h(sig, info, ctx);
            } else {
                // SAFETY: a plain action's address is a one-argument handler.
                let h: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(p.sa_sigaction) };
                h(sig);
            }
        }
        _ => {
            // SAFETY: as in `install`.
            let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
            dfl.sa_sigaction = libc::SIG_DFL;
            // SAFETY: restores the default action; sigaction is async-signal-safe.
            unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
        }
    }
}
