//! `top`'s screen: a title line, the devices' table, the processes' table and (live) a line
//! of keys, drawn with ratatui's widgets ([`draw`]); and the same frame drawn into a buffer
//! and printed as text ([`text`]), what `top --once` shows.
#![forbid(unsafe_code)]

use ratatui::backend::TestBackend;
use ratatui::buffer::{Buffer, CellWidth};
use ratatui::layout::{Alignment, Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Terminal;

use super::sample::{DevFigures, DevRow, Frame, ProcRow, SortKey};
use crate::commands::short_container;
use crate::output::printable;

/// The keys, on the last line of the live screen.
pub(crate) const KEYS: &str =
    "q quit  s/> next sort column  < previous  m memory  t tasks/s  u util  p pid  r reverse  Up/Down scroll";

/// Rows the frame needs besides one per device and one per process: the title, and each
/// table's borders and header.
const CHROME: usize = 1 + 3 + 3;

/// Rows a frame of `f` needs to show every device and process (at least one row for an
/// empty process table); `keys`: and the line of keys.
pub(crate) fn height_for(f: &Frame, keys: bool) -> usize {
    CHROME + f.devices.len() + f.procs.len().max(1) + usize::from(keys)
}

/// Draws `f` on `frame`'s whole area; `state` scrolls the processes; `keys`: the line of
/// keys at the bottom.
pub(crate) fn draw(frame: &mut ratatui::Frame, f: &Frame, state: &mut TableState, keys: bool) {
    let dev_rows = u16::try_from(f.devices.len() + 3).unwrap_or(u16::MAX);
    let [title, devs, procs, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(dev_rows),
        Constraint::Min(3),
        Constraint::Length(u16::from(keys)),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(title_line(f)), title);
    let bars = devs.width.saturating_sub(2) >= DEV_WIDTH;
    frame.render_widget(devices_table(f, bars), devs);
    let block = Block::default().borders(Borders::ALL).title(" Processes ");
    if f.procs.is_empty() {
        let none = "No processes with the device open (an admin sees every process; \
                    anyone else only their own)";
        frame.render_widget(
            Paragraph::new(none).wrap(Wrap { trim: true }).block(block),
            procs,
        );
    } else {
        let inner = procs.width.saturating_sub(2);
        frame.render_stateful_widget(procs_table(f, inner).block(block), procs, state);
    }
    if keys {
        frame.render_widget(
            Paragraph::new(KEYS).style(Style::default().add_modifier(Modifier::REVERSED)),
            foot,
        );
    }
}

/// `f` drawn `width` columns wide and `height` rows high (default [`height_for`]), as text:
/// each row with its trailing blanks trimmed, the blank rows at the end left out.
pub(crate) fn text(f: &Frame, width: u16, height: Option<u16>) -> String {
    let h = height.unwrap_or_else(|| u16::try_from(height_for(f, false)).unwrap_or(u16::MAX));
    // A test backend cannot fail (its error type is `Infallible`).
    let Ok(mut term) = Terminal::new(TestBackend::new(width, h));
    let mut state = TableState::default();
    let Ok(_) = term.draw(|fr| draw(fr, f, &mut state, false));
    buffer_text(term.backend().buffer())
}

/// A buffer's rows as text: the symbols of its cells (a cell hidden by a wide symbol
/// before it left out), trailing blanks trimmed, no blank rows at the end.
pub(crate) fn buffer_text(b: &Buffer) -> String {
    let width = usize::from(b.area.width.max(1));
    let mut lines: Vec<String> = b
        .content
        .chunks(width)
        .map(|row| {
            let mut s = String::new();
            let mut skip: u16 = 0;
            for c in row {
                if skip == 0 {
                    s.push_str(c.symbol());
                }
                skip = skip.max(c.cell_width()).saturating_sub(1);
            }
            s.trim_end().to_string()
        })
        .collect();
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// The title: when, how many, over how long, sorted how.
fn title_line(f: &Frame) -> Line<'static> {
    let rates = match f.interval_s {
        Some(s) => format!("rates over {s:.2} s"),
        None => "rates after the next sample".to_string(),
    };
    let dir = if f.sort.descending() { "▼" } else { "▲" };
    Line::from(format!(
        "davinci-smi top  {} UTC  {} device(s), {} process(es), {rates}, sorted by {} {dir}",
        // The time of day of `YYYY-MM-DDTHH:MM:SS.mmmZ`.
        f.timestamp.get(11..19).unwrap_or(&f.timestamp),
        f.devices.len(),
        f.procs.len(),
        f.sort.key.name()
    ))
    .style(Style::default().add_modifier(Modifier::BOLD))
}

/// `[|||||   ]`: `frac` of `width` bars.
pub(crate) fn bar(frac: f64, width: usize) -> String {
    let n = ((frac.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("[{}{}]", "|".repeat(n), " ".repeat(width - n))
}

/// Bytes in the largest binary unit they fill, one decimal: `512 B`, `12.0 KiB`, `1.5 GiB`.
pub(crate) fn size_text(b: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
    for (shift, unit) in UNITS {
        if b >= 1u64 << shift {
            return format!("{:.1} {unit}", b as f64 / (1u64 << shift) as f64);
        }
    }
    format!("{b} B")
}

fn right(s: String) -> Cell<'static> {
    Cell::from(Line::from(s).alignment(Alignment::Right))
}

fn dash<T: ToString>(x: Option<T>) -> String {
    x.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn id(x: Option<u32>) -> String {
    dash(x)
}

/// `s` cut to `w` characters and padded to them.
fn fit(s: &str, w: usize) -> String {
    format!("{:<w$}", s.chars().take(w).collect::<String>())
}

/// The devices' columns and their widths with bars (the narrow widths: without).
const DEV_COLUMNS: [(&str, usize, usize); 10] = [
    ("DEV", 3, 3),
    ("NAME", 16, 12),
    ("UTIL", 15, 4),
    ("MEMORY", 30, 19),
    ("TEMP", 5, 5),
    ("POWER", 12, 12),
    ("HEALTH", 8, 8),
    ("MODE", 9, 9),
    ("PROCS", 5, 5),
    ("ERRORS", 6, 6),
];

/// The columns a device row needs with bars: narrower, they are left out.
const DEV_WIDTH: u16 = {
    let (mut i, mut total) = (0, DEV_COLUMNS.len() - 1);
    while i < DEV_COLUMNS.len() {
        total += DEV_COLUMNS[i].1;
        i += 1;
    }
    total as u16
};

/// `cells` in the devices' columns (the figures at the end right-aligned).
fn dev_line(cells: [String; 10], bars: bool) -> String {
    let mut out = String::new();
    for (i, (c, (_, wide, narrow))) in cells.iter().zip(DEV_COLUMNS).enumerate() {
        let w = if bars { wide } else { narrow };
        if i > 0 {
            out.push(' ');
        }
        if i >= 8 {
            out += &format!("{:>w$}", c.chars().take(w).collect::<String>());
        } else {
            out += &fit(c, w);
        }
    }
    out
}

/// The devices: utilization and memory (as bars where `bars`), sensors where reported; a
/// device that failed, with why, the whole width.
fn devices_table(f: &Frame, bars: bool) -> Paragraph<'static> {
    let head = dev_line(DEV_COLUMNS.map(|(h, _, _)| h.to_string()), bars);
    let mut lines = vec![Line::from(head)
        .style(Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED))];
    lines.extend(f.devices.iter().map(|d| Line::from(device_row(d, bars))));
    Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" Devices "))
}

fn device_row(d: &DevRow, bars: bool) -> String {
    let g: &DevFigures = match &d.state {
        Ok(g) => g,
        Err(e) => {
            return format!(
                "{} unreachable: {}: {}",
                fit(&id(d.id), 3),
                printable(&d.path),
                e.message
            )
        }
    };
    let name = g
        .extras
        .name
        .clone()
        .map(|n| printable(&n))
        .unwrap_or_else(|| format!("davinci{}", id(d.id)));
    let util = match (g.util, bars) {
        (Some(p), true) => format!("{} {p:>3}%", bar(f64::from(p) / 100.0, 8)),
        (None, true) => format!("{}    -", bar(0.0, 8)),
        (p, false) => p.map_or_else(|| "-".into(), |p| format!("{p}%")),
    };
    let (used, total) = (g.info.memory_used, g.info.memory_size);
    let frac = if total == 0 {
        0.0
    } else {
        used as f64 / total as f64
    };
    let mut memory = format!("{}/{}", size_text(used), size_text(total));
    if bars {
        memory = format!("{} {memory}", bar(frac, 8));
    }
    let s = g.extras.sensors;
    let temp = s.map_or_else(|| "-".into(), |s| format!("{}°C", s.temperature_c()));
    let power = s.map_or_else(
        || "-".into(),
        |s| {
            let w = f64::from(s.power_mw) / 1000.0;
            if s.power_limit_mw > 0 {
                format!("{w:.1}/{:.0} W", f64::from(s.power_limit_mw) / 1000.0)
            } else {
                format!("{w:.1} W")
            }
        },
    );
    dev_line(
        [
            id(d.id),
            name,
            util,
            memory,
            temp,
            power,
            g.extras.health.clone().unwrap_or_else(|| "-".into()),
            g.share_mode.unwrap_or("-").to_string(),
            g.info.clients.to_string(),
            dash(g.stream_errors),
        ],
        bars,
    )
}

/// The process table's columns: heading, width, the sort key it shows (if sortable), and
/// whether it is a figure (right-aligned).
const PROC_COLUMNS: [(&str, u16, Option<SortKey>, bool); 10] = [
    ("DEV", 3, Some(SortKey::Device), false),
    ("PID", 8, Some(SortKey::Pid), true),
    ("USER", 10, Some(SortKey::User), false),
    ("CONTAINER", 12, Some(SortKey::Container), false),
    ("PROCESS", 15, Some(SortKey::Name), false),
    ("MEMORY", 11, Some(SortKey::Memory), true),
    ("UTIL", 5, Some(SortKey::Util), true),
    ("TASKS/S", 10, Some(SortKey::Tasks), true),
    ("STREAMS", 8, Some(SortKey::Streams), true),
    ("ERRORS", 6, None, true),
];

/// The process columns' widths in `width` columns: as [`PROC_COLUMNS`] says where they fit,
/// else the figures' spare room goes first, then the names are cut (process, container,
/// user).
pub(crate) fn proc_widths(width: u16) -> [u16; 10] {
    let mut w = PROC_COLUMNS.map(|(_, w, _, _)| w);
    let gaps = (w.len() - 1) as u16;
    // (column, narrowest) in the order they give way.
    const SHRINK: [(usize, u16); 10] = [
        (1, 7),
        (5, 9),
        (7, 8),
        (8, 7),
        (4, 8),
        (3, 8),
        (2, 8),
        (2, 6),
        (4, 4),
        (3, 4),
    ];
    for (col, min) in SHRINK {
        let total: u16 = w.iter().sum::<u16>() + gaps;
        let over = total.saturating_sub(width);
        if over == 0 {
            break;
        }
        w[col] = w[col].saturating_sub(over).max(min.min(w[col]));
    }
    w
}

/// Tasks per second as the table shows it: one decimal below 1000.
pub(crate) fn rate_text(r: Option<f64>) -> String {
    match r {
        Some(r) if r < 1000.0 => format!("{r:.1}"),
        Some(r) => format!("{r:.0}"),
        None => "-".into(),
    }
}

/// The processes, the sorted column's heading marked with its direction.
fn procs_table(f: &Frame, width: u16) -> Table<'static> {
    let dir = if f.sort.descending() { "▼" } else { "▲" };
    let head = Row::new(PROC_COLUMNS.iter().map(|(h, _, key, num)| {
        let h = if *key == Some(f.sort.key) {
            format!("{h}{dir}")
        } else {
            h.to_string()
        };
        if *num {
            right(h)
        } else {
            Cell::from(h)
        }
    }))
    .style(Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let widths = proc_widths(width).map(Constraint::Length);
    Table::new(f.procs.iter().map(proc_row), widths)
        .header(head)
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
}

fn proc_row(p: &ProcRow) -> Row<'static> {
    let c = &p.client;
    let name = crate::commands::dash_if_empty(c.comm());
    Row::new(vec![
        Cell::from(id(p.dev)),
        right(c.pid.to_string()),
        Cell::from(p.user.clone()),
        Cell::from(short_container(c.container_id().unwrap_or(""))),
        Cell::from(name),
        right(size_text(c.memory_bytes)),
        right(p.util.map_or_else(|| "-".into(), |u| format!("{u}%"))),
        right(rate_text(p.tasks_per_s)),
        right(c.streams.to_string()),
        right(c.stream_errors.to_string()),
    ])
}
