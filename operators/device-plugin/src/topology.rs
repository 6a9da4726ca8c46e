//! The NUMA node of a device, sent to the kubelet as each of its IDs' `topology` so that
//! its Topology Manager (kubelet 1.18 on; `single-numa-node` and `restricted` policies)
//! can align the device with the CPUs and memory given to the container.
//!
//! Where it comes from is [`numa_node`]'s business alone: today sysfs, for a kernel device
//! node; a `davinci-mockd` device has none. A device without one is sent without
//! `topology`, which the kubelet takes as "no preference".
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use crate::api;

/// The NUMA node of the device at `path` (as the shim takes it: `/dev/davinciN` or
/// `mock:...`), if known: for a kernel device node, its sysfs device's `numa_node`
/// (`/sys/dev/char/MAJ:MIN/device/numa_node`, else
/// `/sys/class/davinci/davinciN/device/numa_node`); none for a mock device, a node that is
/// not a character device, a missing or unreadable file, or `-1` (the kernel's "no node").
///
/// Called by every health check (`daemon::health`), which has the device's GET_INFO
/// answer at hand: when the device's identity in the ABI carries its NUMA node, take it
/// from there instead (and keep sysfs as the fallback, or drop it).
pub fn numa_node(path: &str) -> Option<i64> {
    numa_node_in(Path::new("/sys"), path)
}

/// [`numa_node`] with sysfs mounted at `sys`.
pub fn numa_node_in(sys: &Path, path: &str) -> Option<i64> {
    if path.starts_with("mock:") {
        return None;
    }
    let node = Path::new(path);
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some((major, minor)) = char_dev(node) {
        candidates.push(sys.join(format!("dev/char/{major}:{minor}/device/numa_node")));
    }
    if let Some(name) = node.file_name() {
        candidates.push(
            sys.join("class/davinci")
                .join(name)
                .join("device/numa_node"),
        );
    }
    candidates
        .iter()
        .find_map(|f| std::fs::read_to_string(f).ok())
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|n| *n >= 0)
}

/// Major and minor number of a character device node (Linux's `dev_t` encoding).
fn char_dev(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata(path).ok()?;
    if !m.file_type().is_char_device() {
        return None;
    }
    let dev = m.rdev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    Some((major, minor))
}

/// The `topology` of a device's IDs: its NUMA node, or none.
pub fn topology(numa_node: Option<i64>) -> Option<api::TopologyInfo> {
    numa_node.map(|id| api::TopologyInfo {
        nodes: vec![api::NumaNode { id }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sys(PathBuf);

    impl Sys {
        fn new(tag: &str) -> Sys {
            let p = std::env::temp_dir().join(format!("dp-sys-{}-{tag}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Sys(p)
        }
        fn node(&self, name: &str, content: &str) {
            let d = self.0.join("class/davinci").join(name).join("device");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("numa_node"), content).unwrap();
        }
    }

    impl Drop for Sys {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_kernel_device_has_its_sysfs_node_and_none_otherwise() {
        let sys = Sys::new("numa");
        sys.node("davinci3", "1\n");
        sys.node("davinci4", "-1\n");
        sys.node("davinci5", "zero\n");
        assert_eq!(numa_node_in(&sys.0, "/dev/davinci3"), Some(1));
        // The kernel's "no node", garbage, no file: none.
        assert_eq!(numa_node_in(&sys.0, "/dev/davinci4"), None);
        assert_eq!(numa_node_in(&sys.0, "/dev/davinci5"), None);
        assert_eq!(numa_node_in(&sys.0, "/dev/davinci6"), None);
        // A mock device never has one, even with a sysfs file of its name.
        sys.node("davinci3.sock", "0\n");
        assert_eq!(
            numa_node_in(&sys.0, "mock:/run/davinci/davinci3.sock"),
            None
        );
    }

    /// A character device is looked up by its numbers first (`/dev/null` is 1:3).
    #[test]
    fn a_char_device_is_found_by_its_numbers() {
        let sys = Sys::new("chr");
        let d = sys.0.join("dev/char/1:3/device");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("numa_node"), "2\n").unwrap();
        assert_eq!(char_dev(Path::new("/dev/null")), Some((1, 3)));
        assert_eq!(numa_node_in(&sys.0, "/dev/null"), Some(2));
        assert_eq!(char_dev(Path::new("/")), None);
    }

    #[test]
    fn the_topology_names_the_node() {
        assert_eq!(topology(None), None);
        assert_eq!(
            topology(Some(1)),
            Some(api::TopologyInfo {
                nodes: vec![api::NumaNode { id: 1 }]
            })
        );
    }
}
