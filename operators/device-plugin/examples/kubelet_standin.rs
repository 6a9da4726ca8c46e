//! A stand-in for the kubelet's side of the device-plugin API, to try
//! `davinci-device-plugin` without a cluster: it serves the Registration service on
//! `DIR/kubelet.sock`, and for each plugin that registers, does what the kubelet's device
//! manager does: GetDevicePluginOptions, ListAndWatch (each list printed), and with
//! `--allocate N` one pod's worth of GetPreferredAllocation and Allocate for N IDs from the
//! healthy ones, printing the response.
//!
//! ```sh
//! cargo run -p davinci-device-plugin --example kubelet_standin -- --dir /tmp/k8s --allocate 1
//! davinci-device-plugin --kubelet-dir /tmp/k8s --socket-dir /tmp/davinci   # another shell
//! ```
//!
//! It runs until SIGINT/SIGTERM (or `--exit-after-allocate`). Not a kubelet: no pods, no
//! checkpoints, one allocation.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use davinci_device_plugin::api::device_plugin_client::DevicePluginClient;
use davinci_device_plugin::api::registration_server::{Registration, RegistrationServer};
use davinci_device_plugin::api::{
    AllocateRequest, ContainerAllocateRequest, ContainerPreferredAllocationRequest, Empty,
    PreferredAllocationRequest, RegisterRequest,
};
use davinci_device_plugin::transport;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

/// kubelet-standin: the kubelet's side of the device-plugin API, for trying a plugin
#[derive(Debug, Parser)]
struct Args {
    /// The directory to serve kubelet.sock in (the plugin's --kubelet-dir)
    #[arg(long)]
    dir: PathBuf,
    /// After the first list, allocate this many IDs (GetPreferredAllocation, then Allocate)
    #[arg(long, value_name = "N")]
    allocate: Option<i32>,
    /// Exit once the allocation is done
    #[arg(long, requires = "allocate")]
    exit_after_allocate: bool,
}

struct Standin(mpsc::UnboundedSender<RegisterRequest>);

#[tonic::async_trait]
impl Registration for Standin {
    async fn register(&self, r: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let r = r.into_inner();
        println!(
            "kubelet: Register: version {}, endpoint {}, resource {}, options {:?}",
            r.version, r.endpoint, r.resource_name, r.options
        );
        let _ = self.0.send(r);
        Ok(Response::new(Empty {}))
    }
}

/// What the kubelet does with a registered plugin; returns when the stream ends (or, with
/// `exit_after`, once the allocation is done).
async fn follow(
    dir: &Path,
    r: RegisterRequest,
    allocate: Option<i32>,
    exit_after: bool,
) -> Result<(), String> {
    let sock = dir.join(&r.endpoint);
    let channel = transport::connect(&sock, Duration::from_secs(5))
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", sock.display()))?;
    let mut c = DevicePluginClient::new(channel);
    let o = c
        .get_device_plugin_options(Empty {})
        .await
        .map_err(|e| format!("GetDevicePluginOptions: {e}"))?;
    println!("kubelet: GetDevicePluginOptions: {:?}", o.into_inner());
    let mut stream = c
        .list_and_watch(Empty {})
        .await
        .map_err(|e| format!("ListAndWatch: {e}"))?
        .into_inner();
    let mut allocated = allocate.is_none();
    while let Some(list) = stream
        .message()
        .await
        .map_err(|e| format!("ListAndWatch: {e}"))?
    {
        let shown: Vec<String> = list
            .devices
            .iter()
            .map(|d| format!("{} {}", d.id, d.health))
            .collect();
        println!("kubelet: ListAndWatch: {}", shown.join(", "));
        if allocated {
            continue;
        }
        allocated = true;
        let healthy: Vec<String> = list
            .devices
            .iter()
            .filter(|d| d.health == "Healthy")
            .map(|d| d.id.clone())
            .collect();
        let size = allocate.unwrap_or(1);
        let p = c
            .get_preferred_allocation(PreferredAllocationRequest {
                container_requests: vec![ContainerPreferredAllocationRequest {
                    available_device_i_ds: healthy,
                    must_include_device_i_ds: vec![],
                    allocation_size: size,
                }],
            })
            .await
            .map_err(|e| format!("GetPreferredAllocation: {e}"))?
            .into_inner();
        let ids = p
            .container_responses
            .first()
            .map(|c| c.device_i_ds.clone())
            .unwrap_or_default();
        println!("kubelet: GetPreferredAllocation({size}): {ids:?}");
        let a = c
            .allocate(AllocateRequest {
                container_requests: vec![ContainerAllocateRequest { devices_ids: ids }],
            })
            .await
            .map_err(|e| format!("Allocate: {e}"))?
            .into_inner();
        for (i, r) in a.container_responses.iter().enumerate() {
            let mut envs: Vec<_> = r.envs.iter().collect();
            envs.sort();
            println!("kubelet: Allocate: container {i}: envs {envs:?}");
            for m in &r.mounts {
                println!(
                    "kubelet: Allocate: container {i}: mount {} -> {} (read-only {})",
                    m.host_path, m.container_path, m.read_only
                );
            }
            for d in &r.devices {
                println!(
                    "kubelet: Allocate: container {i}: device {} -> {} ({})",
                    d.host_path, d.container_path, d.permissions
                );
            }
            for d in &r.cdi_devices {
                println!("kubelet: Allocate: container {i}: CDI device {}", d.name);
            }
            let mut annotations: Vec<_> = r.annotations.iter().collect();
            annotations.sort();
            for (k, v) in annotations {
                println!("kubelet: Allocate: container {i}: annotation {k}={v}");
            }
        }
        if exit_after {
            return Ok(());
        }
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let sock = args.dir.join("kubelet.sock");
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| format!("cannot create {}: {e}", args.dir.display()))?;
    let _ = std::fs::remove_file(&sock);
    let incoming = transport::listen(&sock)
        .map_err(|e| format!("cannot listen on {}: {e}", sock.display()))?;
    let (tx, mut registered) = mpsc::unbounded_channel();
    let server = tonic::transport::Server::builder()
        .add_service(RegistrationServer::new(Standin(tx)))
        .serve_with_incoming(incoming);
    println!("kubelet: serving {}", sock.display());
    let dir = args.dir.clone();
    let allocate = args.allocate;
    let exit_after = args.exit_after_allocate;
    let follower = async move {
        while let Some(r) = registered.recv().await {
            match follow(&dir, r, allocate, exit_after).await {
                Ok(()) if exit_after => return,
                Ok(()) => {}
                Err(e) => eprintln!("kubelet: {e}"),
            }
        }
    };
    let stop = async {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut t), Ok(mut i)) => {
                tokio::select! { _ = t.recv() => {}, _ = i.recv() => {} }
            }
            _ => std::future::pending().await,
        }
    };
    tokio::select! {
        r = server => r.map_err(|e| format!("the server failed: {e}"))?,
        () = follower => {}
        () = stop => {}
    }
    let _ = std::fs::remove_file(&sock);
    Ok(())
}
