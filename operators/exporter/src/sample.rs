//! The data of one scrape: what was read from each device ([`Sample`], [`Reading`],
//! [`Failure`]), what the scrape derived from it and the earlier ones ([`Derived`],
//! [`Group`], [`Totals`]: `crate::state`), and who holds it ([`PodRef`]: `crate::pods`).
//! Plain data, so the reading, the memory of the scrapes and the pod attribution each
//! depend on it and not on one another.
#![forbid(unsafe_code)]

use davinci_uapi::{ClientUsage, DeviceCounters, DeviceIdentity, DeviceInfo, DeviceSensors, Errno};

/// What was read from a device that answered.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// GET_INFO.
    pub info: DeviceInfo,
    /// LIST_CLIENTS; `None` when the driver lacks `LIST_CLIENTS` or the call failed (then
    /// [`problems`](Self::problems) says why).
    pub clients: Option<Vec<ClientUsage>>,
    /// GET_COUNTERS (ABI 1.3); `None` when the driver lacks `COUNTERS` or the call failed.
    pub counters: Option<DeviceCounters>,
    /// GET_IDENTITY (ABI 1.4); `None` when the driver lacks `IDENTITY` or the call failed.
    pub identity: Option<DeviceIdentity>,
    /// GET_SENSORS (ABI 1.5); `None` when the driver lacks `SENSORS` or the call failed: the
    /// device then has no sensor series (absent, not 0).
    pub sensors: Option<DeviceSensors>,
    /// READ_EVENTS (ABI 1.5), the whole log; `None` when the driver lacks `DEVICE_EVENTS` or
    /// the call failed: the device then has no event-log series.
    pub events: Option<davinci_shim::EventBatch>,
    /// Calls after GET_INFO that failed; the device is still up.
    pub problems: Vec<String>,
    /// What the scrape derived from this reading and the earlier ones
    /// (`crate::state::History::update`).
    pub derived: Derived,
}

/// Why a device could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The errno, when there is one (`ETIMEDOUT` for the scrape's deadline).
    pub errno: Option<Errno>,
    /// What failed, for the log.
    pub message: String,
}

impl Failure {
    pub(crate) fn of(e: &davinci_shim::Error) -> Failure {
        Failure {
            errno: e.errno(),
            message: e.to_string(),
        }
    }

    /// The errno's name (`ENODEV`), or `""`.
    pub fn errno_name(&self) -> &'static str {
        self.errno.map_or("", |e| e.name())
    }
}

/// One device in a scrape.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The `device` label: N of davinciN (from the path, else from GET_INFO), or `""`.
    pub device: String,
    /// The device path as given to the shim (`/dev/davinci0`, `mock:/run/davinci/davinci0.sock`).
    pub path: String,
    /// The pods whose containers the kubelet gave this device (pod-resources API).
    pub pods: Vec<PodRef>,
    /// The device's `uuid` and `model` labels: from this reading's GET_IDENTITY, else the
    /// last the exporter read at this path (`crate::state::History::update`), so a device
    /// that goes down keeps its series' labels; `None` before any GET_IDENTITY answered.
    pub identity: Option<Identity>,
    /// The reading, or why there is none.
    pub outcome: Result<Reading, Failure>,
}

/// The identity labels every series of a device carries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// GET_IDENTITY's UUID, lowercase `8-4-4-4-12`.
    pub uuid: String,
    /// GET_IDENTITY's model, escaped as every label value.
    pub model: String,
}

impl Identity {
    /// The labels of `id`.
    pub fn of(id: &DeviceIdentity) -> Identity {
        Identity {
            uuid: id.uuid_string().as_str().to_string(),
            model: davinci_ops::text::printable(id.model()),
        }
    }

    /// This sample's identity labels: its own field, else its reading's GET_IDENTITY.
    pub fn of_sample(s: &Sample) -> Option<Identity> {
        s.identity.clone().or_else(|| {
            s.outcome
                .as_ref()
                .ok()
                .and_then(|r| r.identity.as_ref())
                .map(Identity::of)
        })
    }
}

/// A client group: the clients of one device with the same container id and process name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Group {
    /// The container id (`""` outside a container).
    pub container_id: String,
    /// The process name (full when it could be read, else `comm`).
    pub process: String,
    /// Clients attached now.
    pub clients: u32,
    /// Sums over the clients attached now.
    pub memory_bytes: u64,
    /// See [`memory_bytes`](Self::memory_bytes).
    pub tasks_queued: u64,
    /// See [`memory_bytes`](Self::memory_bytes).
    pub contexts: u64,
    /// See [`memory_bytes`](Self::memory_bytes).
    pub streams: u64,
    /// See [`memory_bytes`](Self::memory_bytes).
    pub events: u64,
    /// See [`memory_bytes`](Self::memory_bytes).
    pub allocations: u64,
    /// Counters: the clients attached now plus those gone.
    pub totals: Totals,
    /// Whether `busy_ns` is known (the driver has ABI 1.4's per-client busy time).
    pub has_busy: bool,
}

/// A client's (or group's) counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Descriptors taken.
    pub tasks_submitted: u64,
    /// Completions written.
    pub tasks_completed: u64,
    /// Engine time, ns.
    pub busy_ns: u64,
}

impl Totals {
    pub(crate) fn of(c: &ClientUsage) -> Totals {
        Totals {
            tasks_submitted: c.tasks_submitted,
            tasks_completed: c.tasks_completed,
            busy_ns: c.busy_ns,
        }
    }

    pub(crate) fn add(&mut self, o: &Totals) {
        self.tasks_submitted = self.tasks_submitted.saturating_add(o.tasks_submitted);
        self.tasks_completed = self.tasks_completed.saturating_add(o.tasks_completed);
        self.busy_ns = self.busy_ns.saturating_add(o.busy_ns);
    }
}

/// What was derived for one device in a scrape.
#[derive(Debug, Clone, Default)]
pub struct Derived {
    /// Utilization since the last scrape, 0..1.
    pub utilization: Option<f64>,
    /// The client groups, in the order their first client is listed.
    pub groups: Vec<Group>,
    /// The process name of each client of the reading (same order as `clients`).
    pub names: Vec<String>,
    /// What the exporter has counted of the device's event log, this reading included
    /// (`crate::events`); `None` without a READ_EVENTS answer.
    pub events: Option<crate::events::EventCounts>,
}

/// A container that holds (an ID of) a device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PodRef {
    /// The pod's name.
    pub pod: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The container's name.
    pub container: String,
}
