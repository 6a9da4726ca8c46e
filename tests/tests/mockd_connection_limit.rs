//! davinci-mockd's connection bound, at the wire level a client sees: a client refused
//! because the device already has `MAX_CONNECTIONS` connections is told why. Found by the
//! isolation suite (`tests/tests/conformance/isolation.rs`); needs no backend, it starts the
//! daemon it tests.
#![forbid(unsafe_code)]

use std::time::Duration;

use davinci_mockd::daemon::{Daemon, DaemonConfig, MAX_CONNECTIONS};
use davinci_mockd_proto::sockio::SeqPacket;
use davinci_shim::{Device, Errno, ShareMode};

/// Regression: a client refused because the device already has `MAX_CONNECTIONS`
/// connections must be told so: `ENOSPC`, "too many connections to this device"
/// (docs/abi.md 1.1: an open fails with `ENOSPC` when the device's opens are used up). davinci-mockd's acceptor
/// (`hosts/mockd/src/daemon.rs`, `accept_loop`) sends that reply and drops the connection at
/// once, without reading the HELLO the client has already sent; closing a Unix socket with
/// unread data resets the connection, and the client's `recv` fails with `ECONNRESET`
/// before it can read the reply. The shim then reported `ENODEV` ("connection to
/// davinci-mockd failed: Connection reset by peer"), which says the daemon is gone. Fixed:
/// the acceptor reads the HELLO first and answers it by its tag (`daemon::refuse`).
/// (A raw connection that sends nothing does get the reply: the conformance test
/// `isolation::a_silent_connection_holds_no_slot_past_the_hello_timeout` checks that.)
#[test]
fn a_client_refused_past_max_connections_is_told_enospc() {
    let dir = std::env::temp_dir().join(format!("davinci-known-{}-conns", std::process::id()));
    let d = Daemon::start(&DaemonConfig {
        devices: 1,
        memory: 16 << 20,
        socket_dir: dir.clone().into(),
        share_mode: ShareMode::Shared,
        // Long enough that no silent connection times out during the test.
        hello_timeout: Duration::from_secs(60),
        ..DaemonConfig::default()
    })
    .expect("start the daemon");
    let sock = d.sockets()[0].clone();
    let silent: Vec<SeqPacket> = (0..MAX_CONNECTIONS)
        .map(|_| SeqPacket::connect(&sock).unwrap())
        .collect();
    let e = Device::open(&format!("mock:{}", sock.display())).unwrap_err();
    drop(silent);
    d.stop();
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(e.errno(), Some(Errno::ENOSPC), "{e}");
    assert!(e.message().contains("too many connections"), "{e}");
}
