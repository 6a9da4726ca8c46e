//! The server against the peer side of the protocol (`PeerClient`, what QEMU's
//! `ivshmem-doorbell` does with the messages), and against raw sockets that misbehave.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use davinci_ivshmem::{
    Error, Gone, Notice, PeerClient, PeerId, Server, ShmSpec, MAX_PEERS, MAX_VECTORS, SERVER_ID,
};

/// Upper bound on any wait (never reached when the code works; no test measures time).
const LONG: Duration = Duration::from_secs(20);
const SIZE: u64 = 1 << 16;

fn sock_path(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir();
    dir.join(format!(
        "ivshmem-test-{}-{tag}-{}.sock",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

fn server(tag: &str, vectors: u16) -> Server {
    Server::bind(sock_path(tag), ShmSpec { size: SIZE }, vectors).expect("bind")
}

/// Connects a peer while the server accepts it; returns the peer (opening read, not its
/// eventfds) and the id the server gave it.
fn connect(server: &mut Server, vectors: u16) -> (PeerClient, PeerId) {
    let path = server.path().to_path_buf();
    let client = std::thread::spawn(move || PeerClient::connect(&path, vectors, LONG));
    let id = server.accept_peer(LONG).expect("accept");
    let peer = client.join().expect("client thread").expect("connect");
    (peer, id)
}

/// Waits until the server reports `want` gone.
fn wait_gone(server: &mut Server, want: PeerId) -> Gone {
    loop {
        let act = server.wait(LONG).expect("wait");
        if let Some((_, why)) = act.gone.iter().find(|(id, _)| *id == want) {
            return *why;
        }
        assert!(
            !act.gone.is_empty() || act.doorbells.iter().any(|&n| n > 0) || act.connecting,
            "wait returned nothing within {LONG:?}"
        );
    }
}

#[test]
fn opening_gives_version_id_memory_then_peer0_then_own_eventfds_in_order() {
    let vectors = 4;
    let mut s = server("opening", vectors);
    let (mut p, id) = connect(&mut s, vectors);
    assert_eq!(
        id,
        PeerId(1),
        "the server is peer 0; the first client gets 1"
    );
    assert_eq!(p.id(), id);
    assert_eq!(p.shm_size(), SIZE);
    // Peer 0's vectors first (the other peers), then the client's own (interrupt setup).
    for peer in [SERVER_ID, id] {
        for v in 0..vectors {
            let n = p.next_notice(LONG).expect("notice");
            assert_eq!(n, Notice::Vector { peer, vector: v });
        }
    }
    assert_eq!(p.known_peers(), vec![SERVER_ID, id]);
    assert_eq!(p.vectors_of(SERVER_ID), 4);
    assert_eq!(p.vectors_of(id), 4);
    // Nothing more: the opening is complete.
    assert!(matches!(
        p.next_notice(Duration::ZERO),
        Err(Error::Timeout(_))
    ));
    assert_eq!(s.peers(), vec![id]);
}

#[test]
fn shared_memory_is_the_same_memory_both_ways() {
    let mut s = server("memory", 1);
    let (p, _) = connect(&mut s, 1);
    s.shared().write(100, b"from the server").unwrap();
    let mut buf = [0u8; 15];
    p.shared().read(100, &mut buf).unwrap();
    assert_eq!(&buf, b"from the server");
    p.shared().write(SIZE - 8, b"the peer").unwrap();
    let mut buf = [0u8; 8];
    s.shared().read(SIZE - 8, &mut buf).unwrap();
    assert_eq!(&buf, b"the peer");
    // The mapping is the whole memory and no more.
    assert!(s.shared().read(SIZE - 4, &mut buf).is_err());
}

#[test]
fn doorbell_from_the_peer_reaches_the_server_on_its_vector_with_its_count() {
    let vectors = 4;
    let mut s = server("doorbell", vectors);
    let (mut p, _) = connect(&mut s, vectors);
    p.wait_ready(LONG).unwrap();
    assert!(p.ring(SERVER_ID, 2).unwrap());
    assert!(p.ring(SERVER_ID, 2).unwrap());
    assert!(p.ring(SERVER_ID, 3).unwrap());
    let act = s.wait(LONG).unwrap();
    assert_eq!(act.doorbells, vec![0, 0, 2, 1]);
    assert!(act.gone.is_empty());
    // Read once: nothing pending now.
    let act = s.wait(Duration::ZERO).unwrap();
    assert_eq!(act.doorbells, vec![0; 4]);
    // A vector the peer does not have is ignored, as QEMU ignores the register write.
    assert!(!p.ring(SERVER_ID, 4).unwrap());
    assert!(!p.ring(PeerId(7), 0).unwrap());
}

#[test]
fn interrupt_reaches_the_peer_on_that_vector_only() {
    let vectors = 3;
    let mut s = server("interrupt", vectors);
    let (mut p, id) = connect(&mut s, vectors);
    p.wait_ready(LONG).unwrap();
    s.interrupt(id, 1).unwrap();
    s.interrupt(id, 1).unwrap();
    assert_eq!(p.wait_interrupt(1, LONG).unwrap(), 2);
    // Written synchronously above: the other vectors have nothing.
    for v in [0, 2] {
        assert!(matches!(
            p.wait_interrupt(v, Duration::ZERO),
            Err(Error::Timeout(_))
        ));
    }
    assert!(matches!(
        s.interrupt(id, 3),
        Err(Error::NoSuchVector {
            vector: 3,
            vectors: 3
        })
    ));
    assert!(matches!(
        s.interrupt(PeerId(2), 0),
        Err(Error::NoSuchPeer(PeerId(2)))
    ));
    assert!(matches!(
        s.interrupt(SERVER_ID, 0),
        Err(Error::NoSuchPeer(SERVER_ID))
    ));
}

#[test]
fn second_peer_learns_of_the_first_and_of_its_departure() {
    let vectors = 2;
    let mut s = server("second", vectors);
    let (mut a, ida) = connect(&mut s, vectors);
    a.wait_ready(LONG).unwrap();
    let (mut b, idb) = connect(&mut s, vectors);
    assert_eq!(idb, PeerId(2));
    // b: peer 0, then a, then itself.
    for peer in [SERVER_ID, ida, idb] {
        for v in 0..vectors {
            assert_eq!(
                b.next_notice(LONG).unwrap(),
                Notice::Vector { peer, vector: v }
            );
        }
    }
    // a is told of b, vector by vector.
    for v in 0..vectors {
        assert_eq!(
            a.next_notice(LONG).unwrap(),
            Notice::Vector {
                peer: idb,
                vector: v
            }
        );
    }
    // Peer to peer: b rings a's vector 1 (a guest's Doorbell write of 1 << 16 | 1).
    assert!(b.ring(ida, 1).unwrap());
    assert_eq!(a.wait_interrupt(1, LONG).unwrap(), 1);
    // a leaves: the server sees it, b is told, a's id is free again.
    drop(a);
    assert_eq!(wait_gone(&mut s, ida), Gone::Closed);
    assert_eq!(b.next_notice(LONG).unwrap(), Notice::Gone(ida));
    assert_eq!(b.known_peers(), vec![SERVER_ID, idb]);
    assert!(!b.ring(ida, 0).unwrap(), "its eventfds are closed");
    assert_eq!(s.peers(), vec![idb]);
    let (mut c, idc) = connect(&mut s, vectors);
    assert_eq!(idc, ida, "the lowest free id");
    c.wait_ready(LONG).unwrap();
    assert_eq!(c.known_peers(), vec![SERVER_ID, idc, idb]);
}

#[test]
fn one_peer_more_than_max_is_refused_and_disconnected() {
    let mut s = server("max", 1);
    let mut peers = Vec::new();
    for i in 0..MAX_PEERS {
        let (p, id) = connect(&mut s, 1);
        assert_eq!(usize::from(id.0), i + 1);
        peers.push(p);
    }
    let path = s.path().to_path_buf();
    let extra = std::thread::spawn(move || PeerClient::connect(&path, 1, LONG));
    assert!(matches!(
        s.accept_peer(LONG),
        Err(Error::TooManyPeers { max: MAX_PEERS })
    ));
    assert!(matches!(extra.join().unwrap(), Err(Error::Disconnected)));
    assert_eq!(s.peers().len(), MAX_PEERS);
}

/// A server limited to one peer refuses the second before sending it anything: its
/// connection ends with no byte and no descriptor (not the shared memory, no eventfd), the
/// first peer hears nothing of it, and once the first goes the next client is served.
#[test]
fn a_peer_past_the_limit_is_closed_before_it_receives_anything() {
    let mut s = server("limit", 2);
    assert_eq!(s.peer_limit(), MAX_PEERS);
    for bad in [0, MAX_PEERS + 1] {
        assert!(
            matches!(s.limit_peers(bad), Err(Error::BadSpec(_))),
            "{bad}"
        );
    }
    assert_eq!(s.peer_limit(), MAX_PEERS, "a refused limit changes nothing");
    s.limit_peers(1).unwrap();
    let (mut first, id) = connect(&mut s, 2);
    first.wait_ready(LONG).unwrap();
    let path = s.path().to_path_buf();
    let second = std::thread::spawn(move || {
        let sock = UnixStream::connect(&path).unwrap();
        recv_everything(&sock)
    });
    assert!(matches!(
        s.accept_peer(LONG),
        Err(Error::TooManyPeers { max: 1 })
    ));
    let (bytes, fds) = second.join().unwrap();
    assert_eq!((bytes, fds), (0, 0), "the refused client received nothing");
    assert_eq!(s.peers(), vec![id]);
    assert!(matches!(
        first.next_notice(Duration::from_millis(200)),
        Err(Error::Timeout(_))
    ));
    // The first goes: the limit has room again.
    drop(first);
    assert_eq!(wait_gone(&mut s, id), Gone::Closed);
    let (mut again, id2) = connect(&mut s, 2);
    assert_eq!(id2, id, "the lowest free id");
    again.wait_ready(LONG).unwrap();
}

/// Every byte and descriptor `sock` receives until the server closes it (descriptors
/// counted, then closed).
fn recv_everything(sock: &UnixStream) -> (usize, usize) {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
    use std::io::IoSliceMut;
    use std::os::fd::{AsRawFd, RawFd};
    sock.set_read_timeout(Some(LONG)).unwrap();
    let (mut bytes, mut fds) = (0, 0);
    loop {
        let mut buf = [0u8; 64];
        let mut cmsg = nix::cmsg_space!([RawFd; 8]);
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = recvmsg::<UnixAddr>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .expect("recvmsg (a timeout: the server neither sent nor closed)");
        for c in msg.cmsgs().unwrap() {
            if let ControlMessageOwned::ScmRights(raw) = c {
                for r in raw {
                    fds += 1;
                    nix::unistd::close(r).unwrap();
                }
            }
        }
        if msg.bytes == 0 {
            return (bytes, fds);
        }
        bytes += msg.bytes;
    }
}

#[test]
fn a_peer_that_sends_anything_is_removed_and_the_others_told() {
    let mut s = server("chatty", 1);
    let (mut good, idg) = connect(&mut s, 1);
    good.wait_ready(LONG).unwrap();
    // A raw client: reads nothing, writes a byte after its opening.
    let path = s.path().to_path_buf();
    let raw = std::thread::spawn(move || UnixStream::connect(&path).unwrap());
    let idr = s.accept_peer(LONG).unwrap();
    let mut raw = raw.join().unwrap();
    assert_eq!(
        good.next_notice(LONG).unwrap(),
        Notice::Vector {
            peer: idr,
            vector: 0
        }
    );
    raw.write_all(b"x").unwrap();
    assert_eq!(wait_gone(&mut s, idr), Gone::SentData);
    assert_eq!(good.next_notice(LONG).unwrap(), Notice::Gone(idr));
    assert_eq!(s.peers(), vec![idg]);
    // The raw client's connection was closed: it reads its opening, then EOF.
    let mut all = Vec::new();
    raw.read_to_end(&mut all).unwrap();
    // version, id, shm, peer 0's vector, peer 1's vector, its own: 6 messages.
    assert_eq!(all.len(), 6 * 8);
    let word = |i: usize| i64::from_le_bytes(all[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!(
        (0..6).map(word).collect::<Vec<_>>(),
        vec![
            0,
            i64::from(idr.0),
            -1,
            0,
            i64::from(idg.0),
            i64::from(idr.0)
        ]
    );
}

#[test]
fn wait_reports_a_connecting_client_without_accepting_it() {
    let mut s = server("connecting", 1);
    let path = s.path().to_path_buf();
    let client = std::thread::spawn(move || PeerClient::connect(&path, 1, LONG));
    loop {
        if s.wait(LONG).unwrap().connecting {
            break;
        }
    }
    assert!(s.peers().is_empty());
    let id = s.accept_peer(Duration::ZERO).unwrap();
    assert_eq!(client.join().unwrap().unwrap().id(), id);
}

#[test]
fn accept_times_out_without_a_client() {
    let mut s = server("timeout", 1);
    assert!(matches!(
        s.accept_peer(Duration::ZERO),
        Err(Error::Timeout(_))
    ));
}

#[test]
fn bad_configurations_are_refused_with_the_reason() {
    for size in [0, 4095, 3 << 12, 1 << 31] {
        let e = Server::bind(sock_path("bad"), ShmSpec { size }, 1).unwrap_err();
        assert!(matches!(e, Error::BadSpec(_)), "size {size}: {e}");
    }
    for vectors in [0, MAX_VECTORS + 1] {
        let e = Server::bind(sock_path("bad"), ShmSpec { size: SIZE }, vectors).unwrap_err();
        assert!(matches!(e, Error::BadSpec(_)), "{vectors} vectors: {e}");
    }
    let s = server("inuse", 1);
    let e = Server::bind(s.path(), ShmSpec { size: SIZE }, 1).unwrap_err();
    assert_eq!(e.errno(), Some(nix::errno::Errno::EADDRINUSE), "{e}");
    assert!(
        e.to_string().contains(&s.path().display().to_string()),
        "{e}"
    );
}

#[test]
fn the_shared_memory_cannot_be_shrunk_by_a_peer() {
    let mut s = server("seal", 1);
    let (_p, _) = connect(&mut s, 1);
    let e = nix::unistd::ftruncate(s.shared_fd(), 4096).unwrap_err();
    assert_eq!(e, nix::errno::Errno::EPERM);
}

#[test]
fn server_gone_disconnects_the_peer_and_removes_the_socket() {
    let mut s = server("drop", 1);
    let (mut p, _) = connect(&mut s, 1);
    p.wait_ready(LONG).unwrap();
    let path = s.path().to_path_buf();
    drop(s);
    assert!(!path.exists());
    assert!(matches!(p.next_notice(LONG), Err(Error::Disconnected)));
}

#[test]
fn a_peer_that_never_reads_is_removed_when_full_and_never_blocks_the_server() {
    let vectors = MAX_VECTORS;
    let mut s = server("stuck", vectors);
    let path = s.path().to_path_buf();
    let stuck = std::thread::spawn(move || UnixStream::connect(&path).unwrap());
    let ids = s.accept_peer(LONG).unwrap();
    let _stuck = stuck.join().unwrap(); // kept open, never read
                                        // Each peer that comes and goes sends the stuck one `vectors` messages with descriptors
                                        // and one without; its socket buffer fills within a bounded number of rounds.
    for round in 0..1000 {
        let (p, id) = connect(&mut s, vectors);
        drop(p);
        let mut gone = Vec::new();
        while !gone.iter().any(|(g, _)| *g == id) {
            let act = s.wait(LONG).unwrap();
            assert!(
                !act.gone.is_empty(),
                "round {round}: nothing left within {LONG:?}"
            );
            gone.extend(act.gone);
        }
        if let Some((_, why)) = gone.iter().find(|(g, _)| *g == ids) {
            assert!(matches!(why, Gone::SendFailed(_)), "{why:?}");
            assert!(s.peers().is_empty());
            return;
        }
    }
    panic!("the stuck peer was never removed");
}
