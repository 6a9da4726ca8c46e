//! What the device's tables hold: one entry per client, context, event, allocation and
//! stream, the values behind the per-stream and per-event locks (the data path's state), and
//! what a stopped stream does to the events it was to record. The control-plane operations
//! on them are `impl DeviceCore` blocks in the sibling modules; the engine reads them too.

use davinci_ring::{DeviceConsumer, DeviceProducer};
use davinci_uapi::{Errno, EventRecord, Opcode, TaskDesc};

use crate::error::Error;
use crate::inject::Inject;
use crate::limits::{CONTAINER_LEN, MAX_EVENTS, MAX_IMPORTERS};
use crate::platform::{Lock, Platform};
use crate::table::Table;
use crate::tenant::Tenant;

/// What an open file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// May own resources; counts for device sharing.
    Client,
    /// Operators: queries and (admin) share changes only.
    Control,
}

/// Who opened the device, as the platform established it (credentials, cgroup).
#[derive(Debug, Clone, Copy)]
pub struct OpenParams {
    /// Client or control open.
    pub role: Role,
    /// Process id.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Whether the opener may change device sharing (uid 0 or the configured group).
    pub admin: bool,
    /// Container id, NUL-padded (empty if none).
    pub container: [u8; CONTAINER_LEN],
    /// Process name (`comm`), NUL-padded, at most 15 bytes (`ClientUsage::comm_field`).
    pub comm: [u8; 16],
    /// Whose quotas bind the open ([`Tenant::of`] the uid and container, or the host's own
    /// rule).
    pub tenant: Tenant,
}

/// An open file (a client or a control open) and what it holds. Two words name an open
/// throughout the code: `client`, the handle of its entry in the client table (a control
/// open's too), which the host passes to every call and which resources name as their
/// `owner`; and `client_id`, the id the device reports for it (LIST_CLIENTS, GET_USAGE,
/// GET_INFO's `caller_id`, an export's grant).
pub(crate) struct Client {
    /// What LIST_CLIENTS reports: assigned at open, through the device's `client_ids`.
    pub(crate) client_id: u32,
    pub(crate) params: OpenParams,
    /// Its tenant's entry in the device's tenant table.
    pub(crate) tenant: u32,
    pub(crate) contexts: u32,
    pub(crate) streams: u32,
    pub(crate) events: u32,
    pub(crate) allocations: u32,
    pub(crate) memory: u64,
    /// Tasks taken and completed by the client's streams already destroyed (the live ones
    /// count their own, in [`StreamEngine`]: nothing shared between streams is written per task).
    pub(crate) submitted: u64,
    pub(crate) completed: u64,
    /// Nanoseconds the engines spent on its streams already destroyed.
    pub(crate) busy_ns: u64,
    /// Times its streams already destroyed entered the error state.
    pub(crate) stream_errors: u64,
    /// The last failed command (request number) and why, for GET_LAST_ERROR.
    pub(crate) last_error: Option<(u32, Error)>,
    /// Failed commands so far.
    pub(crate) failures: u64,
    /// Its trace buffer and quota-refusal window ([`crate::observe`]).
    pub(crate) observe: crate::observe::control::ClientObserve,
}

/// A context: its owner (its streams and events name it).
pub(crate) struct ContextEntry {
    pub(crate) owner: u32,
}

/// An event: who owns it, its context, and its value behind its lock.
pub(crate) struct EventEntry<P: Platform> {
    pub(crate) owner: u32,
    pub(crate) ctx: u32,
    /// What EVENT_RECORD changes and EVENT_WAIT reads (the data path), locked per event. An
    /// import's own is unused: its waits read its exporter's ([`wait_state`]).
    pub(crate) state: P::Lock<EventValue>,
    /// This handle imports another client's event (IMPORT_EVENT, ABI 1.5).
    pub(crate) import: Option<EventImport>,
    /// Exported (EXPORT_EVENT): its entry in the device's event exports, and the export's
    /// serial (0: not exported). The grant and the imports are in that entry (a table of its
    /// own, so that the event table, a thousand entries, stays small).
    pub(crate) export: u32,
    pub(crate) export_serial: u32,
}

/// What an import of an event reaches: the exporter's event handle and the serial of its
/// export then (a handle used again later is another event, with another serial).
#[derive(Clone, Copy)]
pub(crate) struct EventImport {
    pub(crate) origin: u32,
    pub(crate) serial: u32,
}

/// An exported event's grant (as an allocation's, `ExportEntry`) and the handles of its
/// imports (each importer's client is woken when the event is recorded or destroyed).
pub(crate) struct EventExportEntry {
    /// The exporting client (its tenant's export quota counts the export).
    pub(crate) owner: u32,
    pub(crate) uid: u32,
    pub(crate) client_id: u32,
    pub(crate) imports: [u32; MAX_IMPORTERS],
}

/// The value a wait on `e` reads: its own, or, for an import, its exporter's event's; `None`
/// once the exporter destroyed that event (the import is revoked).
pub(crate) fn wait_state<'a, P: Platform>(
    events: &'a Table<EventEntry<P>, MAX_EVENTS>,
    e: &'a EventEntry<P>,
) -> Option<&'a P::Lock<EventValue>> {
    match e.import {
        None => Some(&e.state),
        Some(i) => events
            .get(i.origin)
            .filter(|o| o.export_serial == i.serial)
            .map(|o| &o.state),
    }
}

/// An event's value, and what a stopped stream made unreachable.
pub(crate) struct EventValue {
    pub(crate) value: u64,
    /// The highest value a stopped or destroyed stream was to record (an EVENT_RECORD it
    /// will never run), and that stream's errno: waits for a value up to it that the event
    /// has not reached fail instead of waiting forever (abi.md 8).
    pub(crate) poisoned: Option<(u64, Errno)>,
}

impl EventValue {
    /// Whether waiting for `value` can no longer succeed, and why: the event has not reached
    /// it and a stream that was to record it (or a higher value) has stopped.
    pub(crate) fn unreachable(&self, value: u64) -> Option<Errno> {
        match self.poisoned {
            Some((p, errno)) if self.value < value && value <= p => Some(errno),
            _ => None,
        }
    }
}

/// A stream that stopped (`errno`) or was destroyed will never run what its host had
/// queued: each EVENT_RECORD among those descriptors (and `failed`, the descriptor it stopped
/// on, if any) marks its event's value as unreachable through it, so waits for that value
/// fail rather than hang. Only events of the stream's own context and client count; the
/// descriptors are untrusted copies, read once. Returns whether any event was marked (the
/// caller wakes the waiters).
pub(crate) fn poison_queued_records<P: Platform>(
    events: &Table<EventEntry<P>, MAX_EVENTS>,
    (owner, ctx): (u32, u32),
    s: &mut StreamEngine,
    failed: Option<&TaskDesc>,
    errno: Errno,
) -> bool {
    let poison = |d: &TaskDesc| -> bool {
        if d.opcode != Opcode::EventRecord as u8 {
            return false;
        }
        match events.get(d.handle) {
            Some(e) if e.owner == owner && e.ctx == ctx => e
                .state
                .with(|e| {
                    if d.imm <= e.value {
                        return false;
                    }
                    let p = e.poisoned.map_or(d.imm, |(p, _)| p.max(d.imm));
                    e.poisoned = Some((p, errno));
                    true
                })
                .unwrap_or(false),
            _ => false,
        }
    };
    let mut any = failed.is_some_and(poison);
    // What the host published past the device's head; every slot if the indices are corrupt
    // (a stale record there is harmless: its value is already reached).
    let (n, queued) = match s.cmd.available() {
        Ok(n) => (n, false),
        Err(_) => (s.cmd.region().entries(), true),
    };
    for i in 0..n {
        let d = if queued {
            s.cmd.peek_queued(i)
        } else {
            s.cmd.peek(i)
        };
        if let Some(d) = d {
            any |= poison(&d);
        }
    }
    any
}

/// An allocation: its owner and where it lies in device memory.
pub(crate) struct Allocation {
    pub(crate) owner: u32,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    /// Its addresses' generation (`crate::memory::dva`).
    pub(crate) generation: u32,
    /// For an import (IMPORT_MEMORY): the exported allocation it names; 0 for an allocation
    /// of the client's own. The memory, its backing and its accounting are the origin's.
    pub(crate) origin: u32,
    /// For an import: the export it came through. For an allocation of the client's own:
    /// how many exports name it (EXPORT_MEMORY, EXPORT_RANGE: one per range and grant).
    pub(crate) export: u32,
    /// The owner freed it while a lease kept it (`DAVINCI_EXPORT_FLAG_LEASE`, ABI 1.5): its
    /// handle names nothing to the owner any more (FREE_MEMORY, descriptors, mmap: `ENOENT`,
    /// `EACCES`), its imports still reach it, and it stays charged to the owner until the
    /// last import goes.
    pub(crate) released: bool,
}

/// An export (EXPORT_MEMORY): an allocation other clients may import, and who.
pub(crate) struct ExportEntry {
    /// The exported allocation and its owner.
    pub(crate) alloc: u32,
    pub(crate) owner: u32,
    /// The user whose clients may import; and, non-zero, the one client that may.
    pub(crate) uid: u32,
    pub(crate) client_id: u32,
    /// The token's high half (the low half is the export's handle).
    pub(crate) serial: u32,
    /// What an import reaches: `[start, start + len)` of device memory, inside the
    /// allocation (the whole of it for EXPORT_MEMORY; a range for EXPORT_RANGE).
    pub(crate) start: u64,
    pub(crate) len: u64,
    /// A lease (`DAVINCI_EXPORT_FLAG_LEASE`): the owner's FREE_MEMORY leaves the memory to
    /// the imports of this export until the last of them goes. Without it, that free
    /// revokes them.
    pub(crate) lease: bool,
    /// UNEXPORT_MEMORY ended this lease while imports stood: it takes no new import and goes
    /// with the last of them.
    pub(crate) ending: bool,
    /// An export that is an fd (`DAVINCI_EXPORT_FLAG_FD`): only an import through the fd
    /// (`DAVINCI_IMPORT_FLAG_FD`, which the host resolves to the token) reaches it.
    pub(crate) fd_only: bool,
    /// The imports (their allocation handles; 0: a free slot).
    pub(crate) imports: [u32; MAX_IMPORTERS],
}

impl ExportEntry {
    /// Whether it holds any import.
    pub(crate) fn imported(&self) -> bool {
        self.imports.iter().any(|&h| h != 0)
    }
}

/// A stream's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamState {
    /// Consuming.
    Running,
    /// Stopped by an invalid descriptor or a corrupt ring; the errno says why.
    Error(Errno),
}

/// An EVENT_WAIT descriptor taken but not yet completed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) event: u32,
    pub(crate) value: u64,
    pub(crate) user_data: u64,
    /// When the device took it (its trace record's start).
    pub(crate) taken_ns: u64,
}

/// A long task (FILL, COPY, ADD) taken from the command ring and part-way done: the copy
/// read once when it was taken (validated then; its ranges are checked again before every
/// chunk, the control path may free them between two), the bytes done, and its command-ring
/// index.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Partial {
    pub(crate) d: TaskDesc,
    pub(crate) done: u64,
    pub(crate) index: u32,
    /// A KERNEL_LAUNCH: its parameter block as copied when it was taken, and its units.
    pub(crate) launch: Option<crate::engine::Launch>,
    /// When the device took it, and the chunks run so far (its trace records).
    pub(crate) taken_ns: u64,
    pub(crate) chunks: u16,
}

impl Partial {
    /// `d`, taken and not started (its index is set when the pass knows it).
    pub(crate) fn new(d: &TaskDesc) -> Self {
        Partial {
            d: *d,
            done: 0,
            index: 0,
            launch: None,
            taken_ns: 0,
            chunks: 0,
        }
    }
}

/// A stream: who owns it and its memory (fixed while it lives), and the engine state behind
/// its lock (the data path changes it).
pub(crate) struct StreamEntry<P: Platform> {
    pub(crate) owner: u32,
    pub(crate) ctx: u32,
    /// Declared before `mem`: the ring views point into it and must go first.
    pub(crate) run: P::Lock<StreamEngine>,
    pub(crate) cmd_bytes: u64,
    pub(crate) event_bytes: u64,
    pub(crate) mem: Option<P::StreamMem>,
}

/// The state of a stream the data path changes: its ring ends, health, a pending wait and
/// its task counters (per stream, summed when read).
pub(crate) struct StreamEngine {
    pub(crate) cmd: DeviceConsumer<TaskDesc>,
    pub(crate) evt: DeviceProducer<EventRecord>,
    pub(crate) state: StreamState,
    pub(crate) pending: Option<Pending>,
    /// A long task part-way done (never with `pending`: each holds the stream's next record).
    pub(crate) partial: Option<Partial>,
    pub(crate) submitted: u64,
    pub(crate) completed: u64,
    /// Times it entered the error state, and the doorbells that woke it.
    pub(crate) errors: u64,
    pub(crate) doorbells: u64,
    /// Nanoseconds engines spent running it (GET_COUNTERS and LIST_CLIENTS `busy_ns`).
    pub(crate) busy_ns: u64,
    /// An armed fault (`DeviceCore::inject`), and `submitted` when it was armed.
    pub(crate) inject: Option<Inject>,
    pub(crate) inject_base: u64,
    /// A fault halted it (a hung task, or it stopped consuming): nothing more is taken.
    pub(crate) halted: bool,
    /// The fault kind (`DAVINCI_FAULT_*`) of the descriptor that stopped it, for its
    /// STREAM_STOPPED event.
    pub(crate) fault_kind: u32,
}

impl StreamEngine {
    /// Puts the stream in the error state with `errno` at command-ring `index` (the ring's
    /// error word says so to the host) and counts it (GET_COUNTERS `stream_errors`): the one
    /// way a stream stops, whatever stopped it.
    pub(crate) fn enter_error(&mut self, errno: Errno, index: u32) {
        self.state = StreamState::Error(errno);
        self.errors += 1;
        self.cmd.set_error(errno.code() as u32, index);
    }
}

/// The task, error and doorbell counters of destroyed streams (GET_COUNTERS adds the live
/// streams' on top).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Retired {
    pub(crate) submitted: u64,
    pub(crate) completed: u64,
    pub(crate) errors: u64,
    pub(crate) doorbells: u64,
    pub(crate) busy_ns: u64,
}
