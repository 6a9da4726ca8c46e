//! How the commands reach a device: a control open behind a trait, so tests use fakes; and
//! [`Target`], a device found and opened.
//!
//! A `davinci-mockd` socket that exists but refuses the connection with `EPERM` gets a
//! reason beyond the shim's: who owns the socket, its group and mode, who the caller is,
//! and what would let the caller in.
#![forbid(unsafe_code)]

use std::path::Path;

use davinci_ops::discover::Entry;
use davinci_uapi::{
    ClientUsage, DeviceCounters, DeviceIdentity, DeviceInfo, DeviceSensors, Errno, ShareMode,
    TenantShareArgs,
};

use crate::error::SmiError;

/// One control open, as `davinci-smi` needs it.
pub trait DeviceAccess {
    /// GET_INFO.
    fn info(&self) -> Result<DeviceInfo, SmiError>;
    /// QUERY_DEVICE_SHARE: mode and attached clients.
    fn share(&self) -> Result<(ShareMode, u32), SmiError>;
    /// SET_DEVICE_SHARE.
    fn set_share(&self, mode: ShareMode) -> Result<(), SmiError>;
    /// LIST_CLIENTS.
    fn clients(&self) -> Result<Vec<ClientUsage>, SmiError>;
    /// GET_IDENTITY (ABI 1.4); `None` where the device does not report it.
    fn identity(&self) -> Result<Option<DeviceIdentity>, SmiError> {
        Ok(None)
    }
    /// GET_COUNTERS; `None` where the device does not report them.
    fn counters(&self) -> Result<Option<DeviceCounters>, SmiError> {
        Ok(None)
    }
    /// GET_SENSORS (ABI 1.5); `None` where the device does not report them.
    fn sensors(&self) -> Result<Option<DeviceSensors>, SmiError> {
        Ok(None)
    }
    /// READ_EVENTS (ABI 1.5): the device's whole event log (`read_events(0)`; what the
    /// caller may see of it). `ENOTTY` where the device does not have it.
    fn events(&self) -> Result<davinci_shim::EventBatch, SmiError> {
        Err(SmiError::new(
            Errno::ENOTTY,
            "READ_EVENTS failed: ENOTTY: unknown ioctl command",
        ))
    }
    /// TRACE, scope DEVICE (ABI 1.5, an admin's): every client's tasks for `duration`
    /// ([`davinci_shim::Control::trace_device`]); `progress` after each read.
    fn trace(
        &self,
        duration: std::time::Duration,
        progress: &mut dyn FnMut(std::time::Duration, usize),
    ) -> Result<davinci_shim::Trace, SmiError> {
        let _ = (duration, progress);
        Err(SmiError::new(
            Errno::ENOTTY,
            "TRACE failed: ENOTTY: unknown ioctl command",
        ))
    }
    /// TENANT_SHARE (ABI 1.5, an admin's): `tenant` (`user:UID` or `container:ID`, the
    /// whole id) read, or with `set` made to count for that many slots. `ENOTTY` where the
    /// device does not have it.
    fn tenant_share(&self, tenant: &str, set: Option<u32>) -> Result<TenantShareArgs, SmiError> {
        let _ = (tenant, set);
        Err(SmiError::new(
            Errno::ENOTTY,
            "TENANT_SHARE failed: ENOTTY: unknown ioctl command",
        ))
    }
}

/// Opens devices by path.
pub trait Opener {
    /// A control open of `path`.
    fn open(&self, path: &str) -> Result<Box<dyn DeviceAccess>, SmiError>;
}

impl DeviceAccess for davinci_shim::Control {
    fn info(&self) -> Result<DeviceInfo, SmiError> {
        Ok(davinci_shim::Control::info(self)?)
    }
    fn share(&self) -> Result<(ShareMode, u32), SmiError> {
        let s = davinci_shim::Control::share(self)?;
        Ok((s.mode, s.clients))
    }
    fn set_share(&self, mode: ShareMode) -> Result<(), SmiError> {
        Ok(self.set_share_mode(mode)?)
    }
    fn clients(&self) -> Result<Vec<ClientUsage>, SmiError> {
        Ok(davinci_shim::Control::clients(self)?)
    }
    fn identity(&self) -> Result<Option<DeviceIdentity>, SmiError> {
        Ok(Some(davinci_shim::Control::identity(self)?))
    }
    fn counters(&self) -> Result<Option<DeviceCounters>, SmiError> {
        Ok(Some(davinci_shim::Control::counters(self)?))
    }
    fn sensors(&self) -> Result<Option<DeviceSensors>, SmiError> {
        Ok(Some(davinci_shim::Control::sensors(self)?))
    }
    fn tenant_share(&self, tenant: &str, set: Option<u32>) -> Result<TenantShareArgs, SmiError> {
        Ok(davinci_shim::Control::tenant_share(self, tenant, set)?)
    }
    fn events(&self) -> Result<davinci_shim::EventBatch, SmiError> {
        Ok(self.read_events(0)?)
    }
    fn trace(
        &self,
        duration: std::time::Duration,
        progress: &mut dyn FnMut(std::time::Duration, usize),
    ) -> Result<davinci_shim::Trace, SmiError> {
        Ok(self.trace_device(duration, progress)?)
    }
}

/// A device a command is run on: what discovery found, and its control open (or why it
/// could not be opened).
pub(crate) struct Target {
    pub(crate) entry: Entry,
    pub(crate) dev: Result<Box<dyn DeviceAccess>, SmiError>,
}

/// Opens devices through the shim ([`davinci_shim::Control`]).
pub struct ShimOpener;

impl Opener for ShimOpener {
    fn open(&self, path: &str) -> Result<Box<dyn DeviceAccess>, SmiError> {
        match davinci_shim::Control::open(path) {
            Ok(c) => Ok(Box::new(c)),
            Err(e) => {
                let mut e = SmiError::from(e);
                // EPERM: the socket's own permissions (explained below). EACCES is the
                // client's trust rule refusing the socket, whose message says why already.
                if let (Some(Errno::EPERM), Some(sock)) = (e.errno, path.strip_prefix("mock:")) {
                    let why = permission_reason(
                        Path::new(sock),
                        FileFacts::of(Path::new(sock)),
                        Identity::of_process(),
                    );
                    e.message = format!("{}; {why}", e.message);
                }
                Err(e)
            }
        }
    }
}

/// Owner, group and permission bits of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileFacts {
    /// Owner uid.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// `st_mode & 0o7777`.
    pub mode: u32,
}

impl FileFacts {
    /// The facts of `path` (following links).
    ///
    /// # Errors
    /// The file cannot be examined.
    pub fn of(path: &Path) -> std::io::Result<FileFacts> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path)?;
        Ok(FileFacts {
            uid: m.uid(),
            gid: m.gid(),
            mode: m.mode() & 0o7777,
        })
    }
}

/// Who this process is, as permission checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Identity {
    /// From the contents of a `/proc/<pid>/status` file (`Uid:`, `Gid:` and `Groups:`
    /// lines; the effective ids are the second field).
    pub fn from_status(status: &str) -> Option<Identity> {
        let field = |name: &str| -> Option<Vec<u32>> {
            let rest = status.lines().find_map(|l| l.strip_prefix(name))?;
            Some(
                rest.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect(),
            )
        };
        Some(Identity {
            uid: *field("Uid:")?.get(1)?,
            gid: *field("Gid:")?.get(1)?,
            groups: field("Groups:").unwrap_or_default(),
        })
    }

    /// This process (`None` if `/proc/self/status` cannot be read).
    pub fn of_process() -> Option<Identity> {
        Identity::from_status(&std::fs::read_to_string("/proc/self/status").ok()?)
    }
}

/// Why connecting to the socket `sock` was refused, and what would allow it: the socket's
/// owner, group and mode against the caller's uid and groups (connecting needs write
/// permission on the socket and search permission on its directory).
pub fn permission_reason(
    sock: &Path,
    facts: std::io::Result<FileFacts>,
    me: Option<Identity>,
) -> String {
    let dir = sock
        .parent()
        .map_or_else(|| ".".to_string(), |d| d.display().to_string());
    let f = match facts {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return format!(
                "you may not search its directory {dir} (ask for search permission on it)"
            )
        }
        Err(e) => return format!("the socket cannot be examined: {e}"),
    };
    let owner = format!(
        "the socket is owned by uid {}, group {}, mode {:04o}",
        f.uid, f.gid, f.mode
    );
    let Some(me) = me else {
        return owner;
    };
    let in_group = me.gid == f.gid || me.groups.contains(&f.gid);
    let mut groups = vec![me.gid];
    groups.extend(me.groups.iter().copied().filter(|g| *g != me.gid));
    let groups: Vec<String> = groups.iter().map(u32::to_string).collect();
    let who = format!("you are uid {}, groups {}", me.uid, groups.join(","));
    let advice = if me.uid == f.uid {
        if f.mode & 0o200 != 0 {
            format!("the socket would let you in, so its directory {dir} does not (ask for search permission on it)")
        } else {
            "its mode gives its owner no write permission (start davinci-mockd with --socket-mode 0660)".to_string()
        }
    } else if in_group {
        if f.mode & 0o020 != 0 {
            format!("the socket would let you in, so its directory {dir} does not (ask for search permission on it)")
        } else {
            format!(
                "its mode gives group {} no write permission (start davinci-mockd with --socket-mode 0660)",
                f.gid
            )
        }
    } else if f.mode & 0o002 != 0 {
        format!("the socket would let you in, so its directory {dir} does not (ask for search permission on it)")
    } else {
        format!(
            "you are not in group {}: ask to be added to it (then log in again), or use a daemon \
             started with --socket-group naming one of your groups",
            f.gid
        )
    };
    format!("{owner}; {who}; {advice}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tdavinci-smi\nUid:\t1000\t1000\t1000\t1000\n\
        Gid:\t1000\t1000\t1000\t1000\nGroups:\t24 1000 \nVmPeak:\t1 kB\n";

    const HELPER_ENV: &str = "DAVINCI_SMI_TEST_HELPER_SOCKET";

    /// Not a test on its own: [`shim_opener_says_why_a_socket_refused_the_caller`] runs this
    /// test binary again as another user, with [`HELPER_ENV`] naming a socket.
    #[test]
    fn helper_open_as_another_user() {
        let Some(sock) = std::env::var_os(HELPER_ENV) else {
            return;
        };
        let path = format!("mock:{}", Path::new(&sock).display());
        match ShimOpener.open(&path) {
            Ok(_) => println!("\nHELPER-RESULT opened"),
            Err(e) => println!("\nHELPER-RESULT {}", e.message),
        }
    }

    #[test]
    fn shim_opener_says_why_a_socket_refused_the_caller() {
        use std::os::unix::fs::PermissionsExt;
        let root = Identity::of_process().is_some_and(|me| me.uid == 0);
        let setpriv = std::process::Command::new("setpriv")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !root || !setpriv {
            eprintln!("not root or no setpriv: the run-as-another-user test is skipped");
            return;
        }
        let dir = std::env::temp_dir().join(format!("smi-access-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("davinci0.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o660)).unwrap();
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=54321", "--regid=54321", "--clear-groups"])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "access::tests::helper_open_as_another_user",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ENV, &sock)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("HELPER-RESULT ").map(|(_, r)| r))
            .unwrap_or_else(|| {
                panic!(
                    "helper printed no result: {stdout}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        assert!(line.contains("permission denied"), "{line}");
        assert!(
            line.ends_with(
                "; the socket is owned by uid 0, group 0, mode 0660; you are uid 54321, \
                 groups 54321; you are not in group 0: ask to be added to it (then log in \
                 again), or use a daemon started with --socket-group naming one of your groups"
            ),
            "{line}"
        );
    }

    #[test]
    fn identity_from_proc_status() {
        assert_eq!(
            Identity::from_status(STATUS),
            Some(Identity {
                uid: 1000,
                gid: 1000,
                groups: vec![24, 1000]
            })
        );
        assert_eq!(Identity::from_status("Name:\tx\n"), None);
        let me = Identity::of_process().unwrap();
        assert_eq!(
            me.uid,
            std::fs::metadata("/proc/self").map_or(me.uid, |m| {
                use std::os::unix::fs::MetadataExt;
                m.uid()
            })
        );
    }

    #[test]
    fn why_a_socket_refused_the_caller() {
        let sock = Path::new("/run/davinci/davinci1.sock");
        let me = Identity::from_status(STATUS);
        let facts = |uid, gid, mode| Ok(FileFacts { uid, gid, mode });
        // Not in the socket's group: the common case.
        assert_eq!(
            permission_reason(sock, facts(0, 4243, 0o660), me.clone()),
            "the socket is owned by uid 0, group 4243, mode 0660; you are uid 1000, groups \
             1000,24; you are not in group 4243: ask to be added to it (then log in again), or \
             use a daemon started with --socket-group naming one of your groups"
        );
        // In the group, but the mode leaves the group out.
        let r = permission_reason(sock, facts(0, 24, 0o600), me.clone());
        assert!(r.ends_with("its mode gives group 24 no write permission (start davinci-mockd with --socket-mode 0660)"), "{r}");
        // The socket would let the caller in: the directory is what refuses.
        for f in [
            facts(0, 24, 0o660),
            facts(1000, 1, 0o600),
            facts(0, 1, 0o666),
        ] {
            let r = permission_reason(sock, f, me.clone());
            assert!(
                r.ends_with(
                    "so its directory /run/davinci does not (ask for search permission on it)"
                ),
                "{r}"
            );
        }
        let r = permission_reason(sock, facts(1000, 1, 0o400), me.clone());
        assert!(r.contains("gives its owner no write permission"), "{r}");
        // The socket cannot even be examined.
        let denied = Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        assert_eq!(
            permission_reason(sock, denied, me),
            "you may not search its directory /run/davinci (ask for search permission on it)"
        );
        assert_eq!(
            permission_reason(sock, facts(0, 4243, 0o660), None),
            "the socket is owned by uid 0, group 4243, mode 0660"
        );
    }
}
