//! The generated files on disk, and finding a C compiler.

use crate::{abi_doc::*, header::*};
use crate::{render_runtime_header, Abi, GenError, ABI_DOC_PATH, HEADER_PATH, RUNTIME_HEADER_PATH};
use std::path::Path;

/// A generated file and whether the checked-in copy matches.
#[derive(Debug)]
pub struct Generated {
    /// Path relative to the workspace root.
    pub path: &'static str,
    /// What it must contain.
    pub expected: String,
    /// What it contains now (`None` if missing or unreadable).
    pub actual: Option<String>,
}

impl Generated {
    /// Whether the checked-in file is up to date.
    pub fn is_fresh(&self) -> bool {
        self.actual.as_deref() == Some(self.expected.as_str())
    }

    /// The first line that differs (1-based) with both versions, for error messages.
    pub fn first_difference(&self) -> Option<(usize, String, String)> {
        let actual = self.actual.as_deref().unwrap_or("");
        let mut a = actual.lines();
        let mut e = self.expected.lines();
        for n in 1.. {
            match (a.next(), e.next()) {
                (None, None) => return None,
                (x, y) if x != y => {
                    return Some((
                        n,
                        x.unwrap_or("<end of file>").into(),
                        y.unwrap_or("<end of file>").into(),
                    ))
                }
                _ => {}
            }
        }
        None
    }
}

/// The ABI header, libdavinci's header (from `root/bindings/capi/src`) and `docs/abi.md` as they must
/// be under `root` (the doc only if it exists).
///
/// # Errors
/// As [`render_header`], [`render_runtime_header`] and [`update_doc`].
pub fn generated_files(root: &Path) -> Result<Vec<Generated>, GenError> {
    let header = Generated {
        path: HEADER_PATH,
        expected: c_header_checked()?,
        actual: std::fs::read_to_string(root.join(HEADER_PATH)).ok(),
    };
    let runtime = Generated {
        path: RUNTIME_HEADER_PATH,
        expected: render_runtime_header(root)?,
        actual: std::fs::read_to_string(root.join(RUNTIME_HEADER_PATH)).ok(),
    };
    let mut files = vec![header, runtime];
    if let Ok(doc) = std::fs::read_to_string(root.join(ABI_DOC_PATH)) {
        files.push(Generated {
            path: ABI_DOC_PATH,
            expected: update_doc(&doc)?,
            actual: Some(doc),
        });
    }
    Ok(files)
}

pub(crate) fn c_header_checked() -> Result<String, GenError> {
    render_header(&Abi::current())
}

// ---------------------------------------------------------------------------------------------
// Finding a C compiler (for the tests and the CLI's diagnostics)
// ---------------------------------------------------------------------------------------------

/// The system C compiler: `cc`, else `gcc`, whichever runs `--version`.
pub fn c_compiler() -> Option<&'static str> {
    ["cc", "gcc"].into_iter().find(|cc| {
        std::process::Command::new(cc)
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}
