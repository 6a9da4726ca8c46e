//! Per-client quotas (issue 21, ABI 1.4; issue 39, ABI 1.5): on a shared device GET_INFO and
//! GET_USAGE say how many contexts, streams, events, allocations and exports one client may
//! hold, and that is exactly what the device lets it hold: one more is `ENOSPC` whose text
//! carries the numbers (asked, held, quota) and the setting, another tenant is not held back
//! by it, and giving objects back makes room again; `Device::usage` tracks every create and
//! destroy and reads its limit at the refusal. Part of the conformance suite (embedded,
//! `davinci-mockd`, the kernel module in QEMU, whose quota comes from its module
//! parameters: tests/tests/kernel.rs checks they match).
#![forbid(unsafe_code)]

use davinci_shim::{Device, Errno, ExportTo, Features, Held};
use davinci_tests::{control_of, other_tenant};
use davinci_uapi::Wire;

use super::isolation::shared_pair;

/// The refusal of one more object past a quota: `ENOSPC`, and the text says it is the
/// quota (not a full device), with the numbers (one more asked, `quota` held, quota `quota`)
/// and the setting that changes it (the daemon's option, the module's parameter): the full
/// text from davinci-mockd and the embedded device, GET_LAST_ERROR's short form from the
/// kernel module.
fn assert_quota_refusal<T: std::fmt::Debug>(r: davinci_shim::Result<T>, kind: &str, quota: u32) {
    let e = r.expect_err(&format!("one of {kind} past the quota"));
    assert_eq!(e.errno(), Some(Errno::ENOSPC), "{e}");
    let text = e.message();
    for part in [
        format!("{kind} "),
        "quota".to_string(),
        "asked 1".to_string(),
        format!("holds {quota}, quota {quota}"),
        format!("--tenant-quota {kind}=N"),
        format!("quota_{kind}"),
    ] {
        assert!(
            text.contains(&part),
            "the refusal of one of {kind} too many says '{part}': {e}"
        );
    }
}

/// `usage().<kind>` of `dev`.
fn held(dev: &Device, kind: &str) -> Held<u32> {
    let u = dev.usage().expect("GET_USAGE");
    match kind {
        "contexts" => u.contexts,
        "streams" => u.streams,
        "events" => u.events,
        "allocations" => u.allocations,
        _ => u.exports,
    }
}

#[test]
fn a_shared_device_holds_a_client_to_the_quota_get_info_reports() {
    let (_shared, a, b) = shared_pair();
    let ctl = control_of(&a).expect("control open");
    let info = ctl.info().expect("GET_INFO");
    assert!(
        info.features.contains(Features::QUOTAS),
        "ABI 1.4: GET_INFO reports quotas"
    );
    let q = (
        info.quota_contexts,
        info.quota_streams,
        info.quota_events,
        info.quota_allocations,
    );
    assert!(
        (1..=info.max_contexts).contains(&q.0)
            && (1..=info.max_streams).contains(&q.1)
            && (1..=info.max_events).contains(&q.2)
            && (1..=info.max_allocations).contains(&q.3),
        "quotas {q:?} within the tables"
    );
    assert!(
        q.0 < info.max_contexts,
        "a shared device has a context quota below the table: {q:?}"
    );
    // B's own GET_INFO (it opened in shared mode) says the same.
    let bi = b.info();
    assert_eq!(
        (
            bi.quota_contexts,
            bi.quota_streams,
            bi.quota_events,
            bi.quota_allocations
        ),
        q
    );

    // GET_USAGE (ABI 1.5) says the same limits, and that B holds nothing yet.
    let u = b.usage().expect("GET_USAGE");
    assert!(b.info().features.contains(Features::USAGE));
    assert_eq!(
        (
            u.contexts,
            u.streams,
            u.events,
            u.allocations,
            u.memory.held
        ),
        (
            Held {
                held: 0,
                limit: q.0
            },
            Held {
                held: 0,
                limit: q.1
            },
            Held {
                held: 0,
                limit: q.2
            },
            Held {
                held: 0,
                limit: q.3
            },
            0
        )
    );
    assert_eq!(u.memory.limit, bi.client_memory_limit);
    assert_eq!(u.share_mode, Some(davinci_shim::ShareMode::Shared));
    assert_eq!(Some(u.client_id), b.client_id());

    // Contexts: exactly the quota, then ENOSPC; A still gets one.
    let mut contexts = Vec::new();
    for i in 0..q.0 {
        contexts.push(
            b.create_context()
                .unwrap_or_else(|e| panic!("context {i} of a quota of {}: {e}", q.0)),
        );
    }
    assert_eq!(held(&b, "contexts").held, q.0, "usage counts every context");
    assert_quota_refusal(b.create_context(), "contexts", q.0);
    // A, of B's tenant (this process's user), is held by the same quota...
    assert_quota_refusal(a.create_context(), "contexts", q.0);
    // ... another tenant is not.
    let other = other_tenant(&a, 9001);
    let a_ctx = other.as_ref().map(|o| {
        o.create_context()
            .expect("another tenant is not held back by B's quota")
    });
    // Streams and events on B's first context, up to their quotas.
    let mut streams = Vec::new();
    for i in 0..q.1 {
        streams.push(
            contexts[0]
                .create_stream()
                .unwrap_or_else(|e| panic!("stream {i} of a quota of {}: {e}", q.1)),
        );
    }
    assert_eq!(held(&b, "streams").held, q.1, "usage counts every stream");
    assert_quota_refusal(contexts[0].create_stream(), "streams", q.1);
    let mut events = Vec::new();
    for i in 0..q.2 {
        events.push(
            contexts[0]
                .create_event()
                .unwrap_or_else(|e| panic!("event {i} of a quota of {}: {e}", q.2)),
        );
    }
    assert_eq!(held(&b, "events").held, q.2, "usage counts every event");
    assert_quota_refusal(contexts[0].create_event(), "events", q.2);
    let page = info.mem_align.max(4096) as usize;
    let mut allocations = Vec::new();
    for i in 0..q.3 {
        allocations.push(
            b.alloc(page)
                .unwrap_or_else(|e| panic!("allocation {i} of a quota of {}: {e}", q.3)),
        );
    }
    assert_eq!(
        held(&b, "allocations").held,
        q.3,
        "usage counts every allocation"
    );
    assert_quota_refusal(b.alloc(page), "allocations", q.3);
    // Another tenant is not held back by any of it.
    if let (Some(o), Some(ctx)) = (&other, &a_ctx) {
        ctx.create_stream().expect("another tenant's stream");
        ctx.create_event().expect("another tenant's event");
        o.alloc(page).expect("another tenant's allocation");
    }

    // Giving one back makes room for one more, and usage says so.
    drop(streams.pop());
    drop(events.pop());
    drop(allocations.pop());
    let u = b.usage().expect("GET_USAGE");
    assert_eq!(
        (
            u.streams.room(),
            u.events.room(),
            u.allocations.room(),
            u.contexts.room()
        ),
        (1, 1, 1, 0)
    );
    contexts[0]
        .create_stream()
        .expect("a stream after giving one back");
    contexts[0]
        .create_event()
        .expect("an event after giving one back");
    b.alloc(page).expect("an allocation after giving one back");
    drop((streams, events, allocations));
    drop(contexts.pop());
    b.create_context().expect("a context after giving one back");
}

/// The memory limit: `usage()` says what B holds and may hold; an allocation past it is
/// `ENOMEM` with the bytes asked, held and the limit, and the setting; what is left fits.
#[test]
fn the_memory_limit_refusal_carries_the_numbers_usage_reports() {
    let (_shared, _a, b) = shared_pair();
    let page = u64::from(b.info().mem_align.max(4096));
    let first = b.alloc(page as usize).expect("an allocation");
    let u = b.usage().expect("GET_USAGE").memory;
    assert_eq!(u.held, page, "usage counts the allocation's bytes");
    assert!(u.limit > u.held && u.limit.is_multiple_of(page), "{u:?}");
    let over = u.room() + page;
    let e = b
        .alloc(over as usize)
        .expect_err("an allocation past the client's memory limit");
    assert_eq!(e.errno(), Some(Errno::ENOMEM), "{e}");
    let text = e.message();
    for part in [
        format!("asked {over}"),
        format!("holds {}", u.held),
        format!("limit {}", u.limit),
        "--tenant-memory-limit".to_string(),
        "memory_mb".to_string(),
    ] {
        assert!(text.contains(&part), "the refusal says '{part}': {e}");
    }
    assert_eq!(b.usage().expect("GET_USAGE").memory, u, "nothing was taken");
    drop(first);
    assert_eq!(b.usage().expect("GET_USAGE").memory.held, 0);
}

/// The export quota (16 by default, settable since ABI 1.5): usage reports it and counts
/// exports; one past it is `ENOSPC` with the numbers; freeing an exported allocation gives
/// its export back.
#[test]
fn the_export_quota_usage_reports_is_the_one_enforced() {
    let (_shared, _a, b) = shared_pair();
    if !b.info().features.contains(Features::SHARED_MEMORY) {
        return;
    }
    let page = b.info().mem_align.max(4096) as usize;
    let limit = held(&b, "exports").limit;
    assert!(limit >= 1, "an export quota of at least 1");
    let mut exported = Vec::new();
    for i in 0..limit {
        let buf = b.alloc(page).expect("an allocation to export");
        buf.export(ExportTo::SameUser)
            .unwrap_or_else(|e| panic!("export {i} of a quota of {limit}: {e}"));
        exported.push(buf);
    }
    assert_eq!(held(&b, "exports").held, limit, "usage counts every export");
    let one_more = b.alloc(page).expect("an allocation");
    assert_quota_refusal(one_more.export(ExportTo::SameUser), "exports", limit);
    drop(exported.pop());
    assert_eq!(held(&b, "exports").held, limit - 1);
    one_more
        .export(ExportTo::SameUser)
        .expect("an export after giving one back");
}

/// TENANT_SHARE (ABI 1.5): an admin makes a tenant count for two of the device's tenant
/// slots, and (where this process can be another tenant: the embedded device) that tenant
/// then holds two shares, kept for it; anyone else is refused `EPERM`, and a tenant spelled
/// wrong or more slots than the device has are `EINVAL`. The tenant named is not this
/// process's, so the suite's other tests keep their quotas.
#[test]
fn an_admin_sets_how_many_slots_a_tenant_counts_for() {
    let (_shared, a, _b) = shared_pair();
    let ctl = control_of(&a).expect("control open");
    let info = ctl.info().expect("GET_INFO");
    assert!(info.features.contains(Features::TENANT_SHARE), "ABI 1.5");
    let tenant = "user:9102";
    let r = ctl.tenant_share(tenant, None).expect("TENANT_SHARE read");
    assert_eq!((r.shares, r.tenant_flags), (1, 0), "no setting, no open");
    let slots = r.slots;
    assert!(slots >= 2, "a device with {slots} tenant slots");
    let r = ctl.tenant_share(tenant, Some(2)).expect("TENANT_SHARE set");
    assert_eq!(r.shares, 2);
    assert_eq!(
        ctl.tenant_share(tenant, None).unwrap().shares,
        2,
        "the setting stays"
    );
    for (name, set) in [
        ("user:abc", None),
        ("group:5", None),
        (tenant, Some(slots + 1)),
    ] {
        let e = ctl.tenant_share(name, set).expect_err(name);
        assert_eq!(e.errno(), Some(Errno::EINVAL), "{name}: {e}");
    }
    if let Some(o) = other_tenant(&a, 9102) {
        let u = o.usage().expect("GET_USAGE");
        assert!(u.slotted, "the tenant holds its two slots");
        assert_eq!(u.contexts.limit, 2 * info.quota_contexts, "two shares");
        let contexts: Vec<_> = (0..2 * info.quota_contexts)
            .map(|i| {
                o.create_context()
                    .unwrap_or_else(|e| panic!("context {i}: {e}"))
            })
            .collect();
        assert_eq!(o.create_context().unwrap_err().errno(), Some(Errno::ENOSPC));
        // The tenant itself may not change its setting.
        let mut arg = vec![0u8; davinci_uapi::TenantShareArgs::SIZE];
        davinci_uapi::TenantShareArgs::named(tenant)
            .unwrap()
            .set(4)
            .encode(&mut arg);
        let e = o
            .raw_ioctl(davinci_uapi::DRIVER_CMD_TENANT_SHARE, &mut arg)
            .expect_err("a tenant's own TENANT_SHARE");
        assert_eq!(e.errno(), Some(Errno::EPERM), "{e}");
        drop(contexts);
    }
    assert_eq!(ctl.tenant_share(tenant, Some(1)).unwrap().shares, 1);
}
