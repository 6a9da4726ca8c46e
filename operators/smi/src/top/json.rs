//! `top --once --json`: one frame as a `davinci-smi/v1` document (command `top`): the devices
//! with their utilization, memory and sensors, and the processes with their figures, in the
//! frame's order. Fields are only ever added.
#![forbid(unsafe_code)]

use davinci_ops::discover::Ignored;
use serde::Serialize;

use super::sample::{DevRow, Frame, ProcRow};
use crate::commands::client_json;
use crate::output::{printable, ClientJson, ErrorJson, MemoryJson, SCHEMA};

/// The document.
#[derive(Serialize)]
struct TopDoc {
    schema: &'static str,
    command: &'static str,
    exit_code: i32,
    /// When the second sample was taken (RFC 3339, UTC).
    timestamp: String,
    /// Seconds between the two samples the rates are over.
    interval_s: Option<f64>,
    /// The processes' order.
    sort: SortJson,
    devices: Vec<DeviceJson>,
    processes: Vec<ProcessJson>,
    /// Sockets discovery left out as untrusted (only when there are).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ignored: Vec<serde_json::Value>,
}

#[derive(Serialize)]
struct SortJson {
    column: &'static str,
    descending: bool,
}

/// Sensors (GET_SENSORS, ABI 1.5).
#[derive(Serialize)]
struct SensorsJson {
    temperature_c: f64,
    memory_temperature_c: f64,
    power_w: f64,
    power_limit_w: f64,
    throttle: u32,
}

/// One device.
#[derive(Serialize)]
struct DeviceJson {
    id: Option<u32>,
    path: String,
    /// `"ok"` or `"unreachable"`.
    health: &'static str,
    error: Option<ErrorJson>,
    /// The model name (GET_IDENTITY; null before ABI 1.4).
    name: Option<String>,
    /// npu-smi's health word (`OK`, `Warning`, ...; GET_COUNTERS).
    status: Option<String>,
    share_mode: Option<&'static str>,
    /// Engine time used over the interval, percent (null: not reported).
    utilization_percent: Option<u32>,
    memory: Option<MemoryJson>,
    /// Client opens attached (every user's).
    clients: Option<u32>,
    /// Streams that entered the error state since the device started.
    stream_errors: Option<u64>,
    /// Null when the device reports none.
    sensors: Option<SensorsJson>,
}

/// One process (a client open): LIST_CLIENTS' figures and the rates.
#[derive(Serialize)]
struct ProcessJson {
    device_id: Option<u32>,
    #[serde(flatten)]
    client: ClientJson,
    /// The user name of `uid` (the uid when it has none).
    user: String,
    /// Its share of the device's engine time over the interval, percent.
    utilization_percent: Option<u32>,
    /// Tasks completed per second over the interval (null: it opened since the first sample).
    tasks_per_second: Option<f64>,
    /// Times the process's streams stopped in the error state (LIST_CLIENTS'
    /// `stream_errors`, ABI 1.5; 0 from an older driver).
    errors: Option<u64>,
}

fn device_json(d: &DevRow) -> DeviceJson {
    let mut j = DeviceJson {
        id: d.id,
        path: printable(&d.path),
        health: "unreachable",
        error: None,
        name: None,
        status: None,
        share_mode: None,
        utilization_percent: None,
        memory: None,
        clients: None,
        stream_errors: None,
        sensors: None,
    };
    match &d.state {
        Err(e) => j.error = Some(e.json()),
        Ok(g) => {
            j.health = "ok";
            j.name = g.extras.name.as_deref().map(printable);
            j.status = g.extras.health.clone();
            j.share_mode = g.share_mode;
            j.utilization_percent = g.util;
            j.memory = Some(MemoryJson {
                total_bytes: g.info.memory_size,
                used_bytes: g.info.memory_used,
                client_limit_bytes: g.info.client_memory_limit,
            });
            j.clients = Some(g.info.clients);
            j.stream_errors = g.stream_errors;
            j.sensors = g.extras.sensors.map(|s| SensorsJson {
                temperature_c: f64::from(s.temperature_mc) / 1000.0,
                memory_temperature_c: f64::from(s.memory_temperature_mc) / 1000.0,
                power_w: f64::from(s.power_mw) / 1000.0,
                power_limit_w: f64::from(s.power_limit_mw) / 1000.0,
                throttle: s.throttle,
            });
        }
    }
    j
}

fn process_json(p: &ProcRow) -> ProcessJson {
    ProcessJson {
        device_id: p.dev,
        client: client_json(&p.client),
        user: p.user.clone(),
        utilization_percent: p.util,
        tasks_per_second: p.tasks_per_s.map(|r| (r * 1000.0).round() / 1000.0),
        errors: Some(p.client.stream_errors),
    }
}

/// The document of `f`, pretty, with a trailing newline.
pub(crate) fn render(f: &Frame, ignored: &[Ignored]) -> String {
    let d = TopDoc {
        schema: SCHEMA,
        command: "top",
        exit_code: f.exit_code(),
        timestamp: f.timestamp.clone(),
        interval_s: f.interval_s.map(|s| (s * 1000.0).round() / 1000.0),
        sort: SortJson {
            column: f.sort.key.name(),
            descending: f.sort.descending(),
        },
        devices: f.devices.iter().map(device_json).collect(),
        processes: f.procs.iter().map(process_json).collect(),
        ignored: ignored
            .iter()
            .map(|i| serde_json::json!({"path": printable(&i.path), "why": printable(&i.why)}))
            .collect(),
    };
    match serde_json::to_string_pretty(&d) {
        Ok(s) => s + "\n",
        Err(e) => format!(
            "{{\"schema\":\"{SCHEMA}\",\"command\":\"top\",\"exit_code\":1,\"error\":{{\"errno\":null,\"code\":null,\"message\":\"cannot render JSON: {e}\"}}}}\n"
        ),
    }
}
