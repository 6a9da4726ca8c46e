//! The tidier: a thread that does a device's after-the-reply work ([`MockDevice::tidy`]) for a
//! host with no "after the reply" moment of its own, the embedded device
//! ([`MockDevice::tidy_in_background`]): a control call returns with the work left for it
//! (a memfd for the pool, released memory to unmap and close, the pollers' kick for a new or
//! destroyed stream) and nudges this thread, which does it while the caller goes on.
//!
//! A nudge is one atomic add, plus one `FUTEX_WAKE` when the tidier sleeps. The tidier runs
//! `tidy` until it has nothing left (each `tidy` makes at most one memfd), at most
//! [`MAX_ROUNDS`] times per nudge, then sleeps on its word (at most [`IDLE_SLEEP`], a safety
//! net: a nudge is never missed, see [`Tidier::nudge`]). It stops with the device.
#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use davinci_shm::{futex_wait, futex_wake};

use crate::state::{relock, Core, Tidier};

/// `tidy` calls per nudge at most (the pool needs at most this many memfds).
const MAX_ROUNDS: usize = crate::pool::MAX_READY + 1;
/// The longest sleep between two looks (a safety net; nudges wake the thread).
const IDLE_SLEEP: Duration = Duration::from_secs(1);

impl Tidier {
    /// Whether a tidier thread runs (the control path nudges it then).
    pub(crate) fn running(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Starts the thread for `core` (once; a second call does nothing).
    pub(crate) fn start(core: &Arc<Core>) -> std::io::Result<()> {
        let mut join = relock(core.tidier.join.lock());
        if join.is_some() {
            return Ok(());
        }
        let c = core.clone();
        let handle = std::thread::Builder::new()
            .name(format!("davinci{}-tidy", core.config.device_id))
            .spawn(move || c.run_tidier())?;
        *join = Some(handle);
        core.tidier.on.store(true, Ordering::Release);
        Ok(())
    }

    /// Asks the thread to tidy. Never lost: the nudge's add and the thread's `asleep` store
    /// are both sequentially consistent, and the thread looks at the word again between its
    /// store and its sleep (whose `FUTEX_WAIT` also compares the word), so either the thread
    /// sees the new value or this sees `asleep` and wakes it.
    pub(crate) fn nudge(&self) {
        self.word.fetch_add(1, Ordering::SeqCst);
        if self.asleep.load(Ordering::SeqCst) {
            futex_wake(&self.word);
        }
    }

    /// Stops and joins the thread (the device's shutdown flag is set already).
    pub(crate) fn stop(&self) {
        let handle = relock(self.join.lock()).take();
        self.on.store(false, Ordering::Release);
        if let Some(h) = handle {
            self.word.fetch_add(1, Ordering::SeqCst);
            futex_wake(&self.word);
            // The tidier has no panicking path; if it had, there is nothing left to undo.
            let _ = h.join();
        }
    }
}

impl Core {
    /// The work the last replies left ([`MockDevice::tidy`](crate::MockDevice::tidy)); returns
    /// whether there may be more (a memfd was made and the pool may lack another).
    pub(crate) fn tidy(&self) -> bool {
        self.kick_after_reply();
        let idle = self.shared().client_count() == 0;
        self.pool.tidy(idle)
    }

    /// The tidier thread's loop: tidy while nudged, sleep otherwise, until shutdown.
    fn run_tidier(&self) {
        let t = &self.tidier;
        loop {
            let seen = t.word.load(Ordering::SeqCst);
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            for _ in 0..MAX_ROUNDS {
                if !self.tidy() {
                    break;
                }
            }
            t.asleep.store(true, Ordering::SeqCst);
            if t.word.load(Ordering::SeqCst) == seen && !self.shutdown.load(Ordering::Acquire) {
                futex_wait(&t.word, seen, IDLE_SLEEP);
            }
            t.asleep.store(false, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use davinci_uapi::{
        AllocMemoryArgs, HandleArgs, Wire, DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_FREE_MEMORY,
    };

    use crate::{local_open_params, MockConfig, MockDevice, NoUserMem, Role};

    fn call<T: Wire>(dev: &MockDevice, client: u32, request: u32, args: &mut T) {
        let mut arg = vec![0u8; T::SIZE];
        args.encode(&mut arg);
        dev.ioctl(client, request, &mut arg, &mut NoUserMem)
            .unwrap();
        *args = T::decode(&arg);
    }

    fn until(what: &str, ok: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ok() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Nudged by ALLOC and FREE when the pool is due, the tidier keeps memfds of the size
    /// asked for ready (up to the pool's bound per size) and lets go of freed memory in
    /// batches; the next ALLOC takes one from the pool; without it nothing is kept.
    #[test]
    fn the_tidier_refills_the_pool_and_empties_the_released() {
        let dev = MockDevice::new(MockConfig::default());
        let c = dev.open(local_open_params(Role::Client, true)).unwrap();
        let alloc = || {
            let mut a = AllocMemoryArgs {
                size: 3 * 4096,
                ..Default::default()
            };
            call(&dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a);
            a.handle
        };
        let free = |handle| {
            let mut h = HandleArgs { handle, pad: 0 };
            call(&dev, c, DRIVER_CMD_FREE_MEMORY, &mut h);
        };
        free(alloc());
        std::thread::sleep(Duration::from_millis(20));
        assert!(dev.core().pool.ready().is_empty(), "nothing made ahead yet");
        dev.tidy_in_background().unwrap();
        let held = alloc();
        until("the pool refilled to its bound for the size", || {
            dev.core().pool.ready() == vec![3 * 4096; crate::pool::PER_SIZE]
        });
        let next = alloc();
        assert_eq!(
            dev.core().pool.ready().len(),
            crate::pool::PER_SIZE - 1,
            "ALLOC took a memfd from the pool"
        );
        free(held);
        free(next);
        // Freed memory waits for a batch of RELEASED_BATCH (one wake for several FREEs; or
        // the tidier's safety-net look, once a second), then goes; the pool is refilled.
        let more: Vec<u32> = (2..crate::pool::RELEASED_BATCH).map(|_| alloc()).collect();
        for h in more {
            free(h);
        }
        until("released memory let go of, the pool refilled", || {
            dev.core().pool.released() == 0
                && dev.core().pool.ready().len() == crate::pool::PER_SIZE
        });
        dev.close(c);
        dev.shutdown();
        assert!(!dev.core().tidier.running());
    }
}
