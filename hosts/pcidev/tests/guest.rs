//! The device end to end without QEMU: an in-process guest opens a client, creates a
//! context, memory and a stream through the admin queue, maps the stream's rings at the BAR2
//! offsets MMAP_TARGET returns, submits descriptors, rings the data doorbell and sees the
//! completions and an interrupt on its own vector 1; and hostile admin entries.

mod support;

use davinci_hwif::layout::MIN_REGION;
use davinci_hwif::{AdminOp, MapKind, ReplyKind, ADMIN_ENTRY_SIZE, VECTOR_DATA};
use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateStreamArgs, DevAddr, DeviceInfo, Errno, EventRecord,
    HandleArgs, TaskDesc, DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_CONTEXT,
    DRIVER_CMD_CREATE_STREAM, DRIVER_CMD_DESTROY_STREAM, DRIVER_CMD_FREE_MEMORY,
    DRIVER_CMD_GET_INFO,
};
use support::{consumer, producer, Guest, Running, LIMIT};

const NOTTY: u32 = Errno::ENOTTY.code() as u32;
const INVAL: u32 = Errno::EINVAL.code() as u32;

#[test]
fn a_guest_runs_tasks_through_the_admin_queue_and_the_stream_rings() {
    let dev = Running::start(1 << 20);
    let mut g = Guest::connect(&dev);
    let (client, ctx) = g.client_with_context();
    let mut mem = AllocMemoryArgs {
        size: 8192,
        ..Default::default()
    };
    g.ioctl(client, DRIVER_CMD_ALLOC_MEMORY, &mut mem).unwrap();
    let (s, cmd_at, evt_at) = g.stream(client, ctx, 64);
    let mem_at = g.map(client, mem.mmap_offset, mem.alloc_size).unwrap();
    assert_eq!(
        (cmd_at.kind, evt_at.kind, mem_at.kind),
        (MapKind::CmdRing, MapKind::EventRing, MapKind::Memory)
    );
    let heap = g.header.layout.heap_offset;
    for m in [&cmd_at, &evt_at, &mem_at] {
        assert!(m.offset >= heap && m.offset + m.len <= g.peer.shm_size());
    }
    // Device memory as the guest maps it reads zero.
    let mut before = vec![1u8; 8192];
    g.peer.shared().read(mem_at.offset, &mut before).unwrap();
    assert!(before.iter().all(|&b| b == 0));

    let mut cmd = producer::<TaskDesc>(&g.peer, &cmd_at, s.cmd_entries);
    let mut evt = consumer::<EventRecord>(&g.peer, &evt_at, s.event_entries);
    cmd.push(&TaskDesc::nop(11)).unwrap();
    cmd.push(&TaskDesc::fill(
        12,
        DevAddr(mem.dev_addr + 4096),
        4096,
        0xabcd_ef01,
    ))
    .unwrap();
    cmd.push(&TaskDesc::nop(13)).unwrap();
    cmd.publish();
    g.ring_data();

    let records = g.records(&mut evt, 3);
    let done: Vec<(u64, i32)> = records.iter().map(|r| (r.user_data, r.status)).collect();
    assert_eq!(done, [(11, 0), (12, 0), (13, 0)]);
    // The FILL landed in BAR2 where MMAP_TARGET said the allocation lies, and only there.
    let mut after = vec![0u8; 8192];
    g.peer.shared().read(mem_at.offset, &mut after).unwrap();
    assert!(after[..4096].iter().all(|&b| b == 0));
    assert!(after[4096..]
        .chunks(4)
        .all(|w| w == 0xabcd_ef01u32.to_ne_bytes()));

    // The stream sleeps again with NEED_WAKEUP armed, and a doorbell wakes it.
    let mut n = 0;
    while n < 100 {
        cmd.push(&TaskDesc::nop(100 + n)).unwrap();
        if cmd.publish() {
            g.ring_data();
        }
        let mut got = 0;
        while got == 0 {
            got = evt.consume(64, |_| {});
            if got == 0 {
                g.peer.wait_interrupt(VECTOR_DATA, LIMIT).unwrap();
            }
        }
        n += got as u64;
    }

    // Teardown through the admin queue; the heap's pages come back.
    let mut h = HandleArgs {
        handle: s.handle,
        pad: 0,
    };
    // (The ring views are not used past here: their pages are zeroed and freed next.)
    g.ioctl(client, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
    h.handle = mem.handle;
    g.ioctl(client, DRIVER_CMD_FREE_MEMORY, &mut h).unwrap();
    let c = g.call(client, AdminOp::Close);
    assert_eq!(c.reply, ReplyKind::Done);
    drop(g);
    let stats = dev.stop().stats();
    assert!(stats.data_interrupts >= 1 && stats.admin_interrupts >= 1);
    assert_eq!(stats.admin_malformed, 0);
}

#[test]
fn garbage_admin_entries_get_an_error_and_the_device_keeps_serving() {
    let dev = Running::start(MIN_REGION);
    let mut g = Guest::connect(&dev);
    // Random-looking bytes with a recognisable tag.
    let mut junk = [0u8; ADMIN_ENTRY_SIZE];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in junk.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    junk[..8].copy_from_slice(&0xfeed_u64.to_le_bytes());
    g.post_raw(&junk);
    let c = g.completion();
    assert_eq!(
        (c.tag, c.reply, c.errno),
        (0xfeed, ReplyKind::Failed, INVAL)
    );
    assert!(c.message().contains("admin"), "{}", c.message());
    // Every kind of bad field, one after another.
    for (at, v) in [(8usize, 9u32), (20, 5000), (24, 1)] {
        let mut b = [0u8; ADMIN_ENTRY_SIZE];
        b[..8].copy_from_slice(&(at as u64).to_le_bytes());
        b[8..12].copy_from_slice(&2u32.to_le_bytes()); // CLOSE
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        g.post_raw(&b);
        let c = g.completion();
        assert_eq!((c.tag, c.errno), (at as u64, INVAL), "{}", c.message());
    }
    // Calls for clients that do not exist, unknown ioctls, foreign cookies: errors.
    let mut info = DeviceInfo::default();
    assert_eq!(
        g.ioctl(77, DRIVER_CMD_GET_INFO, &mut info).unwrap_err().0,
        Errno::ENODEV.code() as u32
    );
    let client = g.open();
    let mut h = HandleArgs::default();
    assert_eq!(g.ioctl(client, 0xdead_beef, &mut h).unwrap_err().0, NOTTY);
    assert!(g.map(client, 0x1234_5000, 4096).is_err());
    // And the device still serves.
    g.ioctl(client, DRIVER_CMD_GET_INFO, &mut info).unwrap();
    assert!(info.memory_size > 0);
    // More memory than BAR2's heap: ENOMEM, not growth.
    let mut mem = AllocMemoryArgs {
        size: 1 << 20,
        ..Default::default()
    };
    let e = g
        .ioctl(client, DRIVER_CMD_ALLOC_MEMORY, &mut mem)
        .unwrap_err();
    assert_eq!(e.0, Errno::ENOMEM.code() as u32, "{}", e.1);
    // The heap (8 pages here) is the rings' (4) and device memory's (4, all GET_INFO says):
    // with every page of memory taken, a stream's rings (3 pages) still fit; rings larger
    // than their area do not, and the platform says ENOMEM.
    mem.size = info.memory_size;
    assert_eq!(mem.size, 4 * 4096);
    g.ioctl(client, DRIVER_CMD_ALLOC_MEMORY, &mut mem).unwrap();
    let mut ctx = CreateContextArgs::default();
    g.ioctl(client, DRIVER_CMD_CREATE_CONTEXT, &mut ctx)
        .unwrap();
    let mut s = CreateStreamArgs {
        ctx: ctx.handle,
        cmd_entries: 8,
        event_entries: 8,
        ..Default::default()
    };
    g.ioctl(client, DRIVER_CMD_CREATE_STREAM, &mut s).unwrap();
    let mut big = CreateStreamArgs {
        ctx: ctx.handle,
        cmd_entries: 256,
        event_entries: 256,
        ..Default::default()
    };
    let e = g
        .ioctl(client, DRIVER_CMD_CREATE_STREAM, &mut big)
        .unwrap_err();
    assert_eq!(e.0, Errno::ENOMEM.code() as u32, "{}", e.1);
    drop(g);
    assert_eq!(dev.stop().stats().admin_malformed, 4);
}

#[test]
fn a_guest_that_goes_leaves_a_fresh_device_for_the_next() {
    let dev = Running::start(MIN_REGION);
    let mut g = Guest::connect(&dev);
    let client = g.open();
    let mut mem = AllocMemoryArgs {
        size: 4 * 4096,
        ..Default::default()
    };
    g.ioctl(client, DRIVER_CMD_ALLOC_MEMORY, &mut mem).unwrap();
    let at = g.map(client, mem.mmap_offset, mem.alloc_size).unwrap();
    g.peer.shared().write(at.offset, b"left behind").unwrap();
    // A second guest while the first is connected is turned away before the server's
    // opening: its connection is closed with nothing sent, so it never gets BAR2's
    // descriptor (cli.rs checks no byte and no descriptor arrives).
    let second = davinci_ivshmem::PeerClient::connect(&dev.socket(), 2, LIMIT);
    assert!(
        matches!(second, Err(davinci_ivshmem::Error::Disconnected)),
        "{second:?}"
    );
    drop(g); // QEMU exits
             // The next guest finds the admin rings empty, its client gets the whole heap again, and
             // the previous guest's bytes are gone.
             // (The device handles the old guest's departure before the new one's connection: both
             // wait in the same poll, departures first.)
    let mut g = Guest::connect(&dev);
    assert_eq!(g.q.submission().tail(), 0);
    let client = g.open();
    g.ioctl(client, DRIVER_CMD_ALLOC_MEMORY, &mut mem).unwrap();
    let at = g.map(client, mem.mmap_offset, mem.alloc_size).unwrap();
    let mut b = [1u8; 11];
    g.peer.shared().read(at.offset, &mut b).unwrap();
    assert_eq!(b, [0; 11]);
    drop(g);
    assert!(dev.stop().stats().guests_gone >= 1);
}

#[test]
fn broken_ring_indices_stop_only_what_they_belong_to() {
    let dev = Running::start(1 << 20);
    let mut g = Guest::connect(&dev);
    let (client, ctx) = g.client_with_context();
    let mut streams = Vec::new();
    for _ in 0..2 {
        streams.push(g.stream(client, ctx, 16));
    }
    // Stream 0's tail far past its head: that stream fails (EPROTO), stream 1 runs on.
    let (s0, c0, _) = &streams[0];
    let tail = davinci_uapi::RingOffsets::standard(64).tail;
    g.peer
        .shared()
        .word(c0.offset + u64::from(tail))
        .unwrap()
        .store(1000, std::sync::atomic::Ordering::Release);
    g.ring_data();
    // (The error state is on the command ring's header.)
    let bad = producer::<TaskDesc>(&g.peer, c0, s0.cmd_entries);
    let (s1, c1, e1) = &streams[1];
    let mut cmd = producer::<TaskDesc>(&g.peer, c1, s1.cmd_entries);
    let mut evt = consumer::<EventRecord>(&g.peer, e1, s1.event_entries);
    cmd.push(&TaskDesc::nop(7)).unwrap();
    cmd.publish();
    g.ring_data();
    let mut got = Vec::new();
    while got.is_empty() {
        evt.consume(16, |r| got.push(r.user_data));
        if got.is_empty() {
            g.peer.wait_interrupt(VECTOR_DATA, LIMIT).unwrap();
        }
    }
    assert_eq!(got, [7]);
    let mut err = bad.region().error();
    while err.is_none() {
        g.peer.wait_interrupt(VECTOR_DATA, LIMIT).unwrap();
        err = bad.region().error();
    }
    assert_eq!(err.map(|(e, _)| e), Some(Errno::EPROTO.code() as u32));

    // The admin submission ring's tail far past its head: the device stops answering and
    // says so in BAR2's header (state failed, EPROTO), and still runs nothing it should not.
    let sq_tail = g.header.layout.sq_offset + u64::from(tail);
    g.peer
        .shared()
        .word(sq_tail)
        .unwrap()
        .store(999, std::sync::atomic::Ordering::Release);
    assert!(g.peer.ring(davinci_ivshmem::SERVER_ID, 0).unwrap());
    let header = || {
        let mut page = vec![0u8; 4096];
        g.peer.shared().read(0, &mut page).unwrap();
        davinci_hwif::Bar2Header::decode(&page, g.peer.shm_size()).unwrap()
    };
    let give_up = std::time::Instant::now() + LIMIT;
    let mut h = header();
    while h.state != davinci_hwif::DeviceState::Failed {
        assert!(
            std::time::Instant::now() < give_up,
            "the device never failed: {h:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
        h = header();
    }
    assert_eq!(h.failure, Errno::EPROTO.code() as u32);
    // (Every ring view holds the peer: all of them go for QEMU to "exit".)
    drop((bad, cmd, evt, g));
    // The next guest finds the device ready again.
    let g = Guest::connect(&dev);
    assert_eq!(g.header.state, davinci_hwif::DeviceState::Ready);
}

/// An IOCTL through the admin queue, its completion whole (revocations, reply kind).
fn ioctl_raw<T: davinci_uapi::Wire>(
    g: &mut Guest,
    client: u32,
    request: u32,
    args: &T,
) -> davinci_hwif::Completion {
    let mut arg = davinci_hwif::ArgBuf::zeroed(T::SIZE).unwrap();
    args.encode(arg.as_mut_slice());
    g.call(client, AdminOp::Ioctl { request, arg })
}

#[test]
fn completions_list_revocations_waits_are_asked_again_and_lists_use_the_list_area() {
    use davinci_hwif::{ArgBuf, Revoke};
    use davinci_uapi::{
        ClientUsage, ListClientsArgs, SubmitTaskArgs, WaitEventArgs, Wire, DRIVER_CMD_LIST_CLIENTS,
        DRIVER_CMD_SUBMIT_TASK, DRIVER_CMD_WAIT_EVENT,
    };
    let dev = Running::start(1 << 20);
    let mut g = Guest::connect(&dev);
    let client = g.open();

    // GET_INFO names the hardware doorbell (BAR0's Doorbell register, peer 0's vector 1);
    // GET_IDENTITY the device (a UUID; the bus id is the guest module's to fill in).
    let mut info = DeviceInfo::default();
    g.ioctl(client, DRIVER_CMD_GET_INFO, &mut info).unwrap();
    assert!(info
        .features
        .contains(davinci_uapi::Features::DOORBELL_MMIO));
    assert_eq!((info.doorbell_offset, info.doorbell_value), (12, 1));
    let mut id = davinci_uapi::DeviceIdentity::default();
    g.ioctl(client, davinci_uapi::DRIVER_CMD_GET_IDENTITY, &mut id)
        .unwrap();
    assert_ne!(id.uuid, [0; 16]);
    assert_eq!((id.model(), id.chip_name()), ("davinci_pcidev", "pcidev0"));
    assert_eq!(id.bus_id(), "");

    // FREE_MEMORY revokes what the client maps of the allocation; GET_INFO revokes nothing.
    let mut mem = AllocMemoryArgs {
        size: 8192,
        ..Default::default()
    };
    g.ioctl(client, DRIVER_CMD_ALLOC_MEMORY, &mut mem).unwrap();
    let info = ioctl_raw(&mut g, client, DRIVER_CMD_GET_INFO, &DeviceInfo::default());
    assert!(info.revokes().is_empty() && !info.revokes_overflowed());
    let h = HandleArgs {
        handle: mem.handle,
        pad: 0,
    };
    let c = ioctl_raw(&mut g, client, DRIVER_CMD_FREE_MEMORY, &h);
    assert_eq!(c.reply, ReplyKind::Done, "{}", c.message());
    assert_eq!(
        c.revokes(),
        &[Revoke {
            client,
            cookie: mem.mmap_offset,
            len: mem.alloc_size
        }]
    );

    // DESTROY_STREAM revokes its command ring, event ring and doorbell page.
    let mut ctx = CreateContextArgs::default();
    g.ioctl(client, DRIVER_CMD_CREATE_CONTEXT, &mut ctx)
        .unwrap();
    let mk = |g: &mut Guest| {
        let mut s = CreateStreamArgs {
            ctx: ctx.handle,
            cmd_entries: 16,
            event_entries: 16,
            ..Default::default()
        };
        g.ioctl(client, DRIVER_CMD_CREATE_STREAM, &mut s).unwrap();
        s
    };
    let gone = mk(&mut g);
    let c = ioctl_raw(
        &mut g,
        client,
        DRIVER_CMD_DESTROY_STREAM,
        &HandleArgs {
            handle: gone.handle,
            pad: 0,
        },
    );
    let mut cookies: Vec<u64> = c.revokes().iter().map(|r| r.cookie).collect();
    cookies.sort_unstable();
    let mut want = vec![
        gone.cmd_ring.mmap_offset,
        gone.event_ring.mmap_offset,
        gone.doorbell_offset,
    ];
    want.sort_unstable();
    assert_eq!(cookies, want);
    assert!(c.revokes().iter().all(|r| r.client == client));

    // WAIT_EVENT not reached: WAIT_NEEDED; asked again before the deadline, still; after it,
    // ETIMEDOUT (as the kernel's own wait says it). Once the task ran: done.
    let s = mk(&mut g);
    let wait = WaitEventArgs {
        kind: 1,
        handle: s.handle,
        value: 1,
        timeout_ns: 1_000_000_000,
        ..Default::default()
    };
    let c = ioctl_raw(&mut g, client, DRIVER_CMD_WAIT_EVENT, &wait);
    assert_eq!(c.reply, ReplyKind::WaitNeeded);
    let again = |g: &mut Guest, arg: ArgBuf, timed_out: bool| {
        g.call(client, AdminOp::WaitAgain { arg, timed_out })
    };
    let c2 = again(&mut g, c.arg, false);
    assert_eq!(c2.reply, ReplyKind::WaitNeeded);
    let c3 = again(&mut g, c.arg, true);
    assert_eq!(
        (c3.reply, c3.errno),
        (ReplyKind::Failed, Errno::ETIMEDOUT.code() as u32),
        "{}",
        c3.message()
    );
    let sub = SubmitTaskArgs {
        stream: s.handle,
        desc: TaskDesc::nop(5),
        ..Default::default()
    };
    let c = ioctl_raw(&mut g, client, DRIVER_CMD_SUBMIT_TASK, &sub);
    assert_eq!(c.reply, ReplyKind::Done, "{}", c.message());
    let mut r = again(&mut g, c3.arg, false);
    while r.reply == ReplyKind::WaitNeeded {
        g.peer.wait_interrupt(VECTOR_DATA, LIMIT).unwrap();
        r = again(&mut g, r.arg, false);
    }
    assert_eq!(r.reply, ReplyKind::Done, "{}", r.message());
    assert_eq!(WaitEventArgs::decode(r.arg.as_slice()).current, 1);
    // A WAIT_AGAIN whose bytes are no WAIT_EVENT's: EINVAL.
    let c = again(&mut g, ArgBuf::from_slice(&[1; 8]).unwrap(), false);
    assert_eq!(c.errno, INVAL);

    // LIST_CLIENTS writes its entries into BAR2's list area, from buf LIST_BUF; any other buf
    // that does not fit is EFAULT, and nothing is written past the area.
    // (The device is exclusive by default: one client.)
    let mut list = ListClientsArgs {
        buf: davinci_hwif::layout::LIST_BUF,
        capacity: 4,
        entry_size: ClientUsage::SIZE as u32,
        ..Default::default()
    };
    g.ioctl(client, DRIVER_CMD_LIST_CLIENTS, &mut list).unwrap();
    assert_eq!(list.count, 1);
    let l = g.header.layout;
    let mut b = vec![0u8; ClientUsage::SIZE];
    g.peer.shared().read(l.list_offset, &mut b).unwrap();
    let entry = ClientUsage::decode(&b);
    let mut me = DeviceInfo::default();
    g.ioctl(client, DRIVER_CMD_GET_INFO, &mut me).unwrap();
    assert_eq!((entry.client_id, entry.streams), (me.caller_id, 1));
    for bad in [davinci_hwif::layout::LIST_BUF + l.list_bytes - 8, 4096] {
        list.buf = bad;
        let e = g
            .ioctl(client, DRIVER_CMD_LIST_CLIENTS, &mut list)
            .unwrap_err();
        assert_eq!(e.0, Errno::EFAULT.code() as u32, "{}", e.1);
    }
    // UNDO: what a create made goes (its mappings revoked); a second UNDO finds nothing.
    let made = mk(&mut g);
    let mut arg = ArgBuf::zeroed(CreateStreamArgs::SIZE).unwrap();
    made.encode(arg.as_mut_slice());
    let undo = |g: &mut Guest| {
        g.call(
            client,
            AdminOp::Undo {
                request: DRIVER_CMD_CREATE_STREAM,
                arg,
            },
        )
    };
    let c = undo(&mut g);
    assert_eq!(c.reply, ReplyKind::Done, "{}", c.message());
    assert_eq!(c.revokes().len(), 3);
    let c = undo(&mut g);
    assert_eq!(c.errno, Errno::ENOENT.code() as u32, "{}", c.message());
    let e = g
        .ioctl(client, DRIVER_CMD_LIST_CLIENTS, &mut list)
        .unwrap_err();
    assert_eq!(e.0, Errno::EFAULT.code() as u32, "{}", e.1);
}

/// The host's fault injection reaches the PCI device through admin INJECT (the kernel
/// module forwards its `inject` parameter): a rule arms the streams, `reset` stops them, a
/// text that is no fault is refused with EINVAL and arms nothing.
#[test]
fn inject_arms_faults_resets_and_refuses_a_bad_text() {
    let dev = Running::start(1 << 20);
    let mut g = Guest::connect(&dev);
    let (client, ctx) = g.client_with_context();

    let bad = g.call(0, AdminOp::inject("explode-at=2").unwrap());
    assert_eq!((bad.reply, bad.errno), (ReplyKind::Failed, INVAL));
    assert!(bad.message().contains("error-at=N"), "{}", bad.message());

    let ok = g.call(0, AdminOp::inject("error-at=2:EIO").unwrap());
    assert_eq!(ok.reply, ReplyKind::Done);
    let (s, cmd_at, evt_at) = g.stream(client, ctx, 64);
    let mut cmd = producer::<TaskDesc>(&g.peer, &cmd_at, s.cmd_entries);
    let mut evt = consumer::<EventRecord>(&g.peer, &evt_at, s.event_entries);
    for i in 1..=3 {
        cmd.push(&TaskDesc::nop(i)).unwrap();
    }
    cmd.publish();
    g.ring_data();
    let records = g.records(&mut evt, 2);
    let got: Vec<(u64, i32)> = records.iter().map(|r| (r.user_data, r.status)).collect();
    assert_eq!(
        got,
        [(1, 0), (2, -Errno::EIO.code())],
        "the second task fails"
    );

    let none = g.call(0, AdminOp::inject("none").unwrap());
    assert_eq!(none.reply, ReplyKind::Done);
    let reset = g.call(0, AdminOp::inject("reset").unwrap());
    assert_eq!(reset.reply, ReplyKind::Done);
    // A client's INJECT is no INJECT: the client word must be 0.
    let mut slot = [0u8; ADMIN_ENTRY_SIZE];
    davinci_hwif::AdminRequest {
        tag: 77,
        client: 0,
        op: AdminOp::inject("reset").unwrap(),
    }
    .encode(&mut slot);
    slot[12] = 1;
    g.post_raw(&slot);
    let c = g.completion();
    assert_eq!((c.tag, c.reply, c.errno), (77, ReplyKind::Failed, INVAL));
    drop(g);
    dev.stop();
}

/// `davinci-pcidev --inject`: a fault armed from the start reaches the first stream.
#[test]
fn a_fault_given_at_start_arms_the_first_stream() {
    let dev = Running::start_with(davinci_pcidev::DeviceConfig {
        size: 1 << 20,
        inject: Some(davinci_driver_core::InjectRule::parse("error-at=1:EFAULT").unwrap()),
        ..Default::default()
    });
    let mut g = Guest::connect(&dev);
    let (client, ctx) = g.client_with_context();
    let (s, cmd_at, evt_at) = g.stream(client, ctx, 16);
    let mut cmd = producer::<TaskDesc>(&g.peer, &cmd_at, s.cmd_entries);
    let mut evt = consumer::<EventRecord>(&g.peer, &evt_at, s.event_entries);
    cmd.push(&TaskDesc::nop(1)).unwrap();
    cmd.publish();
    g.ring_data();
    let r = g.records(&mut evt, 1);
    assert_eq!(r[0].status, -Errno::EFAULT.code(), "the first task fails");
    drop(g);
    dev.stop();
}
