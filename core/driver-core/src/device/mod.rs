//! The device: [`DeviceCore`], all state the driver keeps, independent of kernel or user
//! space, with its [`Config`]; what it reports about itself (GET_INFO, GET_COUNTERS) and its
//! sharing mode. The operations on each kind of object are `impl DeviceCore` blocks in the
//! submodules: `clients` (open, close, usage), `contexts`, `allocations` (device memory),
//! `streams` (create, destroy, reset, fault arming, mmap targets) and `events`; what the
//! tables hold is `entries`. Handles are per client: every lookup checks the owner, and a
//! foreign handle is reported exactly like a stale one (`ENOENT`).

use davinci_uapi::{DeviceCounters, DeviceInfo, DeviceSensors, Features, ShareMode};

use crate::doorbell::DoorbellRegister;
use crate::error::{ensure, fail, Result};
use crate::identity::Identity;
use crate::inject::InjectRule;
use crate::limits::Quota;
use crate::limits::{DEFAULT_TENANT_SLOTS, MAX_TENANT_SETTINGS, MAX_TENANT_SLOTS};
use crate::limits::{
    MAX_ALLOCATIONS, MAX_BLOCKS, MAX_CLIENTS, MAX_CMD_ENTRIES, MAX_CONTEXTS, MAX_EVENTS,
    MAX_EVENT_ENTRIES, MAX_EVENT_EXPORTS, MAX_EXPORTS, MAX_STREAMS, SUPPORTED_OPCODES,
};
use crate::memory::Allocator;
use crate::observe::control::TraceSlot;
use crate::observe::{EventLog, TRACE_BUFFERS};
use crate::platform::{Lock, Platform};
use crate::sensors::{SensorConfig, SensorModel};
use crate::table::{Scramble, Table};

mod allocations;
pub(crate) mod clients;
mod contexts;
pub(crate) mod entries;
mod events;
mod sharing;
pub(crate) mod streams;
pub(crate) mod tenants;
mod undo;

use entries::{
    Allocation, Client, ContextEntry, EventEntry, ExportEntry, Retired, Role, StreamEntry,
};

/// Device configuration, fixed at creation.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// N of davinciN.
    pub device_id: u32,
    /// Device memory in bytes.
    pub memory_size: u64,
    /// Per-client memory limit in bytes (0: a quarter of the device while it is shared, the
    /// whole device while it is exclusive).
    pub client_memory_limit: u64,
    /// Page size of mappings (power of two); also the allocation alignment.
    pub page_size: u32,
    /// Features the platform supports (the core adds the ones it implements).
    /// `DOORBELL_MMIO` is reported only once [`DeviceCore::set_doorbell`] said where the
    /// register is and what rings it: GET_INFO never advertises a hardware doorbell without
    /// its `doorbell_offset` and `doorbell_value`.
    pub platform_features: Features,
    /// What one client may hold of each table while the device is shared.
    pub quota: Quota,
}

/// One davinci device: all state the driver keeps, independent of kernel or user space.
pub struct DeviceCore<P: Platform> {
    pub(crate) config: Config,
    pub(crate) platform: P,
    pub(crate) share: ShareMode,
    pub(crate) next_client_id: u32,
    /// Client ids go out through it ([`Scramble`]: no visible open count).
    pub(crate) client_ids: Scramble,
    /// Every open, client or control; an open's handle here is its `client` ([`Client`]).
    pub(crate) clients: Table<Client, MAX_CLIENTS>,
    pub(crate) contexts: Table<ContextEntry, MAX_CONTEXTS>,
    pub(crate) streams: Table<StreamEntry<P>, MAX_STREAMS>,
    pub(crate) events: Table<EventEntry<P>, MAX_EVENTS>,
    pub(crate) allocations: Table<Allocation, MAX_ALLOCATIONS>,
    /// The tenants of the opens, and how many slots they may hold ([`tenants`]).
    pub(crate) tenants: Table<tenants::TenantEntry, MAX_CLIENTS>,
    pub(crate) tenant_slots: u32,
    /// The operators' settings of how many slots a tenant counts for (TENANT_SHARE).
    pub(crate) share_settings: Table<tenants::ShareSetting, MAX_TENANT_SETTINGS>,
    /// Exported allocations (EXPORT_MEMORY), and the serial of the next token.
    pub(crate) exports: Table<ExportEntry, MAX_EXPORTS>,
    /// Exported events (EXPORT_EVENT); their tokens' serials come from `export_serial` too.
    pub(crate) event_exports: Table<entries::EventExportEntry, MAX_EVENT_EXPORTS>,
    pub(crate) export_serial: u32,
    /// The serials go out through it ([`Scramble`]: no visible export count).
    pub(crate) export_serials: Scramble,
    pub(crate) memory: Allocator<MAX_BLOCKS>,
    /// The fault new streams are armed with (`inject`, `inject_rule`), and which, if any.
    pub(crate) inject: Option<InjectRule>,
    /// GET_COUNTERS: the counters of destroyed streams, and client opens so far.
    pub(crate) retired: Retired,
    pub(crate) clients_opened: u64,
    /// What GET_IDENTITY reports, and how many engines run tasks at once.
    pub(crate) identity: Identity,
    /// The hardware doorbell register GET_INFO reports with `DOORBELL_MMIO`.
    pub(crate) doorbell: Option<DoorbellRegister>,
    /// What GET_SENSORS reports: the model driven by the busy time.
    pub(crate) sensors: SensorModel,
    /// Who holds each of TRACE's buffers (the platform's), and the admin opens tracing the
    /// device ([`crate::observe`]).
    pub(crate) trace_slots: [TraceSlot; TRACE_BUFFERS],
    pub(crate) device_tracers: u32,
    /// READ_EVENTS' log.
    pub(crate) event_log: EventLog,
}

impl<P: Platform> DeviceCore<P> {
    /// A device with no clients, in exclusive mode.
    ///
    /// `const`: a device is about 190 KB (its tables are fixed-size arrays), too big for a
    /// kernel stack, so the kernel module builds its devices in static storage at compile
    /// time; user-space hosts call it at run time.
    pub const fn new(config: Config, platform: P) -> Self {
        let page = if config.page_size.is_power_of_two() && config.page_size >= 64 {
            config.page_size
        } else {
            4096
        };
        let config = Config {
            page_size: page,
            ..config
        };
        Self {
            memory: Allocator::new(config.memory_size, page as u64),
            config,
            platform,
            share: ShareMode::Exclusive,
            next_client_id: 1,
            client_ids: Scramble::DEFAULT,
            clients: Table::new(),
            tenants: Table::new(),
            tenant_slots: DEFAULT_TENANT_SLOTS,
            share_settings: Table::new(),
            contexts: Table::new(),
            streams: Table::new(),
            events: Table::new(),
            allocations: Table::new(),
            exports: Table::new(),
            event_exports: Table::new(),
            export_serial: 0,
            export_serials: Scramble::DEFAULT,
            inject: None,
            retired: Retired {
                submitted: 0,
                completed: 0,
                errors: 0,
                doorbells: 0,
                busy_ns: 0,
            },
            identity: Identity::DEFAULT,
            clients_opened: 0,
            doorbell: None,
            sensors: SensorModel::DEFAULT,
            trace_slots: [TraceSlot {
                owner: 0,
                tenant: 0,
                recording: false,
            }; TRACE_BUFFERS],
            device_tracers: 0,
            event_log: EventLog::new(),
        }
    }

    /// The platform.
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// The platform, mutably.
    pub fn platform_mut(&mut self) -> &mut P {
        &mut self.platform
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Current sharing mode.
    pub fn share_mode(&self) -> ShareMode {
        self.share
    }

    /// GET_INFO.
    pub fn info(&self) -> DeviceInfo {
        let c = &self.config;
        let quota = self.quota_now();
        // A hardware doorbell only with its register ([`Config::platform_features`]).
        let mmio = Features::DOORBELL_MMIO.bits();
        let (platform_features, doorbell) = match self.doorbell {
            Some(r) if c.platform_features.contains(Features::DOORBELL_MMIO) => {
                (c.platform_features.bits(), (r.offset(), r.value()))
            }
            _ => (c.platform_features.bits() & !mmio, (0, 0)),
        };
        let kernels = if crate::engine::KERNELS {
            Features::KERNELS.bits()
        } else {
            0
        } | if self.platform.trace_logs().len() >= TRACE_BUFFERS {
            Features::TRACE.bits()
        } else {
            0
        };
        DeviceInfo {
            abi_major: davinci_uapi::ABI_VERSION_MAJOR,
            abi_minor: davinci_uapi::ABI_VERSION_MINOR,
            features: Features::from_bits_retain(
                platform_features
                    | (Features::SUBMIT_IOCTL.bits()
                        | Features::EVENTS.bits()
                        | Features::DEVICE_SHARE.bits()
                        | Features::LIST_CLIENTS.bits()
                        | Features::CALLER_ID.bits()
                        | Features::OPCODE_MASK.bits()
                        | Features::LAST_ERROR.bits()
                        | Features::FAULT_DETAIL.bits()
                        | Features::COUNTERS.bits()
                        | Features::QUOTAS.bits()
                        | Features::OWN_CLIENTS.bits()
                        | Features::SHARED_MEMORY.bits()
                        | Features::IDENTITY.bits()
                        | Features::USAGE.bits()
                        | Features::TENANT_SHARE.bits()
                        | Features::DTYPES.bits()
                        | Features::SHARED_EVENTS.bits()
                        | Features::EXPORT_LEASE.bits()
                        | Features::SENSORS.bits()
                        | Features::DEVICE_EVENTS.bits()
                        | kernels),
            ),
            device_id: c.device_id,
            page_size: c.page_size,
            memory_size: self.memory.size(),
            memory_used: self.memory.used(),
            client_memory_limit: self.client_limit(),
            max_clients: MAX_CLIENTS as u32,
            max_contexts: MAX_CONTEXTS as u32,
            max_streams: MAX_STREAMS as u32,
            max_events: MAX_EVENTS as u32,
            max_allocations: MAX_ALLOCATIONS as u32,
            max_cmd_entries: MAX_CMD_ENTRIES,
            max_event_entries: MAX_EVENT_ENTRIES,
            mem_align: self.memory.align() as u32,
            share_mode: self.share as u32,
            clients: self.client_count(),
            caller_id: 0,
            opcodes: SUPPORTED_OPCODES | if crate::engine::KERNELS { 1 << 6 } else { 0 },
            quota_contexts: quota.contexts,
            quota_streams: quota.streams,
            quota_events: quota.events,
            quota_allocations: quota.allocations,
            doorbell_offset: doorbell.0,
            doorbell_value: doorbell.1,
        }
    }

    /// What one client may hold of each table now: the configured quota while the device is
    /// shared, every table whole while it is exclusive.
    pub fn quota_now(&self) -> Quota {
        match self.share {
            ShareMode::Shared => self.config.quota,
            ShareMode::Exclusive => Quota::NONE,
        }
    }

    /// Sets what a host learns only at run time, before anything is open: the secret that
    /// scrambles handles and client ids (a random number per device: the kernel's
    /// `get_random_u64`, the daemon's `getrandom`), so that no value a tenant sees carries a
    /// sequence another tenant's activity shows in. `EBUSY` once anything is open (handles
    /// given out would no longer resolve).
    pub fn set_secret(&mut self, secret: u64) -> Result<()> {
        self.ensure_unused()?;
        let key = |n: u64| Scramble::new(secret ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        // Each table empty (checked above), so each takes its key.
        let all = self.clients.set_scramble(key(1))
            & self.contexts.set_scramble(key(2))
            & self.streams.set_scramble(key(3))
            & self.events.set_scramble(key(4))
            & self.allocations.set_scramble(key(5))
            & self.exports.set_scramble(key(7));
        debug_assert!(all);
        self.client_ids = key(6);
        self.export_serials = key(8);
        Ok(())
    }

    /// Sets the hardware doorbell register (a host whose doorbell page is a device register:
    /// the PCI device), before anything is open: GET_INFO then reports `DOORBELL_MMIO` with
    /// the register's `doorbell_offset` and `doorbell_value`. `EINVAL` unless the platform's
    /// features ([`Config::platform_features`]) include `DOORBELL_MMIO`; `EBUSY` after the
    /// first open (a client may have read GET_INFO already). The register's own checks
    /// (aligned, inside the page) are [`DoorbellRegister::new`]'s.
    pub fn set_doorbell(&mut self, register: DoorbellRegister) -> Result<()> {
        ensure!(
            self.config
                .platform_features
                .contains(Features::DOORBELL_MMIO),
            EINVAL,
            "a doorbell register needs DOORBELL_MMIO in the platform's features"
        );
        self.ensure_unused()?;
        self.doorbell = Some(register);
        Ok(())
    }

    /// The hardware doorbell register, if the host set one ([`set_doorbell`](Self::set_doorbell)).
    pub fn doorbell(&self) -> Option<DoorbellRegister> {
        self.doorbell
    }

    /// Sets the per-client quota (a host's run-time setting, e.g. the kernel module's
    /// parameters), before anything is open: `EBUSY` after; `EINVAL` for a quota of 0 or
    /// one larger than its table.
    pub fn set_quota(&mut self, quota: Quota) -> Result<()> {
        self.ensure_unused()?;
        ensure!(
            quota.is_valid(),
            EINVAL,
            "each quota must be from 1 to its table's size"
        );
        self.config.quota = quota;
        Ok(())
    }

    /// Sets how many tenants the device keeps a share for (`tenants`; a host's run-time
    /// setting: `davinci-mockd --tenant-slots`, the kernel module's `tenant_slots`), before
    /// anything is open: `EBUSY` after; `EINVAL` outside 1..=[`MAX_TENANT_SLOTS`]. The
    /// shares are what [`set_quota`](Self::set_quota) set: a host that has no explicit
    /// quota sets [`Quota::for_slots`] with it.
    pub fn set_tenant_slots(&mut self, slots: u32) -> Result<()> {
        self.ensure_unused()?;
        ensure!(
            (1..=MAX_TENANT_SLOTS).contains(&slots),
            EINVAL,
            "tenant slots must be from 1 to 64"
        );
        self.tenant_slots = slots;
        Ok(())
    }

    /// How many tenants the device keeps a share for.
    pub fn tenant_slots(&self) -> u32 {
        self.tenant_slots
    }

    /// Sets the device's id (N of davinciN) and memory size (rounded down to the page size),
    /// before anything is open: a host that learns them at run time (the kernel module's
    /// parameters) builds the device once, in place, and sets them. `EBUSY` after the first
    /// open; `EINVAL` for less than a page of memory.
    pub fn set_identity(&mut self, device_id: u32, memory_size: u64) -> Result<()> {
        self.ensure_unused()?;
        ensure!(
            memory_size >= u64::from(self.config.page_size),
            EINVAL,
            "device memory must be at least a page"
        );
        self.memory.reset(memory_size)?;
        self.config.device_id = device_id;
        self.config.memory_size = self.memory.size();
        Ok(())
    }

    fn ensure_unused(&self) -> Result<()> {
        ensure!(
            self.clients.is_empty()
                && self.contexts.is_empty()
                && self.streams.is_empty()
                && self.events.is_empty()
                && self.allocations.is_empty(),
            EBUSY,
            "a host sets this only before the device's first open"
        );
        Ok(())
    }

    /// GET_INFO as open `client` asks it: [`info`](Self::info) with the caller's own
    /// [`client_id`](Self::client_id) in `caller_id` (0 for a control open, which is not a
    /// client).
    pub fn info_for(&self, client: u32) -> DeviceInfo {
        DeviceInfo {
            caller_id: self.client_id(client).unwrap_or(0),
            ..self.info()
        }
    }

    /// The id the device reports for open `client` (LIST_CLIENTS' `client_id`, GET_INFO's
    /// `caller_id`); `None` for a control open, which is not a client, or an unknown one.
    pub fn client_id(&self, client: u32) -> Option<u32> {
        match self.clients.get(client) {
            Some(c) if c.params.role == Role::Client => Some(c.client_id),
            _ => None,
        }
    }

    /// GET_COUNTERS: device-wide counters since the device started (destroyed streams'
    /// included, each live stream's read under its lock) and the objects that exist now.
    pub fn counters(&self) -> DeviceCounters {
        let Retired {
            mut submitted,
            mut completed,
            mut errors,
            mut doorbells,
            mut busy_ns,
        } = self.retired;
        let mut hung_streams = 0u32;
        for (_, s) in self.streams.iter() {
            let _ = s.run.with(|e| {
                submitted += e.submitted;
                completed += e.completed;
                errors += e.errors;
                doorbells += e.doorbells;
                busy_ns += e.busy_ns;
                hung_streams += u32::from(e.halted);
            });
        }
        DeviceCounters {
            tasks_submitted: submitted,
            tasks_completed: completed,
            stream_errors: errors,
            doorbells,
            clients_opened: self.clients_opened,
            contexts: self.contexts.len() as u32,
            streams: self.streams.len() as u32,
            events: self.events.len() as u32,
            allocations: self.allocations.len() as u32,
            busy_ns,
            now_ns: self.platform.now_ns(),
            engines: self.identity.engines,
            health: if hung_streams > 0 {
                davinci_uapi::HEALTH_WARNING
            } else {
                davinci_uapi::HEALTH_OK
            },
            hung_streams,
            reserved: 0,
        }
    }

    /// What one tenant may allocate: the configured limit; without one, while the device is
    /// shared its share (the device's memory over the tenant slots: a quarter by default,
    /// the same fair share as [`Quota::FAIR`]), all of it while it is exclusive.
    pub(crate) fn client_limit(&self) -> u64 {
        match (self.config.client_memory_limit, self.share) {
            (0, ShareMode::Exclusive) => self.memory.size(),
            _ => self.tenant_memory_share(),
        }
    }

    /// SET_DEVICE_SHARE. Admin only; idempotent; `EBUSY` if going exclusive would strand
    /// attached clients.
    pub fn set_share_mode(&mut self, client: u32, mode: ShareMode) -> Result<()> {
        let Some(c) = self.clients.get(client) else {
            fail!(ENODEV, "client is not attached");
        };
        ensure!(
            c.params.admin,
            EPERM,
            "changing device sharing needs an admin (the kernel driver: CAP_SYS_ADMIN; davinci-mockd: root, the daemon's own user, --admin-uid or an --admin-group member)"
        );
        if mode == self.share {
            return Ok(());
        }
        if mode == ShareMode::Exclusive {
            ensure!(
                self.client_count() <= 1,
                EBUSY,
                "more than one client is attached; switching to exclusive would strand them"
            );
        }
        self.share = mode;
        Ok(())
    }
}

/// What the device is (GET_IDENTITY, [`Identity`]).
impl<P: Platform> DeviceCore<P> {
    /// Sets what GET_IDENTITY reports and GET_COUNTERS' `engines` (a host, at start).
    /// Every host calls it once, when the device comes up: the event log's first event is
    /// DEVICE_STARTED.
    pub fn set_device_identity(&mut self, identity: Identity) {
        self.identity = Identity {
            engines: identity.engines.max(1),
            ..identity
        };
        if self.event_log.next() == 0 {
            self.log_event(
                0,
                crate::observe::Event {
                    code: davinci_uapi::DEVICE_EVENT_DEVICE_STARTED,
                    ..Default::default()
                },
            );
        }
    }

    /// GET_IDENTITY.
    pub fn device_identity(&self) -> &Identity {
        &self.identity
    }

    /// Sets the sensor model's parameters (a host, at start; `davinci-mockd --sensors`) and
    /// starts it at the idle steady state now.
    pub fn set_sensor_config(&mut self, config: SensorConfig) {
        let c = self.counters();
        self.sensors.configure(config, c.now_ns, c.busy_ns);
    }

    /// What the device reports of itself into `arg`: GET_COUNTERS, GET_IDENTITY or
    /// GET_SENSORS (`request`; any other writes nothing).
    pub(crate) fn report(&mut self, request: u32, arg: &mut [u8]) {
        use davinci_uapi::Wire;
        match request {
            davinci_uapi::DRIVER_CMD_GET_COUNTERS => self.counters().encode(arg),
            davinci_uapi::DRIVER_CMD_GET_IDENTITY => self.identity.identity.encode(arg),
            davinci_uapi::DRIVER_CMD_GET_SENSORS => self.sensors().encode(arg),
            _ => {}
        }
    }

    /// GET_SENSORS: the model stepped to now ([`crate::sensors`]).
    pub fn sensors(&mut self) -> DeviceSensors {
        let c = self.counters();
        self.sensors.read(c.now_ns, c.busy_ns, c.engines)
    }
}
