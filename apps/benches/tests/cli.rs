//! The `davinci-bench` binary: usage, exit statuses, the JSON schema of a real (tiny) run and
//! the chart made from it. No timing is asserted.
#![forbid(unsafe_code)]

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_davinci-bench"))
        .args(args)
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("cannot run davinci-bench: {e}"),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_documents_the_schema_and_exit_statuses() {
    let o = bench(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let h = text(&o.stdout);
    for s in [
        "davinci-bench/v1",
        "--quick",
        "--contended",
        "--filter",
        "--json",
        "--mockd",
        "Exit status",
        "\"ratio\"",
        "\"met\"",
    ] {
        assert!(h.contains(s), "--help lacks {s}:\n{h}");
    }
    assert!(
        !h.lines().any(|l| l.trim_start().starts_with("client ")),
        "the internal subcommand is hidden:\n{h}"
    );
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["--no-such-option"][..],
        &["--filter", "no-row-has-this-name"],
        &["--mockd", "/nonexistent/davinci-mockd", "--filter", "ioctl"],
        &["plot", "/nonexistent/report.json"],
        &[
            "--json-out",
            "/nonexistent/dir/out.json",
            "--filter",
            "ioctl",
        ],
    ] {
        let o = bench(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(!text(&o.stderr).is_empty(), "{args:?} says why");
    }
}

#[test]
fn list_names_every_row() {
    let o = bench(&["--list"]);
    assert_eq!(o.status.code(), Some(0));
    let names = text(&o.stdout);
    for n in [
        "baseline/two-ring/batch64",
        "baseline/io_uring/batch1",
        "ours/stream/batch64",
        "ours/streams/16-min-share",
        "ours/mockd/procs4",
        "ours/doorbells/full-load",
    ] {
        assert!(names.lines().any(|l| l == n), "{n} missing:\n{names}");
    }
    let o = bench(&["--list", "--contended"]);
    assert!(text(&o.stdout).contains("ours/rtt/quiet-p50"));
}

#[test]
fn json_report_of_a_real_tiny_run_follows_the_schema_and_plots() {
    let o = bench(&["--quick", "--json", "--filter", "baseline/ioctl-floor"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("[1/1] baseline/ioctl-floor ..."),
        "progress on stderr: {}",
        text(&o.stderr)
    );
    let j: serde_json::Value = match serde_json::from_slice(&o.stdout) {
        Ok(j) => j,
        Err(e) => panic!("stdout is not JSON ({e}): {}", text(&o.stdout)),
    };
    assert_eq!(j["schema"], "davinci-bench/v1");
    assert!(j["machine"]["cpus"].as_u64().is_some_and(|n| n >= 1));
    assert!(j["machine"]["kernel"].is_string());
    assert!(j["machine"]["cpu_model"].is_string());
    assert_eq!(j["quick"], true);
    assert_eq!(j["contended"], false);
    let rows = j["rows"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 1, "{j}");
    let r = &rows[0];
    assert_eq!(r["name"], "baseline/ioctl-floor");
    assert!(r["value"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    assert_eq!(r["unit"], "calls/s");
    for k in ["baseline", "ratio", "target", "met"] {
        assert!(r[k].is_null(), "{k} of {r}");
    }
    assert_eq!(r["status"], "ok");

    let dir = std::env::temp_dir().join(format!("davinci-bench-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("r.json");
    std::fs::write(&file, &o.stdout).unwrap();
    let p = bench(&["plot", file.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(p.status.code(), Some(0), "{}", text(&p.stderr));
    let svg = text(&p.stdout);
    assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{svg}");
}

#[test]
fn table_prints_the_row_with_its_columns_and_json_out_writes_the_object() {
    let dir = std::env::temp_dir().join(format!("davinci-bench-tbl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("out.json");
    let o = bench(&[
        "--quick",
        "--filter",
        "baseline/ioctl-floor",
        "--json-out",
        file.to_str().unwrap(),
    ]);
    let saved = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let j: serde_json::Value = match serde_json::from_str(&saved) {
        Ok(j) => j,
        Err(e) => panic!("--json-out file is not JSON ({e}): {saved}"),
    };
    assert_eq!(j["schema"], "davinci-bench/v1");
    assert_eq!(j["rows"][0]["name"], "baseline/ioctl-floor");
    let t = text(&o.stdout);
    let header = t.lines().find(|l| l.starts_with("name")).unwrap_or("");
    for c in ["value", "unit", "baseline", "ratio", "target", "mark"] {
        assert!(header.contains(c), "{header}");
    }
    assert!(
        t.lines().any(|l| l.starts_with("baseline/ioctl-floor")),
        "{t}"
    );
}
