//! The blocking half of WAIT_EVENT, two ways. In the caller's thread ([`Core::wait`], for
//! [`MockDevice::ioctl`]): the thread whose wait driver-core could not decide at once counts
//! itself as a sleeper, checks its condition with the device held exclusively, and sleeps on
//! the platform's wake word with the device released, until `notify_waiters` bumps the word,
//! its timeout passes or the device shuts down. Or without blocking the caller
//! ([`MockDevice::ioctl_start`] hands back a [`PendingWait`]): one thread of the host checks
//! every pending wait it holds in one [`WaitCheck`] and sleeps the same way (the daemon's
//! waits, served by one thread, not one per wait).
#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use davinci_driver_core::{Error, Reply, UserMem, WaitSpec};
use davinci_shm::futex_wait;
use davinci_uapi::Errno;

use crate::mock_device::MockDevice;
use crate::state::{Core, Exclusive};

/// A WAIT_EVENT that [`MockDevice::ioctl_start`] could not answer at once: check it with
/// [`WaitCheck::poll`] until it ends (reached, failed or timed out).
#[derive(Debug, Clone)]
pub struct PendingWait {
    client: u32,
    spec: WaitSpec,
    deadline: Instant,
}

impl PendingWait {
    pub(crate) fn new(client: u32, spec: WaitSpec) -> Self {
        let timeout = Duration::from_nanos(spec.timeout_ns);
        // A timeout past what `Instant` can hold is as good as forever.
        let deadline = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 86_400));
        PendingWait {
            client,
            spec,
            deadline,
        }
    }

    /// The open that waits.
    pub fn client(&self) -> u32 {
        self.client
    }

    /// When it times out.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// The device held exclusively to check pending waits ([`MockDevice::check_waits`]), its
/// holder counted as a sleeper from before the first check, so a notification that misses a
/// check ends the [`sleep`](Self::sleep) that follows at once.
pub struct WaitCheck<'a> {
    core: &'a Core,
    g: Option<Exclusive<'a>>,
    word: u32,
}

impl WaitCheck<'_> {
    /// Whether `w` has ended: `Some(result)` with the reply in `arg` (the WAIT_EVENT
    /// argument's bytes, as the ioctl had them), `None` while it still waits. `ETIMEDOUT`
    /// past its deadline; `ENODEV` once the device shuts down or the open is closed.
    /// After [`release`](Self::release), `None` for every wait.
    pub fn poll(&mut self, w: &PendingWait, arg: &mut [u8]) -> Option<Result<(), Error>> {
        let g = self.g.as_mut()?;
        if self.core.shutdown.load(Ordering::Acquire) {
            return Some(Err(Error::new(
                Errno::ENODEV,
                "the device shut down during the wait",
            )));
        }
        let timed_out = Instant::now() >= w.deadline;
        match g.finish_wait(w.client, &w.spec, arg, timed_out) {
            Ok(None) => None,
            Ok(Some(())) => Some(Ok(())),
            Err(e) => Some(Err(e)),
        }
    }

    /// Releases the device (the checks are done), still counted as a sleeper: a change
    /// from now on still ends the [`sleep`](Self::sleep) that follows at once.
    pub fn release(&mut self) {
        self.g = None;
    }

    /// Releases the device and sleeps until a notification since the check began (a
    /// completion, an event recorded, a close, [`MockDevice::wake_waits`]) or `timeout`.
    pub fn sleep(mut self, timeout: Duration) {
        self.g = None;
        futex_wait(&self.core.notified, self.word, timeout);
    }
}

impl Drop for WaitCheck<'_> {
    fn drop(&mut self) {
        // Counted from `check_waits` until the sleep ended (or the checks were abandoned).
        match &self.g {
            Some(g) => g.platform().remove_waiter(),
            None => self.core.shared().platform().remove_waiter(),
        }
    }
}

/// What [`MockDevice::ioctl_start`] did.
#[derive(Debug)]
pub enum Started {
    /// The ioctl is answered (the reply is in its argument).
    Done,
    /// A WAIT_EVENT that waits: check it with [`MockDevice::check_waits`].
    Waiting(PendingWait),
}

impl MockDevice {
    /// One ioctl for `client` that never blocks: like [`ioctl`](Self::ioctl), but a
    /// WAIT_EVENT that cannot be answered at once is handed back as a [`PendingWait`] (the
    /// caller checks it with [`check_waits`](Self::check_waits) until it ends) instead of
    /// blocking the calling thread.
    pub fn ioctl_start(
        &self,
        client: u32,
        request: u32,
        arg: &mut [u8],
        user: &mut dyn UserMem,
    ) -> Result<Started, Error> {
        let core = self.core();
        let mut g = core.lock();
        if core.shutdown.load(Ordering::Acquire) {
            return Err(Error::new(Errno::ENODEV, "the device has shut down"));
        }
        match g.ioctl(client, request, arg, user)? {
            Reply::Wait(spec) => Ok(Started::Waiting(PendingWait::new(client, spec))),
            other => self
                .finish(g, client, request, other, false)
                .map(|()| Started::Done),
        }
    }

    /// Holds the device exclusively to check pending waits ([`WaitCheck::poll`]), then
    /// [`sleep`](WaitCheck::sleep) until something changes.
    pub fn check_waits(&self) -> WaitCheck<'_> {
        let core = self.core();
        let g = core.lock();
        let word = g.platform().add_waiter();
        WaitCheck {
            core,
            g: Some(g),
            word,
        }
    }

    /// Ends the sleep of every [`WaitCheck`] (and every waiting [`MockDevice::ioctl`]) for
    /// another look: a host that queued a new [`PendingWait`] calls it.
    pub fn wake_waits(&self) {
        self.core().shared().platform().wake_waiters();
    }
}

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
            let interrupted = futex_wait(&self.notified, word, timeout.saturating_sub(elapsed));
            g = self.lock();
            g.platform().remove_waiter();
            if interrupted {
                // A signal handler ran on this thread (the caller's, in an embedded device):
                // return EINTR as the kernel driver does, with where things stand in `arg`,
                // unless the wait is over anyway.
                let done = g.finish_wait(client, spec, arg, false);
                if !matches!(done, Ok(None)) {
                    return done.map(|_| ());
                }
                return Err(Error::new(
                    Errno::EINTR,
                    "the wait was interrupted by a signal handler on the waiting thread",
                ));
            }
        }
    }
}
