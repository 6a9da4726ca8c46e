//! The CPU hog of the contended phase: one busy-looping thread per CPU, stopped on drop.
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

/// Busy-looping threads (see the module docs).
#[derive(Debug)]
pub struct Hog {
    stop: Arc<AtomicBool>,
    spins: Arc<AtomicU64>,
    threads: Vec<thread::JoinHandle<()>>,
}

/// The CPUs this process may run on (`available_parallelism`, 1 if unknown).
pub fn cpus() -> usize {
    thread::available_parallelism().map_or(1, usize::from)
}

impl Hog {
    /// Starts `n` busy-looping threads.
    ///
    /// # Errors
    /// A thread cannot be spawned (those already started are stopped).
    pub fn start(n: usize) -> Result<Hog, String> {
        let mut hog = Hog {
            stop: Arc::new(AtomicBool::new(false)),
            spins: Arc::new(AtomicU64::new(0)),
            threads: Vec::with_capacity(n),
        };
        for i in 0..n {
            let (stop, spins) = (hog.stop.clone(), hog.spins.clone());
            let t = thread::Builder::new()
                .name(format!("cpu-hog-{i}"))
                .spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..1024 {
                            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                        }
                        spins.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .map_err(|e| format!("cannot start CPU hog thread {i}: {e}"))?;
            hog.threads.push(t);
        }
        Ok(hog)
    }

    /// Threads running.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Rounds of 1024 spins done so far (shows the hog ran).
    pub fn spins(&self) -> u64 {
        self.spins.load(Ordering::Relaxed)
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hog_runs_and_stops() {
        let h = Hog::start(2).unwrap();
        assert_eq!(h.threads(), 2);
        let t0 = std::time::Instant::now();
        while h.spins() == 0 && t0.elapsed() < std::time::Duration::from_secs(5) {
            thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(h.spins() > 0);
        drop(h);
    }
}
