//! The metric families and their encoding: one scrape's [`Sample`]s become a fresh
//! `prometheus-client` [`Registry`], encoded in the Prometheus text format (0.0.4) or
//! OpenMetrics (1.0.0). [`FAMILIES`] lists every family (the README's table is made from
//! it, and a test checks that the two agree).
#![forbid(unsafe_code)]

use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry, Unit};

use davinci_uapi::{DeviceSensors, Features, ShareMode, THROTTLE_POWER, THROTTLE_THERMAL};

use davinci_ops::text::{printable, printable_field};

use crate::collect::Sample;
use crate::sample::Identity;

mod families;
use families::*;
pub use families::{FamilyDoc, Kind, FAMILIES};

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

/// A series' labels, in order.
type Labels = Vec<(&'static str, String)>;

/// A sample's value.
#[derive(Debug, Clone, Copy)]
enum Value {
    Int(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(v.into())
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

/// One family's series, in the order they were added (devices in discovery order, clients
/// in the driver's order), so that scrapes are stable and diffable.
#[derive(Debug)]
struct Series {
    kind: Kind,
    rows: Vec<(Labels, Value)>,
}

impl Series {
    fn new(doc: &FamilyDoc) -> Series {
        Series {
            kind: doc.kind,
            rows: Vec::new(),
        }
    }

    fn add(&mut self, labels: Labels, v: impl Into<Value>) {
        self.rows.push((labels, v.into()));
    }
}

impl EncodeMetric for Series {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, v) in &self.rows {
            let e = encoder.encode_family(labels)?;
            match (self.kind, *v) {
                (Kind::Gauge, Value::Int(v)) => ConstGauge::new(v).encode(e)?,
                (Kind::Gauge, Value::Float(v)) => ConstGauge::new(v).encode(e)?,
                (Kind::Counter, Value::Int(v)) => ConstCounter::new(v).encode(e)?,
                (Kind::Counter, Value::Float(v)) => ConstCounter::new(v).encode(e)?,
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
    } else if let Some(n) = name.strip_suffix("_celsius") {
        reg.register_with_unit(n, doc.help, Unit::Celsius, metric);
    } else if let Some(n) = name.strip_suffix("_joules") {
        reg.register_with_unit(n, doc.help, Unit::Joules, metric);
    } else if let Some(n) = name.strip_suffix("_volts") {
        reg.register_with_unit(n, doc.help, Unit::Volts, metric);
    } else if let Some(n) = name.strip_suffix("_watts") {
        reg.register_with_unit(n, doc.help, Unit::Other("watts".into()), metric);
    } else {
        reg.register(name, doc.help, metric);
    }
}

/// Every family's series, by family (in [`FAMILIES`] order).
struct Families(Vec<(&'static FamilyDoc, Series)>);

impl Families {
    fn new() -> Families {
        Families(FAMILIES.iter().map(|f| (f, Series::new(f))).collect())
    }

    fn add(&mut self, doc: &FamilyDoc, labels: Labels, v: impl Into<Value>) {
        if let Some((_, s)) = self.0.iter_mut().find(|(f, _)| f.name == doc.name) {
            s.add(labels, v);
        }
    }
}

/// `base` and more labels.
fn with(base: &Labels, more: &[(&'static str, String)]) -> Labels {
    let mut l = base.clone();
    l.extend_from_slice(more);
    l
}

/// The labels that say which device a series is of: `device`, and `uuid` and `model` when
/// a GET_IDENTITY of it answered (this scrape's, else the last one: a device that goes down
/// keeps them).
fn identity_labels(s: &Sample) -> Labels {
    let mut l = vec![("device", s.device.clone())];
    if let Some(id) = Identity::of_sample(s) {
        l.push(("uuid", id.uuid));
        l.push(("model", id.model));
    }
    l
}

/// The labels every series of the device `s` has: [`identity_labels`], and `pod`,
/// `namespace` and `container` when the kubelet gave the device to exactly one container (a
/// device shared by several has them on `davinci_device_pod_info` only).
fn device_labels(s: &Sample) -> Labels {
    let mut l = identity_labels(s);
    if let [one] = s.pods.as_slice() {
        l.push(("pod", one.pod.clone()));
        l.push(("namespace", one.namespace.clone()));
        l.push(("container", one.container.clone()));
    }
    l
}

/// Whether a family is a per-client one (`davinci_client_*`), served only with
/// `--client-series`: its labels name a tenant's processes and containers.
pub fn is_client_family(doc: &FamilyDoc) -> bool {
    doc.name.starts_with("davinci_client_")
}

/// The registry of one scrape: every family of [`FAMILIES`], with the samples' series; the
/// per-client families only with `client_series`.
fn registry(samples: &[Sample], stats: &SelfStats, client_series: bool) -> Registry {
    let mut f = Families::new();
    for s in samples {
        let dl = device_labels(s);
        let ident = identity_labels(s);
        for p in &s.pods {
            f.add(
                &POD_INFO,
                with(
                    &ident,
                    &[
                        ("pod", p.pod.clone()),
                        ("namespace", p.namespace.clone()),
                        ("container", p.container.clone()),
                    ],
                ),
                1u64,
            );
        }
        let r = match &s.outcome {
            Ok(r) => r,
            Err(e) => {
                f.add(&UP, dl.clone(), 0u64);
                f.add(
                    &ERROR,
                    with(&dl, &[("errno", e.errno_name().to_string())]),
                    1u64,
                );
                continue;
            }
        };
        f.add(&UP, dl.clone(), 1u64);
        let i = &r.info;
        let mut il = with(&dl, &[("path", printable(&s.path))]);
        if let Some(id) = &r.identity {
            il.push(("driver_version", printable(id.driver_version())));
            il.push(("numa_node", id.numa_node.to_string()));
            il.push(("chip_name", printable(id.chip_name())));
            il.push(("bus_id", printable(id.bus_id())));
        }
        il.push(("abi_version", format!("{}.{}", i.abi_major, i.abi_minor)));
        il.push(("features", format!("{:#x}", i.features.bits())));
        f.add(&INFO, il, 1u64);
        if let Some(mode) = i.share_mode() {
            for m in ShareMode::ALL {
                f.add(
                    &SHARE,
                    with(&dl, &[("mode", m.name().to_string())]),
                    u64::from(mode == m),
                );
            }
        }
        let v14 = i.features.contains(Features::IDENTITY);
        if let (true, Some(k)) = (v14, &r.counters) {
            f.add(&HEALTH, dl.clone(), k.health);
            f.add(&HUNG, dl.clone(), k.hung_streams);
            f.add(&BUSY, dl.clone(), ns_to_s(k.busy_ns));
            if let Some(u) = r.derived.utilization {
                f.add(&UTIL, dl.clone(), u);
            }
            f.add(&ENGINES, dl.clone(), k.engines);
        }
        f.add(&CLIENTS, dl.clone(), i.clients);
        f.add(&CLIENTS_MAX, dl.clone(), i.max_clients);
        f.add(&MEM_USED, dl.clone(), i.memory_used);
        f.add(&MEM_TOTAL, dl.clone(), i.memory_size);
        f.add(&MEM_LIMIT, dl.clone(), i.client_memory_limit);
        if let Some(list) = &r.clients {
            let queued = list
                .iter()
                .fold(0u64, |a, c| a.saturating_add(c.tasks_queued));
            f.add(&DEV_QUEUED, dl.clone(), queued);
        }
        if let Some(k) = &r.counters {
            f.add(&DEV_SUBMITTED, dl.clone(), k.tasks_submitted);
            f.add(&DEV_COMPLETED, dl.clone(), k.tasks_completed);
            f.add(&DOORBELLS, dl.clone(), k.doorbells);
            f.add(&STREAM_ERRORS, dl.clone(), k.stream_errors);
            f.add(&OPENED, dl.clone(), k.clients_opened);
            f.add(&DEV_CONTEXTS, dl.clone(), k.contexts);
            f.add(&DEV_STREAMS, dl.clone(), k.streams);
            f.add(&DEV_EVENTS, dl.clone(), k.events);
            f.add(&DEV_ALLOCS, dl.clone(), k.allocations);
        }
        if let Some(x) = &r.sensors {
            add_sensors(&mut f, &dl, x);
        }
        if let Some(ev) = &r.derived.events {
            for (code, n) in &ev.by_code {
                let name = davinci_ops::events::name(*code).unwrap_or("unknown");
                let l = with(
                    &dl,
                    &[("code", code.to_string()), ("name", name.to_string())],
                );
                f.add(&LOG_EVENTS, l, *n);
            }
            f.add(&LOG_LOST, dl.clone(), ev.lost);
        }
        if let Some(list) = &r.clients {
            for (n, c) in list.iter().enumerate() {
                let name = r
                    .derived
                    .names
                    .get(n)
                    .map_or_else(|| printable_field(&c.comm), |name| printable(name));
                let cl = with(
                    &dl,
                    &[
                        ("container_id", printable_field(&c.container)),
                        ("process", name),
                        ("client_id", c.client_id.to_string()),
                        ("pid", c.pid.to_string()),
                        ("uid", c.uid.to_string()),
                    ],
                );
                f.add(&C_INFO, cl, 1u64);
            }
        }
        for g in &r.derived.groups {
            let gl = with(
                &dl,
                &[
                    ("container_id", printable(&g.container_id)),
                    ("process", printable(&g.process)),
                ],
            );
            f.add(&C_PROCESSES, gl.clone(), g.clients);
            f.add(&C_MEM, gl.clone(), g.memory_bytes);
            if g.has_busy {
                f.add(&C_BUSY, gl.clone(), ns_to_s(g.totals.busy_ns));
            }
            f.add(&C_SUBMITTED, gl.clone(), g.totals.tasks_submitted);
            f.add(&C_COMPLETED, gl.clone(), g.totals.tasks_completed);
            f.add(&C_QUEUED, gl.clone(), g.tasks_queued);
            f.add(&C_CONTEXTS, gl.clone(), g.contexts);
            f.add(&C_STREAMS, gl.clone(), g.streams);
            f.add(&C_EVENTS, gl.clone(), g.events);
            f.add(&C_ALLOCS, gl, g.allocations);
        }
    }
    f.add(&DEVICES, Labels::new(), samples.len() as u64);
    f.add(&DURATION, Labels::new(), stats.duration.as_secs_f64());
    f.add(&SCRAPES, Labels::new(), stats.scrapes);
    f.add(&REJECTED, Labels::new(), stats.rejected);
    f.add(&EVICTED, Labels::new(), stats.evicted);
    f.add(
        &BUILD,
        vec![("version", env!("CARGO_PKG_VERSION").to_string())],
        1u64,
    );
    let mut reg = Registry::default();
    for (doc, series) in f.0 {
        if client_series || !is_client_family(doc) {
            register(&mut reg, doc, series);
        }
    }
    reg
}

/// GET_SENSORS' series, in base units (degrees Celsius, watts, volts, joules).
fn add_sensors(f: &mut Families, dl: &Labels, x: &DeviceSensors) {
    let milli = |v: f64| v / 1e3;
    f.add(&TEMP, dl.clone(), milli(x.temperature_mc.into()));
    f.add(&MEM_TEMP, dl.clone(), milli(x.memory_temperature_mc.into()));
    f.add(
        &SLOWDOWN_TEMP,
        dl.clone(),
        milli(x.slowdown_temperature_mc.into()),
    );
    f.add(
        &SHUTDOWN_TEMP,
        dl.clone(),
        milli(x.shutdown_temperature_mc.into()),
    );
    f.add(&POWER, dl.clone(), milli(x.power_mw.into()));
    f.add(&POWER_LIMIT, dl.clone(), milli(x.power_limit_mw.into()));
    f.add(&VOLTAGE, dl.clone(), milli(x.voltage_mv.into()));
    f.add(&ENERGY, dl.clone(), milli(x.energy_mj as f64));
    for (reason, bit) in [("thermal", THROTTLE_THERMAL), ("power", THROTTLE_POWER)] {
        f.add(
            &THROTTLED,
            with(dl, &[("reason", reason.to_string())]),
            u64::from(x.throttle & bit != 0),
        );
    }
}

/// Nanoseconds as seconds.
fn ns_to_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// One scrape's exposition in `format`; the per-client families only with `client_series`.
pub fn encode(
    samples: &[Sample],
    stats: &SelfStats,
    format: Format,
    client_series: bool,
) -> String {
    let reg = registry(samples, stats, client_series);
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
