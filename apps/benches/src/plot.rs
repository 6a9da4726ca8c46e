//! `davinci-bench plot FILE.json`: an SVG bar chart of the throughput rows of a report,
//! throughput against batch size (ours, the two-ring pipeline, io_uring) and against the
//! number of streams and client processes (ours), on a logarithmic axis.
#![forbid(unsafe_code)]

use std::fmt::Write;

use crate::report::{self, Report};

/// One group of bars: a label under it and (series, row name) pairs.
struct Group {
    label: &'static str,
    bars: &'static [(&'static str, &'static str)],
}

struct Panel {
    title: &'static str,
    groups: &'static [Group],
}

const OURS: &str = "ours";
const TWO_RING: &str = "two-ring SPSC";
const URING: &str = "io_uring NOP";

const PANELS: &[Panel] = &[
    Panel {
        title: "Streaming NOPs vs batch size (one stream)",
        groups: &[
            Group {
                label: "batch 1",
                bars: &[
                    (OURS, "ours/stream/batch1"),
                    (TWO_RING, "baseline/two-ring/batch1"),
                    (URING, "baseline/io_uring/batch1"),
                ],
            },
            Group {
                label: "batch 64",
                bars: &[
                    (OURS, "ours/stream/batch64"),
                    (TWO_RING, "baseline/two-ring/batch64"),
                    (URING, "baseline/io_uring/batch64"),
                ],
            },
        ],
    },
    Panel {
        title: "Streams (batch 64, one thread) and client processes (davinci-mockd)",
        groups: &[
            Group {
                label: "1 stream",
                bars: &[(OURS, "ours/streams/1")],
            },
            Group {
                label: "4 streams",
                bars: &[(OURS, "ours/streams/4")],
            },
            Group {
                label: "16 streams",
                bars: &[(OURS, "ours/streams/16")],
            },
            Group {
                label: "1 process",
                bars: &[(OURS, "ours/mockd/procs1")],
            },
            Group {
                label: "4 processes",
                bars: &[(OURS, "ours/mockd/procs4")],
            },
        ],
    },
];

fn colour(series: &str) -> &'static str {
    match series {
        OURS => "#1f77b4",
        TWO_RING => "#ff7f0e",
        _ => "#2ca02c",
    }
}

/// The label of 10^`d`: `1`, `10`, `100`, `1k`, ..., `100M`, `1G`.
fn decade(d: f64) -> String {
    let d = d.max(0.0) as u32;
    let (suffix, rest) = match d {
        0..=2 => ("", d),
        3..=5 => ("k", d - 3),
        6..=8 => ("M", d - 6),
        _ => ("G", d.saturating_sub(9)),
    };
    format!("{}{suffix}", 10u64.saturating_pow(rest))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The SVG chart of `report`'s throughput rows. Rows it does not have (filtered, skipped)
/// are drawn as an empty slot labelled "n/a".
pub fn svg(report: &Report) -> String {
    let value = |name: &str| {
        report
            .rows
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| r.value)
            .filter(|v| *v > 0.0 && v.is_finite())
    };
    let all: Vec<f64> = PANELS
        .iter()
        .flat_map(|p| p.groups.iter())
        .flat_map(|g| g.bars.iter())
        .filter_map(|(_, n)| value(n))
        .collect();
    // Decades covering every value (at least 1e3..1e6).
    let lo = all
        .iter()
        .fold(f64::INFINITY, |a, &b| a.min(b))
        .min(1e6)
        .log10()
        .floor()
        .max(0.0);
    let hi = all
        .iter()
        .fold(0.0f64, |a, &b| a.max(b))
        .max(1e3)
        .log10()
        .ceil()
        .max(lo + 1.0);

    let (width, panel_h, top, left, right) = (900.0, 300.0, 70.0, 80.0, 20.0);
    let gap = 70.0;
    let height = top + PANELS.len() as f64 * (panel_h + gap) - gap + 30.0;
    let plot_w = width - left - right;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="{width}" height="{height}" fill="white"/>"#
    );
    let m = &report.machine;
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="22" font-size="16" font-weight="bold">davinci-bench: throughput (tasks/s, log scale){}</text>"#,
        if report.contended { ", contended" } else { "" }
    );
    let _ = writeln!(
        s,
        r##"<text x="{left}" y="40" fill="#555">{} CPUs, {}, kernel {}{}</text>"##,
        m.cpus,
        esc(&m.cpu_model),
        esc(&m.kernel),
        if report.quick { ", quick windows" } else { "" }
    );
    // Legend.
    for (i, series) in [OURS, TWO_RING, URING].iter().enumerate() {
        let x = left + 460.0 + i as f64 * 130.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="50" width="12" height="12" fill="{}"/><text x="{}" y="60">{}</text>"#,
            colour(series),
            x + 16.0,
            esc(series)
        );
    }
    for (pi, p) in PANELS.iter().enumerate() {
        let y0 = top + pi as f64 * (panel_h + gap) + 20.0;
        let h = panel_h - 40.0;
        let y_of = |v: f64| y0 + h - (v.log10() - lo) / (hi - lo) * h;
        let _ = writeln!(
            s,
            r#"<text x="{left}" y="{}" font-weight="bold">{}</text>"#,
            y0 - 6.0,
            esc(p.title)
        );
        // Decade grid lines and labels.
        let mut d = lo;
        while d <= hi + 1e-9 {
            let y = y_of(10f64.powf(d));
            let _ = writeln!(
                s,
                r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
                left + plot_w,
                left - 6.0,
                y + 4.0,
                decade(d)
            );
            d += 1.0;
        }
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{left}" y1="{y0}" y2="{}" stroke="#333"/><line x1="{left}" x2="{}" y1="{}" y2="{}" stroke="#333"/>"##,
            y0 + h,
            left + plot_w,
            y0 + h,
            y0 + h
        );
        let group_w = plot_w / p.groups.len() as f64;
        for (gi, g) in p.groups.iter().enumerate() {
            let gx = left + gi as f64 * group_w;
            let bar_w = (group_w * 0.7 / g.bars.len() as f64).min(60.0);
            let total = bar_w * g.bars.len() as f64;
            let x_start = gx + (group_w - total) / 2.0;
            for (bi, (series, name)) in g.bars.iter().enumerate() {
                let x = x_start + bi as f64 * bar_w;
                let cx = x + bar_w / 2.0;
                match value(name) {
                    Some(v) => {
                        let y = y_of(v);
                        let _ = writeln!(
                            s,
                            r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {v:.0} tasks/s</title></rect><text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#,
                            x + 2.0,
                            bar_w - 4.0,
                            (y0 + h - y).max(0.0),
                            colour(series),
                            esc(name),
                            y - 4.0,
                            report::fmt_value(v, "/s")
                        );
                    }
                    None => {
                        let _ = writeln!(
                            s,
                            r##"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="11" fill="#999">n/a</text>"##,
                            y0 + h - 4.0
                        );
                    }
                }
            }
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                gx + group_w / 2.0,
                y0 + h + 18.0,
                esc(g.label)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{evaluate, Machine, Outcome, RowSpec, SCHEMA};

    #[test]
    fn svg_has_a_bar_per_row_and_marks_missing_ones() {
        let rows = evaluate(
            [
                ("ours/stream/batch1", 5e6),
                ("ours/stream/batch64", 5e7),
                ("baseline/two-ring/batch64", 2e8),
                ("ours/streams/4", 4e7),
            ]
            .iter()
            .map(|(n, v)| {
                (
                    RowSpec {
                        name: n.to_string(),
                        unit: "tasks/s".into(),
                        baseline: None,
                        target: None,
                    },
                    Outcome::Value(*v, None),
                )
            })
            .collect(),
        );
        let r = Report {
            schema: SCHEMA.into(),
            machine: Machine {
                cpus: 2,
                kernel: "k".into(),
                cpu_model: "<cpu>".into(),
                load_1min: None,
            },
            quick: false,
            contended: false,
            rows,
        };
        let s = svg(&r);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(
            s.matches("<rect x=").count(),
            4 + 3,
            "4 bars + 3 legend boxes"
        );
        assert!(s.contains("&lt;cpu&gt;"));
        assert!(s.contains("n/a"));
        assert!(s.contains("50.0M"));
        assert!(s.contains(">100M<") && s.contains(">1M<"), "decade labels");
    }

    #[test]
    fn decade_labels() {
        let l: Vec<String> = (0..11).map(|d| decade(d as f64)).collect();
        assert_eq!(
            l,
            ["1", "10", "100", "1k", "10k", "100k", "1M", "10M", "100M", "1G", "10G"]
        );
    }
}
