//! The container a client runs in, from its cgroup path: the same rule for every host (the
//! mock daemon reads `/proc/<pid>/cgroup`, the kernel module asks the cgroup core for the
//! opener's cgroup v2 path).
//!
//! A container runtime puts each container in a cgroup whose name carries the container id:
//! `docker-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`, `libpod-<id>.scope`,
//! `containerd-<id>`, or a bare 64-hex-digit `<id>` (`/docker/<id>`, cgroupfs kubepods). The
//! innermost such component names the container; a path without one is a process on the host.

use crate::limits::CONTAINER_LEN;

/// Prefixes of cgroup path components that wrap a container id (docker, containerd / CRI,
/// cri-o, podman), tried in this order.
const PREFIXES: &[&str] = &[
    "docker-",
    "cri-containerd-",
    "crio-",
    "libpod-",
    "containerd-",
];

fn is_hex(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The container id in one cgroup path component, if it names a container.
fn component_id(comp: &str) -> Option<&str> {
    let comp = comp.strip_suffix(".scope").unwrap_or(comp);
    // `libpod-conmon-<id>.scope` is podman's monitor, not the container.
    if comp.starts_with("libpod-conmon-") {
        return None;
    }
    match PREFIXES.iter().find_map(|p| comp.strip_prefix(p)) {
        Some(id) => is_hex(id, 12, CONTAINER_LEN).then_some(id),
        None => is_hex(comp, 64, 64).then_some(comp),
    }
}

/// The container id named by one cgroup path (`/system.slice/docker-<id>.scope`): its
/// innermost component that is a container id, or `""`.
pub fn container_id_from_path(path: &str) -> &str {
    path.split('/')
        .filter_map(component_id)
        .next_back()
        .unwrap_or("")
}

/// The container id named by the contents of a `/proc/<pid>/cgroup` file
/// (`hierarchy-ID:controller-list:cgroup-path` lines): the last line's that names one, or
/// `""` if none does (a process on the host).
pub fn container_id_from_cgroup(contents: &str) -> &str {
    let mut found = "";
    for line in contents.lines() {
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        let id = container_id_from_path(path);
        if !id.is_empty() {
            found = id;
        }
    }
    found
}

/// `id` as `OpenParams::container`: NUL-padded, cut to [`CONTAINER_LEN`] bytes.
pub fn container_field(id: &str) -> [u8; CONTAINER_LEN] {
    let mut out = [0u8; CONTAINER_LEN];
    for (d, s) in out.iter_mut().zip(id.bytes()) {
        *d = s;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f1c2b8e9a7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170615e4d3";

    #[test]
    fn finds_container_ids_of_every_runtime() {
        extern crate std;
        use std::format;
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
            let path = c.lines().next().unwrap().splitn(3, ':').nth(2).unwrap();
            assert_eq!(container_id_from_path(path), ID, "{path}");
        }
        let f = container_field(ID);
        assert_eq!(&f[..64], ID.as_bytes());
        assert_eq!(container_field(""), [0; CONTAINER_LEN]);
    }

    #[test]
    fn host_processes_have_no_container() {
        extern crate std;
        let conmon = std::format!("0::/machine.slice/libpod-conmon-{ID}.scope\n");
        for c in [
            "0::/user.slice/user-0.slice/session-3.scope\n",
            "0::/\n",
            "0::/init.scope\n",
            "",
            "garbage without colons\n",
            "0::/system.slice/docker.service\n",
            &conmon,
            "0::/system.slice/docker-xyz.scope\n",
            // Hex, but not a container runtime's id: a sandbox's 32-digit cgroup name.
            "4:memory:/process_api/9de88d3c74547f98b91b60b33cc5d239\n",
        ] {
            assert_eq!(container_id_from_cgroup(c), "", "{c}");
        }
        assert_eq!(container_id_from_path("/"), "");
        assert_eq!(container_id_from_path(""), "");
    }
}
