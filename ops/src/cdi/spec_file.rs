//! Writing a spec: its format (`--format`, else the file name's) and the atomic write of the
//! file, which container runtimes watching their CDI directories never see half-written.
#![forbid(unsafe_code)]

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The format of a spec file (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecFormat {
    /// JSON (also valid YAML).
    Json,
    /// YAML.
    Yaml,
}

impl SpecFormat {
    /// Every format.
    pub const ALL: [SpecFormat; 2] = [SpecFormat::Json, SpecFormat::Yaml];

    /// `"json"` or `"yaml"`.
    pub fn name(self) -> &'static str {
        match self {
            SpecFormat::Json => "json",
            SpecFormat::Yaml => "yaml",
        }
    }

    /// What it is, for `--help`.
    pub fn help(self) -> &'static str {
        match self {
            SpecFormat::Json => "JSON (also valid YAML)",
            SpecFormat::Yaml => "YAML",
        }
    }
}

impl fmt::Display for SpecFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A format name that is not one of [`SpecFormat::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownSpecFormat;

impl fmt::Display for UnknownSpecFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected json or yaml")
    }
}

impl std::error::Error for UnknownSpecFormat {}

impl FromStr for SpecFormat {
    type Err = UnknownSpecFormat;

    /// `json` or `yaml`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SpecFormat::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or(UnknownSpecFormat)
    }
}

/// The extensions container runtimes load from their CDI directories.
const LOADED_EXTENSIONS: [&str; 2] = ["json", "yaml"];

/// The format to write: `--format`, else JSON for a `.json` file, else YAML; and a warning
/// when runtimes would not load the file by its name.
///
/// # Errors
/// `--format yaml` with a `.json` file (YAML is not JSON; JSON in a `.yaml` file is fine:
/// JSON is YAML).
pub fn choose_format(
    format: Option<SpecFormat>,
    output: Option<&Path>,
) -> Result<(SpecFormat, Option<String>), String> {
    let ext = output.and_then(|p| p.extension()).and_then(|e| e.to_str());
    let chosen = match (format, ext) {
        (Some(SpecFormat::Yaml), Some("json")) => {
            return Err(format!(
                "--format yaml, but {} ends in .json: name it .yaml, or leave out --format",
                output.map(|p| p.display().to_string()).unwrap_or_default()
            ))
        }
        (Some(f), _) => f,
        (None, Some("json")) => SpecFormat::Json,
        (None, _) => SpecFormat::Yaml,
    };
    let warning = match output {
        Some(p) if !ext.is_some_and(|e| LOADED_EXTENSIONS.contains(&e)) => Some(format!(
            "{} does not end in .json or .yaml: container runtimes load only those from their \
             CDI directories (/etc/cdi, /var/run/cdi)",
            p.display()
        )),
        _ => None,
    };
    Ok((chosen, warning))
}

/// Why a spec file could not be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteError {
    /// The kind of the I/O error, when an operation on the file system failed (`None`: the
    /// path cannot be used, e.g. its directory does not exist).
    pub kind: Option<std::io::ErrorKind>,
    /// What went wrong: `cannot write PATH: ...`.
    pub message: String,
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for WriteError {}

/// Writes `data` to `path` atomically: a temporary file in the same directory (a hidden
/// `.NAME.PID.tmp`, which runtimes watching the directory ignore), mode 0644, synced, then
/// renamed over `path`. The directory must exist.
///
/// # Errors
/// The directory does not exist, `path` is a directory, or writing fails (the temporary file
/// is removed; `path` is untouched).
pub fn write_atomically(path: &Path, data: &[u8]) -> Result<(), WriteError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let fail = |what: String, e: &std::io::Error| WriteError {
        kind: Some(e.kind()),
        message: format!("cannot write {}: {what}: {e}", path.display()),
    };
    let plain = |m: String| WriteError {
        kind: None,
        message: format!("cannot write {}: {m}", path.display()),
    };
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Err(plain("not a file name".into()));
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(plain(format!("{} is not a directory", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(plain(format!(
                "the directory {} does not exist (create it first: mkdir -p {})",
                dir.display(),
                dir.display()
            )))
        }
        Err(e) => return Err(fail(format!("cannot examine {}", dir.display()), &e)),
    }
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(plain("it is a directory".into()));
    }
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
    };
    let mut f = match open() {
        // Left by an earlier run of a process with this pid that died.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let _ = std::fs::remove_file(&tmp);
            open()
        }
        r => r,
    }
    .map_err(|e| fail(format!("cannot create {}", tmp.display()), &e))?;
    let written = f
        .write_all(data)
        // The umask may have taken bits away.
        .and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(0o644)))
        .and_then(|()| f.sync_all())
        .map_err(|e| fail(format!("cannot write {}", tmp.display()), &e))
        .and_then(|()| {
            std::fs::rename(&tmp, path).map_err(|e| {
                fail(
                    format!("cannot rename {} to {}", tmp.display(), path.display()),
                    &e,
                )
            })
        });
    drop(f);
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return written;
    }
    // Make the rename durable (best effort: not every filesystem syncs a directory).
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
