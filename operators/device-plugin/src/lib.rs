//! `davinci-device-plugin`: the Kubernetes device plugin for davinci devices (the kubelet's
//! `v1beta1` device-plugin gRPC API).
//!
//! It finds the node's devices as `davinci-smi` does ([`davinci_ops::discover`]), checks
//! each one's health and sharing mode with a control open ([`davinci_shim::Control`]) every
//! `--health-interval`, serves the DevicePlugin service on a Unix socket in the kubelet's
//! device-plugin directory and registers the resource (`davinci.ai/npu` by default) with
//! the kubelet. A device in shared mode is advertised as `--replicas` IDs, one in exclusive
//! mode as one ([`ids`]); Allocate gives a container the device node or the
//! `davinci-mockd` socket and `DAVINCI_DEVICE` ([`alloc`]; with `--cdi`, CDI names in
//! `cdi_devices` and a `cdi.k8s.io/` annotation). Each ID carries its device's NUMA node
//! when known ([`topology`]). When the kubelet restarts (its socket is re-created, the
//! plugin's removed) the plugin serves and registers again. Kubelets from 1.23 on are
//! served, those before 1.26 thanks to the workspace's patched `h2` (`vendor/h2`: they
//! send the socket path as `:authority`).
//!
//! The API is generated from the vendored `proto/deviceplugin/v1beta1/api.proto` (see
//! `proto/README.md`) into [`api`], server and client both, so tests can stand in for the
//! kubelet with the same definitions ([`transport`] has the Unix-socket plumbing).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod alloc;
pub mod api;
mod cli;
mod daemon;
pub mod exit;
pub mod ids;
pub mod inventory;
pub mod status;
pub mod topology;
pub mod transport;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use clap::Parser;

pub use cli::{Cli, DEFAULT_KUBELET_DIR, DEFAULT_RESOURCE};
pub use daemon::{options, KUBELET_SOCKET, VERSION};
pub use exit::Failure;

/// Runs the program with the process's arguments; returns the exit status.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            let _ = e.print();
            return if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                exit::OK
            } else {
                exit::USAGE
            };
        }
    };
    if let Err(e) = cdi_kind(&cli) {
        eprintln!("davinci-device-plugin: --cdi: {e}; name the kind with --cdi-kind");
        return exit::USAGE;
    }
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .try_init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(64)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("davinci-device-plugin: cannot start the runtime: {e}");
            return exit::FAILURE;
        }
    };
    let code = rt.block_on(run(cli));
    // A health check stuck on a device that does not answer must not hold up the exit.
    rt.shutdown_timeout(Duration::from_millis(500));
    code
}

/// The CDI kind of `--cdi` (`--cdi-kind`, else the resource name), checked by CDI's rules
/// (those of `davinci-smi cdi generate --kind`), which a resource name need not follow.
fn cdi_kind(cli: &Cli) -> Result<Option<String>, String> {
    if !cli.cdi {
        return Ok(None);
    }
    let kind = cli.cdi_kind.as_deref().unwrap_or(&cli.resource);
    davinci_ops::cdi::parse_kind(kind).map(Some)
}

/// The devices named or found at the start, as (N, path); or why there are none.
fn initial_devices(cli: &Cli) -> Result<Vec<(u32, String)>, Failure> {
    let d = davinci_ops::discover::Discovery::from_env();
    let found = davinci_ops::discover::discover(&cli.devices, cli.socket_dir.as_deref(), &d);
    // A socket someone else could have planted is never advertised: pods would send their
    // work to it.
    for w in davinci_ops::discover::ignored_warnings(&found) {
        eprintln!("davinci-device-plugin: {w}");
    }
    if found.entries.is_empty() {
        return Err(Failure(format!(
            "no devices found: {}",
            davinci_ops::discover::describe_searched(&found)
        )));
    }
    let mut out: Vec<(u32, String)> = Vec::new();
    for e in found.entries {
        if e.path == "embedded" || !(e.path.starts_with("mock:") || e.path.starts_with('/')) {
            return Err(Failure(format!(
                "{:?} cannot be advertised: give /dev/davinciN or mock:/DIR/davinciN.sock",
                e.path
            )));
        }
        let Some(id) = e.id else {
            return Err(Failure(format!(
                "cannot name the device {}: its file name is not davinci<N> or \
                 davinci<N>.sock, which gives its ID",
                e.path
            )));
        };
        if let Some((_, other)) = out.iter().find(|(i, _)| *i == id) {
            return Err(Failure(format!(
                "two devices would both be davinci{id}: {other} and {}; name each device once",
                e.path
            )));
        }
        out.push((id, e.path));
    }
    Ok(out)
}

async fn run(cli: Cli) -> i32 {
    let found = match initial_devices(&cli) {
        Ok(f) => f,
        Err(Failure(msg)) => {
            eprintln!("davinci-device-plugin: {msg}");
            return exit::FAILURE;
        }
    };
    let mut inv = inventory::Inventory::new(cli.replicas);
    inv.set_id_scheme(cli.device_ids);
    inv.discovered(&found);
    if cli.list {
        return list(&cli, inv).await;
    }
    if let Err(msg) = check_kubelet_dir(&cli.kubelet_dir) {
        eprintln!("davinci-device-plugin: {msg}");
        return exit::FAILURE;
    }
    let cfg = daemon::Config {
        resource: cli.resource.clone(),
        kubelet_dir: cli.kubelet_dir.clone(),
        socket_name: cli.socket_name.clone(),
        health_interval: cli.health_interval,
        probe_timeout: cli.probe_timeout,
        kubelet_poll: cli.kubelet_poll,
        // Checked at the start (`main`).
        alloc: alloc::AllocOptions {
            cdi_kind: cdi_kind(&cli).ok().flatten(),
        },
        status_file: cli.status_file.clone(),
        source: if cli.devices.is_empty() {
            daemon::Source::Search(cli.socket_dir.clone())
        } else {
            daemon::Source::Fixed
        },
        events: policy(&cli),
    };
    tracing::info!(
        "davinci-device-plugin {}: resource {}, kubelet directory {}, {} device{} ({}), \
         {} replicas per shared device, health checks every {}ms, unhealthy on device events \
         {} for {}",
        env!("CARGO_PKG_VERSION"),
        cfg.resource,
        cfg.kubelet_dir.display(),
        inv.len(),
        if inv.len() == 1 { "" } else { "s" },
        inv.devices()
            .map(|d| format!("{} {}", d.name(), d.path))
            .collect::<Vec<_>>()
            .join(", "),
        inv.replicas(),
        cfg.health_interval.as_millis(),
        cfg.events.names(),
        davinci_units::format_duration(cfg.events.hold)
    );
    match daemon::run(cfg, inv).await {
        Ok(()) => {
            tracing::info!("stopped");
            exit::OK
        }
        Err(_) => exit::FAILURE,
    }
}

fn check_kubelet_dir(dir: &Path) -> Result<(), String> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "the kubelet directory {} is not a directory (--kubelet-dir)",
            dir.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "the kubelet's device-plugin directory {} does not exist: is the kubelet running \
             on this node, and is the directory mounted into this container? (--kubelet-dir \
             names another)",
            dir.display()
        )),
        Err(e) => Err(format!(
            "cannot use the kubelet directory {}: {e}",
            dir.display()
        )),
    }
}

/// Which device events make a device unhealthy.
fn policy(cli: &Cli) -> daemon::EventPolicy {
    daemon::EventPolicy {
        codes: cli.unhealthy_codes.0.clone(),
        hold: cli.unhealthy_hold,
    }
}

/// `--list`: one round of checks, then the devices and their IDs on stdout.
async fn list(cli: &Cli, mut inv: inventory::Inventory) -> i32 {
    let paths: Vec<(u32, String)> = inv.devices().map(|d| (d.index, d.path.clone())).collect();
    let mut devices = std::collections::HashMap::new();
    let policy = policy(cli);
    for (index, r) in daemon::check_all(paths, cli.probe_timeout, &policy, &mut devices).await {
        inv.checked(index, r);
    }
    let report = status::report(&cli.resource, &inv, None, None);
    let text = if cli.json {
        report.json()
    } else {
        report.text()
    };
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        return exit::FAILURE;
    }
    exit::OK
}

#[cfg(test)]
mod cdi_kind_tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("davinci-device-plugin").chain(args.iter().copied()))
            .unwrap()
    }

    /// `--cdi` names devices by a CDI kind: `--cdi-kind`, else the resource name, which must
    /// then follow CDI's rules too (a vendor starting with a letter), not only Kubernetes'.
    #[test]
    fn the_cdi_kind_follows_cdis_rules() {
        assert_eq!(cdi_kind(&cli(&[])), Ok(None));
        assert_eq!(
            cdi_kind(&cli(&["--cdi"])),
            Ok(Some("davinci.ai/npu".to_string()))
        );
        // A resource name Kubernetes takes but CDI does not: refused for --cdi ...
        let digits = ["--resource", "1npu.example.com/npu"];
        assert!(cdi_kind(&cli(&digits)).is_ok_and(|k| k.is_none()));
        let e = cdi_kind(&cli(&[&digits[..], &["--cdi"]].concat())).unwrap_err();
        assert!(e.contains("must start with a letter"), "{e}");
        // ... unless --cdi-kind names a valid kind.
        let named = [&digits[..], &["--cdi", "--cdi-kind", "example.com/npu"]].concat();
        assert_eq!(
            cdi_kind(&cli(&named)),
            Ok(Some("example.com/npu".to_string()))
        );
        assert!(Cli::try_parse_from(["p", "--cdi", "--cdi-kind", "npu"]).is_err());
    }
}
