//! The docs' commands name packages that exist: every package a tracked Markdown file passes
//! to `cargo -p` (or `--package`) is a workspace member. (The paths the docs name are checked
//! with every other file's, by [`super::paths`].)

use std::path::Path;

use super::{paths, Finding};

/// The documents checked: every tracked `*.md` file but the [`paths::skipped`] ones.
pub fn documents(files: &[String]) -> Vec<&str> {
    files
        .iter()
        .filter(|f| f.ends_with(".md") && !paths::skipped(f))
        .map(String::as_str)
        .collect()
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

/// Every `-p` package of the tracked Markdown `files` (relative to `root`) that is not one of
/// `members`.
pub fn check(root: &Path, files: &[String], members: &[String]) -> Vec<Finding> {
    let mut bad = Vec::new();
    for doc in documents(files) {
        let Ok(text) = std::fs::read_to_string(root.join(doc)) else {
            continue;
        };
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
