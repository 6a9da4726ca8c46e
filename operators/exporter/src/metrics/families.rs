//! Every family the exporter serves: its name, type, labels and help ([`FAMILIES`]; the
//! operators' guide's table is checked against it).
#![forbid(unsafe_code)]

/// Metric type, as the exposition says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A value that goes up and down.
    Gauge,
    /// A value that only grows (until its device or client goes away).
    Counter,
}

/// One metric family, as exposed.
#[derive(Debug, Clone, Copy)]
pub struct FamilyDoc {
    /// The exposed name (with unit and `_total` suffixes).
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Its labels.
    pub labels: &'static str,
    /// The `# HELP` text (the encoder adds a full stop).
    pub help: &'static str,
}

/// The labels of a device's series (`uuid` and `model` once a GET_IDENTITY answered, ABI
/// 1.4); `pod`, `namespace` and `container` are added when the kubelet gave the device to one
/// container.
const DEV: &str = "device, uuid, model";
/// The labels of a client group's series.
const CLIENT: &str = "device, uuid, model, container_id, process";

macro_rules! families {
    ($($id:ident = ($name:literal, $kind:ident, $labels:expr, $help:literal);)*) => {
        $(pub(super) const $id: FamilyDoc = FamilyDoc {
            name: $name,
            kind: Kind::$kind,
            labels: $labels,
            help: $help,
        };)*
        /// Every family the exporter exposes, in exposition order.
        pub const FAMILIES: &[FamilyDoc] = &[$($id),*];
    };
}

families! {
    UP = ("davinci_device_up", Gauge, DEV,
        "1 if the device answered GET_INFO in this scrape, 0 if it could not be opened or read");
    ERROR = ("davinci_device_error_info", Gauge, "device, uuid, model, errno",
        "Why a device is down: the errno of the failed open or call (ETIMEDOUT: no answer in time); 1 for each down device");
    INFO = ("davinci_device_info", Gauge, "device, uuid, model, path, driver_version, numa_node, chip_name, bus_id, abi_version, features",
        "What the device is: its path, driver, NUMA node, chip name and bus address (GET_IDENTITY, ABI 1.4; absent before; chip_name from ABI 1.5, bus_id on a bus only), the driver's ABI version and feature bits (DAVINCI_FEAT_*, hex); always 1");
    POD_INFO = ("davinci_device_pod_info", Gauge, "device, uuid, model, pod, namespace, container",
        "A container the kubelet gave the device (or a replica of it) to, from its pod-resources API; always 1");
    SHARE = ("davinci_device_share_mode", Gauge, "device, uuid, model, mode",
        "1 for the sharing mode in force (exclusive or shared), 0 for the other");
    HEALTH = ("davinci_device_health", Gauge, DEV,
        "The device's health code: 0 OK, 1 Warning (an engine holds a task that does not finish), 2 Alarm, 3 Critical (DAVINCI_HEALTH_*; needs ABI 1.4)");
    HUNG = ("davinci_device_hung_streams", Gauge, DEV,
        "Streams stopped now by a task that does not finish (needs ABI 1.4)");
    BUSY = ("davinci_device_busy_seconds_total", Counter, DEV,
        "Time the device's engines spent executing tasks since the device started, summed over engines working at once (needs ABI 1.4)");
    UTIL = ("davinci_device_utilization_ratio", Gauge, DEV,
        "Share of the device's engine time spent executing tasks between the exporter's previous scrape and this one, 0 to 1 (absent on the first scrape and after a device restart; needs ABI 1.4)");
    ENGINES = ("davinci_device_engines", Gauge, DEV,
        "Engines that execute tasks at once (needs ABI 1.4)");
    CLIENTS = ("davinci_device_clients", Gauge, DEV,
        "Clients attached now (control opens excluded)");
    CLIENTS_MAX = ("davinci_device_clients_max", Gauge, DEV,
        "Most clients the device takes at once");
    MEM_USED = ("davinci_device_memory_used_bytes", Gauge, DEV,
        "Device memory allocated by all clients");
    MEM_TOTAL = ("davinci_device_memory_total_bytes", Gauge, DEV,
        "Total device memory");
    MEM_LIMIT = ("davinci_device_client_memory_limit_bytes", Gauge, DEV,
        "Device memory one client may hold at most");
    DEV_QUEUED = ("davinci_device_tasks_queued", Gauge, DEV,
        "Descriptors published by the attached clients and not yet taken by the device (needs LIST_CLIENTS)");
    DEV_SUBMITTED = ("davinci_device_tasks_submitted_total", Counter, DEV,
        "Descriptors the device has taken from all command rings since it started (needs GET_COUNTERS, ABI 1.3)");
    DEV_COMPLETED = ("davinci_device_tasks_completed_total", Counter, DEV,
        "Completion records the device has written since it started, failed ones included (needs GET_COUNTERS)");
    DOORBELLS = ("davinci_device_doorbells_total", Counter, DEV,
        "Doorbells that woke the device (a sleeping stream worker found its doorbell rung) since the device started; near zero per task under load (needs GET_COUNTERS)");
    STREAM_ERRORS = ("davinci_device_stream_errors_total", Counter, DEV,
        "Times a stream entered the error state (failed descriptor, corrupt ring indices, reset) since the device started (needs GET_COUNTERS)");
    OPENED = ("davinci_device_clients_opened_total", Counter, DEV,
        "Client opens attached since the device started (needs GET_COUNTERS)");
    DEV_CONTEXTS = ("davinci_device_contexts", Gauge, DEV,
        "Contexts that exist now on the device (needs GET_COUNTERS)");
    DEV_STREAMS = ("davinci_device_streams", Gauge, DEV,
        "Streams that exist now on the device (needs GET_COUNTERS)");
    DEV_EVENTS = ("davinci_device_events", Gauge, DEV,
        "Events that exist now on the device (needs GET_COUNTERS)");
    DEV_ALLOCS = ("davinci_device_allocations", Gauge, DEV,
        "Allocations that exist now on the device (needs GET_COUNTERS)");
    TEMP = ("davinci_device_temperature_celsius", Gauge, DEV,
        "Die temperature (GET_SENSORS, ABI 1.5; absent for a device without sensors)");
    MEM_TEMP = ("davinci_device_memory_temperature_celsius", Gauge, DEV,
        "Device-memory (HBM) temperature (GET_SENSORS)");
    SLOWDOWN_TEMP = ("davinci_device_slowdown_temperature_celsius", Gauge, DEV,
        "Die temperature at which the device slows down (thermal throttling; GET_SENSORS)");
    SHUTDOWN_TEMP = ("davinci_device_shutdown_temperature_celsius", Gauge, DEV,
        "Die temperature at which the device shuts down (GET_SENSORS)");
    POWER = ("davinci_device_power_watts", Gauge, DEV,
        "Power drawn: the average since the device's previous sensor read by anyone, or over the last second (GET_SENSORS)");
    POWER_LIMIT = ("davinci_device_power_limit_watts", Gauge, DEV,
        "The power cap the device enforces (GET_SENSORS)");
    VOLTAGE = ("davinci_device_voltage_volts", Gauge, DEV,
        "Core voltage (GET_SENSORS)");
    ENERGY = ("davinci_device_energy_joules_total", Counter, DEV,
        "Energy the device used since it started (GET_SENSORS)");
    THROTTLED = ("davinci_device_throttled", Gauge, "device, uuid, model, reason",
        "1 if the device is slowed down now for this reason (thermal: the die reached the slowdown temperature; power: the power drawn reached the cap), 0 if not (GET_SENSORS)");
    LOG_EVENTS = ("davinci_device_log_events_total", Counter, "device, uuid, model, code, name",
        "Events of the device's event log (READ_EVENTS, ABI 1.5) by code (name: stream_stopped, hung_task, device_reset, device_started, quota_storm, import_revoked, injected_fault; unknown for a newer driver's), counted by this exporter: the events the log held at its first read, then each new one once, across device restarts; every known code always, 0 when never seen. An exporter that is not an admin of the device counts only the device's own events and its user's");
    LOG_LOST = ("davinci_device_log_events_lost_total", Counter, DEV,
        "Events the device's event log dropped (it keeps the last 256) before this exporter read them");
    C_INFO = ("davinci_client_info", Gauge, "device, uuid, model, container_id, process, client_id, pid, uid",
        "One attached client: its driver client id, pid and uid, and the group (container_id, process) whose davinci_client_* series count it; always 1");
    C_PROCESSES = ("davinci_client_processes", Gauge, CLIENT,
        "Clients of the group (same container and process name) attached now");
    C_MEM = ("davinci_client_memory_bytes", Gauge, CLIENT,
        "Device memory held by the group's clients");
    C_BUSY = ("davinci_client_busy_seconds_total", Counter, CLIENT,
        "Engine time spent executing the group's tasks, clients gone since included (needs ABI 1.4)");
    C_SUBMITTED = ("davinci_client_tasks_submitted_total", Counter, CLIENT,
        "Descriptors the device has taken from the group's command rings, clients gone since included");
    C_COMPLETED = ("davinci_client_tasks_completed_total", Counter, CLIENT,
        "Completions the device has written for the group, clients gone since included");
    C_QUEUED = ("davinci_client_tasks_queued", Gauge, CLIENT,
        "Descriptors the group's clients have published and the device has not taken yet, over all their streams");
    C_CONTEXTS = ("davinci_client_contexts", Gauge, CLIENT,
        "Contexts the group's clients hold");
    C_STREAMS = ("davinci_client_streams", Gauge, CLIENT,
        "Streams the group's clients hold");
    C_EVENTS = ("davinci_client_events", Gauge, CLIENT,
        "Events the group's clients hold");
    C_ALLOCS = ("davinci_client_allocations", Gauge, CLIENT,
        "Allocations the group's clients hold");
    DEVICES = ("davinci_exporter_devices", Gauge, "",
        "Devices discovered in this scrape, up or not");
    DURATION = ("davinci_exporter_scrape_duration_seconds", Gauge, "",
        "Time this scrape took to discover and read the devices");
    SCRAPES = ("davinci_exporter_scrapes_total", Counter, "",
        "Scrapes of /metrics served since the exporter started, this one included");
    REJECTED = ("davinci_exporter_connections_rejected_total", Counter, "",
        "Connections answered 503 because --max-connections connections were open and all were being answered");
    EVICTED = ("davinci_exporter_connections_evicted_total", Counter, "",
        "Connections closed to make room for a new one at --max-connections: the oldest that had not sent a whole request head (idle or trickling) or had been answered");
    BUILD = ("davinci_exporter_build_info", Gauge, "version",
        "The exporter's version; always 1");
}
