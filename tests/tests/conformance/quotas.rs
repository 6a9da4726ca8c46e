//! Per-client quotas (issue 21, ABI 1.4): on a shared device GET_INFO says how many contexts,
//! streams, events and allocations one client may hold, and that is exactly what the device
//! lets it hold: one more is `ENOSPC` naming the quota, another tenant is not held back by
//! it, and giving objects back makes room again. Part of the conformance suite (embedded,
//! `davinci-mockd`, the kernel module in QEMU, whose quota comes from its module
//! parameters: tests/tests/kernel.rs checks they match).
#![forbid(unsafe_code)]

use davinci_shim::{Errno, Features};
use davinci_tests::control_of;

use super::isolation::shared_pair;

/// The refusal of one more object past a quota: `ENOSPC`, and the message says it is the
/// quota (not a full device).
fn assert_quota_refusal<T: std::fmt::Debug>(r: davinci_shim::Result<T>, what: &str) {
    let e = r.expect_err(&format!("one {what} past the quota"));
    assert_eq!(e.errno(), Some(Errno::ENOSPC), "{e}");
    assert!(
        e.message().contains("quota"),
        "the refusal of one {what} too many names the quota: {e}"
    );
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

    // Contexts: exactly the quota, then ENOSPC; A still gets one.
    let mut contexts = Vec::new();
    for i in 0..q.0 {
        contexts.push(
            b.create_context()
                .unwrap_or_else(|e| panic!("context {i} of a quota of {}: {e}", q.0)),
        );
    }
    assert_quota_refusal(b.create_context(), "context");
    let a_ctx = a
        .create_context()
        .expect("another tenant is not held back by B's quota");
    // Streams and events on B's first context, up to their quotas.
    let mut streams = Vec::new();
    for i in 0..q.1 {
        streams.push(
            contexts[0]
                .create_stream()
                .unwrap_or_else(|e| panic!("stream {i} of a quota of {}: {e}", q.1)),
        );
    }
    assert_quota_refusal(contexts[0].create_stream(), "stream");
    let mut events = Vec::new();
    for i in 0..q.2 {
        events.push(
            contexts[0]
                .create_event()
                .unwrap_or_else(|e| panic!("event {i} of a quota of {}: {e}", q.2)),
        );
    }
    assert_quota_refusal(contexts[0].create_event(), "event");
    let page = info.mem_align.max(4096) as usize;
    let mut allocations = Vec::new();
    for i in 0..q.3 {
        allocations.push(
            b.alloc(page)
                .unwrap_or_else(|e| panic!("allocation {i} of a quota of {}: {e}", q.3)),
        );
    }
    assert_quota_refusal(b.alloc(page), "allocation");
    // A is not held back by any of it.
    a_ctx.create_stream().expect("A's stream");
    a_ctx.create_event().expect("A's event");
    a.alloc(page).expect("A's allocation");

    // Giving one back makes room for one more.
    drop(streams.pop());
    drop(events.pop());
    drop(allocations.pop());
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
