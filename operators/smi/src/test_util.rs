//! Test support (feature `test-util`): reading a run of `davinci-smi`, as its own tests (unit
//! and `operators/smi/tests/cli.rs`) and the tests package's system tests (`tests/tests/smi_*.rs`) do:
//! the exit status and output of the process, and a `--json` document with its schema checked.
#![forbid(unsafe_code)]

use std::process::{Command, Output};

use serde_json::Value;

use crate::output::SCHEMA;

/// Runs `cmd`, a `davinci-smi` command line, to the end: its exit status (-1 when a signal
/// ended it), stdout and stderr.
///
/// # Panics
/// If the program cannot be started.
pub fn run(cmd: &mut Command) -> (i32, String, String) {
    outcome(&cmd.output().expect("run davinci-smi"))
}

/// The exit status (-1 when a signal ended the process), stdout and stderr of a finished
/// process.
pub fn outcome(out: &Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A `--json` document: parsed, and of the schema `davinci-smi/v1`.
///
/// # Panics
/// If `s` is not JSON or not of that schema.
pub fn doc(s: &str) -> Value {
    let v: Value = serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s:?}"));
    assert_eq!(v["schema"], SCHEMA, "{v}");
    v
}
