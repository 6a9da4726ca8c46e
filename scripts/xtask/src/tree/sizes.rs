//! No file a newcomer must scroll: at most [`MAX_NON_TEST_LINES`] lines that are not tests in
//! every `.rs` file under a member's `src/` (and the kernel module's `src/`), where
//! `#[cfg(test)]` items do not count; and at most [`MAX_TEST_LINES`] lines in every test file
//! of a member (`tests.rs`, and the Rust, C and Python files of its `tests/` folders).

use std::path::{Path, PathBuf};

use super::Finding;

/// The most non-test lines one source file may have.
pub const MAX_NON_TEST_LINES: usize = 600;

/// The most lines one test file may have: more than a source file, since a test spells out
/// its scenario, its setup and what it expects, and a file keeps the tests of one area side by
/// side. 800 splits the suites by area (as `tests/tests/conformance/` and `kernel/` are), not
/// one area in pieces: at 600, six files that each hold one area (driver-core's engine,
/// clients and memory-model tests, the embedded device's, the ring's unit tests, the device
/// plugin's system tests: 676 to 777 lines) would be cut apart.
pub const MAX_TEST_LINES: usize = 800;

/// Lines of `text` outside `#[cfg(test)]` items (a `mod x;` declaration, or an item up to its
/// closing brace, counted by braces outside strings and comments well enough for this tree's
/// formatted code).
pub fn non_test_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let mut test = 0;
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].trim_start().starts_with("#[cfg(test)]") {
            i += 1;
            continue;
        }
        // Further attributes and comments belong to the same item.
        let mut j = i + 1;
        while j < lines.len() && {
            let t = lines[j].trim_start();
            t.starts_with("#[") || t.starts_with("//")
        } {
            j += 1;
        }
        let mut depth: i64 = 0;
        let mut opened = false;
        let mut k = j;
        while k < lines.len() {
            let code = strip_line(lines[k]);
            depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
            opened |= code.contains('{');
            if (opened && depth <= 0) || (!opened && code.trim_end().ends_with(';')) {
                break;
            }
            k += 1;
        }
        test += k.min(lines.len() - 1) + 1 - i;
        i = k + 1;
    }
    lines.len() - test.min(lines.len())
}

/// A line without its `//` comment and without the contents of string literals and the
/// char literals `'{'`, `'}'` and `'"'` (so braces in them do not count).
fn strip_line(line: &str) -> String {
    let line = line
        .replace("'{'", "")
        .replace("'}'", "")
        .replace("'\"'", "");
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '/' if chars.peek() == Some(&'/') => break,
            _ => out.push(c),
        }
    }
    out
}

/// The files checked: `.rs` files under `dirs`, leaving out tests (`tests.rs`, `tests/`).
pub fn source_files(root: &Path, dirs: &[PathBuf]) -> Vec<PathBuf> {
    super::files_below(root, dirs)
        .into_iter()
        .filter(|(p, in_tests)| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            !in_tests && name.ends_with(".rs") && name != "tests.rs"
        })
        .map(|(p, _)| p)
        .collect()
}

/// The test files of the packages in `dirs` (relative to `root`): `tests.rs` files, and the
/// `.rs`, `.c` and `.py` files in a `tests/` folder of the package.
pub fn test_files(root: &Path, dirs: &[PathBuf]) -> Vec<PathBuf> {
    super::files_below(root, dirs)
        .into_iter()
        .filter(|(p, in_tests)| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name == "tests.rs"
                || (*in_tests && [".rs", ".c", ".py"].iter().any(|x| name.ends_with(x)))
        })
        .map(|(p, _)| p)
        .collect()
}

/// Every test file of `files` over [`MAX_TEST_LINES`], with its count.
pub fn check_tests(root: &Path, files: &[PathBuf]) -> Vec<Finding> {
    let mut bad = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(f) else {
            bad.push(Finding(format!("{}: cannot read", f.display())));
            continue;
        };
        let n = text.lines().count();
        if n > MAX_TEST_LINES {
            bad.push(Finding(format!(
                "{}: {n} lines, more than {MAX_TEST_LINES} for a test file: split it by area \
                 (as tests/tests/conformance/)",
                f.strip_prefix(root).unwrap_or(f).display()
            )));
        }
    }
    bad
}

/// Every file of `files` over the limit, with its count.
pub fn check(root: &Path, files: &[PathBuf]) -> Vec<Finding> {
    let mut bad = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(f) else {
            bad.push(Finding(format!("{}: cannot read", f.display())));
            continue;
        };
        let n = non_test_lines(&text);
        if n > MAX_NON_TEST_LINES {
            bad.push(Finding(format!(
                "{}: {n} non-test lines, more than {MAX_NON_TEST_LINES}: split it by object or by role",
                f.strip_prefix(root).unwrap_or(f).display()
            )));
        }
    }
    bad
}
