//! Checks on the shape of the workspace, run by the test command (`cargo xtask check`):
//!
//! * [`layering`]: which crate may depend on which, read from `cargo metadata` with cargo's
//!   feature rules (`cargo xtask check-layering`);
//! * [`sizes`]: no source file over [`sizes::MAX_NON_TEST_LINES`] non-test lines, no test file
//!   over [`sizes::MAX_TEST_LINES`] lines (`cargo xtask check-sizes`);
//! * [`paths`]: every repository path any tracked text file names exists: Markdown, comments,
//!   strings, scripts, Makefiles, manifests (`cargo xtask check-paths`);
//! * [`doc_paths`]: every package the Markdown passes to `cargo -p` is a member
//!   (`cargo xtask check-docs`);
//! * [`msrv`]: the declared `rust-version` is at least what every dependency declares, and the
//!   workspace builds with that toolchain when it is installed (`cargo xtask msrv`);
//! * [`unsafe_code`]: every crate root keeps `unsafe` out, and the files that let it in are
//!   exactly the table of docs/architecture.md (`cargo xtask check-unsafe`);
//! * [`names`]: one name per idea: an open's handle in the client table is `client`, the id
//!   the device reports for a client is `client_id` (`cargo xtask check-names`).
//!
//! Each check is a pure function of its inputs (metadata JSON, file text, a directory), so its
//! tests feed it a tree that breaks the rule and watch it fail.

pub mod doc_paths;
pub mod layering;
pub mod metadata;
pub mod msrv;
pub mod names;
pub mod paths;
pub mod sizes;
pub mod unsafe_code;

/// Every file below `dirs` (each relative to `root`), with whether a `tests` folder lies on
/// the way from its dir to it; `target` and hidden folders are left out. Paths are
/// `root.join(..)`, sorted, without repeats. The walk the file-based checks share.
pub fn files_below(
    root: &std::path::Path,
    dirs: &[std::path::PathBuf],
) -> Vec<(std::path::PathBuf, bool)> {
    let mut out = Vec::new();
    let mut todo: Vec<(std::path::PathBuf, bool)> =
        dirs.iter().map(|d| (root.join(d), false)).collect();
    while let Some((dir, in_tests)) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    todo.push((path, in_tests || name == "tests"));
                }
            } else {
                out.push((path, in_tests));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// One broken rule: what, where, and how to mend it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding(pub String);

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
