//! The health checks: each device by a control open and GET_INFO, at most one check in flight
//! per device, within a timeout; and a round of them (after a new search, unless the devices
//! are fixed) whose changes are logged, published and written to the status file.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{info, warn};

use super::events::{EventPolicy, EventWatch};
use super::state::{lock, Shared, Source};
use crate::inventory::{Change, Probe, Unfit};

/// What the checks of one device keep between rounds: whether one is in flight, and its
/// place in the device's event log.
#[derive(Default)]
pub(crate) struct DeviceChecks {
    inflight: Arc<AtomicBool>,
    events: Arc<Mutex<EventWatch>>,
}

/// Checks one device: a control open, GET_INFO and (ABI 1.4) GET_IDENTITY: its UUID names
/// its IDs, its NUMA node (else sysfs's) is its topology; then whether it is fit for work
/// ([`fitness`]). A device that answers but is unfit is unhealthy with what it said.
fn check(path: &str, policy: &EventPolicy, watch: &Mutex<EventWatch>) -> Result<Probe, Unfit> {
    let ctl = davinci_shim::Control::open(path).map_err(|e| Unfit::from(e.to_string()))?;
    let info = ctl.info().map_err(|e| Unfit::from(e.to_string()))?;
    let mode = davinci_uapi::ShareMode::from_u32(info.share_mode)
        .ok_or_else(|| format!("GET_INFO: unknown share mode {}", info.share_mode))?;
    let identity = if info.features.contains(davinci_uapi::Features::IDENTITY) {
        Some(ctl.identity().map_err(|e| e.to_string())?)
    } else {
        None
    };
    let numa_node = identity
        .and_then(|i| (i.numa_node >= 0).then_some(i64::from(i.numa_node)))
        .or_else(|| crate::topology::numa_node(path));
    let probe = Probe {
        mode,
        clients: info.clients,
        uuid: identity.map(|i| i.uuid).filter(|u| *u != [0; 16]),
        numa_node,
    };
    fitness(&ctl, &info, policy, watch).map_err(|reason| Unfit {
        probe: Some(probe),
        reason,
    })?;
    Ok(probe)
}

/// Whether a device that answered is fit for work: its health word and sensors
/// ([`verdict`]; ABI 1.3 and 1.5), and the events of its log (ABI 1.5) `policy` names.
fn fitness(
    ctl: &davinci_shim::Control,
    info: &davinci_uapi::DeviceInfo,
    policy: &EventPolicy,
    watch: &Mutex<EventWatch>,
) -> Result<(), String> {
    if info.features.contains(davinci_uapi::Features::COUNTERS) {
        let counters = ctl.counters().map_err(|e| e.to_string())?;
        let sensors = if info.features.contains(davinci_uapi::Features::SENSORS) {
            Some(ctl.sensors().map_err(|e| e.to_string())?)
        } else {
            None
        };
        verdict(Some(&counters), sensors.as_ref())?;
    }
    if !policy.codes.is_empty()
        && info
            .features
            .contains(davinci_uapi::Features::DEVICE_EVENTS)
    {
        let batch = ctl.read_events(0).map_err(|e| e.to_string())?;
        lock(watch).verdict(policy, &batch)?;
    }
    Ok(())
}

/// Whether a device that answers is fit for new work: not while it reports an error that
/// stops work (GET_COUNTERS health `Alarm` or `Critical`), nor at or above its shutdown
/// temperature (GET_SENSORS, ABI 1.5). A thermal or power throttle leaves it healthy: it
/// works, slower.
pub(crate) fn verdict(
    counters: Option<&davinci_uapi::DeviceCounters>,
    sensors: Option<&davinci_uapi::DeviceSensors>,
) -> Result<(), String> {
    if let Some(k) = counters.filter(|k| k.health >= davinci_uapi::HEALTH_ALARM) {
        return Err(format!(
            "the device reports health {} (GET_COUNTERS)",
            davinci_uapi::health_name(k.health).unwrap_or("unknown")
        ));
    }
    if let Some(s) = sensors.filter(|s| s.temperature_mc >= s.shutdown_temperature_mc) {
        return Err(format!(
            "the die is at {} °C, at or above its shutdown temperature {} °C (GET_SENSORS)",
            s.temperature_c(),
            (s.shutdown_temperature_mc + 500).div_euclid(1000)
        ));
    }
    Ok(())
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
    policy: &EventPolicy,
    devices: &mut HashMap<u32, DeviceChecks>,
) -> Vec<(u32, Result<Probe, Unfit>)> {
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for (index, path) in paths {
        let d = devices.entry(index).or_default();
        let (flag, watch) = (Arc::clone(&d.inflight), Arc::clone(&d.events));
        if flag.swap(true, Ordering::SeqCst) {
            out.push((
                index,
                Err(Unfit::from(
                    "the previous health check has not returned (the device does not answer)",
                )),
            ));
            continue;
        }
        let guard = InFlight(flag);
        let policy = policy.clone();
        let handle = tokio::task::spawn_blocking(move || {
            let _guard = guard;
            check(&path, &policy, &watch)
        });
        pending.push((index, handle));
    }
    let deadline = tokio::time::Instant::now() + timeout;
    for (index, handle) in pending {
        let r = match tokio::time::timeout_at(deadline, handle).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(Unfit::from(format!("the health check failed: {e}"))),
            Err(_) => Err(Unfit::from(format!(
                "no answer to the health check within {}ms",
                timeout.as_millis()
            ))),
        };
        out.push((index, r));
    }
    out
}

/// The devices a search finds, as (N, path); entries whose name gives no N are skipped.
/// A socket the search leaves out as untrusted is logged once (per path and reason).
fn search(socket_dir: Option<&Path>) -> Vec<(u32, String)> {
    static WARNED: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let d = davinci_ops::discover::Discovery::from_env();
    let found = davinci_ops::discover::discover(&[], socket_dir, &d);
    for w in davinci_ops::discover::ignored_warnings(&found) {
        let mut seen = WARNED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.len() < 1024 && seen.insert(w.clone()) {
            warn!("{w}");
        }
    }
    found
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
pub(super) async fn health_round(shared: &Arc<Shared>, devices: &mut HashMap<u32, DeviceChecks>) {
    let mut changes = Vec::new();
    if let Source::Search(dir) = &shared.cfg.source {
        let found = search(dir.as_deref());
        changes.extend(lock(&shared.inv).discovered(&found));
    }
    let paths: Vec<(u32, String)> = lock(&shared.inv)
        .devices()
        .map(|d| (d.index, d.path.clone()))
        .collect();
    let results = check_all(paths, shared.cfg.probe_timeout, &shared.cfg.events, devices).await;
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

#[cfg(test)]
mod tests {
    use super::verdict;
    use davinci_uapi::{DeviceCounters, DeviceSensors, HEALTH_ALARM, HEALTH_WARNING};

    #[test]
    fn health_words_and_the_shutdown_temperature_decide() {
        let warm = DeviceSensors {
            temperature_mc: 96_000,
            slowdown_temperature_mc: 95_000,
            shutdown_temperature_mc: 105_000,
            throttle: davinci_uapi::THROTTLE_THERMAL,
            ..DeviceSensors::default()
        };
        let warning = DeviceCounters {
            health: HEALTH_WARNING,
            ..DeviceCounters::default()
        };
        assert_eq!(
            verdict(Some(&warning), Some(&warm)),
            Ok(()),
            "throttled still works"
        );
        assert_eq!(verdict(None, None), Ok(()));
        let hot = DeviceSensors {
            temperature_mc: 105_000,
            ..warm
        };
        let e = verdict(None, Some(&hot)).unwrap_err();
        assert!(
            e.contains("105 °C, at or above its shutdown temperature 105 °C"),
            "{e}"
        );
        let alarm = DeviceCounters {
            health: HEALTH_ALARM,
            ..DeviceCounters::default()
        };
        assert!(verdict(Some(&alarm), None)
            .unwrap_err()
            .contains("health Alarm"));
    }
}
