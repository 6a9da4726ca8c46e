//! Mappings of the device: mmap takes only the caller's own cookies at their own size, a fork
//! does not inherit them (even after MADV_DOFORK), memory freed while mapped pins nothing and
//! its mapping faults, and the module stays while a file or a mapping of it lives.

use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

use davinci_uapi::Wire;
use nix::libc;

use super::{node_path, other_node_path, page, pinned_bytes, wait_child, Node, Shared};

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
    // MADV_DOFORK would undo VM_DONTCOPY: the driver's mappings refuse it (VM_IO).
    // SAFETY: advice on a mapping this test owns; no memory is touched.
    let rc = unsafe { libc::madvise(map.ptr, map.len, libc::MADV_DOFORK) };
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    assert_eq!(
        (rc, errno),
        (-1, libc::EINVAL),
        "MADV_DOFORK on a device mapping must be refused"
    );
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

/// /proc/meminfo's MemAvailable, in KiB.
fn mem_available_kib() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
    m.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemAvailable in /proc/meminfo")
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn memory_freed_while_mapped_pins_nothing_and_its_mapping_faults() {
    let path = node_path();
    let n = Node::open(&path, true);
    let pg = page();
    let pinned_before = pinned_bytes();
    let avail_before = mem_available_kib();
    // A tenant that frees what it keeps mapped, 10,000 times over: with pages pinned by the
    // mappings and no longer counted, that would be 640 MiB in a 1 GiB guest.
    const ROUNDS: usize = 10_000;
    const SIZE: usize = 64 << 10;
    let mut kept = Vec::with_capacity(ROUNDS);
    let mut most = 0;
    for i in 0..ROUNDS {
        let m = n.alloc(SIZE as u64);
        let map = n
            .mmap(SIZE, m.mmap_offset, libc::MAP_SHARED)
            .unwrap_or_else(|e| panic!("round {i}: map: errno {e}"));
        for at in [0, SIZE - pg] {
            // SAFETY: inside the mapping this test owns; the object is alive.
            unsafe {
                map.ptr
                    .cast::<u8>()
                    .add(at)
                    .cast::<u32>()
                    .write_volatile(i as u32)
            };
        }
        most = most.max(pinned_bytes() - pinned_before);
        n.free(m.handle)
            .unwrap_or_else(|e| panic!("round {i}: free: errno {e}"));
        kept.push(map);
    }
    let pinned = pinned_bytes() - pinned_before;
    let avail = mem_available_kib();
    println!(
        "pinned: {} bytes at most during {ROUNDS} rounds, {pinned} after; MemAvailable {} -> {} KiB",
        most, avail_before, avail
    );
    assert_eq!(
        pinned, 0,
        "every freed allocation's pages went, mapped or not"
    );
    assert!(
        most <= SIZE as i64,
        "at most one allocation held at a time: {most}"
    );
    assert!(
        avail + 64 * 1024 >= avail_before,
        "MemAvailable fell by more than 64 MiB: {avail_before} -> {avail} KiB"
    );
    drop(kept);

    // A mapping of freed memory no longer reaches any page: touching it is SIGBUS. A child
    // does it on the file it inherits (the same open), with system calls only.
    let m = n.alloc(SIZE as u64);
    let free_arg = {
        let mut b = vec![0u8; davinci_uapi::HandleArgs::SIZE];
        davinci_uapi::HandleArgs {
            handle: m.handle,
            pad: 0,
        }
        .encode(&mut b);
        b
    };
    let fd = n.file.as_raw_fd();
    // SAFETY: the child only makes system calls (mmap, a store, ioctl, _exit) with buffers
    // allocated before the fork; the parent continues normally.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: in the child: a shared mapping of the allocation (its cookie), a store
        // while it exists, FREE_MEMORY, then a store that must fault.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                m.mmap_offset as libc::off_t,
            );
            if p == libc::MAP_FAILED {
                libc::_exit(2);
            }
            p.cast::<u32>().write_volatile(1);
            if libc::ioctl(
                fd,
                davinci_uapi::DRIVER_CMD_FREE_MEMORY as _,
                free_arg.as_ptr(),
            ) != 0
            {
                libc::_exit(3);
            }
            p.cast::<u32>().write_volatile(2);
            libc::_exit(4);
        }
    }
    let status = wait_child(pid);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGBUS,
        "a store into freed memory through a live mapping must raise SIGBUS: status {status:#x}"
    );
    assert_eq!(
        pinned_bytes(),
        pinned_before,
        "the child's allocation went too"
    );
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn the_module_stays_while_a_file_or_a_mapping_of_it_is_alive() {
    let path = node_path();
    let n = Node::open(&path, true);
    let m = n.alloc(1 << 16);
    let map = n
        .mmap(1 << 16, m.mmap_offset, libc::MAP_SHARED)
        .expect("map");
    let rmmod = || {
        Command::new("rmmod")
            .arg("davinci")
            .stderr(Stdio::null())
            .status()
            .expect("run rmmod")
            .success()
    };
    assert!(!rmmod(), "rmmod with a file open");
    drop(n);
    assert!(!rmmod(), "rmmod with the file closed but a mapping alive");
    // SAFETY: the mapping is still valid: its allocation lives until the file's release.
    unsafe { map.ptr.cast::<u32>().write_volatile(7) };
    drop(map);
    assert!(std::fs::metadata(&path).is_ok(), "the node is still there");
}

/// Admin completions a PCI node's device has sent (its vector 0's interrupts, from the
/// module's debugfs test hook): one per round trip to the device.
fn admin_interrupts(bus: &str) -> u64 {
    let info = std::fs::read_to_string(format!("/sys/kernel/debug/davinci/{bus}/info"))
        .unwrap_or_else(|e| panic!("the PCI device's debugfs info: {e}"));
    info.lines()
        .find_map(|l| l.strip_prefix("irqs "))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no irqs line in {info:?}"))
}

/// A PCI node: the mappings of objects an ioctl created (memory, a stream's rings and
/// doorbell page), and their first faults, ask the device nothing: their rights were recorded
/// when the objects were made, so no round trip runs under `mmap_lock` (issue 42, Why 7).
/// The software device has no device to ask.
#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn mmap_of_a_created_object_asks_the_pci_device_nothing() {
    let path = node_path();
    let id = davinci_shim::Control::open(&path)
        .expect("control open")
        .identity()
        .expect("GET_IDENTITY");
    let bus = id.bus_id().to_string();
    if bus.is_empty() {
        println!("{path} is a software device: no device round trips to count");
        return;
    }
    let pg = page();
    let n = Node::open(&path, true);
    let ctx = n.create_context();
    let s = n.create_stream(ctx);
    let m = n.alloc(64 << 10);
    let before = admin_interrupts(&bus);
    let mut maps = Vec::new();
    for (what, cookie, len) in [
        ("memory", m.mmap_offset, m.alloc_size as usize),
        (
            "command ring",
            s.cmd_ring.mmap_offset,
            s.cmd_ring.mmap_size as usize,
        ),
        (
            "event ring",
            s.event_ring.mmap_offset,
            s.event_ring.mmap_size as usize,
        ),
        ("doorbell", s.doorbell_offset, s.doorbell_size as usize),
    ] {
        let map = n
            .mmap(len, cookie, libc::MAP_SHARED)
            .unwrap_or_else(|e| panic!("mmap of the {what}: errno {e}"));
        // The first fault of each page: from the recorded right too (not the doorbell's:
        // a load from the device's registers is no business of a client).
        let touched = if what == "doorbell" { 0 } else { len };
        for off in (0..touched).step_by(pg) {
            // SAFETY: `off` is inside the live mapping `map` of `len` bytes.
            unsafe { std::ptr::read_volatile(map.ptr.cast::<u8>().add(off)) };
        }
        maps.push(map);
    }
    assert_eq!(
        admin_interrupts(&bus),
        before,
        "an mmap or a fault made a round trip to the device"
    );
}
