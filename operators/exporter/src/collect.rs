//! One scrape's reading of the devices: each device is opened for control afresh, read
//! (GET_INFO, LIST_CLIENTS, GET_COUNTERS) and closed, on a thread of its own with a
//! deadline, so a device that does not answer costs a scrape at most the deadline and
//! shows as down instead of holding the scrape.
//!
//! A device whose reader is still blocked from an earlier scrape is not read again until
//! that reader returns (at most one blocked reader per device path).
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use davinci_shim::Control;
use davinci_uapi::{DeviceCounters, DeviceInfo, Errno, Features};

pub use crate::sample::{Failure, Reading, Sample};

/// Most devices read in one scrape (discovery that finds more reports the first ones and
/// logs the rest): bounds the threads and the size of a scrape.
pub const MAX_DEVICES: usize = 256;

/// Reads one device. The exporter's is [`ShimReader`]; tests give fakes.
pub trait Reader: Send + Sync + 'static {
    /// Reads the device at `path`.
    ///
    /// # Errors
    /// The device cannot be opened or GET_INFO fails.
    fn read(&self, path: &str) -> Result<Reading, Failure>;
}

/// Reads devices through the shim's control open ([`davinci_shim::Control`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct ShimReader;

impl Reader for ShimReader {
    fn read(&self, path: &str) -> Result<Reading, Failure> {
        let ctl = Control::open(path).map_err(|e| Failure::of(&e))?;
        let info = ctl.info().map_err(|e| Failure::of(&e))?;
        let mut problems = Vec::new();
        let clients = if info.features.contains(Features::LIST_CLIENTS) {
            match ctl.clients() {
                Ok(c) => Some(c),
                Err(e) => {
                    problems.push(e.to_string());
                    None
                }
            }
        } else {
            None
        };
        let counters = match read_counters(&ctl, &info) {
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => {
                problems.push(e.to_string());
                None
            }
            None => None,
        };
        let identity = if info.features.contains(Features::IDENTITY) {
            match ctl.identity() {
                Ok(i) => Some(i),
                Err(e) => {
                    problems.push(e.to_string());
                    None
                }
            }
        } else {
            None
        };
        Ok(Reading {
            info,
            clients,
            counters,
            identity,
            problems,
            derived: Default::default(),
        })
    }
}

/// GET_COUNTERS (ABI 1.3): the device-wide counters, when the driver has them
/// (`Features::COUNTERS`); `None` for a driver without them, whose device then has no
/// device-wide task, wake-up and stream-error series.
fn read_counters(ctl: &Control, info: &DeviceInfo) -> Option<davinci_shim::Result<DeviceCounters>> {
    info.features
        .contains(Features::COUNTERS)
        .then(|| ctl.counters())
}

/// Reads devices for scrapes, each on its own thread with a deadline.
pub struct Collector {
    reader: Arc<dyn Reader>,
    timeout: Duration,
    /// Paths whose reader is running (a reader past its deadline stays here until it
    /// returns; its device is reported down meanwhile, without another thread).
    busy: Arc<Mutex<HashSet<String>>>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

fn relock<T>(r: std::sync::LockResult<T>) -> T {
    // The set is whole whatever panicked while holding it (inserts and removes only).
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Removes a path from the busy set when its reader ends, however it ends.
struct BusyGuard {
    busy: Arc<Mutex<HashSet<String>>>,
    path: String,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        relock(self.busy.lock()).remove(&self.path);
    }
}

impl Collector {
    /// A collector reading with `reader`, giving each scrape's devices `timeout` in all.
    pub fn new(reader: Arc<dyn Reader>, timeout: Duration) -> Collector {
        Collector {
            reader,
            timeout,
            busy: Arc::default(),
        }
    }

    /// Reads every device of `entries` (duplicates by path read once), in parallel; a
    /// device that has not answered by the deadline is down with `ETIMEDOUT`.
    pub fn collect(&self, entries: &[davinci_ops::discover::Entry]) -> Vec<Sample> {
        let mut seen = HashSet::new();
        let entries: Vec<_> = entries
            .iter()
            .filter(|e| seen.insert(e.path.clone()))
            .take(MAX_DEVICES)
            .collect();
        let deadline = Instant::now() + self.timeout;
        let (tx, rx) = mpsc::channel::<(usize, Result<Reading, Failure>)>();
        // One slot per entry, in order: filled now (not read) or by its reader's answer.
        let mut outcomes: Vec<Option<Result<Reading, Failure>>> = Vec::new();
        let mut waiting = 0usize;
        for (i, e) in entries.iter().enumerate() {
            if !relock(self.busy.lock()).insert(e.path.clone()) {
                outcomes.push(Some(Err(Failure {
                    errno: Some(Errno::ETIMEDOUT),
                    message: "an earlier read of this device has not returned yet".into(),
                })));
                continue;
            }
            let guard = BusyGuard {
                busy: Arc::clone(&self.busy),
                path: e.path.clone(),
            };
            let (tx, reader, path) = (tx.clone(), Arc::clone(&self.reader), e.path.clone());
            let spawned = std::thread::Builder::new()
                .name("device-reader".into())
                .spawn(move || {
                    let _guard = guard;
                    let r = reader.read(&path);
                    let _ = tx.send((i, r));
                });
            match spawned {
                Ok(_) => {
                    waiting += 1;
                    outcomes.push(None);
                }
                Err(err) => {
                    // The closure (and the guard in it) was dropped: the path is free again.
                    outcomes.push(Some(Err(Failure {
                        errno: Some(Errno::EAGAIN),
                        message: format!("cannot start a thread to read the device: {err}"),
                    })));
                }
            }
        }
        drop(tx);
        while waiting > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((i, r)) => {
                    if let Some(slot) = outcomes.get_mut(i) {
                        *slot = Some(r);
                    }
                    waiting -= 1;
                }
                Err(_) => break,
            }
        }
        entries
            .iter()
            .zip(outcomes)
            .map(|(e, o)| {
                let outcome = o.unwrap_or_else(|| {
                    Err(Failure {
                        errno: Some(Errno::ETIMEDOUT),
                        message: format!("no answer within {} ms", self.timeout.as_millis()),
                    })
                });
                let device = match (e.id, &outcome) {
                    (Some(id), _) => id.to_string(),
                    (None, Ok(r)) => r.info.device_id.to_string(),
                    (None, Err(_)) => String::new(),
                };
                Sample {
                    device,
                    path: e.path.clone(),
                    pods: Vec::new(),
                    outcome,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use davinci_ops::discover::Entry;

    struct Fake;

    impl Reader for Fake {
        fn read(&self, path: &str) -> Result<Reading, Failure> {
            match path {
                "slow" => {
                    std::thread::sleep(Duration::from_millis(600));
                    Ok(Reading::default())
                }
                "gone" => Err(Failure {
                    errno: Some(Errno::ENODEV),
                    message: "no device".into(),
                }),
                _ => {
                    let mut r = Reading::default();
                    r.info.device_id = 7;
                    Ok(r)
                }
            }
        }
    }

    fn entry(id: Option<u32>, path: &str) -> Entry {
        Entry {
            id,
            path: path.into(),
        }
    }

    #[test]
    fn a_slow_device_times_out_alone_and_is_not_read_twice_while_blocked() {
        let c = Collector::new(Arc::new(Fake), Duration::from_millis(200));
        let entries = [
            entry(Some(0), "slow"),
            entry(None, "ok"),
            entry(Some(2), "gone"),
            entry(None, "ok"),
        ];
        let t0 = Instant::now();
        let s = c.collect(&entries);
        assert!(
            t0.elapsed() < Duration::from_millis(550),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(s.len(), 3, "the duplicate path is read once");
        assert_eq!(
            s[0].outcome.as_ref().unwrap_err().errno,
            Some(Errno::ETIMEDOUT)
        );
        assert_eq!(s[0].device, "0");
        assert!(s[1].outcome.is_ok());
        assert_eq!(s[1].device, "7", "no id in the path: GET_INFO's");
        assert_eq!(s[2].outcome.as_ref().unwrap_err().errno_name(), "ENODEV");
        // The slow reader is still running: the next scrape does not start another.
        let again = c.collect(&entries[..1]);
        let f = again[0].outcome.as_ref().unwrap_err();
        assert!(f.message.contains("has not returned"), "{f:?}");
        // Once it returned, its path is free: the next scrape reads it again.
        std::thread::sleep(Duration::from_millis(600));
        assert!(relock(c.busy.lock()).is_empty());
    }
}
