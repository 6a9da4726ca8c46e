//! The families against fake readings: help, type and values of every series, OpenMetrics'
//! units and EOF, the operators' guide's table, and the format negotiation.

use super::*;
use crate::collect::{Failure, Reading};
use davinci_uapi::{ClientUsage, DeviceCounters, Errno, Features};

fn client(id: u32, mem: u64, container: &str, comm: &str) -> ClientUsage {
    let mut c = ClientUsage {
        client_id: id,
        pid: 100 + id,
        uid: 1000,
        memory_bytes: mem,
        tasks_submitted: 10 * u64::from(id),
        tasks_completed: 9 * u64::from(id),
        tasks_queued: u64::from(id),
        contexts: 1,
        streams: 2,
        events: 3,
        allocations: 4,
        ..Default::default()
    };
    c.container[..container.len()].copy_from_slice(container.as_bytes());
    c.comm[..comm.len()].copy_from_slice(comm.as_bytes());
    c.busy_ns = 1_500_000_000 * u64::from(id);
    c
}

/// Names as the driver says them (no /proc).
struct Comm;

impl crate::state::Names for Comm {
    fn name(&self, _pid: u32, comm: &str) -> String {
        comm.to_string()
    }
}

/// `samples` as a scrape sees them: derived by a fresh history.
fn derive(mut s: Vec<Sample>) -> Vec<Sample> {
    crate::state::History::default().update(&mut s, &Comm);
    s
}

fn samples(counters: bool) -> Vec<Sample> {
    let mut r = Reading::default();
    r.info.abi_major = 1;
    r.info.abi_minor = 4;
    r.info.features =
        Features::LIST_CLIENTS | Features::COUNTERS | Features::IDENTITY | Features::SENSORS;
    r.info.memory_size = 1 << 30;
    r.info.memory_used = 3 << 20;
    r.info.client_memory_limit = 1 << 29;
    r.info.share_mode = 1;
    r.info.clients = 2;
    r.info.max_clients = 64;
    r.clients = Some(vec![
        client(1, 1 << 20, "", "python3"),
        client(2, 2 << 20, "abc123", "trainer \"x\""),
    ]);
    if counters {
        r.counters = Some(DeviceCounters {
            tasks_submitted: 500,
            tasks_completed: 499,
            stream_errors: 1,
            doorbells: 42,
            clients_opened: 7,
            contexts: 2,
            streams: 4,
            events: 6,
            allocations: 8,
            busy_ns: 2_500_000_000,
            now_ns: 10_000_000_000,
            engines: 4,
            health: davinci_uapi::HEALTH_WARNING,
            hung_streams: 1,
            ..Default::default()
        });
        let mut id = davinci_uapi::DeviceIdentity {
            uuid: [0x5a; 16],
            numa_node: -1,
            ..Default::default()
        };
        id.model = davinci_uapi::DeviceIdentity::text_field("Mock NPU");
        id.driver_version = davinci_uapi::DeviceIdentity::text_field("davinci-mockd 0.1.0");
        id.chip_name = davinci_uapi::DeviceIdentity::text_field("mock0");
        id.bus_id = davinci_uapi::DeviceIdentity::text_field("0000:3b:00.0");
        r.identity = Some(id);
        r.sensors = Some(davinci_uapi::DeviceSensors {
            temperature_mc: 47_250,
            memory_temperature_mc: -1_500,
            power_mw: 71_125,
            power_limit_mw: 310_000,
            voltage_mv: 850,
            throttle: davinci_uapi::THROTTLE_POWER,
            slowdown_temperature_mc: 95_000,
            shutdown_temperature_mc: 105_000,
            energy_mj: 1_234_567,
            ..Default::default()
        });
        // The log: 0..3 dropped, then a reset and two hung tasks.
        let ev = |seq, code| davinci_uapi::DeviceEvent {
            seq,
            code,
            time_ns: seq,
            ..Default::default()
        };
        r.events = Some(davinci_shim::EventBatch {
            events: vec![ev(3, 3), ev(4, 2), ev(5, 2)],
            cursor: 6,
            lost: 3,
            now_ns: 10,
        });
    } else {
        // A 1.2 driver: no GET_COUNTERS, no GET_IDENTITY.
        r.info.abi_minor = 2;
        r.info.features = Features::LIST_CLIENTS;
    }
    vec![
        Sample {
            device: "0".into(),
            path: "mock:/run/davinci/davinci0.sock".into(),
            pods: Vec::new(),
            identity: None,
            outcome: Ok(r),
        },
        Sample {
            device: "1".into(),
            path: "mock:/run/davinci/davinci1.sock".into(),
            pods: Vec::new(),
            identity: None,
            outcome: Err(Failure {
                errno: Some(Errno::ENODEV),
                message: "gone".into(),
            }),
        },
    ]
}

/// Device 0's labels in [`samples`]`(true)`: its index, UUID and model.
const D0: &str = r#"device="0",uuid="5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a",model="Mock NPU""#;

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[test]
fn every_family_has_help_and_type_and_the_values_read() {
    let stats = SelfStats {
        duration: Duration::from_millis(1500),
        scrapes: 3,
        rejected: 0,
        evicted: 0,
    };
    let text = encode(&derive(samples(true)), &stats, Format::Prometheus, true);
    let l = lines(&text);
    for f in FAMILIES {
        let kind = match f.kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        };
        assert!(
            l.contains(&format!("# TYPE {} {kind}", f.name).as_str()),
            "{}: {text}",
            f.name
        );
        assert!(
            l.contains(&format!("# HELP {} {}.", f.name, f.help).as_str()),
            "{}: {text}",
            f.name
        );
    }
    let d0 = D0;
    let d1 = r#"device="1""#;
    for want in [
        format!("davinci_device_up{{{d0}}} 1"),
        format!("davinci_device_up{{{d1}}} 0"),
        format!("davinci_device_error_info{{{d1},errno=\"ENODEV\"}} 1"),
        format!("davinci_device_share_mode{{{d0},mode=\"shared\"}} 1"),
        format!("davinci_device_share_mode{{{d0},mode=\"exclusive\"}} 0"),
        format!("davinci_device_memory_used_bytes{{{d0}}} 3145728"),
        format!("davinci_device_memory_total_bytes{{{d0}}} 1073741824"),
        format!("davinci_device_client_memory_limit_bytes{{{d0}}} 536870912"),
        format!("davinci_device_tasks_queued{{{d0}}} 3"),
        format!("davinci_device_tasks_submitted_total{{{d0}}} 500"),
        format!("davinci_device_doorbells_total{{{d0}}} 42"),
        format!("davinci_device_stream_errors_total{{{d0}}} 1"),
        format!("davinci_device_health{{{d0}}} 1"),
        format!("davinci_device_hung_streams{{{d0}}} 1"),
        format!("davinci_device_busy_seconds_total{{{d0}}} 2.5"),
        format!("davinci_device_engines{{{d0}}} 4"),
        format!(
            "davinci_device_info{{{d0},path=\"mock:/run/davinci/davinci0.sock\",\
             driver_version=\"davinci-mockd 0.1.0\",numa_node=\"-1\",chip_name=\"mock0\",\
             bus_id=\"0000:3b:00.0\",abi_version=\"1.4\",features=\"{:#x}\"}} 1",
            (Features::LIST_CLIENTS | Features::COUNTERS | Features::IDENTITY | Features::SENSORS)
                .bits()
        ),
        format!(
            "davinci_client_memory_bytes{{{d0},container_id=\"abc123\",\
             process=\"trainer \\\"x\\\"\"}} 2097152"
        ),
        format!(
            "davinci_client_tasks_completed_total{{{d0},container_id=\"\",process=\"python3\"}} 9"
        ),
        format!(
            "davinci_client_busy_seconds_total{{{d0},container_id=\"\",process=\"python3\"}} 1.5"
        ),
        format!("davinci_client_processes{{{d0},container_id=\"\",process=\"python3\"}} 1"),
        format!(
            "davinci_client_info{{{d0},container_id=\"abc123\",process=\"trainer \\\"x\\\"\",\
             client_id=\"2\",pid=\"102\",uid=\"1000\"}} 1"
        ),
        format!("davinci_device_log_events_total{{{d0},code=\"2\",name=\"hung_task\"}} 2"),
        format!("davinci_device_log_events_total{{{d0},code=\"3\",name=\"device_reset\"}} 1"),
        format!("davinci_device_log_events_total{{{d0},code=\"6\",name=\"import_revoked\"}} 0"),
        format!("davinci_device_log_events_lost_total{{{d0}}} 3"),
        "davinci_exporter_scrape_duration_seconds 1.5".to_string(),
        "davinci_exporter_scrapes_total 3".to_string(),
        "davinci_exporter_devices 2".to_string(),
    ] {
        assert!(l.contains(&want.as_str()), "{want}\n{text}");
    }
    // The path is on the info series only.
    assert_eq!(
        l.iter().filter(|x| x.contains("path=")).count(),
        1,
        "{text}"
    );
    // One scrape is not an interval: no utilization yet.
    assert!(
        !text.contains("davinci_device_utilization_ratio{"),
        "{text}"
    );
    // A down device has no other series.
    assert_eq!(l.iter().filter(|x| x.contains(d1)).count(), 2, "{text}");
}

#[test]
fn a_driver_without_counters_has_no_device_wide_task_series() {
    let text = encode(
        &derive(samples(false)),
        &SelfStats::default(),
        Format::Prometheus,
        true,
    );
    for name in [
        "davinci_device_tasks_submitted_total{",
        "davinci_device_doorbells_total{",
        "davinci_device_stream_errors_total{",
        "davinci_device_contexts{",
        "davinci_device_busy_seconds_total{",
        "davinci_device_health{",
        "davinci_client_busy_seconds_total{",
        "uuid=",
    ] {
        assert!(!text.contains(name), "{name}: {text}");
    }
    assert!(
        text.contains("davinci_client_tasks_submitted_total{"),
        "{text}"
    );
}

#[test]
fn openmetrics_has_units_and_eof() {
    let text = encode(
        &derive(samples(true)),
        &SelfStats::default(),
        Format::Openmetrics,
        true,
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains("# UNIT davinci_device_memory_used_bytes bytes\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE davinci_device_tasks_submitted counter\n"),
        "{text}"
    );
    assert!(
        text.contains("davinci_device_tasks_submitted_total{device=\"0\""),
        "{text}"
    );
}

#[test]
fn the_guide_table_lists_every_family_with_its_type() {
    // The operators' guide (docs/operators.md is generated from this template) documents
    // every family in its exporter section.
    let guide = include_str!("../../../../docs/operators.md.in");
    let start = guide
        .find("### `davinci-exporter`")
        .expect("docs/operators.md.in has an exporter section");
    let section = &guide[start..];
    let section = &section[..section[4..].find("\n### ").map_or(section.len(), |e| e + 4)];
    for f in FAMILIES {
        let kind = match f.kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        };
        let row = format!("| `{}` | {kind} |", f.name);
        assert!(
            section.contains(&row),
            "docs/operators.md.in's exporter section lacks {row}"
        );
    }
    let rows = section
        .lines()
        .filter(|l| l.starts_with("| `davinci_"))
        .count();
    assert_eq!(
        rows,
        FAMILIES.len(),
        "docs/operators.md.in's exporter section lists families that are not exported"
    );
}

#[test]
fn negotiation() {
    use Format::*;
    assert_eq!(Format::negotiate(None), Prometheus);
    assert_eq!(Format::negotiate(Some("text/plain")), Prometheus);
    assert_eq!(Format::negotiate(Some("*/*")), Prometheus);
    // What Prometheus 2.x sends.
    let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert_eq!(Format::negotiate(Some(prom)), Openmetrics);
    assert_eq!(
        Format::negotiate(Some("application/openmetrics-text; version=1.0.0")),
        Openmetrics
    );
    assert_eq!(
        Format::negotiate(Some("application/openmetrics-text;q=0.2, text/plain")),
        Prometheus
    );
    assert_eq!(
        Format::negotiate(Some("application/openmetrics-text;q=0")),
        Prometheus
    );
    assert_eq!(Format::negotiate(Some("application/json")), Prometheus);
}

#[test]
fn per_client_series_are_served_only_when_asked_for() {
    let s = derive(samples(true));
    let without = encode(&s, &SelfStats::default(), Format::Prometheus, false);
    let with = encode(&s, &SelfStats::default(), Format::Prometheus, true);
    for text in [&without, &with] {
        assert!(
            text.contains(&format!("davinci_device_up{{{D0}}} 1")),
            "{text}"
        );
        assert!(
            text.contains(&format!("davinci_device_clients{{{D0}}} 2")),
            "{text}"
        );
    }
    for name in [
        "davinci_client_",
        ",pid=",
        ",uid=",
        "container_id=",
        "process=",
        "python3",
    ] {
        assert!(
            !without.contains(name),
            "{name} served without --client-series:\n{without}"
        );
        assert!(with.contains(name), "{name}:\n{with}");
    }
    // Every family either way is in the guide's table, the per-client ones marked.
    let client: Vec<_> = FAMILIES.iter().filter(|f| is_client_family(f)).collect();
    assert_eq!(client.len(), 11);
    assert!(client.iter().all(|f| f.labels.contains("container_id")));
}

#[test]
fn a_tenants_control_characters_are_escaped_in_label_values() {
    let mut s = samples(false);
    if let Ok(r) = &mut s[0].outcome {
        r.clients = Some(vec![client(3, 1 << 20, "c\x1b[2J", "evil\x1b[2J\n")]);
    }
    let text = encode(&derive(s), &SelfStats::default(), Format::Prometheus, true);
    assert!(!text.contains('\x1b'), "a raw ESC reached the exposition");
    assert!(text.contains(r#"process="evil\\u{1b}[2J\\n""#), "{text}");
    assert!(text.contains(r#"container_id="c\\u{1b}[2J""#), "{text}");
}

#[test]
fn bidi_controls_and_names_that_are_not_utf8_are_escaped_in_label_values() {
    let mut s = samples(false);
    let mut raw = client(4, 1 << 20, "", "");
    raw.comm[..5].copy_from_slice(b"\xffroot");
    raw.container[..3].copy_from_slice(b"c\xfe1");
    if let Ok(r) = &mut s[0].outcome {
        r.clients = Some(vec![
            client(3, 1 << 20, "c\u{2066}", "evil\u{202e}gpj.exe"),
            raw,
        ]);
    }
    let text = encode(&derive(s), &SelfStats::default(), Format::Prometheus, true);
    for c in ['\u{202e}', '\u{2066}', '\u{fffd}'] {
        assert!(!text.contains(c), "{c:?} reached the exposition:\n{text}");
    }
    // The text format escapes the backslash of each escape.
    for (family, labels) in [
        (
            "davinci_client_info",
            r#"container_id="c\\u{2066}",process="evil\\u{202e}gpj.exe""#,
        ),
        (
            "davinci_client_info",
            r#"container_id="c\\xfe1",process="\\xffroot""#,
        ),
        (
            "davinci_client_memory_bytes",
            r#"container_id="c\\xfe1",process="\\xffroot""#,
        ),
    ] {
        assert!(
            text.contains(&format!("{family}{{device=\"0\",{labels}")),
            "{labels}\n{text}"
        );
    }
}

#[test]
fn pods_label_a_device_held_by_one_container_and_are_listed_for_a_shared_one() {
    use crate::pods::PodRef;
    let held = |pod: &str, c: &str| PodRef {
        pod: pod.into(),
        namespace: "ml".into(),
        container: c.into(),
    };
    let mut s = samples(true);
    s[0].pods = vec![held("train-0", "trainer")];
    s[1].pods = vec![held("a", "x"), held("b", "y")];
    let text = encode(&derive(s), &SelfStats::default(), Format::Prometheus, true);
    let one = format!(r#"{D0},pod="train-0",namespace="ml",container="trainer""#);
    for want in [
        format!("davinci_device_up{{{one}}} 1"),
        format!("davinci_device_memory_used_bytes{{{one}}} 3145728"),
        format!("davinci_device_temperature_celsius{{{one}}} 47.25"),
        format!("davinci_device_pod_info{{{one}}} 1"),
        format!("davinci_client_processes{{{one},container_id=\"\",process=\"python3\"}} 1"),
        // Shared by two containers: no pod labels on its series, both on the info.
        "davinci_device_up{device=\"1\"} 0".to_string(),
        r#"davinci_device_pod_info{device="1",pod="a",namespace="ml",container="x"} 1"#.into(),
        r#"davinci_device_pod_info{device="1",pod="b",namespace="ml",container="y"} 1"#.into(),
    ] {
        assert!(text.lines().any(|l| l == want), "{want}\n{text}");
    }
}

#[test]
fn sensors_are_in_base_units_and_absent_without_the_feature() {
    let text = encode(
        &derive(samples(true)),
        &SelfStats::default(),
        Format::Prometheus,
        false,
    );
    let l = lines(&text);
    for want in [
        format!("davinci_device_temperature_celsius{{{D0}}} 47.25"),
        format!("davinci_device_memory_temperature_celsius{{{D0}}} -1.5"),
        format!("davinci_device_slowdown_temperature_celsius{{{D0}}} 95.0"),
        format!("davinci_device_shutdown_temperature_celsius{{{D0}}} 105.0"),
        format!("davinci_device_power_watts{{{D0}}} 71.125"),
        format!("davinci_device_power_limit_watts{{{D0}}} 310.0"),
        format!("davinci_device_voltage_volts{{{D0}}} 0.85"),
        format!("davinci_device_energy_joules_total{{{D0}}} 1234.567"),
        format!("davinci_device_throttled{{{D0},reason=\"thermal\"}} 0"),
        format!("davinci_device_throttled{{{D0},reason=\"power\"}} 1"),
    ] {
        assert!(l.contains(&want.as_str()), "{want}\n{text}");
    }
    // Every series of device 0 says which device it is of by UUID and model too.
    for line in l.iter().filter(|x| x.contains("device=\"0\"")) {
        assert!(line.contains(D0), "{line}");
    }
    // A device whose driver has no SENSORS: no sensor series at all (not zeros).
    let mut s = samples(true);
    if let Ok(r) = &mut s[0].outcome {
        r.info.features.remove(Features::SENSORS);
        r.sensors = None;
    }
    let text = encode(&derive(s), &SelfStats::default(), Format::Prometheus, false);
    for f in FAMILIES.iter().filter(|f| {
        ["celsius", "watts", "volts", "joules", "throttled"]
            .iter()
            .any(|u| f.name.contains(u))
    }) {
        assert!(
            !text.contains(&format!("{}{{", f.name)),
            "{}\n{text}",
            f.name
        );
    }
    assert!(
        text.contains(&format!("davinci_device_up{{{D0}}} 1")),
        "{text}"
    );
    // OpenMetrics names the units.
    let om = encode(
        &derive(samples(true)),
        &SelfStats::default(),
        Format::Openmetrics,
        false,
    );
    for unit in [
        "# UNIT davinci_device_temperature_celsius celsius",
        "# UNIT davinci_device_power_watts watts",
        "# UNIT davinci_device_voltage_volts volts",
        "# UNIT davinci_device_energy_joules joules",
        "# TYPE davinci_device_energy_joules counter",
    ] {
        assert!(om.contains(unit), "{unit}\n{om}");
    }
}
