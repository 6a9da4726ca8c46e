//! `davinci-smi`: the operators' CLI. Lists devices, shows their health, memory, clients and
//! sharing mode, who uses a device (per process and container), and turns device sharing on
//! or off, non-interactively, idempotently, with a result per device.
//!
//! Output: text for people (may change between releases) or `--json` (schema
//! `davinci-smi/v1`, documented in docs/operators.md; only additions within v1). Exit status
//! says what kind of failure happened ([`exit`]).
//!
//! Everything below [`main`] takes its environment as arguments ([`discover::Discovery`], an
//! [`Opener`]) so the command logic is tested without devices or processes.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod discover;
pub mod output;

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use davinci_uapi::{ClientUsage, DeviceInfo, Errno, ShareMode};

use discover::{Discovery, Entry};
use output::*;

/// Exit statuses: one per failure class, so scripts can tell them apart.
pub mod exit {
    /// Success (for `set`: every targeted device is in the requested mode).
    pub const OK: i32 = 0;
    /// Any other failure (protocol or ABI mismatch, unexpected errno).
    pub const OTHER: i32 = 1;
    /// Bad command line.
    pub const USAGE: i32 = 2;
    /// No such device, nothing found, or the device is unreachable (`ENODEV`).
    pub const NOT_FOUND: i32 = 3;
    /// Permission denied (`EPERM`: not an admin; socket or node permissions).
    pub const PERMISSION: i32 = 4;
    /// Busy (`EBUSY`: switching to exclusive would strand attached clients).
    pub const BUSY: i32 = 5;
    /// Partial failure: some targeted devices succeeded, some failed (see the per-device
    /// results).
    pub const PARTIAL: i32 = 6;
}

const AFTER_HELP: &str = "\
Device selection (first that applies): --device PATH (repeatable); --socket-dir DIR
(every DIR/davinci<N>.sock of davinci-mockd); $DAVINCI_DEVICE; every /dev/davinci<N>;
davinci-mockd's default socket directory. PATH is /dev/davinciN or mock:SOCKET.

Exit status: 0 ok, 1 other error, 2 usage, 3 device not found or unreachable,
4 permission denied, 5 busy, 6 partial failure (some devices failed; see per-device results).

Text output is for people and may change; --json output follows the versioned schema
davinci-smi/v1 (docs/operators.md).";

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "davinci-smi",
    version,
    about = "Query davinci devices and control device sharing",
    after_help = AFTER_HELP
)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    /// List the devices (same as `list`)
    #[arg(short = 'l', long = "list")]
    list: bool,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Debug, Args)]
struct Global {
    /// Device path: /dev/davinciN or mock:SOCKET (repeatable; overrides discovery)
    #[arg(long = "device", value_name = "PATH", global = true)]
    device: Vec<String>,
    /// davinci-mockd socket directory: every davinci<N>.sock in it
    #[arg(long = "socket-dir", value_name = "DIR", global = true)]
    socket_dir: Option<PathBuf>,
    /// Machine-readable output (schema davinci-smi/v1)
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// List the devices
    List,
    /// Show devices (default), device sharing (-t device-share) or usage per client (-t usage)
    Info {
        /// What to show
        #[arg(short = 't', long = "type", value_enum, value_name = "TYPE")]
        ty: Option<InfoType>,
        /// Device id N (of davinciN), or `all` [default: all]
        #[arg(short = 'i', long = "id", value_name = "ID", value_parser = parse_id)]
        id: Option<IdSel>,
        /// List the devices
        #[arg(short = 'l', long = "list")]
        list: bool,
    },
    /// Set device sharing: -t device-share -i ID|all -d 0|1 (never prompts)
    Set {
        /// What to set
        #[arg(short = 't', long = "type", value_enum, value_name = "TYPE")]
        ty: SetType,
        /// Device id N (of davinciN), or `all`
        #[arg(short = 'i', long = "id", value_name = "ID", value_parser = parse_id)]
        id: IdSel,
        /// 1 = shared (many isolated clients), 0 = exclusive (one client)
        #[arg(short = 'd', long = "data", value_name = "0|1", value_parser = clap::value_parser!(u8).range(0..=1))]
        data: u8,
        /// Accepted for scripts written for tools that prompt; davinci-smi never prompts
        #[arg(short = 'y', long = "yes")]
        yes: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum InfoType {
    /// The device table
    Board,
    /// Device sharing status
    DeviceShare,
    /// Per-client usage: pid, container, contexts, streams, memory, tasks
    Usage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SetType {
    /// Device sharing (0 exclusive, 1 shared)
    DeviceShare,
}

/// `-i`: one device or all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdSel {
    /// Every selected device.
    All,
    /// davinciN.
    One(u32),
}

fn parse_id(s: &str) -> Result<IdSel, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(IdSel::All);
    }
    s.parse()
        .map(IdSel::One)
        .map_err(|_| format!("'{s}' is not a device id (a number, or 'all')"))
}

/// A failure talking to a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmiError {
    /// The errno, when there is one.
    pub errno: Option<Errno>,
    /// The full message.
    pub message: String,
}

impl SmiError {
    /// An error with an errno.
    pub fn new(errno: Errno, message: impl Into<String>) -> Self {
        Self {
            errno: Some(errno),
            message: message.into(),
        }
    }

    fn json(&self) -> ErrorJson {
        ErrorJson {
            errno: self.errno.map(|e| e.name()),
            code: self.errno.map(|e| e.code()),
            message: self.message.clone(),
        }
    }

    /// The exit status of this failure class.
    pub fn exit_code(&self) -> i32 {
        match self.errno {
            Some(Errno::ENODEV | Errno::ENOENT) => exit::NOT_FOUND,
            Some(Errno::EPERM | Errno::EACCES) => exit::PERMISSION,
            Some(Errno::EBUSY) => exit::BUSY,
            _ => exit::OTHER,
        }
    }
}

impl From<davinci_shim::Error> for SmiError {
    fn from(e: davinci_shim::Error) -> Self {
        Self {
            errno: e.errno(),
            message: e.to_string(),
        }
    }
}

/// One control open, as `davinci-smi` needs it.
pub trait DeviceAccess {
    /// GET_INFO.
    fn info(&self) -> Result<DeviceInfo, SmiError>;
    /// QUERY_DEVICE_SHARE: mode and attached clients.
    fn share(&self) -> Result<(ShareMode, u32), SmiError>;
    /// SET_DEVICE_SHARE.
    fn set_share(&self, mode: ShareMode) -> Result<(), SmiError>;
    /// LIST_CLIENTS.
    fn clients(&self) -> Result<Vec<ClientUsage>, SmiError>;
}

/// Opens devices by path.
pub trait Opener {
    /// A control open of `path`.
    fn open(&self, path: &str) -> Result<Box<dyn DeviceAccess>, SmiError>;
}

impl DeviceAccess for davinci_shim::Control {
    fn info(&self) -> Result<DeviceInfo, SmiError> {
        Ok(davinci_shim::Control::info(self)?)
    }
    fn share(&self) -> Result<(ShareMode, u32), SmiError> {
        let s = davinci_shim::Control::share(self)?;
        Ok((s.mode, s.clients))
    }
    fn set_share(&self, mode: ShareMode) -> Result<(), SmiError> {
        Ok(self.set_share_mode(mode)?)
    }
    fn clients(&self) -> Result<Vec<ClientUsage>, SmiError> {
        Ok(davinci_shim::Control::clients(self)?)
    }
}

/// Opens devices through the shim ([`davinci_shim::Control`]).
pub struct ShimOpener;

impl Opener for ShimOpener {
    fn open(&self, path: &str) -> Result<Box<dyn DeviceAccess>, SmiError> {
        Ok(Box::new(davinci_shim::Control::open(path)?))
    }
}

fn mode_name(m: ShareMode) -> &'static str {
    match m {
        ShareMode::Exclusive => "exclusive",
        ShareMode::Shared => "shared",
    }
}

/// The exit status of a run over several devices: 0 if all succeeded; the failure class if
/// all failed alike (1 if they failed differently); [`exit::PARTIAL`] if some succeeded.
pub fn combine(outcomes: &[Option<&SmiError>]) -> i32 {
    let failed: Vec<&SmiError> = outcomes.iter().flatten().copied().collect();
    if failed.is_empty() {
        exit::OK
    } else if failed.len() < outcomes.len() {
        exit::PARTIAL
    } else {
        let first = failed[0].exit_code();
        if failed.iter().all(|e| e.exit_code() == first) {
            first
        } else {
            exit::OTHER
        }
    }
}

/// Parses and runs a command line (`args[0]` is the program name); writes to `out`/`err`
/// and returns the exit status.
pub fn run(
    args: &[String],
    disc: &Discovery,
    opener: &dyn Opener,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => exit::OK,
                _ => exit::USAGE,
            };
            let text = e.render().to_string();
            if code == exit::OK {
                let _ = write!(out, "{text}");
            } else {
                let _ = write!(err, "{text}");
            }
            return code;
        }
    };
    let g = &cli.global;
    let entries = discover::select(&g.device, g.socket_dir.as_deref(), disc);
    let (command, id, action) = match &cli.cmd {
        _ if cli.list => ("list", None, Action::List),
        None => ("info", None, Action::Board),
        Some(Cmd::List) => ("list", None, Action::List),
        Some(Cmd::Info { list: true, .. }) => ("list", None, Action::List),
        Some(Cmd::Info { ty, id, .. }) => match ty.unwrap_or(InfoType::Board) {
            InfoType::Board => ("info", *id, Action::Board),
            InfoType::DeviceShare => ("info-device-share", *id, Action::Share),
            InfoType::Usage => ("info-usage", *id, Action::Usage),
        },
        Some(Cmd::Set { id, data, .. }) => (
            "set-device-share",
            Some(*id),
            Action::Set(if *data == 1 {
                ShareMode::Shared
            } else {
                ShareMode::Exclusive
            }),
        ),
    };
    let fail = |e: SmiError, out: &mut dyn Write, err: &mut dyn Write| {
        let code = e.exit_code();
        if g.json {
            let d = Doc {
                schema: SCHEMA,
                command,
                exit_code: code,
                body: Body::Failed { error: e.json() },
            };
            let _ = write!(out, "{}", d.render());
        } else {
            let _ = writeln!(err, "davinci-smi: {}", e.message);
        }
        code
    };
    if entries.is_empty() {
        let e = SmiError::new(
            Errno::ENODEV,
            format!(
                "no davinci devices found (looked for {})",
                discover::searched(&g.device, g.socket_dir.as_deref(), disc)
            ),
        );
        return fail(e, out, err);
    }
    if matches!(action, Action::List) {
        let devices: Vec<ListedDevice> = entries
            .iter()
            .map(|e| ListedDevice {
                id: e.id,
                path: e.path.clone(),
            })
            .collect();
        if g.json {
            let d = Doc {
                schema: SCHEMA,
                command,
                exit_code: exit::OK,
                body: Body::List { devices },
            };
            let _ = write!(out, "{}", d.render());
        } else {
            let rows: Vec<Vec<String>> = devices
                .iter()
                .map(|d| vec![d.id.map_or("-".into(), |i| i.to_string()), d.path.clone()])
                .collect();
            let _ = write!(out, "{}", table(&["Device", "Path"], &rows));
        }
        return exit::OK;
    }
    // Open the targeted devices.
    let mut targets: Vec<Target> = entries
        .into_iter()
        .map(|e| {
            let dev = opener.open(&e.path);
            Target { entry: e, dev }
        })
        .collect();
    // Paths that do not name their id get it from GET_INFO.
    for t in &mut targets {
        if t.entry.id.is_none() {
            if let Ok(d) = &t.dev {
                t.entry.id = d.info().ok().map(|i| i.device_id);
            }
        }
    }
    if let Some(IdSel::One(n)) = id {
        targets.retain(|t| t.entry.id == Some(n));
        if targets.is_empty() {
            let e = SmiError::new(
                Errno::ENODEV,
                format!(
                    "no device with id {n} (see `davinci-smi list`; looked in {})",
                    discover::searched(&g.device, g.socket_dir.as_deref(), disc)
                ),
            );
            return fail(e, out, err);
        }
    }
    let (doc, text) = match action {
        Action::Board => board(&targets),
        Action::Share => share(&targets),
        Action::Usage => usage(&targets),
        Action::Set(mode) => set(&targets, mode),
        Action::List => return exit::OK,
    };
    let doc = Doc { command, ..doc };
    if g.json {
        let _ = write!(out, "{}", doc.render());
    } else {
        let _ = write!(out, "{text}");
    }
    doc.exit_code
}

enum Action {
    List,
    Board,
    Share,
    Usage,
    Set(ShareMode),
}

struct Target {
    entry: Entry,
    dev: Result<Box<dyn DeviceAccess>, SmiError>,
}

fn id_text(id: Option<u32>) -> String {
    id.map_or("-".into(), |i| i.to_string())
}

fn doc(body: Body, outcomes: &[Option<&SmiError>]) -> Doc {
    Doc {
        schema: SCHEMA,
        command: "",
        exit_code: combine(outcomes),
        body,
    }
}

fn board(targets: &[Target]) -> (Doc, String) {
    let mut devices = Vec::new();
    let mut errors = Vec::new();
    let mut clients_rows = Vec::new();
    for t in targets {
        let r = t.dev.as_ref().map_err(Clone::clone).and_then(|d| {
            let info = d.info()?;
            // Usage is best effort here: a device that answers GET_INFO is healthy.
            let clients = d.clients().unwrap_or_default();
            Ok((info, clients))
        });
        match r {
            Ok((i, clients)) => {
                let mode = ShareMode::from_u32(i.share_mode);
                devices.push(DeviceJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "ok",
                    error: None,
                    abi: Some(format!("{}.{}", i.abi_major, i.abi_minor)),
                    memory: Some(MemoryJson {
                        total_bytes: i.memory_size,
                        used_bytes: i.memory_used,
                        client_limit_bytes: i.client_memory_limit,
                    }),
                    clients: Some(i.clients),
                    max_clients: Some(i.max_clients),
                    share_mode: mode.map(mode_name),
                    device_share: mode.map(|m| m == ShareMode::Shared),
                });
                for u in clients {
                    clients_rows.push(vec![
                        id_text(t.entry.id),
                        u.pid.to_string(),
                        short_container(u.container_id().unwrap_or_default()),
                        mib(u.memory_bytes),
                        format!("{}/{}", u.tasks_completed, u.tasks_submitted),
                    ]);
                }
                errors.push(None);
            }
            Err(e) => {
                devices.push(DeviceJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "unreachable",
                    error: Some(e.json()),
                    abi: None,
                    memory: None,
                    clients: None,
                    max_clients: None,
                    share_mode: None,
                    device_share: None,
                });
                errors.push(Some(e));
            }
        }
    }
    let rows: Vec<Vec<String>> = devices
        .iter()
        .map(|d| {
            vec![
                id_text(d.id),
                if d.health == "ok" {
                    "OK"
                } else {
                    "Unreachable"
                }
                .to_string(),
                d.memory.map_or("-".into(), |m| {
                    format!("{} / {}", mib(m.used_bytes), mib(m.total_bytes))
                }),
                d.clients.map_or("-".into(), |c| c.to_string()),
                d.share_mode.unwrap_or("-").to_string(),
                d.path.clone(),
            ]
        })
        .collect();
    let mut text = table(
        &[
            "Device",
            "Health",
            "Memory MiB used / total",
            "Clients",
            "Share",
            "Path",
        ],
        &rows,
    );
    for (d, e) in devices.iter().zip(&errors) {
        if let Some(e) = e {
            text += &format!("Device {}: {}\n", id_text(d.id), e.message);
        }
    }
    if clients_rows.is_empty() {
        if errors.iter().any(Option::is_none) {
            text += "No clients attached.\n";
        }
    } else {
        text += &table(
            &[
                "Device",
                "PID",
                "Container",
                "Memory MiB",
                "Tasks done/submitted",
            ],
            &clients_rows,
        );
    }
    let outcomes: Vec<Option<&SmiError>> = errors.iter().map(Option::as_ref).collect();
    (doc(Body::Info { devices }, &outcomes), text)
}

fn share(targets: &[Target]) -> (Doc, String) {
    let mut devices = Vec::new();
    let mut errors = Vec::new();
    let mut text = String::new();
    for t in targets {
        match t.dev.as_ref().map_err(Clone::clone).and_then(|d| d.share()) {
            Ok((mode, clients)) => {
                text += &kv(&[
                    ("Device ID", id_text(t.entry.id)),
                    (
                        "Device-share Status",
                        if mode == ShareMode::Shared {
                            "True"
                        } else {
                            "False"
                        }
                        .into(),
                    ),
                    ("Share Mode", mode_name(mode).into()),
                    ("Clients", clients.to_string()),
                ]);
                text.push('\n');
                devices.push(ShareJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "ok",
                    error: None,
                    device_share: Some(mode == ShareMode::Shared),
                    share_mode: Some(mode_name(mode)),
                    clients: Some(clients),
                });
                errors.push(None);
            }
            Err(e) => {
                text += &kv(&[
                    ("Device ID", id_text(t.entry.id)),
                    ("Status", "Unreachable".into()),
                    ("Message", e.message.clone()),
                ]);
                text.push('\n');
                devices.push(ShareJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "unreachable",
                    error: Some(e.json()),
                    device_share: None,
                    share_mode: None,
                    clients: None,
                });
                errors.push(Some(e));
            }
        }
    }
    let outcomes: Vec<Option<&SmiError>> = errors.iter().map(Option::as_ref).collect();
    (doc(Body::Share { devices }, &outcomes), text)
}

fn short_container(c: &str) -> String {
    if c.is_empty() {
        "-".into()
    } else {
        c.chars().take(12).collect()
    }
}

fn usage(targets: &[Target]) -> (Doc, String) {
    let mut devices = Vec::new();
    let mut errors = Vec::new();
    let mut text = String::new();
    for t in targets {
        let r = t
            .dev
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|d| Ok((d.share()?.0, d.clients()?)));
        match r {
            Ok((mode, list)) => {
                let clients: Vec<ClientJson> = list
                    .iter()
                    .map(|u| ClientJson {
                        client_id: u.client_id,
                        pid: u.pid,
                        uid: u.uid,
                        container_id: u.container_id().unwrap_or_default().to_string(),
                        contexts: u.contexts,
                        streams: u.streams,
                        events: u.events,
                        allocations: u.allocations,
                        memory_bytes: u.memory_bytes,
                        tasks_submitted: u.tasks_submitted,
                        tasks_completed: u.tasks_completed,
                    })
                    .collect();
                text += &format!(
                    "Device {} ({}): {} mode, {} client(s)\n",
                    id_text(t.entry.id),
                    t.entry.path,
                    mode_name(mode),
                    clients.len()
                );
                if clients.is_empty() {
                    text += "No clients attached.\n";
                } else {
                    let rows: Vec<Vec<String>> = clients
                        .iter()
                        .map(|c| {
                            vec![
                                c.pid.to_string(),
                                c.uid.to_string(),
                                short_container(&c.container_id),
                                c.contexts.to_string(),
                                c.streams.to_string(),
                                c.events.to_string(),
                                c.allocations.to_string(),
                                mib(c.memory_bytes),
                                c.tasks_submitted.to_string(),
                                c.tasks_completed.to_string(),
                            ]
                        })
                        .collect();
                    text += &table(
                        &[
                            "PID",
                            "UID",
                            "Container",
                            "Contexts",
                            "Streams",
                            "Events",
                            "Allocs",
                            "Memory MiB",
                            "Submitted",
                            "Completed",
                        ],
                        &rows,
                    );
                }
                devices.push(UsageJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "ok",
                    error: None,
                    share_mode: Some(mode_name(mode)),
                    clients,
                });
                errors.push(None);
            }
            Err(e) => {
                text += &format!(
                    "Device {} ({}): unreachable: {}\n",
                    id_text(t.entry.id),
                    t.entry.path,
                    e.message
                );
                devices.push(UsageJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "unreachable",
                    error: Some(e.json()),
                    share_mode: None,
                    clients: Vec::new(),
                });
                errors.push(Some(e));
            }
        }
    }
    let outcomes: Vec<Option<&SmiError>> = errors.iter().map(Option::as_ref).collect();
    (doc(Body::Usage { devices }, &outcomes), text)
}

fn set(targets: &[Target], mode: ShareMode) -> (Doc, String) {
    let mut results = Vec::new();
    let mut errors = Vec::new();
    let mut text = String::new();
    let word = |m: ShareMode| {
        if m == ShareMode::Shared {
            "enabled"
        } else {
            "disabled"
        }
    };
    for t in targets {
        let (previous, r) = match &t.dev {
            Err(e) => (None, Err(e.clone())),
            Ok(d) => {
                let previous = d.share().ok().map(|(m, _)| m);
                (previous, d.set_share(mode))
            }
        };
        match r {
            Ok(()) => {
                let changed = previous != Some(mode);
                let msg = if changed {
                    format!(
                        "device-share {} (was {})",
                        word(mode),
                        previous.map_or("unknown", word)
                    )
                } else {
                    format!("device-share already {}; nothing changed", word(mode))
                };
                text += &kv(&[
                    ("Device ID", id_text(t.entry.id)),
                    ("Status", "OK".into()),
                    ("Message", msg),
                ]);
                results.push(SetResultJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    status: "ok",
                    changed: Some(changed),
                    previous_share_mode: previous.map(mode_name),
                    share_mode: Some(mode_name(mode)),
                    error: None,
                });
                errors.push(None);
            }
            Err(e) => {
                text += &kv(&[
                    ("Device ID", id_text(t.entry.id)),
                    ("Status", "Fail".into()),
                    ("Message", e.message.clone()),
                ]);
                results.push(SetResultJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    status: "error",
                    changed: None,
                    previous_share_mode: previous.map(mode_name),
                    share_mode: None,
                    error: Some(e.json()),
                });
                errors.push(Some(e));
            }
        }
        text.push('\n');
    }
    let outcomes: Vec<Option<&SmiError>> = errors.iter().map(Option::as_ref).collect();
    let requested = SetRequestJson {
        device_share: mode == ShareMode::Shared,
        share_mode: mode_name(mode),
    };
    (doc(Body::Set { requested, results }, &outcomes), text)
}

/// `davinci-smi` on the process's arguments and environment; returns the exit status.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().collect();
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    let code = run(
        &args,
        &Discovery::from_env(),
        &ShimOpener,
        &mut out,
        &mut err,
    );
    let _ = out.flush();
    code
}

#[cfg(test)]
mod tests;
