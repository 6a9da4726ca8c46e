//! Seeing what the device did (ABI 1.5): TRACE (per-task timelines, `DAVINCI_FEAT_TRACE`) and
//! READ_EVENTS (the device's coded event log, `DAVINCI_FEAT_DEVICE_EVENTS`).
//!
//! Both read a bounded log by cursor: every record has a sequence number (`seq`, from 0, one
//! counter per log); a read names the first `seq` it wants (`cursor`) and gets the records
//! from there that the log still holds, oldest first, the `cursor` to pass next time, and how
//! many records between the two were overwritten before anyone read them (`lost`). Reads do
//! not consume: several readers each keep their own cursor.

use crate::layout::{abi_struct, ConstGroup};

abi_struct! {
    /// TRACE (ABI 1.5, `DAVINCI_FEAT_TRACE`): starts or stops recording per-task timelines,
    /// or reads what was recorded. A client traces its own streams (scope CLIENT); an admin
    /// (any open) traces every client's (scope DEVICE). While nobody traces, the device
    /// records nothing and pays one branch per pass. Every buffer is bounded
    /// (`DAVINCI_TRACE_RECORDS_MAX` records): when it is full the oldest records go, counted
    /// in `lost`.
    #[c_name = "davinci_trace_args"]
    pub struct TraceArgs {
        /// READ: user pointer to an array of `capacity` `davinci_trace_record` (to driver).
        pub buf: u64,
        /// READ: records the buffer holds; 0 with START/STOP (to driver).
        pub capacity: u32,
        /// READ: records written (from driver).
        pub count: u32,
        /// READ: the stride of the caller's entries, normally `sizeof(struct
        /// davinci_trace_record)`, a multiple of 8 from 8 to 4096 (as LIST_CLIENTS'); 0 with
        /// START/STOP (to driver).
        pub entry_size: u32,
        /// `DAVINCI_TRACE_OP_*` (to driver).
        pub op: u32,
        /// `DAVINCI_TRACE_SCOPE_*`: the open's own streams, or the device's (admin)
        /// (to driver).
        pub scope: u32,
        /// Reserved, must be 0 (to driver).
        pub pad: u32,
        /// READ: in, the first `seq` wanted (0: from the oldest held); out, the `seq` after the
        /// last record written (pass it back next time). START: out, the `seq` the first
        /// record of this trace will have (to/from driver).
        pub cursor: u64,
        /// READ: records from `cursor` on that the buffer no longer holds (overwritten before
        /// this read) (from driver).
        pub lost: u64,
        /// The device clock at the call, the clock of every record's times and of
        /// GET_COUNTERS' `now_ns` (from driver).
        pub now_ns: u64,
    }
}

abi_struct! {
    /// One record of a trace: a task (or a chunk of a long one) a stream ran. Times are the
    /// device clock (GET_COUNTERS `now_ns`; TRACE's `now_ns` maps it onto the caller's)
    /// (all from driver).
    #[c_name = "davinci_trace_record"]
    pub struct TraceRecord {
        /// Its sequence number in the buffer it was read from (from driver).
        pub seq: u64,
        /// The descriptor's `user_data` (from driver).
        pub user_data: u64,
        /// When the device took the task (a chunk: when the chunk began) (from driver).
        pub start_ns: u64,
        /// When it completed (a chunk: when the chunk ended) (from driver).
        pub end_ns: u64,
        /// The submitting client's id, as LIST_CLIENTS reports it (from driver).
        pub client_id: u32,
        /// The stream's handle, as its owner knows it (from driver).
        pub stream: u32,
        /// The descriptor's command-ring index: its position in the stream's order, from 0,
        /// wrapping at 2^32 (from driver).
        pub index: u32,
        /// Its completion status: 0 or `-errno`, as the event record's (from driver).
        pub status: i32,
        /// The descriptor's opcode (from driver).
        pub opcode: u8,
        /// `DAVINCI_TRACE_KIND_*` (from driver).
        pub kind: u8,
        /// KIND_CHUNK: which chunk of the task, from 0 (saturates at 65535) (from driver).
        pub chunk: u16,
        /// KIND_TASK: the tasks the record stands for: 1, or a run of NOPs the device took
        /// and completed together in one pass at one clock reading (command-ring indices
        /// `index` to `index + tasks - 1`; `user_data` is the first's); KIND_CHUNK: 1
        /// (from driver).
        pub tasks: u32,
    }
}

abi_struct! {
    /// READ_EVENTS (ABI 1.5, `DAVINCI_FEAT_DEVICE_EVENTS`): reads the device's event log
    /// from `cursor`. A non-admin open sees the device's own events (no client) and its user's
    /// clients' events; an admin sees all. `seq` counts every event of the device, so a gap in
    /// what a non-admin reads may be other users' events. The log holds the last
    /// `DAVINCI_DEVICE_EVENTS_MAX` events.
    #[c_name = "davinci_read_events_args"]
    pub struct ReadEventsArgs {
        /// User pointer to an array of `capacity` `davinci_device_event` (to driver).
        pub buf: u64,
        /// Entries the buffer holds; 0 learns `cursor` (the next event's `seq`) (to driver).
        pub capacity: u32,
        /// Entries written (from driver).
        pub count: u32,
        /// Stride of the caller's entries, as LIST_CLIENTS' (to driver).
        pub entry_size: u32,
        /// Reserved, must be 0 (to driver).
        pub pad: u32,
        /// In, the first `seq` wanted; out, the `seq` after the last event examined (pass it
        /// back next time) (to/from driver).
        pub cursor: u64,
        /// Events from `cursor` on that the log no longer holds (from driver).
        pub lost: u64,
        /// The device clock at the call (from driver).
        pub now_ns: u64,
    }
}

abi_struct! {
    /// One device event (READ_EVENTS). `detail` and `value` depend on `code`
    /// (`DAVINCI_DEVICE_EVENT_*`; docs/abi.md "Device events") (all from driver).
    #[c_name = "davinci_device_event"]
    pub struct DeviceEvent {
        /// Its sequence number in the device's log (from driver).
        pub seq: u64,
        /// The device clock when it happened (from driver).
        pub time_ns: u64,
        /// `DAVINCI_DEVICE_EVENT_*`: what happened; numbers never change meaning
        /// (from driver).
        pub code: u32,
        /// The client it concerns, as LIST_CLIENTS reports it; 0: the device itself
        /// (from driver).
        pub client_id: u32,
        /// That client's process id and user id (0 for the device's own) (from driver).
        pub pid: u32,
        /// (from driver)
        pub uid: u32,
        /// The stream it concerns, as its owner knows it; 0: none (from driver).
        pub stream: u32,
        /// Per code (from driver).
        pub detail: u32,
        /// Per code (from driver).
        pub value: u64,
    }
}

/// TRACE `op`: start recording (idempotent; a restart keeps the buffer).
pub const TRACE_OP_START: u32 = 1;
/// TRACE `op`: stop recording; what was recorded stays readable until the open closes.
pub const TRACE_OP_STOP: u32 = 2;
/// TRACE `op`: read records from `cursor`.
pub const TRACE_OP_READ: u32 = 3;

/// TRACE `scope`: the calling client's own streams.
pub const TRACE_SCOPE_CLIENT: u32 = 1;
/// TRACE `scope`: every client's streams (admin only).
pub const TRACE_SCOPE_DEVICE: u32 = 2;

/// `davinci_trace_record.kind`: a whole task, from taken to completed.
pub const TRACE_KIND_TASK: u8 = 1;
/// `davinci_trace_record.kind`: one chunk of a long task (COPY, FILL, kernels); the task's
/// own KIND_TASK record follows its last chunk.
pub const TRACE_KIND_CHUNK: u8 = 2;

/// Records one trace buffer holds.
pub const TRACE_RECORDS_MAX: u32 = 1024;
/// Trace buffers of one device (one per tracing open; an admin's DEVICE scope uses one).
pub const TRACE_BUFFERS_MAX: u32 = 4;
/// Events the device's log holds.
pub const DEVICE_EVENTS_MAX: u32 = 256;

/// A stream stopped in the error state. `stream`; `detail`: the errno; `value`: the command
/// ring index of the failed descriptor in the low 32 bits, the fault kind
/// (`DAVINCI_FAULT_*`, 0 for none) in the high 32.
pub const DEVICE_EVENT_STREAM_STOPPED: u32 = 1;
/// A stream holds a task it does not complete (the device took it and nothing after it runs).
/// `stream`; `value`: its command-ring index.
pub const DEVICE_EVENT_HUNG_TASK: u32 = 2;
/// The device was reset: every running stream stopped with `ECANCELED`. No client;
/// `detail`: the streams stopped.
pub const DEVICE_EVENT_DEVICE_RESET: u32 = 3;
/// The device started (a host brought it up, or up again: a log that begins with this event
/// holds nothing from before). No client.
pub const DEVICE_EVENT_DEVICE_STARTED: u32 = 4;
/// One client's requests were refused by its quotas at least
/// `DAVINCI_QUOTA_STORM_REFUSALS` times within a second (at most one event per client per
/// second). `detail`: the last refusal's `DAVINCI_QUOTA_KIND_*`; `value`: refusals in the
/// window.
pub const DEVICE_EVENT_QUOTA_STORM: u32 = 5;
/// An import the client held was revoked (its exporter freed, unexported or closed: the
/// import's descriptors fault, its event waits end). `detail`: 1 memory, 2 event; `value`:
/// the importer's handle.
pub const DEVICE_EVENT_IMPORT_REVOKED: u32 = 6;
/// A fault a host injected fired on a stream (`davinci-mockd --inject`, the module's
/// `inject` parameter). `stream`; `detail`: 1 error-at, 2 hang-at, 3 stop-at; `value`: the
/// errno of error-at.
pub const DEVICE_EVENT_INJECTED_FAULT: u32 = 7;

/// Quota refusals within a second that make a QUOTA_STORM.
pub const QUOTA_STORM_REFUSALS: u32 = 16;

/// `detail` of QUOTA_STORM: the kinds of quota.
pub const QUOTA_KIND_MEMORY: u32 = 1;
/// Contexts.
pub const QUOTA_KIND_CONTEXTS: u32 = 2;
/// Streams.
pub const QUOTA_KIND_STREAMS: u32 = 3;
/// Events.
pub const QUOTA_KIND_EVENTS: u32 = 4;
/// Allocations.
pub const QUOTA_KIND_ALLOCATIONS: u32 = 5;
/// Exports.
pub const QUOTA_KIND_EXPORTS: u32 = 6;
/// Client opens of one tenant.
pub const QUOTA_KIND_OPENS: u32 = 7;

/// Every device event code with its name (as docs, `davinci-smi events` and the exporter
/// spell it) and what it means.
pub const DEVICE_EVENT_CODES: &[(u32, &str, &str)] = &[
    (
        DEVICE_EVENT_STREAM_STOPPED,
        "stream_stopped",
        "a stream stopped in the error state",
    ),
    (
        DEVICE_EVENT_HUNG_TASK,
        "hung_task",
        "a stream holds a task it does not complete",
    ),
    (
        DEVICE_EVENT_DEVICE_RESET,
        "device_reset",
        "the device was reset",
    ),
    (
        DEVICE_EVENT_DEVICE_STARTED,
        "device_started",
        "the device started or restarted",
    ),
    (
        DEVICE_EVENT_QUOTA_STORM,
        "quota_storm",
        "a client's requests were refused by its quotas many times in a second",
    ),
    (
        DEVICE_EVENT_IMPORT_REVOKED,
        "import_revoked",
        "an import a client held was revoked",
    ),
    (
        DEVICE_EVENT_INJECTED_FAULT,
        "injected_fault",
        "a fault a host injected fired",
    ),
];

/// The name of device event `code` (`"stream_stopped"`), if it is one.
pub fn device_event_name(code: u32) -> Option<&'static str> {
    DEVICE_EVENT_CODES
        .iter()
        .find(|(c, _, _)| *c == code)
        .map(|(_, n, _)| *n)
}

/// The code of the device event named `name` (`"hung_task"`), if any.
pub fn device_event_code(name: &str) -> Option<u32> {
    DEVICE_EVENT_CODES
        .iter()
        .find(|(_, n, _)| *n == name)
        .map(|(c, _, _)| *c)
}

pub(crate) const TRACE_OPS: ConstGroup = ConstGroup {
    title: "TRACE operations (davinci_trace_args.op)",
    c_prefix: "DAVINCI_TRACE_OP_",
    items: &[
        ("START", TRACE_OP_START as u64, "start recording"),
        (
            "STOP",
            TRACE_OP_STOP as u64,
            "stop recording (the buffer stays readable)",
        ),
        ("READ", TRACE_OP_READ as u64, "read records from cursor"),
    ],
};

pub(crate) const TRACE_SCOPES: ConstGroup = ConstGroup {
    title: "TRACE scopes (davinci_trace_args.scope)",
    c_prefix: "DAVINCI_TRACE_SCOPE_",
    items: &[
        (
            "CLIENT",
            TRACE_SCOPE_CLIENT as u64,
            "the calling client's streams",
        ),
        (
            "DEVICE",
            TRACE_SCOPE_DEVICE as u64,
            "every client's streams (admin)",
        ),
    ],
};

pub(crate) const TRACE_KINDS: ConstGroup = ConstGroup {
    title: "Trace record kinds (davinci_trace_record.kind)",
    c_prefix: "DAVINCI_TRACE_KIND_",
    items: &[
        (
            "TASK",
            TRACE_KIND_TASK as u64,
            "a whole task, taken to completed",
        ),
        ("CHUNK", TRACE_KIND_CHUNK as u64, "one chunk of a long task"),
    ],
};

pub(crate) const OBSERVE_LIMITS: ConstGroup = ConstGroup {
    title: "Bounds of the trace buffers and the event log",
    c_prefix: "DAVINCI_",
    items: &[
        (
            "TRACE_RECORDS_MAX",
            TRACE_RECORDS_MAX as u64,
            "records one trace buffer holds",
        ),
        (
            "TRACE_BUFFERS_MAX",
            TRACE_BUFFERS_MAX as u64,
            "trace buffers of one device",
        ),
        (
            "DEVICE_EVENTS_MAX",
            DEVICE_EVENTS_MAX as u64,
            "events the device's log holds",
        ),
        (
            "QUOTA_STORM_REFUSALS",
            QUOTA_STORM_REFUSALS as u64,
            "quota refusals in a second that make a QUOTA_STORM event",
        ),
    ],
};

pub(crate) const DEVICE_EVENTS: ConstGroup = ConstGroup {
    title: "Device event codes (davinci_device_event.code)",
    c_prefix: "DAVINCI_DEVICE_EVENT_",
    items: &[
        (
            "STREAM_STOPPED",
            DEVICE_EVENT_STREAM_STOPPED as u64,
            "a stream stopped in the error state",
        ),
        (
            "HUNG_TASK",
            DEVICE_EVENT_HUNG_TASK as u64,
            "a stream holds a task it does not complete",
        ),
        (
            "DEVICE_RESET",
            DEVICE_EVENT_DEVICE_RESET as u64,
            "the device was reset",
        ),
        (
            "DEVICE_STARTED",
            DEVICE_EVENT_DEVICE_STARTED as u64,
            "the device started or restarted",
        ),
        (
            "QUOTA_STORM",
            DEVICE_EVENT_QUOTA_STORM as u64,
            "quota refusals storm from one client",
        ),
        (
            "IMPORT_REVOKED",
            DEVICE_EVENT_IMPORT_REVOKED as u64,
            "an import was revoked",
        ),
        (
            "INJECTED_FAULT",
            DEVICE_EVENT_INJECTED_FAULT as u64,
            "an injected fault fired",
        ),
    ],
};

pub(crate) const QUOTA_KINDS: ConstGroup = ConstGroup {
    title: "Quota kinds (QUOTA_STORM's detail)",
    c_prefix: "DAVINCI_QUOTA_KIND_",
    items: &[
        ("MEMORY", QUOTA_KIND_MEMORY as u64, "device memory"),
        ("CONTEXTS", QUOTA_KIND_CONTEXTS as u64, "contexts"),
        ("STREAMS", QUOTA_KIND_STREAMS as u64, "streams"),
        ("EVENTS", QUOTA_KIND_EVENTS as u64, "events"),
        ("ALLOCATIONS", QUOTA_KIND_ALLOCATIONS as u64, "allocations"),
        ("EXPORTS", QUOTA_KIND_EXPORTS as u64, "exports"),
        (
            "OPENS",
            QUOTA_KIND_OPENS as u64,
            "client opens of one tenant",
        ),
    ],
};
