//! The socket directory at start-up: created if missing, then checked, itself
//! (`davinci_mockd_proto::check_socket_dir`) and every directory on the way to it from `/`
//! ([`check_lookups`]), because whoever can move the directory, or any directory above it,
//! can put their own `davinci0.sock` in its place and see every client that connects.
//!
//! The rule for the directories above it (the "parents"), each one every name on the way is
//! looked up in, symbolic links followed as the kernel follows them:
//!
//! * owned by root or by the daemon's user;
//! * not writable by every user, unless it is sticky (`chmod +t`, like `/tmp`);
//! * not writable by its group, unless it is sticky, or it is owned by root and the socket
//!   directory is an explicit or system one (`--socket-dir`, `$DAVINCI_SOCKET_DIR`,
//!   `/run/davinci`): a group-writable directory root made is the system's deliberate
//!   grant (like `/var/mail`); one the daemon's user made group-writable is more likely
//!   a umask than a decision, and a per-user fallback directory (`/tmp/davinci-$UID`,
//!   `$XDG_RUNTIME_DIR/davinci`) is private to its user all the way;
//! * in a sticky directory that others may write to, the entry on the way (the next
//!   directory, or a symbolic link) is owned by root or the daemon's user: the sticky bit
//!   keeps others from moving entries they do not own, which is what makes
//!   `/tmp/davinci-$UID` safe, and only that.
//!
//! The check is a pure function over facts collected first ([`Lookup`]), so its cases are
//! tested without root.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use davinci_mockd_proto::{check_socket_dir, DirFacts, SocketDir, SocketDirOrigin};

/// At most this many symbolic links are followed on the way (the kernel's limit).
const MAX_LINKS: usize = 40;

/// One name looked up on the way to the socket directory: the directory it was looked up
/// in, and the entry found there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lookup {
    /// The directory the name was looked up in (its path has no symbolic link in it).
    pub(crate) dir: PathBuf,
    /// Its owner.
    pub(crate) uid: u32,
    /// Its group.
    pub(crate) gid: u32,
    /// Its mode bits (`st_mode & 0o7777`).
    pub(crate) mode: u32,
    /// The entry found in it: a directory or a symbolic link.
    pub(crate) entry: PathBuf,
    /// The entry's owner (not following a link: a link's owner may move the link).
    pub(crate) entry_uid: u32,
}

/// Every name looked up on the way to `path` from `/` (a relative `path` from the current
/// directory), following symbolic links as the kernel does, the last one only if
/// `follow_last`; and where the way ends (the last entry, with links followed as asked).
///
/// # Errors
/// A directory on the way cannot be examined, or too many symbolic links.
pub(crate) fn lookups(path: &Path, follow_last: bool) -> io::Result<(Vec<Lookup>, PathBuf)> {
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let mut todo = names(&path);
    let mut at = PathBuf::from("/");
    let (mut out, mut links) = (Vec::new(), 0);
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            // `at` has no link in it, so its parent is lexical.
            at.pop();
            continue;
        }
        let entry = at.join(&name);
        let d = std::fs::symlink_metadata(&at)?;
        let e = std::fs::symlink_metadata(&entry)?;
        out.push(Lookup {
            dir: at.clone(),
            uid: d.uid(),
            gid: d.gid(),
            mode: d.mode() & 0o7777,
            entry: entry.clone(),
            entry_uid: e.uid(),
        });
        if e.file_type().is_symlink() && (follow_last || !todo.is_empty()) {
            links += 1;
            if links > MAX_LINKS {
                return Err(io::Error::other(format!(
                    "{}: more than {MAX_LINKS} symbolic links on the way",
                    path.display()
                )));
            }
            let target = std::fs::read_link(&entry)?;
            if target.is_absolute() {
                at = PathBuf::from("/");
            }
            for n in names(&target).into_iter().rev() {
                todo.push_front(n);
            }
        } else {
            at = entry;
        }
    }
    Ok((out, at))
}

/// The names of `path` to look up in turn (`..` kept, `.` and `/` dropped).
fn names(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// Whether every lookup on the way to `socket_dir` (chosen as `origin`) leaves it in the
/// hands of root and `daemon_uid` only (the rule in this module's documentation).
///
/// # Errors
/// The first directory on the way that breaks the rule, the rule, and what to do, as one
/// sentence.
pub(crate) fn check_lookups(
    daemon_uid: u32,
    origin: SocketDirOrigin,
    socket_dir: &Path,
    lookups: &[Lookup],
) -> Result<(), String> {
    let trusted = |uid: u32| uid == 0 || uid == daemon_uid;
    let us = if daemon_uid == 0 {
        "root".to_string()
    } else {
        format!("root or uid {daemon_uid} (the daemon's user)")
    };
    let refuse = |l: &Lookup, why: String, rule: &str, fix: String| {
        Err(format!(
            "refusing socket directory {}: {why}, so they could move {} away and put their \
             own sockets in its place ({rule}); {fix}",
            socket_dir.display(),
            l.entry.display(),
        ))
    };
    let elsewhere = "or choose a socket directory elsewhere with --socket-dir";
    for l in lookups {
        let (d, m) = (l.dir.display(), l.mode);
        let sticky = m & 0o1000 != 0;
        if !trusted(l.uid) {
            return refuse(
                l,
                format!(
                    "the directory {d} above it is owned by uid {}, not by {us}",
                    l.uid
                ),
                "every directory above the socket directory must be owned by root or the \
                 daemon's user",
                "choose a socket directory elsewhere with --socket-dir".to_string(),
            );
        }
        if m & 0o002 != 0 && !sticky {
            return refuse(
                l,
                format!("the directory {d} above it (mode {m:04o}) is writable by every user and not sticky"),
                "a directory above the socket directory may be writable by others only if it \
                 is sticky",
                format!("run chmod o-w {d} (or chmod +t {d}), {elsewhere}"),
            );
        }
        let group_ok = l.uid == 0 && origin != SocketDirOrigin::Private;
        if m & 0o020 != 0 && !sticky && !group_ok {
            let rule = if origin == SocketDirOrigin::Private {
                "a per-user socket directory's parents may be writable by their group only if \
                 sticky"
            } else {
                "a directory above the socket directory may be writable by its group only if \
                 root owns it or it is sticky"
            };
            return refuse(
                l,
                format!(
                    "the directory {d} above it (mode {m:04o}, owner uid {}) is writable by its \
                     group {}, and not sticky",
                    l.uid, l.gid
                ),
                rule,
                format!("run chmod g-w {d} (or chmod +t {d}), {elsewhere}"),
            );
        }
        if sticky && m & 0o022 != 0 && !trusted(l.entry_uid) {
            return refuse(
                l,
                format!(
                    "{} is owned by uid {}, not by {us}, and in the sticky directory {d} (mode \
                     {m:04o}) above it the owner of an entry may still move it",
                    l.entry.display(),
                    l.entry_uid
                ),
                "in a sticky directory above the socket directory, the entry on the way must \
                 be owned by root or the daemon's user",
                "choose a socket directory elsewhere with --socket-dir".to_string(),
            );
        }
    }
    Ok(())
}

fn refused(e: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, e)
}

/// Creates the socket directory if it is missing (mode 0755, parents too) and checks that
/// the daemon may use it: the directory itself ([`check_socket_dir`]) and every directory
/// on the way to it ([`check_lookups`]), whether it created it or found it. A missing
/// directory's way is checked before anything is created on it. Returns whether it created
/// the directory.
///
/// A private directory is examined without following a symbolic link (a link in `/tmp` is
/// someone else's to redirect); an explicit or system directory is followed.
///
/// # Errors
/// The directory cannot be created or examined, or may not be used.
pub fn prepare_socket_dir(dir: &SocketDir, daemon_uid: u32) -> io::Result<bool> {
    use std::os::unix::fs::DirBuilderExt;
    let p = dir.path.display();
    let cannot = |what: &str, e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("cannot {what} socket directory {p}: {e} (choose one with --socket-dir)"),
        )
    };
    let existed = std::fs::symlink_metadata(&dir.path).is_ok();
    if !existed {
        // The deepest directory that exists, and the one to be created in it.
        let mut base = dir.path.clone();
        let mut next = None;
        while std::fs::symlink_metadata(&base).is_err() {
            next = base.file_name().map(OsString::from);
            if !base.pop() || base.as_os_str().is_empty() {
                base = std::env::current_dir().map_err(|e| cannot("examine", e))?;
                break;
            }
        }
        let (mut way, at) = lookups(&base, true).map_err(|e| cannot("examine", e))?;
        let m = std::fs::metadata(&at).map_err(|e| cannot("examine", e))?;
        way.push(Lookup {
            dir: at.clone(),
            uid: m.uid(),
            gid: m.gid(),
            mode: m.mode() & 0o7777,
            entry: at.join(next.unwrap_or_default()),
            entry_uid: daemon_uid,
        });
        check_lookups(daemon_uid, dir.origin, &dir.path, &way).map_err(refused)?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir.path)
            .map_err(|e| cannot("create", e))?;
    }
    let follow = dir.origin != SocketDirOrigin::Private;
    let facts = DirFacts::of(&dir.path, follow).map_err(|e| cannot("examine", e))?;
    check_socket_dir(daemon_uid, dir, &facts).map_err(refused)?;
    let (way, _) = lookups(&dir.path, follow).map_err(|e| cannot("examine", e))?;
    check_lookups(daemon_uid, dir.origin, &dir.path, &way).map_err(refused)?;
    Ok(!existed)
}

#[cfg(test)]
mod tests;
