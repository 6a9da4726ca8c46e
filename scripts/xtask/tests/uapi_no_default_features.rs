//! The kernel module compiles davinci-uapi with `--no-default-features` (nothing but `core`:
//! no zerocopy, no bitflags). Build it that way here so the test command covers that build.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn davinci_uapi_builds_with_no_default_features() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    // Its own target directory: the outer `cargo test` holds the lock on the main one, and the
    // different features would otherwise rebuild the crate back and forth.
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("uapi-no-default-features");
    let out = Command::new(&cargo)
        .args([
            "build",
            "--package",
            "davinci-uapi",
            "--lib",
            "--no-default-features",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(xtask::workspace_root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo}: {e}"));
    assert!(
        out.status.success(),
        "`cargo build -p davinci-uapi --no-default-features` failed (the kernel build of the ABI crate):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It really built the crate without its optional dependencies.
    let deps = target.join("debug/deps");
    let names: Vec<String> = std::fs::read_dir(&deps)
        .unwrap_or_else(|e| panic!("{}: {e}", deps.display()))
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("libdavinci_uapi-")),
        "{names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("libzerocopy") || n.starts_with("libbitflags")),
        "{names:?}"
    );
}
