//! No moved path survives stale: every repository path that a tracked text file names exists,
//! wherever it is named (Markdown, Rust/C/Python comments and strings, shell scripts, the
//! Makefile and Kbuild, manifests, YAML, systemd units, the Containerfile, `.ci/run`).
//!
//! The files are those `git ls-files` lists, less [`skipped`] ones (vendored code, fuzz seeds
//! and regressions, lock files, the xtask tests' fixtures) and binary ones. In each line a
//! *path* is a run of path characters (letters, digits, `_ - . / + @`), ended by anything else
//! (so `file.rs:120` and `abi.md#anchor` name `file.rs` and `abi.md`), that
//!
//! * begins with a top-level entry of the repository and a `/` (`hosts/mockd/src/conn.rs`,
//!   `core/ring/`): looked up from the root, else from the naming file's folder and those above
//!   it up to its package's (a folder with `Cargo.toml`, `pyproject.toml`, a `Makefile` or
//!   `Kbuild`), so `tests/probe.c` inside `bindings/preload/` is that crate's;
//! * or begins with the folder name of a crate below the top and goes on into it
//!   (`ring/src/lib.rs`, `mockd/deploy/x.yaml`; not `ops/s`): a path that did not follow its
//!   crate down a folder, looked up the same way;
//! * or begins with `./` (from the file's folder or the root: a command run from either) or
//!   `../` (from the file's folder: `#include "../mmap_common.h"`, `path = "../apps/workload"`);
//! * or begins with `$ROOT/`, `${ROOT}/` or `$root/` (a script's name for the root, unless the
//!   script sets it to something else), or `$(dirname "$0")/` or
//!   `$(dirname "${BASH_SOURCE[0]}")/` (the script's own folder);
//! * or, in Markdown, is a link target (`[abi](abi.md)`, from the document's folder).
//!
//! Not paths: URLs, absolute paths (`/dev/…`, `/tmp/…`, a `.gitignore`'s `/fuzz/target`),
//! paths behind any other variable (`$OUT/…`, `$KMOD_DIR/…`), paths of other trees whose first
//! component is not ours (`drivers/accel/`, `include/linux/`, `davinci.ai/npu`), untracked
//! top-level folders (`target/`), and a path that climbs out of the repository. A glob (`*`,
//! `?`, `{a,b}`) or an ellipsis (`core/...`) is checked up to the folder before it. What is
//! named on purpose, looks like ours and is not stands in [`ALLOWED`], each with its reason.

use std::collections::BTreeSet;
use std::path::Path;

use super::Finding;

/// Paths that look like ours and are not, each with why. A named path is allowed
/// when it is one of these or lies below one.
pub const ALLOWED: &[(&str, &str)] = &[
    (
        "docs/specs/ivshmem-spec.rst",
        "QEMU's ivshmem specification, in QEMU's tree",
    ),
    (
        "fuzz/target",
        "cargo-fuzz's build directory (fuzz/ is its own workspace)",
    ),
    ("fuzz/corpus", "cargo-fuzz's working corpus, not checked in"),
    (
        "fuzz/artifacts",
        "cargo-fuzz's crash artifacts, not checked in",
    ),
    (
        "apps/v1",
        "Kubernetes' API group of a DaemonSet (apiVersion)",
    ),
    (
        "vendor/class",
        "a CDI kind (`davinci.ai/npu`), as CDI writes it",
    ),
    (
        "vendor/device",
        "a CDI device name (`davinci.ai/npu=0`), as CDI writes it",
    ),
    (
        "./quickstart",
        "the C quick start, run where it was built (bindings/capi/examples/quickstart.c)",
    ),
    (
        "./client",
        "the C client of uapi/examples/client.c, run where it was built",
    ),
    ("./npu-smi", "an argv[0] in davinci-smi's tests"),
];

/// Files not read: vendored sources, fuzz inputs, lock files, and the xtask tests and this
/// file, whose fixtures and examples name missing paths on purpose.
pub fn skipped(path: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "vendor/",
        "target/",
        "fuzz/seeds/",
        "fuzz/regressions/",
        "scripts/xtask/tests/",
        "scripts/xtask/src/tree/paths.rs",
    ];
    PREFIXES.iter().any(|p| path.starts_with(p)) || path.ends_with(".lock")
}

/// The files `git ls-files` lists under `root`.
pub fn tracked_files(root: &Path) -> Result<Vec<String>, String> {
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run git ls-files: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git ls-files failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect())
}

/// What a path of ours may begin with, and where a package's own paths start.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// The top-level entries (the first components of the tracked files).
    pub top: BTreeSet<String>,
    /// The folder names of the crates below the top (`ring` for `core/ring/Cargo.toml`): a
    /// path that begins with one and goes on into the crate (`ring/src/lib.rs`,
    /// `mockd/deploy/daemonset.yaml`) is one that did not follow its crate down a folder.
    pub crates: BTreeSet<String>,
    /// The folders that hold a package's manifest (`Cargo.toml`, `pyproject.toml`, a
    /// `Makefile` or `Kbuild`): a path named inside one may be relative to it.
    pub packages: BTreeSet<String>,
}

/// What a crate folder holds: the second component of a two-component path that begins with a
/// crate's name (`ops/s` is a unit, `ops/src` a path).
const CRATE_ENTRIES: &[&str] = &["src", "tests", "examples", "benches", "include"];

impl Tree {
    /// The tree `files` (relative to the root) make up.
    pub fn new(files: &[String]) -> Tree {
        let top: BTreeSet<String> = files
            .iter()
            .map(|f| f.split('/').next().unwrap_or(f).to_string())
            .collect();
        let packages: BTreeSet<String> = files
            .iter()
            .filter_map(|f| {
                let (dir, name) = f.rsplit_once('/')?;
                ["Cargo.toml", "pyproject.toml", "Makefile", "Kbuild"]
                    .contains(&name)
                    .then(|| dir.to_string())
            })
            .collect();
        let crates = files
            .iter()
            .filter_map(|f| f.strip_suffix("/Cargo.toml"))
            .filter_map(|d| d.rsplit_once('/').map(|(_, n)| n))
            .filter(|n| !top.contains(*n))
            .map(str::to_string)
            .collect();
        Tree {
            top,
            crates,
            packages,
        }
    }

    fn begins_ours(&self, token: &str) -> bool {
        let c: Vec<&str> = token.split('/').filter(|c| !c.is_empty()).collect();
        if c.len() < 2 {
            return false;
        }
        self.top.contains(c[0])
            || (self.crates.contains(c[0])
                && (c.len() > 2 || c[1].contains('.') || CRATE_ENTRIES.contains(&c[1])))
    }

    /// The folders a path named in `file` may be relative to, besides the root: the file's own
    /// and those above it up to its package's.
    fn folders_of(&self, file: &str) -> Vec<String> {
        let mut out = Vec::new();
        for a in Path::new(file).ancestors().skip(1) {
            let a = a.to_string_lossy().into_owned();
            if a.is_empty() {
                break;
            }
            let package = self.packages.contains(&a);
            out.push(a);
            if package {
                return out;
            }
        }
        // Outside a package: the file's folder only.
        out.truncate(1);
        out
    }
}

/// The shell variables that stand for the repository's root in `text`: `ROOT` and `root`,
/// unless the file sets one to something else (`root=$out/rootfs`): a value without
/// `dirname`, `pwd` or `git rev-parse`.
pub fn root_variables(text: &str) -> Vec<&'static str> {
    let elsewhere = |v: &str| {
        let set = format!("{v}=");
        text.lines().any(|l| {
            l.split_whitespace()
                .filter(|w| w.starts_with(&set))
                .filter_map(|w| l.find(w).map(|i| &l[i + set.len()..]))
                .any(|value| {
                    !["dirname", "pwd", "rev-parse"]
                        .iter()
                        .any(|k| value.contains(k))
                })
        })
    };
    ["ROOT", "root"]
        .into_iter()
        .filter(|v| !elsewhere(v))
        .collect()
}

/// Where a named path is looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Base {
    /// From the root, else from the naming file's folder or any folder above it (a crate's
    /// `tests/probe.c`).
    Anywhere,
    /// From the naming file's folder, else from the root (`./x`: a command run from either).
    Dot,
    /// From the root only (`$ROOT/x`).
    Root,
    /// From the naming file's folder only (`../x`, `$(dirname "$0")/x`, a Markdown link).
    Folder,
}

/// The paths one line names, each with where it is looked up; `roots` are the variables that
/// stand for the root ([`root_variables`]); `markdown` adds link targets.
pub fn named(line: &str, tree: &Tree, roots: &[&str], markdown: bool) -> Vec<(String, Base)> {
    let line = unify_variables(&blank_urls(line), roots);
    let mut out = Vec::new();
    for token in line.split(|c: char| !is_path_char(c)) {
        if let Some(p) = as_path(token, tree) {
            out.push(p);
        }
    }
    if markdown {
        for t in link_targets(&line) {
            let t = t.split('#').next().unwrap_or("");
            if !t.is_empty() && !t.contains('$') && !t.starts_with('/') {
                out.push((t.to_string(), Base::Folder));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(c, '_' | '-' | '.' | '/' | '+' | '@' | '$' | '{' | '}')
        || matches!(c, '*' | '?')
}

/// `line` with every `scheme://…` blanked out up to the next space or quote.
fn blank_urls(line: &str) -> String {
    let mut out = line.to_string();
    while let Some(i) = out.find("://") {
        let start = out[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |j| j + 1);
        let end = out[i..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | ')'))
            .map_or(out.len(), |j| i + j);
        out.replace_range(start..end, &" ".repeat(end - start));
    }
    out
}

/// The root and the script's folder written as `$ROOT` and `$HERE`, quotes around them
/// dropped; a variable `ROOT` that does not stand for the root becomes `$OTHER`.
fn unify_variables(line: &str, roots: &[&str]) -> String {
    let mut s = line.to_string();
    for here in [
        "$(dirname \"${BASH_SOURCE[0]}\")",
        "$(dirname \"$BASH_SOURCE\")",
        "$(dirname \"$0\")",
        "$(dirname $0)",
    ] {
        s = s.replace(here, "$HERE");
    }
    for v in ["ROOT", "root"] {
        let to = if roots.contains(&v) {
            "$ROOT"
        } else {
            "$OTHER"
        };
        s = s.replace(&format!("${{{v}}}"), to);
        s = replace_word(&s, &format!("${v}"), to);
    }
    for v in ["$ROOT", "$HERE"] {
        s = s.replace(&format!("\"{v}\"/"), &format!("{v}/"));
        s = s.replace(&format!("'{v}'/"), &format!("{v}/"));
    }
    s
}

/// `s` with `from` replaced where no identifier character follows it (`$root`, not `$rootfs`).
fn replace_word(s: &str, from: &str, to: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(from) {
        let after = &rest[i + from.len()..];
        out.push_str(&rest[..i]);
        if after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            out.push_str(from);
        } else {
            out.push_str(to);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Markdown link targets: `[text](target)` and `[text](target "title")`.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else {
            break;
        };
        if let Some(t) = after[..end].split_whitespace().next() {
            out.push(t);
        }
        rest = &after[end..];
    }
    out
}

/// The path a token names, if it names one of ours: see the module's documentation.
fn as_path(token: &str, tree: &Tree) -> Option<(String, Base)> {
    // A sentence's full stop is not part of the path.
    let token = token.trim_end_matches(['.', ',']);
    let (base, rest) = if let Some(r) = token.strip_prefix("$ROOT/") {
        (Base::Root, r)
    } else if let Some(r) = token.strip_prefix("$HERE/") {
        (Base::Folder, r)
    } else if token.starts_with("./") {
        (Base::Dot, token)
    } else if token.starts_with("../") {
        (Base::Folder, token)
    } else {
        if token.starts_with('/') || !tree.begins_ours(token) {
            return None;
        }
        (Base::Anywhere, token)
    };
    // Up to the first component with a glob, a placeholder, another variable or an ellipsis.
    let mut kept: Vec<&str> = Vec::new();
    for c in rest.split('/') {
        if c.contains(['*', '?', '{', '}', '$']) || c == "..." {
            break;
        }
        kept.push(c);
    }
    let p = kept.join("/");
    let p = p.trim_end_matches('/');
    if p.is_empty() || p == "." || p == ".." {
        return None;
    }
    // A path that is only its top-level entry exists by definition.
    if base == Base::Anywhere && !p.contains('/') {
        return None;
    }
    Some((p.to_string(), base))
}

/// `p` joined to `dir`, with `.` and `..` resolved; `None` when it climbs out of the root.
fn join(dir: &str, p: &str) -> Option<String> {
    let mut parts: Vec<&str> = dir.split('/').filter(|c| !c.is_empty()).collect();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

/// Whether `p`, named by `file`, exists; `None` when it is not a path in the repository.
fn exists(root: &Path, tree: &Tree, file: &str, p: &str, base: Base) -> Option<bool> {
    let here = || {
        Path::new(file)
            .parent()
            .map_or(String::new(), |d| d.to_string_lossy().into_owned())
    };
    let dirs: Vec<String> = match base {
        Base::Root => vec![String::new()],
        Base::Folder => vec![here()],
        Base::Dot => vec![here(), String::new()],
        Base::Anywhere => std::iter::once(String::new())
            .chain(tree.folders_of(file))
            .collect(),
    };
    let mut inside = false;
    for d in dirs {
        if let Some(j) = join(&d, p) {
            inside = true;
            if j.is_empty() || root.join(&j).exists() {
                return Some(true);
            }
        }
    }
    inside.then_some(false)
}

/// Whether `p` (as named, or resolved from the root) is or lies below an [`ALLOWED`] path.
fn allowed(p: &str, allow: &[(&str, &str)]) -> bool {
    allow
        .iter()
        .any(|(a, _)| p == *a || p.strip_prefix(a).is_some_and(|r| r.starts_with('/')))
}

/// Every path `text` (the file `file`, relative to the root) names that does not exist, as
/// `file:line: path does not exist`.
pub fn check_text(
    root: &Path,
    file: &str,
    text: &str,
    tree: &Tree,
    allow: &[(&str, &str)],
) -> Vec<Finding> {
    let markdown = file.ends_with(".md");
    let roots = root_variables(text);
    let mut bad = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut stale: Vec<String> = named(line, tree, &roots, markdown)
            .into_iter()
            .filter(|(p, base)| {
                !allowed(p, allow) && exists(root, tree, file, p, *base) == Some(false)
            })
            .map(|(p, _)| p)
            .collect();
        stale.dedup();
        for p in stale {
            bad.push(Finding(format!("{file}:{}: {p} does not exist", n + 1)));
        }
    }
    bad
}

/// Every stale path in `files` (relative to `root`; [`skipped`] and binary ones are not read).
pub fn check(root: &Path, files: &[String]) -> Vec<Finding> {
    let tree = Tree::new(files);
    let mut bad = Vec::new();
    for f in files.iter().filter(|f| !skipped(f)) {
        let Ok(bytes) = std::fs::read(root.join(f)) else {
            continue;
        };
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        if text.contains('\0') {
            continue;
        }
        bad.extend(check_text(root, f, &text, &tree, ALLOWED));
    }
    bad
}
