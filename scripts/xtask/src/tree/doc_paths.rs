//! The README and the docs agree with the tree: every repository path they name exists, and
//! every package they pass to `cargo -p` is a member.
//!
//! A path is a `` `code span` `` or a link target whose first component is an entry at the top
//! of the repository (`shim/src/lib.rs`, `docs/abi.md`, `kmod-rust/`), optionally followed by
//! `:LINE` or `#anchor`; spans with placeholders (`<target>`, `$UID`, `*`, `{}`) are not paths.
//! A relative link (`[abi.md](abi.md)`) is resolved from the document's folder.

use std::collections::BTreeSet;
use std::path::Path;

use super::Finding;

/// The documents checked, relative to the root: `README.md`, every `*.md` of `docs/` and the
/// READMEs one folder down.
pub fn documents(root: &Path) -> Vec<String> {
    let mut out = vec!["README.md".to_string()];
    for dir in top_entries(root) {
        let p = root.join(&dir);
        if !p.is_dir() {
            continue;
        }
        if let Ok(entries) = std::fs::read_dir(&p) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let md = name.ends_with(".md");
                if (dir == "docs" && md) || name == "README.md" {
                    out.push(format!("{dir}/{name}"));
                }
            }
        }
    }
    out.sort();
    out
}

/// The names at the top of the repository (`.git` and `target` left out).
pub fn top_entries(root: &Path) -> BTreeSet<String> {
    std::fs::read_dir(root)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.') && !n.starts_with("target"))
                .collect()
        })
        .unwrap_or_default()
}

/// The repository paths `text` (the document `doc`) names, as paths relative to the root.
pub fn paths_named(doc: &str, text: &str, top: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        for span in code_spans(line) {
            if let Some(p) = as_repo_path(span, top) {
                out.push(p);
            }
        }
        for target in link_targets(line) {
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let target = target.split('#').next().unwrap_or("");
            if target.is_empty() {
                continue;
            }
            let base = Path::new(doc).parent().unwrap_or(Path::new(""));
            let joined = normalize(&base.join(target).to_string_lossy());
            out.push(joined);
        }
    }
    out
}

/// `-p NAME` / `--package NAME` in the document's commands.
pub fn packages_named(text: &str) -> Vec<String> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == '`')
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| w[0] == "-p" || w[0] == "--package")
        .map(|w| w[1].trim_end_matches([',', '.', ')', ';', ':']).to_string())
        // Package names are lower case; `-p PACKAGE` is a placeholder.
        .filter(|n| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        })
        .collect()
}

fn code_spans(line: &str) -> Vec<&str> {
    let parts: Vec<&str> = line.split('`').collect();
    parts.iter().skip(1).step_by(2).copied().collect()
}

fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else {
            break;
        };
        out.push(&after[..end]);
        rest = &after[end..];
    }
    out
}

fn as_repo_path(span: &str, top: &BTreeSet<String>) -> Option<String> {
    let s = span.trim();
    if s.contains(['<', '>', '$', '*', '{', '}', ' ', '=', '|']) || s.starts_with('/') {
        return None;
    }
    let s = s.split('#').next()?;
    // `file.rs:120`, `file.rs:120-140`, `file.rs ~120`.
    let s = match s.rsplit_once(':') {
        Some((p, line)) if line.chars().all(|c| c.is_ascii_digit() || c == '-') => p,
        _ => s,
    };
    let first = s.split('/').next()?;
    if !top.contains(first) || (!s.contains('/') && !s.contains('.')) {
        return None;
    }
    // A bare top-level name with a dot (`Cargo.toml`, `README.md`) counts; a word does not.
    Some(s.trim_end_matches('/').to_string())
}

fn normalize(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts.join("/")
}

/// Every named path that does not exist and every `-p` package that is not a member.
pub fn check(root: &Path, members: &[String]) -> Vec<Finding> {
    let top = top_entries(root);
    let mut bad = Vec::new();
    for doc in documents(root) {
        let Ok(text) = std::fs::read_to_string(root.join(&doc)) else {
            continue;
        };
        for p in paths_named(&doc, &text, &top) {
            if !root.join(&p).exists() {
                bad.push(Finding(format!("{doc} names {p}, which does not exist")));
            }
        }
        for p in packages_named(&text) {
            if !members.contains(&p) {
                bad.push(Finding(format!(
                    "{doc} runs `-p {p}`, which is not a workspace package"
                )));
            }
        }
    }
    bad.sort_by(|a, b| a.0.cmp(&b.0));
    bad.dedup();
    bad
}
