//! What a scrape shows: the values are what this test's own client did (memory, tasks, a
//! stream error, work left queued by a parked client), each family with its type and help;
//! a device that cannot be read is `davinci_device_up 0` in a scrape that still succeeds.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_shim::Control;
use davinci_tests::mockd::{Mockd, TestClient};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{comm_of, get, own_client, own_name, own_pid, run, Exporter, Exposition, MIB, NOPS, T};

#[test]
fn a_scrape_shows_what_the_clients_did_with_types_and_help() {
    let d = Mockd::start(&[
        "--devices",
        "2",
        "--memory",
        "64M",
        "--tenant-memory-limit",
        "32M",
    ])
    .unwrap();
    let me = own_client(&d.path(0));
    let parked = TestClient::start(&d.path(1), &["park", "--queued", "5"]);
    let ready = parked.expect("ready");
    let dir = d.dir().display().to_string();
    // --cache 0: each scrape reads the devices (this test changes them between scrapes).
    let ex = Exporter::start(&["--socket-dir", &dir, "--client-series", "--cache", "0"]);

    // The parked client's queue: its EVENT_WAIT is taken (and blocks), 5 FILLs wait.
    let d1 = [("device", "1")];
    let until = Instant::now() + T;
    let e = loop {
        let e = ex.scrape();
        if e.value("davinci_device_tasks_queued", &d1) == 5.0 || Instant::now() > until {
            break e;
        }
        std::thread::sleep(Duration::from_millis(50));
    };

    // Every family: HELP, a known TYPE, counters (and only they) named *_total.
    assert!(!e.types.is_empty());
    for (name, ty) in &e.types {
        assert!(
            e.helps.get(name).is_some_and(|h| h.len() > 10),
            "{name} HELP"
        );
        assert!(name.starts_with("davinci_"), "{name}");
        match ty.as_str() {
            "counter" => assert!(name.ends_with("_total"), "{name}"),
            "gauge" => assert!(!name.ends_with("_total"), "{name}"),
            other => panic!("{name}: type {other}"),
        }
    }
    for (name, ty) in [
        ("davinci_device_up", "gauge"),
        ("davinci_device_memory_used_bytes", "gauge"),
        ("davinci_device_memory_total_bytes", "gauge"),
        ("davinci_device_client_memory_limit_bytes", "gauge"),
        ("davinci_device_clients", "gauge"),
        ("davinci_device_share_mode", "gauge"),
        ("davinci_device_tasks_queued", "gauge"),
        ("davinci_device_tasks_submitted_total", "counter"),
        ("davinci_device_tasks_completed_total", "counter"),
        ("davinci_device_doorbells_total", "counter"),
        ("davinci_device_stream_errors_total", "counter"),
        ("davinci_client_memory_bytes", "gauge"),
        ("davinci_client_tasks_submitted_total", "counter"),
        ("davinci_client_tasks_completed_total", "counter"),
        ("davinci_client_tasks_queued", "gauge"),
        ("davinci_client_contexts", "gauge"),
        ("davinci_client_streams", "gauge"),
        ("davinci_exporter_scrape_duration_seconds", "gauge"),
    ] {
        assert_eq!(e.types.get(name).map(String::as_str), Some(ty), "{name}");
    }

    // Device 0: this process's work.
    let p0 = d.path(0);
    let d0 = [("device", "0")];
    let v = |name: &str| e.value(name, &d0);
    assert_eq!(v("davinci_device_up"), 1.0);
    assert_eq!(v("davinci_device_memory_used_bytes"), me.memory as f64);
    assert_eq!(v("davinci_device_memory_total_bytes"), (64 * MIB) as f64);
    assert_eq!(
        v("davinci_device_client_memory_limit_bytes"),
        (32 * MIB) as f64
    );
    assert_eq!(v("davinci_device_clients"), 1.0);
    assert_eq!(v("davinci_device_tasks_submitted_total"), (NOPS + 1) as f64);
    assert_eq!(v("davinci_device_tasks_completed_total"), (NOPS + 1) as f64);
    assert_eq!(v("davinci_device_stream_errors_total"), 1.0);
    assert_eq!(v("davinci_device_clients_opened_total"), 1.0);
    assert_eq!(v("davinci_device_streams"), 2.0);
    assert_eq!(v("davinci_device_allocations"), 2.0);
    assert_eq!(v("davinci_device_tasks_queued"), 0.0);
    // However many doorbells woke the device (timing), the exporter says what the driver says.
    let counted = Control::open(&p0).unwrap().counters().unwrap().doorbells;
    assert_eq!(v("davinci_device_doorbells_total"), counted as f64);
    let mode = |m: &str| e.value("davinci_device_share_mode", &[d0[0], ("mode", m)]);
    assert_eq!((mode("exclusive"), mode("shared")), (1.0, 0.0));
    assert_eq!(e.find("davinci_device_error_info", &[]).len(), 0);
    // The path only on the info series, with what GET_IDENTITY says.
    let id = Control::open(&p0).unwrap().identity().unwrap();
    let uuid = id.uuid_string().to_string();
    let abi = format!(
        "{}.{}",
        davinci_uapi::ABI_VERSION_MAJOR,
        davinci_uapi::ABI_VERSION_MINOR
    );
    let info = [
        ("device", "0"),
        ("path", p0.as_str()),
        ("uuid", uuid.as_str()),
        ("model", id.model()),
        ("driver_version", id.driver_version()),
        ("abi_version", abi.as_str()),
    ];
    assert_eq!(e.value("davinci_device_info", &info), 1.0);
    // Every series of the device says which it is by UUID and model too.
    for s in e
        .series
        .iter()
        .filter(|s| s.labels.get("device").map(String::as_str) == Some("0"))
    {
        assert_eq!(s.labels.get("uuid"), Some(&uuid), "{s:?}");
        assert_eq!(
            s.labels.get("model").map(String::as_str),
            Some(id.model()),
            "{s:?}"
        );
    }
    // Its sensors (GET_SENSORS), in base units: the fixed ones as the driver says them.
    let x = Control::open(&p0).unwrap().sensors().unwrap();
    assert_eq!(
        v("davinci_device_power_limit_watts"),
        f64::from(x.power_limit_mw) / 1e3
    );
    assert_eq!(
        v("davinci_device_slowdown_temperature_celsius"),
        f64::from(x.slowdown_temperature_mc) / 1e3
    );
    assert_eq!(
        v("davinci_device_shutdown_temperature_celsius"),
        f64::from(x.shutdown_temperature_mc) / 1e3
    );
    let temp = v("davinci_device_temperature_celsius");
    assert!(
        temp > 0.0 && temp < f64::from(x.shutdown_temperature_mc) / 1e3,
        "{temp}"
    );
    assert!(v("davinci_device_voltage_volts") > 0.0);
    assert!(v("davinci_device_energy_joules_total") <= x.energy_mj as f64 / 1e3);
    for reason in ["thermal", "power"] {
        let t = e.value("davinci_device_throttled", &[d0[0], ("reason", reason)]);
        assert!(t == 0.0 || t == 1.0, "{reason}: {t}");
    }
    assert_eq!(
        e.series
            .iter()
            .filter(|s| s.labels.contains_key("path"))
            .count(),
        2,
        "path is on the 2 info series only:\n{}",
        e.text
    );
    // Busy time, health, engines.
    let k = Control::open(&p0).unwrap().counters().unwrap();
    let busy = v("davinci_device_busy_seconds_total");
    assert!(busy > 0.0 && busy <= k.busy_ns as f64 / 1e9, "{busy} {k:?}");
    assert_eq!(v("davinci_device_engines"), f64::from(k.engines));
    assert_eq!(v("davinci_device_health"), 0.0);
    assert_eq!(v("davinci_device_hung_streams"), 0.0);

    // This process as a client: labels from LIST_CLIENTS and /proc, values from the work.
    let ctl = Control::open(&d.path(0)).unwrap();
    let listed = ctl.clients().unwrap();
    assert_eq!(listed.len(), 1);
    let pid = own_pid();
    let name = own_name();
    assert!(name.len() > 15 && name.starts_with(&comm_of(std::process::id())));
    let client_id = listed[0].client_id.to_string();
    let container = listed[0].container_id().unwrap_or("").to_string();
    let mine = [
        ("device", "0"),
        ("process", name.as_str()),
        ("container_id", container.as_str()),
    ];
    let c = |name: &str| e.value(name, &mine);
    assert_eq!(c("davinci_client_processes"), 1.0);
    let client_busy = c("davinci_client_busy_seconds_total");
    assert!(
        client_busy > 0.0 && client_busy <= busy,
        "{client_busy} {busy}"
    );
    // Its pid and client id are on the info series only.
    let info = [
        ("device", "0"),
        ("process", name.as_str()),
        ("pid", pid.as_str()),
        ("client_id", client_id.as_str()),
    ];
    assert_eq!(e.value("davinci_client_info", &info), 1.0);
    assert_eq!(
        e.find("davinci_client_memory_bytes", &[("pid", &pid)])
            .len(),
        0
    );
    assert_eq!(c("davinci_client_memory_bytes"), me.memory as f64);
    assert_eq!(c("davinci_client_tasks_submitted_total"), (NOPS + 1) as f64);
    assert_eq!(c("davinci_client_tasks_completed_total"), (NOPS + 1) as f64);
    assert_eq!(c("davinci_client_tasks_queued"), 0.0);
    assert_eq!(c("davinci_client_contexts"), 1.0);
    assert_eq!(c("davinci_client_streams"), 2.0);
    assert_eq!(c("davinci_client_allocations"), 2.0);

    // Device 1: the parked client, its queue and its full process name (the kernel's comm
    // is davinci-testcli).
    let theirs = [("device", "1"), ("process", "davinci-testclient")];
    assert_eq!(
        e.value("davinci_device_tasks_queued", &d1),
        5.0,
        "{}",
        e.text
    );
    assert_eq!(e.value("davinci_client_tasks_queued", &theirs), 5.0);
    assert_eq!(
        e.value("davinci_client_memory_bytes", &theirs),
        ready["memory_bytes"].as_f64().unwrap()
    );
    assert_eq!(e.value("davinci_device_clients", &d1), 1.0);
    assert_eq!(e.value("davinci_device_up", &d1), 1.0);
    assert_eq!(e.find("davinci_client_memory_bytes", &[]).len(), 2);

    // The exporter itself.
    assert_eq!(e.value("davinci_exporter_devices", &[]), 2.0);
    let secs = e.value("davinci_exporter_scrape_duration_seconds", &[]);
    assert!(secs > 0.0 && secs < 5.0, "{secs}");
    let n = e.value("davinci_exporter_scrapes_total", &[]);
    let again = ex.scrape();
    assert_eq!(again.value("davinci_exporter_scrapes_total", &[]), n + 1.0);
    // From the second scrape on, utilization between the two.
    let u = again.value("davinci_device_utilization_ratio", &d0);
    assert!((0.0..=1.0).contains(&u), "{u}");

    // The parked client restarts (a new pid and client id): the same series, and its
    // counter does not drop back.
    let before = again.value("davinci_client_tasks_submitted_total", &theirs);
    assert!(before >= 1.0, "{before}");
    assert_eq!(parked.release(), 0);
    let parked = TestClient::start(&d.path(1), &["park", "--queued", "5"]);
    parked.expect("ready");
    let until = Instant::now() + T;
    let after_restart = loop {
        let e = ex.scrape();
        if e.value("davinci_device_tasks_queued", &d1) == 5.0 || Instant::now() > until {
            break e;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        after_restart.value("davinci_client_processes", &theirs),
        1.0
    );
    assert!(
        after_restart.value("davinci_client_tasks_submitted_total", &theirs) >= before + 1.0,
        "{}",
        after_restart.text
    );
    let new_pid = parked.pid.to_string();
    assert_eq!(
        after_restart.value(
            "davinci_client_info",
            &[("device", "1"), ("pid", new_pid.as_str())]
        ),
        1.0
    );

    // Work done between scrapes shows in the next one (every scrape reads afresh).
    drop(me);
    let after = ex.scrape();
    assert_eq!(after.value("davinci_device_memory_used_bytes", &d0), 0.0);
    assert_eq!(after.value("davinci_device_clients", &d0), 0.0);
    assert_eq!(
        after
            .find("davinci_client_memory_bytes", &[("device", "0")])
            .len(),
        0
    );
    assert_eq!(
        after.value("davinci_device_tasks_completed_total", &d0),
        (NOPS + 1) as f64,
        "device-wide counters outlive the client"
    );

    // OpenMetrics when asked for it.
    let om = get(
        ex.addr,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert_eq!(om.status, 200);
    assert_eq!(
        om.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let t = om.text();
    assert!(t.ends_with("# EOF\n"), "{t}");
    assert!(
        t.contains("# UNIT davinci_device_memory_used_bytes bytes\n"),
        "{t}"
    );
    assert!(
        t.contains("# TYPE davinci_device_tasks_submitted counter\n"),
        "{t}"
    );
    assert_eq!(parked.release(), 0);
}

#[test]
fn tenants_identities_are_served_only_with_client_series() {
    // Issue 41: the exporter, an admin, served every tenant's process names, pids, uids
    // and container ids to any local user who could reach 127.0.0.1.
    let d = Mockd::start(&["--devices", "1"]).unwrap();
    let _me = own_client(&d.path(0));
    let dir = d.dir().display().to_string();
    let (pid, name) = (own_pid(), own_name());
    let identity = ["pid", "uid", "client_id", "container_id", "process"];

    let plain = Exporter::start(&["--socket-dir", &dir]);
    let e = plain.scrape();
    assert_eq!(e.value("davinci_device_clients", &[("device", "0")]), 1.0);
    assert!(e.value("davinci_device_memory_used_bytes", &[("device", "0")]) > 0.0);
    for s in &e.series {
        assert!(!s.name.starts_with("davinci_client_"), "{s:?}");
        assert!(identity.iter().all(|l| !s.labels.contains_key(*l)), "{s:?}");
    }
    assert!(!e.text.contains(&name), "{}", e.text);

    let with = Exporter::start(&["--socket-dir", &dir, "--client-series"]);
    let e = with.scrape();
    let info = e.find("davinci_client_info", &[("pid", &pid)]);
    assert_eq!(info.len(), 1, "{}", e.text);
    assert_eq!(info[0].labels["process"], name);
    assert_eq!(
        e.value("davinci_client_processes", &[("process", &name)]),
        1.0
    );

    // --once prints them: its output goes to whoever ran it, with their own access.
    let (code, out, err) = run(&["--socket-dir", &dir, "--once"]);
    assert_eq!(code, 0, "{err}");
    let e = Exposition::parse(&out);
    assert_eq!(e.find("davinci_client_info", &[("pid", &pid)]).len(), 1);
}

#[test]
fn a_device_that_cannot_be_read_is_down_and_the_scrape_still_succeeds() {
    let mut d = Mockd::start(&["--devices", "1"]).unwrap();
    let missing = format!("mock:{}/davinci7.sock", d.dir().display());
    let p0 = d.path(0);

    // --once: one scrape on stdout; the missing device is down with its errno, logged.
    let (code, out, err) = run(&["--device", &p0, "--device", &missing, "--once"]);
    assert_eq!(code, 0, "{err}");
    let e = Exposition::parse(&out);
    assert_eq!(e.value("davinci_device_info", &[("path", &p0)]), 1.0);
    assert_eq!(e.value("davinci_device_up", &[("device", "0")]), 1.0);
    assert_eq!(e.value("davinci_device_up", &[("device", "7")]), 0.0);
    assert_eq!(
        e.value(
            "davinci_device_error_info",
            &[("device", "7"), ("errno", "ENODEV")]
        ),
        1.0
    );
    assert_eq!(e.find("davinci_device_memory_total_bytes", &[]).len(), 1);
    assert!(err.contains("device 7") && err.contains("is down"), "{err}");
    // --once --format openmetrics.
    let (code, out, _) = run(&["--device", &p0, "--once", "--format", "openmetrics"]);
    assert_eq!(code, 0);
    assert!(out.ends_with("# EOF\n"), "{out}");

    // A live exporter.
    let uuid0 = Control::open(&p0)
        .unwrap()
        .identity()
        .unwrap()
        .uuid_string()
        .to_string();
    let ex = Exporter::start(&["--device", &p0, "--device-timeout", "500ms", "--cache", "0"]);
    assert_eq!(
        ex.scrape().value("davinci_device_up", &[("device", "0")]),
        1.0
    );

    // The daemon hangs (SIGSTOP): the scrape does not; the device is down, timed out.
    let daemon = Pid::from_raw(d.pid() as i32);
    kill(daemon, Signal::SIGSTOP).unwrap();
    let t0 = Instant::now();
    let e = ex.scrape();
    let took = t0.elapsed();
    kill(daemon, Signal::SIGCONT).unwrap();
    assert!(took < Duration::from_secs(3), "{took:?}");
    // Down, it keeps the UUID and model its series had.
    assert_eq!(
        e.value("davinci_device_up", &[("device", "0"), ("uuid", &uuid0)]),
        0.0
    );
    assert_eq!(
        e.value(
            "davinci_device_error_info",
            &[("device", "0"), ("errno", "ETIMEDOUT"), ("uuid", &uuid0)]
        ),
        1.0
    );
    // It answers again: up again.
    let until = Instant::now() + T;
    while ex.scrape().value("davinci_device_up", &[("device", "0")]) != 1.0 {
        assert!(Instant::now() < until, "{}", ex.log());
        std::thread::sleep(Duration::from_millis(50));
    }

    // The daemon stops: the device goes down, scrapes go on.
    d.terminate();
    let e = ex.scrape();
    assert_eq!(e.value("davinci_device_up", &[("device", "0")]), 0.0);
    assert_eq!(
        e.value(
            "davinci_device_error_info",
            &[("device", "0"), ("errno", "ENODEV")]
        ),
        1.0
    );
    assert_eq!(e.find("davinci_device_clients", &[]).len(), 0);
    let until = Instant::now() + T;
    while !ex.log().contains("is down: open failed: ENODEV") {
        assert!(Instant::now() < until, "{}", ex.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}
