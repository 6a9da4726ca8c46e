//! Batches that mix tasks naming memory (FILL, COPY, ADD: they hold leases) with tasks that
//! name none (NOP, raw EVENT_WAIT: the submit's fast path keeps nothing for them): every
//! lease is kept until its own task's completion is reaped, whatever its neighbours, a
//! buffer dropped with work queued in such a batch is freed only after that work ran, and a
//! foreign buffer anywhere in a batch refuses the whole batch. On the embedded mock device.
//!
//! Each case queues behind an EVENT_WAIT on a `gate` event nobody has recorded yet, so what
//! the batch names provably has not run while the test checks, drops and reallocates.
#![cfg(feature = "embedded")]
#![forbid(unsafe_code)]

use std::time::Duration;

use davinci_shim::{
    task, Completion, Context, Device, DeviceMem, Errno, Event, Stream, StreamOptions, Task,
    TaskDesc,
};

const T: Duration = Duration::from_secs(20);

/// A stream that runs nothing until `gate` is recorded (its first record, value 1). The
/// EVENT_WAIT is raw: a task that holds nothing.
fn gated(ctx: &Context, opts: StreamOptions) -> (Event, Stream) {
    let gate = ctx.create_event().unwrap();
    let mut s = ctx.create_stream_with(opts).unwrap();
    let wait = Task::from_desc(TaskDesc::event_wait(0, gate.handle(), 1)).unwrap();
    s.submit(&wait).unwrap();
    // The device takes the wait off the ring and holds it (its slot is free again): wait for
    // that, so that what fits after it does not depend on when the device got to it.
    let deadline = std::time::Instant::now() + T;
    while s.free_slots() < s.cmd_entries() {
        assert!(
            std::time::Instant::now() < deadline,
            "the device never took the wait"
        );
        std::thread::yield_now();
    }
    (gate, s)
}

/// Records `gate` from a stream of its own and waits for it.
fn open_gate(ctx: &Context, gate: &Event) {
    let mut opener = ctx.create_stream().unwrap();
    gate.record(&mut opener).unwrap();
    opener.synchronize(T).unwrap();
}

/// Every completion of `s` so far, all successful.
fn all_ok(s: &mut Stream) -> Vec<Completion> {
    s.synchronize(T).unwrap();
    let mut done = Vec::new();
    s.poll(&mut done);
    for c in &done {
        assert!(c.is_ok(), "{c:?}");
    }
    done
}

#[test]
fn a_mixed_batch_keeps_each_lease_until_its_task_is_reaped() {
    let dev = Device::embedded().unwrap();
    let ctx = dev.create_context().unwrap();
    let (gate, mut s) = gated(&ctx, StreamOptions::default());
    let (a, b, sum) = (
        dev.alloc(64).unwrap(),
        dev.alloc(64).unwrap(),
        dev.alloc(64).unwrap(),
    );
    // Lease-free tasks first, between and after the leased ones, 40 in all (the ring's
    // batch path: 16 or more).
    let mut batch: Vec<Task> = (0..10).map(|i| task::nop().with_user_data(i)).collect();
    batch.push(task::fill(&a, 3).unwrap().with_user_data(100));
    batch.extend((10..20).map(|i| task::nop().with_user_data(i)));
    batch.push(task::fill(&b, 4).unwrap().with_user_data(101));
    batch.push(task::add::<u32>(&sum, &a, &b).unwrap().with_user_data(102));
    batch.extend((20..37).map(|i| task::nop().with_user_data(i)));
    assert_eq!(batch.len(), 40);
    let first = s.submit_batch(&batch).unwrap();
    assert_eq!(first.get(), 1, "after the gate's EVENT_WAIT");
    assert_eq!(
        (a.pending_uses(), b.pending_uses(), sum.pending_uses()),
        (4, 4, 2),
        "the batch's tasks and the stream's copies of their leases"
    );
    drop(batch);
    assert_eq!(
        (a.pending_uses(), b.pending_uses(), sum.pending_uses()),
        (2, 2, 1),
        "the stream keeps one lease per operand of each queued task"
    );
    // Dropped with work queued: the stream's leases keep them until it ran.
    drop((a, b));
    open_gate(&ctx, &gate);
    let done = all_ok(&mut s);
    let users: Vec<u64> = done.iter().map(|c| c.user_data).collect();
    let mut want = vec![0];
    want.extend(0..10);
    want.push(100);
    want.extend(10..20);
    want.extend([101, 102]);
    want.extend(20..37);
    assert_eq!(users, want, "completions in submission order");
    for (k, c) in done.iter().enumerate() {
        assert_eq!(c.task.get(), k as u64, "{c:?}");
    }
    assert_eq!(sum.read_vec::<u32>(0, 16).unwrap(), vec![7; 16]);
    assert_eq!(sum.pending_uses(), 0, "reaped: every lease released");
}

#[test]
fn a_buffer_dropped_with_a_fill_queued_in_a_mixed_batch_is_freed_after_it_ran() {
    const LEN: usize = 1 << 20;
    let dev = Device::embedded().unwrap();
    let ctx = dev.create_context().unwrap();
    let base = dev.memory_used().unwrap();
    let (gate, mut s) = gated(&ctx, StreamOptions::default());
    let old = dev.alloc(LEN).unwrap();
    let old_addr = old.dev_addr();
    let mut batch: Vec<Task> = (0..20).map(|i| task::nop().with_user_data(i)).collect();
    batch.insert(7, task::fill(&old, 0xbad).unwrap());
    s.submit_batch(&batch).unwrap();
    drop(batch);
    assert_eq!(old.pending_uses(), 1);
    drop(old);
    let new = dev.alloc(LEN).unwrap();
    assert_ne!(
        new.dev_addr(),
        old_addr,
        "a buffer with a FILL queued on it was freed at once and handed out again"
    );
    new.write_slice(0, &vec![7u32; LEN / 4]).unwrap();
    open_gate(&ctx, &gate);
    assert_eq!(all_ok(&mut s).len(), 22);
    assert!(
        new.read_vec::<u32>(0, LEN / 4)
            .unwrap()
            .iter()
            .all(|&w| w == 7),
        "the stale FILL wrote into the new owner's memory"
    );
    assert_eq!(
        dev.memory_used().unwrap(),
        base + new.capacity(),
        "reaped: the dropped buffer is freed"
    );
}

#[test]
fn try_submit_of_a_mixed_batch_keeps_the_leases_of_what_it_pushed_only() {
    let dev = Device::embedded().unwrap();
    let ctx = dev.create_context().unwrap();
    // 8 command slots (the gate's wait is held by the device, off the ring): 8 of the batch
    // fit.
    let (gate, mut s) = gated(&ctx, StreamOptions::depths(8, 64));
    let (a, b) = (dev.alloc(64).unwrap(), dev.alloc(64).unwrap());
    let mut batch: Vec<Task> = (0..12).map(|i| task::nop().with_user_data(i)).collect();
    batch[3] = task::fill(&a, 1).unwrap().with_user_data(3);
    batch[9] = task::fill(&b, 2).unwrap().with_user_data(9);
    assert_eq!(s.try_submit_batch(&batch).unwrap(), 8);
    drop(batch);
    assert_eq!(
        (a.pending_uses(), b.pending_uses()),
        (1, 0),
        "the FILL of `a` was pushed, the FILL of `b` was not"
    );
    open_gate(&ctx, &gate);
    let done = all_ok(&mut s);
    assert_eq!(done.len(), 9, "the wait and the 8 pushed");
    assert_eq!((a.pending_uses(), b.pending_uses()), (0, 0));
    assert_eq!(a.read_vec::<u32>(0, 16).unwrap(), vec![1; 16]);
}

#[test]
fn a_foreign_buffer_anywhere_in_a_batch_refuses_all_of_it() {
    let dev = Device::embedded().unwrap();
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    let other = Device::embedded().unwrap();
    let (ours, foreign) = (dev.alloc(64).unwrap(), other.alloc(64).unwrap());
    let mut batch: Vec<Task> = (0..30).map(|i| task::nop().with_user_data(i)).collect();
    batch[5] = task::fill(&ours, 1).unwrap();
    batch[21] = task::fill(&foreign, 1).unwrap();
    let e = s.submit_batch(&batch).unwrap_err();
    assert!(e.is(Errno::EINVAL), "{e}");
    assert!(e.message().contains("task 21 of the batch"), "{e}");
    let e = s.try_submit_batch(&batch).unwrap_err();
    assert!(e.is(Errno::EINVAL), "{e}");
    assert_eq!(ours.pending_uses(), 1, "only the batch's own task holds it");
    drop(batch);
    // Nothing of the refused batches was submitted: the next task is the stream's first.
    assert_eq!(s.submit(&task::nop()).unwrap().get(), 0);
    assert_eq!(all_ok(&mut s).len(), 1);
}

#[test]
fn tasks_that_name_no_memory_hold_nothing_and_clones_of_leased_ones_hold_their_own() {
    let dev = Device::embedded().unwrap();
    let a = dev.alloc(64).unwrap();
    let t = task::copy(&a, &a).unwrap();
    assert_eq!(a.pending_uses(), 2, "one lease per operand");
    let clones: Vec<Task> = (0..3).map(|_| t.clone()).collect();
    assert_eq!(a.pending_uses(), 8);
    drop(clones);
    assert_eq!(a.pending_uses(), 2);
    drop(t);
    assert_eq!(a.pending_uses(), 0);
    // A NOP moved around and dropped touches no buffer.
    let nops: Vec<Task> = (0..64).map(|i| task::nop().with_user_data(i)).collect();
    let moved: Vec<Task> = nops.into_iter().rev().collect();
    assert_eq!(moved[0].user_data(), 63);
    drop(moved);
    assert_eq!(a.pending_uses(), 0);
}
