//! What the device is and how it is shared: GET_INFO (ABI version, feature bits, limits,
//! memory) and QUERY/SET_DEVICE_SHARE with the sharing modes.

use crate::layout::{abi_flags, abi_struct, ConstGroup};

abi_struct! {
    /// GET_INFO: ABI version, features, limits and memory of the device. Any open may call it.
    #[c_name = "davinci_device_info"]
    pub struct DeviceInfo {
        /// ABI major version of the driver (from driver). A client refuses another major.
        pub abi_major: u16,
        /// ABI minor version of the driver (from driver).
        pub abi_minor: u16,
        /// `DAVINCI_FEAT_*` bits (from driver).
        pub features: Features,
        /// Device index N of /dev/davinciN (from driver).
        pub device_id: u32,
        /// Page size of mappings (from driver).
        pub page_size: u32,
        /// Total device memory in bytes (from driver).
        pub memory_size: u64,
        /// Device memory allocated by all clients (from driver).
        pub memory_used: u64,
        /// Device memory one client may hold now, in bytes: the operator's limit, or without
        /// one (since 1.4) a quarter of `memory_size` while the device is shared and all of
        /// it while it is exclusive (from driver).
        pub client_memory_limit: u64,
        /// Most clients attached at once (from driver).
        pub max_clients: u32,
        /// Most contexts on the device (from driver).
        pub max_contexts: u32,
        /// Most streams on the device (from driver).
        pub max_streams: u32,
        /// Most events on the device (from driver).
        pub max_events: u32,
        /// Most allocations on the device (from driver).
        pub max_allocations: u32,
        /// Deepest command ring (from driver).
        pub max_cmd_entries: u32,
        /// Deepest event ring (from driver).
        pub max_event_entries: u32,
        /// Alignment of every allocation's device address and size (from driver).
        pub mem_align: u32,
        /// `DAVINCI_SHARE_*` mode now in force (from driver).
        pub share_mode: u32,
        /// Clients attached now (from driver).
        pub clients: u32,
        /// The caller's own client id, as LIST_CLIENTS reports it in `client_id` (0 for a
        /// control open, which is not a client); valid with `DAVINCI_FEAT_CALLER_ID`
        /// (from driver). ABI 1.1. The code calls it the caller's `client_id`.
        pub caller_id: u32,
        /// Bit `n` set: opcode `n` (`DAVINCI_OP_*`) runs on this device; a descriptor with
        /// another opcode fails with `EBADMSG`. Valid with `DAVINCI_FEAT_OPCODE_MASK`
        /// (from driver). ABI 1.1.
        pub opcodes: u32,
        /// Most contexts the caller may hold at once now: the per-client quota while the
        /// device is shared, `max_contexts` while it is exclusive. Valid with
        /// `DAVINCI_FEAT_QUOTAS` (from driver). ABI 1.4.
        pub quota_contexts: u32,
        /// Most streams the caller may hold at once now (as `quota_contexts`) (from driver).
        /// ABI 1.4.
        pub quota_streams: u32,
        /// Most events the caller may hold at once now (as `quota_contexts`) (from driver).
        /// ABI 1.4.
        pub quota_events: u32,
        /// Most allocations the caller may hold at once now (as `quota_contexts`)
        /// (from driver). ABI 1.4.
        pub quota_allocations: u32,
        /// With `DAVINCI_FEAT_DOORBELL_MMIO`: the byte offset of the doorbell register in
        /// the stream's mapped doorbell page (4-byte aligned, the register inside the page);
        /// 0 without it (from driver). ABI 1.4.
        pub doorbell_offset: u32,
        /// With `DAVINCI_FEAT_DOORBELL_MMIO`: the value the client stores into the doorbell
        /// register to ring it, the same for every ring (not the command ring's tail); 0
        /// without it (from driver). ABI 1.4.
        pub doorbell_value: u32,
    }
}

abi_struct! {
    /// QUERY_DEVICE_SHARE (all fields from driver) and SET_DEVICE_SHARE (`mode` to driver,
    /// the rest must be 0).
    #[c_name = "davinci_device_share_args"]
    pub struct DeviceShareArgs {
        /// `DAVINCI_SHARE_EXCLUSIVE` (0) or `DAVINCI_SHARE_SHARED` (1) (to driver for SET,
        /// from driver for QUERY).
        pub mode: u32,
        /// Clients attached (from driver, QUERY); must be 0 (to driver, SET).
        pub clients: u32,
        /// Reserved: ignore it (from driver, QUERY; a later minor may use it); must be 0
        /// (to driver, SET).
        pub reserved: u64,
    }
}

abi_flags! {
    /// Feature bits in `davinci_device_info.features`. Probe these instead of comparing
    /// versions.
    #[c_prefix = "DAVINCI_FEAT_"]
    pub struct Features: u32 {
        /// The doorbell is a device register (a PCI device's): to ring it, store
        /// `davinci_device_info.doorbell_value` into the `__u32` at byte
        /// `davinci_device_info.doorbell_offset` of the stream's mapped doorbell page, with
        /// one volatile 32-bit write after a release fence. Every such write wakes the device;
        /// the value is the device's, never the command ring's tail (ABI 1.4; no earlier
        /// driver set this bit). Wins if `DAVINCI_FEAT_DOORBELL_FUTEX` is set too: write the
        /// register, no futex call.
        const DOORBELL_MMIO = 1 << 0;
        /// The doorbell is a memory word a software device watches (the mock device): to
        /// ring it, increment the word atomically (`__atomic_fetch_add(word, 1,
        /// __ATOMIC_RELAXED)`), then `FUTEX_WAKE` it as a shared futex (not
        /// `FUTEX_WAKE_PRIVATE`). Never write the tail into it (ABI 1.0's rule): a host that
        /// rang twice with the same tail, after a publish and after a reap, left the word
        /// unchanged and the device asleep.
        const DOORBELL_FUTEX = 1 << 1;
        /// SUBMIT_TASK (the slow path) is available.
        const SUBMIT_IOCTL = 1 << 2;
        /// Events (CREATE_EVENT, EVENT_RECORD, EVENT_WAIT) are available.
        const EVENTS = 1 << 3;
        /// Device sharing (QUERY/SET_DEVICE_SHARE) is available.
        const DEVICE_SHARE = 1 << 4;
        /// LIST_CLIENTS is available.
        const LIST_CLIENTS = 1 << 5;
        /// GET_INFO's `caller_id` is the caller's own client id (ABI 1.1).
        const CALLER_ID = 1 << 6;
        /// GET_INFO's `opcodes` lists the opcodes the device runs (ABI 1.1).
        const OPCODE_MASK = 1 << 7;
        /// GET_LAST_ERROR says why the last failed command of an open failed (ABI 1.2).
        const LAST_ERROR = 1 << 8;
        /// A failed descriptor's event record carries a fault in `result`: which operand
        /// (`DAVINCI_FAULT_OPERAND_*`), what was wrong (`DAVINCI_FAULT_*`), by how much
        /// (ABI 1.2).
        const FAULT_DETAIL = 1 << 9;
        /// GET_COUNTERS reports device-wide counters (ABI 1.3).
        const COUNTERS = 1 << 10;
        /// GET_INFO's `quota_*` fields say what the caller may hold (ABI 1.4).
        const QUOTAS = 1 << 11;
        /// LIST_CLIENTS lists the caller's own user's clients only, unless the caller is an
        /// admin (ABI 1.4; before, every caller saw every client).
        const OWN_CLIENTS = 1 << 12;
        /// EXPORT_MEMORY and IMPORT_MEMORY share allocations between clients (ABI 1.4).
        const SHARED_MEMORY = 1 << 13;
        /// GET_IDENTITY reports the device's UUID, model, driver and NUMA node, and
        /// GET_COUNTERS its busy time, clock, engines and health; LIST_CLIENTS's entries
        /// carry each client's `busy_ns` (ABI 1.4).
        const IDENTITY = 1 << 14;
        /// GET_USAGE reports the caller's own usage against each of its quotas, the export
        /// quota among them (ABI 1.5).
        const USAGE = 1 << 15;
        /// TENANT_SHARE reads and sets how many tenant slots a tenant counts for, and
        /// GET_USAGE's limits are its tenant's (ABI 1.5).
        const TENANT_SHARE = 1 << 16;
        /// EXPORT_MEMORY can make an export that is a file descriptor, which IMPORT_MEMORY
        /// takes (`DAVINCI_EXPORT_FLAG_FD`, `DAVINCI_IMPORT_FLAG_FD`; ABI 1.5): the host's
        /// (the kernel module's), not every device's.
        const EXPORT_FD = 1 << 17;
        /// The device runs the built-in kernels LIST_KERNELS lists (KERNEL_LAUNCH,
        /// `DAVINCI_KERNEL_*`; ABI 1.5). Without it LIST_KERNELS answers 0 kernels and a
        /// launch fails with `EBADMSG` (`HANDLE`, `UNKNOWN`).
        const KERNELS = 1 << 18;
        /// FILL takes `DAVINCI_DTYPE_U8` and `U16` patterns, and ADD the dtypes F16, BF16,
        /// I8, U8 and U16 (ABI 1.5).
        const DTYPES = 1 << 19;
        /// EXPORT_EVENT and IMPORT_EVENT share events between clients: an importer's streams
        /// and host wait for the exporter's values (ABI 1.5).
        const SHARED_EVENTS = 1 << 20;
        /// EXPORT_MEMORY's lease flag (`DAVINCI_EXPORT_FLAG_LEASE`: the memory outlives the
        /// exporter's free while imported), EXPORT_RANGE (whole pages of an allocation),
        /// UNEXPORT_MEMORY, and several exports of one allocation (ABI 1.5).
        const EXPORT_LEASE = 1 << 21;
        /// GET_SENSORS reports the device's temperature, power, voltage and throttle
        /// reasons, and GET_IDENTITY's `chip_name` its chip name (ABI 1.5).
        const SENSORS = 1 << 22;
        /// TRACE: per-task timelines of the open's streams (an admin's: the device's)
        /// (ABI 1.5).
        const TRACE = 1 << 23;
        /// READ_EVENTS: the device's coded event log (ABI 1.5).
        const DEVICE_EVENTS = 1 << 24;
    }
}

impl DeviceInfo {
    /// `share_mode` as a [`ShareMode`] (`None` for a value this ABI does not define).
    pub const fn share_mode(&self) -> Option<ShareMode> {
        ShareMode::from_u32(self.share_mode)
    }
}

/// Device sharing mode (`DeviceShareArgs::mode`, `DeviceInfo::share_mode`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShareMode {
    /// One client at a time; a second open fails with `EBUSY`. The default.
    Exclusive = 0,
    /// Many clients, each isolated.
    Shared = 1,
}

impl ShareMode {
    /// Every mode, in wire order.
    pub const ALL: [ShareMode; 2] = [ShareMode::Exclusive, ShareMode::Shared];

    /// Decodes a wire value.
    pub const fn from_u32(v: u32) -> Option<ShareMode> {
        match v {
            0 => Some(ShareMode::Exclusive),
            1 => Some(ShareMode::Shared),
            _ => None,
        }
    }

    /// The mode's one spelling in every tool, log line, metric label and JSON document:
    /// `"exclusive"` or `"shared"` (what [`FromStr`](core::str::FromStr) accepts, in any case).
    pub const fn name(self) -> &'static str {
        match self {
            ShareMode::Exclusive => "exclusive",
            ShareMode::Shared => "shared",
        }
    }
}

impl core::fmt::Display for ShareMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.pad(self.name())
    }
}

/// A share-mode name that is neither `exclusive` nor `shared`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownShareMode;

impl core::fmt::Display for UnknownShareMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("expected exclusive or shared")
    }
}

impl core::str::FromStr for ShareMode {
    type Err = UnknownShareMode;

    /// `exclusive` or `shared`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ShareMode::ALL
            .into_iter()
            .find(|m| s.eq_ignore_ascii_case(m.name()))
            .ok_or(UnknownShareMode)
    }
}

/// The sharing modes, for the C header.
pub(crate) const SHARE_MODES: ConstGroup = ConstGroup {
    title: "Device sharing modes (davinci_device_share_args.mode)",
    c_prefix: "DAVINCI_SHARE_",
    items: &[
        (
            "EXCLUSIVE",
            ShareMode::Exclusive as u64,
            "one client at a time (default)",
        ),
        ("SHARED", ShareMode::Shared as u64, "many isolated clients"),
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_mode_names_round_trip() {
        for m in ShareMode::ALL {
            assert_eq!(ShareMode::from_u32(m as u32), Some(m));
            assert_eq!(m.name().parse(), Ok(m));
        }
        assert_eq!("SHARED".parse(), Ok(ShareMode::Shared));
        assert_eq!(ShareMode::Exclusive.name(), "exclusive");
        assert_eq!("both".parse::<ShareMode>(), Err(UnknownShareMode));
        assert_eq!("".parse::<ShareMode>(), Err(UnknownShareMode));
    }
}
