//! The metric families and their encoding: one scrape's [`Sample`]s become a fresh
//! `prometheus-client` [`Registry`], encoded in the Prometheus text format (0.0.4) or
//! OpenMetrics (1.0.0). [`FAMILIES`] lists every family (the README's table is made from
//! it, and a test checks that the two agree).
#![forbid(unsafe_code)]

use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry, Unit};

use davinci_uapi::ShareMode;

use crate::collect::Sample;

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4 (`text/plain; version=0.0.4`).
    Prometheus,
    /// OpenMetrics 1.0.0 text (`application/openmetrics-text; version=1.0.0`).
    Openmetrics,
}

impl Format {
    /// The `Content-Type` of a body in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::Openmetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// The format an `Accept` header asks for: OpenMetrics when it accepts
    /// `application/openmetrics-text` at least as much as the text format (by q-value),
    /// else the Prometheus text format.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Prometheus;
        };
        let (mut om, mut text) = (0.0f32, 0.0f32);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let mut q = 1.0f32;
            for p in parts {
                if let Some(v) = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")) {
                    q = v
                        .parse()
                        .ok()
                        .filter(|q: &f32| q.is_finite())
                        .unwrap_or(0.0);
                }
            }
            match media.as_str() {
                "application/openmetrics-text" => om = om.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if om > 0.0 && om >= text {
            Format::Openmetrics
        } else {
            Format::Prometheus
        }
    }
}

/// The exporter's own figures for a scrape.
#[derive(Debug, Clone, Copy, Default)]
pub struct SelfStats {
    /// Time to discover and read the devices.
    pub duration: Duration,
    /// Scrapes served since start, this one included.
    pub scrapes: u64,
    /// Connections refused because the connection limit was reached.
    pub rejected: u64,
    /// Connections closed to make room for new ones.
    pub evicted: u64,
}

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

const DEV: &str = "device, path";
const CLIENT: &str = "device, path, client_id, pid, uid, container, process";

macro_rules! families {
    ($($id:ident = ($name:literal, $kind:ident, $labels:expr, $help:literal);)*) => {
        $(const $id: FamilyDoc = FamilyDoc {
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
    ERROR = ("davinci_device_error_info", Gauge, "device, path, errno",
        "Why a device is down: the errno of the failed open or call (ETIMEDOUT: no answer in time); 1 for each down device");
    INFO = ("davinci_device_info", Gauge, "device, path, abi_version, features",
        "The driver's ABI version and feature bits (DAVINCI_FEAT_*, hex); always 1");
    SHARE = ("davinci_device_share_mode", Gauge, "device, path, mode",
        "1 for the sharing mode in force (exclusive or shared), 0 for the other");
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
    C_MEM = ("davinci_client_memory_bytes", Gauge, CLIENT,
        "Device memory held by the client");
    C_SUBMITTED = ("davinci_client_tasks_submitted_total", Counter, CLIENT,
        "Descriptors the device has taken from the client's command rings");
    C_COMPLETED = ("davinci_client_tasks_completed_total", Counter, CLIENT,
        "Completions the device has written for the client");
    C_QUEUED = ("davinci_client_tasks_queued", Gauge, CLIENT,
        "Descriptors the client has published and the device has not taken yet, over all its streams");
    C_CONTEXTS = ("davinci_client_contexts", Gauge, CLIENT,
        "Contexts the client holds");
    C_STREAMS = ("davinci_client_streams", Gauge, CLIENT,
        "Streams the client holds");
    C_EVENTS = ("davinci_client_events", Gauge, CLIENT,
        "Events the client holds");
    C_ALLOCS = ("davinci_client_allocations", Gauge, CLIENT,
        "Allocations the client holds");
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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DevLabels {
    device: String,
    path: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    device: String,
    path: String,
    errno: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    device: String,
    path: String,
    abi_version: String,
    features: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabels {
    device: String,
    path: String,
    mode: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientLabels {
    device: String,
    path: String,
    client_id: u32,
    pid: u32,
    uid: u32,
    container: String,
    process: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: String,
}

/// One family's series, in the order they were added (devices in discovery order, clients
/// in the driver's order), so that scrapes are stable and diffable.
#[derive(Debug)]
struct Series<L> {
    kind: Kind,
    rows: Vec<(L, u64)>,
}

impl<L> Series<L> {
    fn new(doc: &FamilyDoc) -> Series<L> {
        Series {
            kind: doc.kind,
            rows: Vec::new(),
        }
    }

    fn add(&mut self, labels: L, v: impl Into<u64>) {
        self.rows.push((labels, v.into()));
    }
}

impl<L: EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static> EncodeMetric for Series<L> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, v) in &self.rows {
            let e = encoder.encode_family(labels)?;
            match self.kind {
                Kind::Gauge => ConstGauge::new(*v).encode(e)?,
                Kind::Counter => ConstCounter::new(*v).encode(e)?,
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        match self.kind {
            Kind::Gauge => MetricType::Gauge,
            Kind::Counter => MetricType::Counter,
        }
    }
}

/// Registers `metric` under `doc`: the registered name is the exposed one less the
/// suffixes the encoder adds (`_total` of counters, the unit).
fn register(reg: &mut Registry, doc: &FamilyDoc, metric: impl Metric) {
    let name = match doc.kind {
        Kind::Counter => doc.name.strip_suffix("_total").unwrap_or(doc.name),
        Kind::Gauge => doc.name,
    };
    if let Some(n) = name.strip_suffix("_bytes") {
        reg.register_with_unit(n, doc.help, Unit::Bytes, metric);
    } else if let Some(n) = name.strip_suffix("_seconds") {
        reg.register_with_unit(n, doc.help, Unit::Seconds, metric);
    } else {
        reg.register(name, doc.help, metric);
    }
}

/// The registry of one scrape: every family of [`FAMILIES`], with the samples' series.
fn registry(samples: &[Sample], stats: &SelfStats) -> Registry {
    let mut up = Series::<DevLabels>::new(&UP);
    let mut error = Series::<ErrorLabels>::new(&ERROR);
    let mut info = Series::<InfoLabels>::new(&INFO);
    let mut share = Series::<ModeLabels>::new(&SHARE);
    let mut clients = Series::<DevLabels>::new(&CLIENTS);
    let mut clients_max = Series::<DevLabels>::new(&CLIENTS_MAX);
    let mut mem_used = Series::<DevLabels>::new(&MEM_USED);
    let mut mem_total = Series::<DevLabels>::new(&MEM_TOTAL);
    let mut mem_limit = Series::<DevLabels>::new(&MEM_LIMIT);
    let mut dev_queued = Series::<DevLabels>::new(&DEV_QUEUED);
    let mut dev_submitted = Series::<DevLabels>::new(&DEV_SUBMITTED);
    let mut dev_completed = Series::<DevLabels>::new(&DEV_COMPLETED);
    let mut doorbells = Series::<DevLabels>::new(&DOORBELLS);
    let mut stream_errors = Series::<DevLabels>::new(&STREAM_ERRORS);
    let mut opened = Series::<DevLabels>::new(&OPENED);
    let mut dev_contexts = Series::<DevLabels>::new(&DEV_CONTEXTS);
    let mut dev_streams = Series::<DevLabels>::new(&DEV_STREAMS);
    let mut dev_events = Series::<DevLabels>::new(&DEV_EVENTS);
    let mut dev_allocs = Series::<DevLabels>::new(&DEV_ALLOCS);
    let mut c_mem = Series::<ClientLabels>::new(&C_MEM);
    let mut c_submitted = Series::<ClientLabels>::new(&C_SUBMITTED);
    let mut c_completed = Series::<ClientLabels>::new(&C_COMPLETED);
    let mut c_queued = Series::<ClientLabels>::new(&C_QUEUED);
    let mut c_contexts = Series::<ClientLabels>::new(&C_CONTEXTS);
    let mut c_streams = Series::<ClientLabels>::new(&C_STREAMS);
    let mut c_events = Series::<ClientLabels>::new(&C_EVENTS);
    let mut c_allocs = Series::<ClientLabels>::new(&C_ALLOCS);

    for s in samples {
        let dl = DevLabels {
            device: s.device.clone(),
            path: s.path.clone(),
        };
        let r = match &s.outcome {
            Ok(r) => r,
            Err(f) => {
                up.add(dl, 0u64);
                let el = ErrorLabels {
                    device: s.device.clone(),
                    path: s.path.clone(),
                    errno: f.errno_name().to_string(),
                };
                error.add(el, 1u64);
                continue;
            }
        };
        up.add(dl.clone(), 1u64);
        let i = &r.info;
        let il = InfoLabels {
            device: s.device.clone(),
            path: s.path.clone(),
            abi_version: format!("{}.{}", i.abi_major, i.abi_minor),
            features: format!("{:#x}", i.features.bits()),
        };
        info.add(il, 1u64);
        if let Some(mode) = i.share_mode() {
            for m in ShareMode::ALL {
                let ml = ModeLabels {
                    device: s.device.clone(),
                    path: s.path.clone(),
                    mode: m.name().into(),
                };
                share.add(ml, u64::from(mode == m));
            }
        }
        clients.add(dl.clone(), i.clients);
        clients_max.add(dl.clone(), i.max_clients);
        mem_used.add(dl.clone(), i.memory_used);
        mem_total.add(dl.clone(), i.memory_size);
        mem_limit.add(dl.clone(), i.client_memory_limit);
        if let Some(list) = &r.clients {
            let queued = list
                .iter()
                .fold(0u64, |a, c| a.saturating_add(c.tasks_queued));
            dev_queued.add(dl.clone(), queued);
            for c in list {
                let cl = ClientLabels {
                    device: s.device.clone(),
                    path: s.path.clone(),
                    client_id: c.client_id,
                    pid: c.pid,
                    uid: c.uid,
                    container: printable(c.container_id().unwrap_or("")),
                    process: printable(c.comm()),
                };
                c_mem.add(cl.clone(), c.memory_bytes);
                c_submitted.add(cl.clone(), c.tasks_submitted);
                c_completed.add(cl.clone(), c.tasks_completed);
                c_queued.add(cl.clone(), c.tasks_queued);
                c_contexts.add(cl.clone(), c.contexts);
                c_streams.add(cl.clone(), c.streams);
                c_events.add(cl.clone(), c.events);
                c_allocs.add(cl, c.allocations);
            }
        }
        if let Some(k) = &r.counters {
            dev_submitted.add(dl.clone(), k.tasks_submitted);
            dev_completed.add(dl.clone(), k.tasks_completed);
            doorbells.add(dl.clone(), k.doorbells);
            stream_errors.add(dl.clone(), k.stream_errors);
            opened.add(dl.clone(), k.clients_opened);
            dev_contexts.add(dl.clone(), k.contexts);
            dev_streams.add(dl.clone(), k.streams);
            dev_events.add(dl.clone(), k.events);
            dev_allocs.add(dl, k.allocations);
        }
    }

    let mut reg = Registry::default();
    let r = &mut reg;
    register(r, &UP, up);
    register(r, &ERROR, error);
    register(r, &INFO, info);
    register(r, &SHARE, share);
    register(r, &CLIENTS, clients);
    register(r, &CLIENTS_MAX, clients_max);
    register(r, &MEM_USED, mem_used);
    register(r, &MEM_TOTAL, mem_total);
    register(r, &MEM_LIMIT, mem_limit);
    register(r, &DEV_QUEUED, dev_queued);
    register(r, &DEV_SUBMITTED, dev_submitted);
    register(r, &DEV_COMPLETED, dev_completed);
    register(r, &DOORBELLS, doorbells);
    register(r, &STREAM_ERRORS, stream_errors);
    register(r, &OPENED, opened);
    register(r, &DEV_CONTEXTS, dev_contexts);
    register(r, &DEV_STREAMS, dev_streams);
    register(r, &DEV_EVENTS, dev_events);
    register(r, &DEV_ALLOCS, dev_allocs);
    register(r, &C_MEM, c_mem);
    register(r, &C_SUBMITTED, c_submitted);
    register(r, &C_COMPLETED, c_completed);
    register(r, &C_QUEUED, c_queued);
    register(r, &C_CONTEXTS, c_contexts);
    register(r, &C_STREAMS, c_streams);
    register(r, &C_EVENTS, c_events);
    register(r, &C_ALLOCS, c_allocs);
    register(r, &DEVICES, ConstGauge::new(samples.len() as u64));
    register(r, &DURATION, ConstGauge::new(stats.duration.as_secs_f64()));
    register(r, &SCRAPES, ConstCounter::new(stats.scrapes));
    register(r, &REJECTED, ConstCounter::new(stats.rejected));
    register(r, &EVICTED, ConstCounter::new(stats.evicted));
    let mut build = Series::<VersionLabels>::new(&BUILD);
    let version = VersionLabels {
        version: env!("CARGO_PKG_VERSION").into(),
    };
    build.add(version, 1u64);
    register(r, &BUILD, build);
    reg
}

/// One scrape's exposition in `format`.
pub fn encode(samples: &[Sample], stats: &SelfStats, format: Format) -> String {
    let reg = registry(samples, stats);
    let mut out = String::new();
    let r = match format {
        Format::Prometheus => prometheus_client::encoding::prometheus_text::encode(&mut out, &reg),
        Format::Openmetrics => prometheus_client::encoding::text::encode(&mut out, &reg),
    };
    if r.is_err() {
        // Writing to a String does not fail; the encoders fail only on what the writer
        // refuses. Say so in the body rather than serve half an exposition.
        return "# davinci-exporter: encoding failed\n".into();
    }
    out
}

#[cfg(test)]
mod tests;

/// A tenant's string (process name, container id) as a label value that cannot disturb
/// whoever reads it: control characters (an escape sequence, a newline) become their Rust
/// escapes (`\u{1b}`, `\n`); the text format escapes the rest.
fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
