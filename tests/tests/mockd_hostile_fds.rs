//! A hostile client against a real `davinci-mockd` process: everything it can do to the
//! memfds the daemon hands it (command ring, event ring, doorbell page, an allocation's memory):
//! truncate or grow them, punch holes, add seals, reopen them through `/proc`, map them with
//! other offsets and write there, close and map again. Meanwhile a well-behaved client process
//! (`davinci-testclient work --until-eof`) keeps computing on the same device and checks every
//! result. The daemon must stay up, the other client's results stay correct, and once the
//! attacker has gone the daemon's descriptors, threads and mappings are back where they were.
//!
//! The attacker speaks the wire protocol itself (`davinci_tests::raw`), so it holds the very
//! descriptors the daemon sent.
#![deny(unsafe_code)]

use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use davinci_mockd_proto::WireRole;
use davinci_tests::mockd::{Mockd, ProcStats, TestClient};
use davinci_tests::raw::{RawClient, RawError};
use davinci_uapi::{
    AllocMemoryArgs, CreateStreamArgs, DevAddr, DeviceInfo, DeviceShareArgs, Errno, TaskDesc,
    WaitEventArgs, Wire, DRIVER_CMD_GET_INFO, DRIVER_CMD_SET_DEVICE_SHARE,
};
use nix::errno::Errno as NixErrno;
use nix::fcntl::{fallocate, fcntl, FallocateFlags, FcntlArg, OFlag, SealFlag};
use nix::sys::mman::{MapFlags, ProtFlags};
use nix::sys::stat::Mode;

const LONG: Duration = Duration::from_secs(60);
/// Ring depths with rings of several pages, so there are other offsets to map.
const CMD_ENTRIES: u32 = 256;
const EVENT_ENTRIES: u32 = 256;
/// The attacker's allocation.
const ALLOC: u64 = 64 << 10;
const WAIT_NS: u64 = 10_000_000_000;

/// The memfds a client receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Cmd,
    Event,
    Doorbell,
    Memory,
}

const PARTS: [Part; 4] = [Part::Cmd, Part::Event, Part::Doorbell, Part::Memory];

/// The daemon, its well-behaved client, and what the daemon held before each arrived.
struct Scene {
    d: Mockd,
    good: Option<TestClient>,
    /// Before any connection.
    empty: ProcStats,
    good_memory: u64,
    /// The daemon's memfd mappings for the good client: one per stream (command ring, event
    /// ring and doorbell are one memfd) and one per allocation (each is its own memfd).
    good_maps: usize,
    rounds_seen: u64,
}

impl Scene {
    fn new() -> Scene {
        let uid = nix::unistd::getuid().as_raw().to_string();
        let d = Mockd::start(&["--memory", "64M", "--admin-uid", &uid]).unwrap();
        let empty = d.stats();
        let mut ctl = RawClient::open(&d.socket(0), WireRole::Control).unwrap();
        ctl.ioctl(
            DRIVER_CMD_SET_DEVICE_SHARE,
            &DeviceShareArgs {
                mode: 1,
                ..DeviceShareArgs::default()
            },
        )
        .unwrap();
        drop(ctl);
        let good = TestClient::start(
            &d.path(0),
            &["work", "--until-eof", "--elems", "4096", "--rounds", "0"],
        );
        let ready = good.expect("ready");
        let good_memory = ready["memory_bytes"].as_u64().unwrap();
        let good_maps = ready["streams"].as_u64().unwrap() as usize
            + ready["allocations"].as_u64().unwrap() as usize;
        good.expect("progress");
        let mut s = Scene {
            d,
            good: Some(good),
            empty,
            good_memory,
            good_maps,
            rounds_seen: 0,
        };
        s.wait_until("the daemon holds only the good client's resources", |s| {
            s.only_the_good_client()
        });
        s
    }

    /// The daemon maps the good client's memfds (its allocations, command ring, event ring,
    /// doorbell) and nothing else but the memfds it made ahead of time (at most
    /// `POOLED_MEMFDS`, mapped and held by nobody; none once every client has gone, which
    /// `finish` checks exactly), and the device counts one client with its memory. (Its
    /// descriptor and thread counts are compared only once every client has gone: each
    /// `info` call's control connection and each blocking wait come and go meanwhile.)
    fn only_the_good_client(&self) -> bool {
        let info = self.info();
        let maps = self.d.stats().memfd_maps;
        maps >= self.good_maps
            && maps <= self.good_maps + davinci_mock_device::POOLED_MEMFDS
            && info.clients == 1
            && info.memory_used == self.good_memory
    }

    fn info(&self) -> DeviceInfo {
        let mut ctl = RawClient::open(&self.d.socket(0), WireRole::Control)
            .unwrap_or_else(|e| panic!("control open failed (daemon down?): {e}"));
        ctl.ioctl(DRIVER_CMD_GET_INFO, &DeviceInfo::default())
            .unwrap()
    }

    fn wait_until(&mut self, what: &str, mut f: impl FnMut(&mut Scene) -> bool) {
        let t0 = Instant::now();
        while !f(self) {
            self.d.check_alive().unwrap();
            assert!(t0.elapsed() < LONG, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The daemon is up and the good client completes more rounds from now on, every one
    /// correct.
    fn still_fine(&mut self, after: &str) {
        self.d
            .check_alive()
            .unwrap_or_else(|e| panic!("after {after}: {e}"));
        let good = self.good.as_ref().unwrap();
        // Reports from before now prove nothing about now: skip them (checking each).
        let mut seen = self.rounds_seen;
        for p in good.drain() {
            assert_eq!(p["event"], "progress", "after {after}: {p}");
            assert_eq!(p["mismatches"], 0, "after {after}: {p}");
            seen = seen.max(p["round"].as_u64().unwrap());
        }
        loop {
            let p = good.expect("progress");
            assert_eq!(p["mismatches"], 0, "after {after}: {p}");
            let r = p["round"].as_u64().unwrap();
            if r > seen {
                self.rounds_seen = r;
                break;
            }
        }
        self.d
            .check_alive()
            .unwrap_or_else(|e| panic!("after {after}: {e}"));
    }

    /// The attacker has gone: the daemon holds the good client's memory and mappings only.
    /// Then the good client finishes (every result correct) and the daemon's descriptors,
    /// threads and mappings are back to what they were before any connection.
    fn finish(mut self, attacker: Attacker) {
        drop(attacker);
        self.still_fine("the attacker left");
        self.wait_until("the attacker's memory and mappings are released", |s| {
            s.only_the_good_client()
        });
        let (reports, code) = self.good.take().unwrap().finish();
        let done = reports
            .iter()
            .find(|v| v["event"] == "done")
            .unwrap_or_else(|| panic!("no done report: {reports:?}"));
        assert_eq!(code, 0, "{done}");
        assert_eq!(done["ok"], true, "{done}");
        assert_eq!(done["mismatches"], 0, "{done}");
        assert!(
            done["tasks"].as_u64().unwrap() >= 3 * self.rounds_seen,
            "{done}"
        );
        // Descriptors, threads and mappings exactly as before the first connection (polled
        // before each `info`, whose own connection may still be closing from the last poll).
        let empty = self.empty;
        self.wait_until("the daemon is back to its state before any client", |s| {
            s.d.stats() == empty && s.info().memory_used == 0
        });
        assert_eq!(self.info().clients, 0);
    }
}

/// A client that attacks through its descriptors: a context, a stream and an allocation.
struct Attacker {
    c: RawClient,
    stream: CreateStreamArgs,
    mem: AllocMemoryArgs,
    submitted: u64,
}

impl Attacker {
    fn new(d: &Mockd) -> Attacker {
        let mut c = RawClient::open(&d.socket(0), WireRole::Client).unwrap();
        let ctx = c.create_context().unwrap();
        let stream = c.create_stream(ctx, CMD_ENTRIES, EVENT_ENTRIES).unwrap();
        let mem = c.alloc(ALLOC).unwrap();
        Attacker {
            c,
            stream,
            mem,
            submitted: 0,
        }
    }

    /// The cookie and length of `part`.
    fn cookie(&self, part: Part) -> (u64, u64) {
        match part {
            Part::Cmd => (
                self.stream.cmd_ring.mmap_offset,
                self.stream.cmd_ring.mmap_size,
            ),
            Part::Event => (
                self.stream.event_ring.mmap_offset,
                self.stream.event_ring.mmap_size,
            ),
            Part::Doorbell => (self.stream.doorbell_offset, self.stream.doorbell_size),
            Part::Memory => (self.mem.mmap_offset, self.mem.alloc_size),
        }
    }

    /// MMAP of `part`: the descriptor, and the object's offset and length in it.
    fn fd(&mut self, part: Part) -> (OwnedFd, u64, u64) {
        let (cookie, len) = self.cookie(part);
        let (r, fd) = self.c.mmap(cookie, len).unwrap();
        (fd, r.offset, r.len)
    }

    /// SUBMIT_TASK of a FILL over the whole allocation, then a wait for its completion.
    fn fill(&mut self, pattern: u32) -> Result<(), RawError> {
        let d = TaskDesc::fill(
            self.submitted,
            DevAddr(self.mem.dev_addr),
            self.mem.alloc_size,
            pattern,
        );
        self.c.submit(self.stream.handle, d)?;
        self.submitted += 1;
        self.c
            .wait_stream(self.stream.handle, self.submitted, WAIT_NS)
            .map(|_| ())
    }
}

fn size_of(fd: &OwnedFd) -> i64 {
    nix::sys::stat::fstat(fd).unwrap().st_size
}

fn seals(fd: &OwnedFd) -> SealFlag {
    SealFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GET_SEALS).unwrap())
}

/// Every way to change the size of the file, on `fd` and on a reopen of it through
/// `/proc/self/fd`: each fails with EPERM and the size stays. Returns the reopened fd. An
/// allocation's memfd (`memory`) may shrink (docs/abi.md section 4.1: freeing it truncates
/// it): only growing it is tried.
fn cannot_resize(fd: &OwnedFd, what: &str, memory: bool) -> OwnedFd {
    let size = size_of(fd);
    let want = if memory {
        SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL
    } else {
        SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL
    };
    assert!(
        seals(fd).contains(want),
        "{what}: seals {:?}, want {want:?}",
        seals(fd)
    );
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let reopened = nix::fcntl::open(
        path.as_str(),
        OFlag::O_RDWR | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .unwrap_or_else(|e| panic!("{what}: reopen {path}: {e}"));
    for f in [fd, &reopened] {
        let shrinks: &[i64] = if memory { &[] } else { &[0, size / 2] };
        for &len in shrinks.iter().chain(&[size + 1, size * 2]) {
            assert_eq!(
                nix::unistd::ftruncate(f, len),
                Err(NixErrno::EPERM),
                "{what}: ftruncate to {len}"
            );
        }
        // Growing through fallocate, and adding seals (the client cannot undo or extend ours).
        assert_eq!(
            fallocate(f, FallocateFlags::empty(), size, 4096),
            Err(NixErrno::EPERM),
            "{what}: fallocate past the end"
        );
        for s in [SealFlag::F_SEAL_WRITE, SealFlag::F_SEAL_FUTURE_WRITE] {
            assert_eq!(
                fcntl(f, FcntlArg::F_ADD_SEALS(s)),
                Err(NixErrno::EPERM),
                "{what}: F_ADD_SEALS {s:?}"
            );
        }
        assert_eq!(size_of(f), size, "{what}: size changed");
    }
    reopened
}

/// Punches the whole file (allowed: the pages read as zeros afterwards).
fn punch(fd: &OwnedFd, what: &str) {
    let size = size_of(fd);
    fallocate(
        fd,
        FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
        0,
        size,
    )
    .unwrap_or_else(|e| panic!("{what}: punch hole: {e}"));
    assert_eq!(size_of(fd), size, "{what}: punching changed the size");
}

fn pread_u32(fd: &OwnedFd, offset: u64) -> u32 {
    let mut b = [0u8; 4];
    let n = nix::sys::uio::pread(fd, &mut b, offset as i64).unwrap();
    assert_eq!(n, 4);
    u32::from_ne_bytes(b)
}

/// Maps `len` bytes of `fd` at file offset `offset`, shared and writable, writes `byte` at
/// every 61st byte up to `touch` bytes in (never past the end of the file), unmaps.
#[allow(unsafe_code)] // the attacker's own mapping of a descriptor the daemon sent
fn map_and_scribble(fd: &OwnedFd, offset: u64, len: usize, touch: usize, byte: u8) {
    let Some(nz) = NonZeroUsize::new(len) else {
        return;
    };
    // SAFETY: a fresh shared mapping of a descriptor this test owns, placed by the kernel (no
    // MAP_FIXED), so it aliases no Rust object. It is only written through raw pointers within
    // `[0, touch)`, which the caller keeps inside the file (so no SIGBUS here), and unmapped
    // below before anything else can use the pointer.
    let p = unsafe {
        nix::sys::mman::mmap(
            None,
            nz,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
            fd.as_fd(),
            offset as i64,
        )
    }
    .unwrap_or_else(|e| panic!("mmap of {len} bytes at {offset}: {e}"));
    let base = p.as_ptr().cast::<u8>();
    let mut i = 0;
    while i < touch.min(len) {
        // SAFETY: `i < touch <= len`: inside the mapping made above, and inside the file.
        unsafe { base.add(i).write_volatile(byte) };
        i += 61;
    }
    // SAFETY: `p`/`len` are exactly the mapping made above; nothing uses `base` afterwards.
    unsafe { nix::sys::mman::munmap(p, len) }.unwrap();
}

/// The reproduction from the issue, as written: a client truncates its command ring to 0 and
/// the daemon (every tenant's device) must not die of it.
#[test]
fn truncating_the_command_ring_to_zero_does_not_kill_the_daemon() {
    let mut s = Scene::new();
    let mut a = Attacker::new(&s.d);
    let (fd, _, _) = a.fd(Part::Cmd);
    let r = nix::unistd::ftruncate(&fd, 0);
    std::thread::sleep(Duration::from_millis(500));
    s.d.check_alive().unwrap();
    assert_eq!(r, Err(NixErrno::EPERM), "the command ring memfd is sealed");
    s.still_fine("ftruncate(cmd ring, 0)");
    // The attacker's own stream still works: nothing changed.
    a.fill(0x1234_5678).unwrap();
    s.finish(a);
}

/// Every attack on one kind of descriptor, with the good client checked after each.
fn attack(part: Part) {
    let what = format!("{part:?}");
    let mut s = Scene::new();
    let mut a = Attacker::new(&s.d);
    a.fill(0x0101_0101).unwrap();

    // Resize: refused, on the fd and on a reopen of it.
    let (fd, off, len) = a.fd(part);
    let reopened = cannot_resize(&fd, &what, part == Part::Memory);
    s.still_fine(&format!("{what}: resize attempts"));

    // Closing and reopening: drop both, MMAP again: a fresh descriptor, sealed the same.
    drop((fd, reopened));
    let (fd, off2, len2) = a.fd(part);
    assert_eq!((off2, len2), (off, len));
    drop(cannot_resize(&fd, &what, part == Part::Memory));

    // Other mappings: every page of the object at its own offset, writable, scribbled on;
    // a mapping longer than the file and one entirely past its end (both untouched past the
    // end: that would fault in the attacker, not the daemon).
    let size = size_of(&fd) as u64;
    let mut page = 0;
    while page < size {
        map_and_scribble(&fd, page, 4096, 4096, 0xa5);
        page += 4096;
    }
    map_and_scribble(&fd, 0, size as usize + 8192, size as usize, 0x5a);
    map_and_scribble(&fd, size, 4096, 0, 0);
    s.still_fine(&format!("{what}: writes through other mappings"));

    // Punch holes in the whole file: allowed; the pages read as zeros afterwards.
    punch(&fd, &what);
    assert_eq!(pread_u32(&fd, off), 0, "{what}: a punched page reads 0");
    s.still_fine(&format!("{what}: punch hole"));

    // What the attacker's own stream makes of it. A stream's three parts are one memfd (at
    // the offsets MMAP answers), so the whole-file attacks above through any part's
    // descriptor reached the command ring too. It took garbage (the scribbled tail let the
    // device read scribbled slots: invalid descriptors) and then a tail of 0, behind the
    // device's own head (corrupt indices): either way the stream is in the error state, calls
    // on it fail with EIO and WAIT_EVENT reports the errno that put it there. The
    // allocation read zeros and is filled again.
    let after = a.fill(0x7777_7777);
    match part {
        Part::Cmd | Part::Event | Part::Doorbell => {
            let e = after.expect_err("a command ring with garbage and a tail gone back must err");
            assert_eq!(e.errno, Errno::EIO.code(), "{what}: {e}");
            let e =
                a.c.wait_stream(a.stream.handle, a.submitted, 0)
                    .expect_err("the stream is in the error state");
            let status = WaitEventArgs::decode(&e.arg).status;
            assert_eq!(e.errno, Errno::EIO.code(), "{what}: {e}");
            assert_ne!(
                status, 0,
                "{what}: WAIT_EVENT names the stream's error: {e}"
            );
        }
        Part::Memory => {
            after.unwrap_or_else(|e| panic!("{what}: the stream should still work: {e}"));
            assert_eq!(pread_u32(&fd, off), 0x7777_7777);
            s.still_fine(&format!("{what}: the attacker's stream after the attack"));
            // Shrunk by its holder (allowed: it is not sealed against shrinking, so that
            // FREE_MEMORY can revoke it): the daemon never touches it but through the
            // kernel, so its tasks on it fail (EFAULT) and nothing else does.
            nix::unistd::ftruncate(&fd, 0).unwrap();
            s.still_fine(&format!("{what}: ftruncate to 0"));
            let e = a
                .fill(0x7777_7777)
                .expect_err("a FILL of a shrunk allocation fails");
            assert_eq!(e.errno, Errno::EIO.code(), "{what}: {e}");
            let e =
                a.c.wait_stream(a.stream.handle, a.submitted, 0)
                    .expect_err("the stream is in the error state");
            let status = WaitEventArgs::decode(&e.arg).status;
            assert_eq!(status, Errno::EFAULT.code() as u32, "{what}: {e}");
        }
    }
    s.still_fine(&format!("{what}: the attacker's stream after the attack"));
    drop(fd);
    s.finish(a);
}

#[test]
fn command_ring_fd_attacks_leave_the_daemon_and_other_clients_unharmed() {
    attack(Part::Cmd);
}

#[test]
fn event_ring_fd_attacks_leave_the_daemon_and_other_clients_unharmed() {
    attack(Part::Event);
}

#[test]
fn doorbell_fd_attacks_leave_the_daemon_and_other_clients_unharmed() {
    attack(Part::Doorbell);
}

#[test]
fn allocation_fd_attacks_leave_the_daemon_and_other_clients_unharmed() {
    attack(Part::Memory);
}

/// Every descriptor of every kind the daemon hands out carries the seals, including those of
/// a second stream and a second allocation, and MMAP of an object's sub-range.
#[test]
fn every_descriptor_the_daemon_hands_out_is_sealed() {
    let mut s = Scene::new();
    let mut a = Attacker::new(&s.d);
    let ctx = a.c.create_context().unwrap();
    let second = a.c.create_stream(ctx, 16, 32).unwrap();
    let mem2 = a.c.alloc(4096).unwrap();
    let mut fds = Vec::new();
    for part in PARTS {
        fds.push((format!("{part:?}"), a.fd(part).0));
    }
    for (what, cookie, len) in [
        ("second cmd ring", second.cmd_ring.mmap_offset, 4096),
        ("second event ring", second.event_ring.mmap_offset, 4096),
        ("second doorbell", second.doorbell_offset, 4096),
        ("second allocation", mem2.mmap_offset, 4096),
        ("part of the first allocation", a.mem.mmap_offset, 4096),
    ] {
        fds.push((what.to_string(), a.c.mmap(cookie, len).unwrap().1));
    }
    for (what, fd) in &fds {
        let memory = what.contains("allocation") || what == "Memory";
        drop(cannot_resize(fd, what, memory));
    }
    s.still_fine("sealed descriptors");
    drop(fds);
    s.finish(a);
}
