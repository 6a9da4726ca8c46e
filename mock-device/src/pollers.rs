//! The poller threads of a [`MockDevice`](crate::MockDevice) (like io_uring's SQPOLL
//! threads): handing a new stream to the least loaded poller ([`Core::serve`]), starting
//! more past `FUTEX_WAITV_MAX - 1` streams each and retiring them when the crowd has gone
//! ([`Core::reap`]), stopping them all ([`Core::shutdown`]), and one poller's loop: run each
//! stream for `run_budget` descriptors, spin adaptively while idle, then arm NEED_WAKEUP on
//! every idle stream and sleep in one `futex_waitv` on all their doorbells and the kick word.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;
use davinci_driver_core::{DeviceCore, Run};
use davinci_shm::{futex_wait, futex_waitv, involuntary_switches, FutexWaiter, FUTEX_WAITV_MAX};

use crate::platform::MockPlatform;
use crate::state::{relock, Core, Poller, PollerSet, Served};
use crate::stream_mem::StreamMem;

/// A pass that ran fewer tasks than this (over all of a poller's streams) is followed by a
/// pause of `PAUSE_SPINS` spin-loop hints before the next one.
const SMALL_PASS: usize = 16;
const PAUSE_SPINS: u32 = 128;

/// Passes in a row that ran a stream's whole `run_budget` before its ring ran dry for the
/// poller to take its host as starved of CPU ([`Starved`]).
const STARVED_PASSES: u32 = 8;

/// Notices a host that is starved of CPU by this very poller: a stream that had a backlog
/// (its last `STARVED_PASSES` passes in a row each ran the whole budget) and then ran dry.
/// Its host kept up with the device before and has not come back to refill: on a machine
/// with as few cores as busy threads it is most likely runnable and waiting for the core the
/// never-sleeping poller holds. A host that streams faster than the device drains never
/// lets its ring run dry, and a round trip's or a slow host's passes never run the whole
/// budget (measured: 4 client processes on one device on 2 CPUs, the one sharing the
/// poller's CPU got a quarter of a fair share, and it kept 4096 descriptors queued).
#[derive(Default)]
struct Starved {
    /// For each stream (in the poller's order): full-budget passes in a row.
    deep: Vec<u32>,
}

impl Starved {
    /// Starts over for a new set of `streams` streams.
    fn reset(&mut self, streams: usize) {
        self.deep.clear();
        self.deep.resize(streams, 0);
    }

    /// Takes what stream `i` did in this pass; `true` if its host looks starved now.
    fn see(&mut self, i: usize, r: &Run, budget: u32) -> bool {
        let Some(d) = self.deep.get_mut(i) else {
            return false;
        };
        let (next, starved) = match r {
            Run::Progress(n) if *n >= budget => (d.saturating_add(1), false),
            Run::Idle => (0, *d >= STARVED_PASSES),
            _ => (0, false),
        };
        *d = next;
        starved
    }
}

/// What one pass found a stream doing, to decide how the poller may sleep.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Ran descriptors (nothing to arm).
    Busy,
    /// Nothing to run: sleep on its doorbell with NEED_WAKEUP armed.
    Idle,
    /// The event ring is full: sleep on its doorbell with the stall half armed.
    Stalled,
    /// Waiting for an event: the pollers' kick word announces it (`event_timeout` is the
    /// safety net).
    Blocked,
    /// Gone, failed or halted by an injected fault: nothing to wait for.
    Done,
}

impl Core {
    /// Hands stream `stream` of `client` to a poller: the one serving the fewest streams,
    /// starting a new one while fewer than `config.pollers` run or every one is full
    /// (a poller sleeps on at most `FUTEX_WAITV_MAX - 1` doorbells). Call with the device
    /// locked (`g`), so the poller cannot run the stream before it is registered.
    pub(crate) fn serve(
        self: &Arc<Self>,
        g: &DeviceCore<MockPlatform>,
        client: u32,
        stream: u32,
        mem: Arc<StreamMem>,
        after_reply: bool,
    ) -> std::io::Result<()> {
        let mut served = self.served();
        let mut pollers = self.pollers();
        let load = |p: &Poller| relock(p.set.streams.lock()).len();
        let least = pollers.iter().enumerate().min_by_key(|(_, p)| load(p));
        let index = match least {
            Some((i, p))
                if pollers.len() >= self.config.pollers.max(1) && load(p) < FUTEX_WAITV_MAX - 1 =>
            {
                i
            }
            _ => {
                drop(pollers);
                let index = self.start_poller()?;
                pollers = self.pollers();
                index
            }
        };
        let set = &pollers[index].set;
        relock(set.streams.lock()).push((stream, mem));
        set.generation.fetch_add(1, Ordering::AcqRel);
        served.insert(
            stream,
            Served {
                client,
                poller: index,
            },
        );
        // The poller looks at its new set when the kick word changes: now, or `after_reply`
        // (`Core::kick_after_reply`) for a host that tidies after each reply.
        self.kick(g, after_reply);
        Ok(())
    }

    /// Kicks the pollers now, or leaves it for [`kick_after_reply`](Self::kick_after_reply)
    /// (`after_reply`: the caller is a control-path call whose host tidies after its reply).
    /// A poller woken by a call that holds the device would wait for it and take a core from
    /// the reply; nothing is lost by the wait: what the kick announces (a stream added or
    /// gone) comes with no work before the caller has the reply, and work announced by a
    /// doorbell before the kick is found by the pass the kick starts.
    pub(crate) fn kick(&self, g: &DeviceCore<MockPlatform>, after_reply: bool) {
        if after_reply {
            self.kick_pending.store(true, Ordering::Release);
        } else {
            g.platform().kick_pollers();
        }
    }

    /// After a reply (`MockDevice::tidy`): the kicks the call left for then
    /// ([`kick`](Self::kick), `MockPlatform::defer_kicks`).
    pub(crate) fn kick_after_reply(&self) {
        if self.kick_pending.swap(false, Ordering::AcqRel) {
            self.shared().platform().kick_pollers();
        }
    }

    /// Starts one more poller; returns its index.
    pub(crate) fn start_poller(self: &Arc<Self>) -> std::io::Result<usize> {
        let mut pollers = self.pollers();
        let set = Arc::new(PollerSet::default());
        let core = self.clone();
        let pset = set.clone();
        let index = pollers.len();
        let join = std::thread::Builder::new()
            .name(format!("davinci{}-poll{index}", self.config.device_id))
            .spawn(move || core.run_poller(&pset))?;
        pollers.push(Poller { set, join });
        Ok(index)
    }

    /// Stops serving the streams that no longer exist (or all, at shutdown); a poller drops
    /// its reference to their memory at its next pass, which a kick starts: now, or
    /// `after_reply` ([`kick`](Self::kick)) unless it retires a poller (it joins it first).
    pub(crate) fn reap(&self, all: bool, after_reply: bool) {
        // The device stays locked (shared) from the snapshot of the live streams until the
        // served table is pruned: a stream is created and handed to a poller (`serve`) only
        // with the device locked exclusively, so none can be created in between and then
        // taken for a gone one (it would never be served: issue 41).
        let g = self.shared();
        let live: Vec<u32> = if all {
            Vec::new()
        } else {
            g.stream_handles().collect()
        };
        let mut served = self.served();
        let gone: Vec<(u32, usize)> = served
            .iter()
            .filter(|(h, _)| all || !live.contains(h))
            .map(|(h, s)| (*h, s.poller))
            .collect();
        if gone.is_empty() {
            return;
        }
        let mut pollers = self.pollers();
        for (h, p) in gone {
            served.remove(&h);
            if let Some(p) = pollers.get(p) {
                relock(p.set.streams.lock()).retain(|(s, _)| *s != h);
                p.set.generation.fetch_add(1, Ordering::AcqRel);
            }
        }
        // Pollers started beyond `config.pollers` for a crowd of streams go when the crowd
        // has gone: the last ones, while they serve nothing (only the last, so the indices
        // `served` keeps stay valid).
        let mut retired = Vec::new();
        while pollers.len() > self.config.pollers.max(1)
            && pollers
                .last()
                .is_some_and(|p| relock(p.set.streams.lock()).is_empty())
        {
            if let Some(p) = pollers.pop() {
                p.set.retired.store(true, Ordering::Release);
                retired.push(p);
            }
        }
        drop(pollers);
        drop(served);
        // A poller retired here may sleep on the kick word alone, for an hour (an earlier reap
        // emptied its set; it took the empty set and slept before this one retired it), and
        // the joins below wait for it: its kick cannot wait for the reply, which comes after
        // them.
        self.kick(&g, after_reply && retired.is_empty());
        // A retiring poller may take the device lock on its way out.
        drop(g);
        for p in retired {
            // As in `shutdown`: a poller has no path that panics.
            let _ = p.join.join();
        }
    }

    pub(crate) fn shutdown(&self) {
        {
            let g = self.lock();
            self.shutdown.store(true, Ordering::Release);
            g.platform().wake_waiters();
            g.platform().kick_pollers();
        }
        self.reap(true, false);
        let pollers: Vec<Poller> = self.pollers().drain(..).collect();
        {
            // A poller that registered as sleeping after the kick above still sees the
            // shutdown flag at its next look; wake it now rather than at its timeout.
            let g = self.shared();
            g.platform().kick_pollers();
        }
        for p in pollers {
            // A poller cannot panic on any path (driver-core and this crate have none); if it
            // did, there is nothing left to clean up for it.
            let _ = p.join.join();
        }
        self.tidier.stop();
    }

    /// One poller: runs each of its streams for up to `run_budget` descriptors per pass while
    /// any makes progress; when none does, keeps looking for `idle_spin` (spinning, then
    /// yielding) if any ran something since the poller last slept, then arms NEED_WAKEUP on every idle or stalled stream (docs/abi.md 5.3,
    /// 5.4) and sleeps on all their doorbells and the kick word at once (`futex_waitv`), at
    /// most `doorbell_timeout`.
    fn run_poller(&self, set: &PollerSet) {
        let budget = self.config.run_budget.max(1);
        let backoff = Backoff::new();
        let mut idle_since: Option<Instant> = None;
        let mut preempted: Option<u64> = None;
        let mut small_streak = 0u32;
        let mut idle_spins = 0u32;
        // Whether a stream ran anything since the poller last slept: only then does it spin
        // before sleeping again (a kick that found nothing to run, like a new stream's, is
        // no sign that work follows, and a spin would take a core from the control path).
        let mut worked = false;
        let mut streams: Vec<(u32, Arc<StreamMem>)> = Vec::new();
        let mut seen: Vec<Seen> = Vec::new();
        let mut starved = Starved::default();
        let mut generation = u64::MAX;
        loop {
            if self.shutdown.load(Ordering::Acquire) || set.retired.load(Ordering::Acquire) {
                return;
            }
            // Read before the stream set and the pass: anything that announces work after it
            // (a stream added, an event recorded) changes the word, so the sleep below
            // returns at once. Read after the set, a stream added in between would be
            // neither in the set nor announced: the poller slept on without serving it.
            let k0 = self.kick.load(Ordering::Acquire);
            // Retired after this look, the kick that follows changes the word read above,
            // so the sleep below cannot outlast it.
            if set.retired.load(Ordering::Acquire) {
                return;
            }
            let g_now = set.generation.load(Ordering::Acquire);
            if g_now != generation {
                streams = relock(set.streams.lock()).clone();
                generation = g_now;
                starved.reset(streams.len());
            }
            seen.clear();
            let mut progress = false;
            let mut ran = 0usize;
            let mut long = false;
            let mut give_way = false;
            for (i, (h, _)) in streams.iter().enumerate() {
                let r = self.shared_for_run().run_stream(*h, budget);
                give_way |= starved.see(i, &r, budget);
                seen.push(match r {
                    Run::Progress(n) => {
                        progress = true;
                        ran += n as usize;
                        Seen::Busy
                    }
                    // A long task ran a chunk: the lock is released, others go next.
                    Run::Continuing => {
                        progress = true;
                        long = true;
                        Seen::Busy
                    }
                    Run::Idle => Seen::Idle,
                    Run::Stalled => Seen::Stalled,
                    Run::Blocked { .. } => Seen::Blocked,
                    Run::Failed(_) | Run::Halted | Run::Gone => Seen::Done,
                });
            }
            // A host starved by this poller (`Starved`): give the core away once, so that it
            // can refill its ring (a sleep would leave every other stream unserved for a
            // timer's slack; with nobody else runnable here the yield returns at once). Its
            // stream only counts as starved again after another backlog.
            if give_way {
                self.starved_yields.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
            }
            if progress {
                worked = true;
                backoff.reset();
                idle_since = None;
                idle_spins = 0;
                preempted = None;
                // Passes that keep finding only a few tasks, with no empty pass between them,
                // mean the host streams tasks one by one and this poller keeps up: looking
                // again at once would take every task alone and pull the ring's index lines
                // back and forth between the two cores for each. A short pause lets a few
                // accumulate. (A lone small pass, like a round trip's, is not paused: the
                // host waits for it, and the next pass finds the ring empty.)
                // (A pass that ran part of a long task is not small: its task goes on at once.)
                small_streak = if ran < SMALL_PASS && !long {
                    small_streak + 1
                } else {
                    0
                };
                if small_streak >= 3 {
                    for _ in 0..PAUSE_SPINS {
                        std::hint::spin_loop();
                    }
                }
                continue;
            }
            small_streak = 0;
            let since = *idle_since.get_or_insert_with(Instant::now);
            idle_spins = idle_spins.wrapping_add(1);
            // Every 64 idle looks (a syscall, only in a spin that lasts): preempted since the
            // first of these checks means the core is oversubscribed, so park now and leave
            // the core to the others.
            let mut crowded = false;
            if idle_spins.is_multiple_of(64) {
                let now = involuntary_switches();
                crowded = *preempted.get_or_insert(now) != now;
            }
            if worked
                && !streams.is_empty()
                && !crowded
                && (!backoff.is_completed() || since.elapsed() < self.config.idle_spin)
            {
                backoff.snooze();
                continue;
            }
            idle_since = None;
            idle_spins = 0;
            preempted = None;
            backoff.reset();
            worked = false;
            self.park(set, &streams, &seen, k0);
        }
    }

    /// Arms NEED_WAKEUP on the idle and stalled streams and sleeps on their doorbells and the
    /// kick word (`k0` read before the pass). Returns without sleeping if any of them found
    /// work while being armed.
    fn park(&self, set: &PollerSet, streams: &[(u32, Arc<StreamMem>)], seen: &[Seen], k0: u32) {
        let mut armed: Vec<(u32, &AtomicU32, u32)> = Vec::with_capacity(streams.len());
        let g = self.shared();
        let mut rerun = false;
        for ((h, mem), s) in streams.iter().zip(seen) {
            if !matches!(s, Seen::Idle | Seen::Stalled) {
                continue;
            }
            let Some(word) = mem.doorbell_word() else {
                continue;
            };
            // The doorbell value before NEED_WAKEUP is armed: a ring after that changes it.
            let d0 = mem.doorbell_value();
            let sleep = if *s == Seen::Idle {
                g.stream_prepare_sleep(*h)
            } else {
                g.stream_prepare_stall_sleep(*h)
            };
            if !sleep {
                rerun = true;
                break;
            }
            armed.push((*h, word, d0));
        }
        if rerun || self.shutdown.load(Ordering::Acquire) {
            for (h, _, _) in &armed {
                g.stream_woke(*h, false);
            }
            return;
        }
        g.platform().poller_sleeping(true);
        drop(g);
        let mut waiters = Vec::with_capacity(armed.len() + 1);
        waiters.push(FutexWaiter {
            word: &self.kick,
            expected: k0,
            // `kick_pollers` wakes it with the shared `futex_wake`.
            private: false,
        });
        waiters.extend(armed.iter().map(|(_, word, d0)| FutexWaiter {
            word,
            expected: *d0,
            private: false,
        }));
        waiters.truncate(FUTEX_WAITV_MAX);
        // With no stream to serve, only a kick (a new stream, shutdown) can give work: no
        // safety-net wake-ups then. Otherwise the safety net of what the streams wait for.
        let timeout = if streams.is_empty() {
            Duration::from_secs(3600)
        } else if seen.contains(&Seen::Blocked) {
            self.config.doorbell_timeout.min(self.config.event_timeout)
        } else {
            self.config.doorbell_timeout
        };
        set.sleeping_on.store(waiters.len(), Ordering::Relaxed);
        let waited = futex_waitv(&waiters, timeout);
        set.sleeping_on.store(0, Ordering::Relaxed);
        if waited.is_err() {
            // No futex_waitv (a kernel before 5.16): a short bounded sleep instead, so a
            // doorbell is noticed within a millisecond.
            futex_wait(
                &self.kick,
                k0,
                Duration::from_millis(1).min(self.config.doorbell_timeout),
            );
        }
        let g = self.shared();
        g.platform().poller_sleeping(false);
        // A doorbell woke a stream whose word changed while the poller slept (the host's
        // ring, or a NOTIFY or SUBMIT_TASK, which change it too).
        for (h, word, d0) in &armed {
            g.stream_woke(*h, word.load(Ordering::Acquire) != *d0);
        }
    }
}

#[cfg(test)]
mod tests;
