//! The DevicePlugin gRPC service the kubelet calls (GetDevicePluginOptions, ListAndWatch,
//! GetPreferredAllocation, Allocate, PreStartContainer), and the server that serves it on
//! this plugin's socket in the kubelet directory: started, and stopped with its socket
//! removed only if it is still the one it made.
#![forbid(unsafe_code)]

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::{debug, info, warn};

use super::state::{lock, Shared};
use crate::alloc;
use crate::api;
use crate::api::device_plugin_server::{DevicePlugin, DevicePluginServer};
use crate::ids::device_name;
use crate::transport;

/// Most ListAndWatch streams served at once (the kubelet needs one).
const MAX_WATCHERS: usize = 16;

/// Largest request accepted.
const MAX_MESSAGE: usize = 4 << 20;

/// How long the server may take to stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(3);

/// The DevicePlugin service of one server (one socket).
pub(super) struct Plugin {
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
                        format!("{} holds {} ({})", device_name(*d), h.len(), h.join(", "))
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
pub(super) type Ident = (u64, u64, i64, i64);

pub(super) fn ident(path: &Path) -> Option<Ident> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// A running server on this plugin's socket.
pub(super) struct Served {
    pub(super) ident: Ident,
    pub(super) stop: watch::Sender<bool>,
    pub(super) shutdown: oneshot::Sender<()>,
    pub(super) task: JoinHandle<Result<(), tonic::transport::Error>>,
}

/// Creates this plugin's socket (replacing a stale socket left by an earlier run) and serves
/// the DevicePlugin service on it.
pub(super) fn serve(shared: &Arc<Shared>) -> Result<Served, String> {
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
pub(super) async fn unserve(path: &Path, s: Served, remove: bool) {
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
