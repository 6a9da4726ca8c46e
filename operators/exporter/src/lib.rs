//! `davinci-exporter`: the davinci devices' metrics for Prometheus. It serves `GET /metrics`
//! over plain HTTP in the Prometheus text format (0.0.4), or OpenMetrics 1.0.0 when the
//! scraper's `Accept` header prefers it, encoded by `prometheus-client`. Each read discovers
//! the devices as `davinci-smi` does ([`davinci_ops::discover`]) and reads them afresh
//! through a control open: GET_INFO, LIST_CLIENTS, GET_COUNTERS (ABI 1.3; 1.4 more),
//! GET_IDENTITY (1.4), GET_SENSORS and READ_EVENTS (1.5; the event log counted per code:
//! [`events`]). A device that cannot be read is `davinci_device_up 0`, not a failed scrape.
//!
//! Between scrapes it remembers ([`state`]) each device's busy time, for the utilization
//! over the interval, and its clients, whose series are per (container, process name)
//! group so that they do not churn when processes restart. On a Kubernetes node it labels
//! devices with the pods holding them, from the kubelet's pod-resources API ([`pods`]).
//!
//! Scrapes share reads: one runs at a time, the scrapes that arrive meanwhile are answered
//! from it, and a read younger than `--cache` answers later ones, so a device busy answering
//! one scrape is never reported down to another. The per-client series (every tenant's
//! process names, container ids, pids and uids) are served only with `--client-series`.
//!
//! `--once` prints one scrape on stdout and exits. The families are listed in
//! [`metrics::FAMILIES`]; docs/operators.md has the table and examples.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod collect;
pub mod events;
pub mod http;
pub mod metrics;
pub mod pods;
pub mod sample;
pub mod state;

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;

use collect::{Collector, Reader, Sample, ShimReader};
use davinci_ops::discover::{self, Discovery};
use http::{Limits, Request, Response};
use metrics::{Format, SelfStats};

/// Exit status: success.
pub const EXIT_OK: i32 = 0;
/// Exit status: the exporter could not run (cannot listen, cannot write the output).
pub const EXIT_FAILED: i32 = 1;
/// Exit status: a bad command line.
pub const EXIT_USAGE: i32 = 2;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "davinci-exporter",
    version,
    about = "Serves the davinci devices' metrics (health, utilization, memory, temperature, \
             power, sharing, clients, tasks, pods) over HTTP for Prometheus.",
    long_about = "Serves the davinci devices' metrics (health, utilization, memory, temperature, \
                  power, sharing, clients, tasks, pods) over HTTP for Prometheus: GET /metrics in the Prometheus text format, or \
                  OpenMetrics when the Accept header asks for application/openmetrics-text; \
                  GET / is a page pointing there. Concurrent scrapes share one read of the \
                  devices (and, within --cache, later ones too); a device that cannot be \
                  read is reported as davinci_device_up 0. Every tenant's process names, \
                  pids, uids and containers are served only with --client-series.\n\n\
                  Devices are found as davinci-smi finds them: --device PATH (repeatable), \
                  else every davinci<N>.sock in --socket-dir, else $DAVINCI_DEVICE, else the \
                  first of /dev/davinci<N>, davinci-mockd's default socket directory and \
                  /run/davinci that has devices. Discovery is repeated on every scrape.",
    after_help = "Logs go to stderr: the address served, devices going down or up. SIGTERM or \
                  SIGINT stops it (connections being served get 5 s to finish).\n\
                  Exit status: 0 stopped by a signal or --once printed; 1 cannot listen or \
                  write; 2 bad command line."
)]
pub struct Cli {
    /// Address to serve on, IP:PORT (IPv6 in brackets: `[::1]:9464`; port 0 picks a free port; the
    /// address taken is logged). The default is loopback only, on purpose: the exporter has
    /// no TLS and no authentication, so serving other hosts must be a deliberate choice
    /// (e.g. --listen 0.0.0.0:9464 behind a firewall, or the pod's address in Kubernetes).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:9464",
        value_parser = parse_listen
    )]
    pub listen: SocketAddr,

    /// A device to export (`/dev/davinciN` or `mock:SOCKET`); repeat for more. Default:
    /// discovered (see above).
    #[arg(long = "device", value_name = "PATH")]
    pub devices: Vec<String>,

    /// Export every `davinci<N>.sock` in this davinci-mockd socket directory.
    #[arg(long, value_name = "DIR", conflicts_with = "devices")]
    pub socket_dir: Option<PathBuf>,

    /// Print one scrape on stdout and exit (no server).
    #[arg(long)]
    pub once: bool,

    /// The format of --once (the server negotiates by the Accept header).
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "prometheus")]
    pub format: Format,

    /// Also serve the per-client series (davinci_client_*: every tenant's process names,
    /// container ids, pids and uids). Off by default: anyone who can connect to --listen
    /// (on loopback, every local user and container sharing the host's network) would read
    /// them, and the exporter has no authentication. --once always prints them.
    #[arg(long)]
    pub client_series: bool,

    /// Scrapes within this time of the last device read are answered from it (0: only
    /// scrapes that arrive while a read runs share it). Concurrent scrapes always share one
    /// read, so a device busy answering one scrape is never reported down to another.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_cache)]
    pub cache: Duration,

    /// Most connections open at once (1-1024). At the limit a new connection takes the place
    /// of the oldest one that has not sent its whole request yet; only when all are being
    /// answered is it answered 503.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 16,
        value_parser = clap::value_parser!(u16).range(1..=1024)
    )]
    pub max_connections: u16,

    /// Time a client has to send its request once connected (e.g. 5s, 500ms; at most 1h).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub read_timeout: Duration,

    /// Time the devices of one scrape have to answer; a device that has not answered by
    /// then is down (davinci_device_error_info errno="ETIMEDOUT") for that scrape.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub device_timeout: Duration,

    /// The kubelet's pod-resources socket, to label devices with the pod, namespace and
    /// container they were given to. No socket there: no such labels, nothing logged.
    #[arg(long, value_name = "PATH", default_value = pods::DEFAULT_SOCKET)]
    pub pod_resources_socket: PathBuf,

    /// The device plugin's resource name, whose device IDs (davinciN, davinciN::k, UUID,
    /// UUID::k) the pod-resources API lists.
    #[arg(long, value_name = "NAME", default_value = pods::DEFAULT_RESOURCE)]
    pub resource: String,
}

/// `IP:PORT`, with a hint for the usual mistakes.
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>().map_err(|_| {
        let hint = if s.matches(':').count() > 1 && !s.starts_with('[') {
            " (an IPv6 address goes in brackets: [::1]:9464)".to_string()
        } else if s.starts_with(':') {
            format!(" (all interfaces: 0.0.0.0{s} or [::]{s})")
        } else if !s.contains(':') {
            " (the port is missing)".to_string()
        } else {
            " (a numeric address is needed, not a host name)".to_string()
        };
        format!("'{s}' is not an IP:PORT address like 127.0.0.1:9464{hint}")
    })
}

/// `5s`, `500ms`, `2m` or a number of seconds ([`davinci_units::parse_duration`]); more than
/// zero, at most an hour.
fn parse_duration(s: &str) -> Result<Duration, String> {
    davinci_units::parse_duration_between(s, Duration::from_millis(1), Duration::from_secs(3600))
}

/// `--cache`: 0 (no reuse) to a minute.
fn parse_cache(s: &str) -> Result<Duration, String> {
    davinci_units::parse_duration_between(s, Duration::ZERO, Duration::from_secs(60))
}

/// One read of the devices, shared by the scrapes that arrive while it runs and, within
/// `--cache`, by those that follow.
#[derive(Debug)]
struct Snapshot {
    samples: Vec<Sample>,
    /// Time the read took (discovery, devices, pods).
    duration: Duration,
    /// When it finished.
    at: Instant,
}

/// The read of the devices in progress, and the last one.
#[derive(Debug, Default)]
struct Reads {
    /// A read is running; scrapes that arrive wait for it.
    running: bool,
    /// Reads finished since start.
    finished: u64,
    last: Option<Arc<Snapshot>>,
}

/// Ends a read however it ends: a read that did not finish (a panic) lets the next scrape
/// start another rather than leave the waiting ones waiting.
struct ReadGuard<'a> {
    ex: &'a Exporter,
    snapshot: Option<Arc<Snapshot>>,
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        let mut r = relock(self.ex.reads.lock());
        r.running = false;
        if let Some(s) = self.snapshot.take() {
            r.finished = r.finished.wrapping_add(1);
            r.last = Some(s);
        }
        self.ex.read_done.notify_all();
    }
}

/// The scrapes: discovery, reading, encoding, and what the log says about devices.
pub struct Exporter {
    devices: Vec<String>,
    socket_dir: Option<PathBuf>,
    discovery: Discovery,
    collector: Collector,
    scrapes: AtomicU64,
    conns: Arc<http::ConnStats>,
    /// One read of the devices at a time, shared by every scrape that arrives meanwhile.
    reads: Mutex<Reads>,
    read_done: Condvar,
    /// How long a finished read answers later scrapes (`--cache`).
    cache: Duration,
    /// Whether the per-client series are served (`--client-series`, `--once`).
    client_series: bool,
    /// Each device path's last state (`None` up, `Some(why)` down), to log changes once.
    last: Mutex<HashMap<String, Option<String>>>,
    /// The kubelet's pod-resources API (`None`: the client could not be made).
    pods: Option<pods::PodResources>,
    /// The last pod-resources error (logged once per change).
    pods_error: Mutex<Option<String>>,
    /// What scrapes remember (utilization, client groups).
    history: Mutex<state::History>,
    /// Whether the last scrape found no device (logged once per change).
    none_found: AtomicBool,
    /// Log every device that is down, not only changes (`--once`).
    log_all: bool,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("devices", &self.devices)
            .field("socket_dir", &self.socket_dir)
            .finish_non_exhaustive()
    }
}

fn relock<T>(r: std::sync::LockResult<T>) -> T {
    // Only maps and a unit are guarded; whatever panicked, they are whole.
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Exporter {
    /// An exporter of the devices the command line and `discovery` select, read by
    /// `reader` with `device_timeout` per scrape.
    pub fn new(
        cli: &Cli,
        discovery: Discovery,
        reader: Arc<dyn Reader>,
        log_all: bool,
    ) -> Exporter {
        Exporter {
            devices: cli.devices.clone(),
            socket_dir: cli.socket_dir.clone(),
            discovery,
            collector: Collector::new(reader, cli.device_timeout),
            scrapes: AtomicU64::new(0),
            conns: Arc::default(),
            reads: Mutex::default(),
            read_done: Condvar::new(),
            cache: cli.cache,
            client_series: cli.client_series || cli.once,
            last: Mutex::default(),
            history: Mutex::default(),
            pods: match pods::PodResources::new(
                &cli.pod_resources_socket,
                &cli.resource,
                POD_RESOURCES_TIMEOUT,
            ) {
                Ok(p) => Some(p),
                Err(e) => {
                    eprintln!("davinci-exporter: no pod attribution: {e}");
                    None
                }
            },
            pods_error: Mutex::default(),
            none_found: AtomicBool::new(false),
            log_all,
        }
    }

    /// One scrape, encoded in `format`: from the read of the devices running now, or the
    /// last one if it finished within `--cache`, else from a new read.
    pub fn scrape(&self, format: Format) -> String {
        let snap = self.snapshot();
        let stats = SelfStats {
            duration: snap.duration,
            scrapes: self
                .scrapes
                .fetch_add(1, Ordering::Relaxed)
                .saturating_add(1),
            rejected: self.conns.rejected.load(Ordering::Relaxed),
            evicted: self.conns.evicted.load(Ordering::Relaxed),
        };
        metrics::encode(&snap.samples, &stats, format, self.client_series)
    }

    /// The read a scrape answers from: the running one (waited for), the last one if it is
    /// younger than `--cache`, or a new one this scrape makes.
    fn snapshot(&self) -> Arc<Snapshot> {
        let mut r = relock(self.reads.lock());
        loop {
            if let Some(last) = &r.last {
                if last.at.elapsed() < self.cache {
                    return Arc::clone(last);
                }
            }
            if !r.running {
                break;
            }
            let running = r.finished;
            while r.running && r.finished == running {
                r = relock(self.read_done.wait(r));
            }
            if r.finished != running {
                if let Some(last) = &r.last {
                    return Arc::clone(last);
                }
            }
            // The read ended without a result: read again.
        }
        r.running = true;
        drop(r);
        let mut guard = ReadGuard {
            ex: self,
            snapshot: None,
        };
        let snap = Arc::new(self.read());
        guard.snapshot = Some(Arc::clone(&snap));
        snap
    }

    /// Discovers and reads the devices, and derives what the scrapes remember.
    fn read(&self) -> Snapshot {
        let t0 = Instant::now();
        let found = discover::discover(&self.devices, self.socket_dir.as_deref(), &self.discovery);
        // A socket someone else could have planted is never read (its answers would be
        // the planter's): said once per socket and reason.
        for w in discover::ignored_warnings(&found) {
            static WARNED: Mutex<std::collections::BTreeSet<String>> =
                Mutex::new(std::collections::BTreeSet::new());
            let mut seen = relock(WARNED.lock());
            if seen.len() < 1024 && seen.insert(w.clone()) {
                eprintln!("davinci-exporter: {}", davinci_ops::text::printable(&w));
            }
        }
        let none = found.entries.is_empty();
        if none && (self.log_all || !self.none_found.swap(true, Ordering::Relaxed)) {
            eprintln!(
                "davinci-exporter: no devices found: {}",
                discover::describe_searched(&found)
            );
        } else if !none && self.none_found.swap(false, Ordering::Relaxed) {
            eprintln!(
                "davinci-exporter: {} device(s) found again",
                found.entries.len()
            );
        }
        if found.entries.len() > collect::MAX_DEVICES {
            eprintln!(
                "davinci-exporter: {} devices found; exporting the first {}",
                found.entries.len(),
                collect::MAX_DEVICES
            );
        }
        let mut samples = self.collector.collect(&found.entries);
        relock(self.history.lock()).update(&mut samples, &state::ProcNames);
        self.attribute(&mut samples);
        self.log_changes(&samples);
        Snapshot {
            samples,
            duration: t0.elapsed(),
            at: Instant::now(),
        }
    }

    /// Labels the devices with the pods holding them (pod-resources API); an error is
    /// logged when it changes, and the scrape goes on without attribution.
    fn attribute(&self, samples: &mut [Sample]) {
        let Some(p) = &self.pods else {
            return;
        };
        let (allocs, error) = match p.list() {
            Ok(a) => (a, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let mut last = relock(self.pods_error.lock());
        if *last != error || (self.log_all && error.is_some()) {
            match &error {
                Some(e) => eprintln!("davinci-exporter: no pod attribution: pod-resources: {e}"),
                None => eprintln!("davinci-exporter: pod-resources answers again"),
            }
        }
        *last = error;
        pods::attribute(samples, &allocs);
    }

    fn log_changes(&self, samples: &[Sample]) {
        let mut last = relock(self.last.lock());
        let mut now = HashMap::new();
        for s in samples {
            let name = if s.device.is_empty() {
                s.path.clone()
            } else {
                format!("device {} ({})", s.device, s.path)
            };
            let state = match &s.outcome {
                Ok(r) => {
                    for p in &r.problems {
                        if self.log_all {
                            eprintln!("davinci-exporter: {name}: {p}");
                        }
                    }
                    None
                }
                Err(f) => Some(f.message.clone()),
            };
            let before = last.get(&s.path);
            let changed = match (before, &state) {
                (None, None) => false,
                (Some(b), s) => b != s,
                (None, Some(_)) => true,
            };
            if changed || (self.log_all && state.is_some()) {
                match &state {
                    Some(why) => eprintln!("davinci-exporter: {name} is down: {why}"),
                    None => eprintln!("davinci-exporter: {name} is up"),
                }
            }
            now.insert(s.path.clone(), state);
        }
        *last = now;
    }

    /// Answers one HTTP request: `/metrics`, `/`, or 404.
    pub fn handle(&self, req: &Request) -> Response {
        match req.path.as_str() {
            "/metrics" => {
                let format = Format::negotiate(req.accept.as_deref());
                Response {
                    status: 200,
                    content_type: format.content_type(),
                    headers: Vec::new(),
                    body: self.scrape(format).into_bytes(),
                }
            }
            "/" => Response {
                status: 200,
                content_type: "text/html; charset=utf-8",
                headers: Vec::new(),
                body: INDEX.as_bytes().to_vec(),
            },
            _ => Response::text(404, "not found; the metrics are at /metrics\n"),
        }
    }
}

/// Time the kubelet's pod-resources API has to answer, per scrape.
const POD_RESOURCES_TIMEOUT: Duration = Duration::from_secs(2);

/// The page at `/`.
const INDEX: &str = "<!DOCTYPE html>\n<html><head><title>davinci-exporter</title></head>\n\
<body><h1>davinci-exporter</h1>\n\
<p>Metrics of the davinci devices: <a href=\"/metrics\">/metrics</a> \
(Prometheus text format; OpenMetrics when the Accept header asks for it).</p>\n\
</body></html>\n";

/// Runs the program with the process's arguments; returns the exit status.
pub fn main() -> i32 {
    let cli = match Cli::try_parse_from(std::env::args_os()) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            let _ = e.print();
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => EXIT_OK,
                _ => EXIT_USAGE,
            };
        }
    };
    if cli.once {
        let ex = Exporter::new(&cli, Discovery::from_env(), Arc::new(ShimReader), true);
        let body = ex.scrape(cli.format);
        let mut out = std::io::stdout().lock();
        return match out.write_all(body.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => EXIT_OK,
            Err(e) => {
                eprintln!("davinci-exporter: cannot write the scrape: {e}");
                EXIT_FAILED
            }
        };
    }
    serve(&cli)
}

/// Why `addr` cannot be listened on, in words that say what to do.
fn listen_error(addr: SocketAddr, e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    let what = match e.kind() {
        AddrInUse => "the address is already in use (another davinci-exporter, or another \
                      program on that port?); choose another with --listen"
            .to_string(),
        AddrNotAvailable => "that is not an address of this machine".to_string(),
        PermissionDenied => {
            "permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)".to_string()
        }
        _ => e.to_string(),
    };
    format!("davinci-exporter: cannot listen on {addr}: {what}")
}

fn serve(cli: &Cli) -> i32 {
    // Block SIGTERM and SIGINT before any thread starts (threads inherit the mask), and
    // take them in a thread of their own: a graceful stop without a signal handler.
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    if let Err(e) = set.thread_block() {
        eprintln!("davinci-exporter: cannot block SIGTERM/SIGINT: {e}");
        return EXIT_FAILED;
    }
    let listener = match TcpListener::bind(cli.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{}", listen_error(cli.listen, &e));
            return EXIT_FAILED;
        }
    };
    let addr = listener.local_addr().unwrap_or(cli.listen);
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || match set.wait() {
                Ok(sig) => {
                    eprintln!("davinci-exporter: {sig} received, stopping");
                    stop.store(true, Ordering::SeqCst);
                }
                Err(e) => eprintln!("davinci-exporter: waiting for signals failed: {e}"),
            });
        if let Err(e) = spawned {
            eprintln!("davinci-exporter: cannot start the signal thread: {e}");
            return EXIT_FAILED;
        }
    }
    let ex = Arc::new(Exporter::new(
        cli,
        Discovery::from_env(),
        Arc::new(ShimReader),
        false,
    ));
    let limits = Limits {
        max_connections: usize::from(cli.max_connections),
        read_timeout: cli.read_timeout,
        write_timeout: Duration::from_secs(10),
    };
    eprintln!("davinci-exporter: listening on http://{addr}/metrics");
    let conns = Arc::clone(&ex.conns);
    let handler: Arc<dyn Fn(&Request) -> Response + Send + Sync> =
        Arc::new(move |req: &Request| ex.handle(req));
    match http::serve(
        &listener,
        limits,
        handler,
        &stop,
        conns,
        Duration::from_secs(5),
    ) {
        Ok(()) => {
            eprintln!("davinci-exporter: stopped");
            EXIT_OK
        }
        Err(e) => {
            eprintln!("davinci-exporter: serving {addr} failed: {e}");
            EXIT_FAILED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("127.0.0.1:9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert!(parse_listen("[::1]:0").is_ok());
        assert!(parse_listen(":9464").unwrap_err().contains("0.0.0.0:9464"));
        assert!(parse_listen("9464")
            .unwrap_err()
            .contains("port is missing"));
        assert!(parse_listen("::1:9464").unwrap_err().contains("brackets"));
        assert!(parse_listen("localhost:9464")
            .unwrap_err()
            .contains("not a host name"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("2h")
            .unwrap_err()
            .contains("between 1ms and 1h"));
        assert!(parse_duration("2x").unwrap_err().contains("unit"));
        assert!(parse_duration("61m").is_err());
        assert!(parse_duration("fast").is_err());
    }

    #[test]
    fn listen_errors_say_what_to_do() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let e = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        assert!(listen_error(a, &e).contains("already in use"));
        let e = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(listen_error(a, &e).contains("CAP_NET_BIND_SERVICE"));
    }

    #[test]
    fn help_says_why_loopback() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("loopback only"), "{help}");
        assert!(help.contains("127.0.0.1:9464"), "{help}");
    }
}
