//! The daemon: the first health checks, then the health loop ([`health`]) beside the
//! DevicePlugin server ([`service`]) and its registration with the kubelet, again after each
//! kubelet restart ([`registration`]), until SIGTERM or SIGINT. What the tasks share is in
//! [`state`]; health by the devices' event logs in [`events`].
#![forbid(unsafe_code)]

mod events;
mod health;
mod registration;
mod service;
mod state;

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tracing::info;

use crate::alloc::Allocations;
use crate::exit::Failure;
use crate::inventory::Inventory;
use crate::status::Registration;

pub use events::EventPolicy;
pub(crate) use health::check_all;
use health::health_round;
use registration::kubelet_loop;
pub use registration::VERSION;
pub use service::options;
use state::{lock, Shared};
pub use state::{Config, Source, KUBELET_SOCKET};

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
    let mut checks = HashMap::new();
    health_round(&shared, &mut checks).await;
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
                health_round(&shared, &mut checks).await;
            }
        })
    };

    let result = kubelet_loop(&shared, &mut sigterm, &mut sigint).await;
    health.abort();
    result
}
