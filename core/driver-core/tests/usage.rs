//! GET_USAGE (ABI 1.5): a client's own usage against each of its limits, tracking creates
//! and destroys, matching the point where a quota refuses; the export quota settable; every
//! quota refusal's text (GET_LAST_ERROR) with its numbers.

mod support;

use davinci_driver_core::{Quota, Role};
use davinci_uapi::*;
use support::*;

type Dev = davinci_driver_core::DeviceCore<HeapPlatform>;

fn usage(dev: &mut Dev, c: u32) -> Usage {
    let mut u = Usage::default();
    call(dev, c, DRIVER_CMD_GET_USAGE, &mut u).unwrap();
    u
}

fn last_error(dev: &mut Dev, c: u32) -> String {
    let mut e = LastError::default();
    call(dev, c, DRIVER_CMD_GET_LAST_ERROR, &mut e).unwrap();
    e.message_str().to_string()
}

fn export(dev: &mut Dev, c: u32, handle: u32) -> Result<u64, Errno> {
    let mut a = ExportMemoryArgs {
        handle,
        uid: EXPORT_OWN_UID,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_EXPORT_MEMORY, &mut a).map(|_| a.token)
}

#[test]
fn usage_tracks_creates_and_destroys_and_the_quota_in_force() {
    let mut dev = device();
    assert!(dev.info().features.contains(Features::USAGE));
    let a = dev.open(params(10, 1000, Role::Client)).unwrap();
    // Exclusive: every table whole, the operator's limit (8 MiB) for memory.
    let u = usage(&mut dev, a);
    assert_eq!(
        (u.contexts, u.streams, u.events, u.allocations, u.exports),
        (0, 0, 0, 0, 0)
    );
    let n = Quota::NONE;
    assert_eq!(
        (
            u.quota_contexts,
            u.quota_streams,
            u.quota_events,
            u.quota_allocations,
            u.quota_exports
        ),
        (n.contexts, n.streams, n.events, n.allocations, n.exports)
    );
    assert_eq!(
        (u.memory_bytes, u.memory_limit, u.share_mode),
        (0, 8 << 20, 0)
    );
    assert_eq!(u.client_id, dev.info_for(a).caller_id);
    let k = ctx(&mut dev, a);
    let _s = stream(&mut dev, a, k, 8, 8);
    let e = event(&mut dev, a, k);
    let m = alloc(&mut dev, a, 5000);
    export(&mut dev, a, m.handle).unwrap();
    let u = usage(&mut dev, a);
    assert_eq!(
        (u.contexts, u.streams, u.events, u.allocations, u.exports),
        (1, 1, 1, 1, 1)
    );
    assert_eq!(u.memory_bytes, m.alloc_size);
    call(
        &mut dev,
        a,
        DRIVER_CMD_DESTROY_EVENT,
        &mut HandleArgs { handle: e, pad: 0 },
    )
    .unwrap();
    call(
        &mut dev,
        a,
        DRIVER_CMD_FREE_MEMORY,
        &mut HandleArgs {
            handle: m.handle,
            pad: 0,
        },
    )
    .unwrap();
    let u = usage(&mut dev, a);
    assert_eq!(
        (u.events, u.allocations, u.exports, u.memory_bytes),
        (0, 0, 0, 0)
    );
    // A control open holds nothing: GET_USAGE is a client's.
    let root = dev.open(params(1, 0, Role::Control)).unwrap();
    let mut x = Usage::default();
    assert_eq!(
        call(&mut dev, root, DRIVER_CMD_GET_USAGE, &mut x),
        Err(Errno::EPERM)
    );
    // Shared: the configured quota.
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    let u = usage(&mut dev, a);
    let f = Quota::FAIR;
    assert_eq!(
        (u.quota_contexts, u.quota_exports, u.share_mode),
        (f.contexts, f.exports, 1)
    );
}

#[test]
fn the_export_quota_is_settable_and_its_refusal_carries_the_numbers() {
    let mut dev = davinci_driver_core::test_util::device_with(MEM, 0);
    dev.set_quota(Quota {
        exports: 3,
        ..Quota::FAIR
    })
    .unwrap();
    let (_root, a, _b) = shared_pair(&mut dev);
    for i in 0..3 {
        let m = alloc(&mut dev, a, 4096);
        export(&mut dev, a, m.handle).unwrap_or_else(|e| panic!("export {i}: {e:?}"));
    }
    let u = usage(&mut dev, a);
    assert_eq!((u.exports, u.quota_exports), (3, 3));
    let m = alloc(&mut dev, a, 4096);
    assert_eq!(export(&mut dev, a, m.handle), Err(Errno::ENOSPC));
    assert_eq!(
        last_error(&mut dev, a),
        "exports quota (shared): asked 1, holds 3, quota 3; --tenant-quota exports=N, \
         quota_exports"
    );
    // The full text (what davinci-mockd sends) says the rule and the setting in words.
    let mut b = vec![0u8; ExportMemoryArgs::SIZE];
    ExportMemoryArgs {
        handle: m.handle,
        uid: EXPORT_OWN_UID,
        ..Default::default()
    }
    .encode(&mut b);
    let e = dev
        .ioctl(
            a,
            DRIVER_CMD_EXPORT_MEMORY,
            &mut b,
            &mut davinci_driver_core::NoUserMem,
        )
        .unwrap_err();
    assert_eq!(
        e.message().as_str(),
        "this tenant (the client's container, else its user) holds its share of exports on a \
         shared device (free an exported allocation first): asked 1 more, the tenant holds 3, \
         quota 3 (davinci-mockd --tenant-quota exports=N or --tenant-slots N, or the kernel \
         module's quota_exports or tenant_slots parameter)"
    );
}

#[test]
fn the_memory_limit_refusal_carries_the_numbers() {
    let mut dev = device();
    let (_root, a, _b) = shared_pair(&mut dev);
    let m = alloc(&mut dev, a, 6 << 20);
    let mut big = AllocMemoryArgs {
        size: 3 << 20,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_ALLOC_MEMORY, &mut big),
        Err(Errno::ENOMEM)
    );
    let u = usage(&mut dev, a);
    assert_eq!((u.memory_bytes, u.memory_limit), (m.alloc_size, 8 << 20));
    assert_eq!(
        last_error(&mut dev, a),
        format!(
            "memory limit: asked {}, holds {}, limit {} B; --tenant-memory-limit, \
             memory_mb/slots",
            3 << 20,
            m.alloc_size,
            8 << 20
        )
    );
    // What is left fits exactly.
    big.size = u.memory_limit - u.memory_bytes;
    call(&mut dev, a, DRIVER_CMD_ALLOC_MEMORY, &mut big).unwrap();
    assert_eq!(usage(&mut dev, a).memory_bytes, u.memory_limit);
}
