//! Files the tools write (a CDI spec, the device plugin's status file): written through a
//! new temporary file in the same directory (`O_EXCL`: never through a symbolic link or a
//! file someone planted there), synced, and renamed over the target, so a reader never sees
//! half of one and a planted link never redirects the write.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Why a file could not be written.
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
