//! `davinci-mockd`'s bounds per tenant, with clients that are other users (needs root and
//! setpriv here, else skipped, saying so): silent connections of twenty users leave room
//! for another user's open, and one user's blocking waits stop at its share of the device's,
//! so another user's wait is still served. The daemon runs in this process; the clients are
//! this test binary run again as other users ([`helper_as_another_user`]).
#![forbid(unsafe_code)]

mod support;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use davinci_mockd::daemon::{
    wait_share, Daemon, DaemonConfig, MAX_PRE_HELLO_PER_TENANT, MAX_WAITS_PER_CONN,
    MAX_WAITS_PER_DEVICE,
};
use davinci_mockd::peer::AdminPolicy;
use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{Kind, WireRole};
use davinci_uapi::{
    DeviceInfo, Errno, ShareMode, WaitEventArgs, WaitKind, Wire, DRIVER_CMD_GET_INFO,
    DRIVER_CMD_WAIT_EVENT,
};
use support::{ioctl, new_stream, scratch_path, Raw};

const MODE: &str = "DAVINCI_MOCKD_TENANT_HELPER";
const SOCKET: &str = "DAVINCI_MOCKD_TENANT_SOCKET";
const COUNT: &str = "DAVINCI_MOCKD_TENANT_COUNT";
/// Uids no account uses: the flood's twenty, the newcomer, the waiter and its neighbour.
const FLOOD: std::ops::Range<u32> = 54400..54420;
const NEWCOMER: u32 = 54430;
const WAITER: u32 = 54440;
const NEIGHBOUR: u32 = 54441;

/// Not a test on its own: the tests run this binary again as another user, with [`MODE`]
/// saying what to do on the socket [`SOCKET`]; it prints `HELPER-...` lines, and the modes
/// that hold connections hold them until their standard input ends.
#[test]
fn helper_as_another_user() {
    let (Ok(mode), Some(sock)) = (std::env::var(MODE), std::env::var_os(SOCKET)) else {
        return;
    };
    let sock = PathBuf::from(sock);
    let n: usize = std::env::var(COUNT)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let hold = || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    };
    match mode.as_str() {
        // `n` connections that never say HELLO.
        "silent" => {
            let held: Vec<SeqPacket> = (0..n).map(|_| SeqPacket::connect(&sock).unwrap()).collect();
            println!("\nHELPER-READY {}", held.len());
            hold();
        }
        // A client open, then GET_INFO.
        "open" => {
            let (mut c, r) = Raw::open(&sock, WireRole::Client);
            if r.errno != 0 {
                println!("\nHELPER-RESULT {} {}", r.errno, r.msg);
                return;
            }
            let (e, info) = ioctl(&mut c, DRIVER_CMD_GET_INFO, &DeviceInfo::default());
            println!("\nHELPER-RESULT {e} clients={}", info.clients);
        }
        // `n` client opens, each with a stream and its most blocking waits (60 s): how many
        // were refused (EBUSY, answered at once) and the first refusal's message.
        "waits" => {
            let mut held = Vec::new();
            let (mut refused, mut msg) = (0, String::new());
            for _ in 0..n {
                let (mut c, r) = Raw::open(&sock, WireRole::Client);
                assert_eq!(r.errno, 0, "{}", r.msg);
                let s = new_stream(&mut c);
                for _ in 0..MAX_WAITS_PER_CONN {
                    c.send(Kind::Ioctl, DRIVER_CMD_WAIT_EVENT, wait_arg(s, 60_000));
                }
                // Frames are served in order: a refusal comes before this reply.
                let info = c.send(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; DeviceInfo::SIZE]);
                loop {
                    let (r, _) = c.recv();
                    if r.tag == info {
                        break;
                    }
                    assert_eq!(r.errno, Errno::EBUSY.code(), "{}", r.msg);
                    refused += 1;
                    if msg.is_empty() {
                        msg = r.msg;
                    }
                }
                held.push(c);
            }
            println!("\nHELPER-READY {refused} {msg}");
            hold();
        }
        // One client open with a stream and one blocking wait of 100 ms.
        "wait" => {
            let (mut c, r) = Raw::open(&sock, WireRole::Client);
            assert_eq!(r.errno, 0, "{}", r.msg);
            let s = new_stream(&mut c);
            let (r, _) = c.call(Kind::Ioctl, DRIVER_CMD_WAIT_EVENT, wait_arg(s, 100));
            println!("\nHELPER-RESULT {} {}", r.errno, r.msg);
        }
        other => panic!("unknown helper mode {other}"),
    }
}

/// A WAIT_EVENT on `stream` for a value nothing reaches, for `ms` milliseconds.
fn wait_arg(stream: u32, ms: u64) -> Vec<u8> {
    let mut arg = vec![0; WaitEventArgs::SIZE];
    WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: stream,
        value: 1,
        timeout_ns: ms * 1_000_000,
        ..Default::default()
    }
    .encode(&mut arg);
    arg
}

fn can_switch_users() -> bool {
    nix::unistd::getuid().is_root()
        && Command::new("setpriv")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
}

/// This binary's helper, run as `uid`.
struct Helper {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Helper {
    fn run(uid: u32, mode: &str, sock: &Path, count: usize) -> Helper {
        let mut child = Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups")
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "helper_as_another_user",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(MODE, mode)
            .env(SOCKET, sock)
            .env(COUNT, count.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Helper { child, out }
    }

    /// The rest of its first line starting `HELPER-<what> `.
    fn line(&mut self, what: &str) -> String {
        let prefix = format!("HELPER-{what} ");
        let mut seen = String::new();
        loop {
            let mut l = String::new();
            if self.out.read_line(&mut l).unwrap() == 0 {
                panic!("the helper ended without a {prefix:?} line: {seen}");
            }
            if let Some(rest) = l.strip_prefix(&prefix) {
                return rest.trim_end().to_string();
            }
            seen.push_str(&l);
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn start(tag: &str) -> Daemon {
    Daemon::start(&DaemonConfig {
        devices: 1,
        memory: 64 << 20,
        socket_dir: scratch_path(tag).into(),
        socket_mode: 0o666,
        admin: AdminPolicy::default(),
        share_mode: ShareMode::Shared,
        hello_timeout: Duration::from_secs(60),
        ..DaemonConfig::default()
    })
    .unwrap()
}

#[test]
fn silent_connections_of_twenty_users_leave_room_for_another_users_open() {
    if !can_switch_users() {
        eprintln!("not root or no setpriv: the tests as other users are skipped");
        return;
    }
    let d = start("tenant-flood");
    let sock = d.sockets()[0].clone();
    // Twenty users, 16 silent connections each: 320, more than the non-admins' 288.
    let mut flood = Vec::new();
    for uid in FLOOD {
        let mut h = Helper::run(uid, "silent", &sock, MAX_PRE_HELLO_PER_TENANT);
        assert_eq!(h.line("READY"), MAX_PRE_HELLO_PER_TENANT.to_string());
        flood.push(h);
    }
    // Another user connects after all of them, says HELLO and uses the device.
    for _ in 0..3 {
        let r = Helper::run(NEWCOMER, "open", &sock, 1).line("RESULT");
        assert!(r.starts_with("0 clients="), "the newcomer's open: {r}");
    }
    drop(flood);
    let _ = std::fs::remove_dir_all(d.socket_dir());
}

#[test]
fn one_users_blocking_waits_leave_another_users_wait_served() {
    if !can_switch_users() {
        eprintln!("not root or no setpriv: the tests as other users are skipped");
        return;
    }
    let d = start("tenant-waits");
    let sock = d.sockets()[0].clone();
    // One user tries for more waits than the whole device serves.
    let opens = MAX_WAITS_PER_DEVICE / MAX_WAITS_PER_CONN + 1;
    let mut waiter = Helper::run(WAITER, "waits", &sock, opens);
    let ready = waiter.line("READY");
    let (refused, msg) = ready.split_once(' ').unwrap_or((&ready, ""));
    let share = wait_share(davinci_driver_core::DEFAULT_TENANT_SLOTS);
    assert_eq!(
        refused.parse::<usize>().unwrap(),
        opens * MAX_WAITS_PER_CONN - share,
        "{ready}"
    );
    assert!(
        msg.starts_with(&format!("{share} blocking WAIT_EVENTs of this tenant"))
            && msg.contains("its share"),
        "{msg}"
    );
    // Another user's blocking wait is admitted (and times out), not refused.
    let r = Helper::run(NEIGHBOUR, "wait", &sock, 1).line("RESULT");
    assert!(
        r.starts_with(&Errno::ETIMEDOUT.code().to_string()),
        "the neighbour's wait: {r}"
    );
    drop(waiter);
    let _ = std::fs::remove_dir_all(d.socket_dir());
}

#[test]
fn the_binarys_tenant_options_set_the_shares_and_the_old_names_still_work() {
    use support::Mockd;
    let info = |m: &Mockd| {
        let (mut c, r) = Raw::open(&m.socket(0), WireRole::Client);
        assert_eq!(r.errno, 0, "{}", r.msg);
        let (e, info) = ioctl(&mut c, DRIVER_CMD_GET_INFO, &DeviceInfo::default());
        assert_eq!(e, 0);
        info
    };
    let base = ["--share-mode", "shared", "--memory", "64M"];
    // Eight slots: each table and the memory over eight.
    let mut m = Mockd::start(
        "tenant-slots",
        &[&base[..], &["--tenant-slots", "8"]].concat(),
    );
    let i = info(&m);
    assert_eq!((i.quota_streams, i.quota_events), (32, 128));
    assert_eq!(i.client_memory_limit, 8 << 20);
    m.stop();
    // A quota and a memory limit given keep their numbers; the old names say they are old.
    let mut m = Mockd::start(
        "tenant-old-names",
        &[
            &base[..],
            &["--tenant-slots", "8"],
            &["--client-quota", "streams=5"],
            &["--client-memory-limit", "4M"],
        ]
        .concat(),
    );
    let i = info(&m);
    assert_eq!((i.quota_streams, i.quota_events), (5, 128));
    assert_eq!(i.client_memory_limit, 4 << 20);
    let (_, log) = m.stop();
    for (old, new) in [
        ("--client-quota", "--tenant-quota"),
        ("--client-memory-limit", "--tenant-memory-limit"),
    ] {
        let note = format!("davinci-mockd: note: {old} is deprecated; it is {new}");
        assert_eq!(log.matches(&note).count(), 1, "{log}");
    }
}
