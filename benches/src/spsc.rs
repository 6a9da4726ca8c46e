//! The two-ring baseline: a minimal hand-written single-producer/single-consumer pipeline,
//! the limit of the davinci design (descriptors out through one ring, completions back
//! through another, no system call) on this machine.
//!
//! Two threads: the host pushes 64-byte descriptors into the command ring and pops 16-byte
//! completions from the completion ring; a "device" thread pops descriptors, and pushes one
//! completion (the descriptor's `user_data` and a status) for each. Indices are free-running
//! `u32`s on their own cache lines; slots are arrays of relaxed atomic words (what a shared
//! mapping is accessed with: no references into memory another party writes), published
//! with a Release store of the tail and consumed after an Acquire load of it, exactly the
//! protocol of docs/abi.md 5.2/5.4 minus the doorbell (the device thread never sleeps: it
//! polls, yielding the CPU after a short spin when there is nothing to do).
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::measure::{LatencyRun, ThroughputRun, Window};

/// Words of a descriptor (64 bytes).
pub const DESC_WORDS: usize = 8;
/// Words of a completion (16 bytes).
pub const COMPLETION_WORDS: usize = 2;

/// One ring of `entries` slots of `W` 64-bit words.
#[derive(Debug)]
pub struct Ring<const W: usize> {
    tail: CachePadded<AtomicU32>,
    head: CachePadded<AtomicU32>,
    mask: u32,
    slots: Box<[AtomicU64]>,
}

impl<const W: usize> Ring<W> {
    /// A ring of `entries` slots (rounded up to a power of two, at least 2).
    pub fn new(entries: u32) -> Arc<Self> {
        let entries = entries.max(2).next_power_of_two();
        Arc::new(Ring {
            tail: CachePadded::new(AtomicU32::new(0)),
            head: CachePadded::new(AtomicU32::new(0)),
            mask: entries - 1,
            slots: (0..entries as usize * W)
                .map(|_| AtomicU64::new(0))
                .collect(),
        })
    }

    fn entries(&self) -> u32 {
        self.mask + 1
    }

    fn slot(&self, index: u32) -> &[AtomicU64] {
        let start = (index & self.mask) as usize * W;
        &self.slots[start..start + W]
    }
}

/// The producing end of a [`Ring`] (one thread).
#[derive(Debug)]
pub struct Producer<const W: usize> {
    ring: Arc<Ring<W>>,
    tail: u32,
    cached_head: u32,
}

/// The consuming end of a [`Ring`] (one thread).
#[derive(Debug)]
pub struct Consumer<const W: usize> {
    ring: Arc<Ring<W>>,
    head: u32,
    cached_tail: u32,
}

/// Both ends of a new ring of `entries` slots.
pub fn ring<const W: usize>(entries: u32) -> (Producer<W>, Consumer<W>) {
    let r = Ring::<W>::new(entries);
    (
        Producer {
            ring: r.clone(),
            tail: 0,
            cached_head: 0,
        },
        Consumer {
            ring: r,
            head: 0,
            cached_tail: 0,
        },
    )
}

impl<const W: usize> Producer<W> {
    /// Free slots (re-reading the consumer's head only when the cached one says fewer than
    /// `want` are free).
    pub fn free(&mut self, want: u32) -> u32 {
        let entries = self.ring.entries();
        let mut free = entries - self.tail.wrapping_sub(self.cached_head);
        if free < want {
            self.cached_head = self.ring.head.load(Ordering::Acquire);
            free = entries - self.tail.wrapping_sub(self.cached_head);
        }
        free
    }

    /// Writes `item` into the next slot without publishing it; `false` if the ring is full.
    pub fn push(&mut self, item: &[u64; W]) -> bool {
        if self.free(1) == 0 {
            return false;
        }
        for (w, v) in self.ring.slot(self.tail).iter().zip(item) {
            w.store(*v, Ordering::Relaxed);
        }
        self.tail = self.tail.wrapping_add(1);
        true
    }

    /// Publishes every pushed slot (one Release store).
    pub fn publish(&self) {
        self.ring.tail.store(self.tail, Ordering::Release);
    }
}

impl<const W: usize> Consumer<W> {
    /// Slots ready to be consumed (re-reading the producer's tail only when the cached one
    /// shows none).
    pub fn available(&mut self) -> u32 {
        if self.cached_tail == self.head {
            self.cached_tail = self.ring.tail.load(Ordering::Acquire);
        }
        self.cached_tail.wrapping_sub(self.head)
    }

    /// Copies out the next slot (not yet released to the producer).
    pub fn pop(&mut self) -> Option<[u64; W]> {
        if self.available() == 0 {
            return None;
        }
        let mut out = [0u64; W];
        for (o, w) in out.iter_mut().zip(self.ring.slot(self.head)) {
            *o = w.load(Ordering::Relaxed);
        }
        self.head = self.head.wrapping_add(1);
        Some(out)
    }

    /// Releases every popped slot to the producer (one Release store).
    pub fn release(&self) {
        self.ring.head.store(self.head, Ordering::Release);
    }
}

/// A descriptor as the baseline sends it: a NOP with `user_data` in word 1 (the davinci
/// layout: opcode in byte 0, `user_data` at offset 8).
pub fn nop_desc(user_data: u64) -> [u64; DESC_WORDS] {
    let mut d = [0u64; DESC_WORDS];
    d[1] = user_data;
    d
}

/// The "device" thread of the pipeline: consumes descriptors, completes each, until `stop`.
fn device_loop(
    mut cmd: Consumer<DESC_WORDS>,
    mut cpl: Producer<COMPLETION_WORDS>,
    stop: Arc<AtomicBool>,
) {
    const BUDGET: u32 = 64;
    let mut idle = 0u32;
    loop {
        let n = cmd.available().min(BUDGET).min(cpl.free(1));
        if n == 0 {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            idle = idle.saturating_add(1);
            if idle < 4096 {
                std::hint::spin_loop();
            } else {
                thread::yield_now();
            }
            continue;
        }
        idle = 0;
        for _ in 0..n {
            let Some(d) = cmd.pop() else { break };
            // A NOP: the completion carries user_data and status 0 (opcode in byte 0 echoed).
            let status_opcode = d[0] & 0xff;
            cpl.push(&[d[1], status_opcode]);
        }
        cmd.release();
        cpl.publish();
    }
}

/// A running pipeline: the host ends and the device thread.
pub struct Pipeline {
    cmd: Producer<DESC_WORDS>,
    cpl: Consumer<COMPLETION_WORDS>,
    stop: Arc<AtomicBool>,
    device: Option<thread::JoinHandle<()>>,
    next_submit: u64,
    next_complete: u64,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("submitted", &self.next_submit)
            .field("completed", &self.next_complete)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Starts the device thread over two rings of `entries` slots.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start(entries: u32) -> Result<Pipeline, String> {
        let (cmd, dev_cmd) = ring::<DESC_WORDS>(entries);
        let (dev_cpl, cpl) = ring::<COMPLETION_WORDS>(entries);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let device = thread::Builder::new()
            .name("two-ring-device".into())
            .spawn(move || device_loop(dev_cmd, dev_cpl, s))
            .map_err(|e| format!("cannot spawn the baseline's device thread: {e}"))?;
        Ok(Pipeline {
            cmd,
            cpl,
            stop,
            device: Some(device),
            next_submit: 0,
            next_complete: 0,
        })
    }

    /// Pushes and publishes `batch` descriptors if they fit; returns whether it did.
    pub fn try_submit(&mut self, batch: u32) -> bool {
        if self.cmd.free(batch) < batch {
            return false;
        }
        for _ in 0..batch {
            self.cmd.push(&nop_desc(self.next_submit));
            self.next_submit += 1;
        }
        self.cmd.publish();
        true
    }

    /// Takes every available completion, checking each one's `user_data` is the next
    /// expected (in order, each once). Returns how many, or the first out-of-order one.
    pub fn reap(&mut self) -> Result<u64, String> {
        let mut n = 0;
        while let Some(c) = self.cpl.pop() {
            if c[0] != self.next_complete || c[1] != 0 {
                return Err(format!(
                    "two-ring baseline: completion {:?} where user_data {} was expected",
                    c, self.next_complete
                ));
            }
            self.next_complete += 1;
            n += 1;
        }
        if n > 0 {
            self.cpl.release();
        }
        Ok(n)
    }

    /// Descriptors submitted so far.
    pub fn submitted(&self) -> u64 {
        self.next_submit
    }

    /// Completions taken so far.
    pub fn completed(&self) -> u64 {
        self.next_complete
    }

    /// Takes completions until every submitted descriptor has completed (at most `timeout`).
    ///
    /// # Errors
    /// An out-of-order completion or the timeout.
    pub fn drain(&mut self, timeout: Duration) -> Result<(), String> {
        let t0 = Instant::now();
        while self.next_complete < self.next_submit {
            if self.reap()? == 0 {
                if t0.elapsed() > timeout {
                    return Err(format!(
                        "two-ring baseline: {} completions missing after {timeout:?}",
                        self.next_submit - self.next_complete
                    ));
                }
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    /// Stops and joins the device thread.
    pub fn stop(mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.device.take() {
            Some(h) => h
                .join()
                .map_err(|_| "the baseline's device thread panicked".to_string()),
            None => Ok(()),
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.device.take() {
            let _ = h.join();
        }
    }
}

/// Streaming throughput: `batch` descriptors per publish, the host submitting whenever the
/// command ring has room and reaping in between (pipelined), over `window`.
///
/// # Errors
/// A completion out of order or missing, or the thread cannot be spawned.
pub fn throughput(batch: u32, window: Window) -> Result<ThroughputRun, String> {
    // The same depth as ours (`shim_rows::stream_options`): 4096 descriptors.
    let mut p = Pipeline::start(4096)?;
    let mut w = window.start();
    loop {
        p.try_submit(batch);
        p.reap()?;
        if w.tick(p.completed()) {
            break;
        }
    }
    let run = w.finish(p.completed());
    p.drain(Duration::from_secs(10))?;
    p.stop()?;
    Ok(run)
}

/// Round trip with one descriptor in flight: push, publish, spin until its completion.
///
/// # Errors
/// A completion out of order or missing, or the thread cannot be spawned.
pub fn round_trip(window: Window) -> Result<LatencyRun, String> {
    let mut p = Pipeline::start(64)?;
    let mut lat = LatencyRun::new(window);
    loop {
        let t0 = Instant::now();
        p.try_submit(1);
        let spin = Instant::now();
        while p.reap()? == 0 {
            if spin.elapsed() > Duration::from_secs(10) {
                return Err("two-ring baseline: no completion within 10 s".into());
            }
            std::hint::spin_loop();
        }
        if lat.record(t0) {
            break;
        }
    }
    p.stop()?;
    Ok(lat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_order_and_wraps() {
        let (mut p, mut c) = ring::<3>(4);
        let mut next_in = 0u64;
        let mut next_out = 0u64;
        for round in 0..50u64 {
            let k = round % 5;
            for _ in 0..k {
                if p.push(&[next_in, next_in * 2, !next_in]) {
                    next_in += 1;
                }
            }
            p.publish();
            while let Some(v) = c.pop() {
                assert_eq!(v, [next_out, next_out * 2, !next_out]);
                next_out += 1;
            }
            c.release();
        }
        assert_eq!(next_in, next_out);
        assert!(next_in > 50);
    }

    #[test]
    fn full_ring_refuses() {
        let (mut p, mut c) = ring::<1>(2);
        assert!(p.push(&[1]));
        assert!(p.push(&[2]));
        assert!(!p.push(&[3]));
        p.publish();
        assert_eq!(c.pop(), Some([1]));
        // Not released yet: still full for the producer.
        assert!(!p.push(&[3]));
        c.release();
        assert!(p.push(&[3]));
    }

    #[test]
    fn pipeline_delivers_every_item_in_order_across_threads() {
        let mut p = Pipeline::start(16).unwrap();
        let total = 200_000u64;
        let t0 = Instant::now();
        while p.completed() < total {
            if p.submitted() < total {
                let batch = ((total - p.submitted()) as u32).min(7);
                p.try_submit(batch);
            }
            p.reap().unwrap();
            assert!(t0.elapsed() < Duration::from_secs(60), "pipeline stalled");
        }
        assert_eq!(p.submitted(), total);
        assert_eq!(p.completed(), total);
        p.stop().unwrap();
    }

    #[test]
    fn throughput_and_round_trip_run() {
        let w = Window::new(Duration::from_millis(30), Duration::from_millis(5));
        let t = throughput(64, w).unwrap();
        assert!(t.tasks > 0);
        let l = round_trip(w).unwrap();
        assert!(l.samples.len() > 10);
    }
}
