//! The command line: clap's view of `davinci-smi`'s arguments.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use davinci_ops::cdi::{parse_kind, CdiVersion, SpecFormat, DEFAULT_KIND};

pub(crate) const AFTER_HELP: &str = "\
Device selection (first that applies): --device PATH (repeatable); --socket-dir DIR
(every DIR/davinci<N>.sock of davinci-mockd); $DAVINCI_DEVICE; every /dev/davinci<N>;
davinci-mockd's default socket directory; /run/davinci (the system's, searched by every
user); the first with devices is used. PATH is /dev/davinciN or mock:SOCKET. A device
named twice (the same path, or the same socket or node by another path) is used once.

--query FIELDS --format csv[,noheader][,nounits] prints the device table (`info`) or the
usage table (`info -t usage`) as CSV, like nvidia-smi's --query-gpu/--format (the fields:
`davinci-smi info --help`); --query-gpu is the same option, so nvidia-smi's
`--query-gpu=index,name,uuid,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits`
works as is (memory in whole MiB; [N/A] for what the driver does not report). --loop SECONDS repeats the command until interrupted, or
--count N times.

npu-smi mode: run as npu-smi (ln -s davinci-smi npu-smi), or with --npu-smi as the first
argument, davinci-smi takes Huawei npu-smi's commands and prints npu-smi's exact output
shapes, for scripts written against npu-smi: -v (npu-smi version: 25.5.1, the npu-smi
release whose shapes it reproduces), info, info -l, info -m, info -t usages|common|memory|
board|health|temp|power|device-share -i N [-c 0], set -t device-share -i N [-c 0] -d 0|1
(asks Y/N when stdin is a terminal, unless -y). What a davinci device does not report
(temperature, power, PCI and board ids, utilization) is NA. `npu-smi --help` for more.

Exit status: 0 ok, 1 other error, 2 usage, 3 device not found or unreachable,
4 permission denied, 5 busy, 6 partial failure (some devices failed; see per-device results).
With --loop: the status of the last round.

Text output is for people and may change; errors go to stderr. --json output follows the
versioned schema davinci-smi/v1 (docs/operators.md), also for command-line errors
(\"command\": \"usage-error\"); with --loop, one document per line.";

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
    pub(crate) global: Global,
    /// List the devices (same as `list`)
    #[arg(short = 'l', long = "list")]
    pub(crate) list: bool,
    #[command(flatten)]
    pub(crate) query: QueryArgs,
    #[command(flatten)]
    pub(crate) repeat: LoopArgs,
    #[command(subcommand)]
    pub(crate) cmd: Option<Cmd>,
}

#[derive(Debug, Args)]
pub(crate) struct Global {
    /// Device path: /dev/davinciN or mock:SOCKET (repeatable; overrides discovery)
    #[arg(long = "device", value_name = "PATH", global = true)]
    pub(crate) device: Vec<String>,
    /// davinci-mockd socket directory: every davinci<N>.sock in it
    #[arg(long = "socket-dir", value_name = "DIR", global = true)]
    pub(crate) socket_dir: Option<PathBuf>,
    /// Machine-readable output (schema davinci-smi/v1), also for errors
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

/// `--query`/`--format`: CSV in the nvidia-smi manner (`info` and `info -t usage`).
#[derive(Debug, Default, Clone, Args)]
#[command(next_help_heading = "Monitoring")]
pub(crate) struct QueryArgs {
    /// Print these fields as CSV (`info`, `info -t usage`; the fields: `info --help`)
    #[arg(
        long = "query",
        visible_alias = "query-gpu",
        value_name = "FIELDS",
        value_delimiter = ','
    )]
    pub(crate) query: Vec<String>,
    /// csv[,noheader][,nounits]: CSV, without header line, without units [default: csv]
    #[arg(long = "format", value_name = "FORMAT", value_delimiter = ',')]
    pub(crate) format: Vec<String>,
}

/// `--loop`/`--count`: repeat the command.
#[derive(Debug, Default, Clone, Args)]
#[command(next_help_heading = "Monitoring")]
pub(crate) struct LoopArgs {
    /// Repeat the command every SECONDS (decimals allowed)
    #[arg(
        long = "loop",
        value_name = "SECONDS",
        value_parser = parse_seconds,
        allow_hyphen_values = true
    )]
    pub(crate) every: Option<std::time::Duration>,
    /// With --loop: stop after N rounds
    #[arg(long = "count", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) count: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// List the devices
    List {
        #[command(flatten)]
        repeat: LoopArgs,
    },
    /// Show devices (default), device sharing (-t device-share), usage per client (-t usage)
    /// or the tenants' shares of the slots (-t tenant-share)
    #[command(after_help = crate::query::info_after_help())]
    Info {
        /// What to show
        #[arg(short = 't', long = "type", value_enum, value_name = "TYPE")]
        ty: Option<InfoType>,
        /// Device id N (of davinciN), or `all` [default: all]
        #[arg(short = 'i', long = "id", value_name = "ID", value_parser = parse_id)]
        id: Option<IdSel>,
        /// Chip id: 0 (each davinci device has one chip; accepted for npu-smi scripts)
        #[arg(short = 'c', long = "chip", value_name = "CHIP", value_parser = parse_chip, allow_hyphen_values = true)]
        chip: Option<u32>,
        /// List the devices
        #[arg(short = 'l', long = "list")]
        list: bool,
        #[command(flatten)]
        tenant: TenantArgs,
        #[command(flatten)]
        query: QueryArgs,
        #[command(flatten)]
        repeat: LoopArgs,
    },
    /// Set device sharing (-t device-share -d 0|1) or a tenant's slots (-t tenant-share
    /// --tenant T -d N) on -i ID|all (never prompts)
    #[command(after_help = SET_AFTER_HELP)]
    Set {
        /// What to set
        #[arg(short = 't', long = "type", value_enum, value_name = "TYPE")]
        ty: SetType,
        /// Device id N (of davinciN), or `all`
        #[arg(short = 'i', long = "id", value_name = "ID", value_parser = parse_id)]
        id: IdSel,
        /// Chip id: 0 (each davinci device has one chip; accepted for npu-smi scripts)
        #[arg(short = 'c', long = "chip", value_name = "CHIP", value_parser = parse_chip, allow_hyphen_values = true)]
        chip: Option<u32>,
        /// device-share: 1 = shared (many isolated clients), 0 = exclusive (one client);
        /// tenant-share: the slots the tenant counts for, 0 (best effort) to the device's slots
        #[arg(short = 'd', long = "data", value_name = "0|1|N")]
        data: String,
        #[command(flatten)]
        tenant: TenantArgs,
        /// Accepted for scripts written for tools that prompt; davinci-smi never prompts
        #[arg(short = 'y', long = "yes")]
        yes: bool,
    },
    /// Container Device Interface: `cdi generate` writes a CDI spec for the devices
    #[command(subcommand_required = true)]
    Cdi {
        #[command(subcommand)]
        cmd: CdiCmd,
    },
    /// The devices and the processes using them, live (q quits); --once prints one frame
    #[command(after_help = crate::top::AFTER_HELP)]
    Top(crate::top::TopArgs),
    /// The devices' event logs: coded events (hung task, stream stopped, reset, ...) with
    /// time, client and stream; --follow prints new ones as they come
    #[command(after_help = crate::events::after_help())]
    Events(crate::events::EventsArgs),
    /// Record a timeline of everything one device runs (admin): Chrome trace-event JSON for
    /// ui.perfetto.dev
    #[command(after_help = crate::trace::AFTER_HELP)]
    Trace(crate::trace::TraceArgs),
}

pub(crate) const CDI_AFTER_HELP: &str = "\
The spec has a device davinci<N> per device found (N as GET_INFO reports it, else from the
path) and `all` with every device. A kernel device gets its node (/dev/davinciN) and
DAVINCI_DEVICE=/dev/davinciN; a davinci-mockd device a bind mount of its socket at the same
path (nosuid,nodev,rbind,rprivate,noexec) and DAVINCI_DEVICE=mock:SOCKET; `all` sets
DAVINCI_DEVICE to the first and DAVINCI_VISIBLE_DEVICES to every device path, comma-separated.
cdiVersion is 0.5.0, which every CDI runtime loads (Debian 12's podman 4.3 included);
--cdi-version 0.6.0 adds annotations (which path each entry came from, what generated it),
which a runtime whose CDI library predates 0.6.0 refuses with the whole spec (a warning says
so). Every entry sets DAVINCI_VISIBLE_DEVICES, as the device plugin does.

A container user that is not root reaches a davinci-mockd socket through its group: run the
daemon with --socket-group GROUP (mode 0660) and the container with that group added
(podman/docker --group-add GID; Kubernetes securityContext.supplementalGroups: [GID]).

A device that does not answer is still in the spec by its path (a warning says so); a path
that does not exist, or is not a character device (kernel) or socket (mock), is an error.
Nothing found, or any error: nothing is written, and the exit status says why. Generate
again when the devices change; a container keeps the socket it started with, so one started
before davinci-mockd restarted must be restarted too.

--output FILE is written atomically (a temporary file in the same directory, then renamed),
mode 0644; the directory must exist. Runtimes load *.json and *.yaml from /etc/cdi and
/var/run/cdi. Format: --format, else json for FILE.json, else yaml (stdout too). With --json
the result is a davinci-smi/v1 document (command \"cdi-generate\") with the spec in `spec`.

Example: davinci-smi cdi generate -o /etc/cdi/davinci.yaml
         docker run --device davinci.ai/npu=all ...";

#[derive(Debug, Subcommand)]
pub(crate) enum CdiCmd {
    /// Write a CDI spec for the devices (stdout, or --output FILE)
    #[command(after_help = CDI_AFTER_HELP)]
    Generate(CdiGenerateArgs),
}

/// `cdi generate`'s options.
#[derive(Debug, Clone, Args)]
pub(crate) struct CdiGenerateArgs {
    /// Write the spec to FILE (atomically, mode 0644) instead of stdout
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// The spec's format [default: json if FILE ends in .json, else yaml]
    #[arg(long = "format", value_name = "FORMAT", value_parser = spec_format())]
    pub(crate) format: Option<SpecFormat>,
    /// The CDI kind VENDOR/CLASS containers ask for (--device KIND=davinci0)
    #[arg(long = "kind", value_name = "KIND", default_value = DEFAULT_KIND,
          value_parser = parse_kind)]
    pub(crate) kind: String,
    /// The cdiVersion to declare: 0.5.0 (every CDI runtime loads it), or 0.6.0 with
    /// annotations (refused by runtimes whose CDI library is older, podman 4.3 on Debian 12)
    #[arg(
        long = "cdi-version",
        value_name = "VERSION",
        default_value = "0.5.0",
        value_parser = cdi_version()
    )]
    pub(crate) cdi_version: CdiVersion,
}

/// `--format`: a [`SpecFormat`] by name, each listed in `--help` with what it is.
fn spec_format() -> impl TypedValueParser<Value = SpecFormat> {
    let names = SpecFormat::ALL.map(|f| PossibleValue::new(f.name()).help(f.help()));
    PossibleValuesParser::new(names).try_map(|s| s.parse::<SpecFormat>())
}

/// `--cdi-version`: a [`CdiVersion`], each listed in `--help` with what it is for.
fn cdi_version() -> impl TypedValueParser<Value = CdiVersion> {
    let names = CdiVersion::ALL.map(|v| PossibleValue::new(v.as_str()).help(v.help()));
    PossibleValuesParser::new(names).try_map(|s| s.parse::<CdiVersion>())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum InfoType {
    /// The device table
    Board,
    /// Device sharing status
    DeviceShare,
    /// Per-client usage: pid, container, contexts, streams, memory, tasks
    Usage,
    /// How many tenant slots each tenant counts for (--tenant T, else every tenant with a
    /// client open; an admin's)
    TenantShare,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SetType {
    /// Device sharing (0 exclusive, 1 shared)
    DeviceShare,
    /// How many tenant slots --tenant counts for (0 best effort, 1 the default, up to the
    /// device's slots; an admin's)
    TenantShare,
}

/// The most tenant slots a device has (davinci-mockd's `--tenant-slots`, the module's
/// `tenant_slots`: 1 to 64): the largest `-d` of `set -t tenant-share`.
pub(crate) const MAX_SLOTS: u32 = 64;

/// `--tenant`, `--exact`: the tenant of `-t tenant-share`.
#[derive(Debug, Default, Clone, Args)]
pub(crate) struct TenantArgs {
    /// -t tenant-share: user:UID or container:ID (a unique prefix of the id of a container
    /// with a client open on the device, as docker takes ids)
    #[arg(long = "tenant", value_name = "TENANT", value_parser = parse_tenant)]
    pub(crate) tenant: Option<String>,
    /// With --tenant container:ID: ID is the whole id, not a prefix (a container with no
    /// client open now)
    #[arg(long = "exact", requires = "tenant")]
    pub(crate) exact: bool,
}

pub(crate) const SET_AFTER_HELP: &str = "\
-t device-share -d 0|1: exclusive (one client) or shared (isolated clients, each tenant held
to its share). -t tenant-share --tenant user:UID|container:ID -d N: the tenant counts for N of
the device's tenant slots (0 to the slots, 1 by default): N shares of every table, of memory
and of the client opens, N slots held while it has a client open (when free; else it waits);
0 makes a best-effort tenant that holds no slot. A container is named by its id or a unique
prefix of it among the containers with a client open on the devices (--exact: the whole id,
for one with none open). The setting lasts until the device goes (not across a daemon restart
or module reload). Both need an admin (EPERM otherwise) and a 1.5 driver for tenant-share.
Read the shares with `davinci-smi info -t tenant-share`.";

/// `--tenant`: `user:UID` or `container:ID` (checked as the driver would; a container id may
/// be a prefix, resolved later against the devices' clients).
pub(crate) fn parse_tenant(s: &str) -> Result<String, String> {
    davinci_uapi::TenantShareArgs::named(s)
        .map(|_| s.to_string())
        .map_err(str::to_string)
}

/// The command line checked beyond what clap's parsers see alone: `set`'s `-d` in the range
/// of its `-t` (0|1 for device-share, with clap's own message; 0 to [`MAX_SLOTS`] for
/// tenant-share).
pub(crate) fn validated(cli: Cli) -> Result<Cli, clap::Error> {
    use clap::CommandFactory;
    if let Some(Cmd::Set { ty, data, .. }) = &cli.cmd {
        let (hi, name) = match ty {
            SetType::DeviceShare => (1, "0|1"),
            SetType::TenantShare => (i64::from(MAX_SLOTS), "N"),
        };
        let mut top = Cli::command();
        top.build();
        if let Some(set) = top.find_subcommand("set") {
            let arg = set
                .get_arguments()
                .find(|a| a.get_id() == "data")
                .cloned()
                .map(|a| a.value_name(name));
            clap::value_parser!(u32).range(0..=hi).parse_ref(
                set,
                arg.as_ref(),
                std::ffi::OsStr::new(data),
            )?;
        }
    }
    Ok(cli)
}

/// `-i`: one device or all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdSel {
    /// Every selected device.
    All,
    /// davinciN.
    One(u32),
}

pub(crate) fn parse_id(s: &str) -> Result<IdSel, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(IdSel::All);
    }
    s.parse()
        .map(IdSel::One)
        .map_err(|_| format!("'{s}' is not a device id (a number, or 'all')"))
}

/// `-c`: every davinci device has exactly one chip, id 0.
pub(crate) fn parse_chip(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Ok(0),
        Ok(n) => Err(format!(
            "no chip {n}: each davinci device has exactly one chip, id 0"
        )),
        Err(_) => Err(format!(
            "'{s}' is not a chip id (each davinci device has exactly one chip, id 0)"
        )),
    }
}

/// Most seconds `--loop` takes (a day).
const MAX_LOOP_SECONDS: f64 = 86_400.0;

/// `--loop SECONDS`: a positive number of seconds, decimals allowed, at most a day.
pub(crate) fn parse_seconds(s: &str) -> Result<std::time::Duration, String> {
    let bad =
        || format!("'{s}' is not a number of seconds greater than 0 (at most {MAX_LOOP_SECONDS})");
    let x: f64 = s.trim().parse().map_err(|_| bad())?;
    if !(x > 0.0 && x <= MAX_LOOP_SECONDS) {
        return Err(bad());
    }
    std::time::Duration::try_from_secs_f64(x).map_err(|_| bad())
}

/// `Some(argv)` for a compatibility mode: the program is called `program` (its file name),
/// or its first argument is `flag` (then dropped, and `program` becomes `argv[0]`).
pub(crate) fn mode_args(args: &[String], program: &str, flag: &str) -> Option<Vec<String>> {
    let name = args.first()?;
    let base = name.rsplit('/').next().unwrap_or(name);
    if base == program {
        return Some(args.to_vec());
    }
    if args.get(1).is_some_and(|a| a == flag) {
        let mut v = vec![program.to_string()];
        v.extend(args.iter().skip(2).cloned());
        return Some(v);
    }
    None
}

#[cfg(test)]
mod tests {
    //! npu-smi's `-c`: chip 0 is accepted, any other is a usage error.

    use crate::exit;
    use crate::tests::*;

    #[test]
    fn chip_zero_is_accepted_for_info_and_set() {
        let w = two();
        for a in [
            &["info", "-t", "device-share", "-i", "0", "-c", "0"][..],
            &["info", "-c", "0"],
            &["info", "-t", "usage", "-i", "1", "--chip", "0"],
            &["set", "-t", "device-share", "-i", "1", "-c", "0", "-d", "1"],
        ] {
            let (code, out, err) = smi(&w, &args(&BOTH, a));
            assert_eq!(code, 0, "{a:?}: {out}{err}");
        }
        let (_, out, _) = smi(
            &w,
            &args(&BOTH, &["info", "-t", "device-share", "-i", "0", "-c", "0"]),
        );
        assert!(
            out.contains("Device-share Status            : False"),
            "{out}"
        );
    }

    #[test]
    fn other_chips_are_a_usage_error() {
        let w = two();
        for chip in ["1", "7", "x", "-1"] {
            let a = args(
                &BOTH,
                &["info", "-t", "device-share", "-i", "0", "-c", chip],
            );
            let (code, out, err) = smi(&w, &a);
            assert_eq!(code, exit::USAGE, "{chip}: {out}{err}");
            assert!(err.contains("exactly one chip, id 0"), "{err}");
            assert_eq!(out, "");
            let msg = assert_json_usage_error(&w, &args(&a, &["--json"]));
            assert!(msg.contains("exactly one chip, id 0"), "{msg}");
        }
        let a = ["set", "-t", "device-share", "-i", "0", "-c", "1", "-d", "1"];
        assert_eq!(smi(&w, &args(&BOTH, &a)).0, exit::USAGE);
        // Nothing was set.
        let v = doc(&smi(&w, &args(&BOTH, &["info", "--json"])).1);
        assert_eq!(v["devices"][0]["share_mode"], "exclusive");
    }
}
