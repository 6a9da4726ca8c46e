//! `libdavinci-preload.so`: an `LD_PRELOAD` library that gives a program written for the
//! kernel module's `/dev/davinciN` (`open`, `ioctl`, `mmap`, `close`, the futex doorbell)
//! the same behaviour on a `davinci-mockd` device, unmodified: `uapi/examples/client.c`
//! runs against the daemon with
//!
//! ```text
//! LD_PRELOAD=/path/to/libdavinci-preload.so DAVINCI_PRELOAD_SOCKET_DIR=/tmp/rd ./client /dev/davinci0
//! ```
//!
//! * `open("/dev/davinciN")` (and `open64`, `openat`, `openat64`, glibc's fortified
//!   `__open_2`...) connects to `davinciN.sock` in `$DAVINCI_PRELOAD_SOCKET_DIR` (default:
//!   the daemon's own default directory) and says HELLO; the program gets a descriptor that
//!   stands for the open (an empty memfd named `davinciN`). A socket this process does not
//!   trust (`davinci_mockd_proto::trust`: a `/tmp/davinci-$UID` another user made, a socket
//!   or daemon of another user) is never connected: the open fails with `EACCES`, and the
//!   reason goes to stderr once.
//! * `ioctl` on it is one IOCTL round trip carrying exactly the argument's `_IOC_SIZE`
//!   bytes, errno from the reply; `mmap` of a cookie is one MMAP round trip, the returned
//!   memfd mapped shared at the returned offset (so the doorbell futex and the rings are the
//!   daemon's memory, untouched by the library afterwards).
//! * a blocking WAIT_EVENT that a signal handler interrupts is cancelled (CANCEL) and fails
//!   with `EINTR`, as in the module.
//! * everything else, and every descriptor that is not a davinci open, goes to the next
//!   definition (`dlsym(RTLD_NEXT)`, normally glibc's) untouched.
//!
//! `bindings/preload/README.md` has the use, the environment and the limits (fork, exec, dup, static
//! binaries...); `docs/mockd-protocol.md` the protocol.
//!
//! `unsafe` is in `interpose` (the exported C functions) and [`sys`] (raw descriptors,
//! errno, copies through the program's pointers) only.
#![deny(unsafe_code)]

use std::cell::Cell;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

pub mod conn;
pub mod ops;
pub mod sys;
pub mod table;

// The interposed functions: not in the crate's own unit tests (the test harness would
// interpose its own calls), and only where a variadic `open`/`ioctl`/`fcntl` argument
// arrives where a fixed third (fourth) argument would (x86_64 and aarch64 Linux: see there).
#[cfg(all(
    not(test),
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod interpose;

/// The environment variable naming the socket directory (default: the daemon's default).
pub const SOCKET_DIR_ENV: &str = "DAVINCI_PRELOAD_SOCKET_DIR";

/// The environment variable that makes the library say on stderr why a davinci call failed
/// (`1`); it is silent otherwise, as the kernel is.
pub const LOG_ENV: &str = "DAVINCI_PRELOAD_LOG";

/// A davinci call that failed: the errno the program sees, and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// A positive errno.
    pub errno: i32,
    /// What was wrong (shown with `DAVINCI_PRELOAD_LOG=1`).
    pub msg: String,
    /// Said on stderr already ([`Failure::said_once`]): not logged again.
    pub said: bool,
}

/// Whether a refusal of an untrusted socket has been said on stderr in this process.
static SAID_REFUSAL: AtomicBool = AtomicBool::new(false);

impl Failure {
    /// A failure with this errno and message.
    pub fn new(errno: i32, msg: String) -> Failure {
        Failure {
            errno,
            msg,
            said: false,
        }
    }

    /// A failure the program's user must hear of even though the program only sees an errno
    /// (a socket the library refused to trust): its message goes to stderr, the first time in
    /// this process only, as `libdavinci-preload: MSG`.
    pub fn said_once(errno: i32, msg: String) -> Failure {
        let said = !SAID_REFUSAL.swap(true, Ordering::Relaxed);
        if said {
            let _ = writeln!(std::io::stderr(), "libdavinci-preload: {msg}");
        }
        Failure { errno, msg, said }
    }
}

thread_local! {
    /// How deep this thread is inside the library (const-initialised and without a
    /// destructor: no allocation, usable until the thread's very end).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Whether this thread is inside the library already: then every interposed call it makes
/// (Rust's std and nix call `close`, `poll`, `fcntl`...) goes straight to the real function.
pub fn inside() -> bool {
    DEPTH.try_with(|d| d.get() > 0).unwrap_or(true)
}

/// Marks this thread inside the library while alive.
pub struct Inside(());

impl Inside {
    /// Enters.
    pub fn enter() -> Inside {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_add(1)));
        Inside(())
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Runs `f` inside the library with no panic escaping: a panic (a bug) becomes `EIO`.
pub fn shielded<T>(f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    let _inside = Inside::enter();
    let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(Failure::new(
            libc::EIO,
            "internal error in libdavinci-preload (a bug: please report it)".into(),
        ))
    });
    if let Err(f) = &r {
        log(f);
    }
    r
}

/// Says why a call failed on stderr when `$DAVINCI_PRELOAD_LOG` is set (not empty, not 0).
fn log(f: &Failure) {
    let on = std::env::var_os(LOG_ENV).is_some_and(|v| !v.is_empty() && v != "0");
    if on && !f.said {
        let e = std::io::Error::from_raw_os_error(f.errno);
        let _ = writeln!(std::io::stderr(), "libdavinci-preload: {} ({e})", f.msg);
    }
}
