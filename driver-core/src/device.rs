//! Device state: clients, contexts, streams, events, allocations, sharing; the control-plane
//! operations behind each ioctl. Handles are per client: every lookup checks the owner, and a
//! foreign handle is reported exactly like a stale one (`ENOENT`).

use davinci_ring::{DeviceConsumer, DeviceProducer};
use davinci_uapi::rings::{page_round, ring_bytes, RING_MIN_ENTRIES};
use davinci_uapi::task::{EVENT_RECORD_SIZE, TASK_DESC_SIZE};
use davinci_uapi::{
    mmap_offset, AllocMemoryArgs, ClientUsage, CreateStreamArgs, DeviceCounters, DeviceInfo, Errno,
    EventRecord, Features, MmapKind, Opcode, RingMapping, RingOffsets, ShareMode, TaskDesc,
    DOORBELL_SIZE,
};

use crate::engine::Inject;
use crate::error::{ensure, fail, Error, Result};
use crate::memory::{Allocator, DVA_BASE};
use crate::platform::{locked, Lock, Platform, StreamRegions};
use crate::table::Table;

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
const MAX_BLOCKS: usize = 2 * MAX_ALLOCATIONS + 1;
/// Deepest command ring.
pub const MAX_CMD_ENTRIES: u32 = 4096;
/// Deepest event ring.
pub const MAX_EVENT_ENTRIES: u32 = 8192;
/// Longest container id kept (bytes).
pub const CONTAINER_LEN: usize = 64;

/// Device configuration, fixed at creation.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// N of davinciN.
    pub device_id: u32,
    /// Device memory in bytes.
    pub memory_size: u64,
    /// Per-client memory limit in bytes (0 = the whole device).
    pub client_memory_limit: u64,
    /// Page size of mappings (power of two); also the allocation alignment.
    pub page_size: u32,
    /// Features the platform supports (the core adds the ones it implements).
    pub platform_features: Features,
}

/// What an open file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// May own resources; counts for device sharing.
    Client,
    /// Operators: queries and (admin) share changes only.
    Control,
}

/// Opcodes the software engine runs (bit `n` = `DAVINCI_OP_*` value `n`): NOP, FILL, COPY, ADD,
/// EVENT_RECORD, EVENT_WAIT; not KERNEL_LAUNCH (hardware only).
pub const SUPPORTED_OPCODES: u32 = (1 << 6) - 1;

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
}

/// Why an open failed; on `EBUSY` also who holds the device.
#[derive(Debug, Clone, Copy)]
pub struct OpenError {
    /// The errno and message.
    pub error: Error,
    /// The exclusive holder, when `error` is `EBUSY`.
    pub holder: Option<ClientUsage>,
}

pub(crate) struct Client {
    pub(crate) id: u32,
    pub(crate) params: OpenParams,
    pub(crate) contexts: u32,
    pub(crate) streams: u32,
    pub(crate) events: u32,
    pub(crate) allocations: u32,
    pub(crate) memory: u64,
    /// Tasks taken and completed by the client's streams already destroyed (the live ones
    /// count their own, in [`Engine`]: nothing shared between streams is written per task).
    pub(crate) submitted: u64,
    pub(crate) completed: u64,
    /// The last failed command (request number) and why, for GET_LAST_ERROR.
    pub(crate) last_error: Option<(u32, Error)>,
    /// Failed commands so far.
    pub(crate) failures: u64,
}

pub(crate) struct Context {
    pub(crate) owner: u32,
}

pub(crate) struct Event<P: Platform> {
    pub(crate) owner: u32,
    pub(crate) ctx: u32,
    /// What EVENT_RECORD changes and EVENT_WAIT reads (the data path), locked per event.
    pub(crate) state: P::Lock<EventValue>,
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
    events: &Table<Event<P>, MAX_EVENTS>,
    (owner, ctx): (u32, u32),
    s: &mut Engine,
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

pub(crate) struct Allocation {
    pub(crate) owner: u32,
    pub(crate) offset: u64,
    pub(crate) size: u64,
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
}

/// A stream: who owns it and its memory (fixed while it lives), and the engine state behind
/// its lock (the data path changes it).
pub(crate) struct Stream<P: Platform> {
    pub(crate) owner: u32,
    pub(crate) ctx: u32,
    /// Declared before `mem`: the ring views point into it and must go first.
    pub(crate) run: P::Lock<Engine>,
    pub(crate) cmd_bytes: u64,
    pub(crate) event_bytes: u64,
    pub(crate) mem: Option<P::StreamMem>,
}

/// The state of a stream the data path changes: its ring ends, health, a pending wait and
/// its task counters (per stream, summed when read).
pub(crate) struct Engine {
    pub(crate) cmd: DeviceConsumer<TaskDesc>,
    pub(crate) evt: DeviceProducer<EventRecord>,
    pub(crate) state: StreamState,
    pub(crate) pending: Option<Pending>,
    pub(crate) submitted: u64,
    pub(crate) completed: u64,
    /// Times it entered the error state, and the doorbells that woke it.
    pub(crate) errors: u64,
    pub(crate) doorbells: u64,
    /// An armed fault (`DeviceCore::inject`), and `submitted` when it was armed.
    pub(crate) inject: Option<Inject>,
    pub(crate) inject_base: u64,
    /// A fault halted it (a hung task, or it stopped consuming): nothing more is taken.
    pub(crate) halted: bool,
}

impl Engine {
    /// Puts the stream in the error state with `errno` at command-ring `index` (the ring's
    /// error word says so to the host) and counts it (GET_COUNTERS `stream_errors`): the one
    /// way a stream stops, whatever stopped it.
    pub(crate) fn enter_error(&mut self, errno: Errno, index: u32) {
        self.state = StreamState::Error(errno);
        self.errors += 1;
        self.cmd.set_error(errno.code() as u32, index);
    }
}

/// What an mmap cookie resolves to for its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmapTarget {
    /// A stream's command ring.
    CmdRing {
        /// Stream handle.
        stream: u32,
    },
    /// A stream's event ring.
    EventRing {
        /// Stream handle.
        stream: u32,
    },
    /// A stream's doorbell page.
    Doorbell {
        /// Stream handle.
        stream: u32,
    },
    /// The host view of an allocation: device-memory `offset` and `len` (page multiples).
    Memory {
        /// Device-memory offset.
        offset: u64,
        /// Length of the allocation.
        len: u64,
    },
}

/// One davinci device: all state the driver keeps, independent of kernel or user space.
pub struct DeviceCore<P: Platform> {
    pub(crate) config: Config,
    pub(crate) platform: P,
    pub(crate) share: ShareMode,
    pub(crate) next_client_id: u32,
    pub(crate) clients: Table<Client, MAX_CLIENTS>,
    pub(crate) contexts: Table<Context, MAX_CONTEXTS>,
    pub(crate) streams: Table<Stream<P>, MAX_STREAMS>,
    pub(crate) events: Table<Event<P>, MAX_EVENTS>,
    pub(crate) allocations: Table<Allocation, MAX_ALLOCATIONS>,
    pub(crate) memory: Allocator<MAX_BLOCKS>,
    /// The fault every new stream is armed with (`inject`), if any.
    pub(crate) inject: Option<Inject>,
    /// GET_COUNTERS: the counters of destroyed streams, and client opens so far.
    pub(crate) retired: Retired,
    pub(crate) clients_opened: u64,
}

/// The task, error and doorbell counters of destroyed streams (GET_COUNTERS adds the live
/// streams' on top).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Retired {
    pub(crate) submitted: u64,
    pub(crate) completed: u64,
    pub(crate) errors: u64,
    pub(crate) doorbells: u64,
}

fn container_str(c: &[u8; CONTAINER_LEN]) -> [u8; 64] {
    let mut out = [0u8; 64];
    out.copy_from_slice(c);
    out
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
            clients: Table::new(),
            contexts: Table::new(),
            streams: Table::new(),
            events: Table::new(),
            allocations: Table::new(),
            inject: None,
            retired: Retired {
                submitted: 0,
                completed: 0,
                errors: 0,
                doorbells: 0,
            },
            clients_opened: 0,
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

    /// Attached clients (control opens excluded).
    pub fn client_count(&self) -> u32 {
        self.clients
            .iter()
            .filter(|(_, c)| c.params.role == Role::Client)
            .count() as u32
    }

    /// The usage report of client `handle` (`c`).
    pub(crate) fn usage(&self, handle: u32, c: &Client) -> ClientUsage {
        // Live streams' counters (each read under its lock) on top of the destroyed ones'.
        let (mut submitted, mut completed, mut queued) = (c.submitted, c.completed, 0u64);
        for (_, s) in self.streams.iter().filter(|(_, s)| s.owner == handle) {
            let _ = s.run.with(|e| {
                submitted += e.submitted;
                completed += e.completed;
                if e.state == StreamState::Running {
                    queued += u64::from(e.cmd.queued());
                }
            });
        }
        ClientUsage {
            client_id: c.id,
            pid: c.params.pid,
            uid: c.params.uid,
            pad: 0,
            contexts: c.contexts,
            streams: c.streams,
            events: c.events,
            allocations: c.allocations,
            memory_bytes: c.memory,
            tasks_submitted: submitted,
            tasks_completed: completed,
            container: container_str(&c.params.container),
            tasks_queued: queued,
            comm: c.params.comm,
        }
    }

    /// Usage of every attached client (control opens excluded), in table order.
    pub fn clients(&self) -> impl Iterator<Item = ClientUsage> + '_ {
        self.clients
            .iter()
            .filter(|(_, c)| c.params.role == Role::Client)
            .map(|(h, c)| self.usage(h, c))
    }

    /// Usage of one open (by its handle).
    pub fn client_usage(&self, client: u32) -> Option<ClientUsage> {
        self.clients.get(client).map(|c| self.usage(client, c))
    }

    /// Attaches an open file. In exclusive mode a second client gets `EBUSY` naming the holder.
    #[allow(clippy::result_large_err)] // No heap here; the holder is returned by value on purpose.
    pub fn open(&mut self, params: OpenParams) -> core::result::Result<u32, OpenError> {
        let role_is_client = params.role == Role::Client;
        if params.role == Role::Client && self.share == ShareMode::Exclusive {
            if let Some((holder_handle, holder)) = self
                .clients
                .iter()
                .find(|(_, c)| c.params.role == Role::Client)
            {
                return Err(OpenError {
                    error: Error::new(
                        Errno::EBUSY,
                        "device is in exclusive mode and held by another client",
                    ),
                    holder: Some(self.usage(holder_handle, holder)),
                });
            }
        }
        let id = self.next_client_id;
        let client = Client {
            id,
            params,
            contexts: 0,
            streams: 0,
            events: 0,
            allocations: 0,
            memory: 0,
            submitted: 0,
            completed: 0,
            last_error: None,
            failures: 0,
        };
        let handle = self
            .clients
            .insert(client, "too many open files on this device")
            .map_err(|error| OpenError {
                error,
                holder: None,
            })?;
        self.next_client_id = self.next_client_id.wrapping_add(1).max(1);
        if role_is_client {
            self.clients_opened += 1;
        }
        Ok(handle)
    }

    /// Detaches an open file and releases everything it held (streams, events, contexts,
    /// memory). Unknown handles are ignored.
    pub fn close(&mut self, client: u32) {
        if self.clients.get(client).is_none() {
            return;
        }
        while let Some(ctx) = self.contexts.find(|c| c.owner == client) {
            let _ = self.destroy_context(client, ctx);
        }
        while let Some(a) = self.allocations.find(|a| a.owner == client) {
            let _ = self.free_memory(client, a);
        }
        self.clients.remove(client);
        // Waiters of this client (other threads of the same open) must notice.
        self.platform.notify_waiters();
    }

    pub(crate) fn client_mut(&mut self, client: u32) -> Result<&mut Client> {
        match self.clients.get_mut(client) {
            Some(c) => Ok(c),
            None => Err(Error::new(Errno::ENODEV, "client is not attached")),
        }
    }

    pub(crate) fn require_client(&self, client: u32) -> Result<()> {
        match self.clients.get(client) {
            Some(c) if c.params.role == Role::Client => Ok(()),
            Some(_) => Err(Error::new(
                Errno::EPERM,
                "a control (read-only) open cannot own device resources",
            )),
            None => Err(Error::new(Errno::ENODEV, "client is not attached")),
        }
    }

    /// GET_INFO.
    pub fn info(&self) -> DeviceInfo {
        let c = &self.config;
        DeviceInfo {
            abi_major: davinci_uapi::ABI_VERSION_MAJOR,
            abi_minor: davinci_uapi::ABI_VERSION_MINOR,
            features: Features::from_bits_retain(
                c.platform_features.bits()
                    | (Features::SUBMIT_IOCTL.bits()
                        | Features::EVENTS.bits()
                        | Features::DEVICE_SHARE.bits()
                        | Features::LIST_CLIENTS.bits()
                        | Features::CALLER_ID.bits()
                        | Features::OPCODE_MASK.bits()
                        | Features::LAST_ERROR.bits()
                        | Features::FAULT_DETAIL.bits()
                        | Features::COUNTERS.bits()),
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
            opcodes: SUPPORTED_OPCODES,
            reserved: [0; 3],
        }
    }

    /// GET_INFO as `open` asks it: [`info`](Self::info) with the caller's own client id (0
    /// for a control open, which is not a client).
    pub fn info_for(&self, open: u32) -> DeviceInfo {
        let caller_id = match self.clients.get(open) {
            Some(c) if c.params.role == Role::Client => c.id,
            _ => 0,
        };
        DeviceInfo {
            caller_id,
            ..self.info()
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
        } = self.retired;
        for (_, s) in self.streams.iter() {
            let _ = s.run.with(|e| {
                submitted += e.submitted;
                completed += e.completed;
                errors += e.errors;
                doorbells += e.doorbells;
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
            reserved: [0; 4],
        }
    }

    fn client_limit(&self) -> u64 {
        match self.config.client_memory_limit {
            0 => self.memory.size(),
            l => l.min(self.memory.size()),
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

    /// CREATE_CONTEXT.
    pub fn create_context(&mut self, client: u32) -> Result<u32> {
        self.require_client(client)?;
        let h = self
            .contexts
            .insert(Context { owner: client }, "context table is full")?;
        self.client_mut(client)?.contexts += 1;
        Ok(h)
    }

    pub(crate) fn own_context(&self, client: u32, ctx: u32) -> Result<()> {
        match self.contexts.get(ctx) {
            Some(c) if c.owner == client => Ok(()),
            _ => Err(Error::new(Errno::ENOENT, "no such context for this client")),
        }
    }

    /// DESTROY_CONTEXT: also destroys the context's streams and events.
    pub fn destroy_context(&mut self, client: u32, ctx: u32) -> Result<()> {
        self.own_context(client, ctx)?;
        while let Some(s) = self.streams.find(|s| s.ctx == ctx && s.owner == client) {
            self.destroy_stream(client, s)?;
        }
        while let Some(e) = self.events.find(|e| e.ctx == ctx && e.owner == client) {
            self.destroy_event(client, e)?;
        }
        self.contexts.remove(ctx);
        self.client_mut(client)?.contexts -= 1;
        Ok(())
    }

    /// ALLOC_MEMORY: `args.size` and `args.flags` in; the rest out.
    pub fn alloc_memory(&mut self, client: u32, args: &mut AllocMemoryArgs) -> Result<()> {
        self.require_client(client)?;
        ensure!(args.flags == 0, EINVAL, "alloc flags must be 0");
        ensure!(args.size > 0, EINVAL, "allocation size is 0");
        let Some(rounded) = self.memory.round(args.size) else {
            fail!(EOVERFLOW, "allocation size overflows");
        };
        let limit = self.client_limit();
        let held = self.client_mut(client)?.memory;
        ensure!(
            held.checked_add(rounded).is_some_and(|t| t <= limit),
            ENOMEM,
            "allocation would exceed this client's device memory limit"
        );
        // Reserve a handle first (so a full table fails before memory moves).
        let handle = self.allocations.insert(
            Allocation {
                owner: client,
                offset: 0,
                size: 0,
            },
            "allocation table is full",
        )?;
        let (offset, size) = match self.memory.allocate(rounded, handle) {
            Ok(v) => v,
            Err(e) => {
                self.allocations.remove(handle);
                return Err(e);
            }
        };
        if let Err(e) = self.platform.alloc_backing(client, offset, size) {
            let _ = self.memory.free(offset, handle);
            self.allocations.remove(handle);
            return Err(e);
        }
        if let Some(a) = self.allocations.get_mut(handle) {
            a.offset = offset;
            a.size = size;
        }
        let c = self.client_mut(client)?;
        c.allocations += 1;
        c.memory += size;
        args.handle = handle;
        args.dev_addr = DVA_BASE + offset;
        args.alloc_size = size;
        args.mmap_offset = mmap_offset(MmapKind::Memory, handle);
        Ok(())
    }

    /// FREE_MEMORY.
    pub fn free_memory(&mut self, client: u32, handle: u32) -> Result<()> {
        let (offset, size) = match self.allocations.get(handle) {
            Some(a) if a.owner == client => (a.offset, a.size),
            _ => fail!(ENOENT, "no such allocation for this client"),
        };
        self.memory.free(offset, handle)?;
        self.allocations.remove(handle);
        self.platform.free_backing(client, offset, size);
        let c = self.client_mut(client)?;
        c.allocations -= 1;
        c.memory -= size;
        Ok(())
    }

    /// CREATE_EVENT.
    pub fn create_event(&mut self, client: u32, ctx: u32, flags: u32) -> Result<u32> {
        self.require_client(client)?;
        ensure!(flags == 0, EINVAL, "event flags must be 0");
        self.own_context(client, ctx)?;
        let h = self.events.insert(
            Event {
                owner: client,
                ctx,
                state: P::Lock::new(EventValue {
                    value: 0,
                    poisoned: None,
                }),
            },
            "event table is full",
        )?;
        self.client_mut(client)?.events += 1;
        Ok(h)
    }

    /// DESTROY_EVENT. Streams waiting on it complete their wait with `ECANCELED`.
    pub fn destroy_event(&mut self, client: u32, event: u32) -> Result<()> {
        match self.events.get(event) {
            Some(e) if e.owner == client => {}
            _ => fail!(ENOENT, "no such event for this client"),
        }
        self.events.remove(event);
        self.client_mut(client)?.events -= 1;
        self.platform.notify_waiters();
        Ok(())
    }

    /// CREATE_STREAM: validates depths, has the platform create the shared memory, initialises
    /// both ring headers and fills the mapping description.
    pub fn create_stream(&mut self, client: u32, args: &mut CreateStreamArgs) -> Result<()> {
        self.require_client(client)?;
        ensure!(args.flags == 0, EINVAL, "stream flags must be 0");
        ensure!(
            args.pad == 0 && args.reserved == [0; 2],
            EINVAL,
            "reserved stream fields must be 0"
        );
        self.own_context(client, args.ctx)?;
        let (ce, ee) = (args.cmd_entries, args.event_entries);
        ensure!(
            ce.is_power_of_two() && (RING_MIN_ENTRIES..=MAX_CMD_ENTRIES).contains(&ce),
            EINVAL,
            "cmd_entries must be a power of two within the device limits"
        );
        ensure!(
            ee.is_power_of_two() && (RING_MIN_ENTRIES..=MAX_EVENT_ENTRIES).contains(&ee),
            EINVAL,
            "event_entries must be a power of two within the device limits"
        );
        ensure!(ee >= ce, EINVAL, "event_entries must be >= cmd_entries");
        let page = self.config.page_size as usize;
        let (Some(cmd_bytes), Some(event_bytes)) = (
            ring_bytes(ce, TASK_DESC_SIZE as u32).and_then(|b| page_round(b, page)),
            ring_bytes(ee, EVENT_RECORD_SIZE as u32).and_then(|b| page_round(b, page)),
        ) else {
            fail!(EOVERFLOW, "ring size overflows");
        };
        ensure!(
            self.streams.len() < self.streams.capacity(),
            ENOSPC,
            "stream table is full"
        );
        let StreamRegions { mem, cmd, event } =
            self.platform
                .create_stream(client, ce, cmd_bytes, ee, event_bytes)?;
        cmd.init();
        event.init();
        // The platform built the regions; a wrong slot size is its bug, reported, not a panic.
        let views = (DeviceConsumer::try_new(cmd), DeviceProducer::try_new(event));
        let (Ok(cmd), Ok(evt)) = views else {
            // Ring views go first: they point into `mem`.
            drop(views);
            self.platform.release_stream(client, 0, mem);
            fail!(EINVAL, "platform created rings with the wrong slot size");
        };
        let stream = Stream {
            owner: client,
            ctx: args.ctx,
            run: P::Lock::new(Engine {
                cmd,
                evt,
                state: StreamState::Running,
                pending: None,
                submitted: 0,
                completed: 0,
                errors: 0,
                doorbells: 0,
                inject: self.inject,
                inject_base: 0,
                halted: false,
            }),
            cmd_bytes: cmd_bytes as u64,
            event_bytes: event_bytes as u64,
            mem: Some(mem),
        };
        // Cannot fail: capacity was checked above and nothing ran in between.
        let handle = self.streams.insert(stream, "stream table is full")?;
        self.client_mut(client)?.streams += 1;
        args.handle = handle;
        args.cmd_ring = RingMapping {
            mmap_offset: mmap_offset(MmapKind::CmdRing, handle),
            mmap_size: cmd_bytes as u64,
            entries: ce,
            pad: 0,
            offsets: RingOffsets::standard(TASK_DESC_SIZE as u32),
        };
        args.event_ring = RingMapping {
            mmap_offset: mmap_offset(MmapKind::EventRing, handle),
            mmap_size: event_bytes as u64,
            entries: ee,
            pad: 0,
            offsets: RingOffsets::standard(EVENT_RECORD_SIZE as u32),
        };
        args.doorbell_offset = mmap_offset(MmapKind::Doorbell, handle);
        args.doorbell_size = DOORBELL_SIZE;
        Ok(())
    }

    /// DESTROY_STREAM: the stream stops; its memory goes back to the platform.
    pub fn destroy_stream(&mut self, client: u32, stream: u32) -> Result<()> {
        match self.streams.get(stream) {
            Some(s) if s.owner == client => {}
            _ => fail!(ENOENT, "no such stream for this client"),
        }
        let mut counts = (0, 0);
        if let Some(s) = self.streams.remove(stream) {
            let Stream {
                owner,
                ctx,
                mut run,
                mem,
                ..
            } = s;
            let e = run.get_mut();
            counts = (e.submitted, e.completed);
            self.retired.submitted += e.submitted;
            self.retired.completed += e.completed;
            self.retired.errors += e.errors;
            self.retired.doorbells += e.doorbells;
            // What it had queued will never run.
            if e.state == StreamState::Running {
                poison_queued_records(&self.events, (owner, ctx), e, None, Errno::ECANCELED);
            }
            // Ring views go first: they point into `mem`.
            drop(run);
            if let Some(mem) = mem {
                self.platform.release_stream(client, stream, mem);
            }
        }
        let c = self.client_mut(client)?;
        c.streams -= 1;
        c.submitted += counts.0;
        c.completed += counts.1;
        self.platform.notify_waiters();
        Ok(())
    }

    /// Arms `fault` (or disarms, `None`) on `stream`, or, with `stream` `None`, on every
    /// stream and every stream created from now on. A host's test hook (the mock device's
    /// `--inject`), not an ioctl: no client can reach it. `ENOENT` if the stream does not
    /// exist.
    pub fn inject(&mut self, stream: Option<u32>, fault: Option<Inject>) -> Result<()> {
        let arm = |s: &mut Stream<P>| {
            let e = s.run.get_mut();
            e.inject = fault;
            e.inject_base = e.submitted;
        };
        match stream {
            Some(h) => match self.streams.get_mut(h) {
                Some(s) => arm(s),
                None => fail!(ENOENT, "no such stream"),
            },
            None => {
                self.inject = fault;
                for (_, s) in self.streams.iter_mut() {
                    arm(s);
                }
            }
        }
        Ok(())
    }

    /// A device reset: every running stream stops in the error state with `ECANCELED`
    /// (no record: what it had taken but not completed, a pending EVENT_WAIT or a hung task,
    /// is lost with it; the records it had already published stay in its event ring), the
    /// EVENT_RECORDs it had queued can no longer be reached (section 8 of docs/abi.md), and
    /// waiters wake. Clients, contexts, events, memory and the streams' handles stay: a
    /// client sees the reset at its next call on a stream (`EIO`, status `ECANCELED`) and
    /// recovers as from any stream error (destroy, create). Returns the streams stopped.
    pub fn reset(&mut self) -> u32 {
        let DeviceCore {
            streams,
            events,
            platform,
            ..
        } = self;
        let mut stopped = 0;
        for (_, s) in streams.iter_mut() {
            let (owner, ctx) = (s.owner, s.ctx);
            let e = s.run.get_mut();
            if e.state != StreamState::Running {
                continue;
            }
            let head = e.cmd.head();
            e.enter_error(Errno::ECANCELED, head);
            e.pending = None;
            e.halted = false;
            poison_queued_records(events, (owner, ctx), e, None, Errno::ECANCELED);
            stopped += 1;
        }
        platform.notify_waiters();
        stopped
    }

    /// The platform memory of `client`'s stream (to serve its mmap), if it owns it.
    pub fn stream_mem(&self, client: u32, stream: u32) -> Option<&P::StreamMem> {
        match self.streams.get(stream) {
            Some(s) if s.owner == client => s.mem.as_ref(),
            _ => None,
        }
    }

    /// Every live stream handle (for platforms that start one worker per stream).
    pub fn stream_handles(&self) -> impl Iterator<Item = u32> + '_ {
        self.streams.iter().map(|(h, _)| h)
    }

    /// The state of `client`'s stream.
    pub fn stream_state(&self, client: u32, stream: u32) -> Result<StreamState> {
        match self.streams.get(stream) {
            Some(s) if s.owner == client => locked(&s.run, |e| e.state),
            _ => Err(Error::new(Errno::ENOENT, "no such stream for this client")),
        }
    }

    /// Resolves an mmap request: `cookie` must name an object `client` owns and `len` must
    /// not exceed it.
    pub fn mmap_target(&self, client: u32, cookie: u64, len: u64) -> Result<MmapTarget> {
        let Some((kind, handle)) = davinci_uapi::decode_mmap_offset(cookie) else {
            fail!(EINVAL, "not an mmap offset this driver handed out");
        };
        ensure!(len > 0, EINVAL, "mmap length is 0");
        let (target, size) = match kind {
            MmapKind::Memory => match self.allocations.get(handle) {
                Some(a) if a.owner == client => (
                    MmapTarget::Memory {
                        offset: a.offset,
                        len: a.size,
                    },
                    a.size,
                ),
                _ => fail!(ENOENT, "no such allocation for this client"),
            },
            _ => {
                let s = match self.streams.get(handle) {
                    Some(s) if s.owner == client => s,
                    _ => fail!(ENOENT, "no such stream for this client"),
                };
                match kind {
                    MmapKind::CmdRing => (MmapTarget::CmdRing { stream: handle }, s.cmd_bytes),
                    MmapKind::EventRing => {
                        (MmapTarget::EventRing { stream: handle }, s.event_bytes)
                    }
                    _ => (MmapTarget::Doorbell { stream: handle }, DOORBELL_SIZE),
                }
            }
        };
        ensure!(len <= size, EINVAL, "mmap length exceeds the object");
        Ok(target)
    }
}
