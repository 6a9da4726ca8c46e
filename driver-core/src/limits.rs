//! The device's fixed capacities (every table is a fixed-size array: no heap) and what its
//! software engine runs. GET_INFO reports them; the kernel module sizes its buffers by them.

/// Most open files (clients and control opens) at once: 256 clients and room for the
/// operators' tools (davinci-smi, the exporter, the device plugin) besides.
pub const MAX_CLIENTS: usize = 320;
/// Most contexts on a device.
pub const MAX_CONTEXTS: usize = 256;
/// Most streams on a device.
pub const MAX_STREAMS: usize = 256;
/// Most events on a device.
pub const MAX_EVENTS: usize = 1024;
/// Most allocations on a device.
pub const MAX_ALLOCATIONS: usize = 1024;
/// Blocks of the device-memory allocator: every allocation and the free gaps between them.
pub(crate) const MAX_BLOCKS: usize = 2 * MAX_ALLOCATIONS + 1;
/// Deepest command ring.
pub const MAX_CMD_ENTRIES: u32 = 4096;
/// Deepest event ring.
pub const MAX_EVENT_ENTRIES: u32 = 8192;
/// Longest container id kept (bytes).
pub const CONTAINER_LEN: usize = 64;

/// Opcodes the software engine runs (bit `n` = `DAVINCI_OP_*` value `n`): NOP, FILL, COPY, ADD,
/// EVENT_RECORD, EVENT_WAIT; not KERNEL_LAUNCH (hardware only).
pub const SUPPORTED_OPCODES: u32 = (1 << 6) - 1;
