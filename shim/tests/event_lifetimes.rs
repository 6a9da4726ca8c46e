//! Event lifetimes (cudaEventDestroy's rule): an event's driver handle is destroyed only when
//! the `Event`, every `Recorded` token of it and every queued EVENT_RECORD/EVENT_WAIT task
//! naming it are gone. On the embedded mock device, whose control open counts each client's
//! events. Needs the embedded mock (the default `embedded` feature).
#![cfg(feature = "embedded")]
#![forbid(unsafe_code)]

use std::time::Duration;

use davinci_shim::{
    task, Context, Control, Device, DeviceMem, Event, MockConfig, MockDevice, Opcode, Recorded,
    Stream, StreamOptions, Task, TaskDesc,
};

const T: Duration = Duration::from_secs(20);

/// A device, a control open of it (to count our events) and a context.
fn setup() -> (Device, Control, Context) {
    let mock = MockDevice::new(MockConfig::default());
    let ctl = Control::attach(&mock).expect("control open");
    let dev = Device::attach(&mock).expect("client open");
    let ctx = dev.create_context().expect("context");
    (dev, ctl, ctx)
}

/// The events the driver holds for `dev`'s open.
fn events_held(ctl: &Control, dev: &Device) -> u32 {
    let client_id = dev.client_id().expect("a client id");
    let clients = ctl.clients().expect("LIST_CLIENTS");
    let me = clients.iter().find(|c| c.client_id == client_id);
    me.expect("our client is listed").events
}

/// A stream that runs nothing until `gate` is recorded (its first record, value 1). The
/// EVENT_WAIT is raw, so nothing but the test keeps `gate`.
fn gated(ctx: &Context) -> (Event, Stream) {
    let gate = ctx.create_event().unwrap();
    let mut s = ctx.create_stream().unwrap();
    let wait = Task::from_desc(TaskDesc::event_wait(0, gate.handle(), 1)).unwrap();
    s.submit(&wait).unwrap();
    (gate, s)
}

/// Records `gate` from a stream of its own and waits for it.
fn open_gate(ctx: &Context, gate: &Event) {
    let mut opener = ctx.create_stream().unwrap();
    gate.record(&mut opener).unwrap();
    opener.synchronize(T).unwrap();
}

/// Every completion of `s` so far, all successful.
fn all_ok(s: &mut Stream) -> Vec<davinci_shim::Completion> {
    s.synchronize(T).unwrap();
    let mut done = Vec::new();
    s.poll(&mut done);
    for c in &done {
        assert!(c.is_ok(), "{c:?}");
    }
    done
}

#[test]
fn a_temporary_event_recorded_and_waited_on_orders_the_streams() {
    let (dev, ctl, ctx) = setup();
    let (gate, mut producer) = gated(&ctx);
    let mut consumer = ctx.create_stream().unwrap();
    let (src, dst) = (dev.alloc(4096).unwrap(), dev.alloc(4096).unwrap());
    producer.submit(&task::fill(&src, 42).unwrap()).unwrap();
    // The event is a temporary, dropped at the end of this statement; its record and the
    // wait are still queued (the producer is held at the gate).
    consumer
        .wait_recorded(&ctx.create_event().unwrap().record(&mut producer).unwrap())
        .unwrap();
    consumer.submit(&task::copy(&dst, &src).unwrap()).unwrap();
    assert_eq!(events_held(&ctl, &dev), 2, "the gate and the temporary");
    let mut early = Vec::new();
    consumer.poll(&mut early);
    assert!(
        early.is_empty(),
        "the consumer ran past a wait whose record has not run"
    );
    open_gate(&ctx, &gate);
    let done = all_ok(&mut consumer);
    assert_eq!(done[0].opcode, Opcode::EventWait as u8);
    assert_eq!(dst.read_vec::<u32>(0, 1024).unwrap(), vec![42; 1024]);
    all_ok(&mut producer);
    // Both streams reaped what named the temporary: its handle is gone.
    assert_eq!(events_held(&ctl, &dev), 1, "only the gate is left");
}

#[test]
fn a_record_outlives_its_event() {
    let (dev, ctl, ctx) = setup();
    let (gate, mut s) = gated(&ctx);
    let (start, end) = (ctx.create_event().unwrap(), ctx.create_event().unwrap());
    let t0 = start.record(&mut s).unwrap();
    s.submit(&task::fill(&dev.alloc(1 << 16).unwrap(), 7).unwrap())
        .unwrap();
    let t1 = end.record(&mut s).unwrap();
    drop((start, end));
    assert!(!t1.query().unwrap(), "recorded behind a closed gate");
    let e = t1.synchronize(Duration::ZERO).unwrap_err();
    assert!(e.is(davinci_shim::Errno::ETIMEDOUT), "{e}");
    open_gate(&ctx, &gate);
    t1.synchronize(T).unwrap();
    assert!(t0.query().unwrap() && t1.query().unwrap());
    s.synchronize(T).unwrap();
    // The stream reaped the records; the tokens still hold their events.
    assert_eq!(events_held(&ctl, &dev), 3);
    assert!(Recorded::elapsed(&t0, &t1).unwrap() > Duration::ZERO);
    let copy = t0.clone();
    drop(t0);
    assert_eq!(events_held(&ctl, &dev), 3, "a clone of the token holds it");
    drop((copy, t1));
    assert_eq!(events_held(&ctl, &dev), 1, "only the gate is left");
}

#[test]
fn a_wait_queued_on_a_dropped_event_still_waits_for_its_record() {
    let (dev, ctl, ctx) = setup();
    let (gate, mut producer) = gated(&ctx);
    let mut consumer = ctx.create_stream().unwrap();
    let (src, dst) = (dev.alloc(4096).unwrap(), dev.alloc(4096).unwrap());
    let ev = ctx.create_event().unwrap();
    producer.submit(&task::fill(&src, 5).unwrap()).unwrap();
    let r = ev.record(&mut producer).unwrap();
    consumer.wait_recorded(&r).unwrap();
    consumer.wait_event(&ev).unwrap();
    consumer.submit(&task::copy(&dst, &src).unwrap()).unwrap();
    // Nothing but the queued tasks names the event now.
    drop((r, ev));
    assert_eq!(events_held(&ctl, &dev), 2, "the gate and the queued event");
    open_gate(&ctx, &gate);
    // Both waits completed successfully (not ECANCELED: the event was not destroyed under
    // them) and the copy saw the fill.
    let done = all_ok(&mut consumer);
    assert_eq!(done.len(), 3);
    assert_eq!(dst.read_vec::<u32>(0, 1024).unwrap(), vec![5; 1024]);
    assert_eq!(
        events_held(&ctl, &dev),
        2,
        "the producer has not reaped its record"
    );
    all_ok(&mut producer);
    assert_eq!(events_held(&ctl, &dev), 1);
}

#[test]
fn dropping_a_stream_releases_the_events_its_queued_tasks_held() {
    let (dev, ctl, ctx) = setup();
    let (gate, mut s) = gated(&ctx);
    let mut other = ctx.create_stream().unwrap();
    let ev = ctx.create_event().unwrap();
    let r = ev.record(&mut other).unwrap();
    s.wait_recorded(&r).unwrap();
    ev.record(&mut s).unwrap();
    drop((r, ev));
    all_ok(&mut other);
    assert_eq!(
        events_held(&ctl, &dev),
        2,
        "the gated stream still holds it"
    );
    drop(s);
    assert_eq!(events_held(&ctl, &dev), 1, "only the gate is left");
    drop(gate);
    assert_eq!(events_held(&ctl, &dev), 0);
}

#[test]
fn temporary_events_do_not_fill_the_event_table() {
    let (dev, ctl, ctx) = setup();
    // Small rings: what is queued and not reaped stays well below any event limit.
    let opts = StreamOptions::depths(16, 16);
    let (mut p, mut c) = (
        ctx.create_stream_with(opts).unwrap(),
        ctx.create_stream_with(opts).unwrap(),
    );
    // Past the whole device's table (the client's quota is smaller still).
    let n = dev.info().max_events as usize + 64;
    for i in 0..n {
        let r = ctx.create_event().unwrap().record(&mut p).unwrap();
        c.wait_recorded(&r)
            .unwrap_or_else(|e| panic!("iteration {i}: {e}"));
        if i % 8 == 0 {
            // The host side reaps too (a submit into a full ring also does).
            let _ = p.poll(&mut Vec::new());
            let _ = c.poll(&mut Vec::new());
        }
    }
    all_ok(&mut p);
    all_ok(&mut c);
    assert_eq!(events_held(&ctl, &dev), 0);
}
