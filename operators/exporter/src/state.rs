//! What the exporter remembers between scrapes, and what it derives from it:
//!
//! * **Utilization.** A device's `busy_ns` and `now_ns` (GET_COUNTERS, ABI 1.4) of the last
//!   scrape: utilization over the interval since is `Δbusy_ns / (Δnow_ns × engines)`, at
//!   most 1. The first scrape of a device, and the first after its counters went backwards
//!   (the device restarted), have none.
//! * **Stable device labels.** The `uuid` and `model` of a device's last GET_IDENTITY: a
//!   device that goes down keeps them on its series, so its `davinci_device_up 0` is the
//!   same series as the `1` before it.
//! * **Stable client series.** Clients are grouped by (container id, process name): the
//!   driver's client id and the pid change whenever a process restarts, so series keyed by
//!   them churn (a new series per restart, the old one stale). A group's counters
//!   (`tasks_*_total`, `busy_seconds_total`) are the sum over its clients attached now
//!   plus what its clients that went away had reached when last seen, so they go on
//!   growing across restarts instead of dropping back, and two processes of the same name
//!   in one container (workers of one job) are one series whose values add up. Its gauges
//!   (memory, queued tasks, objects) are the sums over the clients attached now. What a
//!   client did after the last scrape that saw it is not counted. The pid, client id and
//!   uid of each client are on a separate info series (`davinci_client_info`).
//! * **Full process names.** The driver reports the kernel's `comm`, cut to 15 bytes. When
//!   the client's pid is visible here (same pid namespace) and `/proc/PID/comm` is that
//!   `comm`, the name is the basename of `argv[0]` (`/proc/PID/cmdline`) when it starts
//!   with `comm` (the part the kernel cut); else `comm`. A client's name is resolved once,
//!   when it is first seen, so its group does not change while it lives.
//! * **Event logs.** Per device, the place in its event log and the events counted per code
//!   (`crate::events`), kept across the device's restarts.
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::io::Read;

use davinci_ops::text::{printable_bytes, printable_field};
use davinci_uapi::{DeviceCounters, Features};

pub use crate::sample::{Derived, Group, Totals};
use crate::sample::{Identity, Sample};

/// Most bytes of a process name taken from `/proc/PID/cmdline`.
pub const MAX_NAME: usize = 128;
/// Most client groups remembered per device (those with no client attached are forgotten
/// first, least recently seen first).
pub const MAX_GROUPS: usize = 1024;
/// Most clients remembered per device (a driver lists at most a few hundred).
pub const MAX_CLIENTS: usize = 4096;

type Key = (String, String);

#[derive(Debug, Default)]
struct DeviceMemory {
    /// busy_ns, now_ns of the last scrape.
    last: Option<(u64, u64)>,
    /// clients_opened of the last scrape (falls when the device restarted).
    opened: u64,
    /// Live clients by (client id, pid): their group and last counters.
    live: HashMap<(u32, u32), (Key, Totals)>,
    /// Per group: the counters of its clients that went away, and the scrape it last had a
    /// client attached in.
    gone: HashMap<Key, (Totals, u64)>,
    /// The identity labels of the last GET_IDENTITY that answered.
    identity: Option<Identity>,
}

/// The memory of the scrapes, per device path.
#[derive(Debug, Default)]
pub struct History {
    devices: HashMap<String, DeviceMemory>,
    /// The event logs' counts, per device path (apart from [`DeviceMemory`], which a device
    /// restart clears: these go on growing).
    logs: HashMap<String, crate::events::LogMemory>,
    scrape: u64,
}

/// Resolves a client's full process name from its pid and `comm`.
pub trait Names {
    /// The name to show for the process `pid` whose `comm` the driver reported (as
    /// [`printable_field`] shows it).
    fn name(&self, pid: u32, comm: &str) -> String;
}

/// Names from `/proc` (see the module's documentation).
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcNames;

impl Names for ProcNames {
    fn name(&self, pid: u32, comm: &str) -> String {
        // A comm shorter than the kernel's 15 bytes was not cut (escaping only lengthens it).
        if comm.len() < 15 || pid == 0 {
            return comm.to_string();
        }
        let proc = format!("/proc/{pid}");
        let Some(seen) = read_bounded(&format!("{proc}/comm"), 64) else {
            return comm.to_string();
        };
        let seen = seen.strip_suffix(b"\n").unwrap_or(&seen);
        if printable_bytes(seen) != comm {
            // Another process (another pid namespace), or it renamed itself since.
            return comm.to_string();
        }
        read_bounded(&format!("{proc}/cmdline"), 4096)
            .and_then(|c| full_name(comm, &c))
            .unwrap_or_else(|| comm.to_string())
    }
}

/// At most `max` bytes of a file; `None` if it cannot be read.
fn read_bounded(path: &str, max: u64) -> Option<Vec<u8>> {
    let f = std::fs::File::open(path).ok()?;
    let mut out = Vec::new();
    f.take(max).read_to_end(&mut out).ok()?;
    Some(out)
}

/// The full name from a `cmdline` (NUL-separated argv): the basename of `argv[0]`, if it
/// starts with `comm` and is longer (what the kernel cut), at most [`MAX_NAME`] bytes (cut
/// at a character boundary). `comm` is as [`printable_field`] shows it, and so is the
/// name: control, bidi and format characters escaped, bytes that are not UTF-8 as `\xNN`.
/// `None` otherwise.
pub fn full_name(comm: &str, cmdline: &[u8]) -> Option<String> {
    let argv0 = cmdline.split(|&b| b == 0).next()?;
    let base = argv0.rsplit(|&b| b == b'/').next()?;
    let base = printable_bytes(base);
    if comm.is_empty() || base.len() <= comm.len() || !base.starts_with(comm) {
        return None;
    }
    let mut end = base.len().min(MAX_NAME);
    while !base.is_char_boundary(end) {
        end -= 1;
    }
    Some(base[..end].to_string())
}

impl History {
    /// Updates the memory with this scrape's samples and fills each reading's
    /// [`Derived`]. Devices not in `samples` are forgotten.
    pub fn update(&mut self, samples: &mut [Sample], names: &dyn Names) {
        self.scrape = self.scrape.wrapping_add(1);
        let scrape = self.scrape;
        let paths: HashSet<&str> = samples.iter().map(|s| s.path.as_str()).collect();
        self.devices.retain(|p, _| paths.contains(p.as_str()));
        self.logs.retain(|p, _| paths.contains(p.as_str()));
        for s in samples.iter_mut() {
            if let Ok(r) = &mut s.outcome {
                if let Some(batch) = &r.events {
                    let log = self.logs.entry(s.path.clone()).or_default();
                    r.derived.events = Some(log.take(batch));
                }
            }
            let Ok(r) = &mut s.outcome else {
                // Down this scrape: keep the memory (it may come back with the same clients),
                // and the labels its series had.
                s.identity = self.devices.get(&s.path).and_then(|m| m.identity.clone());
                continue;
            };
            let m = self.devices.entry(s.path.clone()).or_default();
            let v14 = r.info.features.contains(Features::IDENTITY);
            if let Some(k) = r.counters.as_ref() {
                if restarted(m, k) {
                    *m = DeviceMemory::default();
                }
                m.opened = k.clients_opened;
                if v14 {
                    r.derived.utilization = utilization(m.last, k);
                    m.last = Some((k.busy_ns, k.now_ns));
                }
            }
            if let Some(id) = &r.identity {
                m.identity = Some(Identity::of(id));
            }
            s.identity = m.identity.clone();
            let Some(list) = &r.clients else {
                continue;
            };
            let mut seen = HashSet::new();
            let mut names_out = Vec::with_capacity(list.len());
            let mut order: Vec<Key> = Vec::new();
            let mut groups: HashMap<Key, Group> = HashMap::new();
            for c in list {
                let id = (c.client_id, c.pid);
                seen.insert(id);
                let key = match m.live.get(&id) {
                    Some((k, _)) => k.clone(),
                    None => {
                        let k = (
                            printable_field(&c.container),
                            names.name(c.pid, &printable_field(&c.comm)),
                        );
                        if m.live.len() < MAX_CLIENTS {
                            m.live.insert(id, (k.clone(), Totals::default()));
                        }
                        k
                    }
                };
                if let Some((_, t)) = m.live.get_mut(&id) {
                    *t = Totals::of(c);
                }
                names_out.push(key.1.clone());
                let g = groups.entry(key.clone()).or_insert_with(|| {
                    order.push(key.clone());
                    Group {
                        container_id: key.0.clone(),
                        process: key.1.clone(),
                        has_busy: v14,
                        ..Group::default()
                    }
                });
                g.clients = g.clients.saturating_add(1);
                g.memory_bytes = g.memory_bytes.saturating_add(c.memory_bytes);
                g.tasks_queued = g.tasks_queued.saturating_add(c.tasks_queued);
                g.contexts = g.contexts.saturating_add(c.contexts.into());
                g.streams = g.streams.saturating_add(c.streams.into());
                g.events = g.events.saturating_add(c.events.into());
                g.allocations = g.allocations.saturating_add(c.allocations.into());
                g.totals.add(&Totals::of(c));
            }
            // Clients gone since the last scrape: their counters stay with their group.
            let gone: Vec<(u32, u32)> = m
                .live
                .keys()
                .filter(|id| !seen.contains(id))
                .copied()
                .collect();
            for id in gone {
                if let Some((k, t)) = m.live.remove(&id) {
                    let e = m.gone.entry(k).or_insert((Totals::default(), scrape));
                    e.0.add(&t);
                }
            }
            for (k, g) in &mut groups {
                if let Some((t, last)) = m.gone.get_mut(k) {
                    g.totals.add(t);
                    *last = scrape;
                }
            }
            forget_oldest(&mut m.gone);
            r.derived.names = names_out;
            r.derived.groups = order
                .into_iter()
                .filter_map(|k| groups.remove(&k))
                .collect();
        }
    }
}

/// Whether the device restarted since the last scrape: its counters went backwards.
fn restarted(m: &DeviceMemory, k: &DeviceCounters) -> bool {
    k.clients_opened < m.opened || m.last.is_some_and(|(_, now)| k.now_ns < now)
}

fn utilization(last: Option<(u64, u64)>, k: &DeviceCounters) -> Option<f64> {
    let (busy0, now0) = last?;
    let dt = k.now_ns.checked_sub(now0).filter(|&d| d > 0)?;
    let db = k.busy_ns.checked_sub(busy0)?;
    let capacity = dt as f64 * f64::from(k.engines.max(1));
    Some((db as f64 / capacity).clamp(0.0, 1.0))
}

/// Keeps at most [`MAX_GROUPS`] groups of gone clients: the least recently seen go first.
fn forget_oldest(gone: &mut HashMap<Key, (Totals, u64)>) {
    if gone.len() <= MAX_GROUPS {
        return;
    }
    let mut by_age: Vec<(u64, Key)> = gone.iter().map(|(k, (_, s))| (*s, k.clone())).collect();
    by_age.sort();
    let extra = gone.len() - MAX_GROUPS;
    for (_, k) in by_age.into_iter().take(extra) {
        gone.remove(&k);
    }
}

#[cfg(test)]
mod tests;
