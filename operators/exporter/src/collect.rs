//! One scrape's reading of the devices: each device is opened for control afresh, read
//! (GET_INFO, LIST_CLIENTS, GET_COUNTERS, GET_IDENTITY, GET_SENSORS, READ_EVENTS) and closed, on a thread of its own with a
//! deadline, so a device that does not answer costs a scrape at most the deadline and
//! shows as down instead of holding the scrape.
//!
//! A device whose read is still running when another read of it is asked for (a reader
//! blocked past an earlier deadline) is not read again: the new read waits for that one's
//! answer, within its own deadline (at most one reader per device path). Its path is free
//! again the moment its answer is in, so a read that follows never mistakes a finished
//! reader for a blocked one.
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
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
        let sensors = if info.features.contains(Features::SENSORS) {
            match ctl.sensors() {
                Ok(x) => Some(x),
                Err(e) => {
                    problems.push(e.to_string());
                    None
                }
            }
        } else {
            None
        };
        let events = if info.features.contains(Features::DEVICE_EVENTS) {
            match ctl.read_events(0) {
                Ok(b) => Some(b),
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
            sensors,
            events,
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

/// One device's read in progress: its answer, once in.
#[derive(Default)]
struct Pending {
    answer: Mutex<Option<Result<Reading, Failure>>>,
    done: Condvar,
}

impl Pending {
    /// The answer, waiting for it until `deadline`; `None` if it is not in by then.
    fn wait_until(&self, deadline: Instant) -> Option<Result<Reading, Failure>> {
        let mut a = relock(self.answer.lock());
        loop {
            if let Some(r) = a.as_ref() {
                return Some(r.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            a = relock(self.done.wait_timeout(a, left)).0;
        }
    }
}

/// The reads running now, by device path.
type Running = Arc<Mutex<HashMap<String, Arc<Pending>>>>;

/// Reads devices for scrapes, each on its own thread with a deadline.
pub struct Collector {
    reader: Arc<dyn Reader>,
    timeout: Duration,
    /// Paths whose reader is running (a reader past its deadline stays here until it
    /// returns; a read of its device meanwhile waits for its answer instead of starting
    /// another thread).
    running: Running,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

fn relock<T>(r: std::sync::LockResult<T>) -> T {
    // The map and the answers are whole whatever panicked while holding them (inserts,
    // removes and stores only).
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Hands a reader's answer over and frees its path, however the reader ends (an answer
/// never given is a failure, not a wait until the deadline).
struct Handover {
    running: Running,
    path: String,
    pending: Arc<Pending>,
    answer: Option<Result<Reading, Failure>>,
}

impl Drop for Handover {
    fn drop(&mut self) {
        let answer = self.answer.take().unwrap_or_else(|| {
            Err(Failure {
                errno: Some(Errno::EIO),
                message: "the device's reader ended without an answer".into(),
            })
        });
        *relock(self.pending.answer.lock()) = Some(answer);
        self.pending.done.notify_all();
        let mut running = relock(self.running.lock());
        if running
            .get(&self.path)
            .is_some_and(|p| Arc::ptr_eq(p, &self.pending))
        {
            running.remove(&self.path);
        }
    }
}

impl Collector {
    /// A collector reading with `reader`, giving each scrape's devices `timeout` in all.
    pub fn new(reader: Arc<dyn Reader>, timeout: Duration) -> Collector {
        Collector {
            reader,
            timeout,
            running: Arc::default(),
        }
    }

    /// The read of `path` running now, or a new one; `Err` if no thread could be started.
    /// The flag says whether the read was already running.
    fn start(&self, path: &str) -> Result<(Arc<Pending>, bool), Failure> {
        let mut running = relock(self.running.lock());
        if let Some(p) = running.get(path) {
            return Ok((Arc::clone(p), true));
        }
        let pending = Arc::new(Pending::default());
        running.insert(path.to_string(), Arc::clone(&pending));
        drop(running);
        let handover = Handover {
            running: Arc::clone(&self.running),
            path: path.to_string(),
            pending: Arc::clone(&pending),
            answer: None,
        };
        let (reader, path) = (Arc::clone(&self.reader), path.to_string());
        std::thread::Builder::new()
            .name("device-reader".into())
            .spawn(move || {
                let mut handover = handover;
                handover.answer = Some(reader.read(&path));
                // Dropped here: the answer handed over, the path freed.
            })
            .map_err(|err| {
                // The closure (and the handover in it) was dropped: the path is free again.
                Failure {
                    errno: Some(Errno::EAGAIN),
                    message: format!("cannot start a thread to read the device: {err}"),
                }
            })?;
        Ok((pending, false))
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
        let started: Vec<_> = entries.iter().map(|e| self.start(&e.path)).collect();
        entries
            .iter()
            .zip(started)
            .map(|(e, started)| {
                let outcome = started.and_then(|(pending, earlier)| {
                    pending.wait_until(deadline).unwrap_or_else(|| {
                        let mut message =
                            format!("no answer within {} ms", self.timeout.as_millis());
                        if earlier {
                            message += " (waiting for a read an earlier scrape started)";
                        }
                        Err(Failure {
                            errno: Some(Errno::ETIMEDOUT),
                            message,
                        })
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
                    identity: None,
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
        // The slow reader is still running: the next scrape does not start another, it
        // waits for that one (which does not answer within this scrape's 200 ms either).
        let again = c.collect(&entries[..1]);
        let f = again[0].outcome.as_ref().unwrap_err();
        assert!(f.message.contains("an earlier scrape started"), "{f:?}");
        // Once it returned, its path is free: the next scrape reads it again.
        std::thread::sleep(Duration::from_millis(600));
        assert!(relock(c.running.lock()).is_empty());
    }

    /// Answers after `delay`, counting its reads.
    struct Counted {
        delay: Duration,
        reads: std::sync::atomic::AtomicUsize,
    }

    impl Reader for Counted {
        fn read(&self, _path: &str) -> Result<Reading, Failure> {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(self.delay);
            Ok(Reading::default())
        }
    }

    #[test]
    fn reads_that_follow_each_other_never_find_the_device_busy() {
        // The bug: a reader sent its answer before freeing its path, so a read right
        // after found the path taken and reported a healthy device down.
        let c = Collector::new(
            Arc::new(Counted {
                delay: Duration::ZERO,
                reads: Default::default(),
            }),
            Duration::from_secs(10),
        );
        for i in 0..500 {
            let s = c.collect(&[entry(Some(0), "ok")]);
            assert!(s[0].outcome.is_ok(), "read {i}: {:?}", s[0].outcome);
        }
    }

    #[test]
    fn a_device_busy_answering_one_scrape_answers_the_other_from_the_same_read() {
        let reader = Arc::new(Counted {
            delay: Duration::from_millis(300),
            reads: Default::default(),
        });
        let c = Arc::new(Collector::new(
            Arc::clone(&reader) as Arc<dyn Reader>,
            Duration::from_secs(10),
        ));
        let scrapes: Vec<_> = (0..8)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || c.collect(&[entry(Some(0), "ok")]))
            })
            .collect();
        for s in scrapes {
            let s = s.join().unwrap();
            assert!(s[0].outcome.is_ok(), "{:?}", s[0].outcome);
        }
        // Eight scrapes at once: the first started the read, the others waited for it
        // (one more may have come after it finished).
        let reads = reader.reads.load(std::sync::atomic::Ordering::SeqCst);
        assert!((1..8).contains(&reads), "{reads} reads");
    }
}
