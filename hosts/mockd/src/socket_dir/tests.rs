//! The socket directory's way from `/`: the rule over collected facts (no root needed), and
//! the lookups the kernel would make on real paths with symbolic links.

use super::*;

const ME: u32 = 1000;
const OTHER: u32 = 1001;

/// A name looked up in `dir` (owned by `uid`, its group the same number, `mode`), finding
/// `entry` owned by `entry_uid`.
fn l(dir: &str, uid: u32, mode: u32, entry: &str, entry_uid: u32) -> Lookup {
    Lookup {
        dir: dir.into(),
        uid,
        gid: uid,
        mode,
        entry: entry.into(),
        entry_uid,
    }
}

fn check(daemon: u32, origin: SocketDirOrigin, target: &str, way: &[Lookup]) -> Result<(), String> {
    check_lookups(daemon, origin, Path::new(target), way)
}

use SocketDirOrigin::{Explicit, Private, System};

#[test]
fn a_world_writable_parent_that_is_not_sticky_is_refused() {
    let way = [
        l("/", 0, 0o755, "/srv", 0),
        l("/srv", 0, 0o755, "/srv/shared", 0),
        l("/srv/shared", 0, 0o777, "/srv/shared/davinci", ME),
    ];
    for (daemon, origin) in [(ME, Explicit), (ME, Private), (0, Explicit), (0, System)] {
        let e = check(daemon, origin, "/srv/shared/davinci", &way).unwrap_err();
        assert!(
            e.starts_with("refusing socket directory /srv/shared/davinci: the directory /srv/shared above it (mode 0777) is writable by every user and not sticky, so they could move /srv/shared/davinci away and put their own sockets in its place"),
            "{e}"
        );
        assert!(
            e.contains("only if it is sticky") && e.contains("run chmod o-w /srv/shared"),
            "{e}"
        );
    }
    // Sticky, the same directory is fine (the entry on the way is ours).
    let mut sticky = way.clone();
    sticky[2].mode = 0o1777;
    assert_eq!(check(ME, Explicit, "/srv/shared/davinci", &sticky), Ok(()));
}

#[test]
fn a_sticky_tmp_like_parent_with_our_own_child_is_accepted() {
    let tmp = |owner| {
        [
            l("/", 0, 0o755, "/tmp", 0),
            l("/tmp", 0, 0o1777, "/tmp/davinci-x", owner),
        ]
    };
    assert_eq!(check(ME, Private, "/tmp/davinci-x", &tmp(ME)), Ok(()));
    assert_eq!(check(ME, Explicit, "/tmp/davinci-x", &tmp(ME)), Ok(()));
    // Root's own, or a root-owned entry for an explicit directory.
    assert_eq!(check(0, Explicit, "/tmp/davinci-x", &tmp(0)), Ok(()));
    assert_eq!(check(ME, Explicit, "/tmp/davinci-x", &tmp(0)), Ok(()));
    // The usual per-user runtime directory: private to its user, under root's /run/user.
    let xdg = [
        l("/", 0, 0o755, "/run", 0),
        l("/run", 0, 0o755, "/run/user", 0),
        l("/run/user", 0, 0o755, "/run/user/1000", ME),
        l("/run/user/1000", ME, 0o700, "/run/user/1000/davinci", ME),
    ];
    assert_eq!(check(ME, Private, "/run/user/1000/davinci", &xdg), Ok(()));
}

#[test]
fn a_sticky_parent_with_someone_elses_child_is_refused() {
    // Another user's directory in /tmp, then ours inside it: they may move theirs away.
    let way = [
        l("/", 0, 0o755, "/tmp", 0),
        l("/tmp", 0, 0o1777, "/tmp/theirs", OTHER),
        l("/tmp/theirs", OTHER, 0o755, "/tmp/theirs/davinci", ME),
    ];
    let e = check(ME, Explicit, "/tmp/theirs/davinci", &way).unwrap_err();
    assert!(
        e.contains("/tmp/theirs is owned by uid 1001, not by root or uid 1000 (the daemon's user), and in the sticky directory /tmp (mode 1777) above it the owner of an entry may still move it"),
        "{e}"
    );
    assert!(
        e.contains("the entry on the way must be owned by root or the daemon's user"),
        "{e}"
    );
    // A symbolic link in /tmp that someone else owns, pointing into our own directory:
    // refused too, whatever it points to (its owner may replace it).
    let link = [
        l("/", 0, 0o755, "/tmp", 0),
        l("/tmp", 0, 0o1777, "/tmp/link", OTHER),
        l("/", 0, 0o755, "/home", 0),
        l("/home", 0, 0o755, "/home/me", ME),
        l("/home/me", ME, 0o755, "/home/me/davinci", ME),
    ];
    let e = check(ME, Explicit, "/tmp/link", &link).unwrap_err();
    assert!(e.contains("/tmp/link is owned by uid 1001"), "{e}");
    // A sticky directory nobody else may write to: its entries' owners do not matter.
    let mut closed = way.clone();
    closed[1].mode = 0o1755;
    assert!(check(ME, Explicit, "/tmp/theirs/davinci", &closed)
        .unwrap_err()
        .contains("/tmp/theirs above it is owned by uid 1001"));
}

#[test]
fn a_parent_owned_by_another_user_is_refused() {
    let way = |owner| {
        [
            l("/", 0, 0o755, "/home", 0),
            l("/home", 0, 0o755, "/home/u", owner),
            l("/home/u", owner, 0o755, "/home/u/davinci", ME),
        ]
    };
    let e = check(ME, Explicit, "/home/u/davinci", &way(OTHER)).unwrap_err();
    assert!(
        e.contains("the directory /home/u above it is owned by uid 1001, not by root or uid 1000 (the daemon's user), so they could move /home/u/davinci away"),
        "{e}"
    );
    assert!(
        e.contains(
            "every directory above the socket directory must be owned by root or the daemon's user"
        ) && e.ends_with("choose a socket directory elsewhere with --socket-dir"),
        "{e}"
    );
    // Root's daemon under a user's home: that user could replace root's sockets.
    let e = check(0, System, "/home/u/davinci", &way(ME)).unwrap_err();
    assert!(e.contains("owned by uid 1000, not by root,"), "{e}");
    // Our own home is fine.
    assert_eq!(check(ME, Explicit, "/home/u/davinci", &way(ME)), Ok(()));
    assert_eq!(check(ME, Private, "/home/u/davinci", &way(ME)), Ok(()));
}

#[test]
fn a_group_writable_parent_is_allowed_only_when_root_made_it_for_an_explicit_directory() {
    let way = |owner, mode| {
        [
            l("/", 0, 0o755, "/srv", 0),
            l("/srv", owner, mode, "/srv/davinci", ME),
        ]
    };
    // Root's group directory (setgid, group-writable): the system's deliberate grant.
    assert_eq!(check(ME, Explicit, "/srv/davinci", &way(0, 0o2775)), Ok(()));
    assert_eq!(check(0, System, "/srv/davinci", &way(0, 0o775)), Ok(()));
    // The daemon's user made it group-writable: refused, saying how to fix it.
    let e = check(ME, Explicit, "/srv/davinci", &way(ME, 0o775)).unwrap_err();
    assert!(
        e.contains("the directory /srv above it (mode 0775, owner uid 1000) is writable by its group 1000, and not sticky")
            && e.contains("only if root owns it or it is sticky")
            && e.contains("run chmod g-w /srv (or chmod +t /srv)"),
        "{e}"
    );
    // A per-user directory is private all the way: not even root's group directory.
    let e = check(ME, Private, "/srv/davinci", &way(0, 0o2775)).unwrap_err();
    assert!(e.contains("a per-user socket directory's parents"), "{e}");
    // Sticky and group-writable, the entry ours: fine for either.
    assert_eq!(
        check(ME, Explicit, "/srv/davinci", &way(ME, 0o1775)),
        Ok(())
    );
    assert_eq!(check(ME, Private, "/srv/davinci", &way(0, 0o1770)), Ok(()));
}

/// A fresh directory under the temporary directory, for this test.
fn scratch(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("mockd-way-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    // The path as the kernel resolves it (the temporary directory may be a link itself).
    std::fs::canonicalize(&p).unwrap()
}

#[test]
fn lookups_follow_links_and_dot_dot_as_the_kernel_does() {
    use std::os::unix::fs::symlink;
    let b = scratch("links");
    std::fs::create_dir_all(b.join("real/sock")).unwrap();
    symlink(b.join("real"), b.join("abs")).unwrap();
    let up = format!("../{}/real", b.file_name().unwrap().to_str().unwrap());
    symlink(&up, b.join("rel")).unwrap();
    symlink(b.join("real/sock"), b.join("last")).unwrap();

    // Through an absolute link: looked up in `b` (the link), then from `/` to `real`.
    let (way, end) = lookups(&b.join("abs/sock"), true).unwrap();
    assert_eq!(end, b.join("real/sock"));
    assert_eq!(way[0].dir, Path::new("/"));
    let dirs: Vec<_> = way
        .iter()
        .map(|l| (l.dir.clone(), l.entry.clone()))
        .collect();
    assert!(dirs.contains(&(b.clone(), b.join("abs"))), "{dirs:?}");
    assert!(dirs.contains(&(b.clone(), b.join("real"))), "{dirs:?}");
    assert_eq!(
        dirs.last().unwrap(),
        &(b.join("real"), b.join("real/sock")),
        "{dirs:?}"
    );
    // Every directory is examined as a directory with no link in its path.
    assert!(way
        .iter()
        .all(|l| std::fs::canonicalize(&l.dir).unwrap() == l.dir));

    // Through a relative link with `..` in it.
    let (way, end) = lookups(&b.join("rel/sock"), true).unwrap();
    assert_eq!(end, b.join("real/sock"));
    assert!(way.iter().any(|l| l.entry == b.join("rel")));

    // The last name a link: followed or not, as asked; and `..` in the path itself.
    assert_eq!(
        lookups(&b.join("last"), true).unwrap().1,
        b.join("real/sock")
    );
    let (way, end) = lookups(&b.join("last"), false).unwrap();
    assert_eq!(
        (end, way.last().unwrap().entry.clone()),
        (b.join("last"), b.join("last"))
    );
    assert_eq!(
        lookups(&b.join("real/sock/../sock"), true).unwrap().1,
        b.join("real/sock")
    );

    // A loop of links ends in an error, not a hang; a missing name is an error.
    symlink(b.join("loop"), b.join("loop")).unwrap();
    assert!(lookups(&b.join("loop/x"), true).is_err());
    assert!(lookups(&b.join("nope/x"), true).is_err());
    let _ = std::fs::remove_dir_all(&b);
}
