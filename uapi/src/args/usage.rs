//! What the device reports about its use: LIST_CLIENTS (who holds what, per client),
//! GET_LAST_ERROR (why an open's last command failed) and GET_COUNTERS (device-wide totals).

use crate::layout::{abi_struct, ConstGroup};

abi_struct! {
    /// LIST_CLIENTS: per-client usage. Two-phase like many variable-length queries: call
    /// with `capacity` 0 to learn `count`, then with a buffer of `capacity` entries.
    #[c_name = "davinci_list_clients_args"]
    pub struct ListClientsArgs {
        /// User pointer to an array of `capacity` `davinci_client_usage` (to driver).
        pub buf: u64,
        /// Entries the buffer holds (to driver).
        pub capacity: u32,
        /// Clients attached; entries written = min(count, capacity) (from driver).
        pub count: u32,
        /// Stride of the caller's entries, normally `sizeof(struct davinci_client_usage)`: a
        /// multiple of 8 from 8 to 4096. The driver writes the first `min(entry_size, its own
        /// size)` bytes of each entry and zeroes the rest, so the entry can grow (to driver).
        pub entry_size: u32,
        /// Reserved, must be 0 (to driver).
        pub pad: u32,
    }
}

abi_struct! {
    /// One attached client, as LIST_CLIENTS reports it (all fields from driver).
    #[c_name = "davinci_client_usage"]
    pub struct ClientUsage {
        /// Driver-assigned client id (unique while the device lives) (from driver).
        pub client_id: u32,
        /// Process id of the opener, as the driver sees it (from driver).
        pub pid: u32,
        /// User id of the opener (from driver).
        pub uid: u32,
        /// What the client's tenant is, the one whose quotas bind it (ABI 1.5;
        /// `DAVINCI_TENANT_*`): its container (`container`) or its user (`uid`); 0 from a
        /// driver before 1.5 (from driver).
        pub tenant_kind: u32,
        /// Contexts held (from driver).
        pub contexts: u32,
        /// Streams held (from driver).
        pub streams: u32,
        /// Events held (from driver).
        pub events: u32,
        /// Allocations held (from driver).
        pub allocations: u32,
        /// Device memory held in bytes (from driver).
        pub memory_bytes: u64,
        /// Descriptors the device has taken from this client's rings (from driver).
        pub tasks_submitted: u64,
        /// Completions the device has written for this client (from driver).
        pub tasks_completed: u64,
        /// Container id (from the opener's cgroup), NUL-padded; empty if none (from driver).
        pub container: [u8; 64],
        /// Descriptors the host has published and the device has not taken yet, over all
        /// the client's streams (ABI 1.2; a snapshot) (from driver).
        pub tasks_queued: u64,
        /// The opener's process name (the kernel's `comm`, at most 15 bytes), NUL-padded
        /// (ABI 1.2) (from driver).
        pub comm: [u8; 16],
        /// Nanoseconds the device's engines spent executing this client's tasks, streams
        /// long destroyed included (ABI 1.4; only grows) (from driver). Sums over engines
        /// working at once, like GET_COUNTERS `busy_ns`.
        pub busy_ns: u64,
        /// Times this client's streams entered the error state, destroyed streams included
        /// (ABI 1.5; only grows; 0 from an older driver, whose entries are shorter) (from
        /// driver). GET_COUNTERS' `stream_errors` is the device's sum.
        pub stream_errors: u64,
    }
}

impl ClientUsage {
    /// The container id: the bytes of `container` up to the first NUL, or `None` for a client
    /// outside any container. Drivers write ASCII ids; should a byte not be UTF-8, the id
    /// ends before it.
    pub fn container_id(&self) -> Option<&str> {
        let end = self
            .container
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.container.len());
        let bytes = self.container.get(..end).unwrap_or(&[]);
        let id = match core::str::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => {
                core::str::from_utf8(bytes.get(..e.valid_up_to()).unwrap_or(&[])).unwrap_or("")
            }
        };
        (!id.is_empty()).then_some(id)
    }

    /// The opener's process name (`comm`); `""` if the driver did not say (before ABI 1.2).
    pub fn comm(&self) -> &str {
        let end = self
            .comm
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.comm.len());
        let bytes = self.comm.get(..end).unwrap_or(&[]);
        match core::str::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => {
                core::str::from_utf8(bytes.get(..e.valid_up_to()).unwrap_or(&[])).unwrap_or("")
            }
        }
    }

    /// `name` as a `comm` field: at most 15 bytes (cut at a character boundary), NUL-padded.
    pub fn comm_field(name: &str) -> [u8; 16] {
        let mut out = [0u8; 16];
        let mut end = name.len().min(15);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        for (d, s) in out.iter_mut().zip(name.as_bytes().iter().take(end)) {
            *d = *s;
        }
        out
    }

    /// `container` for an id (NUL-padded; an id longer than the field is cut).
    pub fn container_field(id: &str) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (d, s) in out.iter_mut().zip(id.bytes()) {
            *d = s;
        }
        out
    }
}

/// How messages name a client: `pid 42 (uid 1000, container abcd)` or
/// `pid 42 (uid 1000, no container)`.
impl core::fmt::Display for ClientUsage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.container_id() {
            Some(c) => write!(f, "pid {} (uid {}, container {c})", self.pid, self.uid),
            None => write!(f, "pid {} (uid {}, no container)", self.pid, self.uid),
        }
    }
}

abi_struct! {
    /// GET_USAGE (ABI 1.5): what the caller itself holds against each of its limits, and the
    /// most it may hold of each now: the per-client quota while the device is shared, the
    /// whole table (or the operator's memory limit) while it is exclusive. A client open only
    /// (a control open holds nothing: `EPERM`). `memory_used` in GET_INFO counts every
    /// client's memory; this counts the caller's.
    #[c_name = "davinci_usage"]
    pub struct Usage {
        /// Device memory the caller's allocations hold, in bytes (imports are their
        /// exporter's, not counted here) (from driver).
        pub memory_bytes: u64,
        /// Most device memory the caller may hold now, in bytes: GET_INFO's
        /// `client_memory_limit` (from driver).
        pub memory_limit: u64,
        /// Contexts held (from driver).
        pub contexts: u32,
        /// Most contexts the caller may hold now (from driver).
        pub quota_contexts: u32,
        /// Streams held (from driver).
        pub streams: u32,
        /// Most streams the caller may hold now (from driver).
        pub quota_streams: u32,
        /// Events held (from driver).
        pub events: u32,
        /// Most events the caller may hold now (from driver).
        pub quota_events: u32,
        /// Allocations held, imports included (from driver).
        pub allocations: u32,
        /// Most allocations the caller may hold now (from driver).
        pub quota_allocations: u32,
        /// Exports (EXPORT_MEMORY) held (from driver).
        pub exports: u32,
        /// Most exports the caller may hold now (from driver).
        pub quota_exports: u32,
        /// `DAVINCI_SHARE_*` mode these limits are for (from driver).
        pub share_mode: u32,
        /// The caller's client id, as GET_INFO's `caller_id` (from driver).
        pub client_id: u32,
        /// Device memory the caller's tenant holds (every open of its container, or of its
        /// user outside containers: docs/security.md), against `memory_limit` (from driver).
        pub tenant_memory_bytes: u64,
        /// Contexts the caller's tenant holds, against `quota_contexts` (from driver).
        pub tenant_contexts: u32,
        /// Streams the caller's tenant holds, against `quota_streams` (from driver).
        pub tenant_streams: u32,
        /// Events the caller's tenant holds, against `quota_events` (from driver).
        pub tenant_events: u32,
        /// Allocations the caller's tenant holds, against `quota_allocations` (from driver).
        pub tenant_allocations: u32,
        /// Exports the caller's tenant holds, against `quota_exports` (from driver).
        pub tenant_exports: u32,
        /// `DAVINCI_TENANT_*` bits: what the tenant is, and whether it holds one of the
        /// device's tenant slots (its share kept for it) (from driver).
        pub tenant_flags: u32,
    }
}

abi_struct! {
    /// TENANT_SHARE (ABI 1.5; an admin's): reads, and with `set` changes, how many of the
    /// device's tenant slots one tenant counts for (docs/security.md, "Tenants"). A tenant
    /// of `shares` slots is held to `shares` times a slot's share of every table, of memory
    /// and of the client opens, and while it has client opens and holds its slots, all of
    /// that is kept for it; 0 makes it a tenant that never holds a slot (it takes only what
    /// nobody's slot keeps). Without a setting a tenant counts for 1. The setting outlives
    /// the tenant's opens (the device keeps at most 64), until set back to 1.
    #[c_name = "davinci_tenant_share_args"]
    pub struct TenantShareArgs {
        /// `DAVINCI_TENANT_USER` or `DAVINCI_TENANT_CONTAINER`: which tenant (to driver).
        pub tenant_kind: u32,
        /// The user, for `DAVINCI_TENANT_USER`; 0 otherwise (to driver).
        pub uid: u32,
        /// The container id, NUL-padded, for `DAVINCI_TENANT_CONTAINER` (as LIST_CLIENTS
        /// reports it); all NULs otherwise (to driver).
        pub container: [u8; 64],
        /// 1: set `shares`; 0: only read (to driver).
        pub set: u32,
        /// With `set`: the slots the tenant counts for, from 0 to the device's `slots`
        /// (to driver); the tenant's setting now (from driver).
        pub shares: u32,
        /// How many tenant slots the device has (from driver).
        pub slots: u32,
        /// Slots no tenant holds now (from driver).
        pub free_slots: u32,
        /// `DAVINCI_TENANT_*` of the tenant now: its kind, and `DAVINCI_TENANT_SLOTTED` if it
        /// holds its slots; 0 if it has no open (from driver).
        pub tenant_flags: u32,
        /// Reserved, must be 0 (to driver); ignore it (from driver).
        pub reserved: u32,
    }
}

impl TenantShareArgs {
    /// The argument naming the tenant `text` spells as the tools show it: `user:UID` or
    /// `container:ID` (the id as LIST_CLIENTS reports it, 1 to 63 bytes); a read (`set` 0)
    /// until [`set`](Self::set) asks for a change. `Err` says what is wrong.
    pub fn named(text: &str) -> Result<TenantShareArgs, &'static str> {
        let mut a = TenantShareArgs::default();
        if let Some(uid) = text.strip_prefix("user:") {
            a.tenant_kind = TENANT_USER;
            a.uid = uid
                .parse()
                .map_err(|_| "user:UID needs a numeric uid (e.g. user:1000)")?;
        } else if let Some(id) = text.strip_prefix("container:") {
            if id.is_empty() || id.len() >= a.container.len() {
                return Err("container:ID needs an id of 1 to 63 bytes");
            }
            if id.bytes().any(|b| !b.is_ascii_graphic()) {
                return Err("container:ID takes printable ASCII without spaces");
            }
            a.tenant_kind = TENANT_CONTAINER;
            for (d, s) in a.container.iter_mut().zip(id.bytes()) {
                *d = s;
            }
        } else {
            return Err("a tenant is user:UID or container:ID");
        }
        Ok(a)
    }

    /// This argument asking to make the tenant count for `shares` slots.
    pub const fn set(self, shares: u32) -> TenantShareArgs {
        TenantShareArgs {
            set: 1,
            shares,
            ..self
        }
    }
}

/// Bytes of [`LastError::message`], the terminating NUL included.
pub const LAST_ERROR_MESSAGE_LEN: usize = 112;

abi_struct! {
    /// GET_LAST_ERROR (ABI 1.2): why the last failed command of this open file failed, for a
    /// driver whose system calls carry only an errno (the kernel module). Over davinci-mockd
    /// every reply carries its message anyway.
    #[c_name = "davinci_last_error"]
    pub struct LastError {
        /// Request number of the last failed command of this open; 0 if none failed yet.
        /// What polling answers is not a failure here: `EAGAIN` and `ETIMEDOUT` (since 1.4)
        /// leave the record alone (from driver).
        pub request: u32,
        /// Its errno, positive (from driver). Not named `errno`, which is a macro in C.
        pub error: u32,
        /// Commands of this open that failed so far (`EAGAIN` and `ETIMEDOUT` not counted,
        /// since 1.4): two reads with the same count saw the same failure (from driver).
        pub count: u64,
        /// What was wrong: UTF-8, NUL-terminated, cut at a character boundary to fit
        /// (from driver).
        pub message: [u8; 112],
    }
}

impl LastError {
    /// The message as text (up to the NUL; an invalid tail is dropped).
    pub fn message_str(&self) -> &str {
        let end = self
            .message
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.message.len());
        let bytes = self.message.get(..end).unwrap_or(&[]);
        match core::str::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => {
                core::str::from_utf8(bytes.get(..e.valid_up_to()).unwrap_or(&[])).unwrap_or("")
            }
        }
    }

    /// `text` as a message field: cut at a character boundary so the NUL fits.
    pub fn message_field(text: &str) -> [u8; LAST_ERROR_MESSAGE_LEN] {
        let mut out = [0u8; LAST_ERROR_MESSAGE_LEN];
        let mut end = text.len().min(LAST_ERROR_MESSAGE_LEN - 1);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        for (d, s) in out.iter_mut().zip(text.as_bytes().iter().take(end)) {
            *d = *s;
        }
        out
    }
}

abi_struct! {
    /// GET_COUNTERS (ABI 1.3): device-wide counters since the device started, for monitoring
    /// (`davinci-exporter`). Counters only grow; the object counts are a snapshot. Any open
    /// may call it.
    #[c_name = "davinci_device_counters"]
    pub struct DeviceCounters {
        /// Descriptors the device has taken from every command ring, streams and clients
        /// long gone included (from driver).
        pub tasks_submitted: u64,
        /// Completion records the device has written, failed ones included (from driver).
        pub tasks_completed: u64,
        /// Times a stream entered the error state: a failed descriptor, corrupt ring
        /// indices, a device reset (from driver).
        pub stream_errors: u64,
        /// Doorbells that woke the device: a worker asleep with NEED_WAKEUP armed found its
        /// stream's doorbell word changed (once per sleep, however often it was rung), or,
        /// on a driver without `DAVINCI_FEAT_DOORBELL_FUTEX`, a NOTIFY. Near zero per task
        /// under load, when NEED_WAKEUP is clear and hosts do not ring (from driver).
        pub doorbells: u64,
        /// Client opens attached since the device started (control opens excluded)
        /// (from driver).
        pub clients_opened: u64,
        /// Contexts that exist now (from driver).
        pub contexts: u32,
        /// Streams that exist now (from driver).
        pub streams: u32,
        /// Events that exist now (from driver).
        pub events: u32,
        /// Allocations that exist now (from driver).
        pub allocations: u32,
        /// Nanoseconds the device's engines spent executing tasks (taking, running and
        /// completing descriptors, a long task's every chunk), over all clients, destroyed
        /// streams included (ABI 1.4; only grows) (from driver). Engines working at once each
        /// add their time: utilization over an interval is `Δbusy_ns / (Δnow_ns × engines)`.
        pub busy_ns: u64,
        /// The device clock when these counters were read: the clock of event records'
        /// `timestamp_ns` (ABI 1.4) (from driver).
        pub now_ns: u64,
        /// How many engines may execute tasks at once (at least 1) (ABI 1.4) (from driver).
        pub engines: u32,
        /// `DAVINCI_HEALTH_*`: the device's own state, not one client's errors (a failed
        /// descriptor is its stream's error, counted in `stream_errors`) (ABI 1.4)
        /// (from driver).
        pub health: u32,
        /// Streams stopped by a task that does not finish (a hung engine) right now
        /// (ABI 1.4) (from driver).
        pub hung_streams: u32,
        /// Reserved: ignore it, a later minor may use it (from driver).
        pub reserved: u32,
    }
}

/// `davinci_device_counters.health`: the device works.
pub const HEALTH_OK: u32 = 0;
/// `davinci_device_counters.health`: the device works, but an engine holds a task that does
/// not finish (`hung_streams` > 0); its other streams and clients go on.
pub const HEALTH_WARNING: u32 = 1;
/// `davinci_device_counters.health`: the device reported an error that stops work on it
/// (a hardware device: a fatal interrupt; the software engines never report it).
pub const HEALTH_ALARM: u32 = 2;
/// `davinci_device_counters.health`: the device is lost (a hardware device that stopped
/// answering; the software engines never report it).
pub const HEALTH_CRITICAL: u32 = 3;

/// The name npu-smi and the exporter give a `DAVINCI_HEALTH_*` value (`"OK"`, `"Warning"`,
/// `"Alarm"`, `"Critical"`), `None` for a value this ABI does not define.
pub const fn health_name(health: u32) -> Option<&'static str> {
    match health {
        HEALTH_OK => Some("OK"),
        HEALTH_WARNING => Some("Warning"),
        HEALTH_ALARM => Some("Alarm"),
        HEALTH_CRITICAL => Some("Critical"),
        _ => None,
    }
}

/// `ClientUsage::tenant_kind`, and a bit of `Usage::tenant_flags`: the tenant is a user
/// outside containers (or inside the host's own).
pub const TENANT_USER: u32 = 1;
/// The tenant is a container.
pub const TENANT_CONTAINER: u32 = 2;
/// `Usage::tenant_flags`: the tenant holds one of the device's tenant slots, so its share of
/// every table and of memory is kept for it however much the others take.
pub const TENANT_SLOTTED: u32 = 4;

/// The tenant values, for the C header.
pub(crate) const TENANTS: ConstGroup = ConstGroup {
    title: "Tenants (davinci_client_usage.tenant_kind, davinci_usage.tenant_flags)",
    c_prefix: "DAVINCI_TENANT_",
    items: &[
        (
            "USER",
            TENANT_USER as u64,
            "the tenant is the client's user",
        ),
        (
            "CONTAINER",
            TENANT_CONTAINER as u64,
            "the tenant is the client's container",
        ),
        (
            "SLOTTED",
            TENANT_SLOTTED as u64,
            "the tenant holds a tenant slot: its share is kept for it",
        ),
    ],
};

/// The health values, for the C header.
pub(crate) const HEALTHS: ConstGroup = ConstGroup {
    title: "Device health (davinci_device_counters.health)",
    c_prefix: "DAVINCI_HEALTH_",
    items: &[
        ("OK", HEALTH_OK as u64, "the device works"),
        (
            "WARNING",
            HEALTH_WARNING as u64,
            "an engine holds a task that does not finish; other streams go on",
        ),
        (
            "ALARM",
            HEALTH_ALARM as u64,
            "an error stops work on the device (hardware only)",
        ),
        (
            "CRITICAL",
            HEALTH_CRITICAL as u64,
            "the device is lost (hardware only)",
        ),
    ],
};

abi_struct! {
    /// GET_IDENTITY (ABI 1.4): what the device is, for inventories and schedulers: a UUID
    /// that stays the same across share-mode changes, daemon restarts, module reloads and
    /// reboots of the same host, its model and driver, and where it sits. Any open may call
    /// it.
    #[c_name = "davinci_device_identity"]
    pub struct DeviceIdentity {
        /// The device's UUID (RFC 9562 layout, 16 bytes, printed as
        /// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`) (from driver).
        pub uuid: [u8; 16],
        /// Model name, ASCII, NUL-padded (from driver).
        pub model: [u8; 32],
        /// Driver name and version, ASCII, NUL-padded, e.g. `davinci-mockd 0.1.0`
        /// (from driver).
        pub driver_version: [u8; 32],
        /// NUMA node the device is attached to, -1 if unknown or not NUMA (from driver).
        pub numa_node: i32,
        /// Reserved: ignore it (from driver).
        pub pad: u32,
        /// Where the device sits on its bus: for a PCI device its address as text,
        /// `DDDD:BB:DD.F` (domain, bus, device, function; lowercase hex), NUL-padded; all zero
        /// when the device is on no bus (the mock device, the kernel's software devices)
        /// (from driver).
        pub bus_id: [u8; 16],
        /// PCI vendor id; 0 when the device is not PCI (from driver).
        pub pci_vendor: u16,
        /// PCI device id; 0 when the device is not PCI (from driver).
        pub pci_device: u16,
        /// The chip's name (npu-smi's `Chip Name`, e.g. `910B3`), ASCII, NUL-padded; all
        /// zero from a driver without `DAVINCI_FEAT_SENSORS` (ABI 1.5; reserved before)
        /// (from driver).
        pub chip_name: [u8; 12],
    }
}

impl DeviceIdentity {
    /// The UUID as text: 8-4-4-4-12 lowercase hex digits ([`uuid_text`]).
    pub fn uuid_string(&self) -> UuidText {
        uuid_text(&self.uuid)
    }

    /// `model` up to its first NUL (ASCII; a byte that is not ends it).
    pub fn model(&self) -> &str {
        ascii_field(&self.model)
    }

    /// `driver_version` up to its first NUL (ASCII; a byte that is not ends it).
    pub fn driver_version(&self) -> &str {
        ascii_field(&self.driver_version)
    }

    /// `chip_name` up to its first NUL (ASCII; a byte that is not ends it): `""` when the
    /// driver does not say.
    pub fn chip_name(&self) -> &str {
        ascii_field(&self.chip_name)
    }

    /// `bus_id` up to its first NUL (ASCII; a byte that is not ends it): `""` for a device
    /// on no bus.
    pub fn bus_id(&self) -> &str {
        ascii_field(&self.bus_id)
    }

    /// `text` as a NUL-padded field of `N` bytes: printable ASCII only (anything else
    /// becomes `?`), cut to `N - 1` bytes so a NUL always ends it.
    pub fn text_field<const N: usize>(text: &str) -> [u8; N] {
        let mut out = [0u8; N];
        for (d, c) in out.iter_mut().take(N.saturating_sub(1)).zip(text.bytes()) {
            *d = if c.is_ascii_graphic() || c == b' ' {
                c
            } else {
                b'?'
            };
        }
        out
    }
}

/// `uuid` as text: 8-4-4-4-12 lowercase hex digits (RFC 9562's form).
pub fn uuid_text(uuid: &[u8; 16]) -> UuidText {
    let mut out = [0u8; 36];
    let mut at = 0;
    for (i, b) in uuid.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out[at] = b'-';
            at += 1;
        }
        let hex = b"0123456789abcdef";
        out[at] = hex[usize::from(b >> 4)];
        out[at + 1] = hex[usize::from(b & 15)];
        at += 2;
    }
    UuidText(out)
}

/// A device UUID as text ([`DeviceIdentity::uuid_string`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UuidText([u8; 36]);

impl UuidText {
    /// The 36 characters.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl core::fmt::Display for UuidText {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.pad(self.as_str())
    }
}

impl core::fmt::Debug for UuidText {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// The printable ASCII of `field` up to its first NUL or other byte.
fn ascii_field(field: &[u8]) -> &str {
    let end = field
        .iter()
        .position(|&b| !(b.is_ascii_graphic() || b == b' '))
        .unwrap_or(field.len());
    core::str::from_utf8(field.get(..end).unwrap_or(&[])).unwrap_or("")
}
