//! The daemon's blocking WAIT_EVENTs. A connection's reader never blocks on one: it starts
//! the ioctl without blocking ([`MockDevice::ioctl_start`](davinci_mock_device::MockDevice::ioctl_start)),
//! and a wait that must wait is queued here. One thread per device, started with the first
//! queued wait and gone once none is left, checks every queued wait whenever the device
//! announces a change (a completion, an event recorded, a close), answers those that ended
//! and sleeps until the next change or the nearest deadline. So the daemon's threads do not
//! grow with waits, and a connection's reader always sees its end (and closes its open,
//! which ends its waits).
#![forbid(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use davinci_driver_core::Error;
use davinci_mock_device::{MockDevice, PendingWait};
use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{Kind, Reply};
use tracing::{debug, warn};

use crate::reply::{driver_reply, encode_reply};

/// Blocking waits in flight per device: each change the device announces has the wait thread
/// check them all with the device held, so their number bounds that work (about 0.2 ms for
/// all of them), whatever the tenants queue.
pub const MAX_WAITS_PER_DEVICE: usize = 1024;

/// Why a wait was not queued.
#[derive(Debug)]
pub(crate) enum QueueError {
    /// [`MAX_WAITS_PER_DEVICE`] are in flight.
    Full,
    /// The wait thread could not be started.
    NoThread(io::Error),
}

fn cancelled() -> Error {
    Error::new(
        davinci_uapi::Errno::EINTR,
        "the client gave up the wait (CANCEL: interrupted by a signal)",
    )
}

/// The longest the wait thread sleeps without looking (a safety net: every change that can
/// end a wait wakes it).
const SAFETY_NET: Duration = Duration::from_secs(1);

/// A queued wait: what to answer, to whom.
pub(crate) struct Waiting {
    pub(crate) wait: PendingWait,
    pub(crate) conn: Arc<SeqPacket>,
    pub(crate) tag: u32,
    /// The WAIT_EVENT argument; the reply's fields are written into it.
    pub(crate) arg: Vec<u8>,
    /// The connection's count of waits in flight (taken down when this one is answered).
    pub(crate) in_flight: Arc<AtomicUsize>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// Waits queued or being checked (the thread takes them out of `waiting` to check them).
    in_flight: usize,
    /// The wait thread runs (it clears this, under the lock, when it finds nothing left).
    running: bool,
    /// CANCELs that came while their waits were out of `waiting` being checked: matched when
    /// the thread puts the batch back, then cleared (at most one per wait in flight).
    cancelled: Vec<(usize, u32)>,
}

/// A connection's identity for CANCEL: its socket's address.
fn conn_id(conn: &Arc<SeqPacket>) -> usize {
    Arc::as_ptr(conn) as usize
}

/// One device's queued waits, and what the wait thread needs: the device and its name.
pub(crate) struct Waits {
    dev: MockDevice,
    /// `davinciN`, for logs.
    name: String,
    queue: Mutex<Queue>,
}

impl Waits {
    pub(crate) fn new(dev: MockDevice, name: String) -> Self {
        Waits {
            dev,
            name,
            queue: Mutex::default(),
        }
    }

    fn locked(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `w` and makes sure the device's wait thread looks at it.
    ///
    /// # Errors
    /// [`MAX_WAITS_PER_DEVICE`] are in flight, or no wait thread could be started (the
    /// caller answers the wait `EBUSY`).
    pub(crate) fn queue(self: &Arc<Self>, w: Waiting) -> Result<(), QueueError> {
        let mut q = self.locked();
        if q.in_flight >= MAX_WAITS_PER_DEVICE {
            return Err(QueueError::Full);
        }
        if !q.running {
            let me = self.clone();
            std::thread::Builder::new()
                .name(format!("{}-waits", self.name))
                .spawn(move || me.run())
                .map_err(QueueError::NoThread)?;
            q.running = true;
        }
        q.waiting.push(w);
        q.in_flight += 1;
        drop(q);
        // A thread asleep with older waits looks again now.
        self.dev.wake_waits();
        Ok(())
    }

    /// CANCEL from `conn` of its wait `tag`: answered now with `EINTR` (the client gave up
    /// on it, after a signal), so it holds no slot until its timeout. Unknown tags are
    /// ignored.
    pub(crate) fn cancel(&self, conn: &Arc<SeqPacket>, tag: u32) {
        let id = (conn_id(conn), tag);
        let mut q = self.locked();
        if let Some(i) = q
            .waiting
            .iter()
            .position(|w| (conn_id(&w.conn), w.tag) == id)
        {
            let w = q.waiting.swap_remove(i);
            q.in_flight -= 1;
            drop(q);
            self.answer(w, Err(cancelled()));
        } else if q.running && q.cancelled.len() < q.in_flight {
            q.cancelled.push(id);
        }
    }

    fn run(&self) {
        loop {
            let batch = {
                let mut q = self.locked();
                if q.waiting.is_empty() {
                    q.running = false;
                    return;
                }
                std::mem::take(&mut q.waiting)
            };
            // Counted as a sleeper from before the first check: a change after it ends the
            // sleep below at once.
            let mut check = self.dev.check_waits();
            let mut ended = Vec::new();
            let mut pending = Vec::with_capacity(batch.len());
            for mut w in batch {
                match check.poll(&w.wait, &mut w.arg) {
                    Some(r) => ended.push((w, r)),
                    None => pending.push(w),
                }
            }
            check.release();
            let now = Instant::now();
            let nearest = pending.iter().map(|w| w.wait.deadline()).min();
            let fresh = {
                let mut q = self.locked();
                let fresh = !q.waiting.is_empty();
                // CANCELs that came while this batch was being checked.
                for id in std::mem::take(&mut q.cancelled) {
                    if let Some(i) = pending.iter().position(|w| (conn_id(&w.conn), w.tag) == id) {
                        ended.push((pending.swap_remove(i), Err(cancelled())));
                    }
                }
                q.waiting.append(&mut pending);
                fresh
            };
            let answered = ended.len();
            for (w, r) in ended {
                self.answer(w, r);
            }
            self.locked().in_flight -= answered;
            if fresh {
                continue;
            }
            let timeout = nearest.map_or(SAFETY_NET, |d| {
                d.saturating_duration_since(now).min(SAFETY_NET)
            });
            check.sleep(timeout);
        }
    }

    /// Sends a wait's reply without blocking: a peer whose receive queue is full does not
    /// read its replies, and is disconnected rather than allowed to hold up everyone's waits.
    fn answer(&self, w: Waiting, r: Result<(), Error>) {
        let Waiting {
            conn,
            tag,
            arg,
            in_flight,
            ..
        } = w;
        let reply: Reply = driver_reply(Kind::Ioctl, tag, arg, r);
        if let Some(bytes) = encode_reply(&reply) {
            match conn.send_nowait(&bytes) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    warn!(
                        device = %self.name,
                        "a client does not read its replies (its queue is full); disconnecting it"
                    );
                    conn.shutdown();
                }
                Err(e) => debug!(error = %e, "wait reply not delivered (peer gone)"),
            }
        }
        in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}
