//! `davinci-mockd`: N mock devices, each served on its own Unix socket, one connection per
//! open file (see [`davinci_mockd_proto::wire`] for the frames, [`crate::conn`] for how one
//! connection is served).
//!
//! Threads, per device: one acceptor, one reader per connection (at most
//! [`MAX_CONNECTIONS`]), one thread answering every blocking WAIT_EVENT while any is in
//! flight (`crate::waits`: a reader never blocks on one, so a client's other threads keep
//! being served while one waits, as with concurrent `ioctl`s on one kernel file, and the
//! connection's end is always seen; at most [`MAX_WAITS_PER_CONN`] in flight per connection
//! and [`MAX_WAITS_PER_DEVICE`] per device, of which a tenant its share ([`wait_share`]), more get `EBUSY`), and the device's pollers (`davinci_mock_device`: at least
//! `MockConfig::pollers`, one more per 127 streams). So a device never has more than
//! `2 + MAX_CONNECTIONS + pollers` threads, whatever its clients do; the process adds its
//! signal thread. Nothing a peer sends can panic the daemon or disturb
//! another connection: malformed frames get an `EPROTO` reply (or, before `HELLO`, the
//! connection is closed), and a connection's end, however it comes, closes its open, which
//! releases every context, stream and allocation it held.
#![forbid(unsafe_code)]

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use davinci_driver_core::{NoUserMem, Role};
use davinci_mockd_proto::sockio::{SeqListener, SeqPacket};
use davinci_mockd_proto::{default_socket_dir_choice, socket_name, SocketDir};
use davinci_uapi::{
    DeviceShareArgs, ShareMode, TenantShareArgs, Wire, DRIVER_CMD_SET_DEVICE_SHARE,
    DRIVER_CMD_TENANT_SHARE,
};
use tracing::{debug, info, warn};

use crate::conn::serve;
use crate::gate::Ticket;
use crate::peer::{identify, AdminPolicy, Identity};
use crate::shared::Shared;
use davinci_mock_device::{local_open_params, MockConfig, MockDevice, Quota};

pub use crate::audit::{AUDIT_BURST, AUDIT_INTERVAL};
pub use crate::gate::{
    connection_share, ADMIN_RESERVED, MAX_CONNECTIONS, MAX_PRE_HELLO, MAX_PRE_HELLO_PER_TENANT,
    USER_CONNECTIONS,
};
pub use crate::shared::MAX_WAITS_PER_CONN;
pub use crate::socket_dir::prepare_socket_dir;
pub use crate::waits::{wait_share, MAX_WAITS_PER_DEVICE};
/// How long a new connection may take to send HELLO (default of `DaemonConfig::hello_timeout`).
pub const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Daemon configuration.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Devices to host (davinci{first_device} .. davinci{first_device + N - 1}).
    pub devices: u32,
    /// The first device's number (`--first-device`): several daemons on one host each
    /// number their devices apart.
    pub first_device: u32,
    /// Memory of each device in bytes.
    pub memory: u64,
    /// Most memory one tenant may hold, in bytes (`--tenant-memory-limit`; 0 = its share:
    /// the device's memory over the tenant slots while shared).
    pub tenant_memory_limit: u64,
    /// What one tenant may hold of each table while a device is shared (`--tenant-quota`,
    /// [`Quota::for_slots`] of the tenant slots unless given).
    pub quota: Quota,
    /// Tenants each device keeps a share for (`--tenant-slots`, 1 to
    /// [`MAX_TENANT_SLOTS`](davinci_driver_core::MAX_TENANT_SLOTS)): of each table and of
    /// memory (the device's), of its connections (`crate::gate`) and of its blocking waits
    /// (`crate::waits`).
    pub tenant_slots: u32,
    /// Where the sockets go, and how that directory was chosen (which decides who must own
    /// it and the directories above it: [`prepare_socket_dir`]). A `PathBuf` converts to an
    /// explicit directory.
    pub socket_dir: SocketDir,
    /// Permission bits of each socket (connecting needs write permission).
    pub socket_mode: u32,
    /// Group of each socket (so its members may connect with mode 0660); `None` keeps the
    /// daemon's group.
    pub socket_group: Option<u32>,
    /// Who may change device sharing.
    pub admin: AdminPolicy,
    /// The sharing mode every device starts in (`--share-mode`); it lasts until an admin
    /// changes it, and only as long as the daemon runs.
    pub share_mode: ShareMode,
    /// `--tenant-share`: tenants (`user:UID`, `container:ID`) and the slots each counts for,
    /// set at start through TENANT_SHARE.
    pub tenant_shares: Vec<(String, u32)>,
    /// How long a new connection may take to send HELLO before it is closed.
    pub hello_timeout: std::time::Duration,
    /// A fault the streams of every device are armed with (`--inject`, with its selectors; see
    /// [`MockConfig::inject`]).
    pub inject: Option<davinci_driver_core::InjectRule>,
    /// What each device's UUID (GET_IDENTITY) is derived from with its index (`--uuid-seed`);
    /// `None`: the host's machine id.
    pub uuid_seed: Option<String>,
    /// What the devices present in GET_IDENTITY (`--model`, `--chip-name`, `--bus-id`).
    pub presentation: crate::present::Presentation,
    /// The sensor model's parameters (`--sensors`).
    pub sensors: davinci_driver_core::SensorConfig,
}

impl DaemonConfig {
    /// Most threads a daemon with this configuration runs, whatever its clients do: the main
    /// thread and `--reset-after`'s timer; per device an acceptor, a refusing thread
    /// (`crate::refuse`), a wait thread (`crate::waits`), its pollers
    /// ([`MockConfig::most_pollers`]) and one thread per connection, at most
    /// [`MAX_CONNECTIONS`]. Blocking waits, refusals and opens add none beyond these.
    pub fn most_threads(&self) -> usize {
        let pollers = MockConfig::default().most_pollers();
        2 + self.devices as usize * (3 + pollers + MAX_CONNECTIONS)
    }

    /// Most file descriptors a daemon with this configuration holds, whatever its clients
    /// do: per device its listening socket, one memfd per allocation, one per stream
    /// (command ring, event ring and doorbell at offsets of one file), the memfds made ahead
    /// of time, its connections and the refused ones being
    /// answered (`crate::refuse`), plus a few of its own (standard streams, the signalfd,
    /// the pollers' and wait thread's handles).
    pub fn most_fds(&self) -> u64 {
        let per_device = 1
            + davinci_driver_core::MAX_ALLOCATIONS
            + davinci_driver_core::MAX_STREAMS
            + davinci_mock_device::POOLED_MEMFDS
            + MAX_CONNECTIONS
            + crate::refuse::MAX_REFUSING;
        16 + u64::from(self.devices) * per_device as u64
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        Self {
            devices: 1,
            first_device: 0,
            memory: 256 << 20,
            tenant_memory_limit: 0,
            quota: Quota::FAIR,
            tenant_slots: davinci_driver_core::DEFAULT_TENANT_SLOTS,
            socket_dir: default_socket_dir_choice(),
            socket_mode: 0o660,
            socket_group: None,
            admin: AdminPolicy::owned_by(nix::unistd::getuid().as_raw()),
            share_mode: ShareMode::Exclusive,
            tenant_shares: Vec::new(),
            hello_timeout: HELLO_TIMEOUT,
            inject: None,
            uuid_seed: None,
            presentation: crate::present::Presentation::default(),
            sensors: davinci_driver_core::SensorConfig::DEFAULT,
        }
    }
}

struct Served {
    shared: Arc<Shared>,
    listener: Arc<SeqListener>,
    acceptor: Option<JoinHandle<()>>,
}

/// A running daemon: its devices, sockets and threads.
pub struct Daemon {
    served: Vec<Served>,
    dir: PathBuf,
    /// The directory did not exist before: removed again at stop (if empty).
    created_dir: bool,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("dir", &self.dir)
            .field("devices", &self.served.len())
            .finish()
    }
}

impl Daemon {
    /// Creates the devices, binds every socket and starts accepting.
    ///
    /// # Errors
    /// The socket directory cannot be created or may not be used ([`prepare_socket_dir`]:
    /// it, or a directory above it, is owned by another user or writable by others), a
    /// socket cannot be bound (another
    /// daemon listens there, or a non-socket file is in the way), or the initial sharing
    /// mode cannot be set.
    pub fn start(cfg: &DaemonConfig) -> io::Result<Daemon> {
        if cfg.devices == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--devices must be at least 1",
            ));
        }
        if !(1..=davinci_driver_core::MAX_TENANT_SLOTS).contains(&cfg.tenant_slots) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--tenant-slots must be from 1 to 64",
            ));
        }
        let created_dir = prepare_socket_dir(&cfg.socket_dir, nix::unistd::getuid().as_raw())?;
        let dir = &cfg.socket_dir.path;
        let mut served = Vec::new();
        for n in cfg.first_device..cfg.first_device.saturating_add(cfg.devices) {
            let path = dir.join(socket_name(n));
            let listener = Arc::new(SeqListener::bind(&path, cfg.socket_mode).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot listen on {}: {e}", path.display()),
                )
            })?);
            if let Some(gid) = cfg.socket_group {
                nix::unistd::chown(&path, None, Some(nix::unistd::Gid::from_raw(gid))).map_err(
                    |e| {
                        io::Error::new(
                            io::ErrorKind::PermissionDenied,
                            format!("cannot give {} to group {gid}: {e}", path.display()),
                        )
                    },
                )?;
            }
            let dev = MockDevice::new(MockConfig {
                device_id: n,
                memory_size: cfg.memory,
                client_memory_limit: cfg.tenant_memory_limit,
                quota: cfg.quota,
                tenant_slots: cfg.tenant_slots,
                inject: cfg.inject,
                uuid: cfg
                    .uuid_seed
                    .as_deref()
                    .map(|seed| davinci_mock_device::uuid_from_seed(seed, n)),
                presented: cfg.presentation.for_device(n - cfg.first_device),
                sensors: cfg.sensors,
                ..MockConfig::default()
            });
            // Each connection's thread tidies after its replies (`conn::serve`): memfds made
            // ahead of time, freed memory unmapped after the reply.
            dev.tidy_after_replies();
            let name = format!("davinci{n}");
            set_initial_share_mode(&dev, &name, cfg.share_mode)?;
            set_initial_tenant_shares(&dev, &name, &cfg.tenant_shares)?;
            let shared = Arc::new(Shared::new(
                dev,
                name,
                cfg.admin.clone(),
                cfg.hello_timeout,
            )?);
            let (s, l) = (shared.clone(), listener.clone());
            let acceptor = std::thread::Builder::new()
                .name(format!("davinci{n}-accept"))
                .spawn(move || accept_loop(&s, &l))?;
            info!(
                device = n,
                socket = %path.display(),
                memory = cfg.memory,
                share_mode = %cfg.share_mode,
                "device ready"
            );
            served.push(Served {
                shared,
                listener,
                acceptor: Some(acceptor),
            });
        }
        Ok(Daemon {
            served,
            dir: dir.clone(),
            created_dir,
        })
    }

    /// The socket directory.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// Socket paths, by device index.
    pub fn sockets(&self) -> Vec<PathBuf> {
        self.served
            .iter()
            .map(|s| s.listener.path().to_path_buf())
            .collect()
    }

    /// The devices (to inspect state in-process).
    pub fn devices(&self) -> Vec<MockDevice> {
        self.served.iter().map(|s| s.shared.dev.clone()).collect()
    }

    /// Stops accepting, removes the sockets, disconnects every client (closing their opens),
    /// stops the devices and writes the audit log's pending counts of suppressed records.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        for s in &self.served {
            s.shared.stopping.store(true, Ordering::Release);
            s.listener.shutdown();
        }
        for s in &mut self.served {
            if let Some(a) = s.acceptor.take() {
                let _ = a.join();
            }
            let _ = std::fs::remove_file(s.listener.path());
            let conns: Vec<Arc<SeqPacket>> = s.shared.conns().values().cloned().collect();
            for c in conns {
                c.shutdown();
            }
            s.shared.dev.shutdown();
            // Counts of suppressed audit records still pending are written now.
            s.shared.audit.flush();
        }
        if self.created_dir && !self.served.is_empty() {
            // Only if empty: never removes anything but what the daemon created.
            let _ = std::fs::remove_dir(&self.dir);
        }
        self.served.clear();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// One device's connection handling without a socket of its own: what the acceptor runs
/// for every accepted connection ([`crate::conn`]: HELLO, then IOCTL, MMAP and CLOSE frames),
/// for a caller that already holds the connection, e.g. one end of
/// [`SeqPacket::pair`](davinci_mockd_proto::sockio::SeqPacket::pair). In-process tests and
/// the fuzz target `mockd_conn` drive the other end.
pub struct ConnServer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ConnServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnServer")
            .field("device", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl ConnServer {
    /// Serves `dev` as `davinci{device_id}`, with `admin` deciding who may change sharing and
    /// `hello_timeout` bounding the wait for a connection's HELLO.
    ///
    /// # Errors
    /// The device's refusing thread cannot be started.
    pub fn new(
        dev: MockDevice,
        admin: AdminPolicy,
        hello_timeout: std::time::Duration,
    ) -> io::Result<ConnServer> {
        let name = format!("davinci{}", dev.config().device_id);
        Ok(ConnServer {
            shared: Arc::new(Shared::new(dev, name, admin, hello_timeout)?),
        })
    }

    /// The device.
    pub fn device(&self) -> &MockDevice {
        &self.shared.dev
    }

    /// Serves one connection until it ends (CLOSE, the peer's end of the connection, a
    /// refused or malformed HELLO), exactly as a connection thread of the daemon does; the
    /// open it made is closed when this returns. Blocking WAIT_EVENTs are answered by the
    /// device's wait thread, which ends once they have (the close ends them).
    pub fn serve(&self, conn: SeqPacket) {
        if let Some((conn, who, ticket)) = admit(&self.shared, conn) {
            let conn = Arc::new(conn);
            ticket.attach(&conn);
            serve(&self.shared, &conn, who, ticket);
        }
    }
}

/// `--share-mode`: sets a new device's mode through an internal admin control open (the
/// same SET_DEVICE_SHARE path a client takes), before any client can connect.
fn set_initial_share_mode(dev: &MockDevice, name: &str, mode: ShareMode) -> io::Result<()> {
    let from = dev.share_mode();
    if from == mode {
        return Ok(());
    }
    let fail =
        |msg: String| io::Error::other(format!("cannot put {name} in {} mode: {msg}", mode.name()));
    let handle = dev
        .open(local_open_params(Role::Control, true))
        .map_err(|e| fail(e.error.to_string()))?;
    let mut arg = vec![0u8; DeviceShareArgs::SIZE];
    DeviceShareArgs {
        mode: mode as u32,
        ..DeviceShareArgs::default()
    }
    .encode(&mut arg);
    let r = dev.ioctl(
        handle,
        DRIVER_CMD_SET_DEVICE_SHARE,
        &mut arg,
        &mut NoUserMem,
    );
    dev.close(handle);
    r.map_err(|e| fail(e.to_string()))?;
    info!(
        device = %name,
        from = %from,
        to = %mode,
        "device sharing set at start-up (--share-mode)"
    );
    Ok(())
}

/// `--tenant-share`: each tenant's slots, through an internal admin control open (the
/// TENANT_SHARE path an admin's tool takes), before any client can connect.
fn set_initial_tenant_shares(
    dev: &MockDevice,
    name: &str,
    shares: &[(String, u32)],
) -> io::Result<()> {
    if shares.is_empty() {
        return Ok(());
    }
    let handle = dev
        .open(local_open_params(Role::Control, true))
        .map_err(|e| {
            io::Error::other(format!(
                "cannot set the tenant shares of {name}: {}",
                e.error
            ))
        })?;
    let mut result = Ok(());
    for (tenant, n) in shares {
        let r = TenantShareArgs::named(tenant)
            .map_err(|e| e.to_string())
            .and_then(|a| {
                let mut arg = vec![0u8; TenantShareArgs::SIZE];
                a.set(*n).encode(&mut arg);
                dev.ioctl(handle, DRIVER_CMD_TENANT_SHARE, &mut arg, &mut NoUserMem)
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = r {
            result = Err(io::Error::other(format!(
                "cannot make {tenant} count for {n} tenant slots of {name}: {e}"
            )));
            break;
        }
        info!(device = %name, tenant = %tenant, shares = n, "tenant share set at start-up (--tenant-share)");
    }
    dev.close(handle);
    result
}

/// Admits a new connection ([`crate::gate`], by its peer's tenant) or refuses it. Who
/// the peer is ([`identify`]) is taken here, once, right after `accept`.
fn admit(shared: &Shared, conn: SeqPacket) -> Option<(SeqPacket, Identity, Ticket)> {
    let who = match identify(&conn, &shared.admin) {
        Ok(w) => w,
        Err(e) => {
            warn!(device = %shared.name, error = %e, "no peer credentials; dropping connection");
            return None;
        }
    };
    let cred = who.cred;
    let slots = shared.dev.config().tenant_slots;
    let shares = shared.dev.tenant_shares(who.tenant);
    match shared.gate.admit(who.tenant, who.admin, slots, shares) {
        Ok(t) => Some((conn, who, t)),
        Err(why) => {
            debug!(device = %shared.name, pid = cred.pid, uid = cred.uid, why, "connection refused");
            // Answered off this loop (`crate::refuse`): a refusal may wait for a HELLO.
            shared.refuser.refuse(conn, why);
            None
        }
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &SeqListener) {
    loop {
        let conn = match listener.accept() {
            Ok(c) => c,
            Err(e) => {
                if !shared.stopping.load(Ordering::Acquire) {
                    warn!(device = %shared.name, error = %e, "accept failed; no longer accepting");
                }
                return;
            }
        };
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        let Some((conn, who, ticket)) = admit(shared, conn) else {
            continue;
        };
        let conn = Arc::new(conn);
        ticket.attach(&conn);
        let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        shared.conns().insert(id, conn.clone());
        let s = shared.clone();
        let c = conn.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("{}-conn{id}", shared.name))
            .spawn(move || {
                serve(&s, &c, who, ticket);
                s.conns().remove(&id);
            });
        if spawned.is_err() {
            warn!(device = %shared.name, "cannot start a connection thread; dropping it");
            shared.conns().remove(&id);
        }
    }
}
