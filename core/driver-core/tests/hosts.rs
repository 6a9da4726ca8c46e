//! driver-core against its checking fake platform: what a host asks of the core besides
//! ioctls. Mappings of a freed allocation or a destroyed stream are revoked before their
//! backing goes (so a host whose mappings pin pages never pins more than it counts); a create
//! whose reply could not be delivered is undone; a host built in place sets the device's id
//! and memory before its first open.

mod support;

use davinci_driver_core::{DeviceCore, Role};
use davinci_uapi::*;
use support::*;

#[test]
fn freeing_memory_revokes_the_allocations_mappings_before_its_backing_goes() {
    let mut dev = device();
    let c = dev.open(params(10, 1000, Role::Client)).unwrap();
    let a = alloc(&mut dev, c, 3 * 4096 + 1);
    let mut h = HandleArgs {
        handle: a.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_FREE_MEMORY, &mut h).unwrap();
    assert_eq!(
        dev.platform().revoked,
        vec![(c, a.mmap_offset, a.alloc_size)],
        "FREE_MEMORY revokes exactly the allocation's cookie range"
    );
    assert_eq!(dev.platform().backed_of(c), 0);
}

#[test]
fn destroying_a_stream_or_closing_revokes_every_mapping_of_its_rings() {
    let mut dev = device();
    let c = dev.open(params(10, 1000, Role::Client)).unwrap();
    let x = ctx(&mut dev, c);
    let mut a = CreateStreamArgs {
        ctx: x,
        cmd_entries: 64,
        event_entries: 128,
        ..Default::default()
    };
    call(&mut dev, c, DRIVER_CMD_CREATE_STREAM, &mut a).unwrap();
    let mut h = HandleArgs {
        handle: a.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
    let mut want = vec![
        (c, a.cmd_ring.mmap_offset, a.cmd_ring.mmap_size),
        (c, a.event_ring.mmap_offset, a.event_ring.mmap_size),
        (c, a.doorbell_offset, a.doorbell_size),
    ];
    assert_eq!(dev.platform().revoked, want);

    // A close revokes what the open still held: its streams' rings and its memory.
    call(&mut dev, c, DRIVER_CMD_CREATE_STREAM, &mut a).unwrap();
    let m = alloc(&mut dev, c, 4096);
    dev.close(c);
    want.extend([
        (c, a.cmd_ring.mmap_offset, a.cmd_ring.mmap_size),
        (c, a.event_ring.mmap_offset, a.event_ring.mmap_size),
        (c, a.doorbell_offset, a.doorbell_size),
        (c, m.mmap_offset, m.alloc_size),
    ]);
    assert_eq!(dev.platform().revoked, want);
    assert_eq!(dev.platform().live_streams, 0);
}

#[test]
fn an_undone_create_leaves_nothing_and_gives_the_quota_back() {
    let mut dev = device();
    let c = dev.open(params(10, 1000, Role::Client)).unwrap();
    let before = dev.info_for(c);
    let x = ctx(&mut dev, c);
    let mut e = CreateEventArgs {
        ctx: x,
        ..Default::default()
    };
    call(&mut dev, c, DRIVER_CMD_CREATE_EVENT, &mut e).unwrap();
    let mut s = CreateStreamArgs {
        ctx: x,
        cmd_entries: 64,
        event_entries: 64,
        ..Default::default()
    };
    call(&mut dev, c, DRIVER_CMD_CREATE_STREAM, &mut s).unwrap();
    let m = alloc(&mut dev, c, 8192);
    // Each reply "could not be copied out": the host undoes the create from its reply bytes.
    fn undo<T: Wire>(dev: &mut DeviceCore<HeapPlatform>, c: u32, req: u32, args: &T) {
        let mut b = vec![0u8; T::SIZE];
        args.encode(&mut b);
        dev.undo_create(c, req, &b).unwrap();
    }
    undo(&mut dev, c, DRIVER_CMD_ALLOC_MEMORY, &m);
    undo(&mut dev, c, DRIVER_CMD_CREATE_STREAM, &s);
    undo(&mut dev, c, DRIVER_CMD_CREATE_EVENT, &e);
    let cx = CreateContextArgs {
        handle: x,
        ..Default::default()
    };
    undo(&mut dev, c, DRIVER_CMD_CREATE_CONTEXT, &cx);
    // Nothing is left: the handles are stale, the memory and streams are back.
    let mut h = HandleArgs { handle: x, pad: 0 };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_DESTROY_CONTEXT, &mut h),
        Err(Errno::ENOENT)
    );
    assert_eq!(dev.platform().backed_of(c), 0);
    assert_eq!(dev.platform().live_streams, 0);
    let after = dev.info_for(c);
    assert_eq!(after.memory_used, before.memory_used);
    // A request that creates nothing is left alone.
    dev.undo_create(c, DRIVER_CMD_GET_INFO, &[0; 8]).unwrap();
}

#[test]
fn a_host_sets_the_devices_id_and_memory_before_its_first_open_only() {
    let mut dev = device();
    dev.set_identity(7, (2 << 20) + 100).unwrap();
    let info = dev.info();
    assert_eq!(info.device_id, 7);
    assert_eq!(info.memory_size, 2 << 20, "rounded down to the page size");
    let c = dev.open(params(10, 1000, Role::Client)).unwrap();
    // The new size is what the allocator has (the test device had 16 MiB): 2 MiB fit, then
    // not a page more.
    let a = alloc(&mut dev, c, 2 << 20);
    assert_eq!(a.alloc_size, 2 << 20);
    let mut more = AllocMemoryArgs {
        size: 4096,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut more),
        Err(Errno::ENOMEM)
    );
    assert_eq!(
        dev.set_identity(1, 1 << 20).unwrap_err().errno,
        Errno::EBUSY
    );
    let mut fresh = device();
    assert_eq!(fresh.set_identity(0, 100).unwrap_err().errno, Errno::EINVAL);
}
