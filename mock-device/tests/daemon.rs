//! `davinci-mockd` in-process ([`Daemon`]), through raw frames on its sockets: opens,
//! ioctls, mmaps, exclusive mode, malformed frames, the admin policy, socket groups, the
//! HELLO timeout.
#![forbid(unsafe_code)]

use std::os::fd::AsFd;
use std::path::Path;

use davinci_mock_device::daemon::{Daemon, DaemonConfig};
use davinci_mock_device::peer::AdminPolicy;
use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{
    holder_from_payload, Hello, HelloReply, Kind, MmapArgs, Reply, Request, WireRole, MAX_REPLY,
    MAX_REQUEST,
};
use davinci_uapi::{
    AllocMemoryArgs, DeviceInfo, DeviceShareArgs, DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_GET_INFO,
    DRIVER_CMD_SET_DEVICE_SHARE,
};
use davinci_uapi::{Errno, Wire, ABI_VERSION_MAJOR, ABI_VERSION_MINOR};

fn start(tag: &str, admin: AdminPolicy) -> Daemon {
    let dir = std::env::temp_dir().join(format!("davinci-d-{}-{tag}", std::process::id()));
    Daemon::start(&DaemonConfig {
        devices: 2,
        memory: 16 << 20,
        socket_dir: dir,
        admin,
        ..DaemonConfig::default()
    })
    .unwrap()
}

struct Raw {
    c: SeqPacket,
    tag: u32,
}

impl Raw {
    fn call(&mut self, kind: Kind, request: u32, arg: Vec<u8>) -> (Reply, usize) {
        self.tag += 1;
        let f = Request {
            kind,
            tag: self.tag,
            request,
            arg,
        };
        self.c.send(&f.encode().unwrap(), &[]).unwrap();
        self.recv()
    }

    fn recv(&mut self) -> (Reply, usize) {
        let mut buf = vec![0u8; MAX_REPLY];
        let r = self.c.recv(&mut buf, true).unwrap();
        assert!(r.len > 0, "daemon closed the connection");
        let rep = Reply::decode(&buf[..r.len]).unwrap();
        assert_eq!(rep.nfds as usize, r.fds.len());
        (rep, r.fds.len())
    }

    fn open(path: &Path, role: WireRole) -> (Raw, Reply) {
        let mut raw = Raw {
            c: SeqPacket::connect(path).unwrap(),
            tag: 0,
        };
        let h = Hello {
            abi_major: ABI_VERSION_MAJOR,
            abi_minor: ABI_VERSION_MINOR,
            role: role as u32,
            reserved: 0,
        };
        let (r, _) = raw.call(Kind::Hello, 0, h.encode());
        (raw, r)
    }
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
    let (r, _) = a.call(Kind::Ioctl, DRIVER_CMD_ALLOC_MEMORY, arg);
    assert_eq!(r.errno, 0, "{}", r.msg);
    let got = AllocMemoryArgs::from_bytes(&r.arg).unwrap();
    assert_eq!(got.alloc_size, 12288);
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
            uids: vec![],
            gids: vec![],
        },
    );
    let socks = d.sockets();
    let (mut c, _) = Raw::open(&socks[0], WireRole::Control);
    let mut arg = vec![0; DeviceShareArgs::SIZE];
    DeviceShareArgs {
        mode: 1,
        ..DeviceShareArgs::default()
    }
    .encode(&mut arg);
    let (r, _) = c.call(Kind::Ioctl, DRIVER_CMD_SET_DEVICE_SHARE, arg.clone());
    assert_eq!(r.errno, Errno::EPERM.code(), "{}", r.msg);
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
        socket_dir: dir,
        socket_group: Some(4242),
        ..DaemonConfig::default()
    })
    .unwrap();
    let meta = std::fs::metadata(&d.sockets()[0]).unwrap();
    assert_eq!((meta.gid(), meta.mode() & 0o777), (4242, 0o660));
}

#[test]
fn a_silent_connection_is_closed_after_the_hello_timeout() {
    let dir = std::env::temp_dir().join(format!("davinci-d-{}-silent", std::process::id()));
    let d = Daemon::start(&DaemonConfig {
        devices: 1,
        memory: 1 << 20,
        socket_dir: dir,
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
