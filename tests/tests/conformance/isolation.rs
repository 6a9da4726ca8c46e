//! Isolation between the clients of one device (issue 13): what client B can do to client A
//! through every object A holds (handles, mmap cookies, device addresses), per-client memory
//! bounds, an undrained event ring, hundreds of clients killed with SIGKILL, and a connection
//! that never says HELLO. This file holds what client B can do through A's objects and what
//! the areas share; `isolation/` the bounds and the clients that go.
//!
//! Part of the conformance suite, so it runs wherever that suite runs: against the embedded
//! mock device (`cargo test`), a `davinci-mockd` process (`DAVINCI_TEST_BACKEND=mockd`,
//! scripts/test.sh) and the kernel module in QEMU (scripts/kmod-test.sh, which requires
//! every test listed here to pass in the guest). A test that cannot apply to a backend says
//! why in its doc comment, prints a line and passes there.
//!
//! "Looks exactly like a stale one" is checked literally: the errno and the driver's message
//! for another client's object are compared with those for an object of B's own that B
//! destroyed, and both must be `ENOENT` (docs/abi.md 1.2, 4).
#![forbid(unsafe_code)]

use davinci_tests::descs::SubmitDescs;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use davinci_mock_device::{local_open_params, MockDevice, NoUserMem, Role};
use davinci_mockd_proto::{Kind, MmapArgs, WireRole};
use davinci_shim::{
    ClientUsage, Completion, Control, Device, DeviceMem, Dtype, Errno, Fault, FaultKind,
    FaultOperand, ShareMode, TaskDesc,
};
use davinci_tests::mockd;
use davinci_tests::raw::RawClient;
use davinci_tests::{backend_name, control_of, second_client};
use davinci_uapi::{
    mmap_offset, AllocMemoryArgs, CreateContextArgs, CreateEventArgs, CreateStreamArgs, HandleArgs,
    MmapKind, SubmitTaskArgs, WaitEventArgs, WaitKind, Wire, DRIVER_CMD_ALLOC_MEMORY,
    DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_EVENT, DRIVER_CMD_CREATE_STREAM,
    DRIVER_CMD_DESTROY_CONTEXT, DRIVER_CMD_DESTROY_EVENT, DRIVER_CMD_DESTROY_STREAM,
    DRIVER_CMD_FREE_MEMORY, DRIVER_CMD_NOTIFY, DRIVER_CMD_SUBMIT_TASK, DRIVER_CMD_WAIT_EVENT,
};

use super::{assert_works, dev, poll_all, T};

/// Per-client bounds: memory, an undrained event ring, a tenant's long fills.
#[path = "isolation/bounds.rs"]
mod bounds;

/// Clients killed by the hundred, and a connection that never says HELLO.
#[path = "isolation/connections.rs"]
mod connections;

/// Which kind of backend `DAVINCI_TEST_BACKEND` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Embedded,
    Mockd,
    /// A device node (`/dev/davinciN`): the kernel module.
    Kernel,
}

fn backend() -> Backend {
    match backend_name().as_str() {
        "embedded" => Backend::Embedded,
        "mockd" => Backend::Mockd,
        _ => Backend::Kernel,
    }
}

/// Polls `f` until it holds; fails naming `what` after `limit`.
fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < limit,
            "timed out after {limit:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The errno and the words of a failed call, for comparing two failures.
fn outcome(r: davinci_shim::Result<()>) -> Option<(Option<Errno>, String)> {
    r.err().map(|e| (e.errno(), e.message().to_string()))
}

/// Puts a device in shared mode and, when dropped, back in the mode it found it in (the kernel
/// module's devices outlive the test; the mock devices are fresh per test anyway). Drop it
/// after every client it let in.
pub(super) struct SharedMode {
    pub(super) ctl: Control,
    before: ShareMode,
}

impl SharedMode {
    pub(super) fn enable(ctl: Control) -> SharedMode {
        let before = ctl.share_mode().expect("QUERY_DEVICE_SHARE");
        ctl.set_share_mode(ShareMode::Shared)
            .expect("SET_DEVICE_SHARE shared (the tests run as an admin of the device)");
        SharedMode { ctl, before }
    }
}

impl Drop for SharedMode {
    fn drop(&mut self) {
        let _ = self.ctl.set_share_mode(self.before);
    }
}

/// Two clients, A and B, of one device of the configured backend, in shared mode. Bind the
/// result as `let (_shared, a, b) = ...` so that the clients are dropped first.
pub(super) fn shared_pair() -> (SharedMode, Device, Device) {
    let a = dev();
    let shared = SharedMode::enable(control_of(&a).expect("control open"));
    let b = second_client(&a).expect("a second client in shared mode");
    (shared, a, b)
}

/// This client's usage as LIST_CLIENTS reports it.
fn usage_of(ctl: &Control, dev: &Device) -> ClientUsage {
    let client_id = dev.client_id().expect("ABI 1.1: the client id");
    ctl.clients()
        .expect("LIST_CLIENTS")
        .into_iter()
        .find(|c| c.client_id == client_id)
        .unwrap_or_else(|| panic!("client {client_id} is not listed"))
}

fn encoded<A: Wire>(a: A) -> Vec<u8> {
    let mut v = vec![0u8; A::SIZE];
    a.encode(&mut v);
    v
}

fn handle_arg(handle: u32) -> Vec<u8> {
    encoded(HandleArgs { handle, pad: 0 })
}

fn wait_arg(kind: WaitKind, handle: u32, value: u64) -> Vec<u8> {
    encoded(WaitEventArgs {
        kind: kind as u32,
        handle,
        value,
        timeout_ns: 0,
        ..WaitEventArgs::default()
    })
}

/// The completion of a one-descriptor stream of `ctx` that ran `desc` (which must fail).
fn run_failing(ctx: &davinci_shim::Context, desc: &TaskDesc, what: &str) -> Completion {
    let mut s = ctx.create_stream().unwrap();
    s.submit_desc(desc).unwrap();
    let err = s.synchronize(T).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EIO), "{what}: {err}");
    let done = poll_all(&mut s);
    assert_eq!(done.len(), 1, "{what}: {done:?}");
    done[0]
}

/// The most memory [`bounds::memory_exhaustion_is_per_client_and_recoverable`] fills.
const FILL_MAX: u64 = 64 << 20;

/// 1. Every handle type of client A (context, stream, event, allocation) used by client B,
///    in every command and descriptor that takes one, is refused exactly like a handle of
///    B's own that B destroyed (and one that never existed): `ENOENT`, same message, same
///    fault; and A's objects are untouched (nothing destroyed, recorded or waited on).
///    All backends.
#[test]
fn foreign_handles_are_refused_exactly_like_stale_ones() {
    let (_shared, a, b) = shared_pair();
    let ctl = control_of(&a).unwrap();

    // A's objects, in use: the event has reached 1, the memory holds a marker.
    let a_ctx = a.create_context().unwrap();
    let mut a_s = a_ctx.create_stream().unwrap();
    let a_ev = a_ctx.create_event().unwrap();
    let a_mem = a.alloc(4096).unwrap();
    a_mem.write_slice(0, &[0xa11c_e000u32; 1024]).unwrap();
    a_ev.record(&mut a_s).unwrap();
    a_s.synchronize(T).unwrap();
    assert_eq!(poll_all(&mut a_s).len(), 1);
    assert_eq!(a_ev.value().unwrap(), 1);
    let a_before = usage_of(&ctl, &a);

    // B's own objects, destroyed: stale handles.
    let (dead_ctx, dead_s, dead_ev, dead_mem) = {
        let c = b.create_context().unwrap();
        let s = c.create_stream().unwrap();
        let e = c.create_event().unwrap();
        let m = b.alloc(4096).unwrap();
        (c.handle(), s.handle(), e.handle(), m.handle())
    };
    const NEVER: u32 = 0xffff_ffff;

    type Arg = fn(u32) -> Vec<u8>;
    let probes: [(&str, u32, u32, u32, Arg); 12] = [
        (
            "DESTROY_CONTEXT",
            DRIVER_CMD_DESTROY_CONTEXT,
            a_ctx.handle(),
            dead_ctx,
            handle_arg,
        ),
        (
            "CREATE_STREAM in the context",
            DRIVER_CMD_CREATE_STREAM,
            a_ctx.handle(),
            dead_ctx,
            |h| {
                encoded(CreateStreamArgs {
                    ctx: h,
                    cmd_entries: 64,
                    event_entries: 64,
                    ..CreateStreamArgs::default()
                })
            },
        ),
        (
            "CREATE_EVENT in the context",
            DRIVER_CMD_CREATE_EVENT,
            a_ctx.handle(),
            dead_ctx,
            |h| {
                encoded(CreateEventArgs {
                    ctx: h,
                    ..CreateEventArgs::default()
                })
            },
        ),
        (
            "DESTROY_STREAM",
            DRIVER_CMD_DESTROY_STREAM,
            a_s.handle(),
            dead_s,
            handle_arg,
        ),
        (
            "NOTIFY the stream",
            DRIVER_CMD_NOTIFY,
            a_s.handle(),
            dead_s,
            handle_arg,
        ),
        (
            "WAIT_EVENT on the stream",
            DRIVER_CMD_WAIT_EVENT,
            a_s.handle(),
            dead_s,
            |h| wait_arg(WaitKind::Stream, h, 1),
        ),
        (
            "SUBMIT_TASK to the stream",
            DRIVER_CMD_SUBMIT_TASK,
            a_s.handle(),
            dead_s,
            |h| {
                encoded(SubmitTaskArgs {
                    stream: h,
                    desc: TaskDesc::nop(1),
                    ..SubmitTaskArgs::default()
                })
            },
        ),
        (
            "DESTROY_EVENT",
            DRIVER_CMD_DESTROY_EVENT,
            a_ev.handle(),
            dead_ev,
            handle_arg,
        ),
        // A's event has reached 1: a wait for 1 would succeed if B could see it.
        (
            "WAIT_EVENT on the event",
            DRIVER_CMD_WAIT_EVENT,
            a_ev.handle(),
            dead_ev,
            |h| wait_arg(WaitKind::Event, h, 1),
        ),
        (
            "FREE_MEMORY",
            DRIVER_CMD_FREE_MEMORY,
            a_mem.handle(),
            dead_mem,
            handle_arg,
        ),
        // Twice: a refused destroy must not have destroyed anything the second one could find.
        (
            "DESTROY_CONTEXT again",
            DRIVER_CMD_DESTROY_CONTEXT,
            a_ctx.handle(),
            dead_ctx,
            handle_arg,
        ),
        (
            "FREE_MEMORY again",
            DRIVER_CMD_FREE_MEMORY,
            a_mem.handle(),
            dead_mem,
            handle_arg,
        ),
    ];
    for (what, request, foreign, stale, arg) in probes {
        let call = |h: u32| outcome(b.raw_ioctl(request, &mut arg(h)));
        let (f, s, n) = (call(foreign), call(stale), call(NEVER));
        let f = f.unwrap_or_else(|| panic!("{what}: B's use of A's handle succeeded"));
        assert_eq!(
            f.0,
            Some(Errno::ENOENT),
            "{what}: A's handle from B: {}",
            f.1
        );
        assert_eq!(
            Some(&f),
            s.as_ref(),
            "{what}: A's handle vs B's destroyed one"
        );
        assert_eq!(
            Some(&f),
            n.as_ref(),
            "{what}: A's handle vs one that never existed"
        );
    }

    // Descriptors on B's stream naming A's event: a record must not raise it, a wait must
    // not see that it reached 1. Same completion as for B's destroyed event.
    let b_ctx = b.create_context().unwrap();
    for (what, desc) in [
        (
            "EVENT_RECORD",
            TaskDesc::event_record as fn(u64, u32, u64) -> TaskDesc,
        ),
        ("EVENT_WAIT", TaskDesc::event_wait),
    ] {
        let f = run_failing(&b_ctx, &desc(7, a_ev.handle(), 1), what);
        let s = run_failing(&b_ctx, &desc(7, dead_ev, 1), what);
        assert_eq!(f.errno(), Some(Errno::ENOENT), "{what} of A's event: {f:?}");
        assert_eq!(
            (f.status, f.fault(), f.result),
            (s.status, s.fault(), s.result),
            "{what}: A's event vs B's destroyed one"
        );
    }

    // A lost nothing and nothing of A's moved.
    let a_after = usage_of(&ctl, &a);
    assert_eq!(
        (
            a_after.contexts,
            a_after.streams,
            a_after.events,
            a_after.allocations
        ),
        (
            a_before.contexts,
            a_before.streams,
            a_before.events,
            a_before.allocations
        ),
        "A's objects after B's attempts"
    );
    assert_eq!(a_after.memory_bytes, a_before.memory_bytes);
    assert_eq!(a_ev.value().unwrap(), 1, "B raised A's event");
    assert_eq!(
        a_mem.read_vec::<u32>(0, 1024).unwrap(),
        vec![0xa11c_e000; 1024]
    );
    assert_works(&a, &mut a_s, 101);
    let mut fresh = a_ctx.create_stream().unwrap();
    assert_works(&a, &mut fresh, 102);
    a_ev.record(&mut a_s).unwrap();
    a_ev.synchronize(T).unwrap();
    assert_eq!(a_ev.value().unwrap(), 2);
}

/// Client B as the driver sees it, without the shim: the open itself, so that it can ask to
/// map any cookie. Embedded: an open of the in-process device; mockd: its own connection
/// speaking the wire protocol (`davinci_tests::raw`); kernel: the device node opened
/// read/write (it maps, but has no ioctls here: this suite has no `unsafe`, and
/// `tests/tests/kernel.rs` covers the kernel's cookies with raw system calls).
enum RawOpen {
    Embedded { dev: MockDevice, client: u32 },
    Mockd(RawClient),
    Kernel(std::fs::File),
}

/// A refused call: the errno and the words.
type Refusal = (i32, String);

impl RawOpen {
    /// Another client of the device `a` is on (which must be in shared mode).
    fn of(a: &Device) -> RawOpen {
        match backend() {
            Backend::Embedded => {
                let dev = a.mock_device().expect("embedded").clone();
                let client = dev
                    .open(local_open_params(Role::Client, false))
                    .map_err(|e| e.error)
                    .expect("a raw client open of the embedded device");
                RawOpen::Embedded { dev, client }
            }
            Backend::Mockd => {
                let path = mockd::shared_path(a.info().device_id).unwrap();
                let sock = PathBuf::from(path.strip_prefix("mock:").unwrap());
                RawOpen::Mockd(RawClient::open(&sock, WireRole::Client).expect("raw client open"))
            }
            Backend::Kernel => RawOpen::Kernel(
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(backend_name())
                    .expect("open the device node read/write"),
            ),
        }
    }

    /// One ioctl; `None` where this open has no ioctls (kernel).
    fn ioctl<A: Wire>(&mut self, request: u32, arg: A) -> Option<Result<A, Refusal>> {
        let mut bytes = encoded(arg);
        let r = match self {
            RawOpen::Embedded { dev, client } => dev
                .ioctl(*client, request, &mut bytes, &mut NoUserMem)
                .map_err(|e| (e.errno.code(), e.msg.to_string())),
            RawOpen::Mockd(c) => match c.call(Kind::Ioctl, request, bytes.clone()) {
                Ok((r, _)) => {
                    bytes = r.arg;
                    Ok(())
                }
                Err(e) => Err((e.errno, e.msg)),
            },
            RawOpen::Kernel(_) => return None,
        };
        Some(r.map(|()| A::decode(&bytes)))
    }

    /// Asks to map `len` bytes of `cookie`: `Ok` if the driver handed the object out.
    fn map(&mut self, cookie: u64, len: u64) -> Result<(), Refusal> {
        match self {
            RawOpen::Embedded { dev, client } => dev
                .map(*client, cookie, len)
                .map(drop)
                .map_err(|e| (e.errno.code(), e.msg.to_string())),
            RawOpen::Mockd(c) => c
                .call(Kind::Mmap, 0, MmapArgs { cookie, len }.encode())
                .map(drop)
                .map_err(|e| (e.errno, e.msg)),
            RawOpen::Kernel(f) => davinci_shm::SharedMapping::map(f.as_fd(), cookie, len as usize)
                .map(drop)
                .map_err(|e| (e.raw_os_error().unwrap_or(0), e.to_string())),
        }
    }
}

impl Drop for RawOpen {
    fn drop(&mut self) {
        if let RawOpen::Embedded { dev, client } = self {
            dev.close(*client);
        }
    }
}

/// The four cookies of a stream and an allocation: (what, cookie).
fn cookies(stream: u32, alloc: u32) -> [(&'static str, u64); 4] {
    [
        ("command ring", mmap_offset(MmapKind::CmdRing, stream)),
        ("event ring", mmap_offset(MmapKind::EventRing, stream)),
        ("doorbell", mmap_offset(MmapKind::Doorbell, stream)),
        ("memory", mmap_offset(MmapKind::Memory, alloc)),
    ]
}

/// 2. The mmap cookies of another client's stream (command ring, event ring, doorbell) and
///    allocation are refused to B exactly like B's own cookies after B destroyed the objects:
///    `ENOENT`, same message; B's own live cookies map (so the refusal is about ownership).
///    Embedded and mockd (B a raw open, with ioctls); kernel: B is the node opened read/write
///    with no ioctls (no `unsafe` here), so A's cookies are compared with A's destroyed
///    objects' cookies from B's open instead (tests/tests/kernel.rs checks B's own there).
#[test]
fn foreign_mmap_cookies_are_refused_exactly_like_stale_ones() {
    let (_shared, a, b) = shared_pair();
    // B is a raw open here (the shim maps only what it was handed).
    drop(b);
    let mut raw = RawOpen::of(&a);
    const PAGE: u64 = 4096;

    let a_ctx = a.create_context().unwrap();
    let a_s = a_ctx.create_stream().unwrap();
    let a_mem = a.alloc(PAGE as usize).unwrap();
    let foreign = cookies(a_s.handle(), a_mem.handle());

    // Stale cookies: of objects B made, mapped and destroyed (where B has ioctls), else of
    // objects A made and destroyed.
    let stale = match raw.ioctl(DRIVER_CMD_CREATE_CONTEXT, CreateContextArgs::default()) {
        Some(ctx) => {
            let ctx = ctx.expect("B: CREATE_CONTEXT").handle;
            let s = raw
                .ioctl(
                    DRIVER_CMD_CREATE_STREAM,
                    CreateStreamArgs {
                        ctx,
                        cmd_entries: 64,
                        event_entries: 64,
                        ..CreateStreamArgs::default()
                    },
                )
                .unwrap()
                .expect("B: CREATE_STREAM");
            let m = raw
                .ioctl(
                    DRIVER_CMD_ALLOC_MEMORY,
                    AllocMemoryArgs {
                        size: PAGE,
                        ..AllocMemoryArgs::default()
                    },
                )
                .unwrap()
                .expect("B: ALLOC_MEMORY");
            let own = cookies(s.handle, m.handle);
            assert_eq!(own[0].1, s.cmd_ring.mmap_offset, "cookie encoding");
            assert_eq!(own[3].1, m.mmap_offset, "cookie encoding");
            for (what, cookie) in own {
                raw.map(cookie, PAGE)
                    .unwrap_or_else(|e| panic!("B cannot map its own live {what}: {e:?}"));
            }
            for (req, h) in [
                (DRIVER_CMD_DESTROY_STREAM, s.handle),
                (DRIVER_CMD_FREE_MEMORY, m.handle),
            ] {
                raw.ioctl(req, HandleArgs { handle: h, pad: 0 })
                    .unwrap()
                    .expect("B destroys its own object");
            }
            own
        }
        None => {
            let s = a_ctx.create_stream().unwrap();
            let m = a.alloc(PAGE as usize).unwrap();
            cookies(s.handle(), m.handle())
        }
    };

    for ((what, f), (_, s)) in foreign.into_iter().zip(stale) {
        let fr = raw.map(f, PAGE);
        let sr = raw.map(s, PAGE);
        let fe = fr.expect_err(&format!("B mapped A's {what}"));
        assert_eq!(fe.0, Errno::ENOENT.code(), "A's {what} from B: {}", fe.1);
        assert_eq!(Err(fe), sr, "{what}: A's cookie vs a stale one");
    }
    // A's objects are A's: still mapped by A and working.
    let mut a_s = a_s;
    assert_works(&a, &mut a_s, 201);
}

/// 3. Descriptors on B's stream naming A's device memory (FILL, COPY in both directions, ADD
///    as destination or source, and ranges straddling from B's allocation into A's adjacent
///    one or from A's into B's) complete with the status docs/abi.md gives (`EACCES` when
///    the range does not start in B's memory, `ERANGE` when it starts in B's and runs past
///    its end, or wraps), write nothing anywhere and read nothing out: A reads its memory
///    back unchanged through its host view and through a COPY on its own stream, and B's
///    buffers hold exactly what B put there. All backends.
#[test]
fn descriptors_naming_foreign_memory_fail_and_leave_it_untouched() {
    let (_shared, a, b) = shared_pair();
    const LEN: usize = 8192;
    // Interleaved, so that A's allocation lies between two of B's.
    let b_lo = b.alloc(LEN).unwrap();
    let a_mem = a.alloc(LEN).unwrap();
    let b_hi = b.alloc(LEN).unwrap();
    let a_out = a.alloc(LEN).unwrap();
    let (bl, am, bh) = (b_lo.dev_addr(), a_mem.dev_addr(), b_hi.dev_addr());
    // Where the memory lies: an address is `DVA_BASE + (generation << 40) + offset` (docs/
    // abi.md, ALLOC_MEMORY), so neighbours in memory are not neighbours in address.
    let offset = |a: davinci_shim::DevAddr| a.get() & ((1 << 40) - 1);
    assert_eq!(
        (offset(bl) + LEN as u64, offset(am) + LEN as u64),
        (offset(am), offset(bh)),
        "precondition: the device placed B's, A's and B's allocations next to each other"
    );
    let n = LEN / 4;
    let a_data: Vec<u32> = (0..n as u32).map(|i| 0xa000_0000 | i).collect();
    let lo_data: Vec<u32> = (0..n as u32).map(|i| 0xb100_0000 | i).collect();
    let hi_data: Vec<u32> = (0..n as u32).map(|i| 0xb200_0000 | i).collect();
    a_mem.write_slice(0, &a_data).unwrap();
    b_lo.write_slice(0, &lo_data).unwrap();
    b_hi.write_slice(0, &hi_data).unwrap();

    let (end_lo, end_a) = (bl + (LEN as u64 - 64), am + (LEN as u64 - 64));
    use FaultKind::{NotOwned, Overflow, PastEnd};
    use FaultOperand::{Dst, Src0, Src1};
    let cases: Vec<(&str, TaskDesc, Errno, FaultOperand, FaultKind)> = vec![
        (
            "FILL of A's memory",
            TaskDesc::fill(1, am, LEN as u64, 0),
            Errno::EACCES,
            Dst,
            NotOwned,
        ),
        (
            "FILL from B's memory on into A's",
            TaskDesc::fill(1, end_lo, 128, 0),
            Errno::ERANGE,
            Dst,
            PastEnd,
        ),
        (
            "FILL from A's memory on into B's",
            TaskDesc::fill(1, end_a, 128, 0),
            Errno::EACCES,
            Dst,
            NotOwned,
        ),
        (
            "FILL from B's memory wrapping around the address space",
            TaskDesc::fill(1, bl, !3, 0),
            Errno::ERANGE,
            Dst,
            Overflow,
        ),
        (
            "COPY out of A's memory",
            TaskDesc::copy(1, bh, am, 256),
            Errno::EACCES,
            Src0,
            NotOwned,
        ),
        (
            "COPY into A's memory",
            TaskDesc::copy(1, am, bh, 256),
            Errno::EACCES,
            Dst,
            NotOwned,
        ),
        (
            "COPY from B's memory on into A's",
            TaskDesc::copy(1, bh, end_lo, 128),
            Errno::ERANGE,
            Src0,
            PastEnd,
        ),
        (
            "COPY into B's memory on into A's",
            TaskDesc::copy(1, end_lo, bh, 128),
            Errno::ERANGE,
            Dst,
            PastEnd,
        ),
        (
            "ADD into A's memory",
            TaskDesc::add(1, Dtype::U32, am, bl, bh, 64),
            Errno::EACCES,
            Dst,
            NotOwned,
        ),
        (
            "ADD reading A's memory",
            TaskDesc::add(1, Dtype::F32, bh, bl, am, 64),
            Errno::EACCES,
            Src1,
            NotOwned,
        ),
        (
            "ADD whose source runs from B's memory into A's",
            TaskDesc::add(1, Dtype::I32, bh, end_lo, bh, 32),
            Errno::ERANGE,
            Src0,
            PastEnd,
        ),
    ];
    let b_ctx = b.create_context().unwrap();
    for (what, desc, errno, operand, kind) in cases {
        let c = run_failing(&b_ctx, &desc, what);
        assert_eq!(c.errno(), Some(errno), "{what}: {c:?}");
        let fault = c
            .fault()
            .unwrap_or_else(|| panic!("{what}: no fault detail: {c:?}"));
        assert_eq!(
            (fault.operand, fault.kind),
            (operand, kind),
            "{what}: {fault:?}"
        );
        if kind == PastEnd {
            assert_eq!(fault, Fault::with_value(operand, PastEnd, 64), "{what}");
        }
    }

    // A's memory, read by A: through its host view, and by the device for A.
    assert_eq!(
        a_mem.read_vec::<u32>(0, n).unwrap(),
        a_data,
        "A's host view"
    );
    let a_ctx = a.create_context().unwrap();
    let mut a_s = a_ctx.create_stream().unwrap();
    a_s.submit_desc(&TaskDesc::copy(1, a_out.dev_addr(), am, LEN as u64))
        .unwrap();
    a_s.synchronize(T).unwrap();
    assert!(poll_all(&mut a_s).iter().all(Completion::is_ok));
    assert_eq!(
        a_out.read_vec::<u32>(0, n).unwrap(),
        a_data,
        "A's memory copied by A"
    );
    // Nothing was written in part, and nothing of A's reached B's buffers.
    assert_eq!(
        b_lo.read_vec::<u32>(0, n).unwrap(),
        lo_data,
        "B's lower buffer"
    );
    assert_eq!(
        b_hi.read_vec::<u32>(0, n).unwrap(),
        hi_data,
        "B's upper buffer"
    );
}
