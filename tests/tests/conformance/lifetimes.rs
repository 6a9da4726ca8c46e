//! A runtime API that is safe by construction (issue 23), on every backend: buffers and pool
//! blocks live until the tasks that name them have run, a stale raw address faults instead
//! of writing into memory handed out again, dropping a stream discards what it had queued,
//! a signal ends a blocking wait, event records are waited for by value and timed, an event
//! lives until the records, tokens and queued waits naming it are gone, and host callbacks
//! run once, in order.
//!
//! Each hazard is set up the same way: a stream held behind an EVENT_WAIT on a `gate` event
//! nobody has recorded yet, so what is queued behind it provably has not run when the test
//! drops, frees or reallocates; then the gate is recorded from another stream.
#![deny(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use davinci_shim::{
    task, Context, Device, DeviceMem, Errno, Event, MemPool, PoolOptions, Recorded, Stream,
    StreamOptions, Task, TaskDesc,
};
use davinci_tests::descs::SubmitDescs;
use nix::libc;

use super::{dev, poll_all, T};

/// A stream that runs nothing until `gate` is recorded (its first record, value 1).
fn gated(ctx: &Context, opts: StreamOptions) -> (Event, Stream) {
    let gate = ctx.create_event().unwrap();
    let mut s = ctx.create_stream_with(opts).unwrap();
    let wait = Task::from_desc(TaskDesc::event_wait(0, gate.handle(), 1)).unwrap();
    s.submit(&wait).unwrap();
    (gate, s)
}

/// Records `gate` (value 1) from a stream of its own and waits for it.
fn open_gate(ctx: &Context, gate: &Event) {
    let mut opener = ctx.create_stream().unwrap();
    let r = gate.record(&mut opener).unwrap();
    assert_eq!(r.value(), 1, "the gate's first record");
    opener.synchronize(T).unwrap();
}

#[test]
fn a_queued_fill_on_a_dropped_buffer_corrupts_nothing() {
    const LEN: usize = 1 << 20;
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let base = dev.memory_used().unwrap();
    let (gate, mut s) = gated(&ctx, StreamOptions::default());
    let old = dev.alloc(LEN).unwrap();
    let old_addr = old.dev_addr();
    s.submit(&task::fill(&old, 0xbad).unwrap().with_user_data(1))
        .unwrap();
    assert_eq!(old.pending_uses(), 1);
    drop(old);
    // Its free waits for the FILL: the next allocation of the same size gets other memory.
    let new = dev.alloc(LEN).unwrap();
    assert_ne!(
        new.dev_addr(),
        old_addr,
        "a buffer with a FILL queued on it was freed at once and handed out again"
    );
    new.write_slice(0, &vec![7u32; LEN / 4]).unwrap();
    assert!(dev.memory_used().unwrap() >= base + 2 * LEN as u64);
    open_gate(&ctx, &gate);
    s.synchronize(T).unwrap();
    let done = poll_all(&mut s);
    assert!(done.iter().all(|c| c.is_ok()), "{done:?}");
    assert!(
        new.read_vec::<u32>(0, LEN / 4)
            .unwrap()
            .iter()
            .all(|&w| w == 7),
        "the stale FILL wrote into the new owner's memory"
    );
    // Reaped: the dropped buffer is freed now.
    assert_eq!(dev.memory_used().unwrap(), base + new.capacity());
}

#[test]
fn a_queued_fill_on_a_recycled_pool_block_corrupts_nothing() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let pool = MemPool::with_options(&dev, PoolOptions::default().chunk_size(64 << 10));
    let (gate, mut s) = gated(&ctx, StreamOptions::default());
    let old = pool.alloc(4096).unwrap();
    let old_addr = old.dev_addr();
    s.submit(&task::fill(&old, 0xbad).unwrap()).unwrap();
    drop(old);
    assert_eq!(
        pool.stats().blocks,
        1,
        "a block with a task queued on it is still in use"
    );
    let new = pool.alloc(4096).unwrap();
    assert_ne!(
        new.dev_addr(),
        old_addr,
        "the pool handed the block out again"
    );
    new.write_slice(0, &[7u32; 1024]).unwrap();
    open_gate(&ctx, &gate);
    s.synchronize(T).unwrap();
    assert_eq!(
        new.read_vec::<u32>(0, 1024).unwrap(),
        vec![7; 1024],
        "the stale FILL wrote into the block's new owner"
    );
    // Reaped: the old block is back in the pool, and reused.
    assert_eq!(pool.stats().blocks, 1);
    let again = pool.alloc(4096).unwrap();
    assert_eq!(
        again.dev_addr(),
        old_addr,
        "first fit reuses the returned block"
    );
}

#[test]
fn a_stale_raw_address_faults_instead_of_writing_into_its_next_owner() {
    const LEN: usize = 64 << 10;
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let old = dev.alloc(LEN).unwrap();
    let stale = old.dev_addr();
    drop(old);
    // Nothing holds the old address; the driver may reuse the memory, not the address.
    let new = dev.alloc(LEN).unwrap();
    new.write_slice(0, &[7u32; 16]).unwrap();
    let mut s = ctx.create_stream().unwrap();
    // A runtime that kept a raw address past its free (what the unsafe door allows).
    s.submit_desc(&TaskDesc::fill(9, stale, LEN as u64, 0xbad))
        .unwrap();
    let e = s.synchronize(T).unwrap_err();
    assert!(e.is(Errno::EIO) && e.message().contains("EACCES"), "{e}");
    let done = poll_all(&mut s);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].errno(), Some(Errno::EACCES), "{:?}", done[0]);
    assert_eq!(new.read_vec::<u32>(0, 16).unwrap(), vec![7; 16]);
}

#[test]
fn dropping_a_stream_discards_its_queued_fills_and_returns_promptly() {
    const FILLS: u64 = 2000;
    const LEN: usize = 1 << 20;
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let buf = dev.alloc(LEN).unwrap();
    let mut s = ctx
        .create_stream_with(StreamOptions::depths(2048, 2048))
        .unwrap();
    let fills: Vec<Task> = (0..FILLS)
        .map(|i| task::fill(&buf, i as u32 + 1).unwrap().with_user_data(i))
        .collect();
    s.submit_batch(&fills).unwrap();
    drop(fills);
    // Let it start.
    while buf.read_vec::<u32>(0, 1).unwrap()[0] == 0 {
        std::thread::yield_now();
    }
    let t0 = Instant::now();
    drop(s);
    let took = t0.elapsed();
    let words = || {
        (
            buf.read_vec::<u32>(0, 1).unwrap()[0],
            buf.read_vec::<u32>(LEN - 4, 1).unwrap()[0],
        )
    };
    let (first, last) = words();
    // Nothing runs after the drop returned.
    std::thread::sleep(Duration::from_millis(200));
    println!(
        "lifetimes: dropping a stream with {FILLS} 1 MiB FILLs queued took {took:?}; FILLs run: \
         {last} (the last one started: {first})"
    );
    assert_eq!(
        words(),
        (first, last),
        "a FILL ran (or went on) after the stream was dropped"
    );
    assert!(
        u64::from(first) < FILLS / 2,
        "{first} of {FILLS} queued FILLs ran: the drop did not discard them"
    );
    assert_eq!(buf.pending_uses(), 0, "the stream's leases were released");
    assert!(took < Duration::from_secs(5), "the drop took {took:?}");
}

extern "C" fn on_signal(_: libc::c_int) {}

/// Installs `on_signal` for `sig` without `SA_RESTART`; returns the old action.
#[allow(unsafe_code)]
fn no_restart_handler(sig: libc::c_int) -> libc::sigaction {
    // SAFETY: the handler does nothing (async-signal-safe); both structs are locals that
    // sigaction reads and writes whole.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(sig, &sa, &mut old), 0);
        old
    }
}

#[test]
#[allow(unsafe_code)] // restores the SIGINT action
fn sigint_ends_a_blocking_synchronize() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let (gate, mut s) = gated(&ctx, StreamOptions::default());
    let buf = dev.alloc(4096).unwrap();
    s.submit(&task::fill(&buf, 1).unwrap()).unwrap();
    let old = no_restart_handler(libc::SIGINT);
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let done = done.clone();
        std::thread::spawn(move || {
            tx.send(nix::sys::pthread::pthread_self()).unwrap();
            let t0 = Instant::now();
            let r = s.synchronize(Duration::from_secs(3));
            done.store(true, Ordering::Release);
            (r, t0.elapsed(), s)
        })
    };
    let thread = rx.recv().unwrap();
    // Asleep in the driver by then; a signal that lands outside the sleep only runs the
    // handler, so signal until the wait returns.
    std::thread::sleep(Duration::from_millis(300));
    let first = Instant::now();
    while !done.load(Ordering::Acquire) && first.elapsed() < Duration::from_secs(5) {
        // The waiter is alive until joined below.
        nix::sys::pthread::pthread_kill(thread, nix::sys::signal::Signal::SIGINT).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let after_signal = first.elapsed();
    let (r, waited, mut s) = waiter.join().unwrap();
    // SAFETY: restores the action read above.
    unsafe { libc::sigaction(libc::SIGINT, &old, std::ptr::null_mut()) };
    println!("lifetimes: SIGINT ended a 3 s synchronize {after_signal:?} after the first signal");
    let e = r.unwrap_err();
    assert!(e.is(Errno::EINTR), "{e}");
    assert!(e.message().contains("interrupted by a signal"), "{e}");
    assert!(
        waited < Duration::from_secs(2),
        "the 3 s synchronize ran {waited:?} despite the signal"
    );
    // Nothing lost: the stream goes on once the gate opens.
    open_gate(&ctx, &gate);
    s.synchronize(T).unwrap();
    assert_eq!(buf.read_vec::<u32>(0, 1).unwrap(), [1]);
}

#[test]
fn a_wait_on_a_record_does_not_wait_for_later_records() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let ev = ctx.create_event().unwrap();
    let mut a = ctx.create_stream().unwrap();
    let first = ev.record(&mut a).unwrap();
    // A later record of the same event, held behind a gate.
    let gate = ctx.create_event().unwrap();
    a.submit(&Task::from_desc(TaskDesc::event_wait(0, gate.handle(), 1)).unwrap())
        .unwrap();
    let second = ev.record(&mut a).unwrap();
    assert_eq!((first.value(), second.value()), (1, 2));
    // Host side: the first record is reached; the latest is not.
    first.synchronize(T).unwrap();
    ev.synchronize_value(first.value(), T).unwrap();
    let e = ev.synchronize(Duration::from_millis(50)).unwrap_err();
    assert!(e.is(Errno::ETIMEDOUT), "{e}");
    assert!(
        e.message().contains("did not reach value 2") && e.message().contains("it is at 1"),
        "a timed-out wait says which event, which value and what it reached: {e}"
    );
    // Stream side: a wait for the first record runs at once, the latest would not.
    let mut b = ctx.create_stream().unwrap();
    let buf = dev.alloc(64).unwrap();
    b.wait_recorded(&first).unwrap();
    b.submit(&task::fill(&buf, 5).unwrap()).unwrap();
    b.synchronize(T).unwrap();
    assert_eq!(buf.read_vec::<u32>(0, 1).unwrap(), [5]);
    // A value never recorded is refused, not waited for.
    let e = ev.synchronize_value(3, T).unwrap_err();
    assert!(e.is(Errno::EINVAL), "{e}");
    // Records of another context's event are refused on the host.
    let other = dev.create_context().unwrap();
    let mut c = other.create_stream().unwrap();
    assert!(c.wait_recorded(&first).unwrap_err().is(Errno::EINVAL));
    open_gate(&ctx, &gate);
    second.synchronize(T).unwrap();
    a.synchronize(T).unwrap();
}

#[test]
fn an_event_lives_until_its_records_tokens_and_queued_waits_are_gone() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let (gate, mut producer) = gated(&ctx, StreamOptions::default());
    let mut consumer = ctx.create_stream().unwrap();
    let (src, dst) = (dev.alloc(4096).unwrap(), dev.alloc(4096).unwrap());
    producer.submit(&task::fill(&src, 9).unwrap()).unwrap();
    // A temporary event, dropped at the end of the statement with its record and the wait
    // still queued (the producer is held at the gate).
    consumer
        .wait_recorded(&ctx.create_event().unwrap().record(&mut producer).unwrap())
        .unwrap();
    // A token outliving its event, and a wait on an event nothing but queued tasks name.
    let ev = ctx.create_event().unwrap();
    let token = ev.record(&mut producer).unwrap();
    consumer.wait_event(&ev).unwrap();
    drop(ev);
    consumer.submit(&task::copy(&dst, &src).unwrap()).unwrap();
    assert!(!token.query().unwrap(), "recorded behind a closed gate");
    open_gate(&ctx, &gate);
    token.synchronize(T).unwrap();
    consumer.synchronize(T).unwrap();
    let done = poll_all(&mut consumer);
    assert_eq!(done.len(), 3);
    for c in &done {
        // Not ENOENT (a destroyed event), not ECANCELED (destroyed while waited for).
        assert!(c.is_ok(), "{c:?}");
    }
    assert_eq!(dst.read_vec::<u32>(0, 1024).unwrap(), vec![9; 1024]);
    producer.synchronize(T).unwrap();
    drop(token);
    // The handles go once all is gone: temporaries never fill the event table (nor the
    // client's quota, which is smaller).
    let opts = StreamOptions::depths(16, 16);
    let (mut p, mut c) = (
        ctx.create_stream_with(opts).unwrap(),
        ctx.create_stream_with(opts).unwrap(),
    );
    for i in 0..dev.info().max_events as usize + 64 {
        let r = ctx
            .create_event()
            .unwrap_or_else(|e| panic!("event {i}: {e}"));
        c.wait_recorded(&r.record(&mut p).unwrap()).unwrap();
    }
    p.synchronize(T).unwrap();
    c.synchronize(T).unwrap();
    assert!(poll_all(&mut c).iter().all(|c| c.is_ok()));
}

#[test]
fn elapsed_is_the_difference_of_the_records_completion_times() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    let (start, end) = (ctx.create_event().unwrap(), ctx.create_event().unwrap());
    let buf = dev.alloc(1 << 20).unwrap();
    let t0 = start.record(&mut s).unwrap();
    s.submit(&task::fill(&buf, 3).unwrap()).unwrap();
    let t1 = end.record(&mut s).unwrap();
    t1.synchronize(T).unwrap();
    // Reached, but not reaped by its stream yet: no time to give.
    let e = Recorded::elapsed(&t0, &t1).unwrap_err();
    assert!(e.is(Errno::EAGAIN), "{e}");
    s.synchronize(T).unwrap();
    let done = poll_all(&mut s);
    let at = |r: &Recorded| {
        done.iter()
            .find(|c| c.task == r.task())
            .expect("the record's completion")
            .timestamp_ns
    };
    let took = Recorded::elapsed(&t0, &t1).unwrap();
    assert_eq!(took, Duration::from_nanos(at(&t1) - at(&t0)));
    assert_eq!(t1.timestamp_ns(), Some(at(&t1)));
    assert!(took > Duration::ZERO);
    assert!(Recorded::elapsed(&t1, &t0).unwrap_err().is(Errno::EINVAL));
}

#[test]
fn a_host_callback_runs_once_in_order_with_the_completions() {
    let dev = dev();
    let ctx = dev.create_context().unwrap();
    let buf = dev.alloc(4096).unwrap();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut s = ctx.create_stream().unwrap();
    s.submit(&task::fill(&buf, 1).unwrap().with_user_data(1))
        .unwrap();
    let l = log.clone();
    let id = s
        .launch_host_func(move |r| l.lock().unwrap().push(format!("callback {r:?}")))
        .unwrap();
    s.submit(&task::fill(&buf, 2).unwrap().with_user_data(2))
        .unwrap();
    // Poll-driven: the callback runs inside poll, between the completions before and after.
    let start = Instant::now();
    let mut n = 0;
    while n < 3 {
        assert!(start.elapsed() < T, "the completions never came");
        let l = log.clone();
        n += s.poll_each(|c| {
            l.lock().unwrap().push(format!(
                "completion {} (task {})",
                c.user_data,
                c.task.get()
            ))
        });
    }
    assert_eq!(
        log.lock().unwrap().as_slice(),
        [
            "completion 1 (task 0)".to_string(),
            "callback Ok(())".to_string(),
            format!("completion 0 (task {})", id.get()),
            "completion 2 (task 2)".to_string(),
        ],
        "ran once, after the FILL before it and before the completions after it"
    );
    // Not reached before the stream is dropped: runs once, with ECANCELED.
    let (gate, mut held) = gated(&ctx, StreamOptions::default());
    let l = log.clone();
    held.launch_host_func(move |r| {
        l.lock()
            .unwrap()
            .push(format!("{:?}", r.map_err(|e| e.errno())));
    })
    .unwrap();
    drop(held);
    drop(gate);
    assert_eq!(
        log.lock().unwrap().last().map(String::as_str),
        Some("Err(Some(ECANCELED))")
    );
    assert_eq!(log.lock().unwrap().len(), 5);
}

#[test]
fn a_buffer_of_another_open_is_refused() {
    let a = dev();
    let mut s = a.create_context().unwrap().create_stream().unwrap();
    let foreign = Device::embedded().unwrap().alloc(64).unwrap();
    let e = s.submit(&task::fill(&foreign, 1).unwrap()).unwrap_err();
    assert!(e.is(Errno::EINVAL), "{e}");
    assert!(e.message().contains("another open"), "{e}");
    let _: &Device = foreign.device();
}
