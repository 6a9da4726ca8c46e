//! The `davinci-mockd` command line: options, logging, signals. The binary is one call to
//! [`main`]; tests reach the same code through a wrapper binary.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;

use davinci_driver_core::{InjectRule, Quota, MAX_TENANT_SLOTS};
use davinci_uapi::{ShareMode, TenantShareArgs};
use nix::sys::signal::Signal;
use tracing::{info, warn};

use davinci_mockd_proto::{default_socket_dir_choice, SocketDir};
use davinci_units::{parse_duration, parse_size};

use crate::present;

use crate::daemon::{Daemon, DaemonConfig};
use crate::peer::AdminPolicy;
use crate::signals::Signals;

/// `--help` text.
pub const USAGE: &str = "\
davinci-mockd: mock davinci devices served on Unix sockets (one per device)

Usage: davinci-mockd [OPTIONS]

Options:
  -n, --devices <N>              Devices to host: davinci0 .. davinci<N-1> [default: 1]
      --first-device <N>         Number the devices from N: davinci<N> .. (several daemons
                                 on one host, each its own numbers), 0 to 960 [default: 0]
  -m, --memory <SIZE>            Memory of each device; bytes, or with a K/M/G/T suffix
                                 (powers of 1024) [default: 256M]
      --tenant-slots <N>         Tenants each device keeps a share for, 1 to 64 [default: 4]; a
                                 tenant is a client's container, else its user. While a
                                 device is shared each tenant gets its share of every table
                                 and of memory (the device's over N unless the two options
                                 below say otherwise), and always its share of the device's
                                 connections (288 over N) and blocking waits (1024 over N)
      --tenant-memory-limit <SIZE>
                                 Most memory one tenant may hold while a device is shared
                                 [default: the device's memory over --tenant-slots]
                                 (--client-memory-limit: a deprecated alias)
      --tenant-quota <KIND=N,...>
                                 Most of each table one tenant may hold while a device is
                                 shared: contexts, streams, events, allocations, exports
                                 (e.g. streams=128,events=512) [default: each table over
                                 --tenant-slots; with 4: 64 contexts, 64 streams, 256 events,
                                 256 allocations, 64 exports] (--client-quota: a deprecated
                                 alias)
      --tenant-share <TENANT=N>  TENANT (user:UID or container:ID) counts for N of the tenant
                                 slots, 0 to --tenant-slots [default: 1]: N shares of every
                                 table, of memory and of the client opens, all kept for it
                                 while it holds its slots; 0: it never holds a slot and takes
                                 only what nobody's slot keeps. Repeatable; an admin changes it
                                 later with TENANT_SHARE (davinci-smi set -t tenant-share)
  -d, --socket-dir <DIR>         Where davinci<N>.sock are created [default: $DAVINCI_SOCKET_DIR,
                                 else /run/davinci for root, else $XDG_RUNTIME_DIR/davinci,
                                 else /tmp/davinci-$UID] (see Socket directory below)
      --uuid-seed <TEXT>         What each device's UUID (GET_IDENTITY, the device plugin's
                                 device IDs) is derived from, with its index [default: the
                                 host's machine id, /etc/machine-id]: the same UUIDs across
                                 restarts and reboots; give another for a second daemon on
                                 one host
      --model <NAME>             The model GET_IDENTITY presents (npu-smi's Chip Type and Name,
                                 nvidia-smi's name), e.g. Ascend910B3 [default: davinci_mock]
      --chip-name <NAME>         The chip name GET_IDENTITY presents (npu-smi's Chip Name), e.g.
                                 910B3 [default: mock0]
      --bus-id <DDDD:BB:DD.F,...>
                                 The PCI address each device presents, in order (devices
                                 beyond the list: the last one's bus plus one each) [default:
                                 on no bus]. docs/operators.md says which tools need which
      --sensors <KEY=VALUE,...>  The sensor model GET_SENSORS reports (docs/abi.md, Sensors):
                                 ambient (°C) [30], thermal-resistance (°C/W) [0.15], tau
                                 (thermal time constant) [20s], idle-power [60], full-power
                                 [300], power-limit [310] (W), idle-voltage [0.8],
                                 full-voltage [0.9] (V), slowdown [95], shutdown [105] (°C),
                                 pcie-gen [4], pcie-width [16] (the modelled link; 0: none)
      --socket-mode <OCTAL>      Permissions of each socket [default: 0660]
      --socket-group <GROUP>     Group (name or gid) of each socket, so its members may connect
                                 [default: the daemon's group]
      --share-mode <MODE>        Sharing mode of every device at start-up: exclusive or shared
                                 [default: exclusive]; a change made later by an admin lasts
                                 only until the daemon stops
      --admin-group <GROUP>      Members of this group (name or gid) may change device sharing;
                                 repeatable
      --admin-uid <UID>          This uid may change device sharing; repeatable
      --no-root-admin            uid 0 is not an admin by itself (only --admin-uid/--admin-group
                                 are; for tests and for hosts that delegate to a group)
      --no-owner-admin           The user running the daemon is not an admin by itself (by
                                 default a non-root user who starts davinci-mockd may change
                                 the sharing of its devices)
      --exit-with-parent         Shut down (as on SIGTERM) when the process that started the daemon
                                 exits (test harnesses)
      --inject <FAULT[@SEL]>     Arm the streams of every device with a fault, to test a runtime's
                                 error handling; counted per stream in tasks taken (the first is
                                 1), fires once per stream:
                                   error-at=N[:ERRNO]  task N completes with -ERRNO (a name like
                                                       EIO or a number; default EIO) and the
                                                       stream stops in the error state
                                   hang-at=N           task N is taken but never completes; the
                                                       stream takes nothing more (waits time out)
                                   stop-at=N           the stream stops consuming before task N
                                                       (its command ring fills up)
                                 SEL (comma-separated) picks the streams: pid=N, uid=N,
                                 comm=NAME (of the client's process), streams=N (only the first
                                 N that match: a recovering runtime's next stream runs clean).
                                 Without it: every stream, also those created later
                                 (e.g. hang-at=5@pid=4242,streams=1)
      --reset-after <DURATION>   Reset every device once, DURATION after start-up (like 500ms, 2s,
                                 1m): every running stream stops with ECANCELED; clients,
                                 memory and contexts stay, new streams run
  -h, --help                     Print help
  -V, --version                  Print version

The daemon runs in the foreground and logs to stderr (RUST_LOG, default info). Once every
socket listens it prints one line to stdout:
  davinci-mockd: ready: <N> device(s) in <DIR>
SIGTERM or SIGINT: stop accepting, remove the sockets, close every client, exit 0.
SIGUSR1: reset every device now (as --reset-after does). docs/abi.md 5.6 says what clients
see of each fault and of a reset. The log names each signal's sender (sender_pid,
sender_uid, si_code; sender=--reset-after for the daemon's own timer).

Admins (who may change device sharing): uid 0 unless --no-root-admin, the daemon's own
user unless --no-owner-admin, every --admin-uid, members of every --admin-group. The
start-up log lists them (admins=...).

Socket directory: created (mode 0755) if missing. Whoever can write to it could replace the
sockets, so the daemon refuses to start unless
  /tmp/davinci-$UID, $XDG_RUNTIME_DIR/davinci: owned by the daemon's user, not a symbolic
    link, no write permission for group or others;
  --socket-dir, $DAVINCI_SOCKET_DIR, /run/davinci: owned by the daemon's user or root, no
    write permission for others unless sticky (a group-writable directory is allowed).
Whoever can move it, or a directory above it, could put their own in its place, so every
directory above it up to / must be owned by root or the daemon's user, not writable by
others unless sticky, nor by its group unless sticky or owned by root (not even then for
the per-user fallbacks); in a sticky directory others may write to, the entry on the way
must be owned by root or the daemon's user (as /tmp/davinci-$UID in /tmp is).

Exit status: 0 clean shutdown, 1 cannot start (socket in use, socket directory not writable
or refused), 2 usage.
";

/// A deprecated option's one-line note on stderr, when `name` is `old`.
fn deprecated(name: &str, old: &str, new: &str) {
    if name == old {
        eprintln!(
            "davinci-mockd: note: {old} is deprecated; it is {new} (a tenant's, not a client's)"
        );
    }
}

fn parse_group(s: &str) -> Result<u32, String> {
    if let Ok(g) = s.parse::<u32>() {
        return Ok(g);
    }
    match nix::unistd::Group::from_name(s) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        _ => Err(format!("unknown group '{s}'")),
    }
}

/// Parses an `--inject` rule: `error-at=N[:ERRNO]`, `hang-at=N` or `stop-at=N`, then
/// optionally `@` and selectors `pid=N`, `uid=N`, `comm=NAME`, `streams=N` (driver-core's
/// [`InjectRule::parse`], the same text the kernel module's `inject` takes).
pub fn parse_inject(s: &str) -> Result<InjectRule, String> {
    InjectRule::parse(s).map_err(|why| {
        format!(
            "--inject '{s}': {why}; expected error-at=N[:ERRNO], hang-at=N or stop-at=N \
             (N >= 1), then optionally @pid=N,uid=N,comm=NAME,streams=N"
        )
    })
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Run the daemon (and whether to exit with the parent, and when to reset the devices).
    Run(Box<DaemonConfig>, bool, Option<std::time::Duration>),
    /// Print this text to stdout and exit 0.
    Print(String),
}

/// `--tenant-share TENANT=N`: the tenant as the tools spell it (`user:UID`,
/// `container:ID`) and the slots it counts for.
fn parse_tenant_share(v: &str) -> Result<(String, u32), String> {
    let (tenant, n) = v
        .rsplit_once('=')
        .ok_or_else(|| format!("--tenant-share '{v}': expected TENANT=N (e.g. user:1000=2)"))?;
    TenantShareArgs::named(tenant).map_err(|e| format!("--tenant-share '{v}': {e}"))?;
    let n = n
        .parse()
        .ok()
        .filter(|n| *n <= MAX_TENANT_SLOTS)
        .ok_or_else(|| format!("--tenant-share '{v}': N must be a count from 0 to 64"))?;
    Ok((tenant.to_string(), n))
}

fn parse_share_mode(s: &str) -> Result<ShareMode, String> {
    s.parse().map_err(|e| format!("--share-mode '{s}': {e}"))
}

/// Parses the arguments (without the program name) for this process: its uid and, when no
/// `--socket-dir` is given, its default socket directory.
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Command, String> {
    parse_args_for(
        args,
        nix::unistd::getuid().as_raw(),
        default_socket_dir_choice,
    )
}

/// [`parse_args`] for a daemon that will run as `daemon_uid` (its own user is an admin
/// unless `--no-owner-admin`) with `default_dir` used when no `--socket-dir` is given.
pub fn parse_args_for<I: IntoIterator<Item = String>>(
    args: I,
    daemon_uid: u32,
    default_dir: impl FnOnce() -> SocketDir,
) -> Result<Command, String> {
    let mut cfg = DaemonConfig {
        socket_dir: PathBuf::new().into(),
        admin: AdminPolicy::owned_by(daemon_uid),
        ..DaemonConfig::default()
    };
    let mut dir = None;
    let mut quotas = Vec::new();
    let mut with_parent = false;
    let mut reset_after = None;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value ({what})"))
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Command::Print(USAGE.to_string())),
            "-V" | "--version" => {
                return Ok(Command::Print(format!(
                    "davinci-mockd {}\n",
                    env!("CARGO_PKG_VERSION")
                )))
            }
            "-n" | "--devices" => {
                let v = value("a count")?;
                cfg.devices = v
                    .parse()
                    .ok()
                    .filter(|&n| (1..=64).contains(&n))
                    .ok_or_else(|| format!("--devices '{v}': expected 1..=64"))?;
            }
            "--first-device" => {
                let v = value("a number")?;
                cfg.first_device = v
                    .parse()
                    .ok()
                    .filter(|&n| n <= 960)
                    .ok_or_else(|| format!("--first-device '{v}': expected 0..=960"))?;
            }
            "-m" | "--memory" => {
                cfg.memory = parse_size(&value("a size")?)?;
                if cfg.memory < 4096 {
                    return Err("--memory must be at least 4K".into());
                }
            }
            "--tenant-slots" => {
                let v = value("a count")?;
                cfg.tenant_slots = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_TENANT_SLOTS).contains(n))
                    .ok_or_else(|| format!("--tenant-slots '{v}': expected 1..=64"))?;
            }
            "--tenant-memory-limit" | "--client-memory-limit" => {
                deprecated(&name, "--client-memory-limit", "--tenant-memory-limit");
                cfg.tenant_memory_limit = parse_size(&value("a size")?)?;
            }
            "--tenant-quota" | "--client-quota" => {
                deprecated(&name, "--client-quota", "--tenant-quota");
                quotas.push(value("KIND=N,...")?);
            }
            "--uuid-seed" => {
                let v = value("a seed")?;
                if v.is_empty() {
                    return Err("--uuid-seed: expected a non-empty text".into());
                }
                cfg.uuid_seed = Some(v);
            }
            "--model" => {
                cfg.presentation.model = Some(present::parse_name(&name, &value("a name")?, 31)?)
            }
            "--chip-name" => {
                cfg.presentation.chip_name =
                    Some(present::parse_name(&name, &value("a name")?, 11)?)
            }
            "--bus-id" => {
                cfg.presentation.bus_ids = present::parse_bus_ids(&value("DDDD:BB:DD.F")?)?
            }
            "--sensors" => {
                cfg.sensors = present::parse_sensors(&value("KEY=VALUE,...")?, cfg.sensors)?
            }
            "-d" | "--socket-dir" => dir = Some(PathBuf::from(value("a directory")?)),
            "--socket-mode" => {
                let v = value("octal permissions")?;
                cfg.socket_mode = u32::from_str_radix(v.trim_start_matches("0o"), 8)
                    .ok()
                    .filter(|m| *m <= 0o777)
                    .ok_or_else(|| format!("--socket-mode '{v}': expected octal like 0660"))?;
            }
            "--socket-group" => cfg.socket_group = Some(parse_group(&value("a group")?)?),
            "--admin-group" => cfg.admin.gids.push(parse_group(&value("a group")?)?),
            "--admin-uid" => {
                let v = value("a uid")?;
                cfg.admin.uids.push(
                    v.parse()
                        .map_err(|_| format!("--admin-uid '{v}': expected a number"))?,
                );
            }
            "--no-root-admin" => cfg.admin.root = false,
            "--no-owner-admin" => cfg.admin.owner = None,
            "--share-mode" => cfg.share_mode = parse_share_mode(&value("exclusive or shared")?)?,
            "--tenant-share" => {
                let v = value("TENANT=N")?;
                cfg.tenant_shares.push(parse_tenant_share(&v)?);
            }
            "--exit-with-parent" => with_parent = true,
            "--inject" => {
                if cfg.inject.is_some() {
                    return Err("--inject given twice: a stream is armed with one fault".into());
                }
                cfg.inject = Some(parse_inject(&value("a fault")?)?);
            }
            "--reset-after" => reset_after = Some(parse_duration(&value("a duration")?)?),
            other => return Err(format!("unexpected argument '{other}'")),
        }
    }
    // The kinds given keep their number; the others are the tables over the tenant slots,
    // whichever option came first.
    cfg.quota = Quota::for_slots(cfg.tenant_slots);
    for q in &quotas {
        cfg.quota = parse_quota(q, cfg.quota)?;
    }
    if let Some((t, n)) = cfg
        .tenant_shares
        .iter()
        .find(|(_, n)| *n > cfg.tenant_slots)
    {
        return Err(format!(
            "--tenant-share {t}={n}: a tenant counts for at most --tenant-slots ({}) slots",
            cfg.tenant_slots
        ));
    }
    cfg.socket_dir = match dir {
        Some(d) => SocketDir::from(d),
        None => default_dir(),
    };
    Ok(Command::Run(Box::new(cfg), with_parent, reset_after))
}

/// Runs `davinci-mockd` with the process's arguments; returns the exit status.
pub fn main() -> i32 {
    // Not `env::args()`, which panics on an argument that is not UTF-8.
    let args: Result<Vec<String>, _> = std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect();
    let Ok(args) = args else {
        let bad = args.err().unwrap_or_default();
        eprintln!("davinci-mockd: argument {bad:?} is not valid UTF-8\n\nUsage: davinci-mockd [OPTIONS]  (see --help)");
        return 2;
    };
    let cmd = match parse_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("davinci-mockd: {e}\n\nUsage: davinci-mockd [OPTIONS]  (see --help)");
            return 2;
        }
    };
    let (cfg, with_parent, reset_after) = match cmd {
        Command::Print(s) => {
            print!("{s}");
            return 0;
        }
        Command::Run(cfg, with_parent, reset_after) => (*cfg, with_parent, reset_after),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();

    // Block the shutdown and reset signals before any thread starts (threads inherit the
    // mask); this thread then takes them synchronously from a signalfd, with their sender.
    let signals = match Signals::block() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("davinci-mockd: cannot block signals: {e}");
            return 1;
        }
    };
    if with_parent {
        // SIGTERM (taken from the signalfd below) when the parent exits; a parent already gone
        // (reparented to init) means there is nobody to serve.
        if nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).is_err()
            || nix::unistd::getppid().as_raw() == 1
        {
            eprintln!("davinci-mockd: --exit-with-parent: the parent is already gone");
            return 1;
        }
    }
    raise_fd_limit(cfg.most_fds());
    let daemon = match Daemon::start(&cfg) {
        Ok(d) => d,
        Err(e) => {
            // Once: the log and the terminal are the same stderr.
            eprintln!("davinci-mockd: {e}");
            return 1;
        }
    };
    let dir = cfg.socket_dir.path.display();
    info!(
        devices = cfg.devices,
        dir = %dir,
        share_mode = %cfg.share_mode,
        tenant_slots = cfg.tenant_slots,
        admins = %cfg.admin.describe(),
        "davinci-mockd ready"
    );
    if cfg.admin.is_nobody() {
        warn!(
            "nobody may change device sharing: give --admin-uid or --admin-group, or drop \
             --no-root-admin/--no-owner-admin"
        );
    }
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "davinci-mockd: ready: {} device(s) in {dir}",
            cfg.devices,
        );
        let _ = out.flush();
    }
    if let Some(inject) = cfg.inject {
        warn!(?inject, "fault injection armed on every stream (--inject)");
    }
    if let Some(after) = reset_after {
        // A reset is an ordinary signal to this loop, so it cannot race with shutdown.
        let pid = nix::unistd::getpid();
        let spawned = std::thread::Builder::new()
            .name("reset-after".into())
            .spawn(move || {
                std::thread::sleep(after);
                let _ = nix::sys::signal::kill(pid, Signal::SIGUSR1);
            });
        if let Err(e) = spawned {
            warn!(error = %e, "--reset-after: cannot start its timer; no reset will happen");
        }
    }
    loop {
        match signals.next() {
            Ok(s) if s.signal == Some(Signal::SIGUSR1) => {
                for (n, dev) in daemon.devices().iter().enumerate() {
                    let stopped = dev.reset();
                    warn!(
                        device = n, streams_stopped = stopped, signal = %s.name(),
                        sender = %s.sender(), sender_pid = s.pid, sender_uid = s.uid,
                        si_code = %s.code_name(), "device reset"
                    );
                }
            }
            Ok(s) => {
                info!(
                    signal = %s.name(), sender = %s.sender(), sender_pid = s.pid,
                    sender_uid = s.uid, si_code = %s.code_name(), "shutting down"
                );
                break;
            }
            Err(e) => {
                warn!(error = %e, "cannot read the signalfd; shutting down");
                break;
            }
        }
    }
    daemon.stop();
    info!("sockets removed; bye");
    0
}

/// Raises the soft limit on open files to the hard one when it is below `need` (what the
/// daemon may hold: [`DaemonConfig::most_fds`]; systemd's default soft limit is 1024), and
/// says so; warns when even the hard limit is below it (then a busy device's allocations can
/// fail with `ENOMEM`, saying why, until the operator raises `LimitNOFILE`).
fn raise_fd_limit(need: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= need {
        return;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => info!(from = soft, to = hard, need, "raised the open-file limit"),
        Err(e) => warn!(soft, hard, need, error = %e, "cannot raise the open-file limit"),
    }
    if hard < need {
        warn!(
            hard,
            need,
            "the open-file limit is below what the devices may hold: busy devices may refuse \
             allocations and streams (raise LimitNOFILE or ulimit -n)"
        );
    }
}

/// `--tenant-quota contexts=N,streams=N,events=N,allocations=N,exports=N` (any of them) over
/// `base`; each N from 1 to the table's size.
pub fn parse_quota(v: &str, base: Quota) -> Result<Quota, String> {
    let mut q = base;
    for part in v.split(',').filter(|p| !p.is_empty()) {
        let (kind, n) = part.split_once('=').ok_or_else(|| {
            format!("--tenant-quota '{part}': expected KIND=N (KIND: contexts, streams, events, allocations, exports)")
        })?;
        let (field, max) = match kind {
            "contexts" => (&mut q.contexts, Quota::NONE.contexts),
            "streams" => (&mut q.streams, Quota::NONE.streams),
            "events" => (&mut q.events, Quota::NONE.events),
            "allocations" => (&mut q.allocations, Quota::NONE.allocations),
            "exports" => (&mut q.exports, Quota::NONE.exports),
            other => {
                return Err(format!(
                    "--tenant-quota: unknown kind '{other}' (expected contexts, streams, events, allocations or exports)"
                ))
            }
        };
        *field = n
            .parse()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| {
                format!("--tenant-quota {kind}={n}: expected 1..={max} (the table's size)")
            })?;
    }
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use davinci_driver_core::Inject;
    use davinci_uapi::Errno;

    fn run_as(uid: u32, args: &[&str]) -> Result<DaemonConfig, String> {
        let default_dir = || SocketDir {
            path: PathBuf::from("/tmp/davinci-1000"),
            origin: davinci_mockd_proto::SocketDirOrigin::Private,
        };
        match parse_args_for(args.iter().map(|s| s.to_string()), uid, default_dir)? {
            Command::Run(c, _, _) => Ok(*c),
            Command::Print(_) => Err("printed".into()),
        }
    }

    fn run(args: &[&str]) -> Result<DaemonConfig, String> {
        run_as(1000, args)
    }

    #[test]
    fn options() {
        let c = run(&[
            "--devices",
            "3",
            "-m",
            "64M",
            "--socket-dir=/tmp/x",
            "--socket-mode",
            "0600",
            "--socket-group=12",
            "--admin-group",
            "4242",
            "--admin-uid=1001",
            "--no-root-admin",
            "--no-owner-admin",
            "--share-mode",
            "shared",
        ])
        .unwrap();
        assert_eq!(c.devices, 3);
        assert_eq!(c.memory, 64 << 20);
        assert_eq!(c.socket_dir, SocketDir::from(PathBuf::from("/tmp/x")));
        assert_eq!(c.socket_mode, 0o600);
        assert_eq!(c.socket_group, Some(12));
        assert_eq!(c.share_mode, ShareMode::Shared);
        assert_eq!(
            c.admin,
            AdminPolicy {
                root: false,
                owner: None,
                uids: vec![1001],
                gids: vec![4242]
            }
        );
        assert_eq!(parse_group("root"), Ok(0));
        for bad in [
            &["--devices", "0"][..],
            &["--devices"],
            &["--memory", "1"],
            &["--socket-mode", "999"],
            &["--admin-uid", "x"],
            &["--admin-group", "no-such-group-davinci"],
            &["--share-mode", "sometimes"],
            &["--share-mode"],
            &["--frobnicate"],
        ] {
            assert!(run(bad).is_err(), "{bad:?}");
        }
        assert!(run(&["--share-mode", "sometimes"])
            .unwrap_err()
            .contains("expected exclusive or shared"));
        assert!(matches!(
            parse_args(["--help".to_string()]),
            Ok(Command::Print(s)) if s.contains("--socket-dir") && s.contains("--no-owner-admin")
                && s.contains("--share-mode")
        ));
    }

    #[test]
    fn defaults_the_owner_is_an_admin_and_devices_start_exclusive() {
        let c = run(&[]).unwrap();
        assert_eq!(c.admin, AdminPolicy::owned_by(1000));
        assert_eq!(c.admin.owner, Some(1000));
        assert_eq!(c.share_mode, ShareMode::Exclusive);
        assert_eq!(
            c.socket_dir.origin,
            davinci_mockd_proto::SocketDirOrigin::Private
        );
        assert!(!c.admin.is_nobody());
        // Run by root: uid 0 is admin by the root rule only.
        let r = run_as(0, &["--no-root-admin"]).unwrap();
        assert!(r.admin.is_nobody());
    }

    #[test]
    fn inject_and_reset_options_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_inject("error-at=3").unwrap().fault,
            Inject::ErrorAt {
                nth: 3,
                errno: Errno::EIO
            }
        );
        assert_eq!(
            parse_inject("error-at=1:efault").unwrap().fault,
            Inject::ErrorAt {
                nth: 1,
                errno: Errno::EFAULT
            }
        );
        assert_eq!(
            parse_inject("error-at=7:12").unwrap().fault,
            Inject::ErrorAt {
                nth: 7,
                errno: Errno::ENOMEM
            }
        );
        assert_eq!(
            parse_inject("hang-at=5").unwrap().fault,
            Inject::HangAt { nth: 5 }
        );
        assert_eq!(
            parse_inject("stop-at=2").unwrap().fault,
            Inject::StopAt { nth: 2 }
        );
        let r = parse_inject("hang-at=5@pid=42,streams=1").unwrap();
        assert_eq!((r.target.pid, r.target.streams), (Some(42), Some(1)));
        for (bad, why) in [
            ("hang", "no '='"),
            ("hang-at=0", "N must be"),
            ("stop-at=x", "N must be"),
            ("error-at=2:EWHAT", "unknown errno 'EWHAT'"),
            ("hang-at=2:EIO", "only error-at takes an errno"),
            ("explode-at=2", "unknown fault 'explode-at'"),
            ("hang-at=2@pod=3", "bad selector 'pod=3'"),
            ("hang-at=2@streams=0", "bad selector 'streams=0'"),
        ] {
            let e = parse_inject(bad).unwrap_err();
            assert!(
                e.contains(why) && e.contains("expected error-at=N"),
                "{bad}: {e}"
            );
        }
        let cfg = run_as(1000, &["--inject", "stop-at=4"]).unwrap();
        assert_eq!(cfg.inject, Some(Inject::StopAt { nth: 4 }.into()));
        let e = run_as(1000, &["--inject=stop-at=4", "--inject", "hang-at=1"]).unwrap_err();
        assert!(e.contains("twice"), "{e}");

        use std::time::Duration;
        match parse_args_for(
            ["--reset-after".to_string(), "250ms".to_string()],
            1000,
            || SocketDir {
                path: PathBuf::from("/tmp/x"),
                origin: davinci_mockd_proto::SocketDirOrigin::Private,
            },
        ) {
            Ok(Command::Run(_, _, after)) => assert_eq!(after, Some(Duration::from_millis(250))),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tenant_share_names_a_tenant_and_its_slots() {
        let c = run(&[
            "--tenant-share",
            "user:1000=2",
            "--tenant-share=container:abc123=0",
        ])
        .unwrap();
        assert_eq!(
            c.tenant_shares,
            vec![
                ("user:1000".to_string(), 2),
                ("container:abc123".to_string(), 0)
            ]
        );
        for (bad, why) in [
            ("user:1000", "expected TENANT=N"),
            ("uid:5=2", "a tenant is user:UID or container:ID"),
            ("user:x=2", "numeric uid"),
            ("user:5=65", "from 0 to 64"),
            ("user:5=-1", "from 0 to 64"),
        ] {
            let e = run(&["--tenant-share", bad]).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let e = run(&["--tenant-slots", "2", "--tenant-share", "user:5=3"]).unwrap_err();
        assert!(e.contains("at most --tenant-slots (2)"), "{e}");
    }

    #[test]
    fn tenant_quota_sets_the_kinds_it_names_and_refuses_nonsense() {
        let c = run(&["--tenant-quota", "streams=128,events=512,exports=40"]).unwrap();
        assert_eq!(
            c.quota,
            Quota {
                streams: 128,
                events: 512,
                exports: 40,
                ..Quota::FAIR
            }
        );
        assert_eq!(run(&[]).unwrap().quota, Quota::FAIR);
        // The deprecated name is the same option.
        let old = run(&["--client-quota", "streams=128,events=512,exports=40"]).unwrap();
        assert_eq!(old.quota, c.quota);
        for (bad, says) in [
            ("streams", "expected KIND=N"),
            ("threads=4", "unknown kind 'threads'"),
            ("streams=0", "expected 1..=256"),
            ("events=1025", "expected 1..=1024"),
            ("contexts=x", "expected 1..=256"),
            ("exports=257", "expected 1..=256"),
        ] {
            let e = run(&["--tenant-quota", bad]).unwrap_err();
            assert!(
                e.contains(says) && e.contains("--tenant-quota"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn tenant_slots_set_the_shares_the_quota_does_not_name() {
        assert_eq!(run(&[]).unwrap().tenant_slots, 4);
        let c = run(&["--tenant-slots", "8"]).unwrap();
        assert_eq!((c.tenant_slots, c.quota), (8, Quota::for_slots(8)));
        // A kind given keeps its number, before or after the slots.
        for args in [
            &["--tenant-quota", "streams=100", "--tenant-slots=16"][..],
            &["--tenant-slots", "16", "--tenant-quota", "streams=100"],
        ] {
            let c = run(args).unwrap();
            assert_eq!(
                c.quota,
                Quota {
                    streams: 100,
                    ..Quota::for_slots(16)
                },
                "{args:?}"
            );
        }
        for bad in ["0", "65", "x", "-1"] {
            let e = run(&["--tenant-slots", bad]).unwrap_err();
            assert!(e.contains("expected 1..=64"), "{bad}: {e}");
        }
        assert!(run(&["--tenant-slots"]).is_err());
        // The memory limit, by its name and its deprecated one.
        assert_eq!(run(&[]).unwrap().tenant_memory_limit, 0);
        for name in ["--tenant-memory-limit", "--client-memory-limit"] {
            assert_eq!(run(&[name, "64M"]).unwrap().tenant_memory_limit, 64 << 20);
        }
        assert!(matches!(
            parse_args(["--help".to_string()]),
            Ok(Command::Print(s)) if s.contains("--tenant-slots") && s.contains("--tenant-quota")
                && s.contains("--tenant-memory-limit")
        ));
    }

    #[test]
    fn uuid_seed_is_kept_and_an_empty_one_refused() {
        assert_eq!(run(&[]).unwrap().uuid_seed, None);
        let c = run(&["--uuid-seed", "rack4-node2"]).unwrap();
        assert_eq!(c.uuid_seed.as_deref(), Some("rack4-node2"));
        let e = run(&["--uuid-seed", ""]).unwrap_err();
        assert!(e.contains("--uuid-seed"), "{e}");
    }

    #[test]
    fn first_device_numbers_the_devices_from_n() {
        assert_eq!(run(&["--first-device", "64"]).unwrap().first_device, 64);
        assert_eq!(run(&[]).unwrap().first_device, 0);
        for bad in ["961", "-1", "x"] {
            let e = run(&["--first-device", bad]).unwrap_err();
            assert!(e.contains("expected 0..=960"), "{bad}: {e}");
        }
    }

    #[test]
    fn presentation_and_sensor_options() {
        let c = run(&[
            "--model=Ascend910B3",
            "--chip-name",
            "910B3",
            "--bus-id",
            "0000:c1:00.0,0000:01:00.0",
            "--sensors",
            "ambient=40,tau=2s",
        ])
        .unwrap();
        assert_eq!(c.presentation.model.as_deref(), Some("Ascend910B3"));
        assert_eq!(c.presentation.chip_name.as_deref(), Some("910B3"));
        assert_eq!(c.presentation.bus_ids.len(), 2);
        assert_eq!((c.sensors.ambient_mc, c.sensors.tau_ms), (40_000, 2_000));
        assert_eq!(
            run(&[]).unwrap().presentation,
            present::Presentation::default()
        );
        for (bad, says) in [
            (["--model", "Ascend 910"], "--model"),
            (["--bus-id", "c1:00"], "--bus-id"),
            (["--sensors", "fan=3"], "unknown key"),
        ] {
            let e = run(&bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
