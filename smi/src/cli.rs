//! The command line: clap's view of `davinci-smi`'s arguments.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub(crate) const AFTER_HELP: &str = "\
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
    pub(crate) global: Global,
    /// List the devices (same as `list`)
    #[arg(short = 'l', long = "list")]
    pub(crate) list: bool,
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
    /// Machine-readable output (schema davinci-smi/v1)
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
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
pub(crate) enum InfoType {
    /// The device table
    Board,
    /// Device sharing status
    DeviceShare,
    /// Per-client usage: pid, container, contexts, streams, memory, tasks
    Usage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SetType {
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

pub(crate) fn parse_id(s: &str) -> Result<IdSel, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(IdSel::All);
    }
    s.parse()
        .map(IdSel::One)
        .map_err(|_| format!("'{s}' is not a device id (a number, or 'all')"))
}
