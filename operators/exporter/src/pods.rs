//! Pod attribution: which pod, namespace and container the kubelet gave each device to,
//! from the kubelet's pod-resources API (`v1.PodResourcesLister/List` on its Unix socket,
//! `/var/lib/kubelet/pod-resources/kubelet.sock` by default), as DCGM-exporter does.
//!
//! The device plugin (operators/device-plugin/) advertises a device as `davinci<N>` (exclusive) or
//! `davinci<N>::<k>` (replica k of a shared device); IDs based on the device's UUID
//! (`<uuid>`, `<uuid>::<k>`) are matched too, by the UUID GET_IDENTITY reports. Only the
//! IDs of the configured resource (`davinci.ai/npu` by default) count.
//!
//! No socket there (not a Kubernetes node, or the directory not mounted) means no
//! attribution and nothing logged; a socket that does not answer is logged once per change
//! of the error. Everything from the reply is bounded: at most [`MAX_ALLOCATIONS`] device
//! IDs, names cut to [`MAX_NAME`] bytes, at most [`MAX_PODS_PER_DEVICE`] containers per
//! device, a reply of at most 16 MiB, an answer within the timeout.
#![forbid(unsafe_code)]

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Endpoint, Uri};

pub use crate::sample::PodRef;
use crate::sample::Sample;

/// The kubelet's pod-resources API (the part the exporter uses), generated from
/// `proto/podresources/v1/api.proto` by `build.rs`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod api {
    tonic::include_proto!("v1");
}

/// The kubelet's pod-resources socket.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// The device plugin's resource name (its `--resource` default).
pub const DEFAULT_RESOURCE: &str = "davinci.ai/npu";
/// Most device IDs taken from one reply.
pub const MAX_ALLOCATIONS: usize = 4096;
/// Most bytes of a pod, namespace or container name (Kubernetes names are at most 253).
pub const MAX_NAME: usize = 253;
/// Most containers attributed one device.
pub const MAX_PODS_PER_DEVICE: usize = 256;
/// Most bytes of a reply.
const MAX_REPLY: usize = 16 << 20;

/// One device ID the kubelet gave a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The device plugin's ID (`davinci0`, `davinci0::1`, `<uuid>::1`).
    pub device_id: String,
    /// Who holds it.
    pub holder: PodRef,
}

/// A client of the kubelet's pod-resources API.
pub struct PodResources {
    socket: PathBuf,
    resource: String,
    timeout: Duration,
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for PodResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodResources")
            .field("socket", &self.socket)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

impl PodResources {
    /// A client of the socket at `socket`, taking the IDs of `resource`, each call answered
    /// within `timeout`.
    ///
    /// # Errors
    /// The runtime for the calls cannot be made (out of threads or descriptors).
    pub fn new(socket: &Path, resource: &str, timeout: Duration) -> io::Result<PodResources> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(PodResources {
            socket: socket.to_path_buf(),
            resource: resource.to_string(),
            timeout,
            rt,
        })
    }

    /// The device IDs of the resource that the kubelet gave containers now; empty when
    /// there is no socket.
    ///
    /// # Errors
    /// The socket is there but the call failed or timed out: why.
    pub fn list(&self) -> Result<Vec<Allocation>, String> {
        match std::fs::symlink_metadata(&self.socket) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            _ => {}
        }
        let socket = self.socket.clone();
        let call = async move {
            let channel =
                Endpoint::from_static("http://localhost")
                    .connect_with_connector(tower::service_fn(move |_: Uri| {
                        let socket = socket.clone();
                        async move {
                            Ok::<_, io::Error>(TokioIo::new(UnixStream::connect(socket).await?))
                        }
                    }))
                    .await
                    .map_err(|e| format!("cannot connect: {}", error_chain(&e)))?;
            let mut client =
                api::pod_resources_lister_client::PodResourcesListerClient::new(channel)
                    .max_decoding_message_size(MAX_REPLY);
            client
                .list(api::ListPodResourcesRequest {})
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| format!("List failed: {}: {}", s.code(), s.message()))
        };
        let reply = self
            .rt
            .block_on(async { tokio::time::timeout(self.timeout, call).await })
            .map_err(|_| format!("no answer within {} ms", self.timeout.as_millis()))?;
        let reply = reply.map_err(|e| format!("{}: {e}", self.socket.display()))?;
        Ok(allocations(&reply, &self.resource))
    }
}

/// An error and its sources, joined by `: ` (tonic's transport errors say little at the top).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// `s` as a label value: control, bidi and format characters escaped as every tool does
/// ([`davinci_ops::text`]), at most [`MAX_NAME`] bytes (cut at a character boundary, never
/// inside an escape).
fn bounded(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let piece: String = if davinci_ops::text::needs_escape(c) {
            c.escape_default().collect()
        } else {
            c.to_string()
        };
        if out.len() + piece.len() > MAX_NAME {
            break;
        }
        out.push_str(&piece);
    }
    out
}

/// The device IDs of `resource` in a `List` reply, at most [`MAX_ALLOCATIONS`].
pub fn allocations(reply: &api::ListPodResourcesResponse, resource: &str) -> Vec<Allocation> {
    let mut out = Vec::new();
    for p in &reply.pod_resources {
        for c in &p.containers {
            for d in c.devices.iter().filter(|d| d.resource_name == resource) {
                for id in &d.device_ids {
                    if out.len() >= MAX_ALLOCATIONS {
                        return out;
                    }
                    out.push(Allocation {
                        device_id: bounded(id),
                        holder: PodRef {
                            pod: bounded(&p.name),
                            namespace: bounded(&p.namespace),
                            container: bounded(&c.name),
                        },
                    });
                }
            }
        }
    }
    out
}

/// What a device ID names: device N (`davinciN`, `davinciN::k`) or a UUID (`<uuid>`,
/// `<uuid>::k`, lowercased).
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Index(String),
    Uuid(String),
}

fn target(id: &str) -> Option<Target> {
    let base = id.split("::").next().unwrap_or("");
    if let Some(n) = base.strip_prefix("davinci") {
        let ok = !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
            && (n == "0" || !n.starts_with('0'))
            && n.parse::<u32>().is_ok();
        return ok.then(|| Target::Index(n.to_string()));
    }
    let is_uuid = base.len() == 36
        && base.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        });
    is_uuid.then(|| Target::Uuid(base.to_ascii_lowercase()))
}

/// Gives each sample the containers holding an ID of its device (sorted, without
/// duplicates, at most [`MAX_PODS_PER_DEVICE`]).
pub fn attribute(samples: &mut [Sample], allocs: &[Allocation]) {
    let uuids: Vec<Option<String>> = samples
        .iter()
        .map(|s| {
            s.outcome
                .as_ref()
                .ok()
                .and_then(|r| r.identity.as_ref())
                .map(|i| i.uuid_string().to_string())
        })
        .collect();
    for a in allocs {
        let Some(t) = target(&a.device_id) else {
            continue;
        };
        for (s, uuid) in samples.iter_mut().zip(&uuids) {
            let hit = match &t {
                Target::Index(n) => &s.device == n,
                Target::Uuid(u) => uuid.as_deref() == Some(u.as_str()),
            };
            if hit && !s.pods.contains(&a.holder) && s.pods.len() < MAX_PODS_PER_DEVICE {
                s.pods.push(a.holder.clone());
            }
        }
    }
    for s in samples {
        s.pods.sort();
    }
}

#[cfg(test)]
mod tests;
