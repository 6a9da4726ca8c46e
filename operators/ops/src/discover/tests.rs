//! Discovery: the precedence of the places, the scanning of directories, and what is said
//! about every place searched.

use super::*;

#[test]
fn names() {
    assert_eq!(index_of("davinci0", ""), Some(0));
    assert_eq!(index_of("davinci12.sock", ".sock"), Some(12));
    assert_eq!(index_of("davinci_manager", ""), None);
    assert_eq!(index_of("davinci", ""), None);
    assert_eq!(index_of("davinci1.sock", ""), None);
    assert_eq!(id_from_path("mock:/run/davinci/davinci3.sock"), Some(3));
    assert_eq!(id_from_path("/dev/davinci7"), Some(7));
    assert_eq!(id_from_path("mock:/tmp/x.sock"), None);
}

fn scratch(tag: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("smi-disc-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    root
}

#[test]
fn precedence_and_scanning() {
    let root = scratch("prec");
    let (dev, socks) = (root.join("dev"), root.join("socks"));
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::create_dir_all(&socks).unwrap();
    for f in ["davinci10.sock", "davinci2.sock", "davinci_x.sock", "other"] {
        std::fs::write(socks.join(f), b"").unwrap();
    }
    let mut d = Discovery {
        device_env: None,
        dev_dir: dev.clone(),
        default_socket_dir: socks.clone().into(),
    };
    // Nothing in /dev: the default socket directory, sorted by N.
    let got = select(&[], None, &d);
    assert_eq!(
        got.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![Some(2), Some(10)]
    );
    assert_eq!(
        got[0].path,
        format!("mock:{}", socks.join("davinci2.sock").display())
    );
    // Kernel nodes win over the default socket directory.
    std::fs::write(dev.join("davinci0"), b"").unwrap();
    std::fs::write(dev.join("davinci_manager"), b"").unwrap();
    let got = select(&[], None, &d);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, dev.join("davinci0").display().to_string());
    // DAVINCI_DEVICE wins over both; --socket-dir over it; --device over everything.
    d.device_env = Some("mock:/x/davinci5.sock".into());
    assert_eq!(select(&[], None, &d)[0].id, Some(5));
    assert_eq!(select(&[], Some(&socks), &d).len(), 2);
    let got = select(&["/dev/davinci9".into()], Some(&socks), &d);
    assert_eq!(
        got,
        vec![Entry {
            id: Some(9),
            path: "/dev/davinci9".into()
        }]
    );
    assert!(select(&[], Some(&root.join("nope")), &d).is_empty());
    assert!(searched(
        &[],
        None,
        &Discovery {
            device_env: None,
            ..d
        }
    )
    .contains("found davinci0"));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_system_socket_directory_is_searched_by_everyone_after_the_users_own() {
    let root = scratch("system");
    let (dev, user, system) = (root.join("dev"), root.join("user"), root.join("run"));
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::create_dir_all(&system).unwrap();
    std::fs::write(system.join("davinci0.sock"), b"").unwrap();
    std::fs::write(system.join("davinci1.sock"), b"").unwrap();
    let d = Discovery {
        device_env: None,
        dev_dir: dev.clone(),
        default_socket_dir: SocketDirs {
            user: user.clone(),
            user_why: "davinci-mockd's default for this user".into(),
            system: Some(system.clone()),
        },
    };
    // The user's own directory does not exist: the system's devices are found.
    let found = discover(&[], None, &d);
    assert_eq!(
        found.entries.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![Some(0), Some(1)]
    );
    assert_eq!(found.searched.len(), 3);
    assert_eq!(found.searched[1].outcome, "no such directory");
    assert_eq!(found.searched[2].outcome, "found davinci0, davinci1");
    // A daemon of the user's own wins (and the system's directory is not reached).
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("davinci3.sock"), b"").unwrap();
    let found = discover(&[], None, &d);
    assert_eq!(found.entries.len(), 1);
    assert_eq!(found.entries[0].id, Some(3));
    assert_eq!(found.searched.len(), 2);
    // Root: the default is the system directory; searched once.
    let root_dirs = SocketDirs {
        user: system.clone(),
        user_why: "x".into(),
        system: Some(system.clone()),
    };
    assert_eq!(root_dirs.in_order().len(), 1);
    assert_eq!(root_dirs.in_order()[0].1, "the system's socket directory");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn nothing_found_lists_every_place_searched_and_why() {
    let d = Discovery {
        device_env: None,
        dev_dir: "/dev".into(),
        default_socket_dir: SocketDirs {
            user: "/tmp/davinci-1000".into(),
            user_why: "davinci-mockd's default for this user".into(),
            system: Some("/run/davinci".into()),
        },
    };
    // /dev lists, /tmp/davinci-1000 is missing, /run/davinci may not be listed.
    let list = |p: &Path| -> io::Result<Vec<String>> {
        match p.to_str() {
            Some("/dev") => Ok(vec!["null".into(), "davinci_manager".into()]),
            Some("/run/davinci") => Err(io::Error::from(io::ErrorKind::PermissionDenied)),
            _ => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    };
    let fs = Fs {
        list: &list,
        owner: &|_: &Path, _: bool| -> io::Result<DirFacts> {
            Ok(facts(DirKind::Directory, 0, 0o755))
        },
        trust: Trust::new(0),
    };
    let found = discover_with(&[], None, &d, &fs);
    assert!(found.entries.is_empty());
    assert_eq!(
        describe_searched(&found),
        "/dev/davinci<N>: none; \
         /tmp/davinci-1000/davinci<N>.sock (davinci-mockd's default for this user): \
         no such directory; \
         /run/davinci/davinci<N>.sock (the system's socket directory): cannot list it: \
         permission denied (ask for read and search permission on /run/davinci; with \
         search permission alone, name a device: --device mock:/run/davinci/davinci0.sock); \
         name a device with --device, --socket-dir or DAVINCI_DEVICE"
    );
    // --socket-dir: that one place, and why.
    let found = discover_with(&[], Some(Path::new("/srv/d")), &d, &fs);
    assert_eq!(
        describe_searched(&found),
        "/srv/d/davinci<N>.sock (--socket-dir): no such directory; \
         name a device with --device, --socket-dir or DAVINCI_DEVICE"
    );
    let e = io::Error::from(io::ErrorKind::NotADirectory);
    assert_eq!(
        listing_failure(Path::new("/x"), "", "", &e),
        "not a directory"
    );
    let e = io::Error::other("disk on fire");
    assert_eq!(
        listing_failure(Path::new("/x"), "", "", &e),
        "cannot list it: disk on fire"
    );
}

#[test]
fn explicit_choices_are_reported_as_such() {
    let d = Discovery {
        device_env: Some("mock:/x/davinci5.sock".into()),
        dev_dir: "/nonexistent".into(),
        default_socket_dir: "/nonexistent".into(),
    };
    assert_eq!(
        searched(&[], None, &d),
        "DAVINCI_DEVICE=mock:/x/davinci5.sock: 1 named"
    );
    assert_eq!(
        searched(&["/dev/davinci1".into(), "/dev/davinci2".into()], None, &d),
        "--device /dev/davinci1, /dev/davinci2: 2 named"
    );
}

fn facts(kind: DirKind, uid: u32, mode: u32) -> DirFacts {
    DirFacts { kind, uid, mode }
}

#[test]
fn distrust_follows_who_could_have_put_the_socket_there() {
    let dir = Path::new("/srv/d");
    let o = |uid, mode| facts(DirKind::Directory, uid, mode);
    let s = |uid| facts(DirKind::Other, uid, 0o755);
    let root = Trust::new(0);
    let user = Trust::new(1000);
    // Writable by everyone and not sticky: nothing in it is trusted, root's sockets included.
    let why = distrust(dir, &o(0, 0o777), &s(0), None, &root).unwrap();
    assert!(
        why.contains("writable by every user and not sticky"),
        "{why}"
    );
    // Sticky and writable by everyone (like /tmp): another user's socket is left out, root's
    // and the caller's own are not.
    let why = distrust(dir, &o(0, 0o1777), &s(1000), None, &root).unwrap();
    assert!(why.contains("owned by uid 1000"), "{why}");
    assert_eq!(distrust(dir, &o(0, 0o1777), &s(0), None, &root), None);
    assert_eq!(distrust(dir, &o(0, 0o1777), &s(1000), None, &user), None);
    // Group-writable is the operator's grant (the daemon's rule); a group member's own
    // socket there is still another user's.
    assert_eq!(distrust(dir, &o(0, 0o2775), &s(0), None, &user), None);
    assert!(distrust(dir, &o(0, 0o2775), &s(1001), None, &user).is_some());
    // A user's daemon in a directory of its own, looked at by root: that user must be named.
    let why = distrust(dir, &o(1000, 0o700), &s(1000), None, &root).unwrap();
    assert!(why.contains("DAVINCI_MOCKD_UID=1000"), "{why}");
    let named = Trust::from_vars(0, Some("1000".as_ref()), None);
    assert_eq!(distrust(dir, &o(1000, 0o700), &s(1000), None, &named), None);
    // A planted per-user directory (issue 41): uid 3002 made uid 3001's /tmp/davinci-3001,
    // mode 0755, and its socket; the caller's own rule refuses it.
    let planted = Path::new("/tmp/davinci-3001");
    let why = distrust(planted, &o(3002, 0o755), &s(3002), None, &Trust::new(3001)).unwrap();
    assert!(
        why.contains("owned by uid 3002") && why.contains("rm -r /tmp/davinci-3001"),
        "{why}"
    );
}

#[test]
fn a_planted_socket_is_left_out_and_said() {
    let d = Discovery {
        device_env: None,
        dev_dir: "/nonexistent".into(),
        default_socket_dir: "/nonexistent".into(),
    };
    let list = |p: &Path| -> io::Result<Vec<String>> {
        match p.to_str() {
            Some("/shared") => Ok(vec!["davinci0.sock".into(), "davinci1.sock".into()]),
            _ => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    };
    // A sticky, world-writable socket directory root uses; uid 1000 added davinci1.sock.
    let owner = |p: &Path, _: bool| -> io::Result<DirFacts> {
        Ok(match p.to_str() {
            Some("/shared") => facts(DirKind::Directory, 0, 0o1777),
            Some("/shared/davinci1.sock") => facts(DirKind::Other, 1000, 0o755),
            _ => facts(DirKind::Other, 0, 0o755),
        })
    };
    let fs = Fs {
        list: &list,
        owner: &owner,
        trust: Trust::new(0),
    };
    let found = discover_with(&[], Some(Path::new("/shared")), &d, &fs);
    assert_eq!(
        found.entries,
        vec![Entry {
            id: Some(0),
            path: "mock:/shared/davinci0.sock".into()
        }]
    );
    assert_eq!(found.ignored.len(), 1);
    assert_eq!(found.ignored[0].path, "mock:/shared/davinci1.sock");
    assert!(found.ignored[0].why.contains("owned by uid 1000"));
    assert_eq!(
        found.searched[0].outcome,
        "found davinci0 (1 ignored as untrusted: davinci1.sock)"
    );
    assert_eq!(
        ignored_warnings(&found),
        vec![format!(
            "warning: ignoring mock:/shared/davinci1.sock: {}",
            found.ignored[0].why
        )]
    );
    // The same socket named explicitly is the caller's choice.
    let named = discover_with(&["mock:/shared/davinci1.sock".into()], None, &d, &fs);
    assert_eq!(named.entries.len(), 1);
    assert!(named.ignored.is_empty());
    // An owner that cannot be read: left out, saying so.
    let unknown = |_: &Path, _: bool| -> io::Result<DirFacts> { Err(io::Error::other("gone")) };
    let fs = Fs {
        list: &list,
        owner: &unknown,
        trust: Trust::new(0),
    };
    let found = discover_with(&[], Some(Path::new("/shared")), &d, &fs);
    assert!(found.entries.is_empty());
    assert!(
        found.ignored[0].why.contains("cannot tell who owns"),
        "{found:?}"
    );
}

/// Issue 41: uid 3002 made uid 3001's default socket directory (`/tmp/davinci-3001`, no
/// `$XDG_RUNTIME_DIR`) and serves a fake device in it. uid 3001's tools find it, leave it out
/// saying why, and go on to the system's directory; a link there is not followed.
#[test]
fn a_planted_default_directory_gives_no_device_and_says_why() {
    let d = Discovery {
        device_env: None,
        dev_dir: "/nonexistent".into(),
        default_socket_dir: SocketDirs {
            user: "/tmp/davinci-3001".into(),
            user_why: "davinci-mockd's default for this user".into(),
            system: Some("/run/davinci".into()),
        },
    };
    let list = |p: &Path| -> io::Result<Vec<String>> {
        match p.to_str() {
            Some("/tmp/davinci-3001") => Ok(vec!["davinci0.sock".into()]),
            _ => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    };
    let planted = |p: &Path, _: bool| -> io::Result<DirFacts> {
        Ok(match p.to_str() {
            Some("/tmp/davinci-3001") => facts(DirKind::Directory, 3002, 0o755),
            _ => facts(DirKind::Other, 3002, 0o777),
        })
    };
    let fs = Fs {
        list: &list,
        owner: &planted,
        trust: Trust::new(3001),
    };
    let found = discover_with(&[], None, &d, &fs);
    assert!(found.entries.is_empty(), "{found:?}");
    assert_eq!(found.ignored.len(), 1);
    assert_eq!(
        found.ignored[0].path,
        "mock:/tmp/davinci-3001/davinci0.sock"
    );
    let why = &found.ignored[0].why;
    assert!(
        why.contains("its directory /tmp/davinci-3001 is owned by uid 3002")
            && why.contains("must be owned by uid 3001")
            && why.contains("rm -r /tmp/davinci-3001"),
        "{why}"
    );
    assert_eq!(
        found.searched[1].outcome,
        "none (1 ignored as untrusted: davinci0.sock)"
    );
    assert_eq!(found.searched[2].outcome, "no such directory");
    // A link in its place, to a directory uid 3001 owns: the link is what is judged.
    let linked = |p: &Path, follow: bool| -> io::Result<DirFacts> {
        Ok(match (p.to_str(), follow) {
            (Some("/tmp/davinci-3001"), false) => facts(DirKind::Symlink, 3002, 0o777),
            (Some("/tmp/davinci-3001"), true) => facts(DirKind::Directory, 3001, 0o700),
            _ => facts(DirKind::Other, 3001, 0o755),
        })
    };
    let fs = Fs {
        list: &list,
        owner: &linked,
        trust: Trust::new(3001),
    };
    let found = discover_with(&[], None, &d, &fs);
    assert!(found.entries.is_empty(), "{found:?}");
    assert!(found.ignored[0].why.contains("symbolic link"), "{found:?}");
}
