//! nvidia-smi's command line, parsed as nvidia-smi takes it: `--opt=value` or `--opt value`
//! (`-i 0`, `--id=0`), one command per line, and its answers to a bad line (`Invalid
//! combination of input arguments...`, or `Field "x" is not a valid field to query.`, on
//! stdout, status 2).
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use super::fields::{find, APP_FIELDS, F, GPU_FIELDS};
use super::{status, Out, INVALID};

/// What the command line asks for.
#[derive(Debug)]
pub(crate) enum Command {
    /// `-h`.
    Help,
    /// `--help-query-gpu`.
    HelpQueryGpu,
    /// `--help-query-compute-apps`.
    HelpQueryApps,
    /// `--version`.
    Version,
    /// `-L`.
    List,
    /// `--query-gpu`: the columns.
    QueryGpu(Vec<&'static F>),
    /// `--query-compute-apps`: the columns.
    QueryApps(Vec<&'static F>),
    /// `-q`: XML with `-x`; the `-d` sections (upper case), all when `None`.
    Query {
        xml: bool,
        display: Option<Vec<String>>,
    },
    /// No command: the summary table.
    Table,
}

impl Command {
    /// Whether the output shows utilization (measured over a short wait, so only then).
    pub(crate) fn shows_utilization(&self) -> bool {
        match self {
            Command::QueryGpu(cols) => cols.iter().any(|f| {
                f.0 == "utilization.gpu"
                    || f.0 == "clocks_event_reasons.active"
                    || f.0 == "clocks_event_reasons.gpu_idle"
            }),
            Command::Query { display, .. } => display
                .as_ref()
                .is_none_or(|d| d.iter().any(|s| s == "UTILIZATION" || s == "PERFORMANCE")),
            Command::Table => true,
            _ => false,
        }
    }
}

/// The parsed command line.
#[derive(Debug)]
pub(crate) struct Opts {
    pub(crate) command: Command,
    /// `-i`: indexes, UUIDs or bus ids, comma separated.
    pub(crate) ids: Option<String>,
    /// `-l`/`-lms`: the pause between rounds.
    pub(crate) every: Option<Duration>,
    /// `-f`: write there instead of stdout.
    pub(crate) filename: Option<String>,
    /// `--format`: print the header line.
    pub(crate) header: bool,
    /// `--format`: print units after values.
    pub(crate) units: bool,
    /// davinci's own: device paths (overrides discovery).
    pub(crate) device: Vec<String>,
    /// davinci's own: a davinci-mockd socket directory.
    pub(crate) socket_dir: Option<PathBuf>,
}

fn invalid() -> Out {
    Out::stdout(INVALID, status::INVALID_ARGUMENT)
}

/// `-l`'s interval when none is given (nvidia-smi's default, 5 s).
const DEFAULT_LOOP: Duration = Duration::from_secs(5);

/// The columns of a `--query-*` list; an unknown name is nvidia-smi's error for it.
fn columns(table: &'static [F], list: &str) -> Result<Vec<&'static F>, Out> {
    let mut cols = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match find(table, name) {
            Some(f) => cols.push(f),
            None => {
                return Err(Out::stdout(
                    format!(
                        "Field \"{}\" is not a valid field to query.\n\n",
                        crate::output::printable(name)
                    ),
                    status::INVALID_ARGUMENT,
                ))
            }
        }
    }
    if cols.is_empty() {
        return Err(invalid());
    }
    Ok(cols)
}

/// Parses the arguments after the program name.
pub(crate) fn parse(args: &[String]) -> Result<Opts, Out> {
    let mut o = Opts {
        command: Command::Table,
        ids: None,
        every: None,
        filename: None,
        header: true,
        units: true,
        device: Vec::new(),
        socket_dir: None,
    };
    let (mut help, mut version, mut list, mut query, mut xml) = (false, false, false, false, false);
    let (mut help_gpu, mut help_apps) = (false, false);
    let (mut query_gpu, mut query_apps, mut format, mut display) = (None, None, None, None);
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with('-') => (n, Some(v.to_string())),
            _ => (arg, None),
        };
        // The value of an option that takes one: after `=`, or the next argument.
        let value = |i: &mut usize| -> Result<String, Out> {
            if let Some(v) = &inline {
                return Ok(v.clone());
            }
            let v = args.get(*i).ok_or_else(invalid)?.clone();
            *i += 1;
            Ok(v)
        };
        match name {
            "-h" | "--help" => help = true,
            "--version" => version = true,
            "-L" | "--list-gpus" => list = true,
            "-q" | "--query" => query = true,
            "-x" | "--xml-format" => xml = true,
            "--help-query-gpu" => help_gpu = true,
            "--help-query-compute-apps" => help_apps = true,
            "-i" | "--id" => o.ids = Some(value(&mut i)?),
            "-d" | "--display" => display = Some(value(&mut i)?),
            "-f" | "--filename" => o.filename = Some(value(&mut i)?),
            "--query-gpu" => query_gpu = Some(value(&mut i)?),
            "--query-compute-apps" => query_apps = Some(value(&mut i)?),
            "--format" => format = Some(value(&mut i)?),
            "--device" => o.device.push(value(&mut i)?),
            "--socket-dir" => o.socket_dir = Some(PathBuf::from(value(&mut i)?)),
            "-l" | "--loop" => {
                // The interval is optional: `-l` alone is every 5 s.
                let secs = match &inline {
                    Some(v) => Some(v.clone()),
                    None => args
                        .get(i)
                        .filter(|v| v.parse::<u64>().is_ok())
                        .cloned()
                        .inspect(|_| i += 1),
                };
                o.every = match secs {
                    None => Some(DEFAULT_LOOP),
                    Some(s) => Some(Duration::from_secs(
                        s.parse::<u64>()
                            .ok()
                            .filter(|&s| s > 0)
                            .ok_or_else(invalid)?,
                    )),
                };
            }
            "-lms" | "--loop-ms" => {
                let ms = value(&mut i)?;
                let ms = ms
                    .parse::<u64>()
                    .ok()
                    .filter(|&m| m > 0)
                    .ok_or_else(invalid)?;
                o.every = Some(Duration::from_millis(ms));
            }
            _ => {
                return Err(Out::stdout(
                    format!(
                    "ERROR: Option {} is not recognized. Please run 'nvidia-smi -h' for help.\n",
                    crate::output::printable(arg)
                ),
                    status::INVALID_ARGUMENT,
                ))
            }
        }
    }
    if let Some(f) = &format {
        let mut csv = false;
        for item in f.split(',').map(str::trim) {
            match item {
                "csv" => csv = true,
                "noheader" => o.header = false,
                "nounits" => o.units = false,
                _ => return Err(invalid()),
            }
        }
        if !csv {
            return Err(invalid());
        }
    }
    let commands = [
        help,
        version,
        list,
        query || xml,
        help_gpu,
        help_apps,
        query_gpu.is_some(),
        query_apps.is_some(),
    ];
    if commands.iter().filter(|&&c| c).count() > 1 {
        return Err(invalid());
    }
    let csv_query = query_gpu.is_some() || query_apps.is_some();
    if (format.is_some() && !csv_query) || (display.is_some() && !(query || xml)) {
        return Err(invalid());
    }
    o.command = if help {
        Command::Help
    } else if version {
        Command::Version
    } else if list {
        Command::List
    } else if help_gpu {
        Command::HelpQueryGpu
    } else if help_apps {
        Command::HelpQueryApps
    } else if let Some(q) = &query_gpu {
        Command::QueryGpu(columns(GPU_FIELDS, q)?)
    } else if let Some(q) = &query_apps {
        Command::QueryApps(columns(APP_FIELDS, q)?)
    } else if query || xml {
        let display = match display {
            None => None,
            Some(d) => Some(sections(&d)?),
        };
        Command::Query { xml, display }
    } else {
        Command::Table
    };
    Ok(o)
}

/// `-d`'s sections nvidia-smi knows (`nvidia-smi -h`); those davinci has nothing for show
/// nothing, as on a GPU that does not support them.
pub(crate) const SECTIONS: &[&str] = &[
    "MEMORY",
    "UTILIZATION",
    "ECC",
    "TEMPERATURE",
    "POWER",
    "CLOCK",
    "COMPUTE",
    "PIDS",
    "PERFORMANCE",
    "SUPPORTED_CLOCKS",
    "PAGE_RETIREMENT",
    "ACCOUNTING",
    "ENCODER_STATS",
    "SUPPORTED_GPU_TARGET_TEMP",
    "VOLTAGE",
    "FBC_STATS",
    "ROW_REMAPPER",
    "GSP_FIRMWARE_VERSION",
    "POWER_SMOOTHING",
    "POWER_PROFILES",
];

fn sections(d: &str) -> Result<Vec<String>, Out> {
    let mut v = Vec::new();
    for s in d.split(',').map(|s| s.trim().to_ascii_uppercase()) {
        if !SECTIONS.contains(&s.as_str()) {
            return Err(invalid());
        }
        v.push(s);
    }
    Ok(v)
}
