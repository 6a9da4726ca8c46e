//! The socket directory of `davinci-mockd`: refused when others could replace it (the
//! directory itself and every directory above it, in-process and by the binary at start),
//! created private enough when missing, its sockets given the requested group.
#![forbid(unsafe_code)]

mod support;

use std::path::Path;

use davinci_mockd::daemon::{Daemon, DaemonConfig};
use davinci_mockd_proto::{SocketDir, SocketDirOrigin};
use support::scratch_path;

fn start_in(dir: SocketDir) -> std::io::Result<Daemon> {
    Daemon::start(&DaemonConfig {
        devices: 1,
        memory: 1 << 20,
        socket_dir: dir,
        ..DaemonConfig::default()
    })
}

#[test]
fn an_untrusted_socket_directory_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let private = |path: &Path| SocketDir {
        path: path.to_path_buf(),
        origin: SocketDirOrigin::Private,
    };
    // A per-user fallback directory that others may write to (pre-created, mode 0777).
    let p = scratch_path("open777");
    std::fs::create_dir(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = start_in(private(&p)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    let msg = e.to_string();
    assert!(msg.contains("refusing socket directory"), "{msg}");
    assert!(
        msg.contains("mode 0777") && msg.contains("chmod go-w"),
        "{msg}"
    );
    assert!(!p.join("davinci0.sock").exists(), "nothing was bound there");
    // The same directory named explicitly: every user may write, not sticky: refused too;
    // sticky: accepted (others cannot remove or rename the daemon's sockets).
    let e = start_in(p.clone().into()).unwrap_err();
    assert!(e.to_string().contains("chmod o-w"), "{e}");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o1777)).unwrap();
    start_in(p.clone().into()).unwrap().stop();
    // Fixed as the message says: the private directory is accepted.
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    start_in(private(&p)).unwrap().stop();
    // A symbolic link in place of a private directory.
    let link = scratch_path("link");
    std::os::unix::fs::symlink(&p, &link).unwrap();
    let e = start_in(private(&link)).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // Owned by another user (only root can make that here).
    if nix::unistd::getuid().is_root() {
        nix::unistd::chown(&p, Some(nix::unistd::Uid::from_raw(54321)), None).unwrap();
        let e = start_in(private(&p)).unwrap_err();
        assert!(e.to_string().contains("owned by uid 54321"), "{e}");
        let e = start_in(p.clone().into()).unwrap_err();
        assert!(e.to_string().contains("owned by uid 54321"), "{e}");
    }
    let _ = std::fs::remove_file(&link);
    let _ = std::fs::remove_dir_all(&p);
}

/// Every directory above the socket directory is checked too: one that every user may
/// write to and that is not sticky lets anyone move the socket directory away and put
/// their own sockets in its place. Refused before anything is created in it; sticky, it is
/// fine while the entry in it is the daemon's user's (or root's).
#[test]
fn a_socket_directory_under_a_world_writable_parent_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let parent = scratch_path("open-parent");
    std::fs::create_dir(&parent).unwrap();
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o777)).unwrap();
    let dir = parent.join("sockets");
    let says = format!(
        "the directory {} above it (mode 0777) is writable by every user and not sticky",
        parent.display()
    );
    // Missing: refused before it is created.
    let e = start_in(dir.clone().into()).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains(&says), "{e}");
    assert!(
        !dir.exists(),
        "nothing is created under an untrusted parent"
    );
    // Already there and the daemon's own: still refused, for a private directory too.
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = start_in(dir.clone().into()).unwrap_err();
    assert!(e.to_string().contains(&says), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("chmod o-w {}", parent.display())),
        "{e}"
    );
    let e = start_in(SocketDir {
        path: dir.clone(),
        origin: SocketDirOrigin::Private,
    })
    .unwrap_err();
    assert!(e.to_string().contains(&says), "{e}");
    // Sticky (like /tmp), the directory in it ours: accepted.
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o1777)).unwrap();
    start_in(dir.clone().into()).unwrap().stop();
    // Sticky, but the directory on the way belongs to another user (only root can make
    // that here): they may move it away, so refused, naming it.
    if nix::unistd::getuid().is_root() {
        let theirs = parent.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(54321)), None).unwrap();
        let e = start_in(theirs.join("sockets").into()).unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "{} is owned by uid 54321, not by root, and in the sticky directory {}",
                theirs.display(),
                parent.display()
            )),
            "{e}"
        );
        assert!(!theirs.join("sockets").exists());
    }
    let _ = std::fs::remove_dir_all(&parent);
}

/// The binary: a socket directory under a world-writable, non-sticky parent is refused at
/// start with exit status 1 and a message naming that parent and the rule.
#[test]
fn the_binary_refuses_a_socket_directory_under_a_world_writable_parent() {
    use std::os::unix::fs::PermissionsExt;
    let parent = scratch_path("open-parent-bin");
    std::fs::create_dir(&parent).unwrap();
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o777)).unwrap();
    let dir = parent.join("sockets");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_davinci-mockd"))
        .arg("--socket-dir")
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "davinci-mockd: refusing socket directory {}: the directory {} above it (mode 0777) is writable by every user and not sticky",
            dir.display(),
            parent.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("may be writable by others only if it is sticky"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "never ready");
    assert!(!dir.exists());
    let _ = std::fs::remove_dir_all(&parent);
}

#[test]
fn a_missing_socket_directory_is_created_private_enough() {
    use std::os::unix::fs::PermissionsExt;
    let p = scratch_path("fresh").join("nested");
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    let d = start_in(SocketDir {
        path: p.clone(),
        origin: SocketDirOrigin::Private,
    });
    nix::sys::stat::umask(old);
    let d = d.unwrap();
    // Mode 0755 whatever the umask (a umask of 0 would otherwise make it world-writable
    // and the daemon would refuse its own directory).
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755);
    d.stop();
    let _ = std::fs::remove_dir_all(p.parent().unwrap());
}

#[test]
fn sockets_get_the_requested_group() {
    use std::os::unix::fs::MetadataExt;
    // Only root may give a file to a group it is not in.
    if !nix::unistd::getuid().is_root() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("davinci-d-{}-group", std::process::id()));
    let d = Daemon::start(&DaemonConfig {
        devices: 1,
        memory: 1 << 20,
        socket_dir: dir.into(),
        socket_group: Some(4242),
        ..DaemonConfig::default()
    })
    .unwrap();
    let meta = std::fs::metadata(&d.sockets()[0]).unwrap();
    assert_eq!((meta.gid(), meta.mode() & 0o777), (4242, 0o660));
}
