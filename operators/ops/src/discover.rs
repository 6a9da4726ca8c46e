//! Which devices the operators' tools (`davinci-smi`, the exporter, the device plugin) talk
//! to: the same device selection as the shim (`--device PATH` / `DAVINCI_DEVICE`), or every
//! `davinci<N>.sock` in a `davinci-mockd` socket directory, or every `/dev/davinci<N>` node;
//! and, when nothing is found, every place that was searched and why it gave nothing.
//!
//! Without `--device`, `--socket-dir` or `DAVINCI_DEVICE` the places are searched in this
//! order and the first that has devices is used: `/dev/davinci<N>`; davinci-mockd's default
//! socket directory for the caller (`$DAVINCI_SOCKET_DIR`, else `/run/davinci` for root,
//! else `$XDG_RUNTIME_DIR/davinci`, else `/tmp/davinci-$UID`); the system's well-known
//! socket directory [`SYSTEM_SOCKET_DIR`] (`/run/davinci`, where a daemon run by root serves),
//! searched whoever runs the tool, as `/dev/davinciN` is one fixed place.
//!
//! A place that has sockets is used even if they cannot be opened: each device then shows
//! why (permission, a stale socket of a stopped daemon) instead of being skipped.
//!
//! A socket found in a directory is used only if nobody the caller does not trust could have
//! put it there ([`distrust`]), by the one rule every client applies
//! (`davinci_mockd_proto::trust`, docs/security.md "How clients find a daemon"): a per-user
//! directory (`/tmp/davinci-N`, `$XDG_RUNTIME_DIR/davinci`) is a real directory its user owns
//! and nobody else may write to; any other directory is owned by root, the caller or the
//! daemon's uid named in `$DAVINCI_MOCKD_UID`, and not writable by every user unless sticky;
//! and the socket is owned by root, the caller or that uid. The others are left out and said
//! ([`Found::ignored`]): a tool would otherwise send a device's work, or an operator's query,
//! to a socket another user planted, and advertise it. A device named explicitly
//! (`--device`, `DAVINCI_DEVICE`) is listed as named; opening it (the shim's `mock:` backend)
//! applies the same rule and refuses it with `EACCES` saying why.
#![forbid(unsafe_code)]

use std::io;
use std::path::{Path, PathBuf};

use davinci_mockd_proto::trust::{self, Trust};
use davinci_mockd_proto::{DirFacts, DirKind, SYSTEM_SOCKET_DIR};

/// One device to talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// N of davinciN, from the name (`None` when the path does not say; GET_INFO does).
    pub id: Option<u32>,
    /// The device path as the shim takes it (`/dev/davinci0`, `mock:/run/davinci/davinci0.sock`).
    pub path: String,
}

/// The `davinci-mockd` socket directories searched after the kernel nodes, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketDirs {
    /// The caller's default socket directory (`davinci_shim::default_socket_dir()`).
    pub user: PathBuf,
    /// Why [`user`](Self::user) is searched, for messages (`$DAVINCI_SOCKET_DIR`,
    /// `davinci-mockd's default for this user`).
    pub user_why: String,
    /// The system's socket directory, searched next by every user ([`SYSTEM_SOCKET_DIR`];
    /// `None` = not searched). Searched once when it is [`user`](Self::user) too.
    pub system: Option<PathBuf>,
}

impl From<PathBuf> for SocketDirs {
    /// One directory, taken as the caller's default; no system directory.
    fn from(user: PathBuf) -> Self {
        Self {
            user,
            user_why: "davinci-mockd's default socket directory".into(),
            system: None,
        }
    }
}

impl From<&str> for SocketDirs {
    /// One directory, taken as the caller's default; no system directory.
    fn from(user: &str) -> Self {
        PathBuf::from(user).into()
    }
}

impl SocketDirs {
    /// This process's: its default socket directory, then [`SYSTEM_SOCKET_DIR`].
    pub fn from_env() -> Self {
        let from_env = std::env::var_os("DAVINCI_SOCKET_DIR").is_some_and(|d| !d.is_empty());
        Self {
            user: davinci_shim::default_socket_dir(),
            user_why: if from_env {
                "$DAVINCI_SOCKET_DIR".into()
            } else {
                "davinci-mockd's default for this user".into()
            },
            system: Some(PathBuf::from(SYSTEM_SOCKET_DIR)),
        }
    }

    /// The directories in search order, each with why it is searched.
    pub fn in_order(&self) -> Vec<(&Path, String)> {
        let mut out = Vec::new();
        match &self.system {
            Some(s) if *s == self.user => {
                out.push((s.as_path(), "the system's socket directory".to_string()));
            }
            Some(s) => {
                out.push((self.user.as_path(), self.user_why.clone()));
                out.push((s.as_path(), "the system's socket directory".to_string()));
            }
            None => out.push((self.user.as_path(), self.user_why.clone())),
        }
        out
    }
}

/// Where devices are looked for (the environment, made explicit so it can be tested).
#[derive(Debug, Clone)]
pub struct Discovery {
    /// `DAVINCI_DEVICE`.
    pub device_env: Option<String>,
    /// Directory of kernel device nodes (`/dev`).
    pub dev_dir: PathBuf,
    /// `davinci-mockd`'s socket directories, searched in order after the kernel nodes: the
    /// caller's default, then the system's (a path converts to the first alone).
    pub default_socket_dir: SocketDirs,
}

impl Discovery {
    /// The process's environment.
    pub fn from_env() -> Self {
        Self {
            device_env: davinci_shim::device_path_from_env(),
            dev_dir: PathBuf::from("/dev"),
            default_socket_dir: SocketDirs::from_env(),
        }
    }
}

/// One place searched, and what it gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Searched {
    /// What was looked for: `/dev/davinci<N>`, `/run/davinci/davinci<N>.sock`,
    /// `--device PATH`, `DAVINCI_DEVICE=PATH`.
    pub place: String,
    /// Why it was searched, when that is not obvious from `place`.
    pub why: Option<String>,
    /// What was found, or why nothing was: `found davinci0, davinci1`, `none`,
    /// `no such directory`, `cannot list it: permission denied ...`.
    pub outcome: String,
}

/// What discovery found and every place it searched, in order (it stops at the first place
/// with devices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The devices.
    pub entries: Vec<Entry>,
    /// The places searched.
    pub searched: Vec<Searched>,
    /// Sockets found and left out because someone the caller does not trust could have put
    /// them there ([`distrust`]).
    pub ignored: Vec<Ignored>,
}

/// A socket discovery left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    /// The device path it would have been (`mock:/tmp/d/davinci1.sock`).
    pub path: String,
    /// Why it was left out, as a sentence.
    pub why: String,
}

/// Why a socket found in directory `dir` (`d`: its `stat`, or `lstat` for a per-user
/// directory) whose `lstat` is `link` (and, for a symbolic link, `target` its `stat`) may not
/// be used by a caller with `trust`, or `None` when it may: the one rule every client
/// applies (`davinci_mockd_proto::trust`), said as a clause.
pub fn distrust(
    dir: &Path,
    d: &DirFacts,
    link: &DirFacts,
    target: Option<&DirFacts>,
    trust: &Trust,
) -> Option<String> {
    trust::judge_dir(dir, d, trust)
        .and_then(|()| trust::judge_socket(link, target, trust))
        .err()
}

/// N from `davinci<N><suffix>` (digits only; `davinci_manager` and friends do not match).
pub fn index_of(name: &str, suffix: &str) -> Option<u32> {
    let digits = name.strip_prefix("davinci")?.strip_suffix(suffix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The id a device path names, if its file name says (`/dev/davinci3`, `.../davinci3.sock`).
pub fn id_from_path(path: &str) -> Option<u32> {
    let p = path.strip_prefix("mock:").unwrap_or(path);
    let name = Path::new(p).file_name()?.to_str()?;
    index_of(name, ".sock").or_else(|| index_of(name, ""))
}

/// The file names in `dir` (names that are not UTF-8 cannot be davinci devices).
fn list_dir(dir: &Path) -> io::Result<Vec<String>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect())
}

/// How discovery reads the file system (injected, so failures and other users' files can be
/// tested): a directory's names, and what a path is and who owns it (following a link or
/// not); and whom the caller trusts.
pub(crate) struct Fs<'a> {
    pub(crate) list: &'a dyn Fn(&Path) -> io::Result<Vec<String>>,
    pub(crate) owner: &'a dyn Fn(&Path, bool) -> io::Result<DirFacts>,
    pub(crate) trust: Trust,
}

/// The `davinci<N><suffix>` entries of a directory listing, sorted by N, as paths with
/// `prefix`; what to say about the place; and, with `judge` (socket directories), the
/// entries left out as untrusted ([`distrust`]).
fn scan_listing(
    dir: &Path,
    listing: io::Result<Vec<String>>,
    suffix: &str,
    prefix: &str,
    judge: Option<&Fs<'_>>,
) -> (Vec<Entry>, String, Vec<Ignored>) {
    let names = match listing {
        Ok(n) => n,
        Err(e) => {
            return (
                Vec::new(),
                listing_failure(dir, suffix, prefix, &e),
                Vec::new(),
            )
        }
    };
    let mut out: Vec<Entry> = names
        .iter()
        .filter_map(|name| {
            let id = index_of(name, suffix)?;
            Some(Entry {
                id: Some(id),
                path: format!("{prefix}{}", dir.join(name).display()),
            })
        })
        .collect();
    out.sort_by_key(|e| e.id);
    let mut ignored = Vec::new();
    if let Some(fs) = judge {
        // A per-user directory is looked at itself (a link there is refused), any other
        // through links, as the daemon does.
        let private = fs.trust.per_user_owner(dir).is_some();
        let d = (fs.owner)(dir, !private);
        out.retain(|e| {
            let file = Path::new(e.path.strip_prefix(prefix).unwrap_or(&e.path));
            let link = (fs.owner)(file, false);
            let target = match &link {
                Ok(l) if l.kind == DirKind::Symlink => Some((fs.owner)(file, true)),
                _ => None,
            };
            let why = match (&d, link, target) {
                (Ok(d), Ok(l), None) => distrust(dir, d, &l, None, &fs.trust),
                (Ok(d), Ok(l), Some(Ok(t))) => distrust(dir, d, &l, Some(&t), &fs.trust),
                (Err(err), _, _) => Some(format!("cannot tell who owns its directory: {err}")),
                (_, Err(err), _) | (_, _, Some(Err(err))) => {
                    Some(format!("cannot tell who owns it: {err}"))
                }
            };
            match why {
                Some(why) => {
                    ignored.push(Ignored {
                        path: e.path.clone(),
                        why,
                    });
                    false
                }
                None => true,
            }
        });
    }
    let mut outcome = if out.is_empty() {
        "none".to_string()
    } else {
        let ids: Vec<String> = out
            .iter()
            .filter_map(|e| e.id.map(crate::device_name))
            .collect();
        format!("found {}", ids.join(", "))
    };
    if !ignored.is_empty() {
        outcome.push_str(&format!(
            " ({} ignored as untrusted: {})",
            ignored.len(),
            ignored
                .iter()
                .map(|i| i.path.rsplit('/').next().unwrap_or(&i.path).to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    (out, outcome, ignored)
}

/// Why a directory could not be listed, and what to do.
fn listing_failure(dir: &Path, suffix: &str, prefix: &str, e: &io::Error) -> String {
    let d = dir.display();
    match e.kind() {
        io::ErrorKind::NotFound => "no such directory".into(),
        io::ErrorKind::PermissionDenied => format!(
            "cannot list it: permission denied (ask for read and search permission on {d}; \
             with search permission alone, name a device: --device {prefix}{d}/davinci0{suffix})"
        ),
        io::ErrorKind::NotADirectory => "not a directory".into(),
        _ => format!("cannot list it: {e}"),
    }
}

/// The real file system, for a caller with this process's uid and environment
/// ([`Trust::from_env`]).
fn real_fs() -> Fs<'static> {
    Fs {
        list: &list_dir,
        owner: &DirFacts::of,
        trust: Trust::from_env(),
    }
}

/// Every trusted `davinci<N>.sock` in a socket directory ([`distrust`]).
pub fn sockets_in(dir: &Path) -> Vec<Entry> {
    let fs = real_fs();
    scan_listing(dir, list_dir(dir), ".sock", "mock:", Some(&fs)).0
}

/// Discovery with the file system injected (`fs`), so failures can be tested.
pub(crate) fn discover_with(
    devices: &[String],
    socket_dir: Option<&Path>,
    d: &Discovery,
    fs: &Fs<'_>,
) -> Found {
    let one = |place: String, entries: Vec<Entry>| Found {
        searched: vec![Searched {
            place,
            why: None,
            outcome: format!("{} named", entries.len()),
        }],
        entries,
        ignored: Vec::new(),
    };
    if !devices.is_empty() {
        let entries = devices
            .iter()
            .map(|p| Entry {
                id: id_from_path(p),
                path: p.clone(),
            })
            .collect();
        return one(format!("--device {}", devices.join(", ")), entries);
    }
    let mut searched = Vec::new();
    let mut ignored = Vec::new();
    let mut look = |dir: &Path, suffix: &str, prefix: &str, why: Option<String>| {
        // Sockets are judged; kernel nodes are not (udev makes them, in a directory only
        // root may write).
        let judge = (suffix == ".sock").then_some(fs);
        let (entries, outcome, left_out) = scan_listing(dir, (fs.list)(dir), suffix, prefix, judge);
        searched.push(Searched {
            place: format!("{}/davinci<N>{suffix}", dir.display()),
            why,
            outcome,
        });
        ignored.extend(left_out);
        entries
    };
    if let Some(dir) = socket_dir {
        let entries = look(dir, ".sock", "mock:", Some("--socket-dir".into()));
        return Found {
            entries,
            searched,
            ignored,
        };
    }
    if let Some(p) = &d.device_env {
        let entries = vec![Entry {
            id: id_from_path(p),
            path: p.clone(),
        }];
        return one(format!("DAVINCI_DEVICE={p}"), entries);
    }
    let mut entries = look(&d.dev_dir, "", "", None);
    for (dir, why) in d.default_socket_dir.in_order() {
        if !entries.is_empty() {
            break;
        }
        entries = look(dir, ".sock", "mock:", Some(why));
    }
    Found {
        entries,
        searched,
        ignored,
    }
}

/// The devices selected by the command line and the environment, and every place searched:
/// `--device` paths; else `--socket-dir`; else `DAVINCI_DEVICE`; else the first of
/// `/dev/davinci<N>`, the caller's default socket directory and the system's that has
/// devices.
pub fn discover(devices: &[String], socket_dir: Option<&Path>, d: &Discovery) -> Found {
    discover_with(devices, socket_dir, d, &real_fs())
}

/// One line per socket [`discover`] left out as untrusted, for a tool's stderr:
/// `warning: ignoring PATH: WHY`.
pub fn ignored_warnings(found: &Found) -> Vec<String> {
    found
        .ignored
        .iter()
        .map(|i| format!("warning: ignoring {}: {}", i.path, i.why))
        .collect()
}

/// The devices of [`discover`]. Empty if no place has any.
pub fn select(devices: &[String], socket_dir: Option<&Path>, d: &Discovery) -> Vec<Entry> {
    discover(devices, socket_dir, d).entries
}

/// The places [`discover`] searched, for one line of text: each with why it was searched
/// and what it gave, then what to do when nothing was found.
pub fn describe_searched(found: &Found) -> String {
    let mut parts: Vec<String> = found
        .searched
        .iter()
        .map(|s| match &s.why {
            Some(why) => format!("{} ({why}): {}", s.place, s.outcome),
            None => format!("{}: {}", s.place, s.outcome),
        })
        .collect();
    if found.entries.is_empty() {
        parts.push("name a device with --device, --socket-dir or DAVINCI_DEVICE".into());
    }
    parts.join("; ")
}

/// Where [`select`] looked, for the "no devices" message: [`describe_searched`] of
/// [`discover`].
pub fn searched(devices: &[String], socket_dir: Option<&Path>, d: &Discovery) -> String {
    describe_searched(&discover(devices, socket_dir, d))
}

#[cfg(test)]
mod tests;
