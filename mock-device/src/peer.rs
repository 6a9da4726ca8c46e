//! Who is on the other end of a connection: container id from `/proc/<pid>/cgroup`,
//! supplementary groups from `/proc/<pid>/status`, and the admin policy.
//!
//! Both files are read right after `accept`, for the pid `SO_PEERCRED` recorded at
//! `connect`. A process that exits in between (or a pid reused in that window) reads as "no
//! container" and "no supplementary groups": the open then has less privilege, never more.
#![forbid(unsafe_code)]

use davinci_driver_core::CONTAINER_LEN;

use davinci_mockd_proto::sockio::PeerCred;

/// Prefixes of cgroup path components that wrap a container id (docker, containerd / CRI,
/// cri-o, podman), tried in this order.
const PREFIXES: &[&str] = &[
    "docker-",
    "cri-containerd-",
    "crio-",
    "libpod-",
    "containerd-",
];

fn is_hex(s: &str, len: std::ops::RangeInclusive<usize>) -> bool {
    len.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The container id in one cgroup path component, if it names a container: a runtime's
/// `<prefix><hex id>[.scope]`, or a bare 64-hex-digit id (`/docker/<id>`, kubepods).
fn component_id(comp: &str) -> Option<&str> {
    let comp = comp.strip_suffix(".scope").unwrap_or(comp);
    // `libpod-conmon-<id>.scope` is podman's monitor, not the container.
    if comp.starts_with("libpod-conmon-") {
        return None;
    }
    match PREFIXES.iter().find_map(|p| comp.strip_prefix(p)) {
        Some(id) => is_hex(id, 12..=CONTAINER_LEN).then_some(id),
        None => is_hex(comp, 64..=64).then_some(comp),
    }
}

/// The container id named by the contents of a `/proc/<pid>/cgroup` file: the innermost
/// path component that is a container id (`/docker/<id>`, `docker-<id>.scope`,
/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `libpod-<id>.scope`,
/// `/kubepods/.../pod<uid>/<id>`), or `""` if there is none (a process on the host).
pub fn container_id_from_cgroup(contents: &str) -> &str {
    let mut found = "";
    for line in contents.lines() {
        // hierarchy-ID:controller-list:cgroup-path
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        if let Some(id) = path.split('/').filter_map(component_id).next_back() {
            found = id;
        }
    }
    found
}

/// The container id of process `pid`, NUL-padded for `OpenParams::container`.
pub fn container_of_pid(pid: u32) -> [u8; CONTAINER_LEN] {
    let mut out = [0u8; CONTAINER_LEN];
    if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) {
        let id = container_id_from_cgroup(&s).as_bytes();
        let n = id.len().min(CONTAINER_LEN);
        out[..n].copy_from_slice(&id[..n]);
    }
    out
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

    const ID: &str = "3f1c2b8e9a7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170615e4d3";

    #[test]
    fn finds_container_ids_of_every_runtime() {
        let cases = [
            format!("0::/system.slice/docker-{ID}.scope\n"),
            format!("12:memory:/docker/{ID}\n11:cpu:/docker/{ID}\n"),
            format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c.slice/cri-containerd-{ID}.scope\n"),
            format!("0::/kubepods/burstable/pod0b0e2d35-2f6a-4c83-9a4f-8a2b1c0d9e8f/{ID}\n"),
            format!("0::/kubepods.slice/kubepods-pod1.slice/crio-{ID}.scope\n"),
            format!("0::/machine.slice/libpod-{ID}.scope/container\n"),
            format!("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope\n"),
        ];
        for c in &cases {
            assert_eq!(container_id_from_cgroup(c), ID, "{c}");
        }
    }

    #[test]
    fn host_processes_have_no_container() {
        for c in [
            "0::/user.slice/user-0.slice/session-3.scope\n",
            "0::/\n",
            "0::/init.scope\n",
            "",
            "garbage without colons\n",
            "0::/system.slice/docker.service\n",
            &format!("0::/machine.slice/libpod-conmon-{ID}.scope\n"),
            "0::/system.slice/docker-xyz.scope\n",
            // Hex, but not a container runtime's id: a sandbox's 32-digit cgroup name.
            "4:memory:/process_api/9de88d3c74547f98b91b60b33cc5d239\n",
        ] {
            assert_eq!(container_id_from_cgroup(c), "", "{c}");
        }
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
