//! Registration with the kubelet, and again after each kubelet restart: the loop that keeps
//! this plugin's socket served (a restarting kubelet removes it) and the resource registered
//! (a re-created kubelet socket is a new kubelet), backing off while the kubelet does not
//! answer, until a signal or a refusal.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tracing::{error, info, warn};

use super::service::{ident, options, serve, unserve, Ident, Served};
use super::state::{lock, Config, Shared};
use crate::api;
use crate::api::registration_client::RegistrationClient;
use crate::exit::Failure;
use crate::transport;

/// The API version registered.
pub const VERSION: &str = "v1beta1";

/// How long a connection to, and the Register call on, the kubelet may take.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest pause between registration attempts while the kubelet does not answer.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

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

/// Serves and registers, again after each kubelet restart, until a signal.
pub(super) async fn kubelet_loop(
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
