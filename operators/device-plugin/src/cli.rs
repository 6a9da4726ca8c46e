//! The command line.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use davinci_units::parse_duration_between;

use crate::ids::{IdScheme, MAX_REPLICAS};

/// The kubelet's device-plugin directory.
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet/device-plugins";

/// The resource advertised by default: the CDI kind `davinci-smi cdi generate` writes by
/// default, so that `--cdi` without `--cdi-kind` names devices of that spec.
pub const DEFAULT_RESOURCE: &str = davinci_ops::cdi::DEFAULT_KIND;

const AFTER_HELP: &str = "\
Devices: every --device PATH; else every davinci<N>.sock in --socket-dir; else DAVINCI_DEVICE;
else the first of /dev/davinci<N>, davinci-mockd's default socket directory and /run/davinci
that has devices (as davinci-smi finds them). Without --device the search is repeated at every
health check, so devices that appear later are added. A device that stops answering is
advertised as Unhealthy, and Healthy again when it answers.

Health by device events (ABI 1.5): each health check reads the device's event log
(`davinci-smi events` shows it); an event of a code --unhealthy-codes names (hung_task by
default) makes the device Unhealthy, the event in words as the reason, until the device is
reset or restarted (a device_reset or device_started event, or a new log) or --unhealthy-hold
has passed since the event. The first check takes every event the log holds, so a restarted
plugin still sees a hung task within its hold. Codes: stream_stopped (1), hung_task (2),
device_reset (3), device_started (4), quota_storm (5), import_revoked (6), injected_fault
(7), or a number; `none` turns it off. Run the plugin as an admin of the devices: anyone
else sees only the device's own events and its user's.

IDs: a device in exclusive mode is advertised once, a device in shared mode as --replicas
IDs, so that many containers can be given it. They are named after the device's UUID
(GET_IDENTITY, ABI 1.4): UUID::0 when exclusive, UUID::0 .. UUID::<R-1> when shared, so an ID
a pod holds stays valid when the sharing mode changes or the daemon restarts. A device
without a UUID (an older driver), or --device-ids index, gets the index's names: davinci0
(exclusive), davinci0::0 .. davinci0::<R-1> (shared).

Allocate: a kernel device is given to the container as its node (/dev/davinciN), a
davinci-mockd device as a bind mount of its socket (same path inside); DAVINCI_DEVICE names
the first device allocated, DAVINCI_VISIBLE_DEVICES lists them all (comma-separated).

Kubelet restarts: the kubelet socket is watched (every --kubelet-poll); when it is re-created,
or this plugin's socket is removed, the socket is created again and the plugin registers again.

Logs go to stderr (RUST_LOG sets the level; default info). SIGTERM or SIGINT: stop serving,
remove the socket, exit 0.

Exit status: 0 clean shutdown (or --list done), 1 cannot run (no kubelet directory, no
devices, the kubelet refused the registration), 2 usage.";

/// davinci-device-plugin: the Kubernetes device plugin for davinci devices
#[derive(Debug, Clone, Parser)]
#[command(name = "davinci-device-plugin", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// The extended resource advertised (DOMAIN/NAME)
    #[arg(long, value_name = "NAME", default_value = DEFAULT_RESOURCE, value_parser = parse_resource)]
    pub resource: String,

    /// The kubelet's device-plugin directory (kubelet.sock is there, and this plugin's socket
    /// is created there)
    #[arg(long, value_name = "DIR", default_value = DEFAULT_KUBELET_DIR)]
    pub kubelet_dir: PathBuf,

    /// The name of this plugin's socket in the kubelet directory
    #[arg(long, value_name = "NAME", default_value = "davinci.sock", value_parser = parse_socket_name)]
    pub socket_name: String,

    /// A device to advertise (/dev/davinciN or mock:/DIR/davinciN.sock); repeatable
    #[arg(long = "device", value_name = "PATH")]
    pub devices: Vec<String>,

    /// Advertise every `davinci<N>.sock` of this davinci-mockd socket directory
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with = "devices",
        help = "Advertise every davinci<N>.sock of this davinci-mockd socket directory"
    )]
    pub socket_dir: Option<PathBuf>,

    /// How many IDs a device in shared mode is advertised as
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=MAX_REPLICAS as i64))]
    pub replicas: u32,

    /// What the device IDs are named after: uuid (UUID::k, stable across sharing mode
    /// changes and restarts) or index (davinciN, davinciN::k)
    #[arg(long = "device-ids", value_name = "SCHEME", value_enum, default_value_t = IdScheme::Uuid)]
    pub device_ids: IdScheme,

    /// How often each device's health and sharing mode are read (like 500ms, 5s, 1m)
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_interval)]
    pub health_interval: Duration,

    /// A device that does not answer a health check within this time is unhealthy
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_timeout)]
    pub probe_timeout: Duration,

    /// Device event codes that make a device Unhealthy: names or numbers, comma-separated,
    /// or `none`
    #[arg(long, value_name = "CODES", default_value = "hung_task", value_parser = parse_codes)]
    pub unhealthy_codes: EventCodes,

    /// How long a device stays Unhealthy after such an event, unless reset first
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_hold)]
    pub unhealthy_hold: Duration,

    /// How often the kubelet socket is checked for a kubelet restart
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_timeout)]
    pub kubelet_poll: Duration,

    /// Name each allocated device as a CDI device (KIND=davinciN) instead of giving its node or
    /// socket; the node must have a CDI spec for the kind
    #[arg(long)]
    pub cdi: bool,

    /// The CDI kind of --cdi [default: the resource name]
    #[arg(long, value_name = "KIND", requires = "cdi",
          value_parser = davinci_ops::cdi::parse_kind)]
    pub cdi_kind: Option<String>,

    /// Keep a JSON status (devices, health, IDs, allocations, registrations) in this file,
    /// rewritten on every change
    #[arg(long, value_name = "FILE")]
    pub status_file: Option<PathBuf>,

    /// Print the devices and the IDs that would be advertised, and exit (needs no kubelet)
    #[arg(long)]
    pub list: bool,

    /// With --list: print JSON (schema davinci-device-plugin/v1)
    #[arg(long, requires = "list")]
    pub json: bool,
}

/// A Kubernetes extended resource name: `DOMAIN/NAME`, the domain a DNS subdomain, the name
/// at most 63 characters of letters, digits, `-`, `_` and `.`, starting and ending with a
/// letter or digit.
pub fn parse_resource(s: &str) -> Result<String, String> {
    let Some((domain, name)) = s.split_once('/') else {
        return Err(format!(
            "{s:?} is not DOMAIN/NAME (an extended resource, like {DEFAULT_RESOURCE})"
        ));
    };
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let edges_ok = |t: &str| t.starts_with(alnum) && t.ends_with(alnum);
    if domain.is_empty()
        || domain.len() > 253
        || !domain.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && edges_ok(l)
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
    {
        return Err(format!(
            "{s:?}: the domain {domain:?} must be a DNS name (lower-case letters, digits, '-' and '.')"
        ));
    }
    if domain == "kubernetes.io" || domain.ends_with(".kubernetes.io") {
        return Err(format!("{s:?}: the kubernetes.io domain is reserved"));
    }
    if name.is_empty()
        || name.len() > 63
        || !edges_ok(name)
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "{s:?}: the name {name:?} must be 1 to 63 letters, digits, '-', '_' or '.', \
             starting and ending with a letter or digit"
        ));
    }
    Ok(s.to_string())
}

fn parse_socket_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.contains('/') || s == "." || s == ".." || s.len() > 64 {
        return Err(format!("{s:?} must be a plain file name (no '/')"));
    }
    if s == "kubelet.sock" {
        return Err("kubelet.sock is the kubelet's own socket".into());
    }
    Ok(s.to_string())
}

/// `--unhealthy-codes`: the device event codes named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventCodes(pub Vec<u32>);

fn parse_codes(s: &str) -> Result<EventCodes, String> {
    davinci_ops::events::parse_code_list(s).map(EventCodes)
}

fn parse_hold(s: &str) -> Result<Duration, String> {
    parse_duration_between(s, Duration::from_secs(1), Duration::from_secs(7 * 86_400))
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    parse_duration_between(s, Duration::from_millis(10), Duration::from_secs(3600))
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    parse_duration_between(s, Duration::from_millis(10), Duration::from_secs(60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_interval("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("1.5m"), Ok(Duration::from_secs(90)));
        assert!(parse_interval("5x").unwrap_err().contains("unknown unit"));
        assert!(parse_interval("1ms").is_err());
        assert!(parse_timeout("2m").is_err());
    }

    #[test]
    fn resources() {
        assert!(parse_resource("davinci.ai/npu").is_ok());
        assert!(parse_resource("example.com/npu-shared_1").is_ok());
        for bad in [
            "npu",
            "/npu",
            "davinci.ai/",
            "Davinci.ai/npu",
            "davinci..ai/npu",
            "davinci.ai/-npu",
            "davinci.ai/n pu",
            "davinci.ai/a/b",
            "kubernetes.io/npu",
        ] {
            assert!(parse_resource(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_command_line() {
        let c = Cli::try_parse_from(["p"]).unwrap();
        assert_eq!(c.resource, DEFAULT_RESOURCE);
        assert_eq!(c.kubelet_dir, PathBuf::from(DEFAULT_KUBELET_DIR));
        assert_eq!(c.replicas, 4);
        assert_eq!(c.health_interval, Duration::from_secs(5));
        assert_eq!(c.unhealthy_codes, EventCodes(vec![2]));
        assert_eq!(c.unhealthy_hold, Duration::from_secs(300));
        let c = Cli::try_parse_from(["p", "--unhealthy-codes", "HUNG_TASK,1,9"]).unwrap();
        assert_eq!(c.unhealthy_codes, EventCodes(vec![2, 1, 9]));
        let c = Cli::try_parse_from(["p", "--unhealthy-codes", "none"]).unwrap();
        assert_eq!(c.unhealthy_codes, EventCodes(vec![]));
        let e = Cli::try_parse_from(["p", "--unhealthy-codes", "hang"]).unwrap_err();
        assert!(e.to_string().contains("not an event code"), "{e}");
        assert!(Cli::try_parse_from(["p", "--unhealthy-hold", "0s"]).is_err());
        assert!(Cli::try_parse_from(["p", "--unhealthy-hold", "8d"]).is_err());
        assert!(Cli::try_parse_from(["p", "--replicas", "0"]).is_err());
        assert!(Cli::try_parse_from(["p", "--replicas", "257"]).is_err());
        assert!(Cli::try_parse_from(["p", "--json"]).is_err());
        assert!(Cli::try_parse_from(["p", "--cdi-kind", "a.b/c"]).is_err());
        assert!(Cli::try_parse_from(["p", "--socket-name", "kubelet.sock"]).is_err());
        assert!(Cli::try_parse_from(["p", "--socket-name", "a/b"]).is_err());
        assert!(
            Cli::try_parse_from(["p", "--device", "/dev/davinci0", "--socket-dir", "/x"]).is_err()
        );
        let c = Cli::try_parse_from([
            "p",
            "--device",
            "/dev/davinci0",
            "--device",
            "/dev/davinci1",
        ])
        .unwrap();
        assert_eq!(c.devices.len(), 2);
    }
}
