//! The blocking half of WAIT_EVENT: a host thread whose wait driver-core could not decide at
//! once counts itself as a sleeper, checks its condition with the device held exclusively,
//! and sleeps on the platform's wake word with the device released, until
//! `notify_waiters` bumps the word, its timeout passes or the device shuts down.
#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use davinci_driver_core::{Error, WaitSpec};
use davinci_shm::futex_wait;
use davinci_uapi::Errno;

use crate::state::{Core, Exclusive};

impl Core {
    /// The blocking half of WAIT_EVENT: checks with the device held exclusively, sleeps on
    /// the platform's wake word with it released.
    pub(crate) fn wait<'a>(
        &'a self,
        mut g: Exclusive<'a>,
        client: u32,
        spec: &WaitSpec,
        arg: &mut [u8],
    ) -> Result<(), Error> {
        let start = Instant::now();
        let timeout = Duration::from_nanos(spec.timeout_ns);
        loop {
            let elapsed = start.elapsed();
            let timed_out = elapsed >= timeout;
            // Counted (and the word read) before the check: a notification that misses the
            // check changes the word or wakes this waiter.
            let word = g.platform().add_waiter();
            let done = g.finish_wait(client, spec, arg, timed_out);
            if !matches!(done, Ok(None)) {
                g.platform().remove_waiter();
                return done.map(|_| ());
            }
            if self.shutdown.load(Ordering::Acquire) {
                g.platform().remove_waiter();
                return Err(Error::new(
                    Errno::ENODEV,
                    "the device shut down during the wait",
                ));
            }
            drop(g);
            futex_wait(&self.notified, word, timeout.saturating_sub(elapsed));
            g = self.lock();
            g.platform().remove_waiter();
        }
    }
}
