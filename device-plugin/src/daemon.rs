//! The daemon: the health loop, the DevicePlugin server, the registration with the kubelet
//! and its restarts, and shutdown.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::{debug, error, info, warn};

use crate::alloc::{self, AllocOptions, Allocations};
use crate::api;
use crate::api::device_plugin_server::{DevicePlugin, DevicePluginServer};
use crate::api::registration_client::RegistrationClient;
use crate::inventory::{Change, Inventory, Probe};
use crate::status::{self, Registration};
use crate::{transport, Failure};

/// The API version registered.
pub const VERSION: &str = "v1beta1";

/// The kubelet's registration socket, in the kubelet directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";

/// Most ListAndWatch streams served at once (the kubelet needs one).
const MAX_WATCHERS: usize = 16;

/// Largest request accepted.
const MAX_MESSAGE: usize = 4 << 20;

/// How long a connection to, and the Register call on, the kubelet may take.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest pause between registration attempts while the kubelet does not answer.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How long the server may take to stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(3);

/// Which devices: the fixed `--device` list, or a search repeated at every health check.
#[derive(Debug, Clone)]
pub enum Source {
    /// `--device PATH`s: these and no others.
    Fixed,
    /// A search (`--socket-dir`, or the default places).
    Search(Option<PathBuf>),
}

/// Everything the daemon needs from the command line.
#[derive(Debug, Clone)]
pub struct Config {
    /// The resource.
    pub resource: String,
    /// The kubelet directory.
    pub kubelet_dir: PathBuf,
    /// This plugin's socket name in it.
    pub socket_name: String,
    /// Health-check period.
    pub health_interval: Duration,
    /// Health-check timeout.
    pub probe_timeout: Duration,
    /// Kubelet-socket check period.
    pub kubelet_poll: Duration,
    /// How allocations are given.
    pub alloc: AllocOptions,
    /// `--status-file`.
    pub status_file: Option<PathBuf>,
    /// Where devices come from after the start.
    pub source: Source,
}

impl Config {
    fn plugin_socket(&self) -> PathBuf {
        self.kubelet_dir.join(&self.socket_name)
    }
    fn kubelet_socket(&self) -> PathBuf {
        self.kubelet_dir.join(KUBELET_SOCKET)
    }
}

/// What the daemon's tasks share.
struct Shared {
    cfg: Config,
    inv: Mutex<Inventory>,
    allocs: Mutex<Allocations>,
    reg: Mutex<Registration>,
    list: watch::Sender<Arc<Vec<api::Device>>>,
    watchers: AtomicUsize,
    /// Held while the status file is written (the health loop and the RPCs both write it).
    status_file: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Rewrites `--status-file`, if there is one; a failure is logged, not fatal.
    fn write_status(&self) {
        let Some(path) = &self.cfg.status_file else {
            return;
        };
        let _writing = lock(&self.status_file);
        let report = {
            let inv = lock(&self.inv);
            let allocs = lock(&self.allocs);
            let reg = lock(&self.reg).clone();
            status::report(&self.cfg.resource, &inv, Some(&allocs), Some(reg))
        };
        if let Err(e) = report.write_to(path) {
            warn!("cannot write the status file {}: {e}", path.display());
        }
    }

    /// Sends the list to every ListAndWatch stream if it changed.
    fn publish(&self) {
        let list = lock(&self.inv).advertised();
        self.list.send_if_modified(|cur| {
            if **cur == list {
                false
            } else {
                *cur = Arc::new(list);
                true
            }
        });
    }
}

/// The DevicePlugin service of one server (one socket).
struct Plugin {
    shared: Arc<Shared>,
    /// Becomes `true` when this server stops: its ListAndWatch streams end.
    stop: watch::Receiver<bool>,
}

/// The options registered and returned by GetDevicePluginOptions.
pub fn options() -> api::DevicePluginOptions {
    api::DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}

#[tonic::async_trait]
impl DevicePlugin for Plugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<api::Empty>,
    ) -> Result<Response<api::DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = ReceiverStream<Result<api::ListAndWatchResponse, Status>>;

    async fn list_and_watch(
        &self,
        _: Request<api::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let shared = Arc::clone(&self.shared);
        if shared.watchers.fetch_add(1, Ordering::SeqCst) >= MAX_WATCHERS {
            shared.watchers.fetch_sub(1, Ordering::SeqCst);
            return Err(Status::resource_exhausted(format!(
                "{MAX_WATCHERS} ListAndWatch streams are open already"
            )));
        }
        let mut list = shared.list.subscribe();
        let mut stop = self.stop.clone();
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                let devices = list.borrow_and_update().as_ref().clone();
                let n = devices.len();
                if tx
                    .send(Ok(api::ListAndWatchResponse { devices }))
                    .await
                    .is_err()
                {
                    break;
                }
                debug!("ListAndWatch: sent {n} device IDs");
                tokio::select! {
                    r = list.changed() => if r.is_err() { break },
                    _ = stop.wait_for(|s| *s) => break,
                    () = tx.closed() => break,
                }
            }
            shared.watchers.fetch_sub(1, Ordering::SeqCst);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<api::PreferredAllocationRequest>,
    ) -> Result<Response<api::PreferredAllocationResponse>, Status> {
        let req = request.into_inner();
        let (resp, available) = {
            let inv = lock(&self.shared.inv);
            let resp = alloc::preferred_allocation(&inv, &req).map_err(|r| {
                warn!("GetPreferredAllocation refused: {r}");
                Status::from(r)
            })?;
            let available: Vec<_> = req
                .container_requests
                .iter()
                .flat_map(|c| c.available_device_i_ds.iter())
                .filter_map(|id| inv.resolve(id).ok().map(|(p, _)| p))
                .collect();
            (resp, available)
        };
        let released = lock(&self.shared.allocs).release_available(&available);
        for (c, r) in req.container_requests.iter().zip(&resp.container_responses) {
            info!(
                "GetPreferredAllocation: {} of {} available (must include {:?}): prefer {}",
                c.allocation_size,
                c.available_device_i_ds.len(),
                c.must_include_device_i_ds,
                r.device_i_ds.join(", ")
            );
        }
        if !released.is_empty() {
            let ids: Vec<String> = released.iter().map(ToString::to_string).collect();
            info!("released (offered as available again): {}", ids.join(", "));
            self.shared.write_status();
        }
        Ok(Response::new(resp))
    }

    async fn allocate(
        &self,
        request: Request<api::AllocateRequest>,
    ) -> Result<Response<api::AllocateResponse>, Status> {
        let req = request.into_inner();
        let done = {
            let inv = lock(&self.shared.inv);
            alloc::allocate(&inv, &req, &self.shared.cfg.alloc).map_err(|r| {
                warn!("Allocate refused: {r}");
                Status::from(r)
            })?
        };
        {
            let mut allocs = lock(&self.shared.allocs);
            for (i, c) in done.iter().enumerate() {
                allocs.record(&c.ids);
                let ids: Vec<String> = c.ids.iter().map(ToString::to_string).collect();
                let held: Vec<String> = c
                    .devices
                    .iter()
                    .map(|d| {
                        let h: Vec<String> =
                            allocs.held_on(*d).iter().map(ToString::to_string).collect();
                        format!("davinci{d} holds {} ({})", h.len(), h.join(", "))
                    })
                    .collect();
                info!(
                    "Allocate: container {i}: {} -> {}={}; {}",
                    ids.join(", "),
                    alloc::DEVICE_ENV,
                    c.response
                        .envs
                        .get(alloc::DEVICE_ENV)
                        .map_or("", String::as_str),
                    held.join("; ")
                );
            }
        }
        self.shared.write_status();
        Ok(Response::new(api::AllocateResponse {
            container_responses: done.into_iter().map(|c| c.response).collect(),
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<api::PreStartContainerRequest>,
    ) -> Result<Response<api::PreStartContainerResponse>, Status> {
        Ok(Response::new(api::PreStartContainerResponse {}))
    }
}

/// Device, inode and change time of a file: how a re-created socket is told from the old
/// one, even when the new file gets the old inode number.
type Ident = (u64, u64, i64, i64);

fn ident(path: &Path) -> Option<Ident> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// A running server on this plugin's socket.
struct Served {
    ident: Ident,
    stop: watch::Sender<bool>,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

/// Creates this plugin's socket (replacing a stale socket left by an earlier run) and serves
/// the DevicePlugin service on it.
fn serve(shared: &Arc<Shared>) -> Result<Served, String> {
    let path = shared.cfg.plugin_socket();
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_socket() => {
            std::fs::remove_file(&path)
                .map_err(|e| format!("cannot remove the old socket {}: {e}", path.display()))?;
        }
        Ok(_) => {
            return Err(format!(
                "{} exists and is not a socket; remove it or choose another --socket-name",
                path.display()
            ))
        }
        Err(_) => {}
    }
    let incoming = transport::listen(&path)
        .map_err(|e| format!("cannot create the socket {}: {e}", path.display()))?;
    let ident = ident(&path).ok_or_else(|| format!("{} vanished", path.display()))?;
    let (stop, stop_rx) = watch::channel(false);
    let (shutdown, shutdown_rx) = oneshot::channel::<()>();
    let svc = DevicePluginServer::new(Plugin {
        shared: Arc::clone(shared),
        stop: stop_rx,
    })
    .max_decoding_message_size(MAX_MESSAGE);
    let task = tokio::spawn(
        tonic::transport::Server::builder()
            .concurrency_limit_per_connection(64)
            .max_concurrent_streams(128)
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = shutdown_rx.await;
            }),
    );
    Ok(Served {
        ident,
        stop,
        shutdown,
        task,
    })
}

/// Stops a server; removes its socket if `remove` and the socket is still the one it made.
async fn unserve(path: &Path, s: Served, remove: bool) {
    let _ = s.stop.send(true);
    let _ = s.shutdown.send(());
    let mut task = s.task;
    match tokio::time::timeout(STOP_TIMEOUT, &mut task).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => warn!("the server on {} ended with: {e}", path.display()),
        Ok(Err(e)) => warn!("the server on {} failed: {e}", path.display()),
        Err(_) => {
            warn!("the server on {} did not stop in time", path.display());
            task.abort();
        }
    }
    if remove && ident(path) == Some(s.ident) {
        if let Err(e) = std::fs::remove_file(path) {
            warn!("cannot remove {}: {e}", path.display());
        }
    }
}

/// Why a registration did not happen.
enum RegisterError {
    /// The kubelet could not be reached or did not answer: try again.
    Retry(String),
    /// The kubelet answered no.
    Refused(String),
}

/// An error and its sources: `transport error: Connection refused (os error 111)`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let c_s = c.to_string();
        if !s.ends_with(&c_s) {
            s.push_str(": ");
            s.push_str(&c_s);
        }
        cur = c.source();
    }
    s
}

async fn register(cfg: &Config) -> Result<(), RegisterError> {
    let sock = cfg.kubelet_socket();
    let channel = transport::connect(&sock, REGISTER_TIMEOUT)
        .await
        .map_err(|e| RegisterError::Retry(format!("cannot connect: {}", chain(&e))))?;
    let mut client = RegistrationClient::new(channel);
    let req = api::RegisterRequest {
        version: VERSION.into(),
        endpoint: cfg.socket_name.clone(),
        resource_name: cfg.resource.clone(),
        options: Some(options()),
    };
    match tokio::time::timeout(REGISTER_TIMEOUT, client.register(req)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(s)) => match s.code() {
            tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::DeadlineExceeded => {
                Err(RegisterError::Retry(format!(
                    "{:?}: {}",
                    s.code(),
                    s.message()
                )))
            }
            code => Err(RegisterError::Refused(format!("{code:?}: {}", s.message()))),
        },
        Err(_) => Err(RegisterError::Retry(format!(
            "no answer within {}s",
            REGISTER_TIMEOUT.as_secs()
        ))),
    }
}

/// Checks one device: a control open and GET_INFO.
fn check(path: &str) -> Result<Probe, String> {
    let ctl = davinci_shim::Control::open(path).map_err(|e| e.to_string())?;
    let info = ctl.info().map_err(|e| e.to_string())?;
    let mode = davinci_uapi::ShareMode::from_u32(info.share_mode)
        .ok_or_else(|| format!("GET_INFO: unknown share mode {}", info.share_mode))?;
    Ok(Probe {
        mode,
        clients: info.clients,
    })
}

/// Resets a device's in-flight flag when its check ends, however it ends.
struct InFlight(Arc<AtomicBool>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// One health check of every known device, at most one check in flight per device: a device
/// whose previous check has not returned is unhealthy without a new one.
pub(crate) async fn check_all(
    paths: Vec<(u32, String)>,
    timeout: Duration,
    inflight: &mut HashMap<u32, Arc<AtomicBool>>,
) -> Vec<(u32, Result<Probe, String>)> {
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for (index, path) in paths {
        let flag = Arc::clone(inflight.entry(index).or_default());
        if flag.swap(true, Ordering::SeqCst) {
            out.push((
                index,
                Err(
                    "the previous health check has not returned (the device does not answer)"
                        .to_string(),
                ),
            ));
            continue;
        }
        let guard = InFlight(flag);
        let handle = tokio::task::spawn_blocking(move || {
            let _guard = guard;
            check(&path)
        });
        pending.push((index, handle));
    }
    let deadline = tokio::time::Instant::now() + timeout;
    for (index, handle) in pending {
        let r = match tokio::time::timeout_at(deadline, handle).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(format!("the health check failed: {e}")),
            Err(_) => Err(format!(
                "no answer to the health check within {}ms",
                timeout.as_millis()
            )),
        };
        out.push((index, r));
    }
    out
}

/// The devices a search finds, as (N, path); entries whose name gives no N are skipped.
fn search(socket_dir: Option<&Path>) -> Vec<(u32, String)> {
    let d = davinci_ops::discover::Discovery::from_env();
    davinci_ops::discover::discover(&[], socket_dir, &d)
        .entries
        .into_iter()
        .filter_map(|e| Some((e.id?, e.path)))
        .collect()
}

fn log_changes(changes: &[Change]) {
    for c in changes {
        if c.is_warning() {
            warn!("{c}");
        } else {
            info!("{c}");
        }
    }
}

/// One round: the search (unless fixed), the checks, the list.
async fn health_round(shared: &Arc<Shared>, inflight: &mut HashMap<u32, Arc<AtomicBool>>) {
    let mut changes = Vec::new();
    if let Source::Search(dir) = &shared.cfg.source {
        let found = search(dir.as_deref());
        changes.extend(lock(&shared.inv).discovered(&found));
    }
    let paths: Vec<(u32, String)> = lock(&shared.inv)
        .devices()
        .map(|d| (d.index, d.path.clone()))
        .collect();
    let results = check_all(paths, shared.cfg.probe_timeout, inflight).await;
    {
        let mut inv = lock(&shared.inv);
        for (index, r) in results {
            changes.extend(inv.checked(index, r));
        }
    }
    log_changes(&changes);
    shared.publish();
    if !changes.is_empty() {
        shared.write_status();
    }
}

/// Runs the daemon until SIGTERM/SIGINT (`Ok`) or a fatal error. `inv` holds the devices
/// found at the start.
pub async fn run(cfg: Config, inv: Inventory) -> Result<(), Failure> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| Failure(format!("cannot catch SIGTERM: {e}")))?;
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| Failure(format!("cannot catch SIGINT: {e}")))?;

    let (list, _) = watch::channel(Arc::new(inv.advertised()));
    let shared = Arc::new(Shared {
        reg: Mutex::new(Registration {
            kubelet_socket: cfg.kubelet_socket().display().to_string(),
            plugin_socket: cfg.plugin_socket().display().to_string(),
            ..Registration::default()
        }),
        cfg,
        inv: Mutex::new(inv),
        allocs: Mutex::new(Allocations::default()),
        list,
        watchers: AtomicUsize::new(0),
        status_file: Mutex::new(()),
    });

    // The first checks before anything is advertised.
    let mut inflight = HashMap::new();
    health_round(&shared, &mut inflight).await;
    shared.write_status();
    {
        let inv = lock(&shared.inv);
        let n = inv.advertised().len();
        info!(
            "advertising {} as {n} device ID{} from {} device{}",
            shared.cfg.resource,
            if n == 1 { "" } else { "s" },
            inv.len(),
            if inv.len() == 1 { "" } else { "s" }
        );
    }
    let health = {
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(shared.cfg.health_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                health_round(&shared, &mut inflight).await;
            }
        })
    };

    let result = kubelet_loop(&shared, &mut sigterm, &mut sigint).await;
    health.abort();
    result
}

/// Serves and registers, again after each kubelet restart, until a signal.
async fn kubelet_loop(
    shared: &Arc<Shared>,
    sigterm: &mut tokio::signal::unix::Signal,
    sigint: &mut tokio::signal::unix::Signal,
) -> Result<(), Failure> {
    let cfg = &shared.cfg;
    let plugin_socket = cfg.plugin_socket();
    let kubelet_socket = cfg.kubelet_socket();
    let mut served: Option<Served> = None;
    let mut registered_with: Option<Ident> = None;
    let mut next_attempt = Instant::now();
    let mut failures: u32 = 0;
    let mut waiting_said = false;
    let mut tick = tokio::time::interval(cfg.kubelet_poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let result = loop {
        tokio::select! {
            _ = sigterm.recv() => { info!("SIGTERM: stopping"); break Ok(()); }
            _ = sigint.recv() => { info!("SIGINT: stopping"); break Ok(()); }
            _ = tick.tick() => {}
        }
        // Our socket: still ours? (The kubelet removes plugin sockets when it starts.)
        let ours = served
            .as_ref()
            .is_some_and(|s| ident(&plugin_socket) == Some(s.ident) && !s.task.is_finished());
        if !ours {
            if let Some(s) = served.take() {
                warn!(
                    "{} was removed or its server ended (a kubelet restart removes plugin \
                     sockets): serving it again",
                    plugin_socket.display()
                );
                unserve(&plugin_socket, s, false).await;
            }
            match serve(shared) {
                Ok(s) => {
                    info!(
                        "serving the DevicePlugin API on {}",
                        plugin_socket.display()
                    );
                    served = Some(s);
                    if registered_with.take().is_some() {
                        lock(&shared.reg).registered = false;
                    }
                }
                Err(e) => break Err(Failure(e)),
            }
        }
        let Some(kubelet) = ident(&kubelet_socket) else {
            if registered_with.take().is_some() || !waiting_said {
                warn!(
                    "waiting for the kubelet: {} does not exist",
                    kubelet_socket.display()
                );
                waiting_said = true;
                lock(&shared.reg).registered = false;
                shared.write_status();
            }
            continue;
        };
        if registered_with == Some(kubelet) || Instant::now() < next_attempt {
            continue;
        }
        if registered_with.is_some() {
            info!(
                "{} was re-created (the kubelet restarted): registering again",
                kubelet_socket.display()
            );
            lock(&shared.reg).registered = false;
        }
        registered_with = None;
        let outcome = tokio::select! {
            r = register(cfg) => r,
            _ = sigterm.recv() => { info!("SIGTERM: stopping"); break Ok(()); }
            _ = sigint.recv() => { info!("SIGINT: stopping"); break Ok(()); }
        };
        match outcome {
            Ok(()) => {
                registered_with = Some(kubelet);
                failures = 0;
                waiting_said = false;
                let n = {
                    let mut reg = lock(&shared.reg);
                    reg.registered = true;
                    reg.registrations += 1;
                    reg.last_registered_unix = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .ok()
                        .map(|d| d.as_secs());
                    reg.registrations
                };
                info!(
                    "registered {} with the kubelet at {} (endpoint {}, API {VERSION}, \
                     registration {n})",
                    cfg.resource,
                    kubelet_socket.display(),
                    cfg.socket_name
                );
                shared.write_status();
            }
            Err(RegisterError::Retry(why)) => {
                failures = failures.saturating_add(1);
                let backoff = cfg
                    .kubelet_poll
                    .saturating_mul(1u32 << failures.min(10))
                    .min(MAX_BACKOFF);
                warn!(
                    "cannot register with the kubelet at {}: {why}; trying again in {}ms",
                    kubelet_socket.display(),
                    backoff.as_millis()
                );
                next_attempt = Instant::now() + backoff;
            }
            Err(RegisterError::Refused(why)) => {
                break Err(Failure(format!(
                    "the kubelet at {} refused the registration of {}: {why}",
                    kubelet_socket.display(),
                    cfg.resource
                )));
            }
        }
    };
    if let Err(e) = &result {
        error!("{}", e.0);
    }
    if let Some(s) = served.take() {
        unserve(&plugin_socket, s, true).await;
        info!("removed {}", plugin_socket.display());
    }
    {
        lock(&shared.reg).registered = false;
    }
    shared.write_status();
    result
}
