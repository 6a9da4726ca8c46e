// SPDX-License-Identifier: GPL-2.0

//! A device's worker thread: runs every stream while any makes progress, spins briefly when
//! none does, then arms NEED_WAKEUP on its idle and stalled streams and sleeps until it is
//! kicked (a NOTIFY or SUBMIT_TASK that leaves it work, a new or destroyed stream, a
//! completion or recorded event while a stream is blocked on an event), or its safety-net
//! timeout while a stream is blocked on an event (never when the device is idle). NOTIFY and SUBMIT_TASK run the stream's turn in their caller ([`serve_kick`]).

use core::ffi::c_void;
use core::sync::atomic::Ordering;
use kernel::ffi::c_int;

use crate::davinci_driver_core::{Run, MAX_STREAMS};
use crate::device::DevState;
use crate::sys;

/// Descriptors the worker runs per stream per turn (driver-core bounds the work of one turn
/// on long tasks too: `PASS_WORK` bytes).
const BUDGET: u32 = 64;
/// The worker's safety-net sleep while a stream is blocked on an event (EVENT_WAIT): it looks
/// again at least this often. With no stream blocked it sleeps until it is kicked, however
/// long: an idle device costs no wake-up at all.
const WORKER_TIMEOUT_MS: u32 = 50;
/// How long an idle worker keeps looking before it arms NEED_WAKEUP and sleeps, unless
/// another task wants the CPU first (`need_resched()`): a client that submits again within it
/// (a round trip's next task) needs no wake-up of the device and rings no doorbell. The mock
/// device's pollers follow the same rule (spin while nobody else needs the core).
const IDLE_SPIN_NS: u64 = 50_000;

/// The worker: runs every stream of its device while any makes progress; when none does, keeps
/// looking for up to `IDLE_SPIN_NS` unless another task wants the CPU (`need_resched()`), then
/// sleeps with NEED_WAKEUP armed on the streams that are idle or stalled (docs/abi.md 5.3,
/// 5.4) until it is kicked (module doc), or the safety-net timeout while a stream is blocked
/// on an event; an idle device's worker sleeps until a kick, with no timer.
///
/// The device lock is held for one stream's turn at a time (at most `BUDGET` descriptors and
/// `PASS_WORK` bytes of long-task work), and the worker yields the CPU between turns when
/// another task wants it: an open, an ioctl or a fault waits for one turn, not a pass over
/// every stream, and a non-preemptible kernel never runs a long loop without scheduling.
pub(crate) unsafe extern "C" fn worker_main(data: *mut c_void) -> c_int {
    // SAFETY: `data` is the pinned state, alive until `kthread_stop` returned (PinnedDrop).
    let st = unsafe { &*data.cast::<DevState>() };
    let mut handles = [0u32; MAX_STREAMS];
    // What each stream's turn found, to arm the right half of its wake-up if the worker
    // sleeps: IDLE (the command ring is empty), STALLED (the event ring is full), or 0.
    const IDLE: u8 = 1;
    const STALLED: u8 = 2;
    const BLOCKED: u8 = 3;
    let mut runs = [0u8; MAX_STREAMS];
    let mut idle_since: Option<u64> = None;
    while !sys::kthread_should_stop() {
        let (seen, n) = {
            let dev = st.lock();
            let seen = st.wake.kicks.load(Ordering::Relaxed);
            let mut n = 0;
            for h in dev.stream_handles() {
                if n < handles.len() {
                    handles[n] = h;
                    n += 1;
                }
            }
            (seen, n)
        };
        let mut busy = false;
        for (&h, run) in handles[..n].iter().zip(runs.iter_mut()) {
            let r = st.lock().run_stream(h, BUDGET);
            *run = match r {
                Run::Progress(_) | Run::Continuing => {
                    busy = true;
                    0
                }
                Run::Idle => IDLE,
                Run::Stalled => STALLED,
                Run::Blocked { .. } => BLOCKED,
                Run::Failed(_) | Run::Halted | Run::Gone => 0,
            };
            if sys::need_resched() {
                sys::cond_resched();
            }
        }
        if busy {
            idle_since = None;
            sys::cond_resched();
            continue;
        }
        // Nothing ran: keep looking for a while, unless another task wants this CPU.
        let now = sys::now_ns();
        let since = *idle_since.get_or_insert(now);
        if now.wrapping_sub(since) < IDLE_SPIN_NS && !sys::need_resched() {
            sys::cpu_relax();
            continue;
        }
        idle_since = None;
        let mut dev = st.lock();
        for (&h, run) in handles[..n].iter().zip(runs.iter()) {
            busy |= match *run {
                IDLE => !dev.stream_prepare_sleep(h),
                STALLED => !dev.stream_prepare_stall_sleep(h),
                _ => false,
            };
        }
        if busy {
            drop(dev);
            sys::cond_resched();
            continue;
        }
        // A kick since the handles were taken (a new stream, a submit, teardown) means look
        // again; `stopping` is set and kicked under this lock, so the worker cannot sleep
        // through `kthread_stop`'s wake-up.
        if st.wake.kicks.load(Ordering::Relaxed) == seen && !st.stopping.load(Ordering::Relaxed) {
            // A completion or a recorded event wakes it only for a blocked stream.
            let blocked = runs[..n].contains(&BLOCKED);
            st.wake.blocked.store(blocked, Ordering::Relaxed);
            if blocked {
                let _ = dev.wait(&st.wake.worker_cv, WORKER_TIMEOUT_MS);
            } else {
                // Every stream is idle, stalled, stopped or gone: each of those is ended by
                // a kick (a NOTIFY its NEED_WAKEUP asks for, a new or destroyed stream,
                // teardown), so no timer is needed.
                dev.wait_forever(&st.wake.worker_cv);
            }
            st.wake.blocked.store(true, Ordering::Relaxed);
        }
        for &h in &handles[..n] {
            // NOTIFY counted the doorbells (driver-core): this is only the disarm.
            dev.stream_woke(h, false);
        }
    }
    0
}

/// A NOTIFY or SUBMIT_TASK for `stream` (`Reply::Kick`), with the device locked: runs the
/// stream's turn here, in the caller, instead of waking the worker for it. A client that
/// submits a task to a sleeping device and waits for it then finds its completion when the
/// call returns: one system call and no wake-up, where waking the worker cost two wake-ups
/// (the worker's, then the waiting client's when the worker completed the task). Whether the
/// worker must be kicked as well: when the turn left work (a full budget, a long task going
/// on, a stream blocked on an event), and when the calls come faster than the worker's idle
/// spin (`IDLE_SPIN_NS`): a host streaming tasks one at a time then has the worker take
/// them from the ring, with no system call per task, as it would had the worker been awake.
pub(crate) fn serve_kick(st: &DevState, dev: &crate::device::Locked<'_>, stream: u32) -> bool {
    let now = sys::now_ns();
    let last = st.wake.last_inline_ns.swap(now, Ordering::Relaxed);
    let streaming = now.wrapping_sub(last) < IDLE_SPIN_NS;
    let left_work = match dev.run_stream(stream, BUDGET) {
        Run::Progress(n) => n >= BUDGET,
        Run::Continuing | Run::Blocked { .. } => true,
        Run::Idle | Run::Stalled | Run::Failed(_) | Run::Halted | Run::Gone => false,
    };
    streaming || left_work
}
