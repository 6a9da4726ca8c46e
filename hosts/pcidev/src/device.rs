//! [`PciDevice`]: the device loop. It owns the ivshmem server (peer 0), its own mapping of
//! BAR2, the admin queue's device ends and the [`DeviceCore`], and serves one guest:
//!
//! * vector 0 (guest → device): drain the admin submission ring, run each request on the
//!   core ([`crate::exec`]), post the completions, raise vector 0 in the guest;
//! * streams: run every live stream (`run_stream`) until none progresses; streams that are
//!   idle (or stalled on a full event ring) get NEED_WAKEUP armed through the ring's
//!   handshake, as the mock's pollers do, and the device sleeps on its eventfds: a client's
//!   doorbell is a write of `0 << 16 | 1` to BAR0, vector 1's eventfd here;
//! * vector 1 (device → guest): raised at most once per pass when completions were
//!   published or events changed (moderation);
//! * the heartbeat word in BAR2's header, bumped every pass (at least every idle timeout).
//!
//! One guest at a time: the first peer to connect; another, while it is connected, is
//! refused (counted and said on stderr): the ivshmem server's peer limit is 1, so it closes
//! that connection before its opening, and the refused peer never receives BAR2's
//! descriptor nor an eventfd. Who may connect at all is the socket's mode and group
//! ([`DeviceConfig::socket_mode`], `0600` by default, set whatever the umask). When the
//! guest goes (QEMU exits), every client it opened is closed and the admin rings start again
//! empty, so a restarted guest finds a fresh device.
#![forbid(unsafe_code)]

mod chaos_pass;

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use davinci_driver_core::{
    derive_uuid, Config as CoreConfig, DeviceCore, DoorbellRegister, HostFault, Identity,
    InjectRule, Quota, Run,
};
use davinci_hwif::bytes::{bytes_to_words, words_to_bytes};
use davinci_hwif::layout::{
    Bar2Header, Bar2Layout, DeviceState, LayoutError, FAILURE_OFFSET, HEADER_FIELDS,
    HEARTBEAT_OFFSET, PAGE_SIZE, STATE_OFFSET,
};
use davinci_hwif::regs::{DEVICE_PEER, DOORBELL};
use davinci_hwif::{
    admin::tag_of, doorbell_value, AdminRequest, AdminSlot, ArgBuf, Completion, ReplyKind,
    ADMIN_DEPTH, ADMIN_ENTRY_SIZE, VECTORS, VECTOR_ADMIN, VECTOR_DATA,
};
use davinci_ivshmem::{PeerId, Server, ShmSpec};
use davinci_ring::{DeviceConsumer, DeviceProducer, RingError};
use davinci_uapi::{Errno, Features};

use crate::bar2::Bar2;
use crate::chaos::{kind_of, Chaos, ChaosConfig};
use crate::exec::{execute, Effect};
use crate::platform::Bar2Platform;

/// Descriptors a stream runs per call.
const RUN_BUDGET: u32 = 64;
/// Rounds over the streams per pass before the device looks at its eventfds again.
const MAX_ROUNDS: u32 = 1;

/// How the device is set up.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// BAR2's size: a power of two in 64 KiB..=1 GiB.
    pub size: u64,
    /// Vectors per peer (at least 2: admin and data).
    pub vectors: u16,
    /// The longest sleep with nothing to do (the heartbeat's period at most).
    pub idle_timeout: Duration,
    /// N of davinciN, as GET_INFO reports it.
    pub device_id: u32,
    /// A fault armed from the start (`--inject`; the guest's module may change it later with
    /// admin INJECT).
    pub inject: Option<InjectRule>,
    /// The socket's permissions (`--socket-mode`), set after `bind` whatever the umask:
    /// whoever may connect gets BAR2 mapped read-write. Default `0600`.
    pub socket_mode: u32,
    /// The socket's group (`--socket-group`), set before its mode; `None` leaves the
    /// process's.
    pub socket_group: Option<u32>,
    /// The chaos device (`--chaos SEED[,RATE]`, [`crate::chaos`]): a fraction of replies
    /// wrong on purpose. `None`: an honest device.
    pub chaos: Option<ChaosConfig>,
    /// The model GET_IDENTITY presents (`--model`; default `davinci_pcidev`).
    pub model: String,
    /// The chip name GET_IDENTITY presents (`--chip-name`; default `pcidev0`).
    pub chip_name: String,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            size: 64 << 20,
            vectors: VECTORS,
            idle_timeout: Duration::from_millis(100),
            device_id: 0,
            inject: None,
            socket_mode: 0o600,
            socket_group: None,
            chaos: None,
            model: "davinci_pcidev".into(),
            chip_name: "pcidev0".into(),
        }
    }
}

/// Why the device could not start or go on.
#[derive(Debug)]
pub enum DeviceError {
    /// The vector count is below [`VECTORS`].
    Vectors(u16),
    /// BAR2's size has no layout.
    Layout(LayoutError),
    /// The ivshmem server failed.
    Server(davinci_ivshmem::Error),
    /// Mapping BAR2 failed.
    Map(std::io::Error),
    /// The admin rings could not be built over BAR2.
    Ring(RingError),
    /// The device core refused its setup.
    Core(davinci_driver_core::Error),
    /// The socket's group or mode could not be set: what, and the error.
    Socket(String, std::io::Error),
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Vectors(v) => write!(
                f,
                "{v} vectors: the device needs at least {VECTORS} (admin and data)"
            ),
            DeviceError::Layout(e) => e.fmt(f),
            DeviceError::Server(e) => write!(f, "ivshmem server: {e}"),
            DeviceError::Map(e) => write!(f, "mapping BAR2: {e}"),
            DeviceError::Ring(e) => write!(f, "admin ring over BAR2: {e}"),
            DeviceError::Core(e) => write!(f, "device core: {e}"),
            DeviceError::Socket(what, e) => write!(f, "{what}: {e}"),
        }
    }
}

impl std::error::Error for DeviceError {}

impl From<davinci_ivshmem::Error> for DeviceError {
    fn from(e: davinci_ivshmem::Error) -> Self {
        DeviceError::Server(e)
    }
}

/// The admin queue's device ends (views into BAR2, kept beside the mapping's owner).
struct AdminRings {
    sq: DeviceConsumer<AdminSlot>,
    cq: DeviceProducer<AdminSlot>,
    // Last: the views above point into it.
    _bar2: Arc<Bar2>,
}

impl AdminRings {
    /// Fresh, empty admin rings (both headers initialised).
    fn new(bar2: &Arc<Bar2>, l: &Bar2Layout) -> Result<AdminRings, RingError> {
        let ring = |at| bar2.ring(at, l.ring_bytes, ADMIN_DEPTH, ADMIN_ENTRY_SIZE);
        let (sq, cq) = (ring(l.sq_offset)?, ring(l.cq_offset)?);
        sq.init();
        cq.init();
        Ok(AdminRings {
            sq: DeviceConsumer::try_new(sq)?,
            cq: DeviceProducer::try_new(cq)?,
            _bar2: bar2.clone(),
        })
    }
}

/// Gives the socket at `path` the group `group` (if any), then the mode `mode`: in that
/// order, so it is never open to a group it does not have yet.
fn set_socket_access(path: &Path, mode: u32, group: Option<u32>) -> Result<(), DeviceError> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(g) = group {
        nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(g))).map_err(|e| {
            DeviceError::Socket(
                format!("--socket-group {g}: chown {}", path.display()),
                e.into(),
            )
        })?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| {
        DeviceError::Socket(
            format!("--socket-mode {mode:04o}: chmod {}", path.display()),
            e,
        )
    })
}

/// What the device counted (for tests and the log).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Admin requests answered.
    pub admin_requests: u64,
    /// Of them, refused as malformed.
    pub admin_malformed: u64,
    /// Vector-1 doorbells seen (eventfd counts may merge several).
    pub data_doorbells: u64,
    /// Interrupts raised on vector 0.
    pub admin_interrupts: u64,
    /// Interrupts raised on vector 1.
    pub data_interrupts: u64,
    /// Guests that left.
    pub guests_gone: u64,
    /// Peers refused because a guest was connected.
    pub peers_refused: u64,
}

/// The PCI device's host process state.
pub struct PciDevice {
    // Field order is drop order: every ring view before the mapping's last owner.
    admin: Option<AdminRings>,
    /// Boxed: a device is some 220 KB of fixed-size tables, too big to move around on a
    /// test thread's 2 MiB stack in a debug build.
    core: Box<DeviceCore<Bar2Platform>>,
    bar2: Arc<Bar2>,
    layout: Bar2Layout,
    server: Server,
    config: DeviceConfig,
    guest: Option<PeerId>,
    clients: BTreeSet<u32>,
    /// Streams with NEED_WAKEUP armed before the last sleep.
    armed: Vec<u32>,
    /// The next sleep may not be long (a stream has work, or could not be armed).
    busy: bool,
    stats: Stats,
    /// The chaos layer (`--chaos`), and BAR2's header as the device wrote it (restored after
    /// a chaos garbage spell).
    chaos: Option<Chaos>,
    header: [u8; HEADER_FIELDS],
}

impl PciDevice {
    /// Creates BAR2 (the server's memfd), lays it out, starts the core and listens on
    /// `socket` for QEMU.
    ///
    /// # Errors
    /// [`DeviceError`] saying what failed.
    pub fn bind(socket: &Path, config: DeviceConfig) -> Result<PciDevice, DeviceError> {
        if config.vectors < VECTORS {
            return Err(DeviceError::Vectors(config.vectors));
        }
        let layout = Bar2Layout::for_region(config.size).map_err(DeviceError::Layout)?;
        let mut server = Server::bind(socket, ShmSpec { size: config.size }, config.vectors)?;
        // (On failure `server` goes, and the socket file with it.)
        // One guest per device: a second peer is closed before the server's opening, so it
        // never receives BAR2's descriptor.
        server.limit_peers(1)?;
        set_socket_access(socket, config.socket_mode, config.socket_group)?;
        let len = usize::try_from(config.size)
            .map_err(|_| DeviceError::Layout(LayoutError::RegionSize(config.size)))?;
        let bar2 = Arc::new(Bar2::map(server.shared_fd(), len).map_err(DeviceError::Map)?);
        let dev_header = Bar2Header {
            layout,
            state: DeviceState::Booting,
            heartbeat: 0,
            failure: 0,
        };
        let mut page = vec![0u8; PAGE_SIZE as usize];
        dev_header.encode(&mut page);
        let mut header = [0u8; HEADER_FIELDS];
        header.copy_from_slice(&page[..HEADER_FIELDS]);
        bar2.mapping()
            .write(0, &page)
            .map_err(|_| DeviceError::Layout(LayoutError::RegionSize(config.size)))?;
        let admin = AdminRings::new(&bar2, &layout).map_err(DeviceError::Ring)?;
        let platform = Bar2Platform::new(bar2.clone(), layout);
        let heap = platform.heap_bytes();
        // A client's doorbell page is BAR0's first page: it rings by writing `0 << 16 | 1`
        // (this process, the data vector) to the Doorbell register (docs/abi.md 5.3).
        let doorbell =
            DoorbellRegister::new(DOORBELL as u32, doorbell_value(DEVICE_PEER, VECTOR_DATA))
                .map_err(DeviceError::Core)?;
        let mut core = Box::new(DeviceCore::new(
            CoreConfig {
                device_id: config.device_id,
                memory_size: heap,
                client_memory_limit: 0,
                page_size: PAGE_SIZE as u32,
                // Export fds are its driver's (the kernel module makes and resolves them;
                // this device keeps such an export reachable through an fd import alone).
                platform_features: Features::DOORBELL_MMIO.union(Features::EXPORT_FD),
                quota: Quota::default(),
            },
            platform,
        ));
        core.set_doorbell(doorbell).map_err(DeviceError::Core)?;
        if let Some(rule) = config.inject {
            core.apply_host_fault(&HostFault::Arm(Some(rule)));
        }
        // GET_IDENTITY: a UUID derived from what names this device to its operator (its socket
        // and its device id), the same across restarts; the guest's module adds where the guest
        // put it (the bus id). One engine: the device loop.
        let path = socket.as_os_str().as_encoded_bytes();
        let uuid = derive_uuid(&[b"davinci-pcidev", path, &config.device_id.to_le_bytes()]);
        let driver = concat!("davinci-pcidev ", env!("CARGO_PKG_VERSION"), " (ABI 1.5)");
        core.set_device_identity(
            Identity::new(uuid, "", driver, -1, 1).with_names(&config.model, &config.chip_name),
        );
        let chaos = config.chaos.map(|c| Chaos::new(c, layout));
        let dev = PciDevice {
            admin: Some(admin),
            core,
            bar2,
            layout,
            server,
            config,
            guest: None,
            clients: BTreeSet::new(),
            armed: Vec::new(),
            busy: false,
            stats: Stats::default(),
            chaos,
            header,
        };
        dev.set_state(DeviceState::Ready, 0);
        Ok(dev)
    }

    /// The server's socket.
    pub fn socket(&self) -> &Path {
        self.server.path()
    }

    /// BAR2's layout.
    pub fn layout(&self) -> Bar2Layout {
        self.layout
    }

    /// What was counted so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The guest served now.
    pub fn guest(&self) -> Option<PeerId> {
        self.guest
    }

    fn set_state(&self, state: DeviceState, failure: u32) {
        let m = self.bar2.mapping();
        if let Ok(w) = m.word(FAILURE_OFFSET) {
            w.store(failure, Ordering::Relaxed);
        }
        if let Ok(w) = m.word(STATE_OFFSET) {
            // Release: the layout and the failure errno before the state that announces them.
            w.store(state.word(), Ordering::Release);
        }
    }

    fn heartbeat(&mut self) {
        if let Some(c) = self.chaos.as_mut() {
            if c.heartbeat_stalled(std::time::Instant::now()) {
                return;
            }
        }
        if let Ok(w) = self.bar2.mapping().word(HEARTBEAT_OFFSET) {
            w.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Serves until `stop` is set (checked at least every idle timeout).
    ///
    /// # Errors
    /// A failure of the server's `poll` or eventfd reads.
    pub fn serve(&mut self, stop: &AtomicBool) -> Result<(), DeviceError> {
        while !stop.load(Ordering::Acquire) {
            self.pass()?;
        }
        Ok(())
    }

    /// One pass: wait for something (not at all when busy), take peers and doorbells, drain
    /// the admin queue, run the streams, raise vector 1 if due, arm the idle streams.
    ///
    /// # Errors
    /// As [`serve`](Self::serve).
    pub fn pass(&mut self) -> Result<(), DeviceError> {
        let timeout = if self.busy {
            Duration::ZERO
        } else {
            self.config.idle_timeout
        };
        let act = self.server.wait(timeout)?;
        let data_rung = act
            .doorbells
            .get(usize::from(VECTOR_DATA))
            .copied()
            .unwrap_or(0);
        self.stats.data_doorbells += data_rung;
        for id in std::mem::take(&mut self.armed) {
            self.core.stream_woke(id, data_rung > 0);
        }
        for (id, _why) in &act.gone {
            if Some(*id) == self.guest {
                self.guest_gone();
            }
        }
        if act.connecting {
            self.accept();
        }
        self.drain_admin();
        self.run_streams();
        if self.core.platform().take_irq() {
            self.raise(VECTOR_DATA);
        }
        self.chaos_pass();
        self.heartbeat();
        Ok(())
    }

    fn accept(&mut self) {
        match self.server.accept_peer(Duration::ZERO) {
            Ok(id) => self.guest = Some(id),
            // One guest per device (the server's peer limit is 1): the BAR2 heap and the
            // admin queue are its alone. The server closed the newcomer's connection before
            // sending it anything, BAR2's descriptor included.
            Err(davinci_ivshmem::Error::TooManyPeers { .. }) => {
                self.stats.peers_refused += 1;
                let guest = self.guest.map_or_else(|| "?".to_owned(), |g| g.to_string());
                eprintln!(
                    "davinci-pcidev: refused a peer on {}: guest peer {guest} is connected (one \
                     guest per device; the refused peer was sent nothing, BAR2 included)",
                    self.server.path().display()
                );
            }
            // Gone again before it was taken, or a failed call: nothing to serve.
            Err(_) => {}
        }
    }

    fn guest_gone(&mut self) {
        self.guest = None;
        self.stats.guests_gone += 1;
        for client in std::mem::take(&mut self.clients) {
            self.core.close(client);
            self.core.platform_mut().forget_client(client);
        }
        self.armed.clear();
        self.admin = None;
        match AdminRings::new(&self.bar2, &self.layout) {
            Ok(a) => {
                self.admin = Some(a);
                // A fresh start for the next guest, also after the last one broke the rings.
                self.set_state(DeviceState::Ready, 0);
            }
            Err(_) => self.set_state(DeviceState::Failed, Errno::EIO.code() as u32),
        }
    }

    fn raise(&mut self, vector: u16) {
        if let Some(g) = self.guest {
            if self.server.interrupt(g, vector).is_ok() {
                if vector == VECTOR_ADMIN {
                    self.stats.admin_interrupts += 1;
                } else {
                    self.stats.data_interrupts += 1;
                }
            }
        }
    }

    /// Answers every admin request there is room to answer.
    fn drain_admin(&mut self) {
        let Some(a) = self.admin.as_mut() else {
            return;
        };
        let (avail, free) = match (a.sq.available(), a.cq.free()) {
            (Ok(n), Ok(f)) => (n, f),
            // The guest broke the admin rings' indices: nothing more can be answered.
            _ => {
                self.admin = None;
                self.set_state(DeviceState::Failed, Errno::EPROTO.code() as u32);
                return;
            }
        };
        let n = avail.min(free);
        // Slots left for the chaos layer's extra completions once every request is answered.
        let mut spare = free - n;
        for i in 0..n {
            let Some(slot) = a.sq.peek(i) else { break };
            let bytes: [u8; ADMIN_ENTRY_SIZE] = words_to_bytes(&slot);
            let mut kind = None;
            let c = match AdminRequest::decode(&bytes) {
                Ok(req) => {
                    kind = Some(kind_of(&req.op));
                    let (c, effect) = execute(&mut self.core, &req);
                    let on = self.chaos.is_some();
                    chaos_pass::revival(on, &mut self.core, &mut self.clients, &req.op);
                    match effect {
                        Effect::Opened(client) => {
                            self.clients.insert(client);
                        }
                        Effect::Closed(client) => {
                            self.clients.remove(&client);
                        }
                        Effect::None => {}
                    }
                    c
                }
                Err(e) => {
                    self.stats.admin_malformed += 1;
                    Completion::new(
                        tag_of(&bytes),
                        ReplyKind::Failed,
                        Errno::EINVAL.code() as u32,
                        0,
                        ArgBuf::EMPTY,
                        &e.to_string(),
                    )
                }
            };
            let mut out = [0u8; ADMIN_ENTRY_SIZE];
            c.encode(&mut out);
            let extra = match self.chaos.as_mut() {
                Some(ch) => {
                    let (k, request) = kind.map_or((None, 0), |(k, r)| (Some(k), r));
                    ch.on_reply(k, request, &mut out)
                }
                None => crate::chaos::Extra::default(),
            };
            if let Some(b) = extra.before {
                if spare > 0 {
                    spare -= 1;
                    let _ = a.cq.push(&bytes_to_words(&b[..]));
                }
            }
            // Room was checked (`free`), so this cannot be refused.
            let _ = a.cq.push(&bytes_to_words(&out));
            if let Some(b) = extra.after {
                if spare > 0 {
                    spare -= 1;
                    let _ = a.cq.push(&bytes_to_words(&b[..]));
                }
            }
            self.stats.admin_requests += 1;
        }
        a.sq.advance(n);
        a.cq.publish();
        if n > 0 {
            self.raise(VECTOR_ADMIN);
            // A control call may have made stream work (SUBMIT_TASK, an event recorded).
            self.busy = true;
        }
    }

    /// Runs the streams until none progresses (bounded), then arms the idle ones.
    fn run_streams(&mut self) {
        let handles: Vec<u32> = self.core.stream_handles().collect();
        let mut idle: Vec<(u32, bool)> = Vec::with_capacity(handles.len());
        let mut rounds = 0;
        let mut again = true;
        while again && rounds < MAX_ROUNDS {
            again = false;
            rounds += 1;
            idle.clear();
            let _ = self.core.platform().take_kick();
            for &h in &handles {
                match self.core.run_stream(h, RUN_BUDGET) {
                    Run::Progress(_) | Run::Continuing => again = true,
                    Run::Idle => idle.push((h, false)),
                    Run::Stalled => idle.push((h, true)),
                    Run::Blocked { .. } | Run::Failed(_) | Run::Halted | Run::Gone => {}
                }
            }
            // An event reached, or a kick: the blocked streams may run now.
            if self.core.platform().take_kick() {
                again = true;
            }
        }
        if again {
            self.busy = true;
            return;
        }
        self.busy = false;
        for (h, stalled) in idle {
            let sleep = if stalled {
                self.core.stream_prepare_stall_sleep(h)
            } else {
                self.core.stream_prepare_sleep(h)
            };
            self.armed.push(h);
            if !sleep {
                // Work arrived while arming: run again at once.
                self.busy = true;
            }
        }
        // A blocked stream waits for an event another stream records (which kicks, above)
        // or the safety net of the idle timeout.
    }
}
