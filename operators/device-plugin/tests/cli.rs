//! The `davinci-device-plugin` binary alone, without devices or a kubelet (crate integration
//! tests; the plugin against a kubelet stand-in and real devices is
//! `tests/tests/device_plugin.rs`): its help, its refusals of bad options, and `--list` where
//! no device exists.

use std::process::{Command, Output};

fn plugin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_davinci-device-plugin"))
        .args(args)
        .env_remove("DAVINCI_DEVICE")
        .output()
        .expect("davinci-device-plugin runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_exits_0() {
    let o = plugin(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert!(
        out.contains("Usage: davinci-device-plugin [OPTIONS]"),
        "{out}"
    );
    assert!(out.contains("--health-interval"), "{out}");
}

#[test]
fn bad_options_exit_2_and_say_why() {
    let o = plugin(&["--bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("unexpected argument '--bogus'"));
    let o = plugin(&["--health-interval", "0s"]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("\"0s\" must be between 10ms and 1h"), "{err}");
}

#[test]
fn list_without_devices_fails_and_says_where_it_looked() {
    let empty = std::env::temp_dir().join(format!("davinci-plugin-cli-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let o = plugin(&["--list", "--socket-dir", empty.to_str().unwrap()]);
    std::fs::remove_dir_all(&empty).unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.contains("no devices found") && err.contains("--socket-dir"),
        "{err}"
    );
}
