//! Where `unsafe` may be, as docs/architecture.md states it: every crate root of the
//! workspace denies or forbids `unsafe_code`; the files that allow it (and the kernel
//! module's files that use it, which are not a cargo crate) are exactly the rows of the
//! table under "## Where `unsafe` is". Test code (`tests.rs`, `tests/`) is listed in prose
//! there, not in the table.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::Finding;

/// The heading of the table in docs/architecture.md.
pub const HEADING: &str = "## Where `unsafe` is";

/// The paths in the first column of the table under [`HEADING`] (up to the next heading).
pub fn table_paths(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in doc.lines() {
        if line.starts_with("## ") {
            inside = line.trim() == HEADING;
            continue;
        }
        if !inside || !line.starts_with('|') {
            continue;
        }
        let first = line
            .trim_start_matches('|')
            .split('|')
            .next()
            .unwrap_or("")
            .trim();
        if let Some(p) = first.strip_prefix('`').and_then(|p| p.strip_suffix('`')) {
            out.push(p.to_string());
        }
    }
    out
}

/// Does this file take part in the `unsafe` table: a file that allows `unsafe_code`, or a
/// kernel-module file (no lints there) with an `unsafe` block, function or impl.
pub fn uses_unsafe(path: &str, text: &str) -> bool {
    if path.starts_with("kmod-rust/") {
        return text.lines().any(|l| {
            let code = l.split("//").next().unwrap_or("");
            code.contains("unsafe {") || code.contains("unsafe fn") || code.contains("unsafe impl")
        });
    }
    text.lines().any(|l| {
        let t = l.trim_start();
        t.starts_with("#![allow(unsafe_code)]") || t.starts_with("#[allow(unsafe_code)]")
    })
}

/// Is this a crate root that keeps `unsafe` out by default.
pub fn root_denies_unsafe(text: &str) -> bool {
    text.lines().any(|l| {
        let t = l.trim_start();
        t.starts_with("#![")
            && (t.contains("forbid(unsafe_code)") || t.contains("deny(unsafe_code)"))
    })
}

/// `roots`: the crate roots (lib.rs, main.rs, bin files) relative to `root`; `sources`: every
/// non-test source file relative to `root`; `doc`: docs/architecture.md.
pub fn check(root: &Path, roots: &[PathBuf], sources: &[PathBuf], doc: &str) -> Vec<Finding> {
    let mut bad = Vec::new();
    let read = |p: &Path| std::fs::read_to_string(root.join(p)).unwrap_or_default();
    for r in roots {
        if !root_denies_unsafe(&read(r)) {
            bad.push(Finding(format!(
                "{}: a crate root without #![forbid(unsafe_code)] or #![deny(unsafe_code)]",
                r.display()
            )));
        }
    }
    let used: BTreeSet<String> = sources
        .iter()
        .map(|p| p.display().to_string())
        .filter(|p| uses_unsafe(p, &read(Path::new(p))))
        .collect();
    let listed: BTreeSet<String> = table_paths(doc).into_iter().collect();
    for p in used.difference(&listed) {
        bad.push(Finding(format!(
            "{p} allows or uses unsafe code but is not in docs/architecture.md's table \
             \"Where `unsafe` is\": add a row saying what needs it"
        )));
    }
    for p in listed.difference(&used) {
        bad.push(Finding(format!(
            "docs/architecture.md's unsafe table lists {p}, which allows no unsafe code \
             (or does not exist): remove the row"
        )));
    }
    bad
}
