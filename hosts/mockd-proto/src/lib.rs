//! What `davinci-mockd` and its clients share: the wire protocol ([`wire`], re-exported
//! here), `SOCK_SEQPACKET` socket I/O with descriptor passing ([`sockio`]), the client of
//! one connection (tags, reply timeout, CANCEL: [`client`]), and where the
//! sockets live and which directories may hold them ([`default_socket_dir`],
//! [`choose_socket_dir`], [`check_socket_dir`], [`socket_name`]), and which sockets a
//! client may connect to ([`trust`]: the same rule from the client's side).
//!
//! The daemon (`davinci-mock-device`) and the runtime library (`davinci-shim`, whose
//! `mock:SOCKET` backend is a client of the daemon) both depend on this crate and on nothing
//! of each other: a runtime that talks to a daemon does not link the device.
//!
//! `unsafe` is in [`sockio`] only (adopting descriptors the kernel just installed).
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod client;
mod premapped;
pub mod sockio;
pub mod trust;
pub mod wire;

pub use premapped::Premapped;
pub use trust::{check_socket, connect_trusted, DirFault, Trust};
pub use wire::*;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The system's well-known socket directory: root's default, and a place `davinci-smi`
/// searches whoever runs it (as `/dev/davinciN` is one fixed place).
pub const SYSTEM_SOCKET_DIR: &str = "/run/davinci";

/// File name of device `n`'s socket.
pub fn socket_name(n: u32) -> String {
    format!("davinci{n}.sock")
}

/// How a socket directory was chosen. It decides who must own the directory and who may
/// write to it ([`check_socket_dir`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketDirOrigin {
    /// Named by the operator (`--socket-dir`, `$DAVINCI_SOCKET_DIR`): may be a directory
    /// shared with a group.
    Explicit,
    /// [`SYSTEM_SOCKET_DIR`], root's default.
    System,
    /// A per-user fallback (`$XDG_RUNTIME_DIR/davinci`, `/tmp/davinci-$UID`): private to the
    /// user whose daemon uses it.
    Private,
}

/// A socket directory and how it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketDir {
    /// The directory.
    pub path: PathBuf,
    /// How it was chosen.
    pub origin: SocketDirOrigin,
}

impl From<PathBuf> for SocketDir {
    /// A directory named by the operator ([`SocketDirOrigin::Explicit`]).
    fn from(path: PathBuf) -> Self {
        Self {
            path,
            origin: SocketDirOrigin::Explicit,
        }
    }
}

impl From<&Path> for SocketDir {
    /// A directory named by the operator ([`SocketDirOrigin::Explicit`]).
    fn from(path: &Path) -> Self {
        path.to_path_buf().into()
    }
}

/// The socket directory for a process of `uid` given `$DAVINCI_SOCKET_DIR` (`env_dir`) and
/// `$XDG_RUNTIME_DIR` (`xdg_runtime_dir`): `env_dir`, else [`SYSTEM_SOCKET_DIR`] for uid 0,
/// else `$XDG_RUNTIME_DIR/davinci`, else `/tmp/davinci-$UID`. Empty values count as unset.
pub fn choose_socket_dir(
    uid: u32,
    env_dir: Option<&OsStr>,
    xdg_runtime_dir: Option<&OsStr>,
) -> SocketDir {
    if let Some(d) = env_dir.filter(|d| !d.is_empty()) {
        return PathBuf::from(d).into();
    }
    if uid == 0 {
        return SocketDir {
            path: PathBuf::from(SYSTEM_SOCKET_DIR),
            origin: SocketDirOrigin::System,
        };
    }
    let path = match xdg_runtime_dir.filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("davinci"),
        None => PathBuf::from(format!("/tmp/davinci-{uid}")),
    };
    SocketDir {
        path,
        origin: SocketDirOrigin::Private,
    }
}

/// [`choose_socket_dir`] for this process (its uid and environment).
pub fn default_socket_dir_choice() -> SocketDir {
    choose_socket_dir(
        nix::unistd::getuid().as_raw(),
        std::env::var_os("DAVINCI_SOCKET_DIR").as_deref(),
        std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
    )
}

/// The socket directory used when none is given: `$DAVINCI_SOCKET_DIR`, else
/// `/run/davinci` for root, else `$XDG_RUNTIME_DIR/davinci`, else `/tmp/davinci-$UID`.
pub fn default_socket_dir() -> PathBuf {
    default_socket_dir_choice().path
}

/// What kind of file a socket-directory path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirKind {
    /// A directory.
    Directory,
    /// A symbolic link (only seen where links are not followed: private directories).
    Symlink,
    /// Anything else.
    Other,
}

/// What [`check_socket_dir`] looks at: the file type, owner and permission bits of the
/// directory (`lstat` for a [`SocketDirOrigin::Private`] directory, `stat` otherwise). The
/// client's rule ([`trust`]) looks at a socket's the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirFacts {
    /// File type.
    pub kind: DirKind,
    /// Owner.
    pub uid: u32,
    /// Mode bits (`st_mode & 0o7777`).
    pub mode: u32,
}

impl DirFacts {
    /// The facts of `path`: `lstat` when `follow` is false (a link is then
    /// [`DirKind::Symlink`]), `stat` when it is true.
    ///
    /// # Errors
    /// The path cannot be examined (it does not exist, or a parent is not searchable).
    pub fn of(path: &Path, follow: bool) -> std::io::Result<DirFacts> {
        use std::os::unix::fs::MetadataExt;
        let m = if follow {
            std::fs::metadata(path)?
        } else {
            std::fs::symlink_metadata(path)?
        };
        let t = m.file_type();
        let kind = if t.is_dir() {
            DirKind::Directory
        } else if t.is_symlink() {
            DirKind::Symlink
        } else {
            DirKind::Other
        };
        Ok(DirFacts {
            kind,
            uid: m.uid(),
            mode: m.mode() & 0o7777,
        })
    }
}

/// Whether a daemon running as `daemon_uid` may put its sockets in `dir` (whose state is
/// `facts`). Whoever can write to a socket directory can replace the daemon's sockets with
/// their own and see every client that connects, so, as `ssh-agent` and `tmux` do:
///
/// * a [`SocketDirOrigin::Private`] directory (`/tmp/davinci-$UID`,
///   `$XDG_RUNTIME_DIR/davinci`) must be a real directory (not a symbolic link), owned by
///   `daemon_uid`, and writable by nobody else (no group or other write permission);
/// * a [`SocketDirOrigin::System`] or [`SocketDirOrigin::Explicit`] directory must be a
///   directory owned by `daemon_uid` or by root and not writable by every user unless it is
///   sticky (`chmod +t`: then nobody can remove or rename another user's files). Group write
///   permission is allowed there: a directory shared with a group is a deliberate choice.
///
/// The rule is [`trust::dir_fault`], which clients apply to the directories they find sockets
/// in ([`trust::judge_dir`]).
///
/// # Errors
/// What is wrong with the directory and how to fix it, as one sentence.
pub fn check_socket_dir(daemon_uid: u32, dir: &SocketDir, facts: &DirFacts) -> Result<(), String> {
    let p = dir.path.display();
    let refuse =
        |why: String, fix: String| Err(format!("refusing socket directory {p}: {why}; {fix}"));
    let private = dir.origin == SocketDirOrigin::Private;
    let owner_ok = |uid: u32| uid == daemon_uid || (!private && uid == 0);
    match trust::dir_fault(facts, private, owner_ok) {
        None => Ok(()),
        Some(DirFault::Symlink) => refuse(
            "it is a symbolic link (whoever controls the link controls where the sockets go)"
                .into(),
            format!("remove it (rm {p}) and let davinci-mockd create the directory, or choose one with --socket-dir"),
        ),
        Some(DirFault::NotDirectory) => refuse(
            "it is not a directory".into(),
            "remove it or choose another directory with --socket-dir".into(),
        ),
        Some(DirFault::Owner(found)) => {
            let allowed = if private || daemon_uid == 0 {
                format!("uid {daemon_uid} (the daemon's user)")
            } else {
                format!("uid {daemon_uid} (the daemon's user) or root")
            };
            refuse(
                format!(
                    "it is owned by uid {found}, not by {allowed}, so its owner could replace the sockets"
                ),
                format!("remove it (rm -r {p}) and let davinci-mockd create it, or choose another directory with --socket-dir"),
            )
        }
        Some(DirFault::WritableByOthers(mode)) => refuse(
            format!(
                "mode {mode:04o} lets other users write to it, so they could replace the sockets"
            ),
            format!("run chmod go-w {p}, or remove it and let davinci-mockd create it"),
        ),
        Some(DirFault::WritableByEveryone(mode)) => refuse(
            format!("mode {mode:04o} lets every user write to it, so anyone could replace the sockets"),
            format!("run chmod o-w {p} (or chmod +t {p} to make it sticky), or choose another directory with --socket-dir"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn default_dir_by_uid_and_environment() {
        let explicit = choose_socket_dir(1000, os("/srv/d"), os("/run/user/1000"));
        assert_eq!(explicit, SocketDir::from(PathBuf::from("/srv/d")));
        assert_eq!(explicit.origin, SocketDirOrigin::Explicit);
        let root = choose_socket_dir(0, os(""), os("/run/user/0"));
        assert_eq!(
            (root.path.to_str(), root.origin),
            (Some("/run/davinci"), SocketDirOrigin::System)
        );
        let xdg = choose_socket_dir(1000, None, os("/run/user/1000"));
        assert_eq!(
            (xdg.path.to_str(), xdg.origin),
            (Some("/run/user/1000/davinci"), SocketDirOrigin::Private)
        );
        let tmp = choose_socket_dir(1000, None, os(""));
        assert_eq!(
            (tmp.path.to_str(), tmp.origin),
            (Some("/tmp/davinci-1000"), SocketDirOrigin::Private)
        );
        assert_eq!(socket_name(3), "davinci3.sock");
    }

    fn facts(kind: DirKind, uid: u32, mode: u32) -> DirFacts {
        DirFacts { kind, uid, mode }
    }

    #[test]
    fn private_dirs_must_be_the_users_own_and_not_writable_by_others() {
        let d = choose_socket_dir(1000, None, None);
        let dir = DirKind::Directory;
        assert_eq!(check_socket_dir(1000, &d, &facts(dir, 1000, 0o755)), Ok(()));
        assert_eq!(check_socket_dir(1000, &d, &facts(dir, 1000, 0o700)), Ok(()));
        // Pre-created by someone else, world-writable: the case of issue 11.
        let e = check_socket_dir(1000, &d, &facts(dir, 1001, 0o777)).unwrap_err();
        assert!(
            e.contains("/tmp/davinci-1000") && e.contains("owned by uid 1001"),
            "{e}"
        );
        assert!(e.contains("rm -r /tmp/davinci-1000"), "{e}");
        // Root owning a user's private directory is not good enough either.
        assert!(check_socket_dir(1000, &d, &facts(dir, 0, 0o755)).is_err());
        for mode in [0o777, 0o775, 0o757, 0o1777, 0o720] {
            let e = check_socket_dir(1000, &d, &facts(dir, 1000, mode)).unwrap_err();
            assert!(e.contains("chmod go-w"), "{mode:o}: {e}");
        }
        let e = check_socket_dir(1000, &d, &facts(DirKind::Symlink, 1000, 0o777)).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        let e = check_socket_dir(1000, &d, &facts(DirKind::Other, 1000, 0o644)).unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
    }

    #[test]
    fn system_and_explicit_dirs_may_be_shared_with_a_group() {
        let sys = choose_socket_dir(0, None, None);
        let exp = SocketDir::from(PathBuf::from("/srv/davinci"));
        let dir = DirKind::Directory;
        for d in [&sys, &exp] {
            assert_eq!(check_socket_dir(0, d, &facts(dir, 0, 0o755)), Ok(()));
            // A group directory (setgid, group-writable) and a sticky shared one.
            assert_eq!(check_socket_dir(0, d, &facts(dir, 0, 0o2775)), Ok(()));
            assert_eq!(check_socket_dir(0, d, &facts(dir, 0, 0o1777)), Ok(()));
            let e = check_socket_dir(0, d, &facts(dir, 0, 0o777)).unwrap_err();
            assert!(e.contains("every user") && e.contains("chmod o-w"), "{e}");
            let e = check_socket_dir(0, d, &facts(dir, 1000, 0o755)).unwrap_err();
            assert!(e.contains("owned by uid 1000"), "{e}");
        }
        // A non-root daemon may use a root-owned directory or its own.
        assert_eq!(check_socket_dir(1000, &exp, &facts(dir, 0, 0o2775)), Ok(()));
        assert_eq!(
            check_socket_dir(1000, &exp, &facts(dir, 1000, 0o755)),
            Ok(())
        );
        let e = check_socket_dir(1000, &exp, &facts(dir, 1001, 0o755)).unwrap_err();
        assert!(e.contains("or root"), "{e}");
    }

    #[test]
    fn facts_of_real_paths() {
        use std::os::unix::fs::MetadataExt;
        let base = std::env::temp_dir().join(format!("mockd-proto-facts-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let link = base.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&base, &link).unwrap();
        let me = std::fs::metadata(&base).unwrap().uid();
        assert_eq!(DirFacts::of(&link, false).unwrap().kind, DirKind::Symlink);
        let f = DirFacts::of(&link, true).unwrap();
        assert_eq!((f.kind, f.uid), (DirKind::Directory, me));
        assert!(DirFacts::of(&base.join("nope"), true).is_err());
        let _ = std::fs::remove_dir_all(&base);
    }
}
