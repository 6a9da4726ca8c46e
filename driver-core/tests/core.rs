//! driver-core against a fake platform: dispatch validation, sharing, isolation, the engine,
//! flow control, corruption handling, teardown.

mod common;

use common::*;
use davinci_driver_core::{
    Config, DeviceCore, Inject, NoUserMem, Reply, Role, Run, StreamState, UserMem, DVA_BASE,
};
use davinci_ring::{Consumer, Producer, RingRegion};
use davinci_uapi::*;

fn call<T: Wire>(
    dev: &mut DeviceCore<HeapPlatform>,
    client: u32,
    request: u32,
    args: &mut T,
) -> Result<Reply, Errno> {
    let mut b = vec![0u8; T::SIZE];
    args.encode(&mut b);
    let r = dev.ioctl(client, request, &mut b, &mut NoUserMem);
    *args = T::decode(&b);
    r.map_err(|e| e.errno)
}

fn ctx(dev: &mut DeviceCore<HeapPlatform>, c: u32) -> u32 {
    let mut a = CreateContextArgs::default();
    call(dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut a).unwrap();
    a.handle
}

fn alloc(dev: &mut DeviceCore<HeapPlatform>, c: u32, size: u64) -> AllocMemoryArgs {
    let mut a = AllocMemoryArgs {
        size,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a).unwrap();
    a
}

struct Host {
    handle: u32,
    prod: Producer<TaskDesc>,
    cons: Consumer<EventRecord>,
    cmd_ptr: *mut u8,
}

fn stream(dev: &mut DeviceCore<HeapPlatform>, c: u32, ctx: u32, ce: u32, ee: u32) -> Host {
    let mut a = CreateStreamArgs {
        ctx,
        cmd_entries: ce,
        event_entries: ee,
        ..Default::default()
    };
    let r = call(dev, c, DRIVER_CMD_CREATE_STREAM, &mut a).unwrap();
    assert_eq!(r, Reply::StreamCreated(a.handle));
    assert_eq!(a.cmd_ring.entries, ce);
    assert_eq!(a.cmd_ring.offsets.slots, 192);
    let m = dev.stream_mem(c, a.handle).unwrap();
    // SAFETY: the fake platform's buffers live as long as the stream, which outlives `Host`
    // in every test; both sides only touch them through the ring protocol.
    let (cr, er) = unsafe {
        (
            RingRegion::new(m.cmd_ptr, m.cmd_len, ce, 64).unwrap(),
            RingRegion::new(m.event_ptr, m.event_len, ee, 32).unwrap(),
        )
    };
    Host {
        handle: a.handle,
        prod: Producer::new(cr),
        cons: Consumer::new(er),
        cmd_ptr: m.cmd_ptr,
    }
}

fn drain(h: &mut Host) -> Vec<EventRecord> {
    let mut v = Vec::new();
    h.cons.consume(usize::MAX, |r| v.push(r));
    v
}

fn mem(dev: &mut DeviceCore<HeapPlatform>, c: u32, a: &AllocMemoryArgs, len: usize) -> Vec<u8> {
    use davinci_driver_core::Platform;
    let mut b = vec![0; len];
    dev.platform_mut()
        .mem_read(c, a.dev_addr - DVA_BASE, &mut b)
        .unwrap();
    b
}

#[test]
fn dispatch_rejects_bad_requests() {
    let mut dev = device();
    let c = dev.open(params(100, 1000, Role::Client)).unwrap();
    // Unknown command number and a known number with the wrong size.
    let mut b = [0u8; 16];
    assert_eq!(
        dev.ioctl(
            c,
            ioctl::iowr::<[u8; 16]>(b'd', 0x7f),
            &mut b,
            &mut NoUserMem
        )
        .unwrap_err()
        .errno,
        Errno::ENOTTY
    );
    assert_eq!(
        dev.ioctl(
            c,
            ioctl::iowr::<[u8; 24]>(b'd', 0x01),
            &mut [0u8; 24],
            &mut NoUserMem
        )
        .unwrap_err()
        .errno,
        Errno::ENOTTY
    );
    assert_eq!(
        dev.ioctl(c, DRIVER_CMD_CREATE_CONTEXT, &mut [0u8; 8], &mut NoUserMem)
            .unwrap_err()
            .errno,
        Errno::ENOTTY,
        "arg slice shorter than the command's size"
    );
    // Reserved fields.
    let mut a = CreateContextArgs {
        flags: 1,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut a),
        Err(Errno::EINVAL)
    );
    let k = ctx(&mut dev, c);
    let mut s = CreateStreamArgs {
        ctx: k,
        cmd_entries: 48,
        event_entries: 64,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_CREATE_STREAM, &mut s),
        Err(Errno::EINVAL)
    );
    s.cmd_entries = 128;
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_CREATE_STREAM, &mut s),
        Err(Errno::EINVAL),
        "event ring smaller than command ring"
    );
    s.cmd_entries = 64;
    s.reserved[1] = 1;
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_CREATE_STREAM, &mut s),
        Err(Errno::EINVAL)
    );
    // Unknown handles.
    let mut h = HandleArgs {
        handle: 0x0001_0005,
        pad: 0,
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_FREE_MEMORY, &mut h),
        Err(Errno::ENOENT)
    );
    let mut w = WaitEventArgs {
        kind: 3,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_WAIT_EVENT, &mut w),
        Err(Errno::EINVAL)
    );
    let mut al = AllocMemoryArgs::default();
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut al),
        Err(Errno::EINVAL)
    );
    al.size = 64 << 20;
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut al),
        Err(Errno::ENOMEM),
        "over the per-client limit"
    );
}

#[test]
fn exclusive_sharing_and_admin() {
    let mut dev = device();
    let a = dev.open(params(100, 1000, Role::Client)).unwrap();
    let e = dev.open(params(200, 1000, Role::Client)).unwrap_err();
    assert_eq!(e.error.errno, Errno::EBUSY);
    let holder = e.holder.unwrap();
    assert_eq!(holder.pid, 100);
    assert!(holder.container.starts_with(b"ctr-100"));
    // Control opens are always allowed and are not clients.
    let ctl = dev.open(params(300, 1000, Role::Control)).unwrap();
    let root = dev.open(params(301, 0, Role::Control)).unwrap();
    assert_eq!(dev.client_count(), 1);
    let mut x = CreateContextArgs::default();
    assert_eq!(
        call(&mut dev, ctl, DRIVER_CMD_CREATE_CONTEXT, &mut x),
        Err(Errno::EPERM)
    );
    let mut q = DeviceShareArgs::default();
    call(&mut dev, ctl, DRIVER_CMD_QUERY_DEVICE_SHARE, &mut q).unwrap();
    assert_eq!((q.mode, q.clients), (0, 1));
    // Non-admin set: EPERM. Admin set to the current mode: no-op.
    let mut set = DeviceShareArgs {
        mode: 1,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, ctl, DRIVER_CMD_SET_DEVICE_SHARE, &mut set),
        Err(Errno::EPERM)
    );
    let mut same = DeviceShareArgs::default();
    call(&mut dev, root, DRIVER_CMD_SET_DEVICE_SHARE, &mut same).unwrap();
    call(&mut dev, root, DRIVER_CMD_SET_DEVICE_SHARE, &mut set).unwrap();
    call(&mut dev, root, DRIVER_CMD_SET_DEVICE_SHARE, &mut set).unwrap();
    let b = dev.open(params(200, 1000, Role::Client)).unwrap();
    assert_eq!(dev.client_count(), 2);
    // Going exclusive would strand one of them.
    assert_eq!(
        call(&mut dev, root, DRIVER_CMD_SET_DEVICE_SHARE, &mut same),
        Err(Errno::EBUSY)
    );
    let mut bad = DeviceShareArgs {
        mode: 2,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, root, DRIVER_CMD_SET_DEVICE_SHARE, &mut bad),
        Err(Errno::EINVAL)
    );
    dev.close(b);
    call(&mut dev, root, DRIVER_CMD_SET_DEVICE_SHARE, &mut same).unwrap();
    dev.close(a);
    assert_eq!(dev.client_count(), 0);
}

struct Collect(Vec<(u64, Vec<u8>)>);

impl UserMem for Collect {
    fn write(&mut self, addr: u64, data: &[u8]) -> davinci_driver_core::Result<()> {
        self.0.push((addr, data.to_vec()));
        Ok(())
    }
}

#[test]
fn list_clients_reports_usage() {
    let mut dev = device();
    let root = dev.open(params(1, 0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    let a = dev.open(params(10, 1000, Role::Client)).unwrap();
    let b = dev.open(params(20, 1001, Role::Client)).unwrap();
    let k = ctx(&mut dev, a);
    let _m = alloc(&mut dev, a, 10_000);
    let mut h = stream(&mut dev, a, k, 8, 8);
    h.prod.push(&TaskDesc::nop(1)).unwrap();
    h.prod.publish();
    assert_eq!(dev.run_stream(h.handle, 64), Run::Progress(1));
    // Two more published but not yet taken by the device: queued.
    h.prod.push(&TaskDesc::nop(2)).unwrap();
    h.prod.push(&TaskDesc::nop(3)).unwrap();
    h.prod.publish();
    let _ = b;
    let args = ListClientsArgs {
        buf: 0x1000,
        capacity: 8,
        entry_size: core::mem::size_of::<ClientUsage>() as u32,
        ..Default::default()
    };
    let mut raw = vec![0u8; ListClientsArgs::SIZE];
    args.encode(&mut raw);
    let mut out = Collect(Vec::new());
    dev.ioctl(a, DRIVER_CMD_LIST_CLIENTS, &mut raw, &mut out)
        .unwrap();
    let args = ListClientsArgs::decode(&raw);
    assert_eq!(args.count, 2);
    assert_eq!(out.0.len(), 2);
    assert_eq!(out.0[1].0, 0x1000 + ClientUsage::SIZE as u64);
    let ua = ClientUsage::decode(&out.0[0].1);
    assert_eq!(
        (ua.pid, ua.uid, ua.contexts, ua.streams, ua.allocations),
        (10, 1000, 1, 1, 1)
    );
    assert_eq!(ua.memory_bytes, 12288);
    assert_eq!((ua.tasks_submitted, ua.tasks_completed), (1, 1));
    // ABI 1.2: the process name and what is queued but not taken.
    assert_eq!((ua.comm(), ua.tasks_queued), ("proc-10", 2));
    assert_eq!(ClientUsage::decode(&out.0[1].1).comm(), "proc-20");
    // Capacity 0 only counts; wrong entry size is refused.
    let mut probe = ListClientsArgs {
        entry_size: ClientUsage::SIZE as u32,
        ..Default::default()
    };
    call(&mut dev, a, DRIVER_CMD_LIST_CLIENTS, &mut probe).unwrap();
    assert_eq!(probe.count, 2);
    for bad in [0, 4, 100, 4104] {
        probe.entry_size = bad;
        assert_eq!(
            call(&mut dev, a, DRIVER_CMD_LIST_CLIENTS, &mut probe),
            Err(Errno::EINVAL),
            "entry_size {bad}"
        );
    }
    // An older caller with a 16-byte entry, or a 1.1 caller with its 120-byte entry, gets the
    // prefix it knows; a newer one with a 160-byte entry gets our 144 bytes and 16 zero bytes,
    // at its stride.
    for (stride, known) in [(16usize, 16usize), (120, 120), (160, ClientUsage::SIZE)] {
        let args = ListClientsArgs {
            buf: 0x2000,
            capacity: 8,
            entry_size: stride as u32,
            ..Default::default()
        };
        let mut raw = vec![0u8; ListClientsArgs::SIZE];
        args.encode(&mut raw);
        let mut out = Collect(Vec::new());
        dev.ioctl(a, DRIVER_CMD_LIST_CLIENTS, &mut raw, &mut out)
            .unwrap();
        let mut flat = std::collections::BTreeMap::new();
        for (addr, data) in &out.0 {
            for (i, b) in data.iter().enumerate() {
                assert!(
                    flat.insert(addr + i as u64, *b).is_none(),
                    "byte written twice"
                );
            }
        }
        assert_eq!(
            flat.len(),
            2 * stride,
            "exactly two entries of {stride} bytes"
        );
        let second: Vec<u8> = (0..stride as u64)
            .map(|i| flat[&(0x2000 + stride as u64 + i)])
            .collect();
        assert_eq!(&second[4..8], &20u32.to_ne_bytes(), "pid of client b");
        assert!(second[known..].iter().all(|&b| b == 0));
        if stride >= ClientUsage::SIZE {
            let u = ClientUsage::decode(&second[..ClientUsage::SIZE]);
            assert_eq!((u.uid, u.comm()), (1001, "proc-20"));
        }
    }
}

#[test]
fn engine_executes_fill_copy_add_and_events_in_order() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let a = alloc(&mut dev, c, 4096);
    let b = alloc(&mut dev, c, 4096);
    let out = alloc(&mut dev, c, 4096);
    let mut s1 = stream(&mut dev, c, k, 16, 16);
    let mut s2 = stream(&mut dev, c, k, 16, 16);
    let mut ev = CreateEventArgs {
        ctx: k,
        ..Default::default()
    };
    call(&mut dev, c, DRIVER_CMD_CREATE_EVENT, &mut ev).unwrap();

    // Stream 2 waits for the event before adding; stream 1 fills, then records.
    s2.prod
        .push(&TaskDesc::event_wait(20, ev.handle, 1))
        .unwrap();
    s2.prod
        .push(&TaskDesc::add(
            21,
            Dtype::U32,
            DevAddr(out.dev_addr),
            DevAddr(a.dev_addr),
            DevAddr(b.dev_addr),
            1024,
        ))
        .unwrap();
    s2.prod.publish();
    assert_eq!(
        dev.run_stream(s2.handle, 64),
        Run::Blocked {
            event: ev.handle,
            value: 1
        }
    );
    assert!(drain(&mut s2).is_empty());

    s1.prod
        .push(&TaskDesc::fill(10, DevAddr(a.dev_addr), 4096, 7))
        .unwrap();
    s1.prod
        .push(&TaskDesc::fill(11, DevAddr(b.dev_addr), 4096, 0xFFFF_FFFF))
        .unwrap();
    s1.prod
        .push(&TaskDesc::copy(
            12,
            DevAddr(b.dev_addr),
            DevAddr(a.dev_addr),
            8,
        ))
        .unwrap();
    s1.prod
        .push(&TaskDesc::event_record(13, ev.handle, 1))
        .unwrap();
    s1.prod.publish();
    assert_eq!(dev.run_stream(s1.handle, 64), Run::Progress(4));
    let r1 = drain(&mut s1);
    assert_eq!(
        r1.iter().map(|r| r.user_data).collect::<Vec<_>>(),
        [10, 11, 12, 13]
    );
    assert!(r1.iter().all(|r| r.status == 0));
    assert_eq!(r1[0].result, 4096);

    assert_eq!(dev.run_stream(s2.handle, 64), Run::Progress(2));
    let r2 = drain(&mut s2);
    assert_eq!(
        r2.iter()
            .map(|r| (r.user_data, r.status))
            .collect::<Vec<_>>(),
        [(20, 0), (21, 0)]
    );
    let o = mem(&mut dev, c, &out, 4096);
    let words: Vec<u32> = o
        .chunks_exact(4)
        .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    // First two words of b were overwritten by the copy of a (7), the rest are 0xFFFFFFFF.
    assert_eq!(words[0], 14);
    assert_eq!(words[1], 14);
    assert!(
        words[2..].iter().all(|&w| w == 6),
        "7 + u32::MAX wraps to 6"
    );
    assert_eq!(dev.run_stream(s2.handle, 64), Run::Idle);
}

#[test]
fn descriptors_behind_a_blocked_wait_run_once_in_order_when_it_ends() {
    // A wait that blocks in the middle of a published run stops the run there; the next run
    // after the event is recorded completes the wait and every descriptor behind it, each
    // once, in order.
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut s1 = stream(&mut dev, c, k, 64, 64);
    let mut s2 = stream(&mut dev, c, k, 64, 64);
    let mut ev = CreateEventArgs {
        ctx: k,
        ..Default::default()
    };
    call(&mut dev, c, DRIVER_CMD_CREATE_EVENT, &mut ev).unwrap();
    for i in 0..3 {
        s2.prod.push(&TaskDesc::nop(i)).unwrap();
    }
    s2.prod
        .push(&TaskDesc::event_wait(3, ev.handle, 1))
        .unwrap();
    for i in 4..40 {
        s2.prod.push(&TaskDesc::nop(i)).unwrap();
    }
    s2.prod.publish();
    assert_eq!(
        dev.run_stream(s2.handle, 64),
        Run::Progress(3),
        "three NOPs, then the wait blocks"
    );
    assert_eq!(
        drain(&mut s2)
            .iter()
            .map(|r| r.user_data)
            .collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(
        dev.run_stream(s2.handle, 64),
        Run::Blocked {
            event: ev.handle,
            value: 1
        }
    );
    s1.prod
        .push(&TaskDesc::event_record(100, ev.handle, 1))
        .unwrap();
    s1.prod.publish();
    assert_eq!(dev.run_stream(s1.handle, 64), Run::Progress(1));
    assert_eq!(dev.run_stream(s2.handle, 64), Run::Progress(37));
    let rest = drain(&mut s2);
    assert_eq!(
        rest.iter().map(|r| r.user_data).collect::<Vec<_>>(),
        (3..40).collect::<Vec<_>>(),
        "the wait, then every NOP behind it once, in order"
    );
    assert!(rest.iter().all(|r| r.status == 0));
    assert_eq!(dev.run_stream(s2.handle, 64), Run::Idle);
}

#[test]
fn instant_tasks_share_one_clock_reading_per_run() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let a = alloc(&mut dev, c, 4096);
    let mut s = stream(&mut dev, c, k, 16, 16);
    let descs = [
        TaskDesc::nop(0),
        TaskDesc::nop(1),
        TaskDesc::fill(2, DevAddr(a.dev_addr), 64, 1),
        TaskDesc::nop(3),
        TaskDesc::fill(4, DevAddr(a.dev_addr), 64, 2),
        TaskDesc::fill(5, DevAddr(a.dev_addr), 64, 3),
    ];
    for d in &descs {
        s.prod.push(d).unwrap();
    }
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(6));
    let stamps: Vec<(u64, u64)> = drain(&mut s)
        .iter()
        .map(|r| (r.user_data, r.timestamp_ns))
        .collect();
    // The clock ticks on every read: the NOPs reuse the reading before them, each FILL reads
    // it when it finished, and time never goes backwards.
    let t: Vec<u64> = stamps.iter().map(|&(_, t)| t).collect();
    assert_eq!(
        stamps.iter().map(|&(u, _)| u).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    assert_eq!(t[0], t[1], "two NOPs in one run share a reading");
    assert!(t[2] > t[1], "a FILL reads the clock when it finished");
    assert_eq!(t[3], t[2], "a NOP after a FILL carries the FILL's time");
    assert!(
        t[4] > t[3] && t[5] > t[4],
        "every data task reads the clock"
    );
    // A later run reads it afresh.
    s.prod.push(&TaskDesc::nop(6)).unwrap();
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(1));
    assert!(drain(&mut s)[0].timestamp_ns > t[5]);
}

#[test]
fn flow_control_never_overflows_the_event_ring() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut s = stream(&mut dev, c, k, 8, 8);
    let mut next = 0u64;
    for _ in 0..8 {
        s.prod.push(&TaskDesc::nop(next)).unwrap();
        next += 1;
    }
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(8));
    // Event ring is full now; 8 more commands wait.
    for _ in 0..8 {
        s.prod.push(&TaskDesc::nop(next)).unwrap();
        next += 1;
    }
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Stalled);
    let first = drain(&mut s);
    assert_eq!(first.len(), 8);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(8));
    let second = drain(&mut s);
    let ids: Vec<u64> = first.iter().chain(&second).map(|r| r.user_data).collect();
    assert_eq!(ids, (0..16).collect::<Vec<_>>());
}

#[test]
fn invalid_descriptors_fail_only_their_stream() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let a = alloc(&mut dev, c, 4096);
    let mut good = stream(&mut dev, c, k, 8, 8);

    let a2 = alloc(&mut dev, c, 4096);
    use FaultKind as K;
    use FaultOperand as O;
    let at = |operand, kind| Fault::new(operand, kind);
    let cases: [(TaskDesc, Errno, Fault); 10] = [
        (
            TaskDesc {
                opcode: 99,
                ..TaskDesc::nop(1)
            },
            Errno::EBADMSG,
            at(O::Opcode, K::Unknown),
        ),
        (
            TaskDesc {
                reserved1: 5,
                ..TaskDesc::nop(1)
            },
            Errno::EBADMSG,
            at(O::Reserved, K::NotZero),
        ),
        (
            TaskDesc {
                imm: 5,
                ..TaskDesc::nop(1)
            },
            Errno::EBADMSG,
            at(O::Imm, K::NotZero),
        ),
        // Owned, but the range runs 104 bytes past the allocation's end: not "not owned".
        (
            TaskDesc::fill(1, DevAddr(a.dev_addr) + 4000, 200, 0),
            Errno::ERANGE,
            Fault::with_value(O::Dst, K::PastEnd, 104),
        ),
        (
            TaskDesc::copy(1, DevAddr(a.dev_addr), DevAddr(0x1234), 8),
            Errno::EACCES,
            at(O::Src0, K::NotOwned),
        ),
        (
            TaskDesc::fill(1, DevAddr(u64::MAX - 3), 8, 0),
            Errno::ERANGE,
            at(O::Dst, K::Overflow),
        ),
        (
            TaskDesc::event_record(1, 0x0001_0001, 1),
            Errno::ENOENT,
            at(O::Handle, K::NoSuchEvent),
        ),
        // Alignment errors name the operand and the alignment needed.
        (
            TaskDesc::fill(1, DevAddr(a.dev_addr) + 2, 8, 0),
            Errno::EINVAL,
            Fault::with_value(O::Dst, K::Misaligned, 4),
        ),
        (
            TaskDesc::add(
                1,
                Dtype::U32,
                DevAddr(a.dev_addr),
                DevAddr(a2.dev_addr),
                DevAddr(a2.dev_addr) + 6,
                4,
            ),
            Errno::EINVAL,
            Fault::with_value(O::Src1, K::Misaligned, 4),
        ),
        // An ADD whose count runs 4 bytes past its second source (1024 elements of 4 bytes
        // from 4 bytes in).
        (
            TaskDesc::add(
                1,
                Dtype::F32,
                DevAddr(a.dev_addr),
                DevAddr(a.dev_addr),
                DevAddr(a2.dev_addr) + 4,
                1024,
            ),
            Errno::ERANGE,
            Fault::with_value(O::Src1, K::PastEnd, 4),
        ),
    ];
    for (desc, errno, fault) in cases {
        let mut bad = stream(&mut dev, c, k, 8, 8);
        bad.prod.push(&TaskDesc::nop(0)).unwrap();
        bad.prod.push(&desc).unwrap();
        bad.prod.push(&TaskDesc::nop(2)).unwrap();
        bad.prod.publish();
        assert_eq!(
            dev.run_stream(bad.handle, 64),
            Run::Failed(errno),
            "{desc:?}"
        );
        let recs = drain(&mut bad);
        assert_eq!(
            recs.len(),
            2,
            "the bad one completes with an error, nothing after it"
        );
        assert_eq!(recs[1].status, -errno.code());
        assert_eq!(Fault::decode(recs[1].result), Some(fault), "{desc:?}");
        assert_eq!(bad.prod.region().error(), Some((errno.code() as u32, 1)));
        assert_eq!(
            dev.stream_state(c, bad.handle),
            Ok(StreamState::Error(errno))
        );
        let mut w = WaitEventArgs {
            kind: 1,
            handle: bad.handle,
            value: 3,
            timeout_ns: 0,
            ..Default::default()
        };
        assert_eq!(
            call(&mut dev, c, DRIVER_CMD_WAIT_EVENT, &mut w),
            Err(Errno::EIO)
        );
        assert_eq!(w.status, errno.code() as u32);
        // The healthy stream still works.
        good.prod
            .push(&TaskDesc::fill(7, DevAddr(a.dev_addr), 64, 9))
            .unwrap();
        good.prod.publish();
        assert_eq!(dev.run_stream(good.handle, 64), Run::Progress(1));
        assert_eq!(drain(&mut good)[0].status, 0);
    }
}

#[test]
fn corrupt_indices_stop_the_stream_with_eproto() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let s = stream(&mut dev, c, k, 8, 8);
    // A hostile producer writes a tail 1000 slots ahead.
    // SAFETY: `cmd_ptr` points at the live command ring; offset 0 is the u32 tail.
    unsafe { s.cmd_ptr.cast::<u32>().write_volatile(1000) };
    assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(Errno::EPROTO));
    assert_eq!(
        s.prod.region().error().map(|e| e.0),
        Some(Errno::EPROTO.code() as u32)
    );
    // A hostile consumer head on the event ring.
    let mut t = stream(&mut dev, c, k, 8, 8);
    t.prod.push(&TaskDesc::nop(1)).unwrap();
    t.prod.publish();
    let m = dev.stream_mem(c, t.handle).unwrap();
    // SAFETY: `event_ptr` points at the live event ring; offset 64 is the u32 head.
    unsafe {
        m.event_ptr
            .add(64)
            .cast::<u32>()
            .write_volatile(0x8000_0000)
    };
    assert_eq!(dev.run_stream(t.handle, 64), Run::Failed(Errno::EPROTO));
    // SUBMIT_TASK that finds corrupt indices fails the stream itself, before the engine
    // looks: EIO now, the EPROTO error state for everything after.
    let u = stream(&mut dev, c, k, 8, 8);
    // SAFETY: `cmd_ptr` points at the live command ring; offset 0 is the u32 tail.
    unsafe { u.cmd_ptr.cast::<u32>().write_volatile(0xdead_0000) };
    let mut sub = SubmitTaskArgs {
        stream: u.handle,
        desc: TaskDesc::nop(7),
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_SUBMIT_TASK, &mut sub),
        Err(Errno::EIO)
    );
    assert_eq!(
        dev.stream_state(c, u.handle).unwrap(),
        StreamState::Error(Errno::EPROTO)
    );
    assert_eq!(
        u.prod.region().error().map(|e| e.0),
        Some(Errno::EPROTO.code() as u32)
    );
    assert_eq!(dev.run_stream(u.handle, 64), Run::Failed(Errno::EPROTO));
    // Each of the three stopped streams counts once (GET_COUNTERS), whoever found it.
    assert_eq!(dev.counters().stream_errors, 3);
}

#[test]
fn isolation_between_clients() {
    let mut dev = device();
    let root = dev.open(params(1, 0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    let a = dev.open(params(10, 1000, Role::Client)).unwrap();
    let b = dev.open(params(20, 1001, Role::Client)).unwrap();
    let ka = ctx(&mut dev, a);
    let kb = ctx(&mut dev, b);
    let ma = alloc(&mut dev, a, 4096);
    let mut sb = stream(&mut dev, b, kb, 8, 8);
    // b cannot use a's handles...
    let mut h = HandleArgs {
        handle: ma.handle,
        pad: 0,
    };
    assert_eq!(
        call(&mut dev, b, DRIVER_CMD_FREE_MEMORY, &mut h),
        Err(Errno::ENOENT)
    );
    h.handle = ka;
    assert_eq!(
        call(&mut dev, b, DRIVER_CMD_DESTROY_CONTEXT, &mut h),
        Err(Errno::ENOENT)
    );
    assert!(dev.mmap_target(b, ma.mmap_offset, 4096).is_err());
    assert!(dev.mmap_target(a, ma.mmap_offset, 4096).is_ok());
    assert!(
        dev.mmap_target(a, ma.mmap_offset, 8192).is_err(),
        "longer than the object"
    );
    // ...nor a's memory through a descriptor.
    sb.prod
        .push(&TaskDesc::fill(1, DevAddr(ma.dev_addr), 64, 1))
        .unwrap();
    sb.prod.publish();
    assert_eq!(dev.run_stream(sb.handle, 64), Run::Failed(Errno::EACCES));
    assert_eq!(mem(&mut dev, a, &ma, 64), vec![0; 64]);
}

#[test]
fn close_releases_everything_and_slow_submit_works() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let _m = alloc(&mut dev, c, 1 << 20);
    let mut s = stream(&mut dev, c, k, 4, 4);
    let mut sub = SubmitTaskArgs {
        stream: s.handle,
        desc: TaskDesc::nop(42),
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_SUBMIT_TASK, &mut sub),
        Ok(Reply::Kick(s.handle))
    );
    assert_eq!(sub.index, 0);
    s.prod.resync_tail();
    assert_eq!(s.prod.tail(), 1);
    for i in 0..3 {
        call(&mut dev, c, DRIVER_CMD_SUBMIT_TASK, &mut sub).unwrap();
        assert_eq!(sub.index, i + 1);
    }
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_SUBMIT_TASK, &mut sub),
        Err(Errno::EAGAIN)
    );
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(4));
    assert_eq!(drain(&mut s).len(), 4);
    let mut w = WaitEventArgs {
        kind: 1,
        handle: s.handle,
        value: 4,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_WAIT_EVENT, &mut w),
        Ok(Reply::Done)
    );
    assert_eq!(w.current, 4);
    w.value = 5;
    w.timeout_ns = 1000;
    assert!(matches!(
        call(&mut dev, c, DRIVER_CMD_WAIT_EVENT, &mut w),
        Ok(Reply::Wait(_))
    ));
    assert_eq!(dev.info().memory_used, 1 << 20);
    dev.close(c);
    assert_eq!(dev.info().memory_used, 0);
    assert_eq!(dev.platform().released_streams, 1);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Gone);
    assert_eq!(dev.client_count(), 0);
}

#[test]
fn tables_are_bounded() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let mut n = 0;
    loop {
        let mut a = CreateContextArgs::default();
        match call(&mut dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut a) {
            Ok(_) => n += 1,
            Err(e) => {
                assert_eq!(e, Errno::ENOSPC);
                break;
            }
        }
    }
    assert_eq!(n, davinci_driver_core::MAX_CONTEXTS);
}

#[test]
fn wait_on_a_destroyed_stream_is_cancelled() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let s = stream(&mut dev, c, k, 4, 4);
    let mut w = WaitEventArgs {
        kind: 1,
        handle: s.handle,
        value: 1,
        timeout_ns: 1_000_000,
        ..Default::default()
    };
    let spec = match call(&mut dev, c, DRIVER_CMD_WAIT_EVENT, &mut w) {
        Ok(Reply::Wait(spec)) => spec,
        other => panic!("expected a blocking wait, got {other:?}"),
    };
    let mut raw = vec![0u8; WaitEventArgs::SIZE];
    w.encode(&mut raw);
    assert_eq!(dev.finish_wait(c, &spec, &mut raw, false), Ok(None));
    let mut h = HandleArgs {
        handle: s.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
    assert_eq!(
        dev.finish_wait(c, &spec, &mut raw, false)
            .unwrap_err()
            .errno,
        Errno::ECANCELED
    );
}

/// ABI 1.1: GET_INFO tells a client its own client id (the one LIST_CLIENTS reports, so a
/// client in a container can find itself) and which opcodes the device runs; an opcode
/// outside the mask fails with EBADMSG, one inside does not fail for its opcode.
#[test]
fn get_info_names_the_caller_and_the_opcodes() {
    let mut dev = device();
    let root = dev.open(params(1, 0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    let a = dev.open(params(10, 1000, Role::Client)).unwrap();
    let b = dev.open(params(20, 1001, Role::Client)).unwrap();
    let info = |dev: &mut DeviceCore<HeapPlatform>, who: u32| {
        let mut i = DeviceInfo::default();
        call(dev, who, DRIVER_CMD_GET_INFO, &mut i).unwrap();
        i
    };
    let (ia, ib, ic) = (info(&mut dev, a), info(&mut dev, b), info(&mut dev, root));
    assert!(ia
        .features
        .contains(Features::CALLER_ID | Features::OPCODE_MASK));
    assert_eq!(
        (ia.abi_major, ia.abi_minor),
        (ABI_VERSION_MAJOR, ABI_VERSION_MINOR)
    );
    assert_eq!(ic.caller_id, 0, "a control open is not a client");
    let ids: Vec<(u32, u32)> = dev.clients().map(|u| (u.pid, u.client_id)).collect();
    assert!(
        ids.contains(&(10, ia.caller_id)) && ids.contains(&(20, ib.caller_id)),
        "{ids:?}"
    );
    assert_ne!(ia.caller_id, ib.caller_id);
    // WAIT_EVENT on a stream: the completion count is 32 bits; a value with high bits is
    // EINVAL, not silently truncated.
    let k0 = ctx(&mut dev, a);
    let s0 = stream(&mut dev, a, k0, 8, 8);
    let mut w = WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: s0.handle,
        value: 1 << 32,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_WAIT_EVENT, &mut w),
        Err(Errno::EINVAL)
    );
    w.value = 0;
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_WAIT_EVENT, &mut w),
        Ok(Reply::Done)
    );
    // The mask: NOP..EVENT_WAIT run, KERNEL_LAUNCH does not.
    assert_eq!(ia.opcodes, 0b11_1111);
    let k = ctx(&mut dev, a);
    for op in 0..8u8 {
        let mut s = stream(&mut dev, a, k, 8, 8);
        let mut d = TaskDesc::nop(u64::from(op));
        d.opcode = op;
        s.prod.push(&d).unwrap();
        s.prod.publish();
        dev.run_stream(s.handle, 8);
        let rec = drain(&mut s)[0];
        let bad_opcode = rec.status == -Errno::EBADMSG.code();
        // Operands are zero, so only the opcode itself can make a descriptor EBADMSG... except
        // EVENT_* with handle 0 (ENOENT) and zero-length FILL/COPY/ADD (fine).
        assert_eq!(
            bad_opcode,
            ia.opcodes & (1 << op) == 0,
            "opcode {op}: status {}",
            rec.status
        );
    }
}

fn last_error(dev: &mut DeviceCore<HeapPlatform>, c: u32) -> LastError {
    let mut a = LastError::default();
    call(dev, c, DRIVER_CMD_GET_LAST_ERROR, &mut a).unwrap();
    a
}

#[test]
fn get_last_error_says_why_the_last_command_of_this_open_failed() {
    let mut dev = device();
    let a = dev.open(params(100, 1000, Role::Client)).unwrap();
    let ctl = dev.open(params(300, 0, Role::Control)).unwrap();
    // Nothing failed yet.
    let e = last_error(&mut dev, a);
    assert_eq!(
        (e.request, e.error, e.count, e.message_str()),
        (0, 0, 0, "")
    );
    assert!(dev.info_for(a).features.contains(Features::LAST_ERROR));

    let ctx = ctx(&mut dev, a);
    let mut bad = CreateStreamArgs {
        ctx,
        cmd_entries: 16,
        event_entries: 8,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_CREATE_STREAM, &mut bad),
        Err(Errno::EINVAL)
    );
    let e = last_error(&mut dev, a);
    assert_eq!(
        (e.request, e.error, e.count),
        (DRIVER_CMD_CREATE_STREAM, Errno::EINVAL.code() as u32, 1)
    );
    assert!(
        e.message_str().contains("event_entries"),
        "{:?}",
        e.message_str()
    );
    // Reading it changes nothing; a success does not clear it; the next failure replaces it.
    assert_eq!(last_error(&mut dev, a), e);
    let mut h = HandleArgs {
        handle: 0xdead,
        pad: 0,
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_DESTROY_CONTEXT, &mut h),
        Err(Errno::ENOENT)
    );
    let e2 = last_error(&mut dev, a);
    assert_eq!(
        (e2.request, e2.error, e2.count),
        (DRIVER_CMD_DESTROY_CONTEXT, Errno::ENOENT.code() as u32, 2)
    );
    assert!(
        e2.message_str().contains("context"),
        "{:?}",
        e2.message_str()
    );
    // Per open: the control open saw nothing, and its own failure is its own.
    assert_eq!(last_error(&mut dev, ctl).count, 0);
    let mut c = CreateContextArgs::default();
    assert_eq!(
        call(&mut dev, ctl, DRIVER_CMD_CREATE_CONTEXT, &mut c),
        Err(Errno::EPERM)
    );
    assert_eq!(last_error(&mut dev, ctl).request, DRIVER_CMD_CREATE_CONTEXT);
    assert_eq!(last_error(&mut dev, a).count, 2);
}

#[test]
fn last_error_messages_are_cut_at_a_character_boundary() {
    let long = "é".repeat(100); // 200 bytes of two-byte characters
    let f = LastError::message_field(&long);
    assert_eq!(f[LAST_ERROR_MESSAGE_LEN - 1], 0, "the NUL always fits");
    let e = LastError {
        message: f,
        ..Default::default()
    };
    assert_eq!(e.message_str(), "é".repeat(55));
}

fn event(dev: &mut DeviceCore<HeapPlatform>, c: u32, ctx: u32) -> u32 {
    let mut a = CreateEventArgs {
        ctx,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_CREATE_EVENT, &mut a).unwrap();
    a.handle
}

/// WAIT_EVENT(EVENT) for `value` with timeout 0: the errno, and `status`.
fn wait_event_now(
    dev: &mut DeviceCore<HeapPlatform>,
    c: u32,
    ev: u32,
    value: u64,
) -> (Result<Reply, Errno>, u32) {
    let mut w = WaitEventArgs {
        kind: WaitKind::Event as u32,
        handle: ev,
        value,
        ..Default::default()
    };
    let r = call(dev, c, DRIVER_CMD_WAIT_EVENT, &mut w);
    (r, w.status)
}

/// abi.md 8: a record a stopped stream will never run makes its value unreachable: waits
/// for it fail with EIO (status: the stream's errno), whether the stream stopped on a bad
/// descriptor, on corrupt indices (every slot is looked at) or was destroyed; a value another
/// record reaches, or one above every queued record, is unaffected.
#[test]
fn records_a_stopped_stream_will_never_run_fail_their_waiters() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let (e1, e2) = (event(&mut dev, c, k), event(&mut dev, c, k));

    // A bad descriptor, then records of e1 (value 3) and e2 (value 1).
    let mut s = stream(&mut dev, c, k, 8, 8);
    s.prod
        .push(&TaskDesc::fill(1, DevAddr(DVA_BASE + (1 << 30)), 64, 0))
        .unwrap();
    s.prod.push(&TaskDesc::event_record(2, e1, 3)).unwrap();
    s.prod.push(&TaskDesc::event_record(3, e2, 1)).unwrap();
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(Errno::EACCES));
    for (ev, v) in [(e1, 1), (e1, 3), (e2, 1)] {
        assert_eq!(
            wait_event_now(&mut dev, c, ev, v),
            (Err(Errno::EIO), Errno::EACCES.code() as u32),
            "event {ev:#x} value {v}"
        );
    }
    // Above what was queued: just not reached yet.
    assert_eq!(wait_event_now(&mut dev, c, e1, 4).0, Err(Errno::EAGAIN));

    // Another stream records e1 = 3: reached, so the poison no longer matters.
    let mut t = stream(&mut dev, c, k, 8, 8);
    t.prod.push(&TaskDesc::event_record(4, e1, 3)).unwrap();
    t.prod.publish();
    assert_eq!(dev.run_stream(t.handle, 64), Run::Progress(1));
    assert_eq!(wait_event_now(&mut dev, c, e1, 3).0, Ok(Reply::Done));

    // Corrupt indices: the queued slots are still looked at.
    let e3 = event(&mut dev, c, k);
    let mut u = stream(&mut dev, c, k, 8, 8);
    u.prod.push(&TaskDesc::event_record(5, e3, 1)).unwrap();
    // SAFETY: `cmd_ptr` points at the live command ring; offset 0 is the u32 tail.
    unsafe { u.cmd_ptr.cast::<u32>().write_volatile(1000) };
    assert_eq!(dev.run_stream(u.handle, 64), Run::Failed(Errno::EPROTO));
    assert_eq!(
        wait_event_now(&mut dev, c, e3, 1),
        (Err(Errno::EIO), Errno::EPROTO.code() as u32)
    );

    // A destroyed stream: its queued record of e4 is cancelled.
    let e4 = event(&mut dev, c, k);
    let mut v = stream(&mut dev, c, k, 8, 8);
    v.prod.push(&TaskDesc::event_wait(6, e2, 9)).unwrap();
    v.prod.push(&TaskDesc::event_record(7, e4, 1)).unwrap();
    v.prod.publish();
    assert!(matches!(dev.run_stream(v.handle, 64), Run::Blocked { .. }));
    let mut h = HandleArgs {
        handle: v.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
    assert_eq!(
        wait_event_now(&mut dev, c, e4, 1),
        (Err(Errno::EIO), Errno::ECANCELED.code() as u32)
    );

    // Another stream's EVENT_WAIT for an unreachable value fails that stream with EIO.
    let mut w = stream(&mut dev, c, k, 8, 8);
    w.prod.push(&TaskDesc::event_wait(8, e2, 1)).unwrap();
    w.prod.push(&TaskDesc::nop(9)).unwrap();
    w.prod.publish();
    assert_eq!(dev.run_stream(w.handle, 64), Run::Failed(Errno::EIO));
    let recs = drain(&mut w);
    assert_eq!(recs.len(), 1, "the NOP after it does not run: {recs:?}");
    assert_eq!(recs[0].status, -Errno::EIO.code());

    // ... also when it was already blocked before the recording stream stopped.
    let e5 = event(&mut dev, c, k);
    let mut blocked = stream(&mut dev, c, k, 8, 8);
    blocked.prod.push(&TaskDesc::event_wait(10, e5, 1)).unwrap();
    blocked.prod.publish();
    assert!(matches!(
        dev.run_stream(blocked.handle, 64),
        Run::Blocked { .. }
    ));
    let mut x = stream(&mut dev, c, k, 8, 8);
    x.prod
        .push(&TaskDesc {
            flags: 1,
            ..TaskDesc::nop(0x77)
        })
        .unwrap();
    x.prod.push(&TaskDesc::event_record(11, e5, 1)).unwrap();
    x.prod.publish();
    assert_eq!(dev.run_stream(x.handle, 64), Run::Failed(Errno::EBADMSG));
    assert_eq!(dev.run_stream(blocked.handle, 64), Run::Failed(Errno::EIO));
    let recs = drain(&mut blocked);
    assert_eq!(recs.len(), 1);
    assert_eq!(
        (recs[0].opcode, recs[0].status),
        (Opcode::EventWait as u8, -Errno::EIO.code())
    );
}

/// The data path takes `&DeviceCore`: streams run on several threads at once, excluded only by
/// the control path (`&mut DeviceCore`). Two streams of one context hand an event along
/// (EVENT_RECORD on one thread, EVENT_WAIT on another) while a third stream fills device
/// memory on a third thread. Every completion arrives once, in order, and the per-stream
/// task counters add up in the client's usage, also after the streams are destroyed.
#[test]
fn streams_run_concurrently_through_a_shared_device() {
    const ROUNDS: u64 = 60; // 2 descriptors per round on the waiting stream: fits its ring.
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let buf = alloc(&mut dev, c, 4096);
    let mut rec = stream(&mut dev, c, k, 256, 256);
    let mut wait = stream(&mut dev, c, k, 256, 256);
    let mut fill = stream(&mut dev, c, k, 256, 256);
    let ev = event(&mut dev, c, k);
    for i in 1..=ROUNDS {
        rec.prod.push(&TaskDesc::event_record(i, ev, i)).unwrap();
        wait.prod
            .push(&TaskDesc::event_wait(1000 + i, ev, i))
            .unwrap();
        wait.prod.push(&TaskDesc::nop(2000 + i)).unwrap();
        fill.prod
            .push(&TaskDesc::fill(
                3000 + i,
                DevAddr(buf.dev_addr),
                4096,
                i as u32,
            ))
            .unwrap();
    }
    rec.prod.publish();
    wait.prod.publish();
    fill.prod.publish();

    {
        let shared: &DeviceCore<HeapPlatform> = &dev;
        let run = |h: u32, want: u32| {
            let mut done = 0;
            let mut looks = 0u64;
            while done < want {
                match shared.run_stream(h, 7) {
                    Run::Progress(n) => done += n,
                    Run::Blocked { .. } | Run::Idle => {
                        looks += 1;
                        assert!(looks < 10_000_000, "stream {h:#x} stuck at {done}/{want}");
                        std::thread::yield_now();
                    }
                    other => panic!("stream {h:#x}: {other:?}"),
                }
            }
        };
        std::thread::scope(|t| {
            t.spawn(|| run(wait.handle, 2 * ROUNDS as u32));
            t.spawn(|| run(rec.handle, ROUNDS as u32));
            t.spawn(|| run(fill.handle, ROUNDS as u32));
        });
    }

    let r = drain(&mut rec);
    assert_eq!(
        r.iter().map(|r| r.user_data).collect::<Vec<_>>(),
        (1..=ROUNDS).collect::<Vec<_>>()
    );
    assert!(r.iter().all(|r| r.status == 0));
    let w = drain(&mut wait);
    let want: Vec<u64> = (1..=ROUNDS).flat_map(|i| [1000 + i, 2000 + i]).collect();
    assert_eq!(w.iter().map(|r| r.user_data).collect::<Vec<_>>(), want);
    assert!(w.iter().all(|r| r.status == 0), "{w:?}");
    // Each wait completed with a value at least the one it waited for.
    assert!(w.iter().step_by(2).zip(1..).all(|(r, i)| r.result >= i));
    let f = drain(&mut fill);
    assert_eq!(f.len(), ROUNDS as usize);
    assert!(f.iter().all(|r| r.status == 0));
    let words = mem(&mut dev, c, &buf, 4096);
    assert!(
        words
            .chunks_exact(4)
            .all(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) == ROUNDS as u32),
        "the last fill wins"
    );

    let usage = |dev: &DeviceCore<HeapPlatform>| {
        let u = dev.client_usage(c).unwrap();
        (u.tasks_submitted, u.tasks_completed)
    };
    assert_eq!(usage(&dev), (4 * ROUNDS, 4 * ROUNDS));
    let handles = [rec.handle, wait.handle, fill.handle];
    for h in handles {
        dev.destroy_stream(c, h).unwrap();
        assert_eq!(
            usage(&dev),
            (4 * ROUNDS, 4 * ROUNDS),
            "a destroyed stream's tasks still count"
        );
    }
}

fn nops(h: &mut Host, from: u64, n: u64) {
    for i in from..from + n {
        h.prod.push(&TaskDesc::nop(i)).unwrap();
    }
    h.prod.publish();
}

fn user_data(v: &[EventRecord]) -> Vec<u64> {
    v.iter().map(|r| r.user_data).collect()
}

/// WAIT_EVENT on `stream` for `value` that has already timed out: the errno and `status`.
fn wait_stream_timed_out(
    dev: &mut DeviceCore<HeapPlatform>,
    c: u32,
    stream: u32,
    value: u64,
) -> (Result<Option<()>, Errno>, u32) {
    let mut w = WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: stream,
        value,
        timeout_ns: 1_000_000,
        ..Default::default()
    };
    let spec = match call(dev, c, DRIVER_CMD_WAIT_EVENT, &mut w) {
        Ok(Reply::Wait(spec)) => spec,
        Err(e) => return (Err(e), w.status),
        other => panic!("expected a blocking wait, got {other:?}"),
    };
    let mut raw = vec![0u8; WaitEventArgs::SIZE];
    w.encode(&mut raw);
    let r = dev.finish_wait(c, &spec, &mut raw, true);
    (r.map_err(|e| e.errno), WaitEventArgs::decode(&raw).status)
}

/// Injected faults (abi.md 5.6): an error completion on the Nth task stops the stream like
/// any error (records before it arrive, nothing after it runs); the stream is recovered by
/// destroying and re-creating it; a per-stream fault leaves the other streams alone.
#[test]
fn an_injected_error_completes_the_nth_task_with_its_errno_and_stops_the_stream() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut s = stream(&mut dev, c, k, 16, 16);
    let mut other = stream(&mut dev, c, k, 16, 16);
    nops(&mut s, 1, 2);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(2));
    // Armed now: counted from here, so the third task from now fails.
    dev.inject(
        Some(s.handle),
        Some(Inject::ErrorAt {
            nth: 3,
            errno: Errno::EIO,
        }),
    )
    .unwrap();
    nops(&mut s, 3, 5);
    nops(&mut other, 100, 5);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(Errno::EIO));
    let r = drain(&mut s);
    assert_eq!(user_data(&r), [1, 2, 3, 4, 5]);
    assert_eq!(
        r.iter().map(|r| r.status).collect::<Vec<_>>(),
        [0, 0, 0, 0, -Errno::EIO.code()]
    );
    assert_eq!(r[4].result, 0, "a device fault names no operand");
    assert_eq!(
        dev.stream_state(c, s.handle),
        Ok(StreamState::Error(Errno::EIO))
    );
    let (r, status) = wait_stream_timed_out(&mut dev, c, s.handle, 6);
    assert_eq!((r, status), (Err(Errno::EIO), Errno::EIO.code() as u32));
    // The other stream is not armed.
    assert_eq!(dev.run_stream(other.handle, 64), Run::Progress(5));
    assert!(drain(&mut other).iter().all(|r| r.status == 0));

    // Recovery (abi.md 5.5): destroy, create, re-submit from the failed task.
    let mut h = HandleArgs {
        handle: s.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
    let mut again = stream(&mut dev, c, k, 16, 16);
    nops(&mut again, 5, 3);
    assert_eq!(dev.run_stream(again.handle, 64), Run::Progress(3));
    assert_eq!(user_data(&drain(&mut again)), [5, 6, 7]);
}

/// A hung task is taken (the head moves past it) but never completes, and nothing after it
/// is taken; a stream told to stop consuming leaves its ring full. Waits on either time out
/// (ETIMEDOUT) rather than fail; a device-wide fault arms every stream, also new ones.
#[test]
fn injected_hangs_and_stops_halt_the_stream_and_waits_time_out() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut hang = stream(&mut dev, c, k, 16, 16);
    dev.inject(Some(hang.handle), Some(Inject::HangAt { nth: 2 }))
        .unwrap();
    nops(&mut hang, 1, 4);
    assert_eq!(dev.run_stream(hang.handle, 64), Run::Progress(1));
    assert_eq!(dev.run_stream(hang.handle, 64), Run::Halted);
    assert_eq!(user_data(&drain(&mut hang)), [1]);
    let head = |h: &Host| {
        let off = davinci_driver_core::test_util::hdr::HEAD;
        // SAFETY: `cmd_ptr` points at the live command ring (it outlives `Host`, see
        // `stream`); `off` is the 4-aligned offset of the u32 head in its header.
        unsafe { core::ptr::read_volatile(h.cmd_ptr.add(off).cast::<u32>()) }
    };
    assert_eq!(head(&hang), 2, "the hung task was taken");
    assert_eq!(
        wait_stream_timed_out(&mut dev, c, hang.handle, 2),
        (Err(Errno::ETIMEDOUT), 0)
    );
    assert_eq!(dev.stream_state(c, hang.handle), Ok(StreamState::Running));

    // Device-wide: existing and new streams stop before their 3rd task.
    dev.inject(None, Some(Inject::StopAt { nth: 3 })).unwrap();
    let mut stop = stream(&mut dev, c, k, 4, 4);
    nops(&mut stop, 1, 4);
    assert_eq!(dev.run_stream(stop.handle, 64), Run::Progress(2));
    assert_eq!(dev.run_stream(stop.handle, 64), Run::Halted);
    assert_eq!(user_data(&drain(&mut stop)), [1, 2]);
    assert_eq!(head(&stop), 2, "nothing taken from the third on");
    assert!(stop.prod.push(&TaskDesc::nop(9)).is_ok());
    assert!(stop.prod.push(&TaskDesc::nop(10)).is_ok());
    assert!(
        stop.prod.push(&TaskDesc::nop(11)).is_err(),
        "the ring fills up"
    );
    assert_eq!(
        wait_stream_timed_out(&mut dev, c, stop.handle, 3),
        (Err(Errno::ETIMEDOUT), 0)
    );
    // Disarmed: a new stream runs freely.
    dev.inject(None, None).unwrap();
    let mut free = stream(&mut dev, c, k, 16, 16);
    nops(&mut free, 1, 8);
    assert_eq!(dev.run_stream(free.handle, 64), Run::Progress(8));
    assert_eq!(
        dev.inject(Some(0xdead), Some(Inject::HangAt { nth: 1 }))
            .unwrap_err()
            .errno,
        Errno::ENOENT
    );
}

/// A device reset stops every running stream with ECANCELED and no record; the records
/// already published stay; queued EVENT_RECORDs become unreachable (their waiters fail
/// rather than hang); clients, contexts and memory stay, and new streams run.
#[test]
fn a_device_reset_stops_every_stream_and_the_device_serves_new_ones() {
    let mut dev = device();
    let admin = dev.open(params(9, 0, Role::Control)).unwrap();
    dev.set_share_mode(admin, ShareMode::Shared).unwrap();
    let a = dev.open(params(1, 1000, Role::Client)).unwrap();
    let b = dev.open(params(2, 1001, Role::Client)).unwrap();
    let (ka, kb) = (ctx(&mut dev, a), ctx(&mut dev, b));
    let mem_a = alloc(&mut dev, a, 4096);
    let mut sa = stream(&mut dev, a, ka, 16, 16);
    let mut sb = stream(&mut dev, b, kb, 16, 16);
    let ev = event(&mut dev, a, ka);
    sa.prod
        .push(&TaskDesc::fill(
            1,
            DevAddr(mem_a.dev_addr),
            4096,
            0xabab_abab,
        ))
        .unwrap();
    sa.prod.publish();
    nops(&mut sb, 1, 2);
    assert_eq!(dev.run_stream(sa.handle, 64), Run::Progress(1));
    assert_eq!(dev.run_stream(sb.handle, 64), Run::Progress(2));
    // Queued, never run: a NOP and a record of the event.
    nops(&mut sa, 2, 1);
    sa.prod.push(&TaskDesc::event_record(3, ev, 7)).unwrap();
    sa.prod.publish();

    assert_eq!(dev.reset(), 2);
    for (c, h) in [(a, sa.handle), (b, sb.handle)] {
        assert_eq!(
            dev.stream_state(c, h),
            Ok(StreamState::Error(Errno::ECANCELED))
        );
        assert_eq!(dev.run_stream(h, 64), Run::Failed(Errno::ECANCELED));
    }
    assert_eq!(user_data(&drain(&mut sa)), [1], "published records stay");
    assert_eq!(user_data(&drain(&mut sb)), [1, 2]);
    assert_eq!(
        wait_event_now(&mut dev, a, ev, 7),
        (Err(Errno::EIO), Errno::ECANCELED.code() as u32)
    );
    assert_eq!(
        wait_stream_timed_out(&mut dev, b, sb.handle, 3),
        (Err(Errno::EIO), Errno::ECANCELED.code() as u32)
    );
    // Memory and contexts stay; a new stream in the same context runs and sees the data.
    assert!(mem(&mut dev, a, &mem_a, 4096).iter().all(|&x| x == 0xab));
    let mut again = stream(&mut dev, a, ka, 16, 16);
    nops(&mut again, 10, 2);
    assert_eq!(dev.run_stream(again.handle, 64), Run::Progress(2));
    assert_eq!(user_data(&drain(&mut again)), [10, 11]);
    assert_eq!(dev.reset(), 1, "only running streams count");
}

fn counters(dev: &mut DeviceCore<HeapPlatform>, c: u32) -> DeviceCounters {
    let mut k = DeviceCounters::default();
    call(dev, c, DRIVER_CMD_GET_COUNTERS, &mut k).unwrap();
    assert_eq!(k, dev.counters(), "the ioctl reports what counters() says");
    k
}

/// GET_COUNTERS (ABI 1.3): device-wide totals that only grow, across streams and clients
/// that are gone (a destroyed stream's tasks, a closed client's), stream errors from a failed
/// descriptor and from a reset, doorbells (`stream_woke` told so by the host, or NOTIFY),
/// client opens without control opens, and the live object counts; any open may ask.
#[test]
fn get_counters_totals_survive_the_streams_and_clients_they_came_from() {
    let mut dev = device();
    assert!(dev.info().features.contains(Features::COUNTERS));
    let ctl = dev.open(params(9, 0, Role::Control)).unwrap();
    let zero = counters(&mut dev, ctl);
    assert_eq!(
        zero,
        DeviceCounters::default(),
        "a new device counts nothing"
    );

    let root = dev.open(params(10, 0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    dev.close(root);
    let a = dev.open(params(1, 1000, Role::Client)).unwrap();
    let b = dev.open(params(2, 1000, Role::Client)).unwrap();
    let (ka, kb) = (ctx(&mut dev, a), ctx(&mut dev, b));
    let mut sa = stream(&mut dev, a, ka, 16, 16);
    let mut sb = stream(&mut dev, b, kb, 16, 16);
    let _mem = alloc(&mut dev, b, 4096);
    nops(&mut sa, 1, 5);
    nops(&mut sb, 1, 3);
    assert_eq!(dev.run_stream(sa.handle, 64), Run::Progress(5));
    assert_eq!(dev.run_stream(sb.handle, 64), Run::Progress(3));
    drain(&mut sa);
    drain(&mut sb);
    let k = counters(&mut dev, a);
    assert_eq!((k.tasks_submitted, k.tasks_completed), (8, 8));
    assert_eq!(
        (k.clients_opened, k.contexts, k.streams, k.allocations),
        (2, 2, 2, 1)
    );
    assert_eq!((k.stream_errors, k.doorbells), (0, 0));

    // A doorbell is counted when the host says one woke the worker, not at every disarm...
    assert!(dev.stream_prepare_sleep(sa.handle));
    dev.stream_woke(sa.handle, false);
    assert_eq!(counters(&mut dev, ctl).doorbells, 0);
    assert!(dev.stream_prepare_sleep(sa.handle));
    dev.stream_woke(sa.handle, true);
    assert_eq!(counters(&mut dev, ctl).doorbells, 1);
    // ... and NOTIFY is not counted where the doorbell is a word (this device): the host
    // counts the word's changes, NOTIFY's included. Where it is not, NOTIFY is the doorbell.
    assert!(dev.info().features.contains(Features::DOORBELL_FUTEX));
    let mut h = HandleArgs {
        handle: sa.handle,
        pad: 0,
    };
    call(&mut dev, a, DRIVER_CMD_NOTIFY, &mut h).unwrap();
    assert_eq!(counters(&mut dev, ctl).doorbells, 1);
    let mut plain = DeviceCore::new(
        Config {
            platform_features: Features::empty(),
            ..*dev.config()
        },
        HeapPlatform::default(),
    );
    let p = plain.open(params(5, 1000, Role::Client)).unwrap();
    let kp = ctx(&mut plain, p);
    let sp = stream(&mut plain, p, kp, 16, 16);
    let mut h = HandleArgs {
        handle: sp.handle,
        pad: 0,
    };
    call(&mut plain, p, DRIVER_CMD_NOTIFY, &mut h).unwrap();
    call(&mut plain, p, DRIVER_CMD_NOTIFY, &mut h).unwrap();
    assert_eq!(plain.counters().doorbells, 2);

    // A descriptor that fails (unknown opcode) puts the stream in the error state: one error.
    let mut bad = TaskDesc::nop(9);
    bad.opcode = 0xee;
    sa.prod.push(&bad).unwrap();
    sa.prod.publish();
    assert!(matches!(dev.run_stream(sa.handle, 64), Run::Failed(_)));
    let k = counters(&mut dev, ctl);
    assert_eq!(
        (k.tasks_submitted, k.tasks_completed, k.stream_errors),
        (9, 9, 1)
    );

    // Client a goes (its stream with it): its tasks, error and wake-up stay counted.
    dev.close(a);
    let k = counters(&mut dev, ctl);
    assert_eq!(
        (
            k.tasks_submitted,
            k.tasks_completed,
            k.stream_errors,
            k.doorbells
        ),
        (9, 9, 1, 1)
    );
    assert_eq!((k.clients_opened, k.contexts, k.streams), (2, 1, 1));

    // A reset stops b's running stream: a second error. A new client is a third open.
    assert_eq!(dev.reset(), 1);
    let c = dev.open(params(3, 1000, Role::Client)).unwrap();
    let k = counters(&mut dev, c);
    assert_eq!((k.stream_errors, k.clients_opened), (2, 3));
    dev.close(b);
    dev.close(c);
    let k = counters(&mut dev, ctl);
    assert_eq!((k.tasks_submitted, k.tasks_completed), (9, 9));
    assert_eq!(
        (k.contexts, k.streams, k.events, k.allocations),
        (0, 0, 0, 0)
    );
}
