//! Plain `nvidia-smi`: the summary table, column for column as in
//! `tests/nvidia-smi-reference/table.txt` (a row per GPU, then the processes).
#![forbid(unsafe_code)]

use std::time::SystemTime;

use super::gpu::{Ctx, Gpu};
use super::{apps, text};
use crate::output::printable;

const RULE: &str =
    "+-----------------------------------------------------------------------------------------+\n";
const SPLIT: &str =
    "+-----------------------------------------+------------------------+----------------------+\n";

/// `s` cut to `width` characters, its end replaced by `...` when cut (`tail`: keep the end
/// and cut the start, as nvidia-smi does with process names).
fn fit(s: &str, width: usize, tail: bool) -> String {
    let s = printable(s);
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= width {
        return s;
    }
    let keep = width.saturating_sub(3);
    if tail {
        format!(
            "...{}",
            chars[chars.len() - keep..].iter().collect::<String>()
        )
    } else {
        format!("{}...", chars[..keep].iter().collect::<String>())
    }
}

/// `v` or `N/A`.
fn or_na(v: Option<String>) -> String {
    v.unwrap_or_else(|| "N/A".into())
}

/// The three lines of one GPU.
pub(crate) fn gpu_rows(g: &Gpu, ctx: &Ctx) -> String {
    let v = |n: &str| g.value(n, ctx);
    let name = or_na(v("name"));
    // `69.85` W as the table shows it: whole watts.
    let watts = |n: &str| v(n).map(|w| format!("{}W", w.split('.').next().unwrap_or(&w)));
    let compute = match v("compute_mode").as_deref() {
        Some("Exclusive_Process") => "E. Process".to_string(),
        other => or_na(other.map(str::to_string)),
    };
    let mut s = format!(
        "|{:>4}  {:<31}{:<4}|{:>19} {:>3} |{:>21} |\n",
        g.index,
        fit(&name, 27, false),
        "On",
        or_na(g.bus_id()),
        "Off",
        "N/A"
    );
    s += &format!(
        "| {:>3}  {:>4}    {:<2}{:>16} / {:>5} |{:>11} / {:>9} |{:>8}{:>13} |\n",
        "N/A",
        or_na(v("temperature.gpu").map(|t| format!("{t}C"))),
        or_na(v("pstate")),
        or_na(watts("power.draw")),
        or_na(watts("power.limit")),
        format!("{}MiB", or_na(v("memory.used"))),
        format!("{}MiB", or_na(v("memory.total"))),
        or_na(v("utilization.gpu").map(|u| format!("{u}%"))),
        compute,
    );
    s += &format!("|{:41}|{:24}|{:>21} |\n", "", "", "N/A");
    s
}

/// The table: the time, the driver line, a row per GPU, the processes.
pub(crate) fn table(gpus: &[Gpu], ctx: &Ctx) -> String {
    let driver = gpus
        .first()
        .and_then(|g| g.extras.driver_release.clone())
        .unwrap_or_else(|| "N/A".into());
    let mut s = format!("{:<31}\n", text::ctime(SystemTime::now()));
    s += RULE;
    s += &format!(
        "| NVIDIA-SMI {:<23}Driver Version: {:<15}CUDA Version: {:<9}|\n",
        fit(env!("CARGO_PKG_VERSION"), 22, false),
        fit(&driver, 14, false),
        "N/A"
    );
    s += SPLIT;
    s += "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n";
    s += "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n";
    s += "|                                         |                        |               MIG M. |\n";
    s += "|=========================================+========================+======================|\n";
    for g in gpus {
        s += &gpu_rows(g, ctx);
        s += SPLIT;
    }
    s += "\n";
    s += RULE;
    s += "| Processes:                                                                              |\n";
    s += "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n";
    s += "|        ID   ID                                                               Usage      |\n";
    s += "|=========================================================================================|\n";
    let mut any = false;
    for g in gpus {
        for a in apps(g) {
            any = true;
            s += &process_row(g.index, a.pid, &a.name, a.memory_bytes);
        }
    }
    if !any {
        s += &format!("|  {:<87}|\n", "No running processes found");
    }
    s += RULE;
    s
}

/// One line of the process table.
pub(crate) fn process_row(index: u32, pid: u32, name: &str, bytes: u64) -> String {
    format!(
        "|{:>5}   {:>3}  {:>3}{:>16}{:>7}   {:<36}{:>10} |\n",
        index,
        "N/A",
        "N/A",
        pid,
        "C",
        fit(name, 36, true),
        format!("{}MiB", crate::query::whole_mib(bytes))
    )
}
