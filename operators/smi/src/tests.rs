//! The fake devices every unit test of the commands runs against (an [`Opener`] of
//! [`FakeDev`]s, a [`World`] without devices or processes, [`smi`] running a command line
//! in it), and the tests of [`run`](crate::run) itself: usage errors, `--json` for
//! command-line errors, where errors go, and `--loop`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Write;
use std::rc::Rc;

use davinci_ops::discover::Discovery;
use davinci_uapi::{ClientUsage, DeviceIdentity, DeviceInfo, Errno, ShareMode, TenantShareArgs};

pub(crate) use crate::test_util::doc;
use crate::{exit, run_with, DeviceAccess, Opener, SmiError};

#[derive(Clone)]
pub(crate) struct FakeDev {
    pub(crate) state: Rc<RefCell<FakeState>>,
}

impl DeviceAccess for FakeDev {
    fn info(&self) -> Result<DeviceInfo, SmiError> {
        let s = self.state.borrow();
        if s.down {
            return Err(gone());
        }
        let mut i = s.info;
        i.clients = s.clients.len() as u32;
        Ok(i)
    }
    fn share(&self) -> Result<(ShareMode, u32), SmiError> {
        let s = self.state.borrow();
        if s.down {
            return Err(gone());
        }
        Ok((
            ShareMode::from_u32(s.info.share_mode).unwrap(),
            s.clients.len() as u32,
        ))
    }
    fn set_share(&self, mode: ShareMode) -> Result<(), SmiError> {
        let mut s = self.state.borrow_mut();
        if !s.admin {
            return Err(SmiError::new(
                Errno::EPERM,
                "SET_DEVICE_SHARE failed: EPERM: not admin",
            ));
        }
        if mode == ShareMode::Exclusive && s.clients.len() > 1 {
            return Err(SmiError::new(
                Errno::EBUSY,
                "SET_DEVICE_SHARE failed: EBUSY: stranded",
            ));
        }
        s.info.share_mode = mode as u32;
        Ok(())
    }
    fn clients(&self) -> Result<Vec<ClientUsage>, SmiError> {
        let s = self.state.borrow();
        if s.down {
            return Err(gone());
        }
        Ok(s.clients.clone())
    }
    fn identity(&self) -> Result<Option<DeviceIdentity>, SmiError> {
        let s = self.state.borrow();
        if s.down {
            return Err(gone());
        }
        Ok(s.identity)
    }
    fn events(&self) -> Result<davinci_shim::EventBatch, SmiError> {
        let s = self.state.borrow();
        if s.down {
            return Err(gone());
        }
        s.events.clone().ok_or_else(|| {
            SmiError::new(
                Errno::ENOTTY,
                "READ_EVENTS failed: ENOTTY: unknown ioctl command",
            )
        })
    }
    /// TENANT_SHARE as driver-core rules it, simplified: a tenant with a client open and
    /// shares above 0 holds them while they fit the free slots.
    fn tenant_share(&self, tenant: &str, set: Option<u32>) -> Result<TenantShareArgs, SmiError> {
        let mut s = self.state.borrow_mut();
        s.tenant_calls.push((tenant.to_string(), set));
        let fail = |e: Errno, m: &str| {
            Err(SmiError::new(
                e,
                format!("TENANT_SHARE failed: {}: {m}", e.name()),
            ))
        };
        if s.down {
            return Err(gone());
        }
        if s.tenant_slots == 0 {
            return fail(Errno::ENOTTY, "unknown ioctl command");
        }
        if !s.admin {
            return fail(
                Errno::EPERM,
                "changing device sharing or a tenant's share needs an admin",
            );
        }
        let mut a = TenantShareArgs::named(tenant).expect("smi checks the spelling");
        let shares_of = |s: &FakeState, t: &str| {
            s.tenant_settings
                .iter()
                .find(|(n, _)| n == t)
                .map_or(1, |x| x.1)
        };
        let open =
            |s: &FakeState, t: &str| s.clients.iter().any(|c| crate::commands::tenant_of(c) == t);
        let held = |s: &FakeState| -> u32 {
            let mut seen: Vec<String> = Vec::new();
            for c in &s.clients {
                let t = crate::commands::tenant_of(c);
                if !seen.contains(&t) {
                    seen.push(t);
                }
            }
            seen.iter()
                .map(|t| shares_of(s, t))
                .sum::<u32>()
                .min(s.tenant_slots)
        };
        if let Some(n) = set {
            if n > s.tenant_slots {
                return fail(Errno::EINVAL, "shares above the device's tenant slots");
            }
            let now = shares_of(&s, tenant);
            let free = s.tenant_slots - held(&s);
            if open(&s, tenant) && now > 0 && n > now + free {
                return fail(
                    Errno::EBUSY,
                    "the tenant holds its slots and too few others are free",
                );
            }
            let known = s.tenant_settings.iter().any(|(t, _)| t == tenant);
            if !known && n != 1 && s.tenant_settings.len() >= s.max_settings {
                return fail(Errno::ENOSPC, "the device keeps at most 64 tenant settings");
            }
            s.tenant_settings.retain(|(t, _)| t != tenant);
            if n != 1 {
                s.tenant_settings.push((tenant.to_string(), n));
            }
        }
        a.shares = shares_of(&s, tenant);
        a.slots = s.tenant_slots;
        a.free_slots = s.tenant_slots - held(&s);
        a.tenant_flags = if open(&s, tenant) {
            a.tenant_kind
                | if a.shares > 0 {
                    davinci_uapi::TENANT_SLOTTED
                } else {
                    0
                }
        } else {
            0
        };
        Ok(a)
    }
}

pub(crate) struct FakeState {
    pub(crate) info: DeviceInfo,
    pub(crate) clients: Vec<ClientUsage>,
    /// GET_IDENTITY's answer (`None`: not reported); read only with `FEAT_IDENTITY` set.
    pub(crate) identity: Option<DeviceIdentity>,
    pub(crate) admin: bool,
    /// Every request fails with ENODEV (the daemon went away).
    pub(crate) down: bool,
    /// TENANT_SHARE's slots (0: a driver before 1.5, which answers ENOTTY).
    pub(crate) tenant_slots: u32,
    /// The tenants set to other than 1 share.
    pub(crate) tenant_settings: Vec<(String, u32)>,
    /// The most settings the device keeps.
    pub(crate) max_settings: usize,
    /// Every TENANT_SHARE asked: the tenant as it reached the device, and `set`.
    pub(crate) tenant_calls: Vec<(String, Option<u32>)>,
    /// READ_EVENTS' answer (the whole log); `None`: a driver before 1.5 (ENOTTY).
    pub(crate) events: Option<davinci_shim::EventBatch>,
}

pub(crate) fn gone() -> SmiError {
    SmiError::new(
        Errno::ENODEV,
        "GET_INFO failed: ENODEV: the device went away",
    )
}

#[derive(Default)]
pub(crate) struct FakeOpener {
    pub(crate) devs: HashMap<String, FakeDev>,
}

impl Opener for FakeOpener {
    fn open(&self, path: &str) -> Result<Box<dyn DeviceAccess>, SmiError> {
        match self.devs.get(path) {
            Some(d) => Ok(Box::new(d.clone())),
            None => Err(SmiError::new(
                Errno::ENODEV,
                format!("open failed: ENODEV: {path}: no such socket"),
            )),
        }
    }
}

pub(crate) fn usage_of(pid: u32, container: &str, mem: u64) -> ClientUsage {
    let mut u = ClientUsage {
        client_id: pid + 1000,
        pid,
        uid: 0,
        contexts: 1,
        streams: 2,
        events: 0,
        allocations: 3,
        memory_bytes: mem,
        tasks_submitted: 10,
        tasks_completed: 9,
        tasks_queued: 1,
        comm: ClientUsage::comm_field(&format!("proc{pid}")),
        tenant_kind: if container.is_empty() {
            davinci_uapi::TENANT_USER
        } else {
            davinci_uapi::TENANT_CONTAINER
        },
        ..ClientUsage::default()
    };
    u.container[..container.len()].copy_from_slice(container.as_bytes());
    u
}

pub(crate) fn fake(id: u32, clients: Vec<ClientUsage>, shared: bool, admin: bool) -> FakeDev {
    FakeDev {
        state: Rc::new(RefCell::new(FakeState {
            info: DeviceInfo {
                abi_major: 1,
                device_id: id,
                memory_size: 256 << 20,
                memory_used: clients.iter().map(|c| c.memory_bytes).sum(),
                client_memory_limit: 256 << 20,
                max_clients: 64,
                share_mode: shared as u32,
                ..DeviceInfo::default()
            },
            clients,
            identity: None,
            admin,
            down: false,
            tenant_slots: 4,
            tenant_settings: Vec::new(),
            max_settings: 64,
            tenant_calls: Vec::new(),
            events: None,
        })),
    }
}

pub(crate) struct World {
    pub(crate) opener: FakeOpener,
    pub(crate) disc: Discovery,
}

pub(crate) fn world(devs: Vec<(&str, FakeDev)>) -> World {
    World {
        opener: FakeOpener {
            devs: devs.into_iter().map(|(p, d)| (p.to_string(), d)).collect(),
        },
        disc: Discovery {
            device_env: None,
            dev_dir: "/nonexistent-dev".into(),
            default_socket_dir: "/nonexistent-socks".into(),
        },
    }
}

pub(crate) fn smi(w: &World, args: &[&str]) -> (i32, String, String) {
    smi_sleeping(w, args, &mut |d| panic!("slept {d:?} without --loop"))
}

/// [`smi`] with `--loop`'s pauses handed to `sleep` (which may change the fakes).
pub(crate) fn smi_sleeping(
    w: &World,
    args: &[&str],
    sleep: &mut dyn FnMut(std::time::Duration),
) -> (i32, String, String) {
    let mut argv = vec!["davinci-smi".to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_with(&argv, &w.disc, &w.opener, &mut out, &mut err, sleep);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

pub(crate) const A: &str = "mock:/s/davinci0.sock";

pub(crate) const B: &str = "mock:/s/davinci1.sock";

pub(crate) fn two() -> World {
    world(vec![
        (
            A,
            fake(
                0,
                vec![usage_of(100, "abcdef0123456789abcdef", 4 << 20)],
                false,
                true,
            ),
        ),
        (B, fake(1, vec![], true, true)),
    ])
}

pub(crate) const BOTH: [&str; 4] = ["--device", A, "--device", B];

pub(crate) fn args<'a>(pre: &[&'a str], rest: &[&'a str]) -> Vec<&'a str> {
    let mut a = pre.to_vec();
    a.extend_from_slice(rest);
    a
}

/// A `usage-error` document on stdout, nothing on stderr, exit 2.
pub(crate) fn assert_json_usage_error(w: &World, a: &[&str]) -> String {
    let (code, out, err) = smi(w, a);
    assert_eq!(code, exit::USAGE, "{a:?}: {out}{err}");
    assert_eq!(err, "", "{a:?}: stderr must stay empty with --json");
    let v = doc(&out);
    assert_eq!(v["command"], "usage-error", "{a:?}: {v}");
    assert_eq!(v["exit_code"], exit::USAGE);
    assert_eq!(v["error"]["errno"], serde_json::Value::Null);
    let msg = v["error"]["message"].as_str().unwrap().to_string();
    assert!(!msg.is_empty() && !msg.starts_with("error:"), "{msg}");
    assert!(!msg.contains("For more information"), "{msg}");
    msg
}

#[test]
fn usage_errors_exit_2_and_help_exits_0() {
    let w = two();
    for bad in [
        &["set", "-t", "device-share", "-i", "0", "-d", "2"][..],
        &["set", "-t", "device-share", "-d", "1"],
        &["set", "-t", "frobnicate", "-i", "0", "-d", "1"],
        &["info", "-t", "nope"],
        &["info", "-i", "x"],
        &["bogus"],
    ] {
        let (code, out, err) = smi(&w, bad);
        assert_eq!(code, exit::USAGE, "{bad:?}: {out}{err}");
        assert!(!err.is_empty());
    }
    let (code, out, _) = smi(&w, &["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("Exit status: 0 ok"), "{out}");
    let (code, out, _) = smi(&w, &["set", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("--yes"));
}

#[test]
fn json_argument_errors_are_json_documents() {
    let w = two();
    for bad in [
        &["set", "-t", "device-share", "-i", "0", "-d", "2", "--json"][..],
        &["--json", "set", "-t", "device-share", "-d", "1"],
        &["info", "-t", "nope", "--json"],
        &["info", "-i", "x", "--json"],
        &["--json", "bogus"],
        &["--json", "--frobnicate"],
        &["info", "--query", "nope", "--json"],
        &["info", "--query", "index", "--json"],
        &["--json", "--count", "2"],
    ] {
        assert_json_usage_error(&w, &args(&BOTH, bad));
    }
    let msg = assert_json_usage_error(&w, &["info", "-t", "nope", "--json"]);
    assert!(msg.contains("'nope'") && msg.contains("usage"), "{msg}");
    // Without --json: clap's text on stderr, nothing on stdout.
    let (code, out, err) = smi(&w, &["info", "-t", "nope"]);
    assert_eq!((code, out.as_str()), (exit::USAGE, ""));
    assert!(err.starts_with("error: invalid value 'nope'"), "{err}");
}

#[test]
fn text_errors_go_to_stderr() {
    let w = two();
    let dead = "mock:/s/davinci7.sock";
    let pair = ["--device", A, "--device", dead];
    let msg = "open failed: ENODEV: mock:/s/davinci7.sock: no such socket";
    for (a, on_stdout) in [
        (&["info"][..], "| 7      | Unreachable"),
        (
            &["info", "-t", "device-share"],
            "Status                         : Unreachable",
        ),
        (
            &["info", "-t", "usage"],
            "Device 7 (mock:/s/davinci7.sock): unreachable",
        ),
        (
            &["set", "-t", "device-share", "-i", "all", "-d", "1"],
            "Status                         : Fail",
        ),
    ] {
        let (code, out, err) = smi(&w, &args(&pair, a));
        assert_eq!(code, exit::PARTIAL, "{a:?}: {out}{err}");
        assert!(out.contains(on_stdout), "{a:?}: {out}");
        assert!(!out.contains(msg), "{a:?}: error on stdout: {out}");
        assert_eq!(err, format!("davinci-smi: device 7: {msg}\n"), "{a:?}");
    }
    // A failure of the whole command too.
    let (code, out, err) = smi(&w, &["info"]);
    assert_eq!((code, out.as_str()), (exit::NOT_FOUND, ""));
    assert!(
        err.starts_with("davinci-smi: no davinci devices found"),
        "{err}"
    );
}

#[test]
fn loop_repeats_count_times_sleeping_between_rounds() {
    let w = two();
    let mut slept = Vec::new();
    let (code, out, err) = smi_sleeping(
        &w,
        &args(&BOTH, &["--loop", "2.5", "--count", "3", "list", "--json"]),
        &mut |d| slept.push(d),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(slept, vec![std::time::Duration::from_millis(2500); 2]);
    // One document per line.
    let docs: Vec<serde_json::Value> = out.lines().map(doc).collect();
    assert_eq!(docs.len(), 3, "{out}");
    assert!(docs.iter().all(|d| d["command"] == "list"));
    // After the subcommand too; CSV has one header; text rounds start with a timestamp.
    let mut n = 0;
    let (_, out, _) = smi_sleeping(
        &w,
        &args(
            &BOTH,
            &[
                "info", "--loop", "1", "--count", "2", "--query", "index", "--format", "csv",
            ],
        ),
        &mut |_| n += 1,
    );
    assert_eq!((out.as_str(), n), ("index\n0\n1\n0\n1\n", 1));
    let (_, out, _) = smi_sleeping(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "-t",
                "device-share",
                "-i",
                "0",
                "--loop",
                "1",
                "--count",
                "2",
            ],
        ),
        &mut |_| {},
    );
    assert_eq!(out.matches("Device-share Status").count(), 2, "{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.len() == 24 && l.ends_with('Z'))
            .count(),
        2,
        "{out}"
    );
}

#[test]
fn each_round_asks_the_devices_again_and_the_last_round_sets_the_status() {
    let dev = fake(0, vec![], false, true);
    let state = dev.state.clone();
    let w = world(vec![(A, dev)]);
    let mut round = 0;
    let (code, out, err) = smi_sleeping(
        &w,
        &[
            "--device",
            A,
            "info",
            "--loop",
            "1",
            "--count",
            "3",
            "--query",
            "clients,health",
            "--format",
            "csv,noheader",
        ],
        &mut |_| {
            round += 1;
            let mut s = state.borrow_mut();
            if round == 1 {
                s.clients.push(usage_of(5, "", 0));
            } else {
                s.down = true;
            }
        },
    );
    assert_eq!(out, "0, ok\n1, ok\n[N/A], unreachable\n");
    assert_eq!(code, exit::NOT_FOUND);
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Stdout that refuses every write (the reader went away).
struct Closed;

impl Write for Closed {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::BrokenPipe.into())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn an_endless_loop_stops_when_nobody_reads() {
    let w = two();
    let argv: Vec<String> = ["davinci-smi", "--device", A, "--loop", "1", "list"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut sleeps = 0;
    let code = run_with(
        &argv,
        &w.disc,
        &w.opener,
        &mut Closed,
        &mut Vec::new(),
        &mut |_| {
            sleeps += 1;
            assert!(sleeps < 3, "still looping with stdout closed");
        },
    );
    assert_eq!((code, sleeps), (exit::OTHER, 0));
}

#[test]
fn a_tenants_control_characters_are_escaped_in_tables_and_csv() {
    let mut u = usage_of(100, "ctr\x1b[2J", 4 << 20);
    u.comm = ClientUsage::comm_field("evil\x1b[2J\nrow");
    let w = world(vec![(A, fake(0, vec![u], false, true))]);
    for a in [
        &["--device", A, "info", "-t", "usage"][..],
        &[
            "--device",
            A,
            "info",
            "-t",
            "usage",
            "--query",
            "pid,process_name,container_id",
            "--format=csv",
        ][..],
    ] {
        let (code, out, err) = smi(&w, a);
        assert_eq!(code, 0, "{a:?}: {out}{err}");
        assert!(
            !out.contains('\x1b'),
            "{a:?}: a raw ESC reached the terminal: {out:?}"
        );
        assert!(out.contains("evil\\u{1b}[2J\\nrow"), "{a:?}: {out}");
        assert!(out.contains("ctr\\u{1b}[2J"), "{a:?}: {out}");
    }
}

#[test]
fn bidi_controls_and_names_that_are_not_utf8_are_escaped_in_tables_csv_and_json() {
    // U+202E would show `evil<RLO>gpj.exe` as `evilexe.jpg`; a comm that is not UTF-8 was
    // shown as an empty name. Every output shows both as escapes.
    let mut rlo = usage_of(100, "c\u{2066}tr", 4 << 20);
    rlo.comm = ClientUsage::comm_field("evil\u{202e}gpj.exe");
    let mut raw = usage_of(101, "", 1 << 20);
    raw.comm = [0u8; 16];
    raw.comm[..6].copy_from_slice(b"\xffroot\xfe");
    let w = world(vec![(A, fake(0, vec![rlo, raw], false, true))]);
    let usage = ["--device", A, "info", "-t", "usage"];
    let csv = [
        &usage[..],
        &["--query", "pid,process_name,container_id", "--format=csv"],
    ]
    .concat();
    let json = [&usage[..], &["--json"]].concat();
    for a in [&usage[..], &csv, &json] {
        let (code, out, err) = smi(&w, a);
        assert_eq!(code, 0, "{a:?}: {out}{err}");
        for c in ['\u{202e}', '\u{2066}', '\u{fffd}'] {
            assert!(!out.contains(c), "{a:?}: {c:?} reached the output: {out}");
        }
        // In JSON a backslash is itself escaped.
        let (rlo, raw, ctr) = if a == json.as_slice() {
            (r"evil\\u{202e}gpj.exe", r"\\xffroot\\xfe", r"c\\u{2066}tr")
        } else {
            (r"evil\u{202e}gpj.exe", r"\xffroot\xfe", r"c\u{2066}tr")
        };
        assert!(out.contains(rlo), "{a:?}: {out}");
        assert!(out.contains(ctr), "{a:?}: {out}");
        assert!(out.contains(raw), "{a:?}: {out}");
    }
    let d = doc(&smi(&w, &json).1);
    let clients = &d["devices"][0]["clients"];
    assert_eq!(clients[0]["process_name"], r"evil\u{202e}gpj.exe");
    assert_eq!(clients[0]["container_id"], r"c\u{2066}tr");
    assert_eq!(clients[1]["process_name"], r"\xffroot\xfe");
}
