//! The client's socket rule: planted, shared and symbolic-link directories, other users'
//! sockets and daemons, and the good cases, over facts; then on real paths.

use super::*;

const ME: u32 = 3001;
const OTHER: u32 = 3002;

fn dir(uid: u32, mode: u32) -> DirFacts {
    DirFacts {
        kind: DirKind::Directory,
        uid,
        mode,
    }
}

fn sock(uid: u32) -> DirFacts {
    DirFacts {
        kind: DirKind::Other,
        uid,
        mode: 0o755,
    }
}

fn me() -> Trust {
    Trust::new(ME)
}

#[test]
fn per_user_directories_are_told_by_their_path() {
    let t = Trust::from_vars(ME, None, Some(OsStr::new("/run/user/3001")));
    assert_eq!(t.per_user_owner(Path::new("/tmp/davinci-3001")), Some(ME));
    assert_eq!(
        t.per_user_owner(Path::new("/tmp/./davinci-3002/")),
        Some(OTHER)
    );
    assert_eq!(
        t.per_user_owner(Path::new("/run/user/3001/davinci")),
        Some(ME)
    );
    for other in [
        "/tmp/davinci-",
        "/tmp/davinci-x1",
        "/tmp/sub/davinci-3001",
        "/var/tmp/davinci-3001",
        "/run/davinci",
        "/run/user/3002/davinci",
        "davinci-3001",
    ] {
        assert_eq!(t.per_user_owner(Path::new(other)), None, "{other}");
    }
    // Without $XDG_RUNTIME_DIR, its directory is no one's in particular.
    assert_eq!(
        me().per_user_owner(Path::new("/run/user/3001/davinci")),
        None
    );
}

#[test]
fn a_planted_per_user_directory_is_refused_saying_whose_it_is_and_what_to_do() {
    let d = Path::new("/tmp/davinci-3001");
    // The case: uid 3002 made uid 3001's default directory first, mode 0755.
    let e = judge_dir(d, &dir(OTHER, 0o755), &me()).unwrap_err();
    for want in [
        "its directory /tmp/davinci-3001 is owned by uid 3002",
        "must be owned by uid 3001",
        "rm -r /tmp/davinci-3001",
        "XDG_RUNTIME_DIR",
    ] {
        assert!(e.contains(want), "{want:?} in {e}");
    }
    // Naming uid 3002 as the daemon does not make it the owner of uid 3001's directory.
    let named = Trust::from_vars(ME, Some(OsStr::new("3002")), None);
    assert!(judge_dir(d, &dir(OTHER, 0o755), &named).is_err());
    // Root owning it is not good enough either (a per-user directory is its user's).
    assert!(judge_dir(d, &dir(0, 0o700), &me()).is_err());
    // The user's own: private or readable by others, fine; writable by others, not.
    assert_eq!(judge_dir(d, &dir(ME, 0o700), &me()), Ok(()));
    assert_eq!(judge_dir(d, &dir(ME, 0o755), &me()), Ok(()));
    for mode in [0o777, 0o775, 0o757, 0o1777, 0o720] {
        let e = judge_dir(d, &dir(ME, mode), &me()).unwrap_err();
        assert!(e.contains("chmod go-w /tmp/davinci-3001"), "{mode:o}: {e}");
    }
    let link = DirFacts {
        kind: DirKind::Symlink,
        uid: ME,
        mode: 0o777,
    };
    let e = judge_dir(d, &link, &me()).unwrap_err();
    assert!(
        e.contains("symbolic link") && e.contains("rm /tmp/davinci-3001"),
        "{e}"
    );
    let file = DirFacts {
        kind: DirKind::Other,
        uid: ME,
        mode: 0o644,
    };
    assert!(judge_dir(d, &file, &me())
        .unwrap_err()
        .contains("not a directory"));
    // Another user's per-user directory, looked at by root: must be that user's.
    let root = Trust::new(0);
    assert_eq!(judge_dir(d, &dir(ME, 0o700), &root), Ok(()));
    let e = judge_dir(d, &dir(OTHER, 0o700), &root).unwrap_err();
    assert!(e.contains("uid 3001's per-user socket directory"), "{e}");
    assert!(
        !e.contains("XDG_RUNTIME_DIR"),
        "not root's to fix that way: {e}"
    );
}

#[test]
fn shared_directories_must_be_trusted_and_not_writable_by_everyone() {
    let d = Path::new("/srv/davinci");
    for ok in [
        dir(0, 0o755),
        dir(0, 0o2775),
        dir(0, 0o1777),
        dir(ME, 0o750),
    ] {
        assert_eq!(judge_dir(d, &ok, &me()), Ok(()), "{ok:?}");
    }
    let e = judge_dir(d, &dir(0, 0o777), &me()).unwrap_err();
    assert!(
        e.contains("(mode 0777) is writable by every user and not sticky")
            && e.contains("chmod o-w /srv/davinci"),
        "{e}"
    );
    let e = judge_dir(d, &dir(OTHER, 0o755), &me()).unwrap_err();
    assert!(
        e.contains("owned by uid 3002, not by root or you (uid 3001)")
            && e.contains("DAVINCI_MOCKD_UID=3002"),
        "{e}"
    );
    let named = Trust::from_vars(ME, Some(OsStr::new("3002")), None);
    assert_eq!(judge_dir(d, &dir(OTHER, 0o755), &named), Ok(()));
    // /run/davinci is a shared directory like any other.
    assert!(judge_dir(Path::new("/run/davinci"), &dir(OTHER, 0o755), &me()).is_err());
}

#[test]
fn a_socket_must_be_owned_by_root_the_caller_or_the_named_daemon() {
    assert_eq!(judge_socket(&sock(0), None, &me()), Ok(()));
    assert_eq!(judge_socket(&sock(ME), None, &me()), Ok(()));
    let e = judge_socket(&sock(OTHER), None, &me()).unwrap_err();
    assert!(
        e.contains("the socket is owned by uid 3002, not by root or you (uid 3001)")
            && e.contains("DAVINCI_MOCKD_UID=3002"),
        "{e}"
    );
    let named = Trust::from_vars(ME, Some(OsStr::new("3002")), None);
    assert_eq!(judge_socket(&sock(OTHER), None, &named), Ok(()));
    let e = judge_socket(&sock(3003), None, &named).unwrap_err();
    assert!(
        e.contains("not by root, you (uid 3001) or uid 3002 ($DAVINCI_MOCKD_UID)"),
        "{e}"
    );
    // A value that is not a uid trusts nobody more, and the refusal says so.
    let bad = Trust::from_vars(ME, Some(OsStr::new("mockd")), None);
    assert_eq!(bad.daemon, None);
    let e = judge_socket(&sock(OTHER), None, &bad).unwrap_err();
    assert!(e.contains("\"mockd\", which is not a uid"), "{e}");
    // Root trusts root and whom it names.
    let e = judge_socket(&sock(ME), None, &Trust::new(0)).unwrap_err();
    assert!(e.contains("not by root (you)"), "{e}");
    // A link and what it names must both be trusted.
    let link = |uid| DirFacts {
        kind: DirKind::Symlink,
        uid,
        mode: 0o777,
    };
    assert_eq!(judge_socket(&link(ME), Some(&sock(0)), &me()), Ok(()));
    let e = judge_socket(&link(OTHER), Some(&sock(0)), &me()).unwrap_err();
    assert!(e.contains("the symbolic link is owned by uid 3002"), "{e}");
    let e = judge_socket(&link(ME), Some(&sock(OTHER)), &me()).unwrap_err();
    assert!(
        e.contains("the socket the link names is owned by uid 3002"),
        "{e}"
    );
}

#[test]
fn the_listening_daemon_must_be_trusted_too() {
    assert_eq!(judge_peer(0, &me()), Ok(()));
    assert_eq!(judge_peer(ME, &me()), Ok(()));
    let e = judge_peer(OTHER, &me()).unwrap_err();
    assert!(e.contains("runs as uid 3002"), "{e}");
    let e = refusal(Path::new("/tmp/x/davinci0.sock"), &e);
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert!(
        e.to_string()
            .starts_with("refusing /tmp/x/davinci0.sock: the process"),
        "{e}"
    );
    assert_eq!(dir_of(Path::new("davinci0.sock")), Path::new("."));
}

fn my_uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

#[test]
fn real_paths_a_directory_made_by_someone_else_and_a_good_socket() {
    use std::os::unix::fs::PermissionsExt;
    // A per-user directory of a uid nobody has, made by this test's user: planted, for
    // that uid, without root.
    let nobody = 4_000_000_000u32 + std::process::id() % 1_000_000;
    let planted = PathBuf::from(format!("/tmp/davinci-{nobody}"));
    let _ = std::fs::remove_dir_all(&planted);
    std::fs::create_dir(&planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = planted.join("davinci0.sock");
    let listener = crate::sockio::SeqListener::bind(&path, 0o666).unwrap();
    let them = Trust::new(nobody);
    let e = check_socket(&path, &them).unwrap_err();
    let e2 = connect_trusted(&path, &them, Duration::from_secs(5)).unwrap_err();
    let _ = std::fs::remove_dir_all(&planted);
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert!(
        e.to_string().contains(&format!(
            "refusing {}: its directory {} is owned by uid {}",
            path.display(),
            planted.display(),
            my_uid()
        )),
        "{e}"
    );
    assert_eq!(e2.to_string(), e.to_string());
    drop(listener);

    // This user's own socket in a directory of its own: connected, its daemon is itself.
    let base = std::env::temp_dir().join(format!("mockd-proto-trust-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let good = base.join("davinci0.sock");
    let _listener = crate::sockio::SeqListener::bind(&good, 0o600).unwrap();
    let mine = Trust::new(my_uid());
    assert!(check_socket(&good, &mine).is_ok());
    assert!(connect_trusted(&good, &mine, Duration::from_secs(5)).is_ok());
    // A missing socket is left to connect(2): ENOENT as always.
    let missing = base.join("davinci9.sock");
    assert!(check_socket(&missing, &mine).is_ok());
    let e = connect_trusted(&missing, &mine, Duration::from_secs(5)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc_enoent()));
    // The same directory made writable by everyone: refused.
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = check_socket(&good, &mine).unwrap_err();
    let _ = std::fs::remove_dir_all(&base);
    assert!(e.to_string().contains("writable by every user"), "{e}");
}

fn libc_enoent() -> i32 {
    nix::errno::Errno::ENOENT as i32
}
