//! `davinci-exporter` as a real process against a real `davinci-mockd`: the values of a scrape
//! are what this test's own client did (memory, tasks, a stream error, work left queued by a
//! parked client), each family has its type and help, a device that cannot be read is
//! `davinci_device_up 0` in a scrape that still succeeds, bad and oversized requests get
//! proper answers, silent clients and too many connections are bounded, SIGTERM stops it;
//! and finally a real Prometheus scrapes it and answers a query with the same values.
#![forbid(unsafe_code)]

use davinci_tests::descs::SubmitDescs;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use davinci_shim::{Control, Device, TaskDesc};
use davinci_tests::mockd::{bin, Mockd, TestClient};
use davinci_uapi::DevAddr;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const T: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// The exporter process.

/// A running `davinci-exporter`; killed on drop.
struct Exporter {
    child: Option<Child>,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Exporter {
    /// Starts it with `args` on 127.0.0.1:0 and waits for the address it logs.
    fn start(args: &[&str]) -> Exporter {
        let mut child = Command::new(bin("testbin-davinci-exporter"))
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start davinci-exporter");
        let err = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = channel::<String>();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                eprintln!("[exporter] {line}");
                sink.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let addr = wait_for_address(&rx);
        Exporter {
            child: Some(child),
            addr,
            log,
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// SIGTERM; the exit status (at most 10 s).
    fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        let t0 = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                panic!("davinci-exporter did not stop within 10 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn scrape(&self) -> Exposition {
        let r = get(self.addr, "/metrics", None);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            r.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        Exposition::parse(&r.text())
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn wait_for_address(rx: &Receiver<String>) -> SocketAddr {
    let until = Instant::now() + T;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("davinci-exporter did not log its address");
        if let Some(rest) = line.strip_prefix("davinci-exporter: listening on http://") {
            let a = rest.strip_suffix("/metrics").expect("…/metrics");
            return a.parse().expect("an address");
        }
    }
}

/// `davinci-exporter ARGS` to its end: exit code, stdout, stderr.
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin("testbin-davinci-exporter"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run davinci-exporter");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// ---------------------------------------------------------------------------------------
// HTTP, by hand.

struct HttpResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpResponse {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `raw` and reads the response to the end of the connection.
fn exchange(addr: SocketAddr, raw: &[u8]) -> HttpResponse {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(raw).expect("send");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).expect("read the response");
    parse_response(&buf)
}

fn parse_response(buf: &[u8]) -> HttpResponse {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"), "{status_line}");
    let status = parts.next().unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let body = buf[end + 4..].to_vec();
    let r = HttpResponse {
        status,
        headers,
        body,
    };
    assert_eq!(r.header("connection"), Some("close"));
    r
}

fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> HttpResponse {
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    let raw = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}\r\n");
    let r = exchange(addr, raw.as_bytes());
    if r.status == 200 {
        let len: usize = r.header("content-length").unwrap().parse().unwrap();
        assert_eq!(len, r.body.len());
    }
    r
}

// ---------------------------------------------------------------------------------------
// The Prometheus text format, parsed.

#[derive(Debug, Clone)]
struct Series {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

#[derive(Debug, Default)]
struct Exposition {
    types: HashMap<String, String>,
    helps: HashMap<String, String>,
    series: Vec<Series>,
    text: String,
}

impl Exposition {
    fn parse(text: &str) -> Exposition {
        let mut e = Exposition {
            text: text.to_string(),
            ..Default::default()
        };
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, ty) = rest.split_once(' ').expect("TYPE name type");
                assert!(
                    e.types.insert(name.into(), ty.into()).is_none(),
                    "two TYPE lines for {name}"
                );
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect("HELP name text");
                e.helps.insert(name.into(), help.into());
            } else if line.starts_with('#') || line.is_empty() {
                continue;
            } else {
                e.series.push(parse_series(line));
            }
        }
        for s in &e.series {
            assert!(
                e.types.contains_key(&s.name),
                "{} has no TYPE:\n{text}",
                s.name
            );
        }
        e
    }

    /// The series of `name` whose labels include `want`.
    fn find(&self, name: &str, want: &[(&str, &str)]) -> Vec<&Series> {
        self.series
            .iter()
            .filter(|s| {
                s.name == name
                    && want
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The one value of `name` with labels `want`.
    fn value(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        let found = self.find(name, want);
        assert_eq!(found.len(), 1, "{name} {want:?}: {found:?}\n{}", self.text);
        found[0].value
    }
}

fn parse_series(line: &str) -> Series {
    let (name_and_labels, value) = line.rsplit_once(' ').expect("name value");
    let value: f64 = value.parse().unwrap_or_else(|_| panic!("value in {line}"));
    let (name, labels) = match name_and_labels.split_once('{') {
        None => (name_and_labels.to_string(), BTreeMap::new()),
        Some((name, rest)) => {
            let body = rest.strip_suffix('}').expect("labels end with }");
            (name.to_string(), parse_labels(body))
        }
    };
    Series {
        name,
        labels,
        value,
    }
}

fn parse_labels(body: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = body.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        if key.is_empty() {
            break;
        }
        assert_eq!(chars.next(), Some('"'), "label {key} value is quoted");
        let mut v = String::new();
        loop {
            match chars.next().expect("label value ends") {
                '\\' => match chars.next().expect("escape") {
                    'n' => v.push('\n'),
                    c => v.push(c),
                },
                '"' => break,
                c => v.push(c),
            }
        }
        assert!(out.insert(key.clone(), v).is_none(), "label {key} twice");
        match chars.next() {
            Some(',') => {}
            None => break,
            Some(c) => panic!("unexpected {c:?} after a label value"),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// The work the scrapes must show.

const MIB: usize = 1 << 20;
/// NOPs the test's own client runs.
const NOPS: u64 = 37;

/// This process as a client of `path`: 1 MiB + 256 KiB of memory, a context, a stream that
/// ran [`NOPS`] NOPs, another stream failed by a FILL of an address nobody owns.
struct OwnClient {
    _dev: Device,
    _mem: Vec<davinci_shim::DeviceBuffer>,
    _ctx: davinci_shim::Context,
    _streams: Vec<davinci_shim::Stream>,
    memory: u64,
}

fn own_client(path: &str) -> OwnClient {
    let dev = Device::open(path).expect("open the device");
    let mem = vec![
        dev.alloc(MIB).expect("alloc"),
        dev.alloc(MIB / 4).expect("alloc"),
    ];
    let ctx = dev.create_context().expect("context");
    let mut s = ctx.create_stream().expect("stream");
    // Idle first, so the device's worker goes to sleep and our doorbell must wake it.
    std::thread::sleep(Duration::from_millis(300));
    let nops: Vec<TaskDesc> = (0..NOPS).map(TaskDesc::nop).collect();
    s.submit_descs(&nops).expect("submit");
    s.synchronize(T).expect("synchronize");
    let mut bad = ctx.create_stream().expect("stream");
    bad.submit_desc(&TaskDesc::fill(99, DevAddr(0x10), 64, 0))
        .expect("submit");
    assert!(bad.synchronize(T).is_err(), "the FILL of 0x10 must fail");
    OwnClient {
        _dev: dev,
        _mem: mem,
        _ctx: ctx,
        _streams: vec![s, bad],
        memory: (MIB + MIB / 4) as u64,
    }
}

fn comm_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap()
        .trim_end()
        .to_string()
}

fn own_pid() -> String {
    std::process::id().to_string()
}

/// This process's full name: the basename of argv[0] (the test binary, `exporter-<hash>`,
/// longer than the kernel's 15-byte comm).
fn own_name() -> String {
    let argv0 = std::env::args().next().unwrap();
    argv0.rsplit('/').next().unwrap().to_string()
}

// ---------------------------------------------------------------------------------------

#[test]
fn a_scrape_shows_what_the_clients_did_with_types_and_help() {
    let d = Mockd::start(&[
        "--devices",
        "2",
        "--memory",
        "64M",
        "--client-memory-limit",
        "32M",
    ])
    .unwrap();
    let me = own_client(&d.path(0));
    let parked = TestClient::start(&d.path(1), &["park", "--queued", "5"]);
    let ready = parked.expect("ready");
    let dir = d.dir().display().to_string();
    let ex = Exporter::start(&["--socket-dir", &dir]);

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
    let ex = Exporter::start(&["--device", &p0, "--device-timeout", "500ms"]);
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
    assert_eq!(e.value("davinci_device_up", &[("device", "0")]), 0.0);
    assert_eq!(
        e.value(
            "davinci_device_error_info",
            &[("device", "0"), ("errno", "ETIMEDOUT")]
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

#[test]
fn bad_requests_get_proper_answers_and_peers_are_bounded() {
    let d = Mockd::start(&["--devices", "1"]).unwrap();
    let dir = d.dir().display().to_string();
    let ex = Exporter::start(&["--socket-dir", &dir, "--read-timeout", "1s"]);
    let a = ex.addr;

    let r = get(a, "/", None);
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    assert!(r.text().contains("href=\"/metrics\""), "{}", r.text());
    assert_eq!(get(a, "/metrics?x=1", None).status, 200);
    assert_eq!(get(a, "/nope", None).status, 404);
    assert_eq!(get(a, "/metrics/", None).status, 404);

    // HEAD: the length of the body, without it.
    let r = exchange(a, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
    assert!(
        r.header("content-length")
            .unwrap()
            .parse::<usize>()
            .unwrap()
            > 1000
    );

    let r = exchange(a, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
    assert_eq!(exchange(a, b"BLAH\r\n\r\n").status, 400);
    assert_eq!(exchange(a, b"GET / HTTP/2.0\r\n\r\n").status, 505);

    // Oversized: a 16 KiB path, 16 KiB of headers, too many headers.
    let long_path = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(16 << 10));
    assert_eq!(exchange(a, long_path.as_bytes()).status, 414);
    let big_headers = format!(
        "GET /metrics HTTP/1.1\r\n{}\r\n",
        "X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n".repeat(300)
    );
    assert_eq!(exchange(a, big_headers.as_bytes()).status, 431);
    let many = format!("GET /metrics HTTP/1.1\r\n{}\r\n", "A: b\r\n".repeat(100));
    assert_eq!(exchange(a, many.as_bytes()).status, 431);

    // Half a request, then silence: 408 after the read timeout (1 s).
    let t0 = Instant::now();
    let r = exchange(a, b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
    assert_eq!(r.status, 408);
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());

    // Two silent peers hold both connections: a scrape takes the place of the oldest (closed
    // without an answer) and is answered at once; the younger one is left alone.
    drop(ex);
    let ex = Exporter::start(&[
        "--socket-dir",
        &dir,
        "--read-timeout",
        "5s",
        "--max-connections",
        "2",
    ]);
    let a = ex.addr;
    let mut silent: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(a).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let r = get(a, "/metrics", None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    silent[0].set_read_timeout(Some(T)).unwrap();
    let mut buf = Vec::new();
    assert_eq!(
        silent[0].read_to_end(&mut buf).unwrap_or(0),
        0,
        "the oldest silent peer is closed without an answer"
    );
    silent[1]
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    assert!(
        silent[1].read(&mut [0u8; 1]).is_err(),
        "the younger silent peer is still open"
    );
    let e = ex.scrape();
    assert!(e.value("davinci_exporter_connections_evicted_total", &[]) >= 1.0);
    assert_eq!(
        e.value("davinci_exporter_connections_rejected_total", &[]),
        0.0
    );
}

#[test]
fn sixteen_trickling_peers_do_not_make_scrapes_fail() {
    // The report: 16 slow connections trickling a byte every 50 ms made 36 of 36
    // scrapes return 503. Now every scrape is answered.
    let d = Mockd::start(&["--devices", "1"]).unwrap();
    let dir = d.dir().display().to_string();
    let ex = Exporter::start(&["--socket-dir", &dir]);
    let a = ex.addr;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tricklers: Vec<_> = (0..16)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                use std::sync::atomic::Ordering::Relaxed;
                let head = b"GET /metrics HTTP/1.1\r\nX-Slow: ";
                while !stop.load(Relaxed) {
                    let Ok(mut s) = TcpStream::connect(a) else {
                        continue;
                    };
                    let mut i = 0usize;
                    while !stop.load(Relaxed) {
                        let b = head.get(i).copied().unwrap_or(b'a');
                        if s.write_all(&[b]).is_err() {
                            break;
                        }
                        i += 1;
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let statuses: Vec<u16> = (0..36)
        .map(|_| {
            let s = get(a, "/metrics", None).status;
            std::thread::sleep(Duration::from_millis(50));
            s
        })
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tricklers {
        t.join().unwrap();
    }
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let e = ex.scrape();
    assert!(e.value("davinci_exporter_connections_evicted_total", &[]) >= 1.0);
    assert_eq!(
        e.value("davinci_exporter_connections_rejected_total", &[]),
        0.0
    );
}

#[test]
fn it_stops_on_sigterm_and_says_why_it_cannot_listen() {
    let d = Mockd::start(&["--devices", "1"]).unwrap();
    let dir = d.dir().display().to_string();
    let mut ex = Exporter::start(&["--socket-dir", &dir]);
    let port = ex.addr.port().to_string();

    // The same address again.
    let taken = format!("127.0.0.1:{port}");
    let (code, _, err) = run(&["--socket-dir", &dir, "--listen", &taken]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("cannot listen on {taken}")), "{err}");
    assert!(err.contains("already in use"), "{err}");

    for (bad, says) in [
        ("localhost:80", "not a host name"),
        (":9464", "0.0.0.0:9464"),
        ("9464", "port is missing"),
    ] {
        let (code, out, err) = run(&["--listen", bad]);
        assert_eq!((code, out.as_str()), (2, ""), "{bad}");
        assert!(err.contains(says), "{bad}: {err}");
    }
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("loopback only"), "{out}");
    assert!(
        out.contains("--once") && out.contains("--socket-dir"),
        "{out}"
    );

    assert_eq!(
        ex.scrape().value("davinci_device_up", &[("device", "0")]),
        1.0
    );
    let st = ex.terminate();
    assert_eq!(st.code(), Some(0), "{st}");
    let log = ex.log();
    assert!(log.contains("SIGTERM received, stopping"), "{log}");
    assert!(log.contains("davinci-exporter: stopped"), "{log}");
    // The port is free again.
    TcpListener::bind(("127.0.0.1", ex.addr.port())).expect("the port is released");
}

// ---------------------------------------------------------------------------------------
// A real Prometheus.

/// A running Prometheus, killed and its files removed on drop.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The Prometheus binary: `$DAVINCI_PROMETHEUS`, else `prometheus` on PATH or in /usr/bin,
/// else Debian's package installed now (root and apt-get needed).
fn prometheus_binary() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("DAVINCI_PROMETHEUS") {
        return Ok(PathBuf::from(p));
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("prometheus"))
        .find(|p| p.is_file());
    if let Some(p) = on_path {
        return Ok(p);
    }
    let uid = nix::unistd::getuid().as_raw();
    if uid != 0 {
        return Err(format!(
            "prometheus is not installed and this user (uid {uid}) cannot install it; \
             as root: apt-get install prometheus (or set DAVINCI_PROMETHEUS=/path/to/prometheus)"
        ));
    }
    if !Path::new("/usr/bin/apt-get").exists() {
        return Err("prometheus is not installed and there is no apt-get to install it".into());
    }
    eprintln!("installing Debian's prometheus package (apt-get update, apt-get install)");
    for args in [
        &["update", "-q"][..],
        &[
            "install",
            "-y",
            "-q",
            "--no-install-recommends",
            "prometheus",
        ][..],
    ] {
        let out = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run apt-get: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "apt-get {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    let p = PathBuf::from("/usr/bin/prometheus");
    if p.is_file() {
        Ok(p)
    } else {
        Err("apt-get installed prometheus, but /usr/bin/prometheus is not there".into())
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Prometheus {
    /// Prometheus scraping `target` every second, on a free loopback port.
    fn start(binary: &Path, target: SocketAddr) -> Prometheus {
        let dir = std::env::temp_dir().join(format!(
            "davinci-exporter-prometheus-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: davinci\n    static_configs:\n      \
             - targets: ['{target}']\n"
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Prometheus { child, dir, addr }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query's result vector (empty until a scrape has stored the series).
    fn query(&self, q: &str) -> Vec<serde_json::Value> {
        let mut enc = String::new();
        for b in q.bytes() {
            if b.is_ascii_alphanumeric() || b"_-.".contains(&b) {
                enc.push(b as char);
            } else {
                enc.push_str(&format!("%{b:02X}"));
            }
        }
        let Ok(mut s) = TcpStream::connect(self.addr) else {
            return Vec::new();
        };
        s.set_read_timeout(Some(T)).unwrap();
        let req = format!(
            "GET /api/v1/query?query={enc} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        );
        if s.write_all(req.as_bytes()).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        if s.read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        let text = String::from_utf8_lossy(&buf);
        let Some((_, body)) = text.split_once("\r\n\r\n") else {
            return Vec::new();
        };
        let v: serde_json::Value = match serde_json::from_str(body) {
            Ok(v) => v,
            Err(_) => return Vec::new(),
        };
        if v["status"] == "success"
            && v["data"]["result"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        {
            eprintln!("prometheus: {q} => {}", v["data"]["result"]);
        }
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Waits for `q` to have a result.
    fn wait_for(&mut self, q: &str, until: Instant) -> Vec<serde_json::Value> {
        loop {
            let r = self.query(q);
            if !r.is_empty() {
                return r;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("prometheus exited ({st}):\n{}", self.log());
            }
            assert!(
                Instant::now() < until,
                "no result for {q} from prometheus in time:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

fn sample_value(r: &serde_json::Value) -> f64 {
    r["value"][1].as_str().unwrap().parse().unwrap()
}

#[test]
fn prometheus_scrapes_it_and_answers_with_the_values() {
    let binary = match prometheus_binary() {
        Ok(b) => b,
        Err(why) if std::env::var("DAVINCI_SKIP_PROMETHEUS").as_deref() == Ok("1") => {
            eprintln!("SKIPPED (DAVINCI_SKIP_PROMETHEUS=1): {why}");
            return;
        }
        Err(why) => panic!(
            "the Prometheus test needs prometheus: {why}. \
             Set DAVINCI_SKIP_PROMETHEUS=1 to skip it."
        ),
    };
    let d = Mockd::start(&["--devices", "1", "--memory", "64M"]).unwrap();
    let me = own_client(&d.path(0));
    let dir = d.dir().display().to_string();
    let ex = Exporter::start(&["--socket-dir", &dir]);
    let t0 = Instant::now();
    let mut prom = Prometheus::start(&binary, ex.addr);
    let until = t0 + Duration::from_secs(45);

    let r = prom.wait_for("up{job=\"davinci\"} == 1", until);
    assert_eq!(r.len(), 1, "{r:?}");
    let name = own_name();
    let q = format!("davinci_client_tasks_completed_total{{process=\"{name}\"}}");
    let r = prom.wait_for(&q, until);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(sample_value(&r[0]), (NOPS + 1) as f64);
    assert_eq!(r[0]["metric"]["device"], "0");
    let pid = own_pid();
    let q = format!("davinci_client_info{{pid=\"{pid}\"}}");
    let r = prom.wait_for(&q, until);
    assert_eq!(r[0]["metric"]["process"], name.as_str());
    let r = prom.wait_for(
        &format!("davinci_client_memory_bytes{{process=\"{name}\"}}"),
        until,
    );
    assert_eq!(sample_value(&r[0]), me.memory as f64);
    let r = prom.wait_for("davinci_device_memory_used_bytes", until);
    assert_eq!(sample_value(&r[0]), me.memory as f64);
    let r = prom.wait_for("davinci_device_tasks_submitted_total", until);
    assert_eq!(sample_value(&r[0]), (NOPS + 1) as f64);
    let r = prom.wait_for("davinci_device_stream_errors_total", until);
    assert_eq!(sample_value(&r[0]), 1.0);
    let r = prom.wait_for("davinci_device_share_mode{mode=\"exclusive\"}", until);
    assert_eq!(sample_value(&r[0]), 1.0);
    // Every sample of the exposition was taken (Prometheus drops a scrape it cannot parse).
    // (The first scrape has no utilization yet, an interval needing two: wait for a later one.)
    let ours = ex.scrape().series.len();
    loop {
        let r = prom.wait_for("scrape_samples_scraped{job=\"davinci\"}", until);
        if sample_value(&r[0]) == ours as f64 {
            break;
        }
        assert!(Instant::now() < until, "{r:?}: {ours} samples expected");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Prometheus's own linter (naming, units, counters' suffix, HELP) has nothing to say.
    let promtool = binary.with_file_name("promtool");
    if promtool.is_file() {
        let mut lint = Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run promtool");
        let body = get(ex.addr, "/metrics", None).body;
        lint.stdin.take().unwrap().write_all(&body).unwrap();
        let out = lint.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && said.trim().is_empty(),
            "promtool: {said}"
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
    drop(prom);
}

/// A stand-in kubelet: the pod-resources API's `List`, answering `reply`.
struct PodResourcesStandIn(davinci_exporter::pods::api::ListPodResourcesResponse);

#[tonic::async_trait]
impl davinci_exporter::pods::api::pod_resources_lister_server::PodResourcesLister
    for PodResourcesStandIn
{
    async fn list(
        &self,
        _: tonic::Request<davinci_exporter::pods::api::ListPodResourcesRequest>,
    ) -> Result<tonic::Response<davinci_exporter::pods::api::ListPodResourcesResponse>, tonic::Status>
    {
        Ok(tonic::Response::new(self.0.clone()))
    }
}

#[test]
fn devices_are_labelled_with_the_pods_the_kubelet_gave_them_to() {
    use davinci_exporter::pods::api::pod_resources_lister_server::PodResourcesListerServer;
    use davinci_exporter::pods::api::{
        ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources,
    };
    let d = Mockd::start(&["--devices", "2"]).unwrap();
    let dir = d.dir().display().to_string();
    let uuid1 = Control::open(&d.path(1))
        .unwrap()
        .identity()
        .unwrap()
        .uuid_string()
        .to_string();
    let pod = |name: &str, ns: &str, c: &str, ids: Vec<String>| PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers: vec![ContainerResources {
            name: c.into(),
            devices: vec![ContainerDevices {
                resource_name: "davinci.ai/npu".into(),
                device_ids: ids,
            }],
        }],
    };
    // Device 0 by index (the plugin's IDs today), device 1 by UUID (a shared replica).
    let reply = ListPodResourcesResponse {
        pod_resources: vec![
            pod("train-0", "ml", "trainer", vec!["davinci0".into()]),
            pod("infer", "web", "server", vec![format!("{uuid1}::1")]),
        ],
    };
    let socket = d.dir().join("kubelet.sock");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let incoming = rt
        .block_on(async { davinci_device_plugin::transport::listen(&socket) })
        .unwrap();
    rt.spawn(
        tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(PodResourcesStandIn(reply)))
            .serve_with_incoming(incoming),
    );
    let sock = socket.display().to_string();
    let ex = Exporter::start(&["--socket-dir", &dir, "--pod-resources-socket", &sock]);
    let e = ex.scrape();
    let d0 = [
        ("device", "0"),
        ("pod", "train-0"),
        ("namespace", "ml"),
        ("container", "trainer"),
    ];
    assert_eq!(e.value("davinci_device_up", &d0), 1.0);
    assert_eq!(e.value("davinci_device_memory_used_bytes", &d0), 0.0);
    assert_eq!(e.value("davinci_device_pod_info", &d0), 1.0);
    let d1 = [
        ("device", "1"),
        ("pod", "infer"),
        ("namespace", "web"),
        ("container", "server"),
    ];
    assert_eq!(e.value("davinci_device_up", &d1), 1.0);
    assert_eq!(e.value("davinci_device_pod_info", &d1), 1.0);
    assert!(!ex.log().contains("pod-resources"), "{}", ex.log());

    // No socket (not a node): no pod labels, nothing logged.
    let missing = d.dir().join("no-kubelet.sock").display().to_string();
    let ex2 = Exporter::start(&["--socket-dir", &dir, "--pod-resources-socket", &missing]);
    let e = ex2.scrape();
    assert_eq!(e.value("davinci_device_up", &[("device", "0")]), 1.0);
    assert!(
        e.series.iter().all(|s| !s.labels.contains_key("pod")),
        "{}",
        e.text
    );
    assert!(!ex2.log().contains("pod"), "{}", ex2.log());

    // The kubelet goes away: the scrapes go on without pod labels; said once.
    drop(rt);
    let e = ex.scrape();
    assert_eq!(e.value("davinci_device_up", &[("device", "0")]), 1.0);
    assert!(
        e.series.iter().all(|s| !s.labels.contains_key("pod")),
        "{}",
        e.text
    );
    ex.scrape();
    let said = || {
        ex.log()
            .matches("no pod attribution: pod-resources")
            .count()
    };
    let until = Instant::now() + T;
    while said() == 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let said = said();
    assert_eq!(said, 1, "{}", ex.log());
}
