//! Who is on the other end of a connection: container id from `/proc/<pid>/cgroup`,
//! supplementary groups from `/proc/<pid>/status`, and the admin policy.
//!
//! Both files are read right after `accept`, for the pid `SO_PEERCRED` recorded at
//! `connect`. A process that exits in between (or a pid reused in that window) reads as "no
//! container" and "no supplementary groups": the open then has less privilege, never more.
#![forbid(unsafe_code)]

use davinci_driver_core::container::container_field;
use davinci_driver_core::CONTAINER_LEN;

use davinci_mockd_proto::sockio::PeerCred;

pub use davinci_driver_core::container::container_id_from_cgroup;

/// The container id of process `pid`, NUL-padded for `OpenParams::container`.
pub fn container_of_pid(pid: u32) -> [u8; CONTAINER_LEN] {
    match std::fs::read_to_string(format!("/proc/{pid}/cgroup")) {
        Ok(s) => container_field(container_id_from_cgroup(&s)),
        Err(_) => [0; CONTAINER_LEN],
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
    /// Further admin uids (`--admin-uid`).
    pub uids: Vec<u32>,
    /// Admin groups (`--admin-group`): a peer whose primary or supplementary group is one.
    pub gids: Vec<u32>,
}

impl Default for AdminPolicy {
    fn default() -> Self {
        Self {
            root: true,
            uids: Vec::new(),
            gids: Vec::new(),
        }
    }
}

impl AdminPolicy {
    /// Whether a peer with these credentials and supplementary `groups` is an admin.
    pub fn is_admin_with(&self, cred: &PeerCred, groups: &[u32]) -> bool {
        (self.root && cred.uid == 0)
            || self.uids.contains(&cred.uid)
            || self.gids.contains(&cred.gid)
            || groups.iter().any(|g| self.gids.contains(g))
    }

    /// Whether the peer is an admin, reading its supplementary groups from `/proc` when the
    /// policy has admin groups.
    pub fn is_admin(&self, cred: &PeerCred) -> bool {
        let groups = if self.gids.is_empty() {
            Vec::new()
        } else {
            std::fs::read_to_string(format!("/proc/{}/status", cred.pid))
                .map(|s| groups_from_status(&s))
                .unwrap_or_default()
        };
        self.is_admin_with(cred, &groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            uids: vec![1000],
            gids: vec![],
        };
        assert!(!p.is_admin_with(&root, &[]));
        assert!(p.is_admin_with(&user, &[]));
        let g = AdminPolicy {
            root: false,
            uids: vec![],
            gids: vec![24],
        };
        assert!(g.is_admin_with(&user, &[4, 24]));
        assert!(!g.is_admin_with(&user, &[4]));
        assert!(g.is_admin_with(&PeerCred { gid: 24, ..user }, &[]));
    }
}
