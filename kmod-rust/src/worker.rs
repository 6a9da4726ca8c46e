// SPDX-License-Identifier: GPL-2.0

//! A device's worker thread: runs every stream while any makes progress, spins briefly when
//! none does, then arms NEED_WAKEUP on its idle and stalled streams and sleeps until it is
//! kicked (NOTIFY, SUBMIT_TASK, a completion) or its safety-net timeout.

use core::ffi::c_void;
use core::sync::atomic::Ordering;
use kernel::ffi::c_int;

use kernel::bindings;

use crate::davinci_driver_core::{Run, MAX_STREAMS};
use crate::device::DevState;

/// Descriptors the worker runs per stream per pass.
const BUDGET: u32 = 64;
/// The worker's safety-net sleep: it looks at every stream at least this often.
const WORKER_TIMEOUT_MS: u32 = 50;
/// How long an idle worker keeps looking before it arms NEED_WAKEUP and sleeps, unless
/// another task wants the CPU first (`need_resched()`): a client that submits again within it
/// (a round trip's next task) needs no wake-up of the device and rings no doorbell. The mock
/// device's pollers follow the same rule (spin while nobody else needs the core).
const IDLE_SPIN_NS: u64 = 50_000;

extern "C" {
    /// `helpers.c`: `need_resched()`, whether another task wants this CPU.
    fn davinci_need_resched() -> c_int;
    /// `helpers.c`: `cpu_relax()`.
    fn davinci_cpu_relax();
}

/// The worker: runs every stream of its device while any makes progress; when none does, keeps
/// looking for up to `IDLE_SPIN_NS` unless another task wants the CPU (`need_resched()`), then
/// sleeps with NEED_WAKEUP armed on the streams that are idle or stalled (docs/abi.md 5.3,
/// 5.4) until a NOTIFY, a SUBMIT_TASK, a completion or the safety-net timeout.
pub(crate) unsafe extern "C" fn worker_main(data: *mut c_void) -> c_int {
    // SAFETY: `data` is the pinned state, alive until `kthread_stop` returned (PinnedDrop).
    let st = unsafe { &*data.cast::<DevState>() };
    let mut handles = [0u32; MAX_STREAMS];
    let mut idle_since: Option<u64> = None;
    // SAFETY: no preconditions (in kthread context).
    while !unsafe { bindings::kthread_should_stop() } {
        let mut dev = st.lock();
        let seen = st.wake.kicks.load(Ordering::Relaxed);
        let mut n = 0;
        for h in dev.stream_handles() {
            if n < handles.len() {
                handles[n] = h;
                n += 1;
            }
        }
        let mut busy = false;
        // What each stream's run found, to arm the right half of its wake-up if the worker
        // sleeps: IDLE (the command ring is empty), STALLED (the event ring is full), or 0.
        const IDLE: u8 = 1;
        const STALLED: u8 = 2;
        let mut runs = [0u8; MAX_STREAMS];
        for (&h, run) in handles[..n].iter().zip(runs.iter_mut()) {
            *run = match dev.run_stream(h, BUDGET) {
                Run::Progress(_) | Run::Continuing => {
                    busy = true;
                    0
                }
                Run::Idle => IDLE,
                Run::Stalled => STALLED,
                Run::Blocked { .. } | Run::Failed(_) | Run::Halted | Run::Gone => 0,
            };
        }
        if busy {
            idle_since = None;
            drop(dev);
            // SAFETY: no preconditions; yields to the clients on a non-preemptible kernel.
            unsafe { bindings::__cond_resched() };
            continue;
        }
        // Nothing ran: keep looking for a while, unless another task wants this CPU.
        // SAFETY: no preconditions; a lock-free read of the monotonic clock.
        let now = unsafe { bindings::ktime_get_mono_fast_ns() };
        let since = *idle_since.get_or_insert(now);
        // SAFETY: no preconditions (reads the current task's flags).
        let wanted = unsafe { davinci_need_resched() } != 0;
        if now.wrapping_sub(since) < IDLE_SPIN_NS && !wanted {
            drop(dev);
            // SAFETY: no preconditions; a spin-wait hint.
            unsafe { davinci_cpu_relax() };
            continue;
        }
        idle_since = None;
        for (&h, run) in handles[..n].iter().zip(runs.iter()) {
            busy |= match *run {
                IDLE => !dev.stream_prepare_sleep(h),
                STALLED => !dev.stream_prepare_stall_sleep(h),
                _ => false,
            };
        }
        if busy {
            drop(dev);
            // SAFETY: no preconditions; yields to the clients on a non-preemptible kernel.
            unsafe { bindings::__cond_resched() };
            continue;
        }
        if st.wake.kicks.load(Ordering::Relaxed) == seen {
            let _ = dev.wait(&st.wake.worker_cv, WORKER_TIMEOUT_MS);
        }
        for &h in &handles[..n] {
            // NOTIFY counted the doorbells (driver-core): this is only the disarm.
            dev.stream_woke(h, false);
        }
    }
    0
}
