//! `davinci-mockd` in-process ([`Daemon`]), through raw frames on its sockets: opens,
//! ioctls, mmaps, exclusive mode, malformed frames, the admin policy, the HELLO timeout, the
//! initial sharing mode; and the binary's fault injection and its open-file limit. The
//! socket directory's checks are `socket_dir.rs`'s; the binary run by a non-root user,
//! `non_root.rs`'s.
#![forbid(unsafe_code)]

mod support;

use std::os::fd::AsFd;

use davinci_mockd::daemon::{Daemon, DaemonConfig};
use davinci_mockd::peer::AdminPolicy;
use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{
    holder_from_payload, Hello, HelloReply, Kind, MmapArgs, Request, WireRole, MAX_REQUEST,
};
use davinci_uapi::{
    AllocMemoryArgs, DeviceInfo, ShareMode, DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_GET_INFO,
    DRIVER_CMD_SET_DEVICE_SHARE,
};
use davinci_uapi::{Errno, Wire, ABI_VERSION_MAJOR};
use support::{ioctl, new_stream, scratch_path, share_arg, Raw};

fn start(tag: &str, admin: AdminPolicy) -> Daemon {
    let dir = std::env::temp_dir().join(format!("davinci-d-{}-{tag}", std::process::id()));
    Daemon::start(&DaemonConfig {
        devices: 2,
        memory: 16 << 20,
        socket_dir: dir.into(),
        admin,
        ..DaemonConfig::default()
    })
    .unwrap()
}

#[test]
fn serves_opens_ioctls_mmaps_and_exclusive_mode() {
    let d = start("basic", AdminPolicy::default());
    let socks = d.sockets();
    let (mut a, r) = Raw::open(&socks[1], WireRole::Client);
    assert_eq!(r.errno, 0, "{}", r.msg);
    let h = HelloReply::decode(&r.arg).unwrap();
    assert_eq!((h.device_id, h.pid), (1, std::process::id()));

    let (r, _) = a.call(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; DeviceInfo::SIZE]);
    let info = DeviceInfo::from_bytes(&r.arg).unwrap();
    assert_eq!(
        (r.errno, info.device_id, info.memory_size),
        (0, 1, 16 << 20)
    );
    assert_eq!(info.clients, 1);

    // A second client in exclusive mode: EBUSY naming the holder, payload = holder.
    let (_b, r) = Raw::open(&socks[1], WireRole::Client);
    assert_eq!(r.errno, Errno::EBUSY.code());
    assert!(
        r.msg
            .contains(&format!("held by pid {}", std::process::id())),
        "{}",
        r.msg
    );
    let holder = holder_from_payload(&r.payload).unwrap();
    assert_eq!(holder.pid, std::process::id());
    // The other device is free.
    let (_c, r) = Raw::open(&socks[0], WireRole::Client);
    assert_eq!(r.errno, 0);

    // Allocation and its mapping: one memfd arrives.
    let alloc = AllocMemoryArgs {
        size: 10000,
        ..AllocMemoryArgs::default()
    };
    let mut arg = vec![0; AllocMemoryArgs::SIZE];
    alloc.encode(&mut arg);
    let (r, nfds) = a.call(Kind::Ioctl, DRIVER_CMD_ALLOC_MEMORY, arg);
    assert_eq!(r.errno, 0, "{}", r.msg);
    let got = AllocMemoryArgs::from_bytes(&r.arg).unwrap();
    assert_eq!(got.alloc_size, 12288);
    // The allocation's memfd comes with the reply, described as MMAP would.
    assert_eq!(nfds, 1);
    assert_eq!(
        davinci_mockd_proto::Premapped::decode_all(&r.payload, 1).unwrap(),
        [davinci_mockd_proto::Premapped {
            cookie: got.mmap_offset,
            offset: 0,
            len: 12288
        }]
    );
    let m = MmapArgs {
        cookie: got.mmap_offset,
        len: got.alloc_size,
    };
    let (r, nfds) = a.call(Kind::Mmap, 0, m.encode());
    assert_eq!((r.errno, nfds), (0, 1), "{}", r.msg);
    // A cookie it does not own: ENOENT, no fd.
    let m = MmapArgs {
        cookie: davinci_uapi::mmap_offset(davinci_uapi::MmapKind::Memory, 0x7777),
        len: 4096,
    };
    let (r, nfds) = a.call(Kind::Mmap, 0, m.encode());
    assert_eq!((r.errno, nfds), (Errno::ENOENT.code(), 0));
    assert_eq!(d.devices()[1].info().memory_used, 12288);

    // Closing the connection releases the allocation.
    drop(a);
    let dev = d.devices()[1].clone();
    let t0 = std::time::Instant::now();
    while dev.info().memory_used != 0 || dev.info().clients != 0 {
        assert!(t0.elapsed().as_secs() < 5, "close did not release");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let paths = d.sockets();
    let dir = d.socket_dir().to_path_buf();
    d.stop();
    assert!(paths.iter().all(|p| !p.exists()), "sockets removed on stop");
    assert!(!dir.exists(), "the directory it created is removed too");
}

#[test]
fn malformed_frames_get_eproto_and_disturb_nobody() {
    let d = start("malformed", AdminPolicy::default());
    let socks = d.sockets();
    let (mut good, r) = Raw::open(&socks[0], WireRole::Control);
    assert_eq!(r.errno, 0);
    let (mut bad, r) = Raw::open(&socks[0], WireRole::Control);
    assert_eq!(r.errno, 0);
    // Garbage, a wrong version, a second HELLO, a wrong ioctl size, an unknown request.
    bad.c.send(b"garbage", &[]).unwrap();
    assert_eq!(bad.recv().0.errno, Errno::EPROTO.code());
    let mut f = Request {
        kind: Kind::Ioctl,
        tag: 5,
        request: DRIVER_CMD_GET_INFO,
        arg: vec![0; DeviceInfo::SIZE],
    }
    .encode()
    .unwrap();
    f[4] = 9;
    bad.c.send(&f, &[]).unwrap();
    let (r, _) = bad.recv();
    assert_eq!((r.errno, r.tag), (Errno::EPROTO.code(), 5));
    assert!(r.msg.contains("version"), "{}", r.msg);
    let (r, _) = bad.call(Kind::Hello, 0, Hello::default().encode());
    assert_eq!(r.errno, Errno::EPROTO.code());
    let (r, _) = bad.call(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; 3]);
    assert_eq!(r.errno, Errno::ENOTTY.code());
    let (r, _) = bad.call(Kind::Ioctl, 0xdead_beef, vec![]);
    assert_eq!(r.errno, Errno::ENOTTY.code());
    // An empty frame is a malformed one, not the end of the connection.
    bad.c.send(&[], &[]).unwrap();
    let (r, _) = bad.recv();
    assert_eq!(r.errno, Errno::EPROTO.code());
    assert!(r.msg.contains("empty frame"), "{}", r.msg);
    let (r, _) = bad.call(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; DeviceInfo::SIZE]);
    assert_eq!(r.errno, 0, "the connection survived the empty frame");
    // An oversized frame, and descriptors sent to the daemon.
    bad.c.send(&vec![0u8; MAX_REQUEST + 100], &[]).unwrap();
    assert!(bad.recv().0.msg.contains("longer"));
    let f = Request {
        kind: Kind::Ioctl,
        tag: 9,
        request: DRIVER_CMD_GET_INFO,
        arg: vec![0; DeviceInfo::SIZE],
    }
    .encode()
    .unwrap();
    bad.c.send(&f, &[good.c.as_fd()]).unwrap();
    assert!(bad.recv().0.msg.contains("descriptors"));
    // A control open cannot own resources.
    let mut arg = vec![0; AllocMemoryArgs::SIZE];
    AllocMemoryArgs {
        size: 1,
        ..AllocMemoryArgs::default()
    }
    .encode(&mut arg);
    assert_eq!(
        bad.call(Kind::Ioctl, DRIVER_CMD_ALLOC_MEMORY, arg).0.errno,
        Errno::EPERM.code()
    );
    // The well-behaved connection never noticed.
    let (r, _) = good.call(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; DeviceInfo::SIZE]);
    assert_eq!(r.errno, 0);
    // The first frame not being HELLO closes the connection after one EPROTO reply.
    let mut x = Raw {
        c: SeqPacket::connect(&socks[0]).unwrap(),
        tag: 0,
    };
    let (r, _) = x.call(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; DeviceInfo::SIZE]);
    assert_eq!(r.errno, Errno::EPROTO.code());
    let mut buf = [0u8; 64];
    assert_eq!(x.c.recv(&mut buf, false).unwrap().len, 0);
    // A wrong ABI major is refused with EPROTO and a message naming both.
    let mut y = Raw {
        c: SeqPacket::connect(&socks[0]).unwrap(),
        tag: 0,
    };
    let h = Hello {
        abi_major: ABI_VERSION_MAJOR + 1,
        ..Hello::default()
    };
    let (r, _) = y.call(Kind::Hello, 0, h.encode());
    assert_eq!(r.errno, Errno::EPROTO.code());
    assert!(r.msg.contains("ABI major"), "{}", r.msg);
}

#[test]
fn admin_policy_applies_to_set_device_share() {
    let d = start(
        "admin",
        AdminPolicy {
            root: false,
            owner: None,
            uids: vec![],
            gids: vec![4242],
        },
    );
    let socks = d.sockets();
    let (mut c, _) = Raw::open(&socks[0], WireRole::Control);
    let arg = share_arg(1);
    let (r, _) = c.call(Kind::Ioctl, DRIVER_CMD_SET_DEVICE_SHARE, arg.clone());
    assert_eq!(r.errno, Errno::EPERM.code(), "{}", r.msg);
    // The daemon's hint: who the caller is, who the admins are, how to become one.
    let me = nix::unistd::getuid().as_raw();
    assert!(r.msg.contains(&format!("you are uid {me}")), "{}", r.msg);
    assert!(
        r.msg.contains("admins are members of group 4242"),
        "{}",
        r.msg
    );
    assert!(
        r.msg
            .contains(&format!("restart davinci-mockd with --admin-uid {me}")),
        "{}",
        r.msg
    );
    drop(d);
    let d = start("admin2", AdminPolicy::default());
    let (mut c, _) = Raw::open(&d.sockets()[0], WireRole::Control);
    let (r, _) = c.call(Kind::Ioctl, DRIVER_CMD_SET_DEVICE_SHARE, arg);
    // This test runs as whoever runs it: uid 0 is admin under the default policy.
    let expect = if nix::unistd::getuid().is_root() {
        0
    } else {
        Errno::EPERM.code()
    };
    assert_eq!(r.errno, expect, "{}", r.msg);
}

#[test]
fn the_owner_of_the_daemon_is_an_admin() {
    // The policy davinci-mockd builds for its own user (here whoever runs the test, with the
    // root rule off so only the owner rule can make this process an admin).
    let me = nix::unistd::getuid().as_raw();
    let d = start(
        "owner",
        AdminPolicy {
            root: false,
            owner: Some(me),
            ..AdminPolicy::default()
        },
    );
    let (mut c, _) = Raw::open(&d.sockets()[0], WireRole::Control);
    let (r, _) = c.call(Kind::Ioctl, DRIVER_CMD_SET_DEVICE_SHARE, share_arg(1));
    assert_eq!(r.errno, 0, "{}", r.msg);
    assert_eq!(d.devices()[0].share_mode(), ShareMode::Shared);
}

#[test]
fn share_mode_at_start_up() {
    let dir = std::env::temp_dir().join(format!("davinci-d-{}-sharemode", std::process::id()));
    let d = Daemon::start(&DaemonConfig {
        devices: 2,
        memory: 1 << 20,
        socket_dir: dir.into(),
        share_mode: ShareMode::Shared,
        // Nobody is an admin: the start-up setting does not depend on the admin policy.
        admin: AdminPolicy {
            root: false,
            ..AdminPolicy::default()
        },
        ..DaemonConfig::default()
    })
    .unwrap();
    for dev in d.devices() {
        assert_eq!(dev.share_mode(), ShareMode::Shared);
        // The internal open that set it is gone.
        assert_eq!(dev.info().clients, 0);
        assert!(dev.clients().is_empty());
    }
    // Two clients at once, which exclusive mode would refuse.
    let (_a, r) = Raw::open(&d.sockets()[1], WireRole::Client);
    assert_eq!(r.errno, 0, "{}", r.msg);
    let (_b, r) = Raw::open(&d.sockets()[1], WireRole::Client);
    assert_eq!(r.errno, 0, "{}", r.msg);
}

#[test]
fn a_silent_connection_is_closed_after_the_hello_timeout() {
    let dir = std::env::temp_dir().join(format!("davinci-d-{}-silent", std::process::id()));
    let d = Daemon::start(&DaemonConfig {
        devices: 1,
        memory: 1 << 20,
        socket_dir: dir.into(),
        hello_timeout: std::time::Duration::from_millis(100),
        ..DaemonConfig::default()
    })
    .unwrap();
    let silent = SeqPacket::connect(&d.sockets()[0]).unwrap();
    let t0 = std::time::Instant::now();
    let mut buf = [0u8; 64];
    assert_eq!(
        silent.recv(&mut buf, false).unwrap().len,
        0,
        "closed by the daemon"
    );
    assert!(t0.elapsed() >= std::time::Duration::from_millis(90));
    // A prompt HELLO is unaffected, and the open does not time out afterwards.
    let (mut ok, r) = Raw::open(&d.sockets()[0], WireRole::Control);
    assert_eq!(r.errno, 0);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (r, _) = ok.call(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; DeviceInfo::SIZE]);
    assert_eq!(r.errno, 0);
}

/// WAIT_EVENT on `stream` for `value` (up to 10 s): (errno, status).
fn wait_stream(raw: &mut Raw, stream: u32, value: u64) -> (i32, u32) {
    use davinci_uapi::{WaitEventArgs, WaitKind};
    let (e, w) = ioctl(
        raw,
        davinci_uapi::DRIVER_CMD_WAIT_EVENT,
        &WaitEventArgs {
            kind: WaitKind::Stream as u32,
            handle: stream,
            value,
            timeout_ns: 10_000_000_000,
            ..Default::default()
        },
    );
    (e, w.status)
}

/// `davinci-mockd --inject error-at=2`: every stream's second task fails with EIO and stops
/// the stream; SIGUSR1 resets the devices (streams stop with ECANCELED, new ones run); an
/// invalid `--inject` is a usage error that says what is expected.
#[test]
fn the_binary_injects_faults_and_resets_on_sigusr1() {
    use davinci_uapi::{SubmitTaskArgs, TaskDesc};
    use std::io::BufRead;
    let bin = env!("CARGO_BIN_EXE_davinci-mockd");
    let bad = std::process::Command::new(bin)
        .args(["--inject", "hang-at=0"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&bad.stderr);
    assert!(
        msg.contains("expected error-at=N[:ERRNO], hang-at=N or stop-at=N"),
        "{msg}"
    );

    let dir = scratch_path("inject");
    let mut child = std::process::Command::new(bin)
        .args([
            "--inject",
            "error-at=2",
            "--exit-with-parent",
            "--socket-dir",
        ])
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("ready"), "{line}");
    let (mut c, r) = Raw::open(&dir.join("davinci0.sock"), WireRole::Client);
    assert_eq!(r.errno, 0, "{}", r.msg);

    let s = new_stream(&mut c);
    let submit = |c: &mut Raw, stream: u32, user_data: u64| {
        ioctl(
            c,
            davinci_uapi::DRIVER_CMD_SUBMIT_TASK,
            &SubmitTaskArgs {
                stream,
                desc: TaskDesc::nop(user_data),
                ..Default::default()
            },
        )
        .0
    };
    assert_eq!(submit(&mut c, s, 1), 0);
    assert_eq!(submit(&mut c, s, 2), 0);
    assert_eq!(
        wait_stream(&mut c, s, 2),
        (Errno::EIO.code(), Errno::EIO.code() as u32),
        "the second task failed and stopped the stream"
    );
    assert_eq!(submit(&mut c, s, 3), Errno::EIO.code(), "a stopped stream");

    let s2 = new_stream(&mut c);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .unwrap();
    assert_eq!(
        wait_stream(&mut c, s2, 1),
        (Errno::EIO.code(), Errno::ECANCELED.code() as u32),
        "the reset stopped the stream"
    );
    // The device serves new streams after the reset (armed like every stream: the first
    // task runs).
    let s3 = new_stream(&mut c);
    assert_eq!(submit(&mut c, s3, 9), 0);
    assert_eq!(wait_stream(&mut c, s3, 1), (0, 0));
    drop(c);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// A daemon started with a low soft limit on open files (systemd's default is 1024; each
/// allocation is a memfd) raises it to the hard limit and says so: a busy device's
/// allocations do not fail for want of descriptors the system would give it.
#[test]
fn a_low_open_file_limit_is_raised_to_the_hard_one() {
    if !std::path::Path::new("/usr/bin/prlimit").exists() {
        eprintln!("no prlimit (util-linux): skipped");
        return;
    }
    let need = davinci_mockd::daemon::DaemonConfig::default().most_fds();
    let hard = need + 1000;
    let limit = format!("--nofile=256:{hard}");
    let mut d = support::Mockd::start_under("nofile", &["/usr/bin/prlimit", &limit], &[]);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", d.pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let soft: u64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert_eq!(soft, hard, "{line}");
    let log = d.wait_for_log("raised the open-file limit");
    assert!(log.contains(&format!("to={hard}")), "{log}");
    let (status, _) = d.stop();
    assert!(status.success());
}
