//! `cargo xtask kmod-src`: the device-side crates (`uapi`, `ring`, `driver-core`) as one Rust
//! source file the kernel module includes, unchanged in meaning.
//!
//! An out-of-tree Rust module on Linux 6.12 is one crate: it cannot link other crates. So the
//! three crates become three inline modules of that crate (`davinci_uapi`, `davinci_ring`,
//! `davinci_driver_core`), each module file inlined where its `mod` declaration stands, and
//! the paths that named a crate root rewritten to name the module instead (`crate::x` →
//! `crate::davinci_ring::x`, `$crate::` likewise, `davinci_uapi::x` → `crate::davinci_uapi::x`).
//! Nothing else changes: the kernel build sees exactly the code the tests ran, with no cargo
//! features (so `uapi` without zerocopy/bitflags and `ring` without volatile-register, the
//! configurations the workspace tests build), and without the modules that only tests, loom or
//! user-space hosts compile (`cfg(test)`, `cfg(loom)`, `test-util`, `std`), which are left out
//! rather than cfg'd out.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::GenError;

/// What goes in, in dependency order: (module name in the generated file, its root file). The
/// three crates, `davinci-shm`'s byte copies (core only), which the kernel's platform uses
/// on memory a user mapping shares, as the mock device does, and `davinci-hwif`, the PCI
/// device's hardware interface (BAR2's layout, the admin queue's entries) the PCI transport
/// speaks.
pub const CRATES: &[(&str, &str)] = &[
    ("davinci_uapi", "uapi/src/lib.rs"),
    ("davinci_ring", "core/ring/src/lib.rs"),
    ("davinci_driver_core", "core/driver-core/src/lib.rs"),
    ("davinci_shm_copy", "core/shm/src/copy.rs"),
    ("davinci_hwif", "core/hwif/src/lib.rs"),
];

/// A `mod` declaration whose attributes say it is never compiled into the kernel: test and
/// loom code, and what a cargo feature adds (`test-util`; `std`, user-space hosts' support).
fn never_in_kernel(attrs: &[String]) -> bool {
    attrs.iter().any(|a| {
        let a = a.replace(' ', "");
        a.starts_with("#[cfg(test")
            || a.starts_with("#[cfg(loom")
            || a.starts_with("#[cfg(all(test")
            || a.starts_with("#[cfg(any(test")
            || a.starts_with("#[cfg(all(any(test")
            || a.contains("feature=\"test-util\"")
            || a.contains("feature=\"std\"")
            || a.contains("feature=\"kernels\"")
    })
}

/// Rewrites the crate paths of one line of crate `name`.
fn rewrite(line: &str, name: &str) -> String {
    let mut out = line.replace("$crate::", &format!("$crate::{name}::"));
    // `crate::` not preceded by `$` (done above) or by an identifier character.
    out = replace_path_root(&out, "crate::", &format!("crate::{name}::"));
    for (other, _) in CRATES {
        if *other != name {
            out = replace_path_root(&out, &format!("{other}::"), &format!("crate::{other}::"));
        }
    }
    out
}

/// Replaces `from` with `to` where `from` starts a path (not after `$`, `:` or an identifier
/// character), so already rewritten paths are left alone.
fn replace_path_root(s: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(from) {
        let before = out
            .chars()
            .last()
            .filter(|_| i == 0)
            .or_else(|| rest[..i].chars().last());
        let starts_path =
            !matches!(before, Some(c) if c == '$' || c == ':' || c == '_' || c.is_alphanumeric());
        out.push_str(&rest[..i]);
        out.push_str(if starts_path { to } else { from });
        rest = &rest[i + from.len()..];
    }
    out.push_str(rest);
    out
}

/// The file a `mod name;` in `file` refers to.
fn module_file(file: &Path, name: &str) -> Result<PathBuf, GenError> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let base = if stem == "lib" || stem == "mod" {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    for candidate in [
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(GenError(format!(
        "{}: `mod {name};` has no file",
        file.display()
    )))
}

/// Parses `[pub[(crate)]] mod NAME;`, returning NAME.
fn mod_decl(line: &str) -> Option<&str> {
    let t = line.trim();
    let t = t
        .strip_prefix("pub(crate) ")
        .or_else(|| t.strip_prefix("pub "))
        .unwrap_or(t);
    let name = t.strip_prefix("mod ")?.strip_suffix(';')?;
    name.chars()
        .all(|c| c == '_' || c.is_ascii_alphanumeric())
        .then_some(name)
}

/// Inlines `file` (and, recursively, its module files) as the body of a module of crate
/// `name`, at indentation `depth`.
fn inline(file: &Path, name: &str, depth: usize, out: &mut String) -> Result<(), GenError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| GenError(format!("cannot read {}: {e}", file.display())))?;
    let pad = "    ".repeat(depth);
    let mut attrs: Vec<String> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t == "#![no_std]" {
            continue;
        }
        // Outer attributes are held back until we know what they are attached to.
        if t.starts_with("#[") && !t.starts_with("#![") && t.ends_with(']') && !t.contains("] ") {
            attrs.push(line.to_string());
            continue;
        }
        if let Some(m) = mod_decl(line) {
            if never_in_kernel(&attrs) {
                attrs.clear();
                continue;
            }
            let indent = &line[..line.len() - line.trim_start().len()];
            for a in attrs.drain(..) {
                let _ = writeln!(out, "{pad}{}", rewrite(&a, name));
            }
            let t = line.trim();
            let head = &t[..t.len() - m.len() - 1]; // "pub(crate) mod "
            let _ = writeln!(out, "{pad}{indent}{head}{m} {{");
            inline(&module_file(file, m)?, name, depth + 1, out)?;
            let _ = writeln!(out, "{pad}{indent}}}");
            continue;
        }
        for a in attrs.drain(..) {
            let _ = writeln!(out, "{pad}{}", rewrite(&a, name));
        }
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "{pad}{}", rewrite(line, name));
        }
    }
    for a in attrs.drain(..) {
        let _ = writeln!(out, "{pad}{}", rewrite(&a, name));
    }
    Ok(())
}

/// The generated source: the three crates of `root` as inline modules.
///
/// # Errors
/// A source file cannot be read, or a `mod` declaration names no file.
pub fn render(root: &Path) -> Result<String, GenError> {
    let mut out = String::new();
    out.push_str(
        "// Generated by `cargo xtask kmod-src` from uapi/, core/ring/ and core/driver-core/; do not edit.\n\
         // The device-side crates of davinci-rs as inline modules of the kernel module's crate\n\
         // (an out-of-tree module is one crate): the same code the workspace tests run.\n\n",
    );
    for (name, dir) in CRATES {
        let _ = writeln!(
            out,
            "#[allow(\n    missing_docs,\n    unreachable_pub,\n    dead_code,\n    unexpected_cfgs,\n    \
             unused_imports,\n    clippy::all,\n    clippy::pedantic\n)]\npub mod {name} {{"
        );
        inline(&root.join(dir), name, 1, &mut out)?;
        out.push_str("}\n\n");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_crate_roots_once() {
        assert_eq!(
            rewrite("use crate::region::Field;", "davinci_ring"),
            "use crate::davinci_ring::region::Field;"
        );
        assert_eq!(
            rewrite("$crate::layout::FieldInfo", "davinci_uapi"),
            "$crate::davinci_uapi::layout::FieldInfo"
        );
        assert_eq!(
            rewrite("use davinci_uapi::{Errno, RingFlags};", "davinci_ring"),
            "use crate::davinci_uapi::{Errno, RingFlags};"
        );
        // Not a path root: part of another identifier or path.
        assert_eq!(rewrite("my_crate::x", "davinci_ring"), "my_crate::x");
        assert_eq!(
            rewrite("core::davinci_uapi::x", "davinci_ring"),
            "core::davinci_uapi::x"
        );
        assert_eq!(mod_decl("pub(crate) mod table;"), Some("table"));
        assert_eq!(mod_decl("    mod raw;"), Some("raw"));
        assert_eq!(mod_decl("mod raw { }"), None);
    }
}
