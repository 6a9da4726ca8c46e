//! driver-core against its checking fake platform: Clients: exclusive and shared opens, admin-only sharing changes, LIST_CLIENTS usage,
//! isolation between clients, and everything a client held released on close.

mod support;

use davinci_driver_core::{DeviceCore, Reply, Role, Run, UserMem};
use davinci_uapi::*;
use support::*;

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
    let (root, a, b) = shared_pair(&mut dev);
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
    // An admin sees every client (ABI 1.4: anyone else only its own user's).
    dev.ioctl(root, DRIVER_CMD_LIST_CLIENTS, &mut raw, &mut out)
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
    call(&mut dev, root, DRIVER_CMD_LIST_CLIENTS, &mut probe).unwrap();
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
        dev.ioctl(root, DRIVER_CMD_LIST_CLIENTS, &mut raw, &mut out)
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

/// The `(pid, uid)` of every client open `client` sees in LIST_CLIENTS, and the count it is
/// told.
fn seen_by(dev: &mut DeviceCore<HeapPlatform>, client: u32) -> (Vec<(u32, u32)>, u32) {
    let args = ListClientsArgs {
        buf: 0x1000,
        capacity: 16,
        entry_size: ClientUsage::SIZE as u32,
        ..Default::default()
    };
    let mut raw = vec![0u8; ListClientsArgs::SIZE];
    args.encode(&mut raw);
    let mut out = Collect(Vec::new());
    dev.ioctl(client, DRIVER_CMD_LIST_CLIENTS, &mut raw, &mut out)
        .unwrap();
    let seen = out
        .0
        .iter()
        .map(|(_, b)| {
            let u = ClientUsage::decode(b);
            (u.pid, u.uid)
        })
        .collect();
    (seen, ListClientsArgs::decode(&raw).count)
}

#[test]
fn list_clients_shows_a_non_admin_only_its_own_users_clients() {
    let mut dev = device();
    let root = dev.open(params(1, 0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    let a = dev.open(params(10, 1000, Role::Client)).unwrap();
    let a2 = dev.open(params(11, 1000, Role::Client)).unwrap();
    let b = dev.open(params(20, 1001, Role::Client)).unwrap();
    let tool = dev.open(params(30, 1001, Role::Control)).unwrap();
    assert_ne!(
        dev.info().features & Features::OWN_CLIENTS,
        Features::empty()
    );
    let all = vec![(10, 1000), (11, 1000), (20, 1001)];
    assert_eq!(seen_by(&mut dev, root), (all, 3), "an admin sees everyone");
    let mine = vec![(10, 1000), (11, 1000)];
    assert_eq!(seen_by(&mut dev, a), (mine.clone(), 2));
    assert_eq!(seen_by(&mut dev, a2), (mine, 2));
    assert_eq!(seen_by(&mut dev, b), (vec![(20, 1001)], 1));
    // A non-admin's control open (a tool run by that user) sees that user's clients.
    assert_eq!(seen_by(&mut dev, tool), (vec![(20, 1001)], 1));
    // The device-wide count stays public (GET_INFO, QUERY_DEVICE_SHARE): no identities in it.
    assert_eq!(dev.info_for(b).clients, 3);
    dev.close(b);
    assert_eq!(seen_by(&mut dev, tool), (vec![], 0));
}

#[test]
fn handles_and_client_ids_carry_no_sequence_and_follow_the_secret() {
    // Two devices, each with its own secret: the same calls give different handles and ids,
    // and neither counts up from the last one.
    let mut ids = Vec::new();
    let mut handles = Vec::new();
    for secret in [1u64, 2] {
        let mut dev = device();
        dev.set_secret(secret).unwrap();
        let root = dev.open(params(1, 0, Role::Control)).unwrap();
        dev.set_share_mode(root, ShareMode::Shared).unwrap();
        let a = dev.open(params(10, 1000, Role::Client)).unwrap();
        let b = dev.open(params(11, 1000, Role::Client)).unwrap();
        let (ia, ib) = (dev.info_for(a).caller_id, dev.info_for(b).caller_id);
        assert!(ia != 0 && ib != 0 && ia != ib);
        assert!(
            ia.abs_diff(ib) > 0xffff,
            "ids {ia:#x} {ib:#x} look sequential"
        );
        let k1 = ctx(&mut dev, a);
        let k2 = ctx(&mut dev, a);
        assert!(
            k1.abs_diff(k2) > 0xffff,
            "handles {k1:#x} {k2:#x} look sequential"
        );
        // A destroyed context's slot, reused, gives a value unrelated to the old one.
        let mut h = HandleArgs { handle: k1, pad: 0 };
        call(&mut dev, a, DRIVER_CMD_DESTROY_CONTEXT, &mut h).unwrap();
        let k3 = ctx(&mut dev, a);
        assert!(k3.abs_diff(k1) > 0xffff, "{k1:#x} reused as {k3:#x}");
        // The handles resolve, the destroyed one does not.
        assert_eq!(
            call(&mut dev, a, DRIVER_CMD_DESTROY_CONTEXT, &mut h),
            Err(Errno::ENOENT)
        );
        ids.push((ia, ib));
        handles.push((k1, k2));
        // Once anything is open the secret and the quota stay.
        assert_eq!(dev.set_secret(9).unwrap_err().errno, Errno::EBUSY);
        assert_eq!(
            dev.set_quota(davinci_driver_core::Quota::NONE)
                .unwrap_err()
                .errno,
            Errno::EBUSY
        );
    }
    assert_ne!(ids[0], ids[1]);
    assert_ne!(handles[0], handles[1]);
}

#[test]
fn get_info_reports_the_quota_in_force() {
    use davinci_driver_core::Quota;
    // No operator's memory limit on this one.
    let mut dev = davinci_driver_core::test_util::device_with(16 << 20, 0);
    let q = Quota {
        contexts: 3,
        streams: 5,
        events: 7,
        allocations: 9,
        exports: 2,
    };
    assert_eq!(
        dev.set_quota(Quota { exports: 0, ..q }).unwrap_err().errno,
        Errno::EINVAL
    );
    assert_eq!(
        dev.set_quota(Quota { contexts: 0, ..q }).unwrap_err().errno,
        Errno::EINVAL
    );
    assert_eq!(
        dev.set_quota(Quota {
            events: 100_000,
            ..q
        })
        .unwrap_err()
        .errno,
        Errno::EINVAL
    );
    dev.set_quota(q).unwrap();
    let info = dev.info();
    assert_ne!(info.features & Features::QUOTAS, Features::empty());
    let quota = |i: &DeviceInfo| {
        (
            i.quota_contexts,
            i.quota_streams,
            i.quota_events,
            i.quota_allocations,
        )
    };
    // Exclusive: the one client may fill every table, and take all the memory.
    assert_eq!(
        quota(&info),
        (
            info.max_contexts,
            info.max_streams,
            info.max_events,
            info.max_allocations
        )
    );
    assert_eq!(info.client_memory_limit, info.memory_size);
    let root = dev.open(params(1, 0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    let a = dev.open(params(10, 1000, Role::Client)).unwrap();
    assert_eq!(quota(&dev.info_for(a)), (3, 5, 7, 9));
    // Shared without an operator's memory limit: a quarter of the memory each.
    let shared = dev.info_for(a);
    assert_eq!(shared.client_memory_limit, shared.memory_size / 4);
    let mut big = AllocMemoryArgs {
        size: shared.memory_size / 4 + 4096,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_ALLOC_MEMORY, &mut big),
        Err(Errno::ENOMEM)
    );
    big.size = shared.memory_size / 4;
    call(&mut dev, a, DRIVER_CMD_ALLOC_MEMORY, &mut big).unwrap();
    // ... and it is the quota enforced.
    for _ in 0..3 {
        ctx(&mut dev, a);
    }
    let mut x = CreateContextArgs::default();
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_CREATE_CONTEXT, &mut x),
        Err(Errno::ENOSPC)
    );
}

#[test]
fn isolation_between_clients() {
    let mut dev = device();
    let (_root, a, b) = shared_pair(&mut dev);
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
fn tenants_cannot_take_the_operators_room() {
    use davinci_driver_core::{
        DEFAULT_TENANT_SLOTS, MAX_CLIENTS, MAX_CLIENT_OPENS, MAX_CONTROL_OPENS_PER_TENANT,
        MAX_USER_CONTROL_OPENS,
    };
    let share = MAX_CLIENT_OPENS / DEFAULT_TENANT_SLOTS as usize;
    let mut dev = device();
    let root = dev.open(params(1, 0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    // One tenant takes at most its share of the client slots: the others can still open.
    for i in 0..share as u32 {
        dev.open(params(100 + i, 1000, Role::Client)).unwrap();
    }
    let e = dev.open(params(99, 1000, Role::Client)).unwrap_err().error;
    assert_eq!(e.errno, Errno::ENOSPC);
    assert!(e.msg.contains("this tenant"), "{}", e.msg);
    assert!(
        e.message().as_str().contains("holds 64, quota 64"),
        "{}",
        e.message()
    );
    // An admin is not held to it (it could change the sharing anyway).
    let admin_client = dev.open(params(98, 0, Role::Client)).unwrap();
    dev.close(admin_client);
    // Every client slot taken, by tenants of several users.
    for i in share as u32..MAX_CLIENT_OPENS as u32 {
        dev.open(params(100 + i, 1001 + i % 3, Role::Client))
            .unwrap();
    }
    let e = dev.open(params(9, 1000, Role::Client)).unwrap_err().error;
    assert_eq!(e.errno, Errno::ENOSPC);
    assert!(e.msg.contains("kept for operators"), "{}", e.msg);
    // A non-admin user may look, a few times, not without bound.
    for _ in 0..MAX_CONTROL_OPENS_PER_TENANT {
        dev.open(params(9, 1000, Role::Control)).unwrap();
    }
    let e = dev.open(params(9, 1000, Role::Control)).unwrap_err().error;
    assert_eq!(e.errno, Errno::ENOSPC);
    assert!(e.msg.contains("this tenant"), "{}", e.msg);
    // Nor can several users together take the admins' room.
    let mut uid = 2000;
    let mut opened = MAX_CONTROL_OPENS_PER_TENANT;
    while opened < MAX_USER_CONTROL_OPENS {
        dev.open(params(9, uid, Role::Control)).unwrap();
        opened += 1;
        if opened.is_multiple_of(MAX_CONTROL_OPENS_PER_TENANT) {
            uid += 1;
        }
    }
    let e = dev
        .open(params(9, uid + 1, Role::Control))
        .unwrap_err()
        .error;
    assert_eq!(e.errno, Errno::ENOSPC);
    assert!(e.msg.contains("kept for admins"), "{}", e.msg);
    // The operators' tools (admins) still open, up to the table's end.
    let room = MAX_CLIENTS - MAX_CLIENT_OPENS - MAX_USER_CONTROL_OPENS - 1;
    for _ in 0..room {
        dev.open(params(2, 0, Role::Control)).unwrap();
    }
    assert_eq!(
        dev.open(params(2, 0, Role::Control))
            .unwrap_err()
            .error
            .errno,
        Errno::ENOSPC
    );
}

#[test]
fn a_shared_device_holds_each_client_to_its_quota_and_an_exclusive_one_does_not() {
    use davinci_driver_core::{Quota, MAX_CONTEXTS};
    let mut dev = device();
    let a = dev.open(params(10, 1000, Role::Client)).unwrap();
    // Exclusive: the one client may fill the context table's fair share and more.
    let mut held = Vec::new();
    for _ in 0..Quota::FAIR.contexts + 1 {
        held.push(ctx(&mut dev, a));
    }
    let root = dev.open(params(1, 0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    // Shared: over its quota already, A creates no more until it is back under it.
    let mut c = CreateContextArgs::default();
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_CREATE_CONTEXT, &mut c),
        Err(Errno::ENOSPC)
    );
    let mut e = LastError::default();
    call(&mut dev, a, DRIVER_CMD_GET_LAST_ERROR, &mut e).unwrap();
    assert!(
        e.message_str().starts_with(&format!(
            "contexts quota (shared): asked 1, holds {}, quota {}; --tenant-quota contexts=N",
            Quota::FAIR.contexts + 1,
            Quota::FAIR.contexts
        )),
        "{}",
        e.message_str()
    );
    for h in held.drain(..2) {
        let mut d = HandleArgs { handle: h, pad: 0 };
        call(&mut dev, a, DRIVER_CMD_DESTROY_CONTEXT, &mut d).unwrap();
    }
    let k = ctx(&mut dev, a);
    // Streams, events and allocations, each to its quota; another client is not held back.
    let b = dev.open(params(20, 1001, Role::Client)).unwrap();
    let kb = ctx(&mut dev, b);
    for (what, quota) in [
        ("streams", Quota::FAIR.streams),
        ("events", Quota::FAIR.events),
        ("allocations", Quota::FAIR.allocations),
    ] {
        let make = |dev: &mut davinci_driver_core::DeviceCore<HeapPlatform>, c, k| match what {
            "streams" => {
                let mut s = CreateStreamArgs {
                    ctx: k,
                    cmd_entries: 2,
                    event_entries: 2,
                    ..Default::default()
                };
                call(dev, c, DRIVER_CMD_CREATE_STREAM, &mut s)
            }
            "events" => {
                let mut e = CreateEventArgs {
                    ctx: k,
                    ..Default::default()
                };
                call(dev, c, DRIVER_CMD_CREATE_EVENT, &mut e)
            }
            _ => {
                let mut m = AllocMemoryArgs {
                    size: 4096,
                    ..Default::default()
                };
                call(dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut m)
            }
        };
        for i in 0..quota {
            make(&mut dev, a, k).unwrap_or_else(|e| panic!("{what} {i}: {e:?}"));
        }
        assert_eq!(make(&mut dev, a, k), Err(Errno::ENOSPC), "{what}");
        call(&mut dev, a, DRIVER_CMD_GET_LAST_ERROR, &mut e).unwrap();
        assert!(
            e.message_str().starts_with(&format!(
                "{what} quota (shared): asked 1, holds {quota}, quota {quota}; --tenant-quota \
                 {what}=N, quota_{what}"
            )),
            "{}",
            e.message_str()
        );
        make(&mut dev, b, kb).unwrap_or_else(|e| panic!("B's first of {what}: {e:?}"));
    }
    assert!(MAX_CONTEXTS as u32 > Quota::FAIR.contexts);
}

/// The opens `notify_waiters` was called for since the last look.
fn notified(dev: &DeviceCore<HeapPlatform>) -> Vec<u32> {
    std::mem::take(&mut *dev.platform().notified.lock().unwrap())
}

/// Waiters are woken per open (a host may keep one wait queue per open or per hash of it):
/// what one client's streams and events do notifies that client only, so another tenant's
/// blocked waiters are not all woken by it; a device reset notifies everyone.
#[test]
fn what_a_clients_streams_do_notifies_that_client_only() {
    let mut dev = device();
    let (_root, a, b) = shared_pair(&mut dev);
    let ka = ctx(&mut dev, a);
    let kb = ctx(&mut dev, b);
    let mut ha = stream(&mut dev, a, ka, 8, 8);
    let _hb = stream(&mut dev, b, kb, 8, 8);
    let ea = event(&mut dev, a, ka);
    notified(&dev);
    // A's completions.
    nops(&mut ha, 1, 2);
    assert_eq!(dev.run_stream(ha.handle, 64), Run::Progress(2));
    let n = notified(&dev);
    assert!(!n.is_empty() && n.iter().all(|&c| c == a), "{n:?}");
    // A's event recorded by its stream.
    ha.prod.push(&TaskDesc::event_record(3, ea, 1)).unwrap();
    ha.prod.publish();
    dev.run_stream(ha.handle, 64);
    let n = notified(&dev);
    assert!(!n.is_empty() && n.iter().all(|&c| c == a), "{n:?}");
    // A's event destroyed, A's stream destroyed, A closed: A's waiters only.
    let mut h = HandleArgs { handle: ea, pad: 0 };
    call(&mut dev, a, DRIVER_CMD_DESTROY_EVENT, &mut h).unwrap();
    assert_eq!(notified(&dev), vec![a]);
    h.handle = ha.handle;
    call(&mut dev, a, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
    assert!(notified(&dev).iter().all(|&c| c == a));
    // A reset concerns every open.
    dev.reset();
    let n = notified(&dev);
    assert!(n.contains(&a) && n.contains(&b), "{n:?}");
    dev.close(a);
    assert!(notified(&dev).iter().all(|&c| c == a));
}

/// The device's service order between tenants: streams of different clients, each with a
/// full command ring, get the same number of descriptors in every pass of a worker that runs
/// each stream with one budget (the mock device's pollers and the kernel's worker do), and
/// so the same over any number of passes; neither the order of the streams in the pass nor
/// which client created its stream first gives one more. A change that served a stream with
/// more than its budget, or a client's streams ahead of another's, fails here (deterministic:
/// no clock, no threads).
#[test]
fn backlogged_streams_of_different_clients_get_equal_descriptors_per_pass() {
    let mut dev = device();
    let (_root, a, b) = shared_pair(&mut dev);
    let ka = ctx(&mut dev, a);
    let kb = ctx(&mut dev, b);
    let mut hosts = [
        stream(&mut dev, a, ka, 256, 512),
        stream(&mut dev, b, kb, 256, 512),
    ];
    for (s, h) in hosts.iter_mut().enumerate() {
        for i in 0..256u64 {
            h.prod.push(&TaskDesc::nop((s as u64) << 32 | i)).unwrap();
        }
        h.prod.publish();
    }
    const BUDGET: u32 = 16;
    let mut done = [0u64; 2];
    for pass in 0..256 / BUDGET {
        // The pass order alternates, as it would when streams come and go.
        let order: [usize; 2] = if pass % 2 == 0 { [0, 1] } else { [1, 0] };
        for s in order {
            let r = dev.run_stream(hosts[s].handle, BUDGET);
            assert_eq!(r, Run::Progress(BUDGET), "pass {pass}, stream {s}");
            let recs = drain(&mut hosts[s]);
            for (k, rec) in recs.iter().enumerate() {
                assert_eq!(rec.user_data, (s as u64) << 32 | (done[s] + k as u64));
                assert_eq!(rec.status, 0);
            }
            done[s] += recs.len() as u64;
        }
        assert_eq!(done[0], done[1], "after pass {pass}: {done:?}");
    }
    assert_eq!(done, [256, 256]);
    for h in &hosts {
        assert_eq!(dev.run_stream(h.handle, BUDGET), Run::Idle);
    }
}
