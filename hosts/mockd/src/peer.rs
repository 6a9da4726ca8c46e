//! Who is on the other end of a connection ([`Identity`]): pid, uid and gid from
//! `SO_PEERCRED`, container id from `/proc/<pid>/cgroup`, process name from
//! `/proc/<pid>/comm`, supplementary groups from `/proc/<pid>/status`, and the admin policy.
//!
//! All of it is taken once, in the accept loop right after `accept`, for the process that
//! called `connect` (the kernel's `SO_PEERCRED`), never re-read later: a child that connects
//! and passes the socket on is who the open is attributed to, as the kernel driver attributes
//! an open to its opener. A pidfd of that process (`SO_PEERPIDFD`) is taken before the
//! `/proc` reads and polled after them: if the process had exited by then, its pid may
//! already name another process, so what was read is dropped and the open gets no
//! container, no name and no supplementary groups: less privilege, never someone else's.
#![forbid(unsafe_code)]

use std::os::fd::{AsFd, OwnedFd};

use davinci_driver_core::container::container_field;
use davinci_driver_core::{Tenant, CONTAINER_LEN};

use davinci_mockd_proto::sockio::{PeerCred, SeqPacket};

/// Who connected, as taken at accept ([`identify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// `SO_PEERCRED`: the connecting process's pid, uid and gid at `connect`.
    pub cred: PeerCred,
    /// Whether the peer may change device sharing and see every client ([`AdminPolicy`]).
    pub admin: bool,
    /// Container id, NUL-padded (empty on the host or when the process was gone).
    pub container: [u8; CONTAINER_LEN],
    /// Process name, NUL-padded (empty when the process was gone).
    pub comm: [u8; 16],
    /// Whose quotas bind the peer: its container, else its user; a peer in the daemon's own
    /// container counts by user ([`Tenant::of_beside`]: that container is the host).
    pub tenant: Tenant,
}

/// Takes the identity of the process that connected `conn` (see the module's text).
///
/// # Errors
/// No peer credentials (`getsockopt` failed).
pub fn identify(conn: &SeqPacket, policy: &AdminPolicy) -> std::io::Result<Identity> {
    let cred = conn.peer_cred()?;
    // Before Linux 6.5 there is no SO_PEERPIDFD: the reads are then trusted as read (a pid
    // reused between connect and accept would lend its container and name).
    let pidfd = match conn.peer_pidfd() {
        Ok(fd) => Some(fd),
        Err(e) if e.raw_os_error() == Some(nix::libc::ESRCH) => {
            return Ok(Identity::gone(cred, policy));
        }
        Err(_) => None,
    };
    let groups = if policy.gids.is_empty() {
        Vec::new()
    } else {
        std::fs::read_to_string(format!("/proc/{}/status", cred.pid))
            .map(|s| groups_from_status(&s))
            .unwrap_or_default()
    };
    let container = container_of_pid(cred.pid);
    let comm = comm_of_pid(cred.pid);
    if pidfd.as_ref().is_some_and(has_exited) {
        return Ok(Identity::gone(cred, policy));
    }
    Ok(Identity {
        cred,
        admin: policy.is_admin_with(&cred, &groups),
        container,
        comm,
        tenant: Tenant::of_beside(cred.uid, &container, own_container()),
    })
}

impl Identity {
    /// A peer whose process had exited before it could be read: credentials only.
    fn gone(cred: PeerCred, policy: &AdminPolicy) -> Identity {
        Identity {
            cred,
            admin: policy.is_admin_with(&cred, &[]),
            container: [0; CONTAINER_LEN],
            comm: [0; 16],
            tenant: Tenant::User(cred.uid),
        }
    }
}

/// The daemon's own container (all NULs on the host), read once.
pub fn own_container() -> &'static [u8; CONTAINER_LEN] {
    static OWN: std::sync::OnceLock<[u8; CONTAINER_LEN]> = std::sync::OnceLock::new();
    OWN.get_or_init(|| container_of_pid(std::process::id()))
}

/// Whether the process behind `pidfd` has exited (a pidfd polls readable then).
fn has_exited(pidfd: &OwnedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(0) => false,
        // Readable (exited) or any error: do not trust the reads.
        _ => true,
    }
}

pub use davinci_driver_core::container::container_id_from_cgroup;

/// The container id of process `pid`, NUL-padded for `OpenParams::container`.
pub fn container_of_pid(pid: u32) -> [u8; CONTAINER_LEN] {
    match std::fs::read_to_string(format!("/proc/{pid}/cgroup")) {
        Ok(s) => container_field(container_id_from_cgroup(&s)),
        Err(_) => [0; CONTAINER_LEN],
    }
}

/// The process name (`comm`) of process `pid`, as `OpenParams::comm`; empty if it cannot be
/// read (the process is gone). Read once at open, like the container id.
pub fn comm_of_pid(pid: u32) -> [u8; 16] {
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(s) => davinci_uapi::ClientUsage::comm_field(s.trim_end_matches('\n')),
        Err(_) => [0; 16],
    }
}

/// The supplementary groups in the contents of a `/proc/<pid>/status` file.
pub fn groups_from_status(contents: &str) -> Vec<u32> {
    contents
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Who may change device sharing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminPolicy {
    /// uid 0 is an admin (the default; `--no-root-admin` turns it off).
    pub root: bool,
    /// The uid the daemon runs as, when it is not 0: the user who started their own daemon
    /// may change its sharing (the default of `davinci-mockd`; `--no-owner-admin` turns it
    /// off). uid 0 is governed by [`root`](Self::root) alone, so `--no-root-admin` holds for
    /// a daemon run by root.
    pub owner: Option<u32>,
    /// Further admin uids (`--admin-uid`).
    pub uids: Vec<u32>,
    /// Admin groups (`--admin-group`): a peer whose primary or supplementary group is one.
    pub gids: Vec<u32>,
}

impl Default for AdminPolicy {
    /// uid 0 only (no owner: see [`AdminPolicy::owned_by`]).
    fn default() -> Self {
        Self {
            root: true,
            owner: None,
            uids: Vec::new(),
            gids: Vec::new(),
        }
    }
}

impl AdminPolicy {
    /// The default policy of a daemon running as `uid`: uid 0, and `uid` itself.
    pub fn owned_by(uid: u32) -> Self {
        Self {
            owner: (uid != 0).then_some(uid),
            ..Self::default()
        }
    }

    /// Whether nobody at all is an admin (every SET_DEVICE_SHARE is refused).
    pub fn is_nobody(&self) -> bool {
        !self.root && self.owner.is_none() && self.uids.is_empty() && self.gids.is_empty()
    }

    /// Whether a peer with these credentials and supplementary `groups` is an admin.
    pub fn is_admin_with(&self, cred: &PeerCred, groups: &[u32]) -> bool {
        (self.root && cred.uid == 0)
            || self.owner == Some(cred.uid)
            || self.uids.contains(&cred.uid)
            || self.gids.contains(&cred.gid)
            || groups.iter().any(|g| self.gids.contains(g))
    }

    /// The admins in words, for the start-up log and messages: `uid 0 (root), uid 1000 (the
    /// daemon's user), uid 1001, members of group 4242`, or `nobody`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.root {
            parts.push("uid 0 (root)".to_string());
        }
        if let Some(o) = self.owner {
            parts.push(format!("uid {o} (the daemon's user)"));
        }
        for u in &self.uids {
            if Some(*u) != self.owner && !(self.root && *u == 0) {
                parts.push(format!("uid {u}"));
            }
        }
        if !self.gids.is_empty() {
            let g: Vec<String> = self.gids.iter().map(u32::to_string).collect();
            let noun = if g.len() == 1 { "group" } else { "groups" };
            parts.push(format!("members of {noun} {}", g.join(", ")));
        }
        if parts.is_empty() {
            "nobody".into()
        } else {
            parts.join(", ")
        }
    }

    /// What `davinci-mockd` adds to a refused sharing change (`EPERM`): who the peer is, who
    /// the admins are, and how to become one.
    pub fn eperm_hint(&self, cred: &PeerCred) -> String {
        let mut how = format!("restart davinci-mockd with --admin-uid {}", cred.uid);
        if !self.gids.is_empty() {
            how.push_str(" or join an admin group");
        } else {
            how.push_str(" or --admin-group GROUP (and join that group)");
        }
        let admins = if self.is_nobody() {
            "nobody is its admin".to_string()
        } else {
            format!("its admins are {}", self.describe())
        };
        format!(
            "davinci-mockd: you are uid {} (gid {}); {admins}; to become one, {how}",
            cred.uid, cred.gid
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_peer_is_identified_as_it_was_at_connect() {
        let dir = std::env::temp_dir().join(format!("davinci-peer-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = davinci_mockd_proto::sockio::SeqListener::bind(&path, 0o600).unwrap();
        let _client = SeqPacket::connect(&path).unwrap();
        let conn = listener.accept().unwrap();
        let me = std::process::id();
        let policy = AdminPolicy {
            root: false,
            ..AdminPolicy::default()
        };
        let who = identify(&conn, &policy).unwrap();
        assert_eq!(who.cred.pid, me);
        assert_eq!(who.container, container_of_pid(me));
        assert_eq!(who.comm, comm_of_pid(me));
        assert_ne!(who.comm, [0; 16], "this process has a name");
        assert!(!who.admin, "nobody is an admin under this policy");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_gone_peer_keeps_only_its_credentials() {
        let cred = PeerCred {
            pid: 4_000_000,
            uid: 0,
            gid: 0,
        };
        let who = Identity::gone(cred, &AdminPolicy::default());
        assert_eq!((who.container, who.comm), ([0; CONTAINER_LEN], [0; 16]));
        assert!(who.admin, "uid 0 is still root by its credentials");
        let groups_only = AdminPolicy {
            root: false,
            gids: vec![4242],
            ..AdminPolicy::default()
        };
        let user = PeerCred {
            uid: 1000,
            gid: 1000,
            ..cred
        };
        assert!(
            !Identity::gone(user, &groups_only).admin,
            "supplementary groups of a gone process are not trusted"
        );
    }

    #[test]
    fn container_of_this_process_is_well_formed() {
        let c = container_of_pid(std::process::id());
        let end = c.iter().position(|&b| b == 0).unwrap_or(CONTAINER_LEN);
        assert!(c[..end].iter().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(container_of_pid(u32::MAX), [0; CONTAINER_LEN]);
    }

    #[test]
    fn groups_and_admin_policy() {
        let status = "Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 1001 \nVmPeak: 1\n";
        assert_eq!(groups_from_status(status), vec![4, 24, 1001]);
        assert_eq!(groups_from_status("Groups:\n"), Vec::<u32>::new());
        assert_eq!(groups_from_status("Name: y\n"), Vec::<u32>::new());

        let root = PeerCred {
            pid: 1,
            uid: 0,
            gid: 0,
        };
        let user = PeerCred {
            pid: 1,
            uid: 1000,
            gid: 1000,
        };
        let default = AdminPolicy::default();
        assert!(default.is_admin_with(&root, &[]));
        assert!(!default.is_admin_with(&user, &[4, 24]));
        let p = AdminPolicy {
            root: false,
            owner: None,
            uids: vec![1000],
            gids: vec![],
        };
        assert!(!p.is_admin_with(&root, &[]));
        assert!(p.is_admin_with(&user, &[]));
        let g = AdminPolicy {
            root: false,
            owner: None,
            uids: vec![],
            gids: vec![24],
        };
        assert!(g.is_admin_with(&user, &[4, 24]));
        assert!(!g.is_admin_with(&user, &[4]));
        assert!(g.is_admin_with(&PeerCred { gid: 24, ..user }, &[]));
    }

    #[test]
    fn the_daemons_own_user_is_an_admin_unless_switched_off() {
        let user = PeerCred {
            pid: 1,
            uid: 1000,
            gid: 1000,
        };
        let other = PeerCred { uid: 1001, ..user };
        let root = PeerCred {
            pid: 1,
            uid: 0,
            gid: 0,
        };
        let p = AdminPolicy::owned_by(1000);
        assert!(p.is_admin_with(&user, &[]));
        assert!(!p.is_admin_with(&other, &[]));
        assert!(p.is_admin_with(&root, &[]));
        // --no-owner-admin.
        let off = AdminPolicy { owner: None, ..p };
        assert!(!off.is_admin_with(&user, &[]));
        // A daemon run by root: --no-root-admin still makes uid 0 no admin.
        let r = AdminPolicy {
            root: false,
            ..AdminPolicy::owned_by(0)
        };
        assert_eq!(r.owner, None);
        assert!(!r.is_admin_with(&root, &[]));
    }

    #[test]
    fn admins_in_words_and_the_eperm_hint() {
        let user = PeerCred {
            pid: 1,
            uid: 1001,
            gid: 1001,
        };
        let p = AdminPolicy {
            uids: vec![0, 1000, 1002],
            gids: vec![4242],
            ..AdminPolicy::owned_by(1000)
        };
        assert_eq!(
            p.describe(),
            "uid 0 (root), uid 1000 (the daemon's user), uid 1002, members of group 4242"
        );
        let h = p.eperm_hint(&user);
        assert!(h.contains("you are uid 1001 (gid 1001)"), "{h}");
        assert!(h.contains("--admin-uid 1001 or join an admin group"), "{h}");
        let none = AdminPolicy {
            root: false,
            ..AdminPolicy::default()
        };
        assert_eq!(none.describe(), "nobody");
        assert!(none.is_nobody() && !p.is_nobody());
        let h = none.eperm_hint(&user);
        assert!(h.contains("; nobody is its admin; to become one, restart davinci-mockd with --admin-uid 1001 or --admin-group GROUP"), "{h}");
        let two = AdminPolicy {
            gids: vec![1, 2],
            ..none
        };
        assert_eq!(two.describe(), "members of groups 1, 2");
    }
}
