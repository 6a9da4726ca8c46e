//! What tracing costs (issue 46): the streaming NOP rows with the device tracing the
//! stream's client (TRACE, scope CLIENT) and a profiler thread reading the trace every
//! millisecond, as `davinci-workload --trace` and `davinci-smi trace` do, against the same
//! rows untraced.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use davinci_shim::Device;

use crate::measure::{Fail, Window};
use crate::shim_rows::{self, Pace, StreamRun};

/// One stream of NOPs, `batch` per submit, for `window`; with `traced`, the device records
/// every task into this client's trace buffer while a thread reads it every millisecond.
///
/// # Errors
/// A shim error (tracing refused included), a completion missing or out of order.
pub fn streaming(
    dev: &Device,
    batch: usize,
    traced: bool,
    window: Window,
) -> Result<StreamRun, Fail> {
    if !traced {
        return shim_rows::streaming(dev, 1, batch, Pace::Full, window);
    }
    let mut cursor = dev.trace_start()?;
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (dev, stop) = (dev.clone(), stop.clone());
        thread::spawn(move || -> Result<(u64, u64), davinci_shim::Error> {
            let (mut records, mut lost) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let b = dev.trace_read(cursor)?;
                records += b.records.len() as u64;
                lost += b.lost;
                cursor = b.cursor;
                thread::sleep(Duration::from_millis(1));
            }
            Ok((records, lost))
        })
    };
    let run = shim_rows::streaming(dev, 1, batch, Pace::Full, window);
    stop.store(true, Ordering::Relaxed);
    let read = reader
        .join()
        .map_err(|_| Fail::Error("the trace reader panicked".into()))?;
    dev.trace_stop()?;
    let (records, _lost) = read?;
    if records == 0 {
        return Err(Fail::Error(
            "tracing on, yet no trace record was read".into(),
        ));
    }
    run
}
