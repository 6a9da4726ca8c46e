//! Allocate, GetPreferredAllocation, and the record of what was allocated.
//!
//! **Allocate.** For each container, every device its IDs name (in the order first named,
//! each once, however many of its replicas are named):
//!
//! * a kernel device is given as a device node: `DeviceSpec { /dev/davinciN -> /dev/davinciN, rw }`;
//! * a `davinci-mockd` device as a bind mount of its socket, at the same path in the
//!   container (`Mount { /run/davinci/davinci0.sock -> same }`);
//!
//! and the environment says which device to use:
//!
//! * [`DEVICE_ENV`] (`DAVINCI_DEVICE`): the first device's path as the shim takes it
//!   (`/dev/davinci0`, `mock:/run/davinci/davinci0.sock`), so a program that opens the
//!   default device gets it;
//! * [`VISIBLE_DEVICES_ENV`] (`DAVINCI_VISIBLE_DEVICES`): every device's path, in the same
//!   order, separated by commas.
//!
//! With CDI (`--cdi`) each device is named as a CDI device instead of a node or a mount
//! (`davinci.ai/npu=davinci0`; the node must have a CDI spec for that kind, such as
//! `davinci-smi cdi generate` writes), and the environment is the same. The names are given
//! twice, for kubelets and runtimes of every age:
//!
//! * in `cdi_devices`, which kubelets pass to the runtime from 1.28 (with the
//!   `DevicePluginCDIDevices` feature gate; on by default from 1.29);
//! * in one CDI container annotation ([`cdi_annotation_key`]:
//!   `cdi.k8s.io/davinci-device-plugin_davinciN`, N the first device; the value the names
//!   comma-separated), which every kubelet passes on and CDI-enabled runtimes read
//!   (containerd 1.7, CRI-O 1.23). A runtime given both injects each device once.
//!
//! **GetPreferredAllocation.** The kubelet sends the IDs still available; a device's
//! allocated replicas are those of its IDs that are not. The IDs that must be included come
//! first, then each further ID is taken from the device with the fewest allocated replicas
//! (counting the ones just chosen), ties going to the healthier, then the lower-numbered
//! device, then the lower replica: replicas are spread over the least-loaded devices.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use tonic::Status;

use crate::api;
use crate::ids::DeviceId;
use crate::inventory::{DeviceState, Inventory, Kind};

/// The variable naming the device to open (the shim's `DAVINCI_DEVICE`).
pub const DEVICE_ENV: &str = davinci_shim::DEVICE_ENV;

/// The variable listing every device allocated to the container, comma-separated.
pub const VISIBLE_DEVICES_ENV: &str = davinci_ops::cdi::VISIBLE_ENV;

/// The prefix of CDI's container annotations (CDI's `pkg/cdi/annotations.go`).
pub const CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// The plugin name in this plugin's CDI annotation keys.
pub const CDI_PLUGIN_NAME: &str = "davinci-device-plugin";

/// The key of the CDI annotation of an allocation whose first device is `first`
/// (`davinciN`): `cdi.k8s.io/davinci-device-plugin_davinciN`. By CDI's rules for a key's
/// name (`AnnotationKey`: at most 63 characters, alphanumerics, `-`, `_`, `.`, starting and
/// ending alphanumeric), which `davinci-device-plugin_davinci4294967295` keeps. Unique in
/// a container: each container gets one allocation per resource, and another plugin has
/// another name (or other devices).
pub fn cdi_annotation_key(first: &str) -> String {
    format!("{CDI_ANNOTATION_PREFIX}{CDI_PLUGIN_NAME}_{first}")
}

/// Most containers in one request.
pub const MAX_CONTAINERS: usize = 256;

/// Most IDs in one container's request (Allocate), or available in one container's
/// GetPreferredAllocation request.
pub const MAX_IDS: usize = 65_536;

/// Why a request is refused; becomes the gRPC status of the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The request is wrong (an unknown ID, no IDs, too many).
    InvalidArgument(String),
    /// The request is right but cannot be served now (an unhealthy device).
    FailedPrecondition(String),
}

impl Refusal {
    /// What is wrong.
    pub fn message(&self) -> &str {
        match self {
            Refusal::InvalidArgument(m) | Refusal::FailedPrecondition(m) => m,
        }
    }

    /// The same refusal, saying which container it is about.
    fn in_container(self, i: usize) -> Refusal {
        match self {
            Refusal::InvalidArgument(m) => Refusal::InvalidArgument(format!("container {i}: {m}")),
            Refusal::FailedPrecondition(m) => {
                Refusal::FailedPrecondition(format!("container {i}: {m}"))
            }
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl From<Refusal> for Status {
    fn from(r: Refusal) -> Status {
        match r {
            Refusal::InvalidArgument(m) => Status::invalid_argument(m),
            Refusal::FailedPrecondition(m) => Status::failed_precondition(m),
        }
    }
}

/// How allocations are given to containers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllocOptions {
    /// `Some(kind)`: name each device as the CDI device `KIND=davinciN` instead of giving
    /// its node or socket.
    pub cdi_kind: Option<String>,
}

/// One container's allocation: the response, and the IDs it was for.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerAllocation {
    /// What the kubelet gives the container.
    pub response: api::ContainerAllocateResponse,
    /// The IDs requested, parsed, in request order.
    pub ids: Vec<DeviceId>,
    /// The devices, each once, in the order first named.
    pub devices: Vec<u32>,
}

/// The response for one container's IDs.
///
/// # Errors
/// `InvalidArgument` for no IDs, too many, or an ID that names no known device (the message
/// says which); `FailedPrecondition` when a device is unhealthy (and why).
pub fn container_allocation(
    inv: &Inventory,
    ids: &[String],
    opts: &AllocOptions,
) -> Result<ContainerAllocation, Refusal> {
    if ids.is_empty() {
        return Err(Refusal::InvalidArgument(
            "the request names no device ID".into(),
        ));
    }
    if ids.len() > MAX_IDS {
        return Err(Refusal::InvalidArgument(format!(
            "the request names {} device IDs; at most {MAX_IDS} are accepted",
            ids.len()
        )));
    }
    let mut parsed = Vec::with_capacity(ids.len());
    let mut devices: Vec<&DeviceState> = Vec::new();
    for id in ids {
        let (pid, d) = inv.resolve(id).map_err(|e| Refusal::InvalidArgument(e.0))?;
        parsed.push(pid);
        if !devices.iter().any(|x| x.index == d.index) {
            devices.push(d);
        }
    }
    if let Some(d) = devices.iter().find(|d| !d.healthy) {
        return Err(Refusal::FailedPrecondition(format!(
            "{} is unhealthy: {}",
            d.name(),
            d.reason.as_deref().unwrap_or("unknown reason")
        )));
    }
    let mut r = api::ContainerAllocateResponse::default();
    for d in &devices {
        match (&opts.cdi_kind, d.kind()) {
            (Some(kind), _) => r.cdi_devices.push(api::CdiDevice {
                name: format!("{kind}={}", d.name()),
            }),
            (None, Kind::Kernel) => r.devices.push(api::DeviceSpec {
                container_path: d.host_path().to_string(),
                host_path: d.host_path().to_string(),
                permissions: "rw".into(),
            }),
            (None, Kind::Mock) => r.mounts.push(api::Mount {
                container_path: d.host_path().to_string(),
                host_path: d.host_path().to_string(),
                read_only: false,
            }),
        }
    }
    if let Some(first) = devices.first() {
        r.envs.insert(DEVICE_ENV.to_string(), first.path.clone());
        if !r.cdi_devices.is_empty() {
            let names: Vec<&str> = r.cdi_devices.iter().map(|c| c.name.as_str()).collect();
            r.annotations
                .insert(cdi_annotation_key(&first.name()), names.join(","));
        }
    }
    let all: Vec<&str> = devices.iter().map(|d| d.path.as_str()).collect();
    r.envs
        .insert(VISIBLE_DEVICES_ENV.to_string(), all.join(","));
    Ok(ContainerAllocation {
        response: r,
        ids: parsed,
        devices: devices.iter().map(|d| d.index).collect(),
    })
}

/// The response for a whole Allocate request: one [`container_allocation`] per container,
/// in order; the first container that cannot be served fails the request (nothing is
/// allocated), and the message says which container.
///
/// # Errors
/// As [`container_allocation`]; `InvalidArgument` for no containers or too many.
pub fn allocate(
    inv: &Inventory,
    req: &api::AllocateRequest,
    opts: &AllocOptions,
) -> Result<Vec<ContainerAllocation>, Refusal> {
    check_containers(req.container_requests.len())?;
    req.container_requests
        .iter()
        .enumerate()
        .map(|(i, c)| {
            container_allocation(inv, &c.devices_ids, opts).map_err(|r| r.in_container(i))
        })
        .collect()
}

fn check_containers(n: usize) -> Result<(), Refusal> {
    if n == 0 {
        return Err(Refusal::InvalidArgument(
            "the request has no container".into(),
        ));
    }
    if n > MAX_CONTAINERS {
        return Err(Refusal::InvalidArgument(format!(
            "the request has {n} containers; at most {MAX_CONTAINERS} are accepted"
        )));
    }
    Ok(())
}

/// The preferred IDs for one container (see the module documentation).
///
/// # Errors
/// `InvalidArgument`: a negative size, more IDs than allowed, an ID that names no known
/// device, or more IDs that must be included than the size.
pub fn preferred(
    inv: &Inventory,
    req: &api::ContainerPreferredAllocationRequest,
) -> Result<Vec<String>, Refusal> {
    let size = usize::try_from(req.allocation_size).map_err(|_| {
        Refusal::InvalidArgument(format!(
            "allocation_size {} is negative",
            req.allocation_size
        ))
    })?;
    if req.available_device_i_ds.len() > MAX_IDS || req.must_include_device_i_ds.len() > MAX_IDS {
        return Err(Refusal::InvalidArgument(format!(
            "the request names more than {MAX_IDS} device IDs"
        )));
    }
    let resolve = |ids: &[String]| -> Result<Vec<DeviceId>, Refusal> {
        ids.iter()
            .map(|id| {
                inv.resolve(id)
                    .map(|(p, _)| p)
                    .map_err(|e| Refusal::InvalidArgument(e.0))
            })
            .collect()
    };
    let available = resolve(&req.available_device_i_ds)?;
    let must = resolve(&req.must_include_device_i_ds)?;
    let must: Vec<DeviceId> = dedup(must);
    if must.len() > size {
        return Err(Refusal::InvalidArgument(format!(
            "must_include names {} device IDs, more than allocation_size {size}",
            must.len()
        )));
    }
    let advertised: BTreeMap<u32, usize> = inv
        .devices()
        .map(|d| (d.index, d.ids(inv.replicas()).len()))
        .collect();
    let unhealthy: BTreeSet<u32> = inv
        .devices()
        .filter(|d| !d.healthy)
        .map(|d| d.index)
        .collect();
    Ok(choose(&available, &must, size, &advertised, &unhealthy)
        .into_iter()
        .map(|id| inv.id_string(id))
        .collect())
}

fn dedup(ids: Vec<DeviceId>) -> Vec<DeviceId> {
    let mut seen = BTreeSet::new();
    ids.into_iter().filter(|id| seen.insert(*id)).collect()
}

/// The choice itself: `must` first, then up to `size` in all from `available`, each from the
/// device with the fewest allocated replicas (its advertised count, from `advertised`,
/// less its available ones, plus those chosen), healthy before `unhealthy`, then by device
/// and replica.
pub fn choose(
    available: &[DeviceId],
    must: &[DeviceId],
    size: usize,
    advertised: &BTreeMap<u32, usize>,
    unhealthy: &BTreeSet<u32>,
) -> Vec<DeviceId> {
    let available = dedup(available.to_vec());
    let mut free: HashMap<u32, usize> = HashMap::new();
    for id in &available {
        *free.entry(id.device).or_default() += 1;
    }
    let mut used: HashMap<u32, usize> = HashMap::new();
    for (dev, n) in &free {
        let total = advertised.get(dev).copied().unwrap_or(0);
        used.insert(*dev, total.saturating_sub(*n));
    }
    let mut out: Vec<DeviceId> = Vec::with_capacity(size.min(available.len() + must.len()));
    for id in must {
        out.push(*id);
        *used.entry(id.device).or_default() += 1;
    }
    let mut candidates: BTreeSet<DeviceId> = available
        .into_iter()
        .filter(|id| !must.contains(id))
        .collect();
    while out.len() < size {
        let best = candidates.iter().copied().min_by_key(|id| {
            (
                unhealthy.contains(&id.device),
                used.get(&id.device).copied().unwrap_or(0),
                *id,
            )
        });
        let Some(best) = best else { break };
        candidates.remove(&best);
        *used.entry(best.device).or_default() += 1;
        out.push(best);
    }
    out
}

/// The response to GetPreferredAllocation.
///
/// # Errors
/// As [`preferred`], with the container named; `InvalidArgument` for no containers or too
/// many.
pub fn preferred_allocation(
    inv: &Inventory,
    req: &api::PreferredAllocationRequest,
) -> Result<api::PreferredAllocationResponse, Refusal> {
    check_containers(req.container_requests.len())?;
    let container_responses = req
        .container_requests
        .iter()
        .enumerate()
        .map(|(i, c)| {
            preferred(inv, c)
                .map(|device_i_ds| api::ContainerPreferredAllocationResponse { device_i_ds })
                .map_err(|r| r.in_container(i))
        })
        .collect::<Result<_, _>>()?;
    Ok(api::PreferredAllocationResponse {
        container_responses,
    })
}

/// What has been allocated, per device: the IDs held now (allocated, and not yet seen
/// available again in a GetPreferredAllocation request) and how many allocations were made
/// since the plugin started. The kubelet does not tell a plugin when a container ends; an
/// ID it offers as available again is taken as released.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocations {
    held: BTreeSet<DeviceId>,
    totals: BTreeMap<u32, u64>,
}

impl Allocations {
    /// Records an allocation of `ids`.
    pub fn record(&mut self, ids: &[DeviceId]) {
        for id in ids {
            self.held.insert(*id);
            *self.totals.entry(id.device).or_default() += 1;
        }
    }

    /// The kubelet offered `available`: those are not held. Returns the IDs released.
    pub fn release_available(&mut self, available: &[DeviceId]) -> Vec<DeviceId> {
        available
            .iter()
            .filter(|id| self.held.remove(id))
            .copied()
            .collect()
    }

    /// The IDs of device `device` held now.
    pub fn held_on(&self, device: u32) -> Vec<DeviceId> {
        self.held
            .iter()
            .filter(|id| id.device == device)
            .copied()
            .collect()
    }

    /// Allocations of device `device`'s IDs since the start.
    pub fn total(&self, device: u32) -> u64 {
        self.totals.get(&device).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
