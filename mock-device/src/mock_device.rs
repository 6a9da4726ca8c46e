//! [`MockDevice`]: the handle of a device without hardware. It owns the shared state
//! (`state`), starts the pollers with the device and stops them with its last handle, and
//! serves each open's control path: `open`, `ioctl` (WAIT_EVENT's blocking half is in
//! `waits`, a new stream goes to a poller in `pollers`), `map` (mmap cookies to memfd
//! descriptors), `close`, usage reports and fault injection.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use davinci_driver_core::{
    Config, DeviceCore, Error, Identity, Inject, MmapTarget, OpenError, OpenParams, Platform,
    Reply, UserMem,
};
use davinci_uapi::{
    ClientUsage, DeviceIdentity, DeviceInfo, Errno, Features, ShareMode, DRIVER_CMD_ALLOC_MEMORY,
    DRIVER_CMD_CREATE_STREAM, DRIVER_CMD_DESTROY_CONTEXT, DRIVER_CMD_DESTROY_STREAM,
    DRIVER_CMD_FREE_MEMORY,
};

use crate::config::{derived_uuid, MockConfig};
use crate::memfd::MemFd;
use crate::platform::MockPlatform;
use crate::pool::RegionPool;
use crate::state::{Core, Exclusive, Tidier};
use crate::stream_mem::StreamPart;

/// Where a client maps an mmap cookie: a descriptor (its own, to close) and the file offset.
#[derive(Debug)]
pub struct MapSource {
    /// The file to map (a memfd).
    pub fd: OwnedFd,
    /// Offset of the object in that file.
    pub offset: u64,
}

/// Where a client maps an mmap cookie, as [`MockDevice::map_shared`] answers: the device's
/// own descriptor of the memfd (shared, not duplicated: to lend to `sendmsg` or `mmap`, and
/// drop) and the file offset.
#[derive(Debug, Clone)]
pub struct SharedMapSource {
    /// The file to map (a memfd), open while this is held.
    pub fd: MemFd,
    /// Offset of the object in that file.
    pub offset: u64,
}

/// Stops every poller when the last [`MockDevice`] handle goes.
struct Owner {
    core: Arc<Core>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.core.shutdown();
    }
}

/// A davinci device without hardware: the driver-core engine on threads of this process.
///
/// Clones share the device. Dropping the last clone (or [`shutdown`](Self::shutdown)) stops
/// and joins every poller. Each open (client or control) gets its `client` (its handle in
/// the device's client table) from [`open`](Self::open) and is served by
/// [`ioctl`](Self::ioctl) and [`map`](Self::map) exactly as the kernel module serves a file
/// descriptor; [`close`](Self::close) releases everything the open held.
#[derive(Clone)]
pub struct MockDevice {
    owner: Arc<Owner>,
}

impl std::fmt::Debug for MockDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockDevice")
            .field("config", &self.core().config)
            .finish_non_exhaustive()
    }
}

impl MockDevice {
    /// A new device with no clients, in exclusive mode.
    pub fn new(mut config: MockConfig) -> Self {
        let notified = Arc::new(AtomicU32::new(0));
        let kick = Arc::new(AtomicU32::new(0));
        let pool = Arc::new(RegionPool::default());
        let kick_pending = Arc::new(AtomicBool::new(false));
        let platform = MockPlatform::new(
            config.memory_size,
            notified.clone(),
            kick.clone(),
            pool.clone(),
            kick_pending.clone(),
        );
        let mut dev = Box::new(DeviceCore::new(
            Config {
                device_id: config.device_id,
                memory_size: config.memory_size,
                client_memory_limit: config.client_memory_limit,
                page_size: 4096,
                platform_features: Features::DOORBELL_FUTEX,
                quota: config.quota,
            },
            platform,
        ));
        let base = Identity::new(
            config
                .uuid
                .unwrap_or_else(|| derived_uuid(config.device_id)),
            "",
            concat!("davinci-mock-device ", env!("CARGO_PKG_VERSION")),
            -1,
            u32::try_from(config.pollers.max(1)).unwrap_or(u32::MAX),
        );
        let p = config.presented;
        dev.set_device_identity(Identity {
            identity: DeviceIdentity {
                model: p.model,
                chip_name: p.chip_name,
                bus_id: p.bus_id,
                ..base.identity
            },
            ..base
        });
        dev.set_sensor_config(config.sensors);
        // Cannot fail for the whole device (no stream to look up).
        dev.inject_rule(config.inject);
        // Nothing is open yet, so these fail only for slots out of range (kept at the default).
        let _ = dev.set_tenant_slots(config.tenant_slots);
        config.tenant_slots = dev.tenant_slots();
        let _ = dev.set_secret(random_secret());
        let core = Arc::new(Core {
            dev: RwLock::new(dev),
            notified,
            kick,
            served: Mutex::new(HashMap::new()),
            pollers: Mutex::new(Vec::new()),
            shutdown: AtomicBool::new(false),
            writers: AtomicU32::new(0),
            config,
            pool,
            kick_pending,
            tidier: Default::default(),
            starved_yields: AtomicU64::new(0),
        });
        // The pollers start with the device (a fixed set of threads, not one per stream). One
        // that cannot be started now is started with the first stream (or that fails then).
        for _ in 0..config.pollers.max(1) {
            if core.start_poller().is_err() {
                break;
            }
        }
        Self {
            owner: Arc::new(Owner { core }),
        }
    }

    pub(crate) fn core(&self) -> &Core {
        &self.owner.core
    }

    /// The configuration.
    pub fn config(&self) -> MockConfig {
        self.core().config
    }

    /// Attaches an open (client or control): its `client`, which the other calls take. In
    /// exclusive mode a second client gets `EBUSY` naming the holder.
    pub fn open(&self, params: OpenParams) -> Result<u32, Box<OpenError>> {
        let core = self.core();
        if core.shutdown.load(Ordering::Acquire) {
            return Err(Box::new(OpenError {
                error: Error::new(Errno::ENODEV, "the device has shut down"),
                holder: None,
            }));
        }
        core.lock().open(params).map_err(Box::new)
    }

    /// Detaches an open and releases everything it held; its streams leave their pollers.
    pub fn close(&self, client: u32) {
        let core = self.core();
        {
            let mut g = core.lock();
            g.close(client);
            g.platform_mut().forget_client(client);
        }
        core.reap(false, false);
        self.tidy();
    }

    /// From now on the caller calls [`tidy`](Self::tidy) after each reply (the daemon: after
    /// sending it): ALLOC_MEMORY and CREATE_STREAM then take memfds made (and mapped) ahead
    /// of time, the pollers are woken for a new or destroyed stream by `tidy`, and unmapping and
    /// closing freed memory (emptied before the call returns, as always) waits for `tidy`.
    /// Without it (the embedded device) every call does all this work itself.
    pub fn tidy_after_replies(&self) {
        self.core().pool.enable();
    }

    /// Work the last replies left (see [`tidy_after_replies`](Self::tidy_after_replies)):
    /// wakes the pollers for the streams created or destroyed since, unmaps and closes released memory
    /// and makes the memfds the pool lacks, with no device lock held; empties the pool when
    /// the device has no client left. Cheap when there is nothing to do.
    pub fn tidy(&self) {
        self.core().tidy();
    }

    /// Like [`tidy_after_replies`](Self::tidy_after_replies), with the tidying done by a
    /// thread of the device's own, nudged after each control call that leaves work for it
    /// (ALLOC/FREE_MEMORY, CREATE/DESTROY_STREAM, DESTROY_CONTEXT): for a host that has no
    /// moment after its replies, the embedded device. Such a call makes no memfd when the
    /// pool has one ready, and returns before its memory is unmapped and closed and before the
    /// pollers are woken for its stream (what it frees still reads zero when it returns).
    /// Calling [`tidy`](Self::tidy) as well does no harm. Stops with the device.
    ///
    /// # Errors
    /// The thread could not be started (the device then works as before, tidying nothing).
    pub fn tidy_in_background(&self) -> std::io::Result<()> {
        let core = &self.owner.core;
        Tidier::start(core)?;
        core.pool.enable();
        Ok(())
    }

    /// One ioctl for `client`: `arg` holds the argument bytes (`_IOC_SIZE(request)` of them)
    /// and receives the reply fields (also on most errors, e.g. WAIT_EVENT's `status`).
    /// Blocks for WAIT_EVENT, with the device unlocked.
    pub fn ioctl(
        &self,
        client: u32,
        request: u32,
        arg: &mut [u8],
        user: &mut dyn UserMem,
    ) -> Result<(), Error> {
        let core = self.core();
        let mut g = core.lock();
        if core.shutdown.load(Ordering::Acquire) {
            return Err(Error::new(Errno::ENODEV, "the device has shut down"));
        }
        // A stream's creation and destruction wake the pollers after the reply when the host
        // tidies then (`Core::kick`).
        let after_reply = matches!(
            request,
            DRIVER_CMD_CREATE_STREAM | DRIVER_CMD_DESTROY_STREAM | DRIVER_CMD_DESTROY_CONTEXT
        ) && core.pool.tidied();
        g.platform_mut().defer_kicks(after_reply);
        let r = g.ioctl(client, request, arg, user);
        g.platform_mut().defer_kicks(false);
        let done = match r? {
            Reply::Wait(spec) => return core.wait(g, client, &spec, arg),
            other => self.finish(g, client, request, other, after_reply),
        };
        // The work this call left for after the reply, when a thread of the device does it:
        // the pollers' kick for a stream created or destroyed, at once; memory (a memfd to
        // make ahead, freed ones to let go of) once it is due, one wake for several calls.
        if core.tidier.running() {
            let due = match request {
                DRIVER_CMD_CREATE_STREAM
                | DRIVER_CMD_DESTROY_STREAM
                | DRIVER_CMD_DESTROY_CONTEXT => true,
                DRIVER_CMD_ALLOC_MEMORY | DRIVER_CMD_FREE_MEMORY => core.pool.due(),
                _ => false,
            };
            if due {
                core.tidier.nudge();
            }
        }
        done
    }

    /// What a dispatched ioctl leaves to the host, but a wait (`waits` answers those); the
    /// pollers' kicks wait for `tidy` if `after_reply`.
    pub(crate) fn finish(
        &self,
        mut g: Exclusive<'_>,
        client: u32,
        request: u32,
        reply: Reply,
        after_reply: bool,
    ) -> Result<(), Error> {
        let core = self.core();
        match reply {
            Reply::Done => {
                drop(g);
                if request == DRIVER_CMD_DESTROY_STREAM || request == DRIVER_CMD_DESTROY_CONTEXT {
                    core.reap(false, after_reply);
                }
                Ok(())
            }
            // Both callers answer waits themselves, before this.
            Reply::Wait(_) => Err(Error::new(Errno::EIO, "a wait was not answered")),
            Reply::StreamCreated(stream) => self.start_worker(g, client, stream, after_reply),
            Reply::Kick(stream) => {
                g.platform_mut().kick_stream(stream);
                Ok(())
            }
        }
    }

    fn start_worker(
        &self,
        mut g: Exclusive<'_>,
        client: u32,
        stream: u32,
        after_reply: bool,
    ) -> Result<(), Error> {
        let Some(mem) = g.stream_mem(client, stream).cloned() else {
            return Err(Error::new(Errno::ENOENT, "new stream vanished"));
        };
        g.platform_mut().register_stream(stream, mem.clone());
        match self.owner.core.serve(&g, client, stream, mem, after_reply) {
            Ok(()) => Ok(()),
            Err(_) => {
                let _ = g.destroy_stream(client, stream);
                Err(Error::new(
                    Errno::ENOMEM,
                    "could not start a poller thread for the stream",
                ))
            }
        }
    }

    /// Memfds backing device memory now: one per live allocation of any client.
    pub fn backed_allocations(&self) -> usize {
        self.core().shared().platform().backed_allocations()
    }

    /// Resolves an mmap request of `client`: `cookie` must name an object it owns and `len`
    /// must not exceed the object. Returns a descriptor to map (the caller's own: a `dup` of
    /// [`map_shared`](Self::map_shared)'s) and the offset within it.
    pub fn map(&self, client: u32, cookie: u64, len: u64) -> Result<MapSource, Error> {
        let src = self.map_shared(client, cookie, len)?;
        let fd = src.fd.dup().map_err(|e| {
            Error::new(
                Errno::ENOMEM,
                match e.raw_os_error() {
                    Some(libc::EMFILE) => {
                        "could not duplicate the memory's descriptor (EMFILE: too many open files)"
                    }
                    _ => "could not duplicate the memory's descriptor",
                },
            )
        })?;
        Ok(MapSource {
            fd,
            offset: src.offset,
        })
    }

    /// [`map`](Self::map) without the `dup`: the device's own descriptor of the memfd, kept
    /// open by the returned value (for a host that only lends it to `sendmsg` or `mmap`).
    pub fn map_shared(&self, client: u32, cookie: u64, len: u64) -> Result<SharedMapSource, Error> {
        let g = self.core().shared();
        match g.mmap_target(client, cookie, len)? {
            MmapTarget::Memory {
                owner,
                offset,
                skip,
                ..
            } => Ok(SharedMapSource {
                fd: g.platform().allocation_fd(owner, offset)?,
                // An import of a range maps it alone (whole pages into the memfd).
                offset: skip,
            }),
            MmapTarget::CmdRing { stream } => self.stream_part(&g, client, stream, StreamPart::Cmd),
            MmapTarget::EventRing { stream } => {
                self.stream_part(&g, client, stream, StreamPart::Event)
            }
            MmapTarget::Doorbell { stream } => {
                self.stream_part(&g, client, stream, StreamPart::Doorbell)
            }
        }
    }

    fn stream_part(
        &self,
        g: &DeviceCore<MockPlatform>,
        client: u32,
        stream: u32,
        part: StreamPart,
    ) -> Result<SharedMapSource, Error> {
        let Some(mem) = g.stream_mem(client, stream) else {
            return Err(Error::new(Errno::ENOENT, "no such stream for this client"));
        };
        let (fd, offset) = MockPlatform::stream_fd(mem, part);
        Ok(SharedMapSource { fd, offset })
    }

    /// GET_INFO, without an open.
    pub fn info(&self) -> DeviceInfo {
        self.core().shared().info()
    }

    /// Usage of every attached client. Read with the device held exclusively, like
    /// LIST_CLIENTS: each live stream's counters are read under its lock, which a poller
    /// running a stream takes again at once (a report beside a busy stream would wait as long).
    pub fn clients(&self) -> Vec<ClientUsage> {
        self.core().lock().clients().collect()
    }

    /// The id the device reports for open `client` (LIST_CLIENTS' `client_id`, GET_INFO's
    /// `caller_id`); `None` for a control open, which is not a client, or an unknown one.
    pub fn client_id(&self, client: u32) -> Option<u32> {
        self.core().shared().client_id(client)
    }

    /// The sharing mode now in force.
    pub fn share_mode(&self) -> ShareMode {
        self.core().shared().share_mode()
    }

    /// How many tenant slots `tenant` counts for (TENANT_SHARE; 1 unless an admin set it).
    pub fn tenant_shares(&self, tenant: davinci_driver_core::Tenant) -> u32 {
        self.core().shared().tenant_shares(tenant)
    }

    /// Streams being served by the device's pollers (every live stream, until reaped).
    pub fn workers(&self) -> usize {
        self.core().served().len()
    }

    /// Streams of one client being served.
    pub fn client_workers(&self, client: u32) -> usize {
        self.core()
            .served()
            .values()
            .filter(|w| w.client == client)
            .count()
    }

    /// Poller threads running (`MockConfig::pollers`, more only past
    /// `FUTEX_WAITV_MAX - 1` streams per poller).
    pub fn pollers(&self) -> usize {
        self.core().pollers().len()
    }

    /// Arms `fault` (or disarms, `None`) on stream `stream` (its handle, whoever owns it), or
    /// with `stream` `None` on every stream and on every stream created from now on
    /// (docs/abi.md 5.6 says what clients see). `ENOENT` if the stream does not exist.
    pub fn inject(&self, stream: Option<u32>, fault: Option<Inject>) -> Result<(), Error> {
        let g = {
            let mut g = self.core().lock();
            g.inject(stream, fault)?;
            g
        };
        // A halted stream's poller looks again (a fault disarmed does not restart it, but a
        // stream armed while its poller sleeps is reconsidered at once).
        g.platform().kick_pollers();
        Ok(())
    }

    /// A device reset (docs/abi.md 5.6): every running stream stops in the error state with
    /// `ECANCELED`; clients, contexts, events and memory stay, and new streams run. Returns
    /// the number of streams stopped.
    pub fn reset(&self) -> u32 {
        self.core().lock().reset()
    }

    /// Stops and joins every poller now; afterwards every call fails with `ENODEV`.
    /// (Dropping the last handle does the same.)
    pub fn shutdown(&self) {
        self.core().shutdown();
    }
}

/// A random secret for the device's handle scramble: std's `RandomState` keys come from the
/// operating system's random source (and differ per call), so hashing nothing with one gives
/// a number no tenant can predict.
fn random_secret() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}
