//! ioctl commands and their argument structs.
//!
//! Every struct is `#[repr(C)]` with only fixed-width integers (user pointers as `u64`), no
//! implicit padding (checked at compile time), and reserved/pad fields that must be zero (the
//! driver rejects non-zero ones with `EINVAL`). "to driver" fields are read by the driver,
//! "from driver" fields are written by it; the driver ignores the incoming value of a
//! "from driver" field.

use crate::ioctl::{ior, iow, iowr};
use crate::layout::{abi_flags, abi_struct, ConstGroup};
use crate::rings::RingMapping;
use crate::task::TaskDesc;

/// The ioctl magic (`type`) byte of every command.
pub const DRIVER_MAGIC: u8 = b'd';

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
        /// Per-client device memory limit in bytes (from driver).
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
        /// (from driver). ABI 1.1.
        pub caller_id: u32,
        /// Bit `n` set: opcode `n` (`DAVINCI_OP_*`) runs on this device; a descriptor with
        /// another opcode fails with `EBADMSG`. Valid with `DAVINCI_FEAT_OPCODE_MASK`
        /// (from driver). ABI 1.1.
        pub opcodes: u32,
        /// Reserved, zero (from driver).
        pub reserved: [u64; 3],
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
        /// Reserved: 0 (from driver, QUERY); must be 0 (to driver, SET).
        pub reserved: u64,
    }
}

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
        /// Reserved, zero (from driver).
        pub pad: u32,
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

/// Bytes of [`LastError::message`], the terminating NUL included.
pub const LAST_ERROR_MESSAGE_LEN: usize = 112;

abi_struct! {
    /// GET_LAST_ERROR (ABI 1.2): why the last failed command of this open file failed, for a
    /// driver whose system calls carry only an errno (the kernel module). Over davinci-mockd
    /// every reply carries its message anyway.
    #[c_name = "davinci_last_error"]
    pub struct LastError {
        /// Request number of the last failed command of this open; 0 if none failed yet
        /// (from driver).
        pub request: u32,
        /// Its errno, positive (from driver). Not named `errno`, which is a macro in C.
        pub error: u32,
        /// Commands of this open that failed so far: two reads with the same count saw the
        /// same failure (from driver).
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
        /// on a driver without `DOORBELL_FUTEX`, a NOTIFY. Near zero per task under load,
        /// when NEED_WAKEUP is clear and hosts do not ring (from driver).
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
        /// Reserved, zero (from driver).
        pub reserved: [u64; 4],
    }
}

abi_flags! {
    /// Feature bits in `DeviceInfo::features`. Probe these instead of comparing versions.
    #[c_prefix = "DAVINCI_FEAT_"]
    pub struct Features: u32 {
        /// Writing the doorbell page is enough to wake the device (real hardware).
        const DOORBELL_MMIO = 1 << 0;
        /// After writing the doorbell word, also `FUTEX_WAKE` it (shared, not private): the
        /// device is software watching that word (mock device).
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
        /// A failed descriptor's event record carries a `Fault` in `result`: which operand,
        /// what was wrong, by how much (ABI 1.2).
        const FAULT_DETAIL = 1 << 9;
        /// GET_COUNTERS reports device-wide counters (ABI 1.3).
        const COUNTERS = 1 << 10;
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

/// `_IOWR('d', 0x01, struct davinci_create_context_args)`.
pub const DRIVER_CMD_CREATE_CONTEXT: u32 = iowr::<CreateContextArgs>(DRIVER_MAGIC, 0x01);
/// `_IOW('d', 0x02, struct davinci_handle_args)`.
pub const DRIVER_CMD_DESTROY_CONTEXT: u32 = iow::<HandleArgs>(DRIVER_MAGIC, 0x02);
/// `_IOWR('d', 0x03, struct davinci_submit_task_args)`.
pub const DRIVER_CMD_SUBMIT_TASK: u32 = iowr::<SubmitTaskArgs>(DRIVER_MAGIC, 0x03);
/// `_IOWR('d', 0x04, struct davinci_alloc_memory_args)`.
pub const DRIVER_CMD_ALLOC_MEMORY: u32 = iowr::<AllocMemoryArgs>(DRIVER_MAGIC, 0x04);
/// `_IOW('d', 0x05, struct davinci_handle_args)`.
pub const DRIVER_CMD_FREE_MEMORY: u32 = iow::<HandleArgs>(DRIVER_MAGIC, 0x05);
/// `_IOWR('d', 0x06, struct davinci_wait_event_args)`.
pub const DRIVER_CMD_WAIT_EVENT: u32 = iowr::<WaitEventArgs>(DRIVER_MAGIC, 0x06);
/// `_IOWR('d', 0x07, struct davinci_create_stream_args)`.
pub const DRIVER_CMD_CREATE_STREAM: u32 = iowr::<CreateStreamArgs>(DRIVER_MAGIC, 0x07);
/// `_IOW('d', 0x08, struct davinci_handle_args)`.
pub const DRIVER_CMD_DESTROY_STREAM: u32 = iow::<HandleArgs>(DRIVER_MAGIC, 0x08);
/// `_IOR('d', 0x09, struct davinci_device_info)`.
pub const DRIVER_CMD_GET_INFO: u32 = ior::<DeviceInfo>(DRIVER_MAGIC, 0x09);
/// `_IOR('d', 0x0a, struct davinci_device_share_args)`.
pub const DRIVER_CMD_QUERY_DEVICE_SHARE: u32 = ior::<DeviceShareArgs>(DRIVER_MAGIC, 0x0a);
/// `_IOW('d', 0x0b, struct davinci_device_share_args)`.
pub const DRIVER_CMD_SET_DEVICE_SHARE: u32 = iow::<DeviceShareArgs>(DRIVER_MAGIC, 0x0b);
/// `_IOWR('d', 0x0c, struct davinci_list_clients_args)`.
pub const DRIVER_CMD_LIST_CLIENTS: u32 = iowr::<ListClientsArgs>(DRIVER_MAGIC, 0x0c);
/// `_IOWR('d', 0x0d, struct davinci_create_event_args)`.
pub const DRIVER_CMD_CREATE_EVENT: u32 = iowr::<CreateEventArgs>(DRIVER_MAGIC, 0x0d);
/// `_IOW('d', 0x0e, struct davinci_handle_args)`.
pub const DRIVER_CMD_DESTROY_EVENT: u32 = iow::<HandleArgs>(DRIVER_MAGIC, 0x0e);
/// `_IOW('d', 0x0f, struct davinci_handle_args)`: wake the device for a stream (the software
/// doorbell, for drivers without `DOORBELL_MMIO` or `DOORBELL_FUTEX`).
pub const DRIVER_CMD_NOTIFY: u32 = iow::<HandleArgs>(DRIVER_MAGIC, 0x0f);
/// `_IOR('d', 0x10, struct davinci_last_error)`: why the last failed command of this open
/// failed (ABI 1.2).
pub const DRIVER_CMD_GET_LAST_ERROR: u32 = ior::<LastError>(DRIVER_MAGIC, 0x10);
/// `_IOR('d', 0x11, struct davinci_device_counters)`: device-wide counters (ABI 1.3).
pub const DRIVER_CMD_GET_COUNTERS: u32 = ior::<DeviceCounters>(DRIVER_MAGIC, 0x11);

/// Direction of an ioctl's argument, as the C macro names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// `_IOR`: the driver writes the argument.
    Read,
    /// `_IOW`: the driver reads the argument.
    Write,
    /// `_IOWR`: both.
    ReadWrite,
}

/// Who may issue a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// Any open file, including a control (operator) open.
    Any,
    /// An attached client (not a control open).
    Client,
    /// An admin (uid 0 or the configured admin group) on any open.
    Admin,
}

/// One command of the ABI.
#[derive(Debug, Clone, Copy)]
pub struct Command {
    /// Name without prefix (`CREATE_CONTEXT`).
    pub name: &'static str,
    /// Command number (`_IOC_NR`).
    pub nr: u8,
    /// Argument direction.
    pub dir: Dir,
    /// C struct tag of the argument.
    pub arg: &'static str,
    /// Argument size.
    pub size: usize,
    /// The full request number.
    pub request: u32,
    /// Who may call it.
    pub caller: Caller,
}

macro_rules! commands {
    ($( $name:ident = $nr:literal, $dir:ident, $ty:ty, $caller:ident, $req:ident; )*) => {
        /// Every command, in number order.
        pub const COMMANDS: &[Command] = &[
            $( Command {
                name: stringify!($name),
                nr: $nr,
                dir: Dir::$dir,
                arg: <$ty as crate::layout::AbiStruct>::INFO.c_name,
                size: core::mem::size_of::<$ty>(),
                request: $req,
                caller: Caller::$caller,
            }, )*
        ];
    };
}

commands! {
    CREATE_CONTEXT = 0x01, ReadWrite, CreateContextArgs, Client, DRIVER_CMD_CREATE_CONTEXT;
    DESTROY_CONTEXT = 0x02, Write, HandleArgs, Client, DRIVER_CMD_DESTROY_CONTEXT;
    SUBMIT_TASK = 0x03, ReadWrite, SubmitTaskArgs, Client, DRIVER_CMD_SUBMIT_TASK;
    ALLOC_MEMORY = 0x04, ReadWrite, AllocMemoryArgs, Client, DRIVER_CMD_ALLOC_MEMORY;
    FREE_MEMORY = 0x05, Write, HandleArgs, Client, DRIVER_CMD_FREE_MEMORY;
    WAIT_EVENT = 0x06, ReadWrite, WaitEventArgs, Client, DRIVER_CMD_WAIT_EVENT;
    CREATE_STREAM = 0x07, ReadWrite, CreateStreamArgs, Client, DRIVER_CMD_CREATE_STREAM;
    DESTROY_STREAM = 0x08, Write, HandleArgs, Client, DRIVER_CMD_DESTROY_STREAM;
    GET_INFO = 0x09, Read, DeviceInfo, Any, DRIVER_CMD_GET_INFO;
    QUERY_DEVICE_SHARE = 0x0a, Read, DeviceShareArgs, Any, DRIVER_CMD_QUERY_DEVICE_SHARE;
    SET_DEVICE_SHARE = 0x0b, Write, DeviceShareArgs, Admin, DRIVER_CMD_SET_DEVICE_SHARE;
    LIST_CLIENTS = 0x0c, ReadWrite, ListClientsArgs, Any, DRIVER_CMD_LIST_CLIENTS;
    CREATE_EVENT = 0x0d, ReadWrite, CreateEventArgs, Client, DRIVER_CMD_CREATE_EVENT;
    DESTROY_EVENT = 0x0e, Write, HandleArgs, Client, DRIVER_CMD_DESTROY_EVENT;
    NOTIFY = 0x0f, Write, HandleArgs, Client, DRIVER_CMD_NOTIFY;
    GET_LAST_ERROR = 0x10, Read, LastError, Any, DRIVER_CMD_GET_LAST_ERROR;
    GET_COUNTERS = 0x11, Read, DeviceCounters, Any, DRIVER_CMD_GET_COUNTERS;
}

/// The command with this request number, if any.
pub fn command_by_request(request: u32) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.request == request)
}

/// Wire constants of this module, for the C header.
pub const CONSTS: &[ConstGroup] = &[
    ConstGroup {
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
    },
    ConstGroup {
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
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_unique_and_ordered() {
        for (i, c) in COMMANDS.iter().enumerate() {
            assert_eq!(c.nr as usize, i + 1, "{} out of order", c.name);
            assert_eq!(crate::ioctl::ioc_nr(c.request), c.nr);
            assert_eq!(crate::ioctl::ioc_type(c.request), DRIVER_MAGIC);
            assert_eq!(crate::ioctl::ioc_size(c.request), c.size);
            assert_eq!(command_by_request(c.request).map(|f| f.name), Some(c.name));
        }
        assert!(command_by_request(0).is_none());
    }

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
