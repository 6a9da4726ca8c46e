//! EXPORT_EVENT and IMPORT_EVENT (ABI 1.5) in driver-core: who may import, an importer's
//! stream waits on the device for the exporter's record and its host wait sees the value,
//! the importer's client is woken by the record, an import cannot be recorded, and the
//! exporter's destroy or close cancels every wait on its imports, now and later.

mod support;

use davinci_driver_core::test_util::HeapPlatform;
use davinci_driver_core::{DeviceCore, Reply, Role, Run, MAX_IMPORTERS};
use davinci_uapi::*;
use support::*;

type Dev = DeviceCore<HeapPlatform>;

fn export(dev: &mut Dev, c: u32, handle: u32, uid: u32, client_id: u32) -> Result<u64, Errno> {
    let mut a = ExportEventArgs {
        handle,
        uid,
        client: client_id,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_EXPORT_EVENT, &mut a).map(|_| a.token)
}

fn import(dev: &mut Dev, c: u32, ctx: u32, token: u64) -> Result<u32, Errno> {
    let mut a = ImportEventArgs {
        token,
        ctx,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_IMPORT_EVENT, &mut a).map(|_| a.handle)
}

fn destroy(dev: &mut Dev, c: u32, handle: u32) -> Result<(), Errno> {
    let mut h = HandleArgs { handle, pad: 0 };
    call(dev, c, DRIVER_CMD_DESTROY_EVENT, &mut h).map(|_| ())
}

fn notified(dev: &Dev) -> Vec<u32> {
    std::mem::take(&mut *dev.platform().notified.lock().unwrap())
}

#[test]
fn an_importers_stream_waits_on_the_device_for_the_exporters_record() {
    let mut dev = device();
    let (_root, a, _b) = shared_pair(&mut dev);
    let a2 = dev.open(params(11, 1000, Role::Client)).unwrap();
    let (ka, kb) = (ctx(&mut dev, a), ctx(&mut dev, a2));
    let ev = event(&mut dev, a, ka);
    let token = export(&mut dev, a, ev, EXPORT_OWN_UID, 0).unwrap();
    assert_eq!(
        export(&mut dev, a, ev, EXPORT_OWN_UID, 0),
        Ok(token),
        "the same token"
    );
    let imp = import(&mut dev, a2, kb, token).unwrap();
    assert_ne!(imp, ev);
    assert!(dev.info().features.contains(Features::SHARED_EVENTS));

    // a2's stream waits for value 3, then runs a NOP.
    let mut w = stream(&mut dev, a2, kb, 16, 16);
    w.prod.push(&TaskDesc::event_wait(1, imp, 3)).unwrap();
    w.prod.push(&TaskDesc::nop(2)).unwrap();
    w.prod.publish();
    assert!(matches!(dev.run_stream(w.handle, 64), Run::Blocked { .. }));
    assert!(drain(&mut w).is_empty());
    // Its host's wait sees the value so far and would block.
    assert!(matches!(
        wait_event_now(&mut dev, a2, imp, 3).0,
        Err(Errno::EAGAIN)
    ));

    // a records 3: a2's client is woken, its stream goes on, its host wait is satisfied.
    let mut r = stream(&mut dev, a, ka, 16, 16);
    r.prod.push(&TaskDesc::event_record(9, ev, 3)).unwrap();
    r.prod.publish();
    notified(&dev);
    assert_eq!(dev.run_stream(r.handle, 64), Run::Progress(1));
    assert!(
        notified(&dev).contains(&a2),
        "the importer's client is woken"
    );
    assert_eq!(dev.run_stream(w.handle, 64), Run::Progress(2));
    let done = drain(&mut w);
    assert!(done.iter().all(|r| r.status == 0), "{done:?}");
    assert_eq!(done[0].result, 3);
    assert!(matches!(
        wait_event_now(&mut dev, a2, imp, 3).0,
        Ok(Reply::Done)
    ));

    // An import is waited for, never recorded.
    w.prod.push(&TaskDesc::event_record(3, imp, 5)).unwrap();
    w.prod.publish();
    let _ = dev.run_stream(w.handle, 64);
    let rec = drain(&mut w);
    assert_eq!(rec[0].status, -Errno::EPERM.code(), "{rec:?}");
}

#[test]
fn grants_are_explicit_and_imports_are_bounded() {
    let mut dev = device();
    let (_root, a, b) = shared_pair(&mut dev);
    let ka = ctx(&mut dev, a);
    let kb = ctx(&mut dev, b);
    let ev = event(&mut dev, a, ka);
    // To a's own user: b (another uid) gets what a token that never existed gets.
    let token = export(&mut dev, a, ev, EXPORT_OWN_UID, 0).unwrap();
    assert_eq!(import(&mut dev, b, kb, token), Err(Errno::ENOENT));
    assert_eq!(
        import(&mut dev, b, kb, token ^ (1 << 40)),
        Err(Errno::ENOENT)
    );
    // The exporter itself, and a second grant, are refused with why.
    assert_eq!(import(&mut dev, a, ka, token), Err(Errno::EINVAL));
    assert_eq!(export(&mut dev, a, ev, 1001, 0), Err(Errno::EBUSY));
    // A memory token is no event token.
    let m = alloc(&mut dev, a, 4096);
    let mut e = ExportMemoryArgs {
        handle: m.handle,
        uid: 1001,
        ..Default::default()
    };
    call(&mut dev, a, DRIVER_CMD_EXPORT_MEMORY, &mut e).unwrap();
    assert_eq!(import(&mut dev, b, kb, e.token), Err(Errno::ENOENT));
    // Granted to b's user: b imports once; again is EBUSY; flags must be 0.
    let ev2 = event(&mut dev, a, ka);
    let t2 = export(&mut dev, a, ev2, 1001, 0).unwrap();
    let mut bad = ImportEventArgs {
        token: t2,
        ctx: kb,
        flags: 1,
        ..Default::default()
    };
    assert!(call(&mut dev, b, DRIVER_CMD_IMPORT_EVENT, &mut bad).is_err());
    let i = import(&mut dev, b, kb, t2).unwrap();
    assert_eq!(import(&mut dev, b, kb, t2), Err(Errno::EBUSY));
    // An import cannot be exported again, nor imported into a context that is not the
    // caller's.
    assert_eq!(
        export(&mut dev, b, i, EXPORT_OWN_UID, 0),
        Err(Errno::EINVAL)
    );
    destroy(&mut dev, b, i).unwrap();
    assert_eq!(
        import(&mut dev, b, ka, t2),
        Err(Errno::ENOENT),
        "a's context"
    );
    // At most MAX_IMPORTERS imports of one export.
    let mut importers = Vec::new();
    for k in 0..MAX_IMPORTERS as u32 {
        let c = dev.open(params(100 + k, 1001, Role::Client)).unwrap();
        let kc = ctx(&mut dev, c);
        importers.push(import(&mut dev, c, kc, t2).unwrap());
    }
    let c = dev.open(params(200, 1001, Role::Client)).unwrap();
    let kc = ctx(&mut dev, c);
    assert_eq!(import(&mut dev, c, kc, t2), Err(Errno::ENOSPC));
}

#[test]
fn the_exporters_destroy_and_close_cancel_every_wait_on_its_imports() {
    for close in [false, true] {
        let mut dev = device();
        let (_root, a, _b) = shared_pair(&mut dev);
        let a2 = dev.open(params(11, 1000, Role::Client)).unwrap();
        let (ka, kb) = (ctx(&mut dev, a), ctx(&mut dev, a2));
        let ev = event(&mut dev, a, ka);
        let token = export(&mut dev, a, ev, EXPORT_OWN_UID, 0).unwrap();
        let imp = import(&mut dev, a2, kb, token).unwrap();
        let mut w = stream(&mut dev, a2, kb, 16, 16);
        w.prod.push(&TaskDesc::event_wait(1, imp, 1)).unwrap();
        w.prod.push(&TaskDesc::nop(2)).unwrap();
        w.prod.publish();
        assert!(matches!(dev.run_stream(w.handle, 64), Run::Blocked { .. }));
        notified(&dev);
        if close {
            dev.close(a);
        } else {
            destroy(&mut dev, a, ev).unwrap();
        }
        assert!(
            notified(&dev).contains(&a2),
            "close {close}: the importer is woken"
        );
        // The blocked wait ends with ECANCELED and the stream goes on; later waits too.
        assert_eq!(dev.run_stream(w.handle, 64), Run::Progress(2));
        let done = drain(&mut w);
        assert_eq!(done[0].status, -Errno::ECANCELED.code(), "{done:?}");
        assert_eq!(done[1].status, 0);
        w.prod.push(&TaskDesc::event_wait(3, imp, 1)).unwrap();
        w.prod.publish();
        let _ = dev.run_stream(w.handle, 64);
        assert_eq!(drain(&mut w)[0].status, -Errno::ECANCELED.code());
        assert_eq!(
            wait_event_now(&mut dev, a2, imp, 1).0,
            Err(Errno::ECANCELED)
        );
        // A new event in the same slot is not reached through the old import.
        if !close {
            let again = event(&mut dev, a, ka);
            let _ = export(&mut dev, a, again, EXPORT_OWN_UID, 0).unwrap();
            assert_eq!(
                wait_event_now(&mut dev, a2, imp, 1).0,
                Err(Errno::ECANCELED)
            );
        }
        // The import stays a2's until destroyed (it counts), then is gone.
        let before = dev.client_usage(a2).unwrap().events;
        destroy(&mut dev, a2, imp).unwrap();
        assert_eq!(dev.client_usage(a2).unwrap().events, before - 1);
    }
}

#[test]
fn an_import_whose_reply_is_lost_is_undone() {
    let reply = |h: u32| {
        let a = ImportEventArgs {
            handle: h,
            ..Default::default()
        };
        let mut b = vec![0u8; ImportEventArgs::SIZE];
        a.encode(&mut b);
        b
    };
    assert_eq!(
        undo_of(DRIVER_CMD_IMPORT_EVENT, &reply(7)),
        Some((DRIVER_CMD_DESTROY_EVENT, 7))
    );
    assert_eq!(undo_of(DRIVER_CMD_EXPORT_EVENT, &[0u8; 24]), None);
}

/// An event export is an export: a tenant of a shared device holds at most its share of
/// exports, event and memory exports together, so it cannot take every export slot.
#[test]
fn event_exports_count_against_the_tenants_export_quota() {
    let mut dev = device();
    let (_root, a, b) = shared_pair(&mut dev);
    let usage = |dev: &mut Dev, c: u32| {
        let mut u = Usage::default();
        call(dev, c, DRIVER_CMD_GET_USAGE, &mut u).unwrap();
        u
    };
    let quota = usage(&mut dev, a).quota_exports;
    assert!(quota > 0 && (quota as usize) < davinci_driver_core::MAX_EXPORTS);
    let ka = ctx(&mut dev, a);
    for _ in 0..quota {
        let ev = event(&mut dev, a, ka);
        export(&mut dev, a, ev, EXPORT_OWN_UID, 0).unwrap();
    }
    let more = event(&mut dev, a, ka);
    assert_eq!(
        export(&mut dev, a, more, EXPORT_OWN_UID, 0),
        Err(Errno::ENOSPC)
    );
    let m = alloc(&mut dev, a, 4096);
    let mut e = ExportMemoryArgs {
        handle: m.handle,
        uid: EXPORT_OWN_UID,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_EXPORT_MEMORY, &mut e).map(|_| ()),
        Err(Errno::ENOSPC),
        "memory exports share the quota"
    );
    assert_eq!(usage(&mut dev, a).exports, quota, "GET_USAGE counts them");
    // Another tenant still exports.
    let kb = ctx(&mut dev, b);
    let eb = event(&mut dev, b, kb);
    export(&mut dev, b, eb, EXPORT_OWN_UID, 0).unwrap();
}
