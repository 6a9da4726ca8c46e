//! What only a kernel driver can show, run in the QEMU guest against `/dev/davinciN`
//! (scripts/kmod-test.sh): user pointers that fault, mmap cookies of other clients, a client
//! killed with SIGKILL in the middle of its work, a WAIT_EVENT interrupted by a signal,
//! mappings that a fork does not inherit (even after MADV_DOFORK), and the module on a shared
//! host: memory freed while mapped pins nothing, long fills hold up no open, the nodes are
//! 0660, a create whose reply is lost creates nothing, a signal restarts a wait under
//! SA_RESTART, and the module stays while a file or mapping of it lives.
//!
//! Every test is `#[ignore]`d: it needs the kernel module, so a host run lists it as ignored
//! rather than passing it vacuously. The guest runs `kernel --include-ignored` with
//! `DAVINCI_TEST_BACKEND=/dev/davinci0`; a test run without a device path fails loudly.
//!
//! The raw system calls (ioctl with deliberately bad pointers, mmap, fork, signals) are the
//! point of these tests, so these files have `unsafe`, each block with its `SAFETY:` comment.
//!
//! This file holds what the areas share (a raw open of the node, mappings, the module's
//! parameters); the tests are in `kernel/`, one file per area, named `AREA::test` (the guest's
//! `--skip` filters match by substring, so they hold).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;

use davinci_shim::{Control, ShareMode};
use davinci_tests::backend_name;
use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateStreamArgs, DeviceInfo, Wire,
    DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_STREAM,
    DRIVER_CMD_GET_INFO,
};
use nix::libc;

const KERNEL_ONLY: &str = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)";

/// The ioctl boundary: bad user pointers, lost replies, allocations failing inside a call.
#[path = "kernel/ioctls.rs"]
mod ioctls;

/// Mappings: cookies, fork, memory freed while mapped, the module held by a mapping.
#[path = "kernel/mappings.rs"]
mod mappings;

/// Signals: interrupted and restarted waits, a client killed mid-submission.
#[path = "kernel/signals.rs"]
mod signals;

/// The module on a shared host (issue 22): quotas, the device lock, the nodes' mode, sharing.
#[path = "kernel/shared_host.rs"]
mod shared_host;

/// The software engine: fault injection, wake-ups per round trip.
#[path = "kernel/engine.rs"]
mod engine;

/// The device event log and traces through the node (issue 46): injected faults, a reset,
/// the device's start, entries written to the caller's buffer.
#[path = "kernel/events.rs"]
mod events;

/// Exports as file descriptors (issue 42): SCM_RIGHTS, refusals, EMFILE.
#[path = "kernel/export_fds.rs"]
mod export_fds;

/// Bounded wake-ups and the global locks (issue 42): blocked waits per open, restarted
/// deadlines, parked sleepers, large allocations.
#[path = "kernel/wakeups.rs"]
mod wakeups;

/// The device node under test: `DAVINCI_TEST_BACKEND`, which must be a `/dev/` path.
fn node_path() -> String {
    let b = backend_name();
    assert!(
        b.starts_with("/dev/"),
        "these tests need DAVINCI_TEST_BACKEND=/dev/davinciN (the kernel module), not {b:?}"
    );
    b
}

/// Another device node of the same module (`/dev/davinci0` <-> `/dev/davinci1`).
fn other_node_path() -> String {
    let p = node_path();
    if p.ends_with('0') {
        format!("{}1", &p[..p.len() - 1])
    } else {
        format!("{}0", &p[..p.len() - 1])
    }
}

/// An open of the node, spoken to with raw system calls.
struct Node {
    file: File,
}

impl Node {
    fn open(path: &str, write: bool) -> Node {
        let file = OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)
            .unwrap_or_else(|e| panic!("open {path}: {e}"));
        Node { file }
    }

    /// `ioctl(fd, request, arg)` with `arg` taken as given (possibly a bad pointer): the
    /// errno on failure.
    fn ioctl_ptr(&self, request: u32, arg: *mut libc::c_void) -> Result<(), i32> {
        // SAFETY: the descriptor is open for the life of `self`. The driver validates `arg`
        // with copy_from_user/copy_to_user, which is what these tests exercise: a bad pointer
        // is an EFAULT from the kernel, never a write into this process outside `arg`'s
        // `_IOC_SIZE(request)` bytes, which the callers own (or which are not mapped at all).
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), request as _, arg) };
        if rc < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(())
        }
    }

    /// An ioctl with a well-formed argument: encoded, passed, decoded back.
    fn call<T: Wire>(&self, request: u32, arg: &T) -> Result<T, i32> {
        let mut buf = vec![0u8; T::SIZE];
        arg.encode(&mut buf);
        self.ioctl_ptr(request, buf.as_mut_ptr().cast())?;
        Ok(T::decode(&buf))
    }

    fn info(&self) -> DeviceInfo {
        self.call(DRIVER_CMD_GET_INFO, &DeviceInfo::default())
            .expect("GET_INFO")
    }

    fn create_context(&self) -> u32 {
        self.call(DRIVER_CMD_CREATE_CONTEXT, &CreateContextArgs::default())
            .expect("CREATE_CONTEXT")
            .handle
    }

    fn create_stream(&self, ctx: u32) -> CreateStreamArgs {
        let a = CreateStreamArgs {
            ctx,
            cmd_entries: 64,
            event_entries: 64,
            ..Default::default()
        };
        self.call(DRIVER_CMD_CREATE_STREAM, &a)
            .expect("CREATE_STREAM")
    }

    fn alloc(&self, size: u64) -> AllocMemoryArgs {
        let a = AllocMemoryArgs {
            size,
            ..Default::default()
        };
        self.call(DRIVER_CMD_ALLOC_MEMORY, &a)
            .expect("ALLOC_MEMORY")
    }

    /// `mmap(NULL, len, READ|WRITE, flags, fd, offset)`: the address, or the errno.
    fn mmap(&self, len: usize, offset: u64, flags: libc::c_int) -> Result<Mapping, i32> {
        // SAFETY: a fresh mapping chosen by the kernel (no MAP_FIXED), so nothing existing is
        // replaced; the result is owned by the returned `Mapping`, which unmaps it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                self.file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(Mapping { ptr: p, len })
        }
    }
}

/// A mapping this test owns; unmapped on drop.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` is a mapping this value owns (made by `Node::mmap` or
        // `anon`), unmapped exactly once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// Anonymous memory with protection `prot`.
fn anon(len: usize, prot: libc::c_int) -> Mapping {
    // SAFETY: a fresh private anonymous mapping chosen by the kernel; owned by the result.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "anonymous mmap");
    Mapping { ptr: p, len }
}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Makes the device shared (so a second client may open) for the life of the guard, then
/// exclusive again.
struct Shared(Control);

impl Shared {
    fn new(path: &str) -> Shared {
        let c = Control::open(path).expect("control open");
        c.set_share_mode(ShareMode::Shared)
            .expect("SET_DEVICE_SHARE shared (the guest runs as root)");
        Shared(c)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let _ = self.0.set_share_mode(ShareMode::Exclusive);
    }
}

/// A module parameter, as /sys shows it.
fn module_param(name: &str) -> String {
    let p = format!("/sys/module/davinci/parameters/{name}");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("read {p}: {e}"))
        .trim()
        .to_string()
}

/// Bytes of buffers the module holds now (`pinned_bytes`, all devices).
fn pinned_bytes() -> i64 {
    let v = module_param("pinned_bytes");
    v.parse()
        .unwrap_or_else(|e| panic!("pinned_bytes {v:?}: {e}"))
}

/// Waits for child `pid`: its raw wait status.
fn wait_child(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    // SAFETY: waits for a child this test forked.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid");
    status
}

impl Node {
    fn free(&self, handle: u32) -> Result<(), i32> {
        self.call(
            davinci_uapi::DRIVER_CMD_FREE_MEMORY,
            &davinci_uapi::HandleArgs { handle, pad: 0 },
        )
        .map(|_| ())
    }

    /// An ioctl whose argument buffer is given back whatever the outcome (what the driver
    /// copied out on a failure too).
    fn call_keep<T: Wire>(&self, request: u32, arg: &T) -> (Result<(), i32>, T) {
        let mut buf = vec![0u8; T::SIZE];
        arg.encode(&mut buf);
        let r = self.ioctl_ptr(request, buf.as_mut_ptr().cast());
        (r, T::decode(&buf))
    }
}
