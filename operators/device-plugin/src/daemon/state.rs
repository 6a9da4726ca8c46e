//! What the daemon's tasks share: its configuration ([`Config`], from the command line), the
//! inventory, the allocations, the registration state, the list sent to every ListAndWatch
//! stream, and the status file they all rewrite.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tracing::warn;

use super::events::EventPolicy;
use crate::alloc::{AllocOptions, Allocations};
use crate::api;
use crate::inventory::Inventory;
use crate::status::{self, Registration};

/// The kubelet's registration socket, in the kubelet directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";

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
    /// Which device events make a device unhealthy (`--unhealthy-codes`, `--unhealthy-hold`).
    pub events: EventPolicy,
}

impl Config {
    pub(super) fn plugin_socket(&self) -> PathBuf {
        self.kubelet_dir.join(&self.socket_name)
    }
    pub(super) fn kubelet_socket(&self) -> PathBuf {
        self.kubelet_dir.join(KUBELET_SOCKET)
    }
}

/// What the daemon's tasks share.
pub(super) struct Shared {
    pub(super) cfg: Config,
    pub(super) inv: Mutex<Inventory>,
    pub(super) allocs: Mutex<Allocations>,
    pub(super) reg: Mutex<Registration>,
    pub(super) list: watch::Sender<Arc<Vec<api::Device>>>,
    pub(super) watchers: AtomicUsize,
    /// Held while the status file is written (the health loop and the RPCs both write it).
    pub(super) status_file: Mutex<()>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Rewrites `--status-file`, if there is one; a failure is logged, not fatal.
    pub(super) fn write_status(&self) {
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
    pub(super) fn publish(&self) {
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
