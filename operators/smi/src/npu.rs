//! npu-smi mode: `davinci-smi` run as `npu-smi` (a link of that name, or `davinci-smi
//! --npu-smi ...`) answers Huawei `npu-smi`'s commands in its exact output shapes, so that
//! scripts written against npu-smi (monitoring agents, schedulers, installers) read davinci
//! devices unchanged. Samples of the real shapes, with their sources, are in
//! `operators/smi/tests/npu-smi-reference/`.
//!
//! Values come from GET_INFO, LIST_CLIENTS and QUERY_DEVICE_SHARE, and from
//! [`device_extras`] (GET_IDENTITY's names and bus address, GET_COUNTERS' health and
//! utilization, GET_SENSORS' temperature, power and voltage); a value the device does not
//! report (sensors of a driver without them, frequencies, PCI ids of a device on no bus) is
//! `NA`, never an invented number. The device has no DDR and no hugepages beside its memory,
//! so those are 0, as npu-smi prints them on a chip without DDR; its memory is reported as
//! HBM. How names, bus addresses and sensor readings are worded: [`values`].
#![forbid(unsafe_code)]

use std::io::{BufRead, Write};
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use davinci_ops::discover::Discovery;
use davinci_uapi::{ClientUsage, DeviceInfo, ShareMode};

use crate::access::{Opener, Target};
use crate::cli::{parse_chip, Global};
use crate::commands::{dash_if_empty, error_line};
use crate::error::{combine, exit, SmiError};
use crate::extras::{device_extras, fill_busy, Extras};
use crate::output::printable;
use crate::plan::{find, open_targets};
use crate::query::whole_mib;
use crate::IdSel;

/// The npu-smi version `npu-smi -v` and the `info` table's header report: the npu-smi
/// release whose output shapes this mode reproduces (the `info -t usages` keys of 25.5.1), so
/// tools that refuse an npu-smi older than they know parse a version they accept. It is not
/// davinci-smi's own version (`davinci-smi --version`).
pub(crate) const COMPAT_VERSION: &str = "25.5.1";

/// The flag that turns npu-smi mode on under another program name.
pub(crate) const FLAG: &str = "--npu-smi";

/// `Some(argv)` for npu-smi mode: the program is called `npu-smi`, or its first argument is
/// [`FLAG`] (then dropped).
pub(crate) fn npu_args(args: &[String]) -> Option<Vec<String>> {
    crate::cli::mode_args(args, "npu-smi", FLAG)
}

const AFTER_HELP: &str = "\
npu-smi mode of davinci-smi: Huawei npu-smi's commands and output shapes, for scripts written
against npu-smi. On when the program is called npu-smi (ln -s davinci-smi npu-smi) or with
davinci-smi --npu-smi as the first argument. Each davinci device is one NPU with one chip
(chip 0). Temperature, power and voltage are the device's sensors (NA from a driver without
them); values no davinci device reports (frequencies, serial numbers, firmware) are NA; the
device's memory is its HBM; DDR and hugepages are 0. `-v` reports npu-smi version 25.5.1, the
release whose shapes are reproduced (davinci-smi --version is the tool's own). Devices are
found as davinci-smi finds them (davinci-smi --help), or --device PATH.

  npu-smi info                 the NPU table and the process table
  npu-smi info -l | -m         the NPUs; the NPU/chip map
  npu-smi info -t topo         the NPU topology matrix and CPU affinity
  npu-smi info -t usages|common|memory|board|health|temp|power|volt|product|device-share
               -i N [-c 0]     (-c 0: the chip's values alone; board -c: the chip's identity)
  npu-smi set -t device-share -i N [-c 0] -d 0|1   (asks Y/N on a terminal; -y does not)";

/// npu-smi's command line.
#[derive(Debug, Parser)]
#[command(
    name = "npu-smi",
    disable_version_flag = true,
    about = "davinci-smi in npu-smi mode",
    after_help = AFTER_HELP,
    arg_required_else_help = true
)]
struct NpuCli {
    /// Print the version (npu-smi version: 25.5.1)
    #[arg(short = 'v', long = "version")]
    version: bool,
    /// Device path: /dev/davinciN or mock:SOCKET (repeatable; overrides discovery)
    #[arg(long = "device", value_name = "PATH", global = true)]
    device: Vec<String>,
    /// davinci-mockd socket directory: every davinci<N>.sock in it
    #[arg(long = "socket-dir", value_name = "DIR", global = true)]
    socket_dir: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Option<NpuCmd>,
}

#[derive(Debug, Subcommand)]
enum NpuCmd {
    /// Show the NPUs (table), list them (-l), map them (-m), or one NPU's details (-t)
    Info {
        /// What to show of NPU -i (topo: of all NPUs, no -i needed)
        #[arg(short = 't', long = "type", value_enum, value_name = "TYPE")]
        ty: Option<NpuType>,
        /// NPU id (N of davinciN)
        #[arg(short = 'i', long = "id", value_name = "ID")]
        id: Option<u32>,
        /// Chip id: 0 (each NPU has one chip)
        #[arg(short = 'c', long = "chip", value_name = "CHIP", value_parser = parse_chip,
              allow_hyphen_values = true, requires = "ty")]
        chip: Option<u32>,
        /// List the NPUs
        #[arg(short = 'l', long = "list", conflicts_with_all = ["ty", "id", "map"])]
        list: bool,
        /// The NPU / chip map
        #[arg(short = 'm', long = "map", conflicts_with_all = ["ty", "id"])]
        map: bool,
    },
    /// Set device sharing of NPU -i: -t device-share -i N [-c 0] -d 0|1
    Set {
        /// What to set
        #[arg(short = 't', long = "type", value_enum, value_name = "TYPE")]
        ty: NpuSetType,
        /// NPU id (N of davinciN)
        #[arg(short = 'i', long = "id", value_name = "ID")]
        id: u32,
        /// Chip id: 0 (each NPU has one chip)
        #[arg(short = 'c', long = "chip", value_name = "CHIP", value_parser = parse_chip,
              allow_hyphen_values = true)]
        chip: Option<u32>,
        /// 1 = shared (many isolated clients), 0 = exclusive (one client)
        #[arg(short = 'd', long = "data", value_name = "0|1", value_parser = clap::value_parser!(u8).range(0..=1))]
        data: u8,
        /// Do not ask for confirmation on a terminal
        #[arg(short = 'y', long = "yes")]
        yes: bool,
    },
}

/// `info -t`: npu-smi's types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum NpuType {
    /// Memory and compute usage rates
    Usages,
    /// Usage, frequencies, temperature and power in one
    Common,
    /// Memory (HBM; no DDR)
    Memory,
    /// Board, firmware and PCI identity
    Board,
    /// Health status
    Health,
    /// Temperature (NA: no sensor)
    #[value(alias = "temperature")]
    Temp,
    /// Power (NA: no sensor)
    Power,
    /// Voltage (NA: no sensor)
    Volt,
    /// Product type
    Product,
    /// Topology of all NPUs and their CPU affinity
    Topo,
    /// Device sharing status
    DeviceShare,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum NpuSetType {
    /// Device sharing (0 exclusive, 1 shared)
    DeviceShare,
}

/// Not known: npu-smi's word.
const NA: &str = "NA";

fn na<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| NA.to_string(), |v| printable(&v.to_string()))
}

/// `"\t%-30s : %s\n"`: npu-smi's key/value line (every `-t` type's; a copy from a terminal
/// shows the TAB as 8 spaces).
fn tab(k: &str, v: impl std::fmt::Display) -> String {
    format!("\t{k:<30} : {v}\n")
}

/// What one NPU says: GET_INFO, its clients, its mode, and the [`Extras`].
struct Npu {
    id: u32,
    info: DeviceInfo,
    clients: Vec<ClientUsage>,
    mode: Option<ShareMode>,
    extras: Extras,
}

impl Npu {
    fn hbm_total_mb(&self) -> String {
        whole_mib(self.info.memory_size)
    }
    fn hbm_used_mb(&self) -> String {
        whole_mib(self.info.memory_used)
    }
    /// Memory held, in whole percent of the memory (rounded down).
    fn hbm_rate(&self) -> String {
        let (used, total) = (
            u128::from(self.info.memory_used),
            u128::from(self.info.memory_size),
        );
        if total == 0 {
            return NA.into();
        }
        (used.min(total) * 100 / total).to_string()
    }
}

fn ask(t: &Target) -> Result<Npu, SmiError> {
    let d = t.dev.as_ref().map_err(Clone::clone)?;
    let info = d.info()?;
    // Best effort, as in davinci-smi's `info`: a device that answers GET_INFO is healthy.
    let clients = d.clients().unwrap_or_default();
    let extras = device_extras(d.as_ref(), &info);
    Ok(Npu {
        id: t.entry.id.unwrap_or(info.device_id),
        mode: ShareMode::from_u32(info.share_mode),
        info,
        clients,
        extras,
    })
}

/// What a command printed, and its exit status.
struct Out {
    out: String,
    err: String,
    code: i32,
}

/// Runs npu-smi mode on `args` (`args[0]` is `npu-smi`). `input` is the terminal to ask for
/// `set`'s confirmation on (none: stdin is not a terminal, nothing is asked).
pub(crate) fn run(
    args: &[String],
    disc: &Discovery,
    opener: &dyn Opener,
    out: &mut dyn Write,
    err: &mut dyn Write,
    input: Option<&mut dyn BufRead>,
) -> i32 {
    let cli = match NpuCli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = write!(out, "{}", e.render());
                return exit::OK;
            }
            let _ = write!(err, "{}", e.render());
            return exit::USAGE;
        }
    };
    if cli.version {
        let _ = writeln!(out, "npu-smi version: {COMPAT_VERSION}");
        return exit::OK;
    }
    let g = Global {
        device: cli.device.clone(),
        socket_dir: cli.socket_dir.clone(),
        json: false,
    };
    let Some(cmd) = &cli.cmd else {
        let _ = write!(err, "{}", NpuCli::command_help());
        return exit::USAGE;
    };
    let id = match cmd {
        // The matrix is of every NPU (npu-smi takes no -i for it).
        NpuCmd::Info {
            ty: Some(NpuType::Topo),
            ..
        } => None,
        NpuCmd::Info {
            id: None,
            ty: Some(_),
            ..
        } => {
            use clap::CommandFactory;
            let e = NpuCli::command().error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "info -t TYPE needs the NPU: --id <ID> (-i N); only -t topo is of all NPUs",
            );
            let _ = write!(err, "{}", e.render());
            return exit::USAGE;
        }
        NpuCmd::Info { id, .. } => id.map(IdSel::One),
        NpuCmd::Set { id, .. } => Some(IdSel::One(*id)),
    };
    let found = davinci_ops::discover::discover(&g.device, g.socket_dir.as_deref(), disc);
    for w in davinci_ops::discover::ignored_warnings(&found) {
        let _ = writeln!(err, "davinci-smi: {}", printable(&w));
    }
    let targets = find(found).and_then(|e| open_targets(e, id, &g, disc, opener));
    let targets = match targets {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "davinci-smi: {}", e.message);
            return e.exit_code();
        }
    };
    let r = match cmd {
        NpuCmd::Info { list: true, .. } => list(&targets),
        NpuCmd::Info { map: true, .. } => map(&targets),
        NpuCmd::Info {
            ty: Some(NpuType::Topo),
            ..
        } => topo::topo(&targets, &topo::node_cpus),
        NpuCmd::Info {
            ty: Some(ty), chip, ..
        } => detail(&targets, *ty, chip.is_some()),
        NpuCmd::Info { .. } => table(&targets),
        NpuCmd::Set { data, yes, .. } => {
            let mode = if *data == 1 {
                ShareMode::Shared
            } else {
                ShareMode::Exclusive
            };
            match input {
                Some(input) if !*yes => {
                    let _ = write!(
                        out,
                        "Please confirm to set the device-share of the chip to {} (Y/N): ",
                        if *data == 1 { "enable" } else { "disable" }
                    );
                    let _ = out.flush();
                    let mut line = String::new();
                    let yes = input.read_line(&mut line).is_ok()
                        && matches!(line.trim(), "Y" | "y" | "yes" | "Yes" | "YES");
                    if !yes {
                        let _ = writeln!(out);
                        let _ = writeln!(err, "davinci-smi: not confirmed: nothing was set");
                        return exit::OTHER;
                    }
                }
                _ => {}
            }
            set(&targets, mode)
        }
    };
    let wrote = out.write_all(r.out.as_bytes()).and_then(|()| out.flush());
    let _ = err.write_all(r.err.as_bytes());
    if wrote.is_err() {
        return exit::OTHER;
    }
    r.code
}

impl NpuCli {
    fn command_help() -> String {
        use clap::CommandFactory;
        NpuCli::command().render_help().to_string()
    }
}

/// What one target said, or its id and why not.
type Asked = Result<Npu, (Option<u32>, SmiError)>;

/// Per target: what it said, or why not; and the stderr lines and exit status of it all.
/// `busy`: the output shows utilization (measured over one wait for all targets).
fn ask_all(targets: &[Target], busy: bool) -> (Vec<Asked>, String, i32) {
    let mut asked: Vec<Asked> = targets
        .iter()
        .map(|t| ask(t).map_err(|e| (t.entry.id, e)))
        .collect();
    if busy {
        fill_busy(
            targets
                .iter()
                .zip(asked.iter_mut())
                .filter_map(|(t, r)| {
                    Some((t.dev.as_ref().ok()?.as_ref(), &mut r.as_mut().ok()?.extras))
                })
                .collect(),
        );
    }
    let errors: String = asked
        .iter()
        .filter_map(|r| r.as_ref().err().map(|(id, e)| error_line(*id, e)))
        .collect();
    let code = {
        let outcomes: Vec<Option<&SmiError>> = asked
            .iter()
            .map(|r| r.as_ref().err().map(|(_, e)| e))
            .collect();
        combine(&outcomes)
    };
    (asked, errors, code)
}

/// `info -l`: the count, then each NPU's id and chip count (every device found, answering or
/// not, as `davinci-smi list`).
fn list(targets: &[Target]) -> Out {
    let mut out = tab("Total Count", targets.len());
    for t in targets {
        out.push('\n');
        out += &tab("NPU ID", crate::commands::id_text(t.entry.id));
        out += &tab("Chip Count", 1);
    }
    Out {
        out,
        err: String::new(),
        code: exit::OK,
    }
}

/// `info -m`: NPU id, chip id, chip logic id (the device id: the id a client opens it by) and
/// chip name, in columns of 30 (`"\t%-30s %-30s %-30s %-30s\n"`).
fn map(targets: &[Target]) -> Out {
    let row = |a: &str, b: &str, c: &str, d: &str| format!("\t{a:<30} {b:<30} {c:<30} {d:<30}\n");
    let mut out = row("NPU ID", "Chip ID", "Chip Logic ID", "Chip Name");
    let (asked, err, code) = ask_all(targets, false);
    for r in &asked {
        match r {
            Ok(n) => {
                let id = n.id.to_string();
                out += &row(&id, "0", &id, &values::map_name(&n.extras));
            }
            Err((id, _)) => {
                let id = crate::commands::id_text(*id);
                out += &row(&id, "0", &id, NA);
            }
        }
    }
    Out { out, err, code }
}

/// `set -t device-share`: npu-smi's Status and Message lines per NPU.
fn set(targets: &[Target], mode: ShareMode) -> Out {
    let mut out = String::new();
    let mut errs = String::new();
    let mut failed = Vec::new();
    for t in targets {
        match t
            .dev
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|d| d.set_share(mode))
        {
            Ok(()) => {
                out += &tab("Status", "OK");
                out += &tab(
                    "Message",
                    "The device-share of the chip is set successfully.",
                );
                failed.push(None);
            }
            Err(e) => {
                out += &tab("Status", "FAIL");
                out += &tab("Message", printable(&e.message));
                errs += &error_line(t.entry.id, &e);
                failed.push(Some(e));
            }
        }
    }
    let outcomes: Vec<Option<&SmiError>> = failed.iter().map(Option::as_ref).collect();
    Out {
        out,
        err: errs,
        code: combine(&outcomes),
    }
}

mod render;
mod topo;
mod values;
use render::{detail, table};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_sensors;
