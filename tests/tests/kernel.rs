//! What only a kernel driver can show, run in the QEMU guest against `/dev/davinciN`
//! (scripts/kmod-test.sh): user pointers that fault, mmap cookies of other clients, a client
//! killed with SIGKILL in the middle of its work, a WAIT_EVENT interrupted by a signal, and
//! mappings that a fork does not inherit.
//!
//! Every test is `#[ignore]`d: it needs the kernel module, so a host run lists it as ignored
//! rather than passing it vacuously. The guest runs `kernel --include-ignored` with
//! `DAVINCI_TEST_BACKEND=/dev/davinci0`; a test run without a device path fails loudly.
//!
//! The raw system calls (ioctl with deliberately bad pointers, mmap, fork, signals) are the
//! point of these tests, so this file has `unsafe`, each block with its `SAFETY:` comment.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use davinci_shim::{Control, Device, DeviceMem, ShareMode};
use davinci_tests::backend_name;
use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateEventArgs, CreateStreamArgs, DeviceInfo,
    ListClientsArgs, WaitEventArgs, WaitKind, Wire, ABI_VERSION_MAJOR, DRIVER_CMD_ALLOC_MEMORY,
    DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_EVENT, DRIVER_CMD_CREATE_STREAM,
    DRIVER_CMD_GET_INFO, DRIVER_CMD_LIST_CLIENTS, DRIVER_CMD_WAIT_EVENT, WAIT_FOREVER,
};
use nix::libc;

const KERNEL_ONLY: &str = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)";

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

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn bad_user_pointers_are_efault_and_the_file_goes_on() {
    let _ = KERNEL_ONLY;
    let path = node_path();
    let n = Node::open(&path, true);
    let pg = page();

    // Nothing mapped at all.
    assert_eq!(
        n.ioctl_ptr(DRIVER_CMD_GET_INFO, 16 as *mut libc::c_void),
        Err(libc::EFAULT),
        "GET_INFO to address 16"
    );
    assert_eq!(
        n.ioctl_ptr(DRIVER_CMD_CREATE_CONTEXT, std::ptr::null_mut()),
        Err(libc::EFAULT),
        "CREATE_CONTEXT from NULL"
    );
    // Mapped but inaccessible.
    let none = anon(pg, libc::PROT_NONE);
    assert_eq!(
        n.ioctl_ptr(DRIVER_CMD_GET_INFO, none.ptr),
        Err(libc::EFAULT),
        "GET_INFO into a PROT_NONE page"
    );
    assert_eq!(
        n.ioctl_ptr(DRIVER_CMD_WAIT_EVENT, none.ptr),
        Err(libc::EFAULT),
        "WAIT_EVENT from a PROT_NONE page"
    );
    // A struct that starts in a good page and runs into a bad one (a short buffer).
    let two = anon(2 * pg, libc::PROT_READ | libc::PROT_WRITE);
    // SAFETY: the second page of a mapping this test owns.
    let rc = unsafe { libc::mprotect(two.ptr.cast::<u8>().add(pg).cast(), pg, libc::PROT_NONE) };
    assert_eq!(rc, 0, "mprotect");
    // SAFETY: 8 bytes before the end of the accessible first page: in the mapping.
    let straddle = unsafe { two.ptr.cast::<u8>().add(pg - 8) };
    assert_eq!(
        n.ioctl_ptr(DRIVER_CMD_GET_INFO, straddle.cast()),
        Err(libc::EFAULT),
        "GET_INFO into a buffer that runs off its mapping"
    );
    // A well-formed argument whose own user pointer is bad (LIST_CLIENTS writes through it).
    let ctl = Node::open(&path, false);
    for buf in [16u64, none.ptr as u64] {
        let a = ListClientsArgs {
            buf,
            capacity: 4,
            entry_size: davinci_uapi::ClientUsage::SIZE as u32,
            ..Default::default()
        };
        assert_eq!(
            ctl.call(DRIVER_CMD_LIST_CLIENTS, &a).map(|_| ()),
            Err(libc::EFAULT),
            "LIST_CLIENTS into {buf:#x}"
        );
    }
    // Unknown commands and oversized arguments.
    assert_eq!(
        n.ioctl_ptr(0xc008_64ff, std::ptr::null_mut()),
        Err(libc::ENOTTY),
        "unknown command number"
    );
    assert_eq!(
        n.ioctl_ptr(
            0xc000_0000 | (0x3fff << 16) | (u32::from(b'd') << 8) | 1,
            none.ptr
        ),
        Err(libc::ENOTTY),
        "a known number with a 16 KiB argument size"
    );

    // Nothing was lost: both opens still work, and nothing was created.
    let info = n.info();
    assert_eq!(info.abi_major, ABI_VERSION_MAJOR);
    let ctx = n.create_context();
    assert_ne!(ctx, 0);
    let me = Control::open(&path)
        .expect("control open")
        .clients()
        .expect("LIST_CLIENTS")
        .into_iter()
        .find(|c| c.pid == std::process::id() && c.contexts > 0)
        .expect("this process's client is listed");
    assert_eq!(
        me.contexts, 1,
        "only the good CREATE_CONTEXT made a context"
    );
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn mmap_takes_only_the_callers_own_cookies_at_their_own_size() {
    let path = node_path();
    let pg = page();
    let shared = Shared::new(&path);
    let a = Node::open(&path, true);
    let ctx = a.create_context();
    let s = a.create_stream(ctx);
    let m = a.alloc(64 << 10);
    let cookies = [
        ("command ring", s.cmd_ring.mmap_offset, s.cmd_ring.mmap_size),
        (
            "event ring",
            s.event_ring.mmap_offset,
            s.event_ring.mmap_size,
        ),
        ("doorbell", s.doorbell_offset, s.doorbell_size),
        ("memory", m.mmap_offset, m.alloc_size),
    ];

    // The owner maps each object at its size (and less), and sees the driver's ring header.
    for (what, cookie, size) in cookies {
        let map = a
            .mmap(size as usize, cookie, libc::MAP_SHARED)
            .unwrap_or_else(|e| panic!("owner maps its {what}: errno {e}"));
        drop(map);
        a.mmap(pg, cookie, libc::MAP_SHARED)
            .unwrap_or_else(|e| panic!("owner maps the first page of its {what}: errno {e}"));
    }
    let cmd = a
        .mmap(
            s.cmd_ring.mmap_size as usize,
            s.cmd_ring.mmap_offset,
            libc::MAP_SHARED,
        )
        .expect("command ring");
    let entries_at = s.cmd_ring.offsets.entries as usize;
    // SAFETY: `entries` lies inside the mapped ring header (the driver's offsets); a plain
    // read of a u32 the device wrote before CREATE_STREAM returned.
    let entries = unsafe {
        cmd.ptr
            .cast::<u8>()
            .add(entries_at)
            .cast::<u32>()
            .read_volatile()
    };
    assert_eq!(entries, 64, "the mapped ring is the stream's");

    // Too long, off the object's start, not a cookie, or private: EINVAL.
    for (what, cookie, size) in cookies {
        let too_long = size as usize + pg;
        assert_eq!(
            a.mmap(too_long, cookie, libc::MAP_SHARED).map(|_| ()),
            Err(libc::EINVAL),
            "{what}: {too_long} bytes, more than the object"
        );
        // A cookie plus a page decodes as the next handle's cookie: not this client's.
        let r = a.mmap(pg, cookie + pg as u64, libc::MAP_SHARED).map(|_| ());
        assert!(
            matches!(r, Err(libc::EINVAL) | Err(libc::ENOENT)),
            "{what}: offset one page into the object: {r:?}"
        );
        assert_eq!(
            a.mmap(pg, cookie, libc::MAP_PRIVATE).map(|_| ()),
            Err(libc::EINVAL),
            "{what}: MAP_PRIVATE (the device would never see the copy)"
        );
    }
    for offset in [0, 7 << 48, 1 << 47] {
        assert_eq!(
            a.mmap(pg, offset, libc::MAP_SHARED).map(|_| ()),
            Err(libc::EINVAL),
            "offset {offset:#x} is no cookie"
        );
    }

    // Another client of the same device, and a client of another device: the cookies are
    // not theirs. A foreign cookie looks exactly like a stale one (docs/abi.md section 4).
    let b = Node::open(&path, true);
    let other = Node::open(&other_node_path(), true);
    let _ = other.create_context();
    for (what, cookie, _) in cookies {
        for (who, n) in [("another client", &b), ("another device's client", &other)] {
            assert_eq!(
                n.mmap(pg, cookie, libc::MAP_SHARED).map(|_| ()),
                Err(libc::ENOENT),
                "{who} maps the first client's {what}"
            );
        }
    }
    drop(cmd);
    drop((a, b, other, shared));
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn mappings_are_not_inherited_across_fork() {
    let path = node_path();
    let a = Node::open(&path, true);
    let m = a.alloc(64 << 10);
    let map = a
        .mmap(m.alloc_size as usize, m.mmap_offset, libc::MAP_SHARED)
        .expect("map memory");
    // SAFETY: the mapping is ours and writable; a volatile write of its first word.
    unsafe { map.ptr.cast::<u32>().write_volatile(0xfeed_f00d) };
    let pg = page();
    let mut vec = vec![0u8; (map.len).div_ceil(pg)];
    // mincore() says ENOMEM when the range is not mapped: a system call with a buffer
    // allocated before the fork, so the child needs no allocator.
    // SAFETY: the child only calls mincore and _exit, both async-signal-safe; the parent
    // continues normally.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: `vec` holds one byte per page of the range (allocated before the fork).
        let rc = unsafe { libc::mincore(map.ptr, map.len, vec.as_mut_ptr()) };
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        let code = if rc < 0 && errno == libc::ENOMEM {
            0
        } else {
            1
        };
        // SAFETY: leaves the child at once, running no destructor of the parent's state.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child still had the device mapping (VM_DONTCOPY missing): status {status:#x}"
    );
    // SAFETY: as for the write above.
    let v = unsafe { map.ptr.cast::<u32>().read_volatile() };
    assert_eq!(v, 0xfeed_f00d, "the parent's mapping is intact");
    // And the parent's own mincore of it succeeds.
    // SAFETY: as in the child.
    let rc = unsafe { libc::mincore(map.ptr, map.len, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "the parent still maps its memory");
}

extern "C" fn on_sigusr1(_: libc::c_int) {}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn a_signal_interrupts_wait_event_with_eintr() {
    let path = node_path();
    let n = Arc::new(Node::open(&path, true));
    let ctx = n.create_context();
    let ev = n
        .call(
            DRIVER_CMD_CREATE_EVENT,
            &CreateEventArgs {
                ctx,
                ..Default::default()
            },
        )
        .expect("CREATE_EVENT")
        .handle;

    // A handler without SA_RESTART, so the interrupted ioctl returns EINTR to the caller.
    // SAFETY: the handler does nothing (async-signal-safe); SIGUSR1 is not used otherwise
    // by this test program.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigusr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let (n, done) = (n.clone(), done.clone());
        std::thread::spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() }).unwrap();
            let a = WaitEventArgs {
                kind: WaitKind::Event as u32,
                handle: ev,
                value: 1,
                timeout_ns: WAIT_FOREVER,
                ..Default::default()
            };
            let r = n.call(DRIVER_CMD_WAIT_EVENT, &a).map(|_| ());
            done.store(true, Ordering::Release);
            r
        })
    };
    let thread = rx.recv().unwrap();
    // Signal until the wait returns: a signal that lands before the thread sleeps in the
    // driver only runs the handler, and the next one interrupts the sleep.
    let start = Instant::now();
    while !done.load(Ordering::Acquire) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "WAIT_EVENT did not return on a signal"
        );
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: `thread` is the waiter, alive until it is joined below.
        unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
    }
    assert_eq!(waiter.join().unwrap(), Err(libc::EINTR));
    // The file goes on: a bounded wait now times out as it should.
    let a = WaitEventArgs {
        kind: WaitKind::Event as u32,
        handle: ev,
        value: 1,
        timeout_ns: 10_000_000,
        ..Default::default()
    };
    assert_eq!(
        n.call(DRIVER_CMD_WAIT_EVENT, &a).map(|_| ()),
        Err(libc::ETIMEDOUT)
    );
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn a_client_killed_mid_submission_gives_everything_back() {
    let path = node_path();
    let ctl = Control::open(&path).expect("control open");
    let before = ctl.info().expect("GET_INFO");
    assert_eq!(before.clients, 0, "the device is idle before the test");

    let bin = davinci_tests::mockd::bin("davinci-testclient");
    let mut child = Command::new(&bin)
        .args(["work", "--until-eof", "--device", &path, "--elems", "4096"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
    let pid = child.id();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Wait until it is in the middle of its rounds.
    loop {
        let line = lines
            .next()
            .expect("the client reported nothing")
            .expect("read the client's report");
        assert!(!line.contains("\"error\""), "the client failed: {line}");
        if line.contains("\"progress\"") {
            break;
        }
    }
    let held = ctl
        .clients()
        .expect("LIST_CLIENTS")
        .into_iter()
        .find(|c| c.pid == pid)
        .expect("the working client is listed");
    assert!(held.streams >= 1 && held.memory_bytes > 0, "{held:?}");
    assert!(ctl.info().unwrap().memory_used >= held.memory_bytes);

    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(!status.success(), "killed, not exited: {status:?}");

    // Closing the file (the kernel does it for a killed process) frees everything.
    let start = Instant::now();
    loop {
        let clients = ctl.clients().expect("LIST_CLIENTS");
        let info = ctl.info().expect("GET_INFO");
        if clients.iter().all(|c| c.pid != pid) && info.memory_used == before.memory_used {
            assert_eq!(info.clients, before.clients);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the killed client's resources were not reclaimed: {clients:?}, {} bytes in use",
            info.memory_used
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // The exclusive device takes a new client, which gets the memory back and works.
    let dev = Device::open(&path).expect("a new client after the kill");
    let buf = dev.alloc(held.memory_bytes as usize).expect("alloc");
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    s.submit(&davinci_shim::TaskDesc::fill(
        7,
        buf.dev_addr(),
        buf.len() as u64 & !3,
        0x0102_0304,
    ))
    .unwrap();
    s.synchronize(Duration::from_secs(30)).unwrap();
    let mut out = vec![0u8; 16];
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, 0x0102_0304u32.to_ne_bytes().repeat(4));
}

/// The module's `quota_*` parameter, as /sys shows it.
fn quota_param(name: &str) -> u32 {
    let p = format!("/sys/module/davinci/parameters/quota_{name}");
    let v = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {p}: {e}"));
    v.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{p}: {v:?}: {e}"))
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn the_quota_parameters_reach_get_info_and_bind_on_a_shared_device() {
    let path = node_path();
    let ctl = Control::open(&path).expect("control open");
    let before = ctl.share_mode().expect("QUERY_DEVICE_SHARE");
    ctl.set_share_mode(ShareMode::Shared).expect("shared");
    let info = ctl.info().expect("GET_INFO");
    // The guest loads the module with quota_events=200 and the others left at 0 (the default,
    // a quarter of each table).
    let events = quota_param("events");
    assert_eq!(events, 200, "init.sh sets quota_events=200");
    assert_eq!(info.quota_events, events);
    for (name, got, table) in [
        ("contexts", info.quota_contexts, info.max_contexts),
        ("streams", info.quota_streams, info.max_streams),
        ("allocations", info.quota_allocations, info.max_allocations),
    ] {
        assert_eq!(quota_param(name), 0, "{name}: not given");
        assert_eq!(got, table / 4, "{name}: the default quota");
    }
    // And it binds: the 201st event of one client is refused.
    let dev = Device::open(&path).expect("a client");
    let ctx = dev.create_context().expect("context");
    let held: Vec<_> = (0..events)
        .map(|i| {
            ctx.create_event()
                .unwrap_or_else(|e| panic!("event {i}: {e}"))
        })
        .collect();
    let e = ctx.create_event().expect_err("one event past quota_events");
    assert_eq!(e.errno(), Some(davinci_shim::Errno::ENOSPC), "{e}");
    drop(held);
    drop(ctx);
    drop(dev);
    ctl.set_share_mode(before)
        .expect("restore the sharing mode");
}
