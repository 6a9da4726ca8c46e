//! Which `davinci-mockd` sockets a client connects to: one rule for every client (the shim's
//! `mock:` devices, `libdavinci-preload.so`, and the discovery of `davinci-smi`, the exporter
//! and the device plugin), the daemon's own rule for its directory ([`dir_fault`], which
//! [`check_socket_dir`](crate::check_socket_dir) applies too) seen from the other side.
//!
//! Whoever put a socket where a client looks sees everything the client sends the device
//! (its input, in "device memory") and decides what it gets back. So, before connecting:
//!
//! * **the socket's directory**: a per-user directory (`/tmp/davinci-N` is uid N's,
//!   `$XDG_RUNTIME_DIR/davinci` the caller's) must be a real directory (not a symbolic link),
//!   owned by its user and writable by nobody else; any other directory (`/run/davinci`,
//!   `--socket-dir`, `$DAVINCI_SOCKET_DIR`, the directory of a `mock:PATH` named by hand)
//!   must be owned by a uid the caller trusts and not writable by every user unless sticky;
//! * **the socket**: owned by a uid the caller trusts (a symbolic link and what it names,
//!   both);
//! * **after connecting**: the process listening on it (`SO_PEERCRED`) runs as a uid the
//!   caller trusts, so a socket swapped between the look and the connect is refused too.
//!
//! The uids a caller trusts ([`Trust`]): root, the caller itself, and the daemon's uid an
//! operator names in `$DAVINCI_MOCKD_UID` ([`MOCKD_UID_ENV`]). A socket path named by hand
//! is checked by the same rule: naming it chooses the place, not whom to trust.
//!
//! Anything else is refused with the path, what was found, what was expected and what to
//! do. A socket or directory that does not exist, or cannot be examined, is left to
//! `connect(2)`, which then fails as it always did (`ENOENT`, `EACCES`).

use std::ffi::OsStr;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::sockio::SeqPacket;
use crate::{DirFacts, DirKind};

/// The environment variable naming the uid of the `davinci-mockd` a client may connect to
/// besides root's and its own (a number).
pub const MOCKD_UID_ENV: &str = "DAVINCI_MOCKD_UID";

/// Whom a client trusts to serve its devices: root, itself, and the daemon's uid an operator
/// named ([`MOCKD_UID_ENV`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trust {
    /// The caller's uid.
    pub caller: u32,
    /// The daemon's uid the operator named, if any.
    pub daemon: Option<u32>,
    /// [`MOCKD_UID_ENV`] when it is set but is not a uid (said in refusals, then ignored).
    pub unparsed_daemon: Option<String>,
    /// `$XDG_RUNTIME_DIR`, which makes `$XDG_RUNTIME_DIR/davinci` the caller's own directory.
    pub xdg_runtime_dir: Option<PathBuf>,
}

impl Trust {
    /// Root and `caller` only.
    pub fn new(caller: u32) -> Trust {
        Trust {
            caller,
            daemon: None,
            unparsed_daemon: None,
            xdg_runtime_dir: None,
        }
    }

    /// For `caller`, given [`MOCKD_UID_ENV`] (`daemon`) and `$XDG_RUNTIME_DIR` (`xdg`). Empty
    /// values count as unset.
    pub fn from_vars(caller: u32, daemon: Option<&OsStr>, xdg: Option<&OsStr>) -> Trust {
        let daemon = daemon.filter(|v| !v.is_empty());
        let parsed = daemon
            .and_then(OsStr::to_str)
            .and_then(|v| v.trim().parse::<u32>().ok());
        Trust {
            caller,
            daemon: parsed,
            unparsed_daemon: match (daemon, parsed) {
                (Some(v), None) => Some(v.to_string_lossy().into_owned()),
                _ => None,
            },
            xdg_runtime_dir: xdg.filter(|d| !d.is_empty()).map(PathBuf::from),
        }
    }

    /// This process's: its uid, [`MOCKD_UID_ENV`] and `$XDG_RUNTIME_DIR`.
    pub fn from_env() -> Trust {
        Trust::from_vars(
            nix::unistd::getuid().as_raw(),
            std::env::var_os(MOCKD_UID_ENV).as_deref(),
            std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
        )
    }

    /// Whether a socket, directory or daemon of `uid` is trusted.
    pub fn trusts(&self, uid: u32) -> bool {
        uid == 0 || uid == self.caller || self.daemon == Some(uid)
    }

    /// The trusted uids, for messages: `root or you (uid 1000)`.
    fn trusted(&self) -> String {
        let mut who = vec!["root".to_string()];
        if self.caller != 0 {
            who.push(format!("you (uid {})", self.caller));
        }
        match self.daemon {
            Some(d) if !self.trusts_without_daemon(d) => {
                who.push(format!("uid {d} (${MOCKD_UID_ENV})"));
            }
            _ => {}
        }
        match who.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => "root (you)".to_string(),
        }
    }

    fn trusts_without_daemon(&self, uid: u32) -> bool {
        uid == 0 || uid == self.caller
    }

    /// What to do about a socket, directory or daemon of another `uid`.
    fn name_it(&self, uid: u32) -> String {
        let mut s = format!(
            "if uid {uid} runs the davinci-mockd you mean to use, say so with {MOCKD_UID_ENV}={uid}"
        );
        if let Some(v) = &self.unparsed_daemon {
            s.push_str(&format!(
                " (it is set to {v:?}, which is not a uid, so it was ignored)"
            ));
        }
        s
    }

    /// Whose per-user socket directory `dir` is: `/tmp/davinci-N` is uid N's,
    /// `$XDG_RUNTIME_DIR/davinci` the caller's; `None` for any other directory.
    pub fn per_user_owner(&self, dir: &Path) -> Option<u32> {
        if let Some(x) = &self.xdg_runtime_dir {
            if same_path(dir, &x.join("davinci")) {
                return Some(self.caller);
            }
        }
        let parent = dir.parent()?;
        if !same_path(parent, Path::new("/tmp")) {
            return None;
        }
        let digits = dir.file_name()?.to_str()?.strip_prefix("davinci-")?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }
}

/// Whether two paths name the same place by their components (`/tmp/./x/` is `/tmp/x`).
fn same_path(a: &Path, b: &Path) -> bool {
    let parts = |p| Path::components(p).filter(|c| *c != Component::CurDir);
    parts(a).eq(parts(b))
}

/// What is wrong with a socket directory by the one rule ([`dir_fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirFault {
    /// A symbolic link where a per-user directory must be.
    Symlink,
    /// Not a directory.
    NotDirectory,
    /// Owned by this uid, whom the rule does not trust.
    Owner(u32),
    /// A per-user directory others may write to (these mode bits).
    WritableByOthers(u32),
    /// A shared directory every user may write to and not sticky (these mode bits).
    WritableByEveryone(u32),
}

/// The rule for a socket directory, the daemon's and its clients': a `private` (per-user)
/// directory must be a real directory owned by a uid `owner_ok` accepts and writable by
/// nobody else (no group or other write permission); any other directory (seen through
/// links: `facts` from `stat`) must be owned by a uid `owner_ok` accepts and not writable
/// by every user unless it is sticky (group write permission is a deliberate grant there).
/// `None` when the directory passes.
pub fn dir_fault(
    facts: &DirFacts,
    private: bool,
    owner_ok: impl Fn(u32) -> bool,
) -> Option<DirFault> {
    match facts.kind {
        DirKind::Directory => {}
        DirKind::Symlink => return Some(DirFault::Symlink),
        DirKind::Other => return Some(DirFault::NotDirectory),
    }
    if !owner_ok(facts.uid) {
        return Some(DirFault::Owner(facts.uid));
    }
    let mode = facts.mode;
    if private && mode & 0o022 != 0 {
        return Some(DirFault::WritableByOthers(mode));
    }
    if !private && mode & 0o002 != 0 && mode & 0o1000 == 0 {
        return Some(DirFault::WritableByEveryone(mode));
    }
    None
}

/// Why a client with `trust` may not use sockets in directory `dir` (`facts`: from `lstat`
/// for a per-user directory, [`Trust::per_user_owner`], from `stat` otherwise), as a clause
/// to follow "refusing SOCKET: "; `Ok` when it may.
///
/// # Errors
/// The directory, what was found, what was expected, and what to do.
pub fn judge_dir(dir: &Path, facts: &DirFacts, trust: &Trust) -> Result<(), String> {
    let d = dir.display();
    let user = trust.per_user_owner(dir);
    let fault = match user {
        Some(u) => dir_fault(facts, true, |o| o == u),
        None => dir_fault(facts, false, |o| trust.trusts(o)),
    };
    let Some(fault) = fault else {
        return Ok(());
    };
    let per_user = |u: u32| {
        let whose = if u == trust.caller {
            format!("your (uid {u}) per-user socket directory")
        } else {
            format!("uid {u}'s per-user socket directory")
        };
        let instead = if u == trust.caller {
            "; or set XDG_RUNTIME_DIR (or DAVINCI_SOCKET_DIR) to a directory of your own, for \
             davinci-mockd and its clients alike"
        } else {
            ""
        };
        (whose, instead)
    };
    Err(match (fault, user) {
        (DirFault::Symlink, Some(u)) => {
            let (whose, instead) = per_user(u);
            format!(
                "its directory {d} is a symbolic link, but {whose} must be a real directory \
                 (whoever controls the link chooses the daemon you reach); remove the link \
                 (rm {d}) and restart davinci-mockd{instead}"
            )
        }
        (DirFault::Symlink | DirFault::NotDirectory, _) => {
            format!("{d} is not a directory")
        }
        (DirFault::Owner(found), Some(u)) => {
            let (whose, instead) = per_user(u);
            format!(
                "its directory {d} is owned by uid {found}, but {whose} must be owned by uid \
                 {u} and writable by nobody else: uid {found} made it, and could have put any \
                 socket there; have it removed (as root or uid {found}: rm -r {d}) and restart \
                 davinci-mockd{instead}"
            )
        }
        (DirFault::Owner(found), None) => format!(
            "its directory {d} is owned by uid {found}, not by {}, so uid {found} could have \
             put any socket there; {}, or use another socket directory",
            trust.trusted(),
            trust.name_it(found)
        ),
        (DirFault::WritableByOthers(m), Some(u)) => {
            let (whose, _) = per_user(u);
            format!(
                "its directory {d} (mode {m:04o}) is writable by other users, but {whose} must \
                 be writable by nobody else, or they could have put any socket there; run \
                 chmod go-w {d} as uid {u}, or remove it and restart davinci-mockd"
            )
        }
        (DirFault::WritableByOthers(m) | DirFault::WritableByEveryone(m), _) => format!(
            "its directory {d} (mode {m:04o}) is writable by every user and not sticky, so \
             anyone could have put any socket there; run chmod o-w {d} (or chmod +t {d}), or \
             use another socket directory"
        ),
    })
}

/// Why a client with `trust` may not connect to `socket` (`link`: its `lstat`; `target`:
/// its `stat` when it is a symbolic link), as a clause to follow "refusing SOCKET: "; `Ok`
/// when it may.
///
/// # Errors
/// Who owns it, whom the caller trusts, and what to do.
pub fn judge_socket(
    link: &DirFacts,
    target: Option<&DirFacts>,
    trust: &Trust,
) -> Result<(), String> {
    let owned = |what: &str, uid: u32| {
        format!(
            "{what} is owned by uid {uid}, not by {}: another user's socket, which would see \
             everything you send the device; {}",
            trust.trusted(),
            trust.name_it(uid)
        )
    };
    if !trust.trusts(link.uid) {
        let what = if link.kind == DirKind::Symlink {
            "the symbolic link"
        } else {
            "the socket"
        };
        return Err(owned(what, link.uid));
    }
    match target {
        Some(t) if !trust.trusts(t.uid) => Err(owned("the socket the link names", t.uid)),
        _ => Ok(()),
    }
}

/// Why a daemon running as `peer_uid` is not one `trust` accepts, as a clause to follow
/// "refusing SOCKET: "; `Ok` when it is.
///
/// # Errors
/// Who listens, whom the caller trusts, and what to do.
pub fn judge_peer(peer_uid: u32, trust: &Trust) -> Result<(), String> {
    if trust.trusts(peer_uid) {
        return Ok(());
    }
    Err(format!(
        "the process listening on it runs as uid {peer_uid}, not as {}; {}",
        trust.trusted(),
        trust.name_it(peer_uid)
    ))
}

/// A refusal of `socket` for `why`, as an [`io::ErrorKind::PermissionDenied`] error
/// (clients give it as `EACCES`).
pub fn refusal(socket: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("refusing {}: {why}", socket.display()),
    )
}

/// The directory a socket path is in (`.` for a bare name).
pub fn dir_of(socket: &Path) -> &Path {
    match socket.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Whether a client with `trust` may connect to `socket`, by this module's rule, looking at
/// the file system (`lstat` for a per-user directory and the socket, `stat` for a shared
/// directory and what a link names). A directory or socket that does not exist, or cannot be
/// examined, passes: `connect(2)` then fails on it as it would have.
///
/// # Errors
/// [`refusal`]: `PermissionDenied`, naming the path and why.
pub fn check_socket(socket: &Path, trust: &Trust) -> io::Result<()> {
    let dir = dir_of(socket);
    let private = trust.per_user_owner(dir).is_some();
    let Ok(d) = DirFacts::of(dir, !private) else {
        return Ok(());
    };
    judge_dir(dir, &d, trust).map_err(|why| refusal(socket, &why))?;
    let Ok(link) = DirFacts::of(socket, false) else {
        return Ok(());
    };
    let target = if link.kind == DirKind::Symlink {
        DirFacts::of(socket, true).ok()
    } else {
        None
    };
    judge_socket(&link, target.as_ref(), trust).map_err(|why| refusal(socket, &why))
}

/// Connects to `socket` within `timeout` if [`check_socket`] allows it, and keeps the
/// connection only if the process listening runs as a uid `trust` accepts ([`judge_peer`]).
///
/// # Errors
/// A [`refusal`] (`PermissionDenied`), or the `connect(2)` error, or `TimedOut`.
pub fn connect_trusted(socket: &Path, trust: &Trust, timeout: Duration) -> io::Result<SeqPacket> {
    check_socket(socket, trust)?;
    let conn = SeqPacket::connect_within(socket, timeout)?;
    let peer = conn.peer_cred()?;
    judge_peer(peer.uid, trust).map_err(|why| refusal(socket, &why))?;
    Ok(conn)
}

#[cfg(test)]
mod tests;
