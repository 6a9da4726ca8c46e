//! nvidia-smi mode: `davinci-smi` run as `nvidia-smi` (a link of that name, or `davinci-smi
//! --nvidia-smi ...`) answers nvidia-smi's query options in its exact output shapes, so that
//! programs that read GPUs through nvidia-smi (GPUtil, nvsmi, Lightning's GPU stats, device-smi,
//! accelerate, exporters) read davinci devices unchanged. Samples of the real shapes, with
//! their sources, are in `operators/smi/tests/nvidia-smi-reference/`.
//!
//! Supported: `--query-gpu` (every property of nvidia-smi's `--help-query-gpu`, [`fields`]),
//! `--query-compute-apps`, `--format=csv[,noheader][,nounits]`, `-i/--id` (index, UUID or PCI
//! bus id, comma separated), `-L/--list-gpus`, `-q` (`-d` sections) and `-x`, `-l/--loop`,
//! `-lms/--loop-ms`, `-f/--filename`, plain `nvidia-smi` (the summary table), `-h`,
//! `--help-query-gpu`, `--help-query-compute-apps`, `--version`. A property no davinci device
//! has a source for is `[N/A]`, never an invented number ([`gpu::Gpu::value`]).
#![forbid(unsafe_code)]

use std::io::Write;
use std::time::Duration;

use davinci_ops::discover::Discovery;
use davinci_uapi::ShareMode;

use crate::access::{Opener, Target};
use crate::commands::error_line;
use crate::error::{combine, SmiError};
use crate::extras::{device_extras, fill_busy};
use crate::output::printable;
use crate::plan::{find, open_targets};

mod args;
mod fields;
mod gpu;
mod sources;
mod table;
mod text;

use args::{Command, Opts};
use fields::{APP_FIELDS, F, GPU_FIELDS};
use gpu::{Ctx, Gpu};

/// The flag that turns nvidia-smi mode on under another program name.
pub(crate) const FLAG: &str = "--nvidia-smi";

/// nvidia-smi's exit statuses (its documented return values).
pub(crate) mod status {
    /// Success.
    pub(crate) const OK: i32 = 0;
    /// A supplied argument or flag is invalid.
    pub(crate) const INVALID_ARGUMENT: i32 = 2;
    /// The query was unsuccessful: no (such) device.
    pub(crate) const NOT_FOUND: i32 = 6;
}

/// nvidia-smi's answer to an unknown option or a bad combination (on stdout, status 2).
pub(crate) const INVALID: &str =
    "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n";

/// nvidia-smi's answer when there is no device (or none `-i` names): stdout, status 6.
pub(crate) const NO_DEVICES: &str = "No devices were found\n";

/// `Some(argv)` for nvidia-smi mode: the program is called `nvidia-smi`, or its first
/// argument is [`FLAG`] (then dropped).
pub(crate) fn nvidia_args(args: &[String]) -> Option<Vec<String>> {
    crate::cli::mode_args(args, "nvidia-smi", FLAG)
}

/// What one round printed, and its status.
pub(crate) struct Out {
    pub(crate) out: String,
    pub(crate) err: String,
    pub(crate) code: i32,
}

impl Out {
    fn stdout(out: impl Into<String>, code: i32) -> Out {
        Out {
            out: out.into(),
            err: String::new(),
            code,
        }
    }
}

/// Runs nvidia-smi mode on `args` (`args[0]` is `nvidia-smi`); `sleep` is the pause between
/// the rounds of `-l`/`-lms`.
pub(crate) fn run(
    args: &[String],
    disc: &Discovery,
    opener: &dyn Opener,
    out: &mut dyn Write,
    err: &mut dyn Write,
    sleep: &mut dyn FnMut(Duration),
) -> i32 {
    let opts = match args::parse(&args[1..]) {
        Ok(o) => o,
        Err(r) => return emit(out, err, &r).unwrap_or(r.code),
    };
    let mut file;
    let out: &mut dyn Write = match &opts.filename {
        None => out,
        Some(path) => match std::fs::File::create(path) {
            Ok(f) => {
                file = f;
                &mut file
            }
            Err(e) => {
                let _ = writeln!(out, "Failed to open file {path}: {e}");
                return status::INVALID_ARGUMENT;
            }
        },
    };
    let mut round = 0u64;
    loop {
        let r = round_of(&opts, round == 0, disc, opener);
        round += 1;
        let Some(code) = emit(out, err, &r) else {
            // Nobody reads any more (`| head`): stop.
            return crate::exit::OTHER;
        };
        match opts.every {
            Some(every) if code == status::OK => sleep(every),
            _ => return code,
        }
    }
}

/// Writes a round's output; its status, or `None` when stdout is gone.
fn emit(out: &mut dyn Write, err: &mut dyn Write, r: &Out) -> Option<i32> {
    let wrote = out.write_all(r.out.as_bytes()).and_then(|()| out.flush());
    let _ = err.write_all(r.err.as_bytes());
    wrote.ok().map(|()| r.code)
}

/// One round of the command. `first`: the first round (the CSV header is printed once).
fn round_of(opts: &Opts, first: bool, disc: &Discovery, opener: &dyn Opener) -> Out {
    match &opts.command {
        Command::Help => return Out::stdout(text::help(), status::OK),
        Command::HelpQueryGpu => {
            return Out::stdout(text::help_fields("--query-gpu", GPU_FIELDS), status::OK)
        }
        Command::HelpQueryApps => {
            return Out::stdout(
                text::help_fields("--query-compute-apps", APP_FIELDS),
                status::OK,
            )
        }
        _ => {}
    }
    let g = crate::cli::Global {
        device: opts.device.clone(),
        socket_dir: opts.socket_dir.clone(),
        json: false,
    };
    let found = davinci_ops::discover::discover(&g.device, g.socket_dir.as_deref(), disc);
    // Not with -x: XML readers such as telegraf's take stderr with stdout, and a warning
    // about a file discovery skipped is no reason to break their document.
    let xml = matches!(opts.command, Command::Query { xml: true, .. });
    let mut err: String = davinci_ops::discover::ignored_warnings(&found)
        .iter()
        .filter(|_| !xml)
        .map(|w| format!("davinci-smi: {}\n", printable(w)))
        .collect();
    let targets = match find(found).and_then(|e| open_targets(e, None, &g, disc, opener)) {
        Ok(t) => t,
        Err(e) => {
            if matches!(opts.command, Command::Version) {
                return Out::stdout(text::version(None), status::OK);
            }
            err += &format!("davinci-smi: {}\n", e.message);
            return Out {
                out: NO_DEVICES.into(),
                err,
                code: status::NOT_FOUND,
            };
        }
    };
    let count = targets.len();
    let Some(targets) = select(targets, opts.ids.as_deref()) else {
        return Out {
            out: NO_DEVICES.into(),
            err,
            code: status::NOT_FOUND,
        };
    };
    let busy = opts.command.shows_utilization();
    let (gpus, errs, code) = ask_all(&targets, busy);
    err += &errs;
    let ctx = Ctx {
        timestamp: text::csv_timestamp(std::time::SystemTime::now()),
        count,
    };
    let mut r = match &opts.command {
        Command::Version => Out::stdout(text::version(gpus.first()), status::OK),
        Command::List => Out::stdout(text::list(&gpus), code),
        Command::QueryGpu(cols) => Out::stdout(
            csv(cols, opts, first, &gpus, |g, f| g.value(f.0, &ctx)),
            code,
        ),
        Command::QueryApps(cols) => Out::stdout(apps_csv(cols, opts, first, &gpus, &ctx), code),
        Command::Query { xml, display } => {
            let body = if *xml {
                text::xml(&gpus, &ctx)
            } else {
                text::query(&gpus, &ctx, display.as_deref())
            };
            Out::stdout(body, code)
        }
        Command::Table => Out::stdout(table::table(&gpus, &ctx), code),
        Command::Help | Command::HelpQueryGpu | Command::HelpQueryApps => unreachable!(),
    };
    r.err = err;
    r
}

/// The targets `-i` names (index, UUID with or without `GPU-`, or PCI bus id; comma
/// separated), in discovery order; `None` when one of the names matches no device.
fn select(targets: Vec<Target>, ids: Option<&str>) -> Option<Vec<Target>> {
    let Some(ids) = ids else {
        return Some(targets);
    };
    let wanted: Vec<&str> = ids
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let mut keep = vec![false; targets.len()];
    for w in &wanted {
        let mut hit = false;
        for (i, t) in targets.iter().enumerate() {
            if matches_id(t, w) {
                keep[i] = true;
                hit = true;
            }
        }
        if !hit {
            return None;
        }
    }
    Some(
        targets
            .into_iter()
            .zip(keep)
            .filter_map(|(t, k)| k.then_some(t))
            .collect(),
    )
}

/// Whether `-i`'s `w` names target `t`.
fn matches_id(t: &Target, w: &str) -> bool {
    if let Ok(n) = w.parse::<u32>() {
        return t.entry.id == Some(n);
    }
    let Ok(dev) = &t.dev else {
        return false;
    };
    let Ok(info) = dev.info() else {
        return false;
    };
    let e = device_extras(dev.as_ref(), &info);
    let uuid = w
        .get(..4)
        .filter(|p| p.eq_ignore_ascii_case("GPU-"))
        .map_or(w, |_| &w[4..]);
    if e.uuid
        .as_deref()
        .is_some_and(|u| u.eq_ignore_ascii_case(uuid))
    {
        return true;
    }
    let bus = gpu::parse_bus(w);
    bus.is_some() && bus == e.bus_id.as_deref().and_then(gpu::parse_bus)
}

/// A target's open (if it opened) and what it said.
type Asked<'a> = (
    Option<&'a dyn crate::access::DeviceAccess>,
    Result<Gpu, SmiError>,
);

/// Asks each target; the devices that answered, the stderr lines of those that did not, and
/// the status (0, or davinci-smi's status for the failures). `busy`: measure utilization.
fn ask_all(targets: &[Target], busy: bool) -> (Vec<Gpu>, String, i32) {
    let mut asked: Vec<Asked> = Vec::new();
    for t in targets {
        let r = t.dev.as_ref().map_err(Clone::clone).and_then(|d| {
            let info = d.info()?;
            Ok(Gpu {
                index: t.entry.id.unwrap_or(info.device_id),
                mode: ShareMode::from_u32(info.share_mode),
                clients: d.clients().unwrap_or_default(),
                extras: device_extras(d.as_ref(), &info),
                info,
            })
        });
        asked.push((t.dev.as_ref().ok().map(|d| d.as_ref()), r));
    }
    if busy {
        fill_busy(
            asked
                .iter_mut()
                .filter_map(|(d, r)| Some(((*d)?, &mut r.as_mut().ok()?.extras)))
                .collect(),
        );
    }
    let mut err = String::new();
    let mut failures = Vec::new();
    let mut gpus = Vec::new();
    for (t, (_, r)) in targets.iter().zip(asked) {
        match r {
            Ok(g) => {
                gpus.push(g);
                failures.push(None);
            }
            Err(e) => {
                err += &error_line(t.entry.id, &e);
                failures.push(Some(e));
            }
        }
    }
    let outcomes: Vec<Option<&SmiError>> = failures.iter().map(Option::as_ref).collect();
    (gpus, err, combine(&outcomes))
}

/// One CSV cell as nvidia-smi prints it: the value and its unit (`45 %`), the value alone
/// with `nounits`, `[N/A]` when there is none.
fn cell(v: Option<String>, f: &F, units: bool) -> String {
    match (v, f.2) {
        (None, _) => "[N/A]".into(),
        (Some(v), Some(u)) if units => format!("{} {u}", printable(&v)),
        (Some(v), _) => printable(&v),
    }
}

/// A table as nvidia-smi's CSV: the header (`name [unit]`, separated by `, `) unless
/// `noheader` or not the first round, then a line per row.
fn csv<R>(
    cols: &[&'static F],
    opts: &Opts,
    first: bool,
    rows: &[R],
    value: impl Fn(&R, &F) -> Option<String>,
) -> String {
    let mut s = String::new();
    if opts.header && first {
        s += &cols
            .iter()
            .map(|f| f.header())
            .collect::<Vec<_>>()
            .join(", ");
        s.push('\n');
    }
    for r in rows {
        let line: Vec<String> = cols
            .iter()
            .map(|f| cell(value(r, f), f, opts.units))
            .collect();
        s += &line.join(", ");
        s.push('\n');
    }
    s
}

/// A process using a device, as `--query-compute-apps` shows it: one row per process and
/// device (a process's several opens summed).
pub(crate) struct App<'a> {
    pub(crate) gpu: &'a Gpu,
    pub(crate) pid: u32,
    pub(crate) name: String,
    pub(crate) memory_bytes: u64,
}

/// The processes using `gpu`, in the order of their first open.
pub(crate) fn apps(gpu: &Gpu) -> Vec<App<'_>> {
    let mut v: Vec<App> = Vec::new();
    for c in &gpu.clients {
        match v.iter_mut().find(|a| a.pid == c.pid) {
            Some(a) => a.memory_bytes += c.memory_bytes,
            None => v.push(App {
                gpu,
                pid: c.pid,
                name: text::process_name(c.pid, c.comm()),
                memory_bytes: c.memory_bytes,
            }),
        }
    }
    v
}

fn apps_csv(cols: &[&'static F], opts: &Opts, first: bool, gpus: &[Gpu], ctx: &Ctx) -> String {
    let rows: Vec<App> = gpus.iter().flat_map(apps).collect();
    csv(cols, opts, first, &rows, |a, f| {
        Some(match f.0 {
            "timestamp" => ctx.timestamp.clone(),
            "gpu_name" => a.gpu.extras.name.clone()?,
            "gpu_bus_id" => a.gpu.bus_id()?,
            "gpu_uuid" => a.gpu.uuid()?,
            "pid" => a.pid.to_string(),
            "process_name" => a.name.clone(),
            "used_gpu_memory" => crate::query::whole_mib(a.memory_bytes),
            _ => return None,
        })
    })
}

#[cfg(test)]
mod shape_tests;
#[cfg(test)]
mod tests;
