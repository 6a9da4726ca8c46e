//! Arguments of the commands only a client may call: creating and destroying its contexts,
//! device memory, streams and events (a single handle destroys any of them), submitting a task
//! through the slow path, and waiting for a stream or an event.

use crate::layout::{abi_struct, ConstGroup};
use crate::rings::RingMapping;
use crate::task::TaskDesc;

abi_struct! {
    /// A single handle (DESTROY_CONTEXT, FREE_MEMORY, DESTROY_STREAM, DESTROY_EVENT, NOTIFY).
    #[c_name = "davinci_handle_args"]
    pub struct HandleArgs {
        /// The handle (to driver).
        pub handle: u32,
        /// Reserved, must be 0 (to driver).
        pub pad: u32,
    }
}

abi_struct! {
    /// CREATE_CONTEXT: a context groups streams and events; handles are per client.
    #[c_name = "davinci_create_context_args"]
    pub struct CreateContextArgs {
        /// Reserved context flags, must be 0 (to driver).
        pub flags: u32,
        /// The new context handle (from driver).
        pub handle: u32,
        /// Reserved, must be 0 (to driver).
        pub reserved: u64,
    }
}

abi_struct! {
    /// ALLOC_MEMORY: allocate device memory. The driver assigns the device address; there is
    /// no way to name physical memory. The memory starts zeroed.
    #[c_name = "davinci_alloc_memory_args"]
    pub struct AllocMemoryArgs {
        /// Requested size in bytes, > 0 (to driver).
        pub size: u64,
        /// Reserved allocation flags, must be 0 (to driver).
        pub flags: u32,
        /// Allocation handle (from driver).
        pub handle: u32,
        /// Device virtual address of the first byte, aligned to `davinci_device_info.mem_align` (from driver).
        pub dev_addr: u64,
        /// Size actually reserved (`size` rounded up to `mem_align`) (from driver).
        pub alloc_size: u64,
        /// mmap offset cookie of the host view; map `alloc_size` rounded up to a page (from driver).
        pub mmap_offset: u64,
    }
}

abi_struct! {
    /// CREATE_STREAM: a stream is an ordered queue with a command ring, an event ring and a
    /// doorbell. The reply says where each is mapped and where each ring field lives.
    #[c_name = "davinci_create_stream_args"]
    pub struct CreateStreamArgs {
        /// Context handle (to driver).
        pub ctx: u32,
        /// Reserved stream flags, must be 0 (to driver).
        pub flags: u32,
        /// Command-ring depth, a power of two within `davinci_device_info` limits (to driver).
        pub cmd_entries: u32,
        /// Event-ring depth, a power of two, >= `cmd_entries` (to driver).
        pub event_entries: u32,
        /// The new stream handle (from driver).
        pub handle: u32,
        /// Reserved, must be 0 (to driver).
        pub pad: u32,
        /// Command ring mapping (from driver).
        pub cmd_ring: RingMapping,
        /// Event ring mapping (from driver).
        pub event_ring: RingMapping,
        /// mmap offset cookie of the doorbell page (from driver).
        pub doorbell_offset: u64,
        /// Length of the doorbell mapping (one page) (from driver).
        pub doorbell_size: u64,
        /// Reserved, must be 0 (to driver).
        pub reserved: [u64; 2],
    }
}

abi_struct! {
    /// CREATE_EVENT: an event is a monotonically increasing 64-bit value within a context,
    /// raised by EVENT_RECORD descriptors and awaited by EVENT_WAIT descriptors or WAIT_EVENT.
    #[c_name = "davinci_create_event_args"]
    pub struct CreateEventArgs {
        /// Context handle (to driver).
        pub ctx: u32,
        /// Reserved event flags, must be 0 (to driver).
        pub flags: u32,
        /// The new event handle (from driver).
        pub handle: u32,
        /// Reserved, must be 0 (to driver).
        pub pad: u32,
    }
}

abi_struct! {
    /// SUBMIT_TASK: the slow path. The driver places `desc` into the stream's command ring as
    /// if the client had produced it (reading the shared tail once), publishes it, and wakes
    /// the device. The client must not have unpublished slots in that ring meanwhile.
    #[c_name = "davinci_submit_task_args"]
    pub struct SubmitTaskArgs {
        /// Stream handle (to driver).
        pub stream: u32,
        /// Reserved submit flags, must be 0 (to driver).
        pub flags: u32,
        /// The descriptor (to driver).
        pub desc: TaskDesc,
        /// Free-running ring index the descriptor was placed at (from driver).
        pub index: u32,
        /// Reserved, must be 0 (to driver).
        pub pad: u32,
    }
}

abi_struct! {
    /// WAIT_EVENT: block until a stream or an event reaches a value, or the timeout passes.
    #[c_name = "davinci_wait_event_args"]
    pub struct WaitEventArgs {
        /// `DAVINCI_WAIT_STREAM` (1) or `DAVINCI_WAIT_EVENT` (2) (to driver).
        pub kind: u32,
        /// Stream or event handle (to driver).
        pub handle: u32,
        /// Stream: number of completions the stream must have produced (its event-ring tail,
        /// a free-running 32-bit count, compared wrapping); the high 32 bits must be 0
        /// (`EINVAL`). Event: the value it must reach (to driver).
        pub value: u64,
        /// Relative timeout in nanoseconds on the monotonic clock; 0 polls once and returns
        /// `EAGAIN` if not reached; `DAVINCI_WAIT_FOREVER` waits without limit (to driver).
        pub timeout_ns: u64,
        /// The current value when the call returned (from driver).
        pub current: u64,
        /// Stream: 0, or the errno that put the stream in the error state (the call then fails
        /// with `EIO`) (from driver).
        pub status: u32,
        /// Reserved, must be 0 (to driver).
        pub pad: u32,
    }
}

abi_struct! {
    /// EXPORT_MEMORY (ABI 1.4, `DAVINCI_FEAT_SHARED_MEMORY`): makes one of the caller's
    /// allocations importable by another client of the same device, named by a token the
    /// caller hands over through a channel of its own. Who may import it is explicit: the
    /// clients of one user, or one client of that user. Exporting an exported allocation
    /// again returns its token again (with the grant unchanged).
    #[c_name = "davinci_export_memory_args"]
    pub struct ExportMemoryArgs {
        /// The allocation, one of the caller's own (not an imported one) (to driver).
        pub handle: u32,
        /// Export flags: 0, or `DAVINCI_EXPORT_FLAG_FD` (ABI 1.5) for an export that is an fd
        /// (to driver).
        pub flags: u32,
        /// The user whose clients may import it: a uid, or `DAVINCI_EXPORT_OWN_UID` for the
        /// caller's own user (to driver).
        pub uid: u32,
        /// Only this client (its `client_id`) may import it; 0: any client of that user
        /// (to driver). The code calls it the importer's `client_id` (its `client` is an
        /// open's handle in the driver's client table).
        pub client: u32,
        /// The token that names the export (an opaque, unguessable value); with
        /// `DAVINCI_EXPORT_FLAG_FD`, the new fd in the low 32 bits (from driver).
        pub token: u64,
    }
}

abi_struct! {
    /// EXPORT_RANGE (ABI 1.5, `DAVINCI_FEAT_EXPORT_LEASE`): as EXPORT_MEMORY, of whole pages
    /// of one of the caller's allocations: `[offset, offset + len)`, both multiples of
    /// GET_INFO's `page_size` (a pool's block, not the chunk it was carved from). An importer
    /// reaches that range only: its descriptors fault outside it and its view maps it alone.
    /// An allocation may have several exports (ranges, grants, kinds); the same range
    /// exported again the same way to the same grantee returns the same token.
    #[c_name = "davinci_export_range_args"]
    pub struct ExportRangeArgs {
        /// The allocation, one of the caller's own (not an imported one) (to driver).
        pub handle: u32,
        /// Export flags: `DAVINCI_EXPORT_FLAG_FD`, `DAVINCI_EXPORT_FLAG_LEASE` (to driver).
        pub flags: u32,
        /// The user whose clients may import it: a uid, or `DAVINCI_EXPORT_OWN_UID` (to
        /// driver).
        pub uid: u32,
        /// Only this client (its `client_id`) may import it; 0: any client of that user (to
        /// driver).
        pub client: u32,
        /// Bytes from the allocation's start to the range's, whole pages (to driver).
        pub offset: u64,
        /// Bytes of the range, whole pages, not 0 (to driver).
        pub len: u64,
        /// The token that names the export; with `DAVINCI_EXPORT_FLAG_FD`, the new fd in the
        /// low 32 bits (from driver).
        pub token: u64,
    }
}

abi_struct! {
    /// UNEXPORT_MEMORY (ABI 1.5, `DAVINCI_FEAT_EXPORT_LEASE`): ends the exports of one range
    /// of one of the caller's allocations (every grant and kind of it) without freeing the
    /// allocation: a pool takes a block back. An export without a lease goes now and
    /// revokes its imports (as the allocation's free would); a lease takes no new import and
    /// goes with the last of its imports, and `imports` says how many are left: the memory
    /// is theirs until then (0: the range is the caller's alone again). Ending exports that
    /// ended already is not an error (asking again is how a caller learns the imports left).
    #[c_name = "davinci_unexport_memory_args"]
    pub struct UnexportMemoryArgs {
        /// The allocation, one of the caller's own (to driver).
        pub handle: u32,
        /// Reserved, must be 0 (to driver).
        pub flags: u32,
        /// The range, as EXPORT_RANGE named it; `offset` and `len` 0: the whole allocation,
        /// as EXPORT_MEMORY names it (to driver).
        pub offset: u64,
        /// Bytes of the range (to driver).
        pub len: u64,
        /// Imports of leases of the range still standing (from driver).
        pub imports: u32,
        /// Reserved, must be 0 (to driver).
        pub pad: u32,
    }
}

abi_struct! {
    /// IMPORT_MEMORY (ABI 1.4, `DAVINCI_FEAT_SHARED_MEMORY`): the allocation an export's token
    /// names, as a new handle of the caller's: descriptors of the caller may name its device
    /// address, and its host view is mapped at `mmap_offset`, like an allocation's. The
    /// exporter's FREE_MEMORY (or close) revokes every import (docs/abi.md, IMPORT_MEMORY).
    #[c_name = "davinci_import_memory_args"]
    pub struct ImportMemoryArgs {
        /// The export's token; with `DAVINCI_IMPORT_FLAG_FD`, an export fd in the low 32 bits
        /// (to driver).
        pub token: u64,
        /// The import's handle: FREE_MEMORY it when done (from driver).
        pub handle: u32,
        /// Import flags: 0, or `DAVINCI_IMPORT_FLAG_FD` (ABI 1.5) when `token` is an fd (to
        /// driver).
        pub flags: u32,
        /// Device address of the first byte: the exporter's (from driver).
        pub dev_addr: u64,
        /// Bytes of the allocation (its `alloc_size`) (from driver).
        pub size: u64,
        /// mmap offset cookie of the host view (from driver).
        pub mmap_offset: u64,
    }
}

abi_struct! {
    /// EXPORT_EVENT (ABI 1.5, `DAVINCI_FEAT_SHARED_EVENTS`): makes one of the caller's events
    /// importable by another client of the same device (`cudaIpcGetEventHandle`, HCCL's
    /// notify), named by a token as EXPORT_MEMORY's, with the same grant: the clients of one
    /// user, or one client of that user. An importer waits for the event's values, on the
    /// device (EVENT_WAIT descriptors) and on the host (WAIT_EVENT); only the exporter records
    /// it. Exporting an exported event again returns its token again (the grant unchanged).
    #[c_name = "davinci_export_event_args"]
    pub struct ExportEventArgs {
        /// The event, one of the caller's own (not an imported one) (to driver).
        pub handle: u32,
        /// Reserved export flags, must be 0 (to driver).
        pub flags: u32,
        /// The user whose clients may import it: a uid, or `DAVINCI_EXPORT_OWN_UID` (to
        /// driver).
        pub uid: u32,
        /// Only this client (its `client_id`) may import it; 0: any client of that user (to
        /// driver).
        pub client: u32,
        /// The token that names the export (from driver).
        pub token: u64,
    }
}

abi_struct! {
    /// IMPORT_EVENT (ABI 1.5, `DAVINCI_FEAT_SHARED_EVENTS`): the event an export's token names,
    /// as a new event handle of the caller's in one of its contexts: its streams' EVENT_WAIT
    /// descriptors and its WAIT_EVENT calls wait for the exporter's values; an EVENT_RECORD
    /// of it fails (`EPERM`). DESTROY_EVENT ends the import. When the exporter destroys the
    /// event (or closes), every wait on an import of it ends with `ECANCELED`, now and
    /// later; the import stays the importer's until it destroys it.
    #[c_name = "davinci_import_event_args"]
    pub struct ImportEventArgs {
        /// The export's token (to driver).
        pub token: u64,
        /// The caller's context the import belongs to (its streams may wait for it) (to
        /// driver).
        pub ctx: u32,
        /// Reserved import flags, must be 0 (to driver).
        pub flags: u32,
        /// The import's event handle: DESTROY_EVENT it when done (from driver).
        pub handle: u32,
        /// Reserved, must be 0 (to driver).
        pub pad: u32,
    }
}

/// `ExportMemoryArgs::uid` for the exporter's own user.
pub const EXPORT_OWN_UID: u32 = u32::MAX;

/// Who may import, for the C header.
pub(crate) const EXPORT_UIDS: ConstGroup = ConstGroup {
    title: "Who may import an export (davinci_export_memory_args.uid)",
    c_prefix: "DAVINCI_EXPORT_",
    items: &[(
        "OWN_UID",
        EXPORT_OWN_UID as u64,
        "the clients of the exporter's own user",
    )],
};

/// `ExportMemoryArgs::flags` (ABI 1.5, `DAVINCI_FEAT_EXPORT_FD`): the export is a capability,
/// an fd: the call returns a new file descriptor (close-on-exec) in `token`'s low 32 bits,
/// and only IMPORT_MEMORY with [`IMPORT_FLAG_FD`] and that fd imports it (by token it is
/// `ENOENT`). The grant (`uid`, `client`) still applies to whoever imports.
pub const EXPORT_FLAG_FD: u32 = 1;

/// `ExportMemoryArgs::flags`, `ExportRangeArgs::flags` (ABI 1.5, `DAVINCI_FEAT_EXPORT_LEASE`):
/// the export is a lease. The exporter's FREE_MEMORY then leaves the memory to the imports
/// of it until the last one is freed (still charged to the exporter, in its usage and
/// LIST_CLIENTS' memory; its handle names nothing any more); without it, FREE_MEMORY
/// revokes every import. The exporter's close revokes every import, leases too. A lease
/// whose exporter freed its allocation takes no new import.
pub const EXPORT_FLAG_LEASE: u32 = 2;

/// `ImportMemoryArgs::flags` (ABI 1.5, `DAVINCI_FEAT_EXPORT_FD`): `token`'s low 32 bits are
/// a file descriptor EXPORT_MEMORY returned with [`EXPORT_FLAG_FD`] (received over
/// `SCM_RIGHTS`, inherited, or the exporter's own), not a token.
pub const IMPORT_FLAG_FD: u32 = 1;

/// EXPORT_MEMORY's flags, for the C header.
pub(crate) const EXPORT_FLAGS: ConstGroup = ConstGroup {
    title: "EXPORT_MEMORY and EXPORT_RANGE flags (davinci_export_memory_args.flags; ABI 1.5)",
    c_prefix: "DAVINCI_EXPORT_FLAG_",
    items: &[
        (
            "FD",
            EXPORT_FLAG_FD as u64,
            "the export is an fd, returned in token; only an import of that fd reaches it",
        ),
        (
            "LEASE",
            EXPORT_FLAG_LEASE as u64,
            "the memory outlives the exporter's FREE_MEMORY until its last import is freed",
        ),
    ],
};

/// IMPORT_MEMORY's flags, for the C header.
pub(crate) const IMPORT_FLAGS: ConstGroup = ConstGroup {
    title: "IMPORT_MEMORY flags (davinci_import_memory_args.flags; ABI 1.5)",
    c_prefix: "DAVINCI_IMPORT_FLAG_",
    items: &[(
        "FD",
        IMPORT_FLAG_FD as u64,
        "token holds an export fd (EXPORT_MEMORY with DAVINCI_EXPORT_FLAG_FD), not a token",
    )],
};

/// `WaitEventArgs::timeout_ns` that waits without limit.
pub const WAIT_FOREVER: u64 = u64::MAX;

/// What WAIT_EVENT waits on (`WaitEventArgs::kind`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitKind {
    /// A stream's completion count (event-ring tail).
    Stream = 1,
    /// An event's value.
    Event = 2,
}

impl WaitKind {
    /// Decodes a wire value.
    pub const fn from_u32(v: u32) -> Option<WaitKind> {
        match v {
            1 => Some(WaitKind::Stream),
            2 => Some(WaitKind::Event),
            _ => None,
        }
    }
}

/// What WAIT_EVENT waits on, for the C header.
pub(crate) const WAIT_KINDS: ConstGroup = ConstGroup {
    title: "What WAIT_EVENT waits on (davinci_wait_event_args.kind)",
    c_prefix: "DAVINCI_WAIT_",
    items: &[
        (
            "STREAM",
            WaitKind::Stream as u64,
            "a stream's completion count",
        ),
        ("EVENT", WaitKind::Event as u64, "an event's value"),
    ],
};
