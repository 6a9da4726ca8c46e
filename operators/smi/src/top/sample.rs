//! What `top` reads from the devices ([`take`]: one [`DevSample`] per device) and the
//! figures of one frame from two samples ([`frame`]): a device's utilization from its
//! GET_COUNTERS `busy_ns` ([`busy_percent`]), a process's from its LIST_CLIENTS `busy_ns`
//! over the same clock, tasks per second from `tasks_completed`; user names; the sort.
#![forbid(unsafe_code)]

use std::cmp::Ordering;
use std::collections::HashMap;
use std::time::Instant;

use clap::ValueEnum;
use davinci_uapi::{ClientUsage, DeviceCounters, DeviceInfo, Features, ShareMode};

use crate::access::Target;
use crate::error::{combine, SmiError};
use crate::extras::{busy_percent, device_extras, Extras};
use crate::output::printable;

/// One device read once.
pub(crate) struct DevSample {
    pub(crate) info: DeviceInfo,
    pub(crate) extras: Extras,
    /// GET_COUNTERS (ABI 1.4), read just before LIST_CLIENTS: its `now_ns` is the clock of
    /// the clients' `busy_ns` too.
    pub(crate) counters: Option<DeviceCounters>,
    pub(crate) clients: Vec<ClientUsage>,
    /// When LIST_CLIENTS answered.
    pub(crate) at: Instant,
}

/// Every target read once, in the targets' order.
pub(crate) type Sample = Vec<Result<DevSample, SmiError>>;

/// Reads every target: GET_INFO, the extras (identity, sensors, health), GET_COUNTERS and
/// LIST_CLIENTS. A device that fails GET_INFO or LIST_CLIENTS is an error for this sample.
pub(crate) fn take(targets: &[Target]) -> Sample {
    targets
        .iter()
        .map(|t| {
            let d = t.dev.as_ref().map_err(Clone::clone)?;
            let info = d.info()?;
            let extras = device_extras(d.as_ref(), &info);
            let counters = if info.features.contains(Features::IDENTITY) {
                d.counters().ok().flatten()
            } else {
                None
            };
            let clients = d.clients()?;
            Ok(DevSample {
                info,
                extras,
                counters,
                clients,
                at: Instant::now(),
            })
        })
        .collect()
}

/// The process table's sortable columns, in the order `s`/`>` cycles through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SortKey {
    /// The device's id
    Device,
    /// Process id
    Pid,
    /// User name (or uid)
    User,
    /// Container id
    Container,
    /// Process name
    Name,
    /// Device memory held
    Memory,
    /// Share of the device's engine time
    Util,
    /// Tasks completed per second
    Tasks,
    /// Streams held
    Streams,
}

impl SortKey {
    pub(crate) const ALL: [SortKey; 9] = [
        SortKey::Device,
        SortKey::Pid,
        SortKey::User,
        SortKey::Container,
        SortKey::Name,
        SortKey::Memory,
        SortKey::Util,
        SortKey::Tasks,
        SortKey::Streams,
    ];

    /// Its name on the command line and in JSON.
    pub(crate) fn name(self) -> &'static str {
        match self {
            SortKey::Device => "device",
            SortKey::Pid => "pid",
            SortKey::User => "user",
            SortKey::Container => "container",
            SortKey::Name => "name",
            SortKey::Memory => "memory",
            SortKey::Util => "util",
            SortKey::Tasks => "tasks",
            SortKey::Streams => "streams",
        }
    }

    /// Figures sort largest first, ids and names in order, until reversed.
    fn descending(self) -> bool {
        matches!(
            self,
            SortKey::Memory | SortKey::Util | SortKey::Tasks | SortKey::Streams
        )
    }

    /// The next column (`step` 1) or the previous one (`step` -1), wrapping.
    pub(crate) fn step(self, step: isize) -> SortKey {
        let n = SortKey::ALL.len() as isize;
        let i = SortKey::ALL.iter().position(|k| *k == self).unwrap_or(0) as isize;
        SortKey::ALL[(i + step).rem_euclid(n) as usize]
    }
}

/// How the processes are sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sort {
    pub(crate) key: SortKey,
    /// The other way round from the column's own order.
    pub(crate) reverse: bool,
}

impl Sort {
    /// Largest (or last) first.
    pub(crate) fn descending(self) -> bool {
        self.key.descending() != self.reverse
    }
}

/// A device's figures in a frame.
pub(crate) struct DevFigures {
    pub(crate) info: DeviceInfo,
    pub(crate) extras: Extras,
    /// Engine time used over the interval, in percent; `None`: no two GET_COUNTERS.
    pub(crate) util: Option<u32>,
    /// Streams that entered the error state since the device started (GET_COUNTERS).
    pub(crate) stream_errors: Option<u64>,
    pub(crate) share_mode: Option<&'static str>,
}

/// A device's row: its id and path, and its figures or why there are none.
pub(crate) struct DevRow {
    pub(crate) id: Option<u32>,
    pub(crate) path: String,
    pub(crate) state: Result<DevFigures, SmiError>,
}

/// A process's row: one client open of a device.
pub(crate) struct ProcRow {
    pub(crate) dev: Option<u32>,
    pub(crate) client: ClientUsage,
    /// The user name of `client.uid` (the uid when it has none).
    pub(crate) user: String,
    /// Its share of the device's engine time over the interval, in percent.
    pub(crate) util: Option<u32>,
    /// Tasks completed per second over the interval; `None`: new in this sample.
    pub(crate) tasks_per_s: Option<f64>,
}

/// One frame: the devices, the processes in order, how they are sorted, and over how long
/// the rates were measured.
pub(crate) struct Frame {
    pub(crate) devices: Vec<DevRow>,
    pub(crate) procs: Vec<ProcRow>,
    pub(crate) sort: Sort,
    /// Seconds between the two samples (the longest over the devices); `None`: one sample.
    pub(crate) interval_s: Option<f64>,
    /// When the second sample was taken (RFC 3339, UTC).
    pub(crate) timestamp: String,
}

impl Frame {
    /// The devices that failed, with their errors.
    pub(crate) fn errors(&self) -> impl Iterator<Item = (Option<u32>, &SmiError)> {
        self.devices
            .iter()
            .filter_map(|d| d.state.as_ref().err().map(|e| (d.id, e)))
    }

    /// 0, or the status of the devices' failures (`crate::exit`).
    pub(crate) fn exit_code(&self) -> i32 {
        let outcomes: Vec<Option<&SmiError>> = self
            .devices
            .iter()
            .map(|d| d.state.as_ref().err())
            .collect();
        combine(&outcomes)
    }

    /// Sorts the processes by `sort`.
    pub(crate) fn resort(&mut self, sort: Sort) {
        self.sort = sort;
        sort_procs(&mut self.procs, sort);
    }
}

/// User names by uid, looked up once each (the passwd database, NSS included).
#[derive(Default)]
pub(crate) struct Users(HashMap<u32, String>);

/// Most user names [`Users`] keeps (then it starts over).
const MAX_USERS: usize = 4096;

impl Users {
    /// `uid`'s name, or the uid as a number when it has none.
    pub(crate) fn name(&mut self, uid: u32) -> String {
        if let Some(n) = self.0.get(&uid) {
            return n.clone();
        }
        if self.0.len() >= MAX_USERS {
            self.0.clear();
        }
        let name = match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(u)) if !u.name.is_empty() => printable(&u.name),
            _ => uid.to_string(),
        };
        self.0.insert(uid, name.clone());
        name
    }
}

/// The frame of sample `cur` of `targets`, its rates against `prev` (none: the first frame),
/// the processes sorted by `sort`.
pub(crate) fn frame(
    targets: &[Target],
    prev: Option<&Sample>,
    cur: &Sample,
    sort: Sort,
    users: &mut Users,
) -> Frame {
    let mut devices = Vec::new();
    let mut procs = Vec::new();
    let mut interval_s: Option<f64> = None;
    for (i, (t, now)) in targets.iter().zip(cur).enumerate() {
        let before = prev.and_then(|p| p.get(i)).and_then(|r| r.as_ref().ok());
        let now = match now {
            Ok(s) => s,
            Err(e) => {
                devices.push(DevRow {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    state: Err(e.clone()),
                });
                continue;
            }
        };
        let dt = before.map(|b| now.at.saturating_duration_since(b.at).as_secs_f64());
        if let Some(dt) = dt {
            interval_s = Some(interval_s.map_or(dt, |x: f64| x.max(dt)));
        }
        let engines = now.counters.map(|c| c.engines);
        let clock = |s: &DevSample, busy_ns: u64| {
            s.counters.map(|c| DeviceCounters {
                busy_ns,
                now_ns: c.now_ns,
                engines: engines.unwrap_or(c.engines),
                ..DeviceCounters::default()
            })
        };
        for c in &now.clients {
            let old = before.and_then(|b| {
                b.clients
                    .iter()
                    .find(|o| o.client_id == c.client_id && o.pid == c.pid)
                    .map(|o| (b, o))
            });
            let tasks_per_s = old.and_then(|(_, o)| {
                let secs = dt.filter(|&s| s > 0.0)?;
                let done = c.tasks_completed.checked_sub(o.tasks_completed)?;
                Some(done as f64 / secs)
            });
            let util =
                old.and_then(|(b, o)| busy_percent(&clock(b, o.busy_ns)?, &clock(now, c.busy_ns)?));
            procs.push(ProcRow {
                dev: t.entry.id,
                client: *c,
                user: users.name(c.uid),
                util,
                tasks_per_s,
            });
        }
        let util = before.and_then(|b| busy_percent(&b.counters?, &now.counters?));
        devices.push(DevRow {
            id: t.entry.id,
            path: t.entry.path.clone(),
            state: Ok(DevFigures {
                info: now.info,
                extras: now.extras.clone(),
                util,
                stream_errors: now.counters.map(|c| c.stream_errors),
                share_mode: ShareMode::from_u32(now.info.share_mode).map(ShareMode::name),
            }),
        });
    }
    sort_procs(&mut procs, sort);
    Frame {
        devices,
        procs,
        sort,
        interval_s,
        timestamp: crate::query::timestamp_now(),
    }
}

/// `a` against `b` by `key` alone, in the column's ascending order (`None` figures first).
fn by_key(key: SortKey, a: &ProcRow, b: &ProcRow) -> Ordering {
    let f = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (x, y) => x.is_some().cmp(&y.is_some()),
    };
    match key {
        SortKey::Device => a.dev.cmp(&b.dev),
        SortKey::Pid => a.client.pid.cmp(&b.client.pid),
        SortKey::User => a.user.cmp(&b.user),
        SortKey::Container => a.client.container_id().cmp(&b.client.container_id()),
        SortKey::Name => a.client.comm().cmp(b.client.comm()),
        SortKey::Memory => a.client.memory_bytes.cmp(&b.client.memory_bytes),
        SortKey::Util => a.util.cmp(&b.util),
        SortKey::Tasks => f(a.tasks_per_s, b.tasks_per_s),
        SortKey::Streams => a.client.streams.cmp(&b.client.streams),
    }
}

/// Sorts by `sort`; ties by device, pid and client id, ascending (a stable order between
/// frames).
pub(crate) fn sort_procs(procs: &mut [ProcRow], sort: Sort) {
    procs.sort_by(|a, b| {
        let o = by_key(sort.key, a, b);
        let o = if sort.descending() { o.reverse() } else { o };
        o.then(a.dev.cmp(&b.dev))
            .then(a.client.pid.cmp(&b.client.pid))
            .then(a.client.client_id.cmp(&b.client.client_id))
    });
}
