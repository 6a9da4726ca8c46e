//! The two-ring baseline: a minimal hand-written single-producer/single-consumer pipeline,
//! the limit of the davinci design (descriptors out through one ring, completions back
//! through another, no system call) on this machine.
//!
//! Two threads: the host pushes 64-byte descriptors into the command ring and pops 16-byte
//! completions from the completion ring; a "device" thread pops descriptors, and pushes one
//! completion (the descriptor's `user_data` and a status) for each. The host and device
//! loops ([`Pipeline`], `device_loop`) are written once over two small traits ([`Tx`],
//! [`Rx`]), so the rings can be swapped: this file's own ring ([`ring`], THE baseline, the
//! fastest measured here) and the alternatives in `spsc_alt.rs` (`rtrb`, crossbeam's
//! `ArrayQueue`), extra rows of the table.
//!
//! The own ring does what the fastest SPSC rings do and nothing else: free-running `u32`
//! indices, each on its own cache line (128-byte padding against the adjacent-line
//! prefetcher); each side keeps a copy of the other side's index and reads the real one only
//! when the copy says full (producer) or empty (consumer); one Release store of an index per
//! batch, not per item; slots laid in 64-byte-aligned lines, so a descriptor is exactly one
//! cache line and four completions share one; slots are arrays of relaxed atomic words (what
//! a shared mapping is accessed with: no references into memory another party writes). And
//! the host writes a batch of at least [`NT_BATCH`] descriptors with non-temporal stores,
//! whole lines at a time (`wide.rs`): a plain store must first take the line back from the
//! device's cache, where it was left when the device read the slot one ring ago, and that
//! read-for-ownership was most of the host's time (batch 64 about 2.5× faster with them
//! here); a smaller batch is written with plain stores (the `sfence` and partial
//! write-combining made batch 1 four times slower). [`Rings::Plain`] is the same ring
//! without them. That is the protocol of docs/abi.md 5.2/5.4 minus the doorbell: the device
//! thread never sleeps (it spins, yielding the CPU only after a long idle spell).
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

pub use crate::spsc_ring::{
    ring, Consumer, Cpl, Desc, DescHead, Producer, Ring, Rx, Stores, Tx, Words, COMPLETION_WORDS,
    DESC_WORDS, DEVICE_BUDGET, NT_BATCH, PREFETCH_AHEAD,
};

/// The device's work on one descriptor: a NOP completes with its `user_data` and status 0
/// (the opcode in byte 0 echoed).
fn complete(d: DescHead) -> Cpl {
    Cpl([d.user_data, d.word0 & 0xff])
}

/// The "device" thread of the pipeline: takes up to [`DEVICE_BUDGET`] descriptors at a time
/// (as many as the completion ring has room for), writes each one's completion as it reads
/// it, publishes the completions and releases the descriptors (one index store on each ring
/// per pass), until `stop`. Spins while idle (a spin-loop hint per look), yielding the CPU
/// only after 4096 empty looks in a row.
fn device_loop<D: Copy + Into<DescHead>>(
    mut cmd: impl Rx<D>,
    mut cpl: impl Tx<Cpl>,
    stop: &AtomicBool,
) {
    let mut idle = 0u32;
    loop {
        let n = cmd.available().min(DEVICE_BUDGET);
        let n = if n == 0 { 0 } else { cpl.free(n).min(n) };
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
        let mut descs = cmd.take(n);
        cpl.send(n, |_| {
            descs
                .next()
                .map_or_else(Cpl::default, |d| complete(d.into()))
        });
    }
}

/// A running pipeline: the host ends and the device thread.
pub struct Pipeline<T: Tx<Desc>, R: Rx<Cpl>> {
    cmd: T,
    cpl: R,
    stop: Arc<AtomicBool>,
    device: Option<thread::JoinHandle<()>>,
    next_submit: u64,
    next_complete: u64,
    /// The first wrong completion and the `user_data` expected in its place.
    bad: Option<(Cpl, u64)>,
}

impl<T: Tx<Desc>, R: Rx<Cpl>> std::fmt::Debug for Pipeline<T, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("submitted", &self.next_submit)
            .field("completed", &self.next_complete)
            .finish_non_exhaustive()
    }
}

/// Starts a device thread on `device` (command consumer, reading descriptors as `D`;
/// completion producer); the host keeps `host` (command producer, completion consumer).
///
/// # Errors
/// The thread cannot be spawned.
pub fn start<D, T, R, DR, DT>(host: (T, R), device: (DR, DT)) -> Result<Pipeline<T, R>, String>
where
    D: Copy + Into<DescHead>,
    T: Tx<Desc>,
    R: Rx<Cpl>,
    DR: Rx<D> + Send + 'static,
    DT: Tx<Cpl> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let (dev_cmd, dev_cpl) = device;
    let device = thread::Builder::new()
        .name("two-ring-device".into())
        .spawn(move || device_loop::<D>(dev_cmd, dev_cpl, &s))
        .map_err(|e| format!("cannot spawn the baseline's device thread: {e}"))?;
    Ok(Pipeline {
        cmd: host.0,
        cpl: host.1,
        stop,
        device: Some(device),
        next_submit: 0,
        next_complete: 0,
        bad: None,
    })
}

/// A pipeline over two of this file's rings of `entries` slots each.
pub type OwnPipeline = Pipeline<Producer<DESC_WORDS>, Consumer<COMPLETION_WORDS>>;

impl OwnPipeline {
    /// Starts the device thread over two rings of `entries` slots, both written with
    /// `stores`.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start(entries: u32, stores: Stores) -> Result<OwnPipeline, String> {
        let (cmd, dev_cmd) = ring::<DESC_WORDS>(entries);
        let (dev_cpl, cpl) = ring::<COMPLETION_WORDS>(entries);
        start::<DescHead, _, _, _, _>(
            (cmd.with_stores(stores), cpl),
            (dev_cmd, dev_cpl.with_stores(stores)),
        )
    }
}

impl<T: Tx<Desc>, R: Rx<Cpl>> Pipeline<T, R> {
    /// Pushes and publishes `batch` descriptors if they fit; returns whether it did.
    #[inline(always)]
    pub fn try_submit(&mut self, batch: u32) -> bool {
        let batch = batch as usize;
        if self.cmd.free(batch) < batch {
            return false;
        }
        let first = self.next_submit;
        self.cmd.send(batch, |i| Desc::nop(first + i as u64));
        self.next_submit += batch as u64;
        true
    }

    /// Takes every available completion, checking each one's `user_data` is the next
    /// expected (in order, each once). Returns how many, or the first out-of-order one.
    #[inline(always)]
    pub fn reap(&mut self) -> Result<u64, String> {
        let (next, bad) = (&mut self.next_complete, &mut self.bad);
        let n = self.cpl.recv(usize::MAX, |c| {
            if (c.0[0] != *next || c.0[1] != 0) && bad.is_none() {
                *bad = Some((c, *next));
            }
            *next += 1;
        });
        match self.bad {
            Some((c, want)) => Err(format!(
                "two-ring baseline: completion {:?} where user_data {want} was expected",
                c.0
            )),
            None => Ok(n as u64),
        }
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

impl<T: Tx<Desc>, R: Rx<Cpl>> Drop for Pipeline<T, R> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.device.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_order_and_wraps() {
        let (mut p, mut c) = ring::<4>(8);
        let mut next_in = 0u64;
        let mut next_out = 0u64;
        for round in 0..50u64 {
            let k = round % 5;
            for _ in 0..k {
                if p.push(&[next_in, next_in * 2, !next_in, 7]) {
                    next_in += 1;
                }
            }
            p.publish();
            while let Some(v) = c.pop() {
                assert_eq!(v, [next_out, next_out * 2, !next_out, 7]);
                next_out += 1;
            }
            c.release();
        }
        assert_eq!(next_in, next_out);
        assert!(next_in > 50);
    }

    #[test]
    fn full_ring_refuses() {
        // 8 one-word slots: one cache line.
        let (mut p, mut c) = ring::<1>(2);
        for i in 0..8 {
            assert!(p.push(&[i]));
        }
        assert!(!p.push(&[8]));
        p.publish();
        assert_eq!(c.pop(), Some([0]));
        // Not released yet: still full for the producer.
        assert!(!p.push(&[8]));
        c.release();
        assert!(p.push(&[8]));
    }

    #[test]
    fn slots_are_whole_lines() {
        let r = Ring::<DESC_WORDS>::new(16);
        for i in 0..40 {
            let s = r.slot(i);
            assert_eq!(
                s.as_ptr() as usize % 64,
                0,
                "descriptor {i} straddles lines"
            );
        }
        let r = Ring::<COMPLETION_WORDS>::new(16);
        for i in 0..40 {
            assert_eq!(r.slot(i).as_ptr() as usize % 16, 0);
        }
    }

    #[test]
    fn tx_rx_publish_once_per_batch() {
        let (mut p, mut c) = ring::<DESC_WORDS>(8);
        assert_eq!(Tx::<Desc>::free(&mut p, 8), 8);
        p.send(5, |i| Desc::nop(i as u64));
        let mut seen = Vec::new();
        assert_eq!(c.recv(3, |d: Desc| seen.push(d.0[1])), 3);
        assert_eq!(c.recv(usize::MAX, |d: Desc| seen.push(d.0[1])), 2);
        assert_eq!(c.recv(usize::MAX, |d: Desc| seen.push(d.0[1])), 0);
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        assert_eq!(Tx::<Desc>::free(&mut p, 8), 8);
    }

    #[test]
    fn nt_batches_and_plain_ones_read_back_whole_across_the_wrap() {
        let (p, mut c) = ring::<DESC_WORDS>(32);
        let mut p = p.with_stores(Stores::WideNt);
        let desc = |k: u64| Desc(std::array::from_fn(|w| k * 8 + w as u64));
        let (mut next, mut seen) = (0u64, 0u64);
        for round in 0..40 {
            // Non-temporal batches and plain ones, wrapping around the 32 slots many times.
            let n = if round % 3 == 2 { 3 } else { NT_BATCH };
            if Tx::<Desc>::free(&mut p, n) >= n {
                p.send(n, |i| desc(next + i as u64));
                next += n as u64;
            }
            c.recv(usize::MAX, |d: Desc| {
                assert_eq!(d, desc(seen), "descriptor {seen}");
                seen += 1;
            });
        }
        assert_eq!(seen, next);
        assert!(next > 300);
    }
}
