//! The daemon's blocking WAIT_EVENTs. A connection's reader never blocks on one: it starts
//! the ioctl without blocking ([`MockDevice::ioctl_start`](davinci_mock_device::MockDevice::ioctl_start)),
//! and a wait that must wait is queued here. One thread per device, started with the first
//! queued wait and gone once none is left, checks every queued wait whenever the device
//! announces a change (a completion, an event recorded, a close), answers those that ended
//! and sleeps until the next change or the nearest deadline. So the daemon's threads do not
//! grow with waits, and a connection's reader always sees its end (and closes its open,
//! which ends its waits). A tenant (the client's container, else its user) has at most its
//! share of the device's waits in flight ([`wait_share`]: [`MAX_WAITS_PER_DEVICE`] over the
//! device's tenant slots), so one tenant's waits never make another's fail.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use davinci_driver_core::Error;
use davinci_mock_device::{MockDevice, PendingWait};
use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{Kind, Reply};
use tracing::{debug, warn};

use crate::gate::TenantKey;
use crate::reply::{driver_reply, encode_reply};

/// Blocking waits in flight per device: each change the device announces has the wait thread
/// check them all with the device held, so their number bounds that work (about 0.2 ms for
/// all of them), whatever the tenants queue.
pub const MAX_WAITS_PER_DEVICE: usize = 1024;

/// Blocking waits one tenant may have in flight on a device with `slots` tenant slots:
/// [`MAX_WAITS_PER_DEVICE`] over them (clamped to 1..=64).
pub fn wait_share(slots: u32) -> usize {
    MAX_WAITS_PER_DEVICE / slots.clamp(1, davinci_driver_core::MAX_TENANT_SLOTS) as usize
}

/// Why a wait was not queued.
#[derive(Debug)]
pub(crate) enum QueueError {
    /// [`MAX_WAITS_PER_DEVICE`] are in flight.
    Full,
    /// The tenant has its share in flight: (the share, the device's tenant slots).
    TenantFull(usize, u32),
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
    /// The connection's waits in flight, this one among them as `id`
    /// ([`ConnWaits::add`]; taken out when it is answered).
    pub(crate) owner: Arc<ConnWaits>,
    pub(crate) id: u64,
    /// Whose share it counts in.
    pub(crate) tenant: davinci_driver_core::Tenant,
}

/// One connection's blocking waits in flight: their number (at most
/// [`MAX_WAITS_PER_CONN`](crate::shared::MAX_WAITS_PER_CONN), the caller checks) and, for
/// each, its tag and whether a CANCEL came for it while the wait thread had it out to check.
/// Its own, so another connection's frames (a flood of CANCELs for tags it never used)
/// cannot displace a mark here; and bounded by its own waits, since a CANCEL marks one of
/// them or nothing.
#[derive(Debug, Default)]
pub(crate) struct ConnWaits {
    slots: Mutex<Slots>,
}

#[derive(Debug, Default)]
struct Slots {
    next: u64,
    live: Vec<Slot>,
}

#[derive(Debug)]
struct Slot {
    id: u64,
    tag: u32,
    cancelled: bool,
}

impl ConnWaits {
    fn locked(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.locked().live.len()
    }

    /// Counts a new wait with `tag` in: its id.
    pub(crate) fn add(&self, tag: u32) -> u64 {
        let mut s = self.locked();
        s.next += 1;
        let id = s.next;
        s.live.push(Slot {
            id,
            tag,
            cancelled: false,
        });
        id
    }

    /// Counts wait `id` out (answered, or never queued).
    pub(crate) fn remove(&self, id: u64) {
        self.locked().live.retain(|s| s.id != id);
    }

    /// Marks the first wait with `tag` not marked yet; nothing when there is none.
    fn cancel(&self, tag: u32) {
        if let Some(s) = self
            .locked()
            .live
            .iter_mut()
            .find(|s| s.tag == tag && !s.cancelled)
        {
            s.cancelled = true;
        }
    }

    fn is_cancelled(&self, id: u64) -> bool {
        self.locked().live.iter().any(|s| s.id == id && s.cancelled)
    }
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// Waits queued or being checked (the thread takes them out of `waiting` to check them).
    in_flight: usize,
    /// Of them, each tenant's.
    tenants: HashMap<TenantKey, usize>,
    /// The wait thread runs (it clears this, under the lock, when it finds nothing left).
    running: bool,
}

impl Queue {
    /// A wait of `tenant` was answered.
    fn done(&mut self, tenant: davinci_driver_core::Tenant) {
        self.in_flight -= 1;
        let key = TenantKey(tenant);
        if let Some(n) = self.tenants.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.tenants.remove(&key);
            }
        }
    }
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
    /// The wait's tenant has its share ([`wait_share`]) in flight, [`MAX_WAITS_PER_DEVICE`]
    /// are, or no wait thread could be started (the caller answers the wait `EBUSY`).
    pub(crate) fn queue(self: &Arc<Self>, w: Waiting) -> Result<(), QueueError> {
        let slots = self.dev.config().tenant_slots;
        let key = TenantKey(w.tenant);
        // Read before the queue's lock: the device's lock is never taken under it.
        let share = wait_share(slots)
            .saturating_mul(self.dev.tenant_shares(w.tenant).max(1) as usize)
            .min(MAX_WAITS_PER_DEVICE);
        let mut q = self.locked();
        if q.tenants.get(&key).is_some_and(|&n| n >= share) {
            return Err(QueueError::TenantFull(share, slots));
        }
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
        *q.tenants.entry(key).or_insert(0) += 1;
        drop(q);
        // A thread asleep with older waits looks again now.
        self.dev.wake_waits();
        Ok(())
    }

    /// CANCEL of the wait `tag` of the connection whose waits are `owner`: answered with
    /// `EINTR` (the client gave up on it, after a signal), so it holds no slot until its
    /// timeout: now if it is queued, else (the wait thread has it out to check) marked in
    /// `owner`, under this lock, and answered when the thread puts its batch back. Unknown
    /// tags are ignored.
    pub(crate) fn cancel(&self, owner: &Arc<ConnWaits>, tag: u32) {
        let mut q = self.locked();
        if let Some(i) = q
            .waiting
            .iter()
            .position(|w| Arc::ptr_eq(&w.owner, owner) && w.tag == tag)
        {
            let w = q.waiting.swap_remove(i);
            q.done(w.tenant);
            drop(q);
            self.answer(w, Err(cancelled()));
        } else {
            owner.cancel(tag);
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
                // CANCELs that came while this batch was being checked (marked under this
                // lock, so none is missed: a later one finds its wait in `waiting`).
                for w in pending {
                    if w.owner.is_cancelled(w.id) {
                        ended.push((w, Err(cancelled())));
                    } else {
                        q.waiting.push(w);
                    }
                }
                fresh
            };
            let tenants: Vec<_> = ended.iter().map(|(w, _)| w.tenant).collect();
            for (w, r) in ended {
                self.answer(w, r);
            }
            let mut q = self.locked();
            for t in tenants {
                q.done(t);
            }
            drop(q);
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
            owner,
            id,
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
        owner.remove(id);
    }
}
