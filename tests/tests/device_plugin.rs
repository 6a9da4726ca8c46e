//! `davinci-device-plugin` as the kubelet sees it: the real plugin process against a real
//! `davinci-mockd`, and a kubelet stand-in written here from the same vendored proto (a
//! Registration server on a Unix socket in a temporary directory; a DevicePlugin client of
//! the plugin's socket). Registration, ListAndWatch (replicas in shared mode, one ID in
//! exclusive mode, health following the device), Allocate, GetPreferredAllocation, refused
//! IDs, kubelet restarts, a refused registration, SIGTERM, and the command-line errors.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use davinci_device_plugin::api::device_plugin_client::DevicePluginClient;
use davinci_device_plugin::api::registration_server::{Registration, RegistrationServer};
use davinci_device_plugin::api::{
    AllocateRequest, ContainerAllocateRequest, ContainerPreferredAllocationRequest,
    DevicePluginOptions, Empty, ListAndWatchResponse, PreferredAllocationRequest, RegisterRequest,
};
use davinci_device_plugin::transport;
use davinci_shim::{Control, ShareMode};
use davinci_tests::mockd::{bin, Mockd};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

/// How long any one thing may take.
const WAIT: Duration = Duration::from_secs(15);

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "davinci-dp-{}-{}-{tag}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The kubelet's Registration service: passes every request to the test; accepts it, or
/// refuses it with `refuse`.
struct Standin {
    tx: mpsc::UnboundedSender<RegisterRequest>,
    refuse: Option<String>,
}

#[tonic::async_trait]
impl Registration for Standin {
    async fn register(&self, r: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let _ = self.tx.send(r.into_inner());
        match &self.refuse {
            Some(m) => Err(Status::invalid_argument(m.clone())),
            None => Ok(Response::new(Empty {})),
        }
    }
}

/// A kubelet stand-in serving `DIR/kubelet.sock`.
struct Kubelet {
    sock: PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    registrations: mpsc::UnboundedReceiver<RegisterRequest>,
}

impl Kubelet {
    async fn start(dir: &Path, refuse: Option<&str>) -> Kubelet {
        let sock = dir.join("kubelet.sock");
        let (tx, registrations) = mpsc::unbounded_channel();
        let (shutdown, rx) = oneshot::channel::<()>();
        let incoming = transport::listen(&sock).unwrap();
        let svc = RegistrationServer::new(Standin {
            tx,
            refuse: refuse.map(String::from),
        });
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await;
        });
        Kubelet {
            sock,
            shutdown: Some(shutdown),
            task: Some(task),
            registrations,
        }
    }

    /// The next Register request.
    async fn registration(&mut self) -> RegisterRequest {
        tokio::time::timeout(WAIT, self.registrations.recv())
            .await
            .expect("no registration in time")
            .expect("the stand-in ended")
    }

    /// Stops serving and removes the socket; with `plugins`, every plugin socket too, as a
    /// kubelet restart does.
    async fn stop(mut self, plugins: bool) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(WAIT, t).await;
        }
        std::fs::remove_file(&self.sock).unwrap();
        if plugins {
            for e in std::fs::read_dir(self.sock.parent().unwrap()).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "sock") {
                    std::fs::remove_file(p).unwrap();
                }
            }
        }
    }
}

/// The plugin process, its stderr collected (and echoed, for failures); killed on drop.
struct Plugin {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Plugin {
    fn start(kubelet_dir: &Path, args: &[&str]) -> Plugin {
        let mut child = Command::new(bin("testbin-davinci-device-plugin"))
            .arg("--kubelet-dir")
            .arg(kubelet_dir)
            .args(["--health-interval", "100ms", "--kubelet-poll", "100ms"])
            // These tests follow devices by their index's names (davinciN, davinciN::k);
            // the UUID names (the default) have a test of their own.
            .args(if args.contains(&"--device-ids") {
                &[][..]
            } else {
                &["--device-ids", "index"][..]
            })
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start davinci-device-plugin");
        let err = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let l = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                eprintln!("[plugin] {line}");
                let mut l = l.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        Plugin { child, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until the log has `n` lines containing `what`.
    async fn wait_log(&self, what: &str, n: usize) {
        let t0 = Instant::now();
        while self.log().matches(what).count() < n {
            assert!(
                t0.elapsed() < WAIT,
                "no {n}× {what:?} in the log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn sigterm(&self) {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM).unwrap();
    }

    async fn exit_status(&mut self) -> ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                t0.elapsed() < WAIT,
                "the plugin did not exit:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client of the plugin's socket.
async fn client(sock: &Path) -> DevicePluginClient<Channel> {
    DevicePluginClient::new(transport::connect(sock, WAIT).await.unwrap())
}

type List = Vec<(String, String)>;

fn pairs(r: ListAndWatchResponse) -> List {
    r.devices.into_iter().map(|d| (d.id, d.health)).collect()
}

/// Reads lists from the stream until one satisfies `ok`; returns it.
async fn wait_list(
    stream: &mut Streaming<ListAndWatchResponse>,
    what: &str,
    ok: impl Fn(&List) -> bool,
) -> List {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = None;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.message()).await;
        match next {
            Ok(Ok(Some(r))) => {
                let l = pairs(r);
                if ok(&l) {
                    return l;
                }
                last = Some(l);
            }
            Ok(other) => panic!("the stream ended waiting for {what}: {other:?}"),
            Err(_) => panic!("no list with {what} in time; last: {last:?}"),
        }
    }
}

fn ids(l: &List) -> Vec<&str> {
    l.iter().map(|(i, _)| i.as_str()).collect()
}

fn all_healthy(l: &List) -> bool {
    l.iter().all(|(_, h)| h == "Healthy")
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn allocate_req(containers: &[&[&str]]) -> AllocateRequest {
    AllocateRequest {
        container_requests: containers
            .iter()
            .map(|ids| ContainerAllocateRequest {
                devices_ids: strings(ids),
            })
            .collect(),
    }
}

fn preferred_req(avail: &[&str], must: &[&str], size: i32) -> PreferredAllocationRequest {
    PreferredAllocationRequest {
        container_requests: vec![ContainerPreferredAllocationRequest {
            available_device_i_ds: strings(avail),
            must_include_device_i_ds: strings(must),
            allocation_size: size,
        }],
    }
}

fn admin_daemon(args: &[&str]) -> Mockd {
    let uid = nix::unistd::getuid().as_raw().to_string();
    let mut all = vec!["--admin-uid", &uid];
    all.extend_from_slice(args);
    Mockd::start(&all).unwrap()
}

fn status(path: &Path) -> serde_json::Value {
    let s = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_then_lists_replicas_allocates_prefers_and_refuses_unknown_ids() {
    let d = admin_daemon(&["--devices", "2", "--share-mode", "shared"]);
    let k8s = TempDir::new("main");
    let status_file = k8s.0.join("status.json");
    let mut kubelet = Kubelet::start(&k8s.0, None).await;
    let plugin = Plugin::start(
        &k8s.0,
        &[
            "--socket-dir",
            d.dir().to_str().unwrap(),
            "--replicas",
            "3",
            "--status-file",
            status_file.to_str().unwrap(),
        ],
    );

    // The registration.
    let r = kubelet.registration().await;
    assert_eq!(r.version, "v1beta1");
    assert_eq!(r.endpoint, "davinci.sock");
    assert_eq!(r.resource_name, "davinci.ai/npu");
    let want_options = DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    };
    assert_eq!(r.options, Some(want_options));

    // The plugin's own service, on the endpoint it registered.
    let mut c = client(&k8s.0.join(&r.endpoint)).await;
    let o = c.get_device_plugin_options(Empty {}).await.unwrap();
    assert_eq!(o.into_inner(), want_options);
    let mut stream = c.list_and_watch(Empty {}).await.unwrap().into_inner();
    // Shared: 3 replicas each.
    let l = wait_list(&mut stream, "the first list", |_| true).await;
    assert_eq!(
        ids(&l),
        [
            "davinci0::0",
            "davinci0::1",
            "davinci0::2",
            "davinci1::0",
            "davinci1::1",
            "davinci1::2"
        ]
    );
    assert!(all_healthy(&l), "{l:?}");

    // davinci1 switched to exclusive: advertised once.
    Control::open(&d.path(1))
        .unwrap()
        .set_share_mode(ShareMode::Exclusive)
        .unwrap();
    let l = wait_list(&mut stream, "davinci1 exclusive", |l| l.len() == 4).await;
    assert_eq!(
        ids(&l),
        ["davinci0::0", "davinci0::1", "davinci0::2", "davinci1"]
    );
    assert!(all_healthy(&l), "{l:?}");

    // Allocate: a replica is its device's socket, mounted at the same path, and
    // DAVINCI_DEVICE; two devices: the first named, both listed.
    let sock0 = d.socket(0).display().to_string();
    let sock1 = d.socket(1).display().to_string();
    let resp = c
        .allocate(allocate_req(&[
            &["davinci0::1"],
            &["davinci0::2", "davinci1"],
        ]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.container_responses.len(), 2);
    let a = &resp.container_responses[0];
    assert_eq!(a.envs["DAVINCI_DEVICE"], d.path(0));
    assert_eq!(a.envs["DAVINCI_VISIBLE_DEVICES"], d.path(0));
    assert_eq!(a.mounts.len(), 1);
    assert_eq!(a.mounts[0].host_path, sock0);
    assert_eq!(a.mounts[0].container_path, sock0);
    assert!(a.devices.is_empty() && a.cdi_devices.is_empty());
    let b = &resp.container_responses[1];
    assert_eq!(b.envs["DAVINCI_DEVICE"], d.path(0));
    assert_eq!(
        b.envs["DAVINCI_VISIBLE_DEVICES"],
        format!("{},{}", d.path(0), d.path(1))
    );
    let mounted: Vec<&str> = b.mounts.iter().map(|m| m.host_path.as_str()).collect();
    assert_eq!(mounted, [sock0.as_str(), sock1.as_str()]);
    // The path handed to the container opens the device.
    Control::open(&a.envs["DAVINCI_DEVICE"])
        .unwrap()
        .info()
        .unwrap();
    plugin
        .wait_log("Allocate: container 1: davinci0::2, davinci1", 1)
        .await;

    // The allocations, per device, in the status.
    let s = status(&status_file);
    assert_eq!(s["schema"], "davinci-device-plugin/v1");
    assert_eq!(s["registration"]["registered"], true);
    assert_eq!(s["registration"]["registrations"], 1);
    assert_eq!(
        s["devices"][0]["allocated"],
        serde_json::json!(["davinci0::1", "davinci0::2"])
    );
    assert_eq!(s["devices"][0]["allocations_total"], 2);
    assert_eq!(
        s["devices"][1]["allocated"],
        serde_json::json!(["davinci1"])
    );
    assert_eq!(s["devices"][1]["share_mode"], "exclusive");

    // Unknown IDs are refused, and nothing is allocated.
    for (bad, says) in [
        ("davinci0::7", "davinci0 has replicas 0 to 2"),
        ("davinci9::0", "there is no device davinci9"),
        ("gpu-0", "unknown device ID \"gpu-0\""),
    ] {
        let e = c
            .allocate(allocate_req(&[&["davinci0::0"], &[bad]]))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}: {e:?}");
        assert!(e.message().starts_with("container 1: "), "{e:?}");
        assert!(e.message().contains(says), "{bad}: {e:?}");
    }
    assert_eq!(status(&status_file)["devices"][0]["allocations_total"], 2);

    // GetPreferredAllocation: davinci0 has 2 of 3 replicas taken, davinci1 none of 1:
    // davinci1 first; must_include comes first.
    let avail = ["davinci0::0", "davinci1"];
    let p = c
        .get_preferred_allocation(preferred_req(&avail, &[], 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(p.container_responses[0].device_i_ds, ["davinci1"]);
    let p = c
        .get_preferred_allocation(preferred_req(&avail, &["davinci0::0"], 2))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        p.container_responses[0].device_i_ds,
        ["davinci0::0", "davinci1"]
    );
    let e = c
        .get_preferred_allocation(preferred_req(&["davinci4"], &[], 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // davinci1 offered as available again: released.
    assert_eq!(
        status(&status_file)["devices"][1]["allocated"],
        serde_json::json!([])
    );
    drop(plugin);
}

/// Renames a path.
fn rename(from: &Path, to: &Path) {
    std::fs::rename(from, to).unwrap();
}

/// Starts a davinci-mockd in `dir` (not a temporary one, as [`Mockd::start`] makes), killed
/// on drop.
struct OwnMockd(Child);

impl OwnMockd {
    fn start(dir: &Path, args: &[&str]) -> OwnMockd {
        let mut child = Command::new(bin("testbin-davinci-mockd"))
            .arg("--socket-dir")
            .arg(dir)
            .arg("--exit-with-parent")
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start davinci-mockd");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("ready"), "{line:?}");
        OwnMockd(child)
    }
}

impl Drop for OwnMockd {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0.id() as i32), Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_device_and_new_devices_are_added() {
    let mut d = Mockd::start(&[]).unwrap();
    let k8s = TempDir::new("health");
    let mut kubelet = Kubelet::start(&k8s.0, None).await;
    let plugin = Plugin::start(
        &k8s.0,
        &["--socket-dir", d.dir().to_str().unwrap(), "--replicas", "2"],
    );
    let r = kubelet.registration().await;
    let mut c = client(&k8s.0.join(&r.endpoint)).await;
    let mut stream = c.list_and_watch(Empty {}).await.unwrap().into_inner();
    // Exclusive: one ID.
    let l = wait_list(&mut stream, "the first list", |_| true).await;
    assert_eq!(l, [("davinci0".to_string(), "Healthy".to_string())]);

    // Unreachable (its socket moved away): Unhealthy; reachable again: Healthy.
    let away = d.dir().join("moved-away");
    rename(&d.socket(0), &away);
    let l = wait_list(&mut stream, "Unhealthy", |l| !all_healthy(l)).await;
    assert_eq!(l, [("davinci0".to_string(), "Unhealthy".to_string())]);
    plugin.wait_log("davinci0: Unhealthy: ", 1).await;
    rename(&away, &d.socket(0));
    let l = wait_list(&mut stream, "Healthy again", all_healthy).await;
    assert_eq!(l.len(), 1);
    plugin.wait_log("davinci0: Healthy", 2).await;
    // A healthy device is allocated.
    c.allocate(allocate_req(&[&["davinci0"]])).await.unwrap();

    // The daemon stops: Unhealthy, and Allocate says why.
    d.terminate();
    wait_list(&mut stream, "Unhealthy after the daemon stopped", |l| {
        !all_healthy(l)
    })
    .await;
    let e = c
        .allocate(allocate_req(&[&["davinci0"]]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("davinci0 is unhealthy"), "{e:?}");

    // A new daemon in the same directory, two devices, shared: Healthy again, davinci1
    // added, both as 2 replicas.
    let again = OwnMockd::start(d.dir(), &["--devices", "2", "--share-mode", "shared"]);
    let l = wait_list(&mut stream, "both devices shared and healthy", |l| {
        l.len() == 4 && all_healthy(l)
    })
    .await;
    assert_eq!(
        ids(&l),
        ["davinci0::0", "davinci0::1", "davinci1::0", "davinci1::1"]
    );
    plugin.wait_log("davinci1: found at mock:", 1).await;
    drop(again);
    drop(plugin);
}

/// At or above its shutdown temperature a device is Unhealthy; above slowdown, Healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_at_its_shutdown_temperature_is_unhealthy() {
    // Idle at 30 + 0.15 × 60 = 39 °C: above a shutdown of 38 °C, below the other's 45.
    let hot = Mockd::start(&["--sensors", "slowdown=35,shutdown=38"]).unwrap();
    let warm = Mockd::start(&["--sensors", "slowdown=35,shutdown=45"]).unwrap();
    for (d, health) in [(&hot, "Unhealthy"), (&warm, "Healthy")] {
        let k8s = TempDir::new("thermal");
        let mut kubelet = Kubelet::start(&k8s.0, None).await;
        let plugin = Plugin::start(&k8s.0, &["--device", &d.path(0)]);
        let r = kubelet.registration().await;
        let mut c = client(&k8s.0.join(&r.endpoint)).await;
        let mut stream = c.list_and_watch(Empty {}).await.unwrap().into_inner();
        let l = wait_list(&mut stream, health, |l| l.iter().all(|(_, h)| h == health)).await;
        assert_eq!(l, [("davinci0".to_string(), health.to_string())]);
        if health == "Unhealthy" {
            plugin
                .wait_log("at or above its shutdown temperature 38", 1)
                .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_again_after_a_kubelet_restart_and_stops_on_sigterm() {
    let d = Mockd::start(&[]).unwrap();
    let k8s = TempDir::new("restart");
    let mut kubelet = Kubelet::start(&k8s.0, None).await;
    let mut plugin = Plugin::start(&k8s.0, &["--device", &d.path(0)]);
    let first = kubelet.registration().await;
    let sock = k8s.0.join(&first.endpoint);
    let mut c = client(&sock).await;
    let mut stream = c.list_and_watch(Empty {}).await.unwrap().into_inner();
    wait_list(&mut stream, "the first list", all_healthy).await;

    // The kubelet restarts: its socket and the plugin's are removed, a new kubelet serves a
    // new socket.
    kubelet.stop(true).await;
    assert!(!sock.exists());
    plugin.wait_log("waiting for the kubelet", 1).await;
    let mut kubelet = Kubelet::start(&k8s.0, None).await;
    let again = kubelet.registration().await;
    assert_eq!(again, first);
    assert!(sock.exists(), "the plugin's socket was created again");
    plugin.wait_log("registration 2)", 1).await;
    // The old stream ended with the old server; the new socket serves.
    let mut c = client(&sock).await;
    let mut stream = c.list_and_watch(Empty {}).await.unwrap().into_inner();
    let l = wait_list(&mut stream, "the list after the restart", all_healthy).await;
    assert_eq!(ids(&l), ["davinci0"]);

    // Only the kubelet socket re-created, at once (no poll sees it missing): the plugin's
    // server stays, and it registers again.
    kubelet.stop(false).await;
    let mut kubelet = Kubelet::start(&k8s.0, None).await;
    assert_eq!(kubelet.registration().await, first);
    plugin.wait_log("registration 3)", 1).await;
    assert_eq!(
        plugin.log().matches("serving the DevicePlugin API").count(),
        2
    );
    c.get_device_plugin_options(Empty {}).await.unwrap();

    // SIGTERM: exit 0, the socket removed.
    plugin.sigterm();
    let st = plugin.exit_status().await;
    assert_eq!(st.code(), Some(0), "{}", plugin.log());
    assert!(!sock.exists(), "the plugin's socket is removed");
    assert!(plugin.log().contains("SIGTERM: stopping"));
    drop(kubelet);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_registration_stops_the_plugin_with_the_kubelets_reason() {
    let d = Mockd::start(&[]).unwrap();
    let k8s = TempDir::new("refused");
    let mut kubelet = Kubelet::start(
        &k8s.0,
        Some("the resource example.com/npu is already registered"),
    )
    .await;
    let mut plugin = Plugin::start(
        &k8s.0,
        &["--device", &d.path(0), "--resource", "example.com/npu"],
    );
    assert_eq!(
        kubelet.registration().await.resource_name,
        "example.com/npu"
    );
    let st = plugin.exit_status().await;
    assert_eq!(st.code(), Some(1));
    let log = plugin.log();
    assert!(
        log.contains("refused the registration of example.com/npu: InvalidArgument: the resource example.com/npu is already registered"),
        "{log}"
    );
    assert!(!k8s.0.join("davinci.sock").exists());
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin("testbin-davinci-device-plugin"))
        .args(args)
        .output()
        .expect("run davinci-device-plugin");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_command_line_says_what_is_wrong() {
    let d = Mockd::start(&["--devices", "2", "--share-mode", "shared"]).unwrap();
    let dir = d.dir().to_str().unwrap();
    let tmp = TempDir::new("cli");

    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--kubelet-dir"), "{out}");

    let missing = tmp.0.join("no-kubelet");
    let (code, _, err) = run(&[
        "--socket-dir",
        dir,
        "--kubelet-dir",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "the kubelet's device-plugin directory {} does not exist",
            missing.display()
        )),
        "{err}"
    );

    let empty = tmp.0.join("no-sockets");
    let (code, _, err) = run(&["--socket-dir", empty.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "no devices found: {}/davinci<N>.sock (--socket-dir): no such directory",
            empty.display()
        )),
        "{err}"
    );

    let (code, _, err) = run(&["--replicas", "0"]);
    assert_eq!(code, 2, "{err}");

    // --list: what would be advertised, without a kubelet.
    let (code, out, err) = run(&["--list", "--socket-dir", dir, "--replicas", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("davinci.ai/npu: 4 IDs (4 healthy) from 2 devices\n"),
        "{out}"
    );
    // Named after each device's UUID (the default), or its index.
    let u1 = davinci_shim::Control::open(&d.path(1))
        .unwrap()
        .identity()
        .unwrap()
        .uuid_string();
    assert!(out.contains(&format!("{u1}::0, {u1}::1")), "{out}");
    let (_, out, _) = run(&[
        "--list",
        "--socket-dir",
        dir,
        "--replicas",
        "2",
        "--device-ids",
        "index",
    ]);
    assert!(out.contains("davinci1::0, davinci1::1"), "{out}");
    let (code, out, err) = run(&["--list", "--json", "--device", &d.path(1)]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["devices"].as_array().unwrap().len(), 1);
    assert_eq!(v["devices"][0]["share_mode"], "shared");
    assert_eq!(
        v["devices"][0]["ids"],
        serde_json::json!((0..4).map(|k| format!("{u1}::{k}")).collect::<Vec<_>>())
    );
}

/// The default IDs are named after the device's UUID (issue 24): `UUID::0` while exclusive,
/// `UUID::0`, `UUID::1` shared, the same after the daemon restarts, so the ID a pod holds
/// stays valid; it still allocates the device.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uuid_ids_survive_a_sharing_change_and_a_daemon_restart() {
    let dir = TempDir::new("uuid-devs");
    let daemon = OwnMockd::start(&dir.0, &[]);
    let path = format!("mock:{}", dir.0.join("davinci0.sock").display());
    let ctl = davinci_shim::Control::open(&path).unwrap();
    let uuid = ctl.identity().unwrap().uuid_string().to_string();
    let k8s = TempDir::new("uuid");
    let mut kubelet = Kubelet::start(&k8s.0, None).await;
    let _plugin = Plugin::start(
        &k8s.0,
        &[
            "--socket-dir",
            dir.0.to_str().unwrap(),
            "--replicas",
            "2",
            "--device-ids",
            "uuid",
        ],
    );
    let r = kubelet.registration().await;
    let mut c = client(&k8s.0.join(&r.endpoint)).await;
    let mut stream = c.list_and_watch(Empty {}).await.unwrap().into_inner();
    let l = wait_list(&mut stream, "the first list", all_healthy).await;
    assert_eq!(ids(&l), [format!("{uuid}::0")]);
    ctl.set_share_mode(davinci_shim::ShareMode::Shared).unwrap();
    let l = wait_list(&mut stream, "two replicas", |l| l.len() == 2).await;
    assert_eq!(ids(&l), [format!("{uuid}::0"), format!("{uuid}::1")]);
    drop(ctl);
    // The daemon restarts: the same IDs, and the ID a pod holds allocates the device again
    // (the list may not change at all when the restart falls between two health checks).
    drop(daemon);
    let _again = OwnMockd::start(&dir.0, &["--share-mode", "shared"]);
    let held = format!("{uuid}::1");
    let mut resp = None;
    for _ in 0..100 {
        match c.allocate(allocate_req(&[&[&held]])).await {
            Ok(r) => {
                resp = Some(r.into_inner());
                break;
            }
            Err(e) if e.code() == tonic::Code::FailedPrecondition => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    let resp = resp.expect("the device is healthy again after the restart");
    assert_eq!(resp.container_responses[0].envs["DAVINCI_DEVICE"], path);
    let mut fresh = c.list_and_watch(Empty {}).await.unwrap().into_inner();
    let l = wait_list(&mut fresh, "the list after the restart", |_| true).await;
    assert_eq!(ids(&l), [format!("{uuid}::0"), format!("{uuid}::1")]);
}
