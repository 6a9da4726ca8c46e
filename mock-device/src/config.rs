//! What a mock device is made with: [`MockConfig`] (its id, memory, pollers and their
//! timing, an injected fault) and [`local_open_params`], the open parameters of the calling
//! process.
#![forbid(unsafe_code)]

use std::time::Duration;

use davinci_driver_core::{InjectRule, OpenParams, Quota, Role, SensorConfig, CONTAINER_LEN};
use davinci_uapi::DeviceIdentity;

/// Configuration of a mock device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MockConfig {
    /// N of the device name (`davinciN`).
    pub device_id: u32,
    /// Device memory in bytes. Backed sparsely: only pages written cost memory.
    pub memory_size: u64,
    /// Per-client memory limit in bytes (0 = the whole device).
    pub client_memory_limit: u64,
    /// Poller threads that serve the device's streams (like io_uring's SQPOLL threads): each
    /// stream is served by one, the least loaded when it was created. More start only when
    /// every poller serves `FUTEX_WAITV_MAX - 1` streams.
    pub pollers: usize,
    /// Descriptors a poller runs per stream per pass (and per lock acquisition).
    pub run_budget: u32,
    /// Longest a poller sleeps on its doorbell before it looks at the ring anyway (a safety
    /// net; the doorbell protocol does not rely on it).
    pub doorbell_timeout: Duration,
    /// Longest a poller with an event-blocked stream sleeps before it looks again (also a safety net).
    pub event_timeout: Duration,
    /// How long an idle poller keeps looking (spinning, then yielding) before it arms
    /// NEED_WAKEUP and sleeps: while it looks, the host rings no doorbell (like SQPOLL's
    /// `sq_thread_idle`). Longer = fewer doorbells and more CPU burnt while idle. The spin
    /// ends early when the poller is preempted while it looks (its involuntary context
    /// switches grow): then another runnable thread (perhaps the host it waits for) needs the
    /// core, and spinning would only delay it.
    pub idle_spin: Duration,
    /// A fault the streams it selects are armed with from their creation ([`InjectRule`]:
    /// an [`Inject`](crate::Inject) converts to a rule for every stream; `None`: a healthy device). For
    /// testing a runtime's error handling; [`MockDevice::inject`](crate::MockDevice::inject)
    /// changes it later, per stream or for the device.
    pub inject: Option<InjectRule>,
    /// What one tenant may hold of each table while the device is shared
    /// ([`Quota::FAIR`] by default).
    pub quota: Quota,
    /// Tenants the device keeps a share for (`DeviceCore::set_tenant_slots`, 1 to
    /// [`MAX_TENANT_SLOTS`](davinci_driver_core::MAX_TENANT_SLOTS); outside that range the
    /// device keeps [`DEFAULT_TENANT_SLOTS`](davinci_driver_core::DEFAULT_TENANT_SLOTS)).
    pub tenant_slots: u32,
    /// The UUID GET_IDENTITY reports; `None` (the default): [`derived_uuid`] of the host's
    /// machine id and `device_id`, the same across restarts and reboots of the host.
    pub uuid: Option<[u8; 16]>,
    /// The model, chip name and bus id GET_IDENTITY presents ([`Presented::DEFAULT`]:
    /// `davinci_mock`, `mock0`, on no bus; `davinci-mockd --model --chip-name --bus-id`).
    pub presented: Presented,
    /// The sensor model's parameters (GET_SENSORS; `davinci-mockd --sensors`).
    pub sensors: SensorConfig,
}

/// What GET_IDENTITY presents a mock device as, so an operator's CI can exercise tooling
/// that keys on a model, a chip or a bus id: the fields as GET_IDENTITY carries them
/// (printable ASCII, NUL-padded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Presented {
    /// GET_IDENTITY's `model`.
    pub model: [u8; 32],
    /// GET_IDENTITY's `chip_name`.
    pub chip_name: [u8; 12],
    /// GET_IDENTITY's `bus_id` (all zero: on no bus).
    pub bus_id: [u8; 16],
}

impl Presented {
    /// The default: model `davinci_mock`, chip `mock0` (names of `[A-Za-z0-9_]` only, which
    /// every parser's `\w+` takes), on no bus.
    pub const DEFAULT: Presented = Presented {
        model: *b"davinci_mock\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
        chip_name: *b"mock0\0\0\0\0\0\0\0",
        bus_id: [0; 16],
    };

    /// Presenting as `model` and `chip` (cut to 31 and 11 bytes), at `bus_id` (`""`: on no
    /// bus; cut to 15 bytes).
    pub fn new(model: &str, chip: &str, bus_id: &str) -> Presented {
        Presented {
            model: DeviceIdentity::text_field(model),
            chip_name: DeviceIdentity::text_field(chip),
            bus_id: DeviceIdentity::text_field(bus_id),
        }
    }
}

/// The UUID a mock device `device_id` reports on this host unless told another: derived
/// (driver-core's `derive_uuid`) from the host's machine id (`/etc/machine-id`, else
/// `/var/lib/dbus/machine-id`, else the host name) and `device_id`, so it stays the same
/// across share-mode changes, daemon restarts and reboots.
pub fn derived_uuid(device_id: u32) -> [u8; 16] {
    let host = [
        "/etc/machine-id",
        "/var/lib/dbus/machine-id",
        "/proc/sys/kernel/hostname",
    ]
    .iter()
    .find_map(|p| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    })
    .unwrap_or_default();
    uuid_from_seed(&host, device_id)
}

/// The UUID of mock device `device_id` derived from `seed` instead of the machine id (what
/// `davinci-mockd --uuid-seed` gives: two daemons on one host, or a container without the
/// host's machine id).
pub fn uuid_from_seed(seed: &str, device_id: u32) -> [u8; 16] {
    davinci_driver_core::derive_uuid(&[b"davinci-mock", seed.as_bytes(), &device_id.to_le_bytes()])
}

impl MockConfig {
    /// Most poller threads the device runs at once: `pollers`, or as many as its most
    /// streams need when each serves `FUTEX_WAITV_MAX - 1` of them.
    pub fn most_pollers(&self) -> usize {
        let per = davinci_shm::FUTEX_WAITV_MAX - 1;
        self.pollers
            .max(1)
            .max(davinci_driver_core::MAX_STREAMS.div_ceil(per))
    }
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            device_id: 0,
            memory_size: 256 << 20,
            client_memory_limit: 0,
            pollers: 1,
            run_budget: 64,
            doorbell_timeout: Duration::from_millis(50),
            event_timeout: Duration::from_millis(50),
            idle_spin: Duration::from_millis(2),
            inject: None,
            quota: Quota::FAIR,
            tenant_slots: davinci_driver_core::DEFAULT_TENANT_SLOTS,
            uuid: None,
            presented: Presented::DEFAULT,
            sensors: SensorConfig::DEFAULT,
        }
    }
}

/// OpenParams for the calling process: pid, uid, admin if uid 0 or `admin` is set, no
/// container.
pub fn local_open_params(role: Role, admin: bool) -> OpenParams {
    let uid = nix::unistd::getuid().as_raw();
    OpenParams {
        role,
        pid: std::process::id(),
        uid,
        admin: admin || uid == 0,
        container: [0; CONTAINER_LEN],
        comm: match std::fs::read_to_string("/proc/self/comm") {
            Ok(s) => davinci_uapi::ClientUsage::comm_field(s.trim_end_matches('\n')),
            Err(_) => [0; 16],
        },
        tenant: davinci_driver_core::Tenant::User(uid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_devices_uuid_depends_on_the_host_and_the_index_only() {
        assert_eq!(derived_uuid(0), derived_uuid(0));
        assert_ne!(derived_uuid(0), derived_uuid(1));
        assert_ne!(uuid_from_seed("a", 0), uuid_from_seed("b", 0));
        assert_eq!(uuid_from_seed("a", 3), uuid_from_seed("a", 3));
    }

    #[test]
    fn the_default_presentation_is_parser_friendly() {
        assert_eq!(
            Presented::DEFAULT,
            Presented::new("davinci_mock", "mock0", "")
        );
        let id = DeviceIdentity {
            model: Presented::DEFAULT.model,
            chip_name: Presented::DEFAULT.chip_name,
            ..DeviceIdentity::default()
        };
        for name in [id.model(), id.chip_name()] {
            assert!(
                name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                "{name}"
            );
        }
        let p = Presented::new("Ascend910B3", "910B3", "0000:c1:00.0");
        assert_eq!(p.bus_id[..12], *b"0000:c1:00.0");
    }
}
