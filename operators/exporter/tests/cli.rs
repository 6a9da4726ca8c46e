//! The `davinci-exporter` binary alone, without devices (crate integration tests; the
//! exporter against real devices and a real Prometheus is `tests/tests/exporter.rs`): its help,
//! its refusals of bad options, and `--once` where no device exists.

use std::process::{Command, Output};

fn exporter(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_davinci-exporter"))
        .args(args)
        .env_remove("DAVINCI_DEVICE")
        .output()
        .expect("davinci-exporter runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_says_what_it_serves_and_exits_0() {
    let o = exporter(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert!(out.contains("Usage: davinci-exporter [OPTIONS]"), "{out}");
    assert!(out.contains("--read-timeout"), "{out}");
}

#[test]
fn bad_options_exit_2_and_say_why() {
    let o = exporter(&["--bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("unexpected argument '--bogus'"));
    // Durations use the one grammar of davinci-units, bounds named.
    let o = exporter(&["--read-timeout", "2h"]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("\"2h\" must be between 1ms and 1h"), "{err}");
    let o = exporter(&["--read-timeout", "fast"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("is not a duration"));
}

#[test]
fn once_without_devices_still_serves_the_families_and_says_where_it_looked() {
    let empty = std::env::temp_dir().join(format!("davinci-exporter-cli-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let o = exporter(&["--once", "--socket-dir", empty.to_str().unwrap()]);
    std::fs::remove_dir_all(&empty).unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("# TYPE davinci_device_up gauge"), "{out}");
    assert!(
        !out.contains("davinci_device_up{"),
        "no device, no sample: {out}"
    );
    let err = text(&o.stderr);
    assert!(
        err.contains("no devices found") && err.contains("--socket-dir"),
        "{err}"
    );
}
