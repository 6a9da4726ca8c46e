//! The device's fixed capacities (every table is a fixed-size array: no heap) and what its
//! software engine runs. GET_INFO reports them; the kernel module sizes its buffers by them.

/// Most open files (clients and control opens) at once: [`MAX_CLIENT_OPENS`] clients and
/// room for the operators' tools (davinci-smi, the exporter, the device plugin) besides.
pub const MAX_CLIENTS: usize = 320;
/// Most client opens at once: the other `MAX_CLIENTS - MAX_CLIENT_OPENS` slots are only ever
/// control opens, so tenants cannot take the operators' room.
pub const MAX_CLIENT_OPENS: usize = 256;
/// Most control opens of non-admin users at once (a tenant may look at the device too, but
/// cannot take the operators' room): at least `MAX_CLIENTS - MAX_CLIENT_OPENS -
/// MAX_USER_CONTROL_OPENS` slots stay for admins whatever the tenants hold.
pub const MAX_USER_CONTROL_OPENS: usize = 32;
/// Most control opens of one non-admin tenant at once. (A tenant's client opens are its
/// share of [`MAX_CLIENT_OPENS`] over the tenant slots: `DeviceCore::tenant_slots`.)
pub const MAX_CONTROL_OPENS_PER_TENANT: usize = 8;
/// Tenant slots of a device unless its host sets others: four tenants each get a quarter.
pub const DEFAULT_TENANT_SLOTS: u32 = 4;
/// Most tenant slots a host may set.
pub const MAX_TENANT_SLOTS: u32 = 64;
/// Most tenants an operator's share setting (TENANT_SHARE) is kept for at once.
pub const MAX_TENANT_SETTINGS: usize = 64;
/// Most contexts on a device.
pub const MAX_CONTEXTS: usize = 256;
/// Most streams on a device.
pub const MAX_STREAMS: usize = 256;
/// Most events on a device.
pub const MAX_EVENTS: usize = 1024;
/// Most allocations on a device.
pub const MAX_ALLOCATIONS: usize = 1024;
/// Most exports (EXPORT_MEMORY) on a device at once.
pub const MAX_EXPORTS: usize = 256;
/// Most exports one client holds at once (a quarter of the device's), so one tenant cannot
/// take every export.
pub const MAX_CLIENT_EXPORTS: usize = MAX_EXPORTS / 4;
/// Most imports of one export at once.
pub const MAX_IMPORTERS: usize = 8;
/// Most exported events (EXPORT_EVENT, ABI 1.5) on a device at once.
pub const MAX_EVENT_EXPORTS: usize = MAX_EXPORTS;
/// Blocks of the device-memory allocator: every allocation and the free gaps between them.
pub(crate) const MAX_BLOCKS: usize = 2 * MAX_ALLOCATIONS + 1;
/// Deepest command ring.
pub const MAX_CMD_ENTRIES: u32 = 4096;
/// Deepest event ring.
pub const MAX_EVENT_ENTRIES: u32 = 8192;
/// Longest container id kept (bytes).
pub const CONTAINER_LEN: usize = 64;

/// Opcodes the software engine runs (bit `n` = `DAVINCI_OP_*` value `n`): NOP, FILL, COPY, ADD,
/// EVENT_RECORD, EVENT_WAIT; GET_INFO adds KERNEL_LAUNCH where the build runs kernels
/// (feature `kernels`).
pub const SUPPORTED_OPCODES: u32 = (1 << 6) - 1;

/// Work one stream's pass may do on long tasks before the engine returns and the host lets
/// the others run (and the control path in), in bytes filled: COPY costs
/// [`COPY_COST`] per byte, ADD [`ADD_COST`] (U32, I32) or [`ADD_F32_COST`] (F32, soft-float).
/// A task longer than that runs over several passes ([`Run::Continuing`](crate::Run)); it
/// is divided among a client's streams, so a client's pass does this much work however many
/// streams it has (down to [`MIN_PASS_WORK`] a stream; docs/abi.md 6).
pub const PASS_WORK: u64 = 1 << 20;
/// The least work a stream's pass does on a long task, however many streams its client has.
pub const MIN_PASS_WORK: u64 = 16 << 10;
/// Work per byte of COPY (a read and a write).
pub const COPY_COST: u64 = 2;
/// Work per byte of ADD on 32-bit integers (two reads, a write).
pub const ADD_COST: u64 = 4;
/// Work per byte of ADD on F32 (soft-float, every host the same bits).
pub const ADD_F32_COST: u64 = 32;

/// What one client may hold of each device-wide table while the device is shared (an
/// exclusive device's one client may hold all of it): [`Quota::FAIR`] by default, so at least
/// four tenants that each take their whole quota fit; operators choose others
/// (`davinci-mockd --client-quota`, the kernel module's `quota_*` parameters). Exceeding one
/// is `ENOSPC`, naming the quota with its numbers ([`QuotaHit`](crate::QuotaHit)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Contexts.
    pub contexts: u32,
    /// Streams.
    pub streams: u32,
    /// Events.
    pub events: u32,
    /// Allocations (imports included).
    pub allocations: u32,
    /// Exports (EXPORT_MEMORY) (ABI 1.5: settable; [`MAX_CLIENT_EXPORTS`] by default).
    pub exports: u32,
}

impl Quota {
    /// A quarter of each table.
    pub const FAIR: Quota = Quota {
        contexts: (MAX_CONTEXTS / 4) as u32,
        streams: (MAX_STREAMS / 4) as u32,
        events: (MAX_EVENTS / 4) as u32,
        allocations: (MAX_ALLOCATIONS / 4) as u32,
        exports: MAX_CLIENT_EXPORTS as u32,
    };
    /// Each table over `slots` tenant slots (at least 1 of each).
    pub const fn for_slots(slots: u32) -> Quota {
        let n = if slots == 0 { 1 } else { slots as usize };
        const fn part(size: usize, n: usize) -> u32 {
            match size.checked_div(n) {
                Some(p) if p > 0 => p as u32,
                _ => 1,
            }
        }
        Quota {
            contexts: part(MAX_CONTEXTS, n),
            streams: part(MAX_STREAMS, n),
            events: part(MAX_EVENTS, n),
            allocations: part(MAX_ALLOCATIONS, n),
            exports: part(MAX_EXPORTS, n),
        }
    }
    /// Every table whole: no quota.
    pub const NONE: Quota = Quota {
        contexts: MAX_CONTEXTS as u32,
        streams: MAX_STREAMS as u32,
        events: MAX_EVENTS as u32,
        allocations: MAX_ALLOCATIONS as u32,
        exports: MAX_EXPORTS as u32,
    };
}

impl Quota {
    /// Whether every quota is from 1 to its table's size.
    pub const fn is_valid(&self) -> bool {
        let n = Quota::NONE;
        self.contexts >= 1
            && self.contexts <= n.contexts
            && self.streams >= 1
            && self.streams <= n.streams
            && self.events >= 1
            && self.events <= n.events
            && self.allocations >= 1
            && self.allocations <= n.allocations
            && self.exports >= 1
            && self.exports <= n.exports
    }
}

impl Default for Quota {
    fn default() -> Self {
        Quota::FAIR
    }
}
