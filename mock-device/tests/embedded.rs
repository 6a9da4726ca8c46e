//! MockDevice at the ioctl/mmap level (what the shim's embedded backend and the daemon build
//! on): cookie ownership, blocking waits, worker lifetimes, shutdown.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_driver_core::NoUserMem;
use davinci_mock_device::{local_open_params, MockConfig, MockDevice, Role};
use davinci_uapi::*;

fn call<T: Wire>(dev: &MockDevice, client: u32, request: u32, args: &mut T) -> Result<(), Errno> {
    let mut arg = vec![0u8; T::SIZE];
    args.encode(&mut arg);
    let r = dev.ioctl(client, request, &mut arg, &mut NoUserMem);
    *args = T::decode(&arg);
    r.map_err(|e| e.errno)
}

fn client(dev: &MockDevice) -> u32 {
    dev.open(local_open_params(Role::Client, true))
        .expect("open a client")
}

fn stream(dev: &MockDevice, c: u32) -> CreateStreamArgs {
    let mut ctx = CreateContextArgs::default();
    call(dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut ctx).unwrap();
    let mut s = CreateStreamArgs {
        ctx: ctx.handle,
        cmd_entries: 8,
        event_entries: 8,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_CREATE_STREAM, &mut s).unwrap();
    s
}

/// Submits `desc` as the first task of `stream` (SUBMIT_TASK) and waits until it completed,
/// successfully.
fn run_first_task(dev: &MockDevice, c: u32, stream: u32, desc: TaskDesc) {
    run_task(dev, c, stream, desc, 1);
}

/// Submits `desc` as task number `n` (from 1) of `stream` and waits until it completed,
/// successfully.
fn run_task(dev: &MockDevice, c: u32, stream: u32, desc: TaskDesc, n: u64) {
    let mut sub = SubmitTaskArgs {
        stream,
        desc,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_SUBMIT_TASK, &mut sub).unwrap();
    let mut w = WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: stream,
        value: n,
        timeout_ns: 10_000_000_000,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_WAIT_EVENT, &mut w).unwrap();
    assert_eq!(w.status, 0);
}

#[test]
fn cookies_map_only_for_their_owner_and_within_the_object() {
    let dev = MockDevice::new(MockConfig::default());
    let one = client(&dev);
    let mut share = DeviceShareArgs {
        mode: ShareMode::Shared as u32,
        ..Default::default()
    };
    call(&dev, one, DRIVER_CMD_SET_DEVICE_SHARE, &mut share).unwrap();
    let two = client(&dev);
    let mut a = AllocMemoryArgs {
        size: 10_000,
        ..Default::default()
    };
    call(&dev, one, DRIVER_CMD_ALLOC_MEMORY, &mut a).unwrap();
    assert_eq!(a.alloc_size, 12_288);
    let s = stream(&dev, one);

    let m = dev.map(one, a.mmap_offset, a.alloc_size).unwrap();
    assert_eq!(m.offset, 0, "an allocation is its own memfd");
    assert!(dev
        .map(one, s.cmd_ring.mmap_offset, s.cmd_ring.mmap_size)
        .is_ok());
    assert!(dev.map(one, s.doorbell_offset, s.doorbell_size).is_ok());
    // Another client: as if the objects did not exist.
    for cookie in [
        a.mmap_offset,
        s.cmd_ring.mmap_offset,
        s.event_ring.mmap_offset,
    ] {
        assert_eq!(dev.map(two, cookie, 4096).unwrap_err().errno, Errno::ENOENT);
    }
    // Longer than the object, or not a cookie at all.
    assert_eq!(
        dev.map(one, a.mmap_offset, a.alloc_size + 4096)
            .unwrap_err()
            .errno,
        Errno::EINVAL
    );
    assert_eq!(
        dev.map(one, s.doorbell_offset, 8192).unwrap_err().errno,
        Errno::EINVAL
    );
    assert_eq!(dev.map(one, 12345, 4096).unwrap_err().errno, Errno::EINVAL);
}

#[test]
fn wait_event_blocks_until_the_deadline_then_times_out() {
    let dev = MockDevice::new(MockConfig::default());
    let c = client(&dev);
    let s = stream(&dev, c);
    let mut w = WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: s.handle,
        value: 1,
        timeout_ns: 30_000_000,
        ..Default::default()
    };
    let t = Instant::now();
    assert_eq!(
        call(&dev, c, DRIVER_CMD_WAIT_EVENT, &mut w),
        Err(Errno::ETIMEDOUT)
    );
    assert!(t.elapsed() >= Duration::from_millis(30));
    assert_eq!(w.current, 0);
    w.timeout_ns = 0;
    assert_eq!(
        call(&dev, c, DRIVER_CMD_WAIT_EVENT, &mut w),
        Err(Errno::EAGAIN)
    );
    w.value = 0;
    assert_eq!(call(&dev, c, DRIVER_CMD_WAIT_EVENT, &mut w), Ok(()));
}

#[test]
fn slow_path_task_runs_on_the_worker() {
    let dev = MockDevice::new(MockConfig::default());
    let c = client(&dev);
    let s = stream(&dev, c);
    let mut a = AllocMemoryArgs {
        size: 4096,
        ..Default::default()
    };
    call(&dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a).unwrap();
    let mut t = SubmitTaskArgs {
        stream: s.handle,
        desc: TaskDesc::fill(7, DevAddr(a.dev_addr), 4096, 0x77),
        ..Default::default()
    };
    call(&dev, c, DRIVER_CMD_SUBMIT_TASK, &mut t).unwrap();
    assert_eq!(t.index, 0);
    let mut w = WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: s.handle,
        value: 1,
        timeout_ns: 10_000_000_000,
        ..Default::default()
    };
    call(&dev, c, DRIVER_CMD_WAIT_EVENT, &mut w).unwrap();
    assert_eq!((w.current, w.status), (1, 0));
}

#[test]
fn shutdown_wakes_a_parked_poller() {
    // A poller with no streams parks (on the kick word only, with no safety-net timeout to
    // speak of): shutdown must wake it, not wait out its hour. Regression: the kick word was
    // waited on as a private futex but woken with a shared FUTEX_WAKE, which never reaches it.
    let dev = MockDevice::new(MockConfig {
        pollers: 2,
        ..MockConfig::default()
    });
    assert_eq!(dev.pollers(), 2, "pollers start with the device");
    std::thread::sleep(Duration::from_millis(200)); // long enough to be parked
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dev.clone();
    std::thread::spawn(move || {
        d.shutdown();
        let _ = tx.send(d.pollers());
    });
    let left = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("shutdown joined its parked pollers");
    assert_eq!(left, 0);
}

#[test]
fn close_and_shutdown_stop_the_workers() {
    let dev = MockDevice::new(MockConfig::default());
    let one = client(&dev);
    for _ in 0..3 {
        stream(&dev, one);
    }
    assert_eq!((dev.workers(), dev.client_workers(one)), (3, 3));
    let s = stream(&dev, one);
    let mut h = HandleArgs {
        handle: s.handle,
        pad: 0,
    };
    call(&dev, one, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
    assert_eq!(dev.workers(), 3, "a destroyed stream's worker is joined");
    dev.close(one);
    assert_eq!(dev.workers(), 0);
    assert_eq!(dev.info().clients, 0);

    let two = client(&dev);
    stream(&dev, two);
    assert_eq!(dev.workers(), 1);
    dev.shutdown();
    assert_eq!(dev.workers(), 0);
    let mut info = DeviceInfo::default();
    assert_eq!(
        call(&dev, two, DRIVER_CMD_GET_INFO, &mut info),
        Err(Errno::ENODEV)
    );
    assert_eq!(
        dev.open(local_open_params(Role::Client, false))
            .unwrap_err()
            .error
            .errno,
        Errno::ENODEV
    );
}

/// Memory a client can touch is memory it was granted (issue 21): the descriptor behind an
/// allocation's mmap cookie is a memfd of exactly that allocation, sealed at its size, so no
/// mapping of it reaches another allocation, another client's memory or device memory nobody
/// allocated; freeing the allocation empties the memfd at once, even while the client still
/// holds the descriptor; and the device holds one memfd per live allocation, none after.
#[test]
fn a_clients_memory_descriptor_is_its_allocation_and_nothing_more() {
    use std::os::fd::AsFd;
    let dev = MockDevice::new(MockConfig::default());
    let c = client(&dev);
    let mut allocs = Vec::new();
    for size in [4096u64, 3 * 4096, 64 << 10] {
        let mut a = AllocMemoryArgs {
            size,
            ..Default::default()
        };
        call(&dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a).unwrap();
        allocs.push(a);
    }
    assert_eq!(dev.backed_allocations(), 3);
    let stat = |fd: &std::os::fd::OwnedFd| nix::sys::stat::fstat(fd.as_fd()).unwrap();
    let mut inodes = std::collections::HashSet::new();
    for a in &allocs {
        let m = dev.map(c, a.mmap_offset, a.alloc_size).unwrap();
        let st = stat(&m.fd);
        assert_eq!(
            (m.offset, st.st_size as u64),
            (0, a.alloc_size),
            "the descriptor holds exactly the allocation"
        );
        assert!(inodes.insert(st.st_ino), "each allocation its own memfd");
    }
    // The device writes through to what the client's descriptor shows.
    let s = stream(&dev, c);
    let big = allocs[2];
    run_first_task(
        &dev,
        c,
        s.handle,
        TaskDesc::fill(1, DevAddr(big.dev_addr), big.alloc_size, 0x0a0b_0c0d),
    );
    let kept = dev.map(c, big.mmap_offset, big.alloc_size).unwrap().fd;
    let mut word = [0u8; 4];
    nix::sys::uio::pread(&kept, &mut word, (big.alloc_size - 4) as i64).unwrap();
    assert_eq!(u32::from_ne_bytes(word), 0x0a0b_0c0d);
    assert!(stat(&kept).st_blocks > 0, "the FILL's pages are there");
    // Freed while the client still holds the descriptor: truncated to nothing at once (every
    // mapping of it faults from now on), it cannot be grown back, and it is gone from the
    // device.
    let mut h = HandleArgs {
        handle: big.handle,
        pad: 0,
    };
    call(&dev, c, DRIVER_CMD_FREE_MEMORY, &mut h).unwrap();
    assert_eq!(
        (stat(&kept).st_size, stat(&kept).st_blocks),
        (0, 0),
        "a freed allocation is empty and pins no pages"
    );
    assert_eq!(nix::sys::uio::pread(&kept, &mut word, 0), Ok(0));
    assert_eq!(
        nix::unistd::ftruncate(&kept, big.alloc_size as i64),
        Err(nix::errno::Errno::EPERM),
        "growing is sealed"
    );
    assert_eq!(dev.backed_allocations(), 2);
    dev.close(c);
    assert_eq!(dev.backed_allocations(), 0);
}

/// The embedded device hands out the same sealed memory as the daemon: no descriptor
/// `MockDevice::map` returns can grow or take a seal; stream memory cannot shrink either,
/// while an allocation can (so that freeing it revokes every mapping), and an allocation a
/// client shrank fails the device's tasks on it, never the device.
#[test]
fn every_descriptor_map_returns_is_sealed_and_only_memory_may_shrink() {
    use nix::fcntl::{fallocate, fcntl, FallocateFlags, FcntlArg, SealFlag};
    let dev = MockDevice::new(MockConfig::default());
    let c = client(&dev);
    let mut a = AllocMemoryArgs {
        size: 8192,
        ..Default::default()
    };
    call(&dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a).unwrap();
    let s = stream(&dev, c);
    let grow_seal = SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL;
    for (what, cookie, len, shrinks) in [
        (
            "cmd ring",
            s.cmd_ring.mmap_offset,
            s.cmd_ring.mmap_size,
            false,
        ),
        (
            "event ring",
            s.event_ring.mmap_offset,
            s.event_ring.mmap_size,
            false,
        ),
        ("doorbell", s.doorbell_offset, s.doorbell_size, false),
        ("memory", a.mmap_offset, a.alloc_size, true),
    ] {
        let fd = dev.map(c, cookie, len).unwrap().fd;
        let seals = SealFlag::from_bits_retain(fcntl(&fd, FcntlArg::F_GET_SEALS).unwrap());
        assert!(seals.contains(grow_seal), "{what}: {seals:?}");
        assert_eq!(seals.contains(SealFlag::F_SEAL_SHRINK), !shrinks, "{what}");
        let size = nix::sys::stat::fstat(&fd).unwrap().st_size;
        assert_eq!(
            nix::unistd::ftruncate(&fd, size + 4096),
            Err(nix::errno::Errno::EPERM),
            "{what}: ftruncate past the end"
        );
        assert_eq!(
            fallocate(&fd, FallocateFlags::empty(), size, 4096),
            Err(nix::errno::Errno::EPERM),
            "{what}: fallocate past the end"
        );
        assert_eq!(
            fcntl(&fd, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_WRITE)),
            Err(nix::errno::Errno::EPERM),
            "{what}: a client cannot add seals"
        );
        if !shrinks {
            for to in [0, size - 1] {
                assert_eq!(
                    nix::unistd::ftruncate(&fd, to),
                    Err(nix::errno::Errno::EPERM),
                    "{what}: ftruncate to {to}"
                );
            }
            assert_eq!(nix::sys::stat::fstat(&fd).unwrap().st_size, size);
        }
    }
    // The device works on.
    run_first_task(
        &dev,
        c,
        s.handle,
        TaskDesc::fill(1, DevAddr(a.dev_addr), 8192, 3),
    );
    // The client shrinks its allocation: a task on it fails (EFAULT), the device lives on.
    let fd = dev.map(c, a.mmap_offset, a.alloc_size).unwrap().fd;
    nix::unistd::ftruncate(&fd, 4096).unwrap();
    let mut sub = SubmitTaskArgs {
        stream: s.handle,
        desc: TaskDesc::fill(2, DevAddr(a.dev_addr), 8192, 4),
        ..Default::default()
    };
    call(&dev, c, DRIVER_CMD_SUBMIT_TASK, &mut sub).unwrap();
    let mut w = WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: s.handle,
        value: 2,
        timeout_ns: 10_000_000_000,
        ..Default::default()
    };
    assert_eq!(
        call(&dev, c, DRIVER_CMD_WAIT_EVENT, &mut w),
        Err(Errno::EIO)
    );
    assert_eq!(
        w.status,
        Errno::EFAULT as u32,
        "the stream failed with EFAULT"
    );
    let mut h = HandleArgs {
        handle: a.handle,
        pad: 0,
    };
    call(&dev, c, DRIVER_CMD_FREE_MEMORY, &mut h).unwrap();
    dev.close(c);
}

/// Threads of this process whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|c| c.starts_with(prefix))
                .count()
        })
        .unwrap_or(0)
}

/// A crowd of streams past what one poller sleeps on (`FUTEX_WAITV_MAX - 1` doorbells) gets
/// more pollers; when the crowd goes, so do they (the device's threads return to their
/// baseline, as the isolation suite checks for 256 killed clients).
#[test]
fn extra_pollers_for_a_crowd_of_streams_go_when_it_goes() {
    let dev = MockDevice::new(MockConfig {
        device_id: 77,
        pollers: 1,
        ..MockConfig::default()
    });
    let c = client(&dev);
    let prefix = "davinci77-poll";
    let streams: Vec<CreateStreamArgs> = (0..200).map(|_| stream(&dev, c)).collect();
    assert_eq!(dev.pollers(), 2, "200 streams need a second poller");
    // (A new thread's name is set by the thread itself, a moment after it starts.)
    let deadline = Instant::now() + Duration::from_secs(20);
    while threads_named(prefix) < 2 {
        assert!(
            Instant::now() < deadline,
            "the second poller's thread never ran"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(threads_named(prefix), 2);
    // Half go: the second poller still serves some of them, so it stays.
    for s in &streams[..100] {
        let mut h = HandleArgs {
            handle: s.handle,
            pad: 0,
        };
        call(&dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
    }
    assert!(dev.pollers() >= 1);
    dev.close(c);
    assert_eq!(dev.workers(), 0);
    assert_eq!(dev.pollers(), 1, "the extra poller retires");
    assert_eq!(threads_named(prefix), 1, "and its thread is gone");
    // The device still serves: a new stream runs on the poller that stayed.
    let c = client(&dev);
    let _s = stream(&dev, c);
    assert_eq!((dev.workers(), dev.pollers()), (1, 1));
}

/// With `tidy_after_replies` (the daemon's mode), memory comes from memfds made ahead of
/// time: a freed allocation is truncated to nothing (every mapping of it faults) as soon as
/// FREE_MEMORY returns (before any `tidy`), and the next allocation of the same size, made
/// from the pool, is another memfd that reads zeros, whoever wrote the freed one.
#[test]
fn with_tidy_a_freed_allocation_is_revoked_at_once_and_its_successor_is_fresh() {
    use std::os::fd::AsFd;
    let dev = MockDevice::new(MockConfig::default());
    dev.tidy_after_replies();
    let c = client(&dev);
    let s = stream(&dev, c);
    let ino = |fd: &std::os::fd::OwnedFd| nix::sys::stat::fstat(fd.as_fd()).unwrap().st_ino;
    let mut seen = std::collections::HashSet::new();
    let mut tasks = 0u64;
    for round in 0..6u32 {
        let mut a = AllocMemoryArgs {
            size: 8192,
            ..Default::default()
        };
        call(&dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a).unwrap();
        dev.tidy();
        let kept = dev.map(c, a.mmap_offset, a.alloc_size).unwrap().fd;
        assert!(
            seen.insert(ino(&kept)),
            "round {round}: a memfd never handed out before"
        );
        let mut all = vec![0xffu8; 8192];
        nix::sys::uio::pread(&kept, &mut all, 0).unwrap();
        assert!(
            all.iter().all(|&b| b == 0),
            "round {round}: a new allocation reads zeros"
        );
        // The device and the client both write it.
        tasks += 1;
        run_task(
            &dev,
            c,
            s.handle,
            TaskDesc::fill(
                tasks,
                DevAddr(a.dev_addr),
                a.alloc_size,
                0x5a5a_0000 | round,
            ),
            tasks,
        );
        nix::sys::uio::pwrite(&kept, &[0xee; 16], 100).unwrap();
        let mut h = HandleArgs {
            handle: a.handle,
            pad: 0,
        };
        call(&dev, c, DRIVER_CMD_FREE_MEMORY, &mut h).unwrap();
        assert_eq!(
            nix::sys::uio::pread(&kept, &mut all, 0),
            Ok(0),
            "round {round}: truncated once FREE returns"
        );
        dev.tidy();
    }
    dev.close(c);
    assert_eq!(dev.backed_allocations(), 0);
}

/// How many mappings of this process are of the file with inode `ino` (`/proc/self/maps`).
fn mappings_of(ino: u64) -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.split_whitespace().nth(4) == Some(ino.to_string().as_str()))
        .count()
}

/// With `tidy_after_replies`, CREATE_STREAM and DESTROY_STREAM leave the pollers' wake-up
/// for `tidy`, after the reply: the wake must come then. The pollers here never wake on
/// their own (an hour's safety net), so a kick that never came shows as a task that never
/// runs, or as a destroyed stream's memory the poller keeps mapped.
#[test]
fn with_tidy_the_pollers_learn_of_new_and_destroyed_streams_after_the_reply() {
    use std::os::fd::AsFd;
    let dev = MockDevice::new(MockConfig {
        doorbell_timeout: Duration::from_secs(3600),
        event_timeout: Duration::from_secs(3600),
        idle_spin: Duration::ZERO,
        ..MockConfig::default()
    });
    dev.tidy_after_replies();
    let c = client(&dev);
    for round in 0..3u64 {
        let s = stream(&dev, c);
        dev.tidy();
        // The poller serves the new stream: a submitted task runs.
        let mut a = AllocMemoryArgs {
            size: 4096,
            ..Default::default()
        };
        call(&dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a).unwrap();
        dev.tidy();
        run_first_task(
            &dev,
            c,
            s.handle,
            TaskDesc::fill(1, DevAddr(a.dev_addr), 4096, 7 + round as u32),
        );
        let fd = dev
            .map(c, s.cmd_ring.mmap_offset, s.cmd_ring.mmap_size)
            .unwrap()
            .fd;
        let ino = nix::sys::stat::fstat(fd.as_fd()).unwrap().st_ino;
        assert_eq!(
            mappings_of(ino),
            1,
            "round {round}: the device maps the stream"
        );
        // Likely asleep on the stream's doorbell by now (no idle spin): not needed for the
        // test to be right, only for it to test the case it is about.
        std::thread::sleep(Duration::from_millis(20));
        let mut h = HandleArgs {
            handle: s.handle,
            pad: 0,
        };
        call(&dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
        assert_eq!(
            dev.workers(),
            0,
            "round {round}: not served once DESTROY returns"
        );
        dev.tidy();
        // The poller lets go of the stream's memory (and `tidy` of the released memfd).
        let deadline = Instant::now() + Duration::from_secs(20);
        while mappings_of(ino) != 0 {
            assert!(
                Instant::now() < deadline,
                "round {round}: the destroyed stream's memory is still mapped"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut h = HandleArgs {
            handle: a.handle,
            pad: 0,
        };
        call(&dev, c, DRIVER_CMD_FREE_MEMORY, &mut h).unwrap();
        dev.tidy();
    }
    dev.close(c);
}

/// With `tidy_in_background` (the embedded device's mode), a thread of the device does what
/// `tidy` does, after each control call, with no call from the host: the pollers learn of new
/// and destroyed streams (they never wake on their own here), a destroyed stream's and a
/// freed allocation's memory is let go of, an allocation is zero when FREE returns and each
/// one is a memfd never handed out before. The thread stops with the device. (The pool's
/// refill: `tidier`'s unit test.)
#[test]
fn tidied_in_background_the_device_needs_no_tidy_calls() {
    use std::os::fd::AsFd;
    let prefix = "davinci79-tidy";
    let dev = MockDevice::new(MockConfig {
        device_id: 79,
        doorbell_timeout: Duration::from_secs(3600),
        event_timeout: Duration::from_secs(3600),
        idle_spin: Duration::ZERO,
        ..MockConfig::default()
    });
    assert_eq!(threads_named(prefix), 0, "no tidier unless asked for");
    let until = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ok() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    dev.tidy_in_background().unwrap();
    dev.tidy_in_background().unwrap();
    // (A new thread's name is set by the thread itself, a moment after it starts.)
    until("the tidier starts", &|| threads_named(prefix) >= 1);
    let c = client(&dev);
    let mut seen = std::collections::HashSet::new();
    for round in 0..4u64 {
        let s = stream(&dev, c);
        let mut a = AllocMemoryArgs {
            size: 4096,
            ..Default::default()
        };
        call(&dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a).unwrap();
        let kept = dev.map(c, a.mmap_offset, a.alloc_size).unwrap().fd;
        let mem_ino = nix::sys::stat::fstat(kept.as_fd()).unwrap().st_ino;
        assert!(seen.insert(mem_ino), "round {round}: a fresh memfd");
        // The poller serves the new stream: it was kicked by the tidier.
        run_first_task(
            &dev,
            c,
            s.handle,
            TaskDesc::fill(1, DevAddr(a.dev_addr), 4096, 7 + round as u32),
        );
        let mut all = vec![0u8; 4096];
        nix::sys::uio::pread(&kept, &mut all, 0).unwrap();
        assert!(all.iter().all(|&b| b == 7 + round as u8 || b == 0));
        assert!(all.iter().any(|&b| b != 0), "round {round}: the fill ran");
        let fd = dev
            .map(c, s.cmd_ring.mmap_offset, s.cmd_ring.mmap_size)
            .unwrap()
            .fd;
        let ino = nix::sys::stat::fstat(fd.as_fd()).unwrap().st_ino;
        std::thread::sleep(Duration::from_millis(20));
        let mut h = HandleArgs {
            handle: s.handle,
            pad: 0,
        };
        call(&dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
        until(
            &format!("round {round}: the destroyed stream's memory is still mapped"),
            &|| mappings_of(ino) == 0,
        );
        let mut h = HandleArgs {
            handle: a.handle,
            pad: 0,
        };
        call(&dev, c, DRIVER_CMD_FREE_MEMORY, &mut h).unwrap();
        assert_eq!(
            nix::sys::uio::pread(&kept, &mut all, 0),
            Ok(0),
            "round {round}: truncated once FREE returns"
        );
        // Only the descriptor kept here maps nothing: the device let go of its mapping.
        until(
            &format!("round {round}: the freed allocation is still mapped"),
            &|| mappings_of(mem_ino) == 0,
        );
    }
    assert_eq!(threads_named(prefix), 1, "one tidier, however often asked");
    dev.close(c);
    dev.shutdown();
    assert_eq!(threads_named(prefix), 0, "the tidier stops with the device");
}

/// The state letter of this process's thread named `name` (`/proc/self/task/*/stat`).
fn thread_state(name: &str) -> Option<char> {
    std::fs::read_dir("/proc/self/task").ok()?.find_map(|t| {
        let dir = t.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        if comm.trim_end() != name {
            return None;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        // "pid (comm) S ...": the state follows the last ')'.
        stat.rsplit_once(')')?.1.trim_start().chars().next()
    })
}

/// A poller that shares its core with a thread that yields (a client's spin-wait, the
/// daemon's connection threads) parks once its idle spin's yields hand the core over (the
/// kernel counts a switch away from a thread that is still runnable, a yield's included, as
/// involuntary: what the poller's `getrusage` check reads), rather than yield to it for all
/// of `idle_spin` (an hour here); parked, the doorbell's wake-up brings it back.
#[test]
fn a_poller_whose_yields_hand_its_core_over_parks() {
    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let me = Pid::from_raw(0);
    let all = sched_getaffinity(me).unwrap();
    let cpus: Vec<usize> = (0..CpuSet::count())
        .filter(|&c| all.is_set(c).unwrap_or(false))
        .collect();
    if cpus.len() < 2 {
        eprintln!("skipped: needs 2 CPUs (this thread must not share the poller's)");
        return;
    }
    // The device's threads and the yielder inherit one CPU; this thread then leaves it.
    let mut one = CpuSet::new();
    one.set(cpus[0]).unwrap();
    sched_setaffinity(me, &one).unwrap();
    let dev = MockDevice::new(MockConfig {
        device_id: 78,
        idle_spin: Duration::from_secs(3600),
        doorbell_timeout: Duration::from_secs(3600),
        pollers: 1,
        ..MockConfig::default()
    });
    let stop = Arc::new(AtomicBool::new(false));
    let yielder = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::yield_now();
            }
        })
    };
    let mut rest = CpuSet::new();
    for &c in &cpus[1..] {
        rest.set(c).unwrap();
    }
    sched_setaffinity(me, &rest).unwrap();
    let c = client(&dev);
    let s = stream(&dev, c);
    // The poller runs a task, so it spins (and yields) while idle afterwards.
    run_first_task(&dev, c, s.handle, TaskDesc::nop(1));
    let deadline = Instant::now() + Duration::from_secs(30);
    let parked = loop {
        if thread_state("davinci78-poll0") == Some('S') {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    stop.store(true, Ordering::Relaxed);
    yielder.join().unwrap();
    sched_setaffinity(me, &all).unwrap();
    assert!(parked, "the poller still spins, yielding its core away");
    // Parked, it still serves: the doorbell wakes it.
    run_task(&dev, c, s.handle, TaskDesc::nop(2), 2);
    dev.close(c);
}
