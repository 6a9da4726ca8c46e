//! `davinci-exporter` as a real process against a real `davinci-mockd`: the values of a scrape
//! are what this test's own client did (memory, tasks, a stream error, work left queued by a
//! parked client), each family has its type and help, a device that cannot be read is
//! `davinci_device_up 0` in a scrape that still succeeds, bad and oversized requests get
//! proper answers, silent clients and too many connections are bounded, SIGTERM stops it;
//! and finally a real Prometheus scrapes it and answers a query with the same values. One
//! file per area in `exporter/`; this one runs the exporter, speaks HTTP and parses the text
//! format for them.
#![forbid(unsafe_code)]

use davinci_tests::descs::SubmitDescs;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use davinci_shim::{Device, TaskDesc};
use davinci_tests::mockd::bin;
use davinci_uapi::DevAddr;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const T: Duration = Duration::from_secs(20);

/// What a scrape shows.
#[path = "exporter/scrape.rs"]
mod scrape;

/// The HTTP server: bad requests, bounded peers, SIGTERM.
#[path = "exporter/serving.rs"]
mod serving;

/// A real Prometheus.
#[path = "exporter/prometheus.rs"]
mod prometheus;

/// Devices labelled with their pods.
#[path = "exporter/pods.rs"]
mod pods;

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
