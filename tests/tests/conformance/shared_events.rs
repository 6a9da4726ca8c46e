//! Events shared between clients (issue 44, ABI 1.5 EXPORT_EVENT / IMPORT_EVENT), on every
//! backend: an importer's stream waits on the device for the value the exporter's stream
//! records (the hand-off of a cross-process pipeline, with no host round trip), its host
//! waits too, only the clients a grant names import, an import is never recorded, and the
//! exporter's destroy (and close) ends every wait on its imports with `ECANCELED`. One device
//! for the whole test (the mockd backend gives a test process at most 128 fresh devices).
#![forbid(unsafe_code)]

use std::time::Duration;

use davinci_shim::{task, DeviceMem, Errno, ExportTo, Features};
use davinci_tests::second_client;

use super::isolation::shared_pair;
use super::T;

#[test]
fn an_imported_event_orders_another_clients_stream_and_its_exporters_end_cancels_the_waits() {
    let (_shared, a, b) = shared_pair();
    assert!(a.features().contains(Features::SHARED_EVENTS));
    let (actx, bctx) = (a.create_context().unwrap(), b.create_context().unwrap());
    let ready = actx.create_event().unwrap();
    let token = ready.export(ExportTo::SameUser).unwrap();
    assert_eq!(
        ready.export(ExportTo::SameUser).unwrap(),
        token,
        "the same token"
    );
    let imp = bctx.import_event(token).unwrap();
    assert!(bctx.import_event(token).unwrap_err().is(Errno::EBUSY));
    assert!(
        actx.import_event(token).unwrap_err().is(Errno::EINVAL),
        "its own"
    );

    // A pipeline's hand-off: A fills a buffer and records item 1; B's stream waits for item
    // 1 on the device, then copies the buffer out (an import of A's memory).
    let shared = a.alloc(64 << 10).unwrap();
    let theirs = b
        .import(shared.export(ExportTo::SameUser).unwrap())
        .unwrap();
    let out = b.alloc(64 << 10).unwrap();
    let mut bs = bctx.create_stream().unwrap();
    bs.wait_imported(&imp, 1).unwrap();
    bs.submit(&task::copy(&out, &theirs).unwrap()).unwrap();
    // B's stream is held by the wait: its copy has not run.
    std::thread::sleep(Duration::from_millis(50));
    assert!(!imp.query_value(1).unwrap());
    assert_eq!(imp.value().unwrap(), 0);
    let mut as_ = actx.create_stream().unwrap();
    as_.submit(&task::fill(&shared, 0x5eed_5eed).unwrap())
        .unwrap();
    let r1 = ready.record(&mut as_).unwrap();
    assert_eq!(r1.value(), 1);
    bs.synchronize(T).unwrap();
    assert_eq!(
        out.read_vec::<u32>(0, 4).unwrap(),
        [0x5eed_5eed; 4],
        "after A's fill"
    );
    // B's host waits for the exporter's values too.
    imp.synchronize_value(1, T).unwrap();
    assert!(imp.query_value(1).unwrap() && !imp.query_value(2).unwrap());
    let e = imp
        .synchronize_value(2, Duration::from_millis(20))
        .unwrap_err();
    assert!(e.is(Errno::ETIMEDOUT), "{e}");
    // Item 2 from A's second record.
    ready.record(&mut as_).unwrap();
    imp.synchronize_value(2, T).unwrap();

    // Only the clients a grant names: to B's client id alone, another client of the user
    // gets what a token that never existed gets.
    let other = actx.create_event().unwrap();
    let c = second_client(&a).unwrap();
    let only_b = other
        .export(ExportTo::Client {
            uid: None,
            client_id: b.client_id().unwrap(),
        })
        .unwrap();
    let cctx = c.create_context().unwrap();
    assert!(cctx.import_event(only_b).unwrap_err().is(Errno::ENOENT));
    let b_other = bctx.import_event(only_b).unwrap();
    assert!(other
        .export(ExportTo::SameUser)
        .unwrap_err()
        .is(Errno::EBUSY));

    // The exporter's end: B's stream blocked on item 3 completes its wait with ECANCELED
    // and goes on; B's host waits are cancelled too, now and later.
    bs.wait_imported(&imp, 3).unwrap();
    bs.submit(&task::fill(&out, 7).unwrap()).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // (The event's handle goes with its last holder: A's queued records until reaped.)
    as_.synchronize(T).unwrap();
    drop(r1);
    drop(ready);
    let e = bs.synchronize(T).unwrap_err();
    assert!(e.is(Errno::ECANCELED), "the wait's completion: {e}");
    let e = imp.synchronize_value(3, T).unwrap_err();
    assert!(e.is(Errno::ECANCELED), "{e}");
    assert!(imp.value().unwrap_err().is(Errno::ECANCELED));
    // A's close (its last handle gone) does the same for the other export's import.
    drop((other, c, cctx, as_, shared, actx));
    drop(a);
    let e = b_other.synchronize_value(1, T).unwrap_err();
    assert!(e.is(Errno::ECANCELED), "after the exporter's close: {e}");
}
