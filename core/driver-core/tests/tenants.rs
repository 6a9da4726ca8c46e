//! Tenants (docs/security.md): the quotas bind a tenant (a container, else a user), not an
//! open; a device's tenant slots each keep a whole share for their tenant however many opens
//! and uids the others use; GET_USAGE and LIST_CLIENTS say who the tenant is and what it
//! holds.

mod support;

use davinci_driver_core::{DeviceCore, Quota, Role, DEFAULT_TENANT_SLOTS};
use davinci_uapi::*;
use support::*;

type Dev = DeviceCore<HeapPlatform>;

fn usage(dev: &mut Dev, c: u32) -> Usage {
    let mut u = Usage::default();
    call(dev, c, DRIVER_CMD_GET_USAGE, &mut u).unwrap();
    u
}

fn shared(dev: &mut Dev) -> u32 {
    let root = dev.open(params(1, 0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    root
}

fn try_ctx(dev: &mut Dev, c: u32) -> Result<u32, Errno> {
    let mut a = CreateContextArgs::default();
    call(dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut a).map(|_| a.handle)
}

fn try_alloc(dev: &mut Dev, c: u32, size: u64) -> Result<AllocMemoryArgs, Errno> {
    let mut a = AllocMemoryArgs {
        size,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a).map(|_| a)
}

/// Every context `clients` can create between them, round robin.
fn fill_contexts(dev: &mut Dev, clients: &[u32]) -> u32 {
    let mut made = 0;
    let mut stuck = 0;
    let mut i = 0;
    while stuck < clients.len() {
        match try_ctx(dev, clients[i % clients.len()]) {
            Ok(_) => {
                made += 1;
                stuck = 0;
            }
            Err(e) => {
                assert_eq!(e, Errno::ENOSPC);
                stuck += 1;
            }
        }
        i += 1;
    }
    made
}

#[test]
fn one_user_with_many_opens_holds_one_share_and_the_next_tenant_gets_its_own() {
    let mut dev = device();
    shared(&mut dev);
    let share = Quota::FAIR.contexts;
    // uid 2001 with 5 opens: one share between them, not five.
    let opens: Vec<u32> = (0..5)
        .map(|k| dev.open(params(100 + k, 2001, Role::Client)).unwrap())
        .collect();
    assert_eq!(fill_contexts(&mut dev, &opens), share);
    let mem_share = dev.info().client_memory_limit;
    let mut held = 0;
    for &c in &opens {
        while let Ok(a) = try_alloc(&mut dev, c, 1 << 20) {
            held += a.alloc_size;
        }
    }
    assert_eq!(held, mem_share, "the tenant's memory, over all its opens");
    let u = usage(&mut dev, opens[4]);
    assert_eq!((u.tenant_contexts, u.quota_contexts), (share, share));
    assert_eq!((u.tenant_memory_bytes, u.memory_limit), (held, mem_share));
    assert_eq!(u.tenant_flags, TENANT_USER | TENANT_SLOTTED);
    // Another user: a context and its whole share of memory.
    let v = dev.open(params(300, 2002, Role::Client)).unwrap();
    try_ctx(&mut dev, v).unwrap();
    let a = try_alloc(&mut dev, v, mem_share).unwrap();
    assert_eq!(a.alloc_size, mem_share);
    // LIST_CLIENTS says what each tenant is.
    assert!(dev.clients().all(|c| c.tenant_kind == TENANT_USER));
}

#[test]
fn a_container_is_one_tenant_whatever_uids_it_runs_as() {
    let mut dev = device();
    shared(&mut dev);
    let id = "3f1c2b8e9a7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170615e4d3";
    // A rootless container's subordinate uids: one tenant.
    let opens: Vec<u32> = (0..4)
        .map(|k| {
            dev.open(params_in(100 + k, 100_000 + k, Role::Client, id))
                .unwrap()
        })
        .collect();
    assert_eq!(fill_contexts(&mut dev, &opens), Quota::FAIR.contexts);
    let u = usage(&mut dev, opens[0]);
    assert_eq!(u.tenant_flags, TENANT_CONTAINER | TENANT_SLOTTED);
    assert!(dev
        .clients()
        .all(|c| c.tenant_kind == TENANT_CONTAINER && c.container_id() == Some(id)));
    // The same uid outside the container is another tenant.
    let host = dev.open(params(200, 100_000, Role::Client)).unwrap();
    try_ctx(&mut dev, host).unwrap();
}

#[test]
fn each_slot_keeps_a_whole_share_and_a_tenant_beyond_the_slots_waits_for_one() {
    let mut dev = device();
    shared(&mut dev);
    let slots = DEFAULT_TENANT_SLOTS;
    // An admin's client takes no slot.
    let admin = dev.open(params(2, 0, Role::Client)).unwrap();
    try_ctx(&mut dev, admin).unwrap();
    let tenants: Vec<u32> = (0..slots)
        .map(|k| dev.open(params(100 + k, 3000 + k, Role::Client)).unwrap())
        .collect();
    // One more tenant opens, but every slot is taken and their shares are kept: it gets
    // nothing.
    let late = dev.open(params(200, 4000, Role::Client)).unwrap();
    assert_eq!(usage(&mut dev, late).tenant_flags, TENANT_USER);
    let mut a = CreateContextArgs::default();
    call(&mut dev, late, DRIVER_CMD_CREATE_CONTEXT, &mut a).unwrap_err();
    let mut e = LastError::default();
    call(&mut dev, late, DRIVER_CMD_GET_LAST_ERROR, &mut e).unwrap();
    assert!(
        e.message_str()
            .starts_with("contexts quota (shared): asked 1, holds 0, quota 0"),
        "{}",
        e.message_str()
    );
    assert_eq!(try_alloc(&mut dev, late, 4096).unwrap_err(), Errno::ENOSPC);
    // The tenants that hold the slots still open more.
    let second = dev.open(params(101, 3000, Role::Client)).unwrap();
    // uid 3000 closes one open: it keeps its slot while it has another.
    dev.close(tenants[0]);
    assert_eq!(try_ctx(&mut dev, late), Err(Errno::ENOSPC));
    // Its last open closes: its slot is the waiting tenant's, with a whole share.
    dev.close(second);
    assert_eq!(
        usage(&mut dev, late).tenant_flags,
        TENANT_USER | TENANT_SLOTTED
    );
    assert_eq!(fill_contexts(&mut dev, &[late]), Quota::FAIR.contexts);
}

#[test]
fn without_a_slot_a_tenant_takes_only_what_the_slotted_ones_leave() {
    let mut dev = device();
    // Two slots, and shares smaller than half a table: a quarter of the contexts is spare.
    dev.set_tenant_slots(2).unwrap();
    dev.set_quota(Quota {
        contexts: 96,
        ..Quota::for_slots(2)
    })
    .unwrap();
    shared(&mut dev);
    let a = dev.open(params(10, 5001, Role::Client)).unwrap();
    let b = dev.open(params(20, 5002, Role::Client)).unwrap();
    // A third tenant opens (the opens are not all kept) but has no slot.
    let c = dev.open(params(30, 5003, Role::Client)).unwrap();
    assert_eq!(usage(&mut dev, c).tenant_flags & TENANT_SLOTTED, 0);
    // It takes the 64 contexts beyond the two kept shares, however the slotted ones stand...
    assert_eq!(fill_contexts(&mut dev, &[c]), 256 - 2 * 96);
    assert_eq!(usage(&mut dev, c).quota_contexts, 64);
    // ... and the slotted tenants still get their whole shares.
    assert_eq!(fill_contexts(&mut dev, &[a]), 96);
    assert_eq!(fill_contexts(&mut dev, &[b]), 96);
    // B leaves: its slot goes to C, which may now grow to a share.
    dev.close(b);
    let u = usage(&mut dev, c);
    assert_eq!(u.tenant_flags & TENANT_SLOTTED, TENANT_SLOTTED);
    assert_eq!(fill_contexts(&mut dev, &[c]), 96 - 64);
}

#[test]
fn an_exclusive_device_has_no_tenant_shares() {
    let mut dev = device();
    let a = dev.open(params(10, 6001, Role::Client)).unwrap();
    assert_eq!(fill_contexts(&mut dev, &[a]), 256);
    let u = usage(&mut dev, a);
    assert_eq!((u.tenant_contexts, u.quota_contexts), (256, 256));
}

#[test]
fn tenant_slots_are_a_setting_before_the_first_open() {
    let mut dev = device();
    assert_eq!(dev.set_tenant_slots(0).unwrap_err().errno, Errno::EINVAL);
    assert_eq!(dev.set_tenant_slots(65).unwrap_err().errno, Errno::EINVAL);
    dev.set_tenant_slots(8).unwrap();
    assert_eq!(dev.tenant_slots(), 8);
    dev.open(params(10, 6001, Role::Client)).unwrap();
    assert_eq!(dev.set_tenant_slots(4).unwrap_err().errno, Errno::EBUSY);
}

/// TENANT_SHARE through the ioctl, as an admin's tool calls it.
fn tenant_share(
    dev: &mut Dev,
    admin: u32,
    tenant: &str,
    set: Option<u32>,
) -> Result<TenantShareArgs, Errno> {
    let mut a = TenantShareArgs::named(tenant).unwrap();
    if let Some(n) = set {
        a = a.set(n);
    }
    call(dev, admin, DRIVER_CMD_TENANT_SHARE, &mut a).map(|_| a)
}

#[test]
fn a_tenant_set_to_two_shares_holds_two_slots_and_twice_the_share() {
    let mut dev = device();
    let root = shared(&mut dev);
    assert!(dev.info().features.contains(Features::TENANT_SHARE));
    // Set before the tenant opens: the setting waits for it.
    let r = tenant_share(&mut dev, root, "user:7001", Some(2)).unwrap();
    assert_eq!(
        (r.shares, r.slots, r.free_slots, r.tenant_flags),
        (2, 4, 4, 0)
    );
    let big = dev.open(params(10, 7001, Role::Client)).unwrap();
    let u = usage(&mut dev, big);
    assert_eq!(u.tenant_flags, TENANT_USER | TENANT_SLOTTED);
    assert_eq!(u.quota_contexts, 2 * Quota::FAIR.contexts);
    assert_eq!(
        u.memory_limit,
        2 * (8 << 20),
        "two shares of the configured 8 MiB"
    );
    let r = tenant_share(&mut dev, root, "user:7001", None).unwrap();
    assert_eq!((r.shares, r.free_slots), (2, 2));
    // Two more tenants take the last two slots; a fourth has none and gets nothing, since
    // every context not held is kept for the slotted ones.
    let b = dev.open(params(20, 7002, Role::Client)).unwrap();
    let c = dev.open(params(30, 7003, Role::Client)).unwrap();
    let late = dev.open(params(40, 7004, Role::Client)).unwrap();
    assert_eq!(usage(&mut dev, late).tenant_flags & TENANT_SLOTTED, 0);
    assert_eq!(fill_contexts(&mut dev, &[late]), 0);
    assert_eq!(fill_contexts(&mut dev, &[big]), 2 * Quota::FAIR.contexts);
    assert_eq!(fill_contexts(&mut dev, &[b]), Quota::FAIR.contexts);
    assert_eq!(fill_contexts(&mut dev, &[c]), Quota::FAIR.contexts);
    // The big tenant leaves: both its slots are free, and the waiting tenant takes one.
    dev.close(big);
    assert_eq!(
        usage(&mut dev, late).tenant_flags & TENANT_SLOTTED,
        TENANT_SLOTTED
    );
    let r = tenant_share(&mut dev, root, "user:7001", None).unwrap();
    assert_eq!((r.shares, r.free_slots, r.tenant_flags), (2, 1, 0));
}

#[test]
fn growing_a_slotted_tenant_needs_free_slots_and_shrinking_keeps_what_it_holds() {
    let mut dev = device();
    let root = shared(&mut dev);
    let a = dev.open(params(10, 7101, Role::Client)).unwrap();
    let b = dev.open(params(20, 7102, Role::Client)).unwrap();
    let c = dev.open(params(30, 7103, Role::Client)).unwrap();
    assert_eq!(fill_contexts(&mut dev, &[a]), Quota::FAIR.contexts);
    // One slot is free: A may grow to 2, not to 3 (EBUSY, nothing changes).
    assert_eq!(
        tenant_share(&mut dev, root, "user:7101", Some(3)).unwrap_err(),
        Errno::EBUSY
    );
    assert_eq!(
        tenant_share(&mut dev, root, "user:7101", None)
            .unwrap()
            .shares,
        1
    );
    let r = tenant_share(&mut dev, root, "user:7101", Some(2)).unwrap();
    assert_eq!((r.shares, r.free_slots), (2, 0));
    assert_eq!(fill_contexts(&mut dev, &[a]), Quota::FAIR.contexts);
    // A fourth tenant waits; A set back to 1 keeps its contexts but frees a slot for it.
    let d = dev.open(params(40, 7104, Role::Client)).unwrap();
    assert_eq!(usage(&mut dev, d).tenant_flags & TENANT_SLOTTED, 0);
    tenant_share(&mut dev, root, "user:7101", Some(1)).unwrap();
    assert_eq!(
        usage(&mut dev, d).tenant_flags & TENANT_SLOTTED,
        TENANT_SLOTTED
    );
    let u = usage(&mut dev, a);
    assert_eq!(
        (u.tenant_contexts, u.quota_contexts),
        (2 * Quota::FAIR.contexts, Quota::FAIR.contexts)
    );
    assert_eq!(try_ctx(&mut dev, a), Err(Errno::ENOSPC));
    // B and C still get their shares, D too (A's excess came out of the slot A held then).
    assert_eq!(fill_contexts(&mut dev, &[b]), Quota::FAIR.contexts);
    assert_eq!(fill_contexts(&mut dev, &[c]), Quota::FAIR.contexts);
    assert_eq!(
        fill_contexts(&mut dev, &[d]),
        0,
        "the table is full: A holds its old share"
    );
}

#[test]
fn a_tenant_set_to_zero_never_holds_a_slot_and_takes_only_the_spare() {
    let mut dev = device();
    let root = shared(&mut dev);
    let batch = dev
        .open(params_in(10, 7201, Role::Client, "batchjob"))
        .unwrap();
    assert_eq!(
        usage(&mut dev, batch).tenant_flags,
        TENANT_CONTAINER | TENANT_SLOTTED
    );
    // Set to 0 while it holds its slot: it gives the slot up at once.
    let r = tenant_share(&mut dev, root, "container:batchjob", Some(0)).unwrap();
    assert_eq!(
        (r.shares, r.free_slots, r.tenant_flags),
        (0, 4, TENANT_CONTAINER)
    );
    // With every slot free, every slot's share is kept: nothing is spare.
    assert_eq!(fill_contexts(&mut dev, &[batch]), 0);
    // Shares smaller than the table: the rest is spare and the batch tenant takes it.
    let mut dev = device();
    dev.set_quota(Quota {
        contexts: 32,
        ..Quota::FAIR
    })
    .unwrap();
    let root = shared(&mut dev);
    tenant_share(&mut dev, root, "container:batchjob", Some(0)).unwrap();
    let batch = dev
        .open(params_in(10, 7201, Role::Client, "batchjob"))
        .unwrap();
    assert_eq!(usage(&mut dev, batch).tenant_flags, TENANT_CONTAINER);
    assert_eq!(
        fill_contexts(&mut dev, &[batch]),
        32,
        "one slot's share at most"
    );
    let others: Vec<u32> = (0..4)
        .map(|k| dev.open(params(20 + k, 7300 + k, Role::Client)).unwrap())
        .collect();
    for &o in &others {
        assert_eq!(
            usage(&mut dev, o).tenant_flags & TENANT_SLOTTED,
            TENANT_SLOTTED
        );
        assert_eq!(fill_contexts(&mut dev, &[o]), 32);
    }
}

#[test]
fn tenant_share_is_an_admins_and_checks_every_field() {
    let mut dev = device();
    let root = shared(&mut dev);
    let user = dev.open(params(10, 7401, Role::Client)).unwrap();
    assert_eq!(
        tenant_share(&mut dev, user, "user:7401", Some(4)).unwrap_err(),
        Errno::EPERM
    );
    assert_eq!(
        tenant_share(&mut dev, user, "user:7401", None).unwrap_err(),
        Errno::EPERM
    );
    assert_eq!(
        tenant_share(&mut dev, root, "user:7401", Some(5)).unwrap_err(),
        Errno::EINVAL
    );
    let bad = [
        TenantShareArgs {
            tenant_kind: 3,
            ..Default::default()
        },
        TenantShareArgs {
            tenant_kind: TENANT_CONTAINER,
            ..Default::default()
        },
        TenantShareArgs {
            reserved: 1,
            ..TenantShareArgs::named("user:1").unwrap()
        },
        TenantShareArgs {
            set: 2,
            ..TenantShareArgs::named("user:1").unwrap()
        },
        TenantShareArgs {
            shares: 2,
            ..TenantShareArgs::named("user:1").unwrap()
        },
        TenantShareArgs {
            uid: 5,
            ..TenantShareArgs::named("container:x").unwrap()
        },
    ];
    for mut a in bad {
        let before = a;
        assert_eq!(
            call(&mut dev, root, DRIVER_CMD_TENANT_SHARE, &mut a).unwrap_err(),
            Errno::EINVAL,
            "{before:?}"
        );
    }
    let mut a = TenantShareArgs::named("user:1").unwrap();
    a.container[3] = b'x';
    assert_eq!(
        call(&mut dev, root, DRIVER_CMD_TENANT_SHARE, &mut a).unwrap_err(),
        Errno::EINVAL
    );
    // The settings are bounded: 64 tenants other than 1, then ENOSPC; setting one back to 1
    // makes room.
    for uid in 0..64 {
        tenant_share(&mut dev, root, &format!("user:{}", 9000 + uid), Some(2)).unwrap();
    }
    assert_eq!(
        tenant_share(&mut dev, root, "user:9999", Some(2)).unwrap_err(),
        Errno::ENOSPC
    );
    tenant_share(&mut dev, root, "user:9000", Some(1)).unwrap();
    tenant_share(&mut dev, root, "user:9999", Some(2)).unwrap();
    assert_eq!(
        TenantShareArgs::named("uid:5").unwrap_err(),
        "a tenant is user:UID or container:ID"
    );
}
