//! A real Prometheus scrapes the exporter and answers a query with the values a scrape
//! shows; with the shipped recording rules and dashboard (`dashboard.rs`).
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use davinci_tests::mockd::Mockd;

use super::{get, own_client, own_name, own_pid, Exporter, NOPS, T};

/// The shipped recording rules and Grafana dashboard in a real Prometheus.
#[path = "dashboard.rs"]
mod dashboard;

/// One Prometheus at a time: two on two cores would slow each other past their deadlines.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds [`ONE_AT_A_TIME`] (whatever an earlier holder's panic left).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

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

/// The Prometheus binary, or `None` when it is missing and `DAVINCI_SKIP_PROMETHEUS=1`
/// (the test then says it skipped).
fn prometheus_or_skip() -> Option<PathBuf> {
    match prometheus_binary() {
        Ok(b) => Some(b),
        Err(why) if std::env::var("DAVINCI_SKIP_PROMETHEUS").as_deref() == Ok("1") => {
            eprintln!("SKIPPED (DAVINCI_SKIP_PROMETHEUS=1): {why}");
            None
        }
        Err(why) => panic!(
            "the Prometheus test needs prometheus: {why}. \
             Set DAVINCI_SKIP_PROMETHEUS=1 to skip it."
        ),
    }
}

impl Prometheus {
    /// Prometheus scraping `target` every second, on a free loopback port.
    fn start(binary: &Path, target: SocketAddr) -> Prometheus {
        Prometheus::start_with_rules(binary, target, None)
    }

    /// Prometheus scraping `target` every second, on a free loopback port, evaluating the
    /// recording rules of `rules` every second.
    fn start_with_rules(binary: &Path, target: SocketAddr, rules: Option<&Path>) -> Prometheus {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "davinci-exporter-prometheus-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let rule_files = rules.map_or(String::new(), |r| {
            format!("rule_files:\n  - '{}'\n", r.display())
        });
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             {rule_files}\
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
    let Some(binary) = prometheus_or_skip() else {
        return;
    };
    let _one = one_at_a_time();
    let d = Mockd::start(&["--devices", "1", "--memory", "64M"]).unwrap();
    let me = own_client(&d.path(0));
    let dir = d.dir().display().to_string();
    let ex = Exporter::start(&["--socket-dir", &dir, "--client-series"]);
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
