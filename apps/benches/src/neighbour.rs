//! A noisy neighbour for the isolation rows: another client of the same device that keeps one
//! stream busy with 128 MiB FILLs (each checked; four queued at a time) on its own thread until it is stopped, while
//! the row measures a quiet client's round trips or control calls beside it.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use davinci_shim::{task, Completion, Device, DeviceBuffer, StreamOptions, Task};

use crate::measure::Fail;

/// Bytes of each of the neighbour's FILLs.
pub const FILL_BYTES: usize = 128 << 20;
/// FILLs the neighbour keeps queued.
const QUEUED: usize = 4;

/// The neighbour's thread; stopped (and its errors reported) by [`Neighbour::stop`].
#[derive(Debug)]
pub struct Neighbour {
    stop: Arc<AtomicBool>,
    fills: Arc<AtomicU64>,
    thread: Option<JoinHandle<Result<(), Fail>>>,
}

impl Neighbour {
    /// Starts filling on `dev` (its own client of the measured device) and returns once its
    /// first FILLs are queued.
    ///
    /// # Errors
    /// The buffer, context or stream cannot be made (a device with less than 128 MiB of free
    /// memory, for one).
    pub fn start(dev: Device) -> Result<Neighbour, Fail> {
        let buf = dev.alloc(FILL_BYTES)?;
        let ctx = dev.create_context()?;
        let mut s = ctx.create_stream_with(StreamOptions::depths(8, 8))?;
        let fill = |buf: &DeviceBuffer, from: u64| -> davinci_shim::Result<Vec<Task>> {
            (from..from + QUEUED as u64)
                .map(|i| Ok(task::fill(buf, i as u32)?.with_user_data(i)))
                .collect()
        };
        s.submit_batch(&fill(&buf, 0)?)?;
        let stop = Arc::new(AtomicBool::new(false));
        let fills = Arc::new(AtomicU64::new(0));
        let (st, n) = (stop.clone(), fills.clone());
        let thread = std::thread::spawn(move || -> Result<(), Fail> {
            let _keep = (&dev, &buf);
            let mut next = QUEUED as u64;
            let mut done: Vec<Completion> = Vec::new();
            while !st.load(Ordering::Acquire) {
                s.synchronize(Duration::from_secs(60))?;
                done.clear();
                s.poll(&mut done);
                if let Some(c) = done.iter().find(|c| !c.is_ok()) {
                    return Err(Fail::Error(format!("the neighbour's FILL failed: {c:?}")));
                }
                n.fetch_add(done.len() as u64, Ordering::Relaxed);
                let batch = fill(&buf, next)?;
                next += QUEUED as u64;
                s.submit_batch(&batch)?;
            }
            Ok(())
        });
        Ok(Neighbour {
            stop,
            fills,
            thread: Some(thread),
        })
    }

    /// Stops the neighbour: how many FILLs it completed, or why it failed (a neighbour that
    /// made no progress at all means the row measured nothing beside it).
    ///
    /// # Errors
    /// A FILL failed, or none completed.
    pub fn stop(mut self) -> Result<u64, Fail> {
        self.stop.store(true, Ordering::Release);
        let r = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(Fail::Error("the neighbour's thread panicked".into())),
            None => Ok(()),
        };
        r?;
        match self.fills.load(Ordering::Relaxed) {
            0 => Err(Fail::Error(
                "the neighbour completed no FILL during the row: it measured nothing beside it"
                    .into(),
            )),
            n => Ok(n),
        }
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
